//! The fail-safe: protects the owner when the daemon is gone (`pilotd failsafe`, whose edge in
//! `cmd::failsafe` reads pilotd.toml and the environment and runs this).
//!
//! - After the daemon ended abnormally — a crash, a kill, a watchdog timeout, a failed start, a
//!   stop that timed out — nobody watches the owner any more, so it **pauses** every running
//!   worker of this instance at once: the CPU is the owner's again within a second, and the job
//!   is frozen, not lost. The next pilotd adopts the paused workers and resumes them only when
//!   the owner's policy allows (`plan` treats a paused worker like one paused for the owner).
//!   After a clean stop it does nothing: workers follow `[worker] on_shutdown`.
//! - Asked to remove (what the package's `prerm` does when pilotd is removed, since nothing
//!   would supervise the workers afterwards), it stops (SIGTERM, then SIGKILL after a grace)
//!   and deletes every worker of this instance through the executor's one removal
//!   (`scratch::remove_worker`), then what is left of them in the state dir, then pilotd's own
//!   network and its filter.
//!
//! Only containers labelled `pilotd.managed=true` and `pilotd.instance=<instance>` are touched
//! (the backend's list filters on both, twice).

use crate::act::backend::{self, Backend, BackendError};
use crate::act::egress;
use crate::act::gc;
use crate::act::scratch::{self, RemovalError};
use crate::settings::{EngineSettings, WorkerSettings};
use crate::worker::{Worker, WorkerState};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// Why the fail-safe could not do all it was asked; what it did is said first.
#[derive(Debug, thiserror::Error)]
pub enum FailsafeError {
    #[error("failsafe: {why}: {source}\n  workers of instance \"{instance}\" may still be running")]
    Engine {
        why: String,
        instance: String,
        source: BackendError,
    },
    #[error(
        "failsafe: {why}, and the workers cannot be listed: {source}\n  workers of instance \"{instance}\" may still be running"
    )]
    ListToPause {
        why: String,
        instance: String,
        source: BackendError,
    },
    #[error(
        "failsafe: cannot list the workers of instance \"{instance}\": {source}\n  remove them by hand: docker rm -f $(docker ps -aq --filter label=pilotd.managed=true --filter label=pilotd.instance={instance})"
    )]
    ListToRemove {
        instance: String,
        source: BackendError,
    },
    /// `done` is what was done, as the success would have said it.
    #[error("{done}failsafe: could not pause {} worker(s): {}", .failed.len(), .failed.join("; "))]
    Pause { done: String, failed: Vec<String> },
    #[error("{done}failsafe: could not remove {} worker(s): {}", .failed.len(), .failed.join("; "))]
    Remove { done: String, failed: Vec<String> },
}

/// How the service ended, from the environment systemd gives `ExecStopPost=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEnd {
    pub result: Option<String>,
    pub exit_code: Option<String>,
    pub exit_status: Option<String>,
}

impl ServiceEnd {
    /// `SERVICE_RESULT`, `EXIT_CODE` and `EXIT_STATUS`; all absent when run by hand.
    pub fn from_env() -> ServiceEnd {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        ServiceEnd {
            result: var("SERVICE_RESULT"),
            exit_code: var("EXIT_CODE"),
            exit_status: var("EXIT_STATUS"),
        }
    }

    /// A clean stop: workers follow `on_shutdown`, the fail-safe stays out of the way.
    pub fn is_clean(&self) -> bool {
        self.result.as_deref() == Some("success")
    }

    fn describe(&self) -> String {
        match &self.result {
            None => "no SERVICE_RESULT (not run by systemd's ExecStopPost)".into(),
            Some(r) => {
                let mut s = format!("SERVICE_RESULT={r}");
                if let Some(c) = &self.exit_code {
                    let _ = write!(s, " EXIT_CODE={c}");
                }
                if let Some(st) = &self.exit_status {
                    let _ = write!(s, " EXIT_STATUS={st}");
                }
                s
            }
        }
    }

    fn abnormal(&self) -> String {
        format!("pilotd ended abnormally ({})", self.describe())
    }
}

/// What the fail-safe says after a clean stop, when it does nothing.
pub fn after_clean_stop(end: &ServiceEnd) -> String {
    format!(
        "failsafe: pilotd stopped cleanly ({}); workers follow [worker] on_shutdown\n",
        end.describe()
    )
}

/// What the fail-safe is asked to do with this instance's workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Pause the running ones (after an abnormal end).
    Pause,
    /// Stop, with `grace` between SIGTERM and SIGKILL, and delete every one.
    Remove { grace: Duration },
}

/// Carries out `order` on the engine of `engine`; says what was done.
pub async fn protect(
    engine: &EngineSettings,
    s: &WorkerSettings,
    end: &ServiceEnd,
    order: Order,
) -> Result<String, FailsafeError> {
    let b = backend::connect(engine).map_err(|source| FailsafeError::Engine {
        why: match order {
            Order::Remove { .. } => "cannot remove the workers".to_string(),
            Order::Pause => end.abnormal(),
        },
        instance: s.instance.clone(),
        source,
    })?;
    match order {
        Order::Pause => pause_all(&b, &s.instance, end, SETTLE).await,
        Order::Remove { grace } => remove_all(&b, grace, s).await,
    }
}

fn running(w: &Worker) -> bool {
    matches!(w.state, WorkerState::Running | WorkerState::Restarting)
}

/// How long the fail-safe waits before its second look: a start or an unpause the daemon had
/// asked for just before it died may complete in the engine after the first look.
pub(crate) const SETTLE: Duration = Duration::from_secs(2);

/// Pauses every running worker of the instance, all at once, and looks again `settle` later
/// for requests the dead daemon left in flight: a worker that started or was resumed since is
/// paused too, and one created but never started is removed (the next pilotd would remove it
/// anyway; removing it now means an in-flight start cannot bring it up). Its scratch, if the
/// dead daemon had made one ready, is left to the next pilotd's GC: the fail-safe does only
/// what gives the owner the machine back.
pub(crate) async fn pause_all(
    b: &impl Backend,
    instance: &str,
    end: &ServiceEnd,
    settle: Duration,
) -> Result<String, FailsafeError> {
    let why = end.abnormal();
    // By name, the last attempt's result: a pause that failed on the first look and worked on
    // the second is a success.
    let mut paused: BTreeMap<String, Result<(), String>> = BTreeMap::new();
    let mut removed: BTreeMap<String, Result<(), String>> = BTreeMap::new();
    let mut already = 0;
    for look in 0..2 {
        if look == 1 {
            tokio::time::sleep(settle).await;
        }
        let list = match b.list_workers().await {
            Ok(l) => l,
            Err(source) if look == 0 => {
                return Err(FailsafeError::ListToPause {
                    why,
                    instance: instance.to_string(),
                    source,
                });
            }
            Err(e) => {
                paused.insert("(second look)".into(), Err(e.to_string()));
                break;
            }
        };
        if look == 0 {
            already = list
                .iter()
                .filter(|w| w.state == WorkerState::Paused)
                .count();
        }
        let run: Vec<&Worker> = list.iter().filter(|w| running(w)).collect();
        let created: Vec<&Worker> = list
            .iter()
            .filter(|w| w.state == WorkerState::Created)
            .collect();
        let (p, r) = futures_util::future::join(
            futures_util::future::join_all(run.iter().map(|w| b.pause(&w.id))),
            futures_util::future::join_all(created.iter().map(|w| b.remove(&w.id))),
        )
        .await;
        for (w, res) in run.iter().zip(p) {
            paused.insert(w.name.clone(), res.map_err(|e| e.to_string()));
        }
        for (w, res) in created.iter().zip(r) {
            removed.insert(w.name.clone(), res.map_err(|e| e.to_string()));
        }
    }
    let ok = |m: &BTreeMap<String, Result<(), String>>| -> Vec<String> {
        m.iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(n, _)| n.clone())
            .collect()
    };
    let (paused_ok, removed_ok) = (ok(&paused), ok(&removed));
    let mut out = format!(
        "failsafe: {why}: paused {} worker(s) of instance \"{instance}\"",
        paused_ok.len()
    );
    if !paused_ok.is_empty() {
        let _ = write!(out, " ({})", paused_ok.join(", "));
    }
    if already > 0 {
        let _ = write!(out, ", {already} already paused");
    }
    if !removed_ok.is_empty() {
        let _ = write!(
            out,
            ", removed {} never started ({})",
            removed_ok.len(),
            removed_ok.join(", ")
        );
    }
    out.push_str("; the next pilotd resumes them only if the owner's policy allows\n");
    // A failed remove of a created worker only matters if it then ran: the second look's pause
    // covers that, so only failed pauses fail the fail-safe.
    let failed: Vec<String> = paused
        .iter()
        .filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}")))
        .collect();
    if failed.is_empty() {
        Ok(out)
    } else {
        Err(FailsafeError::Pause { done: out, failed })
    }
}

/// Stops and deletes every worker of the instance (in parallel), then their scratch dirs.
pub(crate) async fn remove_all(
    b: &impl Backend,
    grace: Duration,
    s: &WorkerSettings,
) -> Result<String, FailsafeError> {
    let instance = &s.instance;
    let list = b
        .list_workers()
        .await
        .map_err(|source| FailsafeError::ListToRemove {
            instance: instance.clone(),
            source,
        })?;
    let results =
        futures_util::future::join_all(list.iter().map(|w| remove_one(b, w, grace, s))).await;
    let mut removed = Vec::new();
    let mut failed = Vec::new();
    for (w, r) in list.iter().zip(results) {
        match r {
            Ok(()) => removed.push(w.name.as_str()),
            Err(e) => failed.push(format!("{}: {e}", w.name)),
        }
    }
    let names = match removed[..] {
        [] => String::new(),
        _ => format!(" ({})", removed.join(", ")),
    };
    let n = removed.len();
    let mut out = format!("failsafe: removed {n} worker(s) of instance \"{instance}\"{names}\n");
    // With every worker gone, whatever of theirs is left in the state dir goes too (a disk
    // image or token copy of a worker whose container is already gone).
    if failed.is_empty() {
        for name in gc::leftover_names(s) {
            if let Err(e) = scratch::remove(b, s, &name).await {
                failed.push(format!("{name}: {e}"));
            }
        }
    }
    // With every worker gone, pilotd's own network and its traffic filter go too.
    if failed.is_empty()
        && let Some(f) = &s.egress
    {
        match b.remove_network(&f.network).await {
            Ok(()) => {
                let filter = f.clone();
                let _ = tokio::task::spawn_blocking(move || egress::remove(&filter)).await;
                out.push_str(&format!(
                    "failsafe: removed pilotd's network {} and its traffic filter\n",
                    f.network
                ));
            }
            Err(e) => out.push_str(&format!("failsafe: kept network {}: {e}\n", f.network)),
        }
    }
    if failed.is_empty() {
        Ok(out)
    } else {
        Err(FailsafeError::Remove { done: out, failed })
    }
}

/// Ends one worker whatever its state, then removes it the executor's way.
async fn remove_one(
    b: &impl Backend,
    w: &Worker,
    grace: Duration,
    s: &WorkerSettings,
) -> Result<(), RemovalError> {
    if w.state == WorkerState::Paused {
        // A frozen process cannot act on SIGTERM.
        b.unpause(&w.id).await.map_err(RemovalError::Container)?;
    }
    if matches!(
        w.state,
        WorkerState::Running | WorkerState::Restarting | WorkerState::Paused
    ) {
        b.stop(&w.id, grace)
            .await
            .map_err(RemovalError::Container)?;
    }
    scratch::remove_worker(b, s, &w.id, &w.name).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::act::backend::fake::FakeBackend;
    use chrono::Utc;
    use pilotd_core::config::SiteConfig;

    fn worker(id: &str, state: WorkerState) -> Worker {
        Worker {
            created: Some(Utc::now()),
            ..Worker::test(id, state)
        }
    }

    fn end(result: Option<&str>) -> ServiceEnd {
        ServiceEnd {
            result: result.map(str::to_string),
            exit_code: Some("killed".into()),
            exit_status: Some("KILL".into()),
        }
    }

    #[test]
    fn only_success_is_clean() {
        assert!(end(Some("success")).is_clean());
        for r in [
            "signal",
            "core-dump",
            "watchdog",
            "exit-code",
            "timeout",
            "start-limit-hit",
            "resources",
            "protocol",
        ] {
            assert!(!end(Some(r)).is_clean(), "{r}");
        }
        assert!(!end(None).is_clean(), "by hand: act");
    }

    #[tokio::test]
    async fn pauses_running_workers_only() {
        let b = FakeBackend::new();
        b.lock().workers = vec![
            worker("a", WorkerState::Running),
            worker("b", WorkerState::Paused),
            worker("c", WorkerState::Exited),
        ];
        let out = pause_all(&b, "t", &end(Some("signal")), Duration::ZERO)
            .await
            .unwrap();
        assert!(out.contains("paused 1 worker(s)"), "{out}");
        assert!(out.contains("1 already paused"), "{out}");
        assert!(out.contains("SERVICE_RESULT=signal"), "{out}");
        let calls = b.calls();
        assert!(calls.iter().any(|c| c == "pause a"), "{calls:?}");
        assert!(
            !calls.iter().any(|c| c.contains(" b") || c.contains(" c")),
            "{calls:?}"
        );
        assert_eq!(b.lock().workers[0].state, WorkerState::Paused);
    }

    #[tokio::test]
    async fn the_second_look_catches_what_the_dead_daemon_left_in_flight() {
        let b = FakeBackend::new();
        b.lock().workers = vec![
            worker("a", WorkerState::Running),
            // Being resumed by the daemon as it died: the unpause lands after the first look.
            worker("d", WorkerState::Paused),
            // Created, its start still in flight.
            worker("e", WorkerState::Created),
        ];
        let late = b.clone();
        let flip = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            late.lock().workers[1].state = WorkerState::Running;
        });
        let out = pause_all(&b, "t", &end(Some("signal")), Duration::from_millis(200))
            .await
            .unwrap();
        flip.await.unwrap();
        assert!(out.contains("paused 2 worker(s)"), "{out}");
        assert!(
            out.contains("removed 1 never started (pilotd-t-e)"),
            "{out}"
        );
        let w = b.lock().workers.clone();
        assert!(
            w.iter().all(|w| w.state == WorkerState::Paused),
            "{w:?} {:?}",
            b.calls()
        );
    }

    #[tokio::test]
    async fn an_engine_that_cannot_list_is_an_error() {
        let b = FakeBackend::new();
        b.lock().unavailable = true;
        let e = pause_all(&b, "t", &end(Some("watchdog")), Duration::ZERO)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("may still be running"), "{e}");
    }

    #[tokio::test]
    async fn remove_takes_every_state_and_the_scratch_dir() {
        let dir = tempfile::tempdir().unwrap();
        let mut site = SiteConfig::defaults();
        site.host.scratch = Some(dir.path().to_path_buf());
        site.docker.instance = toml::Spanned::new(0..0, "t".to_string());
        // A site network: this unit test must not touch the host's firewall.
        site.worker.network = Some(toml::Spanned::new(0..0, "bridge".into()));
        let s = WorkerSettings::of_site(&site);
        std::fs::create_dir(dir.path().join("pilotd-t-a")).unwrap();
        std::fs::create_dir(dir.path().join("other")).unwrap();
        let b = FakeBackend::new();
        b.lock().workers = vec![
            worker("a", WorkerState::Running),
            worker("b", WorkerState::Paused),
            worker("c", WorkerState::Exited),
        ];
        let out = remove_all(&b, Duration::from_secs(1), &s).await.unwrap();
        assert!(out.contains("removed 3 worker(s)"), "{out}");
        assert!(b.lock().workers.is_empty(), "{:?}", b.calls());
        let calls = b.calls();
        assert!(calls.iter().any(|c| c == "unpause b"), "{calls:?}");
        assert!(!dir.path().join("pilotd-t-a").exists());
        assert!(dir.path().join("other").exists(), "not ours: kept");
    }
}
