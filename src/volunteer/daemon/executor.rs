//! Carries out a plan's actions in order and says, for each, what became of it (`Executed`):
//! a typed result, never a string. Quick actions (pause, resume, kill, remove, start) are
//! awaited; long ones (a graceful stop, a pull) start as tasks beside the loop and are marked
//! in flight so the next plan does not issue them again. After a start fails, the plan's other
//! starts wait for the next cycle (the back-off decides when). Records nothing: the cycle
//! turns the results into outcomes, status lines and metrics.

use super::Work;
use super::tasks;
use super::triggers::Interrupt;
use crate::volunteer::backend::{AnyBackend, Backend, BackendError};
use crate::volunteer::egress::{EgressError, Filter, Guard};
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
    #[error(transparent)]
    Egress(#[from] EgressError),
}

/// A worker's scratch dir or token copy could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    #[error("cannot create scratch dir {}: {source}\n  hint: check [host] scratch in pilotd.toml", dir.display())]
    Create {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot give {} to uid {uid}: {source}\n  hint: pilotd needs CAP_CHOWN (it runs as root under its unit)", path.display())]
    Chown {
        path: PathBuf,
        uid: u32,
        source: std::io::Error,
    },
    #[error("cannot set permissions of {}: {source}", path.display())]
    Permissions {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot copy the pool token {} for the worker to {}: {source}\n  hint: check [worker] token_file in pilotd.toml", from.display(), to.display())]
    Token {
        from: PathBuf,
        to: PathBuf,
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
/// An urgent trigger (`int`) arriving on the way leaves out what would give the machine back
/// to the workers — starts, resumes, pulls — and lets an urgent cycle decide them again;
/// evictions still run.
pub async fn execute(
    b: &AnyBackend,
    actions: &[Action],
    worker: &WorkerSettings,
    work: &mut Work,
    int: &mut Interrupt<'_>,
) -> Vec<Executed> {
    let mut out = Vec::with_capacity(actions.len());
    // The plan's evictions come first. Pauses and kills are sent together: the owner waits
    // for the last of them, not for their sum.
    let quick = actions
        .iter()
        .take_while(|a| matches!(a, Action::Pause { .. } | Action::Kill { .. }))
        .count();
    let done =
        futures_util::future::join_all(actions[..quick].iter().map(|a| evict_now(b, a))).await;
    for (action, result) in actions[..quick].iter().zip(done) {
        if let Err(e) = &result {
            tracing::error!("{action}: {e}");
        }
        out.push(Executed {
            action: action.clone(),
            result,
        });
    }
    let mut start_failed = false;
    for action in &actions[quick..] {
        if start_failed && matches!(action, Action::Start { .. }) {
            continue;
        }
        if matches!(
            action,
            Action::Start { .. } | Action::Unpause { .. } | Action::Pull { .. }
        ) && int.poll()
        {
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

/// How often a pause is tried before the cycle gives up on it (the next cycle plans again).
const PAUSE_TRIES: u32 = 3;

/// A pause or a kill, which needs nothing but the engine.
async fn evict_now(b: &AnyBackend, action: &Action) -> Result<Done, ExecError> {
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
            Ok(Done::Paused)
        }
        Action::Kill { id, name, why } => {
            b.kill(id).await?;
            tracing::info!(worker = %name, "killed: {why}");
            Ok(Done::Killed)
        }
        other => unreachable!("not an eviction sent at once: {other}"),
    }
}

async fn execute_one(
    b: &AnyBackend,
    action: &Action,
    worker: &WorkerSettings,
    work: &mut Work,
) -> Result<Done, ExecError> {
    match action {
        Action::Pause { .. } | Action::Kill { .. } => evict_now(b, action).await,
        Action::Unpause { id, name, why } => {
            b.unpause(id).await?;
            tracing::info!(worker = %name, "resumed: {why}");
            Ok(Done::Resumed)
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
        Action::Start { spec } => start(b, spec, worker, &work.egress).await,
    }
}

/// pilotd's own network and its filter, in place before any worker joins it: the filter is
/// checked whole, and rebuilt without a gap when it is not (a firewall reload may have flushed
/// it); when that fails, the start fails, so no worker ever runs unfiltered.
async fn ensure_isolation(b: &AnyBackend, f: &Filter, guard: &Guard) -> Result<(), ExecError> {
    b.ensure_network(&f.network, &f.interface).await?;
    guard.ensure(f).await?;
    Ok(())
}

async fn start(
    b: &AnyBackend,
    spec: &WorkerSpec,
    worker: &WorkerSettings,
    guard: &Guard,
) -> Result<Done, ExecError> {
    if let Some(f) = &worker.egress {
        ensure_isolation(b, f, guard).await?;
    }
    prepare_scratch(&spec.scratch_dir, spec.owner)?;
    if let Err(e) = prepare_token(spec) {
        remove_scratch(worker, &spec.name);
        return Err(e.into());
    }
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

/// Creates a worker's scratch dir: owned by the worker's uid and private to it (0700), so
/// condor running unprivileged in the worker can make it its own; root's 0755 when the image's
/// user is unknown.
fn prepare_scratch(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), ScratchError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|source| ScratchError::Create {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mode = match owner {
        Some((uid, gid)) => {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid)).map_err(|source| {
                ScratchError::Chown {
                    path: dir.to_path_buf(),
                    uid,
                    source,
                }
            })?;
            0o700
        }
        None => 0o755,
    };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        ScratchError::Permissions {
            path: dir.to_path_buf(),
            source,
        }
    })
}

/// The worker's own copy of the site's token: the site's file stays root's and private (0600);
/// the copy, in a root-only directory, is readable by the worker's uid alone (0400), and is
/// what gets bind-mounted read-only. With the image's user unknown, the copy is 0444 (still
/// unreachable on the host: its directory is 0700).
fn prepare_token(spec: &WorkerSpec) -> Result<(), ScratchError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let (Some(from), Some(to)) = (&spec.token_source, &spec.token_file) else {
        return Ok(());
    };
    let fail = |source: std::io::Error| ScratchError::Token {
        from: from.clone(),
        to: to.clone(),
        source,
    };
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)?;
    }
    let token = std::fs::read(from).map_err(fail)?;
    // A fresh file (never through a link someone left there), then the owner, then the mode.
    let _ = std::fs::remove_file(to);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(to)
        .map_err(fail)?;
    f.write_all(&token).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    let mode = match spec.owner {
        Some((uid, gid)) => {
            std::os::unix::fs::fchown(&f, Some(uid), Some(gid)).map_err(|source| {
                ScratchError::Chown {
                    path: to.clone(),
                    uid,
                    source,
                }
            })?;
            0o400
        }
        None => 0o444,
    };
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail)
}

/// Removes a worker's scratch dir and token copy; failures are left to GC.
pub(crate) fn remove_scratch(worker: &WorkerSettings, name: &str) {
    // Only ever a dir named after one of this instance's workers.
    if !name.starts_with(&worker.name_prefix()) || name.contains('/') {
        return;
    }
    let _ = std::fs::remove_file(worker.tokens_root.join(name));
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
