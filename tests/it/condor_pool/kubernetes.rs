//! Kubernetes mode against the real pool: the provisioner's condor queries go to the real
//! collector and schedd (as carol, an ordinary user who is not a queue superuser), and the
//! Kubernetes API is the in-process fake (nothing real can run here). The idle jobs of alice
//! and bob must all be seen, and real pilots started with the env of the Jobs the provisioner
//! created, advertising the `K8S*` attributes as the NRP worker image does, must be counted
//! as claimed and unclaimed.

use crate::kubernetes::fake_api::FakeKube;
use chrono::Utc;
use pilotd_kubernetes::backoff::BackoffBook;
use pilotd_kubernetes::client::KubeBackend;
use pilotd_kubernetes::config::KubernetesConfig;
use pilotd_kubernetes::plan::ClusterDecision;
use pilotd_kubernetes::provisioner::cycle;
use pilotd_kubernetes::settings::Settings;
use pilotd_test_support::pool::{Pool, Tag, WorkerRun, wait_for};
use serde_json::Value;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(300);
const AP: &str = "pilotd-pool-ap";

/// `condor_status` and `condor_q` for the provisioner: the real tools on the access point,
/// run as carol, who has no jobs and is not a queue superuser.
fn tools(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    for tool in ["condor_status", "condor_q"] {
        let path = dir.join(tool);
        std::fs::write(
            &path,
            format!("#!/bin/sh\nexec docker exec -i -u carol -w /home/carol {AP} {tool} \"$@\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The worker configuration that advertises what the NRP worker image advertises from the
/// pod's env (its `20_advertise_k8s_domain.sh`, `21_advertise_k8s_provisioner.sh`), on top of
/// the pool's standard one.
fn k8s_worker_config(pool: &Pool) -> String {
    format!(
        "{}\n\
         K8SPodName = \"$ENV(K8S_POD_NAME)\"\n\
         K8SNamespace = \"$ENV(K8S_NAMESPACE)\"\n\
         K8SDomain = \"$ENV(K8S_DOMAIN)\"\n\
         K8SProvisionerType = \"$ENV(K8S_PROVISIONER_TYPE)\"\n\
         K8SProvisionerName = \"$ENV(K8S_PROVISIONER_NAME)\"\n\
         STARTD_ATTRS = $(STARTD_ATTRS) K8SPodName K8SNamespace K8SDomain K8SProvisionerType K8SProvisionerName\n",
        pool.standard_config()
    )
}

/// The `K8S_*` env a created Job gives its pod.
fn k8s_env(job: &Value) -> Vec<(String, String)> {
    job["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let name = e["name"].as_str()?;
            let value = e["value"].as_str()?;
            name.starts_with("K8S_")
                .then(|| (name.to_owned(), value.to_owned()))
        })
        .collect()
}

fn only_cluster(clusters: &[ClusterDecision]) -> &ClusterDecision {
    assert_eq!(clusters.len(), 1, "one shape expected: {clusters:#?}");
    &clusters[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real HTCondor pool of tests/pool/up.sh; tests/run.sh runs it"]
async fn provisioner_sees_every_users_idle_jobs_and_counts_real_pilots() {
    let pool = Pool::from_env();
    let tag = Tag::new("kube");
    // The namespace is this test's own, so other tests' jobs never match the query.
    let ns = format!("ns{}", std::process::id());
    let body = format!("executable = /bin/sleep\narguments = 600\n+RequestK8SNamespace = \"{ns}\"");
    let mut ids = Vec::new();
    for (user, n) in [("alice", 2), ("bob", 3)] {
        for i in 0..n {
            ids.push(pool.submit(user, &tag, &format!("kube-{}-{user}-{i}", tag.0), &body));
        }
    }
    let cleanup = Cleanup(ids.clone());

    // The rule the provisioner must get around is real in this pool: carol's plain query
    // sees none of these jobs.
    let constraint = format!("regexp(RequestK8SNamespace,\"{ns}\")");
    let plain = pool.on_ap(
        "carol",
        &format!("condor_q -constraint '{constraint}' -af ClusterId"),
    );
    assert_eq!(
        plain.trim(),
        "",
        "carol sees other users' jobs without -allusers"
    );

    let dir = tempfile::tempdir().unwrap();
    tools(dir.path());
    let fake = FakeKube::start().await;
    let table = KubernetesConfig::from_table_text(&format!(
        "namespace = \"{ns}\"\napp_name = \"osg-direct\"\nk8s_domain = \"nrp-nautilus.io\"\n\
         schedd_whitelist = '.*'\ncondor_status = '{}'\ncondor_q = '{}'\ncondor_timeout = \"60s\"\n\
         max_submit_pods_per_cluster = 2\n",
        dir.path().join("condor_status").display(),
        dir.path().join("condor_q").display(),
    ))
    .unwrap();
    let settings = Settings::from_table(&table, &dir.path().join("state")).unwrap();
    let backend = KubeBackend::from_client(fake.client(&ns), &settings.connection);
    let mut book = BackoffBook::default();

    // All five idle jobs, of two users, through one query each schedd.
    let (plan, report) = wait_for("the schedd to list the jobs", LONG, || {
        let (plan, report) = futures_block(cycle(&settings, &backend, &mut book, Utc::now()));
        (plan.clusters.iter().map(|c| c.idle_jobs).sum::<u64>() == 5).then_some((plan, report))
    });
    assert!(plan.failed_schedds.is_empty(), "{:?}", plan.failed_schedds);
    let c = only_cluster(&plan.clusters);
    assert_eq!(c.idle_jobs, 5);
    assert_eq!(
        report.created.len(),
        2,
        "max_submit_pods_per_cluster = 2: {report:?}"
    );

    // The fake Job controller made one Pending pod per Job; the kubelet "starts" them, and
    // each runs a real pilot with its Job's K8S_* env. The first accepts this test's jobs, the
    // second accepts none, so it stays unclaimed.
    let jobs = fake.jobs();
    let pods = fake.pods();
    assert_eq!(pods.len(), 2);
    fake.set_all_pod_phases("Running");
    let url = pool.publish(&format!("k8s-{}.conf", tag.0), &k8s_worker_config(&pool));
    let mut workers = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let pod_name = pod["metadata"]["name"].as_str().unwrap();
        let job_name = pod["metadata"]["labels"]["job-name"].as_str().unwrap();
        let job = jobs
            .iter()
            .find(|j| j["metadata"]["name"] == job_name)
            .expect("the pod's Job");
        let env = k8s_env(job);
        assert!(
            env.iter().any(|(k, _)| k == "K8S_PROVISIONER_TYPE"),
            "{env:?}"
        );
        let worker_tag = if i == 0 {
            tag.clone()
        } else {
            Tag(format!("{}-none", tag.0))
        };
        let mut run = WorkerRun::new(&pool, &worker_tag)
            .name(&format!("pilotd-pool-k-{}-{i}", tag.0))
            .env("PILOT_CONFIG_URLS", &url)
            .env("K8S_POD_NAME", pod_name);
        for (k, v) in &env {
            run = run.env(k, v);
        }
        workers.push(run.start());
    }

    // Both pilots in the collector, found by the provisioner's own startd constraint.
    let constraint = settings.condor.startd_constraint.clone();
    for w in &workers {
        let found = (0..LONG.as_secs() / 2).any(|_| {
            let ads = pool.on_ap(
                "carol",
                &format!(
                    "condor_status -constraint '{}' -af Machine K8SPodName State",
                    constraint.replace('\'', "'\\''")
                ),
            );
            if ads.contains(&w.name) {
                return true;
            }
            std::thread::sleep(Duration::from_secs(2));
            false
        });
        assert!(
            found,
            "{} never advertised its K8S attributes\n{}",
            w.name,
            w.diagnose()
        );
    }

    let mut last = None;
    let claimed = (0..LONG.as_secs() / 5).any(|_| {
        let (plan, _) = futures_block(cycle(&settings, &backend, &mut book, Utc::now()));
        let c = only_cluster(&plan.clusters).clone();
        let done = c.pods.claimed == 1 && c.pods.unmatched == 1;
        last = Some(c);
        if !done {
            std::thread::sleep(Duration::from_secs(5));
        }
        done
    });
    let counts = last.unwrap();
    assert!(
        claimed,
        "expected one claimed and one unmatched pod: {counts:?}\npods: {:?}\nads:\n{}\n{}",
        fake.pods()
            .iter()
            .map(|p| (p["metadata"]["name"].clone(), p["status"]["phase"].clone()))
            .collect::<Vec<_>>(),
        pool.on_ap(
            "carol",
            &format!(
                "condor_status -constraint '{}' -af:V Name State Activity K8SPodName",
                constraint.replace('\'', "'\\''")
            )
        ),
        workers[0].diagnose()
    );
    assert_eq!(counts.pods.waiting, 0, "{counts:?}");
    // One job runs on the claimed pilot; the other four are still idle and counted.
    assert_eq!(counts.idle_jobs, 4, "{counts:?}");
    for w in &workers {
        assert!(w.running(), "{}", w.diagnose());
    }
    drop(cleanup);
}

/// Runs one provisioner cycle to completion from the synchronous `wait_for` closure.
fn futures_block<T, E: std::fmt::Display>(f: impl std::future::Future<Output = Result<T, E>>) -> T {
    match tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f)) {
        Ok(v) => v,
        Err(e) => panic!("provisioner cycle failed: {e}"),
    }
}

/// Removes this test's jobs however it ends.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["exec", AP, "condor_rm"])
            .args(&self.0)
            .output();
    }
}
