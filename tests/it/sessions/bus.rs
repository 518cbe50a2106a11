//! The daemon's watches on the system bus believe only the service that owns the name, and a
//! flood from the service itself sets off a bounded number of actions (issue 35). On a real
//! `dbus-daemon` shaped as the system bus (`login1::start_bus`: any uid may connect and send
//! signals, only root may own a name), with the login1 stand-in of `login1.rs` and a
//! firewalld one (its name and its `Reloaded`), forgeries are sent by `nobody` through the
//! real `dbus-send` (and by root on a connection of its own): `PrepareForSleep(true)` used to
//! be believed from anyone, which evicted the workers and kept them stopped until a real
//! wake-up; a flood of forged `Reloaded` ran the filter's check back to back.
//!
//! Also the login1 stand-in against logind's documented behaviour (issue 31): `Seat` served as
//! `(so)`, `PropertiesChanged` carrying values.

use super::login1::{FakeLogind, Kind, forge};
use pilotd_volunteer::act::egress::firewalld::{self, Announced};
use pilotd_volunteer::observe::logind::{self, Signal};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

const LOGIN1: &str = "org.freedesktop.login1";
const LOGIN1_PATH: &str = "/org/freedesktop/login1";
const MANAGER: &str = "org.freedesktop.login1.Manager";
const FIREWALLD: &str = "org.fedoraproject.FirewallD1";
const FIREWALLD_PATH: &str = "/org/fedoraproject/FirewallD1";

/// firewalld as the bus sees it: its name, and its `Reloaded` signal.
pub(crate) struct FakeFirewalld {
    pub address: String,
    conn: zbus::Connection,
    _bus: super::login1::Bus,
}

impl FakeFirewalld {
    pub async fn start(dir: &std::path::Path) -> FakeFirewalld {
        let socket = dir.join("bus");
        let address = format!("unix:path={}", socket.display());
        let bus = super::login1::start_bus(&socket);
        let conn = zbus::connection::Builder::address(address.as_str())
            .unwrap()
            .name(FIREWALLD)
            .unwrap()
            .build()
            .await
            .unwrap();
        FakeFirewalld {
            address,
            conn,
            _bus: bus,
        }
    }

    pub async fn reloaded(&self) {
        self.conn
            .emit_signal(None::<&str>, FIREWALLD_PATH, FIREWALLD, "Reloaded", &())
            .await
            .unwrap();
    }

    /// Leaves the bus and comes back, as a restart does.
    pub async fn restart(&self) {
        self.conn.release_name(FIREWALLD).await.unwrap();
        self.conn.request_name(FIREWALLD).await.unwrap();
    }
}

/// What a watch passed on, in order, and when.
struct Heard<T> {
    log: Arc<Mutex<Vec<(Instant, T)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T: Copy + Send + 'static> Heard<T> {
    fn take(&self) -> Vec<T> {
        self.take_timed().into_iter().map(|(_, t)| t).collect()
    }

    fn take_timed(&self) -> Vec<(Instant, T)> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    fn now(&self) -> Vec<T> {
        self.log.lock().unwrap().iter().map(|(_, t)| *t).collect()
    }

    /// Once something was heard (the watch's match rules are then in place), `pace` later,
    /// with nothing left waiting: sends `announce` until something is heard.
    async fn ready<F: std::future::Future<Output = ()>>(
        &self,
        pace: Duration,
        mut announce: impl FnMut() -> F,
    ) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.now().is_empty() {
            assert!(Instant::now() < deadline, "the watch heard nothing");
            announce().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(pace + Duration::from_millis(300)).await;
        self.take();
    }

    /// Waits until something was heard, within `within`; what was.
    async fn next(&self, within: Duration) -> Vec<T> {
        let deadline = Instant::now() + within;
        while self.now().is_empty() {
            assert!(Instant::now() < deadline, "nothing heard within {within:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.take()
    }
}

impl<T> Drop for Heard<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn logind_heard(address: &str) -> Heard<Signal> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (l, a) = (log.clone(), address.to_string());
    let task = tokio::spawn(async move {
        logind::watch_on(Some(&a), move |s| {
            l.lock().unwrap().push((Instant::now(), s));
            true
        })
        .await
    });
    Heard { log, task }
}

fn firewalld_heard(address: &str) -> Heard<Announced> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (l, a) = (log.clone(), address.to_string());
    let task = tokio::spawn(async move {
        firewalld::watch_on(Some(&a), move |s| {
            l.lock().unwrap().push((Instant::now(), s));
            true
        })
        .await
    });
    Heard { log, task }
}

/// `forge` beside the runtime (it waits for `dbus-send`).
async fn forged(address: &str, path: &'static str, signal: &'static str, args: &[&'static str]) {
    let (a, args) = (address.to_string(), args.to_vec());
    tokio::task::spawn_blocking(move || forge(&a, path, signal, &args))
        .await
        .unwrap();
}

/// A connection of the test's own (root, as logind, but not logind) on the bus.
async fn another_connection(address: &str) -> zbus::Connection {
    zbus::connection::Builder::address(address)
        .unwrap()
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_prepare_for_sleep_changes_nothing_and_loginds_own_is_believed() {
    let dir = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(dir.path()).await;
    let desk = logind.add("2", "alice", 1000, Kind::Desk).await;
    let heard = logind_heard(&logind.address);
    heard.ready(logind::PACE, || logind.changed(&desk)).await;

    // `nobody` says the machine goes to sleep, and that a session appeared; so does root on a
    // connection that is not logind's.
    let address = logind.address.as_str();
    for _ in 0..3 {
        forged(
            address,
            LOGIN1_PATH,
            "org.freedesktop.login1.Manager.PrepareForSleep",
            &["boolean:true"],
        )
        .await;
    }
    forged(
        address,
        LOGIN1_PATH,
        "org.freedesktop.login1.Manager.SessionNew",
        &["string:9", "objpath:/org/freedesktop/login1/session/_39"],
    )
    .await;
    forged(
        address,
        "/org/freedesktop/login1/session/_32",
        "org.freedesktop.DBus.Properties.PropertiesChanged",
        &[
            "string:org.freedesktop.login1.Session",
            "dict:string:string:",
            "array:string:LockedHint",
        ],
    )
    .await;
    let root = another_connection(address).await;
    root.emit_signal(
        None::<&str>,
        LOGIN1_PATH,
        MANAGER,
        "PrepareForSleep",
        &(true,),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(heard.now(), vec![], "a forgery was believed");

    // logind's own, at once.
    let t0 = Instant::now();
    logind.emit("PrepareForSleep", &(true,)).await;
    assert_eq!(
        heard.next(Duration::from_secs(1)).await,
        vec![Signal::Sleep(true)]
    );
    eprintln!("logind's PrepareForSleep heard after {:?}", t0.elapsed());
    logind.changed(&desk).await;
    assert_eq!(
        heard.next(Duration::from_secs(1)).await,
        vec![Signal::Sessions]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_reloaded_changes_nothing_and_firewallds_own_is_believed() {
    let dir = tempfile::tempdir().unwrap();
    let firewalld = FakeFirewalld::start(dir.path()).await;
    let heard = firewalld_heard(&firewalld.address);
    heard.ready(firewalld::PACE, || firewalld.reloaded()).await;

    let address = firewalld.address.as_str();
    for _ in 0..3 {
        forged(
            address,
            FIREWALLD_PATH,
            "org.fedoraproject.FirewallD1.Reloaded",
            &[],
        )
        .await;
    }
    // Its name changing owner, said by someone else than the bus.
    forged(
        address,
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus.NameOwnerChanged",
        &[
            "string:org.fedoraproject.FirewallD1",
            "string:",
            "string::1.99",
        ],
    )
    .await;
    let root = another_connection(address).await;
    root.emit_signal(None::<&str>, FIREWALLD_PATH, FIREWALLD, "Reloaded", &())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(heard.now(), vec![], "a forgery was believed");

    firewalld.reloaded().await;
    assert_eq!(
        heard.next(Duration::from_secs(1)).await,
        vec![Announced::Reloaded]
    );
}

/// Of one kind, after the first `bus::BURST` (passed at once), what was passed is at least a
/// pace apart, so a flood of any length sets off at most `BURST` actions and then one per
/// pace. Some tolerance for the timer's wake-up.
fn paced<T: std::fmt::Debug>(heard: &[(Instant, T)], pace: Duration) {
    let burst = pilotd_volunteer::observe::bus::BURST as usize;
    assert!(
        heard.len() > burst,
        "the flood outlasted its burst: {heard:?}"
    );
    for w in heard[burst..].windows(2) {
        let apart = w[1].0 - w[0].0;
        assert!(
            apart + Duration::from_millis(20) >= pace,
            "{:?} then {:?} only {apart:?} apart",
            w[0].1,
            w[1].1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_logind_itself_sets_off_one_action_per_pace() {
    let dir = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(dir.path()).await;
    let desk = logind.add("2", "alice", 1000, Kind::Desk).await;
    let heard = logind_heard(&logind.address);
    heard.ready(logind::PACE, || logind.changed(&desk)).await;

    // 3 s of signals from logind, as fast as it can: session changes and sleeps, the last a
    // wake-up.
    let t0 = Instant::now();
    let mut sent = 0;
    while t0.elapsed() < Duration::from_secs(3) {
        logind.changed(&desk).await;
        logind.emit("PrepareForSleep", &(true,)).await;
        sent += 2;
    }
    logind.emit("PrepareForSleep", &(false,)).await;
    let flood = t0.elapsed();
    // The watch reads behind the flood (the bus holds what it has not read yet): the wake-up
    // must come, then nothing more is waiting a pace later.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !heard.now().contains(&Signal::Sleep(false)) {
        assert!(Instant::now() < deadline, "the wake-up never passed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(logind::PACE + Duration::from_millis(500)).await;
    let heard = heard.take_timed();
    let (sessions, sleeps): (Vec<_>, Vec<_>) =
        heard.into_iter().partition(|(_, s)| *s == Signal::Sessions);
    let span = |h: &[(Instant, Signal)]| h.last().unwrap().0 - h.first().unwrap().0;
    eprintln!(
        "{sent} signals from logind sent in {flood:?}: {} session cycles passed over {:?}, {} sleep announcements over {:?}",
        sessions.len(),
        span(&sessions),
        sleeps.len(),
        span(&sleeps),
    );
    assert!(sessions.len() >= 3 && sleeps.len() >= 3, "passed through");
    paced(&sessions, logind::PACE);
    paced(&sleeps, logind::PACE);
    assert_eq!(
        sleeps.last().map(|(_, s)| *s),
        Some(Signal::Sleep(false)),
        "the latest word passed last"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_firewalld_itself_sets_off_one_check_per_pace() {
    let dir = tempfile::tempdir().unwrap();
    let firewalld = FakeFirewalld::start(dir.path()).await;
    let heard = firewalld_heard(&firewalld.address);
    heard.ready(firewalld::PACE, || firewalld.reloaded()).await;
    // 5 s of `Reloaded`, as fast as firewalld can send them.
    let t0 = Instant::now();
    let mut sent = 0;
    while t0.elapsed() < Duration::from_secs(5) {
        firewalld.reloaded().await;
        sent += 1;
    }
    let flood = t0.elapsed();
    tokio::time::sleep(firewalld::PACE + Duration::from_millis(500)).await;
    let heard = heard.take_timed();
    eprintln!(
        "{sent} Reloaded sent in {flood:?}: {} checks set off, over {:?}",
        heard.len(),
        heard.last().unwrap().0 - heard.first().unwrap().0
    );
    assert!(heard.len() >= 3, "passed through");
    paced(&heard, firewalld::PACE);
}

/// Who is believed follows the name: logind gives it up (nobody is believed), another
/// connection takes it (it is, the first no more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_names_next_owner_is_believed_and_the_last_one_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(dir.path()).await;
    let heard = logind_heard(&logind.address);
    heard
        .ready(logind::PACE, || logind.emit("PrepareForSleep", &(false,)))
        .await;
    let first = logind.connection();
    first.release_name(LOGIN1).await.unwrap();
    first
        .emit_signal(
            None::<&str>,
            LOGIN1_PATH,
            MANAGER,
            "PrepareForSleep",
            &(true,),
        )
        .await
        .unwrap();
    let next = zbus::connection::Builder::address(logind.address.as_str())
        .unwrap()
        .name(LOGIN1)
        .unwrap()
        .build()
        .await
        .unwrap();
    first
        .emit_signal(
            None::<&str>,
            LOGIN1_PATH,
            MANAGER,
            "PrepareForSleep",
            &(true,),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(heard.now(), vec![], "the former owner was believed");
    next.emit_signal(
        None::<&str>,
        LOGIN1_PATH,
        MANAGER,
        "PrepareForSleep",
        &(true,),
    )
    .await
    .unwrap();
    assert_eq!(
        heard.next(Duration::from_secs(1)).await,
        vec![Signal::Sleep(true)]
    );
}

/// The login1 stand-in as logind documents itself (org.freedesktop.login1(5)) and as its
/// source declares the properties (src/login/logind-session-dbus.c): `Seat` is `(so)`, the
/// constant properties say so, and a hint's change is announced with its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login1_stand_in_serves_seats_and_announces_values_as_logind_does() {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let logind = FakeLogind::start(dir.path()).await;
    let desk = logind.add("2", "alice", 1000, Kind::Desk).await;
    let ssh = logind.add("4", "bob", 1001, Kind::Ssh).await;
    let conn = another_connection(&logind.address).await;
    let all = |path: OwnedObjectPath| {
        let conn = conn.clone();
        async move {
            conn.call_method(
                Some(LOGIN1),
                path.as_str(),
                Some("org.freedesktop.DBus.Properties"),
                "GetAll",
                &("org.freedesktop.login1.Session",),
            )
            .await
            .unwrap()
            .body()
            .deserialize::<HashMap<String, OwnedValue>>()
            .unwrap()
        }
    };
    let seat = |all: &HashMap<String, OwnedValue>| {
        <(String, OwnedObjectPath)>::try_from(all["Seat"].try_clone().unwrap()).unwrap()
    };
    let d = all(desk.path.clone()).await;
    assert_eq!(
        seat(&d),
        (
            "seat0".to_string(),
            OwnedObjectPath::try_from("/org/freedesktop/login1/seat/seat0").unwrap()
        )
    );
    assert_eq!(String::try_from(d["Id"].try_clone().unwrap()).unwrap(), "2");
    let s = all(ssh.path.clone()).await;
    assert_eq!(
        seat(&s),
        (String::new(), OwnedObjectPath::try_from("/").unwrap())
    );

    // Introspected: the constant ones are declared so, as logind's vtable does.
    let xml: String = conn
        .call_method(
            Some(LOGIN1),
            desk.path.as_str(),
            Some("org.freedesktop.DBus.Introspectable"),
            "Introspect",
            &(),
        )
        .await
        .unwrap()
        .body()
        .deserialize()
        .unwrap();
    for constant in [
        "Id",
        "User",
        "Name",
        "Timestamp",
        "Seat",
        "Remote",
        "RemoteHost",
    ] {
        let at = xml
            .find(&format!("<property name=\"{constant}\""))
            .unwrap_or_else(|| panic!("{constant} served:\n{xml}"));
        let decl = &xml[at..at + xml[at..].find("</property>").unwrap()];
        assert!(
            decl.contains("EmitsChangedSignal\" value=\"const\""),
            "{constant}: {decl}"
        );
    }

    // A lock: PropertiesChanged with the value, nothing invalidated.
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .path(desk.path.as_str())
        .unwrap()
        .member("PropertiesChanged")
        .unwrap()
        .build();
    let mut changes = zbus::MessageStream::for_match_rule(rule, &conn, Some(8))
        .await
        .unwrap();
    desk.hints.lock().unwrap().locked = true;
    logind.changed(&desk).await;
    let m = tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("PropertiesChanged")
        .unwrap()
        .unwrap();
    let (iface, changed, invalidated): (String, HashMap<String, OwnedValue>, Vec<String>) =
        m.body().deserialize().unwrap();
    assert_eq!(iface, "org.freedesktop.login1.Session");
    assert!(bool::try_from(&changed["LockedHint"]).unwrap());
    assert!(invalidated.is_empty(), "{invalidated:?}");
}
