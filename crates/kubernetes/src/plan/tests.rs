use super::*;
use crate::ads::{AdValue, JobAd, StartdAd};
use crate::jobs::tests::pod_of;
use crate::observed::{JobConditionSeen, JobStatusSeen, Meta, WorkerJob, WorkerPod};
use crate::report;
use crate::settings::Settings;
use proptest::prelude::*;

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

fn snapshot(jobs: Vec<JobAd>, pods: Vec<WorkerPod>) -> ClusterSnapshot {
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
fn a_shape_asking_for_what_the_site_does_not_allow_is_reported_and_gets_no_pods() {
    let c = cfg("");
    let mut evil = idle_job(1, 4096, 0, 0);
    evil.request_labels = AdValue::Str("app:evil-service".into());
    let mut pvc = idle_job(2, 4096, 0, 0);
    pvc.request_disk_volumes = AdValue::Str("someones-home:/home".into());
    let d = decide(
        &snapshot(vec![evil, pvc, idle_job(4, 4096, 0, 0)], vec![]),
        &c,
        now(),
    );
    let rows: Vec<(u64, u64, Option<&str>)> = d
        .plan
        .clusters
        .iter()
        .map(|r| (r.key.cpus, r.submit, r.error.as_deref()))
        .collect();
    assert_eq!(rows.len(), 3);
    assert!(rows[0].2.unwrap().contains("job_label_allow"), "{rows:?}");
    assert!(rows[1].2.unwrap().contains("job_volume_allow"), "{rows:?}");
    assert_eq!((rows[0].1, rows[1].1, rows[2].1), (0, 0, 1));
    assert_eq!(d.plan.jobs.len(), 1, "only the plain shape gets a pod");
    let status = report::status_text(&d.plan);
    assert!(
        status.contains("gets no pods: shape 1;4096;8000000;;0;;app:evil-service"),
        "{status}"
    );
    assert!(report::plan_text(&d.plan).contains("job_volume_allow"));
}

#[test]
fn gpu_constrained_jobs_are_reported_and_do_not_feed_the_plain_gpu_shape() {
    let c = cfg("");
    let plain = idle_job(1, 4096, 0, 1);
    let mut constrained = plain.clone();
    constrained.constrains_gpus = AdValue::Bool(true);
    let jobs = vec![plain, constrained.clone(), constrained.clone(), constrained];
    let d = decide(&snapshot(jobs, vec![]), &c, now());
    assert_eq!(d.plan.clusters.len(), 1);
    assert_eq!(
        (d.plan.clusters[0].idle_jobs, d.plan.clusters[0].submit),
        (1, 1),
        "only the plain GPU job makes demand"
    );
    assert_eq!(d.plan.unsupported.len(), 1);
    assert_eq!(d.plan.unsupported[0].idle_jobs, 3);
    let text = report::plan_text(&d.plan);
    assert!(text.contains("not provisioned: 3 idle job(s) of shape 1;4096;8000000;;1;;: the job constrains GPUs with RequireGPUs or GPUs_Capability"), "{text}");
    let v = serde_json::to_value(&d.plan).unwrap();
    assert_eq!(v["unsupported"][0]["idle_jobs"], 3);
}

#[test]
fn one_create_budget_per_cycle_is_spent_in_key_order() {
    let c = cfg("max_creates_per_cycle = 25\n");
    let mut jobs = Vec::new();
    for cpus in [1, 2, 4] {
        jobs.extend((0..100).map(|_| idle_job(cpus, 4096, 0, 0))); // 20 pods each
    }
    let d = decide(&snapshot(jobs.clone(), vec![]), &c, now());
    let rows: Vec<(u64, u64, u64)> = d
        .plan
        .clusters
        .iter()
        .map(|r| (r.key.cpus, r.submit, r.held_by_cycle_cap))
        .collect();
    assert_eq!(rows, vec![(1, 20, 0), (2, 5, 15), (4, 0, 20)]);
    assert_eq!(d.plan.jobs.len(), 25);
    let v = serde_json::to_value(&d.plan).unwrap();
    assert_eq!(v["clusters"][2]["held_by_cycle_cap"], 20);
    assert!(v["clusters"][0].get("held_by_cycle_cap").is_none());
    // The default leaves these 60 alone.
    assert_eq!(
        decide(&snapshot(jobs, vec![]), &cfg(""), now())
            .plan
            .jobs
            .len(),
        60
    );
}

#[test]
fn jobs_pending_too_long_are_deleted_and_counted_as_failures() {
    let c = cfg("pending_timeout = \"30m\"\ncleanup_max_per_cycle = 2\n");
    let template = job_body(&key("1;4096;8000000;;0;;"), &c.pods, "t").unwrap();
    let pending = |name: &str, minutes: i64| {
        let mut p = pod_of(&template, &format!("{name}-x"), "Pending");
        p.metadata
            .labels
            .insert("batch.kubernetes.io/job-name".into(), name.into());
        p.metadata.creation_timestamp = Some(now() - chrono::Duration::minutes(minutes));
        p
    };
    let pods = vec![
        pending("old", 31),
        pending("older", 90),
        pending("fresh", 29),
    ];
    let mut snap = snapshot(vec![idle_job(1, 4096, 0, 0)], pods);
    // A Job that failed an hour ago and whose pod is gone: a failure too, and due for cleanup.
    snap.kube_jobs = vec![finished_job("done", 60, "Failed")];
    let d = decide(&snap, &c, now());
    assert_eq!(d.plan.stuck, vec!["old", "older"]);
    assert_eq!(
        d.plan.delete,
        vec!["old", "older"],
        "stuck first, one bound for all"
    );
    let row = &d.plan.clusters[0];
    assert_eq!((row.pods.failed, row.pods.waiting), (3, 1));
    assert_eq!(d.book.keys[&row.key].failures, 3);
    assert!(
        report::plan_text(&d.plan).contains("delete Job old (stuck Pending past pending_timeout")
    );
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
    let pods: Vec<WorkerPod> = d
        .plan
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| pod_of(j, &format!("p{i}"), "Pending"))
        .collect();
    let d2 = decide(&snapshot(jobs, pods), &c, now());
    assert!(d2.plan.jobs.is_empty(), "{:?}", d2.plan.clusters);
    assert_eq!(d2.plan.clusters[0].pods.waiting, 3);
    assert_eq!(d2.plan.clusters[1].pods.waiting, 1);
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
    assert_eq!((row.pods.claimed, row.pods.waiting, row.submit), (1, 1, 2));
    let pods_only = &d.plan.clusters[1];
    assert_eq!(
        (
            pods_only.idle_jobs,
            pods_only.pods.waiting,
            pods_only.submit
        ),
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
    assert_eq!(row.pods.failed, 2);
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

fn finished_job(name: &str, minutes_ago: i64, kind: &str) -> WorkerJob {
    WorkerJob {
        metadata: Meta {
            name: name.into(),
            ..Meta::default()
        },
        status: JobStatusSeen {
            conditions: vec![JobConditionSeen {
                type_: kind.into(),
                status: "True".into(),
                last_transition_time: Some(now() - chrono::Duration::minutes(minutes_ago)),
            }],
            completion_time: None,
        },
        ..WorkerJob::default()
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
        WorkerJob {
            metadata: Meta {
                name: "running".into(),
                ..Meta::default()
            },
            ..WorkerJob::default()
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

/// How one worker Job goes, in the property test below: whether and when its pod appears,
/// how long it stays Pending, and how it ends. Nothing ever claims it.
#[derive(Debug, Clone)]
struct Fate {
    /// Cycles before the Job controller makes the pod; `None`: never (a quota refuses it).
    pod_after: Option<u32>,
    pending_for: u32,
    end: End,
}

#[derive(Debug, Clone)]
enum End {
    /// Pending for ever (no node can take it).
    PendingForever,
    /// Running, its startd never advertises or is never claimed.
    RunningUnclaimed {
        advertises: bool,
    },
    Failed {
        containers: bool,
    },
    /// Exits 0 without ever having been claimed (idle timeout).
    Succeeded,
    /// The kubelet reports an odd phase (or none) from then on.
    OddPhase(Option<&'static str>),
    /// Evicted: the pod is deleted (Terminating for a cycle, then gone) and the Job fails.
    Evicted,
}

fn fate() -> impl Strategy<Value = Fate> {
    let end = prop_oneof![
        Just(End::PendingForever),
        any::<bool>().prop_map(|advertises| End::RunningUnclaimed { advertises }),
        any::<bool>().prop_map(|containers| End::Failed { containers }),
        Just(End::Succeeded),
        prop_oneof![Just(None), Just(Some("Unknown")), Just(Some("Weird"))].prop_map(End::OddPhase),
        Just(End::Evicted),
    ];
    (proptest::option::weighted(0.8, 0u32..3), 0u32..5, end).prop_map(
        |(pod_after, pending_for, end)| Fate {
            pod_after,
            pending_for,
            end,
        },
    )
}

/// One simulated Job and its pod at cycle `t` (`None`: gone).
fn simulate(
    name: &str,
    template: &k8s_openapi::api::batch::v1::Job,
    fate: &Fate,
    created: u32,
    t: u32,
    at: impl Fn(u32) -> DateTime<Utc>,
) -> (WorkerJob, Option<WorkerPod>, Option<StartdAd>) {
    let mut meta: Meta =
        serde_json::from_value(serde_json::to_value(&template.metadata).unwrap()).unwrap();
    meta.name = name.into();
    meta.creation_timestamp = Some(at(created));
    let mut job = WorkerJob {
        metadata: meta,
        ..WorkerJob::default()
    };
    let age = t - created;
    let Some(pod_after) = fate.pod_after.filter(|a| age >= *a) else {
        return (job, None, None);
    };
    let mut pod = pod_of(template, &format!("{name}-x"), "Pending");
    pod.metadata
        .labels
        .insert("batch.kubernetes.io/job-name".into(), name.into());
    pod.metadata.creation_timestamp = Some(at(created + pod_after));
    pod.status.container_statuses = None;
    let ended_at = created + pod_after + fate.pending_for;
    if t < ended_at || matches!(fate.end, End::PendingForever) {
        return (job, Some(pod), None);
    }
    pod.status.start_time = Some(at(ended_at));
    let ran = || {
        Some(vec![crate::observed::ContainerSeen {
            name: "htcondor".into(),
        }])
    };
    let fail_job = |job: &mut WorkerJob, kind: &str| {
        job.status.conditions = vec![JobConditionSeen {
            type_: kind.into(),
            status: "True".into(),
            last_transition_time: Some(at(ended_at)),
        }];
    };
    let mut startd = None;
    match &fate.end {
        End::PendingForever => unreachable!(),
        End::RunningUnclaimed { advertises } => {
            pod.status.phase = Some("Running".into());
            pod.status.container_statuses = ran();
            if *advertises {
                startd = Some(StartdAd {
                    name: format!("slot1@{}", pod.metadata.name),
                    state: Some("Unclaimed".into()),
                    activity: Some("Idle".into()),
                    k8s_pod_name: Some(pod.metadata.name.clone()),
                });
            }
        }
        End::Failed { containers } => {
            pod.status.phase = Some("Failed".into());
            pod.status.container_statuses = if *containers { ran() } else { None };
            fail_job(&mut job, "Failed");
        }
        End::Succeeded => {
            pod.status.phase = Some("Succeeded".into());
            pod.status.container_statuses = ran();
            fail_job(&mut job, "Complete");
        }
        End::OddPhase(p) => {
            pod.status.phase = p.map(str::to_string);
        }
        End::Evicted => {
            fail_job(&mut job, "Failed");
            if t == ended_at {
                pod.metadata.deletion_timestamp = Some(at(t));
            } else {
                return (job, None, None);
            }
        }
    }
    (job, Some(pod), startd)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every way a pod can fail feeds the back-off: whatever its pods do (phases, container
    /// statuses, ages, a pod that never appears, eviction), a shape none of whose pods is ever
    /// claimed never gets new pods in three cycles in a row, and over two hours gets at most
    /// its first batch, two replacements and one trial pod per back-off delay.
    #[test]
    fn a_shape_whose_pods_are_never_claimed_never_gets_pods_every_cycle(
        idle in 1u64..400,
        fates in proptest::collection::vec(fate(), 1..4),
    ) {
        let c = cfg("");
        let jobs: Vec<JobAd> = (0..idle).map(|_| idle_job(1, 4096, 0, 0)).collect();
        let template = job_body(&key("1;4096;8000000;;0;;"), &c.pods, "t").unwrap();
        let at = |t: u32| now() + chrono::Duration::seconds(120 * i64::from(t));
        // (name, created at cycle, fate); deleted Jobs leave the list.
        let mut made: Vec<(String, u32, Fate)> = Vec::new();
        let mut book = BackoffBook::default();
        let mut creating = Vec::new();
        let mut created = 0usize;
        let cycles = 60u32; // two hours at the default cycle
        for t in 0..cycles {
            let mut snap = snapshot(jobs.clone(), vec![]);
            for (name, created, fate) in &made {
                let (job, pod, startd) = simulate(name, &template, fate, *created, t, at);
                snap.kube_jobs.push(job);
                snap.pods.extend(pod);
                snap.startds.extend(startd);
            }
            snap.backoff = book.clone();
            let d = decide(&snap, &c, at(t));
            book = d.book;
            let submit = d.plan.jobs.len() as u32;
            creating.push(submit > 0);
            created += submit as usize;
            made.retain(|(n, _, _)| !d.plan.delete.contains(n));
            for j in &d.plan.jobs {
                let f = fates[made.len() % fates.len()].clone();
                made.push((j.metadata.name.clone().unwrap(), t, f));
            }
        }
        let runs = creating.windows(3).filter(|w| w.iter().all(|x| *x)).count();
        prop_assert_eq!(runs, 0, "pods created in three cycles in a row: {:?}", creating);
        let first = min_pods(idle, c.max_pods_per_cluster) as usize;
        let trials = (u64::from(cycles) * 120 / 300) as usize + 1;
        prop_assert!(
            created <= first + 2 + trials,
            "{created} pods for {idle} idle jobs: {:?}", creating
        );
    }
}
