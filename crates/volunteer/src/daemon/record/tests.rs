//! The records alone, with no engine: cycles handed in as the daemon hands them, and the files
//! they leave in a temporary state dir.

use super::{CycleOutcome, Records};
use crate::decide::policy::{Supply, decide};
use crate::outcome::Outcome;
use crate::record::contribution;
use crate::record::history::{self, Bucket, History, Outlook};
use crate::record::status::{self, Decision};
use crate::record::timeline;
use crate::settings::Settings;
use crate::snapshot::HostSnapshot;
use crate::worker::{Worker, WorkerState};
use chrono::{DateTime, Duration, TimeZone, Utc};
use pilot_contract::PilotExit;
use pilotd_core::config::{Config, Policy, SiteConfig};
use pilotd_core::zone::Zone;
use std::path::Path;

/// Settings with their state in `dir`, a cycle a minute, and a policy that lets a quiet host
/// compute at once.
fn settings(dir: &Path) -> Settings {
    let site: SiteConfig = toml::from_str(&format!(
        "state_dir = \"{}\"\ninterval = \"60s\"\n",
        dir.display()
    ))
    .unwrap();
    let mut policy = Policy::defaults(Zone::utc());
    policy.free_for = std::time::Duration::ZERO;
    Settings::resolve(&Config {
        site,
        site_path: None,
        policy,
        policy_path: "policy.toml".into(),
    })
}

fn t(s: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap() + Duration::seconds(s)
}

/// One cycle at `now` as the daemon hands it in: its decision on a quiet host counted before
/// it acts, then what it did recorded. Returns the decision.
fn cycle(
    s: &Settings,
    r: &mut Records,
    now: DateTime<Utc>,
    given: f64,
    workers: &[Worker],
    actions: &[&str],
) -> Supply {
    let host = HostSnapshot::test(now);
    let supply = decide(
        &s.policy,
        &host,
        Outlook::at(s, r.history(), now).limits,
        now,
    );
    let mut o = CycleOutcome {
        now,
        supply: Some(&supply),
        own_cpu: 0.25,
        given,
        workers: Some(workers.to_vec()),
        ..Default::default()
    };
    r.decided(s, &host, &o);
    o.actions = actions.iter().map(|a| a.to_string()).collect();
    r.record(o);
    supply
}

#[test]
fn a_cycle_counts_into_the_history_and_the_contribution_and_fills_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path());
    let mut r = Records::load(&s, None, t(0));
    let running = [Worker::test("w1", WorkerState::Running)];
    cycle(&s, &mut r, t(0), 12.0, &running, &["start pilotd-t-w1"]);
    let supply = cycle(&s, &mut r, t(60), 30.0, &running, &[]);
    assert!(supply.allowed, "{:?}", supply.reasons);

    let st = r.status();
    assert_eq!(st.decision, Some(Decision::of(&supply, t(60))));
    assert_eq!(
        st.last_actions,
        ["start pilotd-t-w1"],
        "a cycle that did nothing leaves the last actions"
    );
    assert_eq!(st.workers.as_deref(), Some(&running[..]));
    assert_eq!(st.own_cpu, 0.25);
    assert_eq!(st.host_free_since, supply.host_free_since);
    assert!(st.host_free_since.is_some());

    // The first cycle starts the clocks; the second counts its minute.
    let all = r.ledger().all_time;
    assert_eq!(all.cpu_seconds, 42.0, "every CPU-second given");
    assert_eq!((all.computing_s, all.open_s, all.paused_s), (60, 60, 0));
    let hour = History::hour_of_week(&Zone::utc(), t(60));
    let watched = Bucket {
        observed_s: 60,
        free_s: 60,
    };
    assert_eq!(r.history().buckets[hour], watched);
    assert!(!r.timeline().runs.is_empty());
}

#[test]
fn a_workers_end_is_counted_once_and_widens_the_back_off() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path());
    let mut r = Records::load(&s, None, t(0));
    let failed = Outcome::Exited(PilotExit::SelfTest);
    let output = vec!["self-test failed".to_string()];
    for at in [t(10), t(20)] {
        r.ended(&s, "w1", "pilotd-t-w1", failed.clone(), output.clone(), at);
    }
    let st = r.status();
    assert_eq!(st.outcomes.len(), 1, "{:?}", st.outcomes);
    assert_eq!(st.outcomes[0].output, output);
    assert_eq!(st.recorded, ["w1"]);
    assert_eq!(st.backoff.failures, 1);
    assert_eq!(r.ledger().all_time.ended.failed, 1);

    // A cycle whose engine list no longer shows the container forgets it was recorded.
    cycle(&s, &mut r, t(30), 0.0, &[], &[]);
    assert!(r.status().recorded.is_empty());
    assert_eq!(r.status().backoff.failures, 1, "the back-off stays");
}

#[test]
fn the_files_land_in_the_state_dir_on_their_cadence_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path());
    let mut r = Records::load(&s, None, t(0));
    let running = [Worker::test("w1", WorkerState::Running)];
    cycle(&s, &mut r, t(0), 5.0, &running, &["start pilotd-t-w1"]);
    assert!(status::path(dir.path()).exists(), "written when it changed");
    assert!(
        s.worker.ad_dir.join("slot.ad").exists(),
        "before the cycle's starts"
    );
    r.save_due(&s, t(0));
    let on_disk = || contribution::peek(dir.path()).ledger;
    assert_eq!(on_disk(), *r.ledger(), "the first save is due at once");
    assert!(history::path(dir.path()).exists());
    assert!(timeline::path(dir.path()).exists());

    // Counted every minute, written every quarter of an hour.
    cycle(&s, &mut r, t(60), 5.0, &running, &[]);
    r.save_due(&s, t(60));
    assert_ne!(on_disk(), *r.ledger());
    r.save_due(&s, t(900));
    assert_eq!(on_disk(), *r.ledger());
    // ... and at once after a worker's end: news for `status` and the page.
    cycle(&s, &mut r, t(960), 5.0, &running, &[]);
    r.ended(
        &s,
        "w1",
        "pilotd-t-w1",
        Outcome::Exited(PilotExit::Idle),
        vec![],
        t(960),
    );
    r.save_due(&s, t(960));
    assert_eq!(on_disk(), *r.ledger());
    let timeline = || timeline::peek(dir.path()).timeline.runs;
    assert_ne!(
        timeline(),
        r.timeline().runs,
        "the timeline is written hourly"
    );
    r.save_due(&s, t(3600));
    assert_eq!(timeline(), r.timeline().runs);

    // A daemon started again takes them back.
    cycle(&s, &mut r, t(3660), 5.0, &running, &[]);
    r.save_all(&s, t(3690));
    let again = Records::load(&s, None, t(3700));
    assert_eq!(again.ledger(), r.ledger());
    assert_eq!(again.history(), r.history());
    assert_eq!(again.timeline().runs, r.timeline().runs);
    assert_eq!(again.status().outcomes, r.status().outcomes);
    assert!(r.status().host_free_since.is_some());
    assert_eq!(again.status().host_free_since, r.status().host_free_since);
}
