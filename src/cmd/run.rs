//! `pilotd run`: the daemon, in the foreground (what systemd runs). The configuration is
//! loaded and checked before anything else, then the tokio runtime is built by hand — never
//! `#[tokio::main]` — because detaching (`--daemon`) must happen before any runtime exists.

use super::{CmdError, load_config};
use crate::cli::{Global, LogFormat, RunArgs};
use pilotd_core::config::{self, Mode, SiteFile};
use pilotd_core::service::detach::DetachError;
use pilotd_core::service::lifecycle::Reload;
use pilotd_core::service::listener::Stop;
use pilotd_core::service::process::{self, Prepared};
use pilotd_core::service::{logging, notify};
use pilotd_volunteer::observe::host::this_machine;
use pilotd_volunteer::{self as volunteer, daemon};
use std::path::PathBuf;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

pub fn run(g: &Global, a: &RunArgs) -> Result<String, CmdError> {
    let mut cfg = load_config(g, SiteFile::Required, this_machine())?;
    // Detach (or lock the pid file) before logging threads or any runtime exist: tokio does
    // not survive a fork.
    let prepared = process::prepare(a.daemon, a.pidfile.as_deref(), &cfg.site.state_dir).map_err(
        |e| match e {
            DetachError::AlreadyRunning { .. } => CmdError::Usage(e.to_string()),
            _ => CmdError::Runtime(e.to_string()),
        },
    )?;
    let service = match prepared {
        Prepared::Parent(Ok(())) => return Ok(String::new()),
        Prepared::Parent(Err(message)) => return Err(CmdError::Runtime(message)),
        Prepared::Run(s) => s,
    };
    // One daemon per instance and engine (after the pid file, whose refusal is the more
    // precise one for the same configuration); released by the kernel however this process
    // ends. A detached daemon tells its waiting parent.
    let _claim = match cfg.site.mode {
        Mode::Volunteer => {
            let engine = volunteer::settings::EngineSettings::of_site(&cfg.site);
            match volunteer::act::claim::claim(&engine) {
                Ok(c) => Some(c),
                Err(e) => {
                    service.failed(&e.to_string());
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
    cfg.site.interval.0 = process::cycle_at_most(cfg.site.interval.0);
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
    let result = runtime.block_on(async {
        // Signals first: from here on SIGTERM drains instead of killing, SIGHUP reloads.
        let shutdown = shutdown_signal()?;
        let reloads = reload_on_hangup(g.config.clone(), g.policy.clone())?;
        // The metrics are served until the mode's loop has drained, then stopped.
        let metrics_stop = Stop::new();
        let (metrics, metrics_server) = match &cfg.site.metrics.listen {
            Some(addr) => {
                let (m, server) = process::serve_metrics(*addr.get_ref(), &metrics_stop)
                    .await
                    .map_err(CmdError::Runtime)?;
                (Some(m), Some(server))
            }
            None => (None, None),
        };
        let hooks = process::hooks(&service);
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
    if let Err(e) = &result {
        // A daemon that fails before its first cycle tells the waiting parent why.
        service.failed(&e.to_string());
    }
    drop(service);
    result.map(|()| String::new())
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
