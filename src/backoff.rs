//! One exponential back-off for the whole house: after the n-th failure in a row, wait
//! `first · 2^(n-1)`, never longer than `max`. Workers that run no job delay the next start
//! with it, an unreachable registry delays the next request, a failing pod shape delays its
//! next trial pod, a broken event stream delays its reconnect. Pure: callers add the delay to
//! their own `now`.

use chrono::{DateTime, Utc};
use std::time::Duration;

/// The delays of one kind of retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub first: Duration,
    /// No delay is longer.
    pub max: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max }
    }

    /// The delay after `failures` failures in a row (0 and 1 both wait `first`). Far too many
    /// failures saturate at `max` instead of overflowing.
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.max)
    }

    /// When the next try may happen after `failures` failures in a row at `now`: checked
    /// arithmetic (`horizon::after`), so no `first`/`max` a file allows can overflow it.
    pub fn retry_at(&self, now: DateTime<Utc>, failures: u32) -> DateTime<Utc> {
        crate::horizon::after(now, self.delay(failures))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_first_up_to_max_and_never_overflows() {
        let b = Backoff::new(Duration::from_secs(60), Duration::from_secs(300));
        let delays: Vec<u64> = (1..=5).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(delays, vec![60, 120, 240, 300, 300]);
        assert_eq!(b.delay(0), b.delay(1));
        assert_eq!(b.delay(u32::MAX), b.max);
        let short = Backoff::new(Duration::from_secs(2), Duration::from_secs(2));
        assert_eq!(short.delay(5), Duration::from_secs(2));
    }

    #[test]
    fn the_retry_instant_saturates_instead_of_panicking() {
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        let now = DateTime::<Utc>::MAX_UTC;
        assert_eq!(huge.retry_at(now, u32::MAX), DateTime::<Utc>::MAX_UTC);
        let b = Backoff::new(Duration::from_secs(60), Duration::from_secs(300));
        let t = DateTime::UNIX_EPOCH;
        assert_eq!(b.retry_at(t, 2), DateTime::from_timestamp(120, 0).unwrap());
    }
}
