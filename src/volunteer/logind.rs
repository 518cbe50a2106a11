//! The second session probe, next to utmp (`sessions.rs`): systemd-logind over D-Bus. Graphical
//! sessions on today's desktops (GNOME or KDE on Wayland) are tracked by logind and often
//! never reach utmp; logind also knows keyboard and mouse idleness (`IdleHint`,
//! `IdleSinceHint`), which a tty's atime cannot show for a graphical session.
//!
//! What pilotd uses of `org.freedesktop.login1` (and the test implementation in
//! tests/it/sessions/logind.rs serves): `Manager.ListSessions()` and, for each session, the
//! `org.freedesktop.login1.Session` properties `Name`, `User`, `Class`, `State`, `Remote`,
//! `RemoteHost`, `TTY`, `Display`, `Timestamp`, `IdleHint` and `IdleSinceHint` (one `GetAll`).
//!
//! Observation only: every user-class session that is not closing is reported; deciding which
//! users matter is the policy's job. Either source seeing a session counts. logind that cannot
//! be reached is not "nobody": the sessions are then utmp's alone, and the snapshot says so
//! (`logind_unavailable`), which `plan` and `status` show.
//!
//! The bus is the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set, as every D-Bus client).

use crate::volunteer::snapshot::{HostSnapshot, Session, Sessions};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::time::Duration;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

/// One look at logind may take this long; past it, utmp alone decides this cycle.
pub const DEADLINE: Duration = Duration::from_millis(1500);

const SERVICE: &str = "org.freedesktop.login1";
const MANAGER_PATH: &str = "/org/freedesktop/login1";
const MANAGER: &str = "org.freedesktop.login1.Manager";
const SESSION: &str = "org.freedesktop.login1.Session";

/// The logind client: a bus connection kept between cycles, made again after a failure.
#[derive(Default)]
pub struct Logind {
    conn: Option<zbus::Connection>,
}

/// What logind said: its sessions, or why it could not be asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    Sessions(Vec<Session>),
    Unavailable(String),
}

impl Logind {
    /// The sessions logind knows at `now`, within `DEADLINE`.
    pub async fn observe(&mut self, now: DateTime<Utc>) -> Seen {
        match tokio::time::timeout(DEADLINE, self.ask(now)).await {
            Ok(Ok(list)) => Seen::Sessions(list),
            Ok(Err(e)) => {
                self.conn = None;
                Seen::Unavailable(e.to_string())
            }
            Err(_) => {
                self.conn = None;
                Seen::Unavailable(format!("no answer within {} ms", DEADLINE.as_millis()))
            }
        }
    }

    async fn ask(&mut self, now: DateTime<Utc>) -> zbus::Result<Vec<Session>> {
        let conn = match &self.conn {
            Some(c) => c.clone(),
            None => {
                let c = zbus::Connection::system().await?;
                self.conn = Some(c.clone());
                c
            }
        };
        let manager = zbus::Proxy::new(&conn, SERVICE, MANAGER_PATH, MANAGER).await?;
        let list: Vec<(String, u32, String, String, OwnedObjectPath)> =
            manager.call("ListSessions", &()).await?;
        let mut out = Vec::with_capacity(list.len());
        for (id, uid, user, _seat, path) in list {
            let props = zbus::Proxy::new(
                &conn,
                SERVICE,
                path.as_str(),
                "org.freedesktop.DBus.Properties",
            )
            .await?;
            // A session that ended between the list and this question is simply gone.
            let all: HashMap<String, OwnedValue> = match props.call("GetAll", &(SESSION,)).await {
                Ok(a) => a,
                Err(zbus::Error::MethodError(..)) => continue,
                Err(e) => return Err(e),
            };
            if let Some(s) = session_of(&id, uid, &user, &all, now) {
                out.push(s);
            }
        }
        Ok(out)
    }
}

/// Calls `wake` for every signal logind sends (a session new or removed, a property such as
/// `IdleHint` changed), so a graphical login is acted on within a second, as a utmp one is.
/// Reconnects every 5 s while the bus is away; returns when `wake` says to stop.
pub async fn watch(wake: impl FnMut() -> bool) {
    watch_on(None, wake).await
}

/// `watch` on the bus at `address` (None: the system bus).
pub async fn watch_on(address: Option<&str>, mut wake: impl FnMut() -> bool) {
    use futures_util::StreamExt;
    loop {
        match signals(address).await {
            Ok(mut stream) => {
                while let Some(m) = stream.next().await {
                    if m.is_ok() && !wake() {
                        return;
                    }
                }
                tracing::debug!("logind's signals ended; watching again in 5 s");
            }
            Err(e) => tracing::debug!("cannot watch logind ({e}); trying again in 5 s"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

async fn signals(address: Option<&str>) -> zbus::Result<zbus::MessageStream> {
    let conn = match address {
        Some(a) => zbus::connection::Builder::address(a)?.build().await?,
        None => zbus::Connection::system().await?,
    };
    // By path, not sender: a well-known sender name is resolved by the bus, which not every
    // client library follows on its side; logind's objects all live under this path.
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .path_namespace(MANAGER_PATH)?
        .build();
    zbus::MessageStream::for_match_rule(rule, &conn, Some(64)).await
}

fn string(all: &HashMap<String, OwnedValue>, key: &str) -> Option<String> {
    all.get(key)
        .and_then(|v| String::try_from(v.try_clone().ok()?).ok())
}

fn boolean(all: &HashMap<String, OwnedValue>, key: &str) -> Option<bool> {
    all.get(key).and_then(|v| bool::try_from(v).ok())
}

fn micros(all: &HashMap<String, OwnedValue>, key: &str) -> Option<u64> {
    all.get(key).and_then(|v| u64::try_from(v).ok())
}

fn instant(us: u64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(i64::try_from(us).ok()?)
}

/// One logind session as pilotd's `Session`, or None for what is not a person's session
/// (greeters, lock screens, a session that is closing). Pure.
fn session_of(
    id: &str,
    uid: u32,
    user: &str,
    all: &HashMap<String, OwnedValue>,
    now: DateTime<Utc>,
) -> Option<Session> {
    if string(all, "Class").is_some_and(|c| c != "user") {
        return None;
    }
    if string(all, "State").as_deref() == Some("closing") {
        return None;
    }
    let line = string(all, "TTY")
        .filter(|t| !t.is_empty())
        .or_else(|| string(all, "Display").filter(|d| !d.is_empty()))
        .unwrap_or_else(|| format!("logind session {id}"));
    let host = if boolean(all, "Remote") == Some(true) {
        string(all, "RemoteHost").unwrap_or_default()
    } else {
        String::new()
    };
    let login = micros(all, "Timestamp").and_then(instant).unwrap_or(now);
    // Idle as logind says: not idle is idle for 0 s; idle since an instant is idle for that
    // long; a missing hint is unknown, which the policy counts as active (fail safe).
    let idle_s = match (boolean(all, "IdleHint"), micros(all, "IdleSinceHint")) {
        (Some(false), _) => Some(0),
        (Some(true), Some(since)) if since > 0 => {
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
    })
}

/// Lays what logind saw on an observation made from utmp: its sessions join utmp's (either
/// source seeing an active one counts), or the snapshot says logind was not reachable. An
/// unknown utmp stays unknown: the owner is then assumed here whatever logind says.
pub fn lay_on(h: &mut HostSnapshot, seen: Seen) {
    match seen {
        Seen::Sessions(list) => {
            h.logind_unavailable = None;
            if let Sessions::Known(v) = &mut h.sessions {
                v.extend(list);
            }
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
        let s = session_of("3", 1000, "alice", &desk, now).unwrap();
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
            session_of("4", 1000, "alice", &busy, now).unwrap().idle_s,
            Some(0)
        );
        let bare = props(&[]);
        assert_eq!(
            session_of("5", 1000, "alice", &bare, now).unwrap().idle_s,
            None
        );
        // A greeter and a closing session are no one at the desk.
        let greeter = props(&[("Class", Value::from("greeter"))]);
        assert_eq!(session_of("c1", 120, "gdm", &greeter, now), None);
        let closing = props(&[("State", Value::from("closing"))]);
        assert_eq!(session_of("6", 1000, "alice", &closing, now), None);
    }

    #[test]
    fn laid_on_utmp_or_said_unavailable() {
        let now = Utc::now();
        let s = Session {
            user: "alice".into(),
            uid: Some(1000),
            line: ":0".into(),
            host: String::new(),
            login: now,
            idle_s: Some(0),
        };
        let mut h = HostSnapshot::test(now);
        lay_on(&mut h, Seen::Sessions(vec![s.clone()]));
        assert_eq!(h.sessions, Sessions::Known(vec![s.clone()]));
        assert_eq!(h.logind_unavailable, None);
        let mut h = HostSnapshot::test(now);
        lay_on(&mut h, Seen::Unavailable("no bus".into()));
        assert_eq!(h.sessions, Sessions::Known(vec![]));
        assert_eq!(h.logind_unavailable.as_deref(), Some("no bus"));
        let mut h = HostSnapshot::test(now).with_sessions_unknown("utmp unreadable");
        lay_on(&mut h, Seen::Sessions(vec![s]));
        assert!(
            matches!(h.sessions, Sessions::Unknown(_)),
            "unknown stays unknown"
        );
    }
}
