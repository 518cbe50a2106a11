//! One reconcile step of the volunteer daemon, at a given `now`: observe (engine, workers,
//! their CPU, the host) → decide (`policy::decide`) → plan (`plan::plan`) → execute → record
//! (status file, outcomes and back-off, history, metrics). Every failure on the way is said
//! in the status file and the log, and fails toward the owner: no list, no change; no probe,
//! the owner is assumed present.

use super::Daemon;
use super::cpu::MIN_CPU_WINDOW;
use super::executor::{self, Executed};
use super::record::{CycleOutcome, REPORT_LINES, Report};
use super::tasks;
use super::triggers::Interrupt;
use crate::act::backend::Backend;
use crate::act::gc;
use crate::act::image;
use crate::decide::plan::{self, Action, Observed, Plan};
use crate::decide::policy::{LinkHold, Supply, decide};
use crate::observe::host::Carry;
use crate::observe::{logind, metered};
use crate::outcome::Outcome;
use crate::record::contribution::{Claim, Measured};
use crate::record::history::Outlook;
use crate::record::snooze;
use crate::snapshot::{HostSnapshot, Sessions};
use crate::worker::{ImageState, Worker, WorkerState, split_reference};
use chrono::{DateTime, Utc};
use pilot_contract::JobReport;

/// What an urgent cycle did before the engine's list arrived: the actions sent, and the host
/// and decision they came from, which are the cycle's own.
#[derive(Default)]
struct Early {
    actions: Vec<String>,
    host: Option<HostSnapshot>,
    decided: Option<(Supply, Outlook)>,
}

/// How many lines of a failed worker's output are kept (log and status file).
const OUTPUT_LINES: usize = 20;

/// The running workers' scratch dirs are measured against their disk share every cycle
/// interval, but never more often than this (a walk of a big tree costs I/O).
const DISK_CHECK_MIN: std::time::Duration = std::time::Duration::from_secs(10);

impl<B: Backend> Daemon<B> {
    /// One cycle at `now`, with nothing to interrupt it; returns a one-line summary. An
    /// `urgent` cycle (a login) decides on the CPU share measured last time instead of
    /// waiting for the engine's statistics.
    pub(crate) async fn cycle(&mut self, now: DateTime<Utc>, urgent: bool) -> String {
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
        let summary = self.reconcile_at(now, urgent, int).await;
        // logind's sleep delay lock, (re)taken once the cycle acted: a call to logind that
        // the owner's pause must not wait for (where logind refuses it, every cycle asks
        // again), and a suspend announced meanwhile finds it held or not as before.
        if std::mem::take(&mut self.sleep_lock_due) && !self.sleeping {
            self.logind.hold_sleep_lock().await;
        }
        let summary = summary?;
        // Written after the cycle acted, and only when it changed meaningfully: an fsync
        // must never delay the eviction of a login, and an idle laptop's disk may sleep.
        self.records.save_due(&self.s, now);
        if let Some(m) = &self.metrics {
            m.cycle_seconds.observe(started.elapsed().as_secs_f64());
        }
        Some(summary)
    }

    /// The cycle's steps: observe, decide, then with the engine's list plan and act; record.
    async fn reconcile_at(
        &mut self,
        now: DateTime<Utc>,
        urgent: bool,
        int: &mut Interrupt<'_>,
    ) -> Option<String> {
        let mut outcome = CycleOutcome {
            now,
            ..Default::default()
        };
        // Observe. Nothing is done yet, so an urgent trigger drops it all (the engine's CPU
        // statistics of busy workers can take most of a second on a loaded host).
        let (backend, host, decided) = if urgent {
            self.observe(true, &mut outcome).await
        } else {
            tokio::select! {
                biased;
                () = int.arrived() => return None,
                seen = self.observe(false, &mut outcome) => seen,
            }
        };
        let Some(host) = host else {
            self.finish(outcome);
            return Some("host probe failed".into());
        };
        // The data the workers moved since the last cycle, counted before deciding: the
        // decision judges the owner's data cap with it.
        let net = self.cpu.take_net();
        self.records
            .network(&self.s, &net, outcome.workers.as_deref(), now);
        let (supply, outlook) = decided.unwrap_or_else(|| self.decide(now, &host));
        // Beside the loop, never on a metered link the owner's policy holds.
        if supply.link == LinkHold::Nothing {
            self.fetch_manifest_if_due(now);
        }
        outcome.supply = Some(&supply);
        outcome.given = self.cpu.take_given();
        self.records.decided(&self.s, &host, &outcome);
        self.last_snapshot = Some(host);
        let reason = supply.reasons.first().cloned().unwrap_or_default();
        let (Some(b), Some(list)) = (backend, outcome.workers.clone()) else {
            self.finish(outcome);
            return Some(format!("engine unavailable; {reason}"));
        };
        // Finished workers' outcomes first: the back-off they widen must hold back a start
        // planned in this very cycle.
        self.record_finished(&b, &list, now).await;
        self.measure_scratch_if_due(&list, now);
        let plan = self.plan(&b, &list, &supply, &outlook, urgent, now).await;
        self.act(&b, &list, plan, int, &mut outcome).await;
        let live = list
            .iter()
            .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused));
        let (live, target) = (live.count(), supply.workers);
        self.finish(outcome);
        Some(format!("{live} worker(s), target {target}; {reason}"))
    }

    /// Observe the engine, the workers and their CPU, logind and the host (None: the probe
    /// failed, and there is no earlier observation); `o` takes what an urgent cycle evicted,
    /// and the decision it evicted on is the cycle's (`Early::decided`).
    async fn observe(
        &mut self,
        urgent: bool,
        o: &mut CycleOutcome<'_>,
    ) -> (Option<B>, Option<HostSnapshot>, Option<(Supply, Outlook)>) {
        let (now, errors) = (o.now, &mut o.errors);
        let backend = self.connected(errors).await;
        // The engine's list and logind's sessions, asked together.
        let (listed, logind, early) = {
            let list = async {
                match &backend {
                    Some(b) => Some(b.list_workers().await),
                    None => None,
                }
            };
            tokio::pin!(list);
            let mut listed = None;
            // NetworkManager is asked beside logind (a change of the link is as urgent as a
            // login, and takes no longer); its answer is kept by `self.link`.
            let logind = {
                let logind = async {
                    match urgent {
                        true => self.logind.observe_urgent(now).await,
                        false => self.logind.observe(now).await,
                    }
                };
                let sessions = futures_util::future::join(logind, self.link.observe(now));
                tokio::pin!(sessions);
                loop {
                    tokio::select! {
                        l = &mut list, if listed.is_none() => listed = Some(l),
                        (seen, _) = &mut sessions => break seen,
                    }
                }
            };
            // An urgent cycle whose sessions came before the engine's list evicts at once, from
            // the last list: on a busy machine the list is most of the owner's wait.
            let early = match (&backend, &listed) {
                (Some(b), None) if urgent => {
                    tracing::debug!("sessions before the engine's list: evicting from the last");
                    self.evict_early(b, now, &logind, errors).await
                }
                _ => Early::default(),
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
        // The timer's own jitter is no reason to skip a window: cycles `interval` apart
        // measure every cycle even where the interval is the shortest window (a tick 1.999 s
        // after the last measurement skipped every other one, and the workers' network bytes
        // with it).
        let fresh_cpu =
            !urgent && self.cpu.window_since(now) >= MIN_CPU_WINDOW - MIN_CPU_WINDOW / 10;
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
                    (self.records.status().own_cpu, false)
                }
            }
            _ => (self.records.status().own_cpu, false),
        };
        self.sleep_lock_due = matches!(logind, logind::Seen::Sessions { .. });
        (o.actions, o.own_cpu) = (early.actions, own_cpu);
        o.workers = workers;
        if let Some(host) = early.host {
            // Observed and decided on once, before the list: the cycle goes on with that.
            return (backend, Some(host), early.decided);
        }
        let Some(mut host) = self.observe_host(now, own_cpu, fresh_cpu, logind, errors) else {
            return (backend, None, None);
        };
        if !judged_cpu {
            self.carry_cpu(&mut host, o.workers.is_some());
        } else {
            tracing::debug!(
                "CPU over the last window: machine {:.0}%, pilotd's workers {:.0}%, owner {:.0}%",
                host.cpu_busy * 100.0,
                own_cpu * 100.0,
                host.owner_cpu() * 100.0
            );
        }
        (backend, Some(host), None)
    }

    /// Unless this window was judged, the machine's figure is the last judged one, like the
    /// workers'. Not the probe's: it holds the last refresh, which after an unjudged window
    /// includes a worker the carried own share does not (a cycle right after one read a
    /// just-started worker as 52% of owner load in CI). Where the engine could not list the
    /// workers (`listed` false), the host's own reading stands: all of it may be the owner's.
    fn carry_cpu(&self, host: &mut HostSnapshot, listed: bool) {
        if listed && let Some(last) = &self.last_snapshot {
            host.cpu_busy = last.cpu_busy;
        }
    }

    /// An urgent cycle's evictions decided before the engine's list arrives: the host observed
    /// now with logind's fresh answer, decided on once (the cycle's one decision), and planned
    /// against the workers as the last cycle listed them. Only the plan's leading pauses and
    /// kills are sent; the cycle then plans the same decision against the engine's list, which
    /// shows them paused (or ending), so nothing is done twice. A worker started or gone since
    /// the last list is the full cycle's to handle, a moment later.
    async fn evict_early(
        &mut self,
        b: &B,
        now: DateTime<Utc>,
        logind: &logind::Seen,
        errors: &mut Vec<String>,
    ) -> Early {
        let Some(last) = self.records.status().workers.clone() else {
            return Early::default();
        };
        if !last.iter().any(|w| w.state == WorkerState::Running) {
            return Early::default();
        }
        let own = self.records.status().own_cpu;
        let Some(mut host) = self.observe_host(now, own, false, logind.clone(), errors) else {
            return Early::default();
        };
        // The list is on its way: the CPU carried as the full cycle would carry it.
        self.carry_cpu(&mut host, true);
        let (supply, outlook) = self.decide(now, &host);
        let no_image = ImageState::Unavailable {
            reason: "not asked in an urgent cycle's evictions".into(),
        };
        let plan = plan::plan(
            &supply,
            Observed {
                workers: &last,
                in_flight: &self.work.in_flight,
                backoff: &self.records.status().backoff,
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
        let actions = if quick == 0 {
            Vec::new()
        } else {
            let executed = executor::execute(
                b,
                &plan.actions[..quick],
                &self.worker,
                &mut self.work,
                &mut Interrupt::none(),
            )
            .await;
            self.record_executed(executed, now)
        };
        Early {
            actions,
            host: Some(host),
            decided: Some((supply, outlook)),
        }
    }

    /// Decide: the policy's supply for this observation, with what the learned history
    /// expects; the fleet's spread holds the first start after this daemon started, too.
    fn decide(&self, now: DateTime<Utc>, host: &HostSnapshot) -> (Supply, Outlook) {
        let mut outlook = Outlook::at(&self.s, self.records.history(), now);
        outlook.limits.started = Some(self.started);
        outlook.limits.data = Some(self.records.data_used(&self.s.policy.timezone, now));
        (decide(&self.s.policy, host, outlook.limits, now), outlook)
    }

    /// Plan: the worker image (its registry asked beside the loop when due) and the traffic
    /// filter as they are, and what the decision asks of the engine's list.
    async fn plan(
        &mut self,
        b: &B,
        list: &[Worker],
        supply: &Supply,
        outlook: &Outlook,
        urgent: bool,
        now: DateTime<Utc>,
    ) -> Plan {
        // The registry's check is traffic too: none on a metered link the policy holds.
        if supply.link == LinkHold::Nothing
            && !self.work.in_flight.checking
            && image::check_needed(self.records.image(), &self.worker.image, now, &self.s.image)
        {
            self.work.in_flight.checking = true;
            tasks::spawn_check(&mut self.work.tasks, b, &self.worker.image);
        }
        let pulling = self.work.in_flight.pulling.as_deref();
        let ask = image::state(b, &self.records.status().image, &self.s.image, pulling, now);
        let image_state = self
            .engine
            .image(urgent, async {
                ask.await.unwrap_or_else(|e| ImageState::Unavailable {
                    reason: e.to_string(),
                })
            })
            .await;
        // Beside the loop: the filter of pilotd's network is checked (and repaired) while
        // workers live on it; down, the plan pauses them.
        let live = list.iter().any(|w| !w.state.is_finished());
        let filter_down = self.work.egress.check(self.worker.egress.as_ref(), live);
        plan::plan(
            supply,
            Observed {
                workers: list,
                in_flight: &self.work.in_flight,
                backoff: &self.records.status().backoff,
                image: &image_state,
                free_hours: Some(outlook.free_hours()),
                scratch_use: &self.work.scratch_use,
                filter_down: filter_down.as_deref(),
            },
            &self.worker,
            now,
        )
    }

    /// Act: the plan, evictions first (an urgent trigger stops it before the next start or
    /// resume), what it did into the records; logind's idle lock while workers compute; GC.
    async fn act(
        &mut self,
        b: &B,
        list: &[Worker],
        plan: Plan,
        int: &mut Interrupt<'_>,
        o: &mut CycleOutcome<'_>,
    ) {
        let executed = executor::execute(b, &plan.actions, &self.worker, &mut self.work, int).await;
        if let Some(list) = o.workers.as_mut() {
            after_actions(list, &executed);
        }
        o.actions.extend(self.record_executed(executed, o.now));
        o.notes = plan.notes;
        let computing = o.supply.is_some_and(|s| s.allowed)
            && list.iter().any(|w| w.state == WorkerState::Running);
        self.logind
            .keep_awake(self.s.policy.keep_awake && computing)
            .await;
        if !int.poll() {
            self.gc_if_due(b, list, o.now).await;
        }
    }

    /// Record the cycle's outcome in the status file.
    fn finish(&mut self, mut o: CycleOutcome) {
        o.locks = self.logind.locks();
        o.scratch_use = self.work.scratch_use.clone();
        self.records.record(o);
    }

    /// The action lines of what the executor did, into the records; a start or a removal
    /// opens a CPU window of pilotd's own doing.
    fn record_executed(&mut self, executed: Vec<Executed>, now: DateTime<Utc>) -> Vec<String> {
        let ours = |e: &Executed| matches!(e.action, Action::Start { .. } | Action::Remove { .. });
        if executed.iter().any(ours) {
            self.cpu.acted();
        }
        self.records.executed(&self.s, executed, now)
    }

    /// Records, for every finished worker, its outcome (with the last lines of output of one
    /// that failed) and the job report its pilot printed last, each once per container: read
    /// here, before the plan removes the container. Every end goes through here: a pilot that
    /// ran out of jobs, one evicted by pilotd's signal (condor's graceful stop lets it print
    /// its report first), one stopped for a full scratch (its outcome recorded when the stop
    /// was sent, its report once it has ended), one that failed.
    async fn record_finished(&mut self, b: &B, list: &[Worker], now: DateTime<Utc>) {
        for w in list {
            let status = self.records.status();
            let recorded = status.recorded.iter().any(|r| r == &w.id);
            let reported = status.reported.iter().any(|r| r == &w.id);
            if !w.state.is_finished() || (recorded && reported) {
                continue;
            }
            let outcome = Outcome::from_exit(w.exit_code, w.oom_killed);
            let keep_output = !recorded && outcome.is_failure();
            let tail = if reported && !keep_output {
                Ok(Vec::new())
            } else {
                b.output_tail(&w.id, REPORT_LINES).await
            };
            if !reported {
                let report = match &tail {
                    Ok(lines) => match JobReport::find_last(lines.iter().map(String::as_str)) {
                        Some(Ok(r)) => Report::Found(r, self.claim(w, now)),
                        Some(Err(e)) => Report::Damaged(e),
                        None => Report::Missing,
                    },
                    Err(e) => Report::Unread(e.to_string()),
                };
                self.records.reported(&self.s, &w.id, &w.name, report, now);
            }
            if recorded {
                continue;
            }
            let output = if keep_output {
                match tail {
                    // The image wrote these: no control character reaches the log or a terminal.
                    // and URL credentials are redacted as in the log.
                    Ok(lines) => lines[lines.len().saturating_sub(OUTPUT_LINES)..]
                        .iter()
                        .map(|l| redact::line(l.trim_end_matches('\n'), false))
                        .collect(),
                    Err(e) => vec![format!("(its output could not be read: {e})")],
                }
            } else {
                Vec::new()
            };
            self.records
                .ended(&self.s, &w.id, &w.name, outcome, output, now);
        }
    }

    /// What a finished worker's report can claim: its life (from its creation to its end,
    /// `now` when the engine gave none; zero when its creation is unknown, so a report of a
    /// worker of unknown age is held to the one second of slack `Claim` gives), the host's
    /// CPUs, and its cgroup's use as last read.
    fn claim(&self, w: &Worker, now: DateTime<Utc>) -> Claim {
        let end = w.finished_at.unwrap_or(now);
        Claim {
            lifetime: w
                .created
                .and_then(|c| end.signed_duration_since(c).to_std().ok())
                .unwrap_or_default(),
            cpus: self
                .last_snapshot
                .as_ref()
                .map_or_else(host_cpus, |h| h.cpus),
            measured: self.cpu.used(&w.id).map(|(cpu_seconds, at)| Measured {
                cpu_seconds,
                after: end.signed_duration_since(at).to_std().unwrap_or_default(),
            }),
        }
    }

    /// The engine, described in the log once per connection; `None` (and why, once per
    /// distinct failure) when it cannot be reached.
    async fn connected(&mut self, errors: &mut Vec<String>) -> Option<B> {
        let b = match self.engine.client(&self.s.engine, &mut self.wakeups) {
            Ok(b) => b,
            Err(e) => {
                let msg = e.to_string();
                if self
                    .records
                    .status()
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
        if self.records.status().engine.is_none()
            && let Ok(engine) = b.describe_engine().await
        {
            tracing::info!(engine = %engine, "connected to the container engine");
            self.records.engine_described(Some(engine));
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
        let status = self.records.status();
        let carry = Carry {
            own_cpu,
            owner_busy_since: status.owner_busy_since,
            host_free_since: status.host_free_since,
            throttle: status.throttle,
        };
        #[cfg(test)]
        if let Some(synthetic) = &mut self.synthetic_host {
            return Some(synthetic(now, carry));
        }
        let mut s = match self.probe.observe(now, carry, refresh_cpu) {
            Ok(mut s) => {
                logind::lay_on(&mut s, logind);
                s
            }
            Err(e) => {
                errors.push(e.to_string());
                let Some(last) = &self.last_snapshot else {
                    tracing::error!("{e}; nothing to decide on yet");
                    return None;
                };
                HostSnapshot {
                    taken_at: now,
                    sessions: Sessions::Unknown(format!("host probe failed: {e}")),
                    ..last.clone()
                }
            }
        };
        s.sleeping = self.sleeping;
        s.input_idle_s = self.input.idle_s(now);
        metered::lay_on(&mut s, self.link.seen());
        snooze::lay_on(&mut s, &self.s.state_dir);
        Some(s)
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
        tasks::spawn_measure(&mut self.work.tasks, &self.worker.scratch_root, running);
    }

    /// Collects finished scratch dirs and old images every `gc_interval`.
    async fn gc_if_due(&mut self, b: &B, list: &[Worker], now: DateTime<Utc>) {
        let every = chrono::Duration::from_std(self.s.gc_interval).unwrap_or_default();
        if self.work.collected_at.is_some_and(|t| now - t < every) {
            return;
        }
        self.work.collected_at = Some(now);
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
                self.records.status().image.digest.as_deref(),
                &self.records.status().pulled_images,
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
        if let Ok(local) = b.list_images(&repository).await {
            self.records.keep_pulls(&local);
        }
    }

    /// Starts a manifest fetch beside the loop when one is due (never blocks a cycle).
    fn fetch_manifest_if_due(&mut self, now: DateTime<Utc>) {
        let Some(r) = self.s.remote.clone() else {
            return;
        };
        if self.refresh.start_if_due(now, r.refresh, &self.s.fleet) {
            tasks::spawn_manifest_fetch(
                &mut self.work.tasks,
                r,
                self.s.image.allowed.clone(),
                self.s.worker.env.clone(),
            );
        }
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
            (Action::Limit { id, nano_cpus, .. }, Ok(_)) => {
                if let Some(w) = list.iter_mut().find(|w| &w.id == id) {
                    w.nano_cpus = Some(*nano_cpus);
                }
                continue;
            }
            _ => continue,
        };
        if let Some(w) = list.iter_mut().find(|w| &w.id == id) {
            w.state = state;
        }
    }
}

/// The machine's CPUs when no host observation is at hand.
fn host_cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}
