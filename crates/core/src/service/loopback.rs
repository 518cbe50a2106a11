//! Whose process is on the other end of a TCP connection to 127.0.0.1: the status page's
//! one way to know whose browser asks. A browser cannot prove who runs it, and its requests
//! can be replayed by anyone who reads them, but the socket it connected with was made by one
//! of its user's processes, and the kernel keeps that uid with the socket. sock_diag (the
//! netlink interface `ss` uses) finds the client's socket by its four addresses and tells its
//! uid and inode; pilotd runs as root, and both ends are in its network namespace.
//!
//! What the kernel says is not always an owner: a socket its process has closed already (an
//! orphan, or one in TIME_WAIT) has no inode and is reported as uid 0. That is "unknown" here,
//! never root: a client that sends a request and closes at once must not pass for root.
//!
//! One request and one answer on a netlink socket per connection, both synchronous in the
//! kernel (it answers while the request is sent), so the accept loop calls it directly.

use super::listener::{Listener, Peer};
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
    setsockopt, socket, sockopt,
};
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use tokio::net::{TcpListener, TcpStream};

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR` (linux/netlink.h).
const NLMSG_ERROR: u16 = 2;
/// `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 1;
/// `TCP_LISTEN` (net/tcp_states.h): a listener is never a client.
const TCP_LISTEN: u8 = 10;
/// Header and request: `nlmsghdr` (16) + `inet_diag_req_v2` (8 + `inet_diag_sockid` 48).
const REQUEST_LEN: usize = 72;
/// Where the answer's fields are: `nlmsghdr` (16), then `inet_diag_msg`: family, state,
/// timer, retrans (4), `inet_diag_sockid` (48), expires, rqueue, wqueue, uid, inode.
const MSG: usize = 16;
const ID: usize = MSG + 4;
/// Ports and addresses: sport, dport, src[4], dst[4].
const ID_LEN: usize = 36;
const UID: usize = MSG + 64;
const INODE: usize = MSG + 68;

/// The uid of the process that owns the client end of the TCP connection `client` →
/// `server` (both on this host, IPv4): None when that socket is gone, closed by its process
/// (no inode), or a listener. `Err` when the kernel could not be asked.
pub(crate) fn client_uid(client: SocketAddrV4, server: SocketAddrV4) -> io::Result<Option<u32>> {
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    // The kernel answers while the request is sent; the timeout only bounds a surprise.
    let second = nix::sys::time::TimeVal::new(1, 0);
    setsockopt(&sock, sockopt::ReceiveTimeout, &second)?;
    let req = request(client, server);
    sendto(
        sock.as_raw_fd(),
        &req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    let mut buf = [0u8; 8192];
    let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty())?;
    answer(&buf[..n], &req[24..24 + ID_LEN])
}

/// The question: the TCP socket (IPv4) whose own address is `client` and whose peer is
/// `server`, in whatever state, with no cookie to match (`INET_DIAG_NOCOOKIE`).
fn request(client: SocketAddrV4, server: SocketAddrV4) -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    b[8..12].copy_from_slice(&1u32.to_ne_bytes()); // sequence
    // inet_diag_req_v2: family, protocol, ext, pad, states.
    b[16] = nix::libc::AF_INET as u8;
    b[17] = nix::libc::IPPROTO_TCP as u8;
    b[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid: sport, dport (network order), src[4], dst[4], if, cookie[2].
    b[24..26].copy_from_slice(&client.port().to_be_bytes());
    b[26..28].copy_from_slice(&server.port().to_be_bytes());
    b[28..32].copy_from_slice(&client.ip().octets());
    b[44..48].copy_from_slice(&server.ip().octets());
    b[64..72].copy_from_slice(&[0xff; 8]);
    b
}

/// The uid in the kernel's answer, if it describes the socket asked about (`id`: its ports
/// and addresses as sent) and a process still holds it.
fn answer(b: &[u8], id: &[u8]) -> io::Result<Option<u32>> {
    let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
    let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if b.len() < 16 {
        return Err(io::Error::other("sock_diag: a short answer"));
    }
    match u16_at(4) {
        NLMSG_ERROR if b.len() >= 20 => {
            let errno = -(u32_at(16) as i32);
            if errno == nix::libc::ENOENT {
                Ok(None)
            } else {
                Err(io::Error::from_raw_os_error(errno))
            }
        }
        SOCK_DIAG_BY_FAMILY if b.len() >= INODE + 4 => {
            // Ports and addresses as asked (the kernel may fall back to a listener on the
            // client's address, whose peer is none).
            let same = b[ID..ID + ID_LEN] == id[..ID_LEN];
            if !same || b[MSG + 1] == TCP_LISTEN || u32_at(INODE) == 0 {
                return Ok(None);
            }
            Ok(Some(u32_at(UID)))
        }
        t => Err(io::Error::other(format!(
            "sock_diag: an answer of type {t} ({} bytes)",
            b.len()
        ))),
    }
}

/// A TCP listener on 127.0.0.1 that tells each connection's uid (`Peer::Uid`), so the
/// accept loop caps each user's connections and the endpoint knows whose process asks.
/// A connection whose uid cannot be told is `Peer::Unknown`.
pub struct LoopbackListener(pub TcpListener);

impl Listener for LoopbackListener {
    type Conn = TcpStream;
    async fn accept(&self) -> io::Result<(TcpStream, Peer)> {
        let (s, remote) = self.0.accept().await?;
        let peer = match (remote, s.local_addr()) {
            (SocketAddr::V4(client), Ok(SocketAddr::V4(server))) => {
                match client_uid(client, server) {
                    Ok(Some(uid)) => Peer::Uid(uid),
                    Ok(None) => Peer::Unknown,
                    Err(e) => {
                        tracing::debug!("cannot tell whose connection {client} is: {e}");
                        Peer::Unknown
                    }
                }
            }
            _ => Peer::Unknown,
        };
        Ok((s, peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &std::net::TcpStream) -> (SocketAddrV4, SocketAddrV4) {
        match (s.local_addr().unwrap(), s.peer_addr().unwrap()) {
            (SocketAddr::V4(a), SocketAddr::V4(b)) => (a, b),
            x => panic!("{x:?}"),
        }
    }

    /// The kernel names this process's uid for a connection it holds; nothing for the
    /// connection once it is closed, nor for ports no socket has.
    #[test]
    fn the_uid_of_a_connection_and_of_none() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server_side, _) = l.accept().unwrap();
        let (client, server) = v4(&c);
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(client_uid(client, server).unwrap(), Some(me));
        // The server's own end, asked the other way round, is this process's too.
        assert_eq!(client_uid(server, client).unwrap(), Some(me));
        // The client closes (first: its end waits in FIN_WAIT or TIME_WAIT): no owner.
        drop(c);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(client_uid(client, server).unwrap(), None, "an orphan");
        drop(server_side);
        let nowhere = SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 1);
        assert_eq!(client_uid(nowhere, server).unwrap(), None);
    }

    /// An answer for another socket, a listener's, or an orphan's names nobody; an error
    /// other than "no such socket" is an error.
    #[test]
    fn answers_that_name_nobody() {
        let client = SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 40000);
        let server = SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 8466);
        let req = request(client, server);
        let id = &req[24..24 + ID_LEN];
        let msg = |state: u8, uid: u32, inode: u32, id: &[u8]| {
            let mut b = vec![0u8; INODE + 4];
            b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
            b[MSG + 1] = state;
            b[ID..ID + ID_LEN].copy_from_slice(&id[..ID_LEN]);
            b[UID..UID + 4].copy_from_slice(&uid.to_ne_bytes());
            b[INODE..INODE + 4].copy_from_slice(&inode.to_ne_bytes());
            b
        };
        assert_eq!(answer(&msg(1, 1000, 77, id), id).unwrap(), Some(1000));
        assert_eq!(answer(&msg(1, 0, 0, id), id).unwrap(), None, "orphan");
        assert_eq!(
            answer(&msg(TCP_LISTEN, 1000, 77, id), id).unwrap(),
            None,
            "listener"
        );
        let other = request(SocketAddrV4::new(*client.ip(), 40001), server);
        assert_eq!(
            answer(&msg(1, 1000, 77, &other[24..24 + ID_LEN]), id).unwrap(),
            None,
            "another socket"
        );
        let err = |errno: i32| {
            let mut b = vec![0u8; 36];
            b[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
            b[16..20].copy_from_slice(&(-errno).to_ne_bytes());
            answer(&b, id)
        };
        assert_eq!(err(nix::libc::ENOENT).unwrap(), None);
        assert!(err(nix::libc::EPERM).is_err());
        assert!(answer(&[0u8; 8], id).is_err());
    }
}
