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

use crate::settings::{Settings, WorkerSettings};
use crate::splay::Splay;
use chrono::{DateTime, Utc};
use pilotd_core::config::site::{
    image_allowed, is_env_name, is_fully_qualified, secure_url, transport_allowed,
};
use pilotd_core::config::template;
use pilotd_core::config::units::HumanDuration;
use pilotd_core::service::state_file::write_atomically;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const FILE: &str = "manifest.toml";

/// The largest stored manifest read back (a fetched one is bounded by `[remote] max_bytes`).
const STORED_MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("remote manifest {url}: {why}\n  hint: {hint}")]
    Fetch {
        url: String,
        why: String,
        hint: String,
    },
    #[error(
        "remote manifest {url} is invalid: {why}\n  hint: the pool's manifest must follow the format in pilotd's docs/site.md (\"Remote manifest\")"
    )]
    Invalid { url: String, why: String },
    #[error("remote manifest {url} was refused: {}", .why.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused { url: String, why: Vec<Refusal> },
    #[error("remote manifest version {version} no longer passes this site's limits: {}", .why.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    NoLongerAllowed { version: String, why: Vec<Refusal> },
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
/// owner shares even though the container limits hold. (None of them is in
/// [`POOL_ENV_PREFIXES`]; they are named so the refusal says why.)
pub(crate) const RESERVED_ENV: &[&str] = &[
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
    // Set by pilotd from the manifest's own `config_urls`.
    "PILOT_CONFIG_URLS",
];

/// Env prefixes pilotd, the pilot and condor keep (compared case-insensitively): condor reads
/// `_CONDOR_*` as configuration that beats the pilot's own file, `PILOT_*` and `PILOTD_*` steer
/// the pilot and pilotd.
pub(crate) const RESERVED_ENV_PREFIXES: &[&str] = &["_CONDOR_", "PILOT_", "PILOTD_"];

/// The only env names a remote manifest may set: these prefixes (in capitals) and at least
/// one more character. They are the pool's own namespaces: glideinWMS's and the OSPool
/// execution point's site attributes (`GLIDEIN_Site`, `GLIDEIN_ResourceName`,
/// `GLIDEIN_Start_Extra`), OSG's and OSPool's knobs (`OSG_SQUID_LOCATION`) and annexes'.
/// Everything else is the site's (pilotd.toml `[worker.env]`): an allowlist, because the
/// names that change what a process loads, trusts or whom it talks through (`LD_*`,
/// `GCONV_PATH`, `GLIBC_TUNABLES`, `*_PROXY`, `SSL_CERT_FILE`, `CURL_CA_BUNDLE`,
/// `REQUESTS_CA_BUNDLE`, `NODE_EXTRA_CA_CERTS`, `PYTHONPATH`, `BASH_ENV`, ...) are more than
/// any list of them would hold.
pub(crate) const POOL_ENV_PREFIXES: &[&str] = &["GLIDEIN_", "OSG_", "OSPOOL_", "ANNEX_"];

/// Whether the manifest may not set `key` because pilotd sets or keeps it.
pub(crate) fn reserved(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    RESERVED_ENV.contains(&upper.as_str())
        || RESERVED_ENV_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Whether `key` is in the pool's namespaces ([`POOL_ENV_PREFIXES`]).
pub(crate) fn pool_env(key: &str) -> bool {
    POOL_ENV_PREFIXES
        .iter()
        .any(|p| key.len() > p.len() && key.starts_with(p))
}

/// Why a name outside the pool's namespaces matters, for the refusal: the common ways env
/// takes over a process, by name; anything else is simply not the pool's.
fn outside_why(key: &str) -> &'static str {
    let upper = key.to_ascii_uppercase();
    if upper.starts_with("LD_")
        || upper.starts_with("DYLD_")
        || matches!(
            upper.as_str(),
            "GCONV_PATH" | "GLIBC_TUNABLES" | "LOCPATH" | "NLSPATH"
        )
        || upper.starts_with("MALLOC_")
    {
        "it steers the loader or the C library of every process in the worker"
    } else if upper.ends_with("_PROXY") {
        "it routes the worker's traffic through another host"
    } else if upper.starts_with("SSL_")
        || upper.starts_with("X509_")
        || upper.ends_with("CA_BUNDLE")
        || upper.ends_with("_CA_CERTS")
        || upper.ends_with("_CAINFO")
        || upper.contains("CERT_FILE")
        || upper.contains("CERT_DIR")
    {
        "it changes which certificates the worker trusts"
    } else if matches!(
        upper.as_str(),
        "PATH" | "HOME" | "SHELL" | "ENV" | "BASH_ENV" | "IFS" | "CONDOR_CONFIG"
    ) {
        "it changes which programs and configuration the worker runs"
    } else {
        "it is not in the pool's namespaces"
    }
}

/// One thing a manifest may not do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("image `{0}` is not fully qualified")]
    ImageNotQualified(String),
    #[error("image `{0}` is not in this host's allowed_images")]
    ImageNotAllowed(String),
    #[error("config URL {0}")]
    ConfigUrlNotHttps(String),
    #[error(
        "env {0} is reserved (set by pilotd from the owner's decision, or steering condor or the pilot), not the pool's"
    )]
    ReservedEnv(String),
    #[error(
        "env {key} may not come from a remote manifest: {why}; a manifest sets only GLIDEIN_*, OSG_*, OSPOOL_* and ANNEX_* names (anything else goes in pilotd.toml [worker.env])"
    )]
    OutsidePoolEnv { key: String, why: &'static str },
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
pub(crate) fn check(
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
        if let Err(e) = secure_url(url) {
            why.push(Refusal::ConfigUrlNotHttps(e.to_string()));
        }
    }
    for key in m.worker.env.keys() {
        let shown = key.escape_debug().to_string();
        if !is_env_name(key) {
            why.push(Refusal::EnvName(shown));
        } else if reserved(key) {
            why.push(Refusal::ReservedEnv(shown));
        } else if !pool_env(key) {
            why.push(Refusal::OutsidePoolEnv {
                key: shown,
                why: outside_why(key),
            });
        } else if local_env.contains_key(key) {
            why.push(Refusal::SiteEnv(shown));
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

pub(crate) fn parse(url: &str, body: &[u8]) -> Result<Manifest, ManifestError> {
    let text = std::str::from_utf8(body).map_err(|_| ManifestError::Invalid {
        url: url.into(),
        why: "not UTF-8 text".into(),
    })?;
    toml::from_str(text).map_err(|e| {
        let (line, col) =
            pilotd_core::config::diag::line_col(text, e.span().map_or(0, |s| s.start));
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
    // Errors name the URL without its credentials (they end up in logs and `status`).
    let shown = redact::credentials(url).into_owned();
    let fail = |why: String, hint: &str| ManifestError::Fetch {
        url: shown.clone(),
        why: redact::credentials(&why).into_owned(),
        hint: hint.into(),
    };
    if let Err(e) = secure_url(url) {
        return Err(fail(e.to_string(), "use an https:// URL in [remote] url"));
    }
    // reqwest is built without a default TLS provider (kube uses ring; two providers panic).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(timeout)
        // Every hop is held to the same rule as the first: a redirect to plain http (or
        // to anything but https or loopback) ends the fetch before connecting.
        .redirect(reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() >= 3 {
                attempt.error("more than 3 redirects")
            } else if !transport_allowed(attempt.url()) {
                let to = redact::credentials(attempt.url().as_str()).into_owned();
                attempt.error(format!("redirected to {to}, which is not https"))
            } else {
                attempt.follow()
            }
        }))
        .build()
        .map_err(|e| {
            fail(
                e.to_string(),
                "pilotd found no CA certificates to check https with: install Debian's ca-certificates",
            )
        })?;
    let mut resp = client.get(url).send().await.map_err(|e| {
        fail(
            format!(
                "unreachable: {}",
                pilotd_core::service::logging::with_causes(&e)
            ),
            "check the URL and the network; the last good manifest stays in force",
        )
    })?;
    if !resp.status().is_success() {
        return Err(fail(
            format!("HTTP {}", resp.status()),
            "the last good manifest stays in force; tell the pool's operators",
        ));
    }
    let too_big = || {
        let hint = "raise [remote] max_bytes if this is expected";
        Err(fail(format!("larger than {max_bytes} bytes"), hint))
    };
    if resp.content_length().is_some_and(|n| n > max_bytes) {
        return too_big();
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
            return too_big();
        }
    }
    let m = parse(&shown, &body)?;
    check(&m, allowed_images, local_env)
        .map_err(|why| ManifestError::Refused { url: shown, why })?;
    Ok(m)
}

/// The worker template workers start with, and why a manifest given was not laid on.
#[derive(Debug)]
pub struct Template {
    pub worker: WorkerSettings,
    /// Why there is a manifest but it is not laid on; `None` when it is, or when there is none.
    pub refused: Option<ManifestError>,
}

/// The effective worker template: pilotd.toml's `[worker]` with the pool's manifest laid over
/// it, within what the site allows. The one definition the daemon (with the manifest it
/// fetched or stored) and `pilotd plan` (with the stored one, `stored_template`) share, so
/// plan shows what the daemon starts. Pure.
///
/// The manifest counts only while the site subscribes to one (`[remote]`), and only if it
/// still passes `check` against today's `allowed_images` and `[worker.env]`: a reload may
/// have narrowed them since it was fetched, and a manifest must never widen them. One that
/// no longer passes is not laid on at all (half a pool configuration is worse than none).
pub(crate) fn worker_template(s: &Settings, m: Option<&Manifest>) -> Template {
    let checked = m
        .filter(|_| s.remote.is_some())
        .map(|m| (m, check(m, &s.image.allowed, &s.worker.env)));
    let (worker, refused) = match checked {
        None => (s.worker.clone(), None),
        Some((m, Ok(()))) => (m.overlay(&s.worker), None),
        Some((m, Err(why))) => {
            let version = m.version.clone();
            let refused = ManifestError::NoLongerAllowed { version, why };
            (s.worker.clone(), Some(refused))
        }
    };
    Template { worker, refused }
}

/// The worker template the daemon of `s` starts workers with, as far as its state dir says:
/// the daemon stores every manifest it lays on, and reads the stored one back at its start.
/// For the one-shot commands (`plan`, `gc`); a stored copy that cannot be read is not laid
/// on (the daemon does not lay it on either) and is the `refused` reason.
pub fn stored_template(s: &Settings) -> Template {
    if s.remote.is_none() {
        return worker_template(s, None);
    }
    match load_last_good(&s.state_dir) {
        Ok(m) => worker_template(s, m.as_ref()),
        Err(e) => Template {
            worker: s.worker.clone(),
            refused: Some(e),
        },
    }
}

impl Manifest {
    /// The site's worker settings with the manifest's choices laid over them. Only what
    /// `check` allowed is taken: the image, idle timeout, config URLs (as the pilot's
    /// `PILOT_CONFIG_URLS`) and env names the site did not set itself. Checks nothing itself:
    /// workers get their template from `worker_template`, which checks first.
    fn overlay(&self, site: &WorkerSettings) -> WorkerSettings {
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
    /// A daemon started at `now`: its first fetch waits for the host's offset in the fleet's
    /// spread, so a fleet that boots together does not ask the manifest server at once (a
    /// held start waits at least as long, so no worker waits for it).
    pub(crate) fn starting(now: DateTime<Utc>, splay: &Splay) -> Refresh {
        Refresh {
            due: (!splay.is_off()).then(|| pilotd_core::horizon::after(now, splay.offset)),
            fetching: false,
        }
    }

    /// Whether a fetch should start now; if so it counts as under way and the next one is
    /// scheduled about `every` later, on the host's own grid in the fleet's spread
    /// (`Splay::next_fetch`).
    pub(crate) fn start_if_due(
        &mut self,
        now: DateTime<Utc>,
        every: Duration,
        splay: &Splay,
    ) -> bool {
        if self.fetching || self.due.is_some_and(|t| now < t) {
            return false;
        }
        self.due = Some(splay.next_fetch(now, every));
        self.fetching = true;
        true
    }

    #[cfg(test)]
    /// When the next fetch is due (None: at the next cycle).
    pub(crate) fn due(&self) -> Option<DateTime<Utc>> {
        self.due
    }

    /// The fetch under way ended (well or not).
    pub(crate) fn finished(&mut self) {
        self.fetching = false;
    }

    /// A new URL or refresh takes effect at once.
    pub(crate) fn reset(&mut self) {
        self.due = None;
    }
}

pub(crate) fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// The stored manifest, checked again against today's limits: the site may have narrowed
/// `allowed_images` or `[worker.env]` since it was stored, and the file may have been
/// changed. A copy that no longer passes is refused (the caller logs it and waits for a
/// fresh one), never used.
pub fn load_checked(
    state_dir: &Path,
    allowed_images: &[String],
    local_env: &BTreeMap<String, String>,
) -> Result<Option<Manifest>, ManifestError> {
    let Some(m) = load_last_good(state_dir)? else {
        return Ok(None);
    };
    check(&m, allowed_images, local_env).map_err(|why| ManifestError::Refused {
        url: path(state_dir).display().to_string(),
        why,
    })?;
    Ok(Some(m))
}

/// The last manifest that passed, if any, as stored (not checked again: `status` shows its
/// version). A damaged copy is ignored (and reported).
pub(crate) fn load_last_good(state_dir: &Path) -> Result<Option<Manifest>, ManifestError> {
    use std::io::Read;
    let p = path(state_dir);
    // Bounded like a fetch: the stored copy is a file someone could have replaced.
    let mut b = Vec::new();
    match std::fs::File::open(&p).and_then(|f| f.take(STORED_MAX_BYTES + 1).read_to_end(&mut b)) {
        Ok(_) if b.len() as u64 > STORED_MAX_BYTES => Err(ManifestError::Invalid {
            url: p.display().to_string(),
            why: format!("larger than {STORED_MAX_BYTES} bytes"),
        }),
        Ok(_) => parse(&p.display().to_string(), &b).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ManifestError::Store { path: p, source: e }),
    }
}

/// Stores a manifest atomically as the last known good one.
pub(crate) fn store(state_dir: &Path, m: &Manifest) -> Result<(), ManifestError> {
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
OSG_PROJECT_NAME = "1"
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
        assert!(
            matches!(&why[1], Refusal::ConfigUrlNotHttps(e) if e.contains("pool.example.org")),
            "{why:?}"
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

    /// The site's proxy is pilotd.toml's alone: a manifest's `[worker] http_proxy` (or
    /// any of its env spellings, above and below) is refused, naming the key.
    #[test]
    fn a_manifest_cannot_set_the_workers_proxy() {
        for key in ["http_proxy", "https_proxy", "no_proxy"] {
            let body = format!("version = \"1\"\n[worker]\n{key} = \"http://proxy.evil:3128\"\n");
            let e = parse("u", body.as_bytes()).unwrap_err();
            assert!(matches!(e, ManifestError::Invalid { .. }), "{e}");
            assert!(
                e.to_string().contains(&format!("unknown field `{key}`")),
                "{e}"
            );
        }
    }

    #[test]
    fn reserved_prefixes_and_names_are_refused_whatever_their_case() {
        let m = parse(
            "u",
            br#"version = "1"
[worker]
config_urls = ["http://127.0.0.1@evil.example/x", "https://u:pw@pool.example.org/y"]
[worker.env]
_CONDOR_START = "True"
_condor_SEC_DEFAULT_AUTHENTICATION = "NEVER"
PILOT_SELFTEST_CMD = "true"
PILOT_NEW_KNOB = "1"
LD_PRELOAD = "/pilot/x.so"
ld_library_path = "/pilot"
CONDOR_CONFIG = "/pilot/evil"
SSL_CERT_FILE = "/pilot/ca.pem"
https_proxy = "http://proxy.evil"
"A=B" = "x"
"" = "y"
"X\nY" = "z"
GLIDEIN_Site = "OK"
"#,
        )
        .unwrap();
        let why = check(&m, &allowed(), &BTreeMap::new()).unwrap_err();
        let reserved: Vec<&str> = why
            .iter()
            .filter_map(|r| match r {
                Refusal::ReservedEnv(k) => Some(k.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            reserved,
            [
                "PILOT_NEW_KNOB",
                "PILOT_SELFTEST_CMD",
                "_CONDOR_START",
                "_condor_SEC_DEFAULT_AUTHENTICATION",
            ]
        );
        let outside: Vec<&str> = why
            .iter()
            .filter_map(|r| match r {
                Refusal::OutsidePoolEnv { key, .. } => Some(key.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            outside,
            [
                "CONDOR_CONFIG",
                "LD_PRELOAD",
                "SSL_CERT_FILE",
                "https_proxy",
                "ld_library_path",
            ]
        );
        let names: Vec<&str> = why
            .iter()
            .filter_map(|r| match r {
                Refusal::EnvName(k) => Some(k.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["", "A=B", "X\\nY"]);
        // The userinfo trick is refused on the parsed host; a credential never reaches the text.
        let text = ManifestError::Refused {
            url: "u".into(),
            why,
        }
        .to_string();
        assert!(text.contains("evil.example"), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    /// Names that change what a worker loads, trusts or whom it talks through, which an
    /// earlier denylist let through or could never list in full, are refused with why; the
    /// pool's own namespaces pass. The stored copy is held to the same rule.
    #[test]
    fn env_outside_the_pools_namespaces_is_refused_with_why() {
        let refused = [
            ("CURL_CA_BUNDLE", "which certificates the worker trusts"),
            ("REQUESTS_CA_BUNDLE", "which certificates the worker trusts"),
            (
                "NODE_EXTRA_CA_CERTS",
                "which certificates the worker trusts",
            ),
            ("SSL_CERT_DIR", "which certificates the worker trusts"),
            ("X509_CERT_DIR", "which certificates the worker trusts"),
            ("ftp_proxy", "through another host"),
            ("no_proxy", "through another host"),
            ("GCONV_PATH", "the loader or the C library"),
            ("GLIBC_TUNABLES", "the loader or the C library"),
            ("LD_AUDIT", "the loader or the C library"),
            ("PATH", "which programs and configuration"),
            ("BASH_ENV", "which programs and configuration"),
            ("PYTHONPATH", "not in the pool's namespaces"),
            ("JAVA_TOOL_OPTIONS", "not in the pool's namespaces"),
            ("GLIDEIN_", "not in the pool's namespaces"),
            ("glidein_site", "not in the pool's namespaces"),
        ];
        let mut text = String::from("version = \"1\"\n[worker.env]\n");
        for (k, _) in &refused {
            text.push_str(&format!("{k} = \"/x\"\n"));
        }
        for ok in [
            "GLIDEIN_Site",
            "GLIDEIN_Start_Extra",
            "OSG_SQUID_LOCATION",
            "OSPOOL_X",
            "ANNEX_NAME",
        ] {
            text.push_str(&format!("{ok} = \"v\"\n"));
        }
        let m = parse("u", text.as_bytes()).unwrap();
        let why = check(&m, &allowed(), &BTreeMap::new()).unwrap_err();
        assert_eq!(why.len(), refused.len(), "{why:?}");
        for (k, reason) in refused {
            let r = why
                .iter()
                .find(|r| matches!(r, Refusal::OutsidePoolEnv { key, .. } if key == k))
                .unwrap_or_else(|| panic!("{k} not refused: {why:?}"))
                .to_string();
            assert!(r.contains(reason), "{k}: {r}");
            assert!(
                r.contains("a manifest sets only GLIDEIN_*, OSG_*, OSPOOL_* and ANNEX_* names"),
                "{r}"
            );
        }
        // The stored copy, the same.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), &text).unwrap();
        let e = load_checked(dir.path(), &allowed(), &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("env GLIBC_TUNABLES may not come from a remote manifest"),
            "{e}"
        );
    }

    #[test]
    fn a_stored_copy_that_no_longer_passes_is_refused_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path());
        std::fs::write(
            &p,
            "version = \"9\"\n[worker]\nimage = \"docker.io/evil/miner:1\"\nconfig_urls = [\"http://pool.example.org/c\"]\n",
        )
        .unwrap();
        let e = load_checked(dir.path(), &allowed(), &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains(&p.display().to_string()), "{e}");
        assert!(
            e.contains("docker.io/evil/miner:1") && e.contains("pool.example.org"),
            "{e}"
        );
        // As stored it still reads (status shows its version), and a good copy loads checked.
        assert_eq!(load_last_good(dir.path()).unwrap().unwrap().version, "9");
        std::fs::write(&p, "version = \"10\"\n").unwrap();
        assert_eq!(
            load_checked(dir.path(), &allowed(), &BTreeMap::new())
                .unwrap()
                .unwrap()
                .version,
            "10"
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
        let site: pilotd_core::config::SiteConfig = toml::from_str(
            "[worker]\nimage = \"hub.opensciencegrid.org/osg-htc/ospool-ep:24\"\n[worker.env]\nGLIDEIN_Site = \"MINE\"\n",
        )
        .unwrap();
        let cfg = pilotd_core::config::Config {
            site,
            site_path: None,
            policy: pilotd_core::config::Policy::defaults(pilotd_core::zone::Zone::utc()),
            policy_path: "p".into(),
        };
        let site = crate::settings::Settings::resolve(&cfg).worker;
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

    /// Settings of a site with `[worker]` as given, subscribed to a manifest or not.
    fn site_settings(worker: &str, remote: bool) -> Settings {
        let remote = if remote {
            "[remote]\nurl = \"https://pool.example.org/m.toml\"\n"
        } else {
            ""
        };
        let site: pilotd_core::config::SiteConfig =
            toml::from_str(&format!("{remote}[worker]\n{worker}")).unwrap();
        Settings::resolve(&pilotd_core::config::Config {
            site,
            site_path: None,
            policy: pilotd_core::config::Policy::defaults(pilotd_core::zone::Zone::utc()),
            policy_path: "p".into(),
        })
    }

    #[test]
    fn the_template_lays_on_a_manifest_only_within_the_sites_limits() {
        let worker = "image = \"hub.opensciencegrid.org/osg-htc/ospool-ep:24\"\n\
                      allowed_images = [\"hub.opensciencegrid.org/osg-htc/*\"]\n\
                      [worker.env]\nGLIDEIN_Site = \"MINE\"\n";
        let s = site_settings(worker, true);
        let pool = parse(
            "u",
            b"version = \"3\"\n[worker]\nimage = \"hub.opensciencegrid.org/osg-htc/ospool-ep:25\"\n\
              [worker.env]\nGLIDEIN_ResourceName = \"LAB\"\n",
        )
        .unwrap();
        let t = worker_template(&s, Some(&pool));
        assert!(t.refused.is_none(), "{:?}", t.refused);
        assert_eq!(t.worker, pool.overlay(&s.worker));
        assert_eq!(
            t.worker.image,
            "hub.opensciencegrid.org/osg-htc/ospool-ep:25"
        );

        // No manifest, or a site no longer subscribed: pilotd.toml's own.
        assert_eq!(worker_template(&s, None).worker, s.worker);
        let unsubscribed = site_settings(worker, false);
        let t = worker_template(&unsubscribed, Some(&pool));
        assert_eq!((t.worker, t.refused.is_none()), (unsubscribed.worker, true));

        // An image outside allowed_images, or an env name the site set itself, would widen
        // what the site allows: the manifest is not laid on at all, not even its other parts.
        for (key, value) in [
            ("image", "\"docker.io/library/anything:1\""),
            (
                "env",
                "{ GLIDEIN_Site = \"THEIRS\", GLIDEIN_ResourceName = \"LAB\" }",
            ),
        ] {
            let widening = parse(
                "u",
                format!("version = \"4\"\n[worker]\nidle_timeout = \"7m\"\n{key} = {value}\n")
                    .as_bytes(),
            )
            .unwrap();
            let t = worker_template(&s, Some(&widening));
            assert_eq!(t.worker, s.worker, "{key}");
            let e = t.refused.expect(key).to_string();
            assert!(e.contains("version 4 no longer passes"), "{e}");
        }
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
