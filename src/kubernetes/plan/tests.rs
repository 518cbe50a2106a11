use super::*;
use crate::kubernetes::shape::POD_GPU_TYPES;
use crate::kubernetes::snapshot::{AdValue, JobAd, StartdAd};
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

fn cfg(extra: &str) -> KubernetesConfig {
    KubernetesConfig::from_table_text(&format!(
        "namespace = \"osg\"\napp_name = \"osg-direct\"\n{extra}"
    ))
    .unwrap()
}

fn now() -> DateTime<Utc> {
    "2026-12-01T21:30:00Z".parse().unwrap()
}

fn idle_job(cpus: i64, mem: i64, disk: i64, gpus: i64) -> JobAd {
    JobAd {
        schedd_name: "ap20.uc.osg-htc.org".into(),
        cluster_id: 1,
        proc_id: 0,
        job_status: AdValue::Int(1),
        request_cpus: AdValue::Int(cpus),
        request_memory: AdValue::Int(mem),
        request_disk: AdValue::Int(disk),
        request_gpus: AdValue::Int(gpus),
        ..JobAd::default()
    }
}

fn snapshot(jobs: Vec<JobAd>, pods: Vec<Pod>) -> ClusterSnapshot {
    ClusterSnapshot {
        mode: "kubernetes".into(),
        taken_at: now(),
        jobs,
        startds: Vec::new(),
        pods,
        kube_jobs: Vec::new(),
        backoff: BackoffBook::default(),
        failed_schedds: Vec::new(),
    }
}

/// The pod the Job controller would make from a Job body.
fn pod_of(job: &Job, name: &str, phase: &str) -> Pod {
    let tmpl = job.spec.as_ref().unwrap().template.clone();
    let mut meta = tmpl.metadata.unwrap();
    meta.name = Some(name.into());
    Pod {
        metadata: meta,
        spec: tmpl.spec,
        status: Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: (phase != "Pending").then(|| vec![ContainerStatus::default()]),
            ..PodStatus::default()
        }),
    }
}

fn key(s: &str) -> ShapeKey {
    s.parse().unwrap()
}

fn env_of(job: &Job) -> BTreeMap<String, String> {
    job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn one_job_per_pod_with_units_the_worker_matches() {
    let c = cfg("");
    let job = job_body(&key("4;8192;10000000;;1;;"), &c, "osg-direct-1-000000").unwrap();
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(
        (spec.parallelism, spec.completions, spec.backoff_limit),
        (Some(1), Some(1), Some(0))
    );
    assert_eq!(spec.ttl_seconds_after_finished, Some(86400));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let res = pod.containers[0].resources.as_ref().unwrap();
    let (req, lim) = (res.requests.as_ref().unwrap(), res.limits.as_ref().unwrap());
    // Large-limit over-commit (the default): 75 % CPU, 80 % memory requested.
    assert_eq!(req["cpu"].0, "3000m");
    assert_eq!(lim["cpu"].0, "4250m");
    assert_eq!(req["memory"].0, "6553Mi");
    assert_eq!(lim["memory"].0, "9192Mi");
    // Storage floor 20000 MiB = 20480000 KiB beats the job's 10000000 KiB, in Ki.
    assert_eq!(req["ephemeral-storage"].0, "20480000Ki");
    assert_eq!(lim["ephemeral-storage"].0, "20480000Ki");
    assert_eq!(lim["nvidia.com/gpu"].0, "1");
    assert_eq!(lim["smarter-devices/fuse"].0, "1");
    let env = env_of(&job);
    assert_eq!(env["DISK"], "10000000", "DISK stays the job's own KiB");
    assert_eq!(env["MEMORY"], "8192");
    assert_eq!(env["NUM_CPUS"], "4");
    assert_eq!(env["NUM_GPUS"], "1");
    assert_eq!(env["K8S_PROVISIONER_TYPE"], "PRPHTCondorProvisioner");
    assert_eq!(env["K8S_PROVISIONER_NAME"], "osg-direct");
    assert_eq!(env["K8S_NAMESPACE"], "osg");
    assert_eq!(env["K8S_DOMAIN"], "optiputer.net");
    assert_eq!(env["FORCE_K8SNAMESPACE_MATCHING"], "yes");
    assert!(!env.contains_key("ADDITIONAL_REQUIREMENTS"));
    let phys = pod.containers[0].env.as_ref().unwrap().last().unwrap();
    assert_eq!(phys.name, "PHYSICAL_HOSTNAME");
    assert_eq!(
        phys.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "spec.nodeName"
    );
    // No requirement → no affinity block at all; nothing empty emitted.
    assert!(pod.affinity.is_none());
    assert!(pod.node_selector.is_none() && pod.tolerations.is_none());
    let json = serde_json::to_value(&job).unwrap();
    assert!(json["spec"]["template"]["spec"].get("affinity").is_none());
    assert_eq!(json["kind"], "Job");
    assert_eq!(json["apiVersion"], "batch/v1");
}

#[test]
fn exact_resources_without_large_limit() {
    let c = cfg("use_large_limit = false\nmin_ephemeral_storage_mib = 0\nrequest_fuse = false\n");
    let job = job_body(&key("2;4096;9000000;;0;;"), &c, "n").unwrap();
    let res = job.spec.unwrap().template.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap();
    let (req, lim) = (res.requests.unwrap(), res.limits.unwrap());
    assert_eq!(req, lim);
    assert_eq!(req["cpu"].0, "2");
    assert_eq!(req["memory"].0, "5096Mi");
    assert_eq!(req["ephemeral-storage"].0, "9000000Ki");
    assert!(!req.contains_key("nvidia.com/gpu") && !req.contains_key("smarter-devices/fuse"));
}

#[test]
fn gpu_types_and_site_rules_become_node_affinity() {
    let c = cfg(
        "tolerations = [\"nautilus.io/noceph\"]\npriority_class = \"opportunistic\"\npriority_class_gpu = \"gpu-prio\"\n\
         [[node_affinity]]\nkey = \"nautilus.io/low-power\"\noperator = \"NotIn\"\nvalues = [\"true\"]\n",
    );
    let k = ShapeKey {
        gpus: 1,
        gpu_types: "NVIDIA-A100,NVIDIA-A40".into(),
        ..key("1;4096;8000000;;0;;")
    };
    let job = job_body(&k, &c, "n").unwrap();
    let pod = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
    let terms = pod
        .affinity
        .unwrap()
        .node_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    let exprs = terms[0].match_expressions.clone().unwrap();
    assert_eq!(exprs[0].key, "nautilus.io/low-power");
    assert_eq!(exprs[0].operator, "NotIn");
    assert_eq!(exprs[1].key, "nvidia.com/gpu.product");
    assert_eq!(exprs[1].operator, "In");
    assert_eq!(
        exprs[1].values.clone().unwrap(),
        vec!["NVIDIA-A100", "NVIDIA-A40"]
    );
    assert_eq!(pod.priority_class_name.as_deref(), Some("gpu-prio"));
    let t = &pod.tolerations.unwrap()[0];
    assert_eq!(
        (t.operator.as_deref(), t.effect.as_deref()),
        (Some("Exists"), Some("NoSchedule"))
    );
    // The GPU type list is not label-safe: annotation + hash label, and the pod maps back.
    let tmpl = job
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .clone()
        .unwrap();
    assert_eq!(
        tmpl.annotations.unwrap()[POD_GPU_TYPES],
        "NVIDIA-A100,NVIDIA-A40"
    );
    assert_eq!(ShapeKey::from_pod(&pod_of(&job, "p", "Pending")), k);
    // CPU pods fall back to the generic class.
    let cpu = job_body(&key("1;4096;8000000;;0;;"), &c, "n").unwrap();
    assert_eq!(
        cpu.spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .priority_class_name
            .as_deref(),
        Some("opportunistic")
    );
}

#[test]
fn volumes_token_labels_and_env_as_the_worker_expects() {
    let c = cfg(
        "additional_requirements = \"(ProjectName=?=\\\"x\\\")\"\nforce_namespace_matching = false\n\
         [labels]\nosg-provisioner = \"wn\"\n[env]\nGLIDEIN_Site = \"SDSC-PRP\"\n\
         [annotations]\n\"container.apparmor.security.beta.kubernetes.io/htcondor\" = \"unconfined\"\n\
         [[pvc_volumes]]\nclaim = \"cvmfs\"\npath = \"/cvmfs\"\nhost_to_container = true\n\
         [[config_volumes]]\nconfig_map = \"wn-glidein-config\"\npath = \"/etc/condor/config.d/40_glidein.config\"\n",
    );
    let k = ShapeKey {
        disk_volumes: "scratch:!/scratch".into(),
        labels: "team:astro".into(),
        ..key("1;4096;8000000;;0;;")
    };
    let job = job_body(&k, &c, "n").unwrap();
    let tmpl = job.spec.as_ref().unwrap().template.clone();
    let meta = tmpl.metadata.unwrap();
    let labels = meta.labels.unwrap();
    assert_eq!(labels["k8s-app"], "osg-direct");
    assert_eq!(labels["prp-htcondor-portal"], "wn");
    assert_eq!(labels["osg-provisioner"], "wn");
    assert_eq!(labels["team"], "astro", "RequestLabels become pod labels");
    assert_eq!(labels["PodCPUs"], "1");
    assert_eq!(job.metadata.labels.as_ref().unwrap(), &labels);
    assert_eq!(
        meta.annotations.unwrap()["container.apparmor.security.beta.kubernetes.io/htcondor"],
        "unconfined"
    );
    let spec = tmpl.spec.unwrap();
    let mounts = spec.containers[0].volume_mounts.clone().unwrap();
    let cvmfs = mounts.iter().find(|m| m.mount_path == "/cvmfs").unwrap();
    assert_eq!(cvmfs.mount_propagation.as_deref(), Some("HostToContainer"));
    let scratch = mounts.iter().find(|m| m.mount_path == "/scratch").unwrap();
    assert_eq!(scratch.read_only, Some(true));
    let cm = mounts
        .iter()
        .find(|m| m.mount_path.ends_with("40_glidein.config"))
        .unwrap();
    assert_eq!(cm.sub_path.as_deref(), Some("40_glidein.config"));
    let token = mounts.iter().find(|m| m.mount_path == TOKEN_PATH).unwrap();
    assert_eq!(
        (token.sub_path.as_deref(), token.read_only),
        (Some("prp-wn.token"), Some(true))
    );
    let vols = spec.volumes.unwrap();
    let secret = vols.iter().find_map(|v| v.secret.clone()).unwrap();
    assert_eq!(
        secret.secret_name.as_deref(),
        Some("prp-htcondor-wn-secret")
    );
    assert_eq!(secret.default_mode, Some(0o400));
    let env = env_of(&job);
    assert_eq!(env["FORCE_K8SNAMESPACE_MATCHING"], "no");
    assert_eq!(env["ADDITIONAL_REQUIREMENTS"], "(ProjectName=?=\"x\")");
    assert_eq!(env["GLIDEIN_Site"], "SDSC-PRP");
}

#[test]
fn a_bad_shape_field_fails_only_its_own_key() {
    let c = cfg("");
    let mut bad = idle_job(1, 4096, 0, 0);
    bad.request_labels = AdValue::Str("not a label:x y".into());
    let good = idle_job(2, 4096, 0, 0);
    let d = decide(&snapshot(vec![bad, good], vec![]), &c, now());
    assert_eq!(d.plan.clusters.len(), 2);
    let errs: Vec<_> = d
        .plan
        .clusters
        .iter()
        .filter(|c| c.error.is_some())
        .collect();
    assert_eq!(errs.len(), 1);
    assert!(errs[0].error.as_ref().unwrap().contains("RequestLabels"));
    assert_eq!(d.plan.jobs.len(), 1, "the good key still gets its pod");
}

#[test]
fn full_cycle_then_pending_pods_submit_nothing_more() {
    let c = cfg("");
    // 10 default jobs → min_pods 3; 1 GPU job → 1; keys in sorted order.
    let mut jobs: Vec<JobAd> = (0..10).map(|_| idle_job(1, 2048, 100, 0)).collect();
    jobs.push(idle_job(4, 8192, 0, 1));
    let d = decide(&snapshot(jobs.clone(), vec![]), &c, now());
    assert_eq!(d.plan.jobs.len(), 4);
    assert_eq!(d.plan.clusters[0].key.to_string(), "1;4096;8000000;;0;;");
    assert_eq!(
        (d.plan.clusters[0].idle_jobs, d.plan.clusters[0].submit),
        (10, 3)
    );
    assert_eq!(d.plan.clusters[1].key.to_string(), "4;8192;8000000;;1;;");
    let names: Vec<_> = d
        .plan
        .jobs
        .iter()
        .map(|j| j.metadata.name.clone().unwrap())
        .collect();
    let ts = format!("{:x}", now().timestamp());
    assert_eq!(names[0], format!("osg-direct-{ts}-000000"));
    assert_eq!(names[3], format!("osg-direct-{ts}-000003"));
    // Second cycle: the Job controller made one pending pod per Job.
    let pods: Vec<Pod> = d
        .plan
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| pod_of(j, &format!("p{i}"), "Pending"))
        .collect();
    let d2 = decide(&snapshot(jobs, pods), &c, now());
    assert!(d2.plan.jobs.is_empty(), "{:?}", d2.plan.clusters);
    assert_eq!(d2.plan.clusters[0].waiting, 3);
    assert_eq!(d2.plan.clusters[1].waiting, 1);
}

#[test]
fn claimed_pods_do_not_count_as_unclaimed_and_pods_only_keys_are_reported() {
    let c = cfg("");
    let jobs: Vec<JobAd> = (0..8).map(|_| idle_job(1, 4096, 0, 0)).collect(); // min 3
    let template = job_body(&key("1;4096;8000000;;0;;"), &c, "t").unwrap();
    let other = job_body(&key("8;32000;8000000;;0;;"), &c, "o").unwrap();
    let pods = vec![
        pod_of(&template, "a", "Running"),
        pod_of(&template, "b", "Running"),
        pod_of(&other, "c", "Running"),
    ];
    let mut snap = snapshot(jobs, pods);
    snap.startds = vec![StartdAd {
        name: "slot1@a".into(),
        state: Some("Claimed".into()),
        activity: Some("Busy".into()),
        k8s_pod_name: Some("a".into()),
    }];
    let d = decide(&snap, &c, now());
    let row = &d.plan.clusters[0];
    assert_eq!((row.claimed, row.waiting, row.submit), (1, 1, 2));
    let pods_only = &d.plan.clusters[1];
    assert_eq!(
        (pods_only.idle_jobs, pods_only.waiting, pods_only.submit),
        (0, 1, 0)
    );
}

#[test]
fn backoff_limits_a_failing_shape_to_one_trial_pod() {
    let c = cfg("");
    let template = job_body(&key("1;4096;8000000;;0;;"), &c, "t").unwrap();
    let jobs: Vec<JobAd> = (0..100).map(|_| idle_job(1, 4096, 0, 0)).collect();
    let failed = vec![
        pod_of(&template, "f1", "Failed"),
        pod_of(&template, "f2", "Failed"),
    ];
    let d = decide(&snapshot(jobs.clone(), failed.clone()), &c, now());
    let row = &d.plan.clusters[0];
    assert_eq!(row.failed, 2);
    assert_eq!(row.submit, 0, "delay after the second failure");
    let b = row.backoff.clone().unwrap();
    assert!(b.trial);
    assert_eq!(b.next_trial_at, Some(now() + chrono::Duration::minutes(5)));
    // Five minutes later one trial pod may start, not 20.
    let mut snap = snapshot(jobs, failed);
    snap.backoff = d.book.clone();
    let later = now() + chrono::Duration::minutes(5);
    let d2 = decide(&snap, &c, later);
    assert_eq!(d2.plan.clusters[0].submit, 1);
    assert_eq!(d2.plan.jobs.len(), 1);
    // Without failures the same demand gets the full 20.
    let d3 = decide(&snapshot(snap.jobs.clone(), vec![]), &c, now());
    assert_eq!(d3.plan.clusters[0].submit, 20);
}

fn finished_job(name: &str, minutes_ago: i64, kind: &str) -> Job {
    let t = Timestamp::from_second(now().timestamp() - minutes_ago * 60).unwrap();
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(JobStatus {
            conditions: Some(vec![JobCondition {
                type_: kind.into(),
                status: "True".into(),
                last_transition_time: Some(Time(t)),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        }),
    }
}

#[test]
fn cleanup_deletes_old_finished_jobs_oldest_first_and_bounded() {
    let c = cfg("cleanup_max_per_cycle = 2\ncleanup_after = \"10m\"\n");
    let jobs = vec![
        finished_job("recent", 5, "Complete"),
        finished_job("old", 30, "Complete"),
        finished_job("older", 60, "Failed"),
        finished_job("oldest", 90, "Complete"),
        Job {
            metadata: ObjectMeta {
                name: Some("running".into()),
                ..ObjectMeta::default()
            },
            ..Job::default()
        },
    ];
    assert_eq!(
        finished_jobs_to_delete(&jobs, &c, now()),
        vec!["oldest", "older"]
    );
}

#[test]
fn plan_json_has_the_contract_fields() {
    let c = cfg("");
    let d = decide(&snapshot(vec![idle_job(1, 1, 1, 0)], vec![]), &c, now());
    let v = serde_json::to_value(&d.plan).unwrap();
    assert_eq!(v["mode"], "kubernetes");
    assert_eq!(v["now"], "2026-12-01T21:30:00Z");
    let c0 = &v["clusters"][0];
    for f in [
        "key",
        "idle_jobs",
        "waiting",
        "unmatched",
        "claimed",
        "failed",
        "unknown",
        "min_pods",
        "submit",
        "backoff",
    ] {
        assert!(c0.get(f).is_some(), "missing {f}");
    }
    assert_eq!(c0["key"], "1;4096;8000000;;0;;");
    assert_eq!(v["jobs"][0]["spec"]["backoffLimit"], 0);
    assert!(render_text(&d.plan).contains("create Job osg-direct-"));
}
