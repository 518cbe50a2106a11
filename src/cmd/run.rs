//! `pilotd run`: the daemon, in the foreground (what systemd runs). The configuration is
//! loaded and checked before anything else, then the tokio runtime is built by hand — never
//! `#[tokio::main]` — because detaching (`--daemon`) must happen before any runtime exists.

use super::{CmdError, load_config, this_machine};
use crate::cli::{Global, LogFormat, RunArgs};
use crate::config::{Mode, SiteFile};
use crate::daemon::{self, Hooks};

pub fn run(g: &Global, a: &RunArgs) -> Result<String, CmdError> {
    let cfg = load_config(g, SiteFile::Required, this_machine())?;
    init_logging(g.log_format, cfg.site.log.level.as_deref());
    prepare_process(a)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pilotd")
        .enable_all()
        .build()
        .map_err(|e| CmdError::Runtime(format!("cannot start the async runtime: {e}")))?;
    match cfg.site.mode {
        Mode::Volunteer => runtime
            .block_on(daemon::run(
                cfg,
                g.config.clone(),
                g.policy.clone(),
                Hooks::default(),
            ))
            .map_err(|e| CmdError::Runtime(e.to_string()))?,
        Mode::Kubernetes => {
            // kube's TLS uses ring; installing it twice is harmless, two providers would panic.
            let _ = rustls::crypto::ring::default_provider().install_default();
            runtime
                .block_on(super::kubernetes::run(cfg, shutdown_signal()))
                .map_err(|e| CmdError::Runtime(e.to_string()))?
        }
    }
    Ok(String::new())
}

/// The process-level setup that must precede the runtime: detaching from the terminal and the
/// PID file. This build runs in the foreground only (systemd `Type=simple`/`notify`, or a
/// terminal); asking for more is refused rather than silently ignored.
fn prepare_process(a: &RunArgs) -> Result<(), CmdError> {
    if a.daemon || a.pidfile.is_some() {
        return Err(CmdError::Usage(
            "--daemon and --pidfile are not supported by this build\n  hint: run `pilotd run` in the foreground under systemd (see systemd/pilotd.service) or a supervisor".into(),
        ));
    }
    Ok(())
}

/// Completes on SIGTERM or SIGINT (kubernetes mode's loop takes a shutdown future).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Logs go to stderr (the journal under systemd); `RUST_LOG` wins over `[log] level`.
fn init_logging(format: LogFormat, level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level.unwrap_or("info")))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
