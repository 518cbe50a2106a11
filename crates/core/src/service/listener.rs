//! How pilotd serves its local endpoints (the control socket, the status page, the metrics)
//! so that nobody on the machine can starve them, or pilotd, by holding connections open.
//!
//! Every connection holds one of pilotd's file descriptors. Served without limits, `nobody`
//! once held about 1,000 idle connections: pilotd ran out of descriptors, could no longer
//! read the owner's snooze or list its workers, and `pilotd snooze` took seconds to answer.
//! So each server here (after tokio's mini-redis):
//! - takes a slot of its [`Limits::total`] before it accepts: past the cap, connections wait
//!   in the kernel's backlog, which costs pilotd no descriptor;
//! - where the socket tells who is on the other end (SO_PEERCRED on a unix socket, sock_diag
//!   for the status page's loopback TCP: `loopback`), lets one uid hold at most
//!   [`Limits::per_peer`] of them and closes the rest at once, so one local user can never
//!   take the slots root and the owner need;
//! - gives each connection [`Limits::deadline`] from accept to its answer taken: a slow or
//!   silent client is dropped after a few seconds;
//! - pauses after a failed accept (out of descriptors: EMFILE/ENFILE) instead of spinning on
//!   an error a retry cannot fix;
//! - ends when its shutdown future completes (a [`Stop`]): it stops accepting, closes its
//!   listener, gives connections in flight a moment to finish, then ends them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// Who is on the other end of a connection, as far as its socket tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The kernel's word (a unix socket's peer credentials, or the owner of a loopback TCP
    /// connection's client socket: `loopback`): no client can forge it.
    Uid(u32),
    /// A connection whose uid is not told (TCP from elsewhere, or a client gone already).
    Unknown,
}

/// A listening socket the servers here can accept from.
pub trait Listener: Send + 'static {
    type Conn: Send + 'static;
    fn accept(&self) -> impl Future<Output = std::io::Result<(Self::Conn, Peer)>> + Send;
}

impl Listener for TcpListener {
    type Conn = TcpStream;
    async fn accept(&self) -> std::io::Result<(TcpStream, Peer)> {
        let (s, _) = TcpListener::accept(self).await?;
        Ok((s, Peer::Unknown))
    }
}

impl Listener for UnixListener {
    type Conn = UnixStream;
    async fn accept(&self) -> std::io::Result<(UnixStream, Peer)> {
        let (s, _) = UnixListener::accept(self).await?;
        // Without credentials the connection counts in the total only; the control socket's
        // own check then refuses it.
        let peer = s.peer_cred().map_or(Peer::Unknown, |c| Peer::Uid(c.uid()));
        Ok((s, peer))
    }
}

/// What one server allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub total: usize,
    /// Connections one uid may hold at once, where the socket tells the uid.
    pub per_peer: usize,
    /// From accept to the answer taken; then the connection is dropped.
    pub deadline: Duration,
}

/// The pause after a failed accept: long enough that a process out of descriptors costs no
/// CPU, short enough that service resumes soon after descriptors free up.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(500);

/// How long connections in flight may go on after the shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How often at most a server says that it refuses a uid past its cap (an attack would
/// otherwise fill the journal).
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// Ends servers: each [`signal`](Stop::signal) completes when [`stop`](Stop::stop) is called
/// or the `Stop` is dropped.
#[derive(Debug)]
pub struct Stop(watch::Sender<bool>);

impl Default for Stop {
    fn default() -> Self {
        Stop(watch::channel(false).0)
    }
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// A shutdown future for one server.
    pub fn signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.subscribe();
        async move {
            // An error means the Stop is gone, which ends the servers too.
            let _ = rx.wait_for(|stopped| *stopped).await;
        }
    }

    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// The connections each uid holds now.
type Held = Arc<Mutex<HashMap<u32, usize>>>;

/// One uid's connection, counted while it lives.
struct PeerSlot {
    held: Held,
    uid: u32,
}

impl PeerSlot {
    /// A slot for `uid`, or None when it holds `cap` already.
    fn take(held: &Held, uid: u32, cap: usize) -> Option<PeerSlot> {
        let mut h = held.lock().unwrap_or_else(|p| p.into_inner());
        let n = h.entry(uid).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            held: held.clone(),
            uid,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = h.get_mut(&self.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                h.remove(&self.uid);
            }
        }
    }
}

/// Serves `listener` within `limits` until `shutdown` completes: `handle` answers one
/// connection. `name` starts the server's log lines ("control socket", "metrics", ...).
pub async fn serve<L, F, Fut>(
    name: &'static str,
    listener: L,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    handle: F,
) where
    L: Listener,
    F: Fn(L::Conn, Peer) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.total));
    let held: Held = Arc::default();
    let mut conns = JoinSet::new();
    let mut accept_failing = false;
    let mut refused = 0u64;
    let mut refusal_logged: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        // A free slot first, then the connection: past the cap, connections wait in the
        // backlog. (Both are cancel-safe: a connection finishing in between loses nothing.)
        let next = async {
            let permit = slots.clone().acquire_owned().await;
            (permit, listener.accept().await)
        };
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            (permit, accepted) = next => {
                let Ok(permit) = permit else { break };
                match accepted {
                    Err(e) => {
                        drop(permit);
                        if !accept_failing {
                            tracing::warn!(
                                "{name}: cannot accept a connection ({e}); pausing {} ms between tries",
                                ACCEPT_BACKOFF.as_millis()
                            );
                            accept_failing = true;
                        }
                        tokio::select! {
                            _ = &mut shutdown => break,
                            _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        }
                    }
                    Ok((conn, peer)) => {
                        accept_failing = false;
                        let slot = match peer {
                            Peer::Uid(uid) => match PeerSlot::take(&held, uid, limits.per_peer) {
                                Some(s) => Some(s),
                                None => {
                                    // Closed at once: its descriptor is back before the next accept.
                                    drop(conn);
                                    refused += 1;
                                    if refusal_logged.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_EVERY) {
                                        tracing::warn!(
                                            uid,
                                            "{name}: uid {uid} holds {} connections already; closing its new ones ({refused} refused so far)",
                                            limits.per_peer
                                        );
                                        refusal_logged = Some(Instant::now());
                                    }
                                    continue;
                                }
                            },
                            Peer::Unknown => None,
                        };
                        let answer = handle(conn, peer);
                        let deadline = limits.deadline;
                        conns.spawn(async move {
                            if tokio::time::timeout(deadline, answer).await.is_err() {
                                tracing::debug!("{name}: a client took longer than {deadline:?}; dropped");
                            }
                            drop(slot);
                            drop(permit);
                        });
                    }
                }
            }
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    conns.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMITS: Limits = Limits {
        total: 4,
        per_peer: 2,
        deadline: Duration::from_millis(600),
    };

    /// Answers "ok\n" to whatever line a client sends.
    fn echo_server(listener: UnixListener, stop: &Stop) -> tokio::task::JoinHandle<()> {
        tokio::spawn(serve(
            "test",
            listener,
            LIMITS,
            stop.signal(),
            |mut s: UnixStream, _| async move {
                let mut b = [0u8; 16];
                if let Ok(n) = s.read(&mut b).await
                    && n > 0
                {
                    let _ = s.write_all(b"ok\n").await;
                }
            },
        ))
    }

    async fn ask(path: &std::path::Path) -> String {
        let mut s = UnixStream::connect(path).await.unwrap();
        s.write_all(b"hi\n").await.unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        out
    }

    /// Whether the server closed `s` (EOF) within `within`.
    async fn closed(s: &mut UnixStream, within: Duration) -> bool {
        let mut b = [0u8; 1];
        matches!(
            tokio::time::timeout(within, s.read(&mut b)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    /// One uid past its cap is closed at once; the same uid is served again once its idle
    /// connections reach their deadline; a shutdown ends the server and its connections.
    #[tokio::test]
    async fn a_peer_past_its_cap_is_closed_and_idle_ones_time_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let stop = Stop::new();
        let server = echo_server(UnixListener::bind(&path).unwrap(), &stop);
        // Two idle connections of this uid take its cap...
        let mut idle = Vec::new();
        for _ in 0..LIMITS.per_peer {
            idle.push(UnixStream::connect(&path).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        // ...so a third is closed at once, unanswered.
        let mut third = UnixStream::connect(&path).await.unwrap();
        assert!(
            closed(&mut third, Duration::from_millis(300)).await,
            "past the cap"
        );
        // The idle ones are dropped at their deadline, and the uid is served again.
        for s in &mut idle {
            assert!(
                closed(s, Duration::from_secs(2)).await,
                "idle past the deadline"
            );
        }
        assert_eq!(ask(&path).await, "ok\n");
        // A shutdown ends the accept loop and closes the listener.
        let mut open = UnixStream::connect(&path).await.unwrap();
        stop.stop();
        tokio::time::timeout(Duration::from_secs(3), server)
            .await
            .expect("the server ended")
            .unwrap();
        assert!(closed(&mut open, Duration::from_millis(100)).await);
        assert!(UnixStream::connect(&path).await.is_err(), "nobody listens");
    }

    /// Past the total, connections wait in the backlog and are served as slots free up.
    #[tokio::test]
    async fn past_the_total_connections_wait_for_a_slot() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Stop::new();
        let limits = Limits {
            deadline: Duration::from_secs(30),
            ..LIMITS
        };
        let server = tokio::spawn(serve(
            "test",
            listener,
            limits,
            stop.signal(),
            |mut s: TcpStream, peer| async move {
                assert_eq!(peer, Peer::Unknown);
                let mut b = [0u8; 16];
                if let Ok(n) = s.read(&mut b).await
                    && n > 0
                {
                    let _ = s.write_all(b"ok\n").await;
                }
            },
        ));
        // TCP tells no uid: the total alone holds, whoever connects.
        let mut idle = Vec::new();
        for _ in 0..limits.total {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let asked = async {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"hi\n").await.unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out).await;
            out
        };
        tokio::pin!(asked);
        let early = tokio::time::timeout(Duration::from_millis(500), &mut asked).await;
        assert!(early.is_err(), "answered past the total: {early:?}");
        drop(idle.pop());
        let out = tokio::time::timeout(Duration::from_secs(3), &mut asked)
            .await
            .expect("served once a slot freed");
        assert_eq!(out, "ok\n");
        drop(stop);
        tokio::time::timeout(Duration::from_secs(3), server)
            .await
            .expect("a dropped Stop ends the server")
            .unwrap();
    }
}
