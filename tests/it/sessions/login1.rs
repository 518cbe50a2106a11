//! A small implementation of what pilotd uses of `org.freedesktop.login1`, served with zbus on
//! a real `dbus-daemon` of the test's own (Debian's `dbus`; tests/run.sh installs it):
//! `Manager.ListSessions`, `Manager.Inhibit` (a real pipe: the lock is held while the caller
//! keeps its end open, as logind's), the `PrepareForSleep` signal, and the `Session`
//! properties, with the lock and idle hints a test changes. Used by the logind probe's tests
//! and by the sleep test on the real engine.
//!
//! As logind (systemd's src/login/logind-session-dbus.c and the org.freedesktop.login1 D-Bus
//! documentation): a session's `Seat` is `(so)`, `("seat0", "/org/freedesktop/login1/seat/seat0")`
//! at the machine's seat and `("", "/")` without one; its constant properties (`Id`, `User`,
//! `Name`, `Timestamp`, `Seat`, `Remote`, `RemoteHost`) never change, and a change of the
//! others (`LockedHint`, `IdleHint`…) is announced by `PropertiesChanged` carrying the new
//! values, no name invalidated (sd-bus's `EMITS_CHANGE`). Compared by hand with systemd 257's
//! logind in the real-systemd image (tests/systemd/image.sh), a PAM session of class user:
//! `busctl introspect` gives these signatures and const/emits-change flags, `Seat` `"" "/"`
//! without a seat, and `SetLockedHint` sends `PropertiesChanged` with `{"LockedHint": true}`
//! and no invalidated name (`SetIdleHint`: `IdleHint`, `IdleSinceHint`,
//! `IdleSinceHintMonotonic` with values, on the session, its user and the manager; the stand-in
//! announces only the lock).
//!
//! Inhibitor locks as logind keeps them (systemd's src/login/logind-inhibit.c and
//! logind-dbus.c): `ListInhibitors` answers `a(ssssuu)` (what, who, why, mode, uid, pid) of
//! the locks held; a lock taken or released is announced as a `PropertiesChanged` of the
//! Manager's `BlockInhibited` (block and block-weak modes) or `DelayInhibited` with its new
//! value, the union of the held locks' `what` in logind's order (`sleep:idle`), nothing
//! invalidated: systemd 257's logind in the real-systemd image announces alice's
//! `systemd-inhibit --what=idle` as `("org.freedesktop.login1.Manager", {"BlockInhibited":
//! <"idle">}, [])`, and the suite's use scenario fails if it stops doing so. The uid and pid
//! of a lock taken through `Inhibit` are its caller's, as the bus tells them; `take` stands
//! for another user's program taking one.
//!
//! The bus is shaped as the system bus where it matters here: any uid may connect and send
//! signals, only root (the test's uid) may own a name; `forge` sends a signal as `nobody`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use zbus::zvariant::OwnedObjectPath;

type Listed = (String, u32, String, String, OwnedObjectPath);

/// One inhibitor lock: what, mode, whose, and when it was released (its caller's end closed).
#[derive(Debug, Clone)]
pub struct Inhibitor {
    pub what: String,
    pub mode: String,
    pub who: String,
    pub why: String,
    pub uid: u32,
    pub pid: u32,
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

impl Shared {
    /// What the held locks of `mode`'s property inhibit together, in logind's order
    /// (`inhibit_what_to_string`): block and block-weak locks are `BlockInhibited`'s.
    fn inhibited(&self, delay: bool) -> String {
        const ORDER: [&str; 8] = [
            "shutdown",
            "sleep",
            "idle",
            "handle-power-key",
            "handle-suspend-key",
            "handle-hibernate-key",
            "handle-lid-switch",
            "handle-reboot-key",
        ];
        let held = self.inhibitors.lock().unwrap();
        let whats: Vec<&str> = held
            .iter()
            .filter(|i| i.released_at().is_none() && (i.mode == "delay") == delay)
            .flat_map(|i| i.what.split(':'))
            .collect();
        ORDER
            .iter()
            .filter(|w| whats.contains(w))
            .copied()
            .collect::<Vec<_>>()
            .join(":")
    }

    /// As logind when a lock starts or stops: `PropertiesChanged` of the Manager's
    /// `BlockInhibited` or `DelayInhibited`, with its new value, nothing invalidated.
    async fn announce(&self, conn: &zbus::Connection, mode: &str) {
        let delay = mode == "delay";
        let name = if delay {
            "DelayInhibited"
        } else {
            "BlockInhibited"
        };
        let value = zbus::zvariant::Value::from(self.inhibited(delay));
        let emitter =
            zbus::object_server::SignalEmitter::new(conn, "/org/freedesktop/login1").unwrap();
        zbus::fdo::Properties::properties_changed(
            &emitter,
            zbus::names::InterfaceName::from_static_str_unchecked("org.freedesktop.login1.Manager"),
            std::collections::HashMap::from([(name, value)]),
            std::borrow::Cow::Borrowed(&[]),
        )
        .await
        .unwrap();
    }
}

struct Manager {
    shared: Shared,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    fn list_sessions(&self) -> Vec<Listed> {
        self.shared.sessions.lock().unwrap().clone()
    }

    /// As logind: every lock still held, `(what, who, why, mode, uid, pid)`.
    fn list_inhibitors(&self) -> Vec<(String, String, String, String, u32, u32)> {
        self.shared
            .inhibitors
            .lock()
            .unwrap()
            .iter()
            .filter(|i| i.released_at().is_none())
            .map(|i| {
                let i = i.clone();
                (i.what, i.who, i.why, i.mode, i.uid, i.pid)
            })
            .collect()
    }

    #[zbus(property)]
    fn block_inhibited(&self) -> String {
        self.shared.inhibited(false)
    }

    #[zbus(property)]
    fn delay_inhibited(&self) -> String {
        self.shared.inhibited(true)
    }

    /// As logind: the caller gets one end of a pipe; the lock lasts until every copy of it is
    /// closed, which the other end sees as end-of-file. The lock is its caller's (the uid and
    /// pid the bus knows of the connection), and its start and end are announced.
    async fn inhibit(
        &self,
        what: String,
        who: String,
        why: String,
        mode: String,
        #[zbus(header)] header: zbus::message::Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> zbus::fdo::Result<zbus::zvariant::OwnedFd> {
        let failed = |e: String| zbus::fdo::Error::Failed(e);
        let caller = header
            .sender()
            .ok_or_else(|| failed("no sender".into()))?
            .to_owned();
        let dbus = zbus::fdo::DBusProxy::new(conn)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let uid = dbus
            .get_connection_unix_user(caller.clone().into())
            .await
            .map_err(|e| failed(e.to_string()))?;
        let pid = dbus
            .get_connection_unix_process_id(caller.into())
            .await
            .map_err(|e| failed(e.to_string()))?;
        let (read, write) = nix::unistd::pipe().map_err(|e| failed(e.to_string()))?;
        let released = Arc::new(Mutex::new(None));
        self.shared.inhibitors.lock().unwrap().push(Inhibitor {
            what,
            mode: mode.clone(),
            who,
            why,
            uid,
            pid,
            released: released.clone(),
        });
        self.shared.announce(conn, &mode).await;
        let (shared, conn) = (self.shared.clone(), conn.clone());
        tokio::spawn(async move {
            let _ = tokio::task::spawn_blocking(move || {
                let mut f = std::fs::File::from(read);
                let mut buf = [0u8; 1];
                let _ = std::io::Read::read(&mut f, &mut buf);
            })
            .await;
            *released.lock().unwrap() = Some(SystemTime::now());
            shared.announce(&conn, &mode).await;
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
    id: String,
    name: String,
    seat: String,
    uid: u32,
    kind: String,
    tty: String,
    remote: bool,
    since_us: u64,
    hints: Arc<Mutex<Hints>>,
}

#[zbus::interface(name = "org.freedesktop.login1.Session")]
impl LoginSession {
    #[zbus(property(emits_changed_signal = "const"))]
    fn id(&self) -> String {
        self.id.clone()
    }
    #[zbus(property(emits_changed_signal = "const"))]
    fn name(&self) -> String {
        self.name.clone()
    }
    #[zbus(property(emits_changed_signal = "const"))]
    fn user(&self) -> (u32, OwnedObjectPath) {
        (
            self.uid,
            OwnedObjectPath::try_from(format!("/org/freedesktop/login1/user/_{}", self.uid))
                .unwrap(),
        )
    }
    /// As logind: the seat's id and path, `("", "/")` for a session without one.
    #[zbus(property(emits_changed_signal = "const"))]
    fn seat(&self) -> (String, OwnedObjectPath) {
        let path = if self.seat.is_empty() {
            "/".to_string()
        } else {
            format!("/org/freedesktop/login1/seat/{}", self.seat)
        };
        (self.seat.clone(), OwnedObjectPath::try_from(path).unwrap())
    }
    #[zbus(property)]
    fn class(&self) -> String {
        "user".into()
    }
    #[zbus(property)]
    fn active(&self) -> bool {
        true
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
    #[zbus(property(emits_changed_signal = "const"))]
    fn remote(&self) -> bool {
        self.remote
    }
    #[zbus(property(emits_changed_signal = "const"))]
    fn remote_host(&self) -> String {
        if self.remote {
            "192.0.2.7".into()
        } else {
            String::new()
        }
    }
    #[zbus(property(emits_changed_signal = "const"))]
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

/// A real dbus-daemon listening on `socket`, with the system bus's rules where they matter:
/// any uid may connect and send signals, only the test's uid may own a name (so the test can
/// be logind, and `nobody` cannot).
pub(crate) fn start_bus(socket: &Path) -> Bus {
    use std::os::unix::fs::PermissionsExt;
    let dir = socket.parent().expect("the socket is in a directory");
    // `nobody` must reach the socket: the directory traversable by all (a tempdir is 0700).
    let mode = std::fs::metadata(dir).unwrap().permissions().mode();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o711)).unwrap();
    let config = dir.join("bus.conf");
    std::fs::write(
        &config,
        format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <deny own="*"/>
  </policy>
  <policy user="{uid}">
    <allow own="*"/>
  </policy>
</busconfig>
"#,
            socket = socket.display(),
            uid = nix::unistd::geteuid(),
        ),
    )
    .unwrap();
    let daemon = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--nopidfile"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dbus-daemon runs (Debian package dbus; tests/run.sh installs it)");
    // Listening once it accepts (the socket exists between its bind and its listen).
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        assert!(Instant::now() < deadline, "dbus-daemon did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Bus { daemon }
}

/// Sends a signal on the bus at `address` as another local user would: `dbus-send` run as
/// `nobody` (uid 65534) when the test is root, else as the test's uid, on a connection of its
/// own either way. `signal` is `INTERFACE.MEMBER`, `args` in dbus-send's `type:value` form.
pub fn forge(address: &str, path: &str, signal: &str, args: &[&str]) {
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "dbus-send",
        ]);
        c
    } else {
        Command::new("dbus-send")
    };
    let out = cmd
        .arg(format!("--bus={address}"))
        .args(["--type=signal", path, signal])
        .args(args)
        .output()
        .expect("dbus-send runs (Debian package dbus)");
    assert!(
        out.status.success(),
        "dbus-send as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
                    id: id.into(),
                    name: name.into(),
                    seat: if remote { "" } else { "seat0" }.into(),
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

    /// `PropertiesChanged` on a session after its lock changed, as logind sends it: the new
    /// `LockedHint` with its value, nothing invalidated.
    pub async fn changed(&self, added: &Added) {
        let iface = self
            .conn()
            .object_server()
            .interface::<_, LoginSession>(added.path.as_str())
            .await
            .unwrap();
        iface
            .get()
            .await
            .locked_hint_changed(iface.signal_emitter())
            .await
            .unwrap();
    }

    /// The connection that owns `org.freedesktop.login1` (to send as logind, or to check who
    /// sent what).
    pub fn connection(&self) -> &zbus::Connection {
        self.conn()
    }

    pub fn inhibitors(&self) -> Vec<Inhibitor> {
        self.shared.inhibitors.lock().unwrap().clone()
    }

    /// Another program takes a lock, as user `uid` from process `pid` (`systemd-inhibit
    /// --what=idle` in her session, a player): held until `release`, announced as logind does.
    pub async fn take(&self, what: &str, mode: &str, uid: u32, pid: u32) -> Inhibitor {
        let lock = Inhibitor {
            what: what.into(),
            mode: mode.into(),
            who: "a film player".into(),
            why: "Playing a film the test made up".into(),
            uid,
            pid,
            released: Arc::new(Mutex::new(None)),
        };
        self.shared.inhibitors.lock().unwrap().push(lock.clone());
        self.shared.announce(self.conn(), mode).await;
        lock
    }

    /// The program ends its lock.
    pub async fn release(&self, lock: &Inhibitor) {
        *lock.released.lock().unwrap() = Some(SystemTime::now());
        self.shared.announce(self.conn(), &lock.mode).await;
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
