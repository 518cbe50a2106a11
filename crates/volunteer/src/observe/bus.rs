//! Signals on the system bus, believed only from the one service that may send them.
//!
//! Any local user may send a signal on the system bus, with any object path, interface and
//! member: `dbus-send --system --type=signal /org/freedesktop/login1
//! org.freedesktop.login1.Manager.PrepareForSleep boolean:true` is delivered to everyone
//! whose match rule names only the path. What tells logind's signal from a forgery is its
//! sender: the bus stamps every message with the unique name of the connection that sent it,
//! and only the service (root, by the bus's policy) may own `org.freedesktop.login1`.
//!
//! So a `BusWatch` believes a signal only when its sender is the name's current owner:
//! - its match rule names the well-known sender, so the bus does not even pass a forgery on
//!   (dbus-daemon and dbus-broker resolve it against the name's owner at each signal);
//! - and on its side the sender's unique name must be the owner's: asked (`GetNameOwner`)
//!   each time the watch (re)starts, after subscribing to the name's owner changes, then
//!   followed through `NameOwnerChanged`, itself believed only from the bus. A bus that
//!   passed a forgery on (a rule resolved otherwise, a future client library) still has it
//!   dropped here.
//!
//! And what a signal sets off is paced: of each kind of announcement, up to `BURST` pass at
//! once (an owner's unlock right after a lock never waits), and once a flood has used them, one
//! per `pace`, the latest; so even the real service, flooding, sets off at most `BURST`
//! actions of a kind and then one per `pace`.
//!
//! Every watch of the daemon on the system bus is one `BusWatch`: logind's (`logind`),
//! firewalld's (`egress::firewalld`), NetworkManager's (`metered`), and those to come get both
//! for nothing.

use pilotd_core::backoff::Backoff;
use std::fmt::Debug;
use std::mem::Discriminant;
use std::time::Duration;
use tokio::time::Instant;
use zbus::names::{OwnedUniqueName, UniqueName};

/// The bus itself, the only sender believed about who owns a name.
const BUS: &str = "org.freedesktop.DBus";

/// How long the bus may take to say who owns a name; past it, the watch starts again.
const OWNER_DEADLINE: Duration = Duration::from_secs(5);

/// One service watched on the bus, and what its signals mean to pilotd.
pub struct BusWatch<T> {
    /// The service's well-known name: only its current owner is believed.
    pub name: &'static str,
    /// Its objects: every signal under this path (itself included) is read, or with `subtree`
    /// false only the signals of this one object.
    pub path: &'static str,
    /// Whether the objects below `path` are watched too. A service with many busy objects
    /// (NetworkManager's access points announce their signal strength) is watched on the one
    /// object it speaks on, so the bus does not wake pilotd for the others.
    pub subtree: bool,
    /// What a signal from the owner means; None: nothing to act on.
    pub read: fn(&zbus::Message) -> Option<T>,
    /// What the name changing owner (the service started, stopped or restarted) means; None:
    /// nothing to act on.
    pub owner_changed: Option<T>,
    /// At most one announcement of each kind (`std::mem::discriminant`) per this long.
    pub pace: Duration,
    /// How often a bus that is away is asked again.
    pub retry: Backoff,
}

/// Calls `wake` for what `w`'s service announces on the bus at `address` (None: the system
/// bus, `DBUS_SYSTEM_BUS_ADDRESS` when set), paced; watches again with `w.retry`'s back-off
/// while the bus is away. Returns when `wake` says to stop.
pub(crate) async fn watch<T: Copy + Debug>(
    w: &BusWatch<T>,
    address: Option<&str>,
    mut wake: impl FnMut(T) -> bool,
) {
    let mut failures = 0u32;
    loop {
        match Subscription::start(w, address).await {
            Ok(sub) => {
                failures = 0;
                if !sub.run(w, &mut wake).await {
                    return;
                }
                tracing::debug!(name = w.name, "the bus ended the watch; watching again");
            }
            Err(e) => tracing::debug!(name = w.name, "cannot watch the bus ({e})"),
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(w.retry.delay(failures)).await;
    }
}

/// One connection's subscription: the name's owner changes, the service's signals, and who
/// owns the name now.
struct Subscription {
    owners: zbus::MessageStream,
    signals: zbus::MessageStream,
    owner: Owner,
    _conn: zbus::Connection,
}

impl Subscription {
    async fn start<T>(w: &BusWatch<T>, address: Option<&str>) -> zbus::Result<Subscription> {
        let conn = match address {
            Some(a) => zbus::connection::Builder::address(a)?.build().await?,
            None => zbus::Connection::system().await?,
        };
        let owners = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(BUS)?
            .interface(BUS)?
            .member("NameOwnerChanged")?
            .arg(0, w.name)?
            .build();
        let signals = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(w.name)?;
        let signals = match w.subtree {
            true => signals.path_namespace(w.path)?,
            false => signals.path(w.path)?,
        }
        .build();
        // Subscribed to the owner changes first, asked then: a change in between is in the
        // stream. The service's signals after: while their queue is full the connection reads
        // nothing more, the answer included, and the service may be flooding.
        let owners = zbus::MessageStream::for_match_rule(owners, &conn, Some(16)).await?;
        let owner = tokio::time::timeout(OWNER_DEADLINE, name_owner(&conn, w.name))
            .await
            .map_err(|_| zbus::Error::Failure("the bus did not say who owns the name".into()))??;
        let signals = zbus::MessageStream::for_match_rule(signals, &conn, Some(64)).await?;
        tracing::debug!(name = w.name, owner = ?owner, "watching");
        Ok(Subscription {
            owners,
            signals,
            owner: Owner::new(w.name, owner),
            _conn: conn,
        })
    }

    /// Until the bus ends it (true) or `wake` says to stop (false).
    async fn run<T: Copy + Debug>(
        mut self,
        w: &BusWatch<T>,
        wake: &mut impl FnMut(T) -> bool,
    ) -> bool {
        use futures_util::StreamExt;
        let mut pace = Pace::new(w.pace);
        loop {
            let due = pace.next_due();
            let heard = tokio::select! {
                // An owner change first: the new owner's first signal is then believed.
                biased;
                m = self.owners.next() => match m {
                    None => return true,
                    Some(Ok(m)) if self.owner.changed(&m) => w.owner_changed,
                    Some(_) => None,
                },
                m = self.signals.next() => match m {
                    None => return true,
                    Some(Ok(m)) if self.owner.believes(&m) => (w.read)(&m),
                    Some(_) => None,
                },
                _ = sleep_until(due) => {
                    for t in pace.due(Instant::now()) {
                        if !wake(t) {
                            return false;
                        }
                    }
                    None
                }
            };
            if let Some(t) = heard.and_then(|t| pace.offer(t, Instant::now()))
                && !wake(t)
            {
                return false;
            }
        }
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Who owns `name` now; None when nobody does.
async fn name_owner(conn: &zbus::Connection, name: &str) -> zbus::Result<Option<OwnedUniqueName>> {
    let answer = conn
        .call_method(
            Some(BUS),
            "/org/freedesktop/DBus",
            Some(BUS),
            "GetNameOwner",
            &(name,),
        )
        .await;
    match answer {
        Ok(m) => Ok(Some(m.body().deserialize::<OwnedUniqueName>()?)),
        Err(zbus::Error::MethodError(e, ..))
            if e.as_str() == "org.freedesktop.DBus.Error.NameHasNoOwner" =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The name's owner as last heard, and whether a forgery was already reported.
struct Owner {
    name: &'static str,
    now: Option<OwnedUniqueName>,
    reported: bool,
}

impl Owner {
    fn new(name: &'static str, now: Option<OwnedUniqueName>) -> Owner {
        Owner {
            name,
            now,
            reported: false,
        }
    }

    /// Whether `m` comes from the name's current owner. The first that does not is logged as
    /// a warning (someone sends signals in the service's name), the rest quietly: a flood of
    /// forgeries must not fill the journal either.
    fn believes(&mut self, m: &zbus::Message) -> bool {
        let header = m.header();
        let sender = header.sender();
        let from_owner = match (sender, &self.now) {
            (Some(s), Some(o)) => s == o.inner(),
            _ => false,
        };
        if !from_owner {
            let why = format!(
                "ignoring a signal ({}) from {}, which does not own {}",
                header.member().map(|m| m.as_str()).unwrap_or("?"),
                sender
                    .map(UniqueName::as_str)
                    .unwrap_or("an unnamed sender"),
                self.name
            );
            if std::mem::replace(&mut self.reported, true) {
                tracing::debug!("{why}");
            } else {
                tracing::warn!("{why}: only its owner is believed");
            }
        }
        from_owner
    }

    /// Follows `NameOwnerChanged(name, old, new)` from the bus; true when the owner changed.
    fn changed(&mut self, m: &zbus::Message) -> bool {
        let header = m.header();
        if header.sender().map(UniqueName::as_str) != Some(BUS) {
            return false;
        }
        let Ok((name, _old, new)) = m.body().deserialize::<(String, String, String)>() else {
            return false;
        };
        if name != self.name {
            return false;
        }
        let new = (!new.is_empty())
            .then(|| OwnedUniqueName::try_from(new).ok())
            .flatten();
        tracing::debug!(name = self.name, owner = ?new, "the name changed owner");
        if new == self.now {
            return false;
        }
        self.now = new;
        true
    }
}

/// How many announcements of a kind pass at once before pacing holds them back: an owner's
/// return (an unlock just after a lock, a login just after logind restarted) must never wait
/// for a pace, only a flood does.
pub const BURST: u32 = 4;

/// Pacing of what a watch sets off, per kind of announcement: a bucket of `BURST` passes,
/// refilled at one per `gap`. While the bucket holds a pass, an announcement passes at once;
/// once a flood has emptied it, the latest announcement waits for the next pass, so a flood
/// of any length sets off at most `BURST` actions and then one per `gap`. Pure (the instant is
/// given).
#[derive(Debug)]
pub struct Pace<T> {
    gap: Duration,
    kinds: Vec<Paced<T>>,
}

#[derive(Debug)]
struct Paced<T> {
    kind: Discriminant<T>,
    /// Passes in the bucket at `at` (0..=BURST).
    passes: f64,
    at: Instant,
    waiting: Option<T>,
}

impl<T> Paced<T> {
    /// The bucket as it is at `now`.
    fn refill(&mut self, now: Instant, gap: Duration) {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() / gap.as_secs_f64();
        self.passes = (self.passes + earned).min(f64::from(BURST));
        self.at = now.max(self.at);
    }

    /// When the bucket next holds a whole pass.
    fn whole_at(&self, gap: Duration) -> Instant {
        self.at + gap.mul_f64((1.0 - self.passes).max(0.0))
    }
}

impl<T: Copy> Pace<T> {
    pub(crate) fn new(gap: Duration) -> Pace<T> {
        Pace {
            gap,
            kinds: Vec::new(),
        }
    }

    /// `t` was announced at `now`: passed at once (Some), or kept to pass when the bucket
    /// holds a pass again, replacing one of its kind already waiting (the latest word wins).
    pub(crate) fn offer(&mut self, t: T, now: Instant) -> Option<T> {
        let kind = std::mem::discriminant(&t);
        let gap = self.gap;
        let k = match self.kinds.iter().position(|k| k.kind == kind) {
            Some(i) => &mut self.kinds[i],
            None => {
                self.kinds.push(Paced {
                    kind,
                    passes: f64::from(BURST),
                    at: now,
                    waiting: None,
                });
                self.kinds.last_mut().expect("just pushed")
            }
        };
        k.refill(now, gap);
        if k.passes >= 1.0 {
            k.passes -= 1.0;
            // Newer than anything of its kind still waiting: that one is said by this.
            k.waiting = None;
            Some(t)
        } else {
            k.waiting = Some(t);
            None
        }
    }

    /// When the next waiting announcement is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.kinds
            .iter()
            .filter(|k| k.waiting.is_some())
            .map(|k| k.whole_at(self.gap))
            .min()
    }

    /// The waiting announcements due at `now`, to pass now.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<T> {
        let gap = self.gap;
        let mut out = Vec::new();
        for k in self.kinds.iter_mut().filter(|k| k.waiting.is_some()) {
            k.refill(now, gap);
            // A timer may wake a hair early: a pass within a millisecond counts.
            if k.passes + 1e-3 >= 1.0 {
                k.passes = (k.passes - 1.0).max(0.0);
                out.extend(k.waiting.take());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Said {
        Sessions,
        Sleep(bool),
    }

    #[test]
    fn a_few_pass_at_once_and_a_flood_as_its_latest_one_gap_later() {
        let t0 = Instant::now();
        let gap = Duration::from_secs(1);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut p = Pace::new(gap);
        // An owner's lock, unlock, lock...: BURST of them pass at once.
        for n in 0..u64::from(BURST) {
            let said = Said::Sleep(n % 2 == 0);
            assert_eq!(p.offer(said, ms(n * 10)), Some(said), "{n}");
        }
        assert_eq!(p.next_due(), None);
        // Another kind is not held back by the first.
        assert_eq!(p.offer(Said::Sessions, ms(50)), Some(Said::Sessions));
        // The bucket is empty: kept, the latest of its kind replacing the one waiting, due
        // when a pass has been earned (a gap after the first of the burst).
        assert_eq!(p.offer(Said::Sleep(true), ms(100)), None);
        assert_eq!(p.offer(Said::Sleep(false), ms(200)), None);
        assert_eq!(p.next_due(), Some(ms(1000)));
        assert_eq!(p.due(ms(990)), vec![]);
        assert_eq!(p.due(ms(1000)), vec![Said::Sleep(false)]);
        assert_eq!(p.next_due(), None);
        // Still flooding: one per gap.
        assert_eq!(p.offer(Said::Sleep(true), ms(1500)), None);
        assert_eq!(p.next_due(), Some(ms(2000)));
        assert_eq!(p.due(ms(2000)), vec![Said::Sleep(true)]);
        // Quiet for a while: the bucket fills again and passes at once.
        for n in 0..u64::from(BURST) {
            assert!(p.offer(Said::Sleep(false), ms(10_000 + n)).is_some(), "{n}");
        }
        assert_eq!(p.offer(Said::Sleep(false), ms(10_100)), None);
    }

    #[test]
    fn a_flood_passes_its_burst_then_one_per_gap() {
        let t0 = Instant::now();
        let gap = Duration::from_millis(500);
        let mut p = Pace::new(gap);
        let mut passed = 0;
        // 10 s of one announcement every millisecond.
        for n in 0..10_000u64 {
            let now = t0 + Duration::from_millis(n);
            passed += p.due(now).len();
            passed += usize::from(p.offer(Said::Sessions, now).is_some());
        }
        passed += p.due(t0 + Duration::from_secs(11)).len();
        let burst = BURST as usize;
        assert!((burst + 19..=burst + 21).contains(&passed), "{passed}");
    }

    fn signal(sender: &str) -> zbus::Message {
        zbus::Message::signal(
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "PrepareForSleep",
        )
        .unwrap()
        .sender(sender)
        .unwrap()
        .build(&(true,))
        .unwrap()
    }

    fn owner_changed(sender: &str, name: &str, old: &str, new: &str) -> zbus::Message {
        zbus::Message::signal("/org/freedesktop/DBus", BUS, "NameOwnerChanged")
            .unwrap()
            .sender(sender)
            .unwrap()
            .build(&(name, old, new))
            .unwrap()
    }

    #[test]
    fn only_the_names_current_owner_is_believed() {
        let name = "org.freedesktop.login1";
        let unique = |s: &str| Some(OwnedUniqueName::try_from(s).unwrap());
        let mut o = Owner::new(name, unique(":1.5"));
        assert!(o.believes(&signal(":1.5")));
        assert!(!o.believes(&signal(":1.42")), "another connection");
        // Nobody owns it: nobody is believed.
        let mut nobody = Owner::new(name, None);
        assert!(!nobody.believes(&signal(":1.5")));

        // Who owns it is the bus's word alone, and about this name only.
        assert!(!o.changed(&owner_changed(":1.42", name, ":1.5", ":1.42")));
        assert!(!o.believes(&signal(":1.42")));
        assert!(!o.changed(&owner_changed(BUS, "org.example.Other", ":1.5", ":1.42")));
        assert!(o.believes(&signal(":1.5")));
        // A restart: gone, then a new owner.
        assert!(o.changed(&owner_changed(BUS, name, ":1.5", "")));
        assert!(!o.believes(&signal(":1.5")));
        assert!(o.changed(&owner_changed(BUS, name, "", ":1.9")));
        assert!(o.believes(&signal(":1.9")));
        assert!(!o.believes(&signal(":1.5")), "the old owner is no one now");
        // The same owner again (as GetNameOwner already said) is no change.
        assert!(!o.changed(&owner_changed(BUS, name, "", ":1.9")));
    }
}
