//! The session probe that answers on today's desktops: systemd-logind over D-Bus. Graphical
//! sessions (GNOME or KDE on Wayland) are tracked by logind and often never reach utmp, and
//! Debian 13's systemd no longer creates utmp at all; logind also knows the screen lock
//! (`LockedHint`) and, where the desktop tells it, idleness (`IdleHint`, `IdleSinceHint`).
//!
//! What pilotd uses of `org.freedesktop.login1` (and the test implementation in
//! tests/it/sessions/login1.rs serves): `Manager.ListSessions()`, `Manager.ListInhibitors()`
//! (of each lock only what it inhibits, its mode and its uid: never `who` or `why`, which
//! name a program and its reason), `Manager.Inhibit()` (a delay lock on sleep; a block lock
//! on idle when the owner asks to keep the machine awake), the `PrepareForSleep` signal, the
//! Manager's `PropertiesChanged` of `BlockInhibited`/`DelayInhibited` (an inhibitor taken or
//! released), and for each session the `org.freedesktop.login1.Session` properties `Name`,
//! `Class`, `State`, `Active`, `Type`, `Remote`, `RemoteHost`, `TTY`, `Display`, `Seat`,
//! `Timestamp`, `IdleHint`, `IdleSinceHint`, `LockedHint`, `Leader` and `Scope` (one
//! `GetAll`).
//!
//! An idle inhibitor (`what` holding `idle`) is someone using the machine without typing: a
//! player or a presentation keeping the screen on, `systemd-inhibit --what=idle`. It is laid
//! on the snapshot as a use of its uid (`InUse`); pilotd's own locks (its pid) are left out.
//!
//! A graphical session's `IdleSinceHint` is 0 until its desktop first calls `SetIdleHint`
//! (logind stamps it only on a change: systemd's src/login/logind-session.c,
//! `session_set_idle_hint`), so a non-zero one is a desktop that reports idleness (GNOME).
//! A text session's is logind's own reading of its terminal, and says nothing of a desktop.
//!
//! Idle: a graphical session's is its desktop's word (`IdleHint`, `IdleSinceHint`). Any other
//! session (a text login, ssh) is judged by its terminals, as utmp's lines are: the most recent
//! use (atime) of its `TTY` and of the controlling terminals of its processes (`terminals`:
//! its leader and every process in its scope cgroup). logind cannot say it: it refuses idle
//! hints from text sessions, and an ssh session's `TTY` is empty (sshd opens the PAM session
//! before it allocates the pty), so its `IdleHint` stays false for good. A session none of
//! whose processes has a terminal falls back to logind's hint, and without one is in use.
//!
//! Observation only: every user-class session that is not closing is reported; deciding which
//! users matter, and whether a locked or idle session is away, is the policy's job. logind that
//! cannot be reached is not "nobody": the snapshot says so (`logind_unavailable`), sessions are
//! then utmp's alone, and without utmp either they are unknown (the owner is assumed here).
//! While the bus is away, it is asked again with a back-off up to `RETRY.max`, not every cycle:
//! an idle daemon on a machine without D-Bus must cost next to nothing.
//!
//! The bus is the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set, as every D-Bus client).
//!
//! Its signals are believed only from the owner of `org.freedesktop.login1`: any local user may
//! send a `PrepareForSleep` on the system bus, which believed would evict the workers and keep
//! them stopped until a real wake-up (`bus`, issue 35).
//!
//! An urgent look (`observe_urgent`) that follows only inhibitor announcements asks logind for
//! its locks alone and takes the sessions as they were last listed, their terminals looked at
//! anew: logind announces every change of a session (`Signal::Sessions`, which the watch
//! notes in `SessionNews`), and the sessions' `GetAll` is a second round trip through a logind
//! that, on a busy machine, waits for the CPU at each one while the owner waits for the pause.

use crate::observe::bus::BusWatch;
use crate::observe::terminals;
use crate::snapshot::{HostSnapshot, InUse, Session, Sessions, UseKind};
use chrono::{DateTime, Utc};
use pilotd_core::backoff::Backoff;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

/// One look at logind may take this long; past it, utmp alone decides this cycle.
pub(crate) const DEADLINE: Duration = Duration::from_millis(1500);

/// How often an absent logind is asked again (observations and the signal watch alike).
pub(crate) const RETRY: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));

const SERVICE: &str = "org.freedesktop.login1";
const MANAGER_PATH: &str = "/org/freedesktop/login1";
const MANAGER: &str = "org.freedesktop.login1.Manager";
const SESSION: &str = "org.freedesktop.login1.Session";

/// The logind client: a bus connection kept between cycles (made again after a failure), when
/// pilotd first saw each session locked, and the inhibitor locks it holds.
#[derive(Default)]
pub struct Logind {
    conn: Option<zbus::Connection>,
    /// Where text sessions' terminals are looked for (`terminals`).
    roots: Roots,
    /// Session id → the first observation that found it locked (logind has no lock time).
    locked: HashMap<String, DateTime<Utc>>,
    /// Consecutive failures, and the last one's reason, for the back-off.
    failures: u32,
    retry_at: Option<DateTime<Utc>>,
    last_error: String,
    /// The delay lock on sleep: held while awake, released once workers made room.
    sleep_lock: Option<OwnedFd>,
    /// The block lock on idle (the owner's `keep_awake`), held while workers compute.
    awake_lock: Option<OwnedFd>,
    /// The sessions as logind last listed them, for an urgent look after inhibitor news only.
    listed: Option<Vec<Raw>>,
    /// logind announced a session change since `listed` was asked for (`watch`).
    news: SessionNews,
}

/// Set by the watch when logind announces a session change (`Signal::Sessions`), taken by each
/// look that lists the sessions: an urgent look while it is unset lists only the inhibitors.
#[derive(Debug, Clone, Default)]
pub struct SessionNews(Arc<AtomicBool>);

impl SessionNews {
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// The process and device directories a text session's terminals are found in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Roots {
    proc: PathBuf,
    dev: PathBuf,
}

impl Default for Roots {
    fn default() -> Roots {
        Roots {
            proc: "/proc".into(),
            dev: "/dev".into(),
        }
    }
}

/// What logind said: its sessions and the uses its idle inhibitors stand for, or why it could
/// not be asked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    Sessions {
        sessions: Vec<LogindSession>,
        inhibitors: Vec<InUse>,
    },
    Unavailable(String),
}

/// One logind session as seen, with its id (to recognise it in utmp and across cycles).
#[derive(Debug, Clone, PartialEq)]
pub struct LogindSession {
    pub id: String,
    pub session: Session,
    /// The session in front at its seat (`Active`, with a seat): whom a sound no process can
    /// be found for is attributed to.
    pub foreground: bool,
}

/// An inhibitor lock as pilotd keeps it: what it inhibits (`sleep:idle`...), its mode and
/// whose. Never `who` or `why`: they name a program and its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inhibitor {
    pub what: String,
    pub mode: String,
    pub uid: u32,
}

impl Inhibitor {
    /// Holds off idleness: someone is using the machine, typing or not. (logind takes idle
    /// locks only in a block mode; a delay on idle is not one.)
    pub(crate) fn is_idle(&self) -> bool {
        self.what.split(':').any(|w| w == "idle") && self.mode != "delay"
    }
}

/// What logind announced on the bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A session new or removed, a property (lock, idle) changed.
    Sessions,
    /// `PrepareForSleep(true)`: the machine goes to sleep once the delay locks are released;
    /// `(false)`: it woke up.
    Sleep(bool),
    /// An inhibitor lock was taken or released (the Manager's `BlockInhibited` or
    /// `DelayInhibited` changed): paced apart from the sessions, so a program taking and
    /// releasing locks in a loop never holds back an unlock's cycle.
    Inhibitors,
}

impl Logind {
    /// A client that already knows since when sessions have been seen locked (the running
    /// daemon's record, `status::Status::locks`), so a one-shot `pilotd plan` dates a lock as
    /// the daemon does instead of to its own look.
    pub(crate) fn remembering(locked: impl IntoIterator<Item = (String, DateTime<Utc>)>) -> Logind {
        Logind {
            locked: locked.into_iter().collect(),
            ..Logind::default()
        }
    }

    /// This client, finding text sessions' terminals under `proc` and `dev` (the probe's
    /// settings; /proc and /dev by default).
    pub(crate) fn looking_in(self, proc: impl Into<PathBuf>, dev: impl Into<PathBuf>) -> Logind {
        Logind {
            roots: Roots {
                proc: proc.into(),
                dev: dev.into(),
            },
            ..self
        }
    }

    /// What the watch sets when logind announces a session change (`watch`).
    pub(crate) fn news(&self) -> SessionNews {
        self.news.clone()
    }

    /// Since when each session has been seen locked, by session id ("when" only).
    pub(crate) fn locks(&self) -> std::collections::BTreeMap<String, DateTime<Utc>> {
        self.locked.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// The sessions logind knows at `now`, within `DEADLINE`; while in back-off, the last
    /// failure without asking.
    pub(crate) async fn observe(&mut self, now: DateTime<Utc>) -> Seen {
        self.look(now, false).await
    }

    /// `observe` for an urgent cycle: with no session change announced since the sessions were
    /// last listed, only the inhibitor locks are asked for (one round trip instead of two).
    pub(crate) async fn observe_urgent(&mut self, now: DateTime<Utc>) -> Seen {
        self.look(now, true).await
    }

    async fn look(&mut self, now: DateTime<Utc>, urgent: bool) -> Seen {
        if self.retry_at.is_some_and(|t| now < t) {
            return Seen::Unavailable(self.last_error.clone());
        }
        // Taken before asking: news arriving meanwhile is for the next look.
        let news = self.news.take();
        let listed = match self.listed.take() {
            Some(l) if urgent && !news && self.conn.is_some() => Some(l),
            _ => None,
        };
        let asked = std::time::Instant::now();
        let ask = async {
            match listed {
                Some(l) => Ok((l, self.ask_inhibitors().await?)),
                None => self.ask().await,
            }
        };
        let answer = match tokio::time::timeout(DEADLINE, ask).await {
            Ok(Ok(list)) => {
                tracing::debug!(
                    "logind answered in {:.1} ms",
                    asked.elapsed().as_secs_f64() * 1e3
                );
                Ok(list)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", DEADLINE.as_millis())),
        };
        match answer {
            Ok((list, inhibitors)) => {
                self.failures = 0;
                self.retry_at = None;
                let sessions = self.seen(&list, now);
                self.listed = Some(list);
                Seen::Sessions {
                    sessions,
                    inhibitors: idle_uses(&inhibitors, crate::observe::media::user_of),
                }
            }
            Err(why) => {
                self.conn = None;
                self.listed = None;
                self.sleep_lock = None;
                self.awake_lock = None;
                self.failures = self.failures.saturating_add(1);
                self.retry_at = Some(RETRY.retry_at(now, self.failures));
                self.last_error = why.clone();
                Seen::Unavailable(why)
            }
        }
    }

    /// The raw answers as sessions, with each locked one's first sighting carried over and
    /// each text session's terminals looked at.
    fn seen(&mut self, list: &[Raw], now: DateTime<Utc>) -> Vec<LogindSession> {
        let used = self.terminals_used(list);
        let mut out = Vec::with_capacity(list.len());
        let mut locked = HashMap::new();
        for (r, used) in list.iter().zip(used) {
            let since = (boolean(&r.props, "LockedHint") == Some(true))
                .then(|| *self.locked.get(&r.id).unwrap_or(&now));
            if let Some(t) = since {
                locked.insert(r.id.clone(), t);
            }
            if let Some(mut s) = session_of(&r.id, r.uid, &r.user, &r.props, used, now) {
                s.locked_since = since;
                let foreground =
                    boolean(&r.props, "Active") == Some(true) && !seat(&r.props).is_empty();
                out.push(LogindSession {
                    id: r.id.clone(),
                    session: s,
                    foreground,
                });
            }
        }
        self.locked = locked;
        out
    }

    /// For each session (same order), the last use of its terminals: its `TTY` and its
    /// processes' controlling terminals. None for graphical sessions (their desktop says when
    /// they were used) and for sessions without a terminal. /proc is walked only when a text
    /// session is there.
    fn terminals_used(&self, list: &[Raw]) -> Vec<Option<DateTime<Utc>>> {
        let text: Vec<bool> = list.iter().map(|r| text_session(&r.props)).collect();
        if !text.contains(&true) {
            return vec![None; list.len()];
        }
        let wanted: Vec<terminals::Wanted> = list
            .iter()
            .zip(&text)
            .map(|(r, text)| match text {
                true => terminals::Wanted {
                    scope: string(&r.props, "Scope").filter(|s| !s.is_empty()),
                    leader: all_u32(&r.props, "Leader").filter(|p| *p > 0),
                },
                false => terminals::Wanted::default(),
            })
            .collect();
        let by_process = terminals::last_use(&self.roots.proc, &self.roots.dev, &wanted);
        list.iter()
            .zip(text)
            .zip(by_process)
            .map(|((r, text), by_process)| {
                let tty = string(&r.props, "TTY")
                    .filter(|t| text && !t.is_empty())
                    .and_then(|t| terminals::line_atime(&self.roots.dev, &t));
                by_process.max(tty)
            })
            .collect()
    }

    async fn connection(&mut self) -> zbus::Result<zbus::Connection> {
        match &self.conn {
            Some(c) => Ok(c.clone()),
            None => {
                let c = zbus::Connection::system().await?;
                self.conn = Some(c.clone());
                Ok(c)
            }
        }
    }

    /// Every session with all its properties, and the inhibitor locks: the two lists, then
    /// each session's `GetAll`, those asked together (one round trip through the bus instead
    /// of one per session: an owner's unlock waits for this answer). Plain method calls, no
    /// proxies: a proxy may first ask the bus for the name's owner and subscribe to signals.
    async fn ask(&mut self) -> zbus::Result<(Vec<Raw>, Vec<Inhibitor>)> {
        let conn = self.connection().await?;
        let call = |method: &'static str| {
            conn.call_method(Some(SERVICE), MANAGER_PATH, Some(MANAGER), method, &())
        };
        let (list, inhibitors) =
            futures_util::future::join(call("ListSessions"), call("ListInhibitors")).await;
        let list: Vec<(String, u32, String, String, OwnedObjectPath)> =
            list?.body().deserialize()?;
        let inhibitors = inhibitors_answered(inhibitors)?;
        let answers = futures_util::future::join_all(list.iter().map(|(.., path)| {
            conn.call_method(
                Some(SERVICE),
                path.as_str(),
                Some("org.freedesktop.DBus.Properties"),
                "GetAll",
                &(SESSION,),
            )
        }))
        .await;
        let mut out = Vec::with_capacity(list.len());
        for ((id, uid, user, _seat, _path), answer) in list.into_iter().zip(answers) {
            let all: HashMap<String, OwnedValue> = match answer {
                Ok(m) => m.body().deserialize()?,
                // A session that ended between the list and this question is simply gone.
                Err(zbus::Error::MethodError(..)) => continue,
                Err(e) => return Err(e),
            };
            out.push(Raw {
                id,
                uid,
                user,
                props: all,
            });
        }
        Ok((out, inhibitors))
    }

    /// The inhibitor locks alone.
    async fn ask_inhibitors(&mut self) -> zbus::Result<Vec<Inhibitor>> {
        let conn = self.connection().await?;
        inhibitors_answered(
            conn.call_method(
                Some(SERVICE),
                MANAGER_PATH,
                Some(MANAGER),
                "ListInhibitors",
                &(),
            )
            .await,
        )
    }

    /// Holds a delay lock on sleep while awake, so that a suspend waits (at most logind's
    /// `InhibitDelayMaxSec`) for the workers to make room. Called after each observation
    /// that reached logind; a refusal is logged once and tried again at the next.
    pub(crate) async fn hold_sleep_lock(&mut self) {
        if self.sleep_lock.is_some() || self.conn.is_none() {
            return;
        }
        match self
            .inhibit(
                "sleep",
                "delay",
                "workers make room for the owner before the machine sleeps",
            )
            .await
        {
            Ok(fd) => self.sleep_lock = Some(fd),
            Err(e) => tracing::debug!("cannot take logind's sleep delay lock: {e}"),
        }
    }

    /// Lets the sleep go on: called once the workers made room (or at once when there are
    /// none). Taken again after the wake-up.
    pub(crate) fn release_sleep_lock(&mut self) {
        self.sleep_lock = None;
    }

    /// Whether the sleep delay lock is held (status, tests).
    pub(crate) fn holds_sleep_lock(&self) -> bool {
        self.sleep_lock.is_some()
    }

    /// The owner's `keep_awake`: while `on`, a block lock on "idle" keeps the machine from
    /// sleeping on its own idle timer. It never blocks a sleep the owner asks for (that is
    /// the "sleep" lock's business, which pilotd only ever takes in delay mode).
    pub(crate) async fn keep_awake(&mut self, on: bool) {
        if !on {
            self.awake_lock = None;
            return;
        }
        if self.awake_lock.is_some() || self.conn.is_none() {
            return;
        }
        match self
            .inhibit(
                "idle",
                "block",
                "workers compute for an HTCondor pool in the owner's window",
            )
            .await
        {
            Ok(fd) => self.awake_lock = Some(fd),
            Err(e) => tracing::debug!("cannot take logind's idle lock: {e}"),
        }
    }

    async fn inhibit(&mut self, what: &str, mode: &str, why: &str) -> zbus::Result<OwnedFd> {
        let conn = self.connection().await?;
        let manager = zbus::Proxy::new(&conn, SERVICE, MANAGER_PATH, MANAGER).await?;
        let fd: zbus::zvariant::OwnedFd = tokio::time::timeout(
            DEADLINE,
            manager.call("Inhibit", &(what, "pilotd", why, mode)),
        )
        .await
        .map_err(|_| zbus::Error::Failure("no answer".into()))??;
        Ok(fd.into())
    }
}

/// `ListInhibitors`' answer as the locks, none where logind will not list them: the locks
/// only add to what the sessions say, and an older or a stand-in logind leaves the sessions
/// as they are.
fn inhibitors_answered(answer: zbus::Result<zbus::Message>) -> zbus::Result<Vec<Inhibitor>> {
    match answer {
        Ok(m) => inhibitors_of(&m),
        Err(zbus::Error::MethodError(name, ..)) => {
            tracing::debug!("logind does not list its inhibitors ({name})");
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// `ListInhibitors`' answer (`a(ssssuu)`: what, who, why, mode, uid, pid), each lock reduced
/// at once to what, mode and uid, and this process's own locks (the sleep delay, the idle
/// lock of `keep_awake`) left out.
fn inhibitors_of(m: &zbus::Message) -> zbus::Result<Vec<Inhibitor>> {
    Ok(reduced(m.body().deserialize()?, std::process::id()))
}

/// `ListInhibitors`' entries without content and without the locks of process `me`.
fn reduced(all: Vec<(String, String, String, String, u32, u32)>, me: u32) -> Vec<Inhibitor> {
    all.into_iter()
        .filter(|(.., pid)| *pid != me)
        .map(|(what, _who, _why, mode, uid, _pid)| Inhibitor { what, mode, uid })
        .collect()
}

/// The uses the idle inhibitors stand for: one per uid holding one, named by `user_of`.
pub(crate) fn idle_uses(
    inhibitors: &[Inhibitor],
    user_of: impl Fn(u32) -> Option<String>,
) -> Vec<InUse> {
    let mut uids: Vec<u32> = inhibitors
        .iter()
        .filter(|i| i.is_idle())
        .map(|i| i.uid)
        .collect();
    uids.sort_unstable();
    uids.dedup();
    uids.into_iter()
        .map(|uid| InUse {
            kind: UseKind::IdleInhibitor,
            user: user_of(uid),
            uid: Some(uid),
            by_seat: false,
        })
        .collect()
}

/// One session's answer from the bus, before it is read.
struct Raw {
    id: String,
    uid: u32,
    user: String,
    props: HashMap<String, OwnedValue>,
}

/// logind as the daemon watches it: its signals under its path, believed only from the owner
/// of `org.freedesktop.login1` (any local user can send a `PrepareForSleep` of their own;
/// `bus`), and each kind passed at most once a second (the first at once).
const WATCH: BusWatch<Signal> = BusWatch {
    name: SERVICE,
    path: MANAGER_PATH,
    subtree: true,
    read: signal_of,
    owner_changed: None,
    pace: PACE,
    retry: RETRY,
};

/// What logind's signals set off (a cycle, a sleep) is passed at most once per this long and
/// kind: a burst of session changes is one cycle, the latest state one `PACE` later.
pub const PACE: Duration = Duration::from_secs(1);

/// Calls `wake` for every signal logind sends (a session new or removed, a property such as
/// `IdleHint` or `LockedHint` changed, the machine about to sleep or just woken), so a login,
/// an unlock or a suspend is acted on at once. Watches again with `RETRY`'s back-off while
/// the bus is away; returns when `wake` says to stop.
pub(crate) async fn watch(wake: impl FnMut(Signal) -> bool) {
    watch_on(None, wake).await
}

/// `watch` on the bus at `address` (None: the system bus).
pub async fn watch_on(address: Option<&str>, wake: impl FnMut(Signal) -> bool) {
    crate::observe::bus::watch(&WATCH, address, wake).await
}

/// What a signal from logind means to pilotd.
fn signal_of(m: &zbus::Message) -> Option<Signal> {
    let header = m.header();
    let member = header.member().map(|n| n.as_str());
    if member == Some("PrepareForSleep")
        && let Ok(going) = m.body().deserialize::<bool>()
    {
        return Some(Signal::Sleep(going));
    }
    // logind announces a lock taken or released as a change of the Manager's
    // `BlockInhibited` or `DelayInhibited` (systemd's src/login/logind-inhibit.c).
    if member == Some("PropertiesChanged")
        && header.path().is_some_and(|p| p.as_str() == MANAGER_PATH)
        && let Ok((iface, changed, invalidated)) = m.body().deserialize::<(
            String,
            HashMap<String, zbus::zvariant::Value<'_>>,
            Vec<String>,
        )>()
        && iface == MANAGER
        && changed
            .keys()
            .chain(&invalidated)
            .any(|k| k.ends_with("Inhibited"))
    {
        return Some(Signal::Inhibitors);
    }
    Some(Signal::Sessions)
}

fn string(all: &HashMap<String, OwnedValue>, key: &str) -> Option<String> {
    all.get(key)
        .and_then(|v| String::try_from(v.try_clone().ok()?).ok())
}

fn boolean(all: &HashMap<String, OwnedValue>, key: &str) -> Option<bool> {
    all.get(key).and_then(|v| bool::try_from(v).ok())
}

fn all_u32(all: &HashMap<String, OwnedValue>, key: &str) -> Option<u32> {
    all.get(key).and_then(|v| u32::try_from(v).ok())
}

/// A session of a known type that is not graphical (`tty`, `unspecified`...): no desktop
/// tells logind when it is idle, its terminals do. A missing type keeps logind's hints.
fn text_session(all: &HashMap<String, OwnedValue>) -> bool {
    string(all, "Type").is_some_and(|t| !matches!(t.as_str(), "x11" | "wayland" | "mir"))
}

fn micros(all: &HashMap<String, OwnedValue>, key: &str) -> Option<u64> {
    all.get(key).and_then(|v| u64::try_from(v).ok())
}

/// The seat's id of a session (`Seat` is a `(so)` pair); empty when it has none.
fn seat(all: &HashMap<String, OwnedValue>) -> String {
    all.get("Seat")
        .and_then(|v| <(String, OwnedObjectPath)>::try_from(v.try_clone().ok()?).ok())
        .map(|(id, _)| id)
        .unwrap_or_default()
}

fn instant(us: u64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(i64::try_from(us).ok()?)
}

/// One logind session as pilotd's `Session`, or None for what is not a person's session
/// (greeters, lock screens, the user's service manager, a session that is closing).
/// `terminal_used`: the last use of a text session's terminals (`Logind::terminals_used`).
/// Pure.
fn session_of(
    id: &str,
    uid: u32,
    user: &str,
    all: &HashMap<String, OwnedValue>,
    terminal_used: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<Session> {
    // Only a person's session: not `greeter`, `lock-screen`, `manager` (systemd --user) or
    // `background`, whatever systemd adds next. A missing class is counted (fail safe).
    if string(all, "Class").is_some_and(|c| c != "user") {
        return None;
    }
    if string(all, "State").as_deref() == Some("closing") {
        return None;
    }
    let tty = string(all, "TTY").unwrap_or_default();
    let line = Some(tty.clone())
        .filter(|t| !t.is_empty())
        .or_else(|| string(all, "Display").filter(|d| !d.is_empty()))
        .unwrap_or_else(|| format!("logind session {id}"));
    let remote = boolean(all, "Remote") == Some(true);
    let host = if remote {
        string(all, "RemoteHost").unwrap_or_default()
    } else {
        String::new()
    };
    // At this machine's keyboard: a seat, a graphical type, or a virtual console.
    let kind = string(all, "Type").unwrap_or_default();
    let local = !remote
        && (!seat(all).is_empty()
            || matches!(kind.as_str(), "x11" | "wayland" | "mir")
            || tty.starts_with("tty"));
    let login = micros(all, "Timestamp").and_then(instant).unwrap_or(now);
    // A text session is as idle as its most recently used terminal: logind's hint of it
    // only turns true after its IdleActionSec (30 min by default), and is false for good when
    // logind cannot find the terminal (an ssh session, whose `TTY` is empty). Its
    // `IdleSinceHint` is that terminal's atime where logind found it.
    let text = text_session(all);
    let terminal_used = match (text, micros(all, "IdleSinceHint").filter(|us| *us > 0)) {
        (true, Some(us)) => terminal_used.max(instant(us)),
        (true, None) => terminal_used,
        (false, _) => None,
    };
    // Otherwise idle as logind says: not idle is idle for 0 s; idle since an instant is idle
    // for that long; a missing hint is unknown, which the policy counts as active (fail safe).
    let idle_s = match (
        terminal_used,
        boolean(all, "IdleHint"),
        micros(all, "IdleSinceHint"),
    ) {
        (Some(t), ..) => Some(crate::observe::sessions::idle_seconds(now, t)),
        (None, Some(false), _) => Some(0),
        (None, Some(true), Some(since)) if since > 0 => {
            instant(since).map(|t| (now - t).num_seconds().max(0) as u64)
        }
        _ => None,
    };
    Some(Session {
        user: string(all, "Name").unwrap_or_else(|| user.to_string()),
        uid: Some(uid),
        line,
        host,
        login,
        idle_s,
        local,
        // The first sighting of a lock is the caller's to carry (`Logind::seen`).
        locked_since: None,
        // Stamped by logind only when the desktop changed the hint (a text session's is its
        // terminal's atime, logind's own reading).
        idle_reported: matches!(kind.as_str(), "x11" | "wayland" | "mir")
            && micros(all, "IdleSinceHint").is_some_and(|us| us > 0),
    })
}

/// Lays what logind saw on an observation made from utmp.
///
/// - logind answered: its sessions join utmp's; a utmp record of the same user on the same
///   terminal is the same session and gives way to logind's, which knows its lock. Without a
///   utmp file, logind's sessions are the whole truth (Debian 13). Its idle inhibitors join
///   the uses the host probe found, each named as its uid's sessions are, and a use no
///   process could be found for (a sound stream whose holder pilotd cannot see) is
///   attributed to the user in front at the seat.
/// - logind could not be asked: the snapshot says why, and utmp alone decides; without utmp
///   either, the sessions stay unknown (the owner is assumed here).
///
/// An unreadable or corrupt utmp stays unknown whatever logind says.
pub(crate) fn lay_on(h: &mut HostSnapshot, seen: Seen) {
    match seen {
        Seen::Sessions {
            sessions,
            inhibitors,
        } => {
            h.logind_unavailable = None;
            let in_front: Vec<(String, Option<u32>)> = sessions
                .iter()
                .filter(|s| s.foreground)
                .map(|s| (s.session.user.clone(), s.session.uid))
                .collect();
            // A uid is named as its sessions are, so a use and a login of one user read as
            // one person (the user database may lag, or name a uid otherwise in a container).
            let named: Vec<(u32, String)> = sessions
                .iter()
                .filter_map(|s| Some((s.session.uid?, s.session.user.clone())))
                .collect();
            let list: Vec<Session> = sessions.into_iter().map(|s| s.session).collect();
            match &mut h.sessions {
                Sessions::Known(v) => {
                    v.retain(|u| !list.iter().any(|l| l.user == u.user && l.line == u.line));
                    v.extend(list);
                }
                Sessions::Unknown(_) if h.utmp_absent => h.sessions = Sessions::Known(list),
                Sessions::Unknown(_) => {}
            }
            let mut uses = Vec::with_capacity(h.in_use.len() + inhibitors.len());
            for mut u in std::mem::take(&mut h.in_use).into_iter().chain(inhibitors) {
                if let Some((_, name)) = named.iter().find(|(uid, _)| Some(*uid) == u.uid) {
                    u.user = Some(name.clone());
                }
                if u.uid.is_some() || in_front.is_empty() {
                    uses.push(u);
                    continue;
                }
                uses.extend(in_front.iter().map(|(user, uid)| InUse {
                    user: Some(user.clone()),
                    uid: *uid,
                    by_seat: true,
                    ..u.clone()
                }));
            }
            uses.sort();
            uses.dedup();
            h.in_use = uses;
        }
        Seen::Unavailable(why) => h.logind_unavailable = Some(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::zvariant::Value;

    fn props(pairs: &[(&str, Value<'_>)]) -> HashMap<String, OwnedValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OwnedValue::try_from(v.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn sessions_from_logind_properties() {
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let us = |t: DateTime<Utc>| Value::U64(t.timestamp_micros() as u64);
        let desk = props(&[
            ("Name", Value::from("alice")),
            ("Class", Value::from("user")),
            ("State", Value::from("active")),
            ("TTY", Value::from("")),
            ("Display", Value::from("")),
            ("Remote", Value::Bool(false)),
            ("Timestamp", us(now - chrono::Duration::hours(2))),
            ("IdleHint", Value::Bool(true)),
            ("IdleSinceHint", us(now - chrono::Duration::minutes(20))),
        ]);
        let s = session_of("3", 1000, "alice", &desk, None, now).unwrap();
        assert_eq!(s.user, "alice");
        assert_eq!(s.line, "logind session 3");
        assert_eq!(s.idle_s, Some(20 * 60));
        assert_eq!(s.login, now - chrono::Duration::hours(2));
        // Not idle: 0 s; no hint at all: unknown (counts as active).
        let busy = props(&[
            ("Class", Value::from("user")),
            ("IdleHint", Value::Bool(false)),
        ]);
        assert_eq!(
            session_of("4", 1000, "alice", &busy, None, now)
                .unwrap()
                .idle_s,
            Some(0)
        );
        let bare = props(&[]);
        assert_eq!(
            session_of("5", 1000, "alice", &bare, None, now)
                .unwrap()
                .idle_s,
            None
        );
        // A greeter and a closing session are no one at the desk.
        let greeter = props(&[("Class", Value::from("greeter"))]);
        assert_eq!(session_of("c1", 120, "gdm", &greeter, None, now), None);
        let closing = props(&[("State", Value::from("closing"))]);
        assert_eq!(session_of("6", 1000, "alice", &closing, None, now), None);
    }

    fn person(user: &str, line: &str, now: DateTime<Utc>) -> Session {
        Session {
            user: user.into(),
            uid: Some(1000),
            line: line.into(),
            host: String::new(),
            login: now,
            idle_s: Some(0),
            local: true,
            locked_since: None,
            idle_reported: false,
        }
    }

    fn from_logind(id: &str, s: Session) -> LogindSession {
        LogindSession {
            id: id.into(),
            session: s,
            foreground: false,
        }
    }

    /// logind's answer: these sessions, no inhibitor.
    fn answered(sessions: Vec<LogindSession>) -> Seen {
        Seen::Sessions {
            sessions,
            inhibitors: vec![],
        }
    }

    #[test]
    fn laid_on_utmp_or_said_unavailable() {
        let now = Utc::now();
        let s = person("alice", ":0", now);
        let mut h = HostSnapshot::test(now);
        lay_on(&mut h, answered(vec![from_logind("2", s.clone())]));
        assert_eq!(h.sessions, Sessions::Known(vec![s.clone()]));
        assert_eq!(h.logind_unavailable, None);
        let mut h = HostSnapshot::test(now);
        lay_on(&mut h, Seen::Unavailable("no bus".into()));
        assert_eq!(h.sessions, Sessions::Known(vec![]));
        assert_eq!(h.logind_unavailable.as_deref(), Some("no bus"));
        let mut h = HostSnapshot::test(now).with_sessions_unknown("utmp unreadable");
        lay_on(&mut h, answered(vec![from_logind("2", s.clone())]));
        assert!(
            matches!(h.sessions, Sessions::Unknown(_)),
            "an unreadable utmp stays unknown"
        );
    }

    #[test]
    fn without_utmp_logind_is_the_whole_truth_and_without_both_nothing_is_known() {
        let now = Utc::now();
        let absent = || {
            let mut h = HostSnapshot::test(now).with_sessions_unknown("no /run/utmp");
            h.utmp_absent = true;
            h
        };
        // Nobody, said by logind: known and empty (Debian 13 with nobody logged in).
        let mut h = absent();
        lay_on(&mut h, answered(vec![]));
        assert_eq!(h.sessions, Sessions::Known(vec![]));
        let mut h = absent();
        let s = person("alice", "pts/0", now);
        lay_on(&mut h, answered(vec![from_logind("3", s.clone())]));
        assert_eq!(h.sessions, Sessions::Known(vec![s]));
        // Neither source: unknown.
        let mut h = absent();
        lay_on(&mut h, Seen::Unavailable("no bus".into()));
        assert!(matches!(h.sessions, Sessions::Unknown(_)));
    }

    #[test]
    fn a_utmp_record_of_a_logind_session_gives_way_to_it() {
        let now = Utc::now();
        let mut utmp = person("alice", "pts/0", now);
        utmp.idle_s = Some(3);
        let mut h = HostSnapshot::test(now);
        h.sessions = Sessions::Known(vec![utmp.clone(), person("bob", "pts/1", now)]);
        let mut logind = person("alice", "pts/0", now);
        logind.locked_since = Some(now);
        lay_on(&mut h, answered(vec![from_logind("5", logind.clone())]));
        let Sessions::Known(v) = &h.sessions else {
            panic!("known")
        };
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v.contains(&logind), "logind's record, with its lock");
        assert!(!v.contains(&utmp));
        assert!(v.iter().any(|s| s.user == "bob"), "other utmp records stay");
    }

    #[test]
    fn a_lock_is_dated_from_its_first_sighting_and_forgotten_when_it_ends() {
        let t0 = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let raw = |locked: bool| Raw {
            id: "7".into(),
            uid: 1000,
            user: "alice".into(),
            props: props(&[
                ("Class", Value::from("user")),
                ("LockedHint", Value::Bool(locked)),
            ]),
        };
        let mut l = Logind::default();
        let at = |l: &mut Logind, locked, t| l.seen(&[raw(locked)], t)[0].session.locked_since;
        assert_eq!(at(&mut l, false, t0), None);
        let t1 = t0 + chrono::Duration::seconds(30);
        assert_eq!(at(&mut l, true, t1), Some(t1));
        let t2 = t1 + chrono::Duration::seconds(30);
        assert_eq!(at(&mut l, true, t2), Some(t1), "still locked since t1");
        let t3 = t2 + chrono::Duration::seconds(30);
        assert_eq!(at(&mut l, false, t3), None);
        let t4 = t3 + chrono::Duration::seconds(30);
        assert_eq!(at(&mut l, true, t4), Some(t4), "a new lock is dated anew");

        // What the daemon records (`locks`) dates the same lock for a one-shot look.
        let record = l.locks();
        assert_eq!(record, [("7".to_string(), t4)].into());
        let mut once = Logind::remembering(record);
        let t5 = t4 + chrono::Duration::seconds(30);
        assert_eq!(
            at(&mut once, true, t5),
            Some(t4),
            "dated as the daemon dated it"
        );
        // A session the record does not hold as locked is dated to this look.
        let mut once = Logind::remembering([("8".to_string(), t0)]);
        assert_eq!(at(&mut once, true, t5), Some(t5));
    }

    #[test]
    fn local_means_at_this_machines_keyboard() {
        let now = Utc::now();
        let local = |pairs: &[(&str, Value<'_>)]| {
            let mut all = vec![("Class", Value::from("user"))];
            all.extend(pairs.iter().cloned());
            session_of("1", 1000, "alice", &props(&all), None, now)
                .unwrap()
                .local
        };
        assert!(local(&[("Type", Value::from("wayland"))]));
        assert!(local(&[("Type", Value::from("x11"))]));
        assert!(local(&[("TTY", Value::from("tty2"))]));
        let seat = OwnedObjectPath::try_from("/org/freedesktop/login1/seat/seat0").unwrap();
        assert!(local(&[(
            "Seat",
            Value::from((String::from("seat0"), seat.clone()))
        )]));
        // ssh: remote, whatever else it says.
        assert!(!local(&[
            ("Remote", Value::Bool(true)),
            ("TTY", Value::from("pts/0")),
            ("Type", Value::from("tty")),
        ]));
        assert!(!local(&[("TTY", Value::from("pts/3"))]));
    }

    /// A text session is judged by its terminals (an ssh login: empty `TTY`, its shell on
    /// pts/0 in its scope), a graphical one by its desktop's hint whatever its processes hold.
    #[test]
    fn text_sessions_are_as_idle_as_their_terminals() {
        use std::time::{Duration, SystemTime};
        let dir = tempfile::tempdir().unwrap();
        let (proc, dev) = (dir.path().join("proc"), dir.path().join("dev"));
        let at = |line: &str, ago: u64| {
            let path = dev.join(line);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let f = std::fs::File::create(&path).unwrap();
            let t = SystemTime::now() - Duration::from_secs(ago);
            f.set_times(std::fs::FileTimes::new().set_accessed(t))
                .unwrap();
        };
        let process = |pid: u32, tty_nr: u32, scope: &str| {
            let d = proc.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("stat"),
                format!("{pid} (sh) S 1 {pid} {pid} {tty_nr} {pid} 0 0 0 0\n"),
            )
            .unwrap();
            std::fs::write(
                d.join("cgroup"),
                format!("0::/user.slice/user-1000.slice/{scope}\n"),
            )
            .unwrap();
        };
        at("pts/0", 120);
        at("pts/1", 40);
        process(100, 0, "session-3.scope"); // sshd's leader: no terminal
        process(101, 136 << 8, "session-3.scope"); // her shell on pts/0
        process(200, (136 << 8) | 1, "session-9.scope"); // a desktop's terminal window
        let raw = |id: &str, kind: &str, tty: &str, leader: u32| Raw {
            id: id.into(),
            uid: 1000,
            user: "alice".into(),
            props: props(&[
                ("Class", Value::from("user")),
                ("Type", Value::from(kind)),
                ("TTY", Value::from(tty)),
                ("Scope", Value::from(format!("session-{id}.scope"))),
                ("Leader", Value::U32(leader)),
                ("IdleHint", Value::Bool(false)),
                ("IdleSinceHint", Value::U64(0)),
            ]),
        };
        let mut l = Logind::default().looking_in(&proc, &dev);
        let idle = |l: &mut Logind, r: Raw| l.seen(&[r], Utc::now())[0].session.idle_s;
        let near = |got: Option<u64>, want: u64| got.is_some_and(|g| g.abs_diff(want) <= 2);
        let ssh = idle(&mut l, raw("3", "tty", "", 100));
        assert!(near(ssh, 120), "ssh session by its shell's pts/0: {ssh:?}");
        // logind's TTY, when it names one, counts too (the more recent use wins).
        let named = idle(&mut l, raw("3", "tty", "pts/1", 100));
        assert!(near(named, 40), "{named:?}");
        // A graphical session: the desktop's hint (not idle), not its processes' terminals.
        assert_eq!(idle(&mut l, raw("9", "wayland", "", 200)), Some(0));
        // No process with a terminal: logind's hint (not idle, i.e. in use).
        assert_eq!(idle(&mut l, raw("5", "tty", "", 0)), Some(0));
        // Looking in the real /proc finds no such scope: in use too.
        let mut real = Logind::default();
        assert_eq!(idle(&mut real, raw("pilotd-none", "tty", "", 0)), Some(0));
    }

    /// A desktop that has reported idleness once (a graphical session whose IdleSinceHint is
    /// stamped) is one whose "not idle" is believed; a session of a desktop that never did
    /// (KDE: 0), or a text session (its IdleSinceHint is logind's reading of its terminal),
    /// is not.
    #[test]
    fn a_desktop_reports_idleness_once_it_has_stamped_the_hint() {
        let now = Utc::now();
        let reported = |kind: &str, since: u64| {
            let p = props(&[
                ("Class", Value::from("user")),
                ("Type", Value::from(kind)),
                ("IdleHint", Value::Bool(false)),
                ("IdleSinceHint", Value::U64(since)),
            ]);
            session_of("2", 1000, "alice", &p, None, now)
                .unwrap()
                .idle_reported
        };
        let stamped = (now - chrono::Duration::hours(1)).timestamp_micros() as u64;
        assert!(reported("wayland", stamped));
        assert!(reported("x11", stamped));
        assert!(!reported("wayland", 0), "never set: KDE, or GNOME not yet");
        assert!(
            !reported("tty", stamped),
            "logind's own reading of a terminal"
        );
    }

    #[test]
    fn idle_inhibitors_are_uses_of_their_uids_and_nothing_else_is() {
        let lock = |what: &str, mode: &str, uid| Inhibitor {
            what: what.into(),
            mode: mode.into(),
            uid,
        };
        let name = |uid| (uid == 1000).then(|| "alice".to_string());
        let got = idle_uses(
            &[
                lock("idle", "block", 1000),
                lock("sleep:idle", "block-weak", 1000),
                lock("idle", "block", 4242),
                // GNOME's and logind's everyday locks: not use.
                lock("sleep", "delay", 1000),
                lock(
                    "handle-power-key:handle-suspend-key:handle-lid-switch",
                    "block",
                    1000,
                ),
                lock("shutdown:sleep", "block", 0),
                lock("idleness", "block", 1001),
            ],
            name,
        );
        let said: Vec<(UseKind, Option<&str>, Option<u32>)> = got
            .iter()
            .map(|u| (u.kind, u.user.as_deref(), u.uid))
            .collect();
        assert_eq!(
            said,
            vec![
                (UseKind::IdleInhibitor, Some("alice"), Some(1000)),
                (UseKind::IdleInhibitor, None, Some(4242)),
            ]
        );
    }

    /// logind's inhibitors join the host probe's uses; a sound nobody could be found for goes
    /// to the user in front at the seat (not to one behind, nor to a remote one), and stays
    /// for nobody without one.
    #[test]
    fn uses_are_laid_on_and_a_sound_for_nobody_goes_to_the_seat() {
        let now = Utc::now();
        let nobody = InUse {
            kind: UseKind::SoundPlaying,
            user: None,
            uid: None,
            by_seat: false,
        };
        let inhibitor = InUse {
            kind: UseKind::IdleInhibitor,
            user: Some("bob".into()),
            uid: Some(1001),
            by_seat: false,
        };
        // The user database names uid 1000 otherwise (a container's): logind's name wins.
        let camera = InUse {
            kind: UseKind::Camera,
            user: Some("cloudsdk".into()),
            uid: Some(1000),
            by_seat: false,
        };
        let mut front = from_logind("2", person("alice", "seat0", now));
        front.foreground = true;
        let mut carol = person("carol", "seat0", now);
        carol.uid = Some(1002);
        let behind = from_logind("3", carol);
        let mut h = HostSnapshot::test(now);
        h.in_use = vec![nobody.clone(), camera];
        lay_on(
            &mut h,
            Seen::Sessions {
                sessions: vec![front, behind],
                inhibitors: vec![inhibitor.clone()],
            },
        );
        assert_eq!(
            h.in_use,
            vec![
                inhibitor.clone(),
                InUse {
                    kind: UseKind::SoundPlaying,
                    user: Some("alice".into()),
                    uid: Some(1000),
                    by_seat: true,
                },
                InUse {
                    kind: UseKind::Camera,
                    user: Some("alice".into()),
                    uid: Some(1000),
                    by_seat: false,
                },
            ]
        );
        // Nobody in front: the sound stays for nobody (the policy says it cannot tell).
        let mut h = HostSnapshot::test(now);
        h.in_use = vec![nobody.clone()];
        lay_on(
            &mut h,
            answered(vec![from_logind("3", person("carol", "pts/0", now))]),
        );
        assert_eq!(h.in_use, vec![nobody.clone()]);
        // logind away: the probe's uses as they were.
        let mut h = HostSnapshot::test(now);
        h.in_use = vec![nobody.clone()];
        lay_on(&mut h, Seen::Unavailable("no bus".into()));
        assert_eq!(h.in_use, vec![nobody]);
    }

    /// The session in front at its seat is the one logind calls `Active` and that has a seat;
    /// an ssh session is `Active` too (it has no seat to be behind on) but is no one there.
    #[test]
    fn in_front_means_active_at_a_seat() {
        let seat0 = OwnedObjectPath::try_from("/org/freedesktop/login1/seat/seat0").unwrap();
        let none = OwnedObjectPath::try_from("/").unwrap();
        let raw = |active: bool, seat: &str, path: &OwnedObjectPath| Raw {
            id: "7".into(),
            uid: 1000,
            user: "alice".into(),
            props: props(&[
                ("Class", Value::from("user")),
                ("Active", Value::Bool(active)),
                ("Seat", Value::from((String::from(seat), path.clone()))),
            ]),
        };
        let mut l = Logind::default();
        let front = |l: &mut Logind, r| l.seen(&[r], Utc::now())[0].foreground;
        assert!(front(&mut l, raw(true, "seat0", &seat0)));
        assert!(!front(&mut l, raw(false, "seat0", &seat0)), "switched away");
        assert!(!front(&mut l, raw(true, "", &none)), "no seat: ssh");
    }

    /// logind says a lock was taken or released as a PropertiesChanged of the Manager's
    /// `BlockInhibited`/`DelayInhibited` (with the new value, or invalidated); the same
    /// signal for a session's lock or idleness, and the rest, are the sessions' business.
    #[test]
    fn the_managers_inhibited_properties_are_an_inhibitor_signal() {
        let changed = |path: &str, iface: &str, key: &str, invalidated: bool| {
            let values: HashMap<&str, Value<'_>> = if invalidated {
                HashMap::new()
            } else {
                HashMap::from([
                    (key, Value::from("sleep:idle")),
                    ("NCurrentInhibitors", Value::U64(4)),
                ])
            };
            let gone: Vec<&str> = if invalidated { vec![key] } else { vec![] };
            let m =
                zbus::Message::signal(path, "org.freedesktop.DBus.Properties", "PropertiesChanged")
                    .unwrap()
                    .build(&(iface, values, gone))
                    .unwrap();
            signal_of(&m)
        };
        let manager = "/org/freedesktop/login1";
        let session = "/org/freedesktop/login1/session/_32";
        assert_eq!(
            changed(manager, MANAGER, "BlockInhibited", false),
            Some(Signal::Inhibitors)
        );
        assert_eq!(
            changed(manager, MANAGER, "DelayInhibited", false),
            Some(Signal::Inhibitors)
        );
        assert_eq!(
            changed(manager, MANAGER, "BlockInhibited", true),
            Some(Signal::Inhibitors)
        );
        assert_eq!(
            changed(manager, MANAGER, "IdleHint", false),
            Some(Signal::Sessions)
        );
        assert_eq!(
            changed(session, SESSION, "LockedHint", false),
            Some(Signal::Sessions)
        );
        let new = zbus::Message::signal(manager, MANAGER, "SessionNew")
            .unwrap()
            .build(&("2", OwnedObjectPath::try_from(session).unwrap()))
            .unwrap();
        assert_eq!(signal_of(&new), Some(Signal::Sessions));
    }

    /// Of each lock only what, mode and uid are kept; pilotd's own (its `keep_awake` idle
    /// lock, its sleep delay) are no one's use.
    #[test]
    fn listed_locks_keep_no_content_and_not_pilotds_own() {
        let entry = |what: &str, mode: &str, uid, pid| {
            (
                what.to_string(),
                "Totem".to_string(),
                "Playing a film".to_string(),
                mode.to_string(),
                uid,
                pid,
            )
        };
        let got = reduced(
            vec![
                entry("idle", "block", 1000, 4243),
                entry("idle", "block", 0, 777),
                entry("sleep", "delay", 0, 777),
            ],
            777,
        );
        assert_eq!(
            got,
            vec![Inhibitor {
                what: "idle".into(),
                mode: "block".into(),
                uid: 1000
            }]
        );
    }

    #[test]
    fn manager_and_background_sessions_are_no_one() {
        let now = Utc::now();
        for class in [
            "manager",
            "manager-early",
            "background",
            "lock-screen",
            "greeter",
        ] {
            let p = props(&[("Class", Value::from(class))]);
            assert_eq!(
                session_of("9", 1000, "alice", &p, None, now),
                None,
                "{class}"
            );
        }
    }
}
