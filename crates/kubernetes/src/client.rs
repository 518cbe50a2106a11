//! The Kubernetes side of kubernetes mode (kube + k8s-openapi): connect from the source the
//! config names (never `Config::infer`, which prefers a stray kubeconfig over the pod's own
//! account), list this provisioner's pods and Jobs by label (paginated: one request per
//! page), create Jobs, and delete finished Jobs with background propagation (a plain delete
//! orphans their pods). It decides nothing: the plan says what to create and delete.
//!
//! Lists are read page by page straight into `observed::WorkerPod`/`WorkerJob`: each page's
//! bodies are parsed for the fields a decision reads and the rest is skipped as it is read,
//! so the cycle's memory follows the number of pods, not the size of their bodies.

use crate::config::ClientSource;
use crate::observed::{WorkerJob, WorkerPod};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(
        "cannot use the in-cluster service account: {0}\n  hint: run pilotd inside a pod with a service account, or set [kubernetes] client = \"kubeconfig\""
    )]
    InCluster(String),
    #[error("cannot load kubeconfig {}: {message}\n  hint: check [kubernetes] kubeconfig / context, or $KUBECONFIG", path.as_ref().map_or("(default)".to_string(), |p| p.display().to_string()))]
    Kubeconfig {
        path: Option<PathBuf>,
        message: String,
    },
    #[error("cannot build the Kubernetes client: {0}")]
    Client(String),
    #[error(
        "listing {what} in namespace {namespace} (selector {selector}) failed: {}\n  hint: check the API server is reachable and the Role allows list on {what}",
        pilotd_core::service::logging::with_causes(.source.as_ref())
    )]
    List {
        what: &'static str,
        namespace: String,
        selector: String,
        source: Box<kube::Error>,
    },
    #[error(
        "creating Job {name} failed: {}\n  hint: check the Role allows create on batch/jobs and the namespace quota",
        pilotd_core::service::logging::with_causes(.source.as_ref())
    )]
    Create {
        name: String,
        source: Box<kube::Error>,
    },
    #[error(
        "deleting Job {name} failed: {}\n  hint: it is retried next cycle; check the Role allows delete on batch/jobs",
        pilotd_core::service::logging::with_causes(.source.as_ref())
    )]
    Delete {
        name: String,
        source: Box<kube::Error>,
    },
}

/// Where the API server is and which of its objects are this provisioner's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub source: ClientSource,
    /// With `ClientSource::Kubeconfig`: the file (else `$KUBECONFIG`, else `~/.kube/config`)
    /// and the context (else the file's current one).
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: String,
    /// This provisioner's pods and Jobs (see `identity::selector`).
    pub selector: String,
    /// `limit` of one list request.
    pub page_size: u32,
}

/// One page of a list: its items and the token for the next page.
#[derive(Deserialize)]
struct Page<T> {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default = "Vec::new")]
    items: Vec<T>,
}

#[derive(Default, Deserialize)]
struct PageMeta {
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
}

/// Client for one namespace and one provisioner's label selector.
pub struct KubeBackend {
    client: kube::Client,
    jobs: Api<Job>,
    namespace: String,
    selector: String,
    page_size: u32,
    requests: AtomicU64,
}

impl KubeBackend {
    /// Connects as the config says: the in-cluster account, or a kubeconfig (path and
    /// context optional).
    pub(crate) async fn connect(cfg: &Connection) -> Result<KubeBackend, KubeError> {
        let config = match cfg.source {
            ClientSource::InCluster => {
                kube::Config::incluster().map_err(|e| KubeError::InCluster(e.to_string()))?
            }
            ClientSource::Kubeconfig => {
                let options = KubeConfigOptions {
                    context: cfg.context.clone(),
                    ..KubeConfigOptions::default()
                };
                let path = cfg.kubeconfig.clone();
                let err = |e: kube::config::KubeconfigError| KubeError::Kubeconfig {
                    path: path.clone(),
                    message: e.to_string(),
                };
                match &path {
                    Some(p) => {
                        let kc = Kubeconfig::read_from(p).map_err(err)?;
                        kube::Config::from_custom_kubeconfig(kc, &options)
                            .await
                            .map_err(err)?
                    }
                    None => kube::Config::from_kubeconfig(&options).await.map_err(err)?,
                }
            }
        };
        // An in-cluster client reads the account's token file only here: its absence is the
        // account's problem, and says so with the account's hint.
        let client = kube::Client::try_from(config).map_err(|e| match cfg.source {
            ClientSource::InCluster => KubeError::InCluster(e.to_string()),
            ClientSource::Kubeconfig => KubeError::Client(e.to_string()),
        })?;
        Ok(KubeBackend::from_client(client, cfg))
    }

    pub fn from_client(client: kube::Client, cfg: &Connection) -> KubeBackend {
        let ns = &cfg.namespace;
        KubeBackend {
            jobs: Api::namespaced(client.clone(), ns),
            client,
            namespace: ns.clone(),
            selector: cfg.selector.clone(),
            page_size: cfg.page_size,
            requests: AtomicU64::new(0),
        }
    }

    /// HTTP requests made so far (each list page counts).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Every page of one list at `url_path`, each parsed into `T` as it arrives.
    async fn list_all<T>(&self, url_path: String, what: &'static str) -> Result<Vec<T>, KubeError>
    where
        T: DeserializeOwned,
    {
        let request = kube::core::Request::new(url_path);
        let fail = |source: kube::Error| KubeError::List {
            what,
            namespace: self.namespace.clone(),
            selector: self.selector.clone(),
            source: Box::new(source),
        };
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        // A continue token expires when the server compacts its history (410 Expired); the
        // list must then start over (API concepts, "Retrieving large results sets in
        // chunks"). Once: a server that keeps expiring them fails the list, never halves it.
        let mut restarted = false;
        loop {
            let mut lp = ListParams::default()
                .labels(&self.selector)
                .limit(self.page_size);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let req = request
                .list(&lp)
                .map_err(|e| fail(kube::Error::BuildRequest(e)))?;
            self.requests.fetch_add(1, Ordering::Relaxed);
            let page: Page<T> = match self.client.request(req).await {
                Err(kube::Error::Api(e)) if e.code == 410 && token.is_some() && !restarted => {
                    tracing::info!(
                        what,
                        "list continue token expired; listing again from the start"
                    );
                    restarted = true;
                    out.clear();
                    token = None;
                    continue;
                }
                r => r.map_err(fail)?,
            };
            out.extend(page.items);
            match page.metadata.continue_ {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(out),
            }
        }
    }

    pub async fn list_pods(&self) -> Result<Vec<WorkerPod>, KubeError> {
        self.list_all(Pod::url_path(&(), Some(&self.namespace)), "pods")
            .await
    }

    pub async fn list_jobs(&self) -> Result<Vec<WorkerJob>, KubeError> {
        self.list_all(Job::url_path(&(), Some(&self.namespace)), "jobs")
            .await
    }

    pub async fn create_job(&self, job: &Job) -> Result<(), KubeError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.jobs
            .create(&PostParams::default(), job)
            .await
            .map(|_| ())
            .map_err(|source| KubeError::Create {
                name: job.metadata.name.clone().unwrap_or_default(),
                source: Box::new(source),
            })
    }

    /// Deletes a Job and (in the background) its pods. Already gone counts as done.
    pub async fn delete_job(&self, name: &str) -> Result<(), KubeError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match self.jobs.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(source) => Err(KubeError::Delete {
                name: name.to_string(),
                source: Box::new(source),
            }),
        }
    }
}
