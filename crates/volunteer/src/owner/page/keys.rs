//! Who may look and press: invitations, handed out over the control socket (`pilotd open`)
//! to the caller's uid, each letting one browser connection of that uid in; the sessions they
//! open, each bound to that uid; the session's cookie and its CSRF token.
//!
//! The uid is the defence, not a secret: the address `pilotd open` gives carries none (an
//! address passed to a browser is in its argv, which every local user can read), and the
//! cookie, which a browser sends to every port of 127.0.0.1 (another user's server there
//! too), is worth nothing from another uid's connection. Session ids and CSRF tokens come from
//! the kernel's CSPRNG.
//!
//! The owner's status page on 127.0.0.1 (`[page] port`): the decision and its reasons, the
//! workers, the week (the `schedule` grid), the learned availability and recent outcomes,
//! with Snooze and Resume buttons. Plain HTML forms: it works without JavaScript, which only
//! reloads it every 10 s.
//!
//! Who may look and press: a browser cannot show peer credentials, and anything in the
//! address it is given is in its argv, which every local user can read. So the page trusts
//! what the control socket already proved, and the uid the kernel keeps with every socket.
//! `pilotd open`, run by the owner, asks the daemon over the socket (authorised by
//! SO_PEERCRED, like `snooze`) to invite its uid, and opens `http://127.0.0.1:PORT/open`, an
//! address with no secret in it. The page's listener learns the uid of each connection's
//! client socket (`service::loopback`, sock_diag); `/open` on a connection of the invited uid,
//! within 2 minutes, once, gets a session cookie (HttpOnly, SameSite=Strict, 12 h, named for
//! the port) and a redirect to `/`. A session serves only connections of its own uid: the
//! browser sends the cookie to every port of 127.0.0.1, so another user's server may get it,
//! and from another uid it opens nothing. Without a session the page says how to get one and
//! shows nothing else. Invitations are handed out only while pilotd holds the page's port:
//! when another program took it first, `pilotd open` says so and sends no one there.
//!
//! Cross-site requests are refused three ways: the `Host` must be this listener (no DNS
//! rebinding), a POST whose `Origin` or `Sec-Fetch-Site` says another site is refused, and
//! every form carries the session's CSRF token. A navigation to `/open` another site started
//! (`Sec-Fetch-Site`) does not use up the owner's invitation.

use crate::owner::request::Invitations;
use pilotd_core::service::http::Request as HttpRequest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long after `pilotd open` its uid's browser may come in.
pub(super) const INVITATION_LIFE: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    #[error(
        "the kernel's random generator (getrandom) failed: {0}; the status page does not serve without session keys no one can guess\n  hint: this is a kernel or sandbox problem (a seccomp filter refusing getrandom?); `pilotd snooze` and `resume` still work"
    )]
    Random(String),
}

pub(super) const SESSION_LIFE: Duration = Duration::from_secs(12 * 3600);

/// Invitations and sessions, shared by the control socket (which invites, through
/// `owner::Invitations`) and the page (which lets the invited in).
#[derive(Debug, Clone, Default)]
pub struct Doors(Arc<Mutex<DoorState>>);

#[derive(Debug, Default)]
struct DoorState {
    /// uid → (who, valid until): the latest `pilotd open` of each uid, good once.
    invited: HashMap<u32, (String, Instant)>,
    /// session id → session
    sessions: HashMap<String, Session>,
}

#[derive(Debug, Clone)]
pub(super) struct Session {
    pub(super) who: String,
    /// The uid it was opened for: the only one whose connections may use it.
    pub(super) uid: u32,
    pub(super) csrf: String,
    pub(super) until: Instant,
}

impl Invitations for Doors {
    /// Lets one browser connection of `uid` in, as `who`, within `INVITATION_LIFE`.
    fn invite(&self, who: &str, uid: u32, now: Instant) {
        if let Ok(mut d) = self.0.lock() {
            d.invited.retain(|_, (_, until)| *until > now);
            d.invited
                .insert(uid, (who.to_string(), now + INVITATION_LIFE));
        }
    }
}

impl Doors {
    /// Lets a connection of `uid` in, once, if `uid` is invited: a new session for it (its
    /// id, for the cookie). Another uid's invitation is neither used nor used up.
    pub(super) fn admit(&self, uid: u32, now: Instant) -> Result<Option<String>, KeyError> {
        let (sid, csrf) = (random_hex()?, random_hex()?);
        let Ok(mut d) = self.0.lock() else {
            return Ok(None);
        };
        d.invited.retain(|_, (_, until)| *until > now);
        let Some((who, _)) = d.invited.remove(&uid) else {
            return Ok(None);
        };
        d.sessions.retain(|_, s| s.until > now);
        d.sessions.insert(
            sid.clone(),
            Session {
                who,
                uid,
                csrf,
                until: now + SESSION_LIFE,
            },
        );
        Ok(Some(sid))
    }

    pub(super) fn session(&self, sid: &str, now: Instant) -> Option<Session> {
        let d = self.0.lock().ok()?;
        d.sessions.get(sid).filter(|s| s.until > now).cloned()
    }

    /// The live session a request's cookie (for the page on `port`) names, if the request
    /// came on a connection of the session's own uid (`uid`: the connection's, if known).
    pub(super) fn session_of(
        &self,
        req: &HttpRequest,
        port: u16,
        uid: Option<u32>,
        now: Instant,
    ) -> Option<Session> {
        let name = cookie_name(port);
        let sid = req.headers.get("cookie").and_then(|c| {
            c.split(';')
                .filter_map(|kv| kv.trim().split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })?;
        let s = self.session(&sid, now)?;
        if uid != Some(s.uid) {
            // A cookie is sent to every port of 127.0.0.1: another user's server got it.
            tracing::warn!(
                session_uid = s.uid,
                connection_uid = ?uid,
                "status page: {}'s session cookie came on another user's connection; refused",
                s.who
            );
            return None;
        }
        Some(s)
    }
}

/// The session cookie's name: one per port, so the pages of two daemons (or an old port's
/// cookie) on this host do not overwrite each other. It keeps nothing from other ports: a
/// browser sends every cookie of 127.0.0.1 to all of them, which is why a session is bound
/// to its uid.
pub(super) fn cookie_name(port: u16) -> String {
    format!("pilotd_session_{port}")
}

/// The `set-cookie` value for a new session: not readable by scripts, never sent by another
/// site, for the whole page, host-only, as long as the session.
pub(super) fn session_cookie(sid: &str, port: u16) -> String {
    format!(
        "{}={sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        cookie_name(port),
        SESSION_LIFE.as_secs()
    )
}

/// 32 bytes from the kernel's CSPRNG, as hex; never anything weaker: a session id or CSRF
/// token someone could predict would open the owner's controls to them.
pub(super) fn random_hex() -> Result<String, KeyError> {
    hex_from(getrandom::getrandom)
}

fn hex_from(
    fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
) -> Result<String, KeyError> {
    let mut b = [0u8; 32];
    fill(&mut b).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Session ids come from the kernel's CSPRNG, never from a fallback: a generator that
    /// fails is an error the page shows, not 64 zeros.
    #[test]
    fn session_ids_are_random_or_refused() {
        let (a, b) = (random_hex().unwrap(), random_hex().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert_ne!(a, "0".repeat(64));
        let e = hex_from(|_| Err(getrandom::Error::UNSUPPORTED)).unwrap_err();
        assert!(e.to_string().contains("random generator"), "{e}");
    }

    /// An invitation lets its own uid in, once and briefly; another uid is not let in by it
    /// and does not use it up.
    #[test]
    fn an_invitation_lets_its_uid_in_once_and_briefly() {
        let d = Doors::default();
        let t0 = Instant::now();
        d.invite("alice", 1000, t0);
        assert_eq!(d.admit(65534, t0).unwrap(), None, "another uid");
        assert_eq!(d.admit(0, t0).unwrap(), None, "root too");
        let s = d.admit(1000, t0).unwrap().expect("alice's browser");
        assert_eq!(s.len(), 64, "a 256-bit random id");
        let session = d.session(&s, t0).unwrap();
        assert_eq!((session.who.as_str(), session.uid), ("alice", 1000));
        assert_eq!(d.admit(1000, t0).unwrap(), None, "once");
        assert!(d.session(&s, t0 + SESSION_LIFE).is_none());
        d.invite("alice", 1000, t0);
        assert_eq!(
            d.admit(1000, t0 + INVITATION_LIFE).unwrap(),
            None,
            "briefly"
        );
    }

    /// A session is found by its port's cookie, and only on a connection of its own uid: its
    /// cookie from another uid (a server of another user that the browser sent it to), from a
    /// connection whose uid is not known, or under another port's name opens nothing.
    #[test]
    fn a_session_is_its_uids_alone() {
        let d = Doors::default();
        let t0 = Instant::now();
        // As the control socket invites: through `owner::Invitations`.
        Invitations::invite(&d, "alice", 1000, t0);
        let s = d.admit(1000, t0).unwrap().unwrap();
        let mut req = HttpRequest::default();
        req.headers
            .insert("cookie".into(), format!("other=1; pilotd_session_8466={s}"));
        assert_eq!(
            d.session_of(&req, 8466, Some(1000), t0).unwrap().who,
            "alice"
        );
        assert!(
            d.session_of(&req, 8466, Some(65534), t0).is_none(),
            "another uid"
        );
        assert!(
            d.session_of(&req, 8466, Some(0), t0).is_none(),
            "root's too"
        );
        assert!(d.session_of(&req, 8466, None, t0).is_none(), "unknown");
        assert!(
            d.session_of(&req, 8467, Some(1000), t0).is_none(),
            "another port"
        );
        req.headers
            .insert("cookie".into(), "pilotd_session_8466=nope".into());
        assert!(d.session_of(&req, 8466, Some(1000), t0).is_none());
    }
}
