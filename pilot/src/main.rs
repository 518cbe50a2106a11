//! The `pilot` binary: arguments, logging, the runtime, and the mapping of everything that
//! can happen to one exit code and one job report.
//!
//! The job report (`pilot_contract::JobReport`) is the last line the pilot writes to its
//! standard output, on every path once it runs as the entrypoint: all zeros when condor never
//! started. Its logs go to standard error, and condor's daemons write their own files, so
//! nothing follows it there. While condor runs the report is also printed whenever it changed
//! (looked at every `PILOT_REPORT_PERIOD`), whole each time, so a pilot killed at once leaves
//! what it knew; pilotd takes the last.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use chrono::Utc;
use pilot::help::HELP;
use pilot::lifecycle::{Limits, PilotExit, after};
use pilot::settings::Settings;
use pilot::startd_cron;
use pilot::startd_history::{self, HistoryWatch, Progress};
use pilot::startlog::StartLogWatch;
use pilot::startup;
use pilot::supervise::{PilotSignals, supervise};
use pilot_contract::JobReport;

/// How long SIGKILL may take before the pilot stops waiting for condor.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PILOT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Container logs are files, not terminals: no colour codes there.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // No URL credentials (`PILOT_CONFIG_URLS` may carry a token) and one event per line.
        .with_writer(move || redact::Redacting::new(std::io::stderr(), ansi))
        .with_ansi(ansi)
        .init();
}

/// The pilot's whole run: its exit code and its job report (all zeros when it ended before
/// condor started).
async fn run() -> (PilotExit, JobReport) {
    match run_condor().await {
        Ok(done) => done,
        Err(exit) => (exit, JobReport::default()),
    }
}

async fn run_condor() -> Result<(PilotExit, JobReport), PilotExit> {
    // Orphans of condor's daemons are re-parented to the pilot, which reaps them (see
    // supervise). As PID 1 this is implicit; elsewhere it needs the subreaper flag.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "could not become a child subreaper; orphans go to init");
    }
    let mut signals = PilotSignals::install().map_err(|e| {
        tracing::error!(error = %e, "cannot install signal handlers");
        PilotExit::CondorFailed
    })?;
    // Env values that are not UTF-8 cannot be meant for the pilot; keep them lossy so the
    // error names them instead of dropping them silently.
    let env: BTreeMap<String, String> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let settings = Settings::from_env(&env).map_err(|errors| {
        for e in &errors.0 {
            tracing::error!("{e}");
        }
        tracing::error!("the pilot cannot use this configuration; see `pilot --help`");
        PilotExit::Config
    })?;

    let started = Utc::now();
    let prepared = tokio::select! {
        prepared = startup::prepare(&settings, std::env::var_os("PATH"), started) => prepared,
        sig = signals.recv() => {
            tracing::info!(signal = ?sig, "stopped before condor started");
            return Err(PilotExit::Signal(sig.number()));
        }
    };
    let prepared = prepared.map_err(|e| {
        tracing::error!(exit_code = e.exit().code(), "{e}");
        e.exit()
    })?;

    let now = Utc::now();
    let limits = Limits {
        graceful_timeout: settings.graceful_timeout,
        fast_timeout: settings.fast_timeout,
        kill_timeout: KILL_TIMEOUT,
        idle_backstop: Some(after(
            now,
            settings.idle_timeout.saturating_add(settings.idle_grace),
        )),
        die_at: settings.die_at,
        die_backstop: settings.die_at.map(|t| after(t, settings.die_grace)),
    };
    // The watches start before the master so only this run's lines and records count.
    let mut watch = StartLogWatch::new(prepared.start_log, prepared.master_log);
    let history = prepared.startd_history.map(HistoryWatch::new);
    let mut progress = Progress::new(history.as_ref(), settings.report_period);
    let exit = supervise(
        &prepared.programs,
        limits,
        &mut watch,
        &mut signals,
        Utc::now,
        |started| {
            if let Some(report) = progress.due(started, std::time::Instant::now()) {
                print_report(&report);
            }
        },
    )
    .await;
    // condor is gone (supervise reaped it): its history is complete.
    let report = startd_history::job_report(watch.jobs_started(), history.as_ref());
    Ok((exit, report))
}

/// The job report as the last line of standard output (pilotd reads the last one).
fn print_report(report: &JobReport) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{}", report.to_line())
        .and_then(|()| out.flush())
        .is_err()
    {
        tracing::warn!("could not write the job report to standard output");
    }
}

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().skip(1).collect();
    // condor's startd runs the pilot as its cron job (see startd_cron); nothing else of the
    // pilot (logging, runtime, settings) is needed there.
    if all.first().map(String::as_str) == Some(startd_cron::SUBCOMMAND) {
        return ExitCode::from(startd_cron::main(&all[1..]));
    }
    let mut args = all.into_iter();
    match args.next().as_deref() {
        None => {}
        Some("-h" | "--help") => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Some("-V" | "--version") => {
            println!("pilot {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!(
                "pilot: unexpected argument {other:?}; it is configured by environment, see `pilot --help`"
            );
            return ExitCode::from(PilotExit::Config.code());
        }
    }
    init_logging();
    // reqwest is built without a default crypto provider (no aws-lc-rs): install ring, once,
    // before any TLS client exists.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            print_report(&JobReport::default());
            return ExitCode::from(PilotExit::CondorFailed.code());
        }
    };
    let (exit, report) = runtime.block_on(run());
    tracing::info!(exit_code = exit.code(), outcome = ?exit, jobs_started = report.jobs_started,
        jobs_completed = report.jobs_completed, jobs_vacated = report.jobs_vacated,
        job_seconds = report.job_seconds, job_cpu_seconds = report.job_cpu_seconds,
        vacated_cpu_seconds = report.vacated_cpu_seconds, "pilot exiting");
    print_report(&report);
    ExitCode::from(exit.code())
}
