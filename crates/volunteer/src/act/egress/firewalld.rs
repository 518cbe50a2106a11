//! The one firewall reload pilotd can see: firewalld's. A reload or a restart of firewalld
//! (with its iptables backend) flushes the filter table, pilotd's jumps with it; firewalld
//! then says so on the system bus, and Docker re-creates its own chains on the same signals.
//! pilotd listens to the same two: `org.fedoraproject.FirewallD1.Reloaded`, and firewalld's
//! name changing owner on the bus (started, stopped or restarted). Either asks the guard for a
//! check at once instead of at the next cycle.
//!
//! A reload without firewalld (`iptables-restore` of a saved table, `nft flush ruleset`,
//! `iptables -F`) sends no signal anywhere; the guard's check every cycle finds it, within one
//! interval.
//!
//! Observation only: what to do about a reload is the guard's. While the bus is away it is
//! watched again with `RETRY`'s back-off, as logind is; a machine without firewalld costs one
//! idle subscription. The bus is the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set).
//!
//! `Reloaded` is believed only from the owner of firewalld's name, the owner changes only from
//! the bus (`bus`): any local user may send a `Reloaded`, and a flood of them used to run the
//! check back to back, outside the workers' cgroups, logging each (issue 35).

use crate::observe::bus::BusWatch;
use pilotd_core::backoff::Backoff;
use std::time::Duration;

/// How often an absent bus is asked again.
pub(crate) const RETRY: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));

const NAME: &str = "org.fedoraproject.FirewallD1";
const PATH: &str = "/org/fedoraproject/FirewallD1";

/// What firewalld announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announced {
    /// `Reloaded`: its rules were flushed and loaded again.
    Reloaded,
    /// It appeared on the bus or left it (a start, a stop, a restart).
    Restarted,
}

/// firewalld as the guard watches it: `Reloaded` and its name changing owner, believed only
/// from the bus and the name's owner (`bus`), each passed at most once per `PACE`.
const WATCH: BusWatch<Announced> = BusWatch {
    name: NAME,
    path: PATH,
    subtree: true,
    read: announced,
    owner_changed: Some(Announced::Restarted),
    pace: PACE,
    retry: RETRY,
};

/// A check of the filter (`iptables -S`, outside the workers' cgroups) is set off at most once
/// per this long and kind of announcement: the first at once, the rest of a burst as one at
/// its end.
pub const PACE: Duration = Duration::from_secs(2);

/// Calls `wake` for every reload or restart firewalld announces on the system bus; returns
/// when `wake` says to stop.
pub(crate) async fn watch(wake: impl FnMut(Announced) -> bool) {
    watch_on(None, wake).await
}

/// `watch` on the bus at `address` (None: the system bus).
pub async fn watch_on(address: Option<&str>, wake: impl FnMut(Announced) -> bool) {
    crate::observe::bus::watch(&WATCH, address, wake).await
}

/// `Reloaded` on firewalld's main interface; its other signals (zones, the permanent
/// configuration) mean nothing to the filter.
fn announced(m: &zbus::Message) -> Option<Announced> {
    let header = m.header();
    (header.interface().map(|i| i.as_str()) == Some(NAME)
        && header.member().map(|n| n.as_str()) == Some("Reloaded"))
    .then_some(Announced::Reloaded)
}
