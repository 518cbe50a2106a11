//! The Docker Engine backend (bollard 0.21; Podman's Docker-compatible socket works too).
//!
//! Facts this file is shaped by (see the reference notes on bollard):
//! - a pull is always by digest (a tag-less pull would fetch every tag);
//! - digests come from `inspect_image().repo_digests`, and the registry's current digest of a
//!   tag from one HEAD to the registry (`volunteer::registry`); `/distribution/{ref}/json`
//!   (four registry requests) only when pilotd cannot reach the registry itself;
//! - remove may answer 409 "already in progress": that is done, not failed;
//! - the request timeout covers "request sent → headers received", so `docker stop` with a
//!   long grace needs a client with a longer timeout;
//! - a list that fails to decode fails as a whole and is reported as an error, never as empty.

use super::freezer::{Freezer, Freezers};
use super::{Backend, BackendError, BackendEvent};
use crate::volunteer::settings::EngineSettings;
use crate::volunteer::worker::parse_gpus_label;
use crate::volunteer::worker::{
    CpuSample, LocalImage, Worker, WorkerSpec, WorkerState, labels, parse_instant,
};
use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, DeviceRequest, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, MountVolumeOptions, MountVolumeOptionsDriverConfig,
    NetworkCreateRequest, ResourcesUlimits,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, EventsOptionsBuilder,
    InspectNetworkOptions, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListImagesOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, RemoveVolumeOptions, StatsOptionsBuilder,
    StopContainerOptionsBuilder,
};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

#[derive(Clone)]
pub struct DockerBackend {
    docker: Docker,
    /// The socket or URL, for error messages.
    endpoint: String,
    instance: String,
    timeout: Duration,
    /// The freshness check's own registry client (one HEAD per check).
    resolver: std::sync::Arc<crate::volunteer::registry::Resolver>,
    /// Workers' cgroup freezers: pilotd pauses through them (`freezer.rs`).
    freezers: std::sync::Arc<Freezers>,
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
            resolver: std::sync::Arc::new(crate::volunteer::registry::Resolver::new(timeout)),
            freezers: std::sync::Arc::default(),
        })
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The worker's freezer, looked up once (its init process, from the engine); `None` when
    /// it cannot be used from here or the worker does not run.
    async fn freezer(&self, id: &str) -> Option<Freezer> {
        if let Some(known) = self.freezers.get(id) {
            return known;
        }
        let pid = match self.docker.inspect_container(id, None).await {
            Ok(i) => i.state.and_then(|s| s.pid),
            // Asked again next time: the engine may answer then.
            Err(_) => return None,
        };
        let f = pid
            .and_then(|p| u32::try_from(p).ok())
            .filter(|&p| p > 0)
            .and_then(|p| Freezer::of(p, id));
        if f.is_none() {
            tracing::debug!(worker = %id, "no cgroup freezer usable from here; the engine pauses it");
        }
        self.freezers.set(id, f.clone());
        f
    }

    /// A worker pilotd froze itself is thawed before the engine acts on it: the engine
    /// believes it runs, and a frozen task does not even die of SIGKILL in cgroup v1.
    fn thaw_if_frozen_here(&self, id: &str) {
        if !self.freezers.frozen_here(id) {
            return;
        }
        if let Some(Some(f)) = self.freezers.get(id)
            && let Err(e) = f.thaw()
        {
            tracing::debug!(worker = %id, "thawing: {e}");
        }
        self.freezers.mark(id, false);
    }

    fn err(&self, what: impl Into<String>, e: DockerError) -> BackendError {
        map_error(what, &self.endpoint, e)
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

    /// An image that declares a `VOLUME` would have the engine make a volume for it under its
    /// own directory, outside the worker's disk limit: refused, unless the path is the scratch
    /// mount itself (the limited scratch covers it).
    async fn refuse_volumes(&self, spec: &WorkerSpec) -> Result<(), BackendError> {
        let image = self
            .docker
            .inspect_image(&spec.image_pinned)
            .await
            .map_err(|e| self.err(format!("inspecting image {}", spec.image_pinned), e))?;
        let declared: Vec<String> = image
            .config
            .and_then(|c| c.volumes)
            .map(|v| v.into_iter().collect())
            .unwrap_or_default();
        let uncovered = uncovered_volumes(&declared, &spec.scratch_mount);
        if uncovered.is_empty() {
            return Ok(());
        }
        Err(BackendError::Rejected {
            what: format!("starting worker {}", spec.name),
            message: format!(
                "the image {} declares VOLUME {}: the engine would keep what a job writes there outside the worker's disk share; pilotd does not run such images (remove the VOLUME line from the image, or make it the scratch mount {})",
                spec.image_pinned,
                uncovered.join(", "),
                spec.scratch_mount.display()
            ),
        })
    }

    async fn inspect_local(&self, reference: &str) -> Result<Option<LocalImage>, BackendError> {
        match self.docker.inspect_image(reference).await {
            Ok(i) => Ok(Some(LocalImage {
                size: i.size.unwrap_or_default().max(0) as u64,
                id: i.id.unwrap_or_default(),
                repo_digests: i.repo_digests.unwrap_or_default(),
                repo_tags: i.repo_tags.unwrap_or_default(),
                labels: i
                    .config
                    .and_then(|c| c.labels)
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                created: i.created.as_ref().and_then(|c| parse_instant(Some(c))),
            })),
            Err(e) => match self.err(format!("inspecting image {reference}"), e) {
                BackendError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }
}

/// A change of a worker's state that the engine may refuse because the worker is already
/// where the change would take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
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
pub fn already_there(change: Change, e: BackendError) -> Result<(), BackendError> {
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
pub fn map_error(what: impl Into<String>, endpoint: &str, e: DockerError) -> BackendError {
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
            let message = crate::service::logging::with_causes(&other);
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
fn registry_error(e: BackendError) -> BackendError {
    match e {
        BackendError::Rejected { what, message } => BackendError::Registry { what, message },
        BackendError::NotFound { what } => BackendError::Registry {
            message: what.clone(),
            what,
        },
        other => other,
    }
}

fn time_of(s: Option<&String>) -> Option<DateTime<Utc>> {
    // The engine says "0001-01-01T00:00:00Z" for "never".
    parse_instant(s).filter(|t| t.timestamp() > 0)
}

impl Backend for DockerBackend {
    /// Tells Docker from Podman in the log.
    async fn describe_engine(&self) -> Result<String, BackendError> {
        let v = self
            .docker
            .version()
            .await
            .map_err(|e| self.err("asking the engine's version", e))?;
        let names: Vec<String> = v
            .components
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect();
        Ok(format!(
            "{} {} (API {})",
            if names.is_empty() {
                "engine".to_string()
            } else {
                names.join("+")
            },
            v.version.unwrap_or_default(),
            v.api_version.unwrap_or_default()
        ))
    }

    async fn list_workers(&self) -> Result<Vec<Worker>, BackendError> {
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&self.label_filter())
            .build();
        let list = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(|e| self.err("listing workers", e))?;
        let mut workers = Vec::with_capacity(list.len());
        for c in list {
            let labels = c.labels.unwrap_or_default();
            // The engine filtered already; checking again keeps "never touch what is not
            // ours" true even against an engine that ignores filters.
            if labels.get(labels::MANAGED).map(String::as_str) != Some("true")
                || labels.get(labels::INSTANCE) != Some(&self.instance)
            {
                continue;
            }
            let id = c.id.unwrap_or_default();
            let name = c
                .names
                .and_then(|n| n.into_iter().next())
                .map(|n| n.trim_start_matches('/').to_string())
                .unwrap_or_else(|| id.clone());
            let state = c
                .state
                .map(|s| WorkerState::parse(s.as_ref()))
                .unwrap_or(WorkerState::Unknown);
            let mut w = Worker {
                id: id.clone(),
                name,
                state,
                created: parse_instant(labels.get(labels::CREATED))
                    .or_else(|| c.created.and_then(|s| DateTime::from_timestamp(s, 0))),
                accept_until: parse_instant(labels.get(labels::ACCEPT_UNTIL)),
                die_at: parse_instant(labels.get(labels::DIE_AT)),
                image: labels.get(labels::IMAGE).cloned().unwrap_or_default(),
                image_digest: labels
                    .get(labels::IMAGE_DIGEST)
                    .cloned()
                    .unwrap_or_default(),
                spec_hash: labels.get(labels::SPEC_HASH).cloned().unwrap_or_default(),
                exit_code: None,
                finished_at: None,
                oom_killed: false,
                gpus: parse_gpus_label(labels.get(labels::GPUS)),
                disk_kib: labels.get(labels::DISK_KIB).and_then(|v| v.parse().ok()),
            };
            if state == WorkerState::Running {
                // Frozen by pilotd (the engine still says running): paused.
                let frozen = match self.freezer(&id).await {
                    Some(f) => f.is_frozen().unwrap_or(false),
                    None => false,
                };
                self.freezers.mark(&id, frozen);
                if frozen {
                    w.state = WorkerState::Paused;
                }
            }
            if state.is_finished() {
                match self.docker.inspect_container(&id, None).await {
                    Ok(i) => {
                        if let Some(s) = i.state {
                            w.exit_code = s.exit_code;
                            w.finished_at = time_of(s.finished_at.as_ref());
                            w.oom_killed = s.oom_killed.unwrap_or(false);
                        }
                    }
                    // Removed between list and inspect: it is gone, skip it.
                    Err(DockerError::DockerResponseServerError {
                        status_code: 404, ..
                    }) => continue,
                    Err(e) => return Err(self.err(format!("inspecting worker {}", w.name), e)),
                }
            }
            workers.push(w);
        }
        workers.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
        self.freezers
            .retain(&workers.iter().map(|w| w.id.as_str()).collect());
        Ok(workers)
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, BackendError> {
        let what = format!("resolving {reference} at its registry");
        let direct = match self.resolver.digest(reference).await {
            Ok(d) => return Ok(d),
            // The registry answered (unknown tag, credentials needed): that is the answer.
            Err(e) if e.is_answer() => {
                return Err(BackendError::Registry {
                    what,
                    message: e.to_string(),
                });
            }
            // Not reachable from here: the engine may know a way (a mirror, an insecure
            // registry setting), at the cost of its four requests.
            Err(e) => {
                tracing::debug!("{e}; asking through the engine instead");
                e
            }
        };
        // Both failed: say both, on one line (Podman 4.3 has no /distribution route at all and
        // answers a bare "Not Found" with a newline in it).
        let d = self
            .docker
            .inspect_registry_image(reference, None)
            .await
            .map_err(|e| BackendError::Registry {
                what: what.clone(),
                message: format!(
                    "{direct}; through the engine: {}",
                    registry_error(self.err(what.clone(), e))
                        .to_string()
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            })?;
        d.descriptor
            .digest
            .filter(|d| d.starts_with("sha256:"))
            .ok_or(BackendError::Registry {
                what,
                message: "the registry's answer names no digest".into(),
            })
    }

    async fn local_image(&self, reference: &str) -> Result<Option<LocalImage>, BackendError> {
        self.inspect_local(reference).await
    }

    async fn pull_image(&self, repository: &str, digest: &str) -> Result<LocalImage, BackendError> {
        let pinned = format!("{repository}@{digest}");
        let what = format!("pulling {pinned}");
        let opts = CreateImageOptionsBuilder::default()
            .from_image(repository)
            .tag(digest)
            .build();
        let mut stream = self.docker.create_image(Some(opts), None, None);
        // Per-layer progress: one line when a layer starts, one when it is done, never one
        // per chunk (a pull emits thousands of "Downloading" updates).
        let mut layer_sizes: HashMap<String, i64> = HashMap::new();
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| registry_error(self.err(what.clone(), e)))?;
            let (Some(layer), Some(status)) = (info.id.as_deref(), info.status.as_deref()) else {
                continue;
            };
            if let Some(total) = info.progress_detail.as_ref().and_then(|p| p.total) {
                layer_sizes.insert(layer.to_string(), total);
            }
            match status {
                "Pulling fs layer" | "Already exists" | "Pull complete" => tracing::info!(
                    image = %pinned,
                    layer,
                    bytes = layer_sizes.get(layer).copied().unwrap_or(0),
                    "{}",
                    status.to_lowercase()
                ),
                _ => {}
            }
        }
        self.inspect_local(&pinned)
            .await?
            .ok_or(BackendError::Registry {
                what,
                message: "the pull ended but the image is not there".into(),
            })
    }

    async fn list_images(&self, repository: &str) -> Result<Vec<LocalImage>, BackendError> {
        let opts = ListImagesOptionsBuilder::default().all(false).build();
        let list = self
            .docker
            .list_images(Some(opts))
            .await
            .map_err(|e| self.err(format!("listing images of {repository}"), e))?;
        let ours = |r: &String| {
            r.strip_prefix(repository)
                .is_some_and(|rest| rest.starts_with('@') || rest.starts_with(':'))
        };
        Ok(list
            .into_iter()
            .filter(|i| i.repo_digests.iter().any(ours) || i.repo_tags.iter().any(ours))
            .map(|i| LocalImage {
                size: i.size.max(0) as u64,
                id: i.id,
                repo_digests: i.repo_digests,
                repo_tags: i.repo_tags,
                labels: i.labels.into_iter().collect(),
                created: DateTime::from_timestamp(i.created, 0),
            })
            .collect())
    }

    async fn remove_image(&self, id: &str) -> Result<(), BackendError> {
        let opts = RemoveImageOptionsBuilder::default()
            .force(false)
            .noprune(false)
            .build();
        match self.docker.remove_image(id, Some(opts), None).await {
            Ok(_) => Ok(()),
            Err(e) => match self.err(format!("removing image {id}"), e) {
                BackendError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn start(&self, spec: &WorkerSpec) -> Result<String, BackendError> {
        self.refuse_volumes(spec).await?;
        let body = container_body(spec);
        let opts = CreateContainerOptionsBuilder::default()
            .name(&spec.name)
            .build();
        let created = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(|e| self.err(format!("creating worker {}", spec.name), e))?;
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let err = self.err(format!("starting worker {}", spec.name), e);
            // Leave nothing half-made behind; the error says why it did not start.
            let _ = self.remove(&created.id).await;
            return Err(err);
        }
        Ok(created.id)
    }

    async fn pause(&self, id: &str) -> Result<(), BackendError> {
        if let Some(f) = self.freezer(id).await {
            // Frozen, and not by pilotd: the engine paused it (an older pilotd did), and the
            // engine must resume it.
            if !self.freezers.frozen_here(id) && f.is_frozen().unwrap_or(false) {
                return Ok(());
            }
            match f.freeze().await {
                Ok(()) => {
                    self.freezers.mark(id, true);
                    return Ok(());
                }
                // Gone meanwhile, or the cgroup refused: the engine answers for it. A refusal
                // (a read-only /sys/fs/cgroup: a unit with ProtectControlGroups=yes, a
                // container) makes every pause slower under load, so it is said once aloud.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ReadOnlyFilesystem
                            | std::io::ErrorKind::PermissionDenied
                    ) && self.freezers.first_refusal() =>
                {
                    tracing::warn!(
                    worker = %id,
                    "cannot freeze the worker's cgroup ({e}); pausing through the engine, \
                     which can take a tenth of a second on a busy machine\n  \
                     hint: pilotd needs /sys/fs/cgroup writable (the shipped unit leaves it so)"
                    );
                }
                Err(e) => tracing::debug!(worker = %id, "freezing: {e}; asking the engine"),
            }
        }
        match self.docker.pause_container(id).await {
            Ok(()) => Ok(()),
            Err(e) => already_there(Change::Pause, self.err(format!("pausing worker {id}"), e)),
        }
    }

    async fn unpause(&self, id: &str) -> Result<(), BackendError> {
        if self.freezers.frozen_here(id)
            && let Some(Some(f)) = self.freezers.get(id)
            && f.thaw().is_ok()
        {
            self.freezers.mark(id, false);
            return Ok(());
        }
        match self.docker.unpause_container(id).await {
            Ok(()) => Ok(()),
            Err(e) => already_there(
                Change::Unpause,
                self.err(format!("resuming worker {id}"), e),
            ),
        }
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<(), BackendError> {
        self.thaw_if_frozen_here(id);
        let t = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        // The engine answers only once the container has stopped, up to `grace` later.
        let docker = self
            .docker
            .clone()
            .with_timeout(grace.saturating_add(self.timeout));
        let opts = StopContainerOptionsBuilder::default().t(t).build();
        match docker.stop_container(id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) => already_there(Change::Stop, self.err(format!("stopping worker {id}"), e)),
        }
    }

    async fn kill(&self, id: &str) -> Result<(), BackendError> {
        self.thaw_if_frozen_here(id);
        let opts = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        match self.docker.kill_container(id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) => already_there(Change::Kill, self.err(format!("killing worker {id}"), e)),
        }
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        self.thaw_if_frozen_here(id);
        let opts = RemoveContainerOptionsBuilder::default()
            .force(false)
            .v(true)
            .build();
        match self.docker.remove_container(id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) => already_there(Change::Remove, self.err(format!("removing worker {id}"), e)),
        }
    }

    async fn ensure_network(&self, name: &str, interface: &str) -> Result<(), BackendError> {
        let what = format!("pilotd's network {name}");
        match self
            .docker
            .inspect_network(name, None::<InspectNetworkOptions>)
            .await
        {
            Ok(n) => {
                let l = n.labels.unwrap_or_default();
                if l.get(labels::MANAGED).map(String::as_str) == Some("true")
                    && l.get(labels::INSTANCE) == Some(&self.instance)
                {
                    Ok(())
                } else {
                    Err(BackendError::Rejected {
                        what,
                        message: format!(
                            "a network named {name} exists and is not this pilotd's; pilotd \
                             never touches it: remove or rename it, or name another network in \
                             [worker] network"
                        ),
                    })
                }
            }
            Err(e) => match self.err(&what, e) {
                BackendError::NotFound { .. } => {
                    let body = NetworkCreateRequest {
                        name: name.to_string(),
                        driver: Some("bridge".into()),
                        // No traffic between workers; the interface name the filter matches.
                        options: Some(HashMap::from([
                            (
                                "com.docker.network.bridge.enable_icc".to_string(),
                                "false".to_string(),
                            ),
                            (
                                "com.docker.network.bridge.name".to_string(),
                                interface.to_string(),
                            ),
                        ])),
                        labels: Some(HashMap::from([
                            (labels::MANAGED.to_string(), "true".to_string()),
                            (labels::INSTANCE.to_string(), self.instance.clone()),
                        ])),
                        ..Default::default()
                    };
                    match self.docker.create_network(body).await {
                        Ok(_) => {
                            tracing::info!(
                                network = name,
                                interface,
                                "created pilotd's network for workers"
                            );
                            Ok(())
                        }
                        Err(e) => match self.err(format!("creating {what}"), e) {
                            // Created by a concurrent call in the meantime.
                            BackendError::Conflict { .. } => Ok(()),
                            other => Err(other),
                        },
                    }
                }
                other => Err(other),
            },
        }
    }

    async fn remove_volume(&self, name: &str) -> Result<(), BackendError> {
        let what = format!("the disk volume of worker {name}");
        let volume = match self.docker.inspect_volume(name).await {
            Ok(v) => v,
            Err(e) => {
                return match self.err(&what, e) {
                    BackendError::NotFound { .. } => Ok(()),
                    other => Err(other),
                };
            }
        };
        let l = &volume.labels;
        if l.get(labels::MANAGED).map(String::as_str) != Some("true")
            || l.get(labels::INSTANCE) != Some(&self.instance)
        {
            return Ok(());
        }
        match self
            .docker
            .remove_volume(name, None::<RemoveVolumeOptions>)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => match self.err(format!("removing {what}"), e) {
                BackendError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn remove_network(&self, name: &str) -> Result<(), BackendError> {
        match self.docker.remove_network(name).await {
            Ok(()) => Ok(()),
            Err(e) => match self.err(format!("removing pilotd's network {name}"), e) {
                BackendError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn output_tail(&self, id: &str, lines: usize) -> Result<Vec<String>, BackendError> {
        let opts = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail(&lines.to_string())
            .build();
        let mut stream = self.docker.logs(id, Some(opts));
        let mut text = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| self.err(format!("reading the output of worker {id}"), e))?;
            text.extend_from_slice(chunk.as_ref());
        }
        let text = String::from_utf8_lossy(&text);
        let all: Vec<String> = text.lines().map(str::to_owned).collect();
        Ok(all[all.len().saturating_sub(lines)..].to_vec())
    }

    async fn cpu_sample(&self, id: &str) -> Result<CpuSample, BackendError> {
        // one_shot: one reading without the engine's own 1 s second sample; the caller
        // differences two readings over its own interval.
        let opts = StatsOptionsBuilder::default()
            .stream(false)
            .one_shot(true)
            .build();
        let what = format!("reading CPU usage of worker {id}");
        let mut stream = self.docker.stats(id, Some(opts));
        let stats = match stream.next().await {
            Some(Ok(s)) => s,
            Some(Err(e)) => return Err(self.err(what, e)),
            None => {
                return Err(BackendError::Rejected {
                    what,
                    message: "the engine sent no statistics".into(),
                });
            }
        };
        let cpu = stats.cpu_stats.unwrap_or_default();
        Ok(CpuSample {
            worker_ns: cpu.cpu_usage.and_then(|u| u.total_usage).unwrap_or(0),
            system_ns: cpu.system_cpu_usage.unwrap_or(0),
        })
    }

    async fn watch(&self, tx: tokio::sync::mpsc::Sender<BackendEvent>) -> Result<(), BackendError> {
        let mut filters = self.label_filter();
        filters.insert("type".into(), vec!["container".into()]);
        filters.insert("event".into(), vec!["die".into(), "oom".into()]);
        // The timeout covers only the response headers, which the engine sends at once; a
        // long one anyway, in case an engine holds them back until the first event.
        let docker = self
            .docker
            .clone()
            .with_timeout(Duration::from_secs(86_400));
        let opts = EventsOptionsBuilder::default().filters(&filters).build();
        let mut stream = docker.events(Some(opts));
        while let Some(ev) = stream.next().await {
            let ev = ev.map_err(|e| self.err("watching worker events", e))?;
            let actor = ev.actor.unwrap_or_default();
            let attrs: BTreeMap<String, String> =
                actor.attributes.unwrap_or_default().into_iter().collect();
            let event = BackendEvent::WorkerExited {
                id: actor.id.unwrap_or_default(),
                name: attrs.get("name").cloned().unwrap_or_default(),
            };
            if tx.send(event).await.is_err() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// tmpfs for /tmp and /var/tmp when the root filesystem is read-only: small (its pages count
/// against the worker's memory limit), no devices, no setuid.
const TMPFS_OPTIONS: &str = "rw,nosuid,nodev,size=256m,mode=1777";

/// The container a `WorkerSpec` becomes: limits, no privileges, all capabilities dropped
/// unless the site gave some back, the token read-only, and GPUs only when the owner shares
/// them. Pure, so the security settings are unit-tested without an engine.
/// The declared volumes that the scratch mount does not cover (trailing slashes aside).
fn uncovered_volumes(declared: &[String], scratch_mount: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = declared
        .iter()
        .filter(|v| {
            std::path::Path::new(v.as_str())
                .components()
                .ne(scratch_mount.components())
        })
        .cloned()
        .collect();
    out.sort();
    out
}

/// The worker's scratch: its disk image's loop device, which the engine mounts as a `local`
/// volume named after the worker (carrying pilotd's labels, so that only pilotd's are ever
/// removed); or, for a measured share, its scratch dir bind-mounted.
fn scratch_mount(spec: &WorkerSpec) -> Mount {
    let target = Some(spec.scratch_mount.display().to_string());
    let Some(device) = &spec.scratch_device else {
        return Mount {
            target,
            source: Some(spec.scratch_dir.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(false),
            ..Default::default()
        };
    };
    let mut l = HashMap::new();
    for key in [labels::MANAGED, labels::INSTANCE] {
        if let Some(v) = spec.labels.get(key) {
            l.insert(key.to_string(), v.clone());
        }
    }
    Mount {
        target,
        source: Some(spec.name.clone()),
        typ: Some(MountType::VOLUME),
        read_only: Some(false),
        volume_options: Some(MountVolumeOptions {
            labels: Some(l),
            driver_config: Some(MountVolumeOptionsDriverConfig {
                name: Some("local".into()),
                options: Some(HashMap::from([
                    ("type".to_string(), "ext4".to_string()),
                    ("device".to_string(), device.display().to_string()),
                    ("o".to_string(), "nosuid,nodev".to_string()),
                ])),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn container_body(spec: &WorkerSpec) -> ContainerCreateBody {
    let mut mounts = vec![scratch_mount(spec)];
    if let Some(token) = &spec.token_file {
        mounts.push(Mount {
            target: Some(spec.token_mount.display().to_string()),
            source: Some(token.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if let Some(dir) = &spec.ad_dir {
        // The machine's slot-ad lines, rewritten by pilotd with a rename: a directory mount,
        // so the worker sees each new file (a file mount would pin the first one).
        mounts.push(Mount {
            target: Some(crate::volunteer::slot_ad::MOUNT.into()),
            source: Some(dir.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if let Some(cvmfs) = &spec.cvmfs {
        mounts.push(Mount {
            target: Some("/cvmfs".into()),
            source: Some(cvmfs.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            // autofs mounts repositories on first access: they must propagate in.
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RSLAVE),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let host_config = HostConfig {
        nano_cpus: Some(spec.nano_cpus),
        memory: Some(spec.memory_bytes),
        // Equal to memory: no swap on top of the limit (the owner's disk is not ours).
        memory_swap: Some(spec.memory_bytes),
        pids_limit: Some(spec.pids_limit),
        init: Some(true),
        privileged: Some(false),
        security_opt: Some(vec!["no-new-privileges:true".into()]),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
        mounts: Some(mounts),
        network_mode: spec.network.clone(),
        // Each worker its own GPUs, by index: a count would give every worker GPU 0.
        device_requests: (!spec.gpu_ids.is_empty()).then(|| {
            vec![DeviceRequest {
                driver: Some("nvidia".into()),
                device_ids: Some(spec.gpu_ids.iter().map(u32::to_string).collect()),
                capabilities: Some(vec![vec!["gpu".into()]]),
                ..Default::default()
            }]
        }),
        // The owner's processes come first: the kernel kills a worker before anything of
        // theirs when memory runs out, and a worker gets CPU and disk time only when the owner
        // leaves some (cpu.shares 2 against the default 1024; the I/O weight is ignored, with a
        // warning, on kernels without a weight-aware scheduler).
        oom_score_adj: Some(1000),
        cpu_shares: Some(2),
        blkio_weight: Some(10),
        // The container's log cannot grow without limit on the owner's disk.
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), "10m".to_string()),
                ("max-file".to_string(), "2".to_string()),
            ])),
        }),
        // Open files and processes capped at pilotd's own hard limits, named explicitly: an
        // engine's defaults may lie above what this host lets anyone set (Podman asks for
        // nofile 1048576, and runc fails with "error setting rlimit type 7: operation not
        // permitted" where the host's hard limit is lower and root lacks CAP_SYS_RESOURCE).
        ulimits: Some(own_ulimits()),
        readonly_rootfs: Some(spec.read_only_rootfs),
        tmpfs: spec.read_only_rootfs.then(|| {
            HashMap::from([
                ("/tmp".to_string(), TMPFS_OPTIONS.to_string()),
                ("/var/tmp".to_string(), TMPFS_OPTIONS.to_string()),
            ])
        }),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(spec.image_pinned.clone()),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        user: spec.user.clone(),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// pilotd's own hard limits on open files and processes, as a worker's ulimits (soft = hard):
/// a worker never gets more than the daemon has, and no engine is asked to raise a limit.
/// Processes are capped at 32768 as well: Podman's service lowers its own RLIMIT_NPROC to that
/// and its runtime cannot give a container more (the container's pids_limit, 4096 by
/// default, binds first anyway).
fn own_ulimits() -> Vec<ResourcesUlimits> {
    use nix::sys::resource::{Resource, getrlimit};
    const NPROC_CAP: u64 = 32_768;
    [
        ("nofile", Resource::RLIMIT_NOFILE, u64::MAX),
        ("nproc", Resource::RLIMIT_NPROC, NPROC_CAP),
    ]
    .into_iter()
    .filter_map(|(name, r, cap)| {
        let (_, hard) = getrlimit(r).ok()?;
        // RLIM_INFINITY does not fit an i64 limit; leave that one to the engine.
        let hard = i64::try_from(hard.min(cap)).ok()?;
        Some(ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(hard),
            hard: Some(hard),
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn spec(gpus: u32, token: bool) -> WorkerSpec {
        WorkerSpec {
            name: "pilotd-default-1".into(),
            image: "127.0.0.1:5000/w:1".into(),
            image_pinned: "127.0.0.1:5000/w@sha256:ab".into(),
            image_digest: "sha256:ab".into(),
            labels: BTreeMap::from([("pilotd.managed".into(), "true".into())]),
            env: BTreeMap::from([("NUM_CPUS".into(), "2".into())]),
            nano_cpus: 2_000_000_000,
            memory_bytes: 4 << 30,
            gpu_ids: (0..gpus).map(|i| i + 1).collect(),
            read_only_rootfs: true,
            pids_limit: 4096,
            token_file: token.then(|| PathBuf::from("/var/lib/pilotd/tokens/pilotd-default-1")),
            token_source: token.then(|| PathBuf::from("/etc/pilotd/pool.token")),
            owner: Some((65532, 65532)),
            token_mount: "/etc/pilotd/token".into(),
            scratch_dir: "/var/lib/pilotd/scratch/pilotd-default-1".into(),
            disk_image: None,
            scratch_device: None,
            scratch_mount: "/pilot".into(),
            cvmfs: None,
            ad_dir: None,
            cap_add: vec![],
            user: Some("65532:65532".into()),
            network: None,
        }
    }

    #[test]
    fn workers_are_unprivileged_and_limited() {
        let b = container_body(&spec(0, true));
        let h = b.host_config.unwrap();
        assert_eq!(h.nano_cpus, Some(2_000_000_000));
        assert_eq!(h.memory, Some(4 << 30));
        assert_eq!(h.memory_swap, Some(4 << 30), "no swap beyond the limit");
        assert_eq!(h.pids_limit, Some(4096));
        assert_eq!(h.init, Some(true));
        assert_eq!(h.privileged, Some(false));
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(h.cap_add, None);
        assert_eq!(
            h.security_opt,
            Some(vec!["no-new-privileges:true".to_string()])
        );
        assert_eq!(h.device_requests, None, "no GPU unless shared");
        let mounts = h.mounts.unwrap();
        let token = mounts
            .iter()
            .find(|m| m.target.as_deref() == Some("/etc/pilotd/token"))
            .unwrap();
        assert_eq!(token.read_only, Some(true));
        // The token is a file in the container, never a value in its environment.
        assert!(b.env.unwrap().iter().all(|e| !e.contains("pool.token")));
        assert_eq!(
            b.image.as_deref(),
            Some("127.0.0.1:5000/w@sha256:ab"),
            "pulled by digest"
        );
    }

    #[test]
    fn the_owner_comes_first_and_the_worker_cannot_fill_the_disk() {
        let h = container_body(&spec(0, true)).host_config.unwrap();
        assert_eq!(
            h.oom_score_adj,
            Some(1000),
            "killed before any owner process"
        );
        assert_eq!(h.cpu_shares, Some(2));
        assert_eq!(h.blkio_weight, Some(10));
        let log = h.log_config.unwrap();
        assert_eq!(log.typ.as_deref(), Some("json-file"));
        let opts = log.config.unwrap();
        assert_eq!(opts["max-size"], "10m");
        assert_eq!(opts["max-file"], "2");
        assert_eq!(h.readonly_rootfs, Some(true));
        let tmpfs = h.tmpfs.unwrap();
        assert!(tmpfs["/tmp"].contains("size=256m") && tmpfs["/tmp"].contains("nosuid"));
        assert!(tmpfs.contains_key("/var/tmp"));
        let mut rw = spec(0, true);
        rw.read_only_rootfs = false;
        let h = container_body(&rw).host_config.unwrap();
        assert_eq!(h.readonly_rootfs, Some(false));
        assert_eq!(h.tmpfs, None);
    }

    #[test]
    fn the_scratch_is_the_disk_images_device_mounted_by_the_engine_as_a_labelled_volume() {
        let mut s = spec(0, false);
        s.labels
            .insert(labels::INSTANCE.to_string(), "default".to_string());
        s.scratch_device = Some("/dev/loop7".into());
        let mounts = container_body(&s).host_config.unwrap().mounts.unwrap();
        let m = &mounts[0];
        assert_eq!(m.target.as_deref(), Some("/pilot"));
        assert_eq!(m.typ, Some(MountType::VOLUME));
        assert_eq!(m.source.as_deref(), Some("pilotd-default-1"));
        let v = m.volume_options.as_ref().unwrap();
        let l = v.labels.as_ref().unwrap();
        assert_eq!(l[labels::MANAGED], "true");
        assert_eq!(l[labels::INSTANCE], "default");
        let d = v.driver_config.as_ref().unwrap();
        assert_eq!(d.name.as_deref(), Some("local"));
        let o = d.options.as_ref().unwrap();
        assert_eq!(o["type"], "ext4");
        assert_eq!(o["device"], "/dev/loop7");
        assert_eq!(o["o"], "nosuid,nodev");
        // A measured share: the scratch dir, bind-mounted.
        s.scratch_device = None;
        let mounts = container_body(&s).host_config.unwrap().mounts.unwrap();
        assert_eq!(mounts[0].typ, Some(MountType::BIND));
        assert_eq!(
            mounts[0].source.as_deref(),
            Some("/var/lib/pilotd/scratch/pilotd-default-1")
        );
    }

    #[test]
    fn declared_volumes_other_than_the_scratch_mount_are_refused() {
        let scratch = std::path::Path::new("/pilot");
        assert!(uncovered_volumes(&["/pilot".into(), "/pilot/".into()], scratch).is_empty());
        assert_eq!(
            uncovered_volumes(
                &["/var/lib/x".into(), "/data".into(), "/pilot".into()],
                scratch
            ),
            vec!["/data".to_string(), "/var/lib/x".to_string()]
        );
        assert!(uncovered_volumes(&[], scratch).is_empty());
    }

    #[test]
    fn shared_gpus_become_a_device_request_for_this_workers_own_devices() {
        let h = container_body(&spec(2, false)).host_config.unwrap();
        let r = h.device_requests.unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].driver.as_deref(), Some("nvidia"));
        assert_eq!(r[0].count, None, "a count would give every worker GPU 0");
        assert_eq!(
            r[0].device_ids,
            Some(vec!["1".to_string(), "2".to_string()])
        );
        assert_eq!(r[0].capabilities, Some(vec![vec!["gpu".to_string()]]));
        assert_eq!(h.mounts.unwrap().len(), 1, "no token mount without a token");
    }
}
