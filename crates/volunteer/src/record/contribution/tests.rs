use super::*;
use chrono::Duration;

fn rome() -> Zone {
    Zone::named("Europe/Rome").expect("tzdata has Europe/Rome")
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

fn computing(cpu_seconds: f64) -> Observed {
    Observed {
        cpu_seconds,
        running: true,
        open: true,
        ..Observed::default()
    }
}

#[test]
fn weeks_are_iso_weeks_in_the_policy_zone() {
    // Sunday 22:59 UTC is Sunday 23:59 in Rome (week 2); 23:00 UTC is Monday 00:00 (week 3).
    let table = [
        ("2026-01-11T22:59:59Z", "2026-W02"),
        ("2026-01-11T23:00:00Z", "2026-W03"),
        // New Year's Day 2027 is a Friday: it belongs to the last week of 2026.
        ("2027-01-01T12:00:00Z", "2026-W53"),
    ];
    for (t, week) in table {
        assert_eq!(Ledger::week_of(&rome(), utc(t)), week, "{t}");
    }
    // In UTC the first instant is still week 2 and the second too.
    assert_eq!(
        Ledger::week_of(&Zone::utc(), utc("2026-01-11T23:00:00Z")),
        "2026-W02"
    );
}

#[test]
fn counts_each_cycle_into_its_week_and_all_time() {
    let mut c = Contribution::new(Ledger::default());
    // (instant, what the cycle saw): 30 s cycles around Rome's Monday midnight.
    let owner = Observed {
        owner_present: true,
        paused: true,
        ..Observed::default()
    };
    let table: [(&str, Observed); 5] = [
        // The first cycle counts no time (nothing says what came before), but its CPU.
        ("2026-01-11T22:59:00Z", computing(2.0)),
        ("2026-01-11T22:59:30Z", computing(60.0)),
        // This one ends in the new week: its 30 s count there.
        ("2026-01-11T23:00:00Z", computing(45.0)),
        ("2026-01-11T23:00:30Z", owner),
        // After a suspend of an hour: at most two intervals count.
        ("2026-01-12T00:00:30Z", computing(0.0)),
    ];
    for (t, o) in table {
        c.record(&rome(), utc(t), INTERVAL, o);
    }
    let l = &c.ledger;
    assert_eq!(
        l.weeks.iter().map(|w| w.week.as_str()).collect::<Vec<_>>(),
        ["2026-W02", "2026-W03"]
    );
    let w2 = l.weeks[0].tally;
    assert_eq!(w2.cpu_seconds, 62.0);
    assert_eq!((w2.computing_s, w2.open_s, w2.paused_s), (30, 30, 0));
    let w3 = l.weeks[1].tally;
    assert_eq!(w3.cpu_seconds, 45.0);
    assert_eq!(w3.computing_s, 30 + 60);
    assert_eq!((w3.paused_s, w3.owner_present_s), (30, 30));
    assert_eq!(w3.open_s, 30 + 60);
    assert_eq!(l.all_time.cpu_seconds, 107.0);
    // 30 + 30 + 60 (the capped gap): the suspended hour is not counted as given.
    assert_eq!(l.all_time.computing_s, 120);
    assert_eq!(l.all_time.owner_present_s, 30);
    assert_eq!(l.since, Some(utc("2026-01-11T22:59:00Z")));
    assert_eq!(
        l.this_week(&rome(), utc("2026-01-14T12:00:00Z")),
        w3,
        "a Wednesday of the same week"
    );
    assert!(l.this_week(&rome(), utc("2026-01-19T12:00:00Z")).is_empty());
}

#[test]
fn outcomes_are_counted_by_kind() {
    let mut c = Contribution::new(Ledger::default());
    let now = utc("2026-01-14T12:00:00Z");
    for o in [
        Outcome::Exited(PilotExit::RanJobs),
        Outcome::Exited(PilotExit::RanJobs),
        Outcome::Exited(PilotExit::Idle),
        Outcome::Exited(PilotExit::Signal(15)),
        Outcome::Exited(PilotExit::SelfTest),
        Outcome::OutOfMemory,
        Outcome::StartFailed {
            message: "no".into(),
        },
    ] {
        c.ended(&rome(), now, &o);
    }
    let want = Ended {
        ran_jobs: 2,
        no_job: 1,
        evicted: 1,
        failed: 3,
    };
    assert_eq!(c.ledger.all_time.ended, want);
    assert_eq!(c.ledger.this_week(&rome(), now).ended, want);
    let shown = lines(&c.ledger.all_time).join("\n");
    assert!(
        shown.contains("2 ran jobs, 1 ended without a job, 1 evicted, 3 failed"),
        "{shown}"
    );
    assert_eq!(lines(&Tally::default()), ["nothing recorded yet"]);
    // (seconds, as shown): a little is not shown as nothing.
    for (secs, shown) in [
        (0.0, "0.0"),
        (1.0, "<0.1"),
        (179.0, "<0.1"),
        (360.0, "0.1"),
        (5400.0, "1.5"),
    ] {
        assert_eq!(hours(secs), shown, "{secs}");
    }
}

#[test]
fn keeps_the_last_weeks_only() {
    let mut c = Contribution::new(Ledger::default());
    let start = utc("2026-01-14T12:00:00Z");
    for i in 0..15 {
        let t = start + Duration::weeks(i);
        c.record(&rome(), t, INTERVAL, computing(1.0));
    }
    assert_eq!(c.ledger.weeks.len(), WEEKS_KEPT);
    assert_eq!(c.ledger.weeks[0].week, "2026-W06");
    assert_eq!(c.ledger.all_time.cpu_seconds, 15.0, "all time keeps it all");
}

#[test]
fn a_restart_loads_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Contribution::new(Ledger::default());
    c.record(
        &rome(),
        utc("2026-01-14T12:00:00Z"),
        INTERVAL,
        computing(1.0),
    );
    c.record(
        &rome(),
        utc("2026-01-14T12:00:30Z"),
        INTERVAL,
        computing(20.0),
    );
    save(dir.path(), &c.ledger).unwrap();

    let l = load(dir.path());
    assert!(l.warning.is_none());
    assert_eq!(l.ledger, c.ledger);
    // The restarted daemon counts no time for its first cycle (the downtime is not the
    // machine's gift), but the CPU its first sample delta says.
    let mut again = Contribution::new(l.ledger);
    again.record(
        &rome(),
        utc("2026-01-14T13:00:00Z"),
        INTERVAL,
        computing(0.0),
    );
    again.record(
        &rome(),
        utc("2026-01-14T13:00:30Z"),
        INTERVAL,
        computing(30.0),
    );
    let t = again.ledger.all_time;
    assert_eq!((t.cpu_seconds, t.computing_s), (51.0, 60));
    assert_eq!(again.ledger.weeks.len(), 1);
    assert_eq!(again.ledger.since, Some(utc("2026-01-14T12:00:00Z")));
}

#[test]
fn a_corrupted_ledger_is_set_aside_and_counting_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Contribution::new(Ledger::default());
    c.ended(
        &rome(),
        utc("2026-01-14T12:00:00Z"),
        &Outcome::Exited(PilotExit::RanJobs),
    );
    save(dir.path(), &c.ledger).unwrap();
    let bytes = std::fs::read(path(dir.path())).unwrap();
    let cut = &bytes[..bytes.len() / 2];
    std::fs::write(path(dir.path()), cut).unwrap();

    // A reader says so and moves nothing.
    assert!(peek(dir.path()).warning.is_some());
    assert!(path(dir.path()).exists());

    let l = load(dir.path());
    assert_eq!(l.ledger, Ledger::default());
    let w = l.warning.unwrap();
    assert!(
        w.contains("corrupted") && w.contains("contribution.json.corrupt"),
        "{w}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("contribution.json.corrupt")).unwrap(),
        cut
    );
    assert!(!path(dir.path()).exists());

    // Well-formed, but another version: corrupted too.
    std::fs::write(
        path(dir.path()),
        br#"{"version":2,"since":null,"weeks":[],"all_time":{"cpu_seconds":0.0,"computing_s":0,"paused_s":0,"open_s":0,"owner_present_s":0,"ended":{"ran_jobs":0,"no_job":0,"evicted":0,"failed":0}}}"#,
    )
    .unwrap();
    assert!(load(dir.path()).warning.unwrap().contains("unexpected"));
    // Missing: empty, no warning.
    let empty = tempfile::tempdir().unwrap();
    assert!(load(empty.path()).warning.is_none());
}

fn report(started: u64, completed: u64, vacated: u64, cpu: f64, lost: f64) -> JobReport {
    JobReport {
        jobs_started: started,
        jobs_completed: completed,
        jobs_vacated: vacated,
        job_seconds: 100 * started,
        job_cpu_seconds: cpu,
        vacated_cpu_seconds: lost,
    }
}

#[test]
fn reports_are_summed_per_week_and_all_time_with_the_workers_that_did_not_report() {
    let mut c = Contribution::new(Ledger::default());
    let monday = utc("2026-01-12T12:00:00Z");
    let next_monday = utc("2026-01-19T12:00:00Z");
    c.reported(&rome(), monday, Some(&report(3, 2, 1, 5012.4, 610.0)));
    c.reported(&rome(), monday, None);
    c.reported(&rome(), next_monday, Some(&report(1, 1, 0, 100.0, 0.0)));
    let w = c.ledger.this_week(&rome(), monday).jobs;
    assert_eq!(
        w,
        Jobs {
            started: 3,
            completed: 2,
            vacated: 1,
            job_seconds: 300,
            cpu_seconds: 5012.4,
            vacated_cpu_seconds: 610.0,
            workers_reported: 1,
            workers_unreported: 1,
        }
    );
    let all = c.ledger.all_time.jobs;
    assert_eq!((all.started, all.completed, all.vacated), (4, 3, 1));
    assert_eq!(all.cpu_seconds, 5112.4);
    assert_eq!((all.workers_reported, all.workers_unreported), (2, 1));
    assert_eq!(c.ledger.since, Some(monday));

    let shown = lines(&c.ledger.this_week(&rome(), monday));
    assert_eq!(
        shown.last().unwrap(),
        "jobs: 2 finished, 1 vacated (0.2 CPU-hours of work lost); 1.4 CPU-hours in \
         0.1 job-hours; 1 worker(s) ended without a report"
    );
}

#[test]
fn a_stretch_without_reports_says_the_pilot_did_not_report_jobs() {
    let mut c = Contribution::new(Ledger::default());
    let now = utc("2026-01-14T12:00:00Z");
    c.record(&rome(), now, INTERVAL, computing(30.0));
    assert_eq!(
        lines(&c.ledger.all_time).last().unwrap(),
        "jobs: none reported yet (a worker's pilot reports them at its end)"
    );
    c.ended(&rome(), now, &Outcome::Exited(PilotExit::RanJobs));
    c.reported(&rome(), now, None);
    c.reported(&rome(), now, None);
    assert_eq!(
        lines(&c.ledger.all_time).last().unwrap(),
        "jobs: not known, the pilot did not report them (2 worker(s) ended without a report)"
    );
}

/// A report is believed up to what the worker's life on the machine's CPUs could hold; the
/// rest is cut and named.
#[test]
fn a_report_is_held_to_what_the_workers_life_could_hold() {
    let claim = Claim {
        lifetime: std::time::Duration::from_secs(3600),
        cpus: 2,
        measured: None,
    };
    // Plausible: an hour on two CPUs, 7000 CPU-seconds of jobs.
    let fine = report(3, 2, 1, 7000.0, 600.0);
    assert_eq!(claim.bound(&fine), (fine, vec![]));
    // Forged: a year of CPU, a million jobs, more finished than started.
    let forged = JobReport {
        jobs_started: 1_000_000,
        jobs_completed: 2_000_000,
        jobs_vacated: 5,
        job_seconds: 10_000_000,
        job_cpu_seconds: 3.15e7,
        vacated_cpu_seconds: 4.0e7,
    };
    let capacity = (3600 + 1) * 2;
    let starts = capacity / SECONDS_PER_START;
    let (held, cut) = claim.bound(&forged);
    assert_eq!(held.jobs_started, starts);
    assert_eq!(held.jobs_completed, starts, "no more finished than started");
    assert_eq!(held.jobs_vacated, 0, "none left to vacate");
    assert_eq!(held.job_seconds, capacity);
    assert_eq!(held.job_cpu_seconds, capacity as f64);
    assert_eq!(held.vacated_cpu_seconds, capacity as f64);
    assert_eq!(
        cut,
        [
            "jobs_started",
            "jobs_completed",
            "jobs_vacated",
            "job_seconds",
            "job_cpu_seconds",
            "vacated_cpu_seconds"
        ]
    );
    // More vacated CPU than CPU: cut to the CPU.
    let (held, cut) = claim.bound(&report(1, 0, 1, 50.0, 80.0));
    assert_eq!(
        (held.vacated_cpu_seconds, cut),
        (50.0, vec!["vacated_cpu_seconds"])
    );
}

/// A one-CPU worker on a 2-CPU machine burned 1000 CPU-seconds in its hour, read 30 s
/// before its end: a report of more job CPU than that (and than the last 30 s could add on
/// the whole machine) is cut, whatever the lifetime would allow.
#[test]
fn job_cpu_is_held_to_what_the_workers_cgroup_used() {
    let claim = Claim {
        lifetime: std::time::Duration::from_secs(3600),
        cpus: 2,
        measured: Some(Measured {
            cpu_seconds: 1000.0,
            after: std::time::Duration::from_secs(30),
        }),
    };
    // The cgroup's 1000, and 31 s (a second of slack) on both CPUs after the reading.
    let bound = 1000.0 + 31.0 * 2.0;
    let at = report(4, 4, 0, bound, 0.0);
    assert_eq!(claim.bound(&at), (at, vec![]), "at the bound: believed");
    let (held, cut) = claim.bound(&report(4, 4, 0, bound + 1.0, 0.0));
    assert_eq!(held.job_cpu_seconds, bound);
    assert_eq!(cut, ["job_cpu_seconds"]);
    // The whole machine for the hour, which the lifetime alone allowed: cut to the cgroup's.
    let (held, cut) = claim.bound(&report(4, 4, 0, 7200.0, 0.0));
    assert_eq!(
        (held.job_cpu_seconds, cut),
        (bound, vec!["job_cpu_seconds"])
    );
    // Read after the end (a reading's instant is the cycle's): no tail but the slack.
    let late = Claim {
        measured: Some(Measured {
            cpu_seconds: 1000.0,
            after: std::time::Duration::ZERO,
        }),
        ..claim
    };
    assert_eq!(
        late.bound(&report(1, 1, 0, 1003.0, 0.0)).0.job_cpu_seconds,
        1002.0
    );
}

/// Job starts: one per `SECONDS_PER_START` slot-seconds of the worker's life. An hour on 2
/// CPUs (and the second of slack) holds 3601; 7202, which one per CPU-second allowed, no.
#[test]
fn job_starts_are_held_to_what_a_pool_could_activate() {
    let claim = Claim {
        lifetime: std::time::Duration::from_secs(3600),
        cpus: 2,
        measured: None,
    };
    let bound = (3600 + 1) * 2 / SECONDS_PER_START;
    assert_eq!(bound, 3601);
    let at = report(bound, bound, 0, 10.0, 0.0);
    let at = JobReport {
        job_seconds: 100,
        ..at
    };
    assert_eq!(claim.bound(&at), (at, vec![]), "at the bound: believed");
    let over = JobReport {
        jobs_started: bound + 1,
        ..at
    };
    let (held, cut) = claim.bound(&over);
    assert_eq!(held.jobs_started, bound);
    assert_eq!(cut, ["jobs_started"]);
    let (held, _) = claim.bound(&JobReport {
        jobs_started: 7202,
        ..at
    });
    assert_eq!(held.jobs_started, bound);
}

/// A ledger written before the job reports (no `jobs` anywhere) loads as it was, with no
/// job counted, and keeps counting.
#[test]
fn a_ledger_from_before_the_reports_loads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        path(dir.path()),
        br#"{"version":1,"since":"2026-01-12T08:00:00Z","weeks":[{"week":"2026-W03","cpu_seconds":7200.0,"computing_s":3600,"paused_s":0,"open_s":3600,"owner_present_s":60,"ended":{"ran_jobs":1,"no_job":0,"evicted":0,"failed":0}}],"all_time":{"cpu_seconds":7200.0,"computing_s":3600,"paused_s":0,"open_s":3600,"owner_present_s":60,"ended":{"ran_jobs":1,"no_job":0,"evicted":0,"failed":0}}}"#,
    )
    .unwrap();
    let l = load(dir.path());
    assert!(l.warning.is_none(), "{:?}", l.warning);
    let now = utc("2026-01-14T12:00:00Z");
    assert_eq!(l.ledger.this_week(&rome(), now).cpu_seconds, 7200.0);
    assert_eq!(l.ledger.all_time.jobs, Jobs::default());
    let mut c = Contribution::new(l.ledger);
    c.reported(&rome(), now, Some(&report(2, 2, 0, 3000.0, 0.0)));
    save(dir.path(), &c.ledger).unwrap();
    let again = load(dir.path()).ledger;
    assert_eq!(again.version, 1);
    assert_eq!(again.this_week(&rome(), now).jobs.completed, 2);
    assert_eq!(again.all_time.ended.ran_jobs, 1);
}
