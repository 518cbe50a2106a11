//! Kubernetes mode from the operator's side, through the `pilotd` binary: convert a real
//! provisioner INI with `import-ini`, use the result as is with `-c`, and replay a snapshot
//! with `plan --snapshot --format json` (the snapshot's contract: README.md, "Snapshot files";
//! the mode: docs/kubernetes.md).

use crate::harness;
use assert_cmd::Command;
use pilotd_kubernetes::config::KubernetesConfig;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    harness::fixture(&format!("kubernetes/{name}"))
}

fn converted(dir: &Path) -> PathBuf {
    let out = Command::new(harness::bin())
        .arg("import-ini")
        .arg(fixture("osg_provisioner.conf"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // Replays must not touch the real state directory.
    let text = text.replacen(
        "mode = \"kubernetes\"",
        &format!("mode = \"kubernetes\"\nstate_dir = '{}'", dir.display()),
        1,
    );
    let path = dir.join("pilotd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn import_ini_output_is_a_valid_pilotd_toml_with_the_ini_settings() {
    let dir = tempfile::tempdir().unwrap();
    let path = converted(dir.path());
    let text = std::fs::read_to_string(&path).unwrap();
    let (site, k) = read_site(&path, &text);
    assert_eq!(site.mode, pilotd_core::config::Mode::Kubernetes);
    assert_eq!(k.namespace.get_ref(), "osg-opportunistic");
    assert_eq!(k.app_name.get_ref(), "osg-direct");
    assert_eq!(*k.max_submit_pods_per_cluster.get_ref(), 300);
    assert_eq!(
        k.service_account_name.as_deref(),
        Some("prp-htcondor-wn-ro")
    );
    assert_eq!(k.env.get_ref()["OSG_SQUID_LOCATION"], "10.110.90.167:3128");
    assert_eq!(
        k.config_volumes.get_ref()[0].path,
        "/etc/condor/config.d/40_glidein.config"
    );
    assert!(
        k.additional_requirements
            .contains("stringListMember(\"SDSC-PRP\",DESIRED_Sites,\",\")")
    );
    assert!(!k.force_namespace_matching);
    // `pilotd check` accepts it too.
    Command::new(harness::bin())
        .arg("-c")
        .arg(&path)
        .arg("check")
        .assert()
        .success();
}

#[test]
fn import_ini_reports_a_bad_entry_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.conf");
    std::fs::write(&bad, "[DEFAULT]\nnamespace=ns\n[k8s]\nenvs_dict=A:1,B\n").unwrap();
    let out = Command::new(harness::bin())
        .arg("import-ini")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:4: envs_dict:", bad.display())),
        "{err}"
    );
}

fn plan(config: &Path) -> Value {
    replay(config, &["--now", "2026-12-01T21:30:00Z"])
}

/// `plan --format json --snapshot` of the fixture snapshot, with `args` besides.
fn replay(config: &Path, args: &[&str]) -> Value {
    let out = Command::new(harness::bin())
        .arg("-c")
        .arg(config)
        .args(["plan", "--format", "json"])
        .args(args)
        .arg("--snapshot")
        .arg(fixture("snapshot.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Without --now a replay decides at the snapshot's own time, as `plan --help` says: the same
/// file gives the same plan whenever it is replayed.
#[test]
fn plan_replays_a_snapshot_at_its_own_time_without_now() {
    let dir = tempfile::tempdir().unwrap();
    let config = converted(dir.path());
    let first = replay(&config, &[]);
    assert_eq!(first["now"], "2026-12-01T21:30:00Z");
    assert_eq!(first, replay(&config, &[]));
    assert_eq!(
        first,
        plan(&config),
        "the same as at --now the snapshot's time"
    );
}

#[test]
fn plan_replays_a_snapshot_offline_with_the_json_contract() {
    let dir = tempfile::tempdir().unwrap();
    let config = converted(dir.path());
    let v = plan(&config);
    assert_eq!(v["mode"], "kubernetes");
    assert_eq!(v["now"], "2026-12-01T21:30:00Z");
    let clusters = v["clusters"].as_array().unwrap();
    assert!(!clusters.is_empty());
    let keys: Vec<&str> = clusters
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by_key(|k| k.parse::<pilotd_kubernetes::shape::ShapeKey>().unwrap());
    assert_eq!(keys, sorted, "rows in key order");
    let mut submit = 0;
    for c in clusters {
        for f in [
            "idle_jobs",
            "waiting",
            "unmatched",
            "claimed",
            "failed",
            "unknown",
            "min_pods",
            "submit",
        ] {
            assert!(c[f].is_u64(), "{f} in {c}");
        }
        assert!(c.get("backoff").is_some());
        submit += c["submit"].as_u64().unwrap();
    }
    // The snapshot's six startd ads, paired by K8SPodName: p0 and p4 are Running and
    // Claimed, p1 and p5 Running and Unclaimed; p8's (Failed) and p9's (Succeeded) ads do
    // not make their pods claimed or unmatched.
    let total = |f: &str| clusters.iter().map(|c| c[f].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (total("claimed"), total("unmatched")),
        (2, 2),
        "{clusters:?}"
    );
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len() as u64, submit);
    assert!(!jobs.is_empty());
    for j in jobs {
        assert_eq!(j["kind"], "Job");
        assert_eq!(j["spec"]["backoffLimit"], 0);
        assert_eq!(j["spec"]["ttlSecondsAfterFinished"], 3600);
        let pod = &j["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "prp-htcondor-wn-ro");
        assert_eq!(pod["priorityClassName"], "opportunistic");
        let expr = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0];
        assert_eq!(expr["operator"], "NotIn");
    }
    // The same snapshot and instant give the same plan.
    assert_eq!(plan(&config), v);
}

#[test]
fn the_deployment_configmap_holds_a_valid_pilotd_toml() {
    let path = harness::repo("deploy/kubernetes/configmap.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let start =
        yaml.find("pilotd.toml: |\n").expect("a pilotd.toml key") + "pilotd.toml: |\n".len();
    // The block scalar ends at the next, less indented, key.
    let toml: String = yaml[start..]
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let (_, k) = read_site(&path, &toml);
    assert_eq!(k.namespace.get_ref(), "osg-opportunistic");
    assert_eq!(
        *k.client.get_ref(),
        pilotd_kubernetes::config::ClientSource::InCluster
    );
}

/// import-ini as the upstream provisioner reads its INI: app_name osg-wn when none is given,
/// [htcondor] additional_requirements for the schedd query and [k8s]'s for the workers, and
/// `&amp;` decoded until it no longer occurs.
#[test]
fn import_ini_follows_the_upstream_provisioner_on_an_upstream_style_ini() {
    let ini = fixture("upstream/osg_provisioner.conf");
    let out = Command::new(harness::bin())
        .arg("import-ini")
        .arg(&ini)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (_, k) = read_site(&ini, &text);
    assert_eq!(k.app_name.get_ref(), "osg-wn", "{text}");
    assert_eq!(k.env.get_ref()["ICECUBE_FLAGS"], "a&b");
    assert_eq!(k.env.get_ref()["SQUID"], "10.1.2.3:3128");
    assert_eq!(k.env.get_ref()["SITES"], "a,b");
    let s =
        pilotd_kubernetes::settings::Settings::from_table(&k, Path::new("/nonexistent")).unwrap();
    assert_eq!(
        s.condor.job_constraint,
        "(JobStatus=?=1) && regexp(RequestK8SNamespace,\"osg-icecube\") && ((RequestGPUs>0)&&(!isUndefined(ProjectName)))",
        "the schedd query is narrowed by [htcondor]'s"
    );
    assert_eq!(
        s.plan.pods.additional_requirements, "(TARGET.IceCubeGPU=?=True)",
        "the workers' START gets [k8s]'s"
    );
    assert!(
        s.condor
            .startd_constraint
            .contains("(K8SProvisionerName=?=\"osg-wn\")")
    );
    // The pod.conf upstream's startup script writes (namespace and condor_host only) gives
    // osg-wn too.
    let pod_conf = Command::new(harness::bin())
        .arg("import-ini")
        .arg(fixture("upstream/pod.conf"))
        .output()
        .unwrap();
    let text = String::from_utf8(pod_conf.stdout).unwrap();
    assert!(text.contains("app_name = \"osg-wn\""), "{text}");
    assert!(!text.contains("worker_additional_requirements"), "{text}");
}

/// A kubernetes-mode pilotd.toml as `pilotd` reads it: the core's keys and the `[kubernetes]`
/// table, checked together, then the table resolved.
fn read_site(path: &Path, text: &str) -> (pilotd_core::config::SiteConfig, KubernetesConfig) {
    let site =
        pilotd_core::config::parse_site_with(path, text, &[pilotd_kubernetes::config::check_table])
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let k = KubernetesConfig::of_table(site.kubernetes.as_ref().expect("a [kubernetes] table"))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    (site, k)
}
