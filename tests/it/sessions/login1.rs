//! A small implementation of what pilotd uses of `org.freedesktop.login1`, served with zbus on
//! a real `dbus-daemon` of the test's own (Debian's `dbus`; tests/run.sh installs it):
//! `Manager.ListSessions`, `Manager.Inhibit` (a real pipe: the lock is held while the caller
//! keeps its end open, as logind's), the `PrepareForSleep` signal, and the `Session`
//! properties, with the lock and idle hints a test changes. Used by the logind probe's tests
//! and by the sleep test on the real engine.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use zbus::zvariant::OwnedObjectPath;

type Listed = (String, u32, String, String, OwnedObjectPath);

/// One inhibitor lock a caller took: what, mode, and when its end was closed (released).
#[derive(Debug, Clone)]
pub struct Inhibitor {
    pub what: String,
    pub mode: String,
    pub released: Arc<Mutex<Option<SystemTime>>>,
}

impl Inhibitor {
    pub fn released_at(&self) -> Option<SystemTime> {
        *self.released.lock().unwrap()
    }
}

#[derive(Default, Clone)]
struct Shared {
    sessions: Arc<Mutex<Vec<Listed>>>,
    inhibitors: Arc<Mutex<Vec<Inhibitor>>>,
}

struct Manager {
    shared: Shared,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    fn list_sessions(&self) -> Vec<Listed> {
        self.shared.sessions.lock().unwrap().clone()
    }

    /// As logind: the caller gets one end of a pipe; the lock lasts until every copy of it is
    /// closed, which the other end sees as end-of-file.
    fn inhibit(
        &self,
        what: String,
        _who: String,
        _why: String,
        mode: String,
    ) -> zbus::fdo::Result<zbus::zvariant::OwnedFd> {
        let (read, write) =
            nix::unistd::pipe().map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        let released = Arc::new(Mutex::new(None));
        let r = released.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::File::from(read);
            let mut buf = [0u8; 1];
            let _ = std::io::Read::read(&mut f, &mut buf);
            *r.lock().unwrap() = Some(SystemTime::now());
        });
        self.shared.inhibitors.lock().unwrap().push(Inhibitor {
            what,
            mode,
            released,
        });
        Ok(zbus::zvariant::OwnedFd::from(write))
    }
}

/// What a test changes of one session.
#[derive(Debug, Clone, Default)]
pub struct Hints {
    pub idle: bool,
    /// µs since the epoch.
    pub idle_since_us: u64,
    pub locked: bool,
}

struct LoginSession {
    name: String,
    uid: u32,
    kind: String,
    tty: String,
    remote: bool,
    since_us: u64,
    hints: Arc<Mutex<Hints>>,
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
        self.kind.clone()
    }
    #[zbus(property, name = "TTY")]
    fn tty(&self) -> String {
        self.tty.clone()
    }
    #[zbus(property)]
    fn display(&self) -> String {
        String::new()
    }
    #[zbus(property)]
    fn remote(&self) -> bool {
        self.remote
    }
    #[zbus(property)]
    fn remote_host(&self) -> String {
        if self.remote {
            "192.0.2.7".into()
        } else {
            String::new()
        }
    }
    #[zbus(property)]
    fn timestamp(&self) -> u64 {
        self.since_us
    }
    #[zbus(property)]
    fn idle_hint(&self) -> bool {
        self.hints.lock().unwrap().idle
    }
    #[zbus(property)]
    fn idle_since_hint(&self) -> u64 {
        self.hints.lock().unwrap().idle_since_us
    }
    #[zbus(property)]
    fn locked_hint(&self) -> bool {
        self.hints.lock().unwrap().locked
    }
}

pub(crate) struct Bus {
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
pub(crate) fn start_bus(socket: &Path) -> Bus {
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

/// A session a test added: its hints to change, and its path.
pub struct Added {
    pub hints: Arc<Mutex<Hints>>,
    pub path: OwnedObjectPath,
}

/// logind on a bus of the test's own. Dropping it stops the bus.
pub struct FakeLogind {
    pub address: String,
    shared: Shared,
    conn: Option<zbus::Connection>,
    _bus: Bus,
}

/// The kind of session a test adds.
pub enum Kind {
    /// A graphical session at the machine's seat.
    Desk,
    /// An ssh login.
    Ssh,
}

impl FakeLogind {
    pub async fn start(dir: &Path) -> FakeLogind {
        let socket = dir.join("bus");
        let address = format!("unix:path={}", socket.display());
        let bus = start_bus(&socket);
        let shared = Shared::default();
        let conn = zbus::connection::Builder::address(address.as_str())
            .unwrap()
            .name("org.freedesktop.login1")
            .unwrap()
            .serve_at(
                "/org/freedesktop/login1",
                Manager {
                    shared: shared.clone(),
                },
            )
            .unwrap()
            .build()
            .await
            .unwrap();
        FakeLogind {
            address,
            shared,
            conn: Some(conn),
            _bus: bus,
        }
    }

    fn conn(&self) -> &zbus::Connection {
        self.conn.as_ref().expect("logind is up")
    }

    /// Adds session `id` of `name` (uid `uid`), logged in an hour ago.
    pub async fn add(&self, id: &str, name: &str, uid: u32, kind: Kind) -> Added {
        let path =
            OwnedObjectPath::try_from(format!("/org/freedesktop/login1/session/_3{id}")).unwrap();
        let hints = Arc::new(Mutex::new(Hints::default()));
        let (kind, tty, remote) = match kind {
            Kind::Desk => ("wayland", "", false),
            Kind::Ssh => ("tty", "pts/0", true),
        };
        self.conn()
            .object_server()
            .at(
                path.as_str(),
                LoginSession {
                    name: name.into(),
                    uid,
                    kind: kind.into(),
                    tty: tty.into(),
                    remote,
                    since_us: micros_ago(Duration::from_secs(3600)),
                    hints: hints.clone(),
                },
            )
            .await
            .unwrap();
        self.shared.sessions.lock().unwrap().push((
            id.into(),
            uid,
            name.into(),
            if remote { "" } else { "seat0" }.into(),
            path.clone(),
        ));
        Added { hints, path }
    }

    pub async fn remove(&self, added: &Added) {
        self.shared
            .sessions
            .lock()
            .unwrap()
            .retain(|s| s.4 != added.path);
        self.conn()
            .object_server()
            .remove::<LoginSession, _>(added.path.as_str())
            .await
            .unwrap();
    }

    /// A signal on the manager, as logind sends them.
    pub async fn emit<B>(&self, member: &str, body: &B)
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn()
            .emit_signal(
                None::<&str>,
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager",
                member,
                body,
            )
            .await
            .unwrap();
    }

    /// `PropertiesChanged` on a session (what logind sends when a hint changes).
    pub async fn changed(&self, added: &Added) {
        let changed: std::collections::HashMap<&str, zbus::zvariant::Value<'_>> =
            std::collections::HashMap::new();
        self.conn()
            .emit_signal(
                None::<&str>,
                added.path.as_str(),
                "org.freedesktop.DBus.Properties",
                "PropertiesChanged",
                &(
                    "org.freedesktop.login1.Session",
                    changed,
                    vec!["LockedHint"],
                ),
            )
            .await
            .unwrap();
    }

    pub fn inhibitors(&self) -> Vec<Inhibitor> {
        self.shared.inhibitors.lock().unwrap().clone()
    }

    /// logind leaves the bus (the bus itself stays).
    pub fn leave(&mut self) {
        self.conn = None;
    }
}

pub fn micros_ago(d: Duration) -> u64 {
    (std::time::SystemTime::now() - d)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}
