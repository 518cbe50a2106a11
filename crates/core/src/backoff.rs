//! One exponential back-off for the whole house: after the n-th failure in a row, wait
//! `first · 2^(n-1)`, never longer than `max`. Workers that run no job delay the next start
//! with it, an unreachable registry delays the next request, a failing pod shape delays its
//! next trial pod, a broken event stream delays its reconnect. Pure: callers add the delay to
//! their own `now`.
//!
//! A fleet's hosts that fail together (the registry or the collector went down for all of
//! them) would retry together, in lockstep, at every step: `jittered` takes up to half of
//! each delay off, drawn from a per-host key and the attempt, so the same host retries at the
//! same instants on every run (tests are tables over fixed instants) and two hosts apart.

use chrono::{DateTime, Utc};
use std::time::Duration;

/// The delays of one kind of retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub first: Duration,
    /// No delay is longer.
    pub max: Duration,
    /// The host's key (`volunteer::splay`), when delays are jittered.
    pub jitter: Option<u64>,
}

impl Backoff {
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            jitter: None,
        }
    }

    /// The same delays, each jittered for the host with `key`: in `(d / 2, d]` for the
    /// un-jittered `d`, so never longer than `max`.
    pub const fn jittered(self, key: u64) -> Backoff {
        Backoff {
            jitter: Some(key),
            ..self
        }
    }

    /// The delay after `failures` failures in a row (0 and 1 both wait `first`). Far too many
    /// failures saturate at `max` instead of overflowing.
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        let d = self.first.saturating_mul(factor).min(self.max);
        self.jitter.map_or(d, |key| jitter(key, d, failures))
    }

    /// When the next try may happen after `failures` failures in a row at `now`: checked
    /// arithmetic (`horizon::after`), so no `first`/`max` a file allows can overflow it.
    pub fn retry_at(&self, now: DateTime<Utc>, failures: u32) -> DateTime<Utc> {
        crate::horizon::after(now, self.delay(failures))
    }
}

/// `d` less a share of its half drawn from `key` and `attempt`: splitmix64's finaliser over
/// them (a fixed permutation: the same draw on every Rust and pilotd version).
fn jitter(key: u64, d: Duration, attempt: u32) -> Duration {
    let mut z = key ^ u64::from(attempt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let cut = (d.as_nanos() / 2 * u128::from(z)) >> 64;
    d.saturating_sub(Duration::from_nanos(u64::try_from(cut).unwrap_or(u64::MAX)))
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

    #[test]
    fn jitter_is_fixed_per_host_and_attempt_and_stays_in_the_upper_half() {
        let b = Backoff::new(Duration::from_secs(60), Duration::from_secs(300));
        let (one, two) = (b.jittered(0x0123_4567_89ab_cdef), b.jittered(42));
        // (attempt, un-jittered delay): every jittered one in (d/2, d], the same on every call.
        let table = [(1, 60), (2, 120), (3, 240), (4, 300), (5, 300), (40, 300)];
        for (n, d) in table {
            let d = Duration::from_secs(d);
            assert_eq!(b.delay(n), d, "no key, no jitter");
            for j in [one, two] {
                let got = j.delay(n);
                assert!(got > d / 2 && got <= d, "attempt {n}: {got:?} of {d:?}");
                assert_eq!(got, j.delay(n));
            }
        }
        // Pinned (computed apart, in Python): a host's retries fall at the same instants on
        // every version.
        let ms: Vec<u128> = (1..=4).map(|n| one.delay(n).as_millis()).collect();
        assert_eq!(ms, vec![43_333, 81_742, 196_909, 284_436]);
        // Two hosts apart, and one host's attempts apart (not one fixed factor).
        let apart = (1..=6).filter(|n| one.delay(*n) != two.delay(*n)).count();
        assert_eq!(apart, 6);
        let t = DateTime::UNIX_EPOCH;
        assert_eq!(
            one.retry_at(t, 1),
            DateTime::from_timestamp_nanos(43_333_053_238)
        );
    }
}
