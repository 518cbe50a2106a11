//! A worker's writable space on the host and its token copy: made ready before a start, and
//! removed by one function on every end (the executor's removal, a failed start, GC of
//! leftovers, `failsafe --remove`, hence purge). `remove_worker` is the one removal of a
//! worker whose container has ended: its container, then all of it outside (`remove`).
//!
//! The disk share is enforced by the kernel: each worker's scratch is an ext4 filesystem in
//! an image file of exactly its share, fully allocated (`fallocate`, never sparse: the share is
//! taken from the host's free space at start and can never grow), attached to a loop device
//! (`loopdev`, autoclear) and mounted by the engine as a `local` volume named after the worker.
//! A file deleted but kept open, an inode flood (the inode count is fixed at one per 16 KiB),
//! or holes punched in the image all stay inside the image. This is HTCondor's
//! `STARTD_ENFORCE_DISK_LIMITS` (a loopback filesystem per slot) done by pilotd. Why the engine
//! mounts it rather than pilotd: pilotd's unit has its own mount namespace (ProtectSystem),
//! whose mounts the engine would not see; and the engine unmounts at the worker's end and
//! after its own restarts, so a crashed pilotd leaves no mount behind, only files in the
//! scratch root, found by their names.
//!
//! Layout under the scratch root (`<state_dir>/scratch` by default): `<worker>.img` (the
//! image) or `<worker>/` (a measured scratch dir); tokens under `<state_dir>/tokens/<worker>`.
//! Either root being a symlink is refused: pilotd writes and deletes as root below them.

use crate::act::backend::{Backend, BackendError};
use crate::act::loopdev::{self, Attached, LoopError};
use crate::settings::WorkerSettings;
use crate::worker::{DiskImage, WorkerSpec, scratch_image};
use std::path::{Path, PathBuf};

/// One inode per this many bytes of a disk image: mke2fs's default ratio; a flood of empty
/// files ends inside the image like a big file does.
pub(crate) const BYTES_PER_INODE: u64 = 16 << 10;

/// A worker's scratch or token copy could not be made ready, or removed.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    #[error("cannot create scratch dir {}: {source}\n  hint: check [host] scratch in pilotd.toml", dir.display())]
    Create {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is a symbolic link: pilotd writes and deletes as root below it and never follows a link there\n  hint: replace the link by a directory, or point [host] scratch (or state_dir) at the real place", path.display())]
    Symlink { path: PathBuf },
    #[error("cannot give {} to uid {uid}: {source}\n  hint: pilotd needs CAP_CHOWN (it runs as root under its unit)", path.display())]
    Chown {
        path: PathBuf,
        uid: u32,
        source: std::io::Error,
    },
    #[error("cannot set permissions of {}: {source}", path.display())]
    Permissions {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot copy the pool token {} for the worker to {}: {source}\n  hint: check [worker] token_file in pilotd.toml", from.display(), to.display())]
    Token {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot allocate the worker's {} MiB disk image {}: {source}\n  hint: the disk limit needs a filesystem that allocates files up front (ext4, xfs, btrfs) under [host] scratch", bytes >> 20, path.display())]
    Allocate {
        path: PathBuf,
        bytes: u64,
        source: std::io::Error,
    },
    #[error("cannot make a filesystem in {}: {message}\n  hint: the disk limit needs mke2fs (Debian package e2fsprogs)", path.display())]
    Mkfs { path: PathBuf, message: String },
    #[error(transparent)]
    Loop(#[from] LoopError),
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "[worker] read_only_rootfs = false would let the worker write its container's own layer, outside its disk limit\n  hint: keep read_only_rootfs = true (jobs write to the scratch and /tmp), or the owner's policy may accept a measured share: [share] disk_limit = \"measured\""
    )]
    WritableRoot,
    #[error("preparing the scratch was interrupted: {0}")]
    Interrupted(String),
    #[error("the disk volume of {name}: {source}")]
    Volume { name: String, source: BackendError },
}

/// Why a worker could not be removed whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemovalError {
    /// The container is still there, and so is everything of it outside.
    #[error(transparent)]
    Container(BackendError),
    /// The container is gone; some of what it had outside is not (GC finds it by its name).
    #[error(transparent)]
    Leftovers(ScratchError),
}

#[cfg(test)]
/// The worker a scratch root entry belongs to: `<name>` (a dir) or `<name>.img`.
pub(crate) fn worker_of(entry: &str) -> &str {
    entry.strip_suffix(".img").unwrap_or(entry)
}

/// Refuses a root that is a symlink (a missing one is fine: it is created as a dir).
pub(crate) fn refuse_symlink(root: &Path) -> Result<(), ScratchError> {
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.file_type().is_symlink() => Err(ScratchError::Symlink {
            path: root.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// Makes a worker's scratch ready: its disk image attached (returned: the device stays
/// attached while it lives, and the engine's mount holds it afterwards), or its measured
/// scratch dir; then its token copy.
pub(crate) fn prepare(
    spec: &WorkerSpec,
    w: &WorkerSettings,
) -> Result<Option<Attached>, ScratchError> {
    refuse_symlink(&w.scratch_root)?;
    refuse_symlink(&w.tokens_root)?;
    let attached = match &spec.disk_image {
        Some(_) if !spec.read_only_rootfs => return Err(ScratchError::WritableRoot),
        Some(img) => {
            create_dir(&w.scratch_root)?;
            Some(make_image(img, spec.owner)?)
        }
        None => {
            prepare_dir(&spec.scratch_dir, spec.owner)?;
            None
        }
    };
    prepare_token(spec)?;
    Ok(attached)
}

fn create_dir(dir: &Path) -> Result<(), ScratchError> {
    std::fs::create_dir_all(dir).map_err(|source| ScratchError::Create {
        dir: dir.to_path_buf(),
        source,
    })
}

/// A fresh image (never through a link someone left there), allocated whole, with an ext4
/// filesystem whose root belongs to the worker's ids, attached to a loop device.
fn make_image(img: &DiskImage, owner: Option<(u32, u32)>) -> Result<Attached, ScratchError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let path = &img.path;
    let alloc = |source| ScratchError::Allocate {
        path: path.clone(),
        bytes: img.bytes,
        source,
    };
    let _ = std::fs::remove_file(path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(alloc)?;
    let len =
        i64::try_from(img.bytes).map_err(|_| alloc(std::io::ErrorKind::InvalidInput.into()))?;
    let allocate = || {
        nix::fcntl::fallocate(&file, nix::fcntl::FallocateFlags::empty(), 0, len)
            .map_err(|e| alloc(e.into()))
    };
    allocate()?;
    let (uid, gid) = owner.unwrap_or((0, 0));
    let mkfs = |message| ScratchError::Mkfs {
        path: path.clone(),
        message,
    };
    let out = std::process::Command::new("mke2fs")
        .args(["-t", "ext4", "-q", "-F", "-m", "0", "-O", "^has_journal"])
        .args(["-i", &BYTES_PER_INODE.to_string()])
        // nodiscard: on a regular file mke2fs's discard punches holes, which would make the
        // image sparse again; lazy init keeps the start fast (the kernel zeroes inode tables
        // inside the image later).
        .args([
            "-E",
            &format!("nodiscard,lazy_itable_init=1,root_owner={uid}:{gid}"),
        ])
        .arg(path)
        .env("PATH", "/usr/sbin:/sbin:/usr/bin:/bin")
        .output()
        .map_err(|e| mkfs(e.to_string()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(mkfs(format!("{}: {}", out.status, said.trim())));
    }
    // Whatever mke2fs did, every block is allocated before the worker may write.
    allocate()?;
    let m = file.metadata().map_err(alloc)?;
    if m.blocks().saturating_mul(512) < img.bytes {
        return Err(alloc(std::io::Error::other(format!(
            "only {} of {} bytes allocated",
            m.blocks() * 512,
            img.bytes
        ))));
    }
    Ok(loopdev::attach(path, &file)?)
}

/// Creates a measured scratch dir: owned by the worker's uid and private to it (0700), so
/// condor running unprivileged in the worker can make it its own; root's 0755 when the image's
/// user is unknown.
fn prepare_dir(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), ScratchError> {
    use std::os::unix::fs::PermissionsExt;
    create_dir(dir)?;
    let chown = |uid, gid| std::os::unix::fs::chown(dir, uid, gid);
    let mode = give(dir, owner, chown, (0o700, 0o755))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        ScratchError::Permissions {
            path: dir.to_path_buf(),
            source,
        }
    })
}

/// The worker's own copy of the site's token: the site's file stays root's and private (0600);
/// the copy, in a root-only directory, is readable by the worker's uid alone (0400), and is
/// what gets bind-mounted read-only. With the image's user unknown, the copy is 0444 (still
/// unreachable on the host: its directory is 0700).
fn prepare_token(spec: &WorkerSpec) -> Result<(), ScratchError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let (Some(from), Some(to)) = (&spec.token_source, &spec.token_file) else {
        return Ok(());
    };
    let fail = |source: std::io::Error| ScratchError::Token {
        from: from.clone(),
        to: to.clone(),
        source,
    };
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)?;
    }
    let token = std::fs::read(from).map_err(fail)?;
    // A fresh file (never through a link someone left there), then the owner, then the mode.
    let _ = std::fs::remove_file(to);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(to)
        .map_err(fail)?;
    f.write_all(&token).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    let chown = |uid, gid| std::os::unix::fs::fchown(&f, uid, gid);
    let mode = give(to, spec.owner, chown, (0o400, 0o444))?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail)
}

/// Gives `path` to `owner` with `chown` when the image's user is known: the mode it then
/// gets is `owned`'s; `unowned`'s when root keeps it.
fn give(
    path: &Path,
    owner: Option<(u32, u32)>,
    chown: impl FnOnce(Option<u32>, Option<u32>) -> std::io::Result<()>,
    (owned, unowned): (u32, u32),
) -> Result<u32, ScratchError> {
    let Some((uid, gid)) = owner else {
        return Ok(unowned);
    };
    chown(Some(uid), Some(gid)).map_err(|source| ScratchError::Chown {
        path: path.to_path_buf(),
        uid,
        source,
    })?;
    Ok(owned)
}

/// Removes a worker whose container has ended (exited, created, or stopped just now): the
/// container, then everything of it outside (`remove`). The one removal the executor, GC and
/// `failsafe --remove` share, so a worker leaves nothing behind whichever of them removes it.
pub(crate) async fn remove_worker<B: Backend>(
    b: &B,
    w: &WorkerSettings,
    id: &str,
    name: &str,
) -> Result<(), RemovalError> {
    b.remove(id).await.map_err(RemovalError::Container)?;
    remove(b, w, name).await.map_err(RemovalError::Leftovers)
}

/// Removes everything of the worker named `name` outside its container: the engine's volume
/// of its disk, the loop device if one is left, the image, the scratch dir and the token copy.
/// Call it once the container is gone. Only ever a name of this instance's workers, directly
/// under the roots, and never below a symlinked root. The volume goes first: an error there
/// keeps the files, so the next GC finds the worker's leftovers again and retries.
pub(crate) async fn remove<B: Backend>(
    b: &B,
    w: &WorkerSettings,
    name: &str,
) -> Result<(), ScratchError> {
    if !name.starts_with(&w.name_prefix()) || name.contains('/') || name.contains("..") {
        return Ok(());
    }
    refuse_symlink(&w.scratch_root)?;
    refuse_symlink(&w.tokens_root)?;
    b.remove_volume(name)
        .await
        .map_err(|source| ScratchError::Volume {
            name: name.to_string(),
            source,
        })?;
    let image = scratch_image::path(&w.scratch_root, name);
    for dev in loopdev::devices_of(Path::new("/sys/block"), &image) {
        loopdev::detach(&dev);
    }
    let gone = |r: std::io::Result<()>, path: PathBuf| match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(ScratchError::Remove { path, source: e })
        }
        _ => Ok(()),
    };
    let dir = w.scratch_root.join(name);
    let token = w.tokens_root.join(name);
    // Each is tried whatever became of the others; the first failure is reported.
    [
        gone(std::fs::remove_file(&image), image),
        gone(std::fs::remove_file(&token), token),
        gone(std::fs::remove_dir_all(&dir), dir),
    ]
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_whole_blocks_and_named_after_their_worker() {
        assert_eq!(scratch_image::bytes(16 << 10), 16 << 20);
        assert_eq!(scratch_image::bytes((16 << 10) + 3), 16 << 20);
        assert_eq!(scratch_image::bytes(1), scratch_image::MIN_BYTES);
        let p = scratch_image::path(Path::new("/s"), "pilotd-t-1");
        assert_eq!(p, PathBuf::from("/s/pilotd-t-1.img"));
        assert_eq!(worker_of("pilotd-t-1.img"), "pilotd-t-1");
        assert_eq!(worker_of("pilotd-t-1"), "pilotd-t-1");
    }

    #[test]
    fn a_symlinked_root_is_refused_and_a_missing_one_is_not() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        assert!(matches!(
            refuse_symlink(&d.path().join("link")),
            Err(ScratchError::Symlink { .. })
        ));
        assert!(refuse_symlink(&real).is_ok());
        assert!(refuse_symlink(&d.path().join("missing")).is_ok());
    }
}
