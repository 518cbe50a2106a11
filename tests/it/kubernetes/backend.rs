//! `KubeBackend` against the in-process fake API server: label selectors, pagination with
//! `limit`/`continue`, 409 on a duplicate name, background-propagation deletes, injected
//! failures; and the fake's own fidelity to the real API server on what pilotd relies on.

use super::fake_api::FakeKube;
use k8s_openapi::api::batch::v1::Job;
use pilotd_kubernetes::client::{Connection, KubeBackend, KubeError};
use pilotd_kubernetes::config::KubernetesConfig;
use pilotd_kubernetes::settings::Settings;
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
    let token = seen[1].query.get("continue").unwrap();
    assert!(
        !token.contains("w1") && !token.is_empty(),
        "the client passes the opaque token back: {token}"
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
    assert_eq!(
        deletes[0].query.get("propagationPolicy"),
        None,
        "the policy travels in the DeleteOptions body"
    );
    assert!(fake.jobs().is_empty());
    // The garbage collector takes the pod later (Terminating first), not with the delete.
    let listed = backend.list_pods().await.unwrap();
    assert_eq!(listed.len(), 1, "the pod outlives its Job for a while");
    let listed = backend.list_pods().await.unwrap();
    assert!(
        listed[0].metadata.deletion_timestamp.is_some(),
        "then it terminates"
    );
    fake.collect_garbage();
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

/// A raw GET against the fake: status code, headers and JSON body.
async fn get(fake: &FakeKube, path_and_query: &str) -> (u16, Option<String>, serde_json::Value) {
    let req = http::Request::get(path_and_query).body(Vec::new()).unwrap();
    let resp = fake
        .raw_client()
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (code, retry, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn the_fake_lists_as_the_api_server_does() {
    let fake = FakeKube::start().await;
    for i in 0..5 {
        fake.insert_pod(NS, pod(&format!("w{i}"), "osg-direct", NS));
    }
    fake.insert_pod(NS, pod("x", "prp-wn", NS));
    let base = "/api/v1/namespaces/ns1/pods";
    // One resourceVersion for all pages of one list; remainingItemCount while more remain.
    let (code, _, p1) = get(&fake, &format!("{base}?limit=2")).await;
    assert_eq!(code, 200);
    assert_eq!(p1["metadata"]["remainingItemCount"], 4);
    let token = p1["metadata"]["continue"].as_str().unwrap().to_string();
    fake.insert_pod(NS, pod("w9", "osg-direct", NS));
    let (_, _, p2) = get(&fake, &format!("{base}?limit=2&continue={token}")).await;
    assert_eq!(
        p2["metadata"]["resourceVersion"],
        p1["metadata"]["resourceVersion"]
    );
    // Set-based selectors, with the comma inside the set.
    let (code, _, sel) = get(
        &fake,
        &format!("{base}?labelSelector=k8s-app%20in%20(prp-wn,other)"),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(sel["items"].as_array().unwrap().len(), 1);
    let (_, _, not_in) = get(
        &fake,
        &format!("{base}?labelSelector=k8s-app%20notin%20(prp-wn),prp-htcondor-portal"),
    )
    .await;
    assert_eq!(not_in["items"].as_array().unwrap().len(), 6);
    // An invalid selector is 400, a bad token 400, an expired one 410 Expired.
    for bad in [
        "k8s-app%20in%20(a",
        "bad%20key=x",
        "k8s-app=a%20b",
        ",",
        "a%20in%20b",
    ] {
        let (code, _, st) = get(&fake, &format!("{base}?labelSelector={bad}")).await;
        assert_eq!(
            (code, st["kind"].as_str()),
            (400, Some("Status")),
            "{bad}: {st}"
        );
    }
    let (code, _, _) = get(&fake, &format!("{base}?limit=2&continue=zz")).await;
    assert_eq!(code, 400);
    fake.expire_tokens();
    let (code, _, st) = get(&fake, &format!("{base}?limit=2&continue={token}")).await;
    assert_eq!((code, st["reason"].as_str()), (410, Some("Expired")));
}

#[tokio::test]
async fn an_expired_continue_token_restarts_the_list_never_returns_half_of_it() {
    let fake = FakeKube::start().await;
    for i in 0..5 {
        fake.insert_pod(NS, pod(&format!("w{i}"), "osg-direct", NS));
    }
    let backend = KubeBackend::from_client(fake.client(NS), &cfg(2));
    // The store is compacted right after the first page: the second answers 410 Expired.
    fake.store.lock().unwrap().compact_after_pages = Some(1);
    let pods = backend.list_pods().await.unwrap();
    assert_eq!(pods.len(), 5, "the whole list, read again from the start");
    let pages: Vec<bool> = fake
        .seen()
        .iter()
        .map(|s| s.query.contains_key("continue"))
        .collect();
    assert_eq!(
        pages,
        vec![false, true, false, true, true],
        "page 1, expired page 2, then a fresh list of 3 pages"
    );
}

#[tokio::test]
async fn injected_failures_are_status_objects_per_verb_and_resource() {
    let fake = FakeKube::start().await;
    let backend = KubeBackend::from_client(fake.client(NS), &cfg(500));
    fake.inject("create", "jobs", 429, Some(1));
    fake.inject("list", "jobs", 403, Some(1));
    fake.inject("delete", "jobs", 422, Some(1));
    // A pod list is not a Job list: it still works.
    backend.list_pods().await.unwrap();
    let code = |e: KubeError| match e {
        KubeError::Create { source, .. }
        | KubeError::List { source, .. }
        | KubeError::Delete { source, .. } => match *source {
            kube::Error::Api(s) => (s.code, s.reason),
            other => panic!("not a Status: {other:?}"),
        },
        other => panic!("{other:?}"),
    };
    // 429 is the one the client waits out: it retries after Retry-After, as kube's default
    // retry policy does, so one 429 costs a second, not the create.
    let t = std::time::Instant::now();
    backend.create_job(&job("a")).await.unwrap();
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        fake.store.lock().unwrap().count("POST"),
        2,
        "the 429, then the create"
    );
    assert_eq!(
        code(backend.list_jobs().await.unwrap_err()),
        (403, "Forbidden".into())
    );
    assert_eq!(
        code(backend.delete_job("a").await.unwrap_err()),
        (422, "Invalid".into())
    );
    backend.delete_job("a").await.unwrap();
    // 429 carries Retry-After, in the header and in the Status.
    fake.inject("list", "pods", 429, Some(1));
    let (code, retry, st) = get(&fake, "/api/v1/namespaces/ns1/pods").await;
    assert_eq!((code, retry.as_deref()), (429, Some("1")));
    assert_eq!(st["details"]["retryAfterSeconds"], 1);
}

#[tokio::test]
async fn foreground_deletes_keep_the_job_until_its_pods_are_gone() {
    let fake = FakeKube::start().await;
    let backend = KubeBackend::from_client(fake.client(NS), &cfg(500));
    backend.create_job(&job("f")).await.unwrap();
    let req = http::Request::delete("/apis/batch/v1/namespaces/ns1/jobs/f")
        .header("content-type", "application/json")
        .body(br#"{"propagationPolicy":"Foreground"}"#.to_vec())
        .unwrap();
    let resp = fake
        .raw_client()
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "deletion accepted, not done");
    let jobs = fake.jobs();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["metadata"]["finalizers"][0], "foregroundDeletion");
    assert!(jobs[0]["metadata"]["deletionTimestamp"].is_string());
    fake.collect_garbage();
    assert!(fake.jobs().is_empty() && fake.pods().is_empty());
    // A body that is not DeleteOptions is refused, not read as Orphan.
    backend.create_job(&job("g")).await.unwrap();
    let req = http::Request::delete("/apis/batch/v1/namespaces/ns1/jobs/g")
        .body(b"not json".to_vec())
        .unwrap();
    let resp = fake
        .raw_client()
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(fake.jobs().len(), 1);
}

/// A raw POST of a Job body: status code and JSON answer.
async fn post_job(fake: &FakeKube, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let req = http::Request::post("/apis/batch/v1/namespaces/ns1/jobs")
        .header("content-type", "application/json")
        .body(body.to_string().into_bytes())
        .unwrap();
    let resp = fake
        .raw_client()
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap())
}

/// The fake validates a created Job as the API server does: a malformed name, label, container
/// name, quantity or restart policy, a volume name that is not a DNS-1123 label or is taken, a
/// mount of no volume or at a path taken, an env name the server refuses, a request above its
/// limit (or unlike it, for a GPU), a ConfigMap key that is not one: each is a 422 `Invalid`
/// naming the field(s), in the server's words, and the same body with that one point right is
/// created (so each refusal comes from the point under test).
#[tokio::test]
async fn the_fake_refuses_an_invalid_job_as_the_api_server_does() {
    let fake = FakeKube::start().await;
    let body = |name: &str| {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"prp-htcondor-portal": "wn", "PodCPUs": "8"}},
            "spec": {"template": {"metadata": {"labels": {"prp-htcondor-portal": "wn"}},
                "spec": {"restartPolicy": "Never",
                    "volumes": [
                        {"name": "pvc-0", "persistentVolumeClaim": {"claimName": "cvmfs"}},
                        {"name": "cm-0", "configMap": {"name": "wn-config", "items": [{"key": "40_glidein.config", "path": "40_glidein.config"}]}},
                        {"name": "token", "secret": {"secretName": "s", "items": [{"key": "prp-wn.token", "path": "prp-wn.token"}]}}
                    ],
                    "containers": [{"name": "htcondor", "image": "x",
                    "env": [{"name": "GLIDEIN_Site", "value": "x"}, {"name": "my.env-name", "value": "y"}],
                    "volumeMounts": [
                        {"name": "pvc-0", "mountPath": "/cvmfs"},
                        {"name": "cm-0", "mountPath": "/etc/condor/config.d/40_glidein.config", "subPath": "40_glidein.config"},
                        {"name": "token", "mountPath": "/etc/condor/tokens.d/prp-wn.token", "subPath": "prp-wn.token"}
                    ],
                    "resources": {"requests": {"cpu": "500m", "memory": "32000Mi", "ephemeral-storage": 8e9, "nvidia.com/gpu": "1"},
                                  "limits": {"cpu": 8, "memory": "33.5Gi", "nvidia.com/gpu": "1"}}}]}}}
        })
    };
    type Spoil = fn(&mut serde_json::Value);
    const C: &str = "spec.template.spec.containers[0]";
    let spoils: Vec<(&str, Vec<String>, Spoil)> = vec![
        ("an upper-case name", vec!["metadata.name".into()], |j| {
            j["metadata"]["name"] = json!("Osg-direct-1")
        }),
        (
            "an underscore in the name",
            vec!["metadata.name".into()],
            |j| j["metadata"]["name"] = json!("osg_direct-1"),
        ),
        ("a name over 63", vec!["spec.template.labels".into()], |j| {
            j["metadata"]["name"] = json!(format!("osg-direct-{}", "a".repeat(60)))
        }),
        (
            "a label value with a space",
            vec!["metadata.labels".into()],
            |j| j["metadata"]["labels"]["PodCPUs"] = json!("8 cpus"),
        ),
        (
            "a label value over 63",
            vec!["spec.template.labels".into()],
            |j| j["spec"]["template"]["metadata"]["labels"]["k"] = json!("v".repeat(64)),
        ),
        (
            "a label key with two slashes",
            vec!["metadata.labels".into()],
            |j| j["metadata"]["labels"]["a/b/c"] = json!("x"),
        ),
        (
            "an annotation key with a space",
            vec!["spec.template.annotations".into()],
            |j| j["spec"]["template"]["metadata"]["annotations"] = json!({"bad key": "x"}),
        ),
        (
            "a container name with a dot",
            vec![format!("{C}.name")],
            |j| j["spec"]["template"]["spec"]["containers"][0]["name"] = json!("htcondor.1"),
        ),
        (
            "a quantity with a unit of its own",
            vec![format!("{C}.resources.requests[memory]")],
            |j| {
                j["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] =
                    json!("32 GB")
            },
        ),
        (
            "a quantity in KB",
            vec![format!("{C}.resources.limits[memory]")],
            |j| {
                j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] =
                    json!("1KB")
            },
        ),
        (
            "restartPolicy Always",
            vec!["spec.template.spec.restartPolicy".into()],
            |j| j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always"),
        ),
        (
            "no restartPolicy",
            vec!["spec.template.spec.restartPolicy".into()],
            |j| {
                j["spec"]["template"]["spec"]
                    .as_object_mut()
                    .unwrap()
                    .remove("restartPolicy");
            },
        ),
        (
            // The second is not taken: the mount of cm-0 names no volume.
            "two volumes of one name",
            vec![
                "spec.template.spec.volumes[1].name".into(),
                format!("{C}.volumeMounts[1].name"),
            ],
            |j| j["spec"]["template"]["spec"]["volumes"][1]["name"] = json!("pvc-0"),
        ),
        (
            // The volume is not taken, so its mount names no volume.
            "a volume name that is not a DNS-1123 label",
            vec![
                "spec.template.spec.volumes[0].name".into(),
                format!("{C}.volumeMounts[0].name"),
            ],
            |j| {
                j["spec"]["template"]["spec"]["volumes"][0]["name"] = json!("pvc_0");
                j["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] =
                    json!("pvc_0");
            },
        ),
        (
            "a mount of no volume",
            vec![format!("{C}.volumeMounts[2].name")],
            |j| {
                j["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][2]["name"] =
                    json!("job-pvc-0")
            },
        ),
        (
            "two mounts at one path",
            vec![format!("{C}.volumeMounts[2].mountPath")],
            |j| {
                j["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][2]["mountPath"] =
                    json!("/cvmfs")
            },
        ),
        (
            "a subPath out of the volume",
            vec![format!("{C}.volumeMounts[1].subPath")],
            |j| {
                j["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][1]["subPath"] =
                    json!("../x")
            },
        ),
        (
            // A volume with an error is not one a mount may name (`ValidateVolumes`).
            "a ConfigMap key that is a path",
            vec![
                "spec.template.spec.volumes[1].configMap.items[0].key".into(),
                format!("{C}.volumeMounts[1].name"),
            ],
            |j| {
                j["spec"]["template"]["spec"]["volumes"][1]["configMap"]["items"][0]["key"] =
                    json!("config.d/40_glidein.config")
            },
        ),
        (
            "an env name with a space",
            vec![format!("{C}.env[1].name")],
            |j| j["spec"]["template"]["spec"]["containers"][0]["env"][1]["name"] = json!("MY VAR"),
        ),
        (
            "an env name starting with a digit",
            vec![format!("{C}.env[0].name")],
            |j| j["spec"]["template"]["spec"]["containers"][0]["env"][0]["name"] = json!("1X"),
        ),
        (
            "an empty env name",
            vec![format!("{C}.env[0].name"), format!("{C}.env[0].name")],
            |j| j["spec"]["template"]["spec"]["containers"][0]["env"][0]["name"] = json!(""),
        ),
        (
            "a request above its limit",
            vec![format!("{C}.resources.requests")],
            |j| {
                j["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] =
                    json!("34Gi")
            },
        ),
        (
            "a GPU request below its limit",
            vec![format!("{C}.resources.requests")],
            |j| {
                j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
                    json!("2")
            },
        ),
    ];
    let n = spoils.len();
    for (i, (what, fields, spoil)) in spoils.into_iter().enumerate() {
        let name = format!("osg-direct-{i}");
        let mut bad = body(&name);
        spoil(&mut bad);
        let (code, answer) = post_job(&fake, &bad).await;
        assert_eq!(code, 422, "{what}: {answer}");
        assert_eq!(answer["kind"], "Status", "{what}");
        assert_eq!(answer["status"], "Failure", "{what}");
        assert_eq!(answer["reason"], "Invalid", "{what}: {answer}");
        assert_eq!(answer["code"], 422, "{what}");
        assert_eq!(answer["details"]["kind"], "Job", "{what}");
        assert_eq!(answer["details"]["group"], "batch", "{what}");
        let got: Vec<&str> = answer["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["field"].as_str())
            .collect();
        assert_eq!(got, fields, "{what}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().starts_with(&format!(
                "Job.batch \"{}\" is invalid: ",
                bad["metadata"]["name"].as_str().unwrap()
            )),
            "{what}: {answer}"
        );
        // The control: the same body, unspoiled.
        let (code, answer) = post_job(&fake, &body(&name)).await;
        assert_eq!(code, 201, "{what}, control: {answer}");
    }
    assert_eq!(fake.jobs().len(), n, "only the controls were created");
}

/// The words of a refusal, as the API server answers (`NewInvalid`: the message joins
/// `field: ErrorBody` of every cause; each cause carries its `field.ErrorType`).
#[tokio::test]
async fn the_fakes_refusals_are_in_the_api_servers_words() {
    let fake = FakeKube::start().await;
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "w"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "x",
                "env": [{"name": "MY VAR"}],
                "volumeMounts": [{"name": "a", "mountPath": "/d"}, {"name": "b", "mountPath": "/d"}],
                "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}}}
    });
    let (code, answer) = post_job(&fake, &job).await;
    assert_eq!(code, 422);
    let causes: Vec<(String, String, String)> = answer["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["reason"].as_str().unwrap().to_string(),
                c["field"].as_str().unwrap().to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let c = "spec.template.spec.containers[0]";
    let want = [
        ("FieldValueDuplicate", "spec.template.spec.volumes[1].name".to_string(), "Duplicate value: \"a\"".to_string()),
        ("FieldValueInvalid", format!("{c}.env[0].name"), "Invalid value: \"MY VAR\": a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')".to_string()),
        ("FieldValueNotFound", format!("{c}.volumeMounts[1].name"), "Not found: \"b\"".to_string()),
        ("FieldValueInvalid", format!("{c}.volumeMounts[1].mountPath"), "Invalid value: \"/d\": must be unique".to_string()),
        ("FieldValueInvalid", format!("{c}.resources.requests"), "Invalid value: \"2\": must be less than or equal to cpu limit of 1".to_string()),
    ];
    let want: Vec<(String, String, String)> = want
        .into_iter()
        .map(|(r, f, m)| (r.to_string(), f, m))
        .collect();
    assert_eq!(causes, want, "{answer}");
    let joined: Vec<String> = want.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
    assert_eq!(
        answer["message"],
        format!("Job.batch \"w\" is invalid: [{}]", joined.join(", "))
    );
    assert!(fake.jobs().is_empty());
}
