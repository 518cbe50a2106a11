//! Running `condor_master -f` as the pilot's child and carrying out the lifecycle's effects.
//!
//! The master gets its own process group, so the pilot can signal it alone (SIGTERM =
//! graceful, SIGQUIT = fast, as condor defines them) and still kill everything condor started
//! (SIGKILL to the group). The pilot is a child subreaper (PR_SET_CHILD_SUBREAPER, and PID 1 in
//! a container without an init), so processes orphaned by condor are re-parented to it: they
//! are reaped while condor runs (only zombies other than the master, by pid, so tokio keeps the
//! master's exit status), and after the master exits every remaining child is terminated and
//! reaped before the pilot exits. Nothing condor started outlives the pilot.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::lifecycle::{Effect, Event, Lifecycle, Limits, MasterExit, PilotExit, PilotSignal};
use crate::selftest::CondorPrograms;
use crate::startlog::StartLogWatch;

/// The signals the pilot handles, installed once at start so none is lost while it fetches.
pub struct PilotSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl PilotSignals {
    pub fn install() -> std::io::Result<Self> {
        Ok(PilotSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    pub async fn recv(&mut self) -> PilotSignal {
        tokio::select! {
            _ = self.term.recv() => PilotSignal::Terminate,
            _ = self.int.recv() => PilotSignal::Interrupt,
            _ = self.quit.recv() => PilotSignal::Quit,
        }
    }
}

fn master_exit(status: ExitStatus) -> MasterExit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => MasterExit::Code(code),
        (None, Some(sig)) => MasterExit::Signaled(sig),
        (None, None) => MasterExit::Code(-1),
    }
}

/// A process as seen in /proc: (pid, parent pid, state letter).
fn proc_entries() -> Vec<(i32, i32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // "pid (comm) S ppid …": comm may contain spaces and parentheses, so split at the
            // last ')'.
            let rest = stat.get(stat.rfind(')')? + 1..)?;
            let mut fields = rest.split_whitespace();
            let state = fields.next()?.chars().next()?;
            let ppid = fields.next()?.parse().ok()?;
            Some((pid, ppid, state))
        })
        .collect()
}

/// Reaps zombie children other than `keep` (the master, whose status tokio collects).
fn reap_orphans(keep: Option<i32>) {
    let me = std::process::id() as i32;
    for (pid, ppid, state) in proc_entries() {
        if ppid == me
            && state == 'Z'
            && Some(pid) != keep
            && let Ok(status) = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG))
        {
            tracing::debug!(pid, ?status, "reaped an orphaned condor process");
        }
    }
}

/// Reaps every exited child; returns false once the pilot has no children at all.
fn reap_all() -> bool {
    loop {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return true,
            Ok(_) => continue,
            Err(Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

/// After the master is gone: terminate what is left of condor's process group, then kill any
/// other child the pilot inherited, and reap them all.
async fn clean_up(pgid: i32) {
    let group = Pid::from_raw(pgid);
    if killpg(group, Signal::SIGTERM).is_ok() {
        tracing::info!(pgid, "terminating processes condor left behind");
        for _ in 0..30 {
            reap_all();
            if killpg(group, None) == Err(Errno::ESRCH) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if killpg(group, Signal::SIGKILL).is_ok() {
            tracing::warn!(pgid, "killed processes that ignored SIGTERM");
        }
    }
    let me = std::process::id() as i32;
    for (pid, ppid, state) in proc_entries() {
        if ppid == me && state != 'Z' {
            tracing::warn!(pid, "killing a leftover process outside condor's group");
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    for _ in 0..50 {
        if !reap_all() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!("some child processes could not be reaped");
}

/// Runs condor_master until it ends and returns the pilot's exit code; the watch keeps what
/// the StartLog said (the jobs it started) for the job report. `progress` is called every
/// second with the jobs started so far (the job report while condor runs).
pub async fn supervise(
    programs: &CondorPrograms,
    limits: Limits,
    watch: &mut StartLogWatch,
    signals: &mut PilotSignals,
    clock: impl Fn() -> DateTime<Utc>,
    mut progress: impl FnMut(u64),
) -> PilotExit {
    let master = &programs.master;
    let mut command = Command::new(master);
    command
        .arg("-f")
        .envs(programs.env.vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            tracing::error!(master = %master.display(), error = %e, "condor_master could not be started");
            return PilotExit::CondorFailed;
        }
    };
    let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
        tracing::error!("condor_master exited before its pid was known");
        return PilotExit::CondorFailed;
    };
    tracing::info!(pid, start_log = %watch.path().display(), "condor_master started");

    let mut state = Lifecycle::new(limits);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut master_done = false;
    loop {
        let mut events = Vec::new();
        tokio::select! {
            status = child.wait(), if !master_done => {
                master_done = true;
                // Read the log's last lines first: a job may have started just before the end.
                events.extend(watch.poll());
                let exit = match status {
                    Ok(status) => master_exit(status),
                    Err(e) => {
                        tracing::error!(error = %e, "could not wait for condor_master");
                        MasterExit::Code(-1)
                    }
                };
                tracing::info!(?exit, "condor_master exited");
                events.push(Event::MasterExited(exit));
            }
            sig = signals.recv() => {
                tracing::info!(signal = ?sig, "received signal");
                events.push(Event::Signal(sig));
            }
            _ = tick.tick() => {
                events.extend(watch.poll());
                reap_orphans(Some(pid));
                progress(watch.jobs_started());
                events.push(Event::Tick);
            }
        }
        for event in events {
            if matches!(event, Event::JobStarted) {
                tracing::info!("a job started on this worker");
            }
            let (next, effects) = state.on_event(event, clock());
            state = next;
            for effect in effects {
                match effect {
                    Effect::GracefulShutdown => {
                        tracing::info!(pid, "asking condor for a graceful shutdown (SIGTERM)");
                        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
                    }
                    Effect::FastShutdown => {
                        tracing::warn!(pid, "asking condor for a fast shutdown (SIGQUIT)");
                        let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
                    }
                    Effect::KillCondor => {
                        tracing::error!(pid, "condor did not shut down in time; killing it");
                        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                    }
                    Effect::CleanUp => clean_up(pid).await,
                    Effect::Exit(code) => return code,
                }
            }
        }
    }
}
