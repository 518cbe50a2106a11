use super::*;
use crate::decide::policy::{Cause, LinkHold, Resources};
use chrono::TimeZone;
use pilot_contract::PilotExit;
use pilotd_core::backoff::Backoff;
use pilotd_core::config::site::WorkerUser;
use std::path::PathBuf;
use std::time::Duration;

fn t(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap()
}

fn supply(allowed: bool, workers: u32, evict: Evict) -> Supply {
    Supply {
        allowed,
        workers: if allowed { workers } else { 0 },
        per_worker: Resources {
            cpus: 2,
            memory_mib: 4096,
            disk_kib: 10 << 20,
            gpus: 0,
        },
        accept_until: Some(t(23, 0)),
        die_at: Some(t(23, 59)),
        evict,
        grace: Duration::from_secs(600),
        reasons: vec![],
        // A refusal always has a cause; the owner's presence is the common one.
        causes: if allowed {
            vec![Cause::Free]
        } else {
            vec![Cause::OwnerPresent]
        },
        notes: vec![],
        next_change: None,
        downloads: true,
        owner_busy_since: None,
        host_free_since: None,
        throttle: None,
        cpu_cap: None,
        link: LinkHold::Nothing,
    }
}

fn settings() -> WorkerSettings {
    WorkerSettings {
        instance: "test".into(),
        image: "127.0.0.1:5000/pilotd-test/worker:1".into(),
        max_starts_per_cycle: 1,
        idle_timeout: Duration::from_secs(1200),
        env: BTreeMap::from([
            ("NUM_CPUS".to_string(), "{cpus}".to_string()),
            (
                "ACCEPT".to_string(),
                "{accept_hours}h/{retire_hours}h".to_string(),
            ),
            ("NAME".to_string(), "{worker_name}".to_string()),
            ("LIT".to_string(), "{{cpus}}".to_string()),
        ]),
        token_file: Some("/etc/pilotd/pool.token".into()),
        token_mount: "/etc/pilotd/token".into(),
        scratch_root: "/var/lib/pilotd/scratch".into(),
        tokens_root: "/var/lib/pilotd/tokens".into(),
        ad_dir: "/var/lib/pilotd/ad".into(),
        disk_limit: pilotd_core::config::policy::DiskLimit::Enforced,
        scratch_mount: "/pilot".into(),
        cvmfs: None,
        cap_add: vec![],
        pids_limit: 4096,
        user: WorkerUser::DEFAULT,
        read_only_rootfs: true,
        egress: None,
        network: None,
        pull_while_owner_present: false,
        backoff: Backoff::new(Duration::from_secs(60), Duration::from_secs(3600)),
    }
}

fn worker(id: &str, state: WorkerState, created: DateTime<Utc>) -> Worker {
    Worker {
        name: format!("pilotd-test-{id}"),
        created: Some(created),
        accept_until: Some(t(23, 0)),
        die_at: Some(t(23, 59)),
        image: "127.0.0.1:5000/pilotd-test/worker:1".into(),
        image_digest: "sha256:aa".into(),
        ..Worker::test(id, state)
    }
}

fn ready() -> ImageState {
    ImageState::Ready {
        digest: "sha256:aa".into(),
        pinned: "127.0.0.1:5000/pilotd-test/worker@sha256:aa".into(),
    }
}

/// Actions in a compact form: "start", "stop ID", "pause ID", …
fn short(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .map(|a| match a {
            Action::Pause { id, .. } => format!("pause {id}"),
            Action::Unpause { id, .. } => format!("unpause {id}"),
            Action::Stop { id, .. } => format!("stop {id}"),
            Action::Kill { id, .. } => format!("kill {id}"),
            Action::Limit { id, nano_cpus, .. } => format!("limit {id} {nano_cpus}"),
            Action::Remove { id, .. } => format!("remove {id}"),
            Action::Pull { digest, .. } => format!("pull {digest}"),
            Action::Start { .. } => "start".into(),
        })
        .collect()
}

struct Case {
    name: &'static str,
    supply: Supply,
    workers: Vec<Worker>,
    image: ImageState,
    backoff: StartBackoff,
    stopping: &'static [&'static str],
    max_starts: u32,
    pull_while_owner_present: bool,
    now: DateTime<Utc>,
    want: &'static [&'static str],
}

fn case(
    name: &'static str,
    supply: Supply,
    workers: Vec<Worker>,
    want: &'static [&'static str],
) -> Case {
    Case {
        name,
        supply,
        workers,
        image: ready(),
        backoff: StartBackoff::default(),
        stopping: &[],
        max_starts: 1,
        pull_while_owner_present: false,
        now: t(20, 0),
        want,
    }
}

#[test]
fn plans() {
    use WorkerState::*;
    let old = t(19, 0);
    let new = t(19, 30);
    let mut exited = worker("e", Exited, old);
    exited.exit_code = Some(10);
    let mut expired = worker("x", Running, old);
    expired.die_at = Some(t(19, 59));
    let mut expired_paused = worker("xp", Paused, old);
    expired_paused.die_at = Some(t(20, 0));
    let cases = vec![
        case(
            "start to target, one per cycle",
            supply(true, 2, Evict::None),
            vec![],
            &["start"],
        ),
        Case {
            max_starts: 3,
            ..case(
                "start several when allowed to",
                supply(true, 2, Evict::None),
                vec![],
                &["start", "start"],
            )
        },
        case(
            "at target: nothing",
            supply(true, 1, Evict::None),
            vec![worker("a", Running, old)],
            &[],
        ),
        case(
            "evict pause",
            supply(false, 0, Evict::Pause),
            vec![worker("a", Running, old), worker("b", Paused, old)],
            &["pause a"],
        ),
        case(
            "evict graceful; a paused worker resumes to drain",
            supply(false, 0, Evict::Graceful),
            vec![worker("a", Running, old), worker("b", Paused, old)],
            &["stop a", "unpause b", "stop b"],
        ),
        case(
            "evict fast",
            supply(false, 0, Evict::Fast),
            vec![worker("a", Running, old), worker("b", Paused, old)],
            &["kill a", "kill b"],
        ),
        case(
            "not allowed, no eviction: keep running, keep paused",
            supply(false, 0, Evict::None),
            vec![worker("a", Running, old), worker("b", Paused, old)],
            &[],
        ),
        case(
            "host free again: resume paused",
            supply(true, 2, Evict::None),
            vec![worker("a", Running, old), worker("b", Paused, new)],
            &["unpause b"],
        ),
        case(
            "past die_at: stop; paused past die_at: kill; then replace",
            supply(true, 2, Evict::None),
            vec![expired, expired_paused],
            &["stop x", "kill xp", "start"],
        ),
        case(
            "exited: remove and record",
            supply(true, 1, Evict::None),
            vec![exited.clone(), worker("a", Running, old)],
            &["remove e"],
        ),
        case(
            "created, never started: remove",
            supply(true, 1, Evict::None),
            vec![worker("c", Created, old), worker("a", Running, old)],
            &["remove c"],
        ),
        case(
            "surplus: stop the newest",
            supply(true, 1, Evict::None),
            vec![worker("a", Running, old), worker("b", Running, new)],
            &["stop b"],
        ),
        Case {
            stopping: &["a"],
            ..case(
                "a stop in flight is not repeated",
                supply(false, 0, Evict::Graceful),
                vec![worker("a", Running, old)],
                &[],
            )
        },
        Case {
            stopping: &["a"],
            ..case(
                "a worker being stopped does not count",
                supply(true, 1, Evict::None),
                vec![worker("a", Running, old)],
                &["start"],
            )
        },
        Case {
            backoff: StartBackoff {
                failures: 2,
                not_before: Some(t(20, 1)),
                last_outcome: Some(Outcome::Exited(PilotExit::Idle)),
            },
            ..case(
                "back-off holds starts",
                supply(true, 1, Evict::None),
                vec![],
                &[],
            )
        },
        Case {
            backoff: StartBackoff {
                failures: 2,
                not_before: Some(t(20, 0)),
                last_outcome: Some(Outcome::Exited(PilotExit::Idle)),
            },
            ..case(
                "back-off over",
                supply(true, 1, Evict::None),
                vec![],
                &["start"],
            )
        },
        Case {
            image: ImageState::NeedsPull {
                repository: "r/w".into(),
                digest: "sha256:bb".into(),
            },
            ..case(
                "new digest: pull first, start later",
                supply(true, 1, Evict::None),
                vec![],
                &["pull sha256:bb"],
            )
        },
        Case {
            image: ImageState::NeedsPull {
                repository: "r/w".into(),
                digest: "sha256:bb".into(),
            },
            ..case(
                "no download while workers may not run",
                supply(false, 0, Evict::Pause),
                vec![],
                &[],
            )
        },
        Case {
            image: ImageState::NeedsPull {
                repository: "r/w".into(),
                digest: "sha256:bb".into(),
            },
            pull_while_owner_present: true,
            ..case(
                "unless the site allows it",
                supply(false, 0, Evict::Pause),
                vec![],
                &["pull sha256:bb"],
            )
        },
        Case {
            image: ImageState::NeedsPull {
                repository: "r/w".into(),
                digest: "sha256:bb".into(),
            },
            ..case(
                "closed, the window opens within the lead, nobody here: fetched ahead",
                Supply {
                    causes: vec![Cause::OutsideSchedule],
                    ..supply(false, 0, Evict::Graceful)
                },
                vec![],
                &["pull sha256:bb"],
            )
        },
        Case {
            image: ImageState::NeedsPull {
                repository: "r/w".into(),
                digest: "sha256:bb".into(),
            },
            pull_while_owner_present: true,
            ..case(
                "closed for days: no download, even where the site allows pulls",
                Supply {
                    causes: vec![Cause::OutsideSchedule],
                    downloads: false,
                    ..supply(false, 0, Evict::Graceful)
                },
                vec![],
                &[],
            )
        },
        Case {
            image: ImageState::NeedsPull {
                repository: "r/w".into(),
                digest: "sha256:bb".into(),
            },
            ..case(
                "the window opens soon but the owner is here: waits",
                Supply {
                    causes: vec![Cause::OutsideSchedule, Cause::OwnerPresent],
                    ..supply(false, 0, Evict::Graceful)
                },
                vec![],
                &[],
            )
        },
        Case {
            image: ImageState::Pulling {
                digest: "sha256:bb".into(),
            },
            ..case(
                "pull in flight: wait",
                supply(true, 1, Evict::None),
                vec![],
                &[],
            )
        },
        Case {
            image: ImageState::Unavailable {
                reason: "registry down".into(),
            },
            ..case(
                "no image: no start, running ones unaffected",
                supply(true, 2, Evict::None),
                vec![worker("a", Running, old)],
                &[],
            )
        },
    ];
    for c in cases {
        let mut s = settings();
        s.max_starts_per_cycle = c.max_starts;
        s.pull_while_owner_present = c.pull_while_owner_present;
        let in_flight = InFlight {
            stopping: c.stopping.iter().map(|x| x.to_string()).collect(),
            pulling: matches!(c.image, ImageState::Pulling { .. }).then(|| "sha256:bb".into()),
            checking: false,
        };
        let p = plan(
            &c.supply,
            Observed {
                workers: &c.workers,
                in_flight: &in_flight,
                backoff: &c.backoff,
                image: &c.image,
                free_hours: None,
                filter_down: None,
                scratch_use: &BTreeMap::new(),
            },
            &s,
            c.now,
        );
        assert_eq!(short(&p), c.want, "case: {} (notes: {:?})", c.name, p.notes);
    }
}

/// A metered link: nothing is pulled and nothing starts; running workers go on, or with
/// "pause" are paused for the link (not an eviction), and resume once it is free again.
#[test]
fn a_metered_link_pulls_and_starts_nothing_and_pauses_only_when_asked() {
    let in_flight = InFlight::default();
    let backoff = StartBackoff::default();
    let new_image = ImageState::NeedsPull {
        repository: "127.0.0.1:5000/pilotd-test/worker".into(),
        digest: "sha256:bb".into(),
    };
    let no_use = BTreeMap::new();
    let image = ready();
    let running = vec![worker("a", WorkerState::Running, t(19, 0))];
    let obs = |workers, image| Observed {
        scratch_use: &no_use,
        workers,
        in_flight: &in_flight,
        backoff: &backoff,
        image,
        free_hours: None,
        filter_down: None,
    };
    let metered = |link: LinkHold, evict: Evict| Supply {
        causes: vec![Cause::Metered],
        downloads: false,
        link,
        ..supply(false, 0, evict)
    };
    // no-downloads: the running worker stays, the new image waits, nothing starts.
    let p = plan(
        &metered(LinkHold::Downloads, Evict::None),
        obs(&running, &new_image),
        &settings(),
        t(20, 0),
    );
    assert_eq!(short(&p), Vec::<String>::new(), "{:?}", p.notes);
    assert!(
        p.notes
            .iter()
            .any(|n| n.ends_with("waits: the network is metered")),
        "{:?}",
        p.notes
    );
    // Nothing running, an image ready: still no start.
    let p = plan(
        &metered(LinkHold::Downloads, Evict::None),
        obs(&[], &image),
        &settings(),
        t(20, 0),
    );
    assert_eq!(short(&p), Vec::<String>::new());
    // pause: the running worker is paused for the link, which is no eviction.
    let p = plan(
        &metered(LinkHold::Workers, Evict::Pause),
        obs(&running, &new_image),
        &settings(),
        t(20, 0),
    );
    assert_eq!(short(&p), vec!["pause a"]);
    assert_eq!(p.actions[0].reason(), Some(Reason::Metered));
    assert_eq!(Reason::Metered.eviction(), None);
    assert_eq!(
        p.actions[0].to_string(),
        "pause pilotd-test-a (the network is metered)"
    );
    // The owner's own pause under a metered link stays an eviction.
    let p = plan(
        &metered(LinkHold::Downloads, Evict::Pause),
        obs(&running, &new_image),
        &settings(),
        t(20, 0),
    );
    assert_eq!(p.actions[0].reason(), Some(Reason::Eviction(Evict::Pause)));
    // The link is free again: the paused worker resumes.
    let paused = vec![worker("a", WorkerState::Paused, t(19, 0))];
    let p = plan(
        &supply(true, 1, Evict::None),
        obs(&paused, &image),
        &settings(),
        t(20, 0),
    );
    assert_eq!(short(&p), vec!["unpause a"]);
}

/// Near the owner's data cap a machine may compute but not pull (`downloads` false while
/// `allowed`): a new digest waits and says why, the worker on the image here runs on, and a
/// free slot waits for the image rather than starting on the old one.
#[test]
fn near_the_data_cap_a_new_image_waits_while_workers_may_run() {
    let in_flight = InFlight::default();
    let backoff = StartBackoff::default();
    let no_use = BTreeMap::new();
    let running = vec![worker("a", WorkerState::Running, t(19, 0))];
    let new_image = ImageState::NeedsPull {
        repository: "127.0.0.1:5000/pilotd-test/worker".into(),
        digest: "sha256:bb".into(),
    };
    let near = Supply {
        causes: vec![Cause::Free, Cause::DataCap],
        downloads: false,
        ..supply(true, 2, Evict::None)
    };
    let p = plan(
        &near,
        Observed {
            scratch_use: &no_use,
            workers: &running,
            in_flight: &in_flight,
            backoff: &backoff,
            image: &new_image,
            free_hours: None,
            filter_down: None,
        },
        &settings(),
        t(20, 0),
    );
    assert_eq!(short(&p), Vec::<String>::new(), "{:?}", p.notes);
    assert!(
        p.notes.iter().any(|n| n
            == "new image 127.0.0.1:5000/pilotd-test/worker@sha256:bb waits: the data cap leaves no room for it"),
        "{:?}",
        p.notes
    );
}

#[test]
fn only_evictions_are_evictions() {
    let mut expired = worker("x", WorkerState::Running, t(19, 0));
    expired.die_at = Some(t(19, 59));
    let workers = vec![
        expired,
        worker("a", WorkerState::Running, t(19, 0)),
        worker("b", WorkerState::Running, t(19, 30)),
    ];
    let in_flight = InFlight::default();
    let backoff = StartBackoff::default();
    let image = ready();
    let no_use = BTreeMap::new();
    let obs = |workers| Observed {
        scratch_use: &no_use,
        workers,
        in_flight: &in_flight,
        backoff: &backoff,
        image: &image,
        free_hours: None,
        filter_down: None,
    };
    // The target shrank to one: the newest is a surplus, the expired one past die_at.
    let p = plan(
        &supply(true, 1, Evict::None),
        obs(&workers),
        &settings(),
        t(20, 0),
    );
    let reasons: Vec<Reason> = p.actions.iter().filter_map(Action::reason).collect();
    assert_eq!(
        reasons,
        vec![Reason::PastDieAt, Reason::Surplus { target: 1 }]
    );
    assert!(reasons.iter().all(|r| r.eviction().is_none()));
    // The owner is back: every running worker is evicted, and counted as such.
    let p = plan(
        &supply(false, 0, Evict::Fast),
        obs(&workers[1..]),
        &settings(),
        t(20, 0),
    );
    let modes: Vec<Evict> = p
        .actions
        .iter()
        .filter_map(|a| a.reason()?.eviction())
        .collect();
    assert_eq!(modes, vec![Evict::Fast, Evict::Fast]);
    assert_eq!(
        p.actions[0].to_string(),
        "kill pilotd-test-a (eviction: fast)"
    );
    let json = serde_json::to_value(&p.actions[0]).unwrap();
    assert_eq!(json["why"], "eviction: fast", "the JSON keeps the sentence");
}

/// A cap of `percent` of each worker's share, with quiet hours' `quiet` millicpus a worker.
fn capped(mut s: Supply, percent: u32, quiet: Option<u64>) -> Supply {
    s.cpu_cap = Some(crate::decide::comfort::CpuCap {
        percent,
        quiet_millicpus: quiet,
        per_worker_millicpus: 2000 * u64::from(percent) / 100,
        causes: vec!["temperature".into()],
        reason: "hot".into(),
    });
    s
}

/// A worker as the engine lists it: its quota now, its whole share on its label.
fn quota(w: Worker, now: Option<i64>, share: Option<i64>) -> Worker {
    Worker {
        nano_cpus: now,
        share_nano_cpus: share,
        ..w
    }
}

/// Every worker that stays is held to the cap live, before a resume; once no cap holds, a
/// worker pilotd lowered gets its labelled share back; one whose quota or share is unknown is
/// left as it is; an evicted one is not limited; a new one starts under the cap.
#[test]
fn workers_are_held_to_the_cpu_cap_live() {
    use WorkerState::*;
    let old = t(19, 0);
    const TWO: i64 = 2_000_000_000;
    let cases = vec![
        case(
            "a cap lowers a running worker; one already there is left",
            capped(supply(true, 2, Evict::None), 50, None),
            vec![
                quota(worker("a", Running, old), Some(TWO), Some(TWO)),
                quota(worker("b", Running, old), Some(TWO / 2), Some(TWO)),
            ],
            &["limit a 1000000000"],
        ),
        case(
            "a paused worker resumes under the cap: limited first",
            capped(supply(true, 1, Evict::None), 25, None),
            vec![quota(worker("p", Paused, old), Some(TWO), Some(TWO))],
            &["limit p 500000000", "unpause p"],
        ),
        case(
            "quiet hours and a step: the lesser share, then the step",
            capped(supply(true, 1, Evict::None), 50, Some(1000)),
            vec![quota(worker("a", Running, old), Some(TWO), Some(TWO))],
            &["limit a 500000000"],
        ),
        case(
            "no cap: the whole share back",
            supply(true, 1, Evict::None),
            vec![quota(worker("a", Running, old), Some(TWO / 4), Some(TWO))],
            &["limit a 2000000000"],
        ),
        case(
            "no cap, an older pilotd's worker (no share label): left alone",
            supply(true, 1, Evict::None),
            vec![quota(worker("a", Running, old), Some(TWO / 4), None)],
            &[],
        ),
        case(
            "a quota the engine did not say: left alone",
            capped(supply(true, 1, Evict::None), 50, None),
            vec![quota(worker("a", Running, old), None, Some(TWO))],
            &[],
        ),
        case(
            "not allowed but not evicted (owner CPU high): still capped",
            capped(supply(false, 0, Evict::None), 75, None),
            vec![quota(worker("a", Running, old), Some(TWO), Some(TWO))],
            &["limit a 1500000000"],
        ),
        case(
            "paused at the lowest step: paused, not limited",
            capped(supply(false, 0, Evict::Pause), 25, None),
            vec![quota(worker("a", Running, old), Some(TWO), Some(TWO))],
            &["pause a"],
        ),
    ];
    for c in cases {
        let p = plan(
            &c.supply,
            Observed {
                workers: &c.workers,
                in_flight: &InFlight::default(),
                backoff: &c.backoff,
                image: &c.image,
                free_hours: None,
                filter_down: None,
                scratch_use: &BTreeMap::new(),
            },
            &settings(),
            c.now,
        );
        assert_eq!(short(&p), c.want, "case: {} (notes: {:?})", c.name, p.notes);
    }
    // A new worker starts under the cap; its label keeps its whole share.
    let p = plan(
        &capped(supply(true, 1, Evict::None), 75, None),
        Observed {
            workers: &[],
            in_flight: &InFlight::default(),
            backoff: &StartBackoff::default(),
            image: &ready(),
            free_hours: None,
            filter_down: None,
            scratch_use: &BTreeMap::new(),
        },
        &settings(),
        t(20, 0),
    );
    let Action::Start { spec } = &p.actions[0] else {
        panic!("{:?}", p.actions)
    };
    assert_eq!(spec.nano_cpus, 1_500_000_000);
    assert_eq!(spec.labels[labels::NANO_CPUS], "2000000000");
    assert!(
        p.actions[0].to_string().contains("(1.50 CPU,"),
        "{}",
        p.actions[0]
    );
    let limit = Action::Limit {
        id: "a".into(),
        name: "pilotd-test-a".into(),
        nano_cpus: 250_000_000,
        why: Reason::CpuCap,
    };
    assert_eq!(
        limit.to_string(),
        "limit pilotd-test-a to 0.25 CPU (the CPU cap in force)"
    );
    assert_eq!(limit.reason().and_then(Reason::eviction), None);
}

#[test]
fn a_start_spec_carries_limits_labels_and_templated_env() {
    let s = settings();
    let now = t(20, 0);
    let spec = worker_spec(
        &supply(true, 1, Evict::None),
        &s,
        "sha256:aa",
        "r/w@sha256:aa",
        now,
        0,
        None,
    );
    assert_eq!(spec.name, "pilotd-test-20261201-200000000-0");
    assert_eq!(spec.nano_cpus, 2_000_000_000);
    assert_eq!(spec.labels[labels::NANO_CPUS], "2000000000");
    assert_eq!(spec.memory_bytes, 4096 << 20);
    assert_eq!(spec.env["NUM_CPUS"], "2");
    assert_eq!(
        spec.env["ACCEPT"], "3h/0h",
        "accept 20:00→23:00, retire 23:00→23:59"
    );
    assert_eq!(spec.env["NAME"], spec.name);
    assert_eq!(spec.env["LIT"], "{cpus}");
    assert!(
        spec.env.values().all(|v| !v.contains("pool.token")),
        "no token in env"
    );
    assert_eq!(spec.labels[labels::MANAGED], "true");
    assert_eq!(spec.labels[labels::INSTANCE], "test");
    assert_eq!(spec.labels[labels::DIE_AT], "2026-12-01T23:59:00Z");
    assert_eq!(spec.labels[labels::ACCEPT_UNTIL], "2026-12-01T23:00:00Z");
    assert_eq!(spec.labels[labels::CREATED], "2026-12-01T20:00:00Z");
    assert_eq!(spec.labels[labels::IMAGE_DIGEST], "sha256:aa");
    assert_eq!(spec.labels[labels::SPEC_HASH].len(), 16);
    assert_eq!(
        spec.scratch_dir,
        PathBuf::from("/var/lib/pilotd/scratch").join(&spec.name)
    );
    let other = worker_spec(
        &supply(true, 1, Evict::None),
        &s,
        "sha256:bb",
        "r/w@sha256:bb",
        now,
        0,
        None,
    );
    assert_ne!(
        spec.labels[labels::SPEC_HASH],
        other.labels[labels::SPEC_HASH]
    );
}

#[test]
fn each_gpu_worker_gets_its_own_devices_and_none_is_shared_twice() {
    let mut s = settings();
    s.max_starts_per_cycle = 4;
    let mut sup = supply(true, 3, Evict::None);
    sup.per_worker.gpus = 1;
    // One worker still holds GPU 1; a finished one held GPU 0 (free again).
    let mut busy = worker("a", WorkerState::Running, t(19, 0));
    busy.gpus = vec![1];
    let mut done = worker("b", WorkerState::Exited, t(18, 0));
    done.gpus = vec![0];
    let workers = vec![busy, done];
    let image = ImageState::Ready {
        digest: "sha256:aa".into(),
        pinned: "r/w@sha256:aa".into(),
    };
    let p = plan(
        &sup,
        Observed {
            workers: &workers,
            in_flight: &InFlight::default(),
            backoff: &StartBackoff::default(),
            image: &image,
            free_hours: None,
            filter_down: None,
            scratch_use: &BTreeMap::new(),
        },
        &s,
        t(20, 0),
    );
    let given: Vec<Vec<u32>> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Start { spec } => Some(spec.gpu_ids.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(given, vec![vec![0], vec![2]], "{:?}", p.actions);
    let labels: Vec<String> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Start { spec } => Some(spec.labels[labels::GPUS].clone()),
            _ => None,
        })
        .collect();
    assert_eq!(labels, vec!["0", "2"]);
    assert_eq!(
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::Start { spec } => Some(spec.labels[labels::DISK_KIB].clone()),
                _ => None,
            })
            .next()
            .as_deref(),
        Some("10485760")
    );
}

#[test]
fn a_worker_over_its_disk_share_is_stopped_soon_and_one_within_it_stays() {
    let s = settings();
    let mut over = worker("over", WorkerState::Running, t(19, 0));
    over.disk_kib = Some(1024);
    let mut within = worker("within", WorkerState::Running, t(19, 0));
    within.disk_kib = Some(1024);
    // A worker of an older pilotd has no recorded share: never stopped for it.
    let old = worker("old", WorkerState::Running, t(19, 0));
    let workers = vec![over, within, old];
    let mut full = worker("full", WorkerState::Running, t(19, 0));
    full.disk_kib = Some(1024);
    let workers = [workers, vec![full]].concat();
    let used = |used_kib, full| ScratchUse { used_kib, full };
    let scratch_use = BTreeMap::from([
        ("over".to_string(), used(5000, false)),
        ("within".to_string(), used(1024, false)),
        ("old".to_string(), used(1 << 30, true)),
        // Its image filesystem is full although it holds less than the share (metadata).
        ("full".to_string(), used(1000, true)),
    ]);
    let image = ImageState::Ready {
        digest: "sha256:aa".into(),
        pinned: "r/w@sha256:aa".into(),
    };
    let p = plan(
        &supply(true, 3, Evict::None),
        Observed {
            workers: &workers,
            in_flight: &InFlight::default(),
            backoff: &StartBackoff::default(),
            image: &image,
            free_hours: None,
            filter_down: None,
            scratch_use: &scratch_use,
        },
        &s,
        t(20, 0),
    );
    let stops: Vec<String> = p
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Stop { .. }))
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        stops,
        vec![
            "stop pilotd-test-over within 30s (its scratch dir holds 4 MiB, over its disk share of 1 MiB)",
            "stop pilotd-test-full within 30s (its scratch is full: it filled its disk share of 1 MiB)"
        ],
        "{:?}",
        p.actions
    );
}

fn extreme_instant() -> impl proptest::strategy::Strategy<Value = DateTime<Utc>> {
    use proptest::prelude::*;
    let min = DateTime::<Utc>::MIN_UTC.timestamp();
    let max = DateTime::<Utc>::MAX_UTC.timestamp();
    prop_oneof![
        (min..=max).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap()),
        (0i64..86_400).prop_map(move |s| DateTime::from_timestamp(max - s, 0).unwrap()),
        (0i64..86_400).prop_map(move |s| DateTime::from_timestamp(min + s, 0).unwrap()),
        Just(t(20, 0)),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// The plan at any instant, with a supply, workers and a back-off at any instants: no
    /// panic (the worker env's hour counts subtract instants), and an eviction is never
    /// dropped.
    #[test]
    fn the_plan_is_total_at_extreme_instants(
        now in extreme_instant(), accept in proptest::option::of(extreme_instant()),
        die in proptest::option::of(extreme_instant()), created in extreme_instant(),
        not_before in proptest::option::of(extreme_instant()), failures in proptest::prelude::any::<u32>(),
        allowed in proptest::prelude::any::<bool>(), grace in proptest::prelude::any::<u64>(),
        fast in proptest::prelude::any::<bool>(),
    ) {
        let mut sup = supply(allowed, 2, if allowed { Evict::None } else if fast { Evict::Fast } else { Evict::Graceful });
        sup.accept_until = accept;
        sup.die_at = die;
        sup.grace = Duration::from_secs(grace);
        let mut w = worker("a", WorkerState::Running, created);
        w.accept_until = accept;
        w.die_at = die;
        let workers = vec![w];
        let backoff = StartBackoff { failures, not_before, last_outcome: None };
        let image = ready();
        let p = plan(
            &sup,
            Observed {
                workers: &workers,
                in_flight: &InFlight::default(),
                backoff: &backoff,
                image: &image,
                free_hours: Some(u64::MAX),
                filter_down: None,
                scratch_use: &BTreeMap::new(),
            },
            &settings(),
            now,
        );
        if !allowed {
            proptest::prop_assert!(short(&p).iter().any(|a| a == "stop a" || a == "kill a"), "{:?}", short(&p));
        }
    }
}

/// While the traffic filter is down no worker may send a packet: running ones pause (one
/// being stopped is killed, its grace would run unfiltered), paused ones stay paused even
/// when the host is free, finished ones go, and nothing starts or is pulled.
#[test]
fn a_filter_that_is_down_pauses_every_worker_and_starts_none() {
    use WorkerState::*;
    let workers = vec![
        worker("run", Running, t(19, 0)),
        worker("held", Paused, t(19, 0)),
        worker("leaving", Running, t(19, 0)),
        worker("done", Exited, t(19, 0)),
    ];
    let in_flight = InFlight {
        stopping: ["leaving".to_string()].into(),
        ..InFlight::default()
    };
    let backoff = StartBackoff::default();
    let image = ImageState::NeedsPull {
        repository: "r".into(),
        digest: "sha256:bb".into(),
    };
    let no_use = BTreeMap::new();
    let obs = |filter_down| Observed {
        workers: &workers,
        in_flight: &in_flight,
        backoff: &backoff,
        image: &image,
        free_hours: None,
        scratch_use: &no_use,
        filter_down,
    };
    // The host is free and wants 5 workers: without the filter's trouble, the paused one
    // resumes, a pull starts, the stopping one is left to its grace.
    let free = supply(true, 5, Evict::None);
    let p = plan(&free, obs(None), &settings(), t(20, 0));
    assert_eq!(
        short(&p),
        ["remove done", "unpause held", "pull sha256:bb"],
        "{p:?}"
    );
    let p = plan(
        &free,
        obs(Some("cannot filter: `iptables -S` failed\n  hint: …")),
        &settings(),
        t(20, 0),
    );
    assert_eq!(short(&p), ["pause run", "kill leaving", "remove done"]);
    assert!(
        p.actions
            .iter()
            .all(|a| matches!(a, Action::Remove { .. }) || a.reason() == Some(Reason::FilterDown))
    );
    assert_eq!(
        p.notes,
        [
            "workers paused and none starts: the traffic filter is down (cannot filter: `iptables -S` failed)"
        ]
    );
    assert_eq!(
        p.actions[0].to_string(),
        "pause pilotd-test-run (its traffic filter is down)"
    );
}

#[test]
fn no_replacement_starts_while_a_worker_stopped_for_its_disk_still_holds_it() {
    let s = settings();
    let mut full = worker("full", WorkerState::Running, t(19, 0));
    full.disk_kib = Some(1024);
    let workers = vec![full];
    let image = ImageState::Ready {
        digest: "sha256:aa".into(),
        pinned: "r/w@sha256:aa".into(),
    };
    let in_flight = InFlight {
        stopping: BTreeSet::from(["full".to_string()]),
        ..InFlight::default()
    };
    let starts = |used: ScratchUse| {
        let scratch_use = BTreeMap::from([("full".to_string(), used)]);
        plan(
            &supply(true, 1, Evict::None),
            Observed {
                workers: &workers,
                in_flight: &in_flight,
                backoff: &StartBackoff::default(),
                image: &image,
                free_hours: None,
                filter_down: None,
                scratch_use: &scratch_use,
            },
            &s,
            t(20, 0),
        )
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Start { .. }))
        .count()
    };
    // Its image holds the whole share until it is gone: the target of 1 is met.
    assert_eq!(
        starts(ScratchUse {
            used_kib: 1000,
            full: true
        }),
        0
    );
    // Stopped for another reason (a die_at), its replacement starts at once, as before.
    assert_eq!(
        starts(ScratchUse {
            used_kib: 10,
            full: false
        }),
        1
    );
}

#[test]
fn a_worker_gets_a_disk_image_of_its_share_unless_the_owner_chose_a_measured_share() {
    let mut s = settings();
    let sup = supply(true, 1, Evict::None);
    let spec = worker_spec(&sup, &s, "sha256:aa", "r/w@sha256:aa", t(20, 0), 0, None);
    let img = spec.disk_image.expect("an image by default");
    assert_eq!(img.path, s.scratch_root.join(format!("{}.img", spec.name)));
    assert_eq!(img.bytes, sup.per_worker.disk_kib * 1024);
    s.disk_limit = pilotd_core::config::policy::DiskLimit::Measured;
    let spec = worker_spec(&sup, &s, "sha256:aa", "r/w@sha256:aa", t(20, 0), 0, None);
    assert_eq!(spec.disk_image, None);
}

#[test]
fn the_plan_that_stops_a_full_worker_starts_no_replacement() {
    let s = settings();
    let mut full = worker("full", WorkerState::Running, t(19, 0));
    full.disk_kib = Some(1024);
    let workers = vec![full];
    let image = ImageState::Ready {
        digest: "sha256:aa".into(),
        pinned: "r/w@sha256:aa".into(),
    };
    let scratch_use = BTreeMap::from([(
        "full".to_string(),
        ScratchUse {
            used_kib: 1000,
            full: true,
        },
    )]);
    let p = plan(
        &supply(true, 1, Evict::None),
        Observed {
            workers: &workers,
            in_flight: &InFlight::default(),
            backoff: &StartBackoff::default(),
            image: &image,
            free_hours: None,
            filter_down: None,
            scratch_use: &scratch_use,
        },
        &s,
        t(20, 0),
    );
    assert!(
        matches!(
            &p.actions[..],
            [Action::Stop {
                why: Reason::ScratchFull { .. },
                ..
            }]
        ),
        "{:?}",
        p.actions
    );
}

/// The fleet's spread holds starts and pulls, never what the owner waits for: decided by the
/// policy with a 4-minute offset, then planned.
#[test]
fn the_fleet_splay_holds_starts_and_pulls_never_an_eviction() {
    use crate::decide::policy::{Limits, decide};
    use crate::snapshot::HostSnapshot;
    use crate::splay::Splay;
    use WorkerState::*;
    let mut p = pilotd_core::config::Policy::defaults(pilotd_core::zone::Zone::utc());
    p.windows = vec![pilotd_core::config::policy::Window {
        days: pilotd_core::config::units::parse_days("daily").unwrap(),
        from: pilotd_core::config::units::parse_time_of_day("18:00").unwrap(),
        to: pilotd_core::config::units::parse_time_of_day("08:00").unwrap(),
    }];
    p.free_for = Duration::ZERO;
    let limits = |splay| Limits {
        max_lifetime: Duration::from_secs(86_400),
        likely_free_until: None,
        splay,
        started: None,
        data: None,
    };
    let four = Splay::with_offset(Duration::from_secs(300), Duration::from_secs(240));
    let open = t(18, 0);
    let second = |s: i64| open + chrono::Duration::seconds(s);
    let free = |now| HostSnapshot::test(now).with_free_since(Some(open));
    let owner = |now: DateTime<Utc>| free(now).with_session("alice", 1000, Some(0));
    let running = || vec![worker("a", Running, open - chrono::Duration::hours(20))];
    let needs = ImageState::NeedsPull {
        repository: "127.0.0.1:5000/pilotd-test/worker".into(),
        digest: "sha256:bb".into(),
    };
    // (case, host, splay, workers, image, actions)
    type Row = (
        &'static str,
        HostSnapshot,
        Splay,
        Vec<Worker>,
        ImageState,
        &'static [&'static str],
    );
    let cases: Vec<Row> = vec![
        (
            "owner back 1 s after the open: eviction now",
            owner(second(1)),
            four,
            running(),
            ready(),
            &["stop a"],
        ),
        (
            "the same without splay",
            owner(second(1)),
            Splay::OFF,
            running(),
            ready(),
            &["stop a"],
        ),
        (
            "owner back while the start is held",
            owner(second(100)),
            four,
            running(),
            ready(),
            &["stop a"],
        ),
        (
            "held: no start",
            free(second(1)),
            four,
            vec![],
            ready(),
            &[],
        ),
        (
            "held: a running worker stays",
            free(second(1)),
            four,
            running(),
            ready(),
            &[],
        ),
        (
            "held: no pull",
            free(second(1)),
            four,
            vec![],
            needs.clone(),
            &[],
        ),
        (
            "the host's turn: start",
            free(second(240)),
            four,
            vec![],
            ready(),
            &["start"],
        ),
        (
            "the host's turn: pull",
            free(second(240)),
            four,
            vec![],
            needs,
            &["pull sha256:bb"],
        ),
        (
            "no splay: start at the open",
            free(second(1)),
            Splay::OFF,
            vec![],
            ready(),
            &["start"],
        ),
    ];
    for (name, host, splay, workers, image, want) in cases {
        let now = host.taken_at;
        let supply = decide(&p, &host, limits(splay), now);
        let planned = plan(
            &supply,
            Observed {
                workers: &workers,
                in_flight: &InFlight::default(),
                backoff: &StartBackoff::default(),
                image: &image,
                free_hours: None,
                filter_down: None,
                scratch_use: &BTreeMap::new(),
            },
            &settings(),
            now,
        );
        assert_eq!(
            short(&planned),
            want,
            "{name}: {:?} {:?}",
            supply.reasons,
            planned.notes
        );
        if name.starts_with("held: no pull") {
            assert!(
                planned.notes.iter().any(|n| n.contains("fleet's spread")),
                "{:?}",
                planned.notes
            );
        }
    }
}
