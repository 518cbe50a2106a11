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

use crate::backoff::Backoff;
use std::time::Duration;

/// How often an absent bus is asked again.
pub const RETRY: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));

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

/// Calls `wake` for every reload or restart firewalld announces on the system bus; returns
/// when `wake` says to stop.
pub async fn watch(wake: impl FnMut(Announced) -> bool) {
    watch_on(None, wake).await
}

/// `watch` on the bus at `address` (None: the system bus).
pub async fn watch_on(address: Option<&str>, mut wake: impl FnMut(Announced) -> bool) {
    use futures_util::StreamExt;
    let mut failures = 0u32;
    loop {
        match signals(address).await {
            Ok(mut stream) => {
                failures = 0;
                while let Some(m) = stream.next().await {
                    let Ok(m) = m else { continue };
                    if !wake(announced(&m)) {
                        return;
                    }
                }
                tracing::debug!("firewalld's signals ended; watching again");
            }
            Err(e) => tracing::debug!("cannot watch for firewalld's reloads ({e})"),
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(RETRY.delay(failures)).await;
    }
}

fn announced(m: &zbus::Message) -> Announced {
    match m.header().member().map(|n| n.as_str()) {
        Some("Reloaded") => Announced::Reloaded,
        _ => Announced::Restarted,
    }
}

/// Both signals in one stream. `Reloaded` is matched by path and interface, not sender (as
/// logind's signals are: a well-known sender is resolved by the bus, which not every client
/// follows); the name's owner change comes from the bus itself.
async fn signals(
    address: Option<&str>,
) -> zbus::Result<impl futures_util::Stream<Item = zbus::Result<zbus::Message>>> {
    let conn = match address {
        Some(a) => zbus::connection::Builder::address(a)?.build().await?,
        None => zbus::Connection::system().await?,
    };
    let reloaded = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .path(PATH)?
        .interface(NAME)?
        .member("Reloaded")?
        .build();
    let owner = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.DBus")?
        .interface("org.freedesktop.DBus")?
        .member("NameOwnerChanged")?
        .arg(0, NAME)?
        .build();
    let reloaded = zbus::MessageStream::for_match_rule(reloaded, &conn, Some(16)).await?;
    let owner = zbus::MessageStream::for_match_rule(owner, &conn, Some(16)).await?;
    Ok(futures_util::stream::select(reloaded, owner))
}
