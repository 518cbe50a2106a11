//! `[worker]`: the worker's image, limits and container settings, and who it runs as.

use super::OnShutdown;
use super::values::SiteValueError;
use crate::config::units::HumanDuration;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Fully qualified image reference (registry/repository:tag or @digest).
    pub image: Spanned<String>,
    /// Pattern syntax: `image_allowed`.
    pub allowed_images: Vec<Spanned<String>>,
    pub refresh: HumanDuration,
    pub max_image_age: HumanDuration,
    pub max_lifetime: Spanned<HumanDuration>,
    pub idle_timeout: HumanDuration,
    /// Pool token, bind-mounted read-only into workers; never put in env or logs.
    pub token_file: Option<PathBuf>,
    /// Environment of the worker, templated from the decision (`{cpus}`, `{memory_mib}`, ...).
    pub env: BTreeMap<String, Spanned<String>>,
    /// A start storm after a crash or a config change must not hit the registry and the pool
    /// all at once.
    pub max_starts_per_cycle: u32,
    /// Pull a new image even while the owner is using the machine (their bandwidth).
    pub pull_while_owner_present: bool,
    /// First delay after a worker that ran no job or failed to start; doubles, up to backoff_max.
    pub backoff_base: HumanDuration,
    pub backoff_max: HumanDuration,
    /// Process limit of one worker (a fork bomb in a job stays inside it).
    pub pids_limit: i64,
    /// Where the token file appears inside the worker (read-only).
    pub token_mount: PathBuf,
    /// Where the worker's own scratch dir (under [host] scratch) appears inside it.
    pub scratch_mount: PathBuf,
    /// Host path bind-mounted read-only (rslave, so autofs mounts show up) at /cvmfs.
    pub cvmfs: Option<PathBuf>,
    /// Capabilities given back after dropping all (e.g. what the image's entrypoint needs to
    /// switch users). Empty by default.
    pub cap_add: Vec<String>,
    /// Run the worker as this user: "uid" or "uid:gid" (numeric: the scratch dir and the
    /// token copy are given to it), or "image" (the image's own USER). Default 65532:65532.
    pub user: Option<Spanned<String>>,
    /// The worker's root filesystem is read-only (tmpfs at /tmp and /var/tmp): a worker writes
    /// only to its scratch dir, whose use is measured against the disk share.
    pub read_only_rootfs: bool,
    /// A network the site names for its workers (its own filtering then applies). Unset:
    /// pilotd's own bridge, no traffic between workers, nothing private or on the host
    /// reachable but `egress_allow`.
    /// `host` and `container:…` are refused: they would put a job in the host's (or another
    /// container's) network namespace, past every filter.
    pub network: Option<Spanned<String>>,
    /// Private destinations (IPv4 networks, `a.b.c.d/n`) workers on pilotd's own network may
    /// reach, e.g. the pool's collector on the campus network.
    pub egress_allow: Vec<Spanned<String>>,
    /// The site's web proxy (e.g. its squid) for workers' http and https traffic, and the
    /// hosts reached without it: given to every worker as `http_proxy`, `https_proxy` and
    /// `no_proxy` (and their capitalised twins, which some programs read instead). pilotd.toml
    /// only: a remote manifest can set none of them (it would route the workers' traffic
    /// through a host of its choosing).
    pub http_proxy: Option<Spanned<String>>,
    pub https_proxy: Option<Spanned<String>>,
    pub no_proxy: Option<Spanned<String>>,
    pub on_shutdown: OnShutdown,
    /// How often scratch dirs and old images are garbage-collected.
    pub gc_interval: HumanDuration,
}

/// The environment names a proxy key sets in workers, each in both spellings.
pub const PROXY_ENV: [(&str, [&str; 2]); 3] = [
    ("http_proxy", ["http_proxy", "HTTP_PROXY"]),
    ("https_proxy", ["https_proxy", "HTTPS_PROXY"]),
    ("no_proxy", ["no_proxy", "NO_PROXY"]),
];

impl WorkerConfig {
    /// The proxy keys that are set: (key, value as written).
    pub(crate) fn proxies(&self) -> Vec<(&'static str, &Spanned<String>)> {
        [&self.http_proxy, &self.https_proxy, &self.no_proxy]
            .into_iter()
            .zip(PROXY_ENV)
            .filter_map(|(v, (key, _))| v.as_ref().map(|v| (key, v)))
            .collect()
    }

    /// The workers' environment the proxy keys make: both spellings of each set key.
    pub fn proxy_env(&self) -> Vec<(String, String)> {
        self.proxies()
            .into_iter()
            .flat_map(|(key, v)| {
                let names = PROXY_ENV.iter().find(|(k, _)| *k == key).map(|(_, n)| *n);
                names
                    .into_iter()
                    .flatten()
                    .map(move |n| (n.to_string(), v.get_ref().trim().to_string()))
            })
            .collect()
    }
}

/// The defaults of every key the site leaves out.
impl Default for WorkerConfig {
    fn default() -> Self {
        let hours = |h: u64| HumanDuration(Duration::from_secs(h * 3600));
        WorkerConfig {
            image: Spanned::new(
                0..0,
                "hub.opensciencegrid.org/osg-htc/ospool-ep:25-release".into(),
            ),
            allowed_images: vec![Spanned::new(
                0..0,
                "hub.opensciencegrid.org/osg-htc/*".into(),
            )],
            refresh: hours(6),
            max_image_age: hours(72),
            max_lifetime: Spanned::new(0..0, hours(24)),
            idle_timeout: HumanDuration(Duration::from_secs(20 * 60)),
            token_file: None,
            env: BTreeMap::new(),
            max_starts_per_cycle: 1,
            pull_while_owner_present: false,
            backoff_base: HumanDuration(Duration::from_secs(60)),
            backoff_max: hours(1),
            pids_limit: 4096,
            token_mount: "/etc/pilotd/token".into(),
            scratch_mount: "/pilot".into(),
            cvmfs: None,
            cap_add: vec![],
            user: None,
            read_only_rootfs: true,
            network: None,
            egress_allow: vec![],
            http_proxy: None,
            https_proxy: None,
            no_proxy: None,
            on_shutdown: OnShutdown::Keep,
            gc_interval: HumanDuration(Duration::from_secs(600)),
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
    pub(crate) fn parse(raw: &str) -> Result<WorkerUser, SiteValueError> {
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
