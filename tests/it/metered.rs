//! The metered link, against a real `dbus-daemon` of the test's own shaped as the system bus
//! (`sessions::login1::start_bus`), where a small NetworkManager owns
//! `org.freedesktop.NetworkManager` and serves what pilotd reads of it: the manager's
//! `Metered` property (`u`, an `NMMetered`) on `/org/freedesktop/NetworkManager`, announced by
//! `org.freedesktop.DBus.Properties.PropertiesChanged` carrying the new value, as
//! NetworkManager's D-Bus API documents it (the property is `readable u`, emits change).
//!
//! The real `pilotd plan` and `pilotd snapshot` read every state (yes, guess-yes, no,
//! guess-no, unknown) and NetworkManager's absence; the watch hears a change, a restart, and
//! not a forgery sent from a connection that does not own the name; the real `pilotd run`, with a cycle due only in an hour,
//! decides on a change within 5 s. The real engine refusing to pull is tests/it/docker/metered.rs.

use crate::harness;
use crate::sessions::login1::{Bus, start_bus};
use pilotd_volunteer::observe::metered::{self, Announced};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NM: &str = "org.freedesktop.NetworkManager";
const NM_PATH: &str = "/org/freedesktop/NetworkManager";

struct Manager {
    metered: u32,
}

/// What pilotd reads of NetworkManager's manager object, with the signatures of
/// NetworkManager's introspection (`Metered` `u`; `State` `u`, `Version` `s` beside it, which
/// pilotd leaves alone).
#[zbus::interface(name = "org.freedesktop.NetworkManager")]
impl Manager {
    #[zbus(property)]
    fn metered(&self) -> u32 {
        self.metered
    }
    #[zbus(property)]
    fn state(&self) -> u32 {
        70
    }
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> String {
        "1.52.0".into()
    }
}

/// NetworkManager on a bus of the test's own. Dropping it stops the bus.
pub(crate) struct FakeNetworkManager {
    pub address: String,
    conn: zbus::Connection,
    _bus: Bus,
}

impl FakeNetworkManager {
    /// On a new bus in `dir`, saying `metered` (an `NMMetered` number).
    pub async fn start(dir: &Path, metered: u32) -> FakeNetworkManager {
        let socket = dir.join("bus");
        let address = format!("unix:path={}", socket.display());
        let bus = start_bus(&socket);
        let conn = zbus::connection::Builder::address(address.as_str())
            .unwrap()
            .name(NM)
            .unwrap()
            .serve_at(NM_PATH, Manager { metered })
            .unwrap()
            .build()
            .await
            .unwrap();
        FakeNetworkManager {
            address,
            conn,
            _bus: bus,
        }
    }

    /// The primary connection's price changes: the new value, then `PropertiesChanged`
    /// carrying it, as NetworkManager does.
    pub async fn set(&self, metered: u32) {
        let iface = self
            .conn
            .object_server()
            .interface::<_, Manager>(NM_PATH)
            .await
            .unwrap();
        iface.get_mut().await.metered = metered;
        iface
            .get()
            .await
            .metered_changed(iface.signal_emitter())
            .await
            .unwrap();
    }

    /// NetworkManager stops (leaves the bus; the bus stays).
    pub async fn leave(&self) {
        self.conn.release_name(NM).await.unwrap();
    }

    /// NetworkManager starts again.
    pub async fn come_back(&self) {
        self.conn.request_name(NM).await.unwrap();
    }
}

/// A policy open all day, the host free at once; pilotd.toml pointing at `dir`, with no engine
/// and a cycle only every hour (what happens sooner was set off by a trigger).
fn setup(dir: &Path, on_metered: &str) {
    std::fs::write(dir.join("utmp"), b"").unwrap();
    std::fs::write(
        dir.join("policy.toml"),
        format!("timezone = \"UTC\"\n[schedule]\nwindows = [ {{ days = \"daily\", from = \"00:00\", to = \"24:00\" }} ]\n[owner]\nsessions = \"any\"\nfree_for = \"0s\"\nmax_owner_cpu = \"100%\"\non_battery = \"ignore\"\n{on_metered}"),
    )
    .unwrap();
    std::fs::write(
        dir.join("pilotd.toml"),
        format!(
            "splay = \"0s\"\ninterval = \"1h\"\npolicy = \"{d}/policy.toml\"\nstate_dir = \"{d}/state\"\ncontrol_socket = \"{d}/control.sock\"\n[host]\nutmp = \"{d}/utmp\"\nscratch = \"{d}\"\n[docker]\nsocket = \"unix://{d}/no-engine.sock\"\n",
            d = dir.display()
        ),
    )
    .unwrap();
}

fn pilotd(dir: &Path, bus: &str) -> Command {
    let mut c = Command::new(harness::bin());
    c.arg("-c")
        .arg(dir.join("pilotd.toml"))
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus)
        .env_remove("PILOTD_CONFIG")
        .env_remove("PILOTD_POLICY");
    c
}

/// `pilotd ARGS` on this host with `bus` as the system bus: its standard output.
fn output(dir: &Path, bus: &str, args: &[&str]) -> String {
    let out = pilotd(dir, bus).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "pilotd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `pilotd plan --format json`, beside the runtime (it waits for the process).
async fn plan(dir: &Path, bus: &str) -> serde_json::Value {
    let (d, b) = (dir.to_path_buf(), bus.to_string());
    let text = tokio::task::spawn_blocking(move || output(&d, &b, &["plan", "--format", "json"]))
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

const SAID: &str = "the network is metered (NetworkManager): no downloads";

fn metered_cause(v: &serde_json::Value) -> bool {
    v["causes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "metered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_reads_every_state_and_networkmanagers_absence() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d, "");
    let nm = FakeNetworkManager::start(d, 1).await;
    let bus = nm.address.clone();

    // yes and guess-yes: no downloads, no new worker (on_metered's default).
    for yes in [1, 3] {
        nm.set(yes).await;
        let v = plan(d, &bus).await;
        assert_eq!(v["allowed"], false, "{yes}: {v}");
        assert!(metered_cause(&v), "{yes}: {v}");
        assert_eq!(v["reasons"][0], SAID, "{yes}: {v}");
    }
    // The text an owner reads says it too.
    let text = {
        let (d, b) = (d.to_path_buf(), bus.clone());
        tokio::task::spawn_blocking(move || output(&d, &b, &["plan"]))
            .await
            .unwrap()
    };
    assert!(text.contains(SAID), "{text}");

    // no, guess-no, unknown: as if there were no NetworkManager.
    for no in [2, 4, 0] {
        nm.set(no).await;
        let v = plan(d, &bus).await;
        assert_eq!(v["allowed"], true, "{no}: {v}");
        assert!(!metered_cause(&v), "{no}: {v}");
    }

    // The snapshot carries what NetworkManager said, and replays to the same decision.
    nm.set(3).await;
    let snap = {
        let (d, b) = (d.to_path_buf(), bus.clone());
        tokio::task::spawn_blocking(move || output(&d, &b, &["snapshot"]))
            .await
            .unwrap()
    };
    let parsed: serde_json::Value = serde_json::from_str(&snap).unwrap();
    assert_eq!(parsed["metered"], "guess-yes", "{snap}");
    std::fs::write(d.join("snap.json"), &snap).unwrap();
    let replay = {
        let (d, b) = (d.to_path_buf(), bus.clone());
        let file = d.join("snap.json");
        tokio::task::spawn_blocking(move || {
            output(
                &d,
                &b,
                &[
                    "plan",
                    "--format",
                    "json",
                    "--snapshot",
                    file.to_str().unwrap(),
                ],
            )
        })
        .await
        .unwrap()
    };
    let replay: serde_json::Value = serde_json::from_str(&replay).unwrap();
    assert_eq!(replay["reasons"][0], SAID, "{replay}");

    // pause: the workers too.
    std::fs::write(
        d.join("policy.toml"),
        std::fs::read_to_string(d.join("policy.toml")).unwrap() + "on_metered = \"pause\"\n",
    )
    .unwrap();
    let v = plan(d, &bus).await;
    assert_eq!(
        v["reasons"][0],
        "the network is metered (NetworkManager): no downloads; workers paused"
    );
    assert_eq!(v["evict"], "pause", "{v}");

    // NetworkManager gone: not known to be metered, so nothing is held.
    nm.leave().await;
    let v = plan(d, &bus).await;
    assert_eq!(v["allowed"], true, "{v}");
    assert!(!metered_cause(&v), "{v}");
    // No bus at all: the same.
    let v = plan(d, &format!("unix:path={}", d.join("no-bus").display())).await;
    assert_eq!(v["allowed"], true, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_hears_networkmanager_and_not_a_forgery() {
    let dir = tempfile::tempdir().unwrap();
    let nm = FakeNetworkManager::start(dir.path(), 2).await;
    let heard: Arc<Mutex<Vec<Announced>>> = Arc::default();
    let (h, a) = (heard.clone(), nm.address.clone());
    let task = tokio::spawn(async move {
        metered::watch_on(Some(&a), move |x| {
            h.lock().unwrap().push(x);
            true
        })
        .await
    });
    let next = |within: Duration| {
        let heard = heard.clone();
        async move {
            let deadline = Instant::now() + within;
            loop {
                let now: Vec<Announced> = std::mem::take(&mut *heard.lock().unwrap());
                if !now.is_empty() || Instant::now() > deadline {
                    return now;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // Once the watch's rules are in place, a change is heard at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        nm.set(1).await;
        if !next(Duration::from_millis(200)).await.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the watch heard nothing");
    }
    tokio::time::sleep(metered::PACE + Duration::from_millis(300)).await;
    heard.lock().unwrap().clear();
    let sent = Instant::now();
    nm.set(2).await;
    assert_eq!(next(Duration::from_secs(5)).await, vec![Announced::Metered]);
    eprintln!("PropertiesChanged -> heard in {:?}", sent.elapsed());

    // Another connection sends NetworkManager's PropertiesChanged, body and all: it does not
    // own the name, so it is not believed.
    let other = zbus::connection::Builder::address(nm.address.as_str())
        .unwrap()
        .build()
        .await
        .unwrap();
    let changed: std::collections::HashMap<&str, zbus::zvariant::Value<'_>> =
        [("Metered", zbus::zvariant::Value::U32(1))].into();
    other
        .emit_signal(
            None::<&str>,
            NM_PATH,
            "org.freedesktop.DBus.Properties",
            "PropertiesChanged",
            &(NM, changed, Vec::<String>::new()),
        )
        .await
        .unwrap();
    assert_eq!(
        next(Duration::from_secs(2)).await,
        vec![],
        "a forgery heard"
    );

    // Another property of the manager is nothing to pilotd.
    let iface = nm
        .conn
        .object_server()
        .interface::<_, Manager>(NM_PATH)
        .await
        .unwrap();
    iface
        .get()
        .await
        .state_changed(iface.signal_emitter())
        .await
        .unwrap();
    assert_eq!(next(Duration::from_secs(2)).await, vec![]);

    // A restart: heard (the daemon then asks at once).
    nm.leave().await;
    assert_eq!(
        next(Duration::from_secs(5)).await,
        vec![Announced::Restarted]
    );
    task.abort();
}

/// The status file's reasons, as the daemon last wrote them.
fn reasons(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("state/status.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|v| v["decision"]["reasons"].to_string())
        .unwrap_or_default()
}

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < within, "{what} not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_decides_on_a_change_within_5_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    setup(&d, "");
    let nm = FakeNetworkManager::start(&d, 2).await;
    let mut child = pilotd(&d, &nm.address)
        .arg("run")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dd = d.clone();
    let first = tokio::task::spawn_blocking(move || {
        wait_for("the first cycle", Duration::from_secs(20), || {
            reasons(&dd).contains("host free")
        })
    });
    first.await.unwrap();
    // Its watch subscribes beside the first cycle: give it the moment it takes.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The link becomes metered: the next cycle is an hour away, so only the trigger decides.
    nm.set(1).await;
    let dd = d.clone();
    let took = tokio::task::spawn_blocking(move || {
        wait_for("the metered decision", Duration::from_secs(5), || {
            reasons(&dd).contains("the network is metered (NetworkManager): no downloads")
        })
    })
    .await
    .unwrap();
    eprintln!("metered -> decided in {took:?}");
    // `pilotd status` says it.
    let dd = d.clone();
    let addr = nm.address.clone();
    let status = tokio::task::spawn_blocking(move || output(&dd, &addr, &["status"]))
        .await
        .unwrap();
    assert!(
        status.contains("the network is metered (NetworkManager)"),
        "{status}"
    );

    // And back.
    nm.set(2).await;
    let dd = d.clone();
    let took = tokio::task::spawn_blocking(move || {
        wait_for("the unmetered decision", Duration::from_secs(5), || {
            let r = reasons(&dd);
            r.contains("host free") && !r.contains("metered")
        })
    })
    .await
    .unwrap();
    eprintln!("not metered -> decided in {took:?}");

    // NetworkManager stops (the daemon asks, finds nobody, and backs off), and starts again on
    // a metered link: its arrival on the bus ends the back-off at once.
    nm.leave().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nm.set(1).await;
    nm.come_back().await;
    let dd = d.clone();
    let took = tokio::task::spawn_blocking(move || {
        wait_for(
            "the metered decision after a restart",
            Duration::from_secs(5),
            || reasons(&dd).contains("the network is metered (NetworkManager)"),
        )
    })
    .await
    .unwrap();
    eprintln!("NetworkManager back, metered -> decided in {took:?}");
    let _ = child.kill();
    let _ = child.wait();
}
