//! Pure planning for kubernetes mode: (ClusterSnapshot with its back-off book, config, now)
//! → per-shape decisions, the worker Jobs to create (bodies from `jobs`) and the finished Jobs
//! to delete. No I/O, no clock.

use crate::accounting::{Accounting, Ages, PodState, account, observe_pods};
use crate::backoff::{BackoffBook, Gate, TrialPolicy};
use crate::demand::{Demand, GPU_CONSTRAINED_REASON, min_pods, pods_to_submit};
use crate::jobs::{PodTemplate, job_body, job_name};
use crate::observed::WorkerJob;
use crate::shape::ShapeKey;
use crate::snapshot::ClusterSnapshot;
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use serde::Serialize;
use std::time::Duration;

/// What the back-off says about one shape, for `plan` and `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackoffView {
    pub failures: u32,
    /// On trial: at most one pod at a time.
    pub trial: bool,
    pub next_trial_at: Option<DateTime<Utc>>,
}

/// The decision for one shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterDecision {
    pub key: ShapeKey,
    pub idle_jobs: u64,
    /// The shape's pods by state; flattened, so the JSON keeps one level of counts.
    #[serde(flatten)]
    pub pods: Accounting,
    pub min_pods: u64,
    pub submit: u64,
    /// Pods the shape would have got but for `max_creates_per_cycle` (next cycle's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_by_cycle_cap: u64,
    pub backoff: Option<BackoffView>,
    /// Why this shape gets no Job bodies although `submit` > 0 asked for some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ClusterDecision {
    /// The shape's idle jobs and its pods by state, in the tables' column order.
    pub(crate) fn counts(&self) -> [u64; 6] {
        let p = &self.pods;
        [
            self.idle_jobs,
            p.waiting,
            p.unmatched,
            p.claimed,
            p.failed,
            p.unknown,
        ]
    }

    /// No idle job and no pod of this shape.
    pub(crate) fn is_quiet(&self) -> bool {
        self.counts().iter().all(|n| *n == 0)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One cycle's plan, in the JSON shape `pilotd plan --format json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct KubePlan {
    pub mode: &'static str,
    pub now: DateTime<Utc>,
    pub clusters: Vec<ClusterDecision>,
    /// Job bodies to create, as the API receives them.
    pub jobs: Vec<Job>,
    /// Names of Jobs to delete (background propagation): stuck ones first, then finished ones.
    pub delete: Vec<String>,
    /// Which of `delete` are stuck (Pending longer than `pending_after`), not finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stuck: Vec<String>,
    /// Schedds skipped this cycle because their query failed.
    pub failed_schedds: Vec<String>,
    /// Idle jobs that get no pods because pilotd does not support what they ask, by shape.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<UnsupportedDemand>,
}

/// Idle jobs of one shape that pilotd makes no pods for, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnsupportedDemand {
    pub key: ShapeKey,
    pub idle_jobs: u64,
    pub reason: &'static str,
}

/// The plan plus the back-off book to carry into the next cycle.
#[derive(Debug, Clone)]
pub struct Decision {
    pub plan: KubePlan,
    pub book: BackoffBook,
}

/// The site's limits and templates the plan decides with.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSettings {
    pub max_pods_per_cluster: u64,
    pub max_submit_pods_per_cluster: u64,
    /// When a pod in an odd phase is unknown, and a Pending one stuck.
    pub ages: Ages,
    pub backoff: TrialPolicy,
    /// Finished Jobs are deleted this long after they finished, at most this many a cycle.
    pub cleanup_after: Duration,
    pub cleanup_max_per_cycle: u64,
    /// Job creates in one cycle across all shapes, in key order.
    pub max_creates_per_cycle: u64,
    pub pods: PodTemplate,
}

/// Decides one cycle from one observation.
pub fn decide(snap: &ClusterSnapshot, cfg: &PlanSettings, now: DateTime<Utc>) -> Decision {
    let demand = Demand::from_jobs(&snap.jobs);
    let observations = observe_pods(&snap.pods, &snap.kube_jobs, &snap.startds, now, &cfg.ages);
    let accounting = account(&observations);
    let policy = cfg.backoff;
    let mut book = snap.backoff.clone();
    book.observe(&observations, now, &policy);

    let mut keys: Vec<&ShapeKey> = demand.idle.keys().chain(accounting.keys()).collect();
    keys.sort();
    keys.dedup();

    let mut clusters = Vec::with_capacity(keys.len());
    let mut jobs = Vec::new();
    for key in keys {
        let idle = demand.idle.get(key).copied().unwrap_or(0);
        let acc = accounting.get(key).copied().unwrap_or_default();
        let min = min_pods(idle, cfg.max_pods_per_cluster);
        let want = pods_to_submit(min, &acc, cfg.max_submit_pods_per_cluster);
        let gate = book.gate(key, acc.unclaimed(), now, &policy);
        let mut submit = gate.cap(want);
        let backoff = book
            .keys
            .get(key)
            .filter(|e| e.failures > 0)
            .map(|e| BackoffView {
                failures: e.failures,
                trial: e.on_trial(&policy),
                next_trial_at: match gate {
                    Gate::Closed { until } => until,
                    _ => e.next_trial_at(&policy),
                },
            });
        // A shape the site refuses (a job label or volume it does not allow, a field that is
        // not valid) is reported whether or not it would get pods this cycle, and gets none.
        let mut error = match job_body(key, &cfg.pods, "check") {
            Ok(_) => None,
            Err(e) => {
                submit = 0;
                Some(e.to_string())
            }
        };
        // One budget for the whole cycle, spent in key order.
        let budget = cfg.max_creates_per_cycle.saturating_sub(jobs.len() as u64);
        let held = submit.saturating_sub(budget);
        submit -= held;
        let mut bodies = Vec::new();
        for _ in 0..submit {
            let name = job_name(&cfg.pods.app_name, now, jobs.len() + bodies.len());
            match job_body(key, &cfg.pods, &name) {
                Ok(job) => bodies.push(job),
                Err(e) => {
                    error = Some(e.to_string());
                    bodies.clear();
                    submit = 0;
                    break;
                }
            }
        }
        jobs.extend(bodies);
        clusters.push(ClusterDecision {
            key: key.clone(),
            idle_jobs: idle,
            pods: acc,
            min_pods: min,
            submit,
            held_by_cycle_cap: held,
            backoff,
            error,
        });
    }
    // Stuck Jobs first (each is a pod that will never run), then finished ones; one bound.
    let cap = usize::try_from(cfg.cleanup_max_per_cycle).unwrap_or(usize::MAX);
    let mut stuck: Vec<String> = observations
        .iter()
        .filter(|o| o.state == PodState::Stuck)
        .filter_map(|o| o.job.clone())
        .collect();
    stuck.sort();
    stuck.dedup();
    stuck.truncate(cap);
    let mut delete = stuck.clone();
    delete.extend(
        finished_jobs_to_delete(
            &snap.kube_jobs,
            cfg.cleanup_after,
            cfg.cleanup_max_per_cycle,
            now,
        )
        .into_iter()
        .filter(|n| !stuck.contains(n)),
    );
    delete.truncate(cap);
    Decision {
        plan: KubePlan {
            mode: "kubernetes",
            now,
            clusters,
            jobs,
            delete,
            stuck,
            failed_schedds: snap.failed_schedds.clone(),
            unsupported: demand
                .gpu_constrained
                .iter()
                .map(|(key, n)| UnsupportedDemand {
                    key: key.clone(),
                    idle_jobs: *n,
                    reason: GPU_CONSTRAINED_REASON,
                })
                .collect(),
        },
        book,
    }
}

/// Finished Jobs older than `cleanup_after`, oldest first, at most `cleanup_max_per_cycle`.
/// A delete that fails leaves the Job listed, so the next cycle retries it.
pub(crate) fn finished_jobs_to_delete(
    jobs: &[WorkerJob],
    cleanup_after: Duration,
    cleanup_max_per_cycle: u64,
    now: DateTime<Utc>,
) -> Vec<String> {
    let grace = chrono::Duration::from_std(cleanup_after).unwrap_or(chrono::Duration::MAX);
    let mut done: Vec<(DateTime<Utc>, String)> = jobs
        .iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| Some((j.finished()?.1?, j.metadata.name.clone())))
        .filter(|(t, _)| now.signed_duration_since(*t) >= grace)
        .collect();
    done.sort();
    done.into_iter()
        .take(usize::try_from(cleanup_max_per_cycle).unwrap_or(usize::MAX))
        .map(|(_, n)| n)
        .collect()
}

#[cfg(test)]
mod tests;
