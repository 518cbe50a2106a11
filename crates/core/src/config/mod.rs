//! The two files pilotd reads, `pilotd.toml` and `policy.toml`, loaded and diagnosed.

pub mod diag;
pub(crate) mod ownership;
pub mod policy;
pub mod site;
pub mod template;
pub mod units;

pub use diag::{Diagnostic, Diagnostics};
pub use policy::{Evict, MeteredRule, Policy, PolicySpans};
pub use site::{Mode, SiteConfig};

use crate::zone::Zone;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}\n  hint: {hint}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
        hint: String,
    },
    #[error("{}", diag::render(.0).trim_end())]
    Invalid(Vec<Diagnostic>),
    #[error("{} is larger than {limit} bytes, which no pilotd.toml or policy is\n  hint: check the path; these files are a few KiB", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("refusing to use {}: {reason}\n  hint: {hint}", path.display())]
    Insecure {
        path: PathBuf,
        reason: String,
        hint: String,
    },
}

/// Everything a command needs: both files, validated, and where they came from.
#[derive(Debug, Clone)]
pub struct Config {
    pub site: SiteConfig,
    /// None when the built-in defaults are in use (no pilotd.toml).
    pub site_path: Option<PathBuf>,
    pub policy: Policy,
    pub policy_path: PathBuf,
}

/// The machine a policy's shares are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    pub cpus: u32,
    pub memory_kib: u64,
    /// NVIDIA GPUs (device nodes `/dev/nvidiaN`); None when not known (a replayed snapshot).
    pub gpus: Option<u32>,
}

/// How `load` treats a missing pilotd.toml.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteFile {
    /// `run`: the file must exist.
    Required,
    /// `check`, `plan`, ...: fall back to built-in defaults when the file is absent.
    Optional,
}

/// What the modes a build holds check of pilotd.toml beyond the core's keys: a mode's own
/// table (`[kubernetes]`) belongs to that mode's crate, which the core cannot name. The binary
/// hands in the checks of the modes it was built with, so that a file is still checked whole
/// and every problem is reported at once, each at its FILE:LINE:COL.
pub type ModeTables = [fn(&SiteConfig, &str, &mut Diagnostics)];

/// The two files pilotd reads: the site's `pilotd.toml` and the owner's `policy.toml`. Loading
/// reads them; parsing and validation are pure and report every problem at once, each as
/// `FILE:LINE:COL` with a hint (`diag`). The typed leaves (`units`: durations, sizes, shares,
/// days) and the `[worker.env]` template language (`template`) live here because the files are
/// checked against them.
///
/// This is where file structure ends: spans, defaults and tables stay here. Each mode resolves
/// what it needs into plain settings once (`volunteer::settings`, `kubernetes::settings`).
///
/// Loads pilotd.toml (or the defaults), then the policy it names (or `policy_override`).
/// In kubernetes mode the owner policy is not used and not read.
pub fn load(
    site_path: &Path,
    site_file: SiteFile,
    modes: &ModeTables,
    policy_override: Option<&Path>,
    machine: Option<Machine>,
) -> Result<Config, ConfigError> {
    let (site, site_path) = load_site(site_path, site_file, modes)?;
    let policy_path = policy_override
        .map(Path::to_path_buf)
        .unwrap_or_else(|| site.policy.clone());
    let policy = if site.mode == Mode::Kubernetes && policy_override.is_none() {
        Policy::defaults(crate::zone::Zone::utc())
    } else {
        load_policy(&policy_path, &site, machine)?
    };
    Ok(Config {
        site,
        site_path,
        policy,
        policy_path,
    })
}

/// The largest pilotd.toml or policy read: real ones are a few KiB; a 48 MB policy once took
/// 1.2 GB of memory to parse.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads a whole text file of at most `limit` bytes, without reading past the limit.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, ConfigError> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit + 1).read_to_string(&mut text))
        .map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            source: e,
            hint: String::new(),
        })?;
    if text.len() as u64 > limit {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(text)
}

/// Reads pilotd.toml, or the built-in defaults when it is optional and absent.
pub fn load_site(
    site_path: &Path,
    site_file: SiteFile,
    modes: &ModeTables,
) -> Result<(SiteConfig, Option<PathBuf>), ConfigError> {
    match read_bounded(site_path, MAX_FILE_BYTES) {
        Ok(src) => {
            let site = parse_site_with(site_path, &src, modes)?;
            // A root daemon takes orders (images, mounts, the token) from these files only
            // when nobody but root can change them.
            if nix::unistd::geteuid().is_root() {
                ownership::only_root_writes(site_path, "pilotd.toml", "644")?;
                if site.mode == Mode::Volunteer
                    && let Some(token) = &site.worker.token_file
                {
                    ownership::secret(token)?;
                }
            }
            Ok((site, Some(site_path.to_path_buf())))
        }
        Err(ConfigError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound && site_file == SiteFile::Optional =>
        {
            Ok((SiteConfig::defaults(), None))
        }
        Err(ConfigError::Read { path, source, .. }) => Err(ConfigError::Read {
            path,
            source,
            hint: "create it (see examples/ in the source, or /usr/share/pilotd), or pass -c FILE"
                .into(),
        }),
        Err(e) => Err(e),
    }
}

/// pilotd.toml's core keys, parsed and checked; no mode's own table is looked into.
pub fn parse_site(path: &Path, src: &str) -> Result<SiteConfig, ConfigError> {
    parse_site_with(path, src, &[])
}

/// pilotd.toml, parsed and checked whole: the core's keys, then each mode's table.
pub fn parse_site_with(
    path: &Path,
    src: &str,
    modes: &ModeTables,
) -> Result<SiteConfig, ConfigError> {
    let mut d = Diagnostics::new(path, src);
    let site = toml::from_str::<SiteConfig>(src);
    match &site {
        Ok(site) => {
            site.validate(&mut d);
            for check in modes {
                check(site, src, &mut d);
            }
        }
        Err(e) => d.toml_error(e, "see the commented examples/pilotd.toml for every key"),
    }
    verdict(site.ok(), d)
}

/// The file's value when nothing was diagnosed (and it parsed), else every diagnostic.
fn verdict<T>(value: Option<T>, d: Diagnostics) -> Result<T, ConfigError> {
    match value {
        Some(v) if d.is_empty() => Ok(v),
        _ => Err(ConfigError::Invalid(d.into_vec())),
    }
}

/// Reads and validates the owner's policy, refusing an insecure file when running as root.
pub(crate) fn load_policy(
    path: &Path,
    site: &SiteConfig,
    machine: Option<Machine>,
) -> Result<Policy, ConfigError> {
    let src = read_bounded(path, MAX_FILE_BYTES).map_err(|e| match e {
        ConfigError::Read { path, source, .. } => ConfigError::Read {
            path,
            source,
            hint: "write one with `pilotd init`, or pass --policy FILE (examples are in policies/)"
                .into(),
        },
        other => other,
    })?;
    if nix::unistd::geteuid().is_root() {
        ownership::only_root_writes(path, "the owner's policy", "644")?;
    }
    parse_policy(path, &src, site, machine, local_timezone())
}

/// Parses a policy, checks it on its own, against pilotd.toml, and against the machine.
pub fn parse_policy(
    path: &Path,
    src: &str,
    site: &SiteConfig,
    machine: Option<Machine>,
    local_tz: Zone,
) -> Result<Policy, ConfigError> {
    let mut d = Diagnostics::new(path, src);
    let raw = match toml::from_str::<policy::RawPolicy>(src) {
        Ok(r) => r,
        Err(e) => {
            d.toml_error(&e, "see the commented policies/default.toml for every key");
            return Err(ConfigError::Invalid(d.into_vec()));
        }
    };
    let (p, spans) = policy::validate(raw, local_tz, &mut d);
    if p.longest_job > site.max_lifetime() {
        d.error(
            spans.longest_job.clone(),
            format!(
                "longest_job {} is longer than the workers' max_lifetime {} in pilotd.toml",
                units::format_duration(p.longest_job),
                units::format_duration(site.max_lifetime())
            ),
            "shorten longest_job, or raise [worker] max_lifetime in pilotd.toml",
        );
    }
    if let Some(m) = machine {
        check_against_machine(&p, &spans, m, &mut d);
    }
    verdict(Some(p), d)
}

/// A share larger than the machine is an error the owner should see, not a silent clamp.
pub(crate) fn check_against_machine(
    p: &Policy,
    spans: &PolicySpans,
    m: Machine,
    d: &mut Diagnostics,
) {
    let cpus = p.share.cpus.of(u64::from(m.cpus));
    if cpus > u64::from(m.cpus) {
        d.error(
            spans.cpus.clone(),
            format!(
                "cpus share {cpus} is more than this machine's {} CPUs",
                m.cpus
            ),
            "share at most the machine's CPUs, or write a percentage like \"50%\"",
        );
    }
    if let Some(gpus) = m.gpus
        && p.share.gpus > gpus
    {
        d.error(
            spans.gpus.clone(),
            format!(
                "gpus = {} is more than this machine's {gpus} GPU(s) (counted as /dev/nvidiaN devices)",
                p.share.gpus
            ),
            "share at most the GPUs this machine has, or gpus = 0",
        );
    }
    let total = m.memory_kib.saturating_mul(1024);
    let mem = p.share.memory.of(total);
    if mem > total {
        d.error(
            spans.memory.clone(),
            format!(
                "memory share {} is more than this machine's {}",
                units::format_size(mem),
                units::format_size(total)
            ),
            "share less memory, or write a percentage like \"50%\"",
        );
    }
}

/// The system's local time zone: `TZ`, then /etc/timezone, then the /etc/localtime link;
/// UTC when none names a known zone.
pub fn local_timezone() -> Zone {
    let from_env = std::env::var("TZ")
        .ok()
        .map(|s| s.trim_start_matches(':').to_string());
    let from_file = || {
        std::fs::read_to_string("/etc/timezone")
            .ok()
            .map(|s| s.trim().to_string())
    };
    let from_link = || {
        std::fs::read_link("/etc/localtime").ok().and_then(|p| {
            let s = p.to_string_lossy().to_string();
            s.split_once("zoneinfo/").map(|(_, z)| z.to_string())
        })
    };
    [from_env, from_file(), from_link()]
        .into_iter()
        .flatten()
        .find_map(|name| name.parse::<Zone>().ok())
        .unwrap_or(crate::zone::Zone::utc())
}
