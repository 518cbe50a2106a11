//! The owner-presence timeline: when this machine was watched, and what the policy reads of
//! each stretch — whether someone was logged in (and since when idle or locked, never who),
//! the owner's CPU, the battery, whether an exclusive program ran (never which), a snooze.
//! `history` keeps only per-hour counters, which cannot be replayed through the decision code;
//! this keeps the stretches themselves, so `projection` can replay the recorded weeks through
//! `policy::decide` with any policy.
//!
//! Only "when": no user name, no process name, no terminal. Run-length encoded (a stretch is
//! one entry as long as nothing the policy reads changes), the last `KEPT` of it. Kept in the
//! state dir (`timeline.json`), written atomically with the history (every 15 minutes and at
//! shutdown); a corrupted file is set aside as `timeline.json.corrupt` and recording starts
//! over. The data is pure (`Recorder::record` takes `now`); only `load` and `save` touch the
//! filesystem.

use crate::config::Policy;
use crate::service::state_file::{read_json_or, write_atomically};
use crate::volunteer::snapshot::{HostSnapshot, Session, Sessions};
use chrono::{DateTime, Duration, DurationRound, Utc};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const FILE: &str = "timeline.json";
/// How much is kept: five weeks, enough for a month of replay.
pub const KEPT: Duration = Duration::days(35);
/// Owner CPU is kept in steps of this many percent: finer noise would split every stretch.
const CPU_STEP_PCT: f64 = 5.0;

#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error("cannot write the presence timeline {}: {source}\n  hint: check that the state dir is writable by pilotd", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Who was at the machine, as the policy's session rules need it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Presence {
    /// Nobody counted logged in.
    #[default]
    Nobody,
    /// pilotd could not tell (the policy then assumes the owner is there).
    Unknown,
    /// Someone logged in. `idle_since`: since when the most recently used session has had no
    /// use (absent: in use within the last minute, or no source can tell); `locked_since`:
    /// since when every session has been locked (absent: one is not).
    Session {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_since: Option<DateTime<Utc>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        locked_since: Option<DateTime<Utc>>,
    },
}

/// What the policy reads of one stretch of time, besides the clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    #[serde(default)]
    pub presence: Presence,
    /// The owner's CPU (the machine's less pilotd's workers'), whole percent in 5 % steps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub owner_cpu_pct: u8,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_battery: bool,
    /// A program the policy lists as exclusive was running (not which).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
    /// The owner had snoozed pilotd (or the snooze could not be read).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub snoozed: bool,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl Seen {
    /// What `policy::decide` would read of `h` under `p`, reduced to "when": the sessions
    /// `p` counts (its `ignore_users` and system accounts left out) folded into one. The fold
    /// leans toward the owner: idle only when every session is, locked only when every one is.
    pub fn of(h: &HostSnapshot, p: &Policy, now: DateTime<Utc>) -> Seen {
        let presence = match &h.sessions {
            Sessions::Unknown(_) => Presence::Unknown,
            Sessions::Known(list) => {
                let counted: Vec<_> = list
                    .iter()
                    .filter(|s| !p.ignore_users.contains(&s.user))
                    .filter(|s| s.uid.is_none_or(|uid| uid >= p.system_uid_below))
                    .collect();
                if counted.is_empty() {
                    Presence::Nobody
                } else {
                    // A session is idle as long as its longest-idle signal says (any one
                    // signal makes it away: `policy::away`); under a minute is "in use".
                    let idle_since = |s: &&Session| {
                        let input = if s.local { h.input_idle_s } else { None };
                        let idle = s.idle_s.max(input).filter(|i| *i >= 60)?;
                        let at = crate::horizon::before(now, std::time::Duration::from_secs(idle));
                        // Rounded up to the minute: a shade less idle, never more (the
                        // owner's side), and steady while the idle time grows.
                        let minute = at.duration_trunc(Duration::minutes(1)).unwrap_or(at);
                        Some(if minute < at {
                            minute + Duration::minutes(1)
                        } else {
                            minute
                        })
                    };
                    let idle: Option<Vec<_>> = counted.iter().map(idle_since).collect();
                    let locked: Option<Vec<_>> = counted.iter().map(|s| s.locked_since).collect();
                    Presence::Session {
                        idle_since: idle.and_then(|v| v.into_iter().max()),
                        locked_since: locked.and_then(|v| v.into_iter().max()),
                    }
                }
            }
        };
        let pct = (h.owner_cpu() * 100.0 / CPU_STEP_PCT).round() * CPU_STEP_PCT;
        Seen {
            presence,
            owner_cpu_pct: pct.clamp(0.0, 100.0) as u8,
            on_battery: h.on_battery,
            exclusive: !h.exclusive_running.is_empty(),
            snoozed: h.snooze_unreadable.is_some() || h.snoozed_until.is_some_and(|u| u > now),
        }
    }
}

/// A stretch `(from, until]` during which the machine was watched and `seen` held.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    #[serde(flatten)]
    pub seen: Seen,
}

/// The file: stretches oldest first, not overlapping; a gap between two is time nobody
/// watched (the machine off or asleep, pilotd stopped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub version: u32,
    pub runs: Vec<Run>,
}

impl Default for Timeline {
    fn default() -> Timeline {
        Timeline {
            version: 1,
            runs: Vec::new(),
        }
    }
}

impl Timeline {
    /// Adds `(from, until]` as `seen`: the last stretch grows when it ends at `from` and saw
    /// the same. Anything older than `KEPT` before `until` goes.
    pub fn push(&mut self, from: DateTime<Utc>, until: DateTime<Utc>, seen: Seen) {
        if until <= from {
            return;
        }
        match self.runs.last_mut() {
            Some(last) if last.until == from && last.seen == seen => last.until = until,
            // A clock set back: what is recorded stays in order.
            Some(last) if last.until > from => return,
            _ => self.runs.push(Run { from, until, seen }),
        }
        let cutoff = until - KEPT;
        self.runs.retain(|r| r.until > cutoff);
        if let Some(first) = self.runs.first_mut() {
            first.from = first.from.max(cutoff);
        }
    }

    /// Time watched in all.
    pub fn watched(&self) -> Duration {
        self.runs
            .iter()
            .fold(Duration::zero(), |d, r| d + (r.until - r.from))
    }

    /// Stretches in order, not overlapping, none empty: what `projection` relies on.
    fn check(&self) -> Result<(), String> {
        if self.version != 1 {
            return Err(format!("unexpected version {}", self.version));
        }
        let ordered = self.runs.iter().all(|r| r.from < r.until)
            && self.runs.windows(2).all(|w| w[0].until <= w[1].from);
        ordered
            .then_some(())
            .ok_or_else(|| "stretches out of order".into())
    }
}

/// Records each cycle's observation: the time since the last cycle, as the cycle saw it. A
/// gap of more than two intervals (a suspend, a stopped daemon) is left unwatched, and so is
/// the cycle of a machine about to sleep.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recorder {
    pub timeline: Timeline,
    last: Option<DateTime<Utc>>,
}

impl Recorder {
    pub fn new(timeline: Timeline) -> Recorder {
        Recorder {
            timeline,
            last: None,
        }
    }

    pub fn record(
        &mut self,
        now: DateTime<Utc>,
        interval: std::time::Duration,
        h: &HostSnapshot,
        p: &Policy,
    ) {
        let cap = crate::horizon::delta(interval.saturating_mul(2));
        let from = self.last.filter(|l| *l < now && now - *l <= cap);
        self.last = (!h.sleeping).then_some(now);
        if let (Some(from), false) = (from, h.sleeping) {
            self.timeline.push(from, now, Seen::of(h, p, now));
        }
    }
}

/// What `load` found.
#[derive(Debug)]
pub struct Loaded {
    pub timeline: Timeline,
    /// Set when the file was unusable (and set aside): say so in the log.
    pub warning: Option<String>,
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// Reads the timeline (for the daemon). Missing → empty. Unreadable or corrupted → empty,
/// the bad file renamed to `timeline.json.corrupt`.
pub fn load(state_dir: &Path) -> Loaded {
    read(state_dir, true)
}

/// Reads the timeline without changing anything (for `schedule` and `init`).
pub fn peek(state_dir: &Path) -> Loaded {
    read(state_dir, false)
}

fn read(state_dir: &Path, set_aside: bool) -> Loaded {
    let (timeline, warning) = read_json_or(
        &path(state_dir),
        Timeline::check,
        set_aside,
        Timeline::default,
        ("presence timeline", "recording presence from scratch"),
    );
    Loaded { timeline, warning }
}

/// Writes the timeline atomically: a crash leaves the old or the new file.
pub fn save(state_dir: &Path, t: &Timeline) -> Result<(), TimelineError> {
    let p = path(state_dir);
    let err = |source| TimelineError::Write {
        path: p.clone(),
        source,
    };
    let body = serde_json::to_vec(t).map_err(|e| err(std::io::Error::other(e)))?;
    write_atomically(&p, &body).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn policy() -> Policy {
        Policy::defaults(crate::zone::Zone::utc())
    }

    #[test]
    fn stretches_are_run_length_encoded_and_say_when_only() {
        let p = policy();
        let mut r = Recorder::default();
        let t0 = utc("2027-01-04T09:00:00Z");
        let step = std::time::Duration::from_secs(30);
        for i in 0..=20 {
            let t = t0 + Duration::seconds(30 * i);
            // Typing for five minutes, then away from the keyboard (idle grows).
            let idle = if i < 10 { 5 } else { 30 * (i as u64 - 10) + 5 };
            let h = HostSnapshot::test(t)
                .with_desk_session("alice", 4242, None, None)
                .with_input_idle(Some(idle));
            r.record(t, step, &h, &p);
        }
        let runs = &r.timeline.runs;
        // In use, then idle since one constant minute (the idle time grows, its start not).
        assert!(runs.len() <= 3, "{runs:?}");
        assert_eq!(
            runs[0].seen.presence,
            Presence::Session {
                idle_since: None,
                locked_since: None
            }
        );
        let last = runs.last().unwrap();
        assert_eq!(
            last.seen.presence,
            Presence::Session {
                idle_since: Some(utc("2027-01-04T09:05:00Z")),
                locked_since: None
            },
            "{runs:?}"
        );
        assert_eq!(r.timeline.watched(), Duration::seconds(600));
        let json = serde_json::to_string(&r.timeline).unwrap();
        assert!(!json.contains("alice") && !json.contains("pts"), "{json}");
    }

    #[test]
    fn sessions_the_policy_ignores_are_nobody_and_unknown_stays_unknown() {
        let mut p = policy();
        p.ignore_users = vec!["backup".into()];
        let t = utc("2027-01-04T09:00:00Z");
        let h = HostSnapshot::test(t).with_session("backup", 4242, Some(0));
        assert_eq!(Seen::of(&h, &p, t).presence, Presence::Nobody);
        let h = HostSnapshot::test(t).with_sessions_unknown("utmp unreadable");
        assert_eq!(Seen::of(&h, &p, t).presence, Presence::Unknown);
        // Owner CPU in 5 % steps; the snooze and the battery as flags.
        let h = HostSnapshot::test(t)
            .with_cpu(0.58, 0.2)
            .with_battery(true)
            .with_snooze(Some(t + Duration::hours(1)));
        let seen = Seen::of(&h, &p, t);
        assert_eq!(
            (seen.owner_cpu_pct, seen.on_battery, seen.snoozed),
            (40, true, true)
        );
    }

    #[test]
    fn a_gap_is_not_watched_and_old_stretches_go() {
        let p = policy();
        let mut r = Recorder::default();
        let step = std::time::Duration::from_secs(60);
        let t0 = utc("2027-01-04T00:00:00Z");
        let h = |t| HostSnapshot::test(t);
        r.record(t0, step, &h(t0), &p);
        r.record(t0 + Duration::minutes(1), step, &h(t0), &p);
        // Three minutes later: a suspend, not watched.
        r.record(t0 + Duration::minutes(4), step, &h(t0), &p);
        r.record(t0 + Duration::minutes(5), step, &h(t0), &p);
        assert_eq!(r.timeline.runs.len(), 2);
        assert_eq!(r.timeline.watched(), Duration::minutes(2));
        // Six weeks on, only the last `KEPT` is left.
        let later = t0 + Duration::weeks(6);
        r.timeline
            .push(later - Duration::days(40), later, Seen::default());
        assert_eq!(r.timeline.runs.len(), 1);
        assert_eq!(r.timeline.watched(), KEPT);
    }

    #[test]
    fn survives_restart_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Timeline::default();
        t.push(
            utc("2027-01-04T00:00:00Z"),
            utc("2027-01-04T01:00:00Z"),
            Seen::default(),
        );
        save(dir.path(), &t).unwrap();
        let l = load(dir.path());
        assert_eq!(l.timeline, t);
        assert!(l.warning.is_none());
        // Out of order: set aside, said.
        std::fs::write(
            path(dir.path()),
            br#"{"version":1,"runs":[{"from":"2027-01-04T02:00:00Z","until":"2027-01-04T01:00:00Z"}]}"#,
        )
        .unwrap();
        assert!(peek(dir.path()).warning.unwrap().contains("out of order"));
        assert!(path(dir.path()).exists(), "peek moves nothing");
        let l = load(dir.path());
        assert_eq!(l.timeline, Timeline::default());
        assert!(l.warning.unwrap().contains("timeline.json.corrupt"));
        assert!(dir.path().join("timeline.json.corrupt").exists());
        assert!(load(tempfile::tempdir().unwrap().path()).warning.is_none());
    }
}
