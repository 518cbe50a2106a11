//! What wakes the loop: the tick every `interval`, the decision's `next_change`, and the
//! triggers that the watchers beside the loop send (utmp, logind, input devices, firewalld, the
//! engine's events, the owner's doors). The watchers are the daemon's own: the drain ends them,
//! as does dropping the daemon, so nothing of it is left running.

use super::triggers::{self, Trigger};
use crate::egress;
use crate::input::LastInput;
use crate::logind::Signal;
use crate::settings::Settings;
use chrono::{DateTime, Utc};
use pilotd_core::service::lifecycle::Wake;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

pub(super) struct Wakeups {
    tx: mpsc::Sender<Trigger>,
    /// Home between cycles; lent to the running cycle (`triggers::Interrupt`).
    rx: Option<mpsc::Receiver<Trigger>>,
    /// A trigger arrived during the last cycle: the next one is due at once.
    again: Option<Wake>,
    interval: tokio::time::Interval,
    /// When the decision changes by the clock alone.
    next_change: Option<DateTime<Utc>>,
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
            next_change: None,
            watchers: JoinSet::new(),
        }
    }

    /// Where triggers are sent.
    pub(super) fn sender(&self) -> mpsc::Sender<Trigger> {
        self.tx.clone()
    }

    /// Runs a watcher beside the loop, until the drain.
    pub(super) fn watch(&mut self, w: impl Future<Output = ()> + Send + 'static) -> AbortHandle {
        self.watchers.spawn(w)
    }

    /// Watches the machine: utmp, logind, the input devices and firewalld.
    pub(super) fn watch_the_machine(
        &mut self,
        s: &Settings,
        input: Arc<LastInput>,
        guard: egress::Guard,
    ) {
        self.watch(triggers::watch_utmp(s.probe.utmp.clone(), self.sender()));
        let tx = self.sender();
        self.watch(crate::logind::watch(move |signal| {
            let t = match signal {
                Signal::Sessions => Trigger::Sessions,
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
        self.watch(crate::input::watch(
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
    }

    /// What woke the loop: a trigger, or None for the tick or the decision's `next_change`.
    /// Cancel-safe, as `Reconciler::wake` must be.
    pub(super) async fn next(&mut self) -> Option<Trigger> {
        // A moment after `next_change`, so the decision has really changed.
        let until_change = self
            .next_change
            .and_then(|t| (t - Utc::now()).to_std().ok())
            .unwrap_or(Duration::from_secs(86_400))
            + Duration::from_millis(50);
        tokio::select! {
            _ = self.interval.tick() => None,
            Some(t) = next_trigger(&mut self.rx) => Some(t),
            _ = tokio::time::sleep(until_change) => None,
        }
    }

    /// A trigger already waiting (a burst is taken in as one wake-up).
    pub(super) fn waiting(&mut self) -> Option<Trigger> {
        self.rx.as_mut().and_then(|rx| rx.try_recv().ok())
    }

    /// The wake-up a trigger during the last cycle made due at once.
    pub(super) fn take_again(&mut self) -> Option<Wake> {
        self.again.take()
    }

    pub(super) fn again(&mut self, w: Wake) {
        self.again = Some(w);
    }

    /// The trigger channel, lent to a cycle (None: a cycle has it already).
    pub(super) fn lend(&mut self) -> Option<mpsc::Receiver<Trigger>> {
        self.rx.take()
    }

    pub(super) fn give_back(&mut self, rx: mpsc::Receiver<Trigger>) {
        self.rx = Some(rx);
    }

    /// When the decision changes by the clock alone.
    pub(super) fn change_at(&mut self, t: Option<DateTime<Utc>>) {
        self.next_change = t;
    }

    /// A new interval: the timer was built from the old one; the first tick of a new one is now.
    pub(super) fn retime(&mut self, interval: Duration) {
        self.interval = cycle_timer(interval);
    }

    #[cfg(test)]
    pub(super) fn period(&self) -> Duration {
        self.interval.period()
    }

    /// Ends the watchers.
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
