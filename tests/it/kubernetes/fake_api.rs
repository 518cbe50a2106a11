//! An in-process fake Kubernetes API server for the kubernetes-mode integration tests: plain
//! HTTP on 127.0.0.1, an in-memory store of pods and Jobs, label selectors, list pagination
//! with `limit`/`continue`, create (409 AlreadyExists on a duplicate name), delete with
//! `propagationPolicy` (pods of a Job are removed only with Background/Foreground, as the real
//! garbage collector does; otherwise they are orphaned), injectable 500s, and a stand-in for
//! the Job controller that makes one Pending pod per created Job. Responses are shaped like
//! the real API server's (List kinds with `metadata.continue`, `Status` objects on errors),
//! so the real `kube` client is exercised end to end.
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
}

type Predicate = Box<dyn Fn(&Value) -> bool + Send>;

#[derive(Default)]
pub struct Store {
    /// "namespace/name" → object.
    pub pods: BTreeMap<String, Value>,
    pub jobs: BTreeMap<String, Value>,
    pub seen: Vec<Seen>,
    /// Job bodies for which POST answers 500.
    pub fail_create: Option<Predicate>,
    /// Every list answers 500 while set.
    pub fail_list: bool,
    /// Act as the Job controller: one Pending pod per created Job.
    pub make_pods: bool,
    resource_version: u64,
}

impl Store {
    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// Requests other than the given method, for counting a cycle's API traffic.
    pub fn count(&self, method: &str) -> usize {
        self.seen.iter().filter(|s| s.method == method).count()
    }
}

pub struct FakeKube {
    pub addr: SocketAddr,
    pub store: Arc<Mutex<Store>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeKube {
    pub async fn start() -> FakeKube {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let store = Arc::new(Mutex::new(Store {
            make_pods: true,
            ..Store::default()
        }));
        let s = store.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let s = s.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(s, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FakeKube { addr, store, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A real kube client pointed at this server.
    pub fn client(&self, namespace: &str) -> kube::Client {
        let mut config = kube::Config::new(self.url().parse().unwrap());
        config.default_namespace = namespace.to_string();
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

/// One term of a label selector: `k=v`, `k==v`, `k!=v`, `k`, `!k`.
fn matches_selector(labels: &Value, selector: &str) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            let get = |k: &str| labels.get(k).and_then(Value::as_str);
            if let Some((k, v)) = term.split_once("!=") {
                get(k.trim()) != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                get(k.trim()) == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                get(k).is_none()
            } else {
                get(term).is_some()
            }
        })
}

fn list(
    objects: &BTreeMap<String, Value>,
    namespace: &str,
    query: &BTreeMap<String, String>,
    kind: &str,
    api_version: &str,
    rv: String,
) -> Response<Full<Bytes>> {
    let selector = query.get("labelSelector").cloned().unwrap_or_default();
    let after = query.get("continue").cloned();
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let prefix = format!("{namespace}/");
    let mut matching = objects
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .filter(|(k, _)| after.as_ref().is_none_or(|a| k.as_str() > a.as_str()))
        .filter(|(_, o)| matches_selector(&o["metadata"]["labels"], &selector));
    let page: Vec<(&String, &Value)> = matching.by_ref().take(limit).collect();
    let more = matching.next().is_some();
    let mut meta = json!({"resourceVersion": rv});
    if more {
        // Opaque to clients; here simply the last key served.
        meta["continue"] = json!(page.last().unwrap().0);
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
    s.seen.push(Seen {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
    });
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&method, parts.as_slice()) {
        (&Method::GET, ["api", "v1", "namespaces", ns, "pods"]) => {
            if s.fail_list {
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "injected".into(),
                );
            }
            let rv = s.next_rv();
            list(&s.pods, ns, &query, "PodList", "v1", rv)
        }
        (&Method::GET, ["apis", "batch", "v1", "namespaces", ns, "jobs"]) => {
            if s.fail_list {
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "injected".into(),
                );
            }
            let rv = s.next_rv();
            list(&s.jobs, ns, &query, "JobList", "batch/v1", rv)
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
            let key = format!("{ns}/{name}");
            if s.jobs.contains_key(&key) {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    format!("jobs.batch \"{name}\" already exists"),
                );
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
            let key = format!("{ns}/{name}");
            let Some(mut job) = s.jobs.remove(&key) else {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("jobs.batch \"{name}\" not found"),
                );
            };
            let opts: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
            let policy = opts["propagationPolicy"].as_str().unwrap_or("Orphan");
            if policy == "Background" || policy == "Foreground" {
                let owned = |p: &Value| p["metadata"]["labels"]["job-name"].as_str() == Some(name);
                s.pods
                    .retain(|k, p| !(k.starts_with(&format!("{ns}/")) && owned(p)));
            }
            job["metadata"]["deletionTimestamp"] = json!("2026-12-01T21:31:00Z");
            respond(StatusCode::OK, &job)
        }
        _ => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the server could not find {path}"),
        ),
    }
}
