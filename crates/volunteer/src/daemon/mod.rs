//! Volunteer mode's reconcile loop: observe, decide, act, record.

mod cpu;
mod cycle;
mod doors;
mod engine;
mod executor;
mod record;
mod tasks;
#[cfg(test)]
mod tests;
pub(crate) mod triggers;

use crate::act::backend::{Backend, BackendError};
use crate::act::egress;
use crate::decide::plan::{InFlight, Reason};
use crate::observe::host::{HostProbe, ProbeError};
use crate::observe::input::LastInput;
use crate::observe::logind::Logind;
use crate::observe::metered::Link;
use crate::record::manifest::{self, Manifest};
use crate::record::status::Status;
use crate::settings::{EngineSettings, Settings, WorkerSettings};
use crate::snapshot::HostSnapshot;
use crate::worker::WorkerState;
use chrono::{DateTime, Utc};
use cpu::CpuMeter;
use doors::OwnerDoors;
use engine::Engine;
use pilotd_core::config::site::OnShutdown;
use pilotd_core::config::{Config, Mode};
use pilotd_core::service::lifecycle::{self, Hooks, Reconciler, Reload, Wake};
use pilotd_core::service::metrics::Metrics;
use record::Records;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tasks::TaskDone;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use triggers::{Interrupt, Trigger, Wakeups};

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
    Box<dyn FnMut(DateTime<Utc>, crate::observe::host::Carry) -> HostSnapshot + Send>;

/// Makes the engine client from its settings (no request is made yet).
pub(crate) type Connector<B> = Box<dyn Fn(&EngineSettings) -> Result<B, BackendError> + Send>;

/// Runs the daemon for `s` until `shutdown` completes: readiness, watchdog, reloads and the
/// drain are the service skeleton's. Needs a tokio runtime with IO and time enabled.
pub async fn run(
    s: Settings,
    metrics: Option<Metrics>,
    hooks: Hooks,
    shutdown: impl Future<Output = ()>,
    reloads: mpsc::Receiver<Reload>,
) -> Result<(), DaemonError> {
    let mut d = Daemon::new(
        s,
        Box::new(crate::act::backend::connect),
        metrics,
        Utc::now(),
    )?;
    tracing::info!(
        instance = %d.worker.instance,
        image = %d.worker.image,
        socket = %d.s.engine.socket,
        state = %crate::record::status::path(&d.s.state_dir).display(),
        "pilotd starting in volunteer mode"
    );
    d.serve(hooks, shutdown, reloads).await;
    Ok(())
}

/// Operations started and not finished (long graceful stops, pulls, manifest fetches), and
/// the upkeep that runs on its own cadence.
struct Work {
    in_flight: InFlight,
    tasks: JoinSet<TaskDone>,
    /// KiB in each worker's scratch dir at the last measurement, and when it was started.
    scratch_use: BTreeMap<String, crate::worker::ScratchUse>,
    measured_at: Option<DateTime<Utc>>,
    measuring: bool,
    /// When scratch dirs and images were last collected.
    collected_at: Option<DateTime<Utc>>,
    /// The workers' traffic filter: checked every cycle, ensured before every start.
    egress: egress::Guard,
}

/// The volunteer daemon: volunteer mode's reconcile loop, driven by the service skeleton
/// (`service::lifecycle::serve`), a cycle (`cycle.rs`) per wake-up (`triggers.rs`). Its state
/// is held by owners — the engine (`engine.rs`), the records (`record.rs`), the owner's doors
/// (`doors.rs`), the wake-ups and their watchers (`triggers.rs`), the long operations run
/// beside the loop so that an owner's return is never stuck behind them (`tasks.rs`) — beside
/// the settings and what the cycle observes with. The drain ends all it started, so `serve`
/// returns with nothing of its left running.
///
/// Crash safety: nothing about workers is kept in memory across cycles that the engine does
/// not also hold; each cycle starts from `list_workers`, so a restarted daemon adopts every
/// labelled container as it is. A failed list is not an empty list: the cycle then starts
/// nothing, removes nothing and says why in the status file.
///
/// The engine is injected (`Connector`): Docker in production, the recording fake in the
/// tests below. Signals are the edge's business (`cmd/run`): the loop only sees a shutdown
/// future and a stream of reloaded configurations.
pub struct Daemon<B> {
    /// pilotd.toml's settings.
    s: Settings,
    /// The worker template in force: pilotd.toml's, with the pool's manifest laid over it.
    worker: WorkerSettings,
    /// The pool's last good manifest, and when to fetch it next.
    manifest: Option<Manifest>,
    refresh: manifest::Refresh,
    /// When this daemon started: its first start waits for the fleet's spread after it.
    started: DateTime<Utc>,
    metrics: Option<Metrics>,
    engine: Engine<B>,
    records: Records,
    doors: OwnerDoors,
    wakeups: Wakeups,
    work: Work,
    cpu: CpuMeter,
    probe: HostProbe,
    /// The last good observation: a failing probe decides on it as if the owner were here.
    last_snapshot: Option<HostSnapshot>,
    /// systemd-logind: sessions, their locks, the sleep and idle inhibitor locks.
    logind: Logind,
    /// logind announced a sleep and no wake-up yet: workers make room, nothing starts.
    sleeping: bool,
    /// This cycle reached logind: its sleep delay lock is (re)taken once the cycle acted.
    sleep_lock_due: bool,
    /// NetworkManager: whether the link is metered.
    link: Link,
    /// When the machine's keyboards, mice and touchpads last had input (`input::watch`).
    input: Arc<LastInput>,
    /// Tests only: the host observation, instead of the probe's (`tests::agreement`).
    #[cfg(test)]
    synthetic_host: Option<SyntheticHost>,
}

impl<B: Backend> Daemon<B> {
    /// A daemon for `s`, taking back what the state dir remembers (status, history, the last
    /// good manifest) as of `now`. Spawns nothing: `serve` starts the watchers.
    pub(crate) fn new(
        s: Settings,
        connect: Connector<B>,
        metrics: Option<Metrics>,
        now: DateTime<Utc>,
    ) -> Result<Daemon<B>, DaemonError> {
        let mut probe = HostProbe::new(s.probe.clone())?;
        probe.prime();
        // Said once: where there is no sensor, pilotd reads nothing and the comfort limits
        // have nothing to act on.
        let sensors = probe.sensors();
        if sensors.is_empty() && s.policy.comfort.limits_set() {
            tracing::warn!(
                "{}: max_temperature and max_fan have nothing to act on (a virtual machine shows no sensor)",
                sensors.said()
            );
        } else {
            tracing::info!("{}", sensors.said());
        }
        let records = Records::load(&s, metrics.clone(), now);
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
        let wakeups = Wakeups::new(s.interval);
        let filter = wakeups.sender();
        Ok(Daemon {
            // `load_checked` held the manifest to today's limits already.
            worker: manifest::worker_template(&s, manifest.as_ref()).worker,
            manifest,
            refresh: manifest::Refresh::starting(now, &s.fleet),
            started: now,
            metrics,
            engine: Engine::new(connect),
            records,
            doors: OwnerDoors::default(),
            wakeups,
            work: Work {
                in_flight: InFlight::default(),
                tasks: JoinSet::new(),
                scratch_use: BTreeMap::new(),
                measured_at: None,
                measuring: false,
                collected_at: None,
                egress: egress::Guard::new(move || {
                    let _ = filter.try_send(Trigger::Filter);
                }),
            },
            cpu: CpuMeter::default(),
            probe,
            last_snapshot: None,
            logind: Logind::default().looking_in(&s.probe.proc, &s.probe.dev),
            sleeping: false,
            sleep_lock_due: false,
            link: Link::default(),
            input: {
                let input = LastInput::new(now);
                input.set_wake_gap(s.policy.session_idle);
                input
            },
            #[cfg(test)]
            synthetic_host: None,
            s,
        })
    }

    /// The status as the last cycle left it (what `pilotd status` reads).
    pub(crate) fn status(&self) -> &Status {
        self.records.status()
    }

    /// Serves until `shutdown` completes: the watchers beside the loop (utmp, logind, input
    /// devices, firewalld, NetworkManager), the owner's doors, then the service skeleton's loop. Every task
    /// started here is the daemon's and ends with the drain, so a loop driven in-process
    /// leaves nothing running behind it.
    pub(crate) async fn serve(
        &mut self,
        hooks: Hooks,
        shutdown: impl Future<Output = ()>,
        reloads: mpsc::Receiver<Reload>,
    ) {
        let (input, guard) = (self.input.clone(), self.work.egress.clone());
        self.wakeups.watch_the_machine(
            &self.s,
            input,
            guard,
            self.link.heard(),
            self.logind.news(),
        );
        self.doors.open(&self.s, &mut self.wakeups).await;
        lifecycle::serve(self, hooks, shutdown, reloads).await;
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
            self.take_in_tasks(tokio::time::Instant::now() + SLEEP_HOLD)
                .await;
        }
        self.logind.release_sleep_lock();
        tracing::info!("workers made room; the machine may sleep");
    }

    /// Takes in the operations that finish before `until`.
    async fn take_in_tasks(&mut self, until: tokio::time::Instant) {
        while !self.work.tasks.is_empty() {
            match tokio::time::timeout_at(until, self.work.tasks.join_next()).await {
                Ok(Some(Ok(done))) => self.task_done(done, Utc::now()),
                Ok(Some(Err(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}

/// How long a sleep waits for graceful stops to be under way (see `let_the_sleep_go`).
const SLEEP_HOLD: Duration = Duration::from_secs(3);

impl<B: Backend> Reconciler for Daemon<B> {
    async fn wake(&mut self) -> Wake {
        if let Some(w) = self.wakeups.take_again() {
            return w;
        }
        // A login must evict at once; the engine's CPU statistics of a running container
        // take a while under load, so a cycle woken by the owner decides on the CPU share
        // measured in the previous cycle.
        let mut urgent = false;
        let next_change = self.status().decision.as_ref().and_then(|d| d.next_change);
        tokio::select! {
            woke = self.wakeups.next(next_change) => for t in woke {
                urgent |= self.triggered(&t);
            },
            Some(done) = self.work.tasks.join_next(), if !self.work.tasks.is_empty() => {
                if let Ok(done) = done {
                    self.task_done(done, Utc::now());
                }
                while let Some(Ok(done)) = self.work.tasks.try_join_next() {
                    self.task_done(done, Utc::now());
                }
            }
        }
        Wake { urgent }
    }

    async fn reconcile(&mut self, wake: Wake) -> String {
        let Some(mut rx) = self.wakeups.lend() else {
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
                self.wakeups.again(Wake::default());
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
                self.wakeups.again(Wake { urgent: true });
            }
        }
        self.wakeups.give_back(rx);
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
            self.engine.forget();
            self.records.engine_described(None);
        }
        if s.probe.utmp != self.s.probe.utmp {
            tracing::warn!(
                "reload: the utmp path changed; it is read from now on, but watched for changes only after a restart"
            );
        }
        self.probe = probe;
        self.doors.reloaded(&self.s, &s);
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
            self.wakeups.retime(s.interval);
        }
        self.s = s;
        self.refresh.reset();
        Ok(())
    }

    /// Lets running operations finish briefly (or stops the workers when configured), writes
    /// the records.
    async fn drain(&mut self) {
        let mut wait = Duration::from_secs(5);
        if self.s.on_shutdown == OnShutdown::Stop
            && let Some(b) = self.engine.connected()
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
        self.take_in_tasks(deadline).await;
        self.work.tasks.abort_all();
        self.doors.close(&self.s).await;
        self.wakeups.shutdown().await;
        self.records.save_all(&self.s, Utc::now());
        tracing::info!("pilotd stopped; running workers are adopted by the next pilotd");
    }
}
