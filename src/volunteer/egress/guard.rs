//! The daemon's keeper of the filter. Every cycle it starts a check beside the loop (never
//! two at once) while there is something to protect — this instance's workers — or a filter
//! to restore; a worker's start ensures the filter first, on the same lock, so a check and a
//! start never rebuild at once. A check repairs what it finds damaged at once (a new
//! generation swapped in, `rebuild_script`). When the filter cannot be restored it is "down":
//! the cycle's plan then pauses this instance's workers and starts none until a check restores
//! it. A change between up and down wakes the loop, so the pause does not wait for the next
//! tick.
//!
//! Cost while workers run: one `iptables -S` per cycle, on a blocking thread; none without
//! workers.

use super::{EgressError, Ensured, Filter, Printed};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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
    /// Wakes the loop when the filter goes down or comes back.
    wake: Box<dyn Fn() + Send + Sync>,
}

impl Guard {
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Guard {
        Guard {
            inner: Arc::new(Inner {
                printed: Mutex::new(None),
                down: Mutex::new(None),
                checking: AtomicBool::new(false),
                wake: Box::new(wake),
            }),
        }
    }

    /// Why the filter is down, as the last check or start left it.
    pub fn down(&self) -> Option<String> {
        self.inner
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Once a cycle: starts a check of `filter` beside the loop when `protect` (this
    /// instance has workers) or the filter is down, unless one runs; returns why the filter
    /// is down. No filter (the site's own network) is never down.
    pub fn check(&self, filter: Option<&Filter>, protect: bool) -> Option<String> {
        let Some(f) = filter else {
            self.set_down(None);
            return None;
        };
        let down = self.down();
        if (protect || down.is_some()) && !self.inner.checking.swap(true, Ordering::AcqRel) {
            let (guard, f) = (self.clone(), f.clone());
            tokio::spawn(async move {
                let _ = guard.ensure(&f).await;
                guard.inner.checking.store(false, Ordering::Release);
            });
        }
        down
    }

    /// The filter whole (as found, or restored): before a worker starts, and in every check.
    /// An error means it is down.
    pub async fn ensure(&self, f: &Filter) -> Result<(), EgressError> {
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
        let mut printed = self
            .inner
            .printed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let result = super::ensure(f, &mut printed);
        match &result {
            Ok(Ensured::Intact) => {}
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
        self.set_down(result.as_ref().err().map(ToString::to_string));
        result.map(|_| ())
    }

    /// Records whether the filter is down; a change is logged and wakes the loop.
    fn set_down(&self, why: Option<String>) {
        let mut down = self
            .inner
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
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

impl Default for Guard {
    /// A guard whose changes wake nothing (tests, tools).
    fn default() -> Guard {
        Guard::new(|| {})
    }
}
