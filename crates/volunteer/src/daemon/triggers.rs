//! Events that start a cycle before the next tick: the utmp file changed (someone logged in
//! or out) and a worker exited. The owner's return must evict within a second, so utmp is
//! watched with inotify; where inotify is unavailable (some container filesystems, exhausted
//! watches) the file's mtime and size are polled every 250 ms instead — still well under the
//! one-second goal, at the cost of a few stat calls per second.

use crate::backend::{Backend, BackendEvent};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use pilotd_core::backoff::Backoff;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

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
    TaskDone,
    /// The workers' traffic filter went down or came back.
    Filter,
}

impl Trigger {
    /// The owner may be waiting: decide on what is known, without the slow observations,
    /// and interrupt a regular cycle's observations to do so.
    pub fn is_urgent(&self) -> bool {
        matches!(
            self,
            Trigger::Sessions | Trigger::Owner | Trigger::Input | Trigger::Sleep(_)
        )
    }
}

/// The trigger channel, lent to a running cycle: it notices an urgent trigger as soon as it
/// arrives (the owner logged in while the regular cycle measured CPU or listed images), so
/// the cycle can drop what it was observing, or stop before its next start, and let an urgent
/// cycle run at once. Triggers that are not urgent only ask for one more cycle.
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
    pub fn new(rx: &'a mut mpsc::Receiver<Trigger>) -> Self {
        Interrupt {
            rx: Some(rx),
            urgent: false,
            again: false,
            sleep: None,
        }
    }

    /// One that never fires (tests and one-shot cycles).
    pub fn none() -> Self {
        Interrupt {
            rx: None,
            urgent: false,
            again: false,
            sleep: None,
        }
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
    pub fn poll(&mut self) -> bool {
        while let Some(t) = self.rx.as_mut().and_then(|rx| rx.try_recv().ok()) {
            self.note(t);
        }
        self.urgent
    }

    /// Completes when an urgent trigger arrives; never when there is no channel. Cancel-safe.
    pub async fn arrived(&mut self) {
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

struct InotifyFd(Inotify);

impl AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Watches `utmp` until `tx` closes. Watches the directory, not the file: login managers and
/// `utmpdump -r > file` replace or truncate it, and a file that does not exist yet must be
/// noticed when it appears.
pub async fn watch_utmp(utmp: PathBuf, tx: mpsc::Sender<Trigger>) {
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
    #[error("inotify: {0}")]
    Init(nix::Error),
    #[error("watching {}: {source}", dir.display())]
    Watch { dir: PathBuf, source: nix::Error },
    #[error("registering the inotify descriptor: {0}")]
    Register(std::io::Error),
    #[error("reading inotify events: {0}")]
    Read(nix::Error),
    #[error("waiting for inotify events: {0}")]
    Wait(std::io::Error),
}

async fn inotify_watch(utmp: &Path, tx: &mpsc::Sender<Trigger>) -> Result<(), WatchError> {
    let dir = utmp
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = utmp.file_name().map(|n| n.to_os_string());
    let ino =
        Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(WatchError::Init)?;
    ino.add_watch(
        dir,
        AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE,
    )
    .map_err(|source| WatchError::Watch {
        dir: dir.to_path_buf(),
        source,
    })?;
    // SAFETY: the descriptor is owned by the `Inotify` inside the `AsyncFd`, so it stays open
    // and the same for the `AsyncFd`'s whole life, and `as_raw_fd` always returns it.
    let fd =
        unsafe { AsyncFd::register(InotifyFd(ino)) }.map_err(|e| WatchError::Register(e.into()))?;
    loop {
        let mut guard = fd.readable().await.map_err(WatchError::Wait)?;
        match guard.get_inner().0.read_events() {
            Ok(events) => {
                let ours = events
                    .iter()
                    .any(|e| e.name.is_none() || e.name.as_ref() == file_name.as_ref());
                if ours {
                    // A full channel already holds a pending trigger: nothing is lost.
                    if let Err(mpsc::error::TrySendError::Closed(_)) =
                        tx.try_send(Trigger::Sessions)
                    {
                        return Ok(());
                    }
                }
            }
            Err(nix::errno::Errno::EAGAIN) => guard.clear_ready(),
            Err(e) => return Err(WatchError::Read(e)),
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
pub async fn watch_workers(backend: impl Backend, tx: mpsc::Sender<Trigger>) {
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
