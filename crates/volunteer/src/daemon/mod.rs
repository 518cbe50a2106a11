//! Volunteer mode's reconcile loop: observe, decide, act, record.

mod beside;
mod cpu;
mod cycle;
mod executor;
mod record;
mod tasks;
#[cfg(test)]
mod tests;
pub mod triggers;

use crate::backend::{Backend, BackendError};
use crate::contribution::{self, Contribution};
use crate::control;
use crate::egress;
use crate::history::{self, Learner};
use crate::host::{HostProbe, ProbeError};
use crate::input::LastInput;
use crate::logind::{Logind, Signal};
use crate::manifest::{self, Manifest};
use crate::owner;
use crate::page::{self, Doors};
use crate::plan::{InFlight, Reason};
use crate::settings::{EngineSettings, Settings, WorkerSettings};
use crate::snapshot::HostSnapshot;
use crate::status::{self, Status};
use crate::timeline::{self, Recorder};
use crate::worker::WorkerState;
use beside::control_context;
use chrono::{DateTime, Utc};
use cpu::CpuMeter;
use pilotd_core::config::site::OnShutdown;
use pilotd_core::config::{Config, Mode};
use pilotd_core::service::lifecycle::{self, Hooks, Reconciler, Reload, Wake};
use pilotd_core::service::listener::Stop;
use pilotd_core::service::metrics::Metrics;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tasks::TaskDone;
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};
use triggers::{Interrupt, Trigger};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
}

/// Tests only: what the host probe would see at `now`, given what the daemon carries (the
/// latches, its workers' CPU share). Lets a test drive the real cycle at synthetic instants
/// through a scripted month of presence and load.
#[cfg(test)]
pub(super) type SyntheticHost =
    Box<dyn FnMut(DateTime<Utc>, crate::host::Carry) -> HostSnapshot + Send>;

/// Makes the engine client from its settings (no request is made yet).
pub type Connector<B> = Box<dyn Fn(&EngineSettings) -> Result<B, BackendError> + Send>;

/// Runs the daemon for `s` until `shutdown` completes: readiness, watchdog, reloads and the
/// drain are the service skeleton's. Needs a tokio runtime with IO and time enabled.
pub async fn run(
    s: Settings,
    metrics: Option<Metrics>,
    hooks: Hooks,
    shutdown: impl Future<Output = ()>,
    reloads: mpsc::Receiver<Reload>,
) -> Result<(), DaemonError> {
    let mut d = Daemon::new(s, Box::new(crate::backend::connect), metrics, Utc::now())?;
    tracing::info!(
        instance = %d.worker.instance,
        image = %d.worker.image,
        socket = %d.s.engine.socket,
        state = %d.status_path.display(),
        "pilotd starting in volunteer mode"
    );
    d.serve(hooks, shutdown, reloads).await;
    Ok(())
}

/// The container engine: connected when first needed, and again after a reload that changed
/// its settings.
struct Engine<B> {
    connect: Connector<B>,
    backend: Option<B>,
    /// The engine's event watch of `backend` (ended when the engine changes).
    events: Option<AbortHandle>,
}

/// What wakes the loop before the next tick.
struct Wakeups {
    tx: mpsc::Sender<Trigger>,
    /// Home between cycles; lent to the running cycle (`triggers::Interrupt`).
    rx: Option<mpsc::Receiver<Trigger>>,
    /// A trigger arrived during the last cycle: the next one is due at once.
    again: Option<Wake>,
    interval: tokio::time::Interval,
    /// When the decision changes by the clock alone.
    next_change: Option<DateTime<Utc>>,
}

/// Operations started and not finished (long graceful stops, pulls, manifest fetches).
struct Work {
    in_flight: InFlight,
    tasks: JoinSet<TaskDone>,
    /// KiB in each worker's scratch dir at the last measurement, and when it was started.
    scratch_use: BTreeMap<String, crate::disk::ScratchUse>,
    measured_at: Option<DateTime<Utc>>,
    measuring: bool,
    /// The workers' traffic filter: checked every cycle, ensured before every start.
    egress: egress::Guard,
}

/// What was last written to the state dir, and when (to write only what changed).
#[derive(Default)]
struct Saved {
    status: Option<(Status, DateTime<Utc>)>,
    history: Option<DateTime<Utc>>,
    timeline: Option<DateTime<Utc>>,
}

/// The volunteer daemon: volunteer mode's reconcile loop, driven by the service skeleton
/// (`service::lifecycle::serve`). Every `interval`, and at once when the utmp file changes, a
/// worker exits, a long operation finishes or the decision's `next_change` arrives, it runs
/// one cycle (`cycle.rs`): observe (host probe, workers from the engine, their CPU) → decide
/// (`policy::decide`, pure) → plan (`plan::plan`, pure) → execute (`executor.rs`) → record
/// (`record.rs`: outcomes and back-off, the status file, the history, the contribution).
/// `cpu.rs` measures the workers' own share of the CPU that the owner's load is computed
/// without, and the CPU time they gave.
///
/// Crash safety: nothing about workers is kept in memory across cycles that the engine does
/// not also hold; each cycle starts from `list_workers`, so a restarted daemon adopts every
/// labelled container as it is. A failed list is not an empty list: the cycle then starts
/// nothing, removes nothing and says why in the status file.
///
/// Long operations (a graceful stop may take the whole `grace`, a pull minutes, a manifest
/// fetch its timeout) run as tasks beside the loop (`tasks.rs`), so an owner logging in is
/// never stuck behind them. The watchers beside the loop (`beside.rs`: utmp, logind, input
/// devices, firewalld, the engine's events) are the daemon's own (`watchers`, a `JoinSet`):
/// the drain ends them, so `serve` returns with nothing of its left running.
///
/// The engine is injected (`Connector`): Docker in production, the recording fake in the
/// tests below. Signals are the edge's business (`cmd/run`): the loop only sees a shutdown
/// future and a stream of reloaded configurations.
///
/// The daemon's state between cycles, by part.
pub struct Daemon<B> {
    /// pilotd.toml's settings.
    s: Settings,
    /// The worker template in force: pilotd.toml's, with the pool's manifest laid over it.
    worker: WorkerSettings,
    engine: Engine<B>,
    probe: HostProbe,
    /// The last good observation: a failing probe decides on it as if the owner were here.
    last_snapshot: Option<HostSnapshot>,
    /// What `pilotd status` reads, and a restarted daemon takes back.
    status: Status,
    status_path: PathBuf,
    saved: Saved,
    work: Work,
    cpu: CpuMeter,
    wakeups: Wakeups,
    last_gc: Option<DateTime<Utc>>,
    /// Learned availability, saved every cycle.
    learner: Learner,
    /// What the machine gave, saved with the history.
    contribution: Contribution,
    /// When the owner was there, stretch by stretch (what `projection` replays), saved every
    /// `TIMELINE_EVERY`.
    presence: Recorder,
    /// Tests only: the host observation, instead of the probe's (`tests::agreement`).
    #[cfg(test)]
    synthetic_host: Option<SyntheticHost>,
    /// The pool's last good manifest, and when to fetch it next.
    manifest: Option<Manifest>,
    refresh: manifest::Refresh,
    /// When this daemon started: its first start waits for the fleet's spread after it.
    started: DateTime<Utc>,
    metrics: Option<Metrics>,
    /// The last decision, to log each change once.
    last_decision: Option<String>,
    /// The slot-ad lines last written (`<state_dir>/ad/slot.ad`).
    advertised: Option<String>,
    /// systemd-logind: sessions, their locks, the sleep and idle inhibitor locks.
    logind: Logind,
    /// The worker image as the last cycle saw it (an urgent cycle plans with it).
    last_image: Option<crate::worker::ImageState>,
    /// logind announced a sleep and no wake-up yet: workers make room, nothing starts.
    sleeping: bool,
    /// When the machine's keyboards, mice and touchpads last had input (`input::watch`).
    input: Arc<LastInput>,
    /// What the control socket's and the page's servers carry the owner's requests out with
    /// (kept current across reloads); None before they are served.
    control: Option<watch::Sender<owner::Context>>,
    /// The status page's invitations and sessions (shared with the control socket, which
    /// hands out the invitations).
    doors: Doors,
    /// The status page as served since start: its port, and whether pilotd holds it (None:
    /// `[page] port` unset, or not listening yet).
    page: Option<owner::PageDoor>,
    /// The control socket's and the status page's servers, and what ends them (`drain`).
    owner_servers: JoinSet<()>,
    owner_stop: Stop,
    /// The watchers beside the loop (utmp, logind, input, firewalld, the engine's events, the
    /// owner's wake-ups): the daemon's own, aborted by the drain and when it is dropped.
    watchers: JoinSet<()>,
}

impl<B: Backend> Daemon<B> {
    /// A daemon for `s`, taking back what the state dir remembers (status, history, the last
    /// good manifest) as of `now`. Spawns nothing: `run` starts the watchers.
    pub fn new(
        s: Settings,
        connect: Connector<B>,
        metrics: Option<Metrics>,
        now: DateTime<Utc>,
    ) -> Result<Daemon<B>, DaemonError> {
        let mut probe = HostProbe::new(s.probe.clone())?;
        probe.prime();
        let status_path = status::path(&s.state_dir);
        let loaded = history::load(&s.state_dir, &s.policy.timezone);
        let ledger = contribution::load(&s.state_dir);
        let recorded = timeline::load(&s.state_dir);
        for w in [&loaded.warning, &ledger.warning, &recorded.warning]
            .into_iter()
            .flatten()
        {
            tracing::warn!("{w}");
        }
        let manifest = if s.remote.is_some() {
            match manifest::load_checked(&s.state_dir, &s.image.allowed, &s.worker.env) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!("{e}; waiting for a fresh manifest");
                    None
                }
            }
        } else {
            None
        };
        let (tx, rx) = mpsc::channel::<Trigger>(8);
        let interval = cycle_timer(s.interval);
        Ok(Daemon {
            // `load_checked` held the manifest to today's limits already.
            worker: manifest::worker_template(&s, manifest.as_ref()).worker,
            engine: Engine {
                connect,
                backend: None,
                events: None,
            },
            probe,
            last_snapshot: None,
            status: restore(&status_path, &s, now),
            status_path,
            saved: Saved::default(),
            work: Work {
                in_flight: InFlight::default(),
                tasks: JoinSet::new(),
                scratch_use: BTreeMap::new(),
                measured_at: None,
                measuring: false,
                egress: {
                    let tx = tx.clone();
                    egress::Guard::new(move || {
                        let _ = tx.try_send(Trigger::Filter);
                    })
                },
            },
            cpu: CpuMeter::default(),
            wakeups: Wakeups {
                tx,
                rx: Some(rx),
                again: None,
                interval,
                next_change: None,
            },
            last_gc: None,
            learner: Learner::new(loaded.history),
            contribution: Contribution::new(ledger.ledger),
            presence: Recorder::new(recorded.timeline),
            #[cfg(test)]
            synthetic_host: None,
            manifest,
            refresh: manifest::Refresh::starting(now, &s.fleet),
            started: now,
            metrics,
            last_decision: None,
            advertised: None,
            control: None,
            doors: Doors::default(),
            page: None,
            owner_servers: JoinSet::new(),
            owner_stop: Stop::new(),
            watchers: JoinSet::new(),
            logind: Logind::default().looking_in(&s.probe.proc, &s.probe.dev),
            sleeping: false,
            last_image: None,
            input: {
                let input = LastInput::new(now);
                input.set_wake_gap(s.policy.session_idle);
                input
            },
            s,
        })
    }

    /// The status as the last cycle left it (what `pilotd status` reads).
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// The engine client, connecting (and starting its event watch) when there is none.
    fn backend(&mut self) -> Result<B, BackendError> {
        if let Some(b) = &self.engine.backend {
            return Ok(b.clone());
        }
        let b = (self.engine.connect)(&self.s.engine)?;
        if let Some(old) = self.engine.events.take() {
            old.abort();
        }
        self.engine.events = Some(
            self.watchers
                .spawn(triggers::watch_workers(b.clone(), self.wakeups.tx.clone())),
        );
        self.engine.backend = Some(b.clone());
        Ok(b)
    }
}

/// At most this many cycles run back to back when urgent triggers keep arriving during them;
/// then the service loop gets its turn (a reload, the shutdown).
const BACK_TO_BACK: usize = 3;

impl<B: Backend> Daemon<B> {
    /// logind said the machine goes to sleep (true) or woke up (false).
    fn sleep_announced(&mut self, going: bool) {
        if going != self.sleeping {
            if going {
                tracing::info!("the machine is going to sleep: workers make room first");
            } else {
                tracing::info!(
                    "the machine woke up: nothing resumes or starts before a fresh look at the owner"
                );
            }
        }
        self.sleeping = going;
    }

    fn triggered(&mut self, t: &Trigger) -> bool {
        if let Trigger::Sleep(going) = t {
            self.sleep_announced(*going);
        }
        t.is_urgent()
    }

    /// After a cycle decided for a sleep: let logind go on once the workers made room. A
    /// graceful stop's request must reach the engine first, so running stops get up to
    /// `SLEEP_HOLD` (well within logind's default 5 s delay) before the lock goes.
    async fn let_the_sleep_go(&mut self) {
        if !self.logind.holds_sleep_lock() {
            return;
        }
        if !self.work.in_flight.stopping.is_empty() {
            let until = tokio::time::Instant::now() + SLEEP_HOLD;
            while !self.work.tasks.is_empty() {
                match tokio::time::timeout_at(until, self.work.tasks.join_next()).await {
                    Ok(Some(Ok(done))) => self.task_done(done, Utc::now()),
                    Ok(Some(Err(_))) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }
        self.logind.release_sleep_lock();
        tracing::info!("workers made room; the machine may sleep");
    }
}

/// The next trigger; never, while a cycle has the channel (it is home between cycles).
/// Cancel-safe, as `wake` must be.
async fn next_trigger(rx: &mut Option<mpsc::Receiver<Trigger>>) -> Option<Trigger> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// How long a sleep waits for graceful stops to be under way (see `let_the_sleep_go`).
const SLEEP_HOLD: Duration = Duration::from_secs(3);

impl<B: Backend> Reconciler for Daemon<B> {
    async fn wake(&mut self) -> Wake {
        if let Some(w) = self.wakeups.again.take() {
            return w;
        }
        // A moment after `next_change`, so the decision has really changed.
        let until_change = self
            .wakeups
            .next_change
            .and_then(|t| (t - Utc::now()).to_std().ok())
            .unwrap_or(Duration::from_secs(86_400))
            + Duration::from_millis(50);
        // A login must evict at once; the engine's CPU statistics of a running container
        // take a while under load, so a cycle woken by the owner decides on the CPU share
        // measured in the previous cycle.
        let mut urgent = false;
        tokio::select! {
            _ = self.wakeups.interval.tick() => {}
            Some(t) = next_trigger(&mut self.wakeups.rx) => {
                tracing::debug!(trigger = ?t, "cycle triggered");
                urgent = self.triggered(&t);
                // Coalesce a burst (utmp is written in several steps).
                while let Some(t) = self.wakeups.rx.as_mut().and_then(|rx| rx.try_recv().ok()) {
                    urgent |= self.triggered(&t);
                }
            }
            Some(done) = self.work.tasks.join_next(), if !self.work.tasks.is_empty() => {
                if let Ok(done) = done {
                    self.task_done(done, Utc::now());
                }
                while let Some(Ok(done)) = self.work.tasks.try_join_next() {
                    self.task_done(done, Utc::now());
                }
            }
            _ = tokio::time::sleep(until_change) => {}
        }
        Wake { urgent }
    }

    async fn reconcile(&mut self, wake: Wake) -> String {
        let Some(mut rx) = self.wakeups.rx.take() else {
            return self.cycle(Utc::now(), wake.urgent).await;
        };
        let mut urgent = wake.urgent;
        let mut summary = String::new();
        for round in 1..=BACK_TO_BACK {
            let mut int = Interrupt::new(&mut rx);
            let done = self.cycle_with(Utc::now(), urgent, &mut int).await;
            let sleeping_cycle = self.sleeping && done.is_some();
            if let Some(going) = int.sleep {
                self.sleep_announced(going);
            }
            if int.again {
                self.wakeups.again = Some(Wake::default());
            }
            if sleeping_cycle && self.sleeping {
                self.let_the_sleep_go().await;
            }
            if let Some(s) = done {
                summary = s;
            }
            if !int.urgent {
                break;
            }
            // The owner came back during this cycle: decide again at once, or right after
            // the service loop had its turn.
            urgent = true;
            if round == BACK_TO_BACK {
                self.wakeups.again = Some(Wake { urgent: true });
            }
        }
        self.wakeups.rx = Some(rx);
        summary
    }

    type ReloadError = ProbeError;

    fn mode(&self) -> Mode {
        Mode::Volunteer
    }

    fn reload(&mut self, cfg: Config) -> Result<(), ProbeError> {
        let s = Settings::resolve(&cfg);
        let mut probe = HostProbe::new(s.probe.clone())?;
        probe.prime();
        if s.engine != self.s.engine {
            self.engine.backend = None;
            self.status.engine = None;
        }
        if s.probe.utmp != self.s.probe.utmp {
            tracing::warn!(
                "reload: the utmp path changed; it is read from now on, but watched for changes only after a restart"
            );
        }
        self.probe = probe;
        if let Some(c) = &self.control {
            c.send_replace(control_context(&s, &self.page));
        }
        if s.page_port != self.page.as_ref().map(|p| p.port) && self.control.is_some() {
            tracing::warn!(
                "reload: [page] port changed; the page is served as at start (and `pilotd open` sends browsers there) until a restart"
            );
        }
        if s.control_socket != self.s.control_socket {
            tracing::warn!(
                "reload: control_socket changed; the daemon listens on the new path only after a restart"
            );
        }
        let template = manifest::worker_template(&s, self.manifest.as_ref());
        if let Some(e) = template.refused {
            // The reload narrowed what the site allows: the manifest goes whole, and the next
            // fetch is held to the new limits.
            tracing::warn!("reload: {e}; pilotd.toml's own worker settings apply");
            self.manifest = None;
        }
        self.worker = template.worker;
        self.input.set_wake_gap(s.policy.session_idle);
        if s.interval != self.s.interval {
            // The timer was built from the old interval; the first tick of a new one is now.
            self.wakeups.interval = cycle_timer(s.interval);
        }
        self.s = s;
        self.refresh.reset();
        Ok(())
    }

    /// Lets running operations finish briefly (or stops the workers when configured), writes
    /// the status.
    async fn drain(&mut self) {
        let mut wait = Duration::from_secs(5);
        if self.s.on_shutdown == OnShutdown::Stop
            && let Some(b) = self.engine.backend.clone()
        {
            let grace = self.s.policy.grace;
            wait = grace.saturating_add(Duration::from_secs(10));
            if let Ok(list) = b.list_workers().await {
                for w in list
                    .iter()
                    .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused))
                {
                    if w.state == WorkerState::Paused {
                        let _ = b.unpause(&w.id).await;
                    }
                    tracing::info!(worker = %w.name, "stopping: {}", Reason::Shutdown);
                    tasks::spawn_stop(&mut self.work.tasks, &b, &w.id, &w.name, grace);
                }
            }
        }
        tracing::info!(
            "draining: waiting up to {}s for running operations",
            wait.as_secs()
        );
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(wait)
            .unwrap_or(now + Duration::from_secs(86_400));
        while !self.work.tasks.is_empty() {
            match tokio::time::timeout_at(deadline, self.work.tasks.join_next()).await {
                Ok(Some(Ok(done))) => self.task_done(done, Utc::now()),
                Ok(Some(Err(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        self.work.tasks.abort_all();
        // The owner's servers end (their listeners closed) before their socket goes: a
        // server still accepting would answer on a path that no longer exists.
        self.owner_stop.stop();
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            while self.owner_servers.join_next().await.is_some() {}
        })
        .await;
        if self.control.is_some() {
            let _ = std::fs::remove_file(&self.s.control_socket);
        }
        self.watchers.shutdown().await;
        self.status.updated_at = Some(Utc::now());
        if let Err(e) = status::save(&self.status_path, &self.status) {
            tracing::error!("{e}");
        }
        if let Err(e) = history::save(&self.s.state_dir, &self.learner.history) {
            tracing::error!("{e}");
        }
        if let Err(e) = contribution::save(&self.s.state_dir, &self.contribution.ledger) {
            tracing::error!("{e}");
        }
        if let Err(e) = timeline::save(&self.s.state_dir, &self.presence.timeline) {
            tracing::error!("{e}");
        }
        tracing::info!("pilotd stopped; running workers are adopted by the next pilotd");
    }
}

/// Takes back what a previous pilotd recorded. Latches only when recent: an old "host free
/// since" would start workers without the owner's `free_for`.
fn restore(path: &Path, s: &Settings, now: DateTime<Utc>) -> Status {
    let mut status = Status {
        pid: std::process::id(),
        instance: s.engine.instance.clone(),
        ..Default::default()
    };
    match status::load(path) {
        Ok(Some(prev)) => {
            let fresh_for = pilotd_core::horizon::delta(s.interval.saturating_mul(3))
                .max(chrono::Duration::minutes(2));
            if prev.updated_at.is_some_and(|t| now - t <= fresh_for) {
                status.owner_busy_since = prev.owner_busy_since;
                status.host_free_since = prev.host_free_since;
            }
            if prev.instance == status.instance {
                status.backoff = prev.backoff;
                status.recorded = prev.recorded;
                status.reported = prev.reported;
                status.outcomes = prev.outcomes;
            }
            status.image = prev.image;
            status.pulled_images = prev.pulled_images;
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("{e}; starting with an empty status"),
    }
    status
}

/// The cycle timer: a tick every `interval`, the first at once; a late tick delays the next
/// ones rather than bursting to catch up.
fn cycle_timer(interval: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(interval);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}
