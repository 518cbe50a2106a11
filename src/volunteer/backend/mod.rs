//! Backends: the only code that changes the world. A backend is told *what* to do (start this
//! `WorkerSpec`, stop that worker within this grace) and reports what it observes (`Worker`);
//! it never decides *whether*. Decisions live in `policy` and `plan`.
//!
//! The trait uses native `async fn`-style methods spelled as `-> impl Future + Send`, so the
//! daemon's futures can move between tokio worker threads; such traits are not dyn-compatible,
//! hence the `AnyBackend` enum (one arm per backend, dispatch by `match`).
//!
//! State lives in the runtime: everything pilotd needs to rebuild its view after a crash is in
//! the labels of the containers it created (`pilotd.*`, see [`labels`]).

pub mod docker;
#[cfg(any(test, feature = "test-fixtures"))]
pub mod fake;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// Label names. A container without `managed` and the daemon's `instance` is never touched.
pub mod labels {
    pub const MANAGED: &str = "pilotd.managed";
    pub const INSTANCE: &str = "pilotd.instance";
    pub const CREATED: &str = "pilotd.created";
    pub const ACCEPT_UNTIL: &str = "pilotd.accept-until";
    pub const DIE_AT: &str = "pilotd.die-at";
    pub const IMAGE_DIGEST: &str = "pilotd.image-digest";
    pub const SPEC_HASH: &str = "pilotd.spec-hash";
    /// The image reference as configured (tag form), for `status`.
    pub const IMAGE: &str = "pilotd.image";
}

/// Why a backend call failed. The variants are what the caller acts on: `Unavailable` means
/// "nothing is known" (skip GC and starts this cycle), never "there is nothing".
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{what}: not found")]
    NotFound { what: String },
    #[error("{what}: conflict: {message}")]
    Conflict { what: String, message: String },
    #[error("{what}: the engine at {endpoint} is unavailable: {message}\n  hint: {hint}")]
    Unavailable {
        what: String,
        endpoint: String,
        message: String,
        hint: String,
    },
    #[error("{what}: rejected: {message}")]
    Rejected { what: String, message: String },
    /// A registry could not be reached or refused (resolve or pull).
    #[error("{what}: registry error: {message}")]
    Registry { what: String, message: String },
}

impl BackendError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, BackendError::NotFound { .. })
    }
    pub fn is_unavailable(&self) -> bool {
        matches!(self, BackendError::Unavailable { .. })
    }
}

/// A worker's state as the runtime reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Created but never started (pilotd died between create and start).
    Created,
    Running,
    Paused,
    Restarting,
    /// Being removed by the engine.
    Removing,
    Exited,
    Dead,
    /// A state string this build does not know (newer engine, Podman's "stopped").
    Unknown,
}

impl WorkerState {
    pub fn parse(s: &str) -> WorkerState {
        match s {
            "created" => WorkerState::Created,
            "running" => WorkerState::Running,
            "paused" => WorkerState::Paused,
            "restarting" => WorkerState::Restarting,
            "removing" => WorkerState::Removing,
            "exited" | "stopped" => WorkerState::Exited,
            "dead" => WorkerState::Dead,
            _ => WorkerState::Unknown,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Created => "created",
            WorkerState::Running => "running",
            WorkerState::Paused => "paused",
            WorkerState::Restarting => "restarting",
            WorkerState::Removing => "removing",
            WorkerState::Exited => "exited",
            WorkerState::Dead => "dead",
            WorkerState::Unknown => "unknown",
        }
    }
    /// Finished: its outcome can be recorded and the container removed.
    pub fn is_finished(self) -> bool {
        matches!(self, WorkerState::Exited | WorkerState::Dead)
    }
}

/// A worker as observed, rebuilt from the runtime and its labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Worker {
    pub id: String,
    pub name: String,
    pub state: WorkerState,
    /// From the `pilotd.created` label (the engine's own time when the label is unreadable).
    pub created: Option<DateTime<Utc>>,
    pub accept_until: Option<DateTime<Utc>>,
    pub die_at: Option<DateTime<Utc>>,
    /// The configured reference it was started from.
    pub image: String,
    pub image_digest: String,
    pub spec_hash: String,
    /// Only for finished workers.
    pub exit_code: Option<i64>,
    pub finished_at: Option<DateTime<Utc>>,
    pub oom_killed: bool,
}

/// Everything needed to create one worker container. Built by the plan (pure), executed
/// verbatim by a backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerSpec {
    pub name: String,
    /// The configured reference (tag form), recorded in a label for `status`.
    pub image: String,
    /// `repo@sha256:…`: workers always run the exact image that was resolved and pulled.
    pub image_pinned: String,
    pub image_digest: String,
    pub labels: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub nano_cpus: i64,
    pub memory_bytes: i64,
    /// GPUs requested from the engine's NVIDIA device driver (0: none).
    pub gpus: u32,
    pub pids_limit: i64,
    /// Host path of the token file, bind-mounted read-only at `token_mount`. Never in env.
    pub token_file: Option<PathBuf>,
    pub token_mount: PathBuf,
    /// Host path of this worker's scratch dir, mounted at `scratch_mount`.
    pub scratch_dir: PathBuf,
    pub scratch_mount: PathBuf,
    pub cvmfs: Option<PathBuf>,
    pub cap_add: Vec<String>,
    pub user: Option<String>,
    pub network: Option<String>,
}

/// A local image, as the engine has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalImage {
    /// Config digest (`sha256:…`), the engine's image id.
    pub id: String,
    /// `repo@sha256:…` entries: present for pulled or pushed images.
    pub repo_digests: Vec<String>,
    pub repo_tags: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub created: Option<DateTime<Utc>>,
    /// Bytes on disk as the engine reports them (0 when unknown).
    pub size: u64,
}

/// Cumulative CPU counters of one worker, from the engine's stats. The fraction of the whole
/// machine between two samples is `Δworker / Δsystem` (both in ns, system over all CPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuSample {
    pub worker_ns: u64,
    pub system_ns: u64,
}

/// Something that happened in the runtime and deserves a cycle now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendEvent {
    /// A managed worker stopped (died, was killed, or exited on its own).
    WorkerExited { id: String, name: String },
}

pub trait Backend: Send + Sync {
    /// Workers carrying this daemon's labels, in every state. An error is never an empty list.
    fn list_workers(&self) -> impl Future<Output = Result<Vec<Worker>, BackendError>> + Send;

    /// Asks the image's registry which digest `reference` (tag form) points at now, without
    /// pulling. Returns `sha256:…`.
    fn resolve_image(
        &self,
        reference: &str,
    ) -> impl Future<Output = Result<String, BackendError>> + Send;

    /// The local image for a reference (tag or digest form), `None` when absent.
    fn local_image(
        &self,
        reference: &str,
    ) -> impl Future<Output = Result<Option<LocalImage>, BackendError>> + Send;

    /// Pulls `repository@digest` (always a digest: never a tag-less pull of every tag).
    fn pull_image(
        &self,
        repository: &str,
        digest: &str,
    ) -> impl Future<Output = Result<LocalImage, BackendError>> + Send;

    /// Local images of one repository (`host/path`, no tag).
    fn list_images(
        &self,
        repository: &str,
    ) -> impl Future<Output = Result<Vec<LocalImage>, BackendError>> + Send;

    /// Removes an image by id; an image still used by a container is a `Conflict`.
    fn remove_image(&self, id: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Creates and starts a worker; returns its id. A failed start leaves no container behind.
    fn start(&self, spec: &WorkerSpec)
    -> impl Future<Output = Result<String, BackendError>> + Send;

    fn pause(&self, id: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    fn unpause(&self, id: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// SIGTERM, then SIGKILL after `grace`. Returns once the worker has stopped.
    fn stop(
        &self,
        id: &str,
        grace: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    fn kill(&self, id: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Removes a finished worker; "not found" and "removal already in progress" are success.
    fn remove(&self, id: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Cumulative CPU counters of a running or paused worker.
    fn cpu_sample(&self, id: &str) -> impl Future<Output = Result<CpuSample, BackendError>> + Send;

    /// Streams events about this daemon's workers into `tx` until the stream breaks; the
    /// caller reconnects.
    fn watch(
        &self,
        tx: tokio::sync::mpsc::Sender<BackendEvent>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// Enum dispatch over the backends (the trait is not dyn-compatible).
#[derive(Clone)]
pub enum AnyBackend {
    Docker(docker::DockerBackend),
    #[cfg(any(test, feature = "test-fixtures"))]
    Fake(fake::FakeBackend),
}

macro_rules! dispatch {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            AnyBackend::Docker($b) => $e,
            #[cfg(any(test, feature = "test-fixtures"))]
            AnyBackend::Fake($b) => $e,
        }
    };
}

impl Backend for AnyBackend {
    async fn list_workers(&self) -> Result<Vec<Worker>, BackendError> {
        dispatch!(self, b => b.list_workers().await)
    }
    async fn resolve_image(&self, reference: &str) -> Result<String, BackendError> {
        dispatch!(self, b => b.resolve_image(reference).await)
    }
    async fn local_image(&self, reference: &str) -> Result<Option<LocalImage>, BackendError> {
        dispatch!(self, b => b.local_image(reference).await)
    }
    async fn pull_image(&self, repository: &str, digest: &str) -> Result<LocalImage, BackendError> {
        dispatch!(self, b => b.pull_image(repository, digest).await)
    }
    async fn list_images(&self, repository: &str) -> Result<Vec<LocalImage>, BackendError> {
        dispatch!(self, b => b.list_images(repository).await)
    }
    async fn remove_image(&self, id: &str) -> Result<(), BackendError> {
        dispatch!(self, b => b.remove_image(id).await)
    }
    async fn start(&self, spec: &WorkerSpec) -> Result<String, BackendError> {
        dispatch!(self, b => b.start(spec).await)
    }
    async fn pause(&self, id: &str) -> Result<(), BackendError> {
        dispatch!(self, b => b.pause(id).await)
    }
    async fn unpause(&self, id: &str) -> Result<(), BackendError> {
        dispatch!(self, b => b.unpause(id).await)
    }
    async fn stop(&self, id: &str, grace: Duration) -> Result<(), BackendError> {
        dispatch!(self, b => b.stop(id, grace).await)
    }
    async fn kill(&self, id: &str) -> Result<(), BackendError> {
        dispatch!(self, b => b.kill(id).await)
    }
    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        dispatch!(self, b => b.remove(id).await)
    }
    async fn cpu_sample(&self, id: &str) -> Result<CpuSample, BackendError> {
        dispatch!(self, b => b.cpu_sample(id).await)
    }
    async fn watch(&self, tx: tokio::sync::mpsc::Sender<BackendEvent>) -> Result<(), BackendError> {
        dispatch!(self, b => b.watch(tx).await)
    }
}

/// Splits a fully qualified reference into repository and tag or digest:
/// `host:5000/a/b:tag` → (`host:5000/a/b`, Some(tag), None); `host/a@sha256:…` → digest.
pub fn split_reference(reference: &str) -> (String, Option<String>, Option<String>) {
    if let Some((repo, digest)) = reference.split_once('@') {
        let repo = strip_tag(repo);
        return (repo.to_string(), None, Some(digest.to_string()));
    }
    let repo = strip_tag(reference);
    let tag = reference
        .get(repo.len() + 1..)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    (repo.to_string(), tag, None)
}

fn strip_tag(s: &str) -> &str {
    // A ':' after the last '/' is a tag; one before it is a registry port.
    let slash = s.rfind('/').map(|i| i + 1).unwrap_or(0);
    match s[slash..].rfind(':') {
        Some(i) => &s[..slash + i],
        None => s,
    }
}

/// Parses an RFC 3339 label value; a malformed label reads as absent (never a panic).
pub fn parse_instant(s: Option<&String>) -> Option<DateTime<Utc>> {
    s.and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_repository_tag_and_digest() {
        assert_eq!(
            split_reference("127.0.0.1:5000/pilotd-test/worker:1"),
            (
                "127.0.0.1:5000/pilotd-test/worker".into(),
                Some("1".into()),
                None
            )
        );
        assert_eq!(
            split_reference("hub.example.org/a/b@sha256:abc"),
            (
                "hub.example.org/a/b".into(),
                None,
                Some("sha256:abc".into())
            )
        );
        assert_eq!(
            split_reference("localhost:5000/w"),
            ("localhost:5000/w".into(), None, None)
        );
    }

    #[test]
    fn unknown_states_are_not_errors() {
        assert_eq!(WorkerState::parse("stopped"), WorkerState::Exited);
        assert_eq!(WorkerState::parse("weird"), WorkerState::Unknown);
    }
}
