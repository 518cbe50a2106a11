//! The owner's week: whether an instant lies in an open period (the union of the windows, in
//! the policy's local time), when that period ends and when the next one starts.
//!
//! Membership is decided by converting UTC → local, which is never ambiguous. Only the
//! boundaries need local → UTC: a boundary in a DST gap moves to the first instant after the
//! gap, one in a fold yields both instants, and the first candidate where membership changes
//! wins. Nothing here reads the clock.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
use pilotd_core::config::policy::Window;
use pilotd_core::zone::Zone;

/// How far ahead boundaries are searched. A week plus a day covers every weekly pattern.
pub(crate) const HORIZON_DAYS: i64 = 8;

/// Where an instant stands in the owner's week.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Period {
    /// Inside an open period that ends at `ends` (None: it does not end within the horizon,
    /// e.g. a policy that is always open).
    Open { ends: Option<DateTime<Utc>> },
    /// Outside; the next open period starts at `opens` (None: never within the horizon).
    Closed { opens: Option<DateTime<Utc>> },
}

/// Is `t` inside any window? An instant outside `horizon`'s range is in none: its local time
/// may not exist in chrono (which would panic), and no real clock reads it.
pub(crate) fn is_open(windows: &[Window], tz: &Zone, t: DateTime<Utc>) -> bool {
    if !pilotd_core::horizon::in_range(t) {
        return false;
    }
    let local = t.with_timezone(tz);
    let day = local.weekday();
    let minute = (local.hour() * 60 + local.minute()) as u16;
    windows.iter().any(|w| {
        if w.from < w.to {
            w.days.contains(day) && w.from <= minute && minute < w.to
        } else {
            // Wraps past midnight: the evening belongs to the start day, the morning to the
            // day after it.
            (w.days.contains(day) && minute >= w.from)
                || (w.days.contains(day.pred()) && minute < w.to)
        }
    })
}

/// The period `now` is in, with its end or the next start.
pub(crate) fn period_at(windows: &[Window], tz: &Zone, now: DateTime<Utc>) -> Period {
    if !pilotd_core::horizon::in_range(now) {
        return Period::Closed { opens: None };
    }
    let open = is_open(windows, tz, now);
    let change = boundaries(windows, tz, now)
        .into_iter()
        .find(|b| is_open(windows, tz, *b) != open);
    if open {
        Period::Open { ends: change }
    } else {
        Period::Closed { opens: change }
    }
}

/// When the open period `now` is in began: the last instant at or before `now` where the
/// machine went from closed to open. None when `now` is closed, or open for the whole horizon
/// behind it (an always-open policy has no opening to spread starts after).
pub(crate) fn opened_at(
    windows: &[Window],
    tz: &Zone,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if !is_open(windows, tz, now) {
        return None;
    }
    let from = now.checked_sub_signed(Duration::days(HORIZON_DAYS))?;
    boundaries(windows, tz, from)
        .into_iter()
        .rev()
        .filter(|b| *b <= now)
        .find(|b| is_open(windows, tz, *b) && !is_open(windows, tz, *b - Duration::seconds(1)))
}

/// All instants after `now` (within the horizon) where some window starts or ends, sorted.
fn boundaries(windows: &[Window], tz: &Zone, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let today = now.with_timezone(tz).date_naive();
    let mut out = Vec::new();
    for offset in -1..=HORIZON_DAYS {
        let Some(date) = today.checked_add_signed(Duration::days(offset)) else {
            continue;
        };
        for w in windows {
            if !w.days.contains(date.weekday()) {
                continue;
            }
            let end_date = if w.to <= w.from {
                date.succ_opt()
            } else {
                Some(date)
            };
            let mut push = |d: Option<NaiveDate>, minute: u16| {
                if let Some(naive) = d.and_then(|d| at_minute(d, minute)) {
                    out.extend(to_utc(tz, naive).into_iter().filter(|t| *t > now));
                }
            };
            push(Some(date), w.from);
            push(end_date, w.to);
        }
    }
    out.sort();
    out.dedup();
    out
}

fn at_minute(date: NaiveDate, minute: u16) -> Option<NaiveDateTime> {
    // 24:00 is the next day's midnight.
    let (date, minute) = if minute >= 1440 {
        (date.succ_opt()?, minute - 1440)
    } else {
        (date, minute)
    };
    date.and_hms_opt(u32::from(minute / 60), u32::from(minute % 60), 0)
}

/// Every UTC instant a local wall-clock time stands for: one normally, two in a fold, and in
/// a gap the first instant after the gap. Never panics (no `LocalResult::unwrap`).
pub(crate) fn to_utc(tz: &Zone, naive: NaiveDateTime) -> Vec<DateTime<Utc>> {
    use chrono::LocalResult;
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => vec![t.with_timezone(&Utc)],
        LocalResult::Ambiguous(a, b) => vec![a.with_timezone(&Utc), b.with_timezone(&Utc)],
        LocalResult::None => {
            // Gaps are at most a few hours in real zones; walk forward by minutes.
            (1..=24 * 60)
                .filter_map(|m| naive.checked_add_signed(Duration::minutes(m)))
                .find_map(|n| tz.from_local_datetime(&n).earliest())
                .map(|t| vec![t.with_timezone(&Utc)])
                .unwrap_or_default()
        }
    }
}

/// What one half-hour cell shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    Compute,
    /// Computes, in quiet hours: with the lower CPU share they give (`[comfort]`).
    Quiet,
    /// Open, but within `evict_before_end` of the period's end: workers are leaving.
    Guard,
    Off,
}

impl Cell {
    pub(crate) fn glyph(self) -> char {
        match self {
            Cell::Compute => '█',
            Cell::Quiet => '▓',
            Cell::Guard => '▒',
            Cell::Off => '·',
        }
    }
}

/// The state of the half hour that starts at `t`: open or not in its middle, and a guard
/// band when any part of it falls within `evict_before_end` of the period's end (a 10-minute
/// band must still be visible in a 30-minute cell).
pub(crate) fn cell_at(p: &pilotd_core::config::Policy, t: DateTime<Utc>) -> Cell {
    use pilotd_core::horizon::{after, before};
    const HALF: std::time::Duration = std::time::Duration::from_secs(15 * 60);
    // Saturating: an instant at the edge of chrono's range must not panic (`horizon`).
    let mid = after(t, HALF);
    match period_at(&p.windows, &p.timezone, mid) {
        Period::Closed { .. } => Cell::Off,
        Period::Open { ends: Some(end) } if before(end, p.evict_before_end) < after(mid, HALF) => {
            Cell::Guard
        }
        Period::Open { .. }
            if p.comfort
                .quiet_hours
                .iter()
                .any(|q| is_open(std::slice::from_ref(&q.window), &p.timezone, mid)) =>
        {
            Cell::Quiet
        }
        Period::Open { .. } => Cell::Compute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pilotd_core::config::units::{parse_days, parse_time_of_day};
    fn rome() -> pilotd_core::zone::Zone {
        pilotd_core::zone::Zone::named("Europe/Rome").expect("tzdata has Europe/Rome")
    }

    fn w(days: &str, from: &str, to: &str) -> Window {
        Window {
            days: parse_days(days).unwrap(),
            from: parse_time_of_day(from).unwrap(),
            to: parse_time_of_day(to).unwrap(),
        }
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn wrapping_window_belongs_to_its_start_day() {
        let ws = [w("fri", "22:00", "06:00")];
        // Friday 23:00 and Saturday 05:59 local (UTC+1 in January) are open.
        assert!(is_open(&ws, &rome(), utc("2026-01-09T22:00:00Z")));
        assert!(is_open(&ws, &rome(), utc("2026-01-10T04:59:00Z")));
        // Saturday 06:00 local is closed, and Thursday night is not in the window.
        assert!(!is_open(&ws, &rome(), utc("2026-01-10T05:00:00Z")));
        assert!(!is_open(&ws, &rome(), utc("2026-01-08T22:00:00Z")));
    }

    #[test]
    fn union_of_touching_windows_is_one_period() {
        let ws = [
            w("mon-fri", "19:00", "07:30"),
            w("sat,sun", "00:00", "24:00"),
        ];
        // Friday 20:00 rome() (CET): the period runs through the weekend to Monday 00:00. The
        // weekday window's morning part belongs to the day it started, and Sunday is not in
        // mon-fri, so Monday 00:00-07:30 is closed (the shipped policy adds it explicitly).
        let p = period_at(&ws, &rome(), utc("2026-01-09T19:00:00Z"));
        assert_eq!(
            p,
            Period::Open {
                ends: Some(utc("2026-01-11T23:00:00Z"))
            }
        );
        let ws = [ws[0], ws[1], w("mon", "00:00", "07:30")];
        let p = period_at(&ws, &rome(), utc("2026-01-09T19:00:00Z"));
        assert_eq!(
            p,
            Period::Open {
                ends: Some(utc("2026-01-12T06:30:00Z"))
            }
        );
        // Monday 12:00: closed until 19:00.
        let p = period_at(&ws[..2], &rome(), utc("2026-01-12T11:00:00Z"));
        assert_eq!(
            p,
            Period::Closed {
                opens: Some(utc("2026-01-12T18:00:00Z"))
            }
        );
    }

    #[test]
    fn always_open_never_ends() {
        let ws = [w("daily", "00:00", "24:00")];
        assert_eq!(
            period_at(&ws, &rome(), utc("2026-03-29T01:30:00Z")),
            Period::Open { ends: None }
        );
    }

    #[test]
    fn never_open_never_opens() {
        assert_eq!(
            period_at(&[], &rome(), utc("2026-03-29T01:30:00Z")),
            Period::Closed { opens: None }
        );
    }

    #[test]
    fn spring_forward_in_rome() {
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        let ws = [w("sun", "01:00", "02:30")];
        // The window ends inside the gap, so the period ends at the jump.
        let p = period_at(&ws, &rome(), utc("2026-03-29T00:30:00Z"));
        assert_eq!(
            p,
            Period::Open {
                ends: Some(utc("2026-03-29T01:00:00Z"))
            }
        );
        // A window that starts inside the gap opens at the jump.
        let ws = [w("sun", "02:30", "04:00")];
        let p = period_at(&ws, &rome(), utc("2026-03-28T23:00:00Z"));
        assert_eq!(
            p,
            Period::Closed {
                opens: Some(utc("2026-03-29T01:00:00Z"))
            }
        );
        // ...and closes at 04:00 CEST = 02:00 UTC.
        let p = period_at(&ws, &rome(), utc("2026-03-29T01:30:00Z"));
        assert_eq!(
            p,
            Period::Open {
                ends: Some(utc("2026-03-29T02:00:00Z"))
            }
        );
        // A night window across the change is 1h shorter in real time.
        let ws = [w("sat", "22:00", "06:00")];
        let p = period_at(&ws, &rome(), utc("2026-03-28T21:00:00Z"));
        assert_eq!(
            p,
            Period::Open {
                ends: Some(utc("2026-03-29T04:00:00Z"))
            }
        );
    }

    #[test]
    fn fall_back_in_rome() {
        // 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00 UTC); 02:xx happens twice.
        let ws = [w("sat", "22:00", "06:00")];
        // 22:00 CEST Saturday = 20:00 UTC; ends 06:00 CET = 05:00 UTC: 9 real hours.
        let p = period_at(&ws, &rome(), utc("2026-10-24T20:00:00Z"));
        assert_eq!(
            p,
            Period::Open {
                ends: Some(utc("2026-10-25T05:00:00Z"))
            }
        );
        // A window ending at 02:30 ends at the first 02:30 (CEST, 00:30 UTC).
        let ws = [w("sun", "01:00", "02:30")];
        let p = period_at(&ws, &rome(), utc("2026-10-24T23:30:00Z"));
        assert_eq!(
            p,
            Period::Open {
                ends: Some(utc("2026-10-25T00:30:00Z"))
            }
        );
        // During the repeated hour the wall clock is inside the window again.
        assert!(is_open(&ws, &rome(), utc("2026-10-25T01:15:00Z")));
    }

    #[test]
    fn gap_mapping_never_panics() {
        let naive = NaiveDate::from_ymd_opt(2026, 3, 29)
            .unwrap()
            .and_hms_opt(2, 30, 0)
            .unwrap();
        assert_eq!(to_utc(&rome(), naive), vec![utc("2026-03-29T01:00:00Z")]);
        let naive = NaiveDate::from_ymd_opt(2026, 10, 25)
            .unwrap()
            .and_hms_opt(2, 30, 0)
            .unwrap();
        assert_eq!(
            to_utc(&rome(), naive),
            vec![utc("2026-10-25T00:30:00Z"), utc("2026-10-25T01:30:00Z")]
        );
    }
}
