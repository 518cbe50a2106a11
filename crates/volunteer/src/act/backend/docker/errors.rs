//! What the engine's refusals mean: bollard's errors mapped to what the caller acts on, and
//! the refusals that mean "already done".

use crate::act::backend::BackendError;
use bollard::errors::Error as DockerError;

/// A change of a worker's state that the engine may refuse because the worker is already
/// where the change would take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Pause,
    Unpause,
    Stop,
    Kill,
    Remove,
}

/// The engine's refusals that mean "already done": the worker is where the change would take
/// it (or gone), so the change succeeded. Every other refusal stays an error — above all
/// removing a running or paused worker (409 "You cannot remove a running container"), which
/// the daemon must never ask for. The words are Docker 20.10's, asked of the real engine by
/// tests/it/docker/engine_refusals.rs; the fake engine answers with the same words.
/// - pause of a paused worker: 409 "Container ID is already paused";
/// - unpause of a worker that is not paused: **500** (not 409) "Container ID is not paused";
/// - stop of a stopped worker: 304, a success for bollard; of a gone one: 404;
/// - kill of a stopped worker: 409 "Cannot kill container: ID: Container ID is not running";
/// - remove of a worker being removed: 409 "removal of container ID is already in progress".
pub(crate) fn already_there(change: Change, e: BackendError) -> Result<(), BackendError> {
    let says = |e: &BackendError, words: &str| match e {
        BackendError::Conflict { message, .. } | BackendError::Rejected { message, .. } => {
            message.contains(words)
        }
        _ => false,
    };
    let done = match change {
        Change::Pause => says(&e, "is already paused"),
        Change::Unpause => says(&e, "is not paused"),
        Change::Stop => matches!(e, BackendError::NotFound { .. }),
        Change::Kill => matches!(e, BackendError::NotFound { .. }) || says(&e, "is not running"),
        Change::Remove => {
            matches!(e, BackendError::NotFound { .. }) || says(&e, "already in progress")
        }
    };
    if done { Ok(()) } else { Err(e) }
}

/// Maps a bollard error to what the caller acts on, naming the endpoint and what to do.
pub(crate) fn map_error(what: impl Into<String>, endpoint: &str, e: DockerError) -> BackendError {
    let what = what.into();
    match e {
        DockerError::DockerResponseServerError {
            status_code: 404,
            message,
        } => BackendError::NotFound {
            what: format!("{what} ({message})"),
        },
        DockerError::DockerResponseServerError {
            status_code: 409,
            message,
        } => BackendError::Conflict { what, message },
        DockerError::DockerResponseServerError {
            status_code,
            message,
        } => BackendError::Rejected {
            what,
            message: format!("HTTP {status_code}: {message}"),
        },
        DockerError::DockerStreamError { error } => BackendError::Rejected {
            what,
            message: error,
        },
        DockerError::JsonDataError { message, .. } => BackendError::Rejected {
            what,
            message: format!("cannot decode the engine's answer: {message}"),
        },
        DockerError::SocketNotFoundError(path) => BackendError::Unavailable {
            what,
            endpoint: endpoint.to_string(),
            message: format!("no socket at {path}"),
            hint: "is the Docker engine running (`systemctl status docker`)? is [docker] socket in pilotd.toml right?".into(),
        },
        DockerError::RequestTimeoutError => BackendError::Unavailable {
            what,
            endpoint: endpoint.to_string(),
            message: "the request timed out".into(),
            hint: "the engine may be restarting or overloaded; pilotd retries next cycle".into(),
        },
        other => {
            let message = pilotd_core::service::logging::with_causes(&other);
            let hint = if message.contains("ermission denied") {
                "run pilotd as root, or give its user access to the socket (the `docker` group)"
            } else if message.contains("onnection refused") || message.contains("No such file") {
                "is the Docker engine running (`systemctl status docker`)? is [docker] socket in pilotd.toml right?"
            } else {
                "pilotd retries next cycle; check the engine's log if this persists"
            };
            BackendError::Unavailable {
                what,
                endpoint: endpoint.to_string(),
                message,
                hint: hint.into(),
            }
        }
    }
}

/// A registry problem surfaced by the engine (HTTP 4xx/5xx on resolve or pull) is reported as
/// such; transport problems with the engine itself stay `Unavailable`.
pub(super) fn registry_error(e: BackendError) -> BackendError {
    match e {
        BackendError::Rejected { what, message } => BackendError::Registry { what, message },
        BackendError::NotFound { what } => BackendError::Registry {
            message: what.clone(),
            what,
        },
        other => other,
    }
}
