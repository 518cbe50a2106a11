//! The owner's control socket: `pilotd snooze` and `pilotd resume` without root. The daemon
//! listens on a unix socket (pilotd.toml `control_socket`, mode 0666 in a 0755 runtime dir)
//! and authorises each caller by its peer credentials (SO_PEERCRED), which the kernel fills
//! in and no client can forge: root, the users named in the policy's `[owner] users`, and
//! members of the `pilotd` group (the Debian package creates it). Anyone else is refused with
//! a message that says who may and how to become one.
//!
//! One JSON line each way: a `Request`, then a `Reply`. The server writes the snooze to the
//! state dir (`snooze`) and wakes the loop, which acts on it in an urgent cycle.

use crate::config::Evict;
use crate::service::listener::{self, Limits};
use crate::volunteer::snooze::{self, Snooze};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};

/// The group whose members may snooze and resume (created by the package's postinst).
pub const GROUP: &str = "pilotd";

/// A request is refused past this size (and dropped past `LIMITS.deadline`): the socket is
/// open to every local user.
const MAX_REQUEST: u64 = 4096;
/// How long `ask` waits for the daemon's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot reach pilotd at {}: {source}\n  hint: is the daemon running? (`systemctl status pilotd`); the socket is pilotd.toml `control_socket`", path.display())]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("talking to pilotd at {}: {source}", path.display())]
    Talk {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("pilotd at {} gave no answer it could read: {why}", path.display())]
    Garbled { path: PathBuf, why: String },
    #[error("cannot listen on {}: {source}\n  hint: its directory must exist and be writable by pilotd (the unit's RuntimeDirectory=pilotd)", path.display())]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "lowercase")]
pub enum Request {
    Snooze {
        seconds: u64,
    },
    Resume,
    /// A one-time key to the status page (`pilotd open`); the reply's message is its URL.
    Open,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    pub message: String,
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
    pub fn label(&self) -> String {
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
pub fn authorise(peer: &Peer, access: &Access) -> Result<(), Refused> {
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

/// The caller's credentials from the socket, completed from the user database and
/// /proc/PID/status (its supplementary groups).
fn peer_of(stream: &UnixStream) -> std::io::Result<Peer> {
    let cred = stream.peer_cred()?;
    let uid = cred.uid();
    let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name);
    let mut gids = vec![cred.gid()];
    if let Some(pid) = cred.pid() {
        gids.extend(proc_groups(&PathBuf::from(format!("/proc/{pid}/status"))));
    }
    Ok(Peer { uid, name, gids })
}

/// The `Groups:` line of a /proc/PID/status file.
fn proc_groups(status: &Path) -> Vec<u32> {
    std::fs::read_to_string(status)
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// The `pilotd` group as the group database has it now (it may be created after start).
pub fn group_now() -> Option<(u32, Vec<String>)> {
    nix::unistd::Group::from_name(GROUP)
        .ok()
        .flatten()
        .map(|g| (g.gid.as_raw(), g.mem))
}

/// What the server needs from the daemon, kept current across reloads.
#[derive(Debug, Clone)]
pub struct Context {
    pub state_dir: PathBuf,
    pub policy: crate::config::Policy,
    /// The status page's port, when it is served, and its keys and sessions.
    pub page_port: Option<u16>,
    pub doors: crate::volunteer::page::Doors,
}

/// Binds the socket: a stale socket from a previous daemon is replaced (only a socket:
/// anything else at that path is left alone and reported), and everyone may connect.
pub fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let err = |source| ControlError::Listen {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).map_err(err)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(err)?;
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(err(std::io::Error::other(
                "something other than a socket is in the way",
            )));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let l = UnixListener::bind(path).map_err(err)?;
    // Authorisation is by peer credentials, so the socket itself is open to all.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(err)?;
    Ok(l)
}

/// Who may hold what: one uid at most 4 connections, so `nobody` holding all it can leaves
/// root and the owner 28 of the 32; a client has 3 s from connecting to taking its answer
/// (`pilotd snooze` sends at once).
pub const LIMITS: Limits = Limits {
    total: 32,
    per_peer: 4,
    deadline: Duration::from_secs(3),
};

/// Answers requests until `shutdown` completes; `wake` starts an urgent cycle.
pub async fn serve(
    listener: UnixListener,
    ctx: watch::Receiver<Context>,
    wake: mpsc::Sender<()>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    listener::serve(
        "control socket",
        listener,
        LIMITS,
        shutdown,
        move |stream, _| {
            let ctx = ctx.borrow().clone();
            let wake = wake.clone();
            async move { answer(stream, &ctx, &wake).await }
        },
    )
    .await
}

async fn answer(stream: UnixStream, ctx: &Context, wake: &mpsc::Sender<()>) {
    let peer = peer_of(&stream);
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
    let reply = match (peer, reader.read_line(&mut line).await) {
        (Err(e), _) => refuse(format!("cannot read the caller's credentials: {e}")),
        (_, Err(e)) => refuse(format!("cannot read the request: {e}")),
        (Ok(peer), Ok(_)) => match serde_json::from_str::<Request>(line.trim()) {
            Err(e) => refuse(format!("not a request pilotd understands: {e}")),
            Ok(req) => {
                let access = Access {
                    users: ctx.policy.users.clone(),
                    group: group_now(),
                };
                match authorise(&peer, &access) {
                    Err(why) => {
                        tracing::warn!(caller = %peer.label(), uid = peer.uid, "control socket: {req:?} refused");
                        refuse(why.to_string())
                    }
                    Ok(()) => {
                        let reply = carry_out(&req, &peer.label(), ctx, Utc::now());
                        if reply.ok && req != Request::Open {
                            tracing::info!(caller = %peer.label(), "{}", reply.message);
                            let _ = wake.try_send(());
                        }
                        reply
                    }
                }
            }
        },
    };
    let mut body = serde_json::to_vec(&reply).unwrap_or_default();
    body.push(b'\n');
    let _ = write.write_all(&body).await;
}

fn refuse(message: String) -> Reply {
    Reply { ok: false, message }
}

/// Records the snooze (or its end) in the state dir, for the next cycle to act on; or hands
/// out a key to the status page. The caller is authorised already.
pub fn carry_out(req: &Request, by: &str, ctx: &Context, now: DateTime<Utc>) -> Reply {
    let local = |t: DateTime<Utc>| {
        t.with_timezone(&ctx.policy.timezone)
            .format("%a %Y-%m-%d %H:%M %Z")
            .to_string()
    };
    match req {
        Request::Snooze { seconds } => {
            let d = Duration::from_secs(*seconds);
            if d.is_zero() || d > snooze::LONGEST {
                return refuse(format!(
                    "a snooze lasts between 1s and {}; for longer, change the policy's schedule",
                    crate::config::units::format_duration(snooze::LONGEST)
                ));
            }
            let until = now + chrono::Duration::from_std(d).unwrap_or_default();
            let s = Snooze {
                until,
                by: by.to_string(),
                at: now,
            };
            match snooze::save(&ctx.state_dir, &s) {
                Err(e) => refuse(e.to_string()),
                Ok(()) => Reply {
                    ok: true,
                    message: format!(
                        "snoozed by {by} until {}: no worker starts before then; running workers: {}",
                        local(until),
                        match ctx.policy.on_return {
                            Evict::None | Evict::Pause => "paused",
                            Evict::Graceful => "stopped gracefully",
                            Evict::Fast => "stopped at once",
                        }
                    ),
                },
            }
        }
        Request::Resume => match snooze::clear(&ctx.state_dir, now) {
            Err(e) => refuse(e.to_string()),
            Ok(true) => Reply {
                ok: true,
                message: format!("resumed by {by}: workers may start again when the policy allows"),
            },
            Ok(false) => Reply {
                ok: true,
                message: "no snooze was in force; nothing changed".into(),
            },
        },
        Request::Open => match ctx.page_port {
            None => refuse(
                "the status page is off on this machine\n  hint: set `port` under [page] in pilotd.toml (the package's file sets 8466) and restart pilotd".into(),
            ),
            Some(port) => match ctx.doors.new_key(by, std::time::Instant::now()) {
                Ok(key) => Reply {
                    ok: true,
                    message: format!("http://127.0.0.1:{port}/?key={key}"),
                },
                Err(e) => refuse(e.to_string()),
            },
        },
    }
}

/// Sends one request to the daemon at `path` and returns its reply.
pub async fn ask(path: &Path, req: &Request) -> Result<Reply, ControlError> {
    let talk = |source| ControlError::Talk {
        path: path.to_path_buf(),
        source,
    };
    // A full backlog (someone flooding the socket with connections) refuses a non-blocking
    // connect with EAGAIN; the daemon drains it quickly, so try again for a while.
    let started = std::time::Instant::now();
    let stream = loop {
        match UnixStream::connect(path).await {
            Ok(s) => break s,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && started.elapsed() < ANSWER_WAIT =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(source) => {
                return Err(ControlError::Connect {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    };
    let (read, mut write) = stream.into_split();
    let mut body = serde_json::to_vec(req).unwrap_or_default();
    body.push(b'\n');
    write.write_all(&body).await.map_err(talk)?;
    let mut line = String::new();
    tokio::time::timeout(ANSWER_WAIT, BufReader::new(read).read_line(&mut line))
        .await
        .map_err(|_| talk(std::io::Error::other("no answer within 10s")))?
        .map_err(talk)?;
    serde_json::from_str(line.trim()).map_err(|e| ControlError::Garbled {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
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

    #[test]
    fn groups_from_proc_status() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("status");
        std::fs::write(&p, "Name:\tx\nGroups:\t4 24 990 \nVmPeak:\t1 kB\n").unwrap();
        assert_eq!(proc_groups(&p), vec![4, 24, 990]);
        assert_eq!(proc_groups(&d.path().join("missing")), Vec::<u32>::new());
    }
}
