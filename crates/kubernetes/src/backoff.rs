//! Per-shape back-off. A shape whose worker pods keep failing (phase Failed with or without
//! containers, an odd phase past `unknown_after`, stuck Pending, deleted unseen) or exiting
//! without ever being claimed would otherwise get a fresh batch every cycle (the provisioner
//! counts failed pods nowhere). After `after` such outcomes in a row the shape is
//! on trial: one pod at a time, each trial no sooner than a delay that doubles per further
//! failure up to `max`; one pod reaching Claimed (or Succeeded after having been claimed)
//! resets it. The book is plain data, carried between cycles and in snapshots.

use super::accounting::{PodObservation, PodState};
use super::shape::ShapeKey;
use chrono::{DateTime, Utc};
use pilotd_core::backoff::Backoff;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// When a shape goes on trial, and how long it waits between trial pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialPolicy {
    /// Consecutive bad outcomes before the shape goes on trial.
    pub after: u32,
    /// The wait before the next trial pod, by strikes.
    pub delay: Backoff,
}

/// One shape's history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyBackoff {
    /// Failed or unclaimed exits since the last success.
    pub failures: u32,
    pub last_failure: Option<DateTime<Utc>>,
    /// Cycles with new bad outcomes since the shape went on trial (a batch failing together
    /// is one strike): the delay doubles per strike.
    #[serde(default)]
    pub strikes: u32,
    /// Outcomes already counted, by Job (one Job, one pod), so a failed pod seen in many
    /// cycles, and its Job seen after the pod is gone, count once.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub counted: BTreeSet<String>,
    /// Pods seen claimed: their normal exit later is a success, not an unclaimed exit.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub claimed: BTreeSet<String>,
}

/// Back-off of every shape that has history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BackoffBook {
    pub keys: BTreeMap<ShapeKey, KeyBackoff>,
}

/// What the back-off allows a shape this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// No restriction.
    Open,
    /// On trial and a trial pod may start now (at most one).
    Trial,
    /// On trial; a trial pod is still out (waiting or unmatched) or the delay has not passed.
    Closed { until: Option<DateTime<Utc>> },
}

impl Gate {
    /// Caps a number of new pods.
    pub(crate) fn cap(self, n: u64) -> u64 {
        match self {
            Gate::Open => n,
            Gate::Trial => n.min(1),
            Gate::Closed { .. } => 0,
        }
    }
}

impl KeyBackoff {
    pub(crate) fn on_trial(&self, p: &TrialPolicy) -> bool {
        self.failures >= p.after
    }

    /// When the next trial pod may start: the last failure plus the policy's delay for the
    /// shape's strikes.
    pub(crate) fn next_trial_at(&self, p: &TrialPolicy) -> Option<DateTime<Utc>> {
        if !self.on_trial(p) {
            return None;
        }
        self.last_failure.map(|t| p.delay.retry_at(t, self.strikes))
    }
}

impl BackoffBook {
    /// Folds one cycle's pod observations into the book. Pods no longer listed are forgotten
    /// (their outcome was counted while they were visible).
    pub(crate) fn observe(&mut self, pods: &[PodObservation], now: DateTime<Utc>, p: &TrialPolicy) {
        let mut by_key: BTreeMap<&ShapeKey, Vec<&PodObservation>> = BTreeMap::new();
        for p in pods {
            by_key.entry(&p.key).or_default().push(p);
        }
        for (key, pods) in &by_key {
            let entry = self.keys.entry((*key).clone()).or_default();
            let mut success = false;
            let before = entry.failures;
            for pod in pods {
                match pod.state {
                    PodState::Claimed => {
                        entry.claimed.insert(pod.name.clone());
                        entry.claimed.extend(pod.job.clone());
                        success = true;
                    }
                    // Every way a pod can end without having run a job is a bad outcome:
                    // failed with or without containers, an odd phase for too long, stuck
                    // Pending, or deleted (not by pilotd's cleanup, which deletes only what
                    // was already judged) before anyone saw it end.
                    PodState::Failed
                    | PodState::Unknown
                    | PodState::Stuck
                    | PodState::Succeeded
                    | PodState::Terminating => {
                        // Each outcome is judged once, however many cycles it stays listed:
                        // by the pod's name and by its Job's, so the Job seen after its pod is
                        // gone is not judged again.
                        let first_time = entry.counted.insert(pod.name.clone());
                        entry.counted.extend(pod.job.clone());
                        if !first_time {
                            continue;
                        }
                        let ran_a_job =
                            matches!(pod.state, PodState::Succeeded | PodState::Terminating)
                                && entry.claimed.contains(&pod.name);
                        if ran_a_job {
                            success = true;
                        } else {
                            entry.failures += 1;
                            entry.last_failure = Some(now);
                        }
                    }
                    _ => {}
                }
            }
            if success {
                entry.failures = 0;
                entry.strikes = 0;
                entry.last_failure = None;
            } else if entry.failures > before && entry.on_trial(p) {
                entry.strikes += 1;
            }
            let present: BTreeSet<&str> = pods
                .iter()
                .flat_map(|o| [Some(o.name.as_str()), o.job.as_deref()])
                .flatten()
                .collect();
            entry.counted.retain(|n| present.contains(n.as_str()));
            entry.claimed.retain(|n| present.contains(n.as_str()));
        }
        // Keys without pods keep their failure count (a shape on trial whose pods are all
        // gone must stay on trial) but drop their per-pod memory.
        for (key, entry) in self.keys.iter_mut() {
            if !by_key.contains_key(key) {
                entry.counted.clear();
                entry.claimed.clear();
            }
        }
        self.keys
            .retain(|_, e| e.failures > 0 || !e.counted.is_empty() || !e.claimed.is_empty());
    }

    /// The gate for one shape; `outstanding` = its waiting + unmatched pods.
    pub(crate) fn gate(
        &self,
        key: &ShapeKey,
        outstanding: u64,
        now: DateTime<Utc>,
        p: &TrialPolicy,
    ) -> Gate {
        let Some(entry) = self.keys.get(key) else {
            return Gate::Open;
        };
        if !entry.on_trial(p) {
            return Gate::Open;
        }
        let until = entry.next_trial_at(p);
        if outstanding > 0 {
            return Gate::Closed { until: None };
        }
        match until {
            Some(t) if now < t => Gate::Closed { until: Some(t) },
            _ => Gate::Trial,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const P: TrialPolicy = TrialPolicy {
        after: 2,
        delay: Backoff::new(Duration::from_secs(300), Duration::from_secs(3600)),
    };

    fn t(min: i64) -> DateTime<Utc> {
        "2026-12-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap() + chrono::Duration::minutes(min)
    }

    fn key() -> ShapeKey {
        "1;4096;8000000;;0;;".parse().unwrap()
    }

    fn obs(name: &str, state: PodState) -> PodObservation {
        PodObservation {
            name: name.into(),
            job: None,
            key: key(),
            state,
        }
    }

    #[test]
    fn failures_put_the_shape_on_trial_with_a_growing_delay_and_success_resets() {
        let mut b = BackoffBook::default();
        assert_eq!(b.gate(&key(), 0, t(0), &P), Gate::Open);
        b.observe(&[obs("a", PodState::Failed)], t(0), &P);
        assert_eq!(
            b.gate(&key(), 0, t(0), &P),
            Gate::Open,
            "one failure is not a pattern"
        );
        // The same failed pod seen again is not a new failure.
        b.observe(&[obs("a", PodState::Failed)], t(2), &P);
        assert_eq!(b.keys[&key()].failures, 1);
        b.observe(
            &[obs("a", PodState::Failed), obs("b", PodState::Failed)],
            t(4),
            &P,
        );
        assert_eq!(b.keys[&key()].failures, 2);
        assert_eq!(
            b.gate(&key(), 0, t(5), &P),
            Gate::Closed { until: Some(t(9)) }
        );
        assert_eq!(b.gate(&key(), 0, t(9), &P), Gate::Trial);
        assert_eq!(
            b.gate(&key(), 1, t(9), &P),
            Gate::Closed { until: None },
            "trial pod out"
        );
        assert_eq!(Gate::Trial.cap(7), 1);
        // The trial pod fails too: the delay doubles.
        b.observe(&[obs("c", PodState::Failed)], t(10), &P);
        assert_eq!(b.keys[&key()].next_trial_at(&P), Some(t(20)));
        for (i, m) in (11..20).enumerate() {
            b.observe(&[obs(&format!("x{i}"), PodState::Failed)], t(m), &P);
        }
        assert_eq!(
            b.keys[&key()].next_trial_at(&P),
            Some(t(19 + 60)),
            "capped at max"
        );
        // One claimed pod resets the shape.
        b.observe(&[obs("d", PodState::Claimed)], t(30), &P);
        assert_eq!(b.gate(&key(), 0, t(30), &P), Gate::Open);
    }

    #[test]
    fn unclaimed_exit_counts_and_claimed_exit_is_success() {
        let mut b = BackoffBook::default();
        b.observe(
            &[obs("a", PodState::Succeeded), obs("b", PodState::Succeeded)],
            t(0),
            &P,
        );
        assert_eq!(b.keys[&key()].failures, 2);
        b.observe(&[obs("c", PodState::Claimed)], t(1), &P);
        assert!(!b.keys.contains_key(&key()) || b.keys[&key()].failures == 0);
        b.observe(&[obs("c", PodState::Succeeded)], t(2), &P);
        assert!(b.keys.get(&key()).is_none_or(|e| e.failures == 0));
    }

    #[test]
    fn a_job_seen_after_its_pod_is_gone_is_the_same_outcome() {
        let mut b = BackoffBook::default();
        let pod = PodObservation {
            job: Some("j".into()),
            ..obs("j-x1", PodState::Failed)
        };
        b.observe(&[pod], t(0), &P);
        assert_eq!(b.keys[&key()].failures, 1);
        let podless = PodObservation {
            job: Some("j".into()),
            ..obs("j", PodState::Failed)
        };
        b.observe(std::slice::from_ref(&podless), t(2), &P);
        b.observe(&[podless], t(4), &P);
        assert_eq!(b.keys[&key()].failures, 1, "counted once, as its pod");
        // A Job that ran a job: its pod was claimed, its Job completes after the pod went.
        let claimed = PodObservation {
            job: Some("k".into()),
            ..obs("k-x1", PodState::Claimed)
        };
        b.observe(&[claimed], t(6), &P);
        let done = PodObservation {
            job: Some("k".into()),
            ..obs("k", PodState::Succeeded)
        };
        b.observe(&[done], t(8), &P);
        assert!(b.keys.get(&key()).is_none_or(|e| e.failures == 0));
    }

    #[test]
    fn trial_survives_pods_disappearing_and_the_book_round_trips() {
        let mut b = BackoffBook::default();
        b.observe(
            &[obs("a", PodState::Failed), obs("b", PodState::Failed)],
            t(0),
            &P,
        );
        b.observe(&[], t(1), &P);
        assert_eq!(b.keys[&key()].failures, 2);
        assert!(b.keys[&key()].counted.is_empty());
        let json = serde_json::to_string(&b).unwrap();
        assert!(json.contains("1;4096;8000000;;0;;"), "{json}");
        let back: BackoffBook = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b);
    }
}
