//! The daemon driven in-process against the recording fake engine (`backend/fake.rs`): real
//! host probe and utmp file in a temp dir, real status file, no Docker. Each test is one
//! story a donated machine lives through.

use super::tasks::TaskDone;
use crate::act::backend::fake::FakeBackend;
use crate::outcome::{Outcome, StartBackoff};
use crate::record::manifest;
use crate::record::status::{self, Status};
use crate::settings::Settings;
use crate::worker::WorkerState;
use crate::worker::{LocalImage, Worker, labels};
use chrono::{DateTime, Utc};
use pilot_contract::PilotExit;
use pilotd_core::config::policy::{BatteryRule, SessionRule};
use pilotd_core::config::units::Share;
use pilotd_core::config::{Config, Evict, Policy, SiteConfig};
use pilotd_core::service::lifecycle::{self, Hooks, Reconciler};
use pilotd_core::service::metrics::Metrics;
use pilotd_test_support::utmp;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// The daemon on the recording fake engine.
type Daemon = super::Daemon<FakeBackend>;

const IMAGE: &str = "127.0.0.1:5000/pilotd-test/worker:1";
const DIGEST: &str = "sha256:aa";

/// A machine whose owner's policy always allows one small worker, evicts gracefully, and
/// counts any login; its utmp, scratch and state live in `dir`.
struct Machine {
    dir: tempfile::TempDir,
    engine: FakeBackend,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("utmp"), b"").unwrap();
        std::fs::write(dir.path().join("pool.token"), b"pool-secret\n").unwrap();
        let engine = FakeBackend::new();
        {
            let mut w = engine.lock();
            w.registry.insert(IMAGE.into(), DIGEST.into());
            w.images.push(LocalImage {
                id: "sha256:img-aa".into(),
                repo_digests: vec![format!("127.0.0.1:5000/pilotd-test/worker@{DIGEST}")],
                repo_tags: vec![],
                labels: BTreeMap::new(),
                created: None,
                size: 0,
            });
        }
        Machine { dir, engine }
    }

    fn settings(&self) -> Settings {
        Settings::resolve(&Config {
            site: self.site(),
            site_path: None,
            policy: self.policy(),
            policy_path: "policy.toml".into(),
        })
    }

    fn site(&self) -> SiteConfig {
        let d = self.dir.path().display();
        // No fleet spread: these cycles run at once after the daemon starts, and expect the
        // starts there (the spread's own tests hold its instants).
        toml::from_str(&format!(
            "splay = \"0s\"\nstate_dir = \"{d}/state\"\n\
             [host]\nutmp = \"{d}/utmp\"\ndev = \"{d}/dev\"\npower_supply = \"{d}/power\"\n\
             scratch = \"{d}/scratch\"\n\
             [docker]\ninstance = \"test\"\n\
             [worker]\nimage = \"{IMAGE}\"\nallowed_images = [\"127.0.0.1:5000/*\"]\n\
             token_file = \"{d}/pool.token\"\n\
             network = \"bridge\"\n\
             user = \"{uid}:{gid}\"\n",
            uid = nix::unistd::geteuid(),
            gid = nix::unistd::getegid(),
        ))
        .unwrap()
    }

    fn policy(&self) -> Policy {
        let mut policy = Policy::defaults(pilotd_core::zone::Zone::utc());
        policy.sessions = SessionRule::Any;
        // This machine's real load (other builds) must not look like the owner.
        policy.max_owner_cpu = 1.0;
        policy.free_for = Duration::ZERO;
        policy.on_battery = BatteryRule::Ignore;
        policy.on_return = Evict::Graceful;
        policy.share.cpus = Share::Amount(1);
        policy.share.memory = Share::Amount(256 << 20);
        policy.share.disk = Share::Amount(64 << 20);
        // The fake engine mounts nothing: workers get plain scratch dirs, not disk images
        // (which need loop devices and the real engine: tests/it/docker/disk.rs).
        policy.share.disk_limit = pilotd_core::config::policy::DiskLimit::Measured;
        policy
    }

    fn daemon(&self) -> Daemon {
        self.daemon_with(self.settings())
    }

    fn daemon_with(&self, settings: Settings) -> Daemon {
        let engine = self.engine.clone();
        Daemon::new(
            settings,
            Box::new(move |_| Ok(engine.clone())),
            None,
            Utc::now(),
        )
        .unwrap()
    }

    /// A daemon that counts into metrics, with the registry they are read from.
    fn daemon_metered(&self) -> (Daemon, prometheus_client::registry::Registry) {
        let (metrics, registry) = Metrics::new();
        let engine = self.engine.clone();
        let d = Daemon::new(
            self.settings(),
            Box::new(move |_| Ok(engine.clone())),
            Some(metrics),
            Utc::now(),
        )
        .unwrap();
        (d, registry)
    }

    /// Someone (a user this host does not know, so never a system account) logs in.
    fn login(&self) {
        let pid = std::process::id() as i32;
        let secs = Utc::now().timestamp() as i32;
        let utmp = utmp::file(&[utmp::Record::user(pid, "alice", "pts/42", secs)]);
        std::fs::write(self.dir.path().join("utmp"), utmp).unwrap();
    }

    fn calls(&self, verb: &str) -> Vec<String> {
        self.engine
            .calls()
            .into_iter()
            .filter(|c| c.starts_with(verb))
            .collect()
    }
}

/// Every story ends without the daemon having asked the engine for a change it refuses (a
/// paused worker paused, a running one resumed or removed): the fake refuses as Docker does,
/// so a daemon leaning on a lenient engine fails here.
impl Drop for Machine {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let refused = self.engine.lock().refusals.clone();
            assert!(
                refused.is_empty(),
                "the daemon asked the engine for what it refuses: {refused:?}"
            );
        }
    }
}

/// Lets the operations started beside the loop finish and takes them in.
async fn settle(d: &mut Daemon) {
    while let Some(done) = d.work.tasks.join_next().await {
        d.task_done(done.unwrap(), Utc::now());
    }
}

/// The projection against the daemon itself (agreement within 1 %, with its negative controls).
mod agreement;

/// A hot machine's worker, capped, paused and given back its share.
mod comfort;

/// A daemon's first moments: its first cycle asks the registry beside the loop, the answer
/// comes in, and the next cycle acts on it.
async fn first_cycles(d: &mut Daemon, now: DateTime<Utc>) -> String {
    d.cycle(now, false).await;
    settle(d).await;
    d.cycle(now, false).await
}

#[tokio::test]
async fn a_login_evicts_the_worker_and_its_end_is_recorded() {
    let m = Machine::new();
    let mut d = m.daemon();
    first_cycles(&mut d, Utc::now()).await;
    assert_eq!(m.calls("start").len(), 1, "{:?}", m.engine.calls());
    let id = m.engine.lock().workers[0].id.clone();

    m.login();
    let summary = d.cycle(Utc::now(), true).await;
    assert!(summary.contains("alice logged in"), "{summary}");
    let decision = d.status().decision.clone().unwrap();
    assert!(!decision.allowed);
    assert_eq!(decision.evict, Evict::Graceful);
    let stop = &d.status().last_actions[0];
    assert!(stop.starts_with("stop pilotd-test-"), "{stop}");
    assert!(stop.ends_with("within 600s (eviction: graceful)"), "{stop}");
    assert!(
        d.work.in_flight.stopping.contains(&id),
        "the stop runs beside the loop"
    );

    settle(&mut d).await;
    assert_eq!(m.calls("stop"), vec![format!("stop 600s {id}")]);
    assert!(d.work.in_flight.stopping.is_empty());
    // The next cycle removes it and records its end: our own SIGTERM says nothing about the
    // pool, so the back-off stays where it was.
    d.cycle(Utc::now(), false).await;
    assert_eq!(m.calls("remove"), vec![format!("remove {id}")]);
    let last = d.status().outcomes.last().unwrap();
    assert_eq!(last.outcome, Outcome::Exited(PilotExit::Signal(15)));
    assert_eq!(d.status().backoff.failures, 0);
    assert!(
        m.calls("start").len() == 1,
        "no new worker while alice is here"
    );
}

#[tokio::test]
async fn a_failed_list_is_not_an_empty_list() {
    let m = Machine::new();
    let mut d = m.daemon();
    m.engine.lock().unavailable = true;
    let summary = d.cycle(Utc::now(), false).await;
    assert!(summary.starts_with("engine unavailable"), "{summary}");
    let status = d.status();
    assert!(status.workers.is_none(), "unknown, not empty");
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("engine down")),
        "{:?}",
        status.last_error
    );
    assert!(status.decision.as_ref().is_some_and(|d| d.allowed));
    for verb in ["start", "stop", "kill", "remove", "pull"] {
        assert!(m.calls(verb).is_empty(), "{verb}: {:?}", m.engine.calls());
    }
    // The file says the same to `pilotd status`.
    let saved = status::load(&status::path(&d.s.state_dir))
        .unwrap()
        .unwrap();
    assert_eq!(saved.workers, None);

    // The engine answers again: the next cycles start the worker.
    m.engine.lock().unavailable = false;
    first_cycles(&mut d, Utc::now()).await;
    assert_eq!(m.calls("start").len(), 1);
    assert_eq!(d.status().last_error, None);
}

#[tokio::test]
async fn a_start_that_fails_backs_off_and_leaves_no_scratch_behind() {
    let m = Machine::new();
    let mut d = m.daemon();
    m.engine.lock().failing_starts = vec!["*".into()];
    let now = Utc::now();
    first_cycles(&mut d, now).await;
    let line = &d.status().last_actions[0];
    assert!(line.starts_with("FAILED start pilotd-test-"), "{line}");
    assert!(line.contains("no such file or directory"), "{line}");
    let backoff: &StartBackoff = &d.status().backoff;
    assert_eq!(backoff.failures, 1);
    assert_eq!(
        backoff.not_before,
        Some(now + chrono::Duration::seconds(60)),
        "[worker] backoff_base"
    );
    assert!(matches!(
        d.status().outcomes.last().map(|o| &o.outcome),
        Some(Outcome::StartFailed { .. })
    ));
    let scratch = m.dir.path().join("scratch");
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .map(|r| r.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "scratch dirs left: {left:?}");

    // While the back-off holds nothing is tried, and the status says why.
    d.cycle(now + chrono::Duration::seconds(5), false).await;
    assert_eq!(m.calls("start").len(), 1);
    assert!(
        d.status().notes.iter().any(|n| n.starts_with("back-off:")),
        "{:?}",
        d.status().notes
    );
}

#[tokio::test]
async fn a_restarted_daemon_adopts_running_workers_and_its_back_off() {
    let m = Machine::new();
    let now = Utc::now();
    // What a previous pilotd left: a running worker with this instance's labels, and a
    // status file with two failures counted.
    let mut l = BTreeMap::new();
    l.insert(labels::MANAGED.to_string(), "true".to_string());
    l.insert(labels::INSTANCE.to_string(), "test".to_string());
    m.engine.lock().workers.push(Worker {
        name: "pilotd-test-20261201-000000000-0".into(),
        created: Some(now - chrono::Duration::hours(1)),
        accept_until: Some(now + chrono::Duration::hours(5)),
        die_at: Some(now + chrono::Duration::hours(13)),
        image: IMAGE.into(),
        image_digest: DIGEST.into(),
        ..Worker::test("old1", WorkerState::Running)
    });
    let s = m.settings();
    status::save(
        &status::path(&s.state_dir),
        &Status {
            instance: "test".into(),
            backoff: StartBackoff {
                failures: 2,
                not_before: None,
                last_outcome: Some(Outcome::Exited(PilotExit::Idle)),
            },
            ..Default::default()
        },
    )
    .unwrap();

    let mut d = m.daemon();
    assert_eq!(
        d.status().backoff.failures,
        2,
        "the back-off survives a restart"
    );
    let summary = d.cycle(now, false).await;
    assert!(summary.starts_with("1 worker(s), target 1"), "{summary}");
    for verb in ["start", "stop", "kill", "remove", "pause"] {
        assert!(m.calls(verb).is_empty(), "{verb}: {:?}", m.engine.calls());
    }
    let seen = d.status().workers.clone().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].id, "old1");
}

#[tokio::test]
async fn the_service_drives_the_daemon_in_process_and_a_bad_reload_changes_nothing() {
    let m = Machine::new();
    let mut d = m.daemon();
    let (reloads_tx, reloads) = mpsc::channel(1);
    reloads_tx
        .send(Err(pilotd_core::config::ConfigError::Invalid(vec![])))
        .await
        .unwrap();
    let before = d.s.clone();
    // Shut down once a worker was started.
    let engine = m.engine.clone();
    let shutdown = async move {
        while engine.lock().workers.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    lifecycle::serve(&mut d, Hooks::default(), shutdown, reloads).await;
    assert_eq!(d.s, before, "the last good configuration stays");
    assert_eq!(m.calls("start").len(), 1);
    // The drain wrote the status; on_shutdown = "keep" left the worker running.
    let saved = status::load(&status::path(&d.s.state_dir))
        .unwrap()
        .unwrap();
    assert!(saved.updated_at.is_some());
    assert!(m.calls("stop").is_empty());
}

#[tokio::test]
async fn serve_leaves_no_task_of_its_own_running_after_shutdown() {
    // Everything `serve` starts beside the loop (the utmp, logind, input and firewalld
    // watches, the engine's event watch, the owner's doors) is the daemon's and ends with
    // the drain: a loop driven in-process leaves the runtime as it found it.
    let m = Machine::new();
    let mut d = m.daemon();
    let (_reloads_tx, reloads) = mpsc::channel(1);
    let engine = m.engine.clone();
    let shutdown = async move {
        while engine.lock().workers.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let runtime = tokio::runtime::Handle::current();
    assert_eq!(runtime.metrics().num_alive_tasks(), 0, "a clean start");
    d.serve(Hooks::default(), shutdown, reloads).await;
    assert_eq!(m.calls("start").len(), 1, "the loop ran");
    assert_eq!(
        runtime.metrics().num_alive_tasks(),
        0,
        "a task started by serve outlived it"
    );
}

#[tokio::test]
async fn the_slot_ad_is_written_before_a_start_and_again_only_when_it_changes() {
    use std::os::unix::fs::MetadataExt;
    let m = Machine::new();
    let mut d = m.daemon();
    let now = Utc::now();
    first_cycles(&mut d, now).await;
    let dir = m.dir.path().join("state/ad");
    let file = dir.join("slot.ad");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("PILOTD_INSTANCE = \"test\"\n"), "{text}");
    assert!(text.contains("PILOTD_SNOOZED = False\n"), "{text}");
    // The worker sees the directory (a rename replaces the file in it).
    let spec = m.engine.lock().specs[0].clone();
    assert_eq!(spec.ad_dir.as_deref(), Some(dir.as_path()));
    let inode = std::fs::metadata(&file).unwrap().ino();
    d.cycle(now, false).await;
    assert_eq!(
        std::fs::metadata(&file).unwrap().ino(),
        inode,
        "an unchanged ad is not rewritten"
    );
    crate::record::snooze::save(
        &d.s.state_dir,
        &crate::record::snooze::Snooze {
            until: now + chrono::Duration::hours(1),
            by: "alice".into(),
            at: now,
        },
    )
    .unwrap();
    d.cycle(now, false).await;
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("PILOTD_SNOOZED = True\n"), "{text}");
    assert_ne!(std::fs::metadata(&file).unwrap().ino(), inode);
}

#[tokio::test]
async fn a_reload_applies_the_new_interval_to_the_cycle_timer() {
    let m = Machine::new();
    let mut d = m.daemon();
    let before = d.wakeups.period();
    // The same configuration as the machine's, with another interval.
    let mut cfg = Config {
        site: m.site(),
        site_path: None,
        policy: m.policy(),
        policy_path: "policy.toml".into(),
    };
    cfg.site.interval.0 = before * 30;
    d.reload(cfg).unwrap();
    assert_eq!(d.s.interval, before * 30);
    assert_eq!(d.wakeups.period(), before * 30);
}

/// A finished worker as the engine lists it.
fn exited(id: &str, code: i64) -> Worker {
    Worker {
        id: id.into(),
        name: format!("pilotd-test-20261201-000000000-{id}"),
        state: WorkerState::Exited,
        created: Some(Utc::now() - chrono::Duration::hours(1)),
        accept_until: None,
        die_at: None,
        image: IMAGE.into(),
        image_digest: DIGEST.into(),
        spec_hash: String::new(),
        exit_code: Some(code),
        finished_at: Some(Utc::now()),
        oom_killed: false,
        gpus: vec![],
        disk_kib: None,
        nano_cpus: None,
        share_nano_cpus: None,
    }
}

#[tokio::test]
async fn a_worker_that_saw_no_job_holds_back_the_start_planned_in_the_same_cycle() {
    // Seen with the real pool: the log said "backing off ... next_start=" four minutes away
    // and a new worker started one second later, because the plan used the old back-off.
    let m = Machine::new();
    m.engine.lock().workers.push(exited("idle1", 10));
    let mut d = m.daemon();
    let now = Utc::now();
    d.cycle(now, false).await;
    assert_eq!(m.calls("remove"), vec!["remove idle1".to_string()]);
    assert!(m.calls("start").is_empty(), "{:?}", m.engine.calls());
    let b = &d.status().backoff;
    assert_eq!(b.failures, 1);
    assert_eq!(b.not_before, Some(now + chrono::Duration::seconds(60)));
    assert!(d.status().notes.iter().any(|n| n.starts_with("back-off:")));
    // Once it has passed, a worker starts.
    settle(&mut d).await;
    d.cycle(now + chrono::Duration::seconds(61), false).await;
    assert_eq!(m.calls("start").len(), 1);
}

#[tokio::test]
async fn a_failed_worker_leaves_its_last_lines_in_the_log_and_the_status() {
    let m = Machine::new();
    {
        let mut w = m.engine.lock();
        w.workers.push(exited("bad1", 21));
        let mut lines: Vec<String> = (0..29).map(|i| format!("line {i}")).collect();
        lines.push("fetch https://pool:s3cret@config.example.org/pilot.conf failed".into());
        lines.push("ERROR self-test: LOG /pilot/condor/log is not usable\u{1b}[31m".into());
        w.output.insert("bad1".into(), lines);
        // One that ran a job: nothing to keep.
        w.workers.push(exited("good1", 0));
        w.output.insert("good1".into(), vec!["fine".into()]);
    }
    let mut d = m.daemon();
    d.cycle(Utc::now(), false).await;
    let outcomes = &d.status().outcomes;
    let bad = outcomes.iter().find(|o| o.name.ends_with("bad1")).unwrap();
    assert_eq!(bad.outcome, Outcome::Exited(PilotExit::SelfTest));
    assert_eq!(bad.output.len(), 20, "the last 20 lines");
    assert_eq!(bad.output[0], "line 11");
    assert_eq!(
        bad.output[18], "fetch https://***@config.example.org/pilot.conf failed",
        "a URL's credentials are redacted as in the log"
    );
    assert_eq!(
        bad.output[19], "ERROR self-test: LOG /pilot/condor/log is not usable\\u{1b}[31m",
        "control characters are escaped"
    );
    let good = outcomes.iter().find(|o| o.name.ends_with("good1")).unwrap();
    assert!(good.output.is_empty());
    // Every finished worker's output is read once, for its job report too.
    assert_eq!(
        m.calls("logs"),
        vec![
            format!("logs bad1 {}", super::record::REPORT_LINES),
            format!("logs good1 {}", super::record::REPORT_LINES)
        ]
    );
    // The status file keeps them after the container is gone.
    let saved = status::load(&status::path(&d.s.state_dir))
        .unwrap()
        .unwrap();
    assert_eq!(saved.outcomes, *outcomes);
}

#[tokio::test]
async fn a_worker_gets_a_private_scratch_dir_and_token_copy_owned_by_its_uid() {
    use std::os::unix::fs::MetadataExt;
    let m = Machine::new();
    let mut d = m.daemon();
    first_cycles(&mut d, Utc::now()).await;
    let name = m.engine.lock().workers[0].name.clone();
    let scratch = std::fs::metadata(m.dir.path().join("scratch").join(&name)).unwrap();
    assert_eq!(scratch.uid(), nix::unistd::geteuid().as_raw());
    assert_eq!(scratch.mode() & 0o777, 0o700);
    let copy = m.dir.path().join("state/tokens").join(&name);
    let meta = std::fs::metadata(&copy).unwrap();
    assert_eq!(
        meta.mode() & 0o777,
        0o400,
        "readable by the worker's uid only"
    );
    assert_eq!(std::fs::read(&copy).unwrap(), b"pool-secret\n");
    let dir = std::fs::metadata(copy.parent().unwrap()).unwrap();
    assert_eq!(dir.mode() & 0o777, 0o700);
    // The engine is told to mount the copy, never the site's own file.
    let spec = m.engine.lock().specs.last().cloned().unwrap();
    assert_eq!(spec.token_file.as_deref(), Some(copy.as_path()));
    assert_eq!(
        spec.user.as_deref(),
        Some(format!("{}:{}", nix::unistd::geteuid(), nix::unistd::getegid()).as_str())
    );
}

#[tokio::test]
async fn a_login_is_acted_on_while_the_registry_hangs() {
    let m = Machine::new();
    let mut d = m.daemon();
    first_cycles(&mut d, Utc::now()).await;
    assert_eq!(m.calls("start").len(), 1);
    // The registry now accepts connections and never answers; a check falls due.
    m.engine.lock().registry_hangs = true;
    let later = Utc::now() + chrono::Duration::hours(7);
    d.cycle(later, false).await;
    assert!(d.work.in_flight.checking, "the check runs beside the loop");
    m.login();
    let started = std::time::Instant::now();
    let summary = tokio::time::timeout(Duration::from_secs(5), d.cycle(later, true))
        .await
        .expect("the login's cycle does not wait for the registry");
    assert!(summary.contains("alice logged in"), "{summary}");
    assert!(
        d.status().last_actions[0].starts_with("stop pilotd-test-"),
        "{:?}",
        d.status().last_actions
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // Only one check at a time, however many cycles pass.
    d.cycle(later + chrono::Duration::hours(7), false).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(m.calls("resolve").len(), 2, "{:?}", m.engine.calls());
}

/// Own-load accounting over three measurements 10 s apart on a 2-CPU machine: the counters
/// a busy worker would show. A worker born between two measurements is counted in its first
/// window (it used to read as the owner's load then), a paused one keeps its baseline, and
/// one that was there before pilotd counts from its second measurement.
#[tokio::test]
async fn own_cpu_counts_a_new_worker_in_its_first_window() {
    use crate::daemon::cpu::CpuMeter;
    use crate::worker::CpuSample;
    use chrono::SubsecRound;
    let t0: chrono::DateTime<Utc> = "2026-12-01T12:00:00.400Z".parse().unwrap();
    let t = |s: i64| t0 + chrono::Duration::seconds(s);
    let engine = FakeBackend::new();
    let b = engine.clone();
    let at = |id: &str, state: WorkerState, created: chrono::DateTime<Utc>| Worker {
        state,
        created: Some(created),
        finished_at: None,
        exit_code: None,
        ..exited(id, 0)
    };
    let set = |id: &str, worker_s: u64, system_s: u64| {
        engine.lock().cpu.insert(
            id.into(),
            CpuSample {
                worker_ns: worker_s * 1_000_000_000,
                system_ns: system_s * 1_000_000_000,
                net: None,
            },
        );
    };
    let mut meter = CpuMeter::default();
    // t0: "old" was running before pilotd started (400 s of CPU in its life).
    set("old", 400, 100_000);
    let old = at("old", WorkerState::Running, t(-3600));
    assert_eq!(
        meter
            .measure(&b, std::slice::from_ref(&old), t(0), Some(2))
            .await,
        0.0
    );

    // t0+10: "old" used 5 of the window's 20 CPU-s; "new", created in this window (its label
    // has whole seconds, before the sub-second measurement time), used 10.
    set("old", 405, 100_020);
    set("new", 10, 100_020);
    let new = at("new", WorkerState::Running, t(0).trunc_subsecs(0));
    let got = meter
        .measure(&b, &[old.clone(), new.clone()], t(10), Some(2))
        .await;
    assert!((got - 0.75).abs() < 1e-9, "{got}");

    // t0+20: "new" paused (frozen counter), "old" busy on one CPU; then resumed at t0+30.
    set("old", 415, 100_040);
    set("new", 10, 100_040);
    let paused = Worker {
        state: WorkerState::Paused,
        ..new.clone()
    };
    let got = meter
        .measure(&b, &[old.clone(), paused], t(20), Some(2))
        .await;
    assert!((got - 0.5).abs() < 1e-9, "{got}");
    set("old", 415, 100_060);
    set("new", 16, 100_060);
    let got = meter.measure(&b, &[old, new], t(30), Some(2)).await;
    assert!((got - 0.3).abs() < 1e-9, "{got}");

    // A worker adopted after a restart (no sample, created long ago) is not counted from zero:
    // its counter is its whole life.
    let mut fresh = CpuMeter::default();
    fresh.measure(&b, &[], t(0), Some(2)).await;
    set("adopted", 5000, 100_080);
    let adopted = at("adopted", WorkerState::Running, t(-86_400));
    assert_eq!(
        fresh
            .measure(&b, std::slice::from_ref(&adopted), t(10), Some(2))
            .await,
        0.0
    );
    assert_eq!(
        fresh.take_given(),
        0.0,
        "an adopted worker's past is not given again"
    );
    set("adopted", 5003, 100_100);
    fresh
        .measure(&b, std::slice::from_ref(&adopted), t(20), Some(2))
        .await;
    assert_eq!(fresh.take_given(), 3.0, "but counts from its first sample");
    // The engine restarted: its counter went backwards, nothing is known to count.
    set("adopted", 1, 100_120);
    fresh.measure(&b, &[adopted], t(30), Some(2)).await;
    assert_eq!(fresh.take_given(), 0.0);
}

/// The CPU the meter hands the contribution: each worker's counter delta once, whatever the
/// window (judged or not), a new worker's whole counter.
#[tokio::test]
async fn the_cpu_given_is_each_counter_delta_once() {
    use crate::daemon::cpu::CpuMeter;
    use crate::worker::CpuSample;
    let t0: chrono::DateTime<Utc> = "2026-12-01T12:00:00Z".parse().unwrap();
    let t = |s: i64| t0 + chrono::Duration::seconds(s);
    let engine = FakeBackend::new();
    let b = engine.clone();
    let set = |id: &str, worker_s: u64| {
        engine.lock().cpu.insert(
            id.into(),
            CpuSample {
                worker_ns: worker_s * 1_000_000_000,
                system_ns: 1_000_000_000_000,
                net: None,
            },
        );
    };
    let running = |id: &str, created| Worker {
        state: WorkerState::Running,
        created: Some(created),
        finished_at: None,
        exit_code: None,
        ..exited(id, 0)
    };
    let mut meter = CpuMeter::default();
    meter.measure(&b, &[], t(0), Some(2)).await;
    // (instant, worker's counter in s, CPU-seconds given since the last measurement)
    let table = [(10, 7, 7.0), (20, 19, 12.0), (30, 19, 0.0), (40, 20, 1.0)];
    let w = running("w", t(5));
    for (at, counter, given) in table {
        set("w", counter);
        meter
            .measure(&b, std::slice::from_ref(&w), t(at), Some(2))
            .await;
        // Taken once: a second take finds nothing.
        assert_eq!(meter.take_given(), given, "at +{at}s");
        assert_eq!(meter.take_given(), 0.0);
    }
    // Two measurements between takes add up (an urgent cycle's record in between).
    set("w", 25);
    meter
        .measure(&b, std::slice::from_ref(&w), t(50), Some(2))
        .await;
    set("w", 30);
    meter
        .measure(&b, std::slice::from_ref(&w), t(60), Some(2))
        .await;
    assert_eq!(meter.take_given(), 10.0);
}

/// A donated machine's afternoon, cycle by cycle: a worker computes for a minute, the owner
/// logs in and it is evicted. The ledger (and the metrics) count the CPU its counters show,
/// the time computing, open and with the owner there, and one evicted worker; the ledger is
/// on disk from the first cycle and again on the history's cadence.
#[tokio::test]
async fn the_daemon_counts_what_the_machine_gave() {
    use crate::record::contribution;
    use crate::worker::CpuSample;
    let m = Machine::new();
    let (mut d, registry) = m.daemon_metered();
    let t0 = Utc::now();
    let t = |s: i64| t0 + chrono::Duration::seconds(s);
    first_cycles(&mut d, t(0)).await;
    let id = m.engine.lock().workers[0].id.clone();
    let cpu = |worker_s: u64| {
        m.engine.lock().cpu.insert(
            id.clone(),
            CpuSample {
                worker_ns: worker_s * 1_000_000_000,
                system_ns: 1_000_000_000_000,
                net: None,
            },
        );
    };
    let state = contribution::path(&m.settings().state_dir);
    assert!(
        state.exists(),
        "written with the history from the first cycle"
    );
    cpu(12);
    d.cycle(t(30), false).await;
    cpu(20);
    d.cycle(t(60), false).await;
    m.login();
    d.cycle(t(90), true).await;
    settle(&mut d).await;
    d.cycle(t(120), false).await;
    assert_eq!(m.calls("remove"), vec![format!("remove {id}")]);

    let all = d.records.ledger().all_time;
    assert_eq!(all.cpu_seconds, 20.0, "the worker's counter, from zero");
    // Listed running at +30, +60 and +90 (the login's cycle saw it before evicting it).
    assert_eq!(all.computing_s, 90);
    assert_eq!(all.open_s, 60);
    assert_eq!(all.owner_present_s, 60, "alice, at +90 and +120");
    assert_eq!(
        all.ended,
        contribution::Ended {
            evicted: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        d.records
            .ledger()
            .this_week(&pilotd_core::zone::Zone::utc(), t(120)),
        all
    );
    let text = pilotd_core::service::metrics::exposition(&registry);
    for line in [
        "pilotd_cpu_seconds_given_total 20.0",
        "pilotd_computing_seconds_total 90",
        "pilotd_open_seconds_total 60",
        "pilotd_owner_present_seconds_total 60",
        "pilotd_workers_ended_total{outcome=\"evicted\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }

    // Saved when a worker ended (news for `status` and the page), then again once the
    // history's interval has passed: a crash loses at most that.
    assert_eq!(
        contribution::peek(&m.settings().state_dir).ledger,
        *d.records.ledger()
    );
    d.cycle(t(150), false).await;
    assert_ne!(
        contribution::peek(&m.settings().state_dir).ledger,
        *d.records.ledger()
    );
    d.records.save_due(&d.s, t(120 + 900));
    assert_eq!(
        contribution::peek(&m.settings().state_dir).ledger,
        *d.records.ledger()
    );
}

/// A window in which pilotd started or removed a worker is not judged (the engine's and
/// pilotd's own work of the start lies outside every worker's cgroup), but never two in a row:
/// a worker that crash-loops every cycle cannot blind the owner-CPU check.
#[test]
fn a_window_with_a_start_is_not_judged_but_never_two_in_a_row() {
    use crate::daemon::cpu::CpuMeter;
    let mut meter = CpuMeter::default();
    // (pilotd acted in the window, judged)
    let table = [
        (false, true),
        (true, false),
        (false, true),
        (true, false),
        (true, true),
        (true, false),
        (true, true),
        (false, true),
    ];
    for (i, (acted, judged)) in table.into_iter().enumerate() {
        if acted {
            meter.acted();
        }
        assert_eq!(meter.judge(), judged, "window {i}");
    }
}

/// An urgent cycle does not wait for a slow engine's list to pause: it decides on the host
/// observed now (the login) and the workers of the last list, pauses at once, and the list,
/// when it comes, shows the worker paused, so nothing is asked twice (the fake refuses a
/// second pause as Docker does: `Machine`'s drop checks it).
#[tokio::test]
async fn an_urgent_cycle_pauses_before_a_slow_engine_lists() {
    let m = Machine::new();
    let mut policy = m.policy();
    policy.on_return = Evict::Pause;
    let mut d = m.daemon_with(Settings::resolve(&Config {
        site: m.site(),
        site_path: None,
        policy,
        policy_path: "policy.toml".into(),
    }));
    first_cycles(&mut d, Utc::now()).await;
    let id = m.engine.lock().workers[0].id.clone();
    // A cycle that lists the worker running (the one that started it listed before).
    d.cycle(Utc::now(), false).await;

    m.engine.lock().list_delay = Some(Duration::from_millis(300));
    m.login();
    let summary = d.cycle(Utc::now(), true).await;
    assert!(summary.contains("alice logged in"), "{summary}");
    let calls = m.engine.calls();
    let at = |c: &str| calls.iter().rposition(|x| x == c);
    let (paused, listed) = (at(&format!("pause {id}")), at("listed"));
    assert!(
        paused.is_some() && listed.is_some() && paused < listed,
        "the pause waited for the list: {calls:?}"
    );
    assert_eq!(m.calls("pause").len(), 1, "{calls:?}");
    assert_eq!(
        d.status().workers.as_ref().unwrap()[0].state,
        WorkerState::Paused
    );
    assert!(
        d.status().last_actions[0].starts_with("pause pilotd-test-"),
        "{:?}",
        d.status().last_actions
    );

    // A regular cycle waits for the list as before.
    m.engine.lock().list_delay = Some(Duration::from_millis(50));
    std::fs::write(m.dir.path().join("utmp"), b"").unwrap();
    d.cycle(Utc::now(), false).await;
    let calls = m.engine.calls();
    let (resumed, listed) = (
        calls.iter().rposition(|x| x == &format!("unpause {id}")),
        calls.iter().rposition(|x| x == "listed"),
    );
    assert!(listed < resumed, "{calls:?}");

    // The owner comes back at once: the last list was taken before the resume, yet the cycle
    // recorded the resume, so the pause again does not wait for the list.
    m.engine.lock().list_delay = Some(Duration::from_millis(300));
    m.login();
    d.cycle(Utc::now(), true).await;
    let calls = m.engine.calls();
    let (paused, listed) = (
        calls.iter().rposition(|x| x == &format!("pause {id}")),
        calls.iter().rposition(|x| x == "listed"),
    );
    assert!(
        paused.is_some() && paused < listed,
        "the pause after a resume waited for the list: {calls:?}"
    );
}

/// `pilotd plan` shows the worker template the daemon starts workers with: both come from
/// `manifest::worker_template`, the daemon with the manifest it holds, plan with the one the
/// daemon stored (`stored_template`). Through a restart, a fetch and a reload that narrows
/// what the site allows, they stay the same, and the manifest never widens the site's limits.
#[tokio::test]
async fn plan_and_the_daemon_start_workers_from_the_same_template() {
    const POOL_IMAGE: &str = "127.0.0.1:5000/pilotd-test/worker:2";
    const POOL_DIGEST: &str = "sha256:bb";
    let m = Machine::new();
    {
        let mut w = m.engine.lock();
        w.registry.insert(POOL_IMAGE.into(), POOL_DIGEST.into());
        w.images.push(LocalImage {
            id: "sha256:img-bb".into(),
            repo_digests: vec![format!("127.0.0.1:5000/pilotd-test/worker@{POOL_DIGEST}")],
            repo_tags: vec![],
            labels: BTreeMap::new(),
            created: None,
            size: 0,
        });
    }
    let config = |allowed: &str| {
        let mut site = m.site();
        // Nothing listens there: every fetch fails, and the stored manifest stays in force.
        site.remote.url = Some(toml::Spanned::new(
            0..0,
            "http://127.0.0.1:9/manifest.toml".into(),
        ));
        site.worker.allowed_images = vec![toml::Spanned::new(0..0, allowed.into())];
        Config {
            site,
            site_path: None,
            policy: m.policy(),
            policy_path: "policy.toml".into(),
        }
    };
    let s = Settings::resolve(&config("127.0.0.1:5000/*"));
    let pool = |version: &str, image: &str| {
        manifest::parse(
            "u",
            format!(
                "version = \"{version}\"\n[worker]\nimage = \"{image}\"\nidle_timeout = \"7m\"\n\
                 [worker.env]\nGLIDEIN_ResourceName = \"LAB\"\n"
            )
            .as_bytes(),
        )
        .unwrap()
    };
    // A daemon that ran before stored the pool's manifest.
    std::fs::create_dir_all(&s.state_dir).unwrap();
    manifest::store(&s.state_dir, &pool("1", POOL_IMAGE)).unwrap();

    let mut d = m.daemon_with(s.clone());
    let planned = manifest::stored_template(&s);
    assert!(planned.refused.is_none(), "{:?}", planned.refused);
    assert_eq!(d.worker, planned.worker);
    assert_eq!(d.worker.image, POOL_IMAGE);
    assert_eq!(d.worker.idle_timeout, Duration::from_secs(420));
    assert_eq!(d.worker.env["GLIDEIN_ResourceName"], "LAB");
    // ... and the worker it starts is made of it.
    first_cycles(&mut d, Utc::now()).await;
    assert_eq!(m.calls("start").len(), 1, "{:?}", m.engine.calls());
    assert_eq!(m.engine.lock().workers[0].image, POOL_IMAGE);

    // A fetched manifest is laid on and stored: plan reads it back.
    let fetched = pool("2", IMAGE);
    d.task_done(TaskDone::Manifest(Ok(fetched.clone())), Utc::now());
    assert_eq!(d.manifest, Some(fetched));
    assert_eq!(d.worker, manifest::stored_template(&s).worker);
    assert_eq!(d.worker.image, IMAGE);

    // The pool's image again; then the site narrows allowed_images to its own image alone:
    // the manifest in force no longer passes, and neither the daemon nor plan lays it on.
    d.task_done(TaskDone::Manifest(Ok(pool("3", POOL_IMAGE))), Utc::now());
    assert_eq!(d.worker.image, POOL_IMAGE);
    let narrowed = config(IMAGE);
    d.reload(narrowed.clone()).unwrap();
    let planned = manifest::stored_template(&Settings::resolve(&narrowed));
    assert!(
        matches!(
            planned.refused,
            Some(manifest::ManifestError::NoLongerAllowed { .. })
        ),
        "{:?}",
        planned.refused
    );
    assert_eq!(d.worker, planned.worker);
    assert_eq!(d.worker.image, IMAGE, "the site's own");
    assert!(!d.worker.env.contains_key("GLIDEIN_ResourceName"));
    assert_eq!(d.manifest, None, "dropped whole");
    // A fetch begun under the wider limits and finished after the reload is held to today's.
    d.task_done(TaskDone::Manifest(Ok(pool("4", POOL_IMAGE))), Utc::now());
    assert_eq!(d.worker.image, IMAGE);
    assert_eq!(d.manifest, None);
}

/// A fleet that boots together does not start together: the daemon's first start waits for
/// this host's offset after the daemon started, says so in its status, and then starts.
#[tokio::test]
async fn the_first_start_after_the_daemon_starts_waits_for_the_hosts_turn() {
    let m = Machine::new();
    let mut site = m.site();
    site.splay = toml::Spanned::new(
        0..0,
        pilotd_core::config::units::HumanDuration(Duration::from_secs(300)),
    );
    let s = Settings::resolve_for(
        &Config {
            site,
            site_path: None,
            policy: m.policy(),
            policy_path: "policy.toml".into(),
        },
        "fleet-test-host",
    );
    let offset = s.fleet.offset;
    assert!(
        offset > Duration::from_secs(2),
        "{offset:?}: pick another id"
    );
    let started = Utc::now();
    let mut d = m.daemon_with(s);
    first_cycles(&mut d, started).await;
    assert!(m.calls("start").is_empty(), "{:?}", m.engine.calls());
    let decision = d.status().decision.clone().unwrap();
    assert!(
        decision.reasons[0].starts_with("start held until")
            && decision.reasons[0].contains("after pilotd started"),
        "{:?}",
        decision.reasons
    );
    assert!(
        decision
            .next_change
            .is_some_and(|t| t <= started + offset + chrono::Duration::seconds(1))
    );
    first_cycles(&mut d, started + offset + chrono::Duration::seconds(1)).await;
    assert_eq!(m.calls("start").len(), 1, "{:?}", m.engine.calls());
}

/// What the daemon logs while a test runs (this thread's subscriber, without colours).
#[derive(Clone, Default)]
struct Logged(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logged {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logged {
    /// Logs to it until the guard is dropped.
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let w = self.clone();
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(move || w.clone())
                .with_ansi(false)
                .finish(),
        )
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The report the pilot prints in these stories: an hour's worker on a machine of at least
/// two CPUs can hold it.
fn job_report() -> pilot_contract::JobReport {
    pilot_contract::JobReport {
        jobs_started: 3,
        jobs_completed: 2,
        jobs_vacated: 1,
        job_seconds: 5400,
        job_cpu_seconds: 5012.4,
        vacated_cpu_seconds: 610.0,
    }
}

/// Three pilots end: one printed its report (condor's last words after it), one is older than
/// the report, one printed a damaged line. The ledger and the metrics count the jobs of the
/// first and two workers without a report; the damaged one is logged with its worker. A
/// worker listed again (its removal failed) is not counted twice.
#[tokio::test]
async fn a_finished_workers_job_report_is_counted_once() {
    use crate::record::contribution::Jobs;
    let m = Machine::new();
    {
        let mut w = m.engine.lock();
        w.workers.push(exited("done1", 0));
        w.output.insert(
            "done1".into(),
            vec![
                "pilot-report v=1 jobs_started=1".into(),
                "condor_master exiting".into(),
                job_report().to_line(),
                "pilot: exiting".into(),
            ],
        );
        w.workers.push(exited("old1", 0));
        w.output
            .insert("old1".into(), vec!["pilot: exiting".into()]);
        w.workers.push(exited("bad1", 0));
        w.output.insert(
            "bad1".into(),
            vec!["pilot-report v=1 jobs_started=many".into()],
        );
    }
    let (mut d, registry) = m.daemon_metered();
    let logged = Logged::default();
    let now = Utc::now();
    {
        let _g = logged.capture();
        d.cycle(now, false).await;
    }
    let want = Jobs {
        started: 3,
        completed: 2,
        vacated: 1,
        job_seconds: 5400,
        cpu_seconds: 5012.4,
        vacated_cpu_seconds: 610.0,
        workers_reported: 1,
        workers_unreported: 2,
    };
    assert_eq!(d.records.ledger().all_time.jobs, want);
    let log = logged.text();
    assert!(
        log.lines().any(|l| l.contains("bad1")
            && l.contains("pilot report: jobs_started: expected a whole number")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("old1") && l.contains("no job report")),
        "{log}"
    );
    let text = pilotd_core::service::metrics::exposition(&registry);
    for line in [
        "pilotd_jobs_started_total 3",
        "pilotd_jobs_completed_total 2",
        "pilotd_jobs_vacated_total 1",
        "pilotd_job_seconds_total 5400",
        "pilotd_job_cpu_seconds_total 5012.4",
        "pilotd_lost_cpu_seconds_total 610.0",
        "pilotd_workers_unreported_total 2",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // On disk for `status` and the page at the cycle's end.
    assert_eq!(
        crate::record::contribution::peek(&m.settings().state_dir)
            .ledger
            .all_time
            .jobs,
        want
    );
    // The engine lists one again (as when its removal failed): counted once.
    m.engine.lock().workers.push(exited("done1", 0));
    d.cycle(now + chrono::Duration::seconds(30), false).await;
    assert_eq!(d.records.ledger().all_time.jobs, want);
}

/// A worker's report cannot claim more than its life could hold: a job that forged the
/// pilot's line is counted up to the worker's lifetime × the machine's CPUs, and logged.
#[tokio::test]
async fn a_forged_report_is_held_to_the_workers_life() {
    let m = Machine::new();
    let forged = pilot_contract::JobReport {
        jobs_started: 5,
        jobs_completed: 5,
        job_cpu_seconds: 1e12,
        ..Default::default()
    };
    {
        let mut w = m.engine.lock();
        let end = Utc::now();
        w.workers.push(Worker {
            created: Some(end - chrono::Duration::hours(1)),
            finished_at: Some(end),
            ..exited("forged1", 0)
        });
        w.output.insert("forged1".into(), vec![forged.to_line()]);
    }
    let mut d = m.daemon();
    let logged = Logged::default();
    {
        let _g = logged.capture();
        d.cycle(Utc::now(), false).await;
    }
    let cpus = f64::from(d.last_snapshot.as_ref().unwrap().cpus);
    let jobs = d.records.ledger().all_time.jobs;
    // It lived an hour (and the one second of slack).
    assert_eq!(jobs.cpu_seconds, 3601.0 * cpus);
    assert_eq!(jobs.completed, 5, "the rest of the report counts");
    let log = logged.text();
    assert!(
        log.lines()
            .any(|l| l.contains("forged1") && l.contains("job_cpu_seconds")),
        "{log}"
    );
}

/// A report from a worker whose cgroup pilotd read: its job CPU is held to what that cgroup
/// had used (and what the stretch after the last reading could add), not to the whole
/// machine for the worker's life; a report at that bound is believed whole.
#[tokio::test]
async fn a_forged_report_is_held_to_what_the_workers_cgroup_used() {
    use crate::worker::CpuSample;
    for (claimed, counted) in [(1e6, None), (0.0, Some(0.0))] {
        let m = Machine::new();
        let t0 = Utc::now();
        let t = |s: i64| t0 + chrono::Duration::seconds(s);
        {
            let mut w = m.engine.lock();
            w.workers.push(Worker {
                state: WorkerState::Running,
                created: Some(t(-3600)),
                finished_at: None,
                exit_code: None,
                ..exited("burner1", 0)
            });
            w.cpu.insert(
                "burner1".into(),
                CpuSample {
                    worker_ns: 100_000_000_000,
                    system_ns: 1_000_000_000_000,
                    net: None,
                },
            );
        }
        let mut d = m.daemon();
        // Read at t0: 100 CPU-seconds in its hour.
        d.cycle(t0, false).await;
        settle(&mut d).await;
        let cpus = f64::from(d.last_snapshot.as_ref().unwrap().cpus);
        // 100 CPU-s, and its last 10 s (and the second of slack) on every CPU.
        let bound = 100.0 + 11.0 * cpus;
        let claimed = if claimed == 0.0 { bound } else { claimed };
        let report = pilot_contract::JobReport {
            jobs_started: 1,
            jobs_completed: 1,
            job_seconds: 60,
            job_cpu_seconds: claimed,
            ..Default::default()
        };
        {
            let mut w = m.engine.lock();
            let b = w.workers.iter_mut().find(|w| w.id == "burner1").unwrap();
            b.state = WorkerState::Exited;
            b.exit_code = Some(0);
            b.finished_at = Some(t(10));
            w.output.insert("burner1".into(), vec![report.to_line()]);
            // The engine reads an ended worker as 0.
            w.cpu.remove("burner1");
        }
        let logged = Logged::default();
        {
            let _g = logged.capture();
            d.cycle(t(30), false).await;
        }
        let jobs = d.records.ledger().all_time.jobs;
        assert_eq!(jobs.workers_reported, 1);
        let log = logged.text();
        match counted {
            None => {
                assert_eq!(jobs.cpu_seconds, bound, "{log}");
                assert!(
                    log.lines().any(|l| l.contains("burner1")
                        && l.contains("its cgroup: 100.0 CPU-s read 10s before its end")
                        && l.contains("job_cpu_seconds")),
                    "{log}"
                );
            }
            Some(_) => {
                assert_eq!(jobs.cpu_seconds, bound, "at the bound, whole: {log}");
                assert!(!log.contains("claims more"), "{log}");
            }
        }
    }
}

/// The owner comes back: the worker is stopped gracefully, condor vacates its job, and the
/// pilot prints its report before it exits. The vacated job's CPU is counted as work lost,
/// in the ledger and in what `status` shows.
#[tokio::test]
async fn an_evicted_workers_vacated_work_is_counted_as_lost() {
    let m = Machine::new();
    let mut d = m.daemon();
    let t0 = Utc::now();
    let t = |s: i64| t0 + chrono::Duration::seconds(s);
    first_cycles(&mut d, t0).await;
    let id = m.engine.lock().workers[0].id.clone();
    m.login();
    d.cycle(t(60), true).await;
    settle(&mut d).await;
    let report = pilot_contract::JobReport {
        jobs_started: 2,
        jobs_completed: 1,
        jobs_vacated: 1,
        job_seconds: 3000,
        job_cpu_seconds: 2900.0,
        vacated_cpu_seconds: 1800.0,
    };
    m.engine
        .lock()
        .output
        .insert(id.clone(), vec!["pilot: SIGTERM".into(), report.to_line()]);
    d.cycle(t(3600), false).await;
    assert_eq!(m.calls("remove"), vec![format!("remove {id}")]);
    assert_eq!(
        d.status().outcomes.last().unwrap().outcome,
        Outcome::Exited(PilotExit::Signal(15))
    );
    let week = d
        .records
        .ledger()
        .this_week(&pilotd_core::zone::Zone::utc(), t(3600));
    assert_eq!(week.jobs.vacated, 1);
    assert_eq!(week.jobs.vacated_cpu_seconds, 1800.0);
    assert_eq!(week.ended.evicted, 1);
    let shown = crate::record::contribution::lines(&week).join("\n");
    assert!(
        shown.contains("jobs: 1 finished, 1 vacated (0.5 CPU-hours of work lost)"),
        "{shown}"
    );
}

/// The week's contribution reaches the slot-ad file only when the site turns it on.
#[tokio::test]
async fn the_slot_ad_carries_the_week_only_when_the_site_says_so() {
    let m = Machine::new();
    let file = m.dir.path().join("state/ad/slot.ad");
    let mut d = m.daemon();
    first_cycles(&mut d, Utc::now()).await;
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("PILOTD_INSTANCE"), "{text}");
    assert!(!text.contains("_WEEK"), "off by default: {text}");
    drop(d);

    let mut s = m.settings();
    s.advertise_contribution = true;
    let mut d = m.daemon_with(s);
    first_cycles(&mut d, Utc::now()).await;
    let text = std::fs::read_to_string(&file).unwrap();
    let week =
        crate::record::contribution::Ledger::week_of(&pilotd_core::zone::Zone::utc(), Utc::now());
    for line in [
        format!("PILOTD_CONTRIBUTION_WEEK = \"{week}\"\n"),
        "PILOTD_CPU_HOURS_WEEK = 0.0\n".into(),
        "PILOTD_JOBS_WEEK = 0\n".into(),
    ] {
        assert!(text.contains(&line), "{line} in {text}");
    }
}
