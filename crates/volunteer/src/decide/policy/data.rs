//! The owner's data cap (`[share] data_per_day`, `data_per_month`), pure: what pilotd's work
//! used in the day and the calendar month of the policy's zone (the contribution ledger's
//! count: the workers' bytes received and sent, the image pulls) against the caps.
//!
//! - At a cap: no new worker and no pull, and the running workers are stopped gracefully;
//!   nothing starts again until the period ends (local midnight, or the first of the next
//!   month, in the policy's zone: a day of a change of time is 23 or 25 hours long).
//! - Before it: no new worker when what is left is less than `MARGIN_PARTS`ths of the cap,
//!   and no pull when what is left cannot hold the image (its last pull's size) and that
//!   margin. The margin is a new worker's first traffic (its pilot reaching the pool) and
//!   what workers move between two cycles: the count is the engine's, read once a cycle, so
//!   the cap can only be seen crossed after the fact, and a worker started at the last
//!   byte would be stopped again at once.

use super::{Cause, Findings, calendar};
use chrono::{DateTime, Datelike, NaiveDate, Utc};
use pilotd_core::config::units::format_size;
use pilotd_core::config::{Evict, Policy};
use pilotd_core::zone::Zone;

/// What the contribution ledger counted for the caps at the decision's instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataUsed {
    /// Bytes used in the day of `now` in the policy's zone.
    pub today: u64,
    /// Bytes used in its calendar month.
    pub this_month: u64,
    /// What the last pull of the worker image downloaded (0: none counted yet): what the
    /// next pull is expected to cost.
    pub last_pull: u64,
}

/// The margin is the cap divided by this: 5%.
pub(crate) const MARGIN_PARTS: u64 = 20;

/// A cap's period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Period {
    Day,
    Month,
}

impl Period {
    fn name(self) -> &'static str {
        match self {
            Period::Day => "day's",
            Period::Month => "month's",
        }
    }
}

/// When the period holding `now` ends in `tz`: the next local midnight (its first instant
/// when a change of time skips it), or that of the first of the next month.
pub(crate) fn period_end(tz: &Zone, now: DateTime<Utc>, period: Period) -> DateTime<Utc> {
    let today = now.with_timezone(tz).date_naive();
    let next: Option<NaiveDate> = match period {
        Period::Day => today.succ_opt(),
        Period::Month => {
            let (y, m) = if today.month() == 12 {
                (today.year() + 1, 1)
            } else {
                (today.year(), today.month() + 1)
            };
            NaiveDate::from_ymd_opt(y, m, 1)
        }
    };
    next.and_then(|d| d.and_hms_opt(0, 0, 0))
        .and_then(|midnight| calendar::to_utc(tz, midnight).first().copied())
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// What the caps allow now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Room {
    /// A new worker may start.
    pub(super) workers: bool,
    /// A pull of the worker image fits.
    pub(super) pull: bool,
    /// Why a pull does not fit while workers may still start: said after the reasons that
    /// decide whether workers run (`decide` adds it last), so a machine computing near its
    /// cap leads with "host free", yet `plan` and `status` say why no new image comes.
    pub(super) pull_held: Vec<String>,
}

/// The caps of `p` against `used` (`None`: not known, as for a one-shot `plan` from a
/// snapshot: no cap is judged). At or near a cap it says so in `f` (at a cap asking the
/// running workers to stop gracefully) and names the period's end as the instant the
/// decision changes; a pull it refuses before that is explained in `Room::pull_held`.
pub(super) fn cap(
    p: &Policy,
    used: Option<DataUsed>,
    now: DateTime<Utc>,
    f: &mut Findings,
) -> Room {
    let mut room = Room {
        workers: true,
        pull: true,
        pull_held: Vec::new(),
    };
    let Some(used) = used else {
        return room;
    };
    let caps = [
        (Period::Day, p.share.data_per_day, used.today),
        (Period::Month, p.share.data_per_month, used.this_month),
    ];
    for (period, cap, spent) in caps {
        let Some(cap) = cap else { continue };
        let left = cap.saturating_sub(spent);
        let margin = cap / MARGIN_PARTS;
        let end = period_end(&p.timezone, now, period);
        let figures = format!("{} of {}", format_size(spent), format_size(cap));
        if spent >= cap {
            f.next.push(end);
            f.block(
                Evict::Graceful,
                Cause::DataCap,
                format!(
                    "the {} data cap is reached: {figures}; workers are stopped until {}",
                    period.name(),
                    super::hm(end, p)
                ),
            );
            (room.workers, room.pull) = (false, false);
        } else if left < margin {
            f.next.push(end);
            f.block(
                Evict::None,
                Cause::DataCap,
                format!(
                    "the {} data cap is near: {figures}; no new worker until {}",
                    period.name(),
                    super::hm(end, p)
                ),
            );
            (room.workers, room.pull) = (false, false);
        } else if left < used.last_pull.saturating_add(margin) {
            // Workers on the image here may start; a new one would not fit.
            room.pull = false;
            f.next.push(end);
            room.pull_held.push(format!(
                "the {} data cap leaves {}: not enough for a new worker image ({} last pulled) and a {}% margin ({}); no pull until {}",
                period.name(),
                format_size(left),
                format_size(used.last_pull),
                100 / MARGIN_PARTS,
                format_size(margin),
                super::hm(end, p)
            ));
        }
    }
    room
}
