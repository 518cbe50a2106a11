//! Fleet splay (pure): hundreds of hosts sharing one policy would otherwise act in the same
//! second — a window opens at 18:00 and every one of them starts its workers (the collector
//! takes every startd's registration at once), pulls the new image (the registry), refreshes
//! the manifest (the manifest server). Each host gets a stable offset in `[0, splay)` and
//! moves those clock-driven requests by it; the owner's side never waits for it (evictions,
//! pauses and stops are decided before any of this, and nothing here delays them).
//!
//! The offset comes from a SHA-256 of the machine id (`/etc/machine-id`, read once at start
//! by `settings::machine_id`) and the pilotd instance: stable across restarts, Rust versions and
//! pilotd versions (not std's `DefaultHasher`, whose output may change), and different per
//! host. No clock, no I/O: callers pass `now` and the splay.

use chrono::{DateTime, Utc};
use pilotd_core::backoff::Backoff;
use pilotd_core::horizon::after;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// This host's place in the fleet's spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Splay {
    /// The width every host's offset falls in (`splay` in pilotd.toml); zero: no splay.
    pub width: Duration,
    /// This host's offset, `< width` (zero when the width is).
    pub offset: Duration,
    /// The host's hash, which also draws each back-off's jitter.
    key: u64,
}

impl Splay {
    #[cfg(test)]
    /// No splay: every instant stays where the clock puts it.
    pub(crate) const OFF: Splay = Splay {
        width: Duration::ZERO,
        offset: Duration::ZERO,
        key: 0,
    };

    /// The splay of the host with this machine id and pilotd instance.
    pub(crate) fn of_host(width: Duration, machine_id: &str, instance: &str) -> Splay {
        let key = host_key(machine_id, instance);
        Splay {
            width,
            offset: spread(key, width),
            key,
        }
    }

    /// A splay with a chosen offset, for tests that need one instant exactly.
    #[cfg(test)]
    pub(crate) fn with_offset(width: Duration, offset: Duration) -> Splay {
        Splay {
            width,
            offset,
            key: 7,
        }
    }

    pub(crate) fn is_off(&self) -> bool {
        self.width.is_zero()
    }

    /// When the first start after `anchor` (the open period began, or pilotd started; the
    /// later) may happen: once the policy's `free_for` has passed from it, plus this host's
    /// offset. Hosts free at the anchor all become ready at `anchor + free_for`: that is the
    /// instant the offset spreads. None without splay or anchor.
    pub(crate) fn start_hold(
        &self,
        opened: Option<DateTime<Utc>>,
        started: Option<DateTime<Utc>>,
        free_for: Duration,
    ) -> Option<DateTime<Utc>> {
        if self.is_off() {
            return None;
        }
        let anchor = opened.max(started)?;
        Some(after(after(anchor, free_for), self.offset))
    }

    /// How far into the download period before a window (`lead` long) this host pulls a new
    /// image: its offset, scaled into the period's first half when the splay is wider, so the
    /// image is here before the window opens.
    pub(crate) fn pull_delay(&self, lead: Duration) -> Duration {
        let half = lead / 2;
        if self.width <= half {
            return self.offset;
        }
        let scaled = self.offset.as_nanos() * half.as_nanos() / self.width.as_nanos().max(1);
        Duration::from_nanos(u64::try_from(scaled).unwrap_or(u64::MAX))
    }

    /// `b` with this host's jitter on each delay (`Backoff::jittered`); unchanged without
    /// splay.
    pub(crate) fn backoff(&self, b: Backoff) -> Backoff {
        if self.is_off() {
            b
        } else {
            b.jittered(self.key)
        }
    }

    /// When the next periodic fetch after one at `now` is due, `every` apart: on this host's
    /// own grid, the instants `k·every + offset` since the epoch (so the fleet's fetches fall
    /// apart by their offsets, however their daemons were started), the first one at least
    /// half a period away (never two fetches back to back). Without splay, `now + every`.
    pub(crate) fn next_fetch(&self, now: DateTime<Utc>, every: Duration) -> DateTime<Utc> {
        let period = every.as_millis() as i128;
        if self.is_off() || period == 0 {
            return after(now, every);
        }
        let phase = self.offset.as_millis() as i128 % period;
        let earliest = i128::from(now.timestamp_millis()) + period / 2;
        let k = (earliest - phase + period - 1).div_euclid(period);
        i64::try_from(k * period + phase)
            .ok()
            .and_then(DateTime::from_timestamp_millis)
            .unwrap_or_else(|| after(now, every))
    }
}

/// The host's hash: the first 8 bytes of SHA-256 over a label, the machine id (trimmed: the
/// file ends with a newline) and the instance.
fn host_key(machine_id: &str, instance: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(b"pilotd fleet splay\0");
    h.update(machine_id.trim().as_bytes());
    h.update(b"\0");
    h.update(instance.as_bytes());
    let d = h.finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// `key` mapped onto `[0, width)` at millisecond resolution: the high half of
/// `key × width_ms` (uniform for a uniform key, and always below the width).
fn spread(key: u64, width: Duration) -> Duration {
    let ms = width.as_millis();
    if ms == 0 {
        return Duration::ZERO;
    }
    let off = (u128::from(key) * ms) >> 64;
    Duration::from_millis(u64::try_from(off).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
