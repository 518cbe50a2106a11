//! One reconcile step of the volunteer daemon, at a given `now`: observe (engine, workers,
//! their CPU, the host) → decide (`policy::decide`) → plan (`plan::plan`) → execute → record
//! (status file, outcomes and back-off, history, metrics). Every failure on the way is said
//! in the status file and the log, and fails toward the owner: no list, no change; no probe,
//! the owner is assumed present.

use super::Daemon;
use super::cpu::MIN_CPU_WINDOW;
use super::executor::{self, Executed};
use super::record::Record;
use super::triggers::Interrupt;
use crate::backend::Backend;
use crate::gc;
use crate::history::Outlook;
use crate::host::Carry;
use crate::image;
use crate::logind;
use crate::plan::{self, Action, Observed};
use crate::policy::{Supply, decide};
use crate::snapshot::{HostSnapshot, Sessions};
use crate::snooze;
use crate::worker::{ImageState, Worker, WorkerState, split_reference};
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// The running workers' scratch dirs are measured against their disk share every cycle
/// interval, but never more often than this (a walk of a big tree costs I/O).
const DISK_CHECK_MIN: std::time::Duration = std::time::Duration::from_secs(10);

/// What a cycle observed before it decides.
struct Observation<B> {
    backend: Option<B>,
    workers: Option<Vec<Worker>>,
    own_cpu: f64,
    /// The host's CPU counters are read anew (the window is long enough).
    fresh_cpu: bool,
    /// ... and the window counts: pilotd started or removed no worker in it.
    judged_cpu: bool,
    logind: logind::Seen,
    /// What an urgent cycle already evicted before the engine's list came (action lines).
    early: Vec<String>,
    /// The host as the early evictions saw it: the cycle decides on the same observation.
    early_host: Option<HostSnapshot>,
}

impl<B: Backend> Daemon<B> {
    /// One cycle at `now`, with nothing to interrupt it; returns a one-line summary. An
    /// `urgent` cycle (a login) decides on the CPU share measured last time instead of
    /// waiting for the engine's statistics.
    pub async fn cycle(&mut self, now: DateTime<Utc>, urgent: bool) -> String {
        self.cycle_with(now, urgent, &mut Interrupt::none())
            .await
            .unwrap_or_default()
    }

    /// One cycle at `now`, which an urgent trigger may cut short (`int`): during the
    /// observations (nothing was done yet: `None`), or before its next start or resume. The
    /// caller then runs an urgent cycle at once.
    pub(super) async fn cycle_with(
        &mut self,
        now: DateTime<Utc>,
        urgent: bool,
        int: &mut Interrupt<'_>,
    ) -> Option<String> {
        let started = std::time::Instant::now();
        let summary = self.reconcile_at(now, urgent, int).await?;
        // Written after the cycle acted, and only when it changed meaningfully: an fsync
        // must never delay the eviction of a login, and an idle laptop's disk may sleep.
        self.save_history(now);
        if let Some(m) = &self.metrics {
            m.cycle_seconds.observe(started.elapsed().as_secs_f64());
            m.backoff_level.set(i64::from(self.status.backoff.failures));
            if let Some(list) = &self.status.workers {
                let mut counts: HashMap<&'static str, i64> = HashMap::new();
                for w in list {
                    *counts.entry(metric_state(w.state)).or_default() += 1;
                }
                m.set_workers(counts);
            }
        }
        Some(summary)
    }

    /// What was seen of the engine, the workers, their CPU, logind and the host.
    async fn observe(
        &mut self,
        now: DateTime<Utc>,
        urgent: bool,
        errors: &mut Vec<String>,
    ) -> Observation<B> {
        let backend = self.connected(errors).await;
        // The engine's list and logind's sessions, asked together.
        let (listed, logind, (early, early_host)) = {
            let list = async {
                match &backend {
                    Some(b) => Some(b.list_workers().await),
                    None => None,
                }
            };
            tokio::pin!(list);
            let mut listed = None;
            let logind = {
                let sessions = self.logind.observe(now);
                tokio::pin!(sessions);
                loop {
                    tokio::select! {
                        l = &mut list, if listed.is_none() => listed = Some(l),
                        seen = &mut sessions => break seen,
                    }
                }
            };
            // An urgent cycle whose sessions came before the engine's list evicts at once, from
            // the last list: on a busy machine the list is most of the owner's wait.
            let early = match (&backend, &listed) {
                (Some(b), None) if urgent => self.evict_early(b, now, &logind, errors).await,
                _ => (Vec::new(), None),
            };
            let listed = match listed {
                Some(l) => l,
                None => list.await,
            };
            (listed, logind, early)
        };
        let workers = match listed {
            Some(Ok(w)) => Some(w),
            Some(Err(e)) => {
                tracing::error!("{e}; no worker is started or removed until the list works again");
                errors.push(e.to_string());
                None
            }
            None => None,
        };
        // CPU is measured on windows of at least MIN_CPU_WINDOW: a cycle right after
        // another (a worker started or ended, a login) decides on the last figures, host and
        // own alike. Over a fraction of a second the engine's own work of starting a
        // container read as the owner's load.
        let fresh_cpu = !urgent && self.cpu.window_since(now) >= MIN_CPU_WINDOW;
        let (own_cpu, judged_cpu) = match (&backend, &workers) {
            (Some(b), Some(w)) if fresh_cpu => {
                let cpus = self.last_snapshot.as_ref().map(|h| h.cpus);
                let own = self.cpu.measure(b, w, now, cpus).await;
                if self.cpu.judge() {
                    (own, true)
                } else {
                    tracing::debug!(
                        "CPU window not judged: pilotd started or removed a worker in it \
                         (workers {:.0}%)",
                        own * 100.0
                    );
                    (self.status.own_cpu, false)
                }
            }
            _ => (self.status.own_cpu, false),
        };
        if !self.sleeping && matches!(logind, logind::Seen::Sessions(_)) {
            self.logind.hold_sleep_lock().await;
        }
        Observation {
            backend,
            workers,
            own_cpu,
            fresh_cpu,
            judged_cpu,
            logind,
            early,
            early_host,
        }
    }

    /// An urgent cycle's evictions decided before the engine's list arrives: the host observed
    /// now with logind's fresh answer, the workers as the last cycle listed them. Only the
    /// plan's leading pauses and kills are sent; the cycle then goes on with the engine's list,
    /// which shows them paused (or ending), so nothing is done twice. A worker started or gone
    /// since the last list is the full cycle's to handle, a moment later. Returns the action
    /// lines and the host observation, which the cycle then decides on too.
    async fn evict_early(
        &mut self,
        b: &B,
        now: DateTime<Utc>,
        logind: &logind::Seen,
        errors: &mut Vec<String>,
    ) -> (Vec<String>, Option<HostSnapshot>) {
        let Some(last) = self.status.workers.clone() else {
            return (Vec::new(), None);
        };
        if !last.iter().any(|w| w.state == WorkerState::Running) {
            return (Vec::new(), None);
        }
        let own = self.status.own_cpu;
        let Some(snapshot) = self.observe_host(now, own, false, logind.clone(), errors) else {
            return (Vec::new(), None);
        };
        let outlook = Outlook::at(&self.s, &self.learner.history, now);
        let supply = decide(&self.s.policy, &snapshot, outlook.limits, now);
        let no_image = ImageState::Unavailable {
            reason: "not asked in an urgent cycle's evictions".into(),
        };
        let plan = plan::plan(
            &supply,
            Observed {
                workers: &last,
                in_flight: &self.work.in_flight,
                backoff: &self.status.backoff,
                image: &no_image,
                free_hours: None,
                scratch_use: &self.work.scratch_use,
                filter_down: None,
            },
            &self.worker,
            now,
        );
        let quick = plan
            .actions
            .iter()
            .take_while(|a| matches!(a, Action::Pause { .. } | Action::Kill { .. }))
            .count();
        if quick == 0 {
            return (Vec::new(), Some(snapshot));
        }
        let executed = executor::execute(
            b,
            &plan.actions[..quick],
            &self.worker,
            &mut self.work,
            &mut Interrupt::none(),
        )
        .await;
        (self.record_executed(executed, now), Some(snapshot))
    }

    async fn reconcile_at(
        &mut self,
        now: DateTime<Utc>,
        urgent: bool,
        int: &mut Interrupt<'_>,
    ) -> Option<String> {
        self.fetch_manifest_if_due(now);
        let mut errors: Vec<String> = Vec::new();

        // Observe. Nothing is done yet, so an urgent trigger drops it all (the engine's CPU
        // statistics of busy workers can take most of a second on a loaded host).
        let seen = if urgent {
            self.observe(now, true, &mut errors).await
        } else {
            tokio::select! {
                biased;
                () = int.arrived() => return None,
                seen = self.observe(now, false, &mut errors) => seen,
            }
        };
        let Observation {
            backend,
            mut workers,
            own_cpu,
            fresh_cpu,
            judged_cpu,
            logind,
            early,
            early_host,
        } = seen;
        let observed = match early_host {
            Some(host) => Some(host),
            None => self.observe_host(now, own_cpu, fresh_cpu, logind, &mut errors),
        };
        let Some(mut snapshot) = observed else {
            self.finish(
                now,
                Record {
                    supply: None,
                    actions: vec![],
                    notes: vec![],
                    errors,
                    workers,
                },
            );
            return Some("host probe failed".into());
        };

        // Unless this window was judged, the machine's figure is the last judged one, like the
        // workers'. Not the probe's: it holds the last refresh, which after an unjudged window
        // includes a worker the carried own share does not (a cycle right after one read a
        // just-started worker as 52% of owner load in CI). Where the engine could not list
        // the workers, the host's own reading stands: all of it may be the owner's.
        if !judged_cpu
            && workers.is_some()
            && let Some(last) = &self.last_snapshot
        {
            snapshot.cpu_busy = last.cpu_busy;
        }
        if judged_cpu {
            tracing::debug!(
                "CPU over the last window: machine {:.0}%, pilotd's workers {:.0}%, owner {:.0}%",
                snapshot.cpu_busy * 100.0,
                own_cpu * 100.0,
                snapshot.owner_cpu() * 100.0
            );
        }

        // Decide.
        let mut outlook = Outlook::at(&self.s, &self.learner.history, now);
        // The fleet's spread holds the first start after this daemon started, too.
        outlook.limits.started = Some(self.started);
        let supply = decide(&self.s.policy, &snapshot, outlook.limits, now);
        self.learn(now, &supply);
        self.presence
            .record(now, self.s.interval, &snapshot, &self.s.policy);
        self.count_contribution(now, &supply, workers.as_deref());
        self.log_decision_change(&supply);
        self.advertise(&snapshot, &supply, now);
        self.last_snapshot = Some(snapshot);
        self.status.owner_busy_since = supply.owner_busy_since;
        self.status.host_free_since = supply.host_free_since;
        self.status.own_cpu = own_cpu;
        self.wakeups.next_change = supply.next_change;

        let (Some(b), Some(list)) = (backend, workers.clone()) else {
            let summary = format!(
                "engine unavailable; {}",
                supply.reasons.first().cloned().unwrap_or_default()
            );
            self.finish(
                now,
                Record {
                    supply: Some(&supply),
                    actions: vec![],
                    notes: vec![],
                    errors,
                    workers,
                },
            );
            return Some(summary);
        };

        // Finished workers' outcomes first: the back-off they widen must hold back a start
        // planned in this very cycle.
        self.record_finished(&b, &list, now).await;
        self.measure_scratch_if_due(&list, now);

        // Plan.
        if !self.work.in_flight.checking
            && image::check_needed(
                &mut self.status.image,
                &self.worker.image,
                now,
                &self.s.image,
            )
        {
            self.work.in_flight.checking = true;
            super::tasks::spawn_check(&mut self.work.tasks, &b, &self.worker.image);
        }
        // An urgent cycle plans with the image as the last cycle saw it: one engine request
        // less before the owner's workers are paused.
        let image_state = match self.last_image.clone() {
            Some(seen) if urgent => seen,
            _ => image::state(
                &b,
                &self.status.image,
                &self.s.image,
                self.work.in_flight.pulling.as_deref(),
                now,
            )
            .await
            .unwrap_or_else(|e| ImageState::Unavailable {
                reason: e.to_string(),
            }),
        };
        self.last_image = Some(image_state.clone());
        // Beside the loop: the filter of pilotd's network is checked (and repaired) while
        // workers live on it; down, the plan pauses them.
        let live = list.iter().any(|w| !w.state.is_finished());
        let filter_down = self.work.egress.check(self.worker.egress.as_ref(), live);
        let plan = plan::plan(
            &supply,
            Observed {
                workers: &list,
                in_flight: &self.work.in_flight,
                backoff: &self.status.backoff,
                image: &image_state,
                free_hours: Some(outlook.free_hours()),
                scratch_use: &self.work.scratch_use,
                filter_down: filter_down.as_deref(),
            },
            &self.worker,
            now,
        );

        // Execute, then record what it did. Evictions come first in the plan; an urgent
        // trigger arriving meanwhile stops it before the next start or resume.
        let executed =
            executor::execute(&b, &plan.actions, &self.worker, &mut self.work, int).await;
        if let Some(list) = workers.as_mut() {
            after_actions(list, &executed);
        }
        let mut actions = early;
        actions.extend(self.record_executed(executed, now));
        let computing = supply.allowed && list.iter().any(|w| w.state == WorkerState::Running);
        self.logind
            .keep_awake(self.s.policy.keep_awake && computing)
            .await;
        if !int.poll() {
            self.gc_if_due(&b, &list, now).await;
        }
        // Forget recorded outcomes and reports of containers that are gone.
        self.status
            .recorded
            .retain(|id| list.iter().any(|w| &w.id == id));
        self.status
            .reported
            .retain(|id| list.iter().any(|w| &w.id == id));
        let summary = format!(
            "{} worker(s), target {}; {}",
            list.iter()
                .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused))
                .count(),
            supply.workers,
            supply.reasons.first().cloned().unwrap_or_default()
        );
        self.finish(
            now,
            Record {
                supply: Some(&supply),
                actions,
                notes: plan.notes,
                errors,
                workers,
            },
        );
        Some(summary)
    }

    /// The engine, described in the log once per connection; `None` (and why, once per
    /// distinct failure) when it cannot be reached.
    async fn connected(&mut self, errors: &mut Vec<String>) -> Option<B> {
        let b = match self.backend() {
            Ok(b) => b,
            Err(e) => {
                let msg = e.to_string();
                if self
                    .status
                    .last_error
                    .as_deref()
                    .is_none_or(|l| !l.contains(&msg))
                {
                    tracing::error!(
                        "{msg}; no worker is started or removed until the engine answers"
                    );
                }
                errors.push(msg);
                return None;
            }
        };
        if self.status.engine.is_none()
            && let Ok(engine) = b.describe_engine().await
        {
            tracing::info!(engine = %engine, "connected to the container engine");
            self.status.engine = Some(engine);
        }
        Some(b)
    }

    /// The host as it is now; when the probe fails, the last observation with the sessions
    /// unknown (the policy then assumes the owner is here). `None` before any observation.
    fn observe_host(
        &mut self,
        now: DateTime<Utc>,
        own_cpu: f64,
        refresh_cpu: bool,
        logind: logind::Seen,
        errors: &mut Vec<String>,
    ) -> Option<HostSnapshot> {
        let carry = Carry {
            own_cpu,
            owner_busy_since: self.status.owner_busy_since,
            host_free_since: self.status.host_free_since,
        };
        #[cfg(test)]
        if let Some(synthetic) = &mut self.synthetic_host {
            return Some(synthetic(now, carry));
        }
        match self.probe.observe(now, carry, refresh_cpu) {
            Ok(mut s) => {
                s.sleeping = self.sleeping;
                s.input_idle_s = self.input.idle_s(now);
                snooze::lay_on(&mut s, &self.s.state_dir);
                logind::lay_on(&mut s, logind);
                Some(s)
            }
            Err(e) => {
                errors.push(e.to_string());
                match &self.last_snapshot {
                    Some(last) => {
                        let mut s = HostSnapshot {
                            taken_at: now,
                            sessions: Sessions::Unknown(format!("host probe failed: {e}")),
                            sleeping: self.sleeping,
                            input_idle_s: self.input.idle_s(now),
                            ..last.clone()
                        };
                        snooze::lay_on(&mut s, &self.s.state_dir);
                        Some(s)
                    }
                    None => {
                        tracing::error!("{e}; nothing to decide on yet");
                        None
                    }
                }
            }
        }
    }

    /// Measures the running workers' scratch dirs beside the loop, every `interval` but at
    /// most every 10 s; the plan stops a worker found over its disk share.
    fn measure_scratch_if_due(&mut self, list: &[Worker], now: DateTime<Utc>) {
        let every = chrono::Duration::from_std(self.s.interval.max(DISK_CHECK_MIN))
            .unwrap_or(chrono::Duration::MAX);
        if self.work.measuring || self.work.measured_at.is_some_and(|t| now - t < every) {
            return;
        }
        let running: Vec<(String, String)> = list
            .iter()
            .filter(|w| w.state == WorkerState::Running)
            .map(|w| (w.id.clone(), w.name.clone()))
            .collect();
        if running.is_empty() {
            return;
        }
        self.work.measuring = true;
        self.work.measured_at = Some(now);
        super::tasks::spawn_measure(&mut self.work.tasks, &self.worker.scratch_root, running);
    }

    /// Collects finished scratch dirs and old images every `gc_interval`.
    async fn gc_if_due(&mut self, b: &B, list: &[Worker], now: DateTime<Utc>) {
        let every = chrono::Duration::from_std(self.s.gc_interval).unwrap_or_default();
        if self.last_gc.is_some_and(|t| now - t < every) {
            return;
        }
        self.last_gc = Some(now);
        let mut items = gc::scratch(
            &self.worker.scratch_root,
            &gc::scratch_entries(&self.worker.scratch_root),
            list,
            &self.worker.name_prefix(),
        );
        items.extend(gc::token_copies(
            &self.worker.tokens_root,
            &gc::token_entries(&self.worker.tokens_root),
            list,
            &self.worker.name_prefix(),
        ));
        let (repository, _, _) = split_reference(&self.worker.image);
        match b.list_images(&repository).await {
            Ok(local) => items.extend(gc::images(
                &local,
                self.status.image.digest.as_deref(),
                &self.status.pulled_images,
                list,
            )),
            Err(e) => tracing::warn!("{e}; image GC skipped this time"),
        }
        for c in gc::apply(b, &self.worker, &items, self.s.policy.grace).await {
            match c.result {
                Ok(()) => tracing::info!("gc: {c}"),
                Err(_) => tracing::warn!("gc: {c}"),
            }
        }
        // Forget pulls whose image is gone.
        if let Ok(local) = b.list_images(&repository).await {
            self.status
                .pulled_images
                .retain(|p| local.iter().any(|i| i.id == p.id));
        }
    }

    /// Starts a manifest fetch beside the loop when one is due (never blocks a cycle).
    fn fetch_manifest_if_due(&mut self, now: DateTime<Utc>) {
        let Some(r) = self.s.remote.clone() else {
            return;
        };
        if self.refresh.start_if_due(now, r.refresh, &self.s.fleet) {
            super::tasks::spawn_manifest_fetch(
                &mut self.work.tasks,
                r,
                self.s.image.allowed.clone(),
                self.s.worker.env.clone(),
            );
        }
    }

    /// Counts the time since the last cycle into the availability history, and the decision
    /// into the metrics.
    fn learn(&mut self, now: DateTime<Utc>, supply: &Supply) {
        let free = !supply.causes.iter().any(|c| c.owner_or_host_busy());
        self.learner
            .learn(&self.s.policy.timezone, now, self.s.interval, free);
        if let Some(m) = &self.metrics {
            m.allowed.set(i64::from(supply.allowed));
            for c in &supply.causes {
                m.count_decision(c.as_str());
            }
        }
    }

    /// One log line per change of decision, saying what changed and why.
    fn log_decision_change(&mut self, s: &Supply) {
        let now = format!(
            "{} (target {} worker(s), evict {})",
            if s.allowed { "compute" } else { "do not start" },
            s.workers,
            s.evict.as_str()
        );
        if self.last_decision.as_deref() != Some(now.as_str()) {
            tracing::info!(
                causes = %s.causes.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(","),
                "decision: {} -> {now}: {}",
                self.last_decision.as_deref().unwrap_or("none"),
                s.reasons.iter().chain(&s.notes).cloned().collect::<Vec<_>>().join("; ")
            );
            self.last_decision = Some(now);
        }
    }
}

/// The `state` label of the workers metric.
fn metric_state(s: WorkerState) -> &'static str {
    match s {
        WorkerState::Running => "running",
        WorkerState::Paused => "paused",
        WorkerState::Exited => "exited",
        WorkerState::Created => "created",
        _ => "other",
    }
}

/// The cycle's list as its pauses and resumes left it: what the status file shows, and what
/// the next urgent cycle pauses from before the engine lists again (`evict_early`; a list
/// from before a resume would show nothing to pause).
fn after_actions(list: &mut [Worker], executed: &[Executed]) {
    for e in executed {
        let (id, state) = match (&e.action, &e.result) {
            (Action::Pause { id, .. }, Ok(_)) => (id, WorkerState::Paused),
            (Action::Unpause { id, .. }, Ok(_)) => (id, WorkerState::Running),
            _ => continue,
        };
        if let Some(w) = list.iter_mut().find(|w| &w.id == id) {
            w.state = state;
        }
    }
}
