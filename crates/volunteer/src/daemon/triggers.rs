//! What wakes the loop (`Wakeups`): the tick every `interval`, the decision's `next_change`,
//! and the triggers that the watchers beside it send — utmp, logind, input devices, firewalld,
//! NetworkManager, the engine's events, the owner's doors. The watchers are the daemon's own: the drain ends
//! them, as does dropping the daemon, so nothing of it is left running.
//!
//! The owner's return must evict within a second, so utmp is watched with inotify; where
//! inotify is unavailable (some container filesystems, exhausted watches) the file's mtime and
//! size are polled every 250 ms instead — still well under the one-second goal, at the cost of
//! a few stat calls per second.

use crate::act::backend::{Backend, BackendEvent};
use crate::act::egress;
use crate::observe::inotify::{DirWatch, InotifyError};
use crate::observe::input::LastInput;
use crate::observe::logind::{SessionNews, Signal};
use crate::observe::metered;
use crate::settings::Settings;
use chrono::{DateTime, Utc};
use nix::sys::inotify::AddWatchFlags;
use pilotd_core::backoff::Backoff;
use pilotd_core::service::lifecycle::Wake;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

/// Why a cycle was triggered early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// utmp or logind: a login, a logout, a lock or unlock, idleness.
    Sessions,
    /// The owner snoozed or resumed (the control socket): acted on as urgently as a login.
    Owner,
    /// Keyboard or mouse input after a quiet spell (the machine's input devices).
    Input,
    /// logind's PrepareForSleep: true before a suspend, false after the wake-up.
    Sleep(bool),
    WorkerExited(String),
    /// The workers' traffic filter went down or came back.
    Filter,
    /// NetworkManager said the link's price changed, or came or went: a metered link must
    /// stop a pull or pause workers as soon as a login would.
    Link,
}

impl Trigger {
    /// The owner may be waiting: decide on what is known, without the slow observations,
    /// and interrupt a regular cycle's observations to do so.
    pub(crate) fn is_urgent(&self) -> bool {
        matches!(
            self,
            Trigger::Sessions | Trigger::Owner | Trigger::Input | Trigger::Sleep(_) | Trigger::Link
        )
    }
}

/// The trigger channel, lent to a running cycle: it notices an urgent trigger as soon as it
/// arrives (the owner logged in while the regular cycle measured CPU or listed images), so
/// the cycle can drop what it was observing, or stop before its next start, and let an urgent
/// cycle run at once. Triggers that are not urgent only ask for one more cycle.
#[derive(Default)]
pub struct Interrupt<'a> {
    rx: Option<&'a mut mpsc::Receiver<Trigger>>,
    /// An urgent trigger arrived during this cycle.
    pub urgent: bool,
    /// Any other trigger arrived: one more cycle is due.
    pub again: bool,
    /// logind's sleep announcements seen during this cycle, last one last.
    pub sleep: Option<bool>,
}

impl<'a> Interrupt<'a> {
    pub(crate) fn new(rx: &'a mut mpsc::Receiver<Trigger>) -> Self {
        Interrupt {
            rx: Some(rx),
            ..Interrupt::none()
        }
    }

    /// One that never fires (tests and one-shot cycles).
    pub(crate) fn none() -> Self {
        Interrupt::default()
    }

    fn note(&mut self, t: Trigger) {
        if let Trigger::Sleep(going) = t {
            self.sleep = Some(going);
        }
        if t.is_urgent() {
            self.urgent = true;
        } else {
            self.again = true;
        }
    }

    /// Whether an urgent trigger has arrived by now (does not wait).
    pub(crate) fn poll(&mut self) -> bool {
        while let Some(t) = self.rx.as_mut().and_then(|rx| rx.try_recv().ok()) {
            self.note(t);
        }
        self.urgent
    }

    /// Completes when an urgent trigger arrives; never when there is no channel. Cancel-safe.
    pub(crate) async fn arrived(&mut self) {
        if self.urgent {
            return;
        }
        loop {
            let Some(rx) = self.rx.as_mut() else {
                return std::future::pending().await;
            };
            match rx.recv().await {
                Some(t) => {
                    let urgent = t.is_urgent();
                    self.note(t);
                    if urgent {
                        return;
                    }
                }
                None => return std::future::pending().await,
            }
        }
    }
}

const POLL: Duration = Duration::from_millis(250);

/// Watches `utmp` until `tx` closes. Watches the directory, not the file: login managers and
/// `utmpdump -r > file` replace or truncate it, and a file that does not exist yet must be
/// noticed when it appears.
pub(crate) async fn watch_utmp(utmp: PathBuf, tx: mpsc::Sender<Trigger>) {
    match inotify_watch(&utmp, &tx).await {
        Ok(()) => return,
        Err(e) => tracing::warn!(
            utmp = %utmp.display(),
            "cannot watch the utmp file with inotify ({e}); polling it every {}ms instead",
            POLL.as_millis()
        ),
    }
    poll_watch(&utmp, &tx).await;
}

/// Why the utmp file cannot be watched with inotify (polling takes over).
#[derive(Debug, thiserror::Error)]
enum WatchError {
    #[error(transparent)]
    Watch(#[from] InotifyError),
    #[error("reading inotify events: {0}")]
    Read(std::io::Error),
}

async fn inotify_watch(utmp: &Path, tx: &mpsc::Sender<Trigger>) -> Result<(), WatchError> {
    let dir = utmp
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = utmp.file_name().map(|n| n.to_os_string());
    let watch = DirWatch::new(
        dir,
        AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE,
    )?;
    loop {
        let events = watch.events().await.map_err(WatchError::Read)?;
        let ours = events
            .iter()
            .any(|e| e.name.is_none() || e.name.as_ref() == file_name.as_ref());
        // A full channel already holds a pending trigger: nothing is lost.
        if ours && let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(Trigger::Sessions) {
            return Ok(());
        }
    }
}

async fn poll_watch(utmp: &Path, tx: &mpsc::Sender<Trigger>) {
    let stamp = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().ok(), m.len()))
    };
    let mut last = stamp(utmp);
    loop {
        tokio::time::sleep(POLL).await;
        let now = stamp(utmp);
        if now != last {
            last = now;
            if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(Trigger::Sessions) {
                return;
            }
        }
    }
}

/// How a broken event stream is reconnected: 2 s after the first failure, doubling to 30 s.
const RECONNECT: Backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(30));
/// After a stream that ended cleanly (the engine closed it), reconnect soon.
const RECONNECT_CLEAN: Duration = Duration::from_secs(1);

/// Forwards "a worker exited" from the engine, reconnecting with a delay when the stream
/// breaks (engine restart). Missing an event only delays the reaction to the next tick.
pub(crate) async fn watch_workers(backend: impl Backend, tx: mpsc::Sender<Trigger>) {
    let mut failures = 0u32;
    loop {
        let (etx, mut erx) = mpsc::channel::<BackendEvent>(16);
        let forward = async {
            while let Some(BackendEvent::WorkerExited { name, .. }) = erx.recv().await {
                if let Err(mpsc::error::TrySendError::Closed(_)) =
                    tx.try_send(Trigger::WorkerExited(name))
                {
                    return;
                }
            }
        };
        let (result, ()) = tokio::join!(backend.watch(etx), forward);
        if tx.is_closed() {
            return;
        }
        let wait = match result {
            Ok(()) => {
                failures = 0;
                RECONNECT_CLEAN
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = RECONNECT.delay(failures);
                tracing::debug!("worker event stream broke ({e}); reconnecting in {wait:?}");
                wait
            }
        };
        tokio::time::sleep(wait).await;
    }
}

pub(super) struct Wakeups {
    tx: mpsc::Sender<Trigger>,
    /// Home between cycles; lent to the running cycle (`triggers::Interrupt`).
    rx: Option<mpsc::Receiver<Trigger>>,
    /// A trigger arrived during the last cycle: the next one is due at once.
    again: Option<Wake>,
    interval: tokio::time::Interval,
    watchers: JoinSet<()>,
}

impl Wakeups {
    pub(super) fn new(interval: Duration) -> Wakeups {
        let (tx, rx) = mpsc::channel::<Trigger>(8);
        Wakeups {
            tx,
            rx: Some(rx),
            again: None,
            interval: cycle_timer(interval),
            watchers: JoinSet::new(),
        }
    }

    pub(super) fn sender(&self) -> mpsc::Sender<Trigger> {
        self.tx.clone()
    }

    pub(super) fn watch(&mut self, w: impl Future<Output = ()> + Send + 'static) -> AbortHandle {
        self.watchers.spawn(w)
    }

    /// Watches the machine: utmp, logind, the input devices, firewalld and NetworkManager.
    pub(super) fn watch_the_machine(
        &mut self,
        s: &Settings,
        input: Arc<LastInput>,
        guard: egress::Guard,
        link: metered::Heard,
        sessions: SessionNews,
    ) {
        self.watch(watch_utmp(s.probe.utmp.clone(), self.sender()));
        let tx = self.sender();
        self.watch(crate::observe::logind::watch(move |signal| {
            // Anything but an inhibitor's news may concern the sessions: the next look lists
            // them anew (an urgent one after inhibitor news alone need not).
            if signal != Signal::Inhibitors {
                sessions.set();
            }
            let t = match signal {
                // An idle inhibitor taken or released is someone starting or ending a film or
                // a presentation: acted on as urgently as a login.
                Signal::Sessions | Signal::Inhibitors => Trigger::Sessions,
                Signal::Sleep(going) => Trigger::Sleep(going),
            };
            // A sleep announcement must not be lost in a full channel: it changes the
            // decision. The send waits for room, and ends when the daemon (the receiver)
            // is gone.
            match tx.try_send(t) {
                Err(mpsc::error::TrySendError::Closed(_)) => false,
                Err(mpsc::error::TrySendError::Full(t @ Trigger::Sleep(_))) => {
                    let tx = tx.clone();
                    tokio::spawn(async move { tx.send(t).await });
                    true
                }
                _ => true,
            }
        }));
        // The machine's keyboards, mice and touchpads: the first input after a quiet spell as
        // long as `session_idle` is the owner coming back.
        let tx = self.sender();
        self.watch(crate::observe::input::watch(
            s.probe.dev.join("input"),
            input_sysfs(&s.probe.power_supply),
            input,
            move || {
                !matches!(
                    tx.try_send(Trigger::Input),
                    Err(mpsc::error::TrySendError::Closed(_))
                )
            },
        ));
        // A firewall reload firewalld announces is checked at once, not at the next cycle. The
        // guard is asked directly rather than through a trigger: the trigger channel is lent
        // to a running cycle, and a cycle may take a while to observe.
        self.watch(egress::firewalld::watch(move |announced| {
            tracing::debug!(?announced, "firewalld");
            guard.reloaded();
            true
        }));
        // The link's price changed (the laptop joined a phone's hotspot, the owner marked the
        // connection metered): NetworkManager is asked at once, back-off or not, by an urgent
        // cycle. A full channel already holds a trigger that runs one.
        let tx = self.sender();
        self.watch(metered::watch(move |announced| {
            tracing::debug!(?announced, "NetworkManager");
            link.set();
            !matches!(
                tx.try_send(Trigger::Link),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        }));
    }

    /// The triggers that woke the loop, a burst taken in as one (utmp is written in several
    /// steps); none for the tick or the decision's `next_change` (when it changes by the clock
    /// alone). Cancel-safe, as `Reconciler::wake` must be.
    pub(super) async fn next(&mut self, next_change: Option<DateTime<Utc>>) -> Vec<Trigger> {
        // A moment after `next_change`, so the decision has really changed.
        let until_change = next_change
            .and_then(|t| (t - Utc::now()).to_std().ok())
            .unwrap_or(Duration::from_secs(86_400))
            + Duration::from_millis(50);
        tokio::select! {
            _ = self.interval.tick() => Vec::new(),
            Some(t) = next_trigger(&mut self.rx) => {
                tracing::debug!(trigger = ?t, "cycle triggered");
                let mut burst = vec![t];
                burst.extend(std::iter::from_fn(|| self.rx.as_mut()?.try_recv().ok()));
                burst
            }
            _ = tokio::time::sleep(until_change) => Vec::new(),
        }
    }

    pub(super) fn take_again(&mut self) -> Option<Wake> {
        self.again.take()
    }

    pub(super) fn again(&mut self, w: Wake) {
        self.again = Some(w);
    }

    /// The trigger channel, lent to a cycle (None: one has it already).
    pub(super) fn lend(&mut self) -> Option<mpsc::Receiver<Trigger>> {
        self.rx.take()
    }

    pub(super) fn give_back(&mut self, rx: mpsc::Receiver<Trigger>) {
        self.rx = Some(rx);
    }

    /// A new interval: the timer was built from the old one; the first tick of a new one is now.
    pub(super) fn retime(&mut self, interval: Duration) {
        self.interval = cycle_timer(interval);
    }

    #[cfg(test)]
    pub(super) fn period(&self) -> Duration {
        self.interval.period()
    }

    pub(super) async fn shutdown(&mut self) {
        self.watchers.shutdown().await;
    }
}

/// The next trigger; never, while a cycle has the channel (it is home between cycles).
async fn next_trigger(rx: &mut Option<mpsc::Receiver<Trigger>>) -> Option<Trigger> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The kernel's class of input devices, beside the power supplies pilotd reads for the battery
/// (both are `/sys/class/...`; a test pointing one elsewhere points both).
fn input_sysfs(power_supply: &Path) -> PathBuf {
    power_supply
        .parent()
        .unwrap_or(Path::new("/sys/class"))
        .join("input")
}

/// The cycle timer: a tick every `interval`, the first at once; a late tick delays the next
/// ones rather than bursting to catch up.
fn cycle_timer(interval: Duration) -> tokio::time::Interval {
    let mut t = tokio::time::interval(interval);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t
}
