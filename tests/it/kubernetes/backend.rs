//! `KubeBackend` against the in-process fake API server: label selectors, pagination with
//! `limit`/`continue`, 409 on a duplicate name, background-propagation deletes, injected 500s.

use super::fake_api::FakeKube;
use k8s_openapi::api::batch::v1::Job;
use pilotd::config::kubernetes::KubernetesConfig;
use pilotd::kubernetes::client::{Connection, KubeBackend, KubeError};
use pilotd::kubernetes::settings::Settings;
use serde_json::json;

const NS: &str = "ns1";

fn cfg(page: u32) -> Connection {
    let table = KubernetesConfig::from_table_text(&format!(
        "namespace = \"{NS}\"\napp_name = \"osg-direct\"\nlist_page_size = {page}\n"
    ))
    .unwrap();
    Settings::from_table(&table, std::path::Path::new("/nonexistent"))
        .unwrap()
        .connection
}

fn pod(name: &str, app: &str, ns: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns,
                        "labels": {"prp-htcondor-portal": "wn", "k8s-app": app}},
           "status": {"phase": "Running"}})
}

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"prp-htcondor-portal": "wn", "k8s-app": "osg-direct"}},
        "spec": {"template": {"metadata": {"labels": {"prp-htcondor-portal": "wn", "k8s-app": "osg-direct"}},
                              "spec": {"restartPolicy": "Never", "containers": [{"name": "htcondor", "image": "x"}]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn lists_follow_continue_tokens_and_keep_to_the_selector_and_namespace() {
    let fake = FakeKube::start().await;
    for i in 0..5 {
        fake.insert_pod(NS, pod(&format!("w{i}"), "osg-direct", NS));
    }
    fake.insert_pod(NS, pod("other-app", "prp-wn", NS));
    fake.insert_pod("elsewhere", pod("foreign", "osg-direct", "elsewhere"));
    let backend = KubeBackend::from_client(fake.client(NS), &cfg(2));
    let pods = backend.list_pods().await.unwrap();
    let names: Vec<_> = pods.iter().map(|p| p.metadata.name.clone()).collect();
    assert_eq!(names, vec!["w0", "w1", "w2", "w3", "w4"]);
    let seen = fake.seen();
    assert_eq!(seen.len(), 3, "5 pods in pages of 2");
    assert_eq!(seen[0].query.get("limit").map(String::as_str), Some("2"));
    assert!(!seen[0].query.contains_key("continue"));
    assert_eq!(
        seen[1].query.get("continue").map(String::as_str),
        Some("ns1/w1")
    );
    assert_eq!(backend.requests(), 3);
}

#[tokio::test]
async fn duplicate_names_are_409_and_deletes_propagate_in_the_background() {
    let fake = FakeKube::start().await;
    let backend = KubeBackend::from_client(fake.client(NS), &cfg(500));
    backend
        .create_job(&job("osg-direct-1-000000"))
        .await
        .unwrap();
    assert_eq!(
        fake.pods().len(),
        1,
        "the fake controller made the Job's pod"
    );
    let err = backend
        .create_job(&job("osg-direct-1-000000"))
        .await
        .unwrap_err();
    match &err {
        KubeError::Create { name, source } => {
            let kube::Error::Api(s) = source.as_ref() else {
                panic!("expected an API status, got {source:?}");
            };
            assert_eq!(name, "osg-direct-1-000000");
            assert_eq!(s.code, 409);
            assert!(s.is_already_exists());
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    assert!(err.to_string().contains("osg-direct-1-000000"));
    let jobs = backend.list_jobs().await.unwrap();
    assert_eq!(jobs.len(), 1);
    backend.delete_job("osg-direct-1-000000").await.unwrap();
    let deletes: Vec<_> = fake
        .seen()
        .into_iter()
        .filter(|s| s.method == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 1);
    assert!(fake.jobs().is_empty());
    assert!(
        fake.pods().is_empty(),
        "Background propagation deleted the pod too"
    );
    // Deleting what is already gone is done, not an error.
    backend.delete_job("osg-direct-1-000000").await.unwrap();
}

#[tokio::test]
async fn server_errors_surface_with_what_failed() {
    let fake = FakeKube::start().await;
    fake.store.lock().unwrap().fail_list = true;
    let backend = KubeBackend::from_client(fake.client(NS), &cfg(500));
    let err = backend.list_jobs().await.unwrap_err().to_string();
    assert!(err.contains("listing jobs in namespace ns1"), "{err}");
    assert!(
        err.contains("prp-htcondor-portal=wn,k8s-app=osg-direct"),
        "{err}"
    );
    fake.store.lock().unwrap().fail_create = Some(Box::new(|_| true));
    let err = backend.create_job(&job("j")).await.unwrap_err();
    match err {
        KubeError::Create { source, .. } => {
            assert!(
                matches!(source.as_ref(), kube::Error::Api(s) if s.code == 500),
                "{source:?}"
            )
        }
        other => panic!("expected a 500, got {other:?}"),
    }
}
