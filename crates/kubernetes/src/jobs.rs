//! The Kubernetes Job of one worker pod (pure): `parallelism = completions = 1`,
//! `backoffLimit = 0`, resources, env, labels, affinity and volumes exactly as the NRP worker
//! image reads them, from the pod's shape and the site's `[kubernetes]` settings.

pub(crate) use crate::config::names::TOKEN_PATH;
use crate::config::names::{mount_point, mounts_overlap, reserved_label};
use crate::config::{
    AffinityOperator, AffinityRule, ConfigVolume, PullPolicy, PvcVolume, is_label_key,
    is_label_value,
};
use crate::encoding::parse_dict;
use crate::identity::{self, PROVISIONER_TYPE};
use crate::shape::{POD_SHAPE, ShapeKey};
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
use std::collections::BTreeMap;
use std::time::Duration;

/// The node label GPU product names are matched against (NVIDIA GPU feature discovery).
pub(crate) const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// Idle shutdown the older worker image read from its env; ospool-ep ignores it and uses
/// ACCEPT_IDLE_MINUTES. Kept so pods stay identical to the provisioner's.
const STARTD_NOCLAIM_SHUTDOWN: &str = "1200";

/// What every worker pod of this provisioner is made of, besides its shape: the site's
/// `[kubernetes]` settings as plain values.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTemplate {
    pub app_name: String,
    pub namespace: String,
    pub condor_host: String,
    pub k8s_domain: String,
    pub image: String,
    pub image_pull_policy: PullPolicy,
    pub priority_class: Option<String>,
    pub priority_class_cpu: Option<String>,
    pub priority_class_gpu: Option<String>,
    pub service_account_name: Option<String>,
    pub tolerations: Vec<String>,
    pub node_selectors: BTreeMap<String, String>,
    pub node_affinity: Vec<AffinityRule>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub pvc_volumes: Vec<PvcVolume>,
    pub config_volumes: Vec<ConfigVolume>,
    pub resources: BTreeMap<String, String>,
    pub job_ttl: Duration,
    pub force_namespace_matching: bool,
    pub additional_requirements: String,
    pub request_fuse: bool,
    pub min_ephemeral_storage_mib: u64,
    pub use_large_limit: bool,
    pub token_secret: String,
    pub token_key: String,
    /// Label keys, or prefixes ending in '/', a job's `RequestLabels` may set.
    pub job_label_allow: Vec<String>,
    /// PVCs a job's `RequestDiskVolumes` may mount.
    pub job_volume_allow: Vec<String>,
}

impl PodTemplate {
    /// Whether the site lets a job put label `key` on its pod: allowed by key or prefix, and
    /// never a reserved one whatever the list says.
    pub(crate) fn allows_job_label(&self, key: &str) -> Result<(), LabelRefused> {
        if let Some(why) = reserved_label(key) {
            return Err(LabelRefused::Reserved(why));
        }
        let allowed = self.job_label_allow.iter().any(|a| {
            if a.ends_with('/') {
                key.starts_with(a.as_str())
            } else {
                a == key
            }
        });
        allowed.then_some(()).ok_or(LabelRefused::NotAllowed)
    }
}

/// Why a job's `RequestLabels` key does not reach its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LabelRefused {
    #[error("is reserved ({0})")]
    Reserved(&'static str),
    #[error("is not in [kubernetes] job_label_allow")]
    NotAllowed,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum JobError {
    #[error("shape {key}: {field} entry `{entry}` {problem}")]
    BadShapeField {
        key: String,
        field: &'static str,
        entry: String,
        problem: String,
    },
}

/// `<app>-<unix seconds, hex>-<sequence in this cycle, 6 hex>`, the provisioner's scheme,
/// unique across cycles that start in different seconds.
pub(crate) fn job_name(app_name: &str, now: DateTime<Utc>, seq: usize) -> String {
    format!("{app_name}-{:x}-{seq:06x}", now.timestamp().max(0))
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
pub(crate) fn mount_flags(path: &str) -> (&str, bool, bool) {
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

/// A PVC and its mount.
fn pvc_mount(
    name: String,
    claim: &str,
    path: &str,
    read_only: bool,
    host_to_container: bool,
) -> (Volume, VolumeMount) {
    let volume = Volume {
        name: name.clone(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_string(),
            read_only: read_only.then_some(true),
        }),
        ..Volume::default()
    };
    let mount = VolumeMount {
        name,
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        mount_propagation: host_to_container.then(|| "HostToContainer".to_string()),
        ..VolumeMount::default()
    };
    (volume, mount)
}

/// The job's GPU types that every site rule on the GPU product label lets through (`In`:
/// listed, `NotIn`: not listed), in the job's order.
pub(crate) fn site_gpu_types(job_types: &[String], rules: &[AffinityRule]) -> Vec<String> {
    job_types
        .iter()
        .filter(|t| {
            rules
                .iter()
                .filter(|r| r.key == GPU_PRODUCT_LABEL)
                .all(|r| match r.operator {
                    AffinityOperator::In => r.values.contains(t),
                    AffinityOperator::NotIn => !r.values.contains(t),
                })
        })
        .cloned()
        .collect()
}

/// The Job for one worker pod of shape `key`: `parallelism = completions = 1`,
/// `backoffLimit = 0` (a failing worker never takes siblings down, and is not replaced
/// behind the back-off's back), env/labels/volumes exactly as the worker image reads them.
/// Refusals come in this order: RequestLabels, RequestDiskVolumes, RequestGPUTypes.
pub(crate) fn job_body(key: &ShapeKey, pods: &PodTemplate, name: &str) -> Result<Job, JobError> {
    let (key_labels, key_annotations) = key.pod_metadata();
    let labels = pod_labels(key, pods, key_labels)?;
    let mut annotations = pods.annotations.clone();
    annotations.extend(key_annotations.clone());
    let pod_spec = pod_spec(key, pods)?;
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(pods.namespace.clone()),
            labels: Some(labels.clone()),
            annotations: (!key_annotations.is_empty()).then_some(key_annotations),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            parallelism: Some(1),
            completions: Some(1),
            backoff_limit: Some(0),
            ttl_seconds_after_finished: Some(
                i32::try_from(pods.job_ttl.as_secs()).unwrap_or(i32::MAX),
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

/// The shape digest a Job body carries (its `POD_SHAPE` label), empty when it has none.
pub(crate) fn shape_digest(job: &Job) -> String {
    let labels = job.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get(POD_SHAPE))
        .cloned()
        .unwrap_or_default()
}

/// A shape field's entry the Job cannot carry.
fn bad_field(key: &ShapeKey, field: &'static str, entry: &str, problem: &str) -> JobError {
    JobError::BadShapeField {
        key: key.to_string(),
        field,
        entry: entry.to_string(),
        problem: problem.to_string(),
    }
}

/// Site labels, the job's RequestLabels, then the ones pilotd relies on (last, so nothing can
/// override the selector or the key).
fn pod_labels(
    key: &ShapeKey,
    pods: &PodTemplate,
    key_labels: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, JobError> {
    let bad = |entry: &str, problem: &str| bad_field(key, "RequestLabels", entry, problem);
    let mut labels: BTreeMap<String, String> = pods.labels.clone();
    let job_labels = parse_dict(&key.labels).map_err(|e| bad(&key.labels, &e.to_string()))?;
    for (k, v) in job_labels {
        if !is_label_key(&k) || !is_label_value(&v) {
            return Err(bad(&format!("{k}:{v}"), "is not a valid Kubernetes label"));
        }
        // Any OSPool user sets RequestLabels: only what the site allows reaches the pod.
        pods.allows_job_label(&k)
            .map_err(|why| bad(&format!("{k}:{v}"), &why.to_string()))?;
        labels.insert(k, v);
    }
    for (k, v) in identity::selector_labels(&pods.app_name) {
        labels.insert(k.into(), v);
    }
    labels.insert("app.kubernetes.io/managed-by".into(), "pilotd".into());
    labels.extend(key_labels);
    Ok(labels)
}

/// The worker pod: its one container, volumes and scheduling.
fn pod_spec(key: &ShapeKey, pods: &PodTemplate) -> Result<PodSpec, JobError> {
    let (volumes, mounts) = worker_volumes(key, pods)?;
    let affinity = node_affinity(key, pods)?;
    Ok(PodSpec {
        restart_policy: Some("Never".into()),
        containers: vec![Container {
            name: "htcondor".into(),
            image: Some(pods.image.clone()),
            image_pull_policy: Some(pods.image_pull_policy.as_str().into()),
            env: Some(worker_env(key, pods)),
            resources: Some(worker_resources(key, pods)),
            volume_mounts: Some(mounts),
            ..Container::default()
        }],
        volumes: Some(volumes),
        tolerations: tolerations(pods),
        node_selector: (!pods.node_selectors.is_empty()).then(|| pods.node_selectors.clone()),
        affinity,
        priority_class_name: priority_class(key, pods),
        service_account_name: pods.service_account_name.clone(),
        ..PodSpec::default()
    })
}

/// Requests and limits: CPU and memory by the shape (`use_large_limit` requests less than it
/// limits), and ephemeral storage, GPUs, FUSE and the site's extras alike in both.
fn worker_resources(key: &ShapeKey, pods: &PodTemplate) -> ResourceRequirements {
    let (cpus, mem, gpus) = (key.cpus, key.memory_mib, key.gpus);
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    if pods.use_large_limit {
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
        .max(pods.min_ephemeral_storage_mib.saturating_mul(1024));
    let mut both: BTreeMap<String, Quantity> = BTreeMap::new();
    both.insert("ephemeral-storage".into(), q(format!("{eph}Ki")));
    if gpus > 0 {
        both.insert("nvidia.com/gpu".into(), q(gpus.to_string()));
    }
    if pods.request_fuse {
        both.insert("smarter-devices/fuse".into(), q("1"));
    }
    for (k, v) in &pods.resources {
        both.insert(k.clone(), q(v.clone()));
    }
    requests.extend(both.clone());
    limits.extend(both);
    ResourceRequirements {
        requests: Some(requests),
        limits: Some(limits),
        ..ResourceRequirements::default()
    }
}

/// The worker's env, in the provisioner's order.
fn worker_env(key: &ShapeKey, pods: &PodTemplate) -> Vec<EnvVar> {
    let mut envs = vec![
        env("K8S_PROVISIONER_TYPE", PROVISIONER_TYPE),
        env("K8S_PROVISIONER_NAME", pods.app_name.clone()),
        env("CONDOR_HOST", pods.condor_host.clone()),
        env("STARTD_NOCLAIM_SHUTDOWN", STARTD_NOCLAIM_SHUTDOWN),
        env("K8S_NAMESPACE", pods.namespace.clone()),
        env("K8S_DOMAIN", pods.k8s_domain.clone()),
        env("NUM_CPUS", key.cpus.to_string()),
        env("NUM_GPUS", key.gpus.to_string()),
        env("MEMORY", key.memory_mib.to_string()),
        // The job's own KiB, never the storage floor: the worker's START requires
        // Disk >= RequestDisk && RequestDisk + 4500000 > Disk.
        env("DISK", key.disk_kib.to_string()),
        env(
            "FORCE_K8SNAMESPACE_MATCHING",
            if pods.force_namespace_matching {
                "yes"
            } else {
                "no"
            },
        ),
    ];
    if !pods.additional_requirements.is_empty() {
        envs.push(env(
            "ADDITIONAL_REQUIREMENTS",
            pods.additional_requirements.clone(),
        ));
    }
    for (k, v) in &pods.env {
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
    envs
}

/// Volumes and their mounts: site PVCs, the job's disk volumes, site ConfigMap files, the
/// token secret, in that order.
fn worker_volumes(
    key: &ShapeKey,
    pods: &PodTemplate,
) -> Result<(Vec<Volume>, Vec<VolumeMount>), JobError> {
    let pvcs = pods.pvc_volumes.iter().enumerate();
    let mut both: Vec<_> = pvcs
        .map(|(i, v)| {
            pvc_mount(
                format!("pvc-{i}"),
                &v.claim,
                &v.path,
                v.read_only,
                v.host_to_container,
            )
        })
        .collect();
    both.extend(job_disk_volumes(key, pods, &site_mounts(pods))?);
    let files = pods.config_volumes.iter().enumerate();
    both.extend(files.map(|(i, v)| config_map_file(format!("cm-{i}"), v)));
    both.push(token_secret(pods));
    Ok(both.into_iter().unzip())
}

/// What the site and pilotd mount into every worker, by mount point (`mount_point`), each
/// with what it is, for a refusal to name.
fn site_mounts(pods: &PodTemplate) -> Vec<(String, String)> {
    let pvcs = pods.pvc_volumes.iter().map(|v| {
        (
            v.path.as_str(),
            format!("the site's PVC `{}` ([kubernetes] pvc_volumes)", v.claim),
        )
    });
    let files = pods.config_volumes.iter().map(|v| {
        (
            v.path.as_str(),
            format!(
                "the site's ConfigMap `{}` ([kubernetes] config_volumes)",
                v.config_map
            ),
        )
    });
    pvcs.chain(files)
        .chain([(TOKEN_PATH, "the pool token".to_string())])
        .filter_map(|(path, what)| Some((mount_point(path)?, what)))
        .collect()
}

/// The job's `RequestDiskVolumes`, each a PVC the site allows, mounted where the job says:
/// never where another of its volumes is (the API server refuses the Job: "must be unique"),
/// nor at, above or inside anything the site or pilotd mounts (`site`): a job's volume must
/// not hide the pool token, the site's files or its PVCs, nor reach into them.
fn job_disk_volumes(
    key: &ShapeKey,
    pods: &PodTemplate,
    site: &[(String, String)],
) -> Result<Vec<(Volume, VolumeMount)>, JobError> {
    let bad = |entry: &str, problem: &str| bad_field(key, "RequestDiskVolumes", entry, problem);
    let mut own: Vec<(String, String)> = Vec::new();
    let mut both = Vec::new();
    for (i, (claim, path)) in parse_dict(&key.disk_volumes)
        .map_err(|e| bad(&key.disk_volumes, &e.to_string()))?
        .into_iter()
        .enumerate()
    {
        let (path, ro, h2c) = mount_flags(&path);
        let entry = format!("{claim}:{path}");
        let Some(at) = mount_point(path).filter(|_| !claim.is_empty()) else {
            return Err(bad(
                &entry,
                "must be PVC_NAME:/absolute/mount/path (no `..` in the path)",
            ));
        };
        // Any OSPool user sets RequestDiskVolumes: only PVCs the site allows are mounted.
        if !pods.job_volume_allow.contains(&claim) {
            return Err(bad(&entry, "is not in [kubernetes] job_volume_allow"));
        }
        if let Some((_, other)) = own.iter().find(|(p, _)| *p == at) {
            return Err(bad(
                &entry,
                &format!(
                    "mounts at {at}, where the job's `{other}` is mounted too: give each volume a path of its own"
                ),
            ));
        }
        if let Some((p, what)) = site.iter().find(|(p, _)| mounts_overlap(p, &at)) {
            let place = if *p == at {
                format!("at {at}, where {what} is mounted")
            } else if p.starts_with(&at) {
                format!("at {at}, over {what} at {p}")
            } else {
                format!("at {at}, inside {what} at {p}")
            };
            return Err(bad(
                &entry,
                &format!("mounts {place}: choose a path apart from it"),
            ));
        }
        own.push((at, entry.clone()));
        both.push(pvc_mount(format!("job-pvc-{i}"), &claim, path, ro, h2c));
    }
    Ok(both)
}

/// One file of a site ConfigMap, mounted at its path (the key is the path's file name).
fn config_map_file(name: String, v: &ConfigVolume) -> (Volume, VolumeMount) {
    let file = v.path.rsplit('/').next().unwrap_or(&v.path).to_string();
    let volume = Volume {
        name: name.clone(),
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
    };
    let mount = VolumeMount {
        name,
        mount_path: v.path.clone(),
        sub_path: Some(file),
        ..VolumeMount::default()
    };
    (volume, mount)
}

/// The pool token: the site's secret, read-only at the path the worker image reads.
fn token_secret(pods: &PodTemplate) -> (Volume, VolumeMount) {
    let volume = Volume {
        name: "token".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(pods.token_secret.clone()),
            items: Some(vec![KeyToPath {
                key: pods.token_key.clone(),
                path: pods.token_key.clone(),
                ..KeyToPath::default()
            }]),
            // 0400 on the volume (the provisioner put it on the item as an ignored field).
            default_mode: Some(0o400),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    let mount = VolumeMount {
        name: "token".into(),
        mount_path: TOKEN_PATH.into(),
        sub_path: Some(pods.token_key.clone()),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    (volume, mount)
}

/// Scheduling: an affinity block only when something is required (an empty
/// NodeSelectorTerm matches no node at all).
fn node_affinity(key: &ShapeKey, pods: &PodTemplate) -> Result<Option<Affinity>, JobError> {
    let gpu_types = job_gpu_types(key, pods)?;
    let mut expressions: Vec<NodeSelectorRequirement> = pods
        .node_affinity
        .iter()
        .filter(|r| gpu_types.is_none() || r.key != GPU_PRODUCT_LABEL)
        .map(|r| NodeSelectorRequirement {
            key: r.key.clone(),
            operator: r.operator.as_str().into(),
            values: Some(r.values.clone()),
        })
        .collect();
    if let Some(types) = gpu_types {
        expressions.push(NodeSelectorRequirement {
            key: GPU_PRODUCT_LABEL.into(),
            operator: "In".into(),
            values: Some(types),
        });
    }
    Ok((!expressions.is_empty()).then(|| Affinity {
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
    }))
}

/// A job's GPU types, intersected with the site's own rules on the GPU product label; they
/// replace those rules: AND-ing `In(job types)` with the site's `In(...)` on the same key
/// made pods no node could take (Pending for ever) whenever the two sets were disjoint.
/// `None` when the job names no GPU type.
fn job_gpu_types(key: &ShapeKey, pods: &PodTemplate) -> Result<Option<Vec<String>>, JobError> {
    let gpu_types = key.gpu_type_list();
    if gpu_types.is_empty() {
        return Ok(None);
    }
    let allowed = site_gpu_types(&gpu_types, &pods.node_affinity);
    if allowed.is_empty() {
        return Err(bad_field(
            key,
            "RequestGPUTypes",
            &key.gpu_types,
            &format!(
                "has no GPU type the site's {GPU_PRODUCT_LABEL} rule allows (node_affinity): no node could take the pod"
            ),
        ));
    }
    Ok(Some(allowed))
}

fn tolerations(pods: &PodTemplate) -> Option<Vec<Toleration>> {
    (!pods.tolerations.is_empty()).then(|| {
        pods.tolerations
            .iter()
            .map(|t| Toleration {
                key: Some(t.clone()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Toleration::default()
            })
            .collect()
    })
}

/// The GPU or CPU priority class by the shape, else the general one.
fn priority_class(key: &ShapeKey, pods: &PodTemplate) -> Option<String> {
    if key.gpus > 0 {
        pods.priority_class_gpu.clone()
    } else {
        pods.priority_class_cpu.clone()
    }
    .or_else(|| pods.priority_class.clone())
}

#[cfg(test)]
pub(crate) mod tests;
