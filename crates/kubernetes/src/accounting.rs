//! Accounting of existing worker pods per shape, from the pod phase and the startd ad the
//! pod's worker advertises, as the NRP provisioner counts them (`count_states`): waiting,
//! unmatched (running, startd not claimed), claimed, failed, unknown. pilotd adds what the
//! provisioner could not see: a Job whose pod is not (or no longer) listed still stands for
//! its pod, and a pod or Job Pending longer than `pending_after` is stuck (deleted, and a
//! failure for the back-off), so no shape gets new pods every cycle while its pods never run.

use super::shape::ShapeKey;
use crate::ads::StartdAd;
use crate::observed::{JobEnd, WorkerJob, WorkerPod};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// What one pod counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PodState {
    /// Pending, or running before its startd advertised, or in an odd phase for a while.
    Waiting,
    /// Running with a startd that is not claimed.
    Unmatched,
    Claimed,
    /// Failed after its containers started (the worker itself failed).
    Failed,
    /// Failed without containers, or in an odd phase for longer than `unknown_after`.
    Unknown,
    /// Pending (or its Job without a pod) for longer than `pending_after`: its Job is deleted
    /// and it counts as failed.
    Stuck,
    /// Finished normally; not counted, but the back-off looks at it.
    Succeeded,
    /// Being deleted; not counted.
    Terminating,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Accounting {
    pub waiting: u64,
    pub unmatched: u64,
    pub claimed: u64,
    /// Failed and stuck pods.
    pub failed: u64,
    pub unknown: u64,
}

impl Accounting {
    pub(crate) fn add(&mut self, state: PodState) {
        match state {
            PodState::Waiting => self.waiting += 1,
            PodState::Unmatched => self.unmatched += 1,
            PodState::Claimed => self.claimed += 1,
            PodState::Failed | PodState::Stuck => self.failed += 1,
            PodState::Unknown => self.unknown += 1,
            PodState::Succeeded | PodState::Terminating => {}
        }
    }

    /// Pods that can still take a job: waiting + unmatched.
    pub(crate) fn unclaimed(&self) -> u64 {
        self.waiting + self.unmatched
    }

    /// Pods alive for the submit cap: waiting + unmatched + claimed (failed and unknown are
    /// not, as in the provisioner).
    pub(crate) fn live(&self) -> u64 {
        self.unclaimed() + self.claimed
    }
}

/// One pod (or a Job standing for its missing pod) as the decision sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodObservation {
    pub name: String,
    /// The Job it belongs to (what a stuck pod's deletion deletes).
    pub job: Option<String>,
    pub key: ShapeKey,
    pub state: PodState,
}

/// How long a pod may stay in a state before it counts as something worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ages {
    /// A pod in an odd phase counts as waiting this long after its start, then as unknown.
    pub unknown_after: Duration,
    /// A Pending pod (or a Job without a pod) is stuck this long after its creation.
    pub pending_after: Duration,
}

fn older_than(since: Option<DateTime<Utc>>, now: DateTime<Utc>, limit: Duration) -> bool {
    let limit = chrono::Duration::from_std(limit).unwrap_or(chrono::Duration::MAX);
    since.is_some_and(|t| now.signed_duration_since(t) >= limit)
}

/// Classifies one pod given its startd ad (if its worker advertised one).
pub(crate) fn classify(
    pod: &WorkerPod,
    startd: Option<&StartdAd>,
    now: DateTime<Utc>,
    ages: &Ages,
) -> PodState {
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Terminating;
    }
    let status = &pod.status;
    match status.phase.as_deref() {
        Some("Running") => match startd {
            None => PodState::Waiting,
            Some(ad) if ad.state.as_deref() == Some("Claimed") => PodState::Claimed,
            Some(_) => PodState::Unmatched,
        },
        Some("Pending") => {
            if older_than(pod.metadata.creation_timestamp, now, ages.pending_after) {
                PodState::Stuck
            } else {
                PodState::Waiting
            }
        }
        Some("Succeeded") => PodState::Succeeded,
        Some("Failed") => {
            if status
                .container_statuses
                .as_ref()
                .is_some_and(|c| !c.is_empty())
            {
                PodState::Failed
            } else {
                PodState::Unknown
            }
        }
        _ => {
            let since = status.start_time.or(pod.metadata.creation_timestamp);
            if older_than(since, now, ages.unknown_after) {
                PodState::Unknown
            } else {
                PodState::Waiting
            }
        }
    }
}

/// A Job none of whose pods is listed: it stands for its pod (the Job controller has not made
/// it yet, a quota refuses it, or it is gone), so its shape is not given another pod for it.
pub(crate) fn classify_podless_job(job: &WorkerJob, now: DateTime<Utc>, ages: &Ages) -> PodState {
    if job.metadata.deletion_timestamp.is_some() {
        return PodState::Terminating;
    }
    match job.finished() {
        Some((JobEnd::Complete, _)) => PodState::Succeeded,
        Some((JobEnd::Failed, _)) => PodState::Failed,
        None if older_than(job.metadata.creation_timestamp, now, ages.pending_after) => {
            PodState::Stuck
        }
        None => PodState::Waiting,
    }
}

/// Classifies every pod, and every Job none of whose pods is listed; startd ads are paired
/// by `K8SPodName`. A claimed ad wins, otherwise the last one does, as in the provisioner. The
/// NRP worker advertises one static slot, so it has one ad; a worker with a partitionable slot
/// has the pslot's ad, always `Unclaimed`, next to its claimed dynamic slots, and the
/// provisioner's "last wins" then counted a busy pod as idle or a claimed one by chance (seen
/// with real condor in tests/it/condor_pool).
pub(crate) fn observe_pods(
    pods: &[WorkerPod],
    jobs: &[WorkerJob],
    startds: &[StartdAd],
    now: DateTime<Utc>,
    ages: &Ages,
) -> Vec<PodObservation> {
    let mut by_pod: HashMap<&str, &StartdAd> = HashMap::with_capacity(startds.len());
    for ad in startds {
        if let Some(p) = ad.k8s_pod_name.as_deref() {
            let claimed = |a: &StartdAd| a.state.as_deref() == Some("Claimed");
            match by_pod.get(p) {
                Some(seen) if claimed(seen) && !claimed(ad) => {}
                _ => {
                    by_pod.insert(p, ad);
                }
            }
        }
    }
    let mut with_pods: HashSet<&str> = HashSet::with_capacity(pods.len());
    let mut out: Vec<PodObservation> = pods
        .iter()
        .map(|pod| {
            let name = &pod.metadata.name;
            let job = pod.job_name();
            if let Some(j) = job {
                with_pods.insert(j);
            }
            PodObservation {
                key: ShapeKey::from_meta(&pod.metadata),
                name: name.clone(),
                job: job.map(str::to_string),
                state: classify(pod, by_pod.get(name.as_str()).copied(), now, ages),
            }
        })
        .collect();
    for job in jobs {
        let name = &job.metadata.name;
        if with_pods.contains(name.as_str()) {
            continue;
        }
        out.push(PodObservation {
            key: ShapeKey::from_meta(&job.metadata),
            name: name.clone(),
            job: Some(name.clone()),
            state: classify_podless_job(job, now, ages),
        });
    }
    out
}

/// Totals per shape.
pub(crate) fn account(observations: &[PodObservation]) -> BTreeMap<ShapeKey, Accounting> {
    let mut out: BTreeMap<ShapeKey, Accounting> = BTreeMap::new();
    for o in observations {
        out.entry(o.key.clone()).or_default().add(o.state);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{ContainerSeen, Meta, PodStatusSeen};

    fn now() -> DateTime<Utc> {
        "2026-12-01T21:30:00Z".parse().unwrap()
    }

    fn ago(s: i64) -> DateTime<Utc> {
        now() - chrono::Duration::seconds(s)
    }

    fn pod(phase: Option<&str>, containers: bool, started_s_ago: Option<i64>) -> WorkerPod {
        WorkerPod {
            metadata: Meta {
                name: "w1".into(),
                creation_timestamp: Some(ago(started_s_ago.unwrap_or(0))),
                ..Meta::default()
            },
            status: PodStatusSeen {
                phase: phase.map(str::to_string),
                container_statuses: containers.then(|| vec![ContainerSeen::default()]),
                start_time: started_s_ago.map(ago),
            },
            ..WorkerPod::default()
        }
    }

    fn ad(state: &str) -> StartdAd {
        StartdAd {
            name: "slot1@w1".into(),
            state: Some(state.into()),
            activity: Some("Idle".into()),
            k8s_pod_name: Some("w1".into()),
        }
    }

    const WAIT: Ages = Ages {
        unknown_after: Duration::from_secs(1000),
        pending_after: Duration::from_secs(3600),
    };

    #[test]
    fn every_phase_is_counted_as_the_provisioner_counts_it() {
        let c = |p: &WorkerPod, a: Option<&StartdAd>| classify(p, a, now(), &WAIT);
        let running = pod(Some("Running"), true, Some(10));
        assert_eq!(c(&running, None), PodState::Waiting);
        assert_eq!(c(&running, Some(&ad("Claimed"))), PodState::Claimed);
        assert_eq!(c(&running, Some(&ad("Unclaimed"))), PodState::Unmatched);
        assert_eq!(c(&running, Some(&ad("Matched"))), PodState::Unmatched);
        assert_eq!(
            c(&pod(Some("Pending"), false, None), None),
            PodState::Waiting
        );
        assert_eq!(
            c(&pod(Some("Succeeded"), true, Some(5)), None),
            PodState::Succeeded
        );
        assert_eq!(
            c(&pod(Some("Failed"), true, Some(5)), None),
            PodState::Failed
        );
        assert_eq!(
            c(&pod(Some("Failed"), false, None), None),
            PodState::Unknown
        );
        assert_eq!(
            c(&pod(Some("Unknown"), false, None), None),
            PodState::Waiting
        );
        assert_eq!(
            c(&pod(Some("Unknown"), false, Some(999)), None),
            PodState::Waiting
        );
        assert_eq!(
            c(&pod(Some("Unknown"), false, Some(1000)), None),
            PodState::Unknown
        );
        assert_eq!(c(&pod(None, false, Some(5000)), None), PodState::Unknown);
        // No start time: the pod's age is its creation's.
        let mut unstarted = pod(Some("Unknown"), false, Some(5000));
        unstarted.status.start_time = None;
        assert_eq!(c(&unstarted, None), PodState::Unknown);
        assert_eq!(
            c(&pod(Some("Pending"), false, Some(3599)), None),
            PodState::Waiting
        );
        assert_eq!(
            c(&pod(Some("Pending"), false, Some(3600)), None),
            PodState::Stuck
        );
        let mut deleting = running.clone();
        deleting.metadata.deletion_timestamp = Some(now());
        assert_eq!(c(&deleting, Some(&ad("Claimed"))), PodState::Terminating);
    }

    #[test]
    fn totals_per_key_and_startds_paired_by_pod_name() {
        let mut a = pod(Some("Running"), true, Some(1));
        a.metadata.name = "a".into();
        let mut b = pod(Some("Running"), true, Some(1));
        b.metadata.name = "b".into();
        let c = pod(Some("Failed"), true, Some(1));
        let mut claimed = ad("Claimed");
        claimed.k8s_pod_name = Some("a".into());
        let obs = observe_pods(&[a, b, c], &[], &[claimed], now(), &WAIT);
        let acc = account(&obs);
        assert_eq!(acc.len(), 1);
        let t = acc.values().next().unwrap();
        assert_eq!((t.claimed, t.waiting, t.failed), (1, 1, 1));
        assert_eq!((t.unclaimed(), t.live()), (1, 2));
    }

    #[test]
    fn a_claimed_dynamic_slot_beats_its_partitionable_slot_in_any_order() {
        let mut a = pod(Some("Running"), true, Some(1));
        a.metadata.name = "a".into();
        let mut pslot = ad("Unclaimed");
        pslot.k8s_pod_name = Some("a".into());
        let mut dslot = ad("Claimed");
        dslot.k8s_pod_name = Some("a".into());
        for ads in [[pslot.clone(), dslot.clone()], [dslot, pslot]] {
            let obs = observe_pods(std::slice::from_ref(&a), &[], &ads, now(), &WAIT);
            assert_eq!(obs[0].state, PodState::Claimed, "{ads:?}");
        }
        // Two unclaimed ads: the last one, as before.
        let mut idle = ad("Unclaimed");
        idle.k8s_pod_name = Some("a".into());
        let mut owner = ad("Owner");
        owner.k8s_pod_name = Some("a".into());
        let obs = observe_pods(&[a], &[], &[idle, owner], now(), &WAIT);
        assert_eq!(obs[0].state, PodState::Unmatched);
    }

    #[test]
    fn a_job_without_a_listed_pod_stands_for_it() {
        let job = |name: &str, created_s_ago: i64, cond: Option<&str>| WorkerJob {
            metadata: Meta {
                name: name.into(),
                creation_timestamp: Some(ago(created_s_ago)),
                ..Meta::default()
            },
            status: crate::observed::JobStatusSeen {
                conditions: cond
                    .map(|c| {
                        vec![crate::observed::JobConditionSeen {
                            type_: c.into(),
                            status: "True".into(),
                            last_transition_time: Some(now()),
                        }]
                    })
                    .unwrap_or_default(),
                completion_time: None,
            },
            ..WorkerJob::default()
        };
        let mut with_pod = pod(Some("Running"), true, Some(1));
        with_pod
            .metadata
            .labels
            .insert("batch.kubernetes.io/job-name".into(), "j0".into());
        let jobs = [
            job("j0", 10, None),
            job("j1", 10, None),
            job("j2", 4000, None),
            job("j3", 10, Some("Failed")),
            job("j4", 10, Some("Complete")),
        ];
        let obs = observe_pods(&[with_pod], &jobs, &[], now(), &WAIT);
        let states: Vec<(&str, PodState)> =
            obs.iter().map(|o| (o.name.as_str(), o.state)).collect();
        assert_eq!(
            states,
            vec![
                ("w1", PodState::Waiting),
                ("j1", PodState::Waiting),
                ("j2", PodState::Stuck),
                ("j3", PodState::Failed),
                ("j4", PodState::Succeeded),
            ],
            "j0 is its listed pod"
        );
        assert_eq!(obs[2].job.as_deref(), Some("j2"));
    }
}
