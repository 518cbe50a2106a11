//! The owner's requests, whichever door they come through: the control socket (`pilotd
//! snooze`, `resume`, `open`) or the status page's buttons. What may be asked (`Request`),
//! who may ask it (`authorise`: root, the users the policy's `[owner] users` names, members of
//! the `pilotd` group) and what asking does (`carry_out`: a snooze recorded in the state dir,
//! or its end, or an invitation to the page for the caller's uid).
//!
//! Below both doors, and importing neither: the control socket proves who asks by its peer
//! credentials, the page by a session its uid was invited to from the socket (and the uid of
//! every connection that uses it); both then hand the request here. The page's invitations
//! are reached through [`Invitations`], which the page implements.

use crate::record::snooze::{self, Snooze};
use chrono::{DateTime, Utc};
use pilotd_core::config::Evict;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The group whose members may snooze and resume (created by the package's postinst).
pub(crate) const GROUP: &str = "pilotd";

/// What the owner may ask; on the control socket, one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "lowercase")]
pub enum Request {
    Snooze {
        seconds: u64,
    },
    Resume,
    /// An invitation to the status page for the caller's uid (`pilotd open`); the reply's
    /// message is the page's address to open (it holds no secret).
    Open,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    pub message: String,
}

impl Reply {
    /// A refusal, addressed to the caller.
    pub(crate) fn refused(message: String) -> Reply {
        Reply { ok: false, message }
    }

    /// Done as asked: `message` says what changed.
    fn done(message: String) -> Reply {
        Reply { ok: true, message }
    }
}

/// Who is on the other end, as the kernel and the user database say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    /// None when the uid has no name on this host.
    pub name: Option<String>,
    /// The process's groups: its primary and supplementary gids.
    pub gids: Vec<u32>,
}

impl Peer {
    /// `uid` with `gids`, named as the user database names it.
    pub(crate) fn named(uid: u32, gids: Vec<u32>) -> Peer {
        let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name);
        Peer { uid, name, gids }
    }

    pub(crate) fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("uid {}", self.uid),
        }
    }
}

/// What decides who may: the policy's users, and the `pilotd` group (its gid and its listed
/// members) when it exists on this host.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Access {
    pub users: Vec<String>,
    pub group: Option<(u32, Vec<String>)>,
}

/// Root, a user the policy names, or a member of the `pilotd` group (by the process's groups
/// or by the group database) may; `Err` is the refusal, addressed to the caller.
pub(crate) fn authorise(peer: &Peer, access: &Access) -> Result<(), Refused> {
    if peer.uid == 0 {
        return Ok(());
    }
    if let Some(n) = &peer.name
        && access.users.iter().any(|u| u == n)
    {
        return Ok(());
    }
    if let Some((gid, members)) = &access.group
        && (peer.gids.contains(gid) || peer.name.as_ref().is_some_and(|n| members.contains(n)))
    {
        return Ok(());
    }
    Err(Refused {
        who: peer.label(),
        name: peer.name.clone(),
    })
}

/// A caller who may not snooze or resume; the message is addressed to them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "refused: {who} may not snooze or resume this machine: only root, the users in the policy's [owner] users and members of the `{GROUP}` group may\n  hint: {}",
    refused_hint(name.as_deref())
)]
pub struct Refused {
    pub who: String,
    pub name: Option<String>,
}

fn refused_hint(name: Option<&str>) -> String {
    match name {
        Some(n) => format!(
            "ask this machine's administrator to run `adduser {n} {GROUP}` (then log in again), or to add \"{n}\" to `users` under [owner] in the policy"
        ),
        None => format!(
            "this uid has no name on this host; only root, users named in the policy's [owner] users and members of the {GROUP} group may"
        ),
    }
}

/// The `pilotd` group as the group database has it now (it may be created after start).
pub(crate) fn group_now() -> Option<(u32, Vec<String>)> {
    nix::unistd::Group::from_name(GROUP)
        .ok()
        .flatten()
        .map(|g| (g.gid.as_raw(), g.mem))
}

/// The status page's invitations, as seen from here: the page keeps them (and lets a browser
/// of the invited uid in, once); an `Open` only asks for a new one.
pub trait Invitations: std::fmt::Debug + Send + Sync {
    /// Lets one browser connection of `uid` in, as `who`, within a short while.
    fn invite(&self, who: &str, uid: u32, now: Instant);
}

/// The status page as an `Open` needs it.
#[derive(Debug, Clone)]
pub struct PageDoor {
    pub port: u16,
    /// The page's invitations while pilotd holds the port; else why it does not (whatever
    /// answers on that port then is not pilotd, and no one is sent there).
    pub served: Result<Arc<dyn Invitations>, String>,
}

/// What carrying out a request needs from the daemon, kept current across reloads.
#[derive(Debug, Clone)]
pub struct Context {
    pub state_dir: PathBuf,
    pub policy: pilotd_core::config::Policy,
    /// The status page, when pilotd.toml sets its port.
    pub page: Option<PageDoor>,
}

/// Records the snooze (or its end) in the state dir, for the next cycle to act on; or invites
/// the caller's `uid` to the status page. The caller (`by`, `uid`) is authorised already.
pub(crate) fn carry_out(
    req: &Request,
    by: &str,
    uid: u32,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Reply {
    let local = |t: DateTime<Utc>| {
        t.with_timezone(&ctx.policy.timezone)
            .format("%a %Y-%m-%d %H:%M %Z")
            .to_string()
    };
    match req {
        Request::Snooze { seconds } => {
            let d = Duration::from_secs(*seconds);
            if d.is_zero() || d > snooze::LONGEST {
                return Reply::refused(format!(
                    "a snooze lasts between 1s and {}; for longer, change the policy's schedule",
                    pilotd_core::config::units::format_duration(snooze::LONGEST)
                ));
            }
            let until = now + chrono::Duration::from_std(d).unwrap_or_default();
            let s = Snooze {
                until,
                by: by.to_string(),
                at: now,
            };
            match snooze::save(&ctx.state_dir, &s) {
                Err(e) => Reply::refused(e.to_string()),
                Ok(()) => Reply::done(format!(
                    "snoozed by {by} until {}: no worker starts before then; running workers: {}",
                    local(until),
                    match ctx.policy.on_return {
                        Evict::None | Evict::Pause => "paused",
                        Evict::Graceful => "stopped gracefully",
                        Evict::Fast => "stopped at once",
                    }
                )),
            }
        }
        Request::Resume => match snooze::clear(&ctx.state_dir, now) {
            Err(e) => Reply::refused(e.to_string()),
            Ok(true) => Reply::done(format!(
                "resumed by {by}: workers may start again when the policy allows"
            )),
            Ok(false) => Reply::done("no snooze was in force; nothing changed".into()),
        },
        Request::Open => match &ctx.page {
            None => Reply::refused(
                "the status page is off on this machine\n  hint: set `port` under [page] in pilotd.toml (the package's file sets 8466) and restart pilotd".into(),
            ),
            Some(PageDoor {
                port,
                served: Err(why),
            }) => Reply::refused(format!(
                "the status page is not served: pilotd does not hold 127.0.0.1:{port} ({why}); whatever answers there is not pilotd\n  hint: see `journalctl -u pilotd`; free the port (or choose another under [page] in pilotd.toml) and restart pilotd"
            )),
            Some(PageDoor {
                port,
                served: Ok(invitations),
            }) => {
                invitations.invite(by, uid, Instant::now());
                Reply::done(format!("http://127.0.0.1:{port}/open"))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, name: Option<&str>, gids: &[u32]) -> Peer {
        Peer {
            uid,
            name: name.map(Into::into),
            gids: gids.to_vec(),
        }
    }

    #[test]
    fn who_may_snooze() {
        let access = Access {
            users: vec!["alice".into()],
            group: Some((990, vec!["carol".into()])),
        };
        // (caller, allowed)
        let table = [
            (peer(0, Some("root"), &[0]), true),
            (peer(1000, Some("alice"), &[1000]), true),
            // In the group by the process's groups, or by the group database.
            (peer(1001, Some("bob"), &[1001, 990]), true),
            (peer(1002, Some("carol"), &[1002]), true),
            (peer(1003, Some("mallory"), &[1003]), false),
            (peer(4242, None, &[4242]), false),
        ];
        for (p, want) in table {
            assert_eq!(authorise(&p, &access).is_ok(), want, "{p:?}");
        }
        let why = authorise(&peer(1003, Some("mallory"), &[1003]), &access)
            .unwrap_err()
            .to_string();
        assert!(why.contains("mallory may not") && why.contains("adduser mallory pilotd"));
        // No group on this host: only root and the named users.
        let no_group = Access {
            users: vec![],
            group: None,
        };
        assert!(authorise(&peer(1001, Some("bob"), &[990]), &no_group).is_err());
    }

    /// Invitations, as the page keeps them: (who, uid) in order.
    #[derive(Debug, Default)]
    struct Guests(std::sync::Mutex<Vec<(String, u32)>>);
    impl Invitations for Guests {
        fn invite(&self, who: &str, uid: u32, _: Instant) {
            self.0.lock().unwrap().push((who.into(), uid));
        }
    }

    /// A page that is off, or whose port pilotd does not hold, refuses an `Open` with the
    /// reason and invites no one; a page pilotd serves invites the caller's uid, and the
    /// address it gives holds no secret.
    #[test]
    fn an_open_invites_the_callers_uid_only_to_a_page_pilotd_holds() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = Context {
            state_dir: dir.path().to_path_buf(),
            policy: pilotd_core::config::Policy::defaults(pilotd_core::zone::Zone::utc()),
            page: None,
        };
        let r = carry_out(&Request::Open, "alice", 1000, &ctx, Utc::now());
        assert!(!r.ok && r.message.contains("status page is off"), "{r:?}");
        ctx.page = Some(PageDoor {
            port: 8466,
            served: Err("Address already in use".into()),
        });
        let r = carry_out(&Request::Open, "alice", 1000, &ctx, Utc::now());
        assert!(!r.ok, "{r:?}");
        assert!(
            r.message
                .contains("does not hold 127.0.0.1:8466 (Address already in use)")
                && r.message.contains("is not pilotd"),
            "{r:?}"
        );
        assert!(!r.message.contains("http://"), "no address offered: {r:?}");
        let guests = Arc::new(Guests::default());
        ctx.page = Some(PageDoor {
            port: 8466,
            served: Ok(guests.clone()),
        });
        let r = carry_out(&Request::Open, "alice", 1000, &ctx, Utc::now());
        assert_eq!(
            r,
            Reply {
                ok: true,
                message: "http://127.0.0.1:8466/open".into()
            }
        );
        assert_eq!(*guests.0.lock().unwrap(), [("alice".to_string(), 1000)]);
    }
}
