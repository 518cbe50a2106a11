//! The range of instants and durations pilotd computes with, and the only arithmetic it does
//! on them. chrono panics when `instant + duration` leaves its range (about ±262,000 years);
//! a policy value such as `busy_for = "300000years"` or a replayed `--now` near that limit
//! used to crash the daemon, and a crash fails open (workers keep running while the owner is
//! at the machine). So:
//!
//! - the files and the command line refuse durations longer than [`MAX_DURATION`] and
//!   instants outside [`earliest`]..=[`latest`] (`config::units`, `cmd::parse_now`), each at
//!   its position;
//! - every `instant ± duration` in the house goes through [`after`] / [`before`], which
//!   saturate at the range's ends instead of panicking, so a value that slipped past a check
//!   (a snapshot file, a stored state file) gives a far-away instant, never a crash; sums of
//!   std durations (`grace + 10s`, `grace + timeout`) use `saturating_add`.
//!
//! Imports: nothing of pilotd (the bottom layer).

use chrono::{DateTime, TimeDelta, Utc};
use std::time::Duration;

/// The longest duration any setting may hold: a hundred years is "never" for every setting
/// of pilotd, and keeps `now + duration` far inside chrono's range.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

/// The earliest instant pilotd accepts (the Unix epoch).
pub fn earliest() -> DateTime<Utc> {
    DateTime::UNIX_EPOCH
}

/// The latest instant pilotd accepts: the last second of year 9999. Any instant plus
/// [`MAX_DURATION`] plus a time zone's offset is still far inside chrono's range.
pub fn latest() -> DateTime<Utc> {
    // 9999-12-31T23:59:59Z.
    DateTime::from_timestamp(253_402_300_799, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Is `t` inside the accepted range?
pub fn in_range(t: DateTime<Utc>) -> bool {
    earliest() <= t && t <= latest()
}

/// An instant as an owner writes it on the command line (`--now`): RFC 3339, or unix
/// seconds, within the accepted range (further out, a decision's date arithmetic would leave
/// chrono's).
pub fn parse_instant(s: &str) -> Result<DateTime<Utc>, InstantError> {
    let t = match s.parse::<i64>() {
        Ok(secs) => DateTime::from_timestamp(secs, 0),
        Err(_) => Some(
            DateTime::parse_from_rfc3339(s)
                .map_err(|e| InstantError::Unreadable(s.to_string(), e.to_string()))?
                .with_timezone(&Utc),
        ),
    };
    t.filter(|t| in_range(*t))
        .ok_or_else(|| InstantError::OutOfRange(s.to_string()))
}

#[derive(Debug, thiserror::Error)]
pub enum InstantError {
    #[error(
        "{0}: out of range\n  hint: give an instant from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z (unix seconds 0 to 253402300799)"
    )]
    OutOfRange(String),
    #[error(
        "{0}: {1}\n  hint: write an RFC 3339 instant like 2026-12-01T21:30:00Z or 2026-12-01T22:30:00+01:00"
    )]
    Unreadable(String, String),
}

/// A std duration as a chrono one, saturating (never an error, never a panic).
pub fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// `t + d`, saturating at chrono's last instant.
pub fn after(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t.checked_add_signed(delta(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `t - d`, saturating at chrono's first instant.
pub fn before(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t.checked_sub_signed(delta(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_at_the_ends_instead_of_panicking() {
        let max = DateTime::<Utc>::MAX_UTC;
        let min = DateTime::<Utc>::MIN_UTC;
        assert_eq!(after(max, Duration::from_secs(1)), max);
        assert_eq!(after(latest(), Duration::MAX), max);
        assert_eq!(before(min, Duration::from_secs(1)), min);
        assert_eq!(before(earliest(), Duration::MAX), min);
        let t = earliest();
        assert_eq!(
            after(t, Duration::from_secs(90)),
            DateTime::from_timestamp(90, 0).unwrap()
        );
        assert_eq!(
            before(after(t, Duration::from_secs(90)), Duration::from_secs(90)),
            t
        );
    }

    #[test]
    fn the_accepted_range_leaves_room_for_every_setting() {
        assert_eq!(latest().to_rfc3339(), "9999-12-31T23:59:59+00:00");
        // The latest instant plus the longest setting is still an ordinary instant.
        let far = latest()
            .checked_add_signed(delta(MAX_DURATION))
            .expect("inside chrono's range");
        assert!(far < DateTime::<Utc>::MAX_UTC);
        assert!(in_range(latest()) && !in_range(after(latest(), Duration::from_secs(1))));
        assert!(!in_range(before(earliest(), Duration::from_secs(1))));
    }
}
