//! The remote manifest: the pool organisers' configuration, fetched from `[remote] url` every
//! `refresh`. It may choose the worker image, the pilot's config URLs, extra worker env and the
//! idle timeout — never the owner's policy, and never anything that widens what the owner or
//! the site allowed (privileges, mounts, resources). A bad, unreachable or oversized manifest
//! keeps the last known good one, which lives in the state dir (written atomically) so it
//! survives restarts.
//!
//! Format (TOML, unknown keys rejected):
//! ```toml
//! version = "2026-11-30.1"        # shown by `pilotd status`
//! [worker]
//! image = "hub.opensciencegrid.org/osg-htc/ospool-ep:25-release"  # must match allowed_images
//! idle_timeout = "20m"
//! config_urls = ["https://pool.example.org/pilot/condor_config.d/10-pool"]
//! [worker.env]
//! GLIDEIN_Site = "MY-SITE"
//! ```
//! `check` is pure; `fetch`, `load_last_good` and `store` do the I/O.

use crate::config::site::{image_allowed, is_fully_qualified};
use crate::config::template;
use crate::config::units::HumanDuration;
use crate::service::state_file::write_atomically;
use crate::volunteer::settings::WorkerSettings;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const FILE: &str = "manifest.toml";

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("remote manifest {url}: {why}\n  hint: {hint}")]
    Fetch {
        url: String,
        why: String,
        hint: String,
    },
    #[error(
        "remote manifest {url} is invalid: {why}\n  hint: the pool's manifest must follow the format in pilotd's README"
    )]
    Invalid { url: String, why: String },
    #[error("remote manifest {url} was refused: {}", .why.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused { url: String, why: Vec<Refusal> },
    #[error("cannot store the manifest in {}: {source}", path.display())]
    Store {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: String,
    #[serde(default)]
    pub worker: ManifestWorker,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestWorker {
    pub image: Option<String>,
    pub idle_timeout: Option<HumanDuration>,
    #[serde(default)]
    pub config_urls: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Env names the manifest may never set: pilotd derives them from the owner's decision or
/// they carry secrets and resources. Setting NUM_CPUS would let a pool advertise more than the
/// owner shares even though the container limits hold.
pub const RESERVED_ENV: &[&str] = &[
    "PILOT_CPUS",
    "PILOT_MEMORY_MIB",
    "PILOT_DISK_KIB",
    "PILOT_GPUS",
    "PILOT_ACCEPT_UNTIL",
    "PILOT_DIE_AT",
    "PILOT_TOKEN_FILE",
    "PILOT_CONDOR_CONFIG_DIR",
    "PILOT_SCRATCH",
    "PILOT_SELFTEST_CMD",
    "PILOT_ALLOW_HTTP",
    "PILOT_CONFIG_SHA256",
    "NUM_CPUS",
    "NUM_GPUS",
    "MEMORY",
    "DISK",
    "TOKEN",
    "ACCEPT_JOBS_FOR_HOURS",
    "RETIREMENT_HOURS",
    "ACCEPT_IDLE_MINUTES",
];

/// One thing a manifest may not do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("image `{0}` is not fully qualified")]
    ImageNotQualified(String),
    #[error("image `{0}` is not in this host's allowed_images")]
    ImageNotAllowed(String),
    #[error("config URL `{0}` is not https")]
    ConfigUrlNotHttps(String),
    #[error("env {0} is set by pilotd from the owner's decision, not by the pool")]
    ReservedEnv(String),
    #[error("env {0} is set by this site's pilotd.toml")]
    SiteEnv(String),
    #[error("env name `{0}` is not a valid variable name")]
    EnvName(String),
    #[error("env {key}: [worker.env]: {source}")]
    Template {
        key: String,
        source: template::TemplateError,
    },
}

/// Checks a manifest against the local limits. Every problem is listed; one problem refuses
/// the whole manifest (half a pool configuration is worse than the last good one).
/// `local_env` is `[worker.env]` of pilotd.toml: keys the site templated or set stay the site's.
pub fn check(
    m: &Manifest,
    allowed_images: &[String],
    local_env: &BTreeMap<String, String>,
) -> Result<(), Vec<Refusal>> {
    let mut why = Vec::new();
    if let Some(img) = &m.worker.image {
        if !is_fully_qualified(img) {
            why.push(Refusal::ImageNotQualified(img.clone()));
        } else if !image_allowed(img, allowed_images) {
            why.push(Refusal::ImageNotAllowed(img.clone()));
        }
    }
    for url in &m.worker.config_urls {
        if !url.starts_with("https://") && !is_loopback_http(url) {
            why.push(Refusal::ConfigUrlNotHttps(url.clone()));
        }
    }
    for key in m.worker.env.keys() {
        if RESERVED_ENV.contains(&key.as_str()) || key.starts_with("PILOTD_") {
            why.push(Refusal::ReservedEnv(key.clone()));
        } else if local_env.contains_key(key) {
            why.push(Refusal::SiteEnv(key.clone()));
        } else if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            why.push(Refusal::EnvName(key.clone()));
        }
    }
    for (key, value) in &m.worker.env {
        if let Err(source) = template::check(value) {
            why.push(Refusal::Template {
                key: key.clone(),
                source,
            });
        }
    }
    if why.is_empty() { Ok(()) } else { Err(why) }
}

/// Plain http is accepted only on loopback (a local mirror or a test server).
fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

pub fn parse(url: &str, body: &[u8]) -> Result<Manifest, ManifestError> {
    let text = std::str::from_utf8(body).map_err(|_| ManifestError::Invalid {
        url: url.into(),
        why: "not UTF-8 text".into(),
    })?;
    toml::from_str(text).map_err(|e| {
        let (line, col) = crate::config::diag::line_col(text, e.span().map_or(0, |s| s.start));
        ManifestError::Invalid {
            url: url.into(),
            why: format!("line {line}, column {col}: {}", e.message()),
        }
    })
}

/// Fetches and checks the manifest. Nothing is stored here: the caller stores what passed.
pub async fn fetch(
    url: &str,
    max_bytes: u64,
    timeout: Duration,
    allowed_images: &[String],
    local_env: &BTreeMap<String, String>,
) -> Result<Manifest, ManifestError> {
    let fail = |why: String, hint: &str| ManifestError::Fetch {
        url: url.into(),
        why,
        hint: hint.into(),
    };
    if !url.starts_with("https://") && !is_loopback_http(url) {
        return Err(fail(
            "only https is accepted (plain http only on loopback)".into(),
            "use an https:// URL in [remote] url",
        ));
    }
    // reqwest is built without a default TLS provider (kube uses ring; two providers panic).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::limited(3))
        .build()
        .map_err(|e| fail(e.to_string(), "this is a bug in pilotd"))?;
    let mut resp = client.get(url).send().await.map_err(|e| {
        fail(
            format!("unreachable: {e}"),
            "check the URL and the network; the last good manifest stays in force",
        )
    })?;
    if !resp.status().is_success() {
        return Err(fail(
            format!("HTTP {}", resp.status()),
            "the last good manifest stays in force; tell the pool's operators",
        ));
    }
    if resp.content_length().is_some_and(|n| n > max_bytes) {
        return Err(fail(
            format!("larger than {max_bytes} bytes"),
            "raise [remote] max_bytes if this is expected",
        ));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| {
        fail(
            format!("transfer failed: {e}"),
            "the last good manifest stays in force",
        )
    })? {
        body.extend_from_slice(&chunk);
        if body.len() as u64 > max_bytes {
            return Err(fail(
                format!("larger than {max_bytes} bytes"),
                "raise [remote] max_bytes if this is expected",
            ));
        }
    }
    let m = parse(url, &body)?;
    check(&m, allowed_images, local_env).map_err(|why| ManifestError::Refused {
        url: url.into(),
        why,
    })?;
    Ok(m)
}

impl Manifest {
    /// The site's worker settings with the manifest's choices laid over them. Only what
    /// `check` allowed is taken: the image, idle timeout, config URLs (as the pilot's
    /// `PILOT_CONFIG_URLS`) and env names the site did not set itself.
    pub fn overlay(&self, site: &WorkerSettings) -> WorkerSettings {
        let mut w = site.clone();
        if let Some(img) = &self.worker.image {
            w.image = img.clone();
        }
        if let Some(t) = self.worker.idle_timeout {
            w.idle_timeout = t.0;
        }
        let mut env = self.worker.env.clone();
        if !self.worker.config_urls.is_empty() {
            env.insert(
                "PILOT_CONFIG_URLS".into(),
                self.worker.config_urls.join(","),
            );
        }
        for (k, v) in env {
            w.env.entry(k).or_insert(v);
        }
        w
    }
}

/// When the next fetch is due, and whether one is under way (never two at once).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refresh {
    due: Option<DateTime<Utc>>,
    fetching: bool,
}

impl Refresh {
    /// Whether a fetch should start now; if so it counts as under way and the next one is
    /// scheduled `every` later.
    pub fn start_if_due(&mut self, now: DateTime<Utc>, every: Duration) -> bool {
        if self.fetching || self.due.is_some_and(|t| now < t) {
            return false;
        }
        self.due = Some(crate::horizon::after(now, every));
        self.fetching = true;
        true
    }

    /// The fetch under way ended (well or not).
    pub fn finished(&mut self) {
        self.fetching = false;
    }

    /// A new URL or refresh takes effect at once.
    pub fn reset(&mut self) {
        self.due = None;
    }
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// The last manifest that passed, if any. A damaged copy is ignored (and reported).
pub fn load_last_good(state_dir: &Path) -> Result<Option<Manifest>, ManifestError> {
    let p = path(state_dir);
    match std::fs::read(&p) {
        Ok(b) => parse(&p.display().to_string(), &b).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ManifestError::Store { path: p, source: e }),
    }
}

/// Stores a manifest atomically as the last known good one.
pub fn store(state_dir: &Path, m: &Manifest) -> Result<(), ManifestError> {
    let p = path(state_dir);
    let err = |source| ManifestError::Store {
        path: p.clone(),
        source,
    };
    let text = toml::to_string(m).map_err(|e| err(std::io::Error::other(e)))?;
    write_atomically(&p, text.as_bytes()).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> Vec<String> {
        vec!["hub.opensciencegrid.org/osg-htc/*".into()]
    }

    #[test]
    fn refuses_what_would_widen_the_owners_limits() {
        let m = parse(
            "u",
            br#"version = "1"
[worker]
image = "docker.io/evil/miner:latest"
config_urls = ["http://pool.example.org/x", "http://127.0.0.1:8080/y"]
[worker.env]
NUM_CPUS = "64"
PILOT_TOKEN_FILE = "/etc/shadow"
GLIDEIN_Site = "X"
OK_VAR = "1"
"#,
        )
        .unwrap();
        let local: BTreeMap<String, String> =
            [("GLIDEIN_Site".to_string(), "MINE".to_string())].into();
        let why = check(&m, &allowed(), &local).unwrap_err();
        assert_eq!(why.len(), 5, "{why:?}");
        assert_eq!(
            why[0],
            Refusal::ImageNotAllowed("docker.io/evil/miner:latest".into())
        );
        assert_eq!(
            why[1],
            Refusal::ConfigUrlNotHttps("http://pool.example.org/x".into())
        );
        assert!(why.contains(&Refusal::ReservedEnv("NUM_CPUS".into())));
        assert!(why.contains(&Refusal::ReservedEnv("PILOT_TOKEN_FILE".into())));
        assert!(why.contains(&Refusal::SiteEnv("GLIDEIN_Site".into())));
        let text = ManifestError::Refused {
            url: "u".into(),
            why,
        }
        .to_string();
        assert!(
            text.contains("; env GLIDEIN_Site is set by this site"),
            "{text}"
        );
    }

    #[test]
    fn accepts_a_good_manifest_and_round_trips_it() {
        let m = parse(
            "u",
            br#"version = "2026-11-30.1"
[worker]
image = "hub.opensciencegrid.org/osg-htc/ospool-ep:25-release"
idle_timeout = "10m"
config_urls = ["https://pool.example.org/10-pool"]
[worker.env]
GLIDEIN_ResourceName = "LAB-42"
"#,
        )
        .unwrap();
        check(&m, &allowed(), &BTreeMap::new()).unwrap();
        assert_eq!(
            m.worker.idle_timeout,
            Some(HumanDuration(Duration::from_secs(600)))
        );
        let dir = tempfile::tempdir().unwrap();
        store(dir.path(), &m).unwrap();
        assert_eq!(load_last_good(dir.path()).unwrap(), Some(m));
    }

    #[test]
    fn overlay_takes_only_what_the_site_left_open() {
        let site: crate::config::SiteConfig = toml::from_str(
            "[worker]\nimage = \"hub.opensciencegrid.org/osg-htc/ospool-ep:24\"\n[worker.env]\nGLIDEIN_Site = \"MINE\"\n",
        )
        .unwrap();
        let cfg = crate::config::Config {
            site,
            site_path: None,
            policy: crate::config::Policy::defaults(chrono_tz::UTC),
            policy_path: "p".into(),
        };
        let site = crate::volunteer::settings::Settings::resolve(&cfg).worker;
        let m = parse(
            "u",
            br#"version = "3"
[worker]
image = "hub.opensciencegrid.org/osg-htc/ospool-ep:25"
idle_timeout = "7m"
config_urls = ["https://a/1", "https://a/2"]
[worker.env]
GLIDEIN_ResourceName = "LAB"
"#,
        )
        .unwrap();
        let o = m.overlay(&site);
        assert_eq!(o.image, "hub.opensciencegrid.org/osg-htc/ospool-ep:25");
        assert_eq!(o.idle_timeout, Duration::from_secs(420));
        assert_eq!(o.env["GLIDEIN_Site"], "MINE");
        assert_eq!(o.env["GLIDEIN_ResourceName"], "LAB");
        assert_eq!(o.env["PILOT_CONFIG_URLS"], "https://a/1,https://a/2");
        // What the owner and site set beyond the manifest's reach is untouched.
        assert_eq!(o.cap_add, site.cap_add);
        assert_eq!(o.pids_limit, site.pids_limit);
        assert_eq!(o.token_file, site.token_file);
    }

    #[test]
    fn garbage_has_a_position() {
        let e = parse(
            "https://x/m.toml",
            b"version = \"1\"\n[worker]\nimgae = \"x\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 3, column 1"), "{e}");
        assert!(parse("u", &[0xff, 0xfe]).is_err());
    }
}
