//! The owner-presence timeline: when this machine was watched, and what the policy reads of
//! each stretch — whether someone was logged in (and since when idle or locked, never who),
//! the owner's CPU, the battery, whether an exclusive program ran (never which), a snooze.
//! `history` keeps only per-hour counters, which cannot be replayed through the decision code;
//! this keeps the stretches themselves, so `projection` can replay the recorded weeks through
//! `policy::decide` with any policy.
//!
//! Only "when": no user name, no process name, no terminal. Run-length encoded (a stretch is
//! one entry as long as nothing the policy reads changes; a change of the owner's CPU alone
//! joins a stretch younger than `CPU_FOLD`), the last `KEPT` of it. Kept in the state dir
//! (`timeline.json`), written atomically every hour and at shutdown (`daemon::record`); a
//! corrupted file is set aside as `timeline.json.corrupt` and recording starts over. The
//! data is pure (`Recorder::record` takes `now`); only `load` and `save` touch the filesystem.

use crate::snapshot::{HostSnapshot, Session, Sessions};
use chrono::{DateTime, Duration, DurationRound, Utc};
use pilotd_core::config::Policy;
use pilotd_core::service::state_file::{StateFileError, Store};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const FILE: &str = "timeline.json";
/// How much is kept: five weeks, enough for a month of replay.
pub(crate) const KEPT: Duration = Duration::days(35);
/// Owner CPU is kept in steps of this many percent: finer noise would split every stretch.
const CPU_STEP_PCT: f64 = 5.0;
/// A stretch that differs from the open one only by one step of the owner's CPU joins it
/// while the open one is younger than this, at their time-weighted mean. CPU that flickers
/// across a step (a desktop's idle noise, or the meter's own beside a busy worker) would
/// otherwise start a stretch every cycle. A larger change always starts one: it is what
/// crosses a policy's `max_owner_cpu`, and averaging it away moved a noisy week's projection
/// by 8 % (`projection::tests::cpu_folded_into_stretches_projects_as_every_cycle_would`; one
/// step only: under 3 %).
pub(crate) const CPU_FOLD: Duration = Duration::minutes(2);
/// At most this many stretches are kept (and briefly a tenth more, trimmed in one go): a
/// machine whose owner's CPU swings by more than a step every cycle, around the clock, keeps
/// the last 10 days of it at the default 30 s interval rather than 35, and its file stays
/// under 3 MB.
pub(crate) const MAX_RUNS: usize = 30_000;

/// Who was at the machine, as the policy's session rules need it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Presence {
    /// Nobody counted logged in.
    #[default]
    Nobody,
    /// pilotd could not tell (the policy then assumes the owner is there).
    Unknown,
    /// Someone logged in. `idle_since`: since when the most recently used session has had no
    /// use (absent: in use within the last minute, or no source can tell); `locked_since`:
    /// since when every session has been locked (absent: one is not).
    Session {
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            with = "chrono::serde::ts_milliseconds_option"
        )]
        idle_since: Option<DateTime<Utc>>,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            with = "chrono::serde::ts_milliseconds_option"
        )]
        locked_since: Option<DateTime<Utc>>,
    },
}

/// What the policy reads of one stretch of time, besides the clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    #[serde(default, skip_serializing_if = "Presence::is_nobody")]
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

impl Presence {
    fn is_nobody(&self) -> bool {
        *self == Presence::Nobody
    }
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl Seen {
    /// What `policy::decide` would read of `h` under `p`, reduced to "when": the sessions
    /// `p` counts (its `ignore_users` and system accounts left out) folded into one. The fold
    /// leans toward the owner: idle only when every session is, locked only when every one is.
    pub(crate) fn of(h: &HostSnapshot, p: &Policy, now: DateTime<Utc>) -> Seen {
        let presence = match &h.sessions {
            Sessions::Unknown(_) => Presence::Unknown,
            // A film, a call or an idle inhibitor: in use, whatever the keyboard says.
            Sessions::Known(_) if crate::decide::policy::someone_using(p, h, now) => {
                Presence::Session {
                    idle_since: None,
                    locked_since: None,
                }
            }
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
                        let at =
                            pilotd_core::horizon::before(now, std::time::Duration::from_secs(idle));
                        // Rounded up to the minute: a shade less idle, never more (the
                        // owner's side), and steady while the idle time grows.
                        Some(at.duration_round_up(Duration::minutes(1)).unwrap_or(at))
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
        Seen {
            presence,
            owner_cpu_pct: cpu_step(h.owner_cpu() * 100.0),
            on_battery: h.on_battery,
            exclusive: !h.exclusive_running.is_empty(),
            snoozed: h.snooze_unreadable.is_some() || h.snoozed_until.is_some_and(|u| u > now),
        }
    }
}

/// Whole percent, in `CPU_STEP_PCT` steps.
fn cpu_step(pct: f64) -> u8 {
    ((pct / CPU_STEP_PCT).round() * CPU_STEP_PCT).clamp(0.0, 100.0) as u8
}

impl Seen {
    /// The same, but for the owner's CPU (what `CPU_FOLD` may join).
    fn but_cpu(&self) -> Seen {
        Seen {
            owner_cpu_pct: 0,
            ..*self
        }
    }
}

/// A stretch `(from, until]` during which the machine was watched and `seen` held. Instants
/// are kept as Unix milliseconds, and what is usual (nobody there, no CPU) is left out: a
/// stretch is then 60 to 90 bytes of the file, not 110 to 170.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Run {
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub from: DateTime<Utc>,
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub until: DateTime<Utc>,
    #[serde(flatten)]
    pub seen: Seen,
}

impl Run {
    fn seconds(&self) -> f64 {
        (self.until - self.from).num_milliseconds() as f64 / 1000.0
    }
}

/// The file: stretches oldest first, not overlapping; a gap between two is time nobody
/// watched (the machine off or asleep, pilotd stopped).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timeline {
    pub version: u32,
    pub runs: Vec<Run>,
    /// The last stretch's owner CPU in percent-seconds, exact, while it may still be joined
    /// (`CPU_FOLD`); unknown after a load, when the stored step stands for it.
    #[serde(skip)]
    open_cpu: Option<f64>,
}

impl Default for Timeline {
    fn default() -> Timeline {
        Timeline {
            version: 1,
            runs: Vec::new(),
            open_cpu: None,
        }
    }
}

/// Two timelines are the same when they hold the same stretches: `open_cpu` is working state.
impl PartialEq for Timeline {
    fn eq(&self, other: &Timeline) -> bool {
        self.version == other.version && self.runs == other.runs
    }
}

impl Timeline {
    /// Adds `(from, until]` as `seen`: the last stretch grows when it ends at `from` and saw
    /// the same, or an owner CPU one step off while it is younger than `CPU_FOLD`. Anything
    /// older than `KEPT` before `until` goes, and the oldest beyond `MAX_RUNS`.
    pub(crate) fn push(&mut self, from: DateTime<Utc>, until: DateTime<Utc>, seen: Seen) {
        self.push_folding(from, until, seen, CPU_FOLD);
    }

    /// `push` without `CPU_FOLD`: every change of the owner's CPU a stretch of its own (what
    /// the tests hold the joined timeline against).
    #[cfg(test)]
    pub(crate) fn push_unfolded(&mut self, from: DateTime<Utc>, until: DateTime<Utc>, seen: Seen) {
        self.push_folding(from, until, seen, Duration::zero());
    }

    /// `push`, joining one-step CPU changes into a stretch younger than `fold` (zero: none).
    fn push_folding(
        &mut self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        seen: Seen,
        fold: Duration,
    ) {
        if until <= from {
            return;
        }
        let added = Run { from, until, seen };
        let cpu = f64::from(seen.owner_cpu_pct) * added.seconds();
        match self.runs.last_mut() {
            Some(last) if last.until == from && last.seen.but_cpu() == seen.but_cpu() => {
                let same = last.seen == seen;
                let near =
                    last.seen.owner_cpu_pct.abs_diff(seen.owner_cpu_pct) <= CPU_STEP_PCT as u8;
                if same || (near && last.until - last.from < fold) {
                    let open = self
                        .open_cpu
                        .unwrap_or_else(|| f64::from(last.seen.owner_cpu_pct) * last.seconds());
                    last.until = until;
                    last.seen.owner_cpu_pct = cpu_step((open + cpu) / last.seconds());
                    self.open_cpu = Some(open + cpu);
                    self.join_back();
                } else {
                    self.runs.push(added);
                    self.open_cpu = Some(cpu);
                }
            }
            // A clock set back: what is recorded stays in order.
            Some(last) if last.until > from => return,
            _ => {
                self.runs.push(added);
                self.open_cpu = Some(cpu);
            }
        }
        let cutoff = until - KEPT;
        // Oldest first: what has aged out is a prefix (and usually nothing).
        let mut aged = self.runs.partition_point(|r| r.until <= cutoff);
        if self.runs.len() - aged > MAX_RUNS + MAX_RUNS / 10 {
            aged = self.runs.len() - MAX_RUNS;
        }
        self.runs.drain(..aged);
        if let Some(first) = self.runs.first_mut()
            && first.from < cutoff
        {
            first.from = cutoff;
            // The open stretch lost its start: its exact CPU no longer fits it.
            if self.runs.len() == 1 {
                self.open_cpu = None;
            }
        }
    }

    /// The open stretch, once its mean has come back to what the stretch before it saw,
    /// becomes part of that one: a flicker leaves no trace.
    fn join_back(&mut self) {
        let n = self.runs.len();
        if n < 2 {
            return;
        }
        let (prev, last) = (self.runs[n - 2], self.runs[n - 1]);
        if prev.until == last.from && prev.seen == last.seen {
            self.runs.pop();
            self.runs[n - 2].until = last.until;
            self.open_cpu = None;
        }
    }

    /// Time watched in all.
    pub(crate) fn watched(&self) -> Duration {
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
    pub(crate) fn new(timeline: Timeline) -> Recorder {
        Recorder {
            timeline,
            last: None,
        }
    }

    pub(crate) fn record(
        &mut self,
        now: DateTime<Utc>,
        interval: std::time::Duration,
        h: &HostSnapshot,
        p: &Policy,
    ) {
        let cap = pilotd_core::horizon::delta(interval.saturating_mul(2));
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

pub(crate) fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

fn store(state_dir: &Path) -> Store<Timeline> {
    Store::new(path(state_dir), "presence timeline").checked(Timeline::check)
}

/// Reads the timeline (for the daemon). Missing → empty. Unreadable or corrupted → empty,
/// the bad file renamed to `timeline.json.corrupt`.
pub(crate) fn load(state_dir: &Path) -> Loaded {
    let (timeline, warning) = store(state_dir).load_or(Timeline::default);
    Loaded { timeline, warning }
}

/// Reads the timeline without changing anything (for `schedule` and `init`).
pub(crate) fn peek(state_dir: &Path) -> Loaded {
    let (timeline, warning) = store(state_dir).peek_or(Timeline::default);
    Loaded { timeline, warning }
}

/// Writes the timeline atomically: a crash leaves the old or the new file.
pub(crate) fn save(state_dir: &Path, t: &Timeline) -> Result<(), StateFileError> {
    store(state_dir).save(t)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn policy() -> Policy {
        Policy::defaults(pilotd_core::zone::Zone::utc())
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
    fn a_film_or_a_call_without_typing_is_recorded_in_use_as_the_policy_counts_it() {
        let mut p = policy();
        let t = utc("2027-01-04T21:00:00Z");
        // alice at her desk, no input for 20 minutes, sound playing from her session.
        let film = HostSnapshot::test(t)
            .with_desk_session("alice", 1000, None, None)
            .with_input_idle(Some(1200))
            .with_use(
                crate::snapshot::UseKind::SoundPlaying,
                Some(("alice", 1000)),
            );
        let in_use = Presence::Session {
            idle_since: None,
            locked_since: None,
        };
        assert_eq!(Seen::of(&film, &p, t).presence, in_use);
        // Not counted where the owner said sound is no use, nor for a user the policy
        // ignores: then the keyboard's silence is what the week remembers.
        p.media_is_use = false;
        let idle = Seen::of(&film, &p, t).presence;
        assert!(
            matches!(
                idle,
                Presence::Session {
                    idle_since: Some(_),
                    ..
                }
            ),
            "{idle:?}"
        );
        p.media_is_use = true;
        p.ignore_users = vec!["alice".into()];
        assert_eq!(Seen::of(&film, &p, t).presence, Presence::Nobody);
        // A call goes on behind a locked screen: still in use.
        let p = policy();
        let call = HostSnapshot::test(t)
            .with_desk_session("alice", 1000, None, Some(t - Duration::hours(1)))
            .with_input_idle(Some(3600))
            .with_use(crate::snapshot::UseKind::Camera, Some(("alice", 1000)));
        assert_eq!(Seen::of(&call, &p, t).presence, in_use);
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

    /// A small deterministic noise source (xorshift), so the noisy tests replay exactly.
    pub(crate) struct Noise(u64);

    impl Noise {
        pub(crate) fn new(seed: u64) -> Noise {
            Noise(seed | 1)
        }
        /// Uniform in `[0, 1)`.
        pub(crate) fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// CPU-seconds of the owner a timeline holds (percent × seconds).
    fn owner_cpu_s(t: &Timeline) -> f64 {
        t.runs
            .iter()
            .map(|r| f64::from(r.seen.owner_cpu_pct) * r.seconds())
            .sum()
    }

    #[test]
    fn cpu_flicker_joins_the_open_stretch_and_a_real_change_stands() {
        let t0 = utc("2027-01-04T00:00:00Z");
        let at = |i: i64| t0 + Duration::seconds(30 * i);
        let cpu = |pct| Seen {
            owner_cpu_pct: pct,
            ..Seen::default()
        };
        let (mut folded, mut exact) = (Timeline::default(), Timeline::default());
        let mut noise = Noise::new(7);
        // An hour of idle noise across the 0/5 step, then a 90 % build for 10 minutes, then
        // quiet again.
        for i in 0..160 {
            let pct = match i {
                120..140 => 90,
                _ if noise.next() < 0.4 => 5,
                _ => 0,
            };
            folded.push(at(i), at(i + 1), cpu(pct));
            exact.push_unfolded(at(i), at(i + 1), cpu(pct));
        }
        // Without the fold, a stretch nearly every cycle; with it, at most one per CPU_FOLD
        // for the flicker.
        assert!(exact.runs.len() > 50, "{}", exact.runs.len());
        assert!(folded.runs.len() <= 80 / 4 + 2, "{:?}", folded.runs);
        assert_eq!(folded.watched(), exact.watched());
        // The owner's CPU over the whole is kept (within half a step).
        let total = folded.watched().num_seconds() as f64;
        assert!(
            (owner_cpu_s(&folded) - owner_cpu_s(&exact)).abs() <= 2.5 * total,
            "{} vs {}",
            owner_cpu_s(&folded),
            owner_cpu_s(&exact)
        );
        // The build is a stretch of its own, to the second: a jump is not noise.
        let build: Vec<_> = folded
            .runs
            .iter()
            .filter(|r| r.seen.owner_cpu_pct == 90)
            .collect();
        assert_eq!(build.len(), 1, "{:?}", folded.runs);
        assert_eq!((build[0].from, build[0].until), (at(120), at(140)));
        // A presence change is never joined, however short.
        let mut t = Timeline::default();
        t.push(at(0), at(1), Seen::default());
        t.push(
            at(1),
            at(2),
            Seen {
                presence: Presence::Unknown,
                ..Seen::default()
            },
        );
        t.push(at(2), at(3), Seen::default());
        assert_eq!(t.runs.len(), 3);
    }

    #[test]
    fn a_cpu_that_swings_every_cycle_keeps_the_last_max_runs() {
        let t0 = utc("2027-01-04T00:00:00Z");
        let at = |i: i64| t0 + Duration::seconds(30 * i);
        let mut t = Timeline::default();
        let cycles = KEPT.num_seconds() / 30;
        for i in 0..cycles {
            let seen = Seen {
                owner_cpu_pct: if i % 2 == 0 { 0 } else { 50 },
                ..Seen::default()
            };
            t.push(at(i), at(i + 1), seen);
            assert!(t.runs.len() <= MAX_RUNS + MAX_RUNS / 10);
        }
        // A change of ten steps is never joined: every cycle a stretch, the oldest trimmed.
        assert!(t.runs.len() >= MAX_RUNS, "{}", t.runs.len());
        assert_eq!(t.runs.last().map(|r| r.until), Some(at(cycles)));
        assert!(t.watched() >= Duration::seconds(30 * MAX_RUNS as i64));
        let bytes = serde_json::to_vec(&t).unwrap().len();
        assert!(bytes < 3 << 20, "{bytes}");
    }

    #[test]
    fn a_noisy_month_stays_small() {
        // Five weeks at the default 30 s: weekdays someone at the desk 08:00-18:00 (in use,
        // away for a few minutes now and then), CPU noise everywhere, the odd build.
        let p = policy();
        let step = std::time::Duration::from_secs(30);
        let t0 = utc("2027-01-04T00:00:00Z");
        let mut r = Recorder::default();
        // Stretches without the fold: one per change of what was seen.
        let (mut unfolded, mut last_seen) = (0, None);
        let mut noise = Noise::new(42);
        let (mut idle_from, mut build_until) = (None::<DateTime<Utc>>, t0);
        let cycles = KEPT.num_seconds() / 30;
        for i in 0..=cycles {
            let t = t0 + Duration::seconds(30 * i);
            let hour = (i * 30 / 3600) % 24;
            let weekday = (i * 30 / 86_400) % 7 < 5;
            let desk = weekday && (8..18).contains(&hour);
            if noise.next() < 0.002 {
                build_until = t + Duration::minutes(1 + (noise.next() * 10.0) as i64);
            }
            let owner = if t < build_until {
                0.9
            } else if desk {
                0.1 + noise.next() * 0.25
            } else {
                noise.next() * 0.07
            };
            let mut h = HostSnapshot::test(t).with_cpu(owner, 0.0);
            if desk {
                // In use, or away since `idle_from` (a break every hour or so).
                if idle_from.is_none() && noise.next() < 0.01 {
                    idle_from = Some(t);
                } else if idle_from.is_some() && noise.next() < 0.1 {
                    idle_from = None;
                }
                let idle = idle_from.map_or(5, |f| (t - f).num_seconds().max(0) as u64 + 5);
                h = h
                    .with_desk_session("alice", 4242, None, None)
                    .with_input_idle(Some(idle));
            }
            r.record(t, step, &h, &p);
            let seen = Seen::of(&h, &p, t);
            if i > 0 && last_seen != Some(seen) {
                unfolded += 1;
            }
            last_seen = Some(seen);
        }
        let runs = &r.timeline.runs;
        let presence_changes = runs
            .windows(2)
            .filter(|w| w[0].seen.but_cpu() != w[1].seen.but_cpu())
            .count();
        let bytes = serde_json::to_vec(&r.timeline).unwrap().len();
        eprintln!(
            "a noisy month: {cycles} cycles, {} stretches ({presence_changes} presence changes), \
             {bytes} bytes; {unfolded} stretches unfolded",
            runs.len(),
        );
        // Well under the cap: the whole five weeks are kept.
        assert!(runs.len() < MAX_RUNS, "{}", runs.len());
        assert!(runs.len() * 2 < unfolded, "{} of {unfolded}", runs.len());
        assert!(
            bytes <= runs.len() * 90,
            "{bytes} bytes for {} stretches",
            runs.len()
        );
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
            br#"{"version":1,"runs":[{"from":1799028000000,"until":1799024400000}]}"#,
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
