//! The daemon's keeper of the filter. Every cycle it starts a check beside the loop (never
//! two at once) while there is something to protect — this instance's workers — or a filter
//! to restore; a worker's start ensures the filter first, on the same lock, so a check and a
//! start never rebuild at once. A check repairs what it finds damaged at once (a new
//! generation swapped in, `rebuild_script`). When the filter cannot be restored it is "down":
//! the cycle's plan then pauses this instance's workers and starts none until a check restores
//! it. A change between up and down wakes the loop, so the pause does not wait for the next
//! tick.
//!
//! Two walls while the filter is down: the workers are paused (the plan's), and pilotd's
//! bridge is taken down (here, `link.rs`), so that a worker the engine failed to pause, or
//! one someone unpaused, still reaches nothing. The bridge is up exactly while the filter is
//! whole.
//!
//! A firewall reload that firewalld announces (`firewalld.rs`) asks for a check at once
//! (`reloaded`), with the filter and the workers the last cycle saw; a check already under way
//! may have read the table before the reload, so one more follows it.
//!
//! Cost while workers run: one `iptables -S` per cycle, on a blocking thread; none without
//! workers.

use super::link::{self, Link};
use super::{EgressError, Ensured, Filter, Printed};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Shared by the loop, the check beside it and the executor's starts.
#[derive(Clone)]
pub struct Guard {
    inner: Arc<Inner>,
}

struct Inner {
    /// Held while the filter is read or changed; what iptables prints for pilotd's rules.
    printed: Mutex<Option<Printed>>,
    /// Why the filter is down, while it is.
    down: Mutex<Option<String>>,
    checking: AtomicBool,
    /// A reload arrived while a check ran: one more check follows it.
    again: AtomicBool,
    /// What the last cycle asked to keep: its filter, and whether workers lived.
    kept: Mutex<(Option<Filter>, bool)>,
    /// Wakes the loop when the filter goes down or comes back.
    wake: Box<dyn Fn() + Send + Sync>,
}

impl Guard {
    pub(crate) fn new(wake: impl Fn() + Send + Sync + 'static) -> Guard {
        Guard {
            inner: Arc::new(Inner {
                printed: Mutex::new(None),
                down: Mutex::new(None),
                checking: AtomicBool::new(false),
                again: AtomicBool::new(false),
                kept: Mutex::new((None, false)),
                wake: Box::new(wake),
            }),
        }
    }

    /// Why the filter is down, as the last check or start left it.
    pub(crate) fn down(&self) -> Option<String> {
        held(&self.inner.down).clone()
    }

    /// Once a cycle: starts a check of `filter` beside the loop when `protect` (this
    /// instance has workers) or the filter is down, unless one runs; returns why the filter
    /// is down. No filter (the site's own network) is never down.
    pub(crate) fn check(&self, filter: Option<&Filter>, protect: bool) -> Option<String> {
        *held(&self.inner.kept) = (filter.cloned(), protect);
        let Some(f) = filter else {
            self.set_down(None);
            return None;
        };
        let down = self.down();
        if protect || down.is_some() {
            self.spawn_check(f, false);
        }
        down
    }

    /// The firewall was reloaded (firewalld said so): a check at once of what the last cycle
    /// asked to keep, instead of at the next cycle.
    pub(crate) fn reloaded(&self) {
        let (filter, protect) = held(&self.inner.kept).clone();
        if let Some(f) = filter
            && (protect || self.down().is_some())
        {
            tracing::info!("the firewall was reloaded; checking the workers' traffic filter now");
            self.spawn_check(&f, true);
        }
    }

    /// A check of `f` beside the loop, unless one runs; then, after a reload, one more once it
    /// is done (it may have read the table before the reload).
    fn spawn_check(&self, f: &Filter, after_reload: bool) {
        if self.inner.checking.swap(true, Ordering::AcqRel) {
            if after_reload {
                self.inner.again.store(true, Ordering::Release);
            }
            return;
        }
        let (guard, f) = (self.clone(), f.clone());
        tokio::spawn(async move {
            let inner = &guard.inner;
            loop {
                let _ = guard.ensure(&f).await;
                if inner.again.swap(false, Ordering::AcqRel) {
                    continue;
                }
                inner.checking.store(false, Ordering::Release);
                // A reload that came between the two lines above asked for one more check:
                // this task takes it, unless another check has started since.
                let asked = inner.again.swap(false, Ordering::AcqRel);
                if !asked || inner.checking.swap(true, Ordering::AcqRel) {
                    break;
                }
            }
        });
    }

    /// The filter whole (as found, or restored): before a worker starts, and in every check.
    /// An error means it is down.
    pub(crate) async fn ensure(&self, f: &Filter) -> Result<(), EgressError> {
        let (guard, f) = (self.clone(), f.clone());
        tokio::task::spawn_blocking(move || guard.ensure_blocking(&f))
            .await
            .unwrap_or_else(|e| {
                Err(EgressError::Restore {
                    message: format!("the check did not finish: {e}"),
                })
            })
    }

    fn ensure_blocking(&self, f: &Filter) -> Result<(), EgressError> {
        let mut printed = held(&self.inner.printed);
        // The host's resolvers as of now: a changed one is a changed filter, rebuilt. Unless
        // the host's own addresses are known, none is opened: one of them might be the host.
        let servers = super::resolvers::host(std::path::Path::new("/"));
        let host = super::resolvers::host_addresses().unwrap_or_else(|e| {
            tracing::warn!(
                "cannot list this host's addresses ({e}); opening no resolver's DNS port to the workers"
            );
            servers.clone()
        });
        let f = &f.clone().with_resolvers(&servers, &host);
        let result = super::ensure(f, &mut printed);
        // The bridge follows the filter: down before the workers are paused, up only once the
        // filter is whole again.
        let bridge = link::set_up(&f.interface, result.is_ok());
        match &result {
            Ok(Ensured::Intact) => {}
            // Workers live behind it: it was there, and all of it went (a flush, or a saved
            // table restored whole).
            Ok(Ensured::Installed) if self.protecting() => tracing::warn!(
                network = %f.network,
                "workers' traffic filter was gone entirely (the filter table flushed or restored?); put it back"
            ),
            Ok(Ensured::Installed) => tracing::info!(
                network = %f.network,
                interface = %f.interface,
                allow = %f.allow.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
                "workers' traffic filtered: nothing private or on this host but what egress_allow names"
            ),
            Ok(Ensured::Rebuilt { why }) => tracing::warn!(
                network = %f.network,
                "workers' traffic filter was not whole ({why}); rebuilt it, with no moment unfiltered"
            ),
            Err(_) => {}
        }
        let why = result.as_ref().err().map(|e| match &bridge {
            Ok(Link::Absent) => e.to_string(),
            Ok(_) => format!("{e}; its bridge {} is down meanwhile", f.interface),
            Err(b) => format!(
                "{e}; its bridge {} could not be taken down either: {b}",
                f.interface
            ),
        });
        match (&bridge, result.is_ok()) {
            (Ok(Link::Changed), true) => {
                tracing::info!(interface = %f.interface, "pilotd's bridge is up again")
            }
            (Ok(Link::Changed), false) => {
                tracing::warn!(interface = %f.interface, "pilotd's bridge taken down: no worker sends a packet until the filter is whole")
            }
            (Err(e), true) => {
                tracing::error!(interface = %f.interface, "cannot bring pilotd's bridge up: {e}")
            }
            _ => {}
        }
        self.set_down(why);
        result.map(|_| ())
    }

    /// Whether the last cycle saw workers live behind the filter.
    fn protecting(&self) -> bool {
        held(&self.inner.kept).1
    }

    /// Records whether the filter is down; a change is logged and wakes the loop.
    fn set_down(&self, why: Option<String>) {
        let mut down = held(&self.inner.down);
        if down.is_some() == why.is_some() {
            *down = why;
            return;
        }
        match &why {
            Some(e) => tracing::error!(
                "{e}; pausing this instance's workers, and starting none, until the filter is back"
            ),
            None => tracing::info!("workers' traffic filter whole again; paused workers resume"),
        }
        *down = why;
        drop(down);
        (self.inner.wake)();
    }
}

/// The value behind `m`, even if a thread panicked holding it: every value kept here is
/// whole at each moment (set in one assignment), so a panic leaves nothing half-written.
fn held<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for Guard {
    /// A guard whose changes wake nothing (tests, tools).
    fn default() -> Guard {
        Guard::new(|| {})
    }
}
