//! Carries out a plan's actions in order and says, for each, what became of it (`Executed`):
//! a typed result, never a string. Quick actions (pause, resume, kill, remove, start) are
//! awaited; long ones (a graceful stop, a pull) start as tasks beside the loop and are marked
//! in flight so the next plan does not issue them again. After a start fails, the plan's other
//! starts wait for the next cycle (the back-off decides when). Records nothing: the cycle
//! turns the results into outcomes, status lines and metrics.

use super::Work;
use super::tasks;
use crate::volunteer::backend::{AnyBackend, Backend, BackendError};
use crate::volunteer::plan::Action;
use crate::volunteer::settings::WorkerSettings;
use crate::volunteer::worker::{WorkerSpec, labels};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    Paused,
    Resumed,
    Killed,
    /// The graceful stop runs beside the loop.
    Stopping,
    Removed,
    /// The pull runs beside the loop.
    Pulling,
    Started {
        id: String,
    },
}

/// Why an action failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Scratch(#[from] ScratchError),
}

/// A worker's scratch dir could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    #[error("cannot create scratch dir {}: {source}\n  hint: check [host] scratch in pilotd.toml", dir.display())]
    Create {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot give scratch dir {} to uid {uid}: {source}", dir.display())]
    Chown {
        dir: PathBuf,
        uid: u32,
        source: nix::Error,
    },
    #[error("cannot set permissions of {}: {source}", dir.display())]
    Permissions {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// One action and what became of it.
#[derive(Debug)]
pub struct Executed {
    pub action: Action,
    pub result: Result<Done, ExecError>,
}

/// Executes `actions` in order against `b`.
pub async fn execute(
    b: &AnyBackend,
    actions: &[Action],
    worker: &WorkerSettings,
    work: &mut Work,
) -> Vec<Executed> {
    let mut out = Vec::with_capacity(actions.len());
    let mut start_failed = false;
    for action in actions {
        if start_failed && matches!(action, Action::Start { .. }) {
            continue;
        }
        let result = execute_one(b, action, worker, work).await;
        if let Err(e) = &result {
            tracing::error!("{action}: {e}");
            start_failed |= matches!(action, Action::Start { .. });
        }
        out.push(Executed {
            action: action.clone(),
            result,
        });
    }
    out
}

async fn execute_one(
    b: &AnyBackend,
    action: &Action,
    worker: &WorkerSettings,
    work: &mut Work,
) -> Result<Done, ExecError> {
    match action {
        Action::Pause { id, name, why } => {
            b.pause(id).await?;
            tracing::info!(worker = %name, "paused: {why}");
            Ok(Done::Paused)
        }
        Action::Unpause { id, name, why } => {
            b.unpause(id).await?;
            tracing::info!(worker = %name, "resumed: {why}");
            Ok(Done::Resumed)
        }
        Action::Kill { id, name, why } => {
            b.kill(id).await?;
            tracing::info!(worker = %name, "killed: {why}");
            Ok(Done::Killed)
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
            Ok(Done::Stopping)
        }
        Action::Remove { id, name, .. } => {
            b.remove(id).await?;
            remove_scratch(worker, name);
            tracing::info!(worker = %name, "removed");
            Ok(Done::Removed)
        }
        Action::Pull { repository, digest } => {
            tracing::info!(image = %format!("{repository}@{digest}"), "pulling");
            work.in_flight.pulling = Some(digest.clone());
            tasks::spawn_pull(&mut work.tasks, b, repository, digest);
            Ok(Done::Pulling)
        }
        Action::Start { spec } => start(b, spec, worker).await,
    }
}

async fn start(
    b: &AnyBackend,
    spec: &WorkerSpec,
    worker: &WorkerSettings,
) -> Result<Done, ExecError> {
    prepare_scratch(&spec.scratch_dir, spec.user.as_deref())?;
    match b.start(spec).await {
        Ok(id) => {
            tracing::info!(
                worker = %spec.name,
                id = %id.get(..12).unwrap_or(&id),
                cpus = spec.nano_cpus / 1_000_000_000,
                memory_mib = spec.memory_bytes >> 20,
                image = %spec.image_pinned,
                die_at = spec.labels.get(labels::DIE_AT).map(String::as_str).unwrap_or("-"),
                "started"
            );
            Ok(Done::Started { id })
        }
        Err(e) => {
            remove_scratch(worker, &spec.name);
            Err(e.into())
        }
    }
}

/// Creates a worker's scratch dir (owned by the worker's user when one is configured).
fn prepare_scratch(dir: &Path, user: Option<&str>) -> Result<(), ScratchError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|source| ScratchError::Create {
        dir: dir.to_path_buf(),
        source,
    })?;
    if let Some(user) = user {
        let mut ids = user.split(':').map(|s| s.parse::<u32>().ok());
        if let Some(Some(uid)) = ids.next() {
            let gid = ids.next().flatten();
            nix::unistd::chown(
                dir,
                Some(nix::unistd::Uid::from_raw(uid)),
                gid.map(nix::unistd::Gid::from_raw),
            )
            .map_err(|source| ScratchError::Chown {
                dir: dir.to_path_buf(),
                uid,
                source,
            })?;
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(|source| {
        ScratchError::Permissions {
            dir: dir.to_path_buf(),
            source,
        }
    })
}

/// Removes a worker's scratch dir; failures are left to GC.
fn remove_scratch(worker: &WorkerSettings, name: &str) {
    // Only ever a dir named after one of this instance's workers.
    if !name.starts_with(&worker.name_prefix()) || name.contains('/') {
        return;
    }
    let dir = worker.scratch_root.join(name);
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(
            "cannot remove scratch dir {}: {e}; GC retries later",
            dir.display()
        );
    }
}
