//! pilotd's bridge, up or down: the second wall while the filter is down. Pausing the workers
//! is the first, but it is the engine's to carry out, and the engine may fail (runc cannot
//! freeze a loaded cgroup, the engine is restarting) or someone may unpause a worker. A bridge
//! that is down disables all its ports, so the kernel drops every frame a worker sends before
//! any routing: nothing reaches the host, the owner's LAN or anywhere else, whatever iptables
//! holds. It is pilotd's own interface (`pd-<hash>`), so nothing else loses its network.
//!
//! The rule the guard keeps: pilotd's bridge is up exactly while its filter is whole. A
//! bridge left down by a pilotd that stopped while the filter was down comes back up at the
//! first check that finds the filter whole.
//!
//! One `ioctl` on a datagram socket (`SIOCGIFFLAGS`, `SIOCSIFFLAGS`), as `ip link set` does
//! through netlink: no program to run and no dependency to add. Needs CAP_NET_ADMIN, which
//! pilotd already needs for iptables. Blocking (a syscall each), no decisions.

use nix::libc;
use std::io;
use std::os::fd::AsRawFd;

/// What `set_up` found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// It was already as asked.
    As,
    /// It was changed.
    Changed,
    /// There is no such interface (the network does not exist yet, or no more).
    Absent,
}

/// Brings `interface` up (`up`) or down.
pub(crate) fn set_up(interface: &str, up: bool) -> io::Result<Link> {
    let name = interface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{interface}` is not an interface name"),
        ));
    }
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: `ifreq` is plain old data; all zeroes is a valid value of it.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (to, from) in req.ifr_name.iter_mut().zip(name) {
        *to = *from as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the NUL-terminated name and writes `ifru_flags` of the
    // `ifreq` it is given, which lives for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return failed();
    }
    // SAFETY: SIOCGIFFLAGS filled `ifru_flags`.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    let is_up = flags & libc::IFF_UP as libc::c_short != 0;
    if is_up == up {
        return Ok(Link::As);
    }
    req.ifr_ifru.ifru_flags = if up {
        flags | libc::IFF_UP as libc::c_short
    } else {
        flags & !(libc::IFF_UP as libc::c_short)
    };
    // SAFETY: SIOCSIFFLAGS reads the name and the flags of the `ifreq` it is given.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return failed();
    }
    Ok(Link::Changed)
}

/// The ioctl that just failed: an interface gone meanwhile is absent, not an error.
fn failed() -> io::Result<Link> {
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODEV) => Ok(Link::Absent),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_the_kernel_cannot_hold_is_refused_and_a_missing_interface_is_absent() {
        assert!(set_up("", true).is_err());
        assert!(set_up("a-name-far-too-long", true).is_err());
        assert!(set_up("a\0b", true).is_err());
        assert_eq!(set_up("pd-nosuchif", false).unwrap(), Link::Absent);
    }
}
