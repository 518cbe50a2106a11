//! One inotify watch on a directory, read as the runtime's async events: the utmp file's
//! directory (the daemon's wake-ups) and the input devices' (`input`) use it alike.

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Why a directory cannot be watched (each user then polls instead).
#[derive(Debug, thiserror::Error)]
pub(crate) enum InotifyError {
    #[error("inotify: {0}")]
    Init(nix::Error),
    #[error("watching {}: {source}", dir.display())]
    Watch { dir: PathBuf, source: nix::Error },
    #[error("registering the inotify descriptor: {0}")]
    Register(io::Error),
}

struct InotifyFd(Inotify);

impl AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A watch on one directory, registered with the runtime.
pub(crate) struct DirWatch(AsyncFd<InotifyFd>);

impl DirWatch {
    /// Watches `dir` for the events in `mask`.
    pub(crate) fn new(dir: &Path, mask: AddWatchFlags) -> Result<DirWatch, InotifyError> {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(InotifyError::Init)?;
        ino.add_watch(dir, mask)
            .map_err(|source| InotifyError::Watch {
                dir: dir.to_path_buf(),
                source,
            })?;
        // SAFETY: the descriptor is owned by the `Inotify` inside the `AsyncFd`, so it stays
        // open and the same for the `AsyncFd`'s whole life, and `as_raw_fd` always returns it.
        unsafe { AsyncFd::register_with_interest(InotifyFd(ino), Interest::READABLE) }
            .map(DirWatch)
            .map_err(|e| InotifyError::Register(e.into()))
    }

    /// The next events, waiting for them. Cancel-safe: events not yet read stay queued.
    pub(crate) async fn events(&self) -> io::Result<Vec<InotifyEvent>> {
        loop {
            let mut guard = self.0.readable().await?;
            match guard.get_inner().0.read_events() {
                Ok(events) => return Ok(events),
                Err(nix::errno::Errno::EAGAIN) => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
