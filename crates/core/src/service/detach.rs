//! `pilotd run --daemon`: fork into the background before any tokio runtime exists (tokio
//! does not survive a fork), refuse to start when the pid file is locked by a live daemon, and
//! make the parent's exit status say whether the daemon really started. daemonize 0.5 exits 0
//! in the parent even when the child then fails (knsd/daemonize#53), so this uses a readiness
//! pipe instead: the parent waits until the daemon reports ready (after its first successful
//! cycle) or failed, or dies.

use nix::fcntl::{Flock, FlockArg};
use nix::unistd::{ForkResult, fork, setsid};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DetachError {
    #[error("pilotd is already running as pid {pid} (it holds the lock on {})\n  hint: stop it first, or use another --pidfile", path.display())]
    AlreadyRunning { path: PathBuf, pid: String },
    #[error("cannot use pid file {}: {source}\n  hint: check that its directory exists and is writable", path.display())]
    PidFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot detach from the terminal: {0}")]
    Fork(nix::Error),
}

/// Held by the daemon: the locked pid file and the write end of the readiness pipe.
pub struct Detached {
    _pidfile: Option<Flock<File>>,
    ready: Option<File>,
}

impl Detached {
    /// Tells the waiting parent that the daemon is up; the parent exits 0.
    pub fn ready(&mut self) {
        if let Some(mut w) = self.ready.take() {
            let _ = w.write_all(b"R");
        }
    }

    /// Tells the waiting parent why the daemon could not start; the parent prints it and
    /// exits 1.
    pub fn failed(&mut self, why: &str) {
        if let Some(mut w) = self.ready.take() {
            let _ = w.write_all(format!("F{why}").as_bytes());
        }
    }
}

/// What the caller of `detach` is after it returns.
pub enum Role {
    /// The original process: exit with this code (after printing `message`).
    Parent { code: u8, message: String },
    /// The daemon.
    Daemon(Detached),
}

/// Locks the pid file (if any), forks twice, and returns in both the parent and the daemon.
/// `log` receives the daemon's stdout and stderr (opened in append mode).
pub fn detach(pidfile: Option<&Path>, log: &Path) -> Result<Role, DetachError> {
    // Lock before forking so a second `--daemon` fails in the foreground, with a message.
    let locked = pidfile.map(lock_pidfile).transpose()?;
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(log)
        .or_else(|_| File::options().write(true).open("/dev/null"))
        .map_err(|e| DetachError::PidFile {
            path: log.to_path_buf(),
            source: e,
        })?;
    let (read_end, write_end): (OwnedFd, OwnedFd) =
        nix::unistd::pipe().map_err(DetachError::Fork)?;

    // SAFETY: called from `main` before any thread or runtime exists; the child only calls
    // async-signal-safe functions until it forks again and returns.
    match unsafe { fork() }.map_err(DetachError::Fork)? {
        ForkResult::Parent { .. } => {
            drop(write_end);
            // Dropping a `Flock` unlocks the description the daemon shares; the parent exits
            // soon and its copy of the descriptor with it.
            std::mem::forget(locked);
            Ok(wait_for_daemon(File::from(read_end)))
        }
        ForkResult::Child => {
            drop(read_end);
            let _ = setsid();
            // SAFETY: as above; the intermediate process exits at once.
            match unsafe { fork() } {
                Ok(ForkResult::Parent { .. }) => unsafe { nix::libc::_exit(0) },
                Ok(ForkResult::Child) => {}
                Err(_) => unsafe { nix::libc::_exit(1) },
            }
            let _ = nix::unistd::chdir("/");
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o027));
            if let Ok(null) = File::open("/dev/null") {
                let _ = nix::unistd::dup2_stdin(&null);
            }
            let _ = nix::unistd::dup2_stdout(&log_file);
            let _ = nix::unistd::dup2_stderr(&log_file);
            let mut locked = locked;
            if let Some(f) = &mut locked {
                // The daemon's own pid, now that it will not fork again.
                let _ = write_pid(f).and_then(|()| f.flush());
            }
            Ok(Role::Daemon(Detached {
                _pidfile: locked,
                ready: Some(File::from(write_end)),
            }))
        }
    }
}

/// A pid file locked by this process (for `--pidfile` without `--daemon`).
pub struct PidFile {
    _lock: Flock<File>,
}

/// Locks `path` and writes this process's pid into it; fails if a live pilotd holds it.
pub fn hold_pidfile(path: &Path) -> Result<PidFile, DetachError> {
    let mut f = lock_pidfile(path)?;
    let err = |source| DetachError::PidFile {
        path: path.to_path_buf(),
        source,
    };
    write_pid(&mut f).map_err(err)?;
    Ok(PidFile { _lock: f })
}

/// Replaces the pid file's content with this process's pid.
fn write_pid(f: &mut Flock<File>) -> std::io::Result<()> {
    f.set_len(0)?;
    f.rewind()?;
    writeln!(**f, "{}", std::process::id())
}

fn lock_pidfile(path: &Path) -> Result<Flock<File>, DetachError> {
    let err = |source| DetachError::PidFile {
        path: path.to_path_buf(),
        source,
    };
    // Never through a link: a pid file path in a writable directory (/run/user, /tmp) must not
    // let someone point pilotd's pid write at another file.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                err(std::io::Error::other(
                    "it is a symbolic link; pilotd writes its pid only into a plain file",
                ))
            } else {
                err(e)
            }
        })?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(f) => Ok(f),
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            Err(DetachError::AlreadyRunning {
                path: path.to_path_buf(),
                pid: pid.trim().to_string(),
            })
        }
        Err((_, e)) => Err(err(std::io::Error::from(e))),
    }
}

fn wait_for_daemon(mut pipe: File) -> Role {
    let mut buf = Vec::new();
    // Returns when the daemon writes its verdict and closes, or when it dies (EOF).
    let _ = pipe.read_to_end(&mut buf);
    match buf.split_first() {
        Some((b'R', _)) => Role::Parent {
            code: 0,
            message: String::new(),
        },
        Some((b'F', why)) => Role::Parent {
            code: 1,
            message: format!(
                "pilotd: the daemon failed to start: {}",
                String::from_utf8_lossy(why)
            ),
        },
        _ => Role::Parent {
            code: 1,
            message: "the daemon exited before it was ready (see pilotd.log in the state dir)"
                .into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_at_the_pid_file_is_refused_and_its_target_untouched() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = d.path().join("pilotd.pid");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = hold_pidfile(&link).err().expect("refused").to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(e.contains(&link.display().to_string()), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // A plain path works, and holds this process's pid.
        let plain = d.path().join("plain.pid");
        let _held = hold_pidfile(&plain).unwrap();
        assert_eq!(
            std::fs::read_to_string(&plain).unwrap().trim(),
            std::process::id().to_string()
        );
    }
}
