//! Accounting of existing worker pods per shape, from the pod phase and the startd ad the
//! pod's worker advertises, as the NRP provisioner counts them (`count_states`): waiting,
//! unmatched (running, startd not claimed), claimed, failed, unknown.

use super::shape::ShapeKey;
use crate::kubernetes::ads::StartdAd;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What one pod counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PodState {
    /// Pending, or running before its startd advertised, or in an odd phase for a while.
    Waiting,
    /// Running with a startd that is not claimed.
    Unmatched,
    Claimed,
    /// Failed after its containers started (the worker itself failed).
    Failed,
    /// Failed without containers, or in an odd phase for longer than `unknown_after`.
    Unknown,
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
    pub failed: u64,
    pub unknown: u64,
}

impl Accounting {
    pub fn add(&mut self, state: PodState) {
        match state {
            PodState::Waiting => self.waiting += 1,
            PodState::Unmatched => self.unmatched += 1,
            PodState::Claimed => self.claimed += 1,
            PodState::Failed => self.failed += 1,
            PodState::Unknown => self.unknown += 1,
            PodState::Succeeded | PodState::Terminating => {}
        }
    }

    /// Pods that can still take a job: waiting + unmatched.
    pub fn unclaimed(&self) -> u64 {
        self.waiting + self.unmatched
    }

    /// Pods alive for the submit cap: waiting + unmatched + claimed (failed and unknown are
    /// not, as in the provisioner).
    pub fn live(&self) -> u64 {
        self.unclaimed() + self.claimed
    }

    pub fn is_zero(&self) -> bool {
        *self == Accounting::default()
    }
}

/// One pod as the decision sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodObservation {
    pub name: String,
    pub key: ShapeKey,
    pub state: PodState,
}

fn to_chrono(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

/// Classifies one pod given its startd ad (if its worker advertised one).
pub fn classify(
    pod: &Pod,
    startd: Option<&StartdAd>,
    now: DateTime<Utc>,
    unknown_after: Duration,
) -> PodState {
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Terminating;
    }
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => match startd {
            None => PodState::Waiting,
            Some(ad) if ad.state.as_deref() == Some("Claimed") => PodState::Claimed,
            Some(_) => PodState::Unmatched,
        },
        Some("Pending") => PodState::Waiting,
        Some("Succeeded") => PodState::Succeeded,
        Some("Failed") => {
            if status.and_then(|s| s.container_statuses.as_ref()).is_some() {
                PodState::Failed
            } else {
                PodState::Unknown
            }
        }
        _ => {
            let started = status
                .and_then(|s| s.start_time.as_ref())
                .and_then(to_chrono);
            let limit = chrono::Duration::from_std(unknown_after).unwrap_or(chrono::Duration::MAX);
            match started {
                Some(t) if now.signed_duration_since(t) >= limit => PodState::Unknown,
                _ => PodState::Waiting,
            }
        }
    }
}

/// Classifies every pod; startd ads are paired by `K8SPodName`. A claimed ad wins, otherwise
/// the last one does, as in the provisioner. The NRP worker advertises one static slot, so it
/// has one ad; a worker with a partitionable slot has the pslot's ad, always `Unclaimed`, next
/// to its claimed dynamic slots, and the provisioner's "last wins" then counted a busy pod as
/// idle or a claimed one by chance (seen with real condor in tests/it/condor_pool).
pub fn observe_pods(
    pods: &[Pod],
    startds: &[StartdAd],
    now: DateTime<Utc>,
    unknown_after: Duration,
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
    pods.iter()
        .map(|pod| {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let state = classify(pod, by_pod.get(name.as_str()).copied(), now, unknown_after);
            PodObservation {
                key: ShapeKey::from_pod(pod),
                name,
                state,
            }
        })
        .collect()
}

/// Totals per shape.
pub fn account(observations: &[PodObservation]) -> BTreeMap<ShapeKey, Accounting> {
    let mut out: BTreeMap<ShapeKey, Accounting> = BTreeMap::new();
    for o in observations {
        out.entry(o.key.clone()).or_default().add(o.state);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    fn now() -> DateTime<Utc> {
        "2026-12-01T21:30:00Z".parse().unwrap()
    }

    fn pod(phase: Option<&str>, containers: bool, started_s_ago: Option<i64>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("w1".into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: phase.map(str::to_string),
                container_statuses: containers.then(|| vec![ContainerStatus::default()]),
                start_time: started_s_ago
                    .map(|s| Time(Timestamp::from_second(now().timestamp() - s).unwrap())),
                ..PodStatus::default()
            }),
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

    const WAIT: Duration = Duration::from_secs(1000);

    #[test]
    fn every_phase_is_counted_as_the_provisioner_counts_it() {
        let c = |p: &Pod, a: Option<&StartdAd>| classify(p, a, now(), WAIT);
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
        let mut deleting = running.clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(c(&deleting, Some(&ad("Claimed"))), PodState::Terminating);
    }

    #[test]
    fn totals_per_key_and_startds_paired_by_pod_name() {
        let mut a = pod(Some("Running"), true, Some(1));
        a.metadata.name = Some("a".into());
        let mut b = pod(Some("Running"), true, Some(1));
        b.metadata.name = Some("b".into());
        let c = pod(Some("Failed"), true, Some(1));
        let mut claimed = ad("Claimed");
        claimed.k8s_pod_name = Some("a".into());
        let obs = observe_pods(&[a, b, c], &[claimed], now(), WAIT);
        let acc = account(&obs);
        assert_eq!(acc.len(), 1);
        let t = acc.values().next().unwrap();
        assert_eq!((t.claimed, t.waiting, t.failed), (1, 1, 1));
        assert_eq!((t.unclaimed(), t.live()), (1, 2));
    }

    #[test]
    fn a_claimed_dynamic_slot_beats_its_partitionable_slot_in_any_order() {
        let mut a = pod(Some("Running"), true, Some(1));
        a.metadata.name = Some("a".into());
        let mut pslot = ad("Unclaimed");
        pslot.k8s_pod_name = Some("a".into());
        let mut dslot = ad("Claimed");
        dslot.k8s_pod_name = Some("a".into());
        for ads in [[pslot.clone(), dslot.clone()], [dslot, pslot]] {
            let obs = observe_pods(std::slice::from_ref(&a), &ads, now(), WAIT);
            assert_eq!(obs[0].state, PodState::Claimed, "{ads:?}");
        }
        // Two unclaimed ads: the last one, as before.
        let mut idle = ad("Unclaimed");
        idle.k8s_pod_name = Some("a".into());
        let mut owner = ad("Owner");
        owner.k8s_pod_name = Some("a".into());
        let obs = observe_pods(&[a], &[idle, owner], now(), WAIT);
        assert_eq!(obs[0].state, PodState::Unmatched);
    }
}
