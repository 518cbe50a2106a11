//! The Docker Engine backend (bollard; Podman's Docker-compatible socket works too).

mod container;
pub(super) mod errors;
mod images;
mod network;
mod observe;
mod workers;

pub(crate) use errors::map_error;

use super::BackendError;
use super::freezer::Freezers;
use crate::settings::EngineSettings;
use crate::worker::labels;
use bollard::Docker;
use bollard::errors::Error as DockerError;
use std::collections::HashMap;
use std::time::Duration;

/// The Docker Engine backend (bollard 0.21; Podman's Docker-compatible socket works too).
///
/// Facts this backend is shaped by (see the reference notes on bollard):
/// - a pull is always by digest (a tag-less pull would fetch every tag);
/// - digests come from `inspect_image().repo_digests`, and the registry's current digest of a
///   tag from one HEAD to the registry (`volunteer::observe::registry`); `/distribution/{ref}/json`
///   (four registry requests) only when pilotd cannot reach the registry itself;
/// - remove may answer 409 "already in progress": that is done, not failed;
/// - the request timeout covers "request sent → headers received", so `docker stop` with a
///   long grace needs a client with a longer timeout;
/// - a list that fails to decode fails as a whole and is reported as an error, never as empty.
#[derive(Clone)]
pub struct DockerBackend {
    docker: Docker,
    /// The socket or URL, for error messages.
    endpoint: String,
    instance: String,
    timeout: Duration,
    /// The freshness check's own registry client (one HEAD per check).
    resolver: std::sync::Arc<crate::observe::registry::Resolver>,
    /// Workers' cgroup freezers: pilotd pauses through them (`freezer.rs`).
    freezers: std::sync::Arc<Freezers>,
    /// Each live worker's CPU quota (NanoCpus) as last set or read: the engine's list does
    /// not carry it, so a worker is inspected for it once, not every cycle.
    quotas: std::sync::Arc<std::sync::Mutex<HashMap<String, i64>>>,
    /// The engine was found once not to set a quota it was asked for (said once, at warn).
    quota_fallback: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl DockerBackend {
    /// Connects (lazily: no request is made) to `socket`, a `unix://` path or `tcp://`/`http://`
    /// URL. A missing socket file is reported here, with what to check.
    pub fn connect(engine: &EngineSettings) -> Result<DockerBackend, BackendError> {
        let (socket, timeout) = (engine.socket.as_str(), engine.timeout);
        let secs = timeout.as_secs().max(1);
        let result = if let Some(rest) = socket
            .strip_prefix("tcp://")
            .or_else(|| socket.strip_prefix("http://"))
        {
            Docker::connect_with_http(rest, secs, bollard::API_DEFAULT_VERSION)
        } else {
            let path = socket.strip_prefix("unix://").unwrap_or(socket);
            Docker::connect_with_unix(path, secs, bollard::API_DEFAULT_VERSION)
        };
        let docker = result.map_err(|e| map_error("connecting", socket, e))?;
        Ok(DockerBackend {
            docker,
            endpoint: socket.to_string(),
            instance: engine.instance.clone(),
            timeout,
            resolver: std::sync::Arc::new(crate::observe::registry::Resolver::new(timeout)),
            freezers: std::sync::Arc::default(),
            quotas: std::sync::Arc::default(),
            quota_fallback: std::sync::Arc::default(),
        })
    }

    fn err(&self, what: impl Into<String>, e: DockerError) -> BackendError {
        map_error(what, &self.endpoint, e)
    }

    /// The answer to a call for which "not found" means done: what it would remove is gone.
    fn gone_is_done<T>(
        &self,
        what: impl Into<String>,
        asked: Result<T, DockerError>,
    ) -> Result<(), BackendError> {
        match asked.map_err(|e| self.err(what, e)) {
            Ok(_) | Err(BackendError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn label_filter(&self) -> HashMap<String, Vec<String>> {
        HashMap::from([(
            "label".to_string(),
            vec![
                format!("{}=true", labels::MANAGED),
                format!("{}={}", labels::INSTANCE, self.instance),
            ],
        )])
    }
}
