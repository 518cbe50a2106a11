//! Volunteer mode's settings, resolved once. pilotd.toml and the owner's policy arrive parsed
//! and diagnosed (`config`); `Settings::resolve` turns them into what each part of the mode
//! works with — the engine connection, the host probe, the worker template, image freshness,
//! the start back-off, the remote manifest, the learned history — so nothing past this file
//! reads the files' structure (spans, units, defaults, tables). Plain data only.

use crate::network::Filter;
use crate::splay::Splay;
use pilotd_core::backoff::Backoff;
use pilotd_core::config::policy::DiskLimit;
use pilotd_core::config::site::{OnShutdown, WorkerUser};
use pilotd_core::config::units::Ipv4Net;
use pilotd_core::config::{Config, Policy, SiteConfig};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Everything volunteer mode runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The owner's policy, as `config` validated it.
    pub policy: Policy,
    /// Time between cycles when nothing else wakes the daemon.
    pub interval: Duration,
    /// Status, history, last good manifest and (by default) scratch.
    pub state_dir: PathBuf,
    /// Where the daemon takes the owner's snooze and resume.
    pub control_socket: PathBuf,
    /// The status page's port on 127.0.0.1, when it is served.
    pub page_port: Option<u16>,
    pub engine: EngineSettings,
    pub probe: ProbeSettings,
    /// The worker template as pilotd.toml says; the pool's manifest may lay choices over it.
    pub worker: WorkerSettings,
    pub image: ImageSettings,
    /// No worker lives longer than this, whatever the schedule says.
    pub max_lifetime: Duration,
    pub history: HistorySettings,
    /// The pool's manifest, when the site subscribed to one.
    pub remote: Option<RemoteSettings>,
    /// How often scratch dirs and old images are collected.
    pub gc_interval: Duration,
    pub on_shutdown: OnShutdown,
    /// This host's place in the fleet's spread (`splay`, the machine id and the instance).
    pub fleet: Splay,
    /// The slot ad carries this week's contribution (`[slot_ad] contribution`; off unless
    /// the site turns it on).
    pub advertise_contribution: bool,
}

/// The container engine and which of its containers are this daemon's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSettings {
    /// A `unix://` path or `tcp://`/`http://` URL.
    pub socket: String,
    /// The `pilotd.instance` label value: only containers carrying it are ever touched.
    pub instance: String,
    /// Deadline of one API request (not of a whole pull or a graceful stop).
    pub timeout: Duration,
}

/// Where the host probes look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSettings {
    pub utmp: PathBuf,
    pub dev: PathBuf,
    pub power_supply: PathBuf,
    /// Its filesystem's free space is the disk budget.
    pub scratch: PathBuf,
    pub proc: PathBuf,
    /// Process names that mean the owner is busy (from the policy).
    pub exclusive_processes: Vec<String>,
}

/// What every new worker is made of, besides the decision's resources and times.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSettings {
    pub instance: String,
    /// The configured reference (tag or digest form).
    pub image: String,
    pub max_starts_per_cycle: u32,
    pub idle_timeout: Duration,
    /// Values in the `[worker.env]` template language (`config::template`).
    pub env: BTreeMap<String, String>,
    pub token_file: Option<PathBuf>,
    pub token_mount: PathBuf,
    pub scratch_root: PathBuf,
    /// Per-worker copies of the token, readable by the worker's uid (`<state_dir>/tokens`).
    pub tokens_root: PathBuf,
    /// The machine's slot-ad directory (`<state_dir>/ad`), mounted read-only in workers.
    pub ad_dir: PathBuf,
    pub scratch_mount: PathBuf,
    /// How each worker's disk share holds: the owner's policy alone says (no manifest lays a
    /// choice over it); enforced unless it says "measured".
    pub disk_limit: DiskLimit,
    pub cvmfs: Option<PathBuf>,
    pub cap_add: Vec<String>,
    pub pids_limit: i64,
    /// Who workers run as (default uid 65532, never root unless the site says so).
    pub user: WorkerUser,
    /// Workers' root filesystem is read-only (they write to their scratch dir and tmpfs).
    pub read_only_rootfs: bool,
    /// The network workers join: the site's, or pilotd's own (`egress`).
    pub network: Option<String>,
    /// pilotd's own network and its filter, unless the site named a network.
    pub egress: Option<Filter>,
    pub pull_while_owner_present: bool,
    /// Delays the next start after workers that ran no job or could not start.
    pub backoff: Backoff,
}

impl WorkerSettings {
    /// The prefix of every worker (and scratch dir) name of this instance.
    pub fn name_prefix(&self) -> String {
        format!("pilotd-{}-", self.instance)
    }
}

/// Which images workers may run and how fresh they must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSettings {
    /// `[worker] allowed_images` patterns.
    pub allowed: Vec<String>,
    /// How often the registry is asked which digest the tag names.
    pub refresh: Duration,
    /// An image the registry has not confirmed for this long starts no worker.
    pub max_age: Duration,
    /// How a failed registry request is retried (`image::retry_backoff`, jittered for this
    /// host in the fleet's spread).
    pub retry: Backoff,
}

/// How the learned availability history is read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistorySettings {
    /// An hour counts as usually free when it was free at least this share of its watched time.
    pub free_threshold: f64,
    /// Cap `die_at` by the learned free stretch.
    pub predict_die_at: bool,
}

/// The pool's remote manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSettings {
    pub url: String,
    pub refresh: Duration,
    pub timeout: Duration,
    pub max_bytes: u64,
}

impl EngineSettings {
    /// The engine of pilotd.toml alone (the fail-safe needs no policy).
    pub fn of_site(site: &SiteConfig) -> EngineSettings {
        EngineSettings {
            socket: site.docker.socket.clone(),
            instance: site.docker.instance.get_ref().clone(),
            timeout: site.docker.timeout.0,
        }
    }
}

impl WorkerSettings {
    /// The worker template of pilotd.toml alone.
    pub fn of_site(site: &SiteConfig) -> WorkerSettings {
        let w = &site.worker;
        let egress = Filter::for_instance(
            site.docker.instance.get_ref(),
            w.egress_allow
                .iter()
                .filter_map(|a| Ipv4Net::parse(a.get_ref()).ok())
                .collect(),
        );
        WorkerSettings {
            instance: site.docker.instance.get_ref().clone(),
            image: w.image.get_ref().clone(),
            max_starts_per_cycle: w.max_starts_per_cycle,
            idle_timeout: w.idle_timeout.0,
            // The site's proxy keys join its env (braces doubled: the env is a template).
            env: w
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.get_ref().clone()))
                .chain(
                    w.proxy_env()
                        .into_iter()
                        .map(|(k, v)| (k, v.replace('{', "{{").replace('}', "}}"))),
                )
                .collect(),
            token_file: w.token_file.clone(),
            token_mount: w.token_mount.clone(),
            scratch_root: site.scratch(),
            tokens_root: site.state_dir.join("tokens"),
            // Workers see it at `worker::ad::MOUNT`; named here, where the settings are made,
            // so that no lower module is needed to know it.
            ad_dir: site.state_dir.join("ad"),
            scratch_mount: w.scratch_mount.clone(),
            disk_limit: DiskLimit::Enforced,
            cvmfs: w.cvmfs.clone(),
            cap_add: w.cap_add.clone(),
            pids_limit: w.pids_limit,
            user: w.worker_user(),
            read_only_rootfs: w.read_only_rootfs,
            network: Some(
                w.network
                    .as_ref()
                    .map(|n| n.get_ref().clone())
                    .unwrap_or_else(|| egress.network.clone()),
            ),
            egress: w.network.is_none().then_some(egress),
            pull_while_owner_present: w.pull_while_owner_present,
            backoff: Backoff::new(w.backoff_base.0, w.backoff_max.0),
        }
    }
}

impl Settings {
    /// The settings of a loaded configuration (pilotd.toml, or its defaults, and the policy)
    /// on this host: the one thing read here is the machine id (`machine_id`), which
    /// places the host in the fleet's spread.
    pub fn resolve(cfg: &Config) -> Settings {
        Settings::resolve_for(cfg, &machine_id())
    }

    /// The settings on the host with `machine_id` (pure).
    pub(crate) fn resolve_for(cfg: &Config, machine_id: &str) -> Settings {
        let site = &cfg.site;
        let fleet = Splay::of_host(
            site.splay.get_ref().0,
            machine_id,
            site.docker.instance.get_ref(),
        );
        let w = &site.worker;
        let scratch = site.scratch();
        Settings {
            policy: cfg.policy.clone(),
            interval: site.interval.0,
            state_dir: site.state_dir.clone(),
            control_socket: site.control_socket.clone(),
            page_port: site.page.port,
            engine: EngineSettings::of_site(site),
            probe: ProbeSettings {
                utmp: site.host.utmp.clone(),
                dev: site.host.dev.clone(),
                power_supply: site.host.power_supply.clone(),
                scratch: scratch.clone(),
                proc: "/proc".into(),
                exclusive_processes: cfg.policy.exclusive_processes.clone(),
            },
            worker: {
                let w = WorkerSettings::of_site(site);
                WorkerSettings {
                    disk_limit: cfg.policy.share.disk_limit,
                    backoff: fleet.backoff(w.backoff),
                    ..w
                }
            },
            image: ImageSettings {
                allowed: site.allowed_images(),
                refresh: w.refresh.0,
                max_age: w.max_image_age.0,
                retry: fleet.backoff(retry_backoff(w.refresh.0)),
            },
            max_lifetime: site.max_lifetime(),
            history: HistorySettings {
                free_threshold: site.history.free_threshold,
                predict_die_at: site.history.predict_die_at,
            },
            remote: site.remote.url.as_ref().map(|url| RemoteSettings {
                url: url.get_ref().clone(),
                refresh: site.remote.refresh.0,
                timeout: site.remote.timeout.0,
                max_bytes: site.remote.max_bytes,
            }),
            gc_interval: w.gc_interval.0,
            on_shutdown: w.on_shutdown,
            fleet,
            advertise_contribution: site.slot_ad.contribution(),
        }
    }
}

/// First retry delay after a failed registry request; doubles, capped at `refresh`.
const RETRY_FIRST: Duration = Duration::from_secs(30);

/// How registry requests are retried: doubling from 30 s (or `refresh`, when shorter), never
/// longer than `refresh`.
pub(crate) fn retry_backoff(refresh: Duration) -> Backoff {
    Backoff::new(RETRY_FIRST.min(refresh), refresh)
}

/// The machine's id (systemd's `/etc/machine-id`, else D-Bus's copy), which places the host
/// in the fleet's spread (`volunteer::splay`). Empty when neither can be read: the instance
/// name alone places it then (hosts sharing one spread the same way; said in docs/site.md).
pub(crate) fn machine_id() -> String {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_sites_proxy_reaches_the_workers_env() {
        let site: SiteConfig =
            toml::from_str("[worker]\nhttps_proxy = \"http://squid.example.org:3128\"\n").unwrap();
        let w = WorkerSettings::of_site(&site);
        assert_eq!(w.env["HTTPS_PROXY"], "http://squid.example.org:3128");
        assert_eq!(w.env["https_proxy"], "http://squid.example.org:3128");
    }

    #[test]
    fn pilotd_toml_resolves_once_into_plain_settings() {
        let site: SiteConfig = toml::from_str(
            "state_dir = \"/s\"\ninterval = \"10s\"\n[docker]\ninstance = \"lab\"\n\
             [worker]\nbackoff_base = \"2m\"\nmax_lifetime = \"12h\"\n[worker.env]\nN = \"{cpus}\"\n\
             [remote]\nurl = \"https://pool.example.org/m.toml\"\n",
        )
        .unwrap();
        let cfg = Config {
            site,
            site_path: None,
            policy: Policy::defaults(pilotd_core::zone::Zone::utc()),
            policy_path: Path::new("p.toml").into(),
        };
        let s = Settings::resolve(&cfg);
        assert_eq!(s.interval, Duration::from_secs(10));
        assert_eq!(s.engine.instance, "lab");
        assert_eq!(s.worker.instance, "lab");
        assert_eq!(s.worker.name_prefix(), "pilotd-lab-");
        assert_eq!(s.worker.scratch_root, PathBuf::from("/s/scratch"));
        assert_eq!(s.probe.scratch, s.worker.scratch_root);
        assert_eq!(s.worker.env["N"], "{cpus}");
        assert_eq!(s.worker.backoff.first, Duration::from_secs(120));
        assert_eq!(s.max_lifetime, Duration::from_secs(12 * 3600));
        assert_eq!(
            s.remote.map(|r| r.url).as_deref(),
            Some("https://pool.example.org/m.toml")
        );
    }
}
