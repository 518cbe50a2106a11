//! Kubernetes mode end to end: the real `kube` client against the in-process fake API server
//! (`fake_api`) and the fake `condor_status`/`condor_q` executables (tests/fake-condor),
//! through `provisioner::cycle` and the `run` loop.

use super::fake_api::FakeKube;
use chrono::{DateTime, Utc};
use pilotd_core::service::lifecycle::Hooks;
use pilotd_kubernetes::backoff::BackoffBook;
use pilotd_kubernetes::client::KubeBackend;
use pilotd_kubernetes::config::KubernetesConfig;
use pilotd_kubernetes::provisioner::{cycle, load_book, run};
use pilotd_kubernetes::settings::Settings;
use serde_json::Value;
use std::path::PathBuf;

pub(super) const NS: &str = "osg-opportunistic";

/// A fixture directory plus wrappers that run the fake tools against it (no process-wide
/// environment, so tests can run in parallel).
pub(super) struct Pool {
    pub(super) dir: tempfile::TempDir,
}

impl Pool {
    pub(super) fn new() -> Pool {
        let dir = tempfile::tempdir().unwrap();
        let fake = crate::harness::repo("tests/fake-condor");
        for tool in ["condor_status", "condor_q"] {
            let wrapper = dir.path().join(tool);
            std::fs::write(
                &wrapper,
                format!(
                    "#!/bin/sh\nFAKE_CONDOR_DIR='{}' exec '{}' \"$@\"\n",
                    dir.path().display(),
                    fake.join(tool).display()
                ),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        // Two whitelisted schedds, one outside the whitelist, one ad without identity.
        let pool = Pool { dir };
        pool.write(
            "schedds.txt",
            "\"ap20.uc.osg-htc.org\" \"condor@ap20.uc.osg-htc.org\"\n\
             \"ap21.uc.osg-htc.org\" \"condor@ap21.uc.osg-htc.org\"\n\
             \"rogue.example.org\" \"condor@rogue.example.org\"\n\
             \"ap22.uc.osg-htc.org\" undefined\n",
        );
        // ap20: 10 small jobs (memory/disk below the floors → default shape) and 5 4-CPU jobs.
        let mut ap20 = String::new();
        for p in 0..10 {
            ap20.push_str(&format!(
                "101 {p} 1 1 2048 500000 undefined undefined undefined undefined false\n"
            ));
        }
        for p in 0..5 {
            ap20.push_str(&format!(
                "102 {p} 1 4 8192 10000000 0 undefined undefined undefined false\n"
            ));
        }
        pool.write("jobs-ap20.uc.osg-htc.org.txt", &ap20);
        // ap21: one GPU job restricted to two GPU types (a value that is not label-safe).
        pool.write(
            "jobs-ap21.uc.osg-htc.org.txt",
            "7 0 1 1 4096 8000000 1 \"NVIDIA-A100,NVIDIA-A40\" undefined undefined false\n",
        );
        pool.write(
            "jobs-rogue.example.org.txt",
            "1 0 1 64 999999 8000000 0 undefined undefined undefined false\n",
        );
        pool
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join(name), text).unwrap();
    }

    /// The `[kubernetes]` table's text for this pool, then `extra` (also what a pilotd.toml
    /// for the binary puts under `[kubernetes]`).
    pub(super) fn table(&self, extra: &str) -> String {
        format!(
            "namespace = \"{NS}\"\napp_name = \"osg-direct\"\nk8s_domain = \"nrp-nautilus.io\"\n\
             schedd_whitelist = 'ap.*\\.osg-htc\\.org'\ncondor_status = '{}'\ncondor_q = '{}'\n\
             condor_timeout = \"20s\"\n{extra}",
            self.dir.path().join("condor_status").display(),
            self.dir.path().join("condor_q").display(),
        )
    }

    fn config(&self, extra: &str) -> Settings {
        let table = KubernetesConfig::from_table_text(&self.table(extra)).unwrap();
        Settings::from_table(&table, &self.dir.path().join("state")).unwrap()
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("calls.log")).unwrap_or_default()
    }
}

fn now() -> DateTime<Utc> {
    "2026-12-01T21:30:00Z".parse().unwrap()
}

pub(super) fn label<'a>(obj: &'a Value, k: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][k].as_str()
}

/// What the first cycle over `Pool`'s queue creates, by (CPUs, GPUs, memory) and count:
/// 3 default Jobs, 1 GPU Job, 2 four-CPU Jobs.
pub(super) fn first_cycle_shapes() -> Vec<(String, String, String, usize)> {
    [
        ("1", "0", "4096", 3),
        ("1", "1", "4096", 1),
        ("4", "0", "8192", 2),
    ]
    .map(|(c, g, m, n)| (c.to_string(), g.to_string(), m.to_string(), n))
    .to_vec()
}

pub(super) fn jobs_by_shape(fake: &FakeKube) -> Vec<(String, String, String, usize)> {
    let mut out: Vec<(String, String, String, usize)> = Vec::new();
    for j in fake.jobs() {
        let k = (
            label(&j, "PodCPUs").unwrap().to_string(),
            label(&j, "PodGPUs").unwrap().to_string(),
            label(&j, "PodMemory").unwrap().to_string(),
        );
        match out
            .iter_mut()
            .find(|(a, b, c, _)| (a, b, c) == (&k.0, &k.1, &k.2))
        {
            Some(e) => e.3 += 1,
            None => out.push((k.0, k.1, k.2, 1)),
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn full_cycle_creates_exactly_the_expected_jobs_and_a_second_creates_none() {
    let pool = Pool::new();
    let fake = FakeKube::start().await;
    let cfg = pool.config("");
    let backend = KubeBackend::from_client(fake.client(NS), &cfg.connection);
    let mut book = BackoffBook::default();

    let (plan, report) = cycle(&cfg, &backend, &mut book, now()).await.unwrap();
    // 10 default jobs → 1 + 10/4 = 3; 5 four-CPU jobs → 2; 1 GPU job → 1. rogue is not
    // whitelisted and ap22 has no identity, so neither is queried.
    assert_eq!(report.created.len(), 6, "{report:?}");
    assert!(report.create_failed.is_empty());
    assert_eq!(jobs_by_shape(&fake), first_cycle_shapes());
    assert!(!pool.calls().contains("rogue"), "{}", pool.calls());
    assert!(!pool.calls().contains("ap22"));
    assert!(
        pool.calls()
            .contains("regexp(RequestK8SNamespace,\"osg-opportunistic\")")
    );
    // Every Job is one pod, with no retries, in the right namespace.
    for j in fake.jobs() {
        assert_eq!(j["spec"]["parallelism"], 1);
        assert_eq!(j["spec"]["completions"], 1);
        assert_eq!(j["spec"]["backoffLimit"], 0);
        assert_eq!(j["metadata"]["namespace"], NS);
        assert_eq!(label(&j, "k8s-app"), Some("osg-direct"));
    }
    let gpu = fake
        .jobs()
        .into_iter()
        .find(|j| label(j, "PodGPUs") == Some("1"))
        .unwrap();
    let aff = &gpu["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!(aff["key"], "nvidia.com/gpu.product");
    assert_eq!(
        aff["values"],
        serde_json::json!(["NVIDIA-A100", "NVIDIA-A40"])
    );
    let cpu = fake
        .jobs()
        .into_iter()
        .find(|j| label(j, "PodCPUs") == Some("4"))
        .unwrap();
    assert!(cpu["spec"]["template"]["spec"].get("affinity").is_none());
    // API traffic of a live cycle: one pod list, one Job list, one POST per Job.
    let seen = fake.seen();
    assert_eq!(
        seen.iter().filter(|s| s.method == "GET").count(),
        2,
        "{seen:?}"
    );
    assert_eq!(seen.iter().filter(|s| s.method == "POST").count(), 6);
    assert_eq!(backend.requests(), 8);
    assert!(seen.iter().filter(|s| s.method == "GET").all(|s| {
        s.query.get("labelSelector").map(String::as_str)
            == Some("prp-htcondor-portal=wn,k8s-app=osg-direct")
    }));
    assert_eq!(plan.clusters.len(), 3);

    // Second cycle: the fake Job controller made one Pending pod per Job; nothing new.
    let (plan2, report2) = cycle(&cfg, &backend, &mut book, now()).await.unwrap();
    assert!(
        report2.created.is_empty(),
        "{report2:?} {:?}",
        plan2.clusters
    );
    assert_eq!(fake.jobs().len(), 6);
    let waiting: Vec<u64> = plan2.clusters.iter().map(|c| c.pods.waiting).collect();
    assert_eq!(
        waiting,
        vec![3, 1, 2],
        "the GPU-type pod counts against its own key"
    );
}

#[tokio::test]
async fn one_failing_schedd_is_skipped_and_all_failing_submits_nothing() {
    let pool = Pool::new();
    let fake = FakeKube::start().await;
    let cfg = pool.config("");
    let backend = KubeBackend::from_client(fake.client(NS), &cfg.connection);
    let mut book = BackoffBook::default();

    pool.write("fail-ap21.uc.osg-htc.org", "");
    let (plan, report) = cycle(&cfg, &backend, &mut book, now()).await.unwrap();
    assert_eq!(plan.failed_schedds, vec!["ap21.uc.osg-htc.org"]);
    assert_eq!(
        report.created.len(),
        5,
        "ap20's shapes still get their pods"
    );
    assert!(fake.jobs().iter().all(|j| label(j, "PodGPUs") == Some("0")));

    pool.write("fail-ap20.uc.osg-htc.org", "");
    fake.clear_seen();
    let err = cycle(&cfg, &backend, &mut book, now()).await.unwrap_err();
    assert!(
        err.to_string().contains("every whitelisted schedd failed"),
        "{err}"
    );
    assert!(
        fake.seen().is_empty(),
        "a failed observation makes no API call at all"
    );
    assert_eq!(fake.jobs().len(), 5);

    // An unreachable collector fails the cycle the same way.
    pool.write("collector-down", "");
    assert!(cycle(&cfg, &backend, &mut book, now()).await.is_err());
}

#[tokio::test]
async fn a_failing_create_for_one_key_does_not_stop_the_others() {
    let pool = Pool::new();
    let fake = FakeKube::start().await;
    fake.store.lock().unwrap().fail_create = Some(Box::new(|job: &Value| {
        job["metadata"]["labels"]["PodCPUs"].as_str() == Some("4")
    }));
    let cfg = pool.config("");
    let backend = KubeBackend::from_client(fake.client(NS), &cfg.connection);
    let mut book = BackoffBook::default();
    let (_, report) = cycle(&cfg, &backend, &mut book, now()).await.unwrap();
    assert_eq!(report.created.len(), 4, "{report:?}");
    assert_eq!(report.create_failed.len(), 2);
    assert!(
        report.create_failed[0].1.contains("500") || report.create_failed[0].1.contains("injected")
    );
    // After the first failure the shape's second Job is not even tried this cycle.
    assert_eq!(fake.store.lock().unwrap().count("POST"), 5);
    assert_eq!(
        jobs_by_shape(&fake),
        vec![
            ("1".into(), "0".into(), "4096".into(), 3),
            ("1".into(), "1".into(), "4096".into(), 1)
        ]
    );
}

#[tokio::test]
async fn a_failed_pod_list_is_not_an_empty_list() {
    let pool = Pool::new();
    let fake = FakeKube::start().await;
    fake.store.lock().unwrap().fail_list = true;
    let cfg = pool.config("");
    let backend = KubeBackend::from_client(fake.client(NS), &cfg.connection);
    let mut book = BackoffBook::default();
    let err = cycle(&cfg, &backend, &mut book, now()).await.unwrap_err();
    assert!(err.to_string().contains("listing pods"), "{err}");
    assert!(fake.jobs().is_empty());
}

#[tokio::test]
async fn failing_workers_put_their_shape_on_trial_and_finished_jobs_are_cleaned_up() {
    let pool = Pool::new();
    // Only the GPU shape, to keep the arithmetic visible.
    pool.write("jobs-ap20.uc.osg-htc.org.txt", "");
    let mut many = String::new();
    for p in 0..40 {
        many.push_str(&format!(
            "9 {p} 1 2 4096 8000000 0 undefined undefined undefined false\n"
        ));
    }
    pool.write("jobs-ap21.uc.osg-htc.org.txt", &many);
    let fake = FakeKube::start().await;
    // The collector is slow here, so the pods of deleted Jobs stay listed for a cycle.
    fake.store.lock().unwrap().gc_after = 1000;
    let cfg = pool.config("cleanup_after = \"0s\"\n");
    let backend = KubeBackend::from_client(fake.client(NS), &cfg.connection);
    let mut book = BackoffBook::default();

    let (_, r1) = cycle(&cfg, &backend, &mut book, now()).await.unwrap();
    assert_eq!(r1.created.len(), 11);
    // Every worker fails after starting; its Job is marked Failed by the controller.
    fake.set_all_pod_phases("Failed");
    {
        let mut s = fake.store.lock().unwrap();
        for j in s.jobs.values_mut() {
            j["status"] = serde_json::json!({"conditions": [{"type": "Failed", "status": "True",
                "lastTransitionTime": "2026-12-01T21:31:00Z", "reason": "BackoffLimitExceeded"}]});
        }
    }
    let t2 = now() + chrono::Duration::minutes(2);
    let (plan2, r2) = cycle(&cfg, &backend, &mut book, t2).await.unwrap();
    let row = &plan2.clusters[0];
    assert_eq!(row.pods.failed, 11);
    assert!(row.backoff.as_ref().unwrap().trial);
    assert!(
        r2.created.is_empty(),
        "no new pods right after the failures"
    );
    assert_eq!(r2.deleted.len(), 11, "finished Jobs are deleted");
    assert!(fake.jobs().is_empty());
    // The garbage collector removes their pods later, as a real one does: until then they
    // are listed (then Terminating) and must not count as new failures.
    assert_eq!(fake.pods().len(), 11, "garbage collection is asynchronous");
    let deletes: Vec<_> = fake
        .seen()
        .into_iter()
        .filter(|s| s.method == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 11);

    // After the delay: exactly one trial pod, though the old pods are still being collected.
    let t3 = t2 + chrono::Duration::minutes(6);
    let (plan3, r3) = cycle(&cfg, &backend, &mut book, t3).await.unwrap();
    assert_eq!(r3.created.len(), 1);
    assert_eq!(
        plan3.clusters[0].backoff.as_ref().unwrap().failures,
        11,
        "pods of deleted Jobs are not counted again"
    );
    fake.collect_garbage();
    assert_eq!(fake.pods().len(), 1, "only the trial pod is left");
    // While it is out, no more.
    let (_, r4) = cycle(&cfg, &backend, &mut book, t3 + chrono::Duration::hours(2))
        .await
        .unwrap();
    assert!(r4.created.is_empty());
}

#[tokio::test]
async fn run_loop_connects_by_kubeconfig_and_keeps_the_backoff_state() {
    let pool = Pool::new();
    let fake = FakeKube::start().await;
    let kubeconfig = pool.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, fake.kubeconfig(NS)).unwrap();
    let state: PathBuf = pool.dir.path().join("state/kubernetes-backoff.json");
    let cfg = pool.config(&format!(
        "client = \"kubeconfig\"\nkubeconfig = '{}'\ncycle = \"1h\"\n",
        kubeconfig.display()
    ));
    // Shut down as soon as the first cycle is done (the hook systemd's STATUS= rides on).
    let (done, first_done) = tokio::sync::oneshot::channel::<()>();
    let mut done = Some(done);
    let cycles = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = cycles.clone();
    let hooks = Hooks {
        cycle_done: Some(Box::new(move |_| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Some(d) = done.take() {
                let _ = d.send(());
            }
        })),
        ..Hooks::default()
    };
    let shutdown = async {
        let _ = first_done.await;
    };
    let (_reload, reloads) = tokio::sync::mpsc::channel(1);
    run(cfg, None, hooks, shutdown, reloads).await.unwrap();
    assert_eq!(cycles.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(fake.jobs().len(), 6, "one cycle ran before shutdown");
    assert!(state.exists());
    assert_eq!(load_book(&state), BackoffBook::default());
}

/// Not a pass/fail check but the figure the benchmark prints (tests/bench/kube_plan.sh):
/// the API requests of one live cycle with 5,000 worker pods in the namespace.
#[tokio::test]
#[ignore = "benchmark figure; run by tests/bench/kube_plan.sh"]
async fn api_requests_of_one_live_cycle() {
    let pool = Pool::new();
    let fake = FakeKube::start().await;
    for i in 0..5000 {
        fake.insert_pod(
            NS,
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("osg-direct-p{i:05}"), "namespace": NS,
                    "labels": {"prp-htcondor-portal": "wn", "k8s-app": "osg-direct",
                               "PodCPUs": "8", "PodMemory": "32000", "PodDisk": "8000000", "PodGPUs": "0"}},
                "status": {"phase": "Running"}}),
        );
    }
    let cfg = pool.config("");
    let backend = KubeBackend::from_client(fake.client(NS), &cfg.connection);
    let mut book = BackoffBook::default();
    let (_, report) = cycle(&cfg, &backend, &mut book, now()).await.unwrap();
    let seen = fake.seen();
    let pages = |p: &str| {
        seen.iter()
            .filter(|s| s.method == "GET" && s.path.ends_with(p))
            .count()
    };
    println!(
        "api requests of one live cycle with 5000 pods (page size {}): {} total = {} pod-list pages + {} Job-list pages + {} creates + {} deletes",
        cfg.connection.page_size,
        seen.len(),
        pages("/pods"),
        pages("/jobs"),
        seen.iter().filter(|s| s.method == "POST").count(),
        seen.iter().filter(|s| s.method == "DELETE").count(),
    );
    assert_eq!(report.created.len(), 6);
    assert_eq!(seen.len() as u64, backend.requests());
}

#[tokio::test]
async fn insecure_query_runs_the_condor_tools_with_optional_client_security() {
    let pool = Pool::new();
    let fake = FakeKube::start().await;
    let env = |tool: &str| {
        std::fs::read_to_string(pool.dir.path().join(format!("client-env-{tool}")))
            .unwrap_or_else(|e| panic!("{tool} did not run: {e}"))
    };
    let secure = pool.config("");
    let backend = KubeBackend::from_client(fake.client(NS), &secure.connection);
    cycle(&secure, &backend, &mut BackoffBook::default(), now())
        .await
        .unwrap();
    assert_eq!(env("condor_status"), "", "secure by default");
    assert_eq!(env("condor_q"), "");

    let insecure = pool.config("insecure_query = true\n");
    cycle(&insecure, &backend, &mut BackoffBook::default(), now())
        .await
        .unwrap();
    let expected = "_CONDOR_SEC_CLIENT_AUTHENTICATION=OPTIONAL\n\
                    _CONDOR_SEC_CLIENT_ENCRYPTION=OPTIONAL\n\
                    _CONDOR_SEC_CLIENT_INTEGRITY=OPTIONAL\n";
    assert_eq!(env("condor_status"), expected);
    assert_eq!(env("condor_q"), expected);
}

#[tokio::test]
async fn condor_q_runs_at_most_max_parallel_queries_at_once() {
    let pool = Pool::new();
    // Eight whitelisted schedds; a condor_q that marks itself running, looks how many are,
    // and holds on long enough for the others to start if nothing bounds them.
    let mut schedds = String::new();
    for i in 0..8 {
        schedds.push_str(&format!(
            "\"ap{i}.osg-htc.org\" \"condor@ap{i}.osg-htc.org\"\n"
        ));
    }
    pool.write("schedds.txt", &schedds);
    let dir = pool.dir.path();
    std::fs::create_dir(dir.join("running")).unwrap();
    let slow = dir.join("condor_q");
    std::fs::write(
        &slow,
        format!(
            "#!/bin/sh\nd='{}'\ntouch \"$d/running/$$\"\nsleep 0.4\nls \"$d/running\" | wc -l >> \"$d/seen\"\nsleep 0.4\nrm \"$d/running/$$\"\n",
            dir.display()
        ),
    )
    .unwrap();
    let fake = FakeKube::start().await;
    let most = max_at_once(&pool, &fake, "max_parallel_queries = 3\n").await;
    assert!(
        (2..=3).contains(&most),
        "{most} condor_q at once with a bound of 3"
    );
    let unbounded = max_at_once(&pool, &fake, "max_parallel_queries = 8\n").await;
    assert!(
        unbounded > 3,
        "the bound, not the machine, kept it at {most}: {unbounded}"
    );
}

/// The most condor_q processes the `condor_q_runs_at_most...` tool saw running at once in one
/// cycle.
async fn max_at_once(pool: &Pool, fake: &FakeKube, extra: &str) -> usize {
    let dir = pool.dir.path();
    let _ = std::fs::remove_file(dir.join("seen"));
    let cfg = pool.config(extra);
    let backend = KubeBackend::from_client(fake.client(NS), &cfg.connection);
    cycle(&cfg, &backend, &mut BackoffBook::default(), now())
        .await
        .unwrap();
    let text = std::fs::read_to_string(dir.join("seen")).unwrap();
    let counts: Vec<usize> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(counts.len(), 8, "every schedd queried once: {text}");
    counts.into_iter().max().unwrap()
}

/// A job's `RequestDiskVolumes` reach its pod each at a place of its own: two at one path (as
/// a string, which the API server refuses, or as a place: `/data` and `/data/`), or
/// one at, above or inside a path the site or pilotd mounts (the pool token, a ConfigMap
/// file), are refused by pilotd with the reason in the plan and never sent; the shape whose
/// volumes are apart is created, and the fake API server (which refuses what a real one does:
/// two volumes of one name, two mounts at one path) accepts its Job.
#[tokio::test]
async fn job_volumes_at_a_taken_place_are_refused_never_sent() {
    let pool = Pool::new();
    pool.write(
        "jobs-ap20.uc.osg-htc.org.txt",
        "101 0 1 1 4096 8000000 0 undefined undefined \"data-a:/data,data-b:!/scratch\" false\n\
         102 0 1 2 4096 8000000 0 undefined undefined \"data-a:/data,data-b:/data\" false\n\
         105 0 1 5 4096 8000000 0 undefined undefined \"data-a:/data,data-b:/data/\" false\n\
         103 0 1 3 4096 8000000 0 undefined undefined \"data-a:/etc/condor/tokens.d\" false\n\
         104 0 1 4 4096 8000000 0 undefined undefined \"data-b:/etc/condor/config.d/40_glidein.config\" false\n",
    );
    pool.write("jobs-ap21.uc.osg-htc.org.txt", "");
    let fake = FakeKube::start().await;
    let cfg = pool.config(
        "job_volume_allow = [\"data-a\", \"data-b\"]\n\
         [[config_volumes]]\nconfig_map = \"wn-config\"\npath = \"/etc/condor/config.d/40_glidein.config\"\n",
    );
    let backend = KubeBackend::from_client(fake.client(NS), &cfg.connection);
    let mut book = BackoffBook::default();
    let (plan, report) = cycle(&cfg, &backend, &mut book, now()).await.unwrap();
    assert!(report.create_failed.is_empty(), "{report:?}");
    assert_eq!(report.created.len(), 1, "{report:?}");
    assert_eq!(fake.store.lock().unwrap().count("POST"), 1);
    let job = fake.jobs().pop().unwrap();
    assert_eq!(label(&job, "PodCPUs"), Some("1"));
    let mounts: Vec<&str> = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert_eq!(
        mounts,
        [
            "/data",
            "/scratch",
            "/etc/condor/config.d/40_glidein.config",
            "/etc/condor/tokens.d/prp-wn.token"
        ]
    );
    let error = |cpus: u64| {
        let c = plan.clusters.iter().find(|c| c.key.cpus == cpus).unwrap();
        assert_eq!(c.submit, 0, "{c:?}");
        c.error.clone().unwrap_or_default()
    };
    for (cpus, why) in [
        (
            2,
            "RequestDiskVolumes entry `data-b:/data` mounts at /data, where the job's `data-a:/data` is mounted too",
        ),
        // One place to the container, two strings to the API server (which would take it).
        (
            5,
            "RequestDiskVolumes entry `data-b:/data/` mounts at /data, where the job's `data-a:/data` is mounted too",
        ),
        (
            3,
            "RequestDiskVolumes entry `data-a:/etc/condor/tokens.d` mounts at /etc/condor/tokens.d, over the pool token at /etc/condor/tokens.d/prp-wn.token",
        ),
        (
            4,
            "mounts at /etc/condor/config.d/40_glidein.config, where the site's ConfigMap `wn-config` ([kubernetes] config_volumes) is mounted",
        ),
    ] {
        let e = error(cpus);
        assert!(e.contains(why), "{cpus} CPUs: {e}");
    }
}
