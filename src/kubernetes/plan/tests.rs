use super::*;
use crate::kubernetes::ads::{AdValue, JobAd, StartdAd};
use crate::kubernetes::jobs::tests::pod_of;
use crate::kubernetes::report;
use crate::kubernetes::settings::Settings;
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

fn cfg(extra: &str) -> PlanSettings {
    Settings::test(extra).plan
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

fn key(s: &str) -> ShapeKey {
    s.parse().unwrap()
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
    let template = job_body(&key("1;4096;8000000;;0;;"), &c.pods, "t").unwrap();
    let other = job_body(&key("8;32000;8000000;;0;;"), &c.pods, "o").unwrap();
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
    let template = job_body(&key("1;4096;8000000;;0;;"), &c.pods, "t").unwrap();
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
        finished_jobs_to_delete(&jobs, c.cleanup_after, c.cleanup_max_per_cycle, now()),
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
    assert!(report::plan_text(&d.plan).contains("create Job osg-direct-"));
}
