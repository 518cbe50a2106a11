//! pilotd's own workers' share of the machine's CPU, measured cycle to cycle.

use crate::act::backend::Backend;
use crate::worker::{CpuSample, Worker, WorkerState};
use chrono::{DateTime, SubsecRound, Utc};
use std::collections::HashMap;

/// pilotd's own workers' share of the machine, from two CPU samples a cycle apart.
///
/// The owner's CPU is the host's busy time over the last cycle minus this, so both must
/// cover the same window. A worker started since the last measurement has no sample from
/// then, but all of its CPU lies in the window: its counter, from zero, over the window's
/// length on every CPU. Without that, a busy new worker read as the owner's load for one
/// cycle (a false "owner CPU above …", no new workers). Paused workers keep being sampled
/// (a frozen worker's counter does not move), so a resumed one is counted from its first
/// cycle too. A worker that was already there when pilotd started counts from the second
/// cycle: its counter covers its whole life.
///
/// A window in which pilotd started or removed a worker is not judged: the engine's work of
/// creating a container, pilotd's own making of the scratch image and the kernel's mount of
/// it are pilotd's doing, not the owner's, yet they lie outside any worker's cgroup. Such a
/// window re-bases both counters and the cycle decides on the last judged figures. Never two
/// windows in a row, so a worker that crash-loops cannot blind the owner-CPU check.
#[derive(Debug, Default)]
pub(super) struct CpuMeter {
    prev: HashMap<String, CpuSample>,
    /// When the last measurement ran.
    last: Option<DateTime<Utc>>,
    /// pilotd started or removed a worker since the last measurement.
    acted: bool,
    /// The last measured window was not judged.
    skipped: bool,
    /// CPU nanoseconds the workers used since `take_given` (every window, judged or not):
    /// each sampled worker's counter delta once; a new worker's counter whole, an adopted
    /// one's from its first sample (its counter covers time a previous pilotd counted).
    given_ns: u64,
    /// Each listed worker's highest CPU counter read and when it was read, kept after the
    /// worker ended (its cgroup is gone then, and the engine reads a stopped worker as 0)
    /// until its container is: what it used bounds its pilot's job report
    /// (`contribution::Claim`).
    used: HashMap<String, (u64, DateTime<Utc>)>,
}

/// The shortest window CPU shares are measured over (see `CpuMeter`).
pub(super) const MIN_CPU_WINDOW: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

impl CpuMeter {
    /// Time since the last measurement; unbounded before the first.
    pub(super) fn window_since(&self, now: DateTime<Utc>) -> chrono::TimeDelta {
        self.last
            .map_or(chrono::TimeDelta::MAX, |at| now.signed_duration_since(at))
    }

    /// pilotd started or removed a worker: the window now open is its own doing.
    pub(super) fn acted(&mut self) {
        self.acted = true;
    }

    /// Whether the window just measured counts (see above); called once per measurement.
    pub(super) fn judge(&mut self) -> bool {
        let judged = !std::mem::take(&mut self.acted) || self.skipped;
        self.skipped = !judged;
        judged
    }

    /// The CPU worker `id`'s cgroup had used at the last reading, in CPU-seconds, and when
    /// that reading was; `None` when it was never read.
    pub(super) fn used(&self, id: &str) -> Option<(f64, DateTime<Utc>)> {
        self.used
            .get(id)
            .filter(|(ns, _)| *ns > 0)
            .map(|(ns, at)| (*ns as f64 / 1e9, *at))
    }

    /// The workers' CPU time measured since the last call, in CPU-seconds (the contribution).
    pub(super) fn take_given(&mut self) -> f64 {
        std::mem::take(&mut self.given_ns) as f64 / 1e9
    }

    /// The workers' CPU since the last measurement, as a fraction of a machine of `cpus`
    /// CPUs (`None` before the host was first observed).
    pub(super) async fn measure(
        &mut self,
        b: &impl Backend,
        workers: &[Worker],
        now: DateTime<Utc>,
        cpus: Option<u32>,
    ) -> f64 {
        let live: Vec<&Worker> = workers
            .iter()
            .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused))
            .collect();
        let samples =
            futures_util::future::join_all(live.iter().map(|w| b.cpu_sample(&w.id))).await;
        // The window on every CPU, in the counters' nanoseconds.
        let window_ns = self
            .last
            .and_then(|at| now.signed_duration_since(at).num_nanoseconds())
            .zip(cpus)
            .map(|(ns, cpus)| ns as f64 * f64::from(cpus))
            .filter(|ns| *ns > 0.0);
        let mut total = 0.0;
        let mut next = HashMap::new();
        for (w, s) in live.iter().zip(samples) {
            match s {
                Ok(s) => {
                    if let Some(p) = self.prev.get(&w.id) {
                        total += s.fraction_since(*p).unwrap_or(0.0);
                        // Backwards (the engine restarted): nothing known to count.
                        let delta = s.worker_ns.saturating_sub(p.worker_ns);
                        self.given_ns = self.given_ns.saturating_add(delta);
                    } else if let (Some(created), Some(at)) = (w.created, self.last)
                        // The label has whole seconds.
                        && created >= at.trunc_subsecs(0)
                    {
                        if let Some(window) = window_ns {
                            total += (s.worker_ns as f64 / window).clamp(0.0, 1.0);
                        }
                        self.given_ns = self.given_ns.saturating_add(s.worker_ns);
                    }
                    // Zero: a worker that ended just before the reading (its entrypoint
                    // alone used some CPU). The counter only grows, so the highest stands.
                    let used = self.used.entry(w.id.clone()).or_insert((0, now));
                    if s.worker_ns > 0 && s.worker_ns >= used.0 {
                        *used = (s.worker_ns, now);
                    }
                    next.insert(w.id.clone(), s);
                }
                Err(e) => tracing::debug!(worker = %w.name, "{e}"),
            }
        }
        self.prev = next;
        self.used
            .retain(|id, _| workers.iter().any(|w| &w.id == id));
        self.last = Some(now);
        f64::min(total, 1.0)
    }
}
