//! Loop devices: a worker's disk image attached as a block device, so the engine can mount it
//! as the worker's scratch (`scratch`). Attached with `LO_FLAGS_AUTOCLEAR`: the kernel
//! detaches the device on its last close, so a pilotd killed before the engine mounted it
//! leaves no device behind, and the engine's unmount when the worker stops detaches it.
//!
//! Also where an image's device and mount are found again (sysfs and mountinfo), for the
//! measurement and for cleanup after a crash, when pilotd no longer knows what it attached.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

// <linux/loop.h>
const LOOP_CTL_GET_FREE: nix::libc::c_ulong = 0x4C82;
const LOOP_SET_FD: nix::libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: nix::libc::c_ulong = 0x4C01;
const LOOP_SET_STATUS64: nix::libc::c_ulong = 0x4C04;
const LOOP_CONFIGURE: nix::libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_NAME_SIZE: usize = 64;

#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// Why a loop device could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(
        "cannot open /dev/loop-control: {0}\n  hint: the disk limit needs loop devices (modprobe loop; inside a container they are usually absent); an owner who accepts a disk share that is only measured can set [share] disk_limit = \"measured\" in the policy"
    )]
    Control(std::io::Error),
    #[error("no free loop device: {0}")]
    NoFree(std::io::Error),
    #[error("cannot attach {} to {}: {source}", image.display(), device.display())]
    Attach {
        image: PathBuf,
        device: PathBuf,
        source: std::io::Error,
    },
}

/// An attached device, open: while this lives, the device stays attached; dropped, it goes
/// with the last close (autoclear), unless a mount holds it.
#[derive(Debug)]
pub struct Attached {
    pub device: PathBuf,
    _fd: File,
}

fn ioctl(
    fd: &impl AsRawFd,
    req: nix::libc::c_ulong,
    arg: nix::libc::c_ulong,
) -> std::io::Result<i32> {
    // SAFETY: the loop ioctls used here take an integer or a pointer to a live repr(C) struct.
    let r = unsafe { nix::libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    (r >= 0)
        .then_some(r)
        .ok_or_else(std::io::Error::last_os_error)
}

/// Attaches `image` (open read-write as `file`) to a free loop device with autoclear.
pub(crate) fn attach(image: &Path, file: &File) -> Result<Attached, LoopError> {
    let control = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(LoopError::Control)?;
    // Another process may take the free device between the question and the attach (EBUSY).
    let mut tries = 0;
    loop {
        tries += 1;
        let n = ioctl(&control, LOOP_CTL_GET_FREE, 0).map_err(LoopError::NoFree)?;
        let device = PathBuf::from(format!("/dev/loop{n}"));
        let fail = |source| LoopError::Attach {
            image: image.to_path_buf(),
            device: device.clone(),
            source,
        };
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&device)
            .map_err(fail)?;
        match configure(&dev, file) {
            Ok(()) => return Ok(Attached { device, _fd: dev }),
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) && tries < 8 => continue,
            Err(e) => return Err(fail(e)),
        }
    }
}

fn configure(dev: &File, file: &File) -> std::io::Result<()> {
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut cfg: LoopConfig = unsafe { std::mem::zeroed() };
    cfg.fd = file.as_raw_fd() as u32;
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    match ioctl(
        dev,
        LOOP_CONFIGURE,
        &cfg as *const LoopConfig as nix::libc::c_ulong,
    ) {
        Ok(_) => Ok(()),
        // Kernels before 5.8 lack LOOP_CONFIGURE: attach, then set the flag.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(nix::libc::EINVAL | nix::libc::ENOTTY)
            ) =>
        {
            ioctl(dev, LOOP_SET_FD, file.as_raw_fd() as nix::libc::c_ulong)?;
            let info = cfg.info;
            if let Err(e) = ioctl(dev, LOOP_SET_STATUS64, &info as *const LoopInfo64 as _) {
                let _ = ioctl(dev, LOOP_CLR_FD, 0);
                return Err(e);
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The loop devices (e.g. `loop3`) whose backing file is `image`, deleted or not, read from
/// `sys_block` (`/sys/block`).
pub(crate) fn devices_of(sys_block: &Path, image: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(sys_block) else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let backing = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            backing_is(&backing, image).then_some(name)
        })
        .collect()
}

/// Whether sysfs's `backing_file` text names `image` (the kernel appends " (deleted)" once
/// the file is unlinked).
fn backing_is(text: &str, image: &Path) -> bool {
    let t = text.trim_end_matches('\n');
    let t = t.strip_suffix(" (deleted)").unwrap_or(t);
    Path::new(t) == image
}

/// Asks the kernel to detach `/dev/<name>` once nothing holds it (right away when nothing
/// does): what a crash between attach and the engine's mount, or an engine that lost a mount,
/// left behind. Best effort: the next GC asks again.
pub(crate) fn detach(name: &str) {
    if let Ok(dev) = std::fs::OpenOptions::new()
        .read(true)
        .open(Path::new("/dev").join(name))
    {
        let _ = ioctl(&dev, LOOP_CLR_FD, 0);
    }
}

/// The mount point of device `major:minor` in a mountinfo text, the first one listed.
pub(crate) fn mount_point(mountinfo: &str, major: u32, minor: u32) -> Option<PathBuf> {
    let want = format!("{major}:{minor}");
    mountinfo.lines().find_map(|l| {
        let mut f = l.split(' ');
        let dev = f.nth(2)?;
        let _root = f.next()?;
        let point = f.next()?;
        (dev == want).then(|| PathBuf::from(unescape(point)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `major:minor` of `/sys/block/<name>/dev`.
pub(crate) fn device_number(sys_block: &Path, name: &str) -> Option<(u32, u32)> {
    let t = std::fs::read_to_string(sys_block.join(name).join("dev")).ok()?;
    let (a, b) = t.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_mount_of_a_device_and_reads_escaped_paths() {
        let info = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    530 22 7:3 / /var/lib/docker/volumes/pilotd-a\\0401/_data rw,nosuid,nodev - ext4 /dev/loop3 rw\n";
        assert_eq!(
            mount_point(info, 7, 3),
            Some(PathBuf::from("/var/lib/docker/volumes/pilotd-a 1/_data"))
        );
        assert_eq!(mount_point(info, 7, 4), None);
        assert_eq!(mount_point(info, 254, 0), Some(PathBuf::from("/")));
    }

    #[test]
    fn a_backing_file_is_recognised_deleted_or_not() {
        let img = Path::new("/var/lib/pilotd/scratch/pilotd-t-1.img");
        assert!(backing_is("/var/lib/pilotd/scratch/pilotd-t-1.img\n", img));
        assert!(backing_is(
            "/var/lib/pilotd/scratch/pilotd-t-1.img (deleted)\n",
            img
        ));
        assert!(!backing_is(
            "/var/lib/pilotd/scratch/pilotd-t-10.img\n",
            img
        ));
    }

    #[test]
    fn devices_of_reads_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        for (n, backing) in [("loop0", "/x/a.img\n"), ("loop1", "/x/b.img (deleted)\n")] {
            std::fs::create_dir_all(dir.path().join(n).join("loop")).unwrap();
            std::fs::write(dir.path().join(n).join("loop/backing_file"), backing).unwrap();
            std::fs::write(dir.path().join(n).join("dev"), "7:1\n").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("vda")).unwrap();
        assert_eq!(devices_of(dir.path(), Path::new("/x/b.img")), vec!["loop1"]);
        assert!(devices_of(dir.path(), Path::new("/x/c.img")).is_empty());
        assert_eq!(device_number(dir.path(), "loop1"), Some((7, 1)));
    }
}
