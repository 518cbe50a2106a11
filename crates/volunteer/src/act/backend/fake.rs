//! A recording in-memory backend for the daemon-level unit tests (`daemon/tests.rs`): it keeps
//! workers and images in a table, records every call, and can be told to fail. A change of a
//! worker's state is refused as Docker refuses it (a paused worker paused again, a running one
//! resumed or removed): same status, same words, read by the Docker backend's own
//! `already_there`, so a daemon that leans on a lenient engine fails here too.

use super::docker::errors::{Change, already_there};
use super::{BackendError, BackendEvent, Images, Network, Observe, Workers};
use crate::worker::{
    CpuSample, LocalImage, Pulled, Worker, WorkerSpec, WorkerState, split_reference,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
pub(crate) struct FakeWorld {
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
    /// When set, a list answers this late, with the workers as they are then, and records
    /// "listed" as it answers (an engine slow under load).
    pub list_delay: Option<Duration>,
    /// Every spec a worker was started from, in order.
    pub specs: Vec<WorkerSpec>,
    /// What `cpu_sample` reads for a worker, by id (zero when unset).
    pub cpu: BTreeMap<String, CpuSample>,
    /// The bytes a pull says it downloaded.
    pub pull_bytes: u64,
    /// Workers (by id) whose process ignores SIGTERM: a stop waits its grace, then kills.
    pub ignores_term: BTreeSet<String>,
    /// Every stop asked, with its grace, in order.
    pub stopped_with: Vec<(String, Duration)>,
    /// Every change the engine refused, with its answer (including those the Docker backend
    /// reads as "already done"), e.g. "Remove id1: removing worker id1: conflict: You cannot…".
    pub refusals: Vec<String>,
    next_id: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct FakeBackend {
    pub world: Arc<Mutex<FakeWorld>>,
}

impl FakeBackend {
    pub(crate) fn new() -> FakeBackend {
        FakeBackend::default()
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, FakeWorld> {
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

    /// One change of a worker's state, answered as Docker 20.10 answers it (status and words,
    /// see `docker::already_there`), then read the way the Docker backend reads the answer.
    fn change(&self, id: &str, change: Change, call: String) -> Result<(), BackendError> {
        let mut w = self.call(call)?;
        let answer = w.engine_answer(id, change);
        if let Err(e) = &answer {
            w.refusals.push(format!("{change:?} {id}: {e}"));
        }
        drop(w);
        answer.or_else(|e| already_there(change, e))
    }
}

/// The engine's answer about a worker it does not have.
fn no_such(id: &str) -> BackendError {
    BackendError::NotFound {
        what: format!("{id} (No such container: {id})"),
    }
}

impl FakeWorld {
    /// What the engine does to a worker asked to change: the new state, or its refusal.
    fn engine_answer(&mut self, id: &str, change: Change) -> Result<(), BackendError> {
        let what = |verb: &str| format!("{verb} worker {id}");
        let conflict = |verb: &str, message: String| BackendError::Conflict {
            what: what(verb),
            message,
        };
        let Some(x) = self.workers.iter_mut().find(|x| x.id == id) else {
            return Err(no_such(id));
        };
        use WorkerState::*;
        match (change, x.state) {
            (Change::Pause, Running) => x.state = Paused,
            (Change::Pause, Paused) => {
                return Err(conflict(
                    "pausing",
                    format!("Container {id} is already paused"),
                ));
            }
            (Change::Pause, _) => {
                return Err(conflict(
                    "pausing",
                    format!("Container {id} is not running"),
                ));
            }
            (Change::Unpause, Paused) => x.state = Running,
            (Change::Unpause, _) => {
                return Err(BackendError::Rejected {
                    what: what("resuming"),
                    message: format!("HTTP 500: Container {id} is not paused"),
                });
            }
            // `stop` answers on its own: it takes time (the grace).
            (Change::Stop, _) => {}
            (Change::Kill, Running | Paused | Restarting) => {
                x.state = Exited;
                x.exit_code = Some(137);
            }
            (Change::Kill, _) => {
                return Err(conflict(
                    "killing",
                    format!("Cannot kill container: {id}: Container {id} is not running"),
                ));
            }
            (Change::Remove, Running | Restarting) => {
                return Err(conflict(
                    "removing",
                    format!(
                        "You cannot remove a running container {id}. Stop the container before attempting removal or force remove"
                    ),
                ));
            }
            (Change::Remove, Paused) => {
                return Err(conflict(
                    "removing",
                    format!(
                        "You cannot remove a paused container {id}. Unpause and then stop the container before attempting removal or force remove"
                    ),
                ));
            }
            (Change::Remove, _) => self.workers.retain(|x| x.id != id),
        }
        Ok(())
    }
}

impl Images for FakeBackend {
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

    async fn pull_image(&self, repository: &str, digest: &str) -> Result<Pulled, BackendError> {
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
        Ok(Pulled {
            image,
            bytes: w.pull_bytes,
        })
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
}

impl Workers for FakeBackend {
    async fn list_workers(&self) -> Result<Vec<Worker>, BackendError> {
        let delay = self.call("list".into())?.list_delay;
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
            self.lock().calls.push("listed".into());
        }
        Ok(self.lock().workers.clone())
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
        let (name, running) = (spec.name.clone(), WorkerState::Running);
        let mut worker = Worker::from_labels(id.clone(), name, running, |k| spec.labels.get(k));
        worker.nano_cpus = Some(spec.nano_cpus);
        w.workers.push(worker);
        w.specs.push(spec.clone());
        Ok(id)
    }

    async fn pause(&self, id: &str) -> Result<(), BackendError> {
        self.change(id, Change::Pause, format!("pause {id}"))
    }

    async fn unpause(&self, id: &str) -> Result<(), BackendError> {
        self.change(id, Change::Unpause, format!("unpause {id}"))
    }

    /// SIGTERM, then SIGKILL after `grace`, as the engine does: a worker that honours SIGTERM
    /// ends at once (143); one that ignores it (`ignores_term`) is killed once `grace` has
    /// passed (137). A paused worker is resumed first, so it gets the SIGTERM like a running
    /// one: the engine (20.10 and later) resumes a paused container it is asked to stop, and
    /// the Docker backend thaws a worker it froze itself before it asks
    /// (`docker::engine_refusals` checks the engine's part).
    async fn stop(&self, id: &str, grace: Duration) -> Result<(), BackendError> {
        let waits = {
            let mut w = self.call(format!("stop {}s {id}", grace.as_secs()))?;
            w.stopped_with.push((id.to_string(), grace));
            let ignores = w.ignores_term.contains(id);
            match w.workers.iter().find(|x| x.id == id).map(|x| x.state) {
                Some(WorkerState::Running | WorkerState::Paused | WorkerState::Restarting) => {
                    ignores
                }
                Some(_) => return Ok(()),
                None => return already_there(Change::Stop, no_such(id)),
            }
        };
        if waits {
            tokio::time::sleep(grace).await;
        }
        let mut w = self.lock();
        if let Some(x) = w.workers.iter_mut().find(|x| x.id == id)
            && matches!(
                x.state,
                WorkerState::Running | WorkerState::Paused | WorkerState::Restarting
            )
        {
            x.state = WorkerState::Exited;
            x.exit_code = Some(if waits { 137 } else { 143 });
        }
        Ok(())
    }

    async fn kill(&self, id: &str) -> Result<(), BackendError> {
        self.change(id, Change::Kill, format!("kill {id}"))
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        self.change(id, Change::Remove, format!("remove {id}"))
    }

    async fn remove_volume(&self, name: &str) -> Result<(), BackendError> {
        let _w = self.call(format!("volume-rm {name}"))?;
        Ok(())
    }

    /// As the engine's update: a worker that is gone is not found; any other takes the new
    /// quota, running, paused or stopped (the engine keeps it for a start).
    async fn limit_cpus(&self, id: &str, nano_cpus: i64) -> Result<(), BackendError> {
        let mut w = self.call(format!("limit {id} {nano_cpus}"))?;
        let x = w
            .workers
            .iter_mut()
            .find(|x| x.id == id)
            .ok_or_else(|| no_such(id))?;
        x.nano_cpus = Some(nano_cpus);
        Ok(())
    }
}

impl Network for FakeBackend {
    async fn ensure_network(&self, name: &str, interface: &str) -> Result<(), BackendError> {
        let _w = self.call(format!("network {name} {interface}"))?;
        Ok(())
    }

    async fn remove_network(&self, name: &str) -> Result<(), BackendError> {
        let _w = self.call(format!("network-rm {name}"))?;
        Ok(())
    }
}

impl Observe for FakeBackend {
    async fn describe_engine(&self) -> Result<String, BackendError> {
        let _world = self.call("version".into())?;
        Ok("fake engine".into())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn world(states: &[(&str, WorkerState)]) -> FakeBackend {
        let b = FakeBackend::new();
        b.lock().workers = states
            .iter()
            .map(|(id, state)| Worker::test(id, *state))
            .collect();
        b
    }

    fn state(b: &FakeBackend, id: &str) -> Option<(WorkerState, Option<i64>)> {
        b.lock()
            .workers
            .iter()
            .find(|w| w.id == id)
            .map(|w| (w.state, w.exit_code))
    }

    /// The fake refuses what Docker 20.10 refuses, in its words (tests/it/docker/
    /// engine_refusals.rs asks the real engine), and the Docker backend's reading applies: a
    /// refusal meaning "already there" is done, removing a running or paused worker is an error.
    #[tokio::test]
    async fn the_fake_refuses_what_docker_refuses() {
        use WorkerState::*;
        let b = world(&[("r", Running), ("p", Paused), ("x", Exited)]);
        b.pause("p").await.unwrap();
        b.unpause("r").await.unwrap();
        b.kill("x").await.unwrap();
        let refused = b.lock().refusals.clone();
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(
            refused[0].contains("Container p is already paused"),
            "{refused:?}"
        );
        assert!(
            refused[1].contains("HTTP 500: Container r is not paused"),
            "{refused:?}"
        );
        assert!(
            refused[2].contains("Cannot kill container: x: Container x is not running"),
            "{refused:?}"
        );
        for (id, words) in [
            ("r", "You cannot remove a running container r."),
            ("p", "You cannot remove a paused container p."),
        ] {
            match b.remove(id).await {
                Err(BackendError::Conflict { message, .. }) => {
                    assert!(message.starts_with(words), "{message}")
                }
                other => panic!("removing {id}: {other:?}"),
            }
            assert!(state(&b, id).is_some(), "{id} is still there");
        }
        match b.pause("x").await {
            Err(BackendError::Conflict { message, .. }) => {
                assert_eq!(message, "Container x is not running")
            }
            other => panic!("pausing a stopped worker: {other:?}"),
        }
        // Gone is done for stop, kill and remove.
        b.remove("x").await.unwrap();
        b.remove("x").await.unwrap();
        b.kill("x").await.unwrap();
        b.stop("x", Duration::ZERO).await.unwrap();
        // The control: the changes Docker accepts change the state.
        b.pause("r").await.unwrap();
        assert_eq!(state(&b, "r"), Some((Paused, None)));
        b.unpause("r").await.unwrap();
        assert_eq!(state(&b, "r"), Some((Running, None)));
    }

    /// A stop honours its grace: SIGTERM ends a worker that heeds it at once (143), paused or
    /// not (it is resumed to get the signal, as the engine does); one that ignores it, paused
    /// or not, is killed once the grace has passed (137). Every grace asked is recorded.
    #[tokio::test]
    async fn stop_honours_the_grace() {
        use WorkerState::*;
        let b = world(&[
            ("heeds", Running),
            ("frozen", Paused),
            ("deaf", Running),
            ("frozen-deaf", Paused),
        ]);
        b.lock().ignores_term.insert("deaf".into());
        b.lock().ignores_term.insert("frozen-deaf".into());
        let grace = Duration::from_millis(300);
        for id in ["heeds", "frozen"] {
            let t0 = Instant::now();
            b.stop(id, grace).await.unwrap();
            assert!(t0.elapsed() < grace, "{id}: {:?}", t0.elapsed());
            assert_eq!(state(&b, id), Some((Exited, Some(143))), "{id}");
        }
        for id in ["deaf", "frozen-deaf"] {
            let t0 = Instant::now();
            b.stop(id, grace).await.unwrap();
            assert!(t0.elapsed() >= grace, "{id}: {:?}", t0.elapsed());
            assert_eq!(state(&b, id), Some((Exited, Some(137))), "{id}");
        }
        assert_eq!(
            b.lock().stopped_with,
            ["heeds", "frozen", "deaf", "frozen-deaf"]
                .map(|id| (id.to_string(), grace))
                .to_vec()
        );
        // Stopping a stopped worker is done (the engine's 304), and removes it no more.
        b.stop("heeds", grace).await.unwrap();
        b.remove("heeds").await.unwrap();
        assert!(state(&b, "heeds").is_none());
    }
}
