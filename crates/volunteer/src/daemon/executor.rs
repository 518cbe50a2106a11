//! Carries out a plan's actions in order and says, for each, whether it was done (`Executed`):
//! a typed error when not, never a string. Quick actions (pause, resume, kill, remove, start) are
//! awaited; long ones (a graceful stop, a pull) start as tasks beside the loop and are marked
//! in flight so the next plan does not issue them again. After a start fails, the plan's other
//! starts wait for the next cycle (the back-off decides when). Records nothing: the cycle
//! turns the results into outcomes, status lines and metrics.

use super::Work;
use super::tasks;
use super::triggers::Interrupt;
use crate::act::backend::{Backend, BackendError};
use crate::act::egress::{EgressError, Guard};
use crate::act::scratch::{self, RemovalError, ScratchError};
use crate::decide::plan::Action;
use crate::settings::WorkerSettings;
use crate::worker::{WorkerSpec, labels};
use std::time::Duration;

/// Why an action failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Scratch(#[from] ScratchError),
    #[error(transparent)]
    Egress(#[from] EgressError),
}

/// One action and what became of it.
#[derive(Debug)]
pub struct Executed {
    pub action: Action,
    pub result: Result<(), ExecError>,
}

/// Executes `actions` in order against `b`.
/// An urgent trigger (`int`) arriving on the way leaves out what would give the machine back
/// to the workers — starts, resumes, pulls — and lets an urgent cycle decide them again;
/// evictions still run.
pub(crate) async fn execute(
    b: &impl Backend,
    actions: &[Action],
    worker: &WorkerSettings,
    work: &mut Work,
    int: &mut Interrupt<'_>,
) -> Vec<Executed> {
    // The plan's evictions come first. Pauses and kills are sent together: the owner waits
    // for the last of them, not for their sum.
    let quick = actions
        .iter()
        .take_while(|a| matches!(a, Action::Pause { .. } | Action::Kill { .. }))
        .count();
    let done =
        futures_util::future::join_all(actions[..quick].iter().map(|a| evict_now(b, a))).await;
    let mut out: Vec<Executed> = actions.iter().zip(done).map(executed).collect();
    let mut start_failed = false;
    for action in &actions[quick..] {
        let start = matches!(action, Action::Start { .. });
        let gives_back = start || matches!(action, Action::Unpause { .. } | Action::Pull { .. });
        if (start && start_failed) || (gives_back && int.poll()) {
            continue;
        }
        let done = executed((action, execute_one(b, action, worker, work).await));
        start_failed |= start && done.result.is_err();
        out.push(done);
    }
    out
}

/// What became of `action`, its failure logged.
fn executed((action, result): (&Action, Result<(), ExecError>)) -> Executed {
    if let Err(e) = &result {
        tracing::error!("{action}: {e}");
    }
    let action = action.clone();
    Executed { action, result }
}

/// How often a pause is tried before the cycle gives up on it (the next cycle plans again).
const PAUSE_TRIES: u32 = 3;

/// A pause or a kill, which needs nothing but the engine.
async fn evict_now(b: &impl Backend, action: &Action) -> Result<(), ExecError> {
    match action {
        Action::Pause { id, name, why } => {
            // runc can fail to freeze a busy container ("unable to freeze") and expects the
            // caller to try again; the owner must not wait for the next cycle.
            let mut tries = 1;
            while let Err(e) = b.pause(id).await {
                if tries == PAUSE_TRIES {
                    return Err(e.into());
                }
                tracing::warn!(worker = %name, "pause failed ({e}); trying again");
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tracing::info!(worker = %name, "paused: {why}");
            Ok(())
        }
        Action::Kill { id, name, why } => {
            b.kill(id).await?;
            tracing::info!(worker = %name, "killed: {why}");
            Ok(())
        }
        other => unreachable!("not an eviction sent at once: {other}"),
    }
}

async fn execute_one(
    b: &impl Backend,
    action: &Action,
    worker: &WorkerSettings,
    work: &mut Work,
) -> Result<(), ExecError> {
    match action {
        Action::Pause { .. } | Action::Kill { .. } => evict_now(b, action).await,
        Action::Unpause { id, name, why } => {
            b.unpause(id).await?;
            tracing::info!(worker = %name, "resumed: {why}");
            Ok(())
        }
        Action::Limit {
            id,
            name,
            nano_cpus,
            why,
        } => {
            b.limit_cpus(id, *nano_cpus).await?;
            tracing::info!(
                worker = %name,
                cpus = *nano_cpus as f64 / 1e9,
                "CPU quota set: {why}"
            );
            Ok(())
        }
        Action::Stop {
            id,
            name,
            grace_s,
            why,
        } => {
            tracing::info!(worker = %name, grace_s, "stopping: {why}");
            work.in_flight.stopping.insert(id.clone());
            tasks::spawn_stop(&mut work.tasks, b, id, name, Duration::from_secs(*grace_s));
            Ok(())
        }
        Action::Remove { id, name, .. } => {
            match scratch::remove_worker(b, worker, id, name).await {
                Ok(()) => {}
                Err(RemovalError::Container(e)) => return Err(e.into()),
                // The worker is gone: its leftovers do not fail the removal.
                Err(RemovalError::Leftovers(e)) => leftovers_to_gc(name, &e),
            }
            tracing::info!(worker = %name, "removed");
            Ok(())
        }
        Action::Pull { repository, digest } => {
            tracing::info!(image = %format!("{repository}@{digest}"), "pulling");
            work.in_flight.pulling = Some(digest.clone());
            tasks::spawn_pull(&mut work.tasks, b, repository, digest);
            Ok(())
        }
        Action::Start { spec } => start(b, spec, worker, &work.egress).await,
    }
}

async fn start(
    b: &impl Backend,
    spec: &WorkerSpec,
    worker: &WorkerSettings,
    guard: &Guard,
) -> Result<(), ExecError> {
    // pilotd's own network and its filter, in place before any worker joins it: the filter
    // is checked whole, and rebuilt without a gap when it is not (a firewall reload may have
    // flushed it); when that fails, the start fails, so no worker ever runs unfiltered.
    if let Some(f) = &worker.egress {
        b.ensure_network(&f.network, &f.interface).await?;
        guard.ensure(f).await?;
    }
    let begun = std::time::Instant::now();
    let started: Result<String, ExecError> = async {
        // mke2fs and fallocate block: beside the runtime's threads.
        let (s, w) = (spec.clone(), worker.clone());
        let prepared = tokio::task::spawn_blocking(move || scratch::prepare(&s, &w)).await;
        // The device stays attached while `attached` lives (to the end of this block); once
        // the engine mounted it, the mount holds it, and the engine's unmount at the worker's
        // end detaches it.
        let attached =
            prepared.unwrap_or_else(|e| Err(ScratchError::Interrupted(e.to_string())))?;
        let mut spec = spec.clone();
        spec.scratch_device = attached.as_ref().map(|a| a.device.clone());
        Ok(b.start(&spec).await?)
    }
    .await;
    let id = match started {
        Ok(id) => id,
        Err(e) => {
            remove_scratch(b, worker, &spec.name).await;
            return Err(e);
        }
    };
    tracing::info!(
        worker = %spec.name,
        id = %id.get(..12).unwrap_or(&id),
        cpus = spec.nano_cpus / 1_000_000_000,
        memory_mib = spec.memory_bytes >> 20,
        disk_mib = spec.disk_image.as_ref().map(|i| i.bytes >> 20),
        // Scratch ready and the engine's create and start: the cost of a start.
        start_ms = begun.elapsed().as_millis() as u64,
        image = %spec.image_pinned,
        die_at = spec.labels.get(labels::DIE_AT).map(String::as_str).unwrap_or("-"),
        "started"
    );
    Ok(())
}

/// A worker's scratch, disk image and token copy go (`scratch::remove`); what fails is left
/// to GC, which finds it again by its name.
pub(crate) async fn remove_scratch(b: &impl Backend, worker: &WorkerSettings, name: &str) {
    if let Err(e) = scratch::remove(b, worker, name).await {
        leftovers_to_gc(name, &e);
    }
}

fn leftovers_to_gc(name: &str, e: &ScratchError) {
    tracing::warn!(worker = %name, "{e}; GC retries later");
}
