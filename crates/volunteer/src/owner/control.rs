//! The owner's control socket: `pilotd snooze` and `pilotd resume` without root. The daemon
//! listens on a unix socket (pilotd.toml `control_socket`, mode 0666 in a 0755 runtime dir)
//! and authorises each caller by its peer credentials (SO_PEERCRED), which the kernel fills
//! in and no client can forge: root, the users named in the policy's `[owner] users`, and
//! members of the `pilotd` group (the Debian package creates it). Anyone else is refused with
//! a message that says who may and how to become one.
//!
//! One JSON line each way: a `Request`, then a `Reply`. Who may ask and what asking does are
//! the owner's request core (`owner`), which the status page shares; this module is the
//! socket: binding it, the caller's credentials, the protocol, and `ask` for the commands.
//! A snooze or resume wakes the loop, which acts on it in an urgent cycle.

use crate::owner::request::{
    Access, Context, Peer, Reply, Request, authorise, carry_out, group_now,
};
use chrono::Utc;
use pilotd_core::service::listener::{self, Limits};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};

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

/// The caller's credentials from the socket, completed from the user database and
/// /proc/PID/status (its supplementary groups).
fn peer_of(stream: &UnixStream) -> std::io::Result<Peer> {
    let cred = stream.peer_cred()?;
    let mut gids = vec![cred.gid()];
    if let Some(pid) = cred.pid() {
        gids.extend(proc_groups(&PathBuf::from(format!("/proc/{pid}/status"))));
    }
    Ok(Peer::named(cred.uid(), gids))
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

/// Binds the socket: a stale socket from a previous daemon is replaced (only a socket:
/// anything else at that path is left alone and reported), and everyone may connect.
pub(crate) fn bind(path: &Path) -> Result<UnixListener, ControlError> {
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
pub(crate) const LIMITS: Limits = Limits {
    total: 32,
    per_peer: 4,
    deadline: Duration::from_secs(3),
};

/// Answers requests until `shutdown` completes; `wake` starts an urgent cycle.
pub(crate) async fn serve(
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
        (Err(e), _) => Reply::refused(format!("cannot read the caller's credentials: {e}")),
        (_, Err(e)) => Reply::refused(format!("cannot read the request: {e}")),
        (Ok(peer), Ok(_)) => match serde_json::from_str::<Request>(line.trim()) {
            Err(e) => Reply::refused(format!("not a request pilotd understands: {e}")),
            Ok(req) => {
                let access = Access {
                    users: ctx.policy.users.clone(),
                    group: group_now(),
                };
                match authorise(&peer, &access) {
                    Err(why) => {
                        tracing::warn!(caller = %peer.label(), uid = peer.uid, "control socket: {req:?} refused");
                        Reply::refused(why.to_string())
                    }
                    Ok(()) => {
                        let reply = carry_out(&req, &peer.label(), peer.uid, ctx, Utc::now());
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
    let _ = write.write_all(&json_line(&reply)).await;
}

/// One message of the protocol: its JSON and a newline.
fn json_line(message: &impl serde::Serialize) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    line
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
    write.write_all(&json_line(req)).await.map_err(talk)?;
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

    #[test]
    fn groups_from_proc_status() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("status");
        std::fs::write(&p, "Name:\tx\nGroups:\t4 24 990 \nVmPeak:\t1 kB\n").unwrap();
        assert_eq!(proc_groups(&p), vec![4, 24, 990]);
        assert_eq!(proc_groups(&d.path().join("missing")), Vec::<u32>::new());
    }
}
