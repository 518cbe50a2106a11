//! The terminal probe on the real thing: a pseudo-terminal of the test's own, a process whose
//! controlling terminal it is (`setsid --ctty`, as a login's shell has one), the real /proc
//! and /dev. Its last use is what the kernel says: the pty's atime, set when the process reads
//! what was typed.

use pilotd_volunteer::observe::terminals::{Wanted, last_use};
use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// A new pseudo-terminal: its master, and its slave's path (/dev/pts/N).
fn open_pty() -> (File, String) {
    use nix::libc;
    // SAFETY: plain libc calls on a descriptor this function owns; ptsname_r writes into buf.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = File::from(OwnedFd::from_raw_fd(fd));
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let mut buf = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, buf.as_mut_ptr(), buf.len()), 0);
        let path = std::ffi::CStr::from_ptr(buf.as_ptr())
            .to_string_lossy()
            .into_owned();
        (master, path)
    }
}

fn used(leader: u32) -> Option<chrono::DateTime<chrono::Utc>> {
    let wanted = Wanted {
        scope: None,
        leader: Some(leader),
    };
    last_use(Path::new("/proc"), Path::new("/dev"), &[wanted])[0]
}

#[test]
fn a_read_from_a_sessions_terminal_is_its_last_use() {
    let (mut master, slave) = open_pty();
    let tty = File::options().read(true).write(true).open(&slave).unwrap();
    // `cat` in a session of its own whose controlling terminal is the pty: what a login's
    // shell is. Its input is the pty; what it reads goes nowhere.
    let mut child = Command::new("setsid")
        .args(["--ctty", "cat"])
        .stdin(tty.try_clone().unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("setsid runs (util-linux)");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    // An hour without use (the kernel moves the atime on at most every 8 s).
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    tty.set_times(std::fs::FileTimes::new().set_accessed(hour_ago))
        .unwrap();
    while used(pid).is_none() {
        assert!(
            Instant::now() < deadline,
            "{pid} never had {slave} as its terminal"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let idle = (chrono::Utc::now() - used(pid).unwrap()).num_seconds();
    assert!((3595..=3605).contains(&idle), "idle {idle} s, not an hour");

    // A key and Enter: cat reads them, the kernel notes the use.
    master.write_all(b"x\n").unwrap();
    let typed = chrono::Utc::now();
    while used(pid).is_none_or(|t| t < typed - chrono::Duration::seconds(1)) {
        assert!(
            Instant::now() < deadline,
            "the read did not show as a use of {slave}: {:?}",
            used(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    // The process gone: nothing to judge.
    assert_eq!(used(pid), None);
}
