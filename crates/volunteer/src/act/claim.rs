//! One daemon per instance and engine. Two pilotds with the same `[docker] instance` on one
//! engine (say, two state dirs on one host) would each treat the other's workers as surplus:
//! one starts workers, the other removes them, every cycle, for ever. So a daemon claims its
//! instance before it does anything: it takes an exclusive `flock` on a file named after the
//! engine's endpoint and the instance, in a directory only root can write (`/run/pilotd`,
//! systemd's RuntimeDirectory). The kernel releases the lock with the process, however it
//! ends (a SIGKILL included), so a restart never finds a stale claim.
//!
//! Only root can make the claim, so nobody else can squat it: the directory must be root's
//! (pilotd creates it 0755 when missing) and writable by no one else, and is refused when it
//! is a symbolic link; the lock file is opened without following links and kept 0600, because
//! `flock` needs only a descriptor, and a file others may open for reading they may also lock.
//! (The claim used to be an abstract unix socket, which any local user could bind first: then
//! `pilotd run` refused to start.) A pilotd run by another user claims in its own
//! `$XDG_RUNTIME_DIR/pilotd`, held to the same rules with that user as the owner.

use crate::settings::EngineSettings;
use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where root's pilotd claims its instances.
pub(crate) const ROOT_DIR: &str = "/run/pilotd";

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
    #[error("cannot claim instance \"{instance}\" in {}: {source}", path.display())]
    Io {
        instance: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "refusing to claim instance \"{instance}\" in {}: {why}\n  hint: only the user pilotd runs as (root) may create files there; remove it (pilotd recreates it 0755) or fix its owner and mode", path.display()
    )]
    Unsafe {
        instance: String,
        path: PathBuf,
        why: String,
    },
    #[error(
        "cannot tell where to claim instance \"{instance}\": pilotd runs as uid {uid}, not root, and XDG_RUNTIME_DIR is not set\n  hint: run pilotd as root (the systemd unit does), or set XDG_RUNTIME_DIR"
    )]
    NoDir { instance: String, uid: u32 },
}

/// Held for the daemon's life; dropping it (or the process ending) releases the instance.
#[derive(Debug)]
pub struct InstanceClaim {
    _lock: Flock<File>,
}

/// The lock file's name for one instance on one engine.
pub(crate) fn claim_name(engine: &EngineSettings) -> String {
    let digest = Sha256::digest(format!("{}\0{}", engine.socket, engine.instance).as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("instance-{hex}.lock")
}

/// Claims `engine`'s instance for this process, in root's `/run/pilotd` (or, for another
/// user, `$XDG_RUNTIME_DIR/pilotd`).
pub fn claim(engine: &EngineSettings) -> Result<InstanceClaim, ClaimError> {
    let uid = nix::unistd::geteuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        _ if uid == 0 => PathBuf::from(ROOT_DIR),
        Some(d) if !d.is_empty() => PathBuf::from(d).join("pilotd"),
        _ => {
            let instance = engine.instance.clone();
            return Err(ClaimError::NoDir { instance, uid });
        }
    };
    claim_in(&dir, engine)
}

/// Claims `engine`'s instance with a lock file in `dir`, which must be this user's alone.
pub(crate) fn claim_in(dir: &Path, engine: &EngineSettings) -> Result<InstanceClaim, ClaimError> {
    let uid = nix::unistd::geteuid().as_raw();
    let path = dir.join(claim_name(engine));
    let io = |path: &Path, source| ClaimError::Io {
        instance: engine.instance.clone(),
        path: path.to_path_buf(),
        source,
    };
    let refuse = |path: &Path, why: String| ClaimError::Unsafe {
        instance: engine.instance.clone(),
        path: path.to_path_buf(),
        why,
    };
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        // The umask may have narrowed it; owners reach the control socket through it.
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| io(dir, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(dir, e)),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| io(dir, e))?;
    if m.file_type().is_symlink() {
        return Err(refuse(dir, "it is a symbolic link".into()));
    }
    if !m.is_dir() {
        return Err(refuse(dir, "it is not a directory".into()));
    }
    if m.uid() != uid {
        return Err(refuse(
            dir,
            format!("it belongs to uid {}, not to uid {uid}", m.uid()),
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(refuse(
            dir,
            format!("others may write in it (mode {:o})", m.mode() & 0o7777),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                refuse(&path, "it is a symbolic link".into())
            } else {
                io(&path, e)
            }
        })?;
    let m = file.metadata().map_err(|e| io(&path, e))?;
    if !m.is_file() || m.uid() != uid {
        return Err(refuse(
            &path,
            format!("it is not a plain file of uid {uid}"),
        ));
    }
    if m.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io(&path, e))?;
    }
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut f) => {
            // The holder's pid, for the refusal of a second daemon.
            let _ = f
                .set_len(0)
                .and_then(|()| f.rewind())
                .and_then(|()| writeln!(*f, "{}", std::process::id()));
            Ok(InstanceClaim { _lock: f })
        }
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            Err(ClaimError::Taken {
                instance: engine.instance.clone(),
                endpoint: engine.socket.clone(),
                pid: pid.trim().parse().ok(),
            })
        }
        Err((_, e)) => Err(io(&path, e.into())),
    }
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

    /// A directory of this process's user, 0755, as /run/pilotd is root's.
    fn own_dir() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("pilotd");
        (t, dir)
    }

    #[test]
    fn an_instance_is_claimed_once_per_engine_and_released_on_drop() {
        let (_t, dir) = own_dir();
        let a = engine("unix:///var/run/docker.sock", "claim-test");
        let first = claim_in(&dir, &a).unwrap();
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755, "created 0755");
        let lock = std::fs::metadata(dir.join(claim_name(&a))).unwrap();
        assert_eq!(
            lock.mode() & 0o777,
            0o600,
            "nobody else may open it to lock it"
        );
        match claim_in(&dir, &a) {
            Err(ClaimError::Taken { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id() as i32), "the holder is named");
            }
            other => panic!("a second claim must be refused: {other:?}"),
        }
        // Another instance, or the same name on another engine, is another claim.
        let _other =
            claim_in(&dir, &engine("unix:///var/run/docker.sock", "claim-test-b")).unwrap();
        let _elsewhere = claim_in(
            &dir,
            &engine("unix:///run/podman/podman.sock", "claim-test"),
        )
        .unwrap();
        drop(first);
        claim_in(&dir, &a).expect("released with its holder");
    }

    #[test]
    fn a_directory_others_could_write_or_a_link_is_refused() {
        let a = engine("unix:///var/run/docker.sock", "claim-test");
        let (t, dir) = own_dir();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = claim_in(&dir, &a).unwrap_err().to_string();
        assert!(e.contains("others may write in it (mode 777)"), "{e}");

        let link = t.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = claim_in(&link, &a).unwrap_err().to_string();
        assert!(e.contains("it is a symbolic link"), "{e}");

        // A link planted as the lock file is not followed.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join(claim_name(&a))).unwrap();
        let e = claim_in(&dir, &a).unwrap_err().to_string();
        assert!(e.contains("it is a symbolic link"), "{e}");
    }

    /// A directory of another user is refused (as root, a dir given to uid 65534).
    #[test]
    fn a_directory_of_another_user_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let a = engine("unix:///var/run/docker.sock", "claim-test");
        let (_t, dir) = own_dir();
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let e = claim_in(&dir, &a).unwrap_err().to_string();
        assert!(e.contains("it belongs to uid 65534, not to uid 0"), "{e}");
    }
}
