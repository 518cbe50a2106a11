//! The logind probe against a real `dbus-daemon` on a bus of this test's own, where the small
//! login1 of `login1.rs` owns the well-known name. The real `pilotd plan` decides while a
//! session appears, goes idle, is locked, comes back and disappears; with and without a utmp
//! file; then logind goes away.

use super::login1::{FakeLogind, Hints, Kind, micros_ago};
use crate::harness;
use pilotd_volunteer::observe::logind::Signal;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// `pilotd plan --format json` on this host with the bus as the system bus.
fn plan(dir: &Path, bus: &str) -> serde_json::Value {
    let out = Command::new(harness::bin())
        .arg("-c")
        .arg(dir.join("pilotd.toml"))
        .args(["plan", "--format", "json"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus)
        .env_remove("PILOTD_CONFIG")
        .env_remove("PILOTD_POLICY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The reasons and the notes, as one string to search.
fn said(v: &serde_json::Value) -> String {
    format!("{} {}", v["reasons"], v["notes"])
}

/// A policy that computes whenever nobody is in use, and a site file pointing at `dir`.
/// The ssh session's terminal (`Kind::Ssh`: TTY pts/0) is a file of the test's own, just used.
fn setup(dir: &Path, lock_grace: &str) {
    std::fs::write(dir.join("utmp"), b"").unwrap();
    std::fs::create_dir_all(dir.join("dev/pts")).unwrap();
    std::fs::write(dir.join("dev/pts/0"), b"").unwrap();
    std::fs::write(
        dir.join("policy.toml"),
        format!("timezone = \"UTC\"\n[schedule]\nwindows = [ {{ days = \"daily\", from = \"00:00\", to = \"24:00\" }} ]\n[owner]\nsessions = \"active\"\nsession_idle = \"5m\"\nlock_grace = \"{lock_grace}\"\nfree_for = \"0s\"\nmax_owner_cpu = \"100%\"\non_battery = \"ignore\"\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("pilotd.toml"),
        format!(
            "splay = \"0s\"\npolicy = \"{d}/policy.toml\"\nstate_dir = \"{d}/state\"\n[host]\nutmp = \"{d}/utmp\"\ndev = \"{d}/dev\"\nscratch = \"{d}\"\n[docker]\nsocket = \"unix://{d}/no-engine.sock\"\n",
            d = dir.display()
        ),
    )
    .unwrap();
}

fn run(dir: &Path, addr: &str) -> tokio::task::JoinHandle<serde_json::Value> {
    let (d, a) = (dir.to_path_buf(), addr.to_string());
    tokio::task::spawn_blocking(move || plan(&d, &a))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_appear_go_idle_are_locked_come_back_and_disappear() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d, "0s");
    let mut logind = FakeLogind::start(d).await;
    let address = logind.address.clone();

    // Nobody: free, and logind was asked (no "utmp alone" note).
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    assert!(
        said(&v).contains("sessions from logind and utmp"),
        "{}",
        said(&v)
    );

    // A graphical session appears (not in utmp), in use: the owner is here.
    let desk = logind.add("2", "alice", 1000, Kind::Desk).await;
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert_eq!(v["causes"][0], "owner_present");
    assert!(
        said(&v).contains("alice logged in and in use"),
        "{}",
        said(&v)
    );

    // Keyboard and mouse idle for 10 minutes (IdleHint, IdleSinceHint): away.
    *desk.hints.lock().unwrap() = Hints {
        idle: true,
        idle_since_us: micros_ago(Duration::from_secs(600)),
        locked: false,
    };
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    assert!(
        said(&v).contains("alice is away (idle for 5m or more)"),
        "{}",
        said(&v)
    );

    // Idle for only 2 minutes: still within session_idle, so here.
    desk.hints.lock().unwrap().idle_since_us = micros_ago(Duration::from_secs(120));
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));

    // Locked (LockedHint), though logind says it is not idle (KDE never says): away.
    *desk.hints.lock().unwrap() = Hints {
        locked: true,
        ..Hints::default()
    };
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    assert!(
        said(&v).contains("alice is away (locked since"),
        "{}",
        said(&v)
    );

    // Unlocked and in use: here.
    *desk.hints.lock().unwrap() = Hints::default();
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));

    // The session disappears: free again.
    logind.remove(&desk).await;
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));

    // logind unreachable: utmp alone decides, and plan says so.
    logind.leave();
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    assert!(
        said(&v).contains("sessions from utmp alone: systemd-logind cannot be asked"),
        "{}",
        said(&v)
    );
}

/// Debian 13: no utmp file at all. logind is then the whole truth; without it, nothing is
/// known and the owner is assumed here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_utmp_logind_decides_and_without_both_nobody_computes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d, "1m");
    std::fs::remove_file(d.join("utmp")).unwrap();
    let mut logind = FakeLogind::start(d).await;
    let address = logind.address.clone();

    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "nobody, said by logind: {}", said(&v));
    assert!(
        said(&v).contains("sessions from logind; utmp absent"),
        "{}",
        said(&v)
    );

    let ssh = logind.add("4", "bob", 1001, Kind::Ssh).await;
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "an ssh login in use: {}", said(&v));
    assert!(said(&v).contains("bob logged in"), "{}", said(&v));

    // Locked, but a one-shot plan has only just seen the lock: within lock_grace (1m).
    ssh.hints.lock().unwrap().locked = true;
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert!(v["next_change"].is_string(), "the grace's end: {v}");

    logind.leave();
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert_eq!(v["causes"][0], "sessions_unknown", "{}", said(&v));
    assert!(said(&v).contains("no source of sessions"), "{}", said(&v));
}

/// logind tells *that* a session is locked, not since when. A one-shot `plan` dates each lock
/// as the running daemon did (its status file records when it first saw each), so both say
/// the same; without that record, `plan` says plainly that it cannot know, and counts the lock
/// as in use for `lock_grace` (never "not locked").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_dates_a_lock_as_the_daemon_did_or_says_it_cannot_know() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d, "1m");
    let logind = FakeLogind::start(d).await;
    let address = logind.address.clone();
    let desk = logind.add("2", "alice", 1000, Kind::Desk).await;
    desk.hints.lock().unwrap().locked = true;

    // No daemon has run here: the lock's instant is unknown.
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert!(
        said(&v).contains(
            "alice logged in and in use (locked, since unknown: counted as in use for lock_grace, 1m)"
        ),
        "{}",
        said(&v)
    );
    assert!(!said(&v).contains("not locked"), "{}", said(&v));

    // The running daemon first saw the lock 5 minutes ago (and wrote its status just now).
    let now = chrono::Utc::now();
    let record = |updated: chrono::DateTime<chrono::Utc>| {
        let status = pilotd_volunteer::record::status::Status {
            updated_at: Some(updated),
            locks: [("2".to_string(), now - chrono::Duration::minutes(5))].into(),
            ..Default::default()
        };
        std::fs::create_dir_all(d.join("state")).unwrap();
        std::fs::write(
            d.join("state/status.json"),
            serde_json::to_vec(&status).unwrap(),
        )
        .unwrap();
    };
    record(now);
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    let since = (now - chrono::Duration::minutes(5))
        .format("%a %H:%M UTC")
        .to_string();
    assert!(
        said(&v).contains(&format!("alice is away (locked since {since})")),
        "{}",
        said(&v)
    );

    // A record older than the daemon's heartbeat may have missed an unlock: not believed.
    record(now - chrono::Duration::hours(1));
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert!(said(&v).contains("since unknown"), "{}", said(&v));
}

/// The daemon's watch wakes on logind's signals within a second, and tells a sleep from the
/// rest (forgeries and floods: `bus`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_tells_sessions_from_sleep() {
    let dir = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(dir.path()).await;
    let desk = logind.add("2", "alice", 1000, Kind::Desk).await;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Signal>(8);
    let watched = logind.address.clone();
    let watcher = tokio::spawn(async move {
        pilotd_volunteer::observe::logind::watch_on(Some(&watched), move |s| tx.try_send(s).is_ok())
            .await
    });
    // The watch's match rule is in place once a signal sent now arrives; send until one does.
    let first = async {
        loop {
            logind.emit("SessionNew", &("2", desk.path.clone())).await;
            if let Ok(Some(s)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
                return s;
            }
        }
    };
    let s = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the watch hears logind");
    assert_eq!(s, Signal::Sessions);
    // What the watch sets off is paced (at most one of a kind per `PACE`, the first at once):
    // each announcement below comes a pace after the last of its kind.
    let pace = pilotd_volunteer::observe::logind::PACE + Duration::from_millis(100);
    tokio::time::sleep(pace).await;
    while rx.try_recv().is_ok() {}

    logind.changed(&desk).await;
    expect(&mut rx, Signal::Sessions).await;
    logind.emit("PrepareForSleep", &(true,)).await;
    expect(&mut rx, Signal::Sleep(true)).await;
    tokio::time::sleep(pace).await;
    logind.emit("PrepareForSleep", &(false,)).await;
    expect(&mut rx, Signal::Sleep(false)).await;
    watcher.abort();
}

async fn expect(rx: &mut tokio::sync::mpsc::Receiver<Signal>, sent: Signal) {
    let t0 = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(1), rx.recv())
        .await
        .expect("woken within a second")
        .unwrap();
    assert_eq!(got, sent);
    eprintln!("{sent:?} -> wake: {:?}", t0.elapsed());
}
