//! A recording in-memory backend for the daemon-level unit tests (`daemon/tests.rs`): it keeps
//! workers and images in a table, records every call, and can be told to fail.

use super::{Backend, BackendError, BackendEvent};
use crate::volunteer::worker::{
    CpuSample, LocalImage, Worker, WorkerSpec, WorkerState, split_reference,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct FakeWorld {
    pub workers: Vec<Worker>,
    /// reference (tag form) → digest the registry would answer.
    pub registry: BTreeMap<String, String>,
    pub images: Vec<LocalImage>,
    /// Every call, e.g. "start pilotd-x-1", "stop ID 600s".
    pub calls: Vec<String>,
    /// When set, every call fails as if the engine were down.
    pub unavailable: bool,
    /// When set, resolve and pull fail as if the registry were down.
    pub registry_down: bool,
    /// When set, resolve never answers (a registry that accepts the connection and hangs).
    pub registry_hangs: bool,
    /// Names whose start fails (a bad entrypoint).
    pub failing_starts: Vec<String>,
    /// What each worker printed, by id.
    pub output: BTreeMap<String, Vec<String>>,
    /// Every spec a worker was started from, in order.
    pub specs: Vec<WorkerSpec>,
    /// What `cpu_sample` reads for a worker, by id (zero when unset).
    pub cpu: BTreeMap<String, CpuSample>,
    next_id: u64,
}

#[derive(Debug, Clone, Default)]
pub struct FakeBackend {
    pub world: Arc<Mutex<FakeWorld>>,
}

impl FakeBackend {
    pub fn new() -> FakeBackend {
        FakeBackend::default()
    }

    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, FakeWorld> {
        // A panicking test poisons the lock; the data is still fine for the next assertion.
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn call(&self, what: String) -> Result<std::sync::MutexGuard<'_, FakeWorld>, BackendError> {
        let mut w = self.lock();
        w.calls.push(what.clone());
        if w.unavailable {
            return Err(BackendError::Unavailable {
                what,
                endpoint: "fake".into(),
                message: "engine down".into(),
                hint: "test".into(),
            });
        }
        Ok(w)
    }

    fn set_state(&self, id: &str, what: &str, state: WorkerState) -> Result<(), BackendError> {
        let mut w = self.call(format!("{what} {id}"))?;
        match w.workers.iter_mut().find(|x| x.id == id) {
            Some(x) => {
                x.state = state;
                if state == WorkerState::Exited {
                    x.exit_code = Some(143);
                }
                Ok(())
            }
            None => Err(BackendError::NotFound { what: id.into() }),
        }
    }
}

impl Backend for FakeBackend {
    async fn describe_engine(&self) -> Result<String, BackendError> {
        let _world = self.call("version".into())?;
        Ok("fake engine".into())
    }

    async fn list_workers(&self) -> Result<Vec<Worker>, BackendError> {
        Ok(self.call("list".into())?.workers.clone())
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, BackendError> {
        let hangs = self.call(format!("resolve {reference}"))?.registry_hangs;
        if hangs {
            tokio::time::sleep(Duration::from_secs(86_400)).await;
        }
        let w = self.lock();
        if w.registry_down {
            return Err(BackendError::Registry {
                what: format!("resolving {reference}"),
                message: "connection refused".into(),
            });
        }
        w.registry
            .get(reference)
            .cloned()
            .ok_or(BackendError::Registry {
                what: format!("resolving {reference}"),
                message: "manifest unknown".into(),
            })
    }

    async fn local_image(&self, reference: &str) -> Result<Option<LocalImage>, BackendError> {
        let w = self.call(format!("inspect {reference}"))?;
        Ok(w.images
            .iter()
            .find(|i| {
                i.repo_digests.iter().any(|d| d == reference)
                    || i.repo_tags.iter().any(|t| t == reference)
            })
            .cloned())
    }

    async fn pull_image(&self, repository: &str, digest: &str) -> Result<LocalImage, BackendError> {
        let mut w = self.call(format!("pull {repository}@{digest}"))?;
        if w.registry_down {
            return Err(BackendError::Registry {
                what: format!("pulling {repository}@{digest}"),
                message: "connection refused".into(),
            });
        }
        let image = LocalImage {
            id: format!("sha256:img-{}", digest.trim_start_matches("sha256:")),
            repo_digests: vec![format!("{repository}@{digest}")],
            repo_tags: vec![],
            labels: BTreeMap::new(),
            created: None,
            size: 0,
        };
        w.images.push(image.clone());
        Ok(image)
    }

    async fn list_images(&self, repository: &str) -> Result<Vec<LocalImage>, BackendError> {
        let w = self.call(format!("images {repository}"))?;
        Ok(w.images
            .iter()
            .filter(|i| {
                i.repo_digests
                    .iter()
                    .any(|d| split_reference(d).0 == repository)
            })
            .cloned()
            .collect())
    }

    async fn remove_image(&self, id: &str) -> Result<(), BackendError> {
        let mut w = self.call(format!("rmi {id}"))?;
        w.images.retain(|i| i.id != id);
        Ok(())
    }

    async fn start(&self, spec: &WorkerSpec) -> Result<String, BackendError> {
        let mut w = self.call(format!("start {}", spec.name))?;
        if w.failing_starts.contains(&spec.name) || w.failing_starts.iter().any(|n| n == "*") {
            return Err(BackendError::Rejected {
                what: format!("starting worker {}", spec.name),
                message: "exec /entrypoint: no such file or directory".into(),
            });
        }
        w.next_id += 1;
        let id = format!("id{}", w.next_id);
        let l = &spec.labels;
        let worker = Worker {
            id: id.clone(),
            name: spec.name.clone(),
            state: WorkerState::Running,
            created: crate::volunteer::worker::parse_instant(
                l.get(crate::volunteer::worker::labels::CREATED),
            ),
            accept_until: crate::volunteer::worker::parse_instant(
                l.get(crate::volunteer::worker::labels::ACCEPT_UNTIL),
            ),
            die_at: crate::volunteer::worker::parse_instant(
                l.get(crate::volunteer::worker::labels::DIE_AT),
            ),
            image: spec.image.clone(),
            image_digest: spec.image_digest.clone(),
            spec_hash: l
                .get(crate::volunteer::worker::labels::SPEC_HASH)
                .cloned()
                .unwrap_or_default(),
            exit_code: None,
            finished_at: None,
            oom_killed: false,
            gpus: vec![],
            disk_kib: None,
        };
        w.workers.push(worker);
        w.specs.push(spec.clone());
        Ok(id)
    }

    async fn pause(&self, id: &str) -> Result<(), BackendError> {
        self.set_state(id, "pause", WorkerState::Paused)
    }

    async fn unpause(&self, id: &str) -> Result<(), BackendError> {
        self.set_state(id, "unpause", WorkerState::Running)
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<(), BackendError> {
        self.set_state(
            id,
            &format!("stop {}s", grace.as_secs()),
            WorkerState::Exited,
        )
    }

    async fn kill(&self, id: &str) -> Result<(), BackendError> {
        self.set_state(id, "kill", WorkerState::Exited)
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        let mut w = self.call(format!("remove {id}"))?;
        w.workers.retain(|x| x.id != id);
        Ok(())
    }

    async fn ensure_network(&self, name: &str, interface: &str) -> Result<(), BackendError> {
        let _w = self.call(format!("network {name} {interface}"))?;
        Ok(())
    }

    async fn remove_volume(&self, name: &str) -> Result<(), BackendError> {
        let _w = self.call(format!("volume-rm {name}"))?;
        Ok(())
    }

    async fn remove_network(&self, name: &str) -> Result<(), BackendError> {
        let _w = self.call(format!("network-rm {name}"))?;
        Ok(())
    }

    async fn output_tail(&self, id: &str, lines: usize) -> Result<Vec<String>, BackendError> {
        let w = self.call(format!("logs {id} {lines}"))?;
        let all = w.output.get(id).cloned().unwrap_or_default();
        Ok(all[all.len().saturating_sub(lines)..].to_vec())
    }

    async fn cpu_sample(&self, id: &str) -> Result<CpuSample, BackendError> {
        let w = self.call(format!("stats {id}"))?;
        Ok(w.cpu.get(id).copied().unwrap_or_default())
    }

    async fn watch(
        &self,
        _tx: tokio::sync::mpsc::Sender<BackendEvent>,
    ) -> Result<(), BackendError> {
        std::future::pending::<()>().await;
        Ok(())
    }
}
