//! The process becoming a service, the same for both modes: in the foreground under systemd
//! or detached (`--daemon`), holding its pid file, and telling systemd (and a parent that
//! waits for a detached daemon) how it goes.

use super::detach::{self, DetachError, Detached, PidFile, Role};
use super::lifecycle::Hooks;
use super::metrics::Metrics;
use super::notify;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// What stays alive while the daemon runs: the locked pid file and, when detached, the pipe
/// to the waiting parent.
pub struct Service {
    pub detached: Option<Arc<Mutex<Detached>>>,
    _pidfile: Option<PidFile>,
}

impl Service {
    /// Tells a waiting parent (`--daemon`) why the daemon did not start.
    pub fn failed(&self, why: &str) {
        if let Some(d) = &self.detached
            && let Ok(mut d) = d.lock()
        {
            d.failed(why);
        }
    }
}

pub enum Prepared {
    /// This is the original process of `--daemon`: the daemon's start, or why it failed.
    Parent(Result<(), String>),
    Run(Service),
}

/// Detaching (`daemon`; its output goes to `state_dir`/pilotd.log) and the pid file, both
/// before any runtime or thread exists: tokio does not survive a fork.
pub fn prepare(
    daemon: bool,
    pidfile: Option<&Path>,
    state_dir: &Path,
) -> Result<Prepared, DetachError> {
    if !daemon {
        let pidfile = pidfile.map(detach::hold_pidfile).transpose()?;
        return Ok(Prepared::Run(Service {
            detached: None,
            _pidfile: pidfile,
        }));
    }
    let _ = std::fs::create_dir_all(state_dir);
    match detach::detach(pidfile, &state_dir.join("pilotd.log"))? {
        Role::Parent { code: 0, .. } => Ok(Prepared::Parent(Ok(()))),
        Role::Parent { message, .. } => Ok(Prepared::Parent(Err(message))),
        Role::Daemon(d) => Ok(Prepared::Run(Service {
            detached: Some(Arc::new(Mutex::new(d))),
            _pidfile: None,
        })),
    }
}

/// systemd's notifications and the detached parent's readiness, wired to the loop's hooks.
pub fn hooks(service: &Service) -> Hooks {
    let detached = service.detached.clone();
    let watchdog = notify::watchdog_interval().is_some();
    Hooks {
        ready: Some(Box::new(move |summary: &str| {
            tracing::info!("ready: {summary}");
            // What start-up alone ran need not stay resident for the daemon's years of idling.
            let shed = super::resident::shed_startup_pages();
            tracing::debug!("let go of {} KiB of start-up's file pages", shed / 1024);
            if let Some(d) = detached
                && let Ok(mut d) = d.lock()
            {
                d.ready();
            }
        })),
        // READY after every cycle also completes a reload (systemd waits for it after RELOADING).
        cycle_done: Some(Box::new(move |summary: &str| {
            notify::ready(summary);
            if watchdog {
                notify::watchdog();
            }
        })),
        reloading: Some(Box::new(notify::reloading)),
        stopping: Some(Box::new(notify::stopping)),
    }
}

/// How often a cycle must come, at the most: `interval`, or half systemd's WatchdogSec when
/// that is shorter (the watchdog is pinged after every cycle; a healthy daemon must not be
/// killed for a long interval).
pub fn cycle_at_most(interval: std::time::Duration) -> std::time::Duration {
    match notify::watchdog_interval() {
        Some(half) if interval > half => {
            tracing::info!(
                "a cycle every {}s instead of interval = {}s: systemd's WatchdogSec needs a sign of life that often",
                half.as_secs_f64(),
                interval.as_secs_f64()
            );
            half
        }
        _ => interval,
    }
}

/// Binds the metrics listener (a taken port fails the start, with its message) and serves it
/// beside the daemon until `stop`.
pub async fn serve_metrics(
    addr: std::net::SocketAddr,
    stop: &super::listener::Stop,
) -> Result<(Metrics, tokio::task::JoinHandle<()>), String> {
    let (metrics, registry) = Metrics::new();
    let registry = Arc::new(Mutex::new(registry));
    let (bound, serve) = super::metrics::listen(addr, registry, stop.signal())
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(%bound, "serving Prometheus metrics on /metrics");
    if crate::config::site::beyond_loopback(bound.ip()) {
        tracing::warn!(
            %bound,
            "metrics are served beyond loopback: anyone who can reach this address reads them, and may hold its few connections"
        );
    }
    Ok((metrics, tokio::spawn(serve)))
}
