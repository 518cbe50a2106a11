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
pub(super) fn plan(dir: &Path, bus: &str) -> serde_json::Value {
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
pub(super) fn said(v: &serde_json::Value) -> String {
    format!("{} {}", v["reasons"], v["notes"])
}

/// A policy that computes whenever nobody is in use, and a site file pointing at `dir`.
/// The ssh session's terminal (`Kind::Ssh`: TTY pts/0) is a file of the test's own, just used.
pub(super) fn setup(dir: &Path, lock_grace: &str) {
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

pub(super) fn run(dir: &Path, addr: &str) -> tokio::task::JoinHandle<serde_json::Value> {
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

/// A call of the login1 Manager's `method` on `conn`.
async fn manager<B>(conn: &zbus::Connection, method: &str, body: &B) -> zbus::Message
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    conn.call_method(
        Some("org.freedesktop.login1"),
        "/org/freedesktop/login1",
        Some("org.freedesktop.login1.Manager"),
        method,
        body,
    )
    .await
    .unwrap()
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

/// alice's ssh session, her terminal (the test's dev/pts/0) last used `ago`.
pub(super) fn terminal_used(dir: &Path, ago: Duration) {
    let f = std::fs::File::options()
        .write(true)
        .open(dir.join("dev/pts/0"))
        .unwrap();
    let t = std::time::SystemTime::now() - ago;
    f.set_times(std::fs::FileTimes::new().set_accessed(t))
        .unwrap();
}

/// What `plan` says, reasons and notes, must never name a program or its reason: logind's
/// `who` and `why` are read from the bus and dropped at once.
pub(super) fn says_no_content(v: &serde_json::Value) {
    let all = v.to_string();
    for content in ["a film player", "Playing a film"] {
        assert!(!all.contains(content), "{all}");
    }
}

/// An idle inhibitor makes its user present, as the real `pilotd plan` decides it through the
/// login1 stand-in: alice's ssh terminal idle past `session_idle` is away; her idle lock keeps
/// her here (said by kind: "an idle inhibitor is held"), and nothing of the lock's program or
/// reason is said; a sleep or lid lock is no use; root's idle lock counts for nobody (an
/// ignored user); released, she is away again; `inhibitors_are_use = false` ignores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_inhibitor_keeps_its_user_here_until_it_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d, "1m");
    let logind = FakeLogind::start(d).await;
    let address = logind.address.clone();
    logind.add("4", "alice", 1000, Kind::Ssh).await;
    terminal_used(d, Duration::from_secs(600));
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    assert!(
        said(&v).contains("alice is away (idle for 5m or more)"),
        "{}",
        said(&v)
    );

    // Her everyday locks (a sleep delay, the lid switch) are not use.
    logind.take("sleep", "delay", 1000, 4242).await;
    logind.take("handle-lid-switch", "block", 1000, 4242).await;
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));

    // `systemd-inhibit --what=idle` in her session: she is here.
    let film = logind.take("idle", "block", 1000, 4243).await;
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert_eq!(v["causes"][0], "owner_present");
    assert_eq!(
        v["reasons"][0],
        "alice is using the machine: an idle inhibitor is held",
        "{}",
        said(&v)
    );
    assert!(!said(&v).contains("alice is away"), "{}", said(&v));
    says_no_content(&v);

    // The owner turned inhibitors off: her lock is nothing.
    let policy = std::fs::read_to_string(d.join("policy.toml")).unwrap();
    std::fs::write(
        d.join("policy.toml"),
        policy.replace("[owner]\n", "[owner]\ninhibitors_are_use = false\n"),
    )
    .unwrap();
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    std::fs::write(d.join("policy.toml"), &policy).unwrap();

    // Released: away again. root's idle lock (an ignored user) is no one's use.
    logind.release(&film).await;
    logind.take("idle", "block", 0, 4244).await;
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    assert!(
        said(&v).contains("alice is away (idle for 5m or more)"),
        "{}",
        said(&v)
    );
}

/// The daemon's watch hears a lock taken and released (logind's `PropertiesChanged` of the
/// Manager's `BlockInhibited`) as its own kind of signal, within a second, paced apart from
/// the sessions' signals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_hears_inhibitors_taken_and_released() {
    let dir = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(dir.path()).await;
    let desk = logind.add("2", "alice", 1000, Kind::Desk).await;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Signal>(8);
    let watched = logind.address.clone();
    let watcher = tokio::spawn(async move {
        pilotd_volunteer::observe::logind::watch_on(Some(&watched), move |s| tx.try_send(s).is_ok())
            .await
    });
    let first = async {
        loop {
            logind.emit("SessionNew", &("2", desk.path.clone())).await;
            if let Ok(Some(s)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
                return s;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the watch hears logind");
    let pace = pilotd_volunteer::observe::logind::PACE + Duration::from_millis(100);
    tokio::time::sleep(pace).await;
    while rx.try_recv().is_ok() {}

    let lock = logind.take("idle", "block", 1000, 4243).await;
    expect(&mut rx, Signal::Inhibitors).await;
    // A session's change right after is not held back by the lock's.
    logind.changed(&desk).await;
    expect(&mut rx, Signal::Sessions).await;
    tokio::time::sleep(pace).await;
    logind.release(&lock).await;
    expect(&mut rx, Signal::Inhibitors).await;

    // A lock taken through `Inhibit`, as pilotd's own: its caller's uid and pid, announced,
    // and released (and announced again) once the caller closes its end.
    tokio::time::sleep(pace).await;
    let caller = zbus::connection::Builder::address(logind.address.as_str())
        .unwrap()
        .build()
        .await
        .unwrap();
    let fd: zbus::zvariant::OwnedFd = manager(
        &caller,
        "Inhibit",
        &("idle", "pilotd", "keep awake", "block"),
    )
    .await
    .body()
    .deserialize()
    .unwrap();
    expect(&mut rx, Signal::Inhibitors).await;
    type Listed = Vec<(String, String, String, String, u32, u32)>;
    let listed = |m: zbus::Message| m.body().deserialize::<Listed>().unwrap();
    let held = listed(manager(&caller, "ListInhibitors", &()).await);
    assert_eq!(
        held,
        vec![(
            "idle".to_string(),
            "pilotd".to_string(),
            "keep awake".to_string(),
            "block".to_string(),
            nix::unistd::geteuid().as_raw(),
            std::process::id()
        )]
    );
    tokio::time::sleep(pace).await;
    drop(fd);
    expect(&mut rx, Signal::Inhibitors).await;
    assert_eq!(
        listed(manager(&caller, "ListInhibitors", &()).await),
        vec![]
    );
    watcher.abort();
}
