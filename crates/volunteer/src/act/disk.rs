//! How much of the disk a worker uses, measured beside the loop.
//!
//! A worker whose share the kernel enforces (`scratch`: a filesystem image of exactly the
//! share) is measured by its filesystem's own counters (statvfs of the engine's mount of it,
//! found through the loop device): what it holds, deleted-but-open files included, and whether
//! it is full — a full scratch ends the worker (`plan::Reason::ScratchFull`).
//!
//! A worker whose owner chose a measured share (`[share] disk_limit = "measured"`) is
//! measured by the blocks under its scratch dir; found over its share, it is stopped
//! (`plan::Reason::DiskShareExceeded`). That walk cannot see a deleted file kept open, and a
//! fast writer passes the share between two walks: hence the enforced limit by default. The
//! root filesystem is read-only and the container log capped, so the scratch is the one place
//! a worker can fill.

use crate::act::loopdev;
use crate::worker::{ScratchUse, scratch_image};
use std::collections::BTreeMap;
use std::path::Path;

/// A filesystem's counters (statvfs), in its own blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsCounters {
    pub block_kib: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    pub files_free: u64,
}

pub(crate) fn image_use(c: FsCounters) -> ScratchUse {
    let used_kib = c.blocks.saturating_sub(c.blocks_free) * c.block_kib;
    let slack = (c.blocks / 100).max(1);
    ScratchUse {
        used_kib,
        full: c.blocks_free < slack || c.files_free == 0,
    }
}

/// A walk stops after this many entries: a worker that made millions of files is measured
/// from what was counted, which is already a lower bound of its use.
pub(crate) const MAX_ENTRIES: usize = 1_000_000;

/// A walk enters directories this deep at most (two descriptors each, held while below it;
/// the unit allows pilotd 4096): a deeper directory counts as its own entry only, a lower
/// bound as above. Real scratch trees (condor's execute dir, a conda env, node_modules) are
/// a few dozen deep.
pub(crate) const MAX_DEPTH: usize = 100;

/// KiB allocated under `dir` (blocks on disk, links not followed, other filesystems not
/// entered), counting at most `max_entries` entries. A missing dir uses nothing.
///
/// pilotd walks as root a tree the job writes to while it walks: every step is relative to
/// the descriptor of the directory already open (`fstatat`, then `openat` with
/// `O_NOFOLLOW | O_DIRECTORY`), never to a path. A job that swaps a directory for a symlink
/// between the look and the open (to `/`, to make the figure the host's and have its worker
/// stopped, or to make root read a directory it cannot) has the open fail, and the swapped
/// entry counts as the link it is.
pub(crate) fn usage_kib(dir: &Path, max_entries: usize) -> u64 {
    walk(dir, max_entries, &mut |_| {})
}

/// A directory being read: the descriptor the steps below it are relative to, and its
/// entries (a second descriptor of the same directory: reading them is `readdir`'s).
struct Open {
    fd: std::os::fd::OwnedFd,
    entries: nix::dir::OwningIter,
    /// Below `dir`, for `between`.
    rel: std::path::PathBuf,
}

const DIR_FLAGS: nix::fcntl::OFlag = nix::fcntl::OFlag::O_RDONLY
    .union(nix::fcntl::OFlag::O_DIRECTORY)
    .union(nix::fcntl::OFlag::O_NOFOLLOW)
    .union(nix::fcntl::OFlag::O_CLOEXEC);

impl Open {
    /// `fd` as a directory being read, with what it is.
    fn of(
        fd: std::os::fd::OwnedFd,
        rel: std::path::PathBuf,
    ) -> Option<(Open, nix::sys::stat::FileStat)> {
        let st = nix::sys::stat::fstat(&fd).ok()?;
        let entries = nix::dir::Dir::from_fd(fd.try_clone().ok()?)
            .ok()?
            .into_iter();
        Some((Open { fd, entries, rel }, st))
    }

    /// Its subdirectory `name`: a symlink (or anything not a directory) in its place is
    /// refused.
    fn child(
        &self,
        name: &std::ffi::CStr,
        rel: std::path::PathBuf,
    ) -> Option<(Open, nix::sys::stat::FileStat)> {
        let fd =
            nix::fcntl::openat(&self.fd, name, DIR_FLAGS, nix::sys::stat::Mode::empty()).ok()?;
        Open::of(fd, rel)
    }
}

/// The walk of `usage_kib`; `between` is called with a subdirectory's place below `dir`
/// after it was looked at and before it is opened (the tests swap it for a symlink there).
fn walk(dir: &Path, max_entries: usize, between: &mut dyn FnMut(&Path)) -> u64 {
    use nix::fcntl::AtFlags;
    use nix::sys::stat::{SFlag, fstatat};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    let Some((root, st)) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(DIR_FLAGS.bits())
        .open(dir)
        .ok()
        .and_then(|f| Open::of(f.into(), std::path::PathBuf::new()))
    else {
        return 0;
    };
    let device = st.st_dev;
    let mut blocks = st.st_blocks.max(0) as u64;
    let mut seen = 1usize;
    let mut stack = vec![root];
    loop {
        let depth = stack.len();
        let Some(top) = stack.last_mut() else { break };
        let Some(entry) = top.entries.next() else {
            stack.pop();
            continue;
        };
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if seen >= max_entries {
            break;
        }
        seen += 1;
        let Ok(m) = fstatat(&top.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            continue;
        };
        blocks = blocks.saturating_add(m.st_blocks.max(0) as u64);
        let is_dir = SFlag::from_bits_truncate(m.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
        if !is_dir || m.st_dev != device || depth > MAX_DEPTH {
            continue;
        }
        let rel = top.rel.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        between(&rel);
        let top = stack.last().expect("the directory just read");
        // What is open is what is counted below: another filesystem (a mount swapped in
        // between) is not entered either.
        if let Some((child, st)) = top.child(name, rel)
            && st.st_dev == device
        {
            stack.push(child);
        }
    }
    // st_blocks counts 512-byte units.
    blocks / 2
}

/// The use of each named worker's scratch under `root`: (worker id, name) → use. A worker
/// with a disk image is measured through its mount (left out while the mount is not found:
/// not yet mounted, or already gone); one without, by walking its scratch dir.
pub(crate) fn measure(root: &Path, workers: &[(String, String)]) -> BTreeMap<String, ScratchUse> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    workers
        .iter()
        .filter_map(|(id, name)| {
            let image = scratch_image::path(root, name);
            let u = if image.exists() {
                image_counters(&image, &mountinfo).map(image_use)?
            } else {
                ScratchUse {
                    used_kib: usage_kib(&root.join(name), MAX_ENTRIES),
                    full: false,
                }
            };
            Some((id.clone(), u))
        })
        .collect()
}

/// The counters of the filesystem in `image`, from wherever its loop device is mounted.
fn image_counters(image: &Path, mountinfo: &str) -> Option<FsCounters> {
    let sys = Path::new("/sys/block");
    loopdev::devices_of(sys, image).into_iter().find_map(|dev| {
        let (major, minor) = loopdev::device_number(sys, &dev)?;
        let point = loopdev::mount_point(mountinfo, major, minor)?;
        let st = nix::sys::statvfs::statvfs(&point).ok()?;
        Some(FsCounters {
            block_kib: (st.fragment_size() as u64 / 1024).max(1),
            blocks: st.blocks() as u64,
            blocks_free: st.blocks_available() as u64,
            files_free: st.files_available() as u64,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_use_reads_as_used_of_the_share() {
        let u = ScratchUse {
            used_kib: 12 * 1024,
            full: false,
        };
        assert_eq!(u.describe(Some(1024 * 1024)), "12MiB of 1GiB");
        assert_eq!(u.describe(None), "12MiB");
        let full = ScratchUse {
            used_kib: 1024 * 1024,
            full: true,
        };
        assert_eq!(full.describe(Some(1024 * 1024)), "FULL: 1GiB of 1GiB");
    }

    #[test]
    fn counts_what_is_allocated_below_the_dir_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("w");
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/b/f"), vec![7u8; 1 << 20]).unwrap();
        std::fs::write(d.join("g"), vec![1u8; 256 << 10]).unwrap();
        // A link to something big outside counts as the link only.
        let outside = dir.path().join("big");
        std::fs::write(&outside, vec![1u8; 4 << 20]).unwrap();
        std::os::unix::fs::symlink(&outside, d.join("link")).unwrap();
        let kib = usage_kib(&d, MAX_ENTRIES);
        assert!((1280..1400).contains(&kib), "{kib} KiB");
        assert_eq!(usage_kib(&dir.path().join("missing"), MAX_ENTRIES), 0);
        // The entry cap ends the walk early with a lower bound.
        assert!(usage_kib(&d, 2) < kib);
        let m = measure(dir.path(), &[("id1".into(), "w".into())]);
        assert_eq!(m["id1"].used_kib, kib);
        assert!(!m["id1"].full);
    }

    /// A tree with a directory `a` (1 MiB inside) beside an outside directory of 8 MiB.
    fn tree_beside_a_big_dir() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("w");
        std::fs::create_dir_all(w.join("a/deeper")).unwrap();
        std::fs::write(w.join("a/deeper/f"), vec![7u8; 1 << 20]).unwrap();
        let big = dir.path().join("host");
        std::fs::create_dir(&big).unwrap();
        std::fs::write(big.join("data"), vec![1u8; 8 << 20]).unwrap();
        (dir, w, big)
    }

    /// A job swaps a directory for a symlink to a host directory between pilotd's look at
    /// it and its open: the walk, relative to the descriptors it holds, refuses to open the
    /// link and never counts what it points to.
    #[test]
    fn a_directory_swapped_for_a_symlink_mid_walk_is_not_followed() {
        let (_dir, w, big) = tree_beside_a_big_dir();
        let before = usage_kib(&w, MAX_ENTRIES);
        assert!((1024..1200).contains(&before), "{before} KiB");
        let mut swapped = Vec::new();
        let kib = walk(&w, MAX_ENTRIES, &mut |rel| {
            if rel == Path::new("a") {
                std::fs::rename(w.join("a"), w.join("moved")).unwrap();
                std::os::unix::fs::symlink(&big, w.join("a")).unwrap();
                swapped.push(rel.to_path_buf());
            }
        });
        assert_eq!(
            swapped,
            [Path::new("a")],
            "the hook ran between look and open"
        );
        assert!(
            kib < 2048,
            "{kib} KiB: the 8 MiB behind the link were counted"
        );
        // A symlink planted before the walk is not followed either, nor is a symlinked
        // scratch dir itself.
        let _ = std::fs::remove_file(w.join("a"));
        std::os::unix::fs::symlink(&big, w.join("b")).unwrap();
        assert!(usage_kib(&w, MAX_ENTRIES) < 2048);
        let link = w.parent().unwrap().join("link");
        std::os::unix::fs::symlink(&big, &link).unwrap();
        assert_eq!(usage_kib(&link, MAX_ENTRIES), 0);
    }

    /// Past `MAX_DEPTH` directories count as themselves only; nothing runs out of descriptors.
    #[test]
    fn a_deep_tree_is_walked_to_the_depth_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = dir.path().join("w");
        for _ in 0..MAX_DEPTH - 1 {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("shallow"), vec![1u8; 1 << 20]).unwrap();
        let shallow = usage_kib(&dir.path().join("w"), MAX_ENTRIES);
        assert!(shallow >= 1024, "{shallow} KiB");
        for _ in 0..3 {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("deep"), vec![1u8; 1 << 20]).unwrap();
        let deep = usage_kib(&dir.path().join("w"), MAX_ENTRIES);
        assert!(deep < shallow + 1024, "{deep} KiB against {shallow} KiB");
    }

    #[test]
    fn an_image_is_full_below_one_percent_free_or_without_inodes() {
        let c = |blocks_free, files_free| FsCounters {
            block_kib: 4,
            blocks: 10_000,
            blocks_free,
            files_free,
        };
        assert_eq!(image_use(c(2_500, 10)).used_kib, 30_000);
        assert!(!image_use(c(100, 10)).full);
        assert!(image_use(c(99, 10)).full);
        assert!(image_use(c(0, 10)).full);
        assert!(image_use(c(5_000, 0)).full, "an inode flood fills it too");
        // A tiny filesystem is full at its last block.
        let tiny = FsCounters {
            block_kib: 1,
            blocks: 50,
            blocks_free: 1,
            files_free: 3,
        };
        assert!(!image_use(tiny).full);
        assert!(
            image_use(FsCounters {
                blocks_free: 0,
                ..tiny
            })
            .full
        );
    }
}
