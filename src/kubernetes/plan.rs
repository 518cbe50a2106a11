//! Pure planning for kubernetes mode: (ClusterSnapshot with its back-off book, config, now)
//! → per-shape decisions, the Kubernetes Job bodies to create (one Job per worker pod, as the
//! worker image expects them) and the finished Jobs to delete. No I/O, no clock.

use crate::config::kubernetes::{KubernetesConfig, is_label_key, is_label_value};
use crate::kubernetes::accounting::Accounting;
use crate::kubernetes::accounting::{account, observe_pods};
use crate::kubernetes::backoff::{BackoffBook, BackoffPolicy, Gate};
use crate::kubernetes::demand::{Demand, min_pods, pods_to_submit};
use crate::kubernetes::ini::parse_dict;
use crate::kubernetes::shape::ShapeKey;
use crate::kubernetes::snapshot::ClusterSnapshot;
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, KeyToPath, NodeAffinity,
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecretVolumeSource, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use std::collections::BTreeMap;

/// `K8S_PROVISIONER_TYPE` the worker advertises and the startd query selects on.
pub const PROVISIONER_TYPE: &str = "PRPHTCondorProvisioner";
/// Where the worker image's `01_token.sh` reads the pool token.
pub const TOKEN_PATH: &str = "/etc/condor/tokens.d/prp-wn.token";
/// The node label GPU product names are matched against (NVIDIA GPU feature discovery).
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// Idle shutdown the older worker image read from its env; ospool-ep ignores it and uses
/// ACCEPT_IDLE_MINUTES. Kept so pods stay identical to the provisioner's.
const STARTD_NOCLAIM_SHUTDOWN: &str = "1200";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("shape {key}: {field} entry `{entry}` {problem}")]
    BadShapeField {
        key: String,
        field: &'static str,
        entry: String,
        problem: String,
    },
}

/// What the back-off says about one shape, for `plan` and `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackoffView {
    pub failures: u32,
    /// On trial: at most one pod at a time.
    pub trial: bool,
    pub next_trial_at: Option<DateTime<Utc>>,
}

/// The decision for one shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterDecision {
    pub key: ShapeKey,
    pub idle_jobs: u64,
    pub waiting: u64,
    pub unmatched: u64,
    pub claimed: u64,
    pub failed: u64,
    pub unknown: u64,
    pub min_pods: u64,
    pub submit: u64,
    pub backoff: Option<BackoffView>,
    /// Why this shape gets no Job bodies although `submit` > 0 asked for some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One cycle's plan, in the JSON shape `pilotd plan --format json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct KubePlan {
    pub mode: &'static str,
    pub now: DateTime<Utc>,
    pub clusters: Vec<ClusterDecision>,
    /// Job bodies to create, as the API receives them.
    pub jobs: Vec<Job>,
    /// Names of finished Jobs to delete (background propagation).
    pub delete: Vec<String>,
    /// Schedds skipped this cycle because their query failed.
    pub failed_schedds: Vec<String>,
}

/// The plan plus the back-off book to carry into the next cycle.
#[derive(Debug, Clone)]
pub struct Decision {
    pub plan: KubePlan,
    pub book: BackoffBook,
}

pub fn backoff_policy(cfg: &KubernetesConfig) -> BackoffPolicy {
    BackoffPolicy {
        after: *cfg.backoff_after.get_ref(),
        initial: cfg.backoff_initial.0,
        max: cfg.backoff_max.0,
    }
}

/// Decides one cycle from one observation.
pub fn decide(snap: &ClusterSnapshot, cfg: &KubernetesConfig, now: DateTime<Utc>) -> Decision {
    let demand = Demand::from_jobs(&snap.jobs);
    let observations = observe_pods(&snap.pods, &snap.startds, now, cfg.unknown_after.0);
    let accounting = account(&observations);
    let policy = backoff_policy(cfg);
    let mut book = snap.backoff.clone();
    book.observe(&observations, now, &policy);

    let mut keys: Vec<&ShapeKey> = demand.idle.keys().chain(accounting.keys()).collect();
    keys.sort();
    keys.dedup();

    let mut clusters = Vec::with_capacity(keys.len());
    let mut jobs = Vec::new();
    for key in keys {
        let idle = demand.idle.get(key).copied().unwrap_or(0);
        let acc = accounting.get(key).copied().unwrap_or_default();
        let min = min_pods(idle, *cfg.max_pods_per_cluster.get_ref());
        let want = pods_to_submit(min, &acc, *cfg.max_submit_pods_per_cluster.get_ref());
        let gate = book.gate(key, acc.unclaimed(), now, &policy);
        let mut submit = gate.cap(want);
        let backoff = book
            .keys
            .get(key)
            .filter(|e| e.failures > 0)
            .map(|e| BackoffView {
                failures: e.failures,
                trial: e.on_trial(&policy),
                next_trial_at: match gate {
                    Gate::Closed { until } => until,
                    _ => e.next_trial_at(&policy),
                },
            });
        let mut error = None;
        let mut bodies = Vec::new();
        for _ in 0..submit {
            let name = job_name(cfg, now, jobs.len() + bodies.len());
            match job_body(key, cfg, &name) {
                Ok(job) => bodies.push(job),
                Err(e) => {
                    error = Some(e.to_string());
                    bodies.clear();
                    submit = 0;
                    break;
                }
            }
        }
        jobs.extend(bodies);
        clusters.push(cluster_row(key, idle, &acc, min, submit, backoff, error));
    }
    Decision {
        plan: KubePlan {
            mode: "kubernetes",
            now,
            clusters,
            jobs,
            delete: finished_jobs_to_delete(&snap.kube_jobs, cfg, now),
            failed_schedds: snap.failed_schedds.clone(),
        },
        book,
    }
}

fn cluster_row(
    key: &ShapeKey,
    idle: u64,
    acc: &Accounting,
    min: u64,
    submit: u64,
    backoff: Option<BackoffView>,
    error: Option<String>,
) -> ClusterDecision {
    ClusterDecision {
        key: key.clone(),
        idle_jobs: idle,
        waiting: acc.waiting,
        unmatched: acc.unmatched,
        claimed: acc.claimed,
        failed: acc.failed,
        unknown: acc.unknown,
        min_pods: min,
        submit,
        backoff,
        error,
    }
}

/// `<app>-<unix seconds, hex>-<sequence in this cycle, 6 hex>`, the provisioner's scheme,
/// unique across cycles that start in different seconds.
pub fn job_name(cfg: &KubernetesConfig, now: DateTime<Utc>, seq: usize) -> String {
    format!(
        "{}-{:x}-{:06x}",
        cfg.app_name.get_ref(),
        now.timestamp().max(0),
        seq
    )
}

/// When a Job finished (its Complete or Failed condition became true), if it has.
pub fn finished_at(job: &Job) -> Option<DateTime<Utc>> {
    let status = job.status.as_ref()?;
    let cond = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")?;
    let t = cond
        .last_transition_time
        .as_ref()
        .or(status.completion_time.as_ref())?;
    DateTime::from_timestamp(t.0.as_second(), 0)
}

/// Finished Jobs older than `cleanup_after`, oldest first, at most `cleanup_max_per_cycle`.
/// A delete that fails leaves the Job listed, so the next cycle retries it.
pub fn finished_jobs_to_delete(
    jobs: &[Job],
    cfg: &KubernetesConfig,
    now: DateTime<Utc>,
) -> Vec<String> {
    let grace = chrono::Duration::from_std(cfg.cleanup_after.0).unwrap_or(chrono::Duration::MAX);
    let mut done: Vec<(DateTime<Utc>, String)> = jobs
        .iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| Some((finished_at(j)?, j.metadata.name.clone()?)))
        .filter(|(t, _)| now.signed_duration_since(*t) >= grace)
        .collect();
    done.sort();
    done.into_iter()
        .take(usize::try_from(cfg.cleanup_max_per_cycle).unwrap_or(usize::MAX))
        .map(|(_, n)| n)
        .collect()
}

fn q(s: impl Into<String>) -> Quantity {
    Quantity(s.into())
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// Splits a mount path's `!` (read-only) and `#` (HostToContainer) prefixes, in any order.
fn mount_flags(path: &str) -> (&str, bool, bool) {
    let (mut p, mut ro, mut h2c) = (path, false, false);
    loop {
        if let Some(r) = p.strip_prefix('!') {
            ro = true;
            p = r;
        } else if let Some(r) = p.strip_prefix('#') {
            h2c = true;
            p = r;
        } else {
            return (p, ro, h2c);
        }
    }
}

fn pvc_mount(
    volumes: &mut Vec<Volume>,
    mounts: &mut Vec<VolumeMount>,
    name: String,
    claim: &str,
    path: &str,
    read_only: bool,
    host_to_container: bool,
) {
    volumes.push(Volume {
        name: name.clone(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_string(),
            read_only: read_only.then_some(true),
        }),
        ..Volume::default()
    });
    mounts.push(VolumeMount {
        name,
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        mount_propagation: host_to_container.then(|| "HostToContainer".to_string()),
        ..VolumeMount::default()
    });
}

/// The Job for one worker pod of shape `key`: `parallelism = completions = 1`,
/// `backoffLimit = 0` (a failing worker never takes siblings down, and is not replaced
/// behind the back-off's back), env/labels/volumes exactly as the worker image reads them.
pub fn job_body(key: &ShapeKey, cfg: &KubernetesConfig, name: &str) -> Result<Job, PlanError> {
    let key_text = key.to_string();
    let bad = |field: &'static str, entry: &str, problem: &str| PlanError::BadShapeField {
        key: key_text.clone(),
        field,
        entry: entry.to_string(),
        problem: problem.to_string(),
    };

    // Labels: site labels, the job's RequestLabels, then the ones pilotd relies on (last, so
    // nothing can override the selector or the key).
    let (key_labels, key_annotations) = key.pod_metadata();
    let mut labels: BTreeMap<String, String> = cfg.labels.get_ref().clone();
    let job_labels = parse_dict(&key.labels).map_err(|m| bad("RequestLabels", &key.labels, &m))?;
    for (k, v) in job_labels {
        if !is_label_key(&k) || !is_label_value(&v) {
            return Err(bad(
                "RequestLabels",
                &format!("{k}:{v}"),
                "is not a valid Kubernetes label",
            ));
        }
        labels.insert(k, v);
    }
    labels.insert("k8s-app".into(), cfg.app_name.get_ref().clone());
    labels.insert("prp-htcondor-portal".into(), "wn".into());
    labels.insert("app.kubernetes.io/managed-by".into(), "pilotd".into());
    labels.extend(key_labels);

    let mut annotations = cfg.annotations.clone();
    annotations.extend(key_annotations.clone());

    // Resources.
    let (cpus, mem, gpus) = (key.cpus, key.memory_mib, key.gpus);
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    if cfg.use_large_limit {
        requests.insert("cpu".into(), q(format!("{}m", cpus * 750)));
        requests.insert("memory".into(), q(format!("{}Mi", mem * 8 / 10)));
        limits.insert("cpu".into(), q(format!("{}m", cpus * 1000 + 250)));
        limits.insert("memory".into(), q(format!("{}Mi", mem + 1000)));
    } else {
        for m in [&mut requests, &mut limits] {
            m.insert("cpu".into(), q(cpus.to_string()));
            m.insert("memory".into(), q(format!("{}Mi", mem + 1000)));
        }
    }
    // HTCondor disk is KiB: `Ki`, never the decimal `k` (2.4 % smaller, kubelet evictions).
    let eph = key
        .disk_kib
        .max(cfg.min_ephemeral_storage_mib.saturating_mul(1024));
    let mut both: BTreeMap<String, Quantity> = BTreeMap::new();
    both.insert("ephemeral-storage".into(), q(format!("{eph}Ki")));
    if gpus > 0 {
        both.insert("nvidia.com/gpu".into(), q(gpus.to_string()));
    }
    if cfg.request_fuse {
        both.insert("smarter-devices/fuse".into(), q("1"));
    }
    for (k, v) in &cfg.resources {
        both.insert(k.clone(), q(v.clone()));
    }
    requests.extend(both.clone());
    limits.extend(both);

    // Env, in the provisioner's order.
    let mut envs = vec![
        env("K8S_PROVISIONER_TYPE", PROVISIONER_TYPE),
        env("K8S_PROVISIONER_NAME", cfg.app_name.get_ref().clone()),
        env("CONDOR_HOST", cfg.condor_host.clone()),
        env("STARTD_NOCLAIM_SHUTDOWN", STARTD_NOCLAIM_SHUTDOWN),
        env("K8S_NAMESPACE", cfg.namespace.get_ref().clone()),
        env("K8S_DOMAIN", cfg.k8s_domain.clone()),
        env("NUM_CPUS", cpus.to_string()),
        env("NUM_GPUS", gpus.to_string()),
        env("MEMORY", mem.to_string()),
        // The job's own KiB, never the storage floor: the worker's START requires
        // Disk >= RequestDisk && RequestDisk + 4500000 > Disk.
        env("DISK", key.disk_kib.to_string()),
        env(
            "FORCE_K8SNAMESPACE_MATCHING",
            if cfg.force_namespace_matching {
                "yes"
            } else {
                "no"
            },
        ),
    ];
    if !cfg.additional_requirements.is_empty() {
        envs.push(env(
            "ADDITIONAL_REQUIREMENTS",
            cfg.additional_requirements.clone(),
        ));
    }
    for (k, v) in &cfg.env {
        envs.push(env(k, v.clone()));
    }
    envs.push(EnvVar {
        name: "PHYSICAL_HOSTNAME".into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: "spec.nodeName".into(),
            }),
            ..EnvVarSource::default()
        }),
    });

    // Volumes: site PVCs and ConfigMap files, the job's disk volumes, the token secret.
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    for (i, v) in cfg.pvc_volumes.iter().enumerate() {
        pvc_mount(
            &mut volumes,
            &mut mounts,
            format!("pvc-{i}"),
            &v.claim,
            &v.path,
            v.read_only,
            v.host_to_container,
        );
    }
    for (i, (claim, path)) in parse_dict(&key.disk_volumes)
        .map_err(|m| bad("RequestDiskVolumes", &key.disk_volumes, &m))?
        .into_iter()
        .enumerate()
    {
        let (path, ro, h2c) = mount_flags(&path);
        if claim.is_empty() || !path.starts_with('/') {
            return Err(bad(
                "RequestDiskVolumes",
                &format!("{claim}:{path}"),
                "must be PVC_NAME:/absolute/mount/path",
            ));
        }
        pvc_mount(
            &mut volumes,
            &mut mounts,
            format!("job-pvc-{i}"),
            &claim,
            path,
            ro,
            h2c,
        );
    }
    for (i, v) in cfg.config_volumes.iter().enumerate() {
        let file = v.path.rsplit('/').next().unwrap_or(&v.path).to_string();
        let vname = format!("cm-{i}");
        volumes.push(Volume {
            name: vname.clone(),
            config_map: Some(ConfigMapVolumeSource {
                name: v.config_map.clone(),
                items: Some(vec![KeyToPath {
                    key: file.clone(),
                    path: file.clone(),
                    ..KeyToPath::default()
                }]),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: vname,
            mount_path: v.path.clone(),
            sub_path: Some(file),
            ..VolumeMount::default()
        });
    }
    volumes.push(Volume {
        name: "token".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(cfg.token_secret.clone()),
            items: Some(vec![KeyToPath {
                key: cfg.token_key.clone(),
                path: cfg.token_key.clone(),
                ..KeyToPath::default()
            }]),
            // 0400 on the volume (the provisioner put it on the item as an ignored field).
            default_mode: Some(0o400),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    });
    mounts.push(VolumeMount {
        name: "token".into(),
        mount_path: TOKEN_PATH.into(),
        sub_path: Some(cfg.token_key.clone()),
        read_only: Some(true),
        ..VolumeMount::default()
    });

    // Scheduling: an affinity block only when something is required (an empty
    // NodeSelectorTerm matches no node at all).
    let mut expressions: Vec<NodeSelectorRequirement> = cfg
        .node_affinity
        .iter()
        .map(|r| NodeSelectorRequirement {
            key: r.key.clone(),
            operator: r.operator.as_str().into(),
            values: Some(r.values.clone()),
        })
        .collect();
    let gpu_types = key.gpu_type_list();
    if !gpu_types.is_empty() {
        expressions.push(NodeSelectorRequirement {
            key: GPU_PRODUCT_LABEL.into(),
            operator: "In".into(),
            values: Some(gpu_types),
        });
    }
    let affinity = (!expressions.is_empty()).then(|| Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(expressions),
                    match_fields: None,
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    });
    let tolerations = (!cfg.tolerations.is_empty()).then(|| {
        cfg.tolerations
            .iter()
            .map(|t| Toleration {
                key: Some(t.clone()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Toleration::default()
            })
            .collect()
    });
    let priority = if gpus > 0 {
        cfg.priority_class_gpu.clone()
    } else {
        cfg.priority_class_cpu.clone()
    }
    .or_else(|| cfg.priority_class.clone());

    let pod_spec = PodSpec {
        restart_policy: Some("Never".into()),
        containers: vec![Container {
            name: "htcondor".into(),
            image: Some(cfg.image.get_ref().clone()),
            image_pull_policy: Some(cfg.image_pull_policy.as_str().into()),
            env: Some(envs),
            resources: Some(ResourceRequirements {
                requests: Some(requests),
                limits: Some(limits),
                ..ResourceRequirements::default()
            }),
            volume_mounts: Some(mounts),
            ..Container::default()
        }],
        volumes: Some(volumes),
        tolerations,
        node_selector: (!cfg.node_selectors.is_empty()).then(|| cfg.node_selectors.clone()),
        affinity,
        priority_class_name: priority,
        service_account_name: cfg.service_account_name.clone(),
        ..PodSpec::default()
    };

    Ok(Job {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(cfg.namespace.get_ref().clone()),
            labels: Some(labels.clone()),
            annotations: (!key_annotations.is_empty()).then_some(key_annotations),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            parallelism: Some(1),
            completions: Some(1),
            backoff_limit: Some(0),
            ttl_seconds_after_finished: Some(
                i32::try_from(cfg.job_ttl.0.as_secs()).unwrap_or(i32::MAX),
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: (!annotations.is_empty()).then_some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec),
            },
            ..JobSpec::default()
        }),
        status: None,
    })
}

/// The text form of `plan` in kubernetes mode.
pub fn render_text(plan: &KubePlan) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "kubernetes plan at {}", plan.now.to_rfc3339());
    if !plan.failed_schedds.is_empty() {
        let _ = writeln!(
            out,
            "skipped schedds (query failed): {}",
            plan.failed_schedds.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "{:<39} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>6}  back-off",
        "shape (CPUs;MEM;DISK;VOLS;GPUs;TYPES;LABELS)",
        "idle",
        "wait",
        "unmat",
        "claim",
        "failed",
        "unknwn",
        "min",
        "submit"
    );
    for c in &plan.clusters {
        let backoff = match &c.backoff {
            None => "-".to_string(),
            Some(b) => format!(
                "{} failures{}{}",
                b.failures,
                if b.trial { ", trial" } else { "" },
                b.next_trial_at
                    .map(|t| format!(", next trial {}", t.to_rfc3339()))
                    .unwrap_or_default()
            ),
        };
        let _ = writeln!(
            out,
            "{:<39} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>6}  {}",
            c.key.to_string(),
            c.idle_jobs,
            c.waiting,
            c.unmatched,
            c.claimed,
            c.failed,
            c.unknown,
            c.min_pods,
            c.submit,
            backoff
        );
        if let Some(e) = &c.error {
            let _ = writeln!(out, "  error: {e}");
        }
    }
    let _ = writeln!(out, "actions:");
    if plan.jobs.is_empty() && plan.delete.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for j in &plan.jobs {
        let labels = j.metadata.labels.as_ref();
        let shape = labels
            .and_then(|l| l.get(crate::kubernetes::shape::POD_SHAPE))
            .cloned()
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  create Job {} (shape digest {shape})",
            j.metadata.name.as_deref().unwrap_or("?")
        );
    }
    for d in &plan.delete {
        let _ = writeln!(out, "  delete finished Job {d} (background propagation)");
    }
    out
}

#[cfg(test)]
mod tests;
