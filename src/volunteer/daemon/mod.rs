//! The volunteer daemon: a tokio reconcile loop. Every `interval`, and at once when the utmp
//! file changes, a worker exits, a long operation finishes or the decision's `next_change`
//! arrives, it runs one cycle: observe (host probe, workers from the runtime, their CPU) →
//! decide (`policy::decide`, pure) → plan (`volunteer::plan`, pure) → apply (backend).
//!
//! Crash safety: nothing about workers is kept in memory across cycles that the runtime does
//! not also hold; each cycle starts from `list_workers`, so a restarted daemon adopts every
//! labelled container as it is. A failed list is not an empty list: the cycle then starts
//! nothing, removes nothing and says why in the status file.
//!
//! Long operations (a graceful stop may take the whole `grace`, a pull minutes) run as tasks
//! beside the loop, so an owner logging in is never stuck behind them.
//!
//! Signals: SIGHUP reloads pilotd.toml and the policy (an invalid file is reported and the last
//! good configuration stays); SIGTERM/SIGINT drain: no new action starts, running operations
//! get a short while to finish, the status is written, and workers are left to the next
//! pilotd (or stopped gracefully with `[worker] on_shutdown = "stop"`).

pub mod triggers;

use crate::config::site::OnShutdown;
use crate::config::{self, Config, SiteFile};
use crate::service::metrics::Metrics;
use crate::volunteer::backend::{self, AnyBackend, Backend, BackendError};
use crate::volunteer::history::{self, History, Outlook};
use crate::volunteer::host::{Carry, HostProbe, ProbeError};
use crate::volunteer::manifest::{self, Manifest};
use crate::volunteer::outcome::Outcome;
use crate::volunteer::plan::{self as volunteer, Action, InFlight, Observed, Reason};
use crate::volunteer::policy::{Supply, decide};
use crate::volunteer::settings::{Settings, WorkerSettings};
use crate::volunteer::snapshot::{HostSnapshot, Sessions};
use crate::volunteer::status::{self as state, Decision, OutcomeRecord, PulledImage, Status};
use crate::volunteer::worker::ImageState;
use crate::volunteer::worker::{CpuSample, Worker, WorkerSpec, WorkerState};
use crate::volunteer::{gc, image};
use chrono::{DateTime, SecondsFormat, Utc};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use triggers::Trigger;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("cannot install the {which} signal handler: {source}")]
    Signal {
        which: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error(
        "the volunteer daemon runs in volunteer mode only; this pilotd.toml says mode = \"{0}\""
    )]
    Mode(&'static str),
}

/// A hook called once with a one-line summary of the daemon's state.
pub type SummaryOnce = Box<dyn FnOnce(&str) + Send>;
/// A hook called after every cycle with a one-line summary.
pub type SummaryEach = Box<dyn FnMut(&str) + Send>;

/// Calls into the service layer (systemd notification, a detached parent waiting for
/// readiness). Each is optional; the daemon works the same without them.
#[derive(Default)]
pub struct Hooks {
    /// After the first complete cycle, with a one-line summary.
    pub ready: Option<SummaryOnce>,
    /// On SIGHUP, before the reload.
    pub reloading: Option<Box<dyn FnMut() + Send>>,
    /// After every cycle, with a one-line summary (systemd STATUS=, watchdog).
    pub cycle_done: Option<SummaryEach>,
    /// When the drain starts.
    pub stopping: Option<Box<dyn FnOnce() + Send>>,
    /// Prometheus series to keep up to date (the listener is the caller's).
    pub metrics: Option<Metrics>,
}

/// A long operation that finished beside the loop.
enum TaskDone {
    Stopped {
        id: String,
        name: String,
        result: Result<(), BackendError>,
    },
    Pulled {
        pinned: String,
        digest: String,
        result: Result<crate::volunteer::worker::LocalImage, BackendError>,
    },
    Manifest(Result<Manifest, manifest::ManifestError>),
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

struct Daemon {
    /// pilotd.toml's settings (the manifest may lay choices over `worker`).
    s: Settings,
    site_path: PathBuf,
    policy_override: Option<PathBuf>,
    /// The worker template in force: pilotd.toml's, with the manifest laid over it.
    worker: WorkerSettings,
    backend: Option<AnyBackend>,
    probe: HostProbe,
    last_snapshot: Option<HostSnapshot>,
    status: Status,
    status_path: PathBuf,
    in_flight: InFlight,
    cpu_prev: HashMap<String, CpuSample>,
    tasks: JoinSet<TaskDone>,
    last_gc: Option<DateTime<Utc>>,
    next_change: Option<DateTime<Utc>>,
    triggers: mpsc::Sender<Trigger>,
    /// Learned availability, saved every cycle.
    history: History,
    last_cycle: Option<DateTime<Utc>>,
    /// The pool's last good manifest, and when to fetch it next.
    manifest: Option<Manifest>,
    manifest_due: Option<DateTime<Utc>>,
    manifest_fetching: bool,
    metrics: Option<Metrics>,
    /// The last decision, to log each change once.
    last_decision: Option<String>,
}

/// Runs the daemon until SIGTERM or SIGINT. Needs a tokio runtime with IO and time enabled.
pub async fn run(
    cfg: Config,
    site_path: PathBuf,
    policy_override: Option<PathBuf>,
    mut hooks: Hooks,
) -> Result<(), DaemonError> {
    if cfg.site.mode != config::Mode::Volunteer {
        return Err(DaemonError::Mode(cfg.site.mode.as_str()));
    }
    let s = Settings::resolve(&cfg);
    let sig = |kind: SignalKind, which: &'static str| {
        signal(kind).map_err(|source| DaemonError::Signal { which, source })
    };
    let mut hup = sig(SignalKind::hangup(), "SIGHUP")?;
    let mut term = sig(SignalKind::terminate(), "SIGTERM")?;
    let mut int = sig(SignalKind::interrupt(), "SIGINT")?;

    let (tx, mut rx) = mpsc::channel::<Trigger>(8);
    let mut probe = HostProbe::new(s.probe.clone())?;
    probe.prime();
    let status_path = state::path(&s.state_dir);
    let loaded = history::load(&s.state_dir, s.policy.timezone);
    if let Some(w) = &loaded.warning {
        tracing::warn!("{w}");
    }
    let last_manifest = if s.remote.is_some() {
        match manifest::load_last_good(&s.state_dir) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("{e}; waiting for a fresh manifest");
                None
            }
        }
    } else {
        None
    };
    let mut d = Daemon {
        worker: worker_for(&s, last_manifest.as_ref()),
        history: loaded.history,
        last_cycle: None,
        manifest: last_manifest,
        manifest_due: None,
        manifest_fetching: false,
        metrics: hooks.metrics.take(),
        last_decision: None,
        status: restore(&status_path, &s, Utc::now()),
        status_path,
        site_path,
        policy_override,
        backend: None,
        probe,
        last_snapshot: None,
        in_flight: InFlight::default(),
        cpu_prev: HashMap::new(),
        tasks: JoinSet::new(),
        last_gc: None,
        next_change: None,
        triggers: tx.clone(),
        s,
    };
    tracing::info!(
        instance = %d.worker.instance,
        image = %d.worker.image,
        socket = %d.s.engine.socket,
        state = %d.status_path.display(),
        "pilotd starting in volunteer mode"
    );
    tokio::spawn(triggers::watch_utmp(d.s.probe.utmp.clone(), tx.clone()));

    let mut interval = tokio::time::interval(d.s.interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    loop {
        // A login must evict within a second; the engine's CPU statistics of a running
        // container can take a second to answer (its collector ticks once a second), so a
        // cycle triggered by utmp decides on the CPU share measured in the previous cycle.
        let mut urgent = false;
        let until_change = d
            .next_change
            .and_then(|t| (t - Utc::now()).to_std().ok())
            .unwrap_or(Duration::from_secs(86_400))
            // A moment after the instant, so the decision has really changed.
            + Duration::from_millis(50);
        tokio::select! {
            _ = interval.tick() => {}
            Some(t) = rx.recv() => {
                tracing::debug!(trigger = ?t, "cycle triggered");
                urgent = t == Trigger::Sessions;
                // Coalesce a burst (utmp is written in several steps).
                while let Ok(t) = rx.try_recv() {
                    urgent |= t == Trigger::Sessions;
                }
            }
            Some(done) = d.tasks.join_next(), if !d.tasks.is_empty() => {
                if let Ok(done) = done {
                    d.task_done(done, Utc::now());
                }
                while let Some(Ok(done)) = d.tasks.try_join_next() {
                    d.task_done(done, Utc::now());
                }
            }
            _ = tokio::time::sleep(until_change) => {}
            _ = hup.recv() => {
                if let Some(h) = hooks.reloading.as_mut() {
                    h();
                }
                d.reload();
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
        let summary = d.cycle(Utc::now(), urgent).await;
        if first {
            first = false;
            if let Some(h) = hooks.ready.take() {
                h(&summary);
            }
        }
        if let Some(h) = hooks.cycle_done.as_mut() {
            h(&summary);
        }
    }
    if let Some(h) = hooks.stopping.take() {
        h();
    }
    d.drain().await;
    Ok(())
}

/// Worker settings from pilotd.toml with the pool's manifest laid over it.
fn worker_for(s: &Settings, m: Option<&Manifest>) -> WorkerSettings {
    m.map_or_else(|| s.worker.clone(), |m| m.overlay(&s.worker))
}

fn metric_state(s: &WorkerState) -> &'static str {
    match s {
        WorkerState::Running => "running",
        WorkerState::Paused => "paused",
        WorkerState::Exited => "exited",
        WorkerState::Created => "created",
        _ => "other",
    }
}

/// Takes back what a previous pilotd recorded. Latches only when recent: an old "host free
/// since" would start workers without the owner's `free_for`.
fn restore(path: &Path, cfg: &Settings, now: DateTime<Utc>) -> Status {
    let mut s = Status {
        pid: std::process::id(),
        instance: cfg.engine.instance.clone(),
        ..Default::default()
    };
    match state::load(path) {
        Ok(Some(prev)) => {
            let fresh_for = chrono::Duration::from_std(cfg.interval * 3)
                .unwrap_or_default()
                .max(chrono::Duration::minutes(2));
            if prev.updated_at.is_some_and(|t| now - t <= fresh_for) {
                s.owner_busy_since = prev.owner_busy_since;
                s.host_free_since = prev.host_free_since;
            }
            if prev.instance == s.instance {
                s.backoff = prev.backoff;
                s.recorded = prev.recorded;
                s.outcomes = prev.outcomes;
            }
            s.image = prev.image;
            s.pulled_images = prev.pulled_images;
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("{e}; starting with an empty status"),
    }
    s
}

impl Daemon {
    fn backend(&mut self) -> Result<AnyBackend, BackendError> {
        if let Some(b) = &self.backend {
            return Ok(b.clone());
        }
        let b = backend::connect(&self.s.engine)?;
        tokio::spawn(triggers::watch_workers(b.clone(), self.triggers.clone()));
        self.backend = Some(b.clone());
        Ok(b)
    }

    /// One cycle; returns a one-line summary.
    async fn cycle(&mut self, now: DateTime<Utc>, urgent: bool) -> String {
        let started = std::time::Instant::now();
        let summary = self.cycle_inner(now, urgent).await;
        // Written after the cycle acted: an fsync must never delay the eviction of a login.
        if let Err(e) = history::save(&self.s.state_dir, &self.history) {
            tracing::error!("{e}");
        }
        if let Some(m) = &self.metrics {
            m.cycle_seconds.observe(started.elapsed().as_secs_f64());
            m.backoff_level.set(i64::from(self.status.backoff.failures));
            if let Some(list) = &self.status.workers {
                let mut counts: HashMap<&'static str, i64> = HashMap::new();
                for w in list {
                    *counts.entry(metric_state(&w.state)).or_default() += 1;
                }
                m.set_workers(counts);
            }
        }
        summary
    }

    async fn cycle_inner(&mut self, now: DateTime<Utc>, urgent: bool) -> String {
        self.fetch_manifest_if_due(now);
        let mut errors: Vec<String> = Vec::new();
        let backend = match self.backend() {
            Ok(b) => Some(b),
            Err(e) => {
                let msg = e.to_string();
                // Once per distinct failure, not every cycle.
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
                None
            }
        };
        if self.status.engine.is_none()
            && let Some(AnyBackend::Docker(b)) = &backend
            && let Ok(engine) = b.describe_engine().await
        {
            tracing::info!(engine = %engine, "connected to the container engine");
            self.status.engine = Some(engine);
        }
        let workers = match &backend {
            Some(b) => match b.list_workers().await {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::error!(
                        "{e}; no worker is started or removed until the list works again"
                    );
                    errors.push(e.to_string());
                    None
                }
            },
            None => None,
        };
        let own_cpu = match (&backend, &workers) {
            (Some(b), Some(w)) if !urgent => self.measure_cpu(b, w).await,
            _ => self.status.own_cpu,
        };

        let carry = Carry {
            own_cpu,
            owner_busy_since: self.status.owner_busy_since,
            host_free_since: self.status.host_free_since,
        };
        let snapshot = match self.probe.observe(now, carry) {
            Ok(s) => s,
            Err(e) => {
                errors.push(e.to_string());
                // Fail safe toward the owner: decide as if someone were here.
                match &self.last_snapshot {
                    Some(last) => HostSnapshot {
                        taken_at: now,
                        sessions: Sessions::Unknown(format!("host probe failed: {e}")),
                        ..last.clone()
                    },
                    None => {
                        tracing::error!("{e}; nothing to decide on yet");
                        self.finish(now, None, &[], &[], errors, workers);
                        return "host probe failed".into();
                    }
                }
            }
        };
        let outlook = Outlook::at(&self.s, &self.history, now);
        let supply = decide(&self.s.policy, &snapshot, outlook.limits, now);
        self.learn(now, &supply);
        self.log_decision_change(&supply);
        self.last_snapshot = Some(snapshot);
        self.status.owner_busy_since = supply.owner_busy_since;
        self.status.host_free_since = supply.host_free_since;
        self.status.own_cpu = own_cpu;
        self.next_change = supply.next_change;

        let (Some(b), Some(list)) = (backend, workers.clone()) else {
            let summary = format!(
                "engine unavailable; {}",
                supply.reasons.first().cloned().unwrap_or_default()
            );
            self.finish(now, Some(&supply), &[], &[], errors, workers);
            return summary;
        };

        image::refresh(
            &b,
            &mut self.status.image,
            &self.worker.image,
            now,
            &self.s.image,
        )
        .await;
        let image_state = match image::state(
            &b,
            &self.status.image,
            &self.s.image,
            self.in_flight.pulling.as_deref(),
            now,
        )
        .await
        {
            Ok(s) => s,
            Err(e) => ImageState::Unavailable {
                reason: e.to_string(),
            },
        };
        let plan = volunteer::plan(
            &supply,
            Observed {
                workers: &list,
                in_flight: &self.in_flight,
                backoff: &self.status.backoff,
                image: &image_state,
                free_hours: Some(outlook.free_hours()),
            },
            &self.worker,
            now,
        );
        let done = self.apply(&b, &plan.actions, now).await;
        self.gc_if_due(&b, &list, now).await;
        // Forget recorded outcomes of containers that are gone.
        self.status
            .recorded
            .retain(|id| list.iter().any(|w| &w.id == id));
        let summary = format!(
            "{} worker(s), target {}; {}",
            list.iter()
                .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused))
                .count(),
            supply.workers,
            supply.reasons.first().cloned().unwrap_or_default()
        );
        self.finish(now, Some(&supply), &done, &plan.notes, errors, workers);
        summary
    }

    fn finish(
        &mut self,
        now: DateTime<Utc>,
        supply: Option<&Supply>,
        actions: &[String],
        notes: &[String],
        errors: Vec<String>,
        workers: Option<Vec<Worker>>,
    ) {
        self.status.updated_at = Some(now);
        self.status.pid = std::process::id();
        if let Some(s) = supply {
            self.status.decision = Some(Decision::of(s, now));
        }
        if !actions.is_empty() {
            self.status.last_actions = actions.to_vec();
        }
        self.status.notes = notes.to_vec();
        self.status.last_error = (!errors.is_empty()).then(|| errors.join("; "));
        self.status.workers = workers;
        if let Err(e) = state::save(&self.status_path, &self.status) {
            tracing::error!("{e}");
        }
    }

    async fn measure_cpu(&mut self, b: &AnyBackend, workers: &[Worker]) -> f64 {
        let running: Vec<&Worker> = workers
            .iter()
            .filter(|w| w.state == WorkerState::Running)
            .collect();
        let samples =
            futures_util::future::join_all(running.iter().map(|w| b.cpu_sample(&w.id))).await;
        let mut total = 0.0;
        let mut next = HashMap::new();
        for (w, s) in running.iter().zip(samples) {
            match s {
                Ok(s) => {
                    if let Some(p) = self.cpu_prev.get(&w.id) {
                        total += s.fraction_since(*p).unwrap_or(0.0);
                    }
                    next.insert(w.id.clone(), s);
                }
                Err(e) => tracing::debug!(worker = %w.name, "{e}"),
            }
        }
        self.cpu_prev = next;
        f64::min(total, 1.0)
    }

    async fn apply(
        &mut self,
        b: &AnyBackend,
        actions: &[Action],
        now: DateTime<Utc>,
    ) -> Vec<String> {
        let mut done = Vec::new();
        let mut start_failed = false;
        for a in actions {
            let line = a.to_string();
            if let (Some(m), Some(mode)) = (&self.metrics, a.reason().and_then(Reason::eviction)) {
                m.count_eviction(mode.as_str());
            }
            let result: Result<(), String> = match a {
                Action::Pause { id, name, why } => b
                    .pause(id)
                    .await
                    .map(|()| tracing::info!(worker = %name, "paused: {why}"))
                    .map_err(|e| e.to_string()),
                Action::Unpause { id, name, why } => b
                    .unpause(id)
                    .await
                    .map(|()| tracing::info!(worker = %name, "resumed: {why}"))
                    .map_err(|e| e.to_string()),
                Action::Kill { id, name, why } => b
                    .kill(id)
                    .await
                    .map(|()| tracing::info!(worker = %name, "killed: {why}"))
                    .map_err(|e| e.to_string()),
                Action::Stop {
                    id,
                    name,
                    grace_s,
                    why,
                } => {
                    tracing::info!(worker = %name, grace_s, "stopping: {why}");
                    self.in_flight.stopping.insert(id.clone());
                    let (b, id, name, grace) = (
                        b.clone(),
                        id.clone(),
                        name.clone(),
                        Duration::from_secs(*grace_s),
                    );
                    self.tasks.spawn(async move {
                        let result = b.stop(&id, grace).await;
                        TaskDone::Stopped { id, name, result }
                    });
                    Ok(())
                }
                Action::Remove { id, name, outcome } => {
                    if let Some(o) = outcome {
                        self.record_outcome(id, name, o.clone(), now);
                    }
                    match b.remove(id).await {
                        Ok(()) => {
                            self.remove_scratch(name);
                            tracing::info!(worker = %name, "removed");
                            Ok(())
                        }
                        Err(e) => Err(e.to_string()),
                    }
                }
                Action::Pull { repository, digest } => {
                    let pinned = format!("{repository}@{digest}");
                    tracing::info!(image = %pinned, "pulling");
                    self.in_flight.pulling = Some(digest.clone());
                    let (b, repository, digest) = (b.clone(), repository.clone(), digest.clone());
                    self.tasks.spawn(async move {
                        let result = b.pull_image(&repository, &digest).await;
                        TaskDone::Pulled {
                            pinned,
                            digest,
                            result,
                        }
                    });
                    Ok(())
                }
                Action::Start { spec } => {
                    if start_failed {
                        continue;
                    }
                    match self.start(b, spec).await {
                        Ok(()) => Ok(()),
                        Err(e) => {
                            start_failed = true;
                            self.record_outcome(
                                &spec.name,
                                &spec.name,
                                Outcome::StartFailed { message: e.clone() },
                                now,
                            );
                            Err(e)
                        }
                    }
                }
            };
            match result {
                Ok(()) => done.push(line),
                Err(e) => {
                    tracing::error!("{line}: {e}");
                    done.push(format!("FAILED {line}: {e}"));
                }
            }
        }
        done
    }

    async fn start(&mut self, b: &AnyBackend, spec: &WorkerSpec) -> Result<(), String> {
        prepare_scratch(&spec.scratch_dir, spec.user.as_deref())?;
        match b.start(spec).await {
            Ok(id) => {
                tracing::info!(
                    worker = %spec.name,
                    id = %id.get(..12).unwrap_or(&id),
                    cpus = spec.nano_cpus / 1_000_000_000,
                    memory_mib = spec.memory_bytes >> 20,
                    image = %spec.image_pinned,
                    die_at = spec.labels.get(crate::volunteer::worker::labels::DIE_AT).map(String::as_str).unwrap_or("-"),
                    "started"
                );
                Ok(())
            }
            Err(e) => {
                self.remove_scratch(&spec.name);
                Err(e.to_string())
            }
        }
    }

    fn remove_scratch(&self, name: &str) {
        // Only ever a dir named after one of this instance's workers.
        if !name.starts_with(&self.worker.name_prefix()) || name.contains('/') {
            return;
        }
        let dir = self.worker.scratch_root.join(name);
        if let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(
                "cannot remove scratch dir {}: {e}; GC retries later",
                dir.display()
            );
        }
    }

    fn record_outcome(&mut self, id: &str, name: &str, outcome: Outcome, now: DateTime<Utc>) {
        if self.status.recorded.iter().any(|r| r == id) {
            return;
        }
        let before = self.status.backoff.failures;
        self.status.backoff = self
            .status
            .backoff
            .after(&outcome, now, self.worker.backoff);
        let b = &self.status.backoff;
        if b.failures > before {
            tracing::warn!(
                worker = name,
                failures = b.failures,
                next_start = %b.not_before.map(rfc3339).unwrap_or_default(),
                "worker ended without running a job: {outcome}; backing off"
            );
        } else {
            tracing::info!(worker = name, "worker ended: {outcome}");
        }
        self.status.recorded.push(id.to_string());
        self.status.outcomes.push(OutcomeRecord {
            name: name.to_string(),
            at: now,
            outcome,
        });
        let excess = self
            .status
            .outcomes
            .len()
            .saturating_sub(state::OUTCOMES_KEPT);
        self.status.outcomes.drain(..excess);
    }

    fn task_done(&mut self, done: TaskDone, now: DateTime<Utc>) {
        match done {
            TaskDone::Stopped { id, name, result } => {
                self.in_flight.stopping.remove(&id);
                match result {
                    Ok(()) => tracing::info!(worker = %name, "stopped"),
                    Err(e) => tracing::error!(worker = %name, "stop failed: {e}"),
                }
            }
            TaskDone::Manifest(result) => {
                self.manifest_fetching = false;
                match result {
                    Ok(m) => {
                        let changed = self.manifest.as_ref() != Some(&m);
                        if changed {
                            if let Err(e) = manifest::store(&self.s.state_dir, &m) {
                                tracing::error!("{e}");
                            }
                            tracing::info!(version = %m.version, "remote manifest applied");
                            self.worker = worker_for(&self.s, Some(&m));
                            self.manifest = Some(m);
                        }
                    }
                    // What stays in force first, so the first line of the log says it all.
                    Err(e) => tracing::error!(
                        "keeping {}: {e}",
                        self.manifest
                            .as_ref()
                            .map(|m| format!("the last good manifest (version {})", m.version))
                            .unwrap_or_else(|| "pilotd.toml's own settings".into())
                    ),
                }
            }
            TaskDone::Pulled {
                pinned,
                digest,
                result,
            } => {
                if self.in_flight.pulling.as_deref() == Some(digest.as_str()) {
                    self.in_flight.pulling = None;
                }
                match result {
                    Ok(img) => {
                        tracing::info!(image = %pinned, id = %img.id, "pulled");
                        if let Some(m) = &self.metrics {
                            m.image_pulls.inc();
                            m.image_pull_bytes.inc_by(img.size);
                        }
                        self.status.pulled_images.retain(|p| p.id != img.id);
                        self.status.pulled_images.push(PulledImage {
                            id: img.id,
                            pinned,
                            pulled_at: now,
                        });
                    }
                    Err(e) => {
                        let refresh = self.s.image.refresh;
                        image::record_failure(
                            &mut self.status.image,
                            &format!("pulling {pinned}"),
                            &e,
                            now,
                            refresh,
                        );
                    }
                }
            }
        }
    }

    async fn gc_if_due(&mut self, b: &AnyBackend, list: &[Worker], now: DateTime<Utc>) {
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
        let (repository, _, _) = crate::volunteer::worker::split_reference(&self.worker.image);
        match b.list_images(&repository).await {
            Ok(local) => items.extend(gc::images(
                &local,
                self.status.image.digest.as_deref(),
                &self.status.pulled_images,
                list,
            )),
            Err(e) => tracing::warn!("{e}; image GC skipped this time"),
        }
        for c in gc::apply(b, &items, self.s.policy.grace).await {
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
        if self.manifest_fetching || self.manifest_due.is_some_and(|t| now < t) {
            return;
        }
        self.manifest_due = Some(now + chrono::Duration::from_std(r.refresh).unwrap_or_default());
        self.manifest_fetching = true;
        let allowed = self.s.image.allowed.clone();
        let local_env = self.s.worker.env.clone();
        self.tasks.spawn(async move {
            TaskDone::Manifest(
                manifest::fetch(&r.url, r.max_bytes, r.timeout, &allowed, &local_env).await,
            )
        });
    }

    /// Counts the time since the last cycle into the availability history. "Free" is about the
    /// owner and the host only (not the schedule), so the history shows when this machine is
    /// really free, including hours the policy does not open.
    fn learn(&mut self, now: DateTime<Utc>, supply: &Supply) {
        use crate::volunteer::policy::Cause;
        let cap = chrono::Duration::from_std(self.s.interval * 2).unwrap_or_default();
        // Whole seconds are counted and the remainder carried to the next cycle: cycles can
        // come less than a second apart (events), and dropping the fractions would lose them.
        let (elapsed, counted_until) = match self.last_cycle {
            None => (chrono::Duration::zero(), now),
            // A gap (suspend, stopped daemon) counts as at most two intervals.
            Some(t) if now - t > cap => (cap, now),
            Some(t) => {
                let whole = chrono::Duration::seconds((now - t).num_seconds().max(0));
                (whole, t + whole)
            }
        };
        self.last_cycle = Some(counted_until);
        let busy = supply.causes.iter().any(|c| {
            matches!(
                c,
                Cause::OwnerPresent
                    | Cause::SessionsUnknown
                    | Cause::OnBattery
                    | Cause::ExclusiveProcess
                    | Cause::OwnerCpuHigh
                    | Cause::OwnerCpuEvict
            )
        });
        self.history
            .record(self.s.policy.timezone, now, elapsed, !busy);
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
                s.reasons.join("; ")
            );
            self.last_decision = Some(now);
        }
    }

    fn reload(&mut self) {
        let machine = crate::volunteer::host::this_machine();
        match config::load(
            &self.site_path,
            SiteFile::Required,
            self.policy_override.as_deref(),
            machine,
        ) {
            Ok(cfg) if cfg.site.mode != config::Mode::Volunteer => tracing::error!(
                "reload: pilotd.toml now says mode = \"{}\", which needs a restart; keeping the last good configuration",
                cfg.site.mode.as_str()
            ),
            Ok(cfg) => {
                let s = Settings::resolve(&cfg);
                if s.engine != self.s.engine {
                    self.backend = None;
                    self.status.engine = None;
                }
                if s.probe.utmp != self.s.probe.utmp {
                    tracing::warn!(
                        "reload: the utmp path changed; it is read from now on, but watched for changes only after a restart"
                    );
                }
                self.probe = match HostProbe::new(s.probe.clone()) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::error!("reload: {e}; keeping the last good configuration");
                        return;
                    }
                };
                self.probe.prime();
                self.worker = worker_for(&s, self.manifest.as_ref());
                self.s = s;
                // A new URL or refresh takes effect at once.
                self.manifest_due = None;
                tracing::info!("configuration reloaded");
            }
            Err(e) => tracing::error!("reload failed, keeping the last good configuration:\n{e}"),
        }
    }

    /// SIGTERM: let running operations finish briefly (or stop the workers when configured),
    /// write the status, return.
    async fn drain(&mut self) {
        let mut wait = Duration::from_secs(5);
        if self.s.on_shutdown == OnShutdown::Stop
            && let Some(b) = self.backend.clone()
        {
            let grace = self.s.policy.grace;
            wait = grace + Duration::from_secs(10);
            if let Ok(list) = b.list_workers().await {
                for w in list
                    .iter()
                    .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused))
                {
                    if w.state == WorkerState::Paused {
                        let _ = b.unpause(&w.id).await;
                    }
                    tracing::info!(worker = %w.name, "stopping: {}", Reason::Shutdown);
                    let (b, id, name) = (b.clone(), w.id.clone(), w.name.clone());
                    self.tasks.spawn(async move {
                        let result = b.stop(&id, grace).await;
                        TaskDone::Stopped { id, name, result }
                    });
                }
            }
        }
        tracing::info!(
            "draining: waiting up to {}s for running operations",
            wait.as_secs()
        );
        let deadline = tokio::time::Instant::now() + wait;
        while !self.tasks.is_empty() {
            match tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
                Ok(Some(Ok(done))) => self.task_done(done, Utc::now()),
                Ok(Some(Err(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        self.tasks.abort_all();
        self.status.updated_at = Some(Utc::now());
        if let Err(e) = state::save(&self.status_path, &self.status) {
            tracing::error!("{e}");
        }
        tracing::info!("pilotd stopped; running workers are adopted by the next pilotd");
    }
}

/// Creates a worker's scratch dir (owned by the worker's user when one is configured).
fn prepare_scratch(dir: &Path, user: Option<&str>) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "cannot create scratch dir {}: {e}\n  hint: check [host] scratch in pilotd.toml",
            dir.display()
        )
    })?;
    if let Some(user) = user {
        let mut ids = user.split(':').map(|s| s.parse::<u32>().ok());
        if let Some(Some(uid)) = ids.next() {
            let gid = ids.next().flatten();
            nix::unistd::chown(
                dir,
                Some(nix::unistd::Uid::from_raw(uid)),
                gid.map(nix::unistd::Gid::from_raw),
            )
            .map_err(|e| {
                format!(
                    "cannot give scratch dir {} to uid {uid}: {e}",
                    dir.display()
                )
            })?;
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot set permissions of {}: {e}", dir.display()))?;
    Ok(())
}
