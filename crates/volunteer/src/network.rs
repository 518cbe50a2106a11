//! pilotd's own network for the workers of one instance, as data: the Docker network's, the
//! bridge's and the filter chains' names, and the addresses workers may reach. `settings`
//! resolves it from pilotd.toml; `egress` builds, checks and repairs the filter it names.

use pilotd_core::config::units::Ipv4Net;

/// Where a worker's traffic may go. Unless the site names a network of its own, workers sit
/// on pilotd's own bridge (`pilotd-<instance>`, interface `pd-<hash>`), with traffic between
/// containers off, and a filter that refuses whatever they send to the owner's side: private
/// and link-local addresses (the owner's LAN, the cloud metadata service at 169.254.169.254,
/// other containers' networks) and the host itself — except the destinations the site allows
/// (`[worker] egress_allow`, e.g. a pool's collector on a campus network). The internet stays
/// reachable: that is where the pool is.
///
/// The rules go into iptables as Docker's own do: a jump from `DOCKER-USER` (forwarded
/// traffic, evaluated before Docker's accept rules) and from `INPUT` (traffic to the host's
/// own addresses, e.g. the bridge's gateway) into chains of pilotd's that only ever match this
/// bridge's interface.
///
/// The filter must stay whole while workers run, whatever else changes the firewall (a
/// firewall manager's reload flushes the jumps; a script may edit a chain). So:
/// - it is checked every cycle while this instance has workers, and before every start: the
///   whole filter table is read once (`iptables -S`) and judged here, purely (`diagnose`):
///   each jump there exactly once, with only other pilotd filters' jumps before it, and the
///   chains holding exactly their rules;
/// - it is never emptied in place: a repair builds a new generation of the chains
///   (`PILOTD-<hash>-F<n>`, `-I<n>`), then puts its jumps in front and deletes the old ones,
///   all in one `iptables-restore --noflush` transaction (`rebuild_script`), which the kernel
///   commits whole or not at all. At no moment does a worker's packet find no filter;
/// - when it cannot be restored, the daemon pauses this instance's workers and starts none
///   (`guard.rs`; the plan's `filter_down`), and takes pilotd's bridge down until it is back
///   (`link.rs`), so a worker the engine failed to pause reaches nothing either;
/// - a reload firewalld announces on the bus is checked at once (`firewalld.rs`); one no one
///   announces (`iptables-restore`, `nft flush ruleset`) is found by the next cycle's check.
///
/// pilotd's own network for one instance, and its filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The Docker network's name.
    pub network: String,
    /// The bridge's interface (at most 15 characters, Linux's limit).
    pub interface: String,
    /// Base name of pilotd's chains (`<chain>-F<n>`, `<chain>-I<n>`; at most 28 characters).
    pub chain: String,
    pub allow: Vec<Ipv4Net>,
    /// The host's name servers on refused addresses (a home router, a campus resolver):
    /// their DNS port passes, for forwarded traffic only. Docker's embedded DNS (127.0.0.11
    /// in every container of a user-defined network) sends a worker's queries on to them from
    /// the worker's own network namespace, so through this filter; without this a worker on
    /// pilotd's bridge resolved nothing wherever the resolver is private. Filled in by the
    /// guard from the host's resolv.conf at every check (`resolvers.rs`), so a laptop that
    /// moves networks gets its new resolver's port.
    ///
    /// Whoever answers the laptop's DHCP names these, so never the host itself: an address of
    /// the host's (its LAN address, libvirt's 192.168.122.1, the bridge's gateway), a
    /// broadcast address or 0.0.0.0 is not opened, and the `INPUT` chain opens none at all,
    /// so a named server never gives workers the DNS port of the host's own dnsmasq or
    /// unbound.
    pub resolvers: Vec<std::net::Ipv4Addr>,
}

/// The network, interface and chain names of an instance (pure).
pub fn names(instance: &str) -> (String, String, String) {
    use sha2::{Digest, Sha256};
    let hash: String = Sha256::digest(instance.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    (
        format!("pilotd-{instance}"),
        format!("pd-{hash}"),
        format!("PILOTD-{}", hash.to_uppercase()),
    )
}

impl Filter {
    pub fn for_instance(instance: &str, allow: Vec<Ipv4Net>) -> Filter {
        let (network, interface, chain) = names(instance);
        Filter {
            network,
            interface,
            chain,
            allow,
            resolvers: Vec::new(),
        }
    }
}
