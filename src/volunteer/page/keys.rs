//! Who may look and press: one-time keys, handed out over the control socket (`pilotd open`),
//! traded once for a session; the session's cookie and its CSRF token. Every key, session id
//! and token comes from the kernel's CSPRNG.

use crate::service::http::Request as HttpRequest;
use crate::volunteer::owner::PageKeys;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY_LIFE: Duration = Duration::from_secs(120);
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "the kernel's random generator (getrandom) failed: {0}; the status page does not serve without keys no one can guess\n  hint: this is a kernel or sandbox problem (a seccomp filter refusing getrandom?); `pilotd snooze` and `resume` still work"
    )]
    Random(String),
}

pub(super) const SESSION_LIFE: Duration = Duration::from_secs(12 * 3600);
const COOKIE: &str = "pilotd_session";

/// One-time keys and sessions, shared by the control socket (which hands out keys, through
/// `owner::PageKeys`) and the page (which trades them for sessions).
#[derive(Debug, Clone, Default)]
pub struct Doors(Arc<Mutex<DoorState>>);

#[derive(Debug, Default)]
struct DoorState {
    /// key → (who, valid until)
    keys: HashMap<String, (String, Instant)>,
    /// session id → session
    sessions: HashMap<String, Session>,
}

#[derive(Debug, Clone)]
pub(super) struct Session {
    pub(super) who: String,
    pub(super) csrf: String,
    pub(super) until: Instant,
}

impl Doors {
    /// A new one-time key for `who`.
    pub fn new_key(&self, who: &str, now: Instant) -> Result<String, KeyError> {
        let key = random_hex()?;
        if let Ok(mut d) = self.0.lock() {
            d.keys.retain(|_, (_, until)| *until > now);
            d.keys
                .insert(key.clone(), (who.to_string(), now + KEY_LIFE));
        }
        Ok(key)
    }

    /// Trades a valid key (once) for a new session: (session id, who).
    pub(super) fn redeem(
        &self,
        key: &str,
        now: Instant,
    ) -> Result<Option<(String, String)>, KeyError> {
        let (sid, csrf) = (random_hex()?, random_hex()?);
        let Ok(mut d) = self.0.lock() else {
            return Ok(None);
        };
        let Some((who, until)) = d.keys.remove(key) else {
            return Ok(None);
        };
        if until <= now {
            return Ok(None);
        }
        d.sessions.retain(|_, s| s.until > now);
        d.sessions.insert(
            sid.clone(),
            Session {
                who: who.clone(),
                csrf,
                until: now + SESSION_LIFE,
            },
        );
        Ok(Some((sid, who)))
    }

    pub(super) fn session(&self, sid: &str, now: Instant) -> Option<Session> {
        let d = self.0.lock().ok()?;
        d.sessions.get(sid).filter(|s| s.until > now).cloned()
    }

    /// The live session a request's cookie names, if any.
    pub(super) fn session_of(&self, req: &HttpRequest, now: Instant) -> Option<Session> {
        let sid = req.headers.get("cookie").and_then(|c| {
            c.split(';')
                .filter_map(|kv| kv.trim().split_once('='))
                .find(|(k, _)| *k == COOKIE)
                .map(|(_, v)| v.to_string())
        })?;
        self.session(&sid, now)
    }
}

impl PageKeys for Doors {
    fn issue(
        &self,
        who: &str,
        now: Instant,
    ) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.new_key(who, now)?)
    }
}

/// The `set-cookie` value for a new session: not readable by scripts, never sent by another
/// site, for the whole page, host-only, as long as the session.
pub(super) fn session_cookie(sid: &str) -> String {
    format!(
        "{COOKIE}={sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION_LIFE.as_secs()
    )
}

/// 32 bytes from the kernel's CSPRNG, as hex; never anything weaker: a key, session id or
/// CSRF token someone could predict would open the owner's controls to them.
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

    /// Keys come from the kernel's CSPRNG, never from a fallback: a generator that fails is an
    /// error the page shows, not 64 zeros.
    #[test]
    fn keys_are_random_or_refused() {
        let (a, b) = (random_hex().unwrap(), random_hex().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert_ne!(a, "0".repeat(64));
        let e = hex_from(|_| Err(getrandom::Error::UNSUPPORTED)).unwrap_err();
        assert!(e.to_string().contains("random generator"), "{e}");
        let d = Doors::default();
        let k = d.new_key("alice", Instant::now()).unwrap();
        assert_ne!(k, d.new_key("alice", Instant::now()).unwrap());
    }

    #[test]
    fn keys_are_good_once_and_briefly() {
        let d = Doors::default();
        let t0 = Instant::now();
        let k = d.new_key("alice", t0).unwrap();
        let (sid, who) = d.redeem(&k, t0).unwrap().unwrap();
        assert_eq!(who, "alice");
        assert!(d.redeem(&k, t0).unwrap().is_none(), "once");
        assert!(d.session(&sid, t0).is_some());
        assert!(d.session(&sid, t0 + SESSION_LIFE).is_none());
        let late = d.new_key("alice", t0).unwrap();
        assert!(d.redeem(&late, t0 + KEY_LIFE).unwrap().is_none(), "briefly");
    }

    /// A key the control socket issues (through `owner::PageKeys`) is one the page redeems.
    #[test]
    fn a_key_issued_for_the_socket_opens_a_session() {
        let d = Doors::default();
        let t0 = Instant::now();
        let k = PageKeys::issue(&d, "alice", t0).unwrap();
        let (sid, _) = d.redeem(&k, t0).unwrap().unwrap();
        let mut req = HttpRequest::default();
        req.headers
            .insert("cookie".into(), format!("other=1; {COOKIE}={sid}"));
        assert_eq!(d.session_of(&req, t0).unwrap().who, "alice");
        req.headers
            .insert("cookie".into(), format!("{COOKIE}=nope"));
        assert!(d.session_of(&req, t0).is_none());
    }
}
