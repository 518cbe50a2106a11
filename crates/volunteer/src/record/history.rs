//! Availability history ("a long-term statistic to tag a computer"): per hour of the week, in
//! the policy's local time, how many seconds pilotd watched the host and how many of those the
//! owner was away and the host free. Kept in the state dir, written atomically, survives
//! restarts; a corrupted file is set aside as a backup and counting starts over.
//!
//! The counters are pure data; only `load` and `save` touch the filesystem.

use crate::decide::policy::Limits;
use crate::settings::Settings;
use chrono::{DateTime, Datelike, Duration, Timelike, Utc};
use pilotd_core::service::state_file::{StateFileError, Store};
use pilotd_core::zone::Zone;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub(crate) const HOURS_PER_WEEK: usize = 168;
const FILE: &str = "history.json";

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub observed_s: u64,
    pub free_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub version: u32,
    /// Zone the hours of the week are counted in (a policy zone change restarts nothing: the
    /// buckets are simply read in the new zone).
    pub timezone: String,
    pub since: Option<DateTime<Utc>>,
    pub buckets: Vec<Bucket>,
}

impl History {
    pub(crate) fn new(tz: &Zone) -> History {
        History {
            version: 1,
            timezone: tz.name().to_string(),
            since: None,
            buckets: vec![Bucket::default(); HOURS_PER_WEEK],
        }
    }

    /// Hour of the week (Monday 00:00–00:59 local = 0) of an instant.
    pub(crate) fn hour_of_week(tz: &Zone, t: DateTime<Utc>) -> usize {
        let l = t.with_timezone(tz);
        l.weekday().num_days_from_monday() as usize * 24 + l.hour() as usize
    }

    /// Counts `elapsed` seconds ending at `now` as observed, and as free when `free`. The
    /// caller caps `elapsed` (a suspended machine was not observed).
    pub(crate) fn record(&mut self, tz: &Zone, now: DateTime<Utc>, elapsed: Duration, free: bool) {
        let secs = elapsed.num_seconds().max(0) as u64;
        if secs == 0 {
            return;
        }
        if self.buckets.len() != HOURS_PER_WEEK {
            self.buckets = vec![Bucket::default(); HOURS_PER_WEEK];
        }
        self.since.get_or_insert(now);
        let b = &mut self.buckets[Self::hour_of_week(tz, now)];
        b.observed_s = b.observed_s.saturating_add(secs);
        if free {
            b.free_s = b.free_s.saturating_add(secs);
        }
    }

    /// Fraction of observed time this hour of the week was free; None when never observed.
    pub(crate) fn free_fraction(&self, hour: usize) -> Option<f64> {
        let b = self.buckets.get(hour)?;
        (b.observed_s > 0).then(|| b.free_s as f64 / b.observed_s as f64)
    }

    /// Share of all observed time that was free.
    pub fn overall(&self) -> Option<f64> {
        let (o, f) = self
            .buckets
            .iter()
            .fold((0u64, 0u64), |(o, f), b| (o + b.observed_s, f + b.free_s));
        (o > 0).then(|| f as f64 / o as f64)
    }

    /// How long the host is likely to stay free from `now`: hours ahead while each hour of the
    /// week was free at least `threshold` of the time it was watched (hours never watched end
    /// the run: no evidence is not evidence of freedom). Used to advertise a machine's
    /// expected free stretch to the pool, and optionally to cap `die_at`.
    pub(crate) fn likely_free_for(
        &self,
        tz: &Zone,
        now: DateTime<Utc>,
        threshold: f64,
    ) -> Duration {
        let hours = (0..HOURS_PER_WEEK as u64).take_while(|hours| {
            let t = pilotd_core::horizon::after(now, std::time::Duration::from_secs(hours * 3600));
            self.free_fraction(Self::hour_of_week(tz, t))
                .is_some_and(|f| f >= threshold)
        });
        Duration::hours(hours.count() as i64)
    }
}

/// Whole seconds since the last cycle, for the counters that add time up cycle by cycle (the
/// history, the contribution): the remainder is carried, since cycles can come less than a
/// second apart, and a gap (suspend, stopped daemon) counts as at most two intervals. The
/// first cycle counts nothing: nothing says what the machine did before.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CycleClock {
    counted_until: Option<DateTime<Utc>>,
}

impl CycleClock {
    pub(crate) fn elapsed(
        &mut self,
        now: DateTime<Utc>,
        interval: std::time::Duration,
    ) -> Duration {
        let cap = Duration::from_std(interval.saturating_mul(2)).unwrap_or_default();
        let (elapsed, counted_until) = match self.counted_until {
            None => (Duration::zero(), now),
            Some(t) if now - t > cap => (cap, now),
            Some(t) => {
                let whole = Duration::seconds((now - t).num_seconds().max(0));
                (whole, t + whole)
            }
        };
        self.counted_until = Some(counted_until);
        elapsed
    }
}

/// Counts each cycle's time into the history (`CycleClock`).
#[derive(Debug, Clone, PartialEq)]
pub struct Learner {
    pub history: History,
    clock: CycleClock,
}

impl Learner {
    pub(crate) fn new(history: History) -> Learner {
        Learner {
            history,
            clock: CycleClock::default(),
        }
    }

    /// Counts the time up to `now` as watched, and as free when `free` (the owner away and the
    /// host free, whatever the schedule says: the history shows when this machine is really
    /// free, including hours the policy does not open).
    pub(crate) fn learn(
        &mut self,
        tz: &Zone,
        now: DateTime<Utc>,
        interval: std::time::Duration,
        free: bool,
    ) {
        let elapsed = self.clock.elapsed(now, interval);
        self.history.record(tz, now, elapsed, free);
    }
}

/// What the learned history says for a decision at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outlook {
    /// How long the host is usually free from now.
    pub likely_free: Duration,
    /// The site limits the policy decides with: `max_lifetime`, and the learned free stretch
    /// when the site asked to predict with it (`[history] predict_die_at`) and the history
    /// has evidence (at least an hour).
    pub limits: Limits,
}

impl Outlook {
    /// The daemon and `pilotd plan` both ask here, so they decide with the same limits.
    pub(crate) fn at(s: &Settings, h: &History, now: DateTime<Utc>) -> Outlook {
        let likely_free = h.likely_free_for(&s.policy.timezone, now, s.history.free_threshold);
        let predicted = s.history.predict_die_at && likely_free >= Duration::hours(1);
        Outlook {
            likely_free,
            limits: Limits {
                max_lifetime: s.max_lifetime,
                likely_free_until: predicted.then(|| {
                    pilotd_core::horizon::after(now, likely_free.to_std().unwrap_or_default())
                }),
                splay: s.fleet,
                started: None,
                data: None,
            },
        }
    }

    /// Whole hours of `likely_free`, as workers see it (`{free_hours}`).
    pub(crate) fn free_hours(&self) -> u64 {
        self.likely_free.num_hours().max(0) as u64
    }
}

/// What `load` found.
#[derive(Debug)]
pub struct Loaded {
    pub history: History,
    /// Set when the file was unusable and set aside: say so in the log.
    pub warning: Option<String>,
}

pub(crate) fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

fn store(state_dir: &Path) -> Store<History> {
    Store::new(path(state_dir), "availability history").checked(|h| {
        (h.version == 1 && h.buckets.len() == HOURS_PER_WEEK)
            .then_some(())
            .ok_or_else(|| "unexpected version or size".to_string())
    })
}

/// Reads the history from the state dir (for the daemon). Missing → empty. Unreadable or
/// corrupted → empty, with the bad file renamed to `history.json.corrupt` so nothing is lost.
pub(crate) fn load(state_dir: &Path, tz: &Zone) -> Loaded {
    let (history, warning) = store(state_dir).load_or(|| History::new(tz));
    Loaded { history, warning }
}

/// Reads the history without changing anything (for `schedule` and `status`).
pub fn peek(state_dir: &Path, tz: &Zone) -> Loaded {
    let (history, warning) = store(state_dir).peek_or(|| History::new(tz));
    Loaded { history, warning }
}

/// Writes the history atomically (temp file, fsync, rename): a crash leaves the old or the new
/// file, never half of one.
pub(crate) fn save(state_dir: &Path, h: &History) -> Result<(), StateFileError> {
    store(state_dir).save(h)
}

/// One line per day for `pilotd schedule`: each hour's free share as a shade.
pub fn render(h: &History, tz: &Zone) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let Some(overall) = h.overall() else {
        return "learned availability: nothing observed yet\n".into();
    };
    let _ = writeln!(
        out,
        "learned availability since {} (free {:.0}% of the watched time; █ ≥90% ▓ ≥60% ▒ ≥30% ░ >0% · never, blank = not watched):",
        h.since
            .map(|s| s.with_timezone(tz).format("%Y-%m-%d").to_string())
            .unwrap_or_default(),
        overall * 100.0
    );
    out.push_str("       00    03    06    09    12    15    18    21    24\n");
    for (d, name) in ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        .iter()
        .enumerate()
    {
        let row: String = (0..24)
            .map(|hr| match h.free_fraction(d * 24 + hr) {
                None => "  ",
                Some(f) if f >= 0.9 => "██",
                Some(f) if f >= 0.6 => "▓▓",
                Some(f) if f >= 0.3 => "▒▒",
                Some(f) if f > 0.0 => "░░",
                Some(_) => "··",
            })
            .collect();
        let _ = writeln!(out, "{name}    {row}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    fn rome() -> pilotd_core::zone::Zone {
        pilotd_core::zone::Zone::named("Europe/Rome").expect("tzdata has Europe/Rome")
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn hours_of_the_week_are_local() {
        // Monday 2026-01-12 00:30 rome() = Sunday 23:30 UTC.
        assert_eq!(
            History::hour_of_week(&rome(), utc("2026-01-11T23:30:00Z")),
            0
        );
        assert_eq!(
            History::hour_of_week(&rome(), utc("2026-01-18T22:59:00Z")),
            167
        );
    }

    #[test]
    fn counts_and_predicts() {
        let mut h = History::new(&rome());
        // Two weeks: free every night 20:00-06:00 local, busy otherwise; 30 s cycles.
        let start = utc("2026-01-11T23:00:00Z"); // Monday 00:00 rome()
        let mut t = start;
        while t < start + Duration::weeks(2) {
            let l = t.with_timezone(&rome()).hour();
            h.record(&rome(), t, Duration::seconds(30), !(6..20).contains(&l));
            t += Duration::seconds(30);
        }
        assert!((h.overall().unwrap() - 10.0 / 24.0).abs() < 0.01);
        assert_eq!(h.free_fraction(2), Some(1.0));
        assert_eq!(h.free_fraction(12), Some(0.0));
        // Tuesday 21:00 rome(): free until Wednesday 06:00, 9 hours.
        let now = utc("2026-01-27T20:00:00Z");
        assert_eq!(h.likely_free_for(&rome(), now, 0.8), Duration::hours(9));
        assert_eq!(
            h.likely_free_for(&rome(), utc("2026-01-27T11:00:00Z"), 0.8),
            Duration::zero()
        );
        let r = render(&h, &rome());
        assert!(r.contains("free 42%"), "{r}");
        assert!(r.lines().any(|l| l.starts_with("Mon    ██████")), "{r}");
    }

    #[test]
    fn survives_restart_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::new(&rome());
        h.record(
            &rome(),
            utc("2026-01-12T10:00:00Z"),
            Duration::seconds(30),
            true,
        );
        save(dir.path(), &h).unwrap();
        let l = load(dir.path(), &rome());
        assert_eq!(l.history, h);
        assert!(l.warning.is_none());

        // Truncated file: start over, keep a backup, say so.
        let bytes = std::fs::read(path(dir.path())).unwrap();
        std::fs::write(path(dir.path()), &bytes[..bytes.len() / 2]).unwrap();
        let l = load(dir.path(), &rome());
        assert_eq!(l.history, History::new(&rome()));
        let w = l.warning.unwrap();
        assert!(
            w.contains("corrupted") && w.contains("history.json.corrupt"),
            "{w}"
        );
        assert_eq!(
            std::fs::read(dir.path().join("history.json.corrupt")).unwrap(),
            &bytes[..bytes.len() / 2]
        );

        // Valid JSON of the wrong shape is corrupted too.
        std::fs::write(
            path(dir.path()),
            br#"{"version":1,"timezone":"UTC","since":null,"buckets":[]}"#,
        )
        .unwrap();
        assert!(
            load(dir.path(), &rome())
                .warning
                .unwrap()
                .contains("unexpected")
        );
        // peek reports but never moves a file.
        std::fs::write(path(dir.path()), b"{").unwrap();
        assert!(peek(dir.path(), &rome()).warning.is_some());
        assert!(path(dir.path()).exists());
        // Missing: empty, no warning.
        let empty = tempfile::tempdir().unwrap();
        assert!(load(empty.path(), &rome()).warning.is_none());
    }
}
