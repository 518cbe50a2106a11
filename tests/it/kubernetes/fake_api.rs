//! An in-process fake Kubernetes API server for the kubernetes-mode integration tests: plain
//! HTTP on 127.0.0.1 (`start`), or HTTPS with a CA of its own (`start_tls`) as a real API
//! server speaks to a pod's service account; an in-memory store of pods and Jobs, and a
//! stand-in for the Job controller that makes one Pending pod per created Job. Nothing real can
//! run here (no cluster), so it does what the real API server does on the requests pilotd
//! makes, each behaviour after the Kubernetes API conventions
//! (community/contributors/devel/sig-architecture/api-conventions.md, "API Concepts" in the
//! Kubernetes reference docs):
//!
//! - **Lists** ("Retrieving large results sets in chunks"): `limit` and an *opaque*
//!   `continue` token; every page of one list carries the list's one `resourceVersion`;
//!   `remainingItemCount` while more remain; a token older than the compaction point
//!   (`expire_tokens`) answers **410 Gone**, reason `Expired`, and a malformed one 400.
//! - **Label selectors** ("Labels and Selectors"): equality (`=`, `==`, `!=`), set-based
//!   (`in (..)`, `notin (..)`), existence (`k`, `!k`), terms joined by commas outside
//!   parentheses; an invalid selector is **400 BadRequest**.
//! - **Deletes** ("Garbage Collection", "Cascading deletion"): the body's
//!   `propagationPolicy` (a missing body is the Job default, `Orphan`; a body that is not
//!   DeleteOptions JSON is 400). `Background` removes the Job at once (200, a `Status` of
//!   `Success`) and its pods *later*, as the garbage collector does (`collect_garbage`, or
//!   after `gc_after` further requests); `Foreground` keeps the Job with a `deletionTimestamp`
//!   and the `foregroundDeletion` finalizer (**202 Accepted**, the object) until its pods are
//!   gone; `Orphan` leaves the pods.
//! - **Validation** (`pkg/apis/core/validation`, `errors.NewInvalid`): a created Job is checked
//!   as the API server checks the fields pilotd writes (names, labels, annotation keys, the
//!   restart policy, volume names — DNS-1123 labels, unique —, ConfigMap and Secret keys,
//!   mounts — of a volume of the pod's, each at a path of its own —, env names, quantities,
//!   requests at most their limits and equal to them for extended resources) and refused
//!   with **422**, reason `Invalid`, one `details.causes` entry per problem with its
//!   `field.ErrorType`, in the server's words (`job_causes`).
//! - **Errors** ("Response Status Kind"): every failure is a `Status` object with `reason`
//!   and `code`; 403/409/410/422/429/500 can be injected per verb and resource (`inject`), a
//!   429 with a `Retry-After` header and `details.retryAfterSeconds`.
#![allow(dead_code)]

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    /// The `Authorization` header as sent (e.g. `Bearer <token>`), if any: which credential
    /// the client presented.
    pub authorization: Option<String>,
}

type Predicate = Box<dyn Fn(&Value) -> bool + Send>;

#[derive(Default)]
pub struct Store {
    /// "namespace/name" → object.
    pub pods: BTreeMap<String, Value>,
    pub jobs: BTreeMap<String, Value>,
    pub seen: Vec<Seen>,
    /// TLS handshakes that failed (`start_tls`), as the server saw them: e.g. the client's
    /// alert when it does not trust the certificate. Such a client sends no request.
    pub handshake_failures: Vec<String>,
    /// Job bodies for which POST answers 500.
    pub fail_create: Option<Predicate>,
    /// Every list answers 500 while set.
    pub fail_list: bool,
    /// Act as the Job controller: one Pending pod per created Job.
    pub make_pods: bool,
    /// Failures to answer, by (verb, resource); see `FakeKube::inject`.
    pub injected: Vec<Injected>,
    /// Continue tokens of lists older than this resourceVersion are expired (compaction).
    pub compacted_below: u64,
    /// Pods the garbage collector will delete, with the requests left before it does.
    pub garbage: Vec<(String, u32)>,
    /// Requests between a cascading delete and the collector acting on it.
    pub gc_after: u32,
    /// Compact (expire every continue token so far) after serving this many more list pages.
    pub compact_after_pages: Option<u32>,
    resource_version: u64,
}

/// One injected failure: `verb` is list, create or delete; `resource` pods or jobs.
#[derive(Debug, Clone)]
pub struct Injected {
    pub verb: &'static str,
    pub resource: &'static str,
    pub code: u16,
    /// Seconds in `Retry-After` (429).
    pub retry_after: Option<u32>,
    /// How many requests it answers; `None`: until removed.
    pub times: Option<u32>,
}

impl Store {
    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// The injected failure for this request, if any (spent once).
    fn injected(&mut self, verb: &str, resource: &str) -> Option<Injected> {
        let i = self
            .injected
            .iter()
            .position(|f| f.verb == verb && f.resource == resource)?;
        let f = self.injected[i].clone();
        match &mut self.injected[i].times {
            Some(1) => {
                self.injected.remove(i);
            }
            Some(n) => *n -= 1,
            None => {}
        }
        Some(f)
    }

    /// One step of the garbage collector: pods whose owner is gone get a deletionTimestamp
    /// first (graceful termination), then vanish; a Foreground-deleted Job goes once its
    /// pods have.
    fn collect(&mut self, all: bool) {
        let mut keep = Vec::new();
        for (key, left) in std::mem::take(&mut self.garbage) {
            if all || left == 0 {
                self.pods.remove(&key);
            } else {
                if let Some(p) = self.pods.get_mut(&key) {
                    p["metadata"]["deletionTimestamp"] = json!("2026-12-01T21:31:00Z");
                }
                keep.push((key, left - 1));
            }
        }
        self.garbage = keep;
        let pods = &self.pods;
        self.jobs.retain(|_, j| {
            let foreground = j["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "foregroundDeletion"));
            let name = j["metadata"]["name"].as_str().unwrap_or("");
            !foreground
                || pods
                    .values()
                    .any(|p| p["metadata"]["labels"]["job-name"].as_str() == Some(name))
        });
    }

    /// Requests other than the given method, for counting a cycle's API traffic.
    pub fn count(&self, method: &str) -> usize {
        self.seen.iter().filter(|s| s.method == method).count()
    }
}

pub struct FakeKube {
    pub addr: SocketAddr,
    pub store: Arc<Mutex<Store>>,
    /// With `start_tls`: the PEM of the CA that signed the server's certificate, what a
    /// client must trust (a pod's `ca.crt`).
    pub ca_pem: Option<String>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A CA of the test's own and a server certificate it signed for 127.0.0.1 (an IP SAN: the
/// in-cluster client connects to `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`
/// and checks the certificate against that address), as a cluster's CA signs its API server's.
/// The CA is named after the server's address, so two fakes' CAs are two different issuers.
fn tls_identity(addr: SocketAddr) -> (String, tokio_rustls::TlsAcceptor) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("fake kubernetes CA of {addr}"));
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let server_cert = server.signed_by(&server_key, &issuer).unwrap();
    // ring, as pilotd's own TLS stack: no second crypto provider in the tree.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![server_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
        )
        .unwrap();
    (
        ca_cert.pem(),
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    )
}

/// Serves one connection (plain or TLS) with `handle`.
async fn serve_connection<IO>(store: Arc<Mutex<Store>>, io: IO)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let s = store.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(s, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
        .await;
}

impl FakeKube {
    /// Plain HTTP, for tests that hand the client its URL.
    pub async fn start() -> FakeKube {
        FakeKube::listen(false).await
    }

    /// HTTPS with a fresh CA (`ca_pem`) and a certificate for 127.0.0.1, for clients that
    /// insist on TLS, as the in-cluster one does (`client`, `raw_client` and `kubeconfig` do
    /// not carry the CA: they are for `start`'s server).
    pub async fn start_tls() -> FakeKube {
        FakeKube::listen(true).await
    }

    async fn listen(tls: bool) -> FakeKube {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let store = Arc::new(Mutex::new(Store {
            make_pods: true,
            gc_after: 2,
            ..Store::default()
        }));
        let (ca_pem, acceptor) = tls.then(|| tls_identity(addr)).unzip();
        let s = store.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let s = s.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        None => serve_connection(s, stream).await,
                        // A client that does not trust the CA ends the handshake: no request
                        // is seen, as with a real server; the failure is kept for the test.
                        Some(a) => match a.accept(stream).await {
                            Ok(tls) => serve_connection(s, tls).await,
                            Err(e) => s.lock().unwrap().handshake_failures.push(e.to_string()),
                        },
                    }
                });
            }
        });
        FakeKube {
            addr,
            store,
            ca_pem,
            task,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// A real kube client pointed at this server.
    pub fn client(&self, namespace: &str) -> kube::Client {
        let mut config = kube::Config::new(self.url().parse().unwrap());
        config.default_namespace = namespace.to_string();
        kube::Client::try_from(config).unwrap()
    }

    /// A client that sees every answer as sent: no retry of 429/503 (kube's default client
    /// waits those out), for tests of the fake itself.
    pub fn raw_client(&self) -> kube::Client {
        let mut config = kube::Config::new(self.url().parse().unwrap());
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    }

    /// A kubeconfig file naming this server, for code that connects by itself.
    pub fn kubeconfig(&self, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {namespace}\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n",
            self.url()
        )
    }

    pub fn insert_pod(&self, namespace: &str, pod: Value) {
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        self.store
            .lock()
            .unwrap()
            .pods
            .insert(format!("{namespace}/{name}"), pod);
    }

    /// Sets the phase of every pod (as the kubelet would).
    pub fn set_all_pod_phases(&self, phase: &str) {
        let mut s = self.store.lock().unwrap();
        for p in s.pods.values_mut() {
            p["status"]["phase"] = json!(phase);
            if phase != "Pending" {
                p["status"]["containerStatuses"] = json!([{"name": "htcondor", "image": "x", "imageID": "", "ready": false, "restartCount": 0}]);
            }
        }
    }

    pub fn jobs(&self) -> Vec<Value> {
        self.store.lock().unwrap().jobs.values().cloned().collect()
    }

    pub fn pods(&self) -> Vec<Value> {
        self.store.lock().unwrap().pods.values().cloned().collect()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.store.lock().unwrap().seen.clone()
    }

    pub fn clear_seen(&self) {
        self.store.lock().unwrap().seen.clear();
    }

    /// Answers the next `times` (or every) `verb` on `resource` with `code`.
    pub fn inject(
        &self,
        verb: &'static str,
        resource: &'static str,
        code: u16,
        times: Option<u32>,
    ) {
        self.store.lock().unwrap().injected.push(Injected {
            verb,
            resource,
            code,
            retry_after: (code == 429).then_some(1),
            times,
        });
    }

    /// Compacts the store: continue tokens of every list made so far expire (410).
    pub fn expire_tokens(&self) {
        let mut s = self.store.lock().unwrap();
        s.compacted_below = s.resource_version + 1;
    }

    /// Runs the garbage collector to completion.
    pub fn collect_garbage(&self) {
        self.store.lock().unwrap().collect(true);
    }
}

fn failure(f: &Injected) -> Response<Full<Bytes>> {
    let (code, reason) = match f.code {
        403 => (StatusCode::FORBIDDEN, "Forbidden"),
        409 => (StatusCode::CONFLICT, "Conflict"),
        410 => (StatusCode::GONE, "Expired"),
        422 => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"),
        429 => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
    };
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": format!("injected {} on {} {}", f.code, f.verb, f.resource),
        "reason": reason, "code": f.code
    });
    let mut r = Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if let Some(secs) = f.retry_after {
        body["details"] = json!({"retryAfterSeconds": secs});
        r = r.header("retry-after", secs.to_string());
    }
    r.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

fn respond(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn status(code: StatusCode, reason: &str, message: String) -> Response<Full<Bytes>> {
    respond(
        code,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()
        }),
    )
}

/// A 422 as the API server answers a create that fails validation: a `Status` of reason
/// `Invalid`, the message `Kind.group "name" is invalid: cause, cause`, one `details.causes`
/// entry per cause with its field.
fn invalid(
    kind: &str,
    group: &str,
    name: &str,
    causes: &[(String, String)],
) -> Response<Full<Bytes>> {
    // `errors.NewAggregate(...).Error()`: each distinct `field: message` once, bracketed when
    // more than one remains.
    let mut distinct: Vec<String> = Vec::new();
    for (field, m) in causes {
        let line = format!("{field}: {m}");
        if !distinct.contains(&line) {
            distinct.push(line);
        }
    }
    let message = if distinct.len() > 1 {
        format!("[{}]", distinct.join(", "))
    } else {
        distinct.concat()
    };
    let causes: Vec<Value> = causes
        .iter()
        .map(|(field, m)| {
            // `field.ErrorType`, whose words open the message (`ErrorBody`).
            let reason = if m.starts_with("Required value") {
                "FieldValueRequired"
            } else if m.starts_with("Unsupported value") {
                "FieldValueNotSupported"
            } else if m.starts_with("Duplicate value") {
                "FieldValueDuplicate"
            } else if m.starts_with("Not found") {
                "FieldValueNotFound"
            } else {
                "FieldValueInvalid"
            };
            json!({"reason": reason, "message": m, "field": field})
        })
        .collect();
    respond(
        StatusCode::UNPROCESSABLE_ENTITY,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("{kind}.{group} \"{name}\" is invalid: {message}"),
            "reason": "Invalid",
            "details": {"name": name, "group": group, "kind": kind, "causes": causes},
            "code": 422
        }),
    )
}

/// A DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63): container names, and the
/// parts of a subdomain. Written here from the API conventions, not taken from pilotd.
fn dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && edge(&b[0])
        && edge(&b[b.len() - 1])
        && b.iter().all(|c| edge(c) || *c == b'-')
}

/// A DNS-1123 subdomain: at most 253 of `[a-z0-9]([-a-z0-9]*[a-z0-9])?` joined by dots (no
/// length limit of its own on each part, unlike a label).
fn dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            !b.is_empty()
                && edge(&b[0])
                && edge(&b[b.len() - 1])
                && b.iter().all(|c| edge(c) || *c == b'-')
        })
}

/// A label key: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// (`([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`).
fn label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(dns1123_subdomain) && !name.is_empty() && label_value(name)
}

/// A label value: empty, or at most 63 of `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
fn label_value(v: &str) -> bool {
    let b = v.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

/// A resource quantity (`resource.ParseQuantity`): a signed decimal number, then nothing, a
/// binary suffix (Ki…Ei), a decimal one (n u m k M G T P E) or an exponent (e/E and an
/// integer).
fn quantity(q: &str) -> bool {
    let q = q.strip_prefix(['+', '-']).unwrap_or(q);
    let digits_end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(digits_end);
    let number_ok = !number.is_empty()
        && number.matches('.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()));
    number_ok && suffix_ok
}

/// `validation.RegexError`: the message, its examples and the regular expression, in the API
/// server's words (the doubled space after each example's comma is its own).
fn regex_error(message: &str, regex: &str, examples: &[&str]) -> String {
    let examples: String = examples
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{}'{e}', ", if i > 0 { " or " } else { "" }))
        .collect();
    if examples.is_empty() {
        format!("{message} (regex used for validation is '{regex}')")
    } else {
        format!("{message} (e.g. {examples}regex used for validation is '{regex}')")
    }
}

fn dns1123_label_error(value: &str) -> String {
    if value.len() > 63 {
        return format!("Invalid value: \"{value}\": must be no more than 63 characters");
    }
    format!(
        "Invalid value: \"{value}\": {}",
        regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "123-abc"],
        )
    )
}

/// `IsEnvVarName` as API servers before the relaxed rule (RelaxedEnvironmentVariableValidation,
/// beta in 1.32) check it: the strictest server pilotd may meet.
fn env_name_errors(name: &str) -> Vec<String> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_alphabetic() || matches!(b[0], b'-' | b'.' | b'_'))
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    let mut out = Vec::new();
    if !ok {
        out.push(regex_error(
            "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit",
            "[-._a-zA-Z][-._a-zA-Z0-9]*",
            &["my.env-name", "MY_ENV.NAME", "MyEnvName1"],
        ));
    }
    // `hasChDirPrefix`.
    if name == "." {
        out.push("must not be '.'".into());
    } else if name == ".." {
        out.push("must not be '..'".into());
    } else if name.starts_with("..") {
        out.push("must not start with '..'".into());
    }
    out
}

/// A ConfigMap or Secret key (`IsConfigMapKey`), the errors in the API server's words.
fn config_map_key_errors(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if key.len() > 253 {
        out.push("must be no more than 253 characters".into());
    }
    if !key
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
    {
        out.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if key == "." {
        out.push("must not be '.'".into());
    } else if key == ".." {
        out.push("must not be '..'".into());
    } else if key.starts_with("..") {
        out.push("must not start with '..'".into());
    }
    out
}

/// A quantity's value, to compare a request with its limit (`Quantity.Cmp`); `None` when it
/// does not parse (reported on its own).
fn quantity_value(q: &str) -> Option<f64> {
    if !quantity(q) {
        return None;
    }
    let end = q
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(end);
    let number: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e => 10f64.powi(e[1..].parse().ok()?),
    };
    Some(number * scale)
}

/// Resources whose request may be below the limit (`IsOvercommitAllowed`): the standard ones
/// but hugepages; an extended resource's (a GPU, a device) must equal its limit.
fn overcommit_allowed(resource: &str) -> bool {
    !resource.contains('/') && !resource.starts_with("hugepages-")
}

/// What the API server refuses in a Job pilotd could send (field path, message in its words,
/// after `pkg/apis/core/validation`): object names, labels and annotation keys, the restart
/// policy, volumes (names: DNS-1123 labels, unique; ConfigMap and Secret items), and per
/// container its name, image, env names, mounts (a volume of the pod's, a path of its own)
/// and resources (quantities; requests at most the limits, equal for extended resources).
fn job_causes(job: &Value) -> Vec<(String, String)> {
    let mut causes = Vec::new();
    let mut add = |field: String, message: String| causes.push((field, message));
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    if !dns1123_subdomain(name) {
        add(
            "metadata.name".into(),
            format!(
                "Invalid value: \"{name}\": {}",
                regex_error(
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
                    &["example.com"],
                )
            ),
        );
    } else if name.len() > 63 {
        // The Job controller labels its pods with the Job's name (`job-name`), a label value.
        add(
            "spec.template.labels".into(),
            format!("Invalid value: \"{name}\": must be no more than 63 characters"),
        );
    }
    let name_part = |k: &str| {
        format!(
            "Invalid value: \"{k}\": {}",
            regex_error(
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]",
                &["MyName", "my.name", "123-abc"],
            )
        )
    };
    for (at, labels) in [
        ("metadata.labels", &job["metadata"]["labels"]),
        (
            "spec.template.labels",
            &job["spec"]["template"]["metadata"]["labels"],
        ),
    ] {
        for (k, v) in labels.as_object().into_iter().flatten() {
            if !label_key(k) {
                add(at.to_string(), name_part(k));
            }
            match v.as_str() {
                Some(v) if label_value(v) => {}
                _ => add(
                    at.to_string(),
                    format!(
                        "Invalid value: {v}: {}",
                        regex_error(
                            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
                            &["MyValue", "my_value", "12345"],
                        )
                    ),
                ),
            }
        }
    }
    for (at, annotations) in [
        ("metadata.annotations", &job["metadata"]["annotations"]),
        (
            "spec.template.annotations",
            &job["spec"]["template"]["metadata"]["annotations"],
        ),
    ] {
        for k in annotations
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            if !label_key(k) {
                add(at.to_string(), name_part(k));
            }
        }
    }
    let pod = &job["spec"]["template"]["spec"];
    match pod["restartPolicy"].as_str() {
        Some("Never" | "OnFailure") => {}
        None => add(
            "spec.template.spec.restartPolicy".into(),
            "Required value: valid values: \"OnFailure\", \"Never\"".into(),
        ),
        Some(other) => add(
            "spec.template.spec.restartPolicy".into(),
            format!("Unsupported value: \"{other}\": supported values: \"OnFailure\", \"Never\""),
        ),
    }
    // Volumes (`ValidateVolumes`): a volume with an error is not one mounts may name.
    let mut volume_names: Vec<String> = Vec::new();
    for (i, v) in pod["volumes"].as_array().into_iter().flatten().enumerate() {
        let at = format!("spec.template.spec.volumes[{i}]");
        let vname = v["name"].as_str().unwrap_or_default();
        let mut errors = Vec::new();
        if vname.is_empty() {
            errors.push((format!("{at}.name"), "Required value".to_string()));
        } else if !dns1123_label(vname) {
            errors.push((format!("{at}.name"), dns1123_label_error(vname)));
        }
        if volume_names.iter().any(|n| n == vname) {
            errors.push((
                format!("{at}.name"),
                format!("Duplicate value: \"{vname}\""),
            ));
        }
        for source in ["configMap", "secret"] {
            for (j, item) in v[source]["items"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let item_at = format!("{at}.{source}.items[{j}]");
                let key = item["key"].as_str().unwrap_or_default();
                if key.is_empty() {
                    errors.push((format!("{item_at}.key"), "Required value".into()));
                } else {
                    for m in config_map_key_errors(key) {
                        errors.push((
                            format!("{item_at}.key"),
                            format!("Invalid value: \"{key}\": {m}"),
                        ));
                    }
                }
                let path = item["path"].as_str().unwrap_or_default();
                if path.is_empty() {
                    errors.push((format!("{item_at}.path"), "Required value".into()));
                } else if path.starts_with('/') {
                    errors.push((
                        format!("{item_at}.path"),
                        format!("Invalid value: \"{path}\": must be a relative path"),
                    ));
                } else if path.split('/').any(|p| p == "..") {
                    errors.push((
                        format!("{item_at}.path"),
                        format!("Invalid value: \"{path}\": must not contain '..'"),
                    ));
                }
            }
        }
        if errors.is_empty() {
            volume_names.push(vname.to_string());
        }
        for (f, m) in errors {
            add(f, m);
        }
    }
    let containers = pod["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        add(
            "spec.template.spec.containers".into(),
            "Required value".into(),
        );
    }
    for (i, c) in containers.iter().enumerate() {
        let at = format!("spec.template.spec.containers[{i}]");
        let cname = c["name"].as_str().unwrap_or_default();
        if !dns1123_label(cname) {
            add(format!("{at}.name"), dns1123_label_error(cname));
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            add(format!("{at}.image"), "Required value".into());
        }
        // `ValidateEnv`.
        for (j, e) in c["env"].as_array().into_iter().flatten().enumerate() {
            let ename = e["name"].as_str().unwrap_or_default();
            if ename.is_empty() {
                add(format!("{at}.env[{j}].name"), "Required value".into());
            }
            for m in env_name_errors(ename) {
                add(
                    format!("{at}.env[{j}].name"),
                    format!("Invalid value: \"{ename}\": {m}"),
                );
            }
        }
        // `ValidateVolumeMounts`.
        let mut mount_paths: Vec<&str> = Vec::new();
        for (j, m) in c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let mat = format!("{at}.volumeMounts[{j}]");
            let mname = m["name"].as_str().unwrap_or_default();
            if mname.is_empty() {
                add(format!("{mat}.name"), "Required value".into());
            }
            if !volume_names.iter().any(|n| n == mname) {
                add(format!("{mat}.name"), format!("Not found: \"{mname}\""));
            }
            let path = m["mountPath"].as_str().unwrap_or_default();
            if path.is_empty() {
                add(format!("{mat}.mountPath"), "Required value".into());
            }
            if mount_paths.contains(&path) {
                add(
                    format!("{mat}.mountPath"),
                    format!("Invalid value: \"{path}\": must be unique"),
                );
            }
            mount_paths.push(path);
            if let Some(sub) = m["subPath"].as_str() {
                if sub.starts_with('/') {
                    add(
                        format!("{mat}.subPath"),
                        format!("Invalid value: \"{sub}\": must be a relative path"),
                    );
                } else if sub.split('/').any(|p| p == "..") {
                    add(
                        format!("{mat}.subPath"),
                        format!("Invalid value: \"{sub}\": must not contain '..'"),
                    );
                }
            }
        }
        let resources = &c["resources"];
        let text = |q: &Value| {
            // Quantities are strings or JSON numbers.
            q.as_str()
                .map(str::to_string)
                .or_else(|| q.as_number().map(|n| n.to_string()))
        };
        for kind in ["requests", "limits"] {
            for (r, q) in resources[kind].as_object().into_iter().flatten() {
                if !text(q).as_deref().is_some_and(quantity) {
                    add(
                        format!("{at}.resources.{kind}[{r}]"),
                        format!(
                            "Invalid value: {q}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                        ),
                    );
                }
            }
        }
        // Requests against limits (`ValidateContainerResourceRequirements`); the quantities
        // are printed as sent, where the server prints them canonicalised ("1.5" as "1500m").
        for (r, req) in resources["requests"].as_object().into_iter().flatten() {
            let Some(lim) = resources["limits"].get(r) else {
                continue;
            };
            let (Some(req_text), Some(lim_text)) = (text(req), text(lim)) else {
                continue;
            };
            let (Some(rv), Some(lv)) = (quantity_value(&req_text), quantity_value(&lim_text))
            else {
                continue;
            };
            let message = if rv != lv && !overcommit_allowed(r) {
                Some(format!("must be equal to {r} limit of {lim_text}"))
            } else if rv > lv {
                Some(format!(
                    "must be less than or equal to {r} limit of {lim_text}"
                ))
            } else {
                None
            };
            if let Some(m) = message {
                add(
                    format!("{at}.resources.requests"),
                    format!("Invalid value: \"{req_text}\": {m}"),
                );
            }
        }
    }
    causes
}

/// One parsed selector requirement.
enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

fn valid_key(k: &str) -> bool {
    pilotd_kubernetes::config::is_label_key(k)
}

fn valid_value(v: &str) -> bool {
    pilotd_kubernetes::config::is_label_value(v)
}

/// Parses a label selector as the API server does (`labels.Parse`): terms separated by
/// commas outside parentheses; an error names the bad term.
fn parse_selector(selector: &str) -> Result<Vec<Requirement>, String> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("unmatched ')' in {selector:?}"));
        }
    }
    if depth != 0 {
        return Err(format!("unmatched '(' in {selector:?}"));
    }
    terms.push(&selector[start..]);
    let mut out = Vec::new();
    for term in terms.into_iter().map(str::trim) {
        if term.is_empty() {
            if selector.trim().is_empty() {
                continue;
            }
            return Err(format!("empty term in {selector:?}"));
        }
        let set = |rest: &str, key: &str| -> Result<Vec<String>, String> {
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("{term:?}: expected a parenthesised set"))?;
            let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
            if !valid_key(key) || values.iter().any(|v| !valid_value(v)) {
                return Err(format!("{term:?}: invalid key or value"));
            }
            Ok(values)
        };
        let req = if let Some((k, v)) = term.split_once("!=") {
            Requirement::NotEq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            Requirement::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, rest)) = term.split_once(" notin ") {
            Requirement::NotIn(k.trim().into(), set(rest, k.trim())?)
        } else if let Some((k, rest)) = term.split_once(" in ") {
            Requirement::In(k.trim().into(), set(rest, k.trim())?)
        } else if let Some(k) = term.strip_prefix('!') {
            Requirement::NotExists(k.trim().into())
        } else {
            Requirement::Exists(term.into())
        };
        let (key, value) = match &req {
            Requirement::Eq(k, v) | Requirement::NotEq(k, v) => (k, Some(v)),
            Requirement::In(k, _) | Requirement::NotIn(k, _) => (k, None),
            Requirement::Exists(k) | Requirement::NotExists(k) => (k, None),
        };
        if !valid_key(key) || value.is_some_and(|v| !valid_value(v)) {
            return Err(format!("{term:?}: invalid label key or value"));
        }
        out.push(req);
    }
    Ok(out)
}

fn matches_selector(labels: &Value, selector: &[Requirement]) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    selector.iter().all(|r| match r {
        Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
        Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
        Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
        Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
        Requirement::Exists(k) => get(k).is_some(),
        Requirement::NotExists(k) => get(k).is_none(),
    })
}

/// `continue` tokens: opaque to clients (hex of the list's resourceVersion and the last key
/// served), as the real server's base64 of an internal key is.
fn encode_token(rv: u64, last: &str) -> String {
    format!("{rv}\n{last}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_token(t: &str) -> Option<(u64, String)> {
    let bytes: Option<Vec<u8>> = (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(t.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (rv, last) = text.split_once('\n')?;
    Some((rv.parse().ok()?, last.to_string()))
}

fn list(
    s: &mut Store,
    resource: &'static str,
    namespace: &str,
    query: &BTreeMap<String, String>,
) -> Response<Full<Bytes>> {
    if s.fail_list {
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "injected".into(),
        );
    }
    if let Some(f) = s.injected("list", resource) {
        return failure(&f);
    }
    let selector = match parse_selector(query.get("labelSelector").map_or("", String::as_str)) {
        Ok(sel) => sel,
        Err(e) => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("unable to parse requirement: {e}"),
            );
        }
    };
    // One resourceVersion per list: the first page's, carried by the token.
    let (rv, after) = match query.get("continue") {
        None => (s.next_rv().parse::<u64>().unwrap(), None),
        Some(t) => match decode_token(t) {
            None => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "continue key is not valid".into(),
                );
            }
            Some((rv, _)) if rv < s.compacted_below => {
                return status(
                    StatusCode::GONE,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                );
            }
            Some((rv, last)) => (rv, Some(last)),
        },
    };
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let (objects, kind, api_version) = if resource == "pods" {
        (&s.pods, "PodList", "v1")
    } else {
        (&s.jobs, "JobList", "batch/v1")
    };
    let prefix = format!("{namespace}/");
    let matching: Vec<(&String, &Value)> = objects
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .filter(|(k, _)| after.as_ref().is_none_or(|a| k.as_str() > a.as_str()))
        .filter(|(_, o)| matches_selector(&o["metadata"]["labels"], &selector))
        .collect();
    let page = &matching[..limit.min(matching.len())];
    if let Some(n) = s.compact_after_pages.as_mut() {
        *n = n.saturating_sub(1);
        if *n == 0 {
            s.compact_after_pages = None;
            s.compacted_below = s.resource_version + 1;
        }
    }
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if matching.len() > page.len() {
        meta["continue"] = json!(encode_token(rv, page.last().unwrap().0));
        meta["remainingItemCount"] = json!(matching.len() - page.len());
    }
    respond(
        StatusCode::OK,
        &json!({
            "kind": kind, "apiVersion": api_version, "metadata": meta,
            "items": page.iter().map(|(_, o)| (*o).clone()).collect::<Vec<_>>()
        }),
    )
}

async fn handle(store: Arc<Mutex<Store>>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let authorization = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let query: BTreeMap<String, String> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut s = store.lock().unwrap();
    s.collect(false);
    s.seen.push(Seen {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        authorization,
    });
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&method, parts.as_slice()) {
        (&Method::GET, ["api", "v1", "namespaces", ns, "pods"]) => list(&mut s, "pods", ns, &query),
        (&Method::GET, ["apis", "batch", "v1", "namespaces", ns, "jobs"]) => {
            list(&mut s, "jobs", ns, &query)
        }
        (&Method::POST, ["apis", "batch", "v1", "namespaces", ns, "jobs"]) => {
            let Ok(mut job) = serde_json::from_slice::<Value>(&body) else {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "body is not JSON".into(),
                );
            };
            let Some(name) = job["metadata"]["name"].as_str().map(str::to_string) else {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "metadata.name: Required value".into(),
                );
            };
            let causes = job_causes(&job);
            if !causes.is_empty() {
                return invalid("Job", "batch", &name, &causes);
            }
            let key = format!("{ns}/{name}");
            if s.jobs.contains_key(&key) {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    format!("jobs.batch \"{name}\" already exists"),
                );
            }
            if let Some(f) = s.injected("create", "jobs") {
                return failure(&f);
            }
            if s.fail_create.as_ref().is_some_and(|f| f(&job)) {
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "injected failure".into(),
                );
            }
            let rv = s.next_rv();
            let uid = format!("uid-{rv}");
            job["metadata"]["namespace"] = json!(ns);
            job["metadata"]["uid"] = json!(uid);
            job["metadata"]["resourceVersion"] = json!(rv);
            job["metadata"]["creationTimestamp"] = json!("2026-12-01T21:30:00Z");
            job["status"] = json!({});
            if s.make_pods {
                let tmpl = &job["spec"]["template"];
                let mut labels = tmpl["metadata"]["labels"].clone();
                labels["job-name"] = json!(name);
                labels["batch.kubernetes.io/job-name"] = json!(name);
                labels["controller-uid"] = json!(uid);
                let pod_name = format!("{name}-x{rv}");
                let pod = json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {
                        "name": pod_name, "namespace": ns, "labels": labels,
                        "annotations": tmpl["metadata"]["annotations"].clone(),
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": true}]
                    },
                    "spec": tmpl["spec"].clone(),
                    "status": {"phase": "Pending"}
                });
                s.pods.insert(format!("{ns}/{pod_name}"), pod);
            }
            s.jobs.insert(key, job.clone());
            respond(StatusCode::CREATED, &job)
        }
        (&Method::DELETE, ["apis", "batch", "v1", "namespaces", ns, "jobs", name]) => {
            if let Some(f) = s.injected("delete", "jobs") {
                return failure(&f);
            }
            // No body: the Job default (Orphan). A body must be DeleteOptions.
            let opts: Value = if body.is_empty() {
                json!({})
            } else {
                match serde_json::from_slice::<Value>(&body) {
                    Ok(v) if v.is_object() => v,
                    _ => {
                        return status(
                            StatusCode::BAD_REQUEST,
                            "BadRequest",
                            "the body of the request was in an unknown format".into(),
                        );
                    }
                }
            };
            let policy = opts["propagationPolicy"]
                .as_str()
                .unwrap_or("Orphan")
                .to_string();
            if !matches!(policy.as_str(), "Orphan" | "Background" | "Foreground") {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    format!("propagationPolicy: Unsupported value: \"{policy}\""),
                );
            }
            let key = format!("{ns}/{name}");
            let Some(job) = s.jobs.get(&key).cloned() else {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("jobs.batch \"{name}\" not found"),
                );
            };
            let owned: Vec<String> = s
                .pods
                .iter()
                .filter(|(k, p)| {
                    k.starts_with(&format!("{ns}/"))
                        && p["metadata"]["labels"]["job-name"].as_str() == Some(*name)
                })
                .map(|(k, _)| k.clone())
                .collect();
            let later = s.gc_after;
            if policy != "Orphan" {
                s.garbage.extend(owned.iter().map(|k| (k.clone(), later)));
            }
            if policy == "Foreground" && !owned.is_empty() {
                let j = s.jobs.get_mut(&key).unwrap();
                j["metadata"]["deletionTimestamp"] = json!("2026-12-01T21:31:00Z");
                j["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
                let j = j.clone();
                return respond(StatusCode::ACCEPTED, &j);
            }
            s.jobs.remove(&key);
            respond(
                StatusCode::OK,
                &json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": name, "group": "batch", "kind": "jobs", "uid": job["metadata"]["uid"]}
                }),
            )
        }
        _ => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the server could not find {path}"),
        ),
    }
}
