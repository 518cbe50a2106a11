//! The `[kubernetes]` table of pilotd.toml, every key of the NRP provisioner, typed.

pub(crate) mod names;

use crate::config::names::{
    PILOTD_ENV, PILOTD_RESOURCES, TOKEN_PATH, is_config_map_key, is_dns_subdomain, is_env_name,
    is_quantity, is_resource_name, mount_point, reserved_annotation, reserved_label,
};
pub use crate::config::names::{is_dns_label, is_label_key, is_label_value};
use pilotd_core::config::units::HumanDuration;
use pilotd_core::config::{Diagnostics, SiteConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// Where the Kubernetes client finds the API server. Explicit because `kube::Config::infer`
/// prefers a kubeconfig over the in-cluster account, which silently picks up an operator's
/// `~/.kube/config` on the wrong cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ClientSource {
    /// The pod's service account (`KUBERNETES_SERVICE_HOST` + the mounted token).
    #[default]
    InCluster,
    /// A kubeconfig file (`kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`).
    Kubeconfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum PullPolicy {
    #[default]
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum AffinityOperator {
    In,
    NotIn,
}

impl AffinityOperator {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AffinityOperator::In => "In",
            AffinityOperator::NotIn => "NotIn",
        }
    }
}

/// One required node-affinity expression (the INI's `node_affinity_dict` entry; `^key` there
/// is `operator = "NotIn"` here, `a|b` is `values = ["a", "b"]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AffinityRule {
    pub key: String,
    pub operator: AffinityOperator,
    pub values: Vec<String>,
}

/// A PersistentVolumeClaim mounted into every worker (`pvc_volumes_dict`; `!` prefix =
/// `read_only`, `#` prefix = `host_to_container` mount propagation).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PvcVolume {
    pub claim: String,
    pub path: String,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub host_to_container: bool,
}

/// One file of a ConfigMap mounted with `subPath` (`config_volumes_dict`): the item key is
/// the file's basename, as the provisioner did.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigVolume {
    pub config_map: String,
    pub path: String,
}

/// pilotd.toml as this mode reads it: its own table, the rest left to the core.
#[derive(Deserialize)]
struct SiteTable {
    kubernetes: Option<KubernetesConfig>,
}

/// The `[kubernetes]` table's check, handed to the core's loader
/// (`pilotd_core::config::ModeTables`): read from the file's own text, so each problem keeps
/// its FILE:LINE:COL among the core's.
pub fn check_table(_site: &SiteConfig, src: &str, d: &mut Diagnostics) {
    match toml::from_str::<SiteTable>(src) {
        Ok(SiteTable {
            kubernetes: Some(k),
        }) => k.validate(d),
        Ok(SiteTable { kubernetes: None }) => {}
        Err(e) => d.toml_error(&e, "see the commented examples/pilotd.toml for every key"),
    }
}

/// The `[kubernetes]` table of pilotd.toml: every setting of the NRP provisioner
/// (`osg_provisioner.conf` + `pod.conf`), with the provisioner's defaults, as typed leaves so
/// that serde reports a wrong value at its line and column. Settings the provisioner did not
/// have (client source, back-off, cleanup, condor tool paths) are pilotd's fixes of its
/// defects and carry conservative defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Namespace of the Jobs and pods, and of the `RequestK8SNamespace` match.
    pub namespace: Spanned<String>,
    #[serde(default = "spanned_default")]
    pub client: Spanned<ClientSource>,
    pub kubeconfig: Option<Spanned<PathBuf>>,
    pub context: Option<Spanned<String>>,
    #[serde(default = "default_condor_host")]
    pub condor_host: String,
    #[serde(default = "default_app_name")]
    pub app_name: Spanned<String>,
    #[serde(default = "default_k8s_domain")]
    pub k8s_domain: String,
    #[serde(default = "default_image")]
    pub image: Spanned<String>,
    #[serde(default)]
    pub image_pull_policy: PullPolicy,
    pub priority_class: Option<String>,
    pub priority_class_cpu: Option<String>,
    pub priority_class_gpu: Option<String>,
    pub service_account_name: Option<String>,
    /// Taint keys tolerated with `operator: Exists, effect: NoSchedule`.
    #[serde(default = "spanned_default")]
    pub tolerations: Spanned<Vec<String>>,
    #[serde(default = "spanned_default")]
    pub node_selectors: Spanned<BTreeMap<String, String>>,
    #[serde(default = "spanned_default")]
    pub node_affinity: Spanned<Vec<AffinityRule>>,
    #[serde(default = "spanned_default")]
    pub labels: Spanned<BTreeMap<String, String>>,
    #[serde(default = "spanned_default")]
    pub annotations: Spanned<BTreeMap<String, String>>,
    #[serde(default = "spanned_default")]
    pub env: Spanned<BTreeMap<String, String>>,
    #[serde(default = "spanned_default")]
    pub pvc_volumes: Spanned<Vec<PvcVolume>>,
    #[serde(default = "spanned_default")]
    pub config_volumes: Spanned<Vec<ConfigVolume>>,
    /// Extra resources, request = limit (`resources_dict`).
    #[serde(default = "spanned_default")]
    pub resources: Spanned<BTreeMap<String, String>>,
    /// Label keys, or prefixes ending in '/', that a job's `RequestLabels` may put on its
    /// worker pod. Empty (the default): a job that asks for labels gets no pods, and the plan
    /// says why. Reserved keys are never allowed.
    #[serde(default = "spanned_default")]
    pub job_label_allow: Spanned<Vec<String>>,
    /// PersistentVolumeClaims a job's `RequestDiskVolumes` may mount. Empty (the default):
    /// a job that asks for volumes gets no pods, and the plan says why.
    #[serde(default = "spanned_default")]
    pub job_volume_allow: Spanned<Vec<String>>,
    /// `ttlSecondsAfterFinished` of every Job (`k8s_job_ttl`).
    #[serde(default = "secs::<{ defaults::JOB_TTL_SECS }>")]
    pub job_ttl: HumanDuration,
    #[serde(default = "flag::<{ defaults::FORCE_NAMESPACE_MATCHING }>")]
    pub force_namespace_matching: bool,
    /// Extra requirements of the idle-job query (the INI's [htcondor] value).
    #[serde(default)]
    pub additional_requirements: String,
    /// The workers' `ADDITIONAL_REQUIREMENTS` (their START; the INI's [k8s] value), when it
    /// differs from `additional_requirements`; absent, the workers get that one.
    pub worker_additional_requirements: Option<String>,
    #[serde(default = "flag::<{ defaults::REQUEST_FUSE }>")]
    pub request_fuse: bool,
    /// Minimum ephemeral storage of a worker in MiB (`storage_mbs`); 0 disables it. It raises
    /// the pod's storage only, never the `DISK` the worker advertises.
    #[serde(default = "num::<{ defaults::MIN_EPHEMERAL_STORAGE_MIB }>")]
    pub min_ephemeral_storage_mib: u64,
    /// Over-commit: request 75 % CPU / 80 % memory, limit CPUs+0.25 / memory+1000 Mi.
    #[serde(default = "flag::<{ defaults::USE_LARGE_LIMIT }>")]
    pub use_large_limit: bool,
    /// Schedd `Name` must match this regex entirely.
    #[serde(default = "default_match_all")]
    pub schedd_whitelist: Spanned<String>,
    /// Schedd `AuthenticatedIdentity` must match this regex entirely.
    #[serde(default = "default_match_all")]
    pub schedd_identity_whitelist: Spanned<String>,
    #[serde(default = "spanned_u64::<{ defaults::MAX_PODS_PER_CLUSTER }>")]
    pub max_pods_per_cluster: Spanned<u64>,
    #[serde(default = "spanned_u64::<{ defaults::MAX_SUBMIT_PODS_PER_CLUSTER }>")]
    pub max_submit_pods_per_cluster: Spanned<u64>,
    /// Time between reconcile cycles (`sleep_time`).
    #[serde(default = "spanned_secs::<{ defaults::CYCLE_SECS }>")]
    pub cycle: Spanned<HumanDuration>,
    #[serde(default = "default_token_secret")]
    pub token_secret: String,
    #[serde(default = "default_token_key")]
    pub token_key: String,
    #[serde(default = "default_condor_status")]
    pub condor_status: PathBuf,
    #[serde(default = "default_condor_q")]
    pub condor_q: PathBuf,
    /// Collector to query (`-pool`); the tools' own configuration when absent.
    pub pool: Option<String>,
    /// Let the condor tools query daemons that offer no authentication, encryption or
    /// integrity (`SEC_CLIENT_* = OPTIONAL`), as some pools need; off by default.
    #[serde(default)]
    pub insecure_query: bool,
    /// condor_q processes at once, one per whitelisted schedd.
    #[serde(default = "spanned_u32::<4>")]
    pub max_parallel_queries: Spanned<u32>,
    /// Job creates per cycle across all shapes (taken in sorted key order); what is left
    /// waits for the next cycle. Bounds the burst a cycle puts on the API server and the
    /// scheduler however many shapes appear at once.
    #[serde(default = "spanned_u64::<200>")]
    pub max_creates_per_cycle: Spanned<u64>,
    /// Longest a condor tool may run before the query counts as failed.
    #[serde(default = "secs::<60>")]
    pub condor_timeout: HumanDuration,
    /// A pod in an odd phase counts as waiting this long after its start, then as unknown
    /// (the provisioner's `max_wait_onerror`).
    #[serde(default = "secs::<1000>")]
    pub unknown_after: HumanDuration,
    /// A worker pod still Pending this long after its creation (or a Job whose pod never
    /// appeared) is stuck: its Job is deleted and it counts as a failure for the back-off.
    /// Unschedulable pods (no node has the GPU, a quota refuses the pod) would otherwise wait
    /// for ever.
    #[serde(default = "spanned_secs::<3600>")]
    pub pending_timeout: Spanned<HumanDuration>,
    /// Consecutive failed or unclaimed exits of a shape's pods before it goes on trial.
    #[serde(default = "spanned_u32::<2>")]
    pub backoff_after: Spanned<u32>,
    #[serde(default = "secs::<300>")]
    pub backoff_initial: HumanDuration,
    #[serde(default = "secs::<3600>")]
    pub backoff_max: HumanDuration,
    /// Finished Jobs are deleted by pilotd this long after they finished (kept meanwhile so
    /// `status` can show failures), in addition to `job_ttl`.
    #[serde(default = "secs::<600>")]
    pub cleanup_after: HumanDuration,
    #[serde(default = "num::<100>")]
    pub cleanup_max_per_cycle: u64,
    /// Page size (`limit`) of pod and Job lists.
    #[serde(default = "spanned_u32::<500>")]
    pub list_page_size: Spanned<u32>,
    /// Where the run loop keeps the back-off state between restarts (default:
    /// `<state_dir>/kubernetes-backoff.json`).
    pub state_file: Option<PathBuf>,
}

/// The `[kubernetes]` defaults that are the NRP provisioner's own: serde fills them in for a
/// key pilotd.toml leaves out, and `import-ini` writes them for a key the INI leaves out, so
/// the two cannot drift apart (`kubernetes::ini`'s tests convert an INI without them and
/// compare).
pub(crate) mod defaults {
    pub(crate) const CONDOR_HOST: &str = "prp-cm-htcondor.htcondor-portal.svc.cluster.local";
    pub(crate) const K8S_DOMAIN: &str = "optiputer.net";
    pub(crate) const IMAGE: &str = "sfiligoi/prp-portal-wn";
    /// `ttlSecondsAfterFinished` (`k8s_job_ttl`).
    pub(crate) const JOB_TTL_SECS: u64 = 86400;
    pub(crate) const FORCE_NAMESPACE_MATCHING: bool = true;
    pub(crate) const REQUEST_FUSE: bool = true;
    /// `storage_mbs`.
    pub(crate) const MIN_EPHEMERAL_STORAGE_MIB: u64 = 20000;
    pub(crate) const USE_LARGE_LIMIT: bool = true;
    /// `schedd_whitelist` and `schedd_identity_whitelist`: every schedd.
    pub(crate) const MATCH_ALL: &str = ".*";
    pub(crate) const MAX_PODS_PER_CLUSTER: u64 = 20;
    pub(crate) const MAX_SUBMIT_PODS_PER_CLUSTER: u64 = 1000;
    /// `sleep_time`.
    pub(crate) const CYCLE_SECS: u64 = 120;
    pub(crate) const TOKEN_SECRET: &str = "prp-htcondor-wn-secret";
    pub(crate) const TOKEN_KEY: &str = "prp-wn.token";
    pub(crate) const CONDOR_STATUS: &str = "condor_status";
    pub(crate) const CONDOR_Q: &str = "condor_q";
}

fn spanned_default<T: Default>() -> Spanned<T> {
    Spanned::new(0..0, T::default())
}
fn spanned_u64<const N: u64>() -> Spanned<u64> {
    Spanned::new(0..0, N)
}
fn spanned_u32<const N: u32>() -> Spanned<u32> {
    Spanned::new(0..0, N)
}
fn num<const N: u64>() -> u64 {
    N
}
fn flag<const B: bool>() -> bool {
    B
}
fn secs<const N: u64>() -> HumanDuration {
    HumanDuration(Duration::from_secs(N))
}
fn spanned_secs<const N: u64>() -> Spanned<HumanDuration> {
    Spanned::new(0..0, secs::<N>())
}
fn default_condor_host() -> String {
    defaults::CONDOR_HOST.into()
}
fn default_app_name() -> Spanned<String> {
    Spanned::new(0..0, "prp-wn".into())
}
fn default_k8s_domain() -> String {
    defaults::K8S_DOMAIN.into()
}
fn default_image() -> Spanned<String> {
    Spanned::new(0..0, defaults::IMAGE.into())
}
fn default_match_all() -> Spanned<String> {
    Spanned::new(0..0, defaults::MATCH_ALL.into())
}
fn default_token_secret() -> String {
    defaults::TOKEN_SECRET.into()
}
fn default_token_key() -> String {
    defaults::TOKEN_KEY.into()
}
fn default_condor_status() -> PathBuf {
    defaults::CONDOR_STATUS.into()
}
fn default_condor_q() -> PathBuf {
    defaults::CONDOR_Q.into()
}

/// The longest app name that keeps Job names (`<app>-<hex time>-<6 hex>`) within the 63
/// characters of the `job-name` label the Job controller puts on pods.
pub(crate) const MAX_APP_NAME: usize = 40;

/// Compiles a whitelist the way Python's `re.fullmatch` applies it: the whole name must match.
pub(crate) fn full_match_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

impl KubernetesConfig {
    /// The table of a loaded pilotd.toml, whose values [`check_table`] checked when the file
    /// was read; here its keys and types are read again (a wrong one is refused whole).
    pub fn of_table(table: &toml::Table) -> Result<KubernetesConfig, toml::de::Error> {
        // Through text: the typed leaves carry spans, which only a text can give.
        toml::from_str(&table.to_string())
    }

    /// Parses a `[kubernetes]` table on its own (tests and tools that have no full file).
    pub fn from_table_text(src: &str) -> Result<KubernetesConfig, toml::de::Error> {
        toml::from_str(src)
    }

    pub(crate) fn cycle(&self) -> Duration {
        self.cycle.get_ref().0
    }

    /// What the API server would refuse in every Job body, and names pilotd reserves: each
    /// problem at its table's position, with what to write instead.
    fn validate_names(&self, d: &mut Diagnostics) {
        const LABEL_HINT: &str = "keys are [dns.prefix/]name (name: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends); values the same or empty";
        for (k, v) in self.labels.get_ref() {
            if !is_label_key(k) || !is_label_value(v) {
                d.error(
                    self.labels.span(),
                    format!("[kubernetes] labels: `{k}` = `{v}` is not a valid Kubernetes label"),
                    LABEL_HINT,
                );
            } else if let Some(why) = reserved_label(k) {
                d.error(
                    self.labels.span(),
                    format!("[kubernetes] labels: `{k}` is reserved: {why}"),
                    "choose another key",
                );
            }
        }
        for k in self.annotations.get_ref().keys() {
            if !is_label_key(k) {
                d.error(
                    self.annotations.span(),
                    format!("[kubernetes] annotations: `{k}` is not a valid annotation key"),
                    "keys are [dns.prefix/]name, as label keys",
                );
            } else if let Some(why) = reserved_annotation(k) {
                d.error(
                    self.annotations.span(),
                    format!("[kubernetes] annotations: `{k}` is reserved: {why}"),
                    "choose another key",
                );
            }
        }
        for k in self.env.get_ref().keys() {
            if !is_env_name(k) {
                d.error(
                    self.env.span(),
                    format!("[kubernetes] env: `{k}` is not a valid environment variable name"),
                    "letters, digits, '_', '-' and '.', not starting with a digit, e.g. GLIDEIN_Site",
                );
            } else if PILOTD_ENV.contains(&k.as_str()) {
                d.error(
                    self.env.span(),
                    format!("[kubernetes] env: `{k}` is set by pilotd on every worker"),
                    "set it through its own setting (condor_host, k8s_domain, additional_requirements, ...) or remove it",
                );
            }
        }
        for (k, v) in self.resources.get_ref() {
            if !is_resource_name(k) {
                d.error(
                    self.resources.span(),
                    format!("[kubernetes] resources: `{k}` is not a resource name the API server accepts"),
                    "extended resources are qualified with their domain, e.g. \"smarter-devices/fuse\"",
                );
            } else if PILOTD_RESOURCES.contains(&k.as_str()) {
                d.error(
                    self.resources.span(),
                    format!("[kubernetes] resources: `{k}` is set by pilotd from each job's shape"),
                    "remove it (min_ephemeral_storage_mib and use_large_limit tune what pilotd sets)",
                );
            }
            if !is_quantity(v) {
                d.error(
                    self.resources.span(),
                    format!("[kubernetes] resources: `{k}` = `{v}` is not a Kubernetes quantity"),
                    "a number with an optional suffix, e.g. \"1\", \"500m\", \"4Gi\"",
                );
            }
        }
        for (k, v) in self.node_selectors.get_ref() {
            if !is_label_key(k) || !is_label_value(v) {
                d.error(
                    self.node_selectors.span(),
                    format!("[kubernetes] node_selectors: `{k}` = `{v}` is not a valid node label"),
                    LABEL_HINT,
                );
            }
        }
        for r in self.node_affinity.get_ref() {
            if !is_label_key(&r.key) || r.values.is_empty() {
                d.error(
                    self.node_affinity.span(),
                    format!("[kubernetes] node_affinity: key `{}` with {} value(s) is not a valid requirement", r.key, r.values.len()),
                    "a node label key and at least one value, e.g. key = \"nautilus.io/low-power\", operator = \"NotIn\", values = [\"true\"]",
                );
            }
        }
        for t in self.tolerations.get_ref() {
            if !is_label_key(t) {
                d.error(
                    self.tolerations.span(),
                    format!("[kubernetes] tolerations: `{t}` is not a valid taint key"),
                    LABEL_HINT,
                );
            }
        }
        for v in self.pvc_volumes.get_ref() {
            if !is_dns_subdomain(&v.claim) || mount_point(&v.path).is_none() {
                d.error(
                    self.pvc_volumes.span(),
                    format!("[kubernetes] pvc_volumes: claim `{}` at `{}` is not a PVC name and an absolute path", v.claim, v.path),
                    "claim = \"cvmfs\", path = \"/cvmfs\" (no `..` in the path)",
                );
            }
        }
        for v in self.config_volumes.get_ref() {
            // The file's name is also its key in the ConfigMap (the provisioner's scheme).
            let file = v.path.rsplit('/').next().unwrap_or_default();
            if !is_dns_subdomain(&v.config_map)
                || mount_point(&v.path).is_none()
                || !is_config_map_key(file)
            {
                d.error(
                    self.config_volumes.span(),
                    format!("[kubernetes] config_volumes: ConfigMap `{}` at `{}` is not a ConfigMap name and an absolute path to a file", v.config_map, v.path),
                    "config_map = \"my-config\", path = \"/etc/condor/config.d/99-site.conf\" (the file's name, here 99-site.conf, is its key in the ConfigMap: letters, digits, '-', '_', '.')",
                );
            }
        }
        self.validate_mount_points(d);
        if !is_config_map_key(&self.token_key) {
            d.error(
                self.namespace.span(),
                format!(
                    "[kubernetes] token_key `{}` is not a valid Secret key",
                    self.token_key
                ),
                "letters, digits, '-', '_' and '.', e.g. \"prp-wn.token\"",
            );
        }
        for k in self.job_label_allow.get_ref() {
            let key = k.strip_suffix('/').unwrap_or(k);
            let valid = if k.ends_with('/') {
                is_dns_subdomain(key)
            } else {
                is_label_key(key)
            };
            if !valid {
                d.error(
                    self.job_label_allow.span(),
                    format!("[kubernetes] job_label_allow: `{k}` is neither a label key nor a prefix ending in '/'"),
                    "e.g. job_label_allow = [\"team\", \"example.org/\"]",
                );
            } else if let Some(why) = reserved_label(&if k.ends_with('/') {
                // A prefix allows every key under it; one reserved key is enough to refuse.
                format!("{k}x")
            } else {
                k.clone()
            }) {
                d.error(
                    self.job_label_allow.span(),
                    format!("[kubernetes] job_label_allow: `{k}` allows a reserved key: {why}"),
                    "allow only your own keys; reserved keys are never taken from a job",
                );
            }
        }
        for c in self.job_volume_allow.get_ref() {
            if !is_dns_subdomain(c) {
                d.error(
                    self.job_volume_allow.span(),
                    format!("[kubernetes] job_volume_allow: `{c}` is not a PVC name"),
                    "lowercase letters, digits, '-' and '.', e.g. \"shared-data\"",
                );
            }
        }
        for (field, name) in [
            ("priority_class", &self.priority_class),
            ("priority_class_cpu", &self.priority_class_cpu),
            ("priority_class_gpu", &self.priority_class_gpu),
            ("service_account_name", &self.service_account_name),
        ] {
            if let Some(n) = name.as_ref().filter(|n| !is_dns_subdomain(n)) {
                d.error(
                    self.namespace.span(),
                    format!("[kubernetes] {field} `{n}` is not a valid Kubernetes object name"),
                    "lowercase letters, digits, '-' and '.'",
                );
            }
        }
        if !is_dns_subdomain(&self.token_secret) {
            d.error(
                self.namespace.span(),
                format!(
                    "[kubernetes] token_secret `{}` is not a valid Secret name",
                    self.token_secret
                ),
                "e.g. \"prp-htcondor-wn-secret\"",
            );
        }
    }

    /// Every worker mounts the site's PVCs, its ConfigMap files and the pool token: no two at
    /// one place (the API server refuses every such Job, "must be unique"; `/data` and
    /// `/data/` are one place to the runtime too).
    fn validate_mount_points(&self, d: &mut Diagnostics) {
        let mut taken: Vec<(String, String)> =
            vec![(TOKEN_PATH.to_string(), "the pool token".to_string())];
        let pvcs = self.pvc_volumes.get_ref().iter().map(|v| {
            (
                "pvc_volumes",
                self.pvc_volumes.span(),
                &v.path,
                format!("PVC `{}`", v.claim),
            )
        });
        let files = self.config_volumes.get_ref().iter().map(|v| {
            (
                "config_volumes",
                self.config_volumes.span(),
                &v.path,
                format!("ConfigMap `{}`", v.config_map),
            )
        });
        for (field, span, path, what) in pvcs.chain(files) {
            let Some(at) = mount_point(path) else {
                continue;
            };
            match taken.iter().find(|(p, _)| *p == at) {
                Some((_, other)) => d.error(
                    span,
                    format!("[kubernetes] {field}: {what} is mounted at `{path}`, where {other} is mounted too"),
                    "give each volume a path of its own (the API server refuses a Job with two mounts at one path)",
                ),
                None => taken.push((at, what)),
            }
        }
    }

    /// Semantic checks serde cannot make; each error points at the offending value.
    pub(crate) fn validate(&self, d: &mut Diagnostics) {
        let ns = self.namespace.get_ref();
        if !is_dns_label(ns) {
            d.error(
                self.namespace.span(),
                format!("[kubernetes] namespace `{ns}` is not a valid Kubernetes namespace"),
                "use lowercase letters, digits and '-', at most 63 characters, e.g. \"osg-opportunistic\"",
            );
        }
        let app = self.app_name.get_ref();
        if !is_dns_label(app) || app.len() > MAX_APP_NAME {
            d.error(
                self.app_name.span(),
                format!("[kubernetes] app_name `{app}` cannot prefix Job names"),
                format!(
                    "use lowercase letters, digits and '-', at most {MAX_APP_NAME} characters, e.g. \"osg-direct\""
                ),
            );
        }
        if self.image.get_ref().trim().is_empty() {
            d.error(
                self.image.span(),
                "[kubernetes] image is empty",
                "name the worker image, e.g. \"hub.opensciencegrid.org/osg-htc/nrp-ospool-ep:25-release\"",
            );
        }
        for (field, pattern) in [
            ("schedd_whitelist", &self.schedd_whitelist),
            ("schedd_identity_whitelist", &self.schedd_identity_whitelist),
        ] {
            if let Err(e) = full_match_regex(pattern.get_ref()) {
                d.error(
                    pattern.span(),
                    format!("[kubernetes] {field} is not a valid regular expression: {e}"),
                    "write a Rust/Python-style regex that matches the whole name, e.g. \"ap.*\\\\.osg-htc\\\\.org\"",
                );
            }
        }
        if *self.max_pods_per_cluster.get_ref() == 0 {
            d.error(
                self.max_pods_per_cluster.span(),
                "[kubernetes] max_pods_per_cluster is 0, so no worker would ever start",
                "the provisioner's default is 20",
            );
        }
        if *self.max_submit_pods_per_cluster.get_ref() == 0 {
            d.error(
                self.max_submit_pods_per_cluster.span(),
                "[kubernetes] max_submit_pods_per_cluster is 0, so no worker would ever start",
                "the provisioner's default is 1000",
            );
        }
        if self.cycle() < Duration::from_secs(1) {
            d.error(
                self.cycle.span(),
                "[kubernetes] cycle must be at least 1s",
                "the provisioner's default is \"120s\"",
            );
        }
        if self.pending_timeout.get_ref().0 < Duration::from_secs(60) {
            d.error(
                self.pending_timeout.span(),
                "[kubernetes] pending_timeout must be at least 60s",
                "a pod needs time to be scheduled and pull its image; e.g. pending_timeout = \"1h\"",
            );
        }
        if *self.backoff_after.get_ref() == 0 {
            d.error(
                self.backoff_after.span(),
                "[kubernetes] backoff_after must be at least 1",
                "e.g. backoff_after = 2: two failed pods in a row put the shape on trial",
            );
        }
        if *self.max_parallel_queries.get_ref() == 0 {
            d.error(
                self.max_parallel_queries.span(),
                "[kubernetes] max_parallel_queries is 0, so no schedd would ever be queried",
                "e.g. max_parallel_queries = 4",
            );
        }
        if *self.max_creates_per_cycle.get_ref() == 0 {
            d.error(
                self.max_creates_per_cycle.span(),
                "[kubernetes] max_creates_per_cycle is 0, so no worker would ever start",
                "e.g. max_creates_per_cycle = 200",
            );
        }
        if *self.list_page_size.get_ref() == 0 {
            d.error(
                self.list_page_size.span(),
                "[kubernetes] list_page_size must be at least 1",
                "e.g. list_page_size = 500",
            );
        }
        self.validate_names(d);
        match (self.client.get_ref(), &self.kubeconfig, &self.context) {
            (ClientSource::InCluster, Some(path), _) => d.error(
                path.span(),
                "[kubernetes] kubeconfig is set but client = \"in-cluster\" ignores it",
                "set client = \"kubeconfig\", or remove kubeconfig",
            ),
            (ClientSource::InCluster, None, Some(ctx)) => d.error(
                ctx.span(),
                "[kubernetes] context is set but client = \"in-cluster\" ignores it",
                "set client = \"kubeconfig\", or remove context",
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn diags(src: &str) -> Vec<String> {
        let cfg = KubernetesConfig::from_table_text(src).expect("parses");
        let mut d = Diagnostics::new(Path::new("pilotd.toml"), src);
        cfg.validate(&mut d);
        d.into_vec().into_iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn defaults_are_the_provisioners() {
        let c = KubernetesConfig::from_table_text("namespace = \"osg\"\n").unwrap();
        assert_eq!(c.app_name.get_ref(), "prp-wn");
        assert_eq!(c.k8s_domain, "optiputer.net");
        assert_eq!(c.image.get_ref(), "sfiligoi/prp-portal-wn");
        assert_eq!(c.image_pull_policy, PullPolicy::Always);
        assert_eq!(*c.max_pods_per_cluster.get_ref(), 20);
        assert_eq!(*c.max_submit_pods_per_cluster.get_ref(), 1000);
        assert_eq!(c.cycle(), Duration::from_secs(120));
        assert_eq!(c.job_ttl.0, Duration::from_secs(86400));
        assert_eq!(c.min_ephemeral_storage_mib, 20000);
        assert!(c.force_namespace_matching && c.request_fuse && c.use_large_limit);
        assert_eq!(*c.client.get_ref(), ClientSource::InCluster);
        assert!(diags("namespace = \"osg\"\n").is_empty());
    }

    #[test]
    fn unknown_key_and_bad_type_are_reported_at_their_line() {
        let e =
            KubernetesConfig::from_table_text("namespace = \"osg\"\nmax_pods = 3\n").unwrap_err();
        assert!(e.message().contains("unknown field `max_pods`"), "{e}");
        assert_eq!(e.span().unwrap().start, 18);
        let e = KubernetesConfig::from_table_text("namespace = \"osg\"\ncycle = \"soon\"\n")
            .unwrap_err();
        assert!(e.message().contains("not a duration"), "{e}");
    }

    #[test]
    fn semantic_errors_point_at_the_value() {
        let out = diags("namespace = \"OSG_bad\"\nschedd_whitelist = \"(ap\"\n");
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(
            out[0].starts_with("pilotd.toml:1:13: [kubernetes] namespace"),
            "{out:?}"
        );
        assert!(
            out[1].starts_with("pilotd.toml:2:20: [kubernetes] schedd_whitelist"),
            "{out:?}"
        );
        let out = diags("namespace = \"osg\"\nkubeconfig = \"/k\"\n");
        assert!(out[0].contains("client = \\\"in-cluster\\\"") || out[0].contains("in-cluster"));
    }

    #[test]
    fn check_refuses_what_the_api_server_would_and_reserved_names() {
        let src = "namespace = \"osg\"\n\
                   job_label_allow = [\"team\", \"example.org/\", \"k8s-app\", \"batch.kubernetes.io/\"]\n\
                   job_volume_allow = [\"data\", \"Bad_Name\"]\n\
                   [labels]\nPodLabels = \"x\"\nteam = \"a b\"\n\
                   [annotations]\nPodGPUTypes = \"A100\"\n\"container.apparmor.security.beta.kubernetes.io/htcondor\" = \"unconfined\"\n\
                   [env]\n\"MY VAR\" = \"1\"\nNUM_CPUS = \"4\"\nGLIDEIN_Site = \"x\"\n\
                   [resources]\n\"smarter-devices/fuse\" = \"one gig\"\nmemory = \"1Gi\"\ngpu = \"1\"\n\
                   [node_selectors]\n\"bad key\" = \"x\"\n";
        let out = diags(src).join("\n");
        for expected in [
            "pilotd.toml:4:1: [kubernetes] labels: `PodLabels` is reserved",
            "labels: `team` = `a b` is not a valid Kubernetes label",
            "pilotd.toml:7:1: [kubernetes] annotations: `PodGPUTypes` is reserved",
            "env: `MY VAR` is not a valid environment variable name",
            "env: `NUM_CPUS` is set by pilotd",
            "resources: `smarter-devices/fuse` = `one gig` is not a Kubernetes quantity",
            "resources: `memory` is set by pilotd",
            "resources: `gpu` is not a resource name",
            "node_selectors: `bad key` = `x` is not a valid node label",
            "job_label_allow: `k8s-app` allows a reserved key",
            "job_label_allow: `batch.kubernetes.io/` allows a reserved key",
            "job_volume_allow: `Bad_Name` is not a PVC name",
        ] {
            assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
        }
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with("pilotd.toml:"))
                .count(),
            12,
            "{out}"
        );
        assert!(
            !out.contains("apparmor") && !out.contains("`GLIDEIN_Site`"),
            "{out}"
        );
        assert!(!out.contains("`team` allows") && !out.contains("example.org/` allows"));
    }

    #[test]
    fn two_site_volumes_at_one_place_and_unusable_paths_are_refused() {
        let src = "namespace = \"osg\"\ntoken_key = \"a/b\"\n\
                   pvc_volumes = [{ claim = \"cvmfs\", path = \"/cvmfs\" }, { claim = \"data\", path = \"/cvmfs/\" },\
                   { claim = \"tok\", path = \"/etc/condor/tokens.d/prp-wn.token\" }, { claim = \"up\", path = \"/x/../etc\" }]\n\
                   config_volumes = [{ config_map = \"site\", path = \"/cvmfs\" }, { config_map = \"dir\", path = \"/etc/condor/config.d/\" },\
                   { config_map = \"ok\", path = \"/etc/condor/config.d/99-site.conf\" }]\n";
        let out = diags(src).join("\n");
        for expected in [
            "pvc_volumes: PVC `data` is mounted at `/cvmfs/`, where PVC `cvmfs` is mounted too",
            "pvc_volumes: PVC `tok` is mounted at `/etc/condor/tokens.d/prp-wn.token`, where the pool token is mounted too",
            "pvc_volumes: claim `up` at `/x/../etc` is not a PVC name and an absolute path",
            "config_volumes: ConfigMap `site` is mounted at `/cvmfs`, where PVC `cvmfs` is mounted too",
            "config_volumes: ConfigMap `dir` at `/etc/condor/config.d/` is not a ConfigMap name and an absolute path to a file",
            "token_key `a/b` is not a valid Secret key",
        ] {
            assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
        }
        assert!(!out.contains("`ok`"), "{out}");
        assert_eq!(out.matches("pilotd.toml:").count(), 6, "{out}");
    }

    #[test]
    fn whitelist_is_a_full_match() {
        let r = full_match_regex("ap.*\\.osg-htc\\.org").unwrap();
        assert!(r.is_match("ap20.uc.osg-htc.org"));
        assert!(!r.is_match("evil-ap20.uc.osg-htc.org.example.com"));
        let r = full_match_regex("a|b").unwrap();
        assert!(
            !r.is_match("ab"),
            "alternation must be grouped before anchoring"
        );
    }

    #[test]
    fn label_rules() {
        assert!(is_label_value("NVIDIA-A100") && is_label_value(""));
        assert!(
            !is_label_value("A100,V100")
                && !is_label_value("-x")
                && !is_label_value(&"a".repeat(64))
        );
        assert!(is_label_key("nvidia.com/gpu.product") && is_label_key("PodCPUs"));
        assert!(!is_label_key("bad key") && !is_label_key("/x"));
    }
}
