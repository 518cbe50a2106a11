//! Backends: the only code that changes the world; told what to do, never whether.

pub mod docker;
#[cfg(test)]
pub(crate) mod fake;
pub mod freezer;

use crate::settings::EngineSettings;
use crate::worker::{CpuSample, LocalImage, Pulled, Worker, WorkerSpec};
use std::future::Future;
use std::time::Duration;

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

/// Something that happened in the runtime and deserves a cycle now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendEvent {
    /// A managed worker stopped (died, was killed, or exited on its own).
    WorkerExited { id: String, name: String },
}

/// Backends: the only code that changes the world. A backend is told *what* to do (start this
/// `WorkerSpec`, stop that worker within this grace) and reports what it observes (`Worker`);
/// it never decides *whether*. Decisions live in `policy` and `plan`.
///
/// The traits use native `async fn`-style methods spelled as `-> impl Future + Send`, so the
/// daemon's futures can move between tokio worker threads; such traits are not dyn-compatible,
/// so the daemon is generic over its `Backend` (Docker in production, the fake in tests).
///
/// State lives in the runtime: everything pilotd needs to rebuild its view after a crash is in
/// the labels of the containers it created (`pilotd.*`, see `worker::labels`).
///
/// A container engine, as the daemon uses it. One trait per concern, so that each is
/// implemented in the Docker backend's file for it (`docker/workers.rs`, `images.rs`,
/// `network.rs`, `observe.rs`) with no layer handing calls on: Rust takes one `impl` block per
/// trait and type. The recording fake implements the same four. A new engine call is declared
/// in its trait here and written in its Docker file (and the fake). `Clone + 'static`: the
/// daemon keeps the engine and hands a copy to each task beside its loop.
pub trait Backend: Workers + Images + Network + Observe + Clone + Send + Sync + 'static {}

impl<T: Workers + Images + Network + Observe + Clone + Send + Sync + 'static> Backend for T {}

/// Workers: listing them and changing their state.
pub trait Workers {
    /// Workers carrying this daemon's labels, in every state. An error is never an empty list.
    fn list_workers(&self) -> impl Future<Output = Result<Vec<Worker>, BackendError>> + Send;

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

    /// Removes the volume named `name` (a worker's disk, after its container is gone) if it
    /// carries this instance's labels; absent, or not pilotd's, is left alone and fine.
    fn remove_volume(&self, name: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Sets a live worker's CPU quota to `nano_cpus` (10⁹ a CPU), as `docker update --cpus`:
    /// the kernel holds it to that at once, and nothing restarts.
    fn limit_cpus(
        &self,
        id: &str,
        nano_cpus: i64,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// Images: the freshness check, pulls, and the local images of a repository.
pub trait Images {
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

    /// Pulls `repository@digest` (always a digest: never a tag-less pull of every tag), and
    /// says how many bytes it downloaded.
    fn pull_image(
        &self,
        repository: &str,
        digest: &str,
    ) -> impl Future<Output = Result<Pulled, BackendError>> + Send;

    /// Local images of one repository (`host/path`, no tag).
    fn list_images(
        &self,
        repository: &str,
    ) -> impl Future<Output = Result<Vec<LocalImage>, BackendError>> + Send;

    /// Removes an image by id; an image still used by a container is a `Conflict`.
    fn remove_image(&self, id: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// pilotd's own bridge network for workers.
pub trait Network {
    /// Makes sure pilotd's own bridge network for this instance exists: created with traffic
    /// between containers off and the given interface name, labelled as pilotd's. A network of
    /// that name that is not pilotd's is an error, never touched.
    fn ensure_network(
        &self,
        name: &str,
        interface: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Removes pilotd's own network (after its workers are gone); absent is fine.
    fn remove_network(&self, name: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// What the engine tells about itself and its workers.
pub trait Observe {
    /// Engine name and version, for the log line when it is first reached.
    fn describe_engine(&self) -> impl Future<Output = Result<String, BackendError>> + Send;

    /// The last `lines` lines a worker printed (stdout and stderr, in order): what remains
    /// to say why it failed once the container is removed.
    fn output_tail(
        &self,
        id: &str,
        lines: usize,
    ) -> impl Future<Output = Result<Vec<String>, BackendError>> + Send;

    /// Cumulative CPU counters of a running or paused worker, and its network bytes (one
    /// statistics call for both).
    fn cpu_sample(&self, id: &str) -> impl Future<Output = Result<CpuSample, BackendError>> + Send;

    /// Streams events about this daemon's workers into `tx` until the stream breaks; the
    /// caller reconnects.
    fn watch(
        &self,
        tx: tokio::sync::mpsc::Sender<BackendEvent>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// Connects the engine pilotd.toml names (no request is made yet).
pub fn connect(engine: &EngineSettings) -> Result<docker::DockerBackend, BackendError> {
    docker::DockerBackend::connect(engine)
}
