//! `pilotd.toml`: the daemon's and the site's settings (mode, paths, worker image and
//! container settings). Keys are a contract: install scripts and tests write them.

use super::diag::Diagnostics;
#[cfg(feature = "kubernetes")]
use super::kubernetes::KubernetesConfig;
use super::template;
use super::units::HumanDuration;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Volunteer,
    Kubernetes,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Volunteer => "volunteer",
            Mode::Kubernetes => "kubernetes",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    #[serde(default)]
    pub mode: Mode,
    #[serde(default = "default_policy")]
    pub policy: PathBuf,
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    #[serde(default = "default_interval")]
    pub interval: HumanDuration,
    /// The fleet's spread: each host moves its first start after a window opens (or pilotd
    /// starts), its pre-window pull, its manifest refreshes and its back-off retries by a
    /// stable offset in `[0, splay)` (`volunteer::splay`); "0s" turns it off.
    #[serde(default = "default_splay")]
    pub splay: Spanned<HumanDuration>,
    /// The unix socket on which the daemon takes the owner's `snooze` and `resume`; its
    /// directory must be reachable by the owner (the unit's RuntimeDirectory, 0755).
    #[serde(default = "default_control_socket")]
    pub control_socket: PathBuf,
    #[serde(default)]
    pub host: HostConfig,
    #[serde(default)]
    pub docker: DockerConfig,
    #[serde(default)]
    pub worker: WorkerConfig,
    #[cfg(feature = "kubernetes")]
    pub kubernetes: Option<KubernetesConfig>,
    /// A build without kubernetes mode still accepts the table (the file stays valid), and
    /// reads nothing of it.
    #[cfg(not(feature = "kubernetes"))]
    pub kubernetes: Option<toml::Table>,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub remote: RemoteConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub history: HistoryConfig,
    #[serde(default)]
    pub page: PageConfig,
}

/// The owner's status page on 127.0.0.1 (volunteer mode); off unless `port` is set (the
/// Debian package's pilotd.toml sets it).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PageConfig {
    /// Served on 127.0.0.1 only, whatever the port.
    pub port: Option<u16>,
}

/// The pool organisers' remote manifest (see `service::manifest`). Off unless `url` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// https URL of the manifest (plain http only on loopback).
    pub url: Option<Spanned<String>>,
    #[serde(default = "default_remote_refresh")]
    pub refresh: HumanDuration,
    #[serde(default = "default_remote_timeout")]
    pub timeout: HumanDuration,
    /// Larger manifests are refused.
    #[serde(default = "default_remote_max_bytes")]
    pub max_bytes: u64,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            url: None,
            refresh: default_remote_refresh(),
            timeout: default_remote_timeout(),
            max_bytes: default_remote_max_bytes(),
        }
    }
}

fn default_remote_refresh() -> HumanDuration {
    HumanDuration(Duration::from_secs(3600))
}
fn default_remote_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn default_remote_max_bytes() -> u64 {
    64 * 1024
}

/// Prometheus metrics listener; off unless `listen` is set.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// e.g. "127.0.0.1:9464". Loopback unless the site decides otherwise (`check` warns).
    pub listen: Option<Spanned<std::net::SocketAddr>>,
}

/// Whether a listener on `ip` can be reached from other machines: anything but a loopback
/// address (0.0.0.0 and :: are every address, the public ones included).
pub fn beyond_loopback(ip: std::net::IpAddr) -> bool {
    !ip.to_canonical().is_loopback()
}

/// The availability history kept in the state dir.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// An hour of the week counts as "usually free" when it was free at least this share of
    /// the time it was watched.
    #[serde(default = "default_free_threshold")]
    pub free_threshold: f64,
    /// When true, a worker's `die_at` is also capped by how long the host is usually free from
    /// now on (useful with always-open schedules, where only the owner's habits end a period).
    #[serde(default)]
    pub predict_die_at: bool,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            free_threshold: default_free_threshold(),
            predict_die_at: false,
        }
    }
}

fn default_free_threshold() -> f64 {
    0.8
}

fn default_policy() -> PathBuf {
    "/etc/pilotd/policy.toml".into()
}
fn default_control_socket() -> PathBuf {
    "/run/pilotd/control.sock".into()
}
fn default_state_dir() -> PathBuf {
    "/var/lib/pilotd".into()
}
fn default_splay() -> Spanned<HumanDuration> {
    Spanned::new(0..0, HumanDuration(Duration::from_secs(300)))
}
/// Wider would hold a first start for more than an hour (`volunteer::splay`).
pub const MAX_SPLAY: Duration = Duration::from_secs(3600);
fn default_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// utmp file read for logged-in users.
    #[serde(default = "default_utmp")]
    pub utmp: PathBuf,
    /// Where workers' scratch dirs live; its filesystem's free space is the disk budget.
    /// Default: `<state_dir>/scratch`.
    pub scratch: Option<PathBuf>,
    /// sysfs power-supply class, for the battery probe.
    #[serde(default = "default_power_supply")]
    pub power_supply: PathBuf,
    /// /dev, where tty atimes give session idle times.
    #[serde(default = "default_dev")]
    pub dev: PathBuf,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            utmp: default_utmp(),
            scratch: None,
            power_supply: default_power_supply(),
            dev: default_dev(),
        }
    }
}

fn default_utmp() -> PathBuf {
    "/var/run/utmp".into()
}
fn default_power_supply() -> PathBuf {
    "/sys/class/power_supply".into()
}
fn default_dev() -> PathBuf {
    "/dev".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerConfig {
    #[serde(default = "default_socket")]
    pub socket: String,
    /// Value of the `pilotd.instance` label: pilotd only ever sees and touches containers that
    /// carry it, so two daemons (or test runs) can share one engine.
    #[serde(default = "default_instance")]
    pub instance: Spanned<String>,
    /// Deadline for one Docker API request (not for a whole pull).
    #[serde(default = "default_docker_timeout")]
    pub timeout: HumanDuration,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            socket: default_socket(),
            instance: default_instance(),
            timeout: default_docker_timeout(),
        }
    }
}

fn default_instance() -> Spanned<String> {
    Spanned::new(0..0, "default".into())
}
fn default_docker_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}

/// What SIGTERM does to running workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnShutdown {
    /// Leave them running; the next pilotd adopts them by their labels.
    #[default]
    Keep,
    /// Stop them gracefully (within the policy's grace) before exiting.
    Stop,
}

fn default_socket() -> String {
    "unix:///var/run/docker.sock".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Fully qualified image reference (registry/repository:tag or @digest).
    #[serde(default = "default_image")]
    pub image: Spanned<String>,
    /// Pattern syntax: `image_allowed`.
    #[serde(default = "default_allowed")]
    pub allowed_images: Vec<Spanned<String>>,
    #[serde(default = "default_refresh")]
    pub refresh: HumanDuration,
    #[serde(default = "default_max_image_age")]
    pub max_image_age: HumanDuration,
    #[serde(default = "default_max_lifetime")]
    pub max_lifetime: Spanned<HumanDuration>,
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: HumanDuration,
    /// Pool token, bind-mounted read-only into workers; never put in env or logs.
    pub token_file: Option<PathBuf>,
    /// Environment of the worker, templated from the decision (`{cpus}`, `{memory_mib}`, ...).
    #[serde(default)]
    pub env: BTreeMap<String, Spanned<String>>,
    /// A start storm after a crash or a config change must not hit the registry and the pool
    /// all at once.
    #[serde(default = "default_max_starts")]
    pub max_starts_per_cycle: u32,
    /// Pull a new image even while the owner is using the machine (their bandwidth).
    #[serde(default)]
    pub pull_while_owner_present: bool,
    /// First delay after a worker that ran no job or failed to start; doubles, up to backoff_max.
    #[serde(default = "default_backoff_base")]
    pub backoff_base: HumanDuration,
    #[serde(default = "default_backoff_max")]
    pub backoff_max: HumanDuration,
    /// Process limit of one worker (a fork bomb in a job stays inside it).
    #[serde(default = "default_pids_limit")]
    pub pids_limit: i64,
    /// Where the token file appears inside the worker (read-only).
    #[serde(default = "default_token_mount")]
    pub token_mount: PathBuf,
    /// Where the worker's own scratch dir (under [host] scratch) appears inside it.
    #[serde(default = "default_scratch_mount")]
    pub scratch_mount: PathBuf,
    /// Host path bind-mounted read-only (rslave, so autofs mounts show up) at /cvmfs.
    pub cvmfs: Option<PathBuf>,
    /// Capabilities given back after dropping all (e.g. what the image's entrypoint needs to
    /// switch users). Empty by default.
    #[serde(default)]
    pub cap_add: Vec<String>,
    /// Run the worker as this user: "uid" or "uid:gid" (numeric: the scratch dir and the
    /// token copy are given to it), or "image" (the image's own USER). Default 65532:65532.
    pub user: Option<Spanned<String>>,
    /// The worker's root filesystem is read-only (tmpfs at /tmp and /var/tmp): a worker writes
    /// only to its scratch dir, whose use is measured against the disk share.
    #[serde(default = "yes")]
    pub read_only_rootfs: bool,
    /// A network the site names for its workers (its own filtering then applies). Unset:
    /// pilotd's own bridge, no traffic between workers, nothing private or on the host
    /// reachable but `egress_allow`.
    /// `host` and `container:…` are refused: they would put a job in the host's (or another
    /// container's) network namespace, past every filter.
    pub network: Option<Spanned<String>>,
    /// Private destinations (IPv4 networks, `a.b.c.d/n`) workers on pilotd's own network may
    /// reach, e.g. the pool's collector on the campus network.
    #[serde(default)]
    pub egress_allow: Vec<Spanned<String>>,
    #[serde(default)]
    pub on_shutdown: OnShutdown,
    /// How often scratch dirs and old images are garbage-collected.
    #[serde(default = "default_gc_interval")]
    pub gc_interval: HumanDuration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            image: default_image(),
            allowed_images: default_allowed(),
            refresh: default_refresh(),
            max_image_age: default_max_image_age(),
            max_lifetime: default_max_lifetime(),
            idle_timeout: default_idle_timeout(),
            token_file: None,
            env: BTreeMap::new(),
            max_starts_per_cycle: default_max_starts(),
            pull_while_owner_present: false,
            backoff_base: default_backoff_base(),
            backoff_max: default_backoff_max(),
            pids_limit: default_pids_limit(),
            token_mount: default_token_mount(),
            scratch_mount: default_scratch_mount(),
            cvmfs: None,
            cap_add: vec![],
            user: None,
            read_only_rootfs: true,
            network: None,
            egress_allow: vec![],
            on_shutdown: OnShutdown::Keep,
            gc_interval: default_gc_interval(),
        }
    }
}

fn default_image() -> Spanned<String> {
    Spanned::new(
        0..0,
        "hub.opensciencegrid.org/osg-htc/ospool-ep:25-release".into(),
    )
}
fn default_allowed() -> Vec<Spanned<String>> {
    vec![Spanned::new(
        0..0,
        "hub.opensciencegrid.org/osg-htc/*".into(),
    )]
}
fn default_refresh() -> HumanDuration {
    HumanDuration(Duration::from_secs(6 * 3600))
}
fn default_max_image_age() -> HumanDuration {
    HumanDuration(Duration::from_secs(72 * 3600))
}
fn default_max_lifetime() -> Spanned<HumanDuration> {
    Spanned::new(0..0, HumanDuration(Duration::from_secs(24 * 3600)))
}
fn default_idle_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(20 * 60))
}
fn default_max_starts() -> u32 {
    1
}
fn default_backoff_base() -> HumanDuration {
    HumanDuration(Duration::from_secs(60))
}
fn default_backoff_max() -> HumanDuration {
    HumanDuration(Duration::from_secs(3600))
}
fn default_pids_limit() -> i64 {
    4096
}
fn default_token_mount() -> PathBuf {
    "/etc/pilotd/token".into()
}
fn default_scratch_mount() -> PathBuf {
    "/pilot".into()
}
fn yes() -> bool {
    true
}
fn default_gc_interval() -> HumanDuration {
    HumanDuration(Duration::from_secs(600))
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// tracing filter, e.g. "info" or "pilotd=debug"; `RUST_LOG` wins when set.
    pub level: Option<Spanned<String>>,
}

impl SiteConfig {
    /// Built-in defaults, used by `check`, `plan`, `snapshot` and `schedule` when there is
    /// no pilotd.toml.
    pub fn defaults() -> SiteConfig {
        toml::from_str("").expect("an empty pilotd.toml is valid")
    }

    pub fn scratch(&self) -> PathBuf {
        self.host
            .scratch
            .clone()
            .unwrap_or_else(|| self.state_dir.join("scratch"))
    }

    /// `[worker] allowed_images`, without positions.
    pub fn allowed_images(&self) -> Vec<String> {
        self.worker
            .allowed_images
            .iter()
            .map(|p| p.get_ref().clone())
            .collect()
    }

    pub fn max_lifetime(&self) -> Duration {
        self.worker.max_lifetime.get_ref().0
    }

    /// Semantic checks of pilotd.toml on its own.
    /// What `check` says without refusing the file: (span, message, hint).
    pub fn warnings(&self) -> Vec<(std::ops::Range<usize>, String, &'static str)> {
        let mut w = Vec::new();
        if let Some(listen) = &self.metrics.listen
            && beyond_loopback(listen.get_ref().ip())
        {
            w.push((
                listen.span(),
                format!(
                    "[metrics] listen = \"{}\" serves the metrics beyond loopback: anyone who can reach it reads what this machine does and when, and can hold the listener's 16 connections",
                    listen.get_ref()
                ),
                "listen on 127.0.0.1 (a scraper on this machine, or an SSH tunnel), or keep this address and let a firewall admit only the scraper",
            ));
        }
        w
    }

    pub fn validate(&self, d: &mut Diagnostics) {
        if let Some(url) = &self.remote.url
            && let Err(e) = secure_url(url.get_ref())
        {
            d.error(
                url.span(),
                format!("remote manifest URL: {e}"),
                "use an https:// URL (plain http is accepted only on loopback)",
            );
        }
        if !(0.0..=1.0).contains(&self.history.free_threshold) {
            d.error(
                0..0,
                "[history] free_threshold must be between 0 and 1",
                "e.g. free_threshold = 0.8",
            );
        }
        if self.interval.0 < Duration::from_secs(1) {
            d.error(
                0..0,
                "interval must be at least 1s",
                "e.g. interval = \"30s\"",
            );
        }
        if self.splay.get_ref().0 > MAX_SPLAY {
            d.error(
                self.splay.span(),
                "splay must be at most 1h: a host's first start waits up to the splay",
                "e.g. splay = \"5m\" (\"0s\" turns the fleet's spread off)",
            );
        }
        let img = self.worker.image.get_ref();
        if !is_fully_qualified(img) {
            d.error(
                self.worker.image.span(),
                format!("worker image `{img}` is not fully qualified"),
                "name the registry, repository and tag, e.g. \"hub.opensciencegrid.org/osg-htc/ospool-ep:25-release\"",
            );
        } else if !image_allowed(img, &self.allowed_images()) {
            d.error(
                self.worker.image.span(),
                format!("worker image `{img}` is not in allowed_images"),
                "add a matching pattern to [worker] allowed_images, e.g. \"registry.example.org/pool/*\"",
            );
        }
        for p in &self.worker.allowed_images {
            if let Err(e) = check_image_pattern(p.get_ref()) {
                d.error(
                    p.span(),
                    format!("[worker] allowed_images: {e}"),
                    "write an exact reference, \"registry/path/*\" (every repository under that path) or \"registry/path/name:*\" (every tag and digest of one repository)",
                );
            }
        }
        if let Some(level) = &self.log.level
            // The daemon's filter (`service::logging`): levels and target=level directives.
            && let Err(e) = level
                .get_ref()
                .parse::<tracing_subscriber::filter::Targets>()
        {
            d.error(
                level.span(),
                format!("[log] level `{}` is not a log filter: {e}", level.get_ref()),
                "write a level (error, warn, info, debug, trace) or directives like \"info,pilotd=debug\"",
            );
        }
        self.validate_worker(d);
        if self.max_lifetime().is_zero() {
            d.error(
                self.worker.max_lifetime.span(),
                "max_lifetime cannot be 0",
                "e.g. max_lifetime = \"24h\"",
            );
        }
        #[cfg(not(feature = "kubernetes"))]
        if self.mode == Mode::Kubernetes {
            d.error(
                0..0,
                "mode = \"kubernetes\" is not in this build of pilotd (built without the `kubernetes` feature)",
                "this package runs volunteer mode only; run kubernetes mode from the provisioner image",
            );
        }
        #[cfg(feature = "kubernetes")]
        if let Some(k) = &self.kubernetes {
            k.validate(d);
        } else if self.mode == Mode::Kubernetes {
            d.error(
                0..0,
                "mode = \"kubernetes\" needs a [kubernetes] table",
                "convert the provisioner's INI with `pilotd import-ini FILE`, or add [kubernetes] namespace = \"...\"",
            );
        }
    }
}

/// Who a worker runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerUser {
    /// These numeric ids: the scratch dir and the token copy belong to them.
    Ids { uid: u32, gid: u32 },
    /// The image's own USER; pilotd cannot know its ids, so the scratch dir stays root's.
    Image,
}

impl WorkerUser {
    /// Not root, and no user of the host's ordinary ranges: Debian reserves 65000–65533, so no
    /// account of the owner's shares it (the "nonroot" uid of distroless images too).
    pub const DEFAULT: WorkerUser = WorkerUser::Ids {
        uid: 65532,
        gid: 65532,
    };

    /// `"uid"`, `"uid:gid"` or `"image"`.
    pub fn parse(raw: &str) -> Result<WorkerUser, SiteValueError> {
        let raw = raw.trim();
        if raw == "image" {
            return Ok(WorkerUser::Image);
        }
        let id = |s: &str| s.parse::<u32>().ok().filter(|&n| n < u32::MAX);
        let (uid, gid) = match raw.split_once(':') {
            Some((u, g)) => (id(u), id(g)),
            None => (id(raw), id(raw)),
        };
        match (uid, gid) {
            (Some(uid), Some(gid)) => Ok(WorkerUser::Ids { uid, gid }),
            _ => Err(SiteValueError::WorkerUser(raw.to_owned())),
        }
    }

    /// The engine's `User` field: `None` leaves the image's.
    pub fn engine_user(self) -> Option<String> {
        match self {
            WorkerUser::Ids { uid, gid } => Some(format!("{uid}:{gid}")),
            WorkerUser::Image => None,
        }
    }
}

impl WorkerConfig {
    /// `[worker] user`, or the default; an invalid value (reported by `check`) falls back to
    /// the default.
    pub fn worker_user(&self) -> WorkerUser {
        self.user
            .as_ref()
            .and_then(|u| WorkerUser::parse(u.get_ref()).ok())
            .unwrap_or(WorkerUser::DEFAULT)
    }
}

impl SiteConfig {
    /// Checks of `[docker]` and `[worker]` that serde cannot express.
    fn validate_worker(&self, d: &mut Diagnostics) {
        for a in &self.worker.egress_allow {
            if let Err(e) = super::units::Ipv4Net::parse(a.get_ref()) {
                d.error(
                    a.span(),
                    format!("[worker] egress_allow: {e}"),
                    "write IPv4 networks like \"10.20.0.0/16\" or single addresses like \"192.168.1.5\"",
                );
            }
        }
        if let Some(user) = &self.worker.user
            && let Err(e) = WorkerUser::parse(user.get_ref())
        {
            d.error(
                user.span(),
                e,
                "write the numeric ids the image runs as, e.g. user = \"1000:1000\" for the OSPool EP image, or user = \"image\" to keep the image's own (the scratch dir then stays root's)",
            );
        }
        let inst = &self.docker.instance;
        if !valid_instance(inst.get_ref()) {
            d.error(
                inst.span(),
                format!(
                    "instance `{}` cannot be part of a container name",
                    inst.get_ref()
                ),
                "use 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter or digit",
            );
        }
        if let Some(net) = &self.worker.network {
            let n = net.get_ref().trim();
            if n == "host" || n.starts_with("container:") || n.is_empty() {
                d.error(
                    net.span(),
                    format!("[worker] network = \"{n}\" would put jobs past every filter (in the host's or another container's network)"),
                    "remove the key (pilotd's own filtered bridge), or name a network the site filters itself, e.g. network = \"bridge\"",
                );
            }
        }
        for (key, value) in &self.worker.env {
            if !is_env_name(key) {
                d.error(
                    value.span(),
                    format!(
                        "[worker.env] key `{}` is not an environment variable name",
                        key.escape_debug()
                    ),
                    "names are letters, digits and '_', not starting with a digit, e.g. NUM_CPUS",
                );
            }
        }
        for value in self.worker.env.values() {
            if let Err(e) = template::check(value.get_ref()) {
                // +1: the span starts at the opening quote.
                let at = value.span().start + 1 + e.offset();
                d.error(
                    at..at,
                    format!("[worker.env]: {e}"),
                    format!(
                        "known placeholders: {}; write {{{{ and }}}} for literal braces",
                        template::PLACEHOLDERS.join(", ")
                    ),
                );
            }
        }
        if self.worker.max_starts_per_cycle == 0 {
            d.error(
                0..0,
                "[worker] max_starts_per_cycle = 0 would never start a worker",
                "e.g. max_starts_per_cycle = 1",
            );
        }
        if self.worker.pids_limit < 16 {
            d.error(
                0..0,
                "[worker] pids_limit is below 16: the worker could not even start condor",
                "e.g. pids_limit = 4096",
            );
        }
        if self.worker.backoff_base.0.is_zero()
            || self.worker.backoff_max < self.worker.backoff_base
        {
            d.error(
                0..0,
                "[worker] backoff_base must be > 0 and at most backoff_max",
                "e.g. backoff_base = \"1m\", backoff_max = \"1h\"",
            );
        }
        for (key, path) in [
            ("token_mount", &self.worker.token_mount),
            ("scratch_mount", &self.worker.scratch_mount),
        ] {
            if !path.is_absolute() {
                d.error(
                    0..0,
                    format!(
                        "[worker] {key} `{}` is not an absolute path",
                        path.display()
                    ),
                    "paths inside the worker start with /",
                );
            }
        }
    }
}

/// Instance ids end up in container and scratch dir names.
pub fn valid_instance(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// A reference names its registry host (has a dot, a port or is localhost before the first
/// slash) and a tag or digest. Podman and reproducible pulls need this.
pub fn is_fully_qualified(image: &str) -> bool {
    let Some((host, rest)) = image.split_once('/') else {
        return false;
    };
    let host_ok = host.contains('.') || host.contains(':') || host == "localhost";
    let last = rest.rsplit('/').next().unwrap_or(rest);
    let tagged = last.contains(':') || rest.contains("@sha256:");
    host_ok && tagged && !rest.is_empty()
}

/// Whether pilotd may fetch from `url`: https, or plain http to a loopback host (a local
/// mirror, a test server). Decided on the parsed URL, whose host is what the client connects
/// to: `http://127.0.0.1@evil.example/` goes to evil.example.
pub fn transport_allowed(url: &reqwest::Url) -> bool {
    match url.scheme() {
        "https" => url.host_str().is_some(),
        "http" => url.host_str().is_some_and(|h| {
            h.eq_ignore_ascii_case("localhost")
                || h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|a| a.is_loopback())
        }),
        _ => false,
    }
}

/// Why a value of pilotd.toml that serde accepted is still refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiteValueError {
    #[error(
        "user `{0}` is not a numeric uid or uid:gid: names are resolved inside the image, so pilotd could not give the worker its scratch dir"
    )]
    WorkerUser(String),
    /// `shown` has its credentials redacted.
    #[error("`{shown}` is not a URL ({why})")]
    NotAUrl { shown: String, why: String },
    #[error("`{shown}` is not https (its host is {host})")]
    NotHttps { shown: String, host: String },
    #[error(
        "pattern `{0}`: `*` may only stand for whole path components, as a final \"/*\" or \":*\""
    )]
    ImageWildcard(String),
    #[error("pattern `{0}`: `:*` follows a repository name without a tag")]
    ImageTagWildcard(String),
}

/// Parses a URL pilotd will fetch and applies [`transport_allowed`]; the error names the URL
/// with its credentials redacted.
pub fn secure_url(raw: &str) -> Result<reqwest::Url, SiteValueError> {
    let shown = redact::credentials(raw).into_owned();
    let url = reqwest::Url::parse(raw).map_err(|e| SiteValueError::NotAUrl {
        shown: shown.clone(),
        why: e.to_string(),
    })?;
    if transport_allowed(&url) {
        Ok(url)
    } else {
        Err(SiteValueError::NotHttps {
            host: url.host_str().unwrap_or("missing").to_owned(),
            shown,
        })
    }
}

/// A name a process environment can hold and a shell can set: `[A-Za-z_][A-Za-z0-9_]*`
/// (`"A=B"` would set `A`, `""` nothing the worker can read).
pub fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// `allowed_images` patterns match whole path components, never part of a name:
/// - `registry/path/name:tag` or `registry/path/name@sha256:…`: exactly that reference;
/// - `registry/path/*`: every repository under `registry/path/` (any depth), any tag or digest;
/// - `registry/path/name:*`: every tag and digest of that one repository.
///
/// A `*` anywhere else (`registry.example/osg*`) is refused by `check` and matches nothing:
/// as a plain prefix it would allow `registry.example/osg-evil/…`.
pub fn check_image_pattern(p: &str) -> Result<(), SiteValueError> {
    let body = p
        .strip_suffix("/*")
        .or_else(|| p.strip_suffix(":*"))
        .unwrap_or(p);
    if body.is_empty() || body.contains('*') {
        return Err(SiteValueError::ImageWildcard(p.to_owned()));
    }
    if p.ends_with(":*") && (body.contains('@') || repository(body) != body) {
        return Err(SiteValueError::ImageTagWildcard(p.to_owned()));
    }
    Ok(())
}

/// The repository part of a reference: without its tag (a `:` after the last `/`) or digest.
fn repository(image: &str) -> &str {
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    match name[last_slash..].rfind(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    }
}

pub fn image_allowed(image: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| {
        if check_image_pattern(p).is_err() {
            return false;
        }
        if let Some(prefix) = p.strip_suffix("/*") {
            // The component boundary: `osg-htc/*` allows `osg-htc/x`, not `osg-htcx/x`.
            image
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1)
        } else if let Some(repo) = p.strip_suffix(":*") {
            repository(image) == repo && image.len() > repo.len()
        } else {
            image == p
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_users_are_numeric_or_the_images() {
        assert_eq!(WorkerUser::parse("65532:65532"), Ok(WorkerUser::DEFAULT));
        assert_eq!(
            WorkerUser::parse("1000"),
            Ok(WorkerUser::Ids {
                uid: 1000,
                gid: 1000
            })
        );
        assert_eq!(
            WorkerUser::parse("1000:50"),
            Ok(WorkerUser::Ids { uid: 1000, gid: 50 })
        );
        assert_eq!(WorkerUser::parse("image"), Ok(WorkerUser::Image));
        for bad in [
            "condor",
            "1000:condor",
            "",
            ":",
            "-1",
            "4294967295",
            "1:2:3",
        ] {
            assert!(WorkerUser::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            WorkerUser::DEFAULT.engine_user().as_deref(),
            Some("65532:65532")
        );
        assert_eq!(WorkerUser::Image.engine_user(), None);
        // Unset means the default, never the image's root.
        assert_eq!(
            SiteConfig::defaults().worker.worker_user(),
            WorkerUser::DEFAULT
        );
    }

    #[test]
    fn a_user_name_is_refused_at_its_position() {
        let text = "[worker]\nuser = \"condor\"\n";
        let site: SiteConfig = toml::from_str(text).unwrap();
        let mut d = Diagnostics::new(std::path::Path::new("pilotd.toml"), text);
        site.validate_worker(&mut d);
        let e = d.into_vec().into_iter().next().expect("refused");
        assert!(
            e.message.contains("user `condor` is not a numeric uid"),
            "{e:?}"
        );
        assert_eq!((e.line, e.col), (2, 8));
    }

    #[test]
    fn qualification() {
        assert!(is_fully_qualified(
            "hub.opensciencegrid.org/osg-htc/ospool-ep:25-release"
        ));
        assert!(is_fully_qualified("127.0.0.1:5000/pilotd-test/worker:1"));
        assert!(is_fully_qualified("localhost/worker:1"));
        assert!(is_fully_qualified("r.example.org/a/b@sha256:abc"));
        assert!(!is_fully_qualified("ospool-ep:25-release"));
        assert!(!is_fully_qualified("osg-htc/ospool-ep:25"));
        assert!(!is_fully_qualified(
            "hub.opensciencegrid.org/osg-htc/ospool-ep"
        ));
        assert!(!is_fully_qualified("127.0.0.1:5000/worker"));
    }

    #[test]
    fn allow_list() {
        let pats = vec!["hub.opensciencegrid.org/osg-htc/*".to_string()];
        assert!(image_allowed(
            "hub.opensciencegrid.org/osg-htc/ospool-ep:25",
            &pats
        ));
        assert!(!image_allowed("hub.opensciencegrid.org/evil/x:1", &pats));
        assert!(!image_allowed(
            "hub.opensciencegrid.org/osg-htcx/x:1",
            &pats
        ));
    }

    #[test]
    fn patterns_match_whole_components_or_nothing() {
        let pats = |p: &str| vec![p.to_string()];
        // A partial-name `*` would let `osg-evil` through: refused, and matches nothing.
        assert!(check_image_pattern("registry.example/osg*").is_err());
        assert!(!image_allowed(
            "registry.example/osg-evil/x:1",
            &pats("registry.example/osg*")
        ));
        assert!(!image_allowed(
            "registry.example/osg/x:1",
            &pats("registry.example/osg*")
        ));
        for bad in [
            "*",
            "/*",
            "a/*/b:1",
            "r.example/a:1:*",
            "r.example/a@sha256:x:*",
        ] {
            assert!(check_image_pattern(bad).is_err(), "{bad}");
        }
        // `path/*`: everything below the component, at any depth, never a sibling.
        let under = pats("registry.example/osg/*");
        assert!(image_allowed("registry.example/osg/ep:1", &under));
        assert!(image_allowed("registry.example/osg/a/b@sha256:ab", &under));
        assert!(!image_allowed("registry.example/osg-evil/ep:1", &under));
        assert!(!image_allowed("registry.example/osg", &under));
        // `name:*`: every tag and digest of one repository, not of a longer name.
        let tags = pats("127.0.0.1:5000/pool/ep:*");
        assert!(image_allowed("127.0.0.1:5000/pool/ep:25", &tags));
        assert!(image_allowed("127.0.0.1:5000/pool/ep@sha256:ab", &tags));
        assert!(!image_allowed("127.0.0.1:5000/pool/ep-evil:25", &tags));
        assert!(!image_allowed("127.0.0.1:5000/pool/ep/x:25", &tags));
        // Exact references and digests.
        let exact = pats("r.example/a/b@sha256:ab");
        assert!(image_allowed("r.example/a/b@sha256:ab", &exact));
        assert!(!image_allowed("r.example/a/b@sha256:abc", &exact));
    }

    #[test]
    fn only_https_or_loopback_http_on_the_parsed_url() {
        for ok in [
            "https://pool.example.org/m.toml",
            "http://127.0.0.1:8080/m",
            "http://localhost/m",
            "http://[::1]:9/m",
            "http://127.0.0.2/m",
        ] {
            assert!(secure_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://pool.example.org/m",
            "http://127.0.0.1@evil.example/m",
            "http://localhost:80@evil.example/m",
            "http://user@host/",
            "ftp://127.0.0.1/m",
            "file:///etc/passwd",
            "not a url",
        ] {
            assert!(secure_url(bad).is_err(), "{bad}");
        }
        let e = secure_url("http://u:pw@evil.example/?token=t")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("pw") && !e.contains("=t"), "{e}");
        assert!(e.contains("evil.example"), "{e}");
    }

    #[test]
    fn env_names_are_plain_identifiers() {
        for good in ["NUM_CPUS", "_X", "a1"] {
            assert!(is_env_name(good), "{good}");
        }
        for bad in ["", "A=B", "1X", "A B", "A\nB", "Ä"] {
            assert!(!is_env_name(bad), "{bad:?}");
        }
    }

    #[cfg(not(feature = "kubernetes"))]
    #[test]
    fn a_build_without_kubernetes_mode_refuses_it_and_says_so() {
        let e = crate::config::parse_site(
            std::path::Path::new("pilotd.toml"),
            "mode = \"kubernetes\"\n[kubernetes]\nnamespace = \"osg\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not in this build of pilotd"), "{e}");
        // A volunteer file with a [kubernetes] table (shared by both modes) stays valid.
        crate::config::parse_site(
            std::path::Path::new("pilotd.toml"),
            "[kubernetes]\nnamespace = \"osg\"\n",
        )
        .unwrap();
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = SiteConfig::defaults();
        assert_eq!(c.mode, Mode::Volunteer);
        assert_eq!(c.interval.0, Duration::from_secs(30));
        assert_eq!(c.max_lifetime(), Duration::from_secs(86400));
        assert_eq!(c.host.utmp, PathBuf::from("/var/run/utmp"));
    }
}
