//! Fetching the pool's condor configuration and writing it under the condor config dir.
//!
//! HTTPS only unless plain HTTP was explicitly allowed (also for redirects). Network errors,
//! timeouts and 5xx answers are retried with exponential back-off until the overall fetch
//! deadline; a 4xx answer, an oversized body, a sha256 mismatch or a body that is not text is
//! final. Every file is fetched before any is written, and each is written atomically
//! (temporary file, fsync, rename), so condor never reads a half-written or mixed set.
//! Nothing secret is logged: no request carries the pool token, and bodies are never logged.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{StatusCode, Url};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::settings::ConfigSource;

/// Prefix of fetched files in the config dir: after the image's own files (01-…), before the
/// pilot's generated file (99-pilot.conf).
pub const FETCHED_PREFIX: &str = "50-pilot-fetched-";

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("could not build the HTTP client: {0}")]
    Client(String),
    #[error("{url} answered {status}; not retried (a client error will not fix itself)")]
    Refused { url: String, status: StatusCode },
    #[error(
        "{url} could not be fetched within {timeout:?} after {attempts} attempt(s); last error: {last}"
    )]
    GaveUp {
        url: String,
        timeout: Duration,
        attempts: u32,
        last: String,
    },
    #[error("{url} is larger than the limit of {limit} bytes (PILOT_FETCH_MAX_BYTES)")]
    TooLarge { url: String, limit: u64 },
    #[error("{url} has sha256 {actual}, but PILOT_CONFIG_SHA256 pins {expected}")]
    Checksum {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("{url} is not a text configuration file (not UTF-8, or contains NUL bytes)")]
    NotText { url: String },
    #[error("could not write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How to fetch.
#[derive(Debug, Clone)]
pub struct FetchPolicy {
    /// Deadline for all attempts of one URL.
    pub timeout: Duration,
    pub max_bytes: u64,
    pub allow_http: bool,
}

/// One fetched file, ready to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedConfig {
    pub url: Url,
    pub file_name: String,
    pub body: String,
}

/// Why one attempt failed, and whether trying again could help.
enum Attempt {
    Retry(String),
    Final(FetchError),
}

/// The file name a source gets: its position keeps the configured order, the URL's last path
/// segment keeps it recognisable.
fn file_name(index: usize, url: &Url) -> String {
    let stem: String = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or("")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let stem = stem.trim_start_matches('.');
    let stem = stem.strip_suffix(".conf").unwrap_or(stem);
    if stem.is_empty() {
        format!("{FETCHED_PREFIX}{index:02}.conf")
    } else {
        format!("{FETCHED_PREFIX}{index:02}-{stem}.conf")
    }
}

fn client(policy: &FetchPolicy) -> Result<reqwest::Client, FetchError> {
    reqwest::Client::builder()
        .https_only(!policy.allow_http)
        .connect_timeout(Duration::from_secs(10).min(policy.timeout))
        .user_agent(concat!("pilotd-pilot/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| FetchError::Client(describe(&e)))
}

async fn attempt(
    client: &reqwest::Client,
    source: &ConfigSource,
    policy: &FetchPolicy,
    per_attempt: Duration,
) -> Result<Vec<u8>, Attempt> {
    let url = &source.url;
    let mut response = client
        .get(url.clone())
        .timeout(per_attempt)
        .send()
        .await
        .map_err(|e| Attempt::Retry(describe(&e)))?;
    let status = response.status();
    if status.is_server_error() {
        return Err(Attempt::Retry(format!("server answered {status}")));
    }
    if !status.is_success() {
        return Err(Attempt::Final(FetchError::Refused {
            url: url.to_string(),
            status,
        }));
    }
    let too_large = || {
        Attempt::Final(FetchError::TooLarge {
            url: url.to_string(),
            limit: policy.max_bytes,
        })
    };
    if response
        .content_length()
        .is_some_and(|n| n > policy.max_bytes)
    {
        return Err(too_large());
    }
    // Read in chunks so a server that lies about (or omits) its length cannot make the pilot
    // buffer more than the limit.
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Attempt::Retry(describe(&e)))?
    {
        if body.len() as u64 + chunk.len() as u64 > policy.max_bytes {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A reqwest error with its causes, since the top-level message alone ("error sending
/// request") does not say what went wrong.
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    if e.is_timeout() && !text.contains("timed out") {
        text.push_str(" (timed out)");
    }
    text
}

fn check_body(source: &ConfigSource, body: Vec<u8>) -> Result<String, FetchError> {
    if let Some(expected) = &source.sha256 {
        let actual = format!("{:x}", Sha256::digest(&body));
        if &actual != expected {
            return Err(FetchError::Checksum {
                url: source.url.to_string(),
                expected: expected.clone(),
                actual,
            });
        }
    }
    match String::from_utf8(body) {
        Ok(text) if !text.contains('\0') => Ok(text),
        _ => Err(FetchError::NotText {
            url: source.url.to_string(),
        }),
    }
}

/// Fetches one source, retrying what may be transient until the deadline.
pub async fn fetch_one(
    client: &reqwest::Client,
    source: &ConfigSource,
    policy: &FetchPolicy,
) -> Result<String, FetchError> {
    let start = Instant::now();
    let deadline = start
        .checked_add(policy.timeout)
        .unwrap_or(start + Duration::from_secs(365 * 86_400));
    let mut backoff = Duration::from_millis(250);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let per_attempt = remaining.min(Duration::from_secs(30));
        let last = if per_attempt.is_zero() {
            "deadline reached".to_owned()
        } else {
            match attempt(client, source, policy, per_attempt).await {
                Ok(body) => return check_body(source, body),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Retry(why)) => why,
            }
        };
        let now = Instant::now();
        if now.checked_add(backoff).is_none_or(|t| t >= deadline) {
            return Err(FetchError::GaveUp {
                url: source.url.to_string(),
                timeout: policy.timeout,
                attempts,
                last,
            });
        }
        tracing::warn!(url = %source.url, attempt = attempts, error = %last, retry_in = ?backoff, "config fetch failed; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Fetches every source (all or nothing).
pub async fn fetch_all(
    sources: &[ConfigSource],
    policy: &FetchPolicy,
) -> Result<Vec<FetchedConfig>, FetchError> {
    let client = client(policy)?;
    let mut fetched = Vec::with_capacity(sources.len());
    for (i, source) in sources.iter().enumerate() {
        let body = fetch_one(&client, source, policy).await?;
        tracing::info!(url = %source.url, bytes = body.len(), pinned = source.sha256.is_some(), "fetched condor configuration");
        fetched.push(FetchedConfig {
            url: source.url.clone(),
            file_name: file_name(i, &source.url),
            body,
        });
    }
    Ok(fetched)
}

/// Writes `contents` to `dir/name` so that readers see the old file or the new one, never a
/// mix: temporary file in the same directory, fsync, rename, fsync the directory.
pub fn write_atomically(dir: &Path, name: &str, contents: &str) -> Result<PathBuf, FetchError> {
    use std::io::Write;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let fail = |source| FetchError::Write {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        drop(file);
        // Condor daemons run as the condor user and must read it; nothing in it is secret.
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(path)
}

/// Writes the fetched files and removes fetched files of an earlier run that are no longer
/// configured (a restarted container must not keep a dropped URL's settings).
pub fn install(dir: &Path, fetched: &[FetchedConfig]) -> Result<Vec<PathBuf>, FetchError> {
    let mut written = Vec::new();
    for f in fetched {
        written.push(write_atomically(dir, &f.file_name, &f.body)?);
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(FETCHED_PREFIX) && !fetched.iter().any(|f| f.file_name == name) {
                std::fs::remove_file(entry.path()).map_err(|source| FetchError::Write {
                    path: entry.path(),
                    source,
                })?;
            }
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_keep_order_and_are_safe() {
        let u = |s: &str| Url::parse(s).unwrap();
        assert_eq!(
            file_name(0, &u("https://h/pool/ospool.conf")),
            "50-pilot-fetched-00-ospool.conf"
        );
        assert_eq!(
            file_name(3, &u("https://h/a/b?x=1")),
            "50-pilot-fetched-03-b.conf"
        );
        assert_eq!(file_name(1, &u("https://h/")), "50-pilot-fetched-01.conf");
        assert_eq!(
            file_name(2, &u("https://h/..%2F..%2Fetc")),
            "50-pilot-fetched-02-_2F.._2Fetc.conf"
        );
    }

    #[test]
    fn install_replaces_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("50-pilot-fetched-07-old.conf"), "X = 1\n").unwrap();
        std::fs::write(dir.path().join("01-image.conf"), "Y = 1\n").unwrap();
        let f = FetchedConfig {
            url: Url::parse("https://h/new.conf").unwrap(),
            file_name: "50-pilot-fetched-00-new.conf".into(),
            body: "CONDOR_HOST = cm\n".into(),
        };
        install(dir.path(), &[f]).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, vec!["01-image.conf", "50-pilot-fetched-00-new.conf"]);
    }
}
