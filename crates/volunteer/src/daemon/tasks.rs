//! Long operations beside the loop — a graceful stop (up to `grace`), a pull (minutes), a
//! manifest fetch (up to its timeout) — and what the daemon does when one finishes. The loop
//! wakes for each completion, so a finished stop or pull is acted on at once.

use super::Daemon;
use crate::act::backend::{Backend, BackendError};
use crate::act::disk;
use crate::act::image;
use crate::record::manifest::{self, Manifest};
use crate::settings::RemoteSettings;
use crate::worker::{Pulled, PulledImage};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tokio::task::JoinSet;

/// A long operation that finished.
pub(crate) enum TaskDone {
    Stopped {
        id: String,
        name: String,
        result: Result<(), BackendError>,
    },
    Pulled {
        pinned: String,
        digest: String,
        result: Result<Pulled, BackendError>,
    },
    Manifest(Result<Manifest, manifest::ManifestError>),
    /// How full the running workers' scratch dirs are, in KiB by worker id.
    Measured(BTreeMap<String, crate::worker::ScratchUse>),
    /// The registry's answer: which digest the worker image's tag names now.
    Checked {
        reference: String,
        answer: Result<String, BackendError>,
    },
}

/// Measures the running workers' scratch dirs beside the loop (a walk of a big tree takes
/// time the loop must not lose).
pub(crate) fn spawn_measure(
    tasks: &mut JoinSet<TaskDone>,
    root: &Path,
    workers: Vec<(String, String)>,
) {
    let root = root.to_path_buf();
    tasks.spawn(async move {
        let usage = tokio::task::spawn_blocking(move || disk::measure(&root, &workers))
            .await
            .unwrap_or_default();
        TaskDone::Measured(usage)
    });
}

/// Asks the image's registry beside the loop: a slow or unreachable registry must never delay
/// an eviction (a login's cycle runs at once, whatever the registry is doing).
pub(crate) fn spawn_check(tasks: &mut JoinSet<TaskDone>, b: &impl Backend, reference: &str) {
    let (b, reference) = (b.clone(), reference.to_string());
    tasks.spawn(async move {
        let answer = b.resolve_image(&reference).await;
        TaskDone::Checked { reference, answer }
    });
}

pub(crate) fn spawn_stop(
    tasks: &mut JoinSet<TaskDone>,
    b: &impl Backend,
    id: &str,
    name: &str,
    grace: Duration,
) {
    let (b, id, name) = (b.clone(), id.to_string(), name.to_string());
    tasks.spawn(async move {
        let result = b.stop(&id, grace).await;
        TaskDone::Stopped { id, name, result }
    });
}

pub(crate) fn spawn_pull(
    tasks: &mut JoinSet<TaskDone>,
    b: &impl Backend,
    repository: &str,
    digest: &str,
) {
    let (b, repository, digest) = (b.clone(), repository.to_string(), digest.to_string());
    tasks.spawn(async move {
        let result = b.pull_image(&repository, &digest).await;
        TaskDone::Pulled {
            pinned: format!("{repository}@{digest}"),
            digest,
            result,
        }
    });
}

/// Fetches and checks the pool's manifest against this host's limits (`allowed` images, the
/// site's own env names).
pub(crate) fn spawn_manifest_fetch(
    tasks: &mut JoinSet<TaskDone>,
    r: RemoteSettings,
    allowed: Vec<String>,
    local_env: BTreeMap<String, String>,
) {
    tasks.spawn(async move {
        TaskDone::Manifest(
            manifest::fetch(&r.url, r.max_bytes, r.timeout, &allowed, &local_env).await,
        )
    });
}

impl<B: Backend> Daemon<B> {
    /// A manifest that is not taken: what stays in force first, so the first line of the log
    /// says it all.
    fn keeping(&self, e: &manifest::ManifestError) {
        tracing::error!(
            "keeping {}: {e}",
            self.manifest
                .as_ref()
                .map(|m| format!("the last good manifest (version {})", m.version))
                .unwrap_or_else(|| "pilotd.toml's own settings".into())
        );
    }

    /// Takes in a finished operation: what is no longer in flight, a pulled image, a new
    /// manifest (stored, and laid over the worker settings) or why the old one stays.
    pub(super) fn task_done(&mut self, done: TaskDone, now: DateTime<Utc>) {
        match done {
            TaskDone::Stopped { id, name, result } => {
                self.work.in_flight.stopping.remove(&id);
                match result {
                    Ok(()) => tracing::info!(worker = %name, "stopped"),
                    Err(e) => tracing::error!(worker = %name, "stop failed: {e}"),
                }
            }
            TaskDone::Measured(usage) => {
                self.work.measuring = false;
                self.work.scratch_use = usage;
            }
            TaskDone::Checked { reference, answer } => {
                self.work.in_flight.checking = false;
                image::record_check(self.records.image(), &reference, answer, now, &self.s.image);
            }
            TaskDone::Manifest(result) => {
                self.refresh.finished();
                let m = match result {
                    Ok(m) if self.manifest.as_ref() == Some(&m) => return,
                    Ok(m) => m,
                    Err(e) => return self.keeping(&e),
                };
                // Checked when the fetch began; a reload since may have narrowed the limits,
                // so the template is built (and checked) against today's.
                let template = manifest::worker_template(&self.s, Some(&m));
                if let Some(e) = template.refused {
                    return self.keeping(&e);
                }
                if let Err(e) = manifest::store(&self.s.state_dir, &m) {
                    tracing::error!("{e}");
                }
                tracing::info!(version = %m.version, "remote manifest applied");
                self.worker = template.worker;
                self.manifest = Some(m);
            }
            TaskDone::Pulled {
                pinned,
                digest,
                result,
            } => {
                if self.work.in_flight.pulling.as_deref() == Some(digest.as_str()) {
                    self.work.in_flight.pulling = None;
                }
                match result {
                    Ok(Pulled { image: img, bytes }) => {
                        tracing::info!(image = %pinned, id = %img.id, bytes, "pulled");
                        if let Some(m) = &self.metrics {
                            m.image_pulls.inc();
                            m.image_pull_bytes.inc_by(bytes);
                        }
                        let p = PulledImage {
                            id: img.id,
                            pinned,
                            pulled_at: now,
                        };
                        self.records.pulled(&self.s, p, bytes);
                    }
                    Err(e) => image::record_failure(
                        self.records.image(),
                        &format!("pulling {pinned}"),
                        &e,
                        now,
                        self.s.image.retry,
                    ),
                }
            }
        }
    }
}
