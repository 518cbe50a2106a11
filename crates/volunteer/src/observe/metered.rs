//! Whether the machine's link costs its owner, as NetworkManager says: its `Metered` property
//! on `/org/freedesktop/NetworkManager` (interface `org.freedesktop.NetworkManager`, type `u`,
//! an `NMMetered`: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no). It is the metered state
//! of the device holding the primary connection: the owner sets it per connection
//! (`nmcli connection modify … connection.metered yes`), and NetworkManager guesses it
//! otherwise (a phone's hotspot says so in its DHCP answer). NetworkManager's own advice
//! (libnm's `NMMetered`) is to treat a guessed yes as a yes and every other state as not
//! metered; `Metered::is_metered` does.
//!
//! Observation only: what a metered link holds back is the policy's (`on_metered`). Where
//! NetworkManager is not on the bus (not installed, another network daemon, no bus at all),
//! the link is not known to be metered: said once in the log, and asked again with `RETRY`'s
//! back-off, as logind is, or at once when NetworkManager appears on the bus (`watch`).
//!
//! Who owns the name is asked of the bus first, and the property of that owner: a call to the
//! well-known name of a service that is installed but not running could have the bus start it.
//!
//! A change is announced by `PropertiesChanged` on the manager's object (the standard
//! `org.freedesktop.DBus.Properties` one; NetworkManager before 1.2x also sent its own
//! `org.freedesktop.NetworkManager.PropertiesChanged`, taken too), believed only from the
//! owner of `org.freedesktop.NetworkManager` (`bus`): any local user may send one, and
//! believed it would only make the daemon ask again, but even that is not theirs to set off.
//! Only that one object is watched: the access points below it announce their signal strength.

use crate::observe::bus::BusWatch;
use crate::snapshot::{HostSnapshot, Metered};
use chrono::{DateTime, Utc};
use pilotd_core::backoff::Backoff;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use zbus::names::OwnedUniqueName;
use zbus::zvariant::OwnedValue;

/// One question to NetworkManager may take this long; past it, the link is not known to be
/// metered this cycle.
pub(crate) const DEADLINE: Duration = Duration::from_millis(1000);

/// How often an absent NetworkManager is asked again (observations and the watch alike).
pub(crate) const RETRY: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));

const SERVICE: &str = "org.freedesktop.NetworkManager";
const PATH: &str = "/org/freedesktop/NetworkManager";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const BUS: &str = "org.freedesktop.DBus";

/// The link as NetworkManager last said it: a bus connection kept between cycles (made again
/// after a failure), the back-off while it cannot be asked, and whether its absence was said.
#[derive(Default)]
pub struct Link {
    conn: Option<zbus::Connection>,
    failures: u32,
    retry_at: Option<DateTime<Utc>>,
    /// The last answer; None while NetworkManager cannot be asked.
    seen: Option<Metered>,
    /// NetworkManager's absence was said in the log (once, until it answers again).
    absence_said: bool,
    /// NetworkManager announced something (`watch`): ask at the next look, back-off or not.
    heard: Heard,
}

/// Set by the watch when NetworkManager announces a change or appears on the bus, so the next
/// look asks it at once instead of waiting out a back-off.
#[derive(Debug, Clone, Default)]
pub struct Heard(Arc<AtomicBool>);

impl Heard {
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// Why NetworkManager could not say.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    #[error("NetworkManager is not running (nobody owns {SERVICE} on the system bus)")]
    Absent,
    #[error("NetworkManager did not answer within {} ms", DEADLINE.as_millis())]
    Late,
    #[error("cannot ask NetworkManager: {0}")]
    Bus(#[from] zbus::Error),
    #[error("NetworkManager's Metered is not a number: {0}")]
    Type(#[from] zbus::zvariant::Error),
}

impl Link {
    /// What the watch sets when NetworkManager speaks (`watch`).
    pub(crate) fn heard(&self) -> Heard {
        self.heard.clone()
    }

    /// The last answer (None: NetworkManager could not be asked).
    pub(crate) fn seen(&self) -> Option<Metered> {
        self.seen
    }

    /// The link at `now`, within `DEADLINE`; while in back-off (and nothing was heard since),
    /// not known without asking.
    pub(crate) async fn observe(&mut self, now: DateTime<Utc>) -> Option<Metered> {
        let heard = self.heard.take();
        if !heard && self.retry_at.is_some_and(|t| now < t) {
            return self.seen;
        }
        let answer = match tokio::time::timeout(DEADLINE, self.ask()).await {
            Ok(a) => a,
            Err(_) => Err(LinkError::Late),
        };
        match answer {
            Ok(m) => {
                let was_absent = std::mem::take(&mut self.absence_said);
                if self.seen != Some(m) || was_absent {
                    tracing::info!("NetworkManager says the link is {}", said(m));
                }
                self.failures = 0;
                self.retry_at = None;
                self.seen = Some(m);
            }
            Err(why) => {
                if !std::mem::replace(&mut self.absence_said, true) {
                    tracing::info!("{why}: the link is not known to be metered");
                } else {
                    tracing::debug!("{why}");
                }
                self.conn = None;
                self.failures = self.failures.saturating_add(1);
                self.retry_at = Some(RETRY.retry_at(now, self.failures));
                self.seen = None;
            }
        }
        self.seen
    }

    async fn connection(&mut self) -> zbus::Result<zbus::Connection> {
        match &self.conn {
            Some(c) => Ok(c.clone()),
            None => {
                let c = zbus::Connection::system().await?;
                self.conn = Some(c.clone());
                Ok(c)
            }
        }
    }

    /// The owner of NetworkManager's name, then its `Metered`. Plain method calls: a proxy
    /// may subscribe to signals and cache properties, which a look once a cycle does not need.
    async fn ask(&mut self) -> Result<Metered, LinkError> {
        let conn = self.connection().await?;
        let owner = conn
            .call_method(
                Some(BUS),
                "/org/freedesktop/DBus",
                Some(BUS),
                "GetNameOwner",
                &(SERVICE,),
            )
            .await;
        let owner: OwnedUniqueName = match owner {
            Ok(m) => m.body().deserialize()?,
            Err(zbus::Error::MethodError(e, ..))
                if e.as_str() == "org.freedesktop.DBus.Error.NameHasNoOwner" =>
            {
                return Err(LinkError::Absent);
            }
            Err(e) => return Err(e.into()),
        };
        let value: OwnedValue = conn
            .call_method(
                Some(owner.as_str()),
                PATH,
                Some(PROPERTIES),
                "Get",
                &(SERVICE, "Metered"),
            )
            .await?
            .body()
            .deserialize()?;
        Ok(Metered::from_nm(u32::try_from(&value)?))
    }
}

/// A state as the log says it.
fn said(m: Metered) -> &'static str {
    match m {
        Metered::Yes => "metered",
        Metered::GuessYes => "metered (its guess)",
        Metered::No => "not metered",
        Metered::GuessNo => "not metered (its guess)",
        Metered::Unknown => "of unknown price (not counted as metered)",
    }
}

/// Lays what NetworkManager said on an observation.
pub(crate) fn lay_on(h: &mut HostSnapshot, seen: Option<Metered>) {
    h.metered = seen;
}

/// What NetworkManager announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announced {
    /// Its `Metered` changed (the primary connection changed, or the owner marked it).
    Metered,
    /// It appeared on the bus or left it (a start, a stop, a restart).
    Restarted,
}

/// NetworkManager as the daemon watches it: `PropertiesChanged` naming `Metered` on its
/// manager object and its name changing owner, believed only from the bus and the name's owner
/// (`bus`), each passed at most once per `PACE` (the first at once).
const WATCH: BusWatch<Announced> = BusWatch {
    name: SERVICE,
    path: PATH,
    subtree: false,
    read: announced,
    owner_changed: Some(Announced::Restarted),
    pace: PACE,
    retry: RETRY,
};

/// A cycle is set off at most once per this long and kind of announcement: a connection that
/// flaps between the hotspot and the office is one cycle, the latest state one `PACE` later.
pub const PACE: Duration = Duration::from_secs(1);

/// Calls `wake` for every change of the link's `Metered` NetworkManager announces, and when it
/// starts or stops; watches again with `RETRY`'s back-off while the bus is away; returns when
/// `wake` says to stop.
pub(crate) async fn watch(wake: impl FnMut(Announced) -> bool) {
    watch_on(None, wake).await
}

/// `watch` on the bus at `address` (None: the system bus).
pub async fn watch_on(address: Option<&str>, wake: impl FnMut(Announced) -> bool) {
    crate::observe::bus::watch(&WATCH, address, wake).await
}

/// `PropertiesChanged` of the manager naming `Metered`, changed or invalidated; NetworkManager's
/// other properties (its state, the active connections, connectivity) change nothing here.
fn announced(m: &zbus::Message) -> Option<Announced> {
    let header = m.header();
    if header.member().map(|n| n.as_str()) != Some("PropertiesChanged") {
        return None;
    }
    let names_metered = match header.interface().map(|i| i.as_str()) {
        Some(PROPERTIES) => m
            .body()
            .deserialize::<(String, HashMap<String, OwnedValue>, Vec<String>)>()
            .ok()
            .is_some_and(|(iface, changed, invalidated)| {
                iface == SERVICE
                    && (changed.contains_key("Metered")
                        || invalidated.iter().any(|n| n == "Metered"))
            }),
        // NetworkManager's own signal of old, its changed properties alone.
        Some(SERVICE) => m
            .body()
            .deserialize::<HashMap<String, OwnedValue>>()
            .ok()
            .is_some_and(|changed| changed.contains_key("Metered")),
        _ => false,
    };
    names_metered.then_some(Announced::Metered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::zvariant::Value;

    fn signal<B>(interface: &str, body: &B) -> zbus::Message
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        zbus::Message::signal(PATH, interface, "PropertiesChanged")
            .unwrap()
            .build(body)
            .unwrap()
    }

    fn props(pairs: &[(&str, Value<'_>)]) -> HashMap<String, OwnedValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OwnedValue::try_from(v.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn only_a_change_naming_metered_on_the_manager_is_announced() {
        let metered = props(&[("Metered", Value::U32(1))]);
        let state = props(&[("State", Value::U32(70))]);
        let none: Vec<String> = vec![];
        let m = signal(PROPERTIES, &(SERVICE, &metered, &none));
        assert_eq!(announced(&m), Some(Announced::Metered));
        // Invalidated, without its value: asked again all the same.
        let gone = vec!["Metered".to_string()];
        let m = signal(PROPERTIES, &(SERVICE, &state, &gone));
        assert_eq!(announced(&m), Some(Announced::Metered));
        // Another property, or another interface's Metered (a device's), is nothing.
        let m = signal(PROPERTIES, &(SERVICE, &state, &none));
        assert_eq!(announced(&m), None);
        let device = "org.freedesktop.NetworkManager.Device";
        let m = signal(PROPERTIES, &(device, &metered, &none));
        assert_eq!(announced(&m), None);
        // The older NetworkManager's own signal.
        let m = signal(SERVICE, &(&metered,));
        assert_eq!(announced(&m), Some(Announced::Metered));
        let m = signal(SERVICE, &(&state,));
        assert_eq!(announced(&m), None);
    }

    #[test]
    fn networkmanagers_numbers_and_what_counts_as_metered() {
        let all: Vec<(u32, Metered, bool)> = vec![
            (0, Metered::Unknown, false),
            (1, Metered::Yes, true),
            (2, Metered::No, false),
            (3, Metered::GuessYes, true),
            (4, Metered::GuessNo, false),
            (5, Metered::Unknown, false),
        ];
        for (n, m, metered) in all {
            assert_eq!(Metered::from_nm(n), m, "{n}");
            assert_eq!(m.is_metered(), metered, "{n}");
        }
    }
}
