//! `pilotd.toml`: the daemon's and the site's keys (a contract), their shape and defaults.

mod validate;
mod values;
mod worker;

pub use values::{
    SiteValueError, beyond_loopback, check_image_pattern, image_allowed, is_env_name,
    is_fully_qualified, secure_url, transport_allowed, valid_instance,
};
pub use worker::{PROXY_ENV, WorkerConfig, WorkerUser};

use super::units::HumanDuration;
use serde::Deserialize;
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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Volunteer => "volunteer",
            Mode::Kubernetes => "kubernetes",
        }
    }
}

/// `pilotd.toml`: the daemon's and the site's settings (mode, paths, worker image and
/// container settings). Keys are a contract: install scripts and tests write them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SiteConfig {
    pub mode: Mode,
    pub policy: PathBuf,
    pub state_dir: PathBuf,
    pub interval: HumanDuration,
    /// The fleet's spread: each host moves its first start after a window opens (or pilotd
    /// starts), its pre-window pull, its manifest refreshes and its back-off retries by a
    /// stable offset in `[0, splay)` (`volunteer::splay`); "0s" turns it off.
    pub splay: Spanned<HumanDuration>,
    /// The unix socket on which the daemon takes the owner's `snooze` and `resume`; its
    /// directory must be reachable by the owner (the unit's RuntimeDirectory, 0755).
    pub control_socket: PathBuf,
    pub host: HostConfig,
    pub docker: DockerConfig,
    pub worker: WorkerConfig,
    /// Kubernetes mode's table, kept as read: its keys belong to that mode's crate, which
    /// checks them through a [`ModeTables`](crate::config::ModeTables) check and resolves them.
    /// A build without kubernetes mode still accepts the table (the file stays valid).
    pub kubernetes: Option<toml::Table>,
    pub log: LogConfig,
    pub remote: RemoteConfig,
    pub metrics: MetricsConfig,
    pub history: HistoryConfig,
    pub page: PageConfig,
    pub slot_ad: SlotAdConfig,
}

/// The defaults of every key the file leaves out.
impl Default for SiteConfig {
    fn default() -> Self {
        SiteConfig {
            mode: Mode::Volunteer,
            policy: "/etc/pilotd/policy.toml".into(),
            state_dir: "/var/lib/pilotd".into(),
            interval: HumanDuration(Duration::from_secs(30)),
            splay: Spanned::new(0..0, HumanDuration(Duration::from_secs(300))),
            control_socket: "/run/pilotd/control.sock".into(),
            host: HostConfig::default(),
            docker: DockerConfig::default(),
            worker: WorkerConfig::default(),
            kubernetes: None,
            log: LogConfig::default(),
            remote: RemoteConfig::default(),
            metrics: MetricsConfig::default(),
            history: HistoryConfig::default(),
            page: PageConfig::default(),
            slot_ad: SlotAdConfig::default(),
        }
    }
}

/// What pilotd adds to the slot-ad file its workers' pilots publish (`volunteer::record::slot_ad`).
/// The machine's state (version, window, snooze, causes) is always there; what it gave is
/// the donor's, and leaves the machine only when the site turns it on.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SlotAdConfig {
    /// This ISO week's contribution (`PILOTD_CPU_HOURS_WEEK`, `PILOTD_JOBS_WEEK`, ...); off
    /// when unset.
    pub contribution: Option<Spanned<bool>>,
}

impl SlotAdConfig {
    pub fn contribution(&self) -> bool {
        self.contribution.as_ref().is_some_and(|c| *c.get_ref())
    }
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
#[serde(deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// https URL of the manifest (plain http only on loopback).
    pub url: Option<Spanned<String>>,
    pub refresh: HumanDuration,
    pub timeout: HumanDuration,
    /// Larger manifests are refused.
    pub max_bytes: u64,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            url: None,
            refresh: HumanDuration(Duration::from_secs(3600)),
            timeout: HumanDuration(Duration::from_secs(30)),
            max_bytes: 64 * 1024,
        }
    }
}

/// Prometheus metrics listener; off unless `listen` is set.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// e.g. "127.0.0.1:9464". Loopback unless the site decides otherwise (`check` warns).
    pub listen: Option<Spanned<std::net::SocketAddr>>,
}
/// The availability history kept in the state dir.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// An hour of the week counts as "usually free" when it was free at least this share of
    /// the time it was watched.
    pub free_threshold: f64,
    /// When true, a worker's `die_at` is also capped by how long the host is usually free from
    /// now on (useful with always-open schedules, where only the owner's habits end a period).
    pub predict_die_at: bool,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            free_threshold: 0.8,
            predict_die_at: false,
        }
    }
}

/// Wider would hold a first start for more than an hour (`volunteer::splay`).
pub(crate) const MAX_SPLAY: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// utmp file read for logged-in users.
    pub utmp: PathBuf,
    /// Where workers' scratch dirs live; its filesystem's free space is the disk budget.
    /// Default: `<state_dir>/scratch`.
    pub scratch: Option<PathBuf>,
    /// sysfs power-supply class, for the battery probe.
    pub power_supply: PathBuf,
    /// /dev, where tty atimes give session idle times.
    pub dev: PathBuf,
    /// procfs: processes (exclusive ones, a session's terminals, who holds a sound or video
    /// device open).
    pub proc: PathBuf,
    /// ALSA's procfs tree, where each sound stream says whether it is running.
    pub asound: PathBuf,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            utmp: "/var/run/utmp".into(),
            scratch: None,
            power_supply: "/sys/class/power_supply".into(),
            dev: "/dev".into(),
            proc: "/proc".into(),
            asound: "/proc/asound".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerConfig {
    pub socket: String,
    /// Value of the `pilotd.instance` label: pilotd only ever sees and touches containers that
    /// carry it, so two daemons (or test runs) can share one engine.
    pub instance: Spanned<String>,
    /// Deadline for one Docker API request (not for a whole pull).
    pub timeout: HumanDuration,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            socket: "unix:///var/run/docker.sock".into(),
            instance: Spanned::new(0..0, "default".into()),
            timeout: HumanDuration(Duration::from_secs(30)),
        }
    }
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
}

#[cfg(test)]
mod tests;
