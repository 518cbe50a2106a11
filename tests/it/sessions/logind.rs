//! The logind probe against a real `dbus-daemon` (Debian's `dbus`; tests/run.sh installs it)
//! on a bus of this test's own, where a small implementation of what pilotd uses of
//! `org.freedesktop.login1` (zbus's server side) owns the well-known name: `Manager.
//! ListSessions` and the `Session` properties. The real `pilotd plan` decides while a session
//! appears, goes idle, comes back and disappears; then the bus goes away.

use crate::harness;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zbus::zvariant::OwnedObjectPath;

type Listed = (String, u32, String, String, OwnedObjectPath);

struct Manager {
    sessions: Arc<Mutex<Vec<Listed>>>,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    fn list_sessions(&self) -> Vec<Listed> {
        self.sessions.lock().unwrap().clone()
    }
}

/// The idle state a test changes: (IdleHint, IdleSinceHint in µs since the epoch).
type Idle = Arc<Mutex<(bool, u64)>>;

struct LoginSession {
    name: String,
    uid: u32,
    since_us: u64,
    idle: Idle,
}

#[zbus::interface(name = "org.freedesktop.login1.Session")]
impl LoginSession {
    #[zbus(property)]
    fn name(&self) -> String {
        self.name.clone()
    }
    #[zbus(property)]
    fn user(&self) -> (u32, OwnedObjectPath) {
        (
            self.uid,
            OwnedObjectPath::try_from(format!("/org/freedesktop/login1/user/_{}", self.uid))
                .unwrap(),
        )
    }
    #[zbus(property)]
    fn class(&self) -> String {
        "user".into()
    }
    #[zbus(property)]
    fn state(&self) -> String {
        "active".into()
    }
    #[zbus(property)]
    fn r#type(&self) -> String {
        "wayland".into()
    }
    #[zbus(property, name = "TTY")]
    fn tty(&self) -> String {
        String::new()
    }
    #[zbus(property)]
    fn display(&self) -> String {
        String::new()
    }
    #[zbus(property)]
    fn remote(&self) -> bool {
        false
    }
    #[zbus(property)]
    fn remote_host(&self) -> String {
        String::new()
    }
    #[zbus(property)]
    fn timestamp(&self) -> u64 {
        self.since_us
    }
    #[zbus(property)]
    fn idle_hint(&self) -> bool {
        self.idle.lock().unwrap().0
    }
    #[zbus(property)]
    fn idle_since_hint(&self) -> u64 {
        self.idle.lock().unwrap().1
    }
}

struct Bus {
    daemon: Child,
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// A real dbus-daemon listening on `socket`, with the session bus's rules (anyone may own a
/// name on it, so the test can be logind).
fn start_bus(socket: &Path) -> Bus {
    let daemon = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile"])
        .arg(format!("--address=unix:path={}", socket.display()))
        .stdout(Stdio::null())
        .spawn()
        .expect("dbus-daemon runs (Debian package dbus; tests/run.sh installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "dbus-daemon did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Bus { daemon }
}

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

fn reasons(v: &serde_json::Value) -> String {
    v["reasons"].to_string()
}

fn micros_ago(d: Duration) -> u64 {
    (std::time::SystemTime::now() - d)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_appear_go_idle_come_back_and_disappear() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("utmp"), b"").unwrap();
    std::fs::write(
        d.join("policy.toml"),
        "timezone = \"UTC\"\n[schedule]\nwindows = [ { days = \"daily\", from = \"00:00\", to = \"24:00\" } ]\n[owner]\nsessions = \"active\"\nsession_idle = \"5m\"\nfree_for = \"0s\"\nmax_owner_cpu = \"100%\"\non_battery = \"ignore\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("pilotd.toml"),
        format!(
            "policy = \"{d}/policy.toml\"\nstate_dir = \"{d}/state\"\n[host]\nutmp = \"{d}/utmp\"\nscratch = \"{d}\"\n[docker]\nsocket = \"unix://{d}/no-engine.sock\"\n",
            d = d.display()
        ),
    )
    .unwrap();
    let socket = d.join("bus");
    let address = format!("unix:path={}", socket.display());
    let bus = start_bus(&socket);

    let sessions: Arc<Mutex<Vec<Listed>>> = Arc::default();
    let conn = zbus::connection::Builder::address(address.as_str())
        .unwrap()
        .name("org.freedesktop.login1")
        .unwrap()
        .serve_at(
            "/org/freedesktop/login1",
            Manager {
                sessions: sessions.clone(),
            },
        )
        .unwrap()
        .build()
        .await
        .unwrap();
    let run = |addr: String| {
        let d = d.to_path_buf();
        tokio::task::spawn_blocking(move || plan(&d, &addr))
    };

    // Nobody: free, and logind was asked (no "utmp alone" note).
    let v = run(address.clone()).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", reasons(&v));
    assert!(!reasons(&v).contains("utmp alone"), "{}", reasons(&v));

    // A graphical session appears (not in utmp), in use: the owner is here.
    let path = OwnedObjectPath::try_from("/org/freedesktop/login1/session/_32").unwrap();
    let idle: Idle = Arc::new(Mutex::new((false, 0)));
    conn.object_server()
        .at(
            path.as_str(),
            LoginSession {
                name: "alice".into(),
                uid: 1000,
                since_us: micros_ago(Duration::from_secs(3600)),
                idle: idle.clone(),
            },
        )
        .await
        .unwrap();
    sessions.lock().unwrap().push((
        "2".into(),
        1000,
        "alice".into(),
        "seat0".into(),
        path.clone(),
    ));
    let v = run(address.clone()).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", reasons(&v));
    assert_eq!(v["causes"][0], "owner_present");

    // The daemon's watch wakes on logind's signals (here SessionNew), within a second.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(8);
    let watched = address.clone();
    let watcher = tokio::spawn(async move {
        pilotd::volunteer::logind::watch_on(Some(&watched), move || tx.try_send(()).is_ok()).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await; // the match rule is in place
    let t0 = Instant::now();
    conn.emit_signal(
        None::<&str>,
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager",
        "SessionNew",
        &("2", path.clone()),
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(1), rx.recv())
        .await
        .expect("woken within a second")
        .unwrap();
    eprintln!("logind signal -> wake: {:?}", t0.elapsed());
    watcher.abort();
    assert!(reasons(&v).contains("alice logged in and active within 5m"));

    // Keyboard and mouse idle for 10 minutes (IdleHint, IdleSinceHint): away.
    *idle.lock().unwrap() = (true, micros_ago(Duration::from_secs(600)));
    let v = run(address.clone()).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", reasons(&v));

    // Idle for only 2 minutes: still within session_idle, so here.
    *idle.lock().unwrap() = (true, micros_ago(Duration::from_secs(120)));
    let v = run(address.clone()).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", reasons(&v));

    // Comes back (IdleHint false): here.
    *idle.lock().unwrap() = (false, 0);
    let v = run(address.clone()).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", reasons(&v));

    // The session disappears: free again.
    sessions.lock().unwrap().clear();
    conn.object_server()
        .remove::<LoginSession, _>(path.as_str())
        .await
        .unwrap();
    let v = run(address.clone()).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", reasons(&v));

    // logind unreachable (the bus is gone): utmp alone decides, and plan says so.
    drop(conn);
    drop(bus);
    let v = run(address.clone()).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", reasons(&v));
    assert!(
        reasons(&v).contains("sessions from utmp alone: systemd-logind cannot be asked"),
        "{}",
        reasons(&v)
    );
}
