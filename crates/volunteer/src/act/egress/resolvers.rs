//! The host's name servers, as the engine's embedded DNS uses them: the `nameserver` lines of
//! /etc/resolv.conf, or, when those are only loopback (systemd-resolved's stub at
//! 127.0.0.53, which the engine reaches from the host itself), the upstream servers of
//! /run/systemd/resolve/resolv.conf, which it dials from the worker's namespace. `parse` is
//! pure; `host` reads the files. An engine told other servers (`dns` in its daemon.json) is
//! not seen here: a site that does that lists them in `egress_allow`.
//!
//! The servers come from whoever answers the host's DHCP, so the filter never opens one that
//! is the host itself: `host_addresses` lists the host's own addresses (and its interfaces'
//! broadcast addresses), read at every check like the files, since they move as the files do.

use nix::libc;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

/// The IPv4 `nameserver` addresses of a resolv.conf text, in order.
pub(crate) fn parse(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        // A scoped IPv6 address (fe80::1%eth0) is not an address to parse; it is not IPv4.
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .collect()
}

/// The servers the engine's embedded DNS dials from a container's namespace: the non-loopback
/// IPv4 ones, from `etc` (the host's resolv.conf), or from `resolved` when `etc` has only
/// loopback servers.
pub(crate) fn upstream(etc: &str, resolved: Option<&str>) -> Vec<Ipv4Addr> {
    let v4 = |servers: Vec<IpAddr>| -> Vec<Ipv4Addr> {
        servers
            .into_iter()
            .filter_map(|a| match a {
                IpAddr::V4(a) if !a.is_loopback() => Some(a),
                _ => None,
            })
            .collect()
    };
    let servers = parse(etc);
    if !servers.is_empty() && servers.iter().all(IpAddr::is_loopback) {
        return resolved.map(|r| v4(parse(r))).unwrap_or_default();
    }
    v4(servers)
}

/// This host's servers (`upstream` of the files below `root`, `/` in production). An
/// unreadable file is no server: the filter then opens nothing.
pub(crate) fn host(root: &Path) -> Vec<Ipv4Addr> {
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    upstream(
        &read("etc/resolv.conf").unwrap_or_default(),
        read("run/systemd/resolve/resolv.conf").as_deref(),
    )
}

/// The IPv4 addresses assigned to this host's interfaces, and the broadcast addresses of
/// those that have one (`getifaddrs`, what `ip addr` lists; of pilotd's network namespace,
/// which is the host's).
pub(crate) fn host_addresses() -> std::io::Result<Vec<Ipv4Addr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs stores the head of a list it allocated, freed by freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut node = head;
    while !node.is_null() {
        // SAFETY: `node` is an element of the list getifaddrs returned, alive until the
        // freeifaddrs below.
        let ifa = unsafe { &*node };
        // The second address is the broadcast address only with IFF_BROADCAST (a
        // point-to-point link's is its peer's, another host).
        let broadcast = ifa.ifa_flags & libc::IFF_BROADCAST as libc::c_uint != 0;
        for sa in [
            ifa.ifa_addr,
            if broadcast {
                ifa.ifa_ifu
            } else {
                std::ptr::null_mut()
            },
        ] {
            // SAFETY: a non-null address of the list points at a sockaddr whose family says
            // its type; an AF_INET one is a sockaddr_in.
            if !sa.is_null() && unsafe { (*sa).sa_family } == libc::AF_INET as libc::sa_family_t {
                let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
                out.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
        }
        node = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once; nothing of it is used after.
    unsafe { libc::freeifaddrs(head) };
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_resolver_is_found_and_a_loopback_stub_leads_to_its_upstreams() {
        let home = "# from DHCP\nsearch lan\nnameserver 192.168.1.1\nnameserver fe80::1%wlan0\n";
        assert_eq!(upstream(home, None), vec![Ipv4Addr::new(192, 168, 1, 1)]);
        let stub = "nameserver 127.0.0.53\noptions edns0 trust-ad\n";
        let real = "nameserver 10.255.255.53\nnameserver 2001:db8::53\n";
        assert_eq!(
            upstream(stub, Some(real)),
            vec![Ipv4Addr::new(10, 255, 255, 53)]
        );
        assert!(upstream(stub, None).is_empty());
        // A loopback entry beside a real one: the real one is dialed from the container.
        let mixed = "nameserver 127.0.0.1\nnameserver 10.0.0.2\n";
        assert_eq!(
            upstream(mixed, Some(real)),
            vec![Ipv4Addr::new(10, 0, 0, 2)]
        );
        assert!(upstream("", None).is_empty());
        assert!(upstream("nameserver not-an-address\n", None).is_empty());
    }

    #[test]
    fn the_files_are_read_below_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("run/systemd/resolve")).unwrap();
        std::fs::write(
            root.path().join("etc/resolv.conf"),
            "nameserver 127.0.0.53\n",
        )
        .unwrap();
        std::fs::write(
            root.path().join("run/systemd/resolve/resolv.conf"),
            "nameserver 172.16.5.5\n",
        )
        .unwrap();
        assert_eq!(host(root.path()), vec![Ipv4Addr::new(172, 16, 5, 5)]);
        assert!(host(&root.path().join("absent")).is_empty());
    }

    /// Loopback is always there; so is the address the kernel routes this host's own
    /// outgoing traffic from, whatever the machine.
    #[test]
    fn the_hosts_own_addresses_are_listed() {
        let mine = host_addresses().unwrap();
        assert!(mine.contains(&Ipv4Addr::LOCALHOST), "{mine:?}");
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if probe.connect("10.255.255.254:9").is_ok()
            && let Ok(std::net::SocketAddr::V4(a)) = probe.local_addr()
        {
            assert!(mine.contains(a.ip()), "{a} not in {mine:?}");
        }
    }
}
