//! Pure demand for kubernetes mode: HTCondor idle job ads → idle jobs per resource shape
//! (`ShapeKey`), the NRP provisioner's formula for how many worker pods a shape may get per
//! cycle, the accounting of existing pods per shape, and the per-shape back-off. No I/O and no
//! clock: `now` arrives as an argument.

use super::accounting::Accounting;
use super::shape::ShapeKey;
use crate::ads::JobAd;
use std::collections::BTreeMap;

/// Idle jobs per shape, keys in sorted order (so logs, plans and tests are reproducible).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Demand {
    pub idle: BTreeMap<ShapeKey, u64>,
    /// Idle jobs whose Requirements constrain GPUs beyond count and type (`RequireGPUs`,
    /// `GPUs_Capability`), by shape: they make no demand. A pod's START cannot be made to
    /// match such an expression (it names properties of the GPU the node will have, which
    /// pilotd cannot choose), so pods made for them could stay unmatched and put the plain
    /// GPU shape they would share on trial. The plan reports them with this reason.
    pub gpu_constrained: BTreeMap<ShapeKey, u64>,
}

/// Why `gpu_constrained` jobs get no pods, for the plan and status.
pub(crate) const GPU_CONSTRAINED_REASON: &str = "the job constrains GPUs with RequireGPUs or GPUs_Capability, which no pod pilotd makes is sure to match (only RequestGPUs and RequestGPUTypes are supported)";

impl Demand {
    /// Counts the idle jobs (JobStatus 1) of each shape; other jobs do not create demand.
    pub(crate) fn from_jobs(jobs: &[JobAd]) -> Demand {
        let mut d = Demand::default();
        for job in jobs.iter().filter(|j| j.is_idle()) {
            let into = if job.constrains_gpus.as_int() == Some(1) {
                &mut d.gpu_constrained
            } else {
                &mut d.idle
            };
            *into.entry(ShapeKey::from_job(job)).or_insert(0) += 1;
        }
        d
    }
}

/// Pods a shape should have unclaimed this cycle: `1 + idle/4`, tapered above 20 to
/// `20 + (n-20)/4`, capped by `max_pods_per_cluster`. Zero idle jobs need no pod.
pub(crate) fn min_pods(idle: u64, max_pods_per_cluster: u64) -> u64 {
    if idle == 0 {
        return 0;
    }
    let mut n = 1 + idle / 4;
    if n > 20 {
        n = 20 + (n - 20) / 4;
    }
    n.min(max_pods_per_cluster)
}

/// New pods for a shape: what is missing to reach `min_pods` unclaimed, nothing once the
/// shape's live pods (waiting + unmatched + claimed) reach `max_submit_pods_per_cluster`,
/// and never past that cap (the provisioner could overshoot it by one batch).
pub(crate) fn pods_to_submit(
    min_pods: u64,
    acc: &Accounting,
    max_submit_pods_per_cluster: u64,
) -> u64 {
    let live = acc.live();
    if live >= max_submit_pods_per_cluster {
        return 0;
    }
    min_pods
        .saturating_sub(acc.unclaimed())
        .min(max_submit_pods_per_cluster - live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ads::AdValue;

    #[test]
    fn formula_matches_the_provisioner_at_every_documented_point() {
        // (idle, with max_pods 20, with max_pods 1000), from the provisioner's observed table.
        let table = [
            (1, 1, 1),
            (4, 2, 2),
            (8, 3, 3),
            (20, 6, 6),
            (96, 20, 21),
            (100, 20, 21),
            (400, 20, 40),
            (1000, 20, 77),
            (4000, 20, 265),
        ];
        for (idle, cap20, cap1000) in table {
            assert_eq!(min_pods(idle, 20), cap20, "idle {idle} cap 20");
            assert_eq!(min_pods(idle, 1000), cap1000, "idle {idle} cap 1000");
        }
        assert_eq!(min_pods(0, 20), 0);
        assert_eq!(min_pods(3, 20), 1);
        assert_eq!(min_pods(7, 20), 2);
        assert_eq!(min_pods(79, 1000), 20);
    }

    #[test]
    fn submit_fills_up_to_min_pods_and_respects_the_cap() {
        let acc = Accounting {
            waiting: 2,
            unmatched: 1,
            claimed: 10,
            failed: 5,
            unknown: 1,
        };
        assert_eq!(pods_to_submit(6, &acc, 1000), 3);
        assert_eq!(pods_to_submit(3, &acc, 1000), 0);
        // failed and unknown pods do not count against the cap, as in the provisioner.
        assert_eq!(pods_to_submit(6, &acc, 13), 0);
        assert_eq!(pods_to_submit(6, &acc, 14), 1, "never past the cap");
    }

    #[test]
    fn only_idle_jobs_make_demand() {
        let mut idle = JobAd {
            schedd_name: "s".into(),
            job_status: AdValue::Int(1),
            ..JobAd::default()
        };
        let mut running = idle.clone();
        running.job_status = AdValue::Int(2);
        idle.request_cpus = AdValue::Int(2);
        let mut constrained = idle.clone();
        constrained.constrains_gpus = AdValue::Bool(true);
        let d = Demand::from_jobs(&[idle.clone(), idle, running, constrained]);
        assert_eq!(d.idle.len(), 1);
        assert_eq!(d.idle.values().copied().collect::<Vec<_>>(), vec![2]);
        assert_eq!(
            d.gpu_constrained.values().copied().collect::<Vec<_>>(),
            vec![1],
            "a RequireGPUs job makes no demand of its own shape"
        );
    }
}
