//! The life of a reconcile loop as a service, the same for both modes: wait until a cycle is
//! due, reconcile, tell the service manager; re-read the configuration when asked; on shutdown
//! stop between cycles and drain. A mode supplies the `Reconciler`; the edge (`cmd/run`)
//! supplies the shutdown future, the stream of reloaded configurations and the `Hooks` that
//! reach systemd and a waiting parent. Nothing here installs signal handlers, so a loop can be
//! driven in-process (tests send reloads on a channel and end it with a future).

use crate::config::{Config, ConfigError, Mode};
use std::fmt::Display;
use std::future::Future;
use tokio::sync::mpsc;

/// Why a cycle runs now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wake {
    /// Someone is waiting (the owner logged in): decide on what is known, measure nothing slow.
    pub urgent: bool,
}

/// A configuration read again after SIGHUP, or why it could not be.
pub type Reload = Result<Config, ConfigError>;

/// A mode's reconcile loop, as the service drives it.
pub trait Reconciler {
    /// Why a valid configuration cannot be taken by this loop.
    type ReloadError: Display;
    /// The mode this loop serves: a configuration for another one needs a restart.
    fn mode(&self) -> Mode;
    /// Waits until the next cycle is due (a tick, an event). Must be cancel-safe: a reload or
    /// the shutdown may interrupt it.
    fn wake(&mut self) -> impl Future<Output = Wake>;
    /// One cycle: observe, decide, act. Returns a one-line summary for the service manager.
    fn reconcile(&mut self, wake: Wake) -> impl Future<Output = String>;
    /// Takes a valid reloaded configuration of this loop's mode; on `Err` the last good one
    /// stays.
    fn reload(&mut self, cfg: Config) -> Result<(), Self::ReloadError>;
    /// After the last cycle: finish or hand over what is still running.
    fn drain(&mut self) -> impl Future<Output = ()>;
}

/// A hook called once with a one-line summary.
pub(crate) type SummaryOnce = Box<dyn FnOnce(&str) + Send>;
/// A hook called after every cycle with a one-line summary.
pub(crate) type SummaryEach = Box<dyn FnMut(&str) + Send>;

/// Calls into the service manager and a detached parent. Each is optional; the loop runs the
/// same without them.
#[derive(Default)]
pub struct Hooks {
    /// After the first complete cycle: the service is ready.
    pub ready: Option<SummaryOnce>,
    /// When a reload arrives, before it is applied.
    pub reloading: Option<Box<dyn FnMut() + Send>>,
    /// After every cycle (systemd STATUS=, the watchdog; READY again completes a reload).
    pub cycle_done: Option<SummaryEach>,
    /// When the drain starts.
    pub stopping: Option<Box<dyn FnOnce() + Send>>,
}

/// Runs `r` until `shutdown` completes (never in the middle of a cycle), then drains it.
pub async fn serve<R: Reconciler>(
    r: &mut R,
    mut hooks: Hooks,
    shutdown: impl Future<Output = ()>,
    mut reloads: mpsc::Receiver<Reload>,
) {
    tokio::pin!(shutdown);
    let mut first = true;
    loop {
        let wake = tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(reload) = reloads.recv() => {
                if let Some(h) = hooks.reloading.as_mut() {
                    h();
                }
                apply_reload(r, reload);
                Wake::default()
            }
            wake = r.wake() => wake,
        };
        let summary = r.reconcile(wake).await;
        tracing::debug!(urgent = wake.urgent, "cycle done: {summary}");
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
    r.drain().await;
}

/// A reload is taken whole or not at all, and the log says which (the old configuration
/// stays in force first, so the first line of the log says it all).
fn apply_reload<R: Reconciler>(r: &mut R, reload: Reload) {
    let cfg = match reload {
        Ok(cfg) => cfg,
        Err(e) => {
            tracing::error!("reload failed, keeping the last good configuration:\n{e}");
            return;
        }
    };
    if cfg.site.mode != r.mode() {
        tracing::error!(
            "reload: pilotd.toml now says mode = \"{}\", which needs a restart; keeping the last good configuration",
            cfg.site.mode.as_str()
        );
        return;
    }
    match r.reload(cfg) {
        Ok(()) => tracing::info!("configuration reloaded"),
        Err(e) => tracing::error!("reload: {e}; keeping the last good configuration"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records what the service asked of it; every wake is due at once.
    #[derive(Default)]
    struct Recorder {
        seen: Vec<String>,
    }

    impl Reconciler for Recorder {
        type ReloadError = std::convert::Infallible;
        fn mode(&self) -> Mode {
            Mode::Volunteer
        }
        async fn wake(&mut self) -> Wake {
            tokio::task::yield_now().await;
            Wake { urgent: true }
        }
        async fn reconcile(&mut self, wake: Wake) -> String {
            self.seen.push(format!("cycle urgent={}", wake.urgent));
            format!("cycle {}", self.seen.len())
        }
        fn reload(&mut self, _: Config) -> Result<(), Self::ReloadError> {
            self.seen.push("reload".into());
            Ok(())
        }
        async fn drain(&mut self) {
            self.seen.push("drain".into());
        }
    }

    #[tokio::test]
    async fn ready_after_the_first_cycle_reload_then_cycle_and_drain_last() {
        let notes = Arc::new(Mutex::new(Vec::<String>::new()));
        let (n1, n2, n3, n4) = (notes.clone(), notes.clone(), notes.clone(), notes.clone());
        let hooks = Hooks {
            ready: Some(Box::new(move |s| {
                n1.lock().unwrap().push(format!("READY {s}"))
            })),
            reloading: Some(Box::new(move || {
                n2.lock().unwrap().push("RELOADING".into())
            })),
            cycle_done: Some(Box::new(move |s| {
                n3.lock().unwrap().push(format!("done {s}"))
            })),
            stopping: Some(Box::new(move || n4.lock().unwrap().push("STOPPING".into()))),
        };
        let (tx, rx) = mpsc::channel(2);
        tx.send(Err(ConfigError::Invalid(vec![]))).await.unwrap();
        let mut r = Recorder::default();
        // Stop once three cycles have run.
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let watcher = notes.clone();
        tokio::spawn(async move {
            while watcher
                .lock()
                .unwrap()
                .iter()
                .filter(|n| n.starts_with("done"))
                .count()
                < 3
            {
                tokio::task::yield_now().await;
            }
            let _ = stop_tx.send(());
        });
        serve(
            &mut r,
            hooks,
            async {
                let _ = stop_rx.await;
            },
            rx,
        )
        .await;
        // The invalid reload never reaches the loop; the cycle after it is not urgent.
        assert_eq!(&r.seen[..2], ["cycle urgent=false", "cycle urgent=true"]);
        assert_eq!(r.seen.last().map(String::as_str), Some("drain"));
        let notes = notes.lock().unwrap();
        assert_eq!(notes[0], "RELOADING");
        assert_eq!(notes[1], "READY cycle 1");
        assert_eq!(notes[2], "done cycle 1");
        assert_eq!(notes.last().map(String::as_str), Some("STOPPING"));
        assert_eq!(notes.iter().filter(|n| n.starts_with("READY")).count(), 1);
    }
}
