//! Workers: listing what carries this daemon's labels, and changing their state (start,
//! pause through the cgroup freezer, stop, kill, remove, and the worker's disk volume).

use super::DockerBackend;
use super::container::{container_body, uncovered_volumes};
use super::errors::{Change, already_there};
use crate::act::backend::freezer::{CpuQuota, Freezer};
use crate::act::backend::{BackendError, Workers};
use crate::worker::{Worker, WorkerSpec, WorkerState, labels, parse_instant};
use bollard::errors::Error as DockerError;
use bollard::models::ContainerUpdateBody;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveVolumeOptions, StopContainerOptionsBuilder,
};
use chrono::{DateTime, Utc};
use std::time::Duration;

fn time_of(s: Option<&String>) -> Option<DateTime<Utc>> {
    // The engine says "0001-01-01T00:00:00Z" for "never".
    parse_instant(s).filter(|t| t.timestamp() > 0)
}
impl DockerBackend {
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

    /// The worker's CPU quota in its cgroup, found through its init process (from the engine);
    /// `None` when it cannot be reached from here or the worker does not run.
    async fn cpu_quota(&self, id: &str) -> Option<CpuQuota> {
        let i = self.docker.inspect_container(id, None).await.ok()?;
        let pid = u32::try_from(i.state?.pid?).ok().filter(|&p| p > 0)?;
        CpuQuota::of(pid, i.id.as_deref().unwrap_or(id))
    }

    /// A live worker's CPU quota: as last set or read here, else as the engine says (once).
    async fn quota(&self, id: &str) -> Option<i64> {
        let known = self.quotas().get(id).copied();
        if known.is_some() {
            return known;
        }
        let nano = self
            .docker
            .inspect_container(id, None)
            .await
            .ok()?
            .host_config?
            .nano_cpus
            .filter(|n| *n > 0)?;
        self.quotas().insert(id.to_string(), nano);
        Some(nano)
    }

    fn quotas(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, i64>> {
        self.quotas.lock().unwrap_or_else(|p| p.into_inner())
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
}

impl Workers for DockerBackend {
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
            let mut w = Worker::from_labels(id.clone(), name, state, |key| labels.get(key));
            w.created =
                (w.created).or_else(|| c.created.and_then(|s| DateTime::from_timestamp(s, 0)));
            if !state.is_finished() {
                w.nano_cpus = self.quota(&id).await;
            }
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
        self.quotas().retain(|id, _| {
            workers
                .iter()
                .any(|w| &w.id == id && !w.state.is_finished())
        });
        Ok(workers)
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
        self.quotas().insert(created.id.clone(), spec.nano_cpus);
        Ok(created.id)
    }

    async fn pause(&self, id: &str) -> Result<(), BackendError> {
        if let Some(f) = self.freezer(id).await {
            // Frozen, and not by pilotd: the engine paused it (an older pilotd did), and the
            // engine must resume it.
            if !self.freezers.frozen_here(id) && f.is_frozen().unwrap_or(false) {
                return Ok(());
            }
            let asked = std::time::Instant::now();
            match f.freeze().await {
                Ok(()) => {
                    // From the write to every task stopped: the kernel's part of a pause.
                    tracing::debug!(
                        worker = %id,
                        "frozen in {:.1} ms",
                        asked.elapsed().as_secs_f64() * 1e3
                    );
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
        let asked = self.docker.pause_container(id).await;
        asked.or_else(|e| already_there(Change::Pause, self.err(format!("pausing worker {id}"), e)))
    }

    async fn unpause(&self, id: &str) -> Result<(), BackendError> {
        if self.freezers.frozen_here(id)
            && let Some(Some(f)) = self.freezers.get(id)
            && f.thaw().is_ok()
        {
            self.freezers.mark(id, false);
            return Ok(());
        }
        let asked = self.docker.unpause_container(id).await;
        asked.or_else(|e| {
            already_there(
                Change::Unpause,
                self.err(format!("resuming worker {id}"), e),
            )
        })
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
        let asked = docker.stop_container(id, Some(opts)).await;
        asked.or_else(|e| already_there(Change::Stop, self.err(format!("stopping worker {id}"), e)))
    }

    async fn kill(&self, id: &str) -> Result<(), BackendError> {
        self.thaw_if_frozen_here(id);
        let opts = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        let asked = self.docker.kill_container(id, Some(opts)).await;
        asked.or_else(|e| already_there(Change::Kill, self.err(format!("killing worker {id}"), e)))
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        self.thaw_if_frozen_here(id);
        let opts = RemoveContainerOptionsBuilder::default()
            .force(false)
            .v(true)
            .build();
        let asked = self.docker.remove_container(id, Some(opts)).await;
        asked.or_else(|e| {
            already_there(Change::Remove, self.err(format!("removing worker {id}"), e))
        })
    }
    /// `POST /containers/{id}/update` with `NanoCpus`: what `docker update --cpus` sends.
    /// Docker writes the worker's cgroup (cgroup v2's `cpu.max`, v1's `cpu.cfs_quota_us` over
    /// a 100 ms period) and keeps the value for the container's life. The cgroup is then read
    /// back, because it is what the kernel enforces: where the engine did not set it (Podman
    /// 4.3's Docker-compatible API answers 404, having no update call), pilotd writes it
    /// itself, as it freezes workers itself (`freezer`), and says so once.
    async fn limit_cpus(&self, id: &str, nano_cpus: i64) -> Result<(), BackendError> {
        let what = format!("limiting the CPUs of worker {id}");
        let body = ContainerUpdateBody {
            nano_cpus: Some(nano_cpus),
            ..Default::default()
        };
        let asked = (self.docker.update_container(id, body).await).map_err(|e| self.err(&what, e));
        // Whatever the engine holds now is read again next time, unless it is known below.
        self.quotas().remove(id);
        let Some(cgroup) = self.cpu_quota(id).await else {
            // Not reachable from here: the engine's word is all there is.
            asked?;
            self.quotas().insert(id.to_string(), nano_cpus);
            return Ok(());
        };
        let near = |q: i64| (q - nano_cpus).abs() < 1_000_000;
        if !cgroup.read().is_some_and(near) {
            let engine = match &asked {
                Ok(()) => "it took the update without applying it".to_string(),
                Err(e) => e.to_string(),
            };
            cgroup.write(nano_cpus).map_err(|e| BackendError::Rejected {
                what: what.clone(),
                message: format!(
                    "the engine did not set the quota ({engine}), and its cgroup refused it: {e}"
                ),
            })?;
            if !self
                .quota_fallback
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    worker = %id,
                    "the engine did not set the worker's CPU quota ({engine}); pilotd writes \
                     its cgroup itself from now on where the engine does not"
                );
            }
        }
        self.quotas().insert(id.to_string(), nano_cpus);
        Ok(())
    }

    async fn remove_volume(&self, name: &str) -> Result<(), BackendError> {
        let what = format!("the disk volume of worker {name}");
        let volume = match self.docker.inspect_volume(name).await {
            Ok(v) => v,
            Err(e) => return self.gone_is_done(&what, Err::<(), _>(e)),
        };
        let l = &volume.labels;
        if l.get(labels::MANAGED).map(String::as_str) != Some("true")
            || l.get(labels::INSTANCE) != Some(&self.instance)
        {
            return Ok(());
        }
        let asked = (self.docker).remove_volume(name, None::<RemoveVolumeOptions>);
        self.gone_is_done(format!("removing {what}"), asked.await)
    }
}
