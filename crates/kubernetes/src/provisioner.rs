//! The provisioner: kubernetes mode's reconcile loop, driven by the service skeleton
//! (`service::lifecycle::serve`) like the volunteer daemon. One cycle = observe (condor tools, then
//! one paginated pod list and one Job list) → decide (pure `kubernetes::plan::decide`) → act
//! (create Jobs in key order, delete finished Jobs). A cycle whose observation fails acts on
//! nothing: a failed list is not an empty list.

use crate::backoff::BackoffBook;
use crate::client::{KubeBackend, KubeError};
use crate::condor::{CondorError, CondorProbe};
use crate::jobs::shape_digest;
use crate::plan::{ClusterDecision, KubePlan, decide};
use crate::settings::{Settings, SettingsError};
use crate::snapshot::ClusterSnapshot;
use chrono::{DateTime, Utc};
use pilotd_core::config::{Config, Mode};
use pilotd_core::service::lifecycle::{self, Hooks, Reconciler, Reload, Wake};
use pilotd_core::service::metrics::Metrics;
use pilotd_core::service::state_file::Store;
use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use tokio::sync::mpsc;

#[derive(Debug, thiserror::Error)]
pub enum ProvisionerError {
    #[error(transparent)]
    Condor(#[from] CondorError),
    #[error(transparent)]
    Kube(#[from] KubeError),
}

/// The book's file, indented for the operator who reads it.
fn book(path: &Path) -> Store<BackoffBook> {
    Store::new(path.to_path_buf(), "back-off book").pretty()
}

/// Reads the back-off book; a missing file is an empty book, a damaged or unreadable one is
/// reported and replaced (losing back-off history only delays back-off, it never stops
/// workers).
pub fn load_book(path: &Path) -> BackoffBook {
    let (b, warning) = book(path).peek_or(BackoffBook::default);
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    b
}

/// One live observation: the pool first (all schedds failing fails the cycle), then the
/// provisioner's pods and Jobs.
pub(crate) async fn observe(
    probe: &CondorProbe,
    backend: &KubeBackend,
    book: BackoffBook,
    now: DateTime<Utc>,
) -> Result<ClusterSnapshot, ProvisionerError> {
    let pool = probe.observe().await?;
    let pods = backend.list_pods().await?;
    let kube_jobs = backend.list_jobs().await?;
    Ok(ClusterSnapshot {
        mode: "kubernetes".into(),
        taken_at: now,
        jobs: pool.jobs,
        startds: pool.startds,
        pods,
        kube_jobs,
        backoff: book,
        failed_schedds: pool.failed_schedds,
    })
}

/// What acting on one plan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActReport {
    pub created: Vec<String>,
    /// Jobs not created: (name, why). After one failure the rest of that shape waits.
    pub create_failed: Vec<(String, String)>,
    pub deleted: Vec<String>,
    pub delete_failed: Vec<(String, String)>,
}

/// Creates the plan's Jobs (in key order) and deletes its finished Jobs. A failed create stops
/// only its own shape for this cycle; every other shape proceeds.
pub(crate) async fn act(plan: &KubePlan, backend: &KubeBackend) -> ActReport {
    let mut report = ActReport::default();
    let mut failed_shapes: BTreeSet<String> = BTreeSet::new();
    for job in &plan.jobs {
        let name = job.metadata.name.clone().unwrap_or_default();
        let shape = shape_digest(job);
        if failed_shapes.contains(&shape) {
            report.create_failed.push((
                name,
                "an earlier Job of this shape failed this cycle".into(),
            ));
            continue;
        }
        match backend.create_job(job).await {
            Ok(()) => {
                tracing::info!(job = %name, "created worker Job");
                report.created.push(name);
            }
            Err(e) => {
                tracing::error!(job = %name, error = %e, "cannot create worker Job");
                failed_shapes.insert(shape);
                report.create_failed.push((name, e.to_string()));
            }
        }
    }
    for name in &plan.delete {
        match backend.delete_job(name).await {
            Ok(()) => report.deleted.push(name.clone()),
            Err(e) => {
                tracing::warn!(job = %name, error = %e, "cannot delete finished Job; retrying next cycle");
                report.delete_failed.push((name.clone(), e.to_string()));
            }
        }
    }
    report
}

/// One reconcile cycle; `book` is updated only when the observation succeeded.
pub async fn cycle(
    s: &Settings,
    backend: &KubeBackend,
    book: &mut BackoffBook,
    now: DateTime<Utc>,
) -> Result<(KubePlan, ActReport), ProvisionerError> {
    let snap = observe(&s.condor, backend, book.clone(), now).await?;
    let decision = decide(&snap, &s.plan, now);
    for c in &decision.plan.clusters {
        log_cluster(c);
    }
    *book = decision.book;
    let report = act(&decision.plan, backend).await;
    Ok((decision.plan, report))
}

fn log_cluster(c: &ClusterDecision) {
    if !c.is_quiet() {
        tracing::debug!(
            key = %c.key, idle = c.idle_jobs, waiting = c.pods.waiting,
            unmatched = c.pods.unmatched, claimed = c.pods.claimed, failed = c.pods.failed,
            unknown = c.pods.unknown, min_pods = c.min_pods,
            submit = c.submit, "cluster"
        );
    }
}

/// Kubernetes mode's reconcile loop, as the service skeleton drives it: a cycle every
/// `cycle`; a failed cycle is logged and retried at the next one.
pub struct Provisioner {
    s: Settings,
    backend: KubeBackend,
    book: BackoffBook,
    metrics: Option<Metrics>,
    /// When the next cycle is due: `cycle` after the last one started.
    next: Option<tokio::time::Instant>,
    /// A reload changed where the API server is: connect again before the next cycle.
    reconnect: bool,
}

impl Provisioner {
    /// Connects to the API server and takes back the saved back-off book.
    pub(crate) async fn connect(
        s: Settings,
        metrics: Option<Metrics>,
    ) -> Result<Provisioner, ProvisionerError> {
        let backend = KubeBackend::connect(&s.connection).await?;
        let book = load_book(&s.state_file);
        Ok(Provisioner {
            s,
            backend,
            book,
            metrics,
            next: None,
            reconnect: false,
        })
    }
}

impl Reconciler for Provisioner {
    type ReloadError = SettingsError;

    fn mode(&self) -> Mode {
        Mode::Kubernetes
    }

    async fn wake(&mut self) -> Wake {
        if let Some(t) = self.next {
            tokio::time::sleep_until(t).await;
        }
        Wake::default()
    }

    async fn reconcile(&mut self, _: Wake) -> String {
        let started = tokio::time::Instant::now();
        self.next = Some(started + self.s.cycle);
        if self.reconnect {
            match KubeBackend::connect(&self.s.connection).await {
                Ok(b) => {
                    self.backend = b;
                    self.reconnect = false;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cycle failed; nothing submitted");
                    return format!("cannot reach the API server: {e}");
                }
            }
        }
        match cycle(&self.s, &self.backend, &mut self.book, Utc::now()).await {
            Ok((plan, report)) => {
                if let Some(m) = &self.metrics {
                    export(m, &plan, started.elapsed());
                }
                tracing::info!(
                    created = report.created.len(),
                    create_failed = report.create_failed.len(),
                    deleted = report.deleted.len(),
                    skipped_schedds = plan.failed_schedds.len(),
                    requests = self.backend.requests(),
                    "cycle done"
                );
                if let Err(e) = book(&self.s.state_file).save(&self.book) {
                    tracing::warn!("{e}");
                }
                format!(
                    "{} shape(s); created {} Job(s), deleted {}",
                    plan.clusters.len(),
                    report.created.len(),
                    report.deleted.len()
                )
            }
            Err(e) => {
                tracing::error!(error = %e, "cycle failed; nothing submitted");
                format!("cycle failed: {e}")
            }
        }
    }

    fn reload(&mut self, cfg: Config) -> Result<(), SettingsError> {
        let s = Settings::resolve(&cfg)?;
        self.reconnect |= s.connection != self.s.connection;
        self.s = s;
        Ok(())
    }

    /// Nothing runs beside the loop: the last cycle finished and saved its book.
    async fn drain(&mut self) {}
}

/// Runs the provisioner for `s` until `shutdown` completes (the current cycle finishes
/// first): readiness, watchdog and reloads are the service skeleton's.
pub async fn run(
    s: Settings,
    metrics: Option<Metrics>,
    hooks: Hooks,
    shutdown: impl Future<Output = ()>,
    reloads: mpsc::Receiver<Reload>,
) -> Result<(), ProvisionerError> {
    let mut p = Provisioner::connect(s, metrics).await?;
    lifecycle::serve(&mut p, hooks, shutdown, reloads).await;
    Ok(())
}

/// Idle jobs and pods by shape, for operators' dashboards.
fn export(m: &Metrics, plan: &KubePlan, took: std::time::Duration) {
    m.cycle_seconds.observe(took.as_secs_f64());
    m.idle_jobs.clear();
    m.pods.clear();
    for c in &plan.clusters {
        let shape = c.key.to_string();
        let idle = [("shape", shape.clone())];
        m.idle_jobs.get_or_create(&idle).set(c.idle_jobs as i64);
        for (state, n) in [
            ("waiting", c.pods.waiting),
            ("unmatched", c.pods.unmatched),
            ("claimed", c.pods.claimed),
            ("failed", c.pods.failed),
            ("unknown", c.pods.unknown),
        ] {
            let labels = [("shape", shape.clone()), ("state", state.into())];
            m.pods.get_or_create(&labels).set(n as i64);
        }
    }
}

/// One live observation for a one-shot command (`snapshot`, `plan`, `status`), with the back-off
/// book the running provisioner saved.
pub async fn live_snapshot(
    s: &Settings,
    now: DateTime<Utc>,
) -> Result<ClusterSnapshot, ProvisionerError> {
    let backend = KubeBackend::connect(&s.connection).await?;
    observe(&s.condor, &backend, load_book(&s.state_file), now).await
}
