//! `pilotd run`: the daemon, in the foreground (what systemd runs). The configuration is
//! loaded and checked before anything else, then the tokio runtime is built by hand — never
//! `#[tokio::main]` — because detaching (`--daemon`) must happen before any runtime exists.

use super::{CmdError, load_config};
use crate::cli::{Global, LogFormat, RunArgs};
use pilotd_core::config::{self, Mode, SiteFile};
use pilotd_core::service::detach::{self, Detached, Role};
use pilotd_core::service::footprint;
use pilotd_core::service::lifecycle::{Hooks, Reload};
use pilotd_core::service::listener::Stop;
use pilotd_core::service::logging;
use pilotd_core::service::metrics::Metrics;
use pilotd_core::service::notify;
use pilotd_volunteer::host::this_machine;
use pilotd_volunteer::{self as volunteer, daemon};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

pub fn run(g: &Global, a: &RunArgs) -> Result<String, CmdError> {
    let mut cfg = load_config(g, SiteFile::Required, this_machine())?;
    // Detach (or lock the pid file) before logging threads or any runtime exist: tokio does
    // not survive a fork.
    let service = match prepare_process(&cfg, a)? {
        Prepared::Parent(Ok(())) => return Ok(String::new()),
        Prepared::Parent(Err(e)) => return Err(e),
        Prepared::Run(s) => s,
    };
    // One daemon per instance and engine (after the pid file, whose refusal is the more
    // precise one for the same configuration); released by the kernel however this process
    // ends. A detached daemon tells its waiting parent.
    let _claim = match cfg.site.mode {
        Mode::Volunteer => {
            let engine = volunteer::settings::EngineSettings::of_site(&cfg.site);
            match volunteer::claim::claim(&engine) {
                Ok(c) => Some(c),
                Err(e) => {
                    if let Some(d) = &service.detached
                        && let Ok(mut d) = d.lock()
                    {
                        d.failed(&e.to_string());
                    }
                    return Err(CmdError::Usage(e.to_string()));
                }
            }
        }
        Mode::Kubernetes => None,
    };
    logging::init(
        g.log_format == LogFormat::Json,
        cfg.site.log.level.as_ref().map(|l| l.get_ref().as_str()),
    );
    // The watchdog is pinged after every cycle, so a cycle must come at least every half of
    // systemd's WatchdogSec, whatever `interval` says; otherwise a healthy daemon is killed.
    if let Some(half) = notify::watchdog_interval()
        && cfg.site.interval.0 > half
    {
        tracing::info!(
            "a cycle every {}s instead of interval = {}s: systemd's WatchdogSec needs a sign of life that often",
            half.as_secs_f64(),
            cfg.site.interval.0.as_secs_f64()
        );
        cfg.site.interval.0 = half;
    }
    // The volunteer daemon spends its life waiting: one thread runs it (each worker thread
    // costs a stack and a malloc arena on someone else's machine); blocking work (disk
    // measurement, iptables) goes to tokio's blocking threads, which exit when idle. The
    // provisioner pages through thousands of pods and keeps two workers.
    let mut builder = match cfg.site.mode {
        Mode::Volunteer => tokio::runtime::Builder::new_current_thread(),
        Mode::Kubernetes => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(2);
            b
        }
    };
    let runtime = builder
        .thread_name("pilotd")
        .thread_keep_alive(std::time::Duration::from_secs(10))
        .enable_all()
        .build()
        .map_err(|e| CmdError::Runtime(format!("cannot start the async runtime: {e}")))?;
    let detached = service.detached.clone();
    let result = runtime.block_on(async {
        // Signals first: from here on SIGTERM drains instead of killing, SIGHUP reloads.
        let shutdown = shutdown_signal()?;
        let reloads = reload_on_hangup(g.config.clone(), g.policy.clone())?;
        // The metrics are served until the mode's loop has drained, then stopped.
        let metrics_stop = Stop::new();
        let (metrics, metrics_server) = match &cfg.site.metrics.listen {
            Some(addr) => {
                let (m, server) = start_metrics(*addr.get_ref(), &metrics_stop).await?;
                (Some(m), Some(server))
            }
            None => (None, None),
        };
        let hooks = hooks(service.detached.clone());
        match cfg.site.mode {
            Mode::Volunteer => {
                let s = volunteer::settings::Settings::resolve(&cfg);
                daemon::run(s, metrics, hooks, shutdown, reloads).await?;
            }
            #[cfg(feature = "kubernetes")]
            Mode::Kubernetes => {
                use pilotd_kubernetes::{provisioner, settings::Settings};
                // kube's TLS uses ring; installing it twice is harmless, two providers panic.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let s = Settings::resolve(&cfg)?;
                provisioner::run(s, metrics, hooks, shutdown, reloads).await?;
            }
            #[cfg(not(feature = "kubernetes"))]
            Mode::Kubernetes => return Err(super::without_kubernetes()),
        }
        metrics_stop.stop();
        if let Some(server) = metrics_server {
            let _ = server.await;
        }
        Ok::<(), CmdError>(())
    });
    notify::stopping();
    if let (Err(e), Some(d)) = (&result, &detached)
        && let Ok(mut d) = d.lock()
    {
        // A daemon that fails before its first cycle tells the waiting parent why.
        d.failed(&e.to_string());
    }
    drop(service);
    result.map(|()| String::new())
}

/// What stays alive while the daemon runs: the locked pid file and, when detached, the pipe
/// to the waiting parent.
struct Service {
    detached: Option<Arc<Mutex<Detached>>>,
    _pidfile: Option<detach::PidFile>,
}

enum Prepared {
    /// This is the original process of `--daemon`: its result is the daemon's start.
    Parent(Result<(), CmdError>),
    Run(Service),
}

/// Detaching (`--daemon`) and the pid file, both before any runtime or thread exists.
fn prepare_process(cfg: &pilotd_core::config::Config, a: &RunArgs) -> Result<Prepared, CmdError> {
    let err = |e: detach::DetachError| match e {
        detach::DetachError::AlreadyRunning { .. } => CmdError::Usage(e.to_string()),
        _ => CmdError::Runtime(e.to_string()),
    };
    if !a.daemon {
        let pidfile = a
            .pidfile
            .as_deref()
            .map(detach::hold_pidfile)
            .transpose()
            .map_err(err)?;
        return Ok(Prepared::Run(Service {
            detached: None,
            _pidfile: pidfile,
        }));
    }
    // The daemon's stdout and stderr go to a log file in the state dir.
    let _ = std::fs::create_dir_all(&cfg.site.state_dir);
    let log = cfg.site.state_dir.join("pilotd.log");
    match detach::detach(a.pidfile.as_deref(), &log).map_err(err)? {
        Role::Parent { code: 0, .. } => Ok(Prepared::Parent(Ok(()))),
        Role::Parent { message, .. } => Ok(Prepared::Parent(Err(CmdError::Runtime(message)))),
        Role::Daemon(d) => Ok(Prepared::Run(Service {
            detached: Some(Arc::new(Mutex::new(d))),
            _pidfile: None,
        })),
    }
}

/// systemd notifications and the detached parent's readiness, wired to the loop's hooks.
fn hooks(detached: Option<Arc<Mutex<Detached>>>) -> Hooks {
    let watchdog = notify::watchdog_interval().is_some();
    // An idle daemon's memory is mostly code only its start ran (`service::footprint`).
    let mut shed = footprint::Shed::default();
    Hooks {
        ready: Some(Box::new(move |summary: &str| {
            tracing::info!("ready: {summary}");
            if let Some(d) = detached
                && let Ok(mut d) = d.lock()
            {
                d.ready();
            }
        })),
        // READY after every cycle also completes a reload (systemd waits for it after RELOADING).
        cycle_done: Some(Box::new(move |summary: &str| {
            shed.after_cycle(std::time::Instant::now());
            notify::ready(summary);
            if watchdog {
                notify::watchdog();
            }
        })),
        reloading: Some(Box::new(notify::reloading)),
        stopping: Some(Box::new(notify::stopping)),
    }
}

/// Binds the metrics listener (a taken port fails the start, with its message) and serves it
/// beside the daemon until `stop`.
async fn start_metrics(
    addr: std::net::SocketAddr,
    stop: &Stop,
) -> Result<(Metrics, tokio::task::JoinHandle<()>), CmdError> {
    let (metrics, registry) = Metrics::new();
    let registry = Arc::new(Mutex::new(registry));
    let (bound, serve) = pilotd_core::service::metrics::listen(addr, registry, stop.signal())
        .await
        .map_err(|e| CmdError::Runtime(e.to_string()))?;
    tracing::info!(%bound, "serving Prometheus metrics on /metrics");
    if config::site::beyond_loopback(bound.ip()) {
        tracing::warn!(
            %bound,
            "metrics are served beyond loopback: anyone who can reach this address reads them, and may hold its few connections"
        );
    }
    Ok((metrics, tokio::spawn(serve)))
}

fn handler(kind: SignalKind, which: &'static str) -> Result<Signal, CmdError> {
    signal(kind)
        .map_err(|e| CmdError::Runtime(format!("cannot install the {which} signal handler: {e}")))
}

/// Installs the SIGTERM and SIGINT handlers now; the future completes on either.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, CmdError> {
    let mut term = handler(SignalKind::terminate(), "SIGTERM")?;
    let mut int = handler(SignalKind::interrupt(), "SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Installs the SIGHUP handler now; each SIGHUP reads pilotd.toml and the policy again and
/// hands the result (or why it is invalid) to the loop, which keeps the last good one.
fn reload_on_hangup(
    site: PathBuf,
    policy: Option<PathBuf>,
) -> Result<mpsc::Receiver<Reload>, CmdError> {
    let mut hup = handler(SignalKind::hangup(), "SIGHUP")?;
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let reload = config::load(
                &site,
                SiteFile::Required,
                super::MODES,
                policy.as_deref(),
                this_machine(),
            );
            if tx.send(reload).await.is_err() {
                return;
            }
        }
    });
    Ok(rx)
}
