//! One daemon per instance and engine. Two pilotds with the same `[docker] instance` on one
//! engine (say, two state dirs on one host) would each treat the other's workers as surplus:
//! one starts workers, the other removes them, every cycle, for ever. So a daemon claims its
//! instance before it does anything: it binds an abstract unix socket whose name is derived
//! from the engine's endpoint and the instance. The kernel releases it with the process,
//! however the process ends (a SIGKILL included), so a restart never finds a stale claim.
//! Abstract sockets live in the network namespace: two daemons in different namespaces
//! driving one engine are not caught here (give them different instances).

use crate::volunteer::settings::EngineSettings;
use sha2::{Digest, Sha256};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "another pilotd{} already runs instance \"{instance}\" on the engine at {endpoint}\n  \
         hint: two daemons with one instance remove each other's workers; stop the other one, \
         or give each its own [docker] instance in pilotd.toml"
    , pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Taken {
        instance: String,
        endpoint: String,
        pid: Option<i32>,
    },
    #[error("cannot claim instance \"{instance}\": {source}")]
    Io {
        instance: String,
        source: std::io::Error,
    },
}

/// Held for the daemon's life; dropping it (or the process ending) releases the instance.
#[derive(Debug)]
pub struct InstanceClaim {
    _socket: UnixListener,
}

/// The abstract socket name of one instance on one engine.
pub fn claim_name(engine: &EngineSettings) -> String {
    let digest = Sha256::digest(format!("{}\0{}", engine.socket, engine.instance).as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("pilotd/instance/{hex}")
}

/// Claims `engine`'s instance for this process.
pub fn claim(engine: &EngineSettings) -> Result<InstanceClaim, ClaimError> {
    let io = |source| ClaimError::Io {
        instance: engine.instance.clone(),
        source,
    };
    let addr = SocketAddr::from_abstract_name(claim_name(engine).as_bytes()).map_err(io)?;
    match UnixListener::bind_addr(&addr) {
        Ok(socket) => Ok(InstanceClaim { _socket: socket }),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(ClaimError::Taken {
            instance: engine.instance.clone(),
            endpoint: engine.socket.clone(),
            pid: holder(&addr),
        }),
        Err(e) => Err(io(e)),
    }
}

/// The pid of the process holding the claim, from the socket's peer credentials.
fn holder(addr: &SocketAddr) -> Option<i32> {
    let stream = UnixStream::connect_addr(addr).ok()?;
    let cred =
        nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    Some(cred.pid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn engine(socket: &str, instance: &str) -> EngineSettings {
        EngineSettings {
            socket: socket.into(),
            instance: instance.into(),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn an_instance_is_claimed_once_per_engine_and_released_on_drop() {
        let unique = format!("claim-test-{}", std::process::id());
        let a = engine("unix:///var/run/docker.sock", &unique);
        let first = claim(&a).unwrap();
        match claim(&a) {
            Err(ClaimError::Taken { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id() as i32), "the holder is named");
            }
            other => panic!("a second claim must be refused: {other:?}"),
        }
        // Another instance, or the same name on another engine, is another claim.
        let _other = claim(&engine(
            "unix:///var/run/docker.sock",
            &format!("{unique}-b"),
        ))
        .unwrap();
        let _elsewhere = claim(&engine("unix:///run/podman/podman.sock", &unique)).unwrap();
        drop(first);
        claim(&a).expect("released with its holder");
    }
}
