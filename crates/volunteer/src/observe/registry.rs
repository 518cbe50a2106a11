//! The freshness check's one request: which digest a tag names now, asked of the registry
//! itself with a single `HEAD /v2/<name>/manifests/<tag>` (the digest is the answer's
//! `Docker-Content-Digest`; no manifest body, no config blob, no layer). A registry that wants
//! a bearer token says so with a 401 and `WWW-Authenticate: Bearer realm=…`; the token is then
//! fetched (anonymously) and kept until it expires, so later checks cost one request again.
//!
//! Asking through the engine (`/distribution/<ref>/json`) costs four requests on Docker 20.10
//! (ping, HEAD, GET manifest, GET config blob); the backend falls back to it only when this
//! client cannot reach the registry (an engine-only mirror or insecure-registry setting).
//!
//! Loopback registries are spoken to in plain HTTP, as the Docker engine does by default;
//! every other registry over HTTPS.

use crate::worker::split_reference;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The manifest kinds accepted, indexes first: the digest must be the one `docker pull`
/// resolves, so a multi-platform tag answers with its index's digest.
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json";

pub const USER_AGENT: &str = concat!("pilotd/", env!("CARGO_PKG_VERSION"), " (image check)");

#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    #[error("{reference} is not a tag reference with a registry host")]
    NotATag { reference: String },
    #[error("{url}: {source}")]
    Transport { url: String, source: reqwest::Error },
    #[error("{url}: HTTP {status}{}", hint.as_ref().map(|h| format!("\n  hint: {h}")).unwrap_or_default())]
    Status {
        url: String,
        status: u16,
        hint: Option<String>,
    },
    #[error("{url}: the answer carries no Docker-Content-Digest")]
    NoDigest { url: String },
    #[error("{url}: the token answer cannot be read: {why}")]
    Token { url: String, why: String },
    /// No HTTP client could be made, e.g. a host without any CA certificate (Debian's
    /// ca-certificates); the engine is asked instead.
    #[error("pilotd cannot ask registries itself: {0}")]
    NoClient(String),
}

impl RegistryError {
    /// The registry answered, and its answer is final (unknown tag, credentials needed):
    /// asking again through the engine would only repeat it.
    pub(crate) fn is_answer(&self) -> bool {
        matches!(self, RegistryError::Status { status, .. } if (400..500).contains(status))
    }
}

/// A registry client for the freshness check, with its tokens.
pub struct Resolver {
    /// `Err` when no client can be built here: never a panic (reqwest's `Client::default`
    /// panics on a host without CA certificates, and the daemon died at start).
    http: Result<reqwest::Client, String>,
    /// Bearer tokens by manifest URL (one repository, one scope), until they expire.
    tokens: Mutex<HashMap<String, (String, Instant)>>,
}

impl Resolver {
    pub(crate) fn new(timeout: Duration) -> Resolver {
        // reqwest is built without a default TLS provider (kube uses ring; two panic).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(USER_AGENT)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(|e| {
                // reqwest says "builder error"; the cause (no CA certificates) is its source.
                let why = match std::error::Error::source(&e) {
                    Some(cause) => format!("{e}: {cause}"),
                    None => e.to_string(),
                };
                tracing::warn!(
                    "no HTTP client for registries ({why}); image checks go through the engine"
                );
                why
            });
        Resolver {
            http,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// The digest `reference` (REGISTRY/NAME:TAG) names now: one HEAD, plus a token request
    /// when the registry asks for one and none is kept.
    pub(crate) async fn digest(&self, reference: &str) -> Result<String, RegistryError> {
        let (repository, tag, _) = split_reference(reference);
        let not_a_tag = || RegistryError::NotATag {
            reference: reference.to_string(),
        };
        let tag = tag.ok_or_else(not_a_tag)?;
        let (host, name) = repository.split_once('/').ok_or_else(not_a_tag)?;
        let host = if host == "docker.io" {
            "registry-1.docker.io"
        } else {
            host
        };
        let url = format!("{}://{host}/v2/{name}/manifests/{tag}", scheme(host));
        let kept = self.kept_token(&url);
        let answer = self.head(&url, kept.as_deref()).await?;
        let answer = if answer.status().as_u16() == 401 {
            let challenge = answer
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .and_then(Challenge::parse)
                .ok_or_else(|| RegistryError::Status {
                    url: url.clone(),
                    status: 401,
                    hint: Some(
                        "the registry wants credentials pilotd does not have; use a public image or a registry that lets anonymous pulls".into(),
                    ),
                })?;
            let token = self.token(&challenge).await?;
            self.remember(&url, token.clone());
            self.head(&url, Some(&token.0)).await?
        } else {
            answer
        };
        let status = answer.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(RegistryError::Status {
                url,
                status,
                hint: (status == 404).then(|| "check the image's name and tag".to_string()),
            });
        }
        answer
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .filter(|d| d.starts_with("sha256:"))
            .map(str::to_string)
            .ok_or(RegistryError::NoDigest { url })
    }

    fn client(&self) -> Result<&reqwest::Client, RegistryError> {
        self.http
            .as_ref()
            .map_err(|why| RegistryError::NoClient(why.clone()))
    }

    async fn head(
        &self,
        url: &str,
        token: Option<&str>,
    ) -> Result<reqwest::Response, RegistryError> {
        let mut req = self
            .client()?
            .head(url)
            .header(reqwest::header::ACCEPT, ACCEPT);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.map_err(transport(url))
    }

    /// An anonymous bearer token for the challenge's scope.
    async fn token(&self, c: &Challenge) -> Result<(String, Duration), RegistryError> {
        let url = c.url();
        let err = |why: String| RegistryError::Token {
            url: url.clone(),
            why,
        };
        let answer = self.client()?.get(&url).send().await;
        let answer = answer.map_err(transport(&url))?;
        let status = answer.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(RegistryError::Status {
                url,
                status,
                hint: Some("the registry refused an anonymous token".into()),
            });
        }
        let body = answer.bytes().await.map_err(|e| err(e.to_string()))?;
        #[derive(serde::Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
            expires_in: Option<u64>,
        }
        let t: TokenAnswer = serde_json::from_slice(&body).map_err(|e| err(e.to_string()))?;
        let token = t
            .token
            .or(t.access_token)
            .ok_or_else(|| err("no token in it".into()))?;
        // The distribution spec's default lifetime is 60 s; keep it a little less.
        let life = Duration::from_secs(t.expires_in.unwrap_or(60).saturating_sub(10).max(1));
        Ok((token, life))
    }

    fn kept_token(&self, url: &str) -> Option<String> {
        let tokens = self.tokens.lock().ok()?;
        tokens
            .get(url)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(t, _)| t.clone())
    }

    fn remember(&self, url: &str, (token, life): (String, Duration)) {
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.insert(url.to_string(), (token, Instant::now() + life));
        }
    }
}

/// A request to `url` that got no answer.
fn transport(url: &str) -> impl FnOnce(reqwest::Error) -> RegistryError + '_ {
    move |source| RegistryError::Transport {
        url: url.to_string(),
        source,
    }
}

/// Plain HTTP for loopback registries only (the engine's own default), HTTPS elsewhere.
fn scheme(host: &str) -> &'static str {
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let loopback = name == "localhost"
        || name == "[::1]"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback());
    if loopback { "http" } else { "https" }
}

/// A `WWW-Authenticate: Bearer realm="…",service="…",scope="…"` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Challenge {
    realm: String,
    params: Vec<(String, String)>,
}

impl Challenge {
    fn parse(header: &str) -> Option<Challenge> {
        let rest = header.trim().strip_prefix("Bearer ")?;
        let mut realm = None;
        let mut params = Vec::new();
        // key="value" pairs separated by commas; values may contain commas (scopes do not
        // in practice, but a realm URL may carry a query), so split on `",`.
        for part in rest.split("\",") {
            let (k, v) = part.split_once('=')?;
            let v = v.trim().trim_matches('"').to_string();
            match k.trim() {
                "realm" => realm = Some(v),
                k => params.push((k.to_string(), v)),
            }
        }
        Some(Challenge {
            realm: realm?,
            params,
        })
    }

    fn url(&self) -> String {
        let query: Vec<String> = self
            .params
            .iter()
            .filter(|(k, _)| k == "service" || k == "scope")
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        if query.is_empty() {
            self.realm.clone()
        } else {
            format!("{}?{}", self.realm, query.join("&"))
        }
    }
}

/// Percent-encodes a query value (scopes carry ':' and '/').
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_and_schemes() {
        let c = Challenge::parse(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#,
        )
        .unwrap();
        assert_eq!(
            c.url(),
            "https://auth.docker.io/token?service=registry.docker.io&scope=repository%3Alibrary%2Fbusybox%3Apull"
        );
        assert_eq!(Challenge::parse("Basic realm=\"x\""), None);
        assert_eq!(scheme("127.0.0.1:5000"), "http");
        assert_eq!(scheme("localhost:5000"), "http");
        assert_eq!(scheme("registry.example.org"), "https");
        assert_eq!(scheme("10.0.0.1:5000"), "https");
    }
}
