//! Checks of single values: instance ids, image references and `allowed_images` patterns,
//! the URLs pilotd fetches, environment names, and listeners beyond loopback.

use crate::config::units::Ipv4Net;

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
    let tag = name[last_slash..].rfind(':');
    tag.map_or(name, |i| &name[..last_slash + i])
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

/// Whether a listener on `ip` can be reached from other machines: anything but a loopback
/// address (0.0.0.0 and :: are every address, the public ones included).
pub fn beyond_loopback(ip: std::net::IpAddr) -> bool {
    !ip.to_canonical().is_loopback()
}

/// Why a proxy URL is refused (`[worker] http_proxy`, `https_proxy`); `shown` has its
/// credentials redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProxyError {
    #[error("`{shown}` is not a URL ({why})")]
    NotAUrl { shown: String, why: String },
    #[error("`{shown}` is not an http:// or https:// proxy URL")]
    Scheme { shown: String },
    #[error("`{shown}` carries a user name or password, which every job in the worker could read")]
    Credentials { shown: String },
    #[error("`{shown}` is on a private network that pilotd's egress filter keeps workers from")]
    Unreachable {
        shown: String,
        host: std::net::Ipv4Addr,
    },
}

impl ProxyError {
    pub(crate) fn hint(&self) -> String {
        match self {
            ProxyError::NotAUrl { .. } | ProxyError::Scheme { .. } => {
                "write the proxy as a URL, e.g. http_proxy = \"http://squid.example.org:3128\""
                    .into()
            }
            ProxyError::Credentials { .. } => {
                "let the proxy admit the workers by address instead (squid: an `acl src` rule)"
                    .into()
            }
            ProxyError::Unreachable { host, .. } => {
                format!(
                    "add its address to [worker] egress_allow, e.g. egress_allow = [\"{host}/32\"]"
                )
            }
        }
    }
}

/// A proxy URL workers can use: http or https, a host, no credentials, and (with `allowed`:
/// pilotd's own filtered network and its `egress_allow`) an address the filter lets through.
/// A proxy named by host name is resolved by the worker, so only an address is checked here.
pub(crate) fn proxy_url(
    raw: &str,
    allowed: &Option<Vec<Ipv4Net>>,
) -> Result<reqwest::Url, ProxyError> {
    let shown = redact::credentials(raw).into_owned();
    let url = reqwest::Url::parse(raw).map_err(|e| ProxyError::NotAUrl {
        shown: shown.clone(),
        why: e.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ProxyError::Scheme { shown });
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ProxyError::Credentials { shown });
    }
    let address = url
        .host_str()
        .and_then(|h| h.parse::<std::net::Ipv4Addr>().ok());
    if let (Some(allowed), Some(host)) = (allowed, address)
        && Ipv4Net::refused(host)
        && !allowed.iter().any(|n| n.contains(host))
    {
        return Err(ProxyError::Unreachable { shown, host });
    }
    Ok(url)
}
