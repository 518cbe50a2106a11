//! The pilot's configuration, read from `PILOT_*` environment variables.
//!
//! Parsing is pure: the caller passes the environment in as a map, so tests need no process
//! environment and no clock. Every problem is reported (not just the first), each naming the
//! variable, what was wrong and what would be accepted; the pilot exits 20 on any of them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Url;

/// One remote condor configuration file to fetch, with its optional sha256 pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSource {
    pub url: Url,
    /// Lower-case hex sha256 the body must have, when pinned.
    pub sha256: Option<String>,
}

/// Resources the slot advertises. `None` leaves the value to condor's own detection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotResources {
    pub cpus: Option<u32>,
    pub memory_mib: Option<u64>,
    pub disk_kib: Option<u64>,
    pub gpus: Option<u32>,
}

/// Everything the pilot was told to do, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub config_sources: Vec<ConfigSource>,
    pub token_file: PathBuf,
    pub token_dir: PathBuf,
    pub idle_timeout: Duration,
    pub accept_until: Option<DateTime<Utc>>,
    pub die_at: Option<DateTime<Utc>>,
    pub resources: SlotResources,
    pub start_extra: Option<String>,
    /// Hours the host is usually free from now (pilotd's learned history,
    /// `PILOT_FREE_HOURS`), advertised so the pool can prefer long-free machines.
    pub free_hours: Option<u64>,
    /// Where the pilot writes its condor configuration files (fetched pool files and
    /// `99-pilot.conf`).
    pub condor_config_dir: PathBuf,
    /// `PILOT_LOCAL_DIR`: condor runs from this directory as the container's own user (see
    /// [`LocalDir`]); `None` leaves condor's layout to the image (condor as root).
    pub local_dir: Option<LocalDir>,
    pub scratch: PathBuf,
    pub selftest_cmd: Option<String>,
    pub selftest_timeout: Duration,
    pub allow_http: bool,
    pub fetch_timeout: Duration,
    pub fetch_max_bytes: u64,
    pub graceful_timeout: Duration,
    pub fast_timeout: Duration,
    pub idle_grace: Duration,
    pub die_grace: Duration,
    pub condor_master: PathBuf,
    pub condor_config_val: PathBuf,
    /// `PILOT_AD_FILE`: pilotd's slot-ad attributes (see `adfile`); `None`: none.
    pub ad_file: Option<PathBuf>,
    /// `PILOT_AD_PERIOD`: how often the startd cron job re-reads the ad file and re-probes
    /// CVMFS.
    pub ad_period: Duration,
    /// `PILOT_REPORT_PERIOD`: how often, while condor runs, the job report is printed again
    /// if it changed (see `startd_history::Progress`).
    pub report_period: Duration,
    pub cvmfs: CvmfsSettings,
}

/// `PILOT_CVMFS_*`: which CVMFS repositories to probe and advertise, as the probe takes them
/// (see `cvmfs`).
pub type CvmfsSettings = crate::cvmfs::Probe;

/// Condor run unprivileged from one directory the worker owns, as glidein pilots run it: the
/// pilot writes a top-level condor configuration there that includes the image's own
/// (`base_config`) and adds `config_dir` as the last local config dir, and points condor's
/// LOCAL_DIR, LOG, SPOOL, LOCK and RUN below it. Nothing of the image needs to be writable and
/// condor needs no capability: it never switches users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDir {
    pub root: PathBuf,
    /// The image's top-level condor configuration (`CONDOR_CONFIG` as the container got it,
    /// else `/etc/condor/condor_config`).
    pub base_config: PathBuf,
}

impl LocalDir {
    /// The top-level configuration file the pilot writes; condor's programs get it as
    /// `CONDOR_CONFIG`.
    pub fn condor_config(&self) -> PathBuf {
        self.root.join("condor_config")
    }
    pub fn log(&self) -> PathBuf {
        self.root.join("log")
    }
    pub fn spool(&self) -> PathBuf {
        self.root.join("spool")
    }
    pub fn lock(&self) -> PathBuf {
        self.root.join("lock")
    }
    pub fn run(&self) -> PathBuf {
        self.root.join("run")
    }
}

impl Settings {
    /// The longest job the owner accepts: a job matched just before `accept_until` must be
    /// able to finish before `die_at` (DESIGN: accept_until = die_at − longest_job).
    pub fn longest_job(&self) -> Option<Duration> {
        match (self.accept_until, self.die_at) {
            (Some(accept), Some(die)) => (die - accept).to_std().ok(),
            _ => None,
        }
    }
}

/// One variable that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("{var} is required but not set: {hint}")]
    Missing {
        var: &'static str,
        hint: &'static str,
    },
    #[error("{var}={value:?} is not usable: {reason}")]
    Invalid {
        var: &'static str,
        value: String,
        reason: String,
    },
}

/// All problems found in the environment, reported together so one run shows them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingErrors(pub Vec<SettingError>);

impl fmt::Display for SettingErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("; "))
    }
}

impl std::error::Error for SettingErrors {}

/// Defaults, in one place so `--help` and the code agree.
pub mod defaults {
    pub const IDLE_TIMEOUT: &str = "20m";
    pub const CONDOR_CONFIG_DIR: &str = "/etc/condor/config.d";
    pub const TOKEN_DIR: &str = "/etc/condor/tokens.d";
    pub const SCRATCH: &str = "/var/lib/condor/execute";
    pub const BASE_CONDOR_CONFIG: &str = "/etc/condor/condor_config";
    pub const SELFTEST_TIMEOUT: &str = "60s";
    pub const FETCH_TIMEOUT: &str = "2m";
    pub const FETCH_MAX_BYTES: u64 = 1024 * 1024;
    pub const GRACEFUL_TIMEOUT: &str = "5m";
    pub const FAST_TIMEOUT: &str = "30s";
    pub const IDLE_GRACE: &str = "10m";
    pub const DIE_GRACE: &str = "5m";
    pub const CONDOR_MASTER: &str = "condor_master";
    pub const CONDOR_CONFIG_VAL: &str = "condor_config_val";
    pub const AD_PERIOD: &str = "60";
    pub const REPORT_PERIOD: &str = "30";
    pub const CVMFS_DIR: &str = "/cvmfs";
    pub const CVMFS_TIMEOUT: &str = "10";
}

/// Collects errors while reading variables so every problem is reported at once.
struct Reader<'a> {
    env: &'a BTreeMap<String, String>,
    errors: Vec<SettingError>,
}

impl<'a> Reader<'a> {
    /// A set, non-blank value; an empty value counts as unset so templated env files can
    /// leave a field blank.
    fn get(&self, var: &str) -> Option<&'a str> {
        self.env
            .get(var)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn invalid(&mut self, var: &'static str, value: &str, reason: impl Into<String>) {
        self.errors.push(SettingError::Invalid {
            var,
            value: value.to_owned(),
            reason: reason.into(),
        });
    }

    fn required(&mut self, var: &'static str, hint: &'static str) -> Option<&'a str> {
        let value = self.get(var);
        if value.is_none() {
            self.errors.push(SettingError::Missing { var, hint });
        }
        value
    }

    fn duration(&mut self, var: &'static str, default: &str) -> Duration {
        let raw = self.get(var).unwrap_or(default);
        let why = match parse_duration(raw) {
            Ok(d) if !d.is_zero() => return d,
            Ok(_) => "must be longer than zero".to_owned(),
            Err(reason) => reason,
        };
        self.invalid(var, raw, why);
        Duration::from_secs(1)
    }

    fn instant(&mut self, var: &'static str) -> Option<DateTime<Utc>> {
        let raw = self.get(var)?;
        parse_instant(raw)
            .map_err(|reason| self.invalid(var, raw, reason))
            .ok()
    }

    fn count<T>(&mut self, var: &'static str, min: T) -> Option<T>
    where
        T: std::str::FromStr + PartialOrd + fmt::Display + Copy,
    {
        let raw = self.get(var)?;
        let why = match raw.parse::<T>() {
            Ok(n) if n >= min => return Some(n),
            Ok(_) => format!("must be at least {min}"),
            Err(_) => "expected a whole number".to_owned(),
        };
        self.invalid(var, raw, why);
        None
    }

    fn path(&mut self, var: &'static str, default: &str) -> PathBuf {
        let raw = self.get(var).unwrap_or(default);
        let path = PathBuf::from(raw);
        if !path.is_absolute() {
            self.invalid(var, raw, "expected an absolute path");
        }
        path
    }

    /// A path that goes into condor's configuration as a cron job argument: absolute, and
    /// only characters that need no quoting there and that condor does not expand (no
    /// spaces, quotes or `$`).
    fn plain_path(&mut self, var: &'static str, default: Option<&str>) -> Option<PathBuf> {
        let raw = self.get(var).or(default)?;
        if !is_plain_path(raw) {
            self.invalid(
                var,
                raw,
                "expected an absolute path of letters, digits and / . _ - + @ : , = only",
            );
        }
        Some(PathBuf::from(raw))
    }

    /// A comma list of CVMFS repository names.
    fn repos(&mut self, var: &'static str) -> Vec<String> {
        let Some(raw) = self.get(var) else {
            return Vec::new();
        };
        let mut out: Vec<String> = Vec::new();
        for name in raw.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !crate::cvmfs::valid_repo_name(name) {
                self.invalid(
                    var,
                    raw,
                    format!("{name:?} is not a repository name (like oasis.opensciencegrid.org)"),
                );
            } else if !out.iter().any(|n| n == name) {
                out.push(name.to_owned());
            }
        }
        out
    }

    fn flag(&mut self, var: &'static str) -> bool {
        match self.get(var) {
            None | Some("0") | Some("false") | Some("no") => false,
            Some("1") | Some("true") | Some("yes") => true,
            Some(other) => {
                self.invalid(var, other, "expected 1 or 0");
                false
            }
        }
    }
}

/// An absolute path that can go into condor's configuration unquoted and unexpanded:
/// letters, digits and `/ . _ - + @ : , =` only (no spaces, quotes or `$`).
pub fn is_plain_path(raw: &str) -> bool {
    raw.starts_with('/')
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+@:,=".contains(&b))
}

/// A duration as whole seconds ("300") or humantime ("5m", "1h 30m").
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    durations::parse(raw)
        .map_err(|e| format!("expected seconds (\"300\") or a duration like \"5m\" ({e})"))
}

/// An instant as RFC 3339 ("2026-12-01T21:30:00Z") or unix seconds ("1796160600").
pub fn parse_instant(raw: &str) -> Result<DateTime<Utc>, String> {
    let raw = raw.trim();
    if let Ok(secs) = raw.parse::<i64>() {
        return DateTime::from_timestamp(secs, 0)
            .ok_or_else(|| "unix seconds out of range".to_owned());
    }
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("expected RFC 3339 (2026-12-01T21:30:00Z) or unix seconds ({e})"))
}

fn parse_sources(r: &mut Reader<'_>, allow_http: bool) -> Vec<ConfigSource> {
    let Some(raw_urls) = r.required(
        "PILOT_CONFIG_URLS",
        "give the comma-separated https URLs of the pool's condor configuration",
    ) else {
        return Vec::new();
    };
    let pins: Option<Vec<&str>> = r
        .get("PILOT_CONFIG_SHA256")
        .map(|p| p.split(',').map(str::trim).collect());
    let urls: Vec<&str> = raw_urls.split(',').map(str::trim).collect();
    if let Some(pins) = &pins
        && pins.len() != urls.len()
    {
        let raw = r.get("PILOT_CONFIG_SHA256").unwrap_or_default();
        r.invalid(
            "PILOT_CONFIG_SHA256",
            raw,
            format!(
                "has {} entries but PILOT_CONFIG_URLS has {}; give one pin per URL, in the same order (leave an entry empty for no pin)",
                pins.len(),
                urls.len()
            ),
        );
    }
    let mut sources = Vec::new();
    for (i, raw) in urls.iter().enumerate() {
        if raw.is_empty() {
            r.invalid("PILOT_CONFIG_URLS", raw_urls, "contains an empty entry");
            continue;
        }
        let checked = Url::parse(raw)
            .map_err(|e| format!("not a URL ({e})"))
            .and_then(|url| {
                match url.scheme() {
            "https" => Ok(url),
            "http" if allow_http => Ok(url),
            "http" => Err(
                "plain http is refused; use https, or set PILOT_ALLOW_HTTP=1 (e.g. for loopback)"
                    .to_owned(),
            ),
            other => Err(format!("scheme {other:?} is not supported; use https")),
            }
            });
        let url = match checked {
            Ok(url) => url,
            Err(why) => {
                r.invalid("PILOT_CONFIG_URLS", raw, why);
                continue;
            }
        };
        let pin = pins
            .as_ref()
            .and_then(|p| p.get(i).copied())
            .filter(|p| !p.is_empty());
        let sha256 = pin.and_then(|p| {
            if p.len() == 64 && p.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Some(p.to_ascii_lowercase());
            }
            r.invalid(
                "PILOT_CONFIG_SHA256",
                p,
                "expected 64 hex digits (a sha256 digest)",
            );
            None
        });
        sources.push(ConfigSource { url, sha256 });
    }
    sources
}

impl Settings {
    /// Reads and validates the pilot's settings from an environment map.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Settings, SettingErrors> {
        let mut r = Reader {
            env,
            errors: Vec::new(),
        };
        let allow_http = r.flag("PILOT_ALLOW_HTTP");
        let config_sources = parse_sources(&mut r, allow_http);
        let token_file = match r.required(
            "PILOT_TOKEN_FILE",
            "give the path of the pool token file (mounted read-only)",
        ) {
            Some(_) => r.path("PILOT_TOKEN_FILE", ""),
            None => PathBuf::new(),
        };
        // With PILOT_LOCAL_DIR, everything condor writes defaults to below it.
        let local_root = r
            .get("PILOT_LOCAL_DIR")
            .map(|_| r.path("PILOT_LOCAL_DIR", ""));
        let below = |name: &str, default: &str| -> String {
            let under = |root: &PathBuf| root.join(name).display().to_string();
            local_root.as_ref().map_or(default.to_owned(), under)
        };
        let token_dir = r.path("PILOT_TOKEN_DIR", &below("tokens.d", defaults::TOKEN_DIR));
        let idle_timeout = r.duration("PILOT_IDLE_TIMEOUT", defaults::IDLE_TIMEOUT);
        let accept_until = r.instant("PILOT_ACCEPT_UNTIL");
        let die_at = r.instant("PILOT_DIE_AT");
        if let (Some(accept), Some(die)) = (accept_until, die_at)
            && accept > die
        {
            let raw = r.get("PILOT_ACCEPT_UNTIL").unwrap_or_default();
            r.invalid(
                "PILOT_ACCEPT_UNTIL",
                raw,
                format!("is after PILOT_DIE_AT ({die}); a job accepted then could never finish"),
            );
        }
        let resources = SlotResources {
            cpus: r.count("PILOT_CPUS", 1u32),
            memory_mib: r.count("PILOT_MEMORY_MIB", 1u64),
            disk_kib: r.count("PILOT_DISK_KIB", 1u64),
            gpus: r.count("PILOT_GPUS", 0u32),
        };
        let start_extra = r.get("PILOT_START_EXTRA").map(str::to_owned);
        let free_hours = r.count("PILOT_FREE_HOURS", 0u64);
        if let Some(extra) = &start_extra
            && (extra.contains('\n') || extra.contains('\r') || extra.ends_with('\\'))
        {
            // A line break would let the value inject arbitrary condor configuration.
            r.invalid(
                "PILOT_START_EXTRA",
                extra,
                "must be one ClassAd expression on one line",
            );
        }
        let condor_config_dir = r.path(
            "PILOT_CONDOR_CONFIG_DIR",
            &below("config.d", defaults::CONDOR_CONFIG_DIR),
        );
        let scratch = r.path("PILOT_SCRATCH", &below("execute", defaults::SCRATCH));
        let local_dir = local_root.map(|root| {
            // The image's CONDOR_CONFIG, unless it already is the pilot's own file (a pilot
            // started again in the same container must not include itself).
            let own = root.join("condor_config");
            let base_config = r
                .get("CONDOR_CONFIG")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute() && *p != own)
                .unwrap_or_else(|| PathBuf::from(defaults::BASE_CONDOR_CONFIG));
            LocalDir { root, base_config }
        });
        if let Some(local) = &local_dir {
            // The startd empties EXECUTE when it starts: condor's own files must not be in it.
            if local.root.starts_with(&scratch) {
                let raw = r.get("PILOT_LOCAL_DIR").unwrap_or_default();
                r.invalid(
                    "PILOT_LOCAL_DIR",
                    raw,
                    format!(
                        "is inside PILOT_SCRATCH ({}), which the startd empties when it starts; \
                         use sibling directories, e.g. PILOT_LOCAL_DIR=/pilot/condor and \
                         PILOT_SCRATCH=/pilot/execute",
                        scratch.display()
                    ),
                );
            }
        }
        let settings = Settings {
            config_sources,
            token_file,
            token_dir,
            idle_timeout,
            accept_until,
            die_at,
            resources,
            start_extra,
            free_hours,
            condor_config_dir,
            local_dir,
            scratch,
            selftest_cmd: r.get("PILOT_SELFTEST_CMD").map(str::to_owned),
            selftest_timeout: r.duration("PILOT_SELFTEST_TIMEOUT", defaults::SELFTEST_TIMEOUT),
            allow_http,
            fetch_timeout: r.duration("PILOT_FETCH_TIMEOUT", defaults::FETCH_TIMEOUT),
            fetch_max_bytes: r
                .count("PILOT_FETCH_MAX_BYTES", 1u64)
                .unwrap_or(defaults::FETCH_MAX_BYTES),
            graceful_timeout: r.duration("PILOT_GRACEFUL_TIMEOUT", defaults::GRACEFUL_TIMEOUT),
            fast_timeout: r.duration("PILOT_FAST_TIMEOUT", defaults::FAST_TIMEOUT),
            idle_grace: r.duration("PILOT_IDLE_GRACE", defaults::IDLE_GRACE),
            die_grace: r.duration("PILOT_DIE_GRACE", defaults::DIE_GRACE),
            condor_master: r
                .get("PILOT_CONDOR_MASTER")
                .unwrap_or(defaults::CONDOR_MASTER)
                .into(),
            condor_config_val: r
                .get("PILOT_CONDOR_CONFIG_VAL")
                .unwrap_or(defaults::CONDOR_CONFIG_VAL)
                .into(),
            ad_file: r.plain_path("PILOT_AD_FILE", None),
            ad_period: r.duration("PILOT_AD_PERIOD", defaults::AD_PERIOD),
            report_period: r.duration("PILOT_REPORT_PERIOD", defaults::REPORT_PERIOD),
            cvmfs: CvmfsSettings {
                dir: r
                    .plain_path("PILOT_CVMFS_DIR", Some(defaults::CVMFS_DIR))
                    .unwrap_or_default(),
                repos: r.repos("PILOT_CVMFS_REPOS"),
                required: r.repos("PILOT_CVMFS_REQUIRED"),
                timeout: r.duration("PILOT_CVMFS_TIMEOUT", defaults::CVMFS_TIMEOUT),
            },
        };
        if !r.errors.is_empty() {
            return Err(SettingErrors(r.errors));
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn minimal() -> Vec<(&'static str, &'static str)> {
        vec![
            ("PILOT_CONFIG_URLS", "https://config.example.org/pool.conf"),
            ("PILOT_TOKEN_FILE", "/etc/pilotd/pool.token"),
        ]
    }

    #[test]
    fn minimal_environment_gets_defaults() {
        let s = Settings::from_env(&env(&minimal())).unwrap();
        assert_eq!(s.idle_timeout, Duration::from_secs(1200));
        assert_eq!(s.condor_config_dir, PathBuf::from("/etc/condor/config.d"));
        assert_eq!(s.resources, SlotResources::default());
        assert!(!s.allow_http);
        assert_eq!(s.config_sources.len(), 1);
        assert_eq!(s.longest_job(), None);
    }

    #[test]
    fn durations_accept_seconds_and_humantime() {
        assert_eq!(parse_duration("300"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5").is_err());
    }

    #[test]
    fn instants_accept_rfc3339_and_unix_seconds() {
        let a = parse_instant("2026-12-01T21:30:00Z").unwrap();
        let b = parse_instant("1796160600").unwrap();
        assert_eq!(a, b);
        assert_eq!(
            parse_instant("2026-12-01T22:30:00+01:00").unwrap(),
            a,
            "offsets are honoured"
        );
        assert!(parse_instant("tomorrow").is_err());
    }

    #[test]
    fn every_problem_is_reported_with_its_variable() {
        let e = Settings::from_env(&env(&[
            ("PILOT_IDLE_TIMEOUT", "soon"),
            ("PILOT_CPUS", "0"),
            ("PILOT_MEMORY_MIB", "lots"),
            ("PILOT_DIE_AT", "yesterday"),
            ("PILOT_SCRATCH", "relative/dir"),
            ("PILOT_ALLOW_HTTP", "maybe"),
        ]))
        .unwrap_err();
        let text = e.to_string();
        for var in [
            "PILOT_CONFIG_URLS",
            "PILOT_TOKEN_FILE",
            "PILOT_IDLE_TIMEOUT",
            "PILOT_CPUS",
            "PILOT_MEMORY_MIB",
            "PILOT_DIE_AT",
            "PILOT_SCRATCH",
            "PILOT_ALLOW_HTTP",
        ] {
            assert!(text.contains(var), "{var} missing from: {text}");
        }
        assert_eq!(e.0.len(), 8);
    }

    #[test]
    fn plain_http_needs_the_explicit_switch() {
        let mut vars = vec![
            ("PILOT_CONFIG_URLS", "http://127.0.0.1:8080/pool.conf"),
            ("PILOT_TOKEN_FILE", "/t"),
        ];
        let e = Settings::from_env(&env(&vars)).unwrap_err();
        assert!(e.to_string().contains("PILOT_ALLOW_HTTP=1"), "{e}");
        vars.push(("PILOT_ALLOW_HTTP", "1"));
        assert!(Settings::from_env(&env(&vars)).is_ok());
        let ftp = env(&[
            ("PILOT_CONFIG_URLS", "ftp://x/y"),
            ("PILOT_TOKEN_FILE", "/t"),
        ]);
        assert!(Settings::from_env(&ftp).is_err());
    }

    #[test]
    fn pins_are_per_url_and_checked() {
        let pin = "AB".repeat(32);
        let mut vars = vec![
            ("PILOT_CONFIG_URLS", "https://a/1.conf, https://a/2.conf"),
            ("PILOT_TOKEN_FILE", "/t"),
        ];
        let pins = format!(",{pin}");
        vars.push(("PILOT_CONFIG_SHA256", &pins));
        let s = Settings::from_env(&env(&vars)).unwrap();
        assert_eq!(s.config_sources[0].sha256, None);
        assert_eq!(
            s.config_sources[1].sha256.as_deref(),
            Some(pin.to_ascii_lowercase().as_str())
        );

        vars.pop();
        vars.push(("PILOT_CONFIG_SHA256", "abc"));
        let e = Settings::from_env(&env(&vars)).unwrap_err();
        assert!(e.to_string().contains("one pin per URL"), "{e}");
    }

    #[test]
    fn accept_until_after_die_at_is_refused_and_longest_job_is_derived() {
        let mut vars = minimal();
        vars.push(("PILOT_ACCEPT_UNTIL", "2026-12-01T20:00:00Z"));
        vars.push(("PILOT_DIE_AT", "2026-12-01T22:00:00Z"));
        let s = Settings::from_env(&env(&vars)).unwrap();
        assert_eq!(s.longest_job(), Some(Duration::from_secs(7200)));

        let mut bad = minimal();
        bad.push(("PILOT_ACCEPT_UNTIL", "2026-12-01T23:00:00Z"));
        bad.push(("PILOT_DIE_AT", "2026-12-01T22:00:00Z"));
        assert!(Settings::from_env(&env(&bad)).is_err());
    }

    #[test]
    fn start_extra_cannot_inject_configuration_lines() {
        let mut vars = minimal();
        vars.push(("PILOT_START_EXTRA", "TARGET.Owner == \"x\"\nSTART = True"));
        let e = Settings::from_env(&env(&vars)).unwrap_err();
        assert!(e.to_string().contains("PILOT_START_EXTRA"));
    }

    #[test]
    fn ad_file_and_cvmfs_settings_are_read_and_checked() {
        let s = Settings::from_env(&env(&minimal())).unwrap();
        assert_eq!(s.ad_file, None);
        assert_eq!(s.ad_period, Duration::from_secs(60));
        assert_eq!(s.report_period, Duration::from_secs(30));
        assert_eq!(s.cvmfs.dir, PathBuf::from("/cvmfs"));
        assert!(s.cvmfs.repos.is_empty() && s.cvmfs.required.is_empty());
        assert_eq!(s.cvmfs.timeout, Duration::from_secs(10));

        let mut vars = minimal();
        vars.extend([
            ("PILOT_AD_FILE", "/pilotd/ads/pilotd.ad"),
            ("PILOT_AD_PERIOD", "5"),
            ("PILOT_CVMFS_DIR", "/mnt/cvmfs"),
            (
                "PILOT_CVMFS_REPOS",
                "oasis.opensciencegrid.org, cms.cern.ch,,cms.cern.ch",
            ),
            ("PILOT_CVMFS_REQUIRED", "oasis.opensciencegrid.org"),
            ("PILOT_CVMFS_TIMEOUT", "3s"),
        ]);
        let s = Settings::from_env(&env(&vars)).unwrap();
        assert_eq!(s.ad_file, Some(PathBuf::from("/pilotd/ads/pilotd.ad")));
        assert_eq!(s.ad_period, Duration::from_secs(5));
        assert_eq!(
            s.cvmfs.repos,
            vec!["oasis.opensciencegrid.org", "cms.cern.ch"]
        );
        assert_eq!(s.cvmfs.required, vec!["oasis.opensciencegrid.org"]);
        assert_eq!(s.cvmfs.timeout, Duration::from_secs(3));

        let mut bad = minimal();
        bad.extend([
            ("PILOT_AD_FILE", "/x/$(LOG)/a"),
            ("PILOT_AD_PERIOD", "0"),
            ("PILOT_REPORT_PERIOD", "0"),
            ("PILOT_CVMFS_DIR", "relative"),
            ("PILOT_CVMFS_REPOS", "ok.org,bad name"),
            ("PILOT_CVMFS_REQUIRED", "../etc"),
            ("PILOT_CVMFS_TIMEOUT", "forever"),
        ]);
        let e = Settings::from_env(&env(&bad)).unwrap_err();
        assert_eq!(e.0.len(), 7, "{e}");
        for var in [
            "PILOT_AD_FILE",
            "PILOT_AD_PERIOD",
            "PILOT_REPORT_PERIOD",
            "PILOT_CVMFS_DIR",
            "PILOT_CVMFS_REPOS",
            "PILOT_CVMFS_REQUIRED",
            "PILOT_CVMFS_TIMEOUT",
        ] {
            assert!(e.to_string().contains(var), "{var}: {e}");
        }
    }

    #[test]
    fn blank_values_count_as_unset() {
        let mut vars = minimal();
        vars.push(("PILOT_CPUS", ""));
        vars.push(("PILOT_DIE_AT", "  "));
        let s = Settings::from_env(&env(&vars)).unwrap();
        assert_eq!(s.resources.cpus, None);
        assert_eq!(s.die_at, None);
    }
}
