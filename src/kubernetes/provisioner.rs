//! Subcommands in kubernetes mode: `import-ini`, `plan`, `snapshot`, `status` and the reconcile
//! loop of `run`. One cycle = observe (condor tools, then one paginated pod list and one Job
//! list) → decide (pure `kubernetes::plan::decide`) → act (create Jobs in key order, delete
//! finished Jobs). A cycle whose observation fails acts on nothing: a failed list is not an
//! empty list.

use crate::config::Config;
use crate::config::kubernetes::KubernetesConfig;
use crate::kubernetes::backoff::BackoffBook;
use crate::kubernetes::client::{KubeBackend, KubeError};
use crate::kubernetes::condor::{CondorError, CondorProbe};
use crate::kubernetes::ini::{self, IniError};
use crate::kubernetes::plan::{ClusterDecision, KubePlan, decide, render_text};
use crate::kubernetes::shape::POD_SHAPE;
use crate::kubernetes::snapshot::{ClusterSnapshot, SnapshotError};
use crate::service::metrics::Metrics;
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum KubeCmdError {
    #[error("{} has no [kubernetes] table\n  hint: set mode = \"kubernetes\" and add [kubernetes] (convert an NRP osg_provisioner.conf with `pilotd import-ini FILE`)", path.as_ref().map_or("pilotd.toml".to_string(), |p| p.display().to_string()))]
    NotConfigured { path: Option<PathBuf> },
    #[error("cannot read snapshot {}: {source}\n  hint: make one with `pilotd snapshot > FILE`", path.display())]
    ReadSnapshot {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Condor(#[from] CondorError),
    #[error(transparent)]
    Kube(#[from] KubeError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot print JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// `pilotd import-ini FILE`: the equivalent pilotd.toml, printed.
pub fn import_ini(path: &Path) -> Result<String, IniError> {
    ini::import_file(path)
}

fn kube_config(cfg: &Config) -> Result<&KubernetesConfig, KubeCmdError> {
    cfg.site
        .kubernetes
        .as_ref()
        .ok_or_else(|| KubeCmdError::NotConfigured {
            path: cfg.site_path.clone(),
        })
}

/// Where the back-off book survives restarts.
pub fn state_file(cfg: &Config, k: &KubernetesConfig) -> PathBuf {
    k.state_file
        .clone()
        .unwrap_or_else(|| cfg.site.state_dir.join("kubernetes-backoff.json"))
}

/// Reads the back-off book; a missing file is an empty book, a damaged one is reported and
/// replaced (losing back-off history only delays back-off, it never stops workers).
pub fn load_book(path: &Path) -> BackoffBook {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
            tracing::warn!(file = %path.display(), error = %e, "back-off state unreadable; starting afresh");
            BackoffBook::default()
        }),
        Err(_) => BackoffBook::default(),
    }
}

/// Writes the book atomically (temp file + rename).
pub fn save_book(path: &Path, book: &BackoffBook) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(book).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
}

fn runtime() -> Result<tokio::runtime::Runtime, KubeCmdError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(KubeCmdError::Runtime)
}

/// One live observation: the pool first (all schedds failing fails the cycle), then the
/// provisioner's pods and Jobs.
pub async fn observe(
    k: &KubernetesConfig,
    probe: &CondorProbe,
    backend: &KubeBackend,
    book: BackoffBook,
    now: DateTime<Utc>,
) -> Result<ClusterSnapshot, KubeCmdError> {
    let pool = probe.observe(k).await?;
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
pub async fn act(plan: &KubePlan, backend: &KubeBackend) -> ActReport {
    let mut report = ActReport::default();
    let mut failed_shapes: BTreeSet<String> = BTreeSet::new();
    for job in &plan.jobs {
        let name = job.metadata.name.clone().unwrap_or_default();
        let shape = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_SHAPE))
            .cloned()
            .unwrap_or_default();
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
    k: &KubernetesConfig,
    probe: &CondorProbe,
    backend: &KubeBackend,
    book: &mut BackoffBook,
    now: DateTime<Utc>,
) -> Result<(KubePlan, ActReport), KubeCmdError> {
    let snap = observe(k, probe, backend, book.clone(), now).await?;
    let decision = decide(&snap, k, now);
    for c in &decision.plan.clusters {
        log_cluster(c);
    }
    *book = decision.book;
    let report = act(&decision.plan, backend).await;
    Ok((decision.plan, report))
}

fn log_cluster(c: &ClusterDecision) {
    let all_zero = c.idle_jobs + c.waiting + c.unmatched + c.claimed + c.failed + c.unknown == 0;
    if !all_zero {
        tracing::debug!(
            key = %c.key, idle = c.idle_jobs, waiting = c.waiting, unmatched = c.unmatched,
            claimed = c.claimed, failed = c.failed, unknown = c.unknown, min_pods = c.min_pods,
            submit = c.submit, "cluster"
        );
    }
}

/// The reconcile loop for one `[kubernetes]` table: a cycle every `cycle`, until `shutdown`
/// completes (the current cycle finishes first). A failed cycle is logged and retried.
pub async fn run_kubernetes(
    k: &KubernetesConfig,
    state: &Path,
    shutdown: impl Future<Output = ()>,
    metrics: Option<&Metrics>,
) -> Result<(), KubeCmdError> {
    let backend = KubeBackend::connect(k).await?;
    let probe = CondorProbe::from_config(k);
    let mut book = load_book(state);
    tokio::pin!(shutdown);
    loop {
        let started = tokio::time::Instant::now();
        let cycle_fut = cycle(k, &probe, &backend, &mut book, Utc::now());
        match cycle_fut.await {
            Ok((plan, report)) => {
                if let Some(m) = metrics {
                    export(m, &plan, started.elapsed());
                }
                tracing::info!(
                    created = report.created.len(),
                    create_failed = report.create_failed.len(),
                    deleted = report.deleted.len(),
                    skipped_schedds = plan.failed_schedds.len(),
                    requests = backend.requests(),
                    "cycle done"
                );
                if let Err(e) = save_book(state, &book) {
                    tracing::warn!(file = %state.display(), error = %e, "cannot save back-off state");
                }
            }
            Err(e) => tracing::error!(error = %e, "cycle failed; nothing submitted"),
        }
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = tokio::time::sleep_until(started + k.cycle()) => {}
        }
    }
}

/// Idle jobs and pods by shape, for operators' dashboards.
fn export(m: &Metrics, plan: &KubePlan, took: std::time::Duration) {
    use crate::service::metrics::{ShapeLabel, ShapeStateLabel};
    m.cycle_seconds.observe(took.as_secs_f64());
    m.idle_jobs.clear();
    m.pods.clear();
    for c in &plan.clusters {
        let shape = c.key.to_string();
        m.idle_jobs
            .get_or_create(&ShapeLabel {
                shape: shape.clone(),
            })
            .set(c.idle_jobs as i64);
        for (state, n) in [
            ("waiting", c.waiting),
            ("unmatched", c.unmatched),
            ("claimed", c.claimed),
            ("failed", c.failed),
            ("unknown", c.unknown),
        ] {
            m.pods
                .get_or_create(&ShapeStateLabel {
                    shape: shape.clone(),
                    state: state.into(),
                })
                .set(n as i64);
        }
    }
}

/// `pilotd run` in kubernetes mode.
pub async fn run(
    cfg: Config,
    shutdown: impl Future<Output = ()>,
    metrics: Option<Metrics>,
) -> Result<(), KubeCmdError> {
    let k = kube_config(&cfg)?;
    let state = state_file(&cfg, k);
    run_kubernetes(k, &state, shutdown, metrics.as_ref()).await
}

async fn live_snapshot(
    k: &KubernetesConfig,
    book: BackoffBook,
    now: DateTime<Utc>,
) -> Result<ClusterSnapshot, KubeCmdError> {
    let backend = KubeBackend::connect(k).await?;
    observe(k, &CondorProbe::from_config(k), &backend, book, now).await
}

/// `pilotd plan [--snapshot FILE] [--format json]`: decides and prints, acts on nothing.
pub fn plan(
    cfg: &Config,
    snapshot: Option<&Path>,
    now: DateTime<Utc>,
    json: bool,
) -> Result<String, KubeCmdError> {
    let k = kube_config(cfg)?;
    let snap = match snapshot {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| KubeCmdError::ReadSnapshot {
                path: path.to_path_buf(),
                source: e,
            })?;
            ClusterSnapshot::from_json(&path.display().to_string(), &text)?
        }
        None => {
            let book = load_book(&state_file(cfg, k));
            runtime()?.block_on(live_snapshot(k, book, now))?
        }
    };
    plan_from_snapshot(k, &snap, now, json)
}

/// The offline half of `plan`, also used by the benchmark.
pub fn plan_from_snapshot(
    k: &KubernetesConfig,
    snap: &ClusterSnapshot,
    now: DateTime<Utc>,
    json: bool,
) -> Result<String, KubeCmdError> {
    let decision = decide(snap, k, now);
    if json {
        Ok(serde_json::to_string_pretty(&decision.plan)? + "\n")
    } else {
        Ok(render_text(&decision.plan))
    }
}

/// `pilotd snapshot`: the live observation, in the format `plan --snapshot` reads.
pub fn snapshot(cfg: &Config) -> Result<String, KubeCmdError> {
    let k = kube_config(cfg)?;
    let book = load_book(&state_file(cfg, k));
    let snap = runtime()?.block_on(live_snapshot(k, book, Utc::now()))?;
    Ok(serde_json::to_string_pretty(&snap)? + "\n")
}

/// `pilotd status`: the table by shape (rows sorted, all-zero rows hidden) with back-off.
pub fn status(cfg: &Config, json: bool) -> Result<String, KubeCmdError> {
    let k = kube_config(cfg)?;
    let book = load_book(&state_file(cfg, k));
    let now = Utc::now();
    let snap = runtime()?.block_on(live_snapshot(k, book, now))?;
    render_status(&decide(&snap, k, now).plan, json)
}

/// Renders `status` from a plan (shared by the live command and tests).
pub fn render_status(plan: &KubePlan, json: bool) -> Result<String, KubeCmdError> {
    let rows: Vec<&ClusterDecision> = plan
        .clusters
        .iter()
        .filter(|c| {
            c.idle_jobs + c.waiting + c.unmatched + c.claimed + c.failed + c.unknown > 0
                || c.backoff.is_some()
        })
        .collect();
    if json {
        let v = serde_json::json!({
            "mode": "kubernetes",
            "now": plan.now,
            "clusters": rows,
            "failed_schedds": plan.failed_schedds,
        });
        return Ok(serde_json::to_string_pretty(&v)? + "\n");
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<39}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}  Back-off",
        "Cluster (CPUs;MEM;DISK;VOLS;GPUs;TYPES;LABELS)",
        "Idle Jobs",
        "Wait Pods",
        "Unmatched",
        "Run Pods",
        "Failed P",
        "Unknown P"
    );
    let _ = writeln!(out, "{}", "=".repeat(99));
    for c in rows {
        let backoff = c.backoff.as_ref().map_or("-".to_string(), |b| {
            let mut s = format!("{} failures", b.failures);
            if b.trial {
                s.push_str(", trial");
            }
            if let Some(t) = b.next_trial_at {
                s.push_str(&format!(" until {}", t.to_rfc3339()));
            }
            s
        });
        let _ = writeln!(
            out,
            "{:<39}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}  {}",
            c.key.to_string(),
            c.idle_jobs,
            c.waiting,
            c.unmatched,
            c.claimed,
            c.failed,
            c.unknown,
            backoff
        );
    }
    if !plan.failed_schedds.is_empty() {
        let _ = writeln!(out, "skipped schedds: {}", plan.failed_schedds.join(", "));
    }
    Ok(out)
}
