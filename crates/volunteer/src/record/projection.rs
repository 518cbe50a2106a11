//! What a policy would give: the recorded weeks of this machine (`timeline`) replayed through
//! the daemon's own decision (`policy::decide`, with the limits `history::Outlook` gives the
//! daemon), step by step, summed per week — hours open, hours computing, CPU-hours, hours the
//! owner was there. Not a separate model: the same function decides, on a snapshot rebuilt
//! from each stretch, with the policy's latches (owner busy since, host free since) carried
//! from step to step as the daemon carries them. Pure: no I/O, no clock; the same history
//! gives the same figures. What it replays is read from the state dir by
//! `inspect::expected_week` (`schedule`, `init`).
//!
//! A fresh machine has nothing recorded: it is projected from a stated typical office week
//! (`typical_week`), and says so.
//!
//! Imports: `config`, `volunteer::{policy, history, timeline, snapshot, settings, contribution,
//! host}`.

use crate::decide::policy::{self, decide};
use crate::record::contribution::{Tally, hours};
use crate::record::history::{History, Outlook};
use crate::record::timeline::{Presence, Seen, Timeline};
use crate::settings::Settings;
use crate::snapshot::{HostSnapshot, Session, Sessions};
use chrono::{DateTime, Datelike, Duration, NaiveTime, TimeZone, Timelike, Utc};
use pilotd_core::config::{Evict, Policy};

/// The replay decides once per this (the daemon's default interval is shorter; a minute is
/// the timeline's resolution).
pub(crate) const STEP: Duration = Duration::seconds(60);
/// The share of their CPUs workers are assumed to keep busy when this machine has not
/// computed long enough to say (`utilization`).
pub(crate) const DEFAULT_UTILIZATION: f64 = 0.9;
/// Recorded time below which the projection uses `typical_week`.
pub(crate) const MIN_RECORDED: Duration = Duration::days(1);
/// Computing time below which the ledger's CPU figure is not trusted for the utilization.
const MIN_MEASURED: u64 = 3600;

/// What the replay sums, in seconds (CPU-seconds for the CPU).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Figures {
    /// The policy let workers start (`Supply::allowed`).
    pub open_s: f64,
    /// Workers ran: the decision let them start, or left running ones be.
    pub computing_s: f64,
    /// The CPUs the decision granted × time computing × the utilization.
    pub cpu_seconds: f64,
    /// The decision saw the owner there (`Cause::owner_there`).
    pub owner_s: f64,
}

impl Figures {
    fn scaled(self, k: f64) -> Figures {
        Figures {
            open_s: self.open_s * k,
            computing_s: self.computing_s * k,
            cpu_seconds: self.cpu_seconds * k,
            owner_s: self.owner_s * k,
        }
    }
}

/// Where the replayed weeks came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Basis {
    /// This machine's timeline: this many days of it watched.
    Recorded { days: f64 },
    /// Less than `MIN_RECORDED` recorded yet: `typical_week`.
    Defaults,
}

/// How busy workers keep the CPUs they are granted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Utilization {
    pub fraction: f64,
    /// From this machine's contribution ledger, or `DEFAULT_UTILIZATION`.
    pub measured: bool,
}

impl Utilization {
    /// The ledger's CPU-seconds per computing second per CPU the policy grants on this
    /// machine (`granted_cpus`), once it computed an hour; the default before.
    pub(crate) fn of(all_time: &Tally, granted_cpus: u32) -> Utilization {
        if all_time.computing_s < MIN_MEASURED || granted_cpus == 0 {
            return Utilization {
                fraction: DEFAULT_UTILIZATION,
                measured: false,
            };
        }
        let f = all_time.cpu_seconds / (all_time.computing_s as f64 * f64::from(granted_cpus));
        Utilization {
            fraction: f.clamp(0.0, 1.0),
            measured: true,
        }
    }
}

/// A projection: the replay's sums in all, and per week.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Projection {
    pub basis: Basis,
    pub utilization: Utilization,
    /// Over the whole replayed span.
    pub total: Figures,
    /// `total` scaled to seven days of the span (first to last recorded instant; time nobody
    /// watched inside it counts as the machine off).
    pub per_week: Figures,
}

/// Replays `timeline` (or, before `MIN_RECORDED` of it, `typical_week` ending at `now`) through
/// `decide` with `s`'s policy and site limits, the learned `history` (for a `predict_die_at`
/// site) and `machine`'s size (CPUs, memory, scratch).
pub(crate) fn project(
    s: &Settings,
    history: &History,
    timeline: &Timeline,
    machine: &HostSnapshot,
    utilization: Utilization,
    now: DateTime<Utc>,
) -> Projection {
    // Less than a day says too little about a week: an hour's sample scaled up 168 times
    // would be noise. Until then, the stated defaults.
    let (timeline, basis) = if timeline.watched() < MIN_RECORDED {
        (typical_week(&s.policy, now), Basis::Defaults)
    } else {
        let days = timeline.watched().num_seconds() as f64 / 86_400.0;
        (timeline.clone(), Basis::Recorded { days })
    };
    let total = replay(s, history, &timeline, machine, utilization.fraction);
    let span = match (timeline.runs.first(), timeline.runs.last()) {
        (Some(a), Some(b)) => (b.until - a.from).num_seconds() as f64,
        _ => 0.0,
    };
    let per_week = if span > 0.0 {
        total.scaled(7.0 * 86_400.0 / span)
    } else {
        Figures::default()
    };
    Projection {
        basis,
        utilization,
        total,
        per_week,
    }
}

/// The replay itself: one decision per `STEP` of every recorded stretch, at the step's end,
/// on the snapshot the stretch rebuilds. As in the daemon's ledger, a step counts as open and
/// with the owner there by the decision at its end, and as computing by the workers the
/// decisions before left running. A gap (nobody watched) ends every latch and worker, as a
/// sleep or a restart does.
pub(crate) fn replay(
    s: &Settings,
    history: &History,
    timeline: &Timeline,
    machine: &HostSnapshot,
    utilization: f64,
) -> Figures {
    let p = &s.policy;
    let mut sum = Figures::default();
    let mut latches: (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = (None, None);
    // The running workers and each one's whole share, in thousandths of a CPU (none: none
    // running). What they may use is that, under the cap of the moment (quiet hours), as the
    // daemon holds them to it live.
    let mut running: Option<(u32, u64)> = None;
    let mut started: Option<DateTime<Utc>> = None;
    let mut watched_until: Option<DateTime<Utc>> = None;
    for run in &timeline.runs {
        if watched_until != Some(run.from) {
            latches = (None, None);
            running = None;
            started = Some(run.from);
        }
        let mut t = run.from;
        while t < run.until {
            let end = (t + STEP).min(run.until);
            let secs = (end - t).num_seconds() as f64;
            let h = snapshot(machine, &run.seen, run.from, end, latches);
            let mut outlook = Outlook::at(s, history, end);
            outlook.limits.started = started;
            let supply = decide(p, &h, outlook.limits, end);
            latches = (supply.owner_busy_since, supply.host_free_since);
            if let Some((workers, share)) = running.filter(|r| r.0 > 0) {
                let each = supply.cpu_cap.as_ref().map_or(share, |c| {
                    (c.nano_for(share.saturating_mul(1_000_000) as i64) / 1_000_000) as u64
                });
                sum.computing_s += secs;
                sum.cpu_seconds += secs * f64::from(workers) * each as f64 / 1000.0 * utilization;
            }
            if supply.allowed {
                sum.open_s += secs;
            }
            if supply.causes.iter().any(|c| c.owner_there()) {
                sum.owner_s += secs;
            }
            running = if supply.allowed {
                Some((supply.workers, u64::from(supply.per_worker.cpus) * 1000))
            } else if supply.evict == Evict::None {
                running
            } else {
                None
            };
            t = end;
        }
        watched_until = Some(run.until);
    }
    sum
}

/// The host at `t` as the stretch `seen` (watched since `from`) describes it, on `machine`.
fn snapshot(
    machine: &HostSnapshot,
    seen: &Seen,
    from: DateTime<Utc>,
    t: DateTime<Utc>,
    (owner_busy_since, host_free_since): (Option<DateTime<Utc>>, Option<DateTime<Utc>>),
) -> HostSnapshot {
    let sessions = match seen.presence {
        Presence::Nobody => Sessions::Known(Vec::new()),
        Presence::Unknown => Sessions::Unknown("recorded as unknown".into()),
        Presence::Session {
            idle_since,
            locked_since,
        } => Sessions::Known(vec![Session {
            // Not a name a system could have: no policy's `ignore_users` lists it.
            user: "the owner".into(),
            uid: None,
            line: String::new(),
            host: String::new(),
            login: from,
            idle_s: idle_since.map(|i| (t - i).num_seconds().max(0) as u64),
            local: false,
            locked_since,
            idle_reported: false,
        }]),
    };
    HostSnapshot {
        mode: "volunteer".into(),
        taken_at: t,
        cpu_busy: f64::from(seen.owner_cpu_pct) / 100.0,
        own_cpu: 0.0,
        on_battery: seen.on_battery,
        exclusive_running: if seen.exclusive {
            vec!["(recorded)".into()]
        } else {
            Vec::new()
        },
        sessions,
        owner_busy_since,
        host_free_since,
        snoozed_until: seen.snoozed.then(|| t + STEP),
        snooze_unreadable: None,
        input_idle_s: None,
        sleeping: false,
        ..machine.clone()
    }
}

/// The CPUs `p` grants on `machine` while computing (all its workers').
pub(crate) fn granted_cpus(p: &Policy, machine: &HostSnapshot) -> u32 {
    let (workers, r) = policy::split_share(p, machine);
    workers * r.cpus
}

/// How `typical_week` is said to the owner.
pub(crate) const TYPICAL_WEEK: &str =
    "a typical office week: on around the clock, someone at it Monday to Friday 08:30-17:30";

/// A fresh machine's stated week: on around the clock; someone at it, using it, Monday to
/// Friday 08:30–17:30 local time with the owner's programs at 15 % of the CPU; nobody and
/// an idle CPU otherwise. The seven days before `now`'s local midnight.
pub(crate) fn typical_week(p: &Policy, now: DateTime<Utc>) -> Timeline {
    let tz = &p.timezone;
    let now = now.clamp(
        pilotd_core::horizon::earliest(),
        pilotd_core::horizon::latest(),
    );
    let midnight = now.with_timezone(tz).date_naive().and_time(NaiveTime::MIN);
    let end = tz
        .from_local_datetime(&midnight)
        .earliest()
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(now);
    let start = end - Duration::days(7);
    let mut tl = Timeline::default();
    let mut t = start;
    while t < end {
        let next = t + Duration::minutes(30);
        let l = t.with_timezone(tz);
        let minutes = l.hour() * 60 + l.minute();
        let at_work = l.weekday().num_days_from_monday() < 5
            && (8 * 60 + 30..17 * 60 + 30).contains(&minutes);
        let seen = if at_work {
            Seen {
                presence: Presence::Session {
                    idle_since: None,
                    locked_since: None,
                },
                owner_cpu_pct: 15,
                ..Seen::default()
            }
        } else {
            Seen::default()
        };
        tl.push(t, next, seen);
        t = next;
    }
    tl
}

/// What `schedule` and `init` print: the weekly figures, then where they come from.
pub(crate) fn render(p: &Projection) -> Vec<String> {
    let w = &p.per_week;
    let util = format!(
        "workers assumed to keep {:.0}% of their CPUs busy ({})",
        p.utilization.fraction * 100.0,
        if p.utilization.measured {
            "measured on this machine"
        } else {
            "default"
        }
    );
    vec![
        format!(
            "{} CPU-hours a week, {} h open to the pool, {} h computing, {} h with the owner there",
            hours(w.cpu_seconds),
            hours(w.open_s),
            hours(w.computing_s),
            hours(w.owner_s),
        ),
        match p.basis {
            Basis::Recorded { days } => {
                format!("from {days:.1} recorded day(s) of this machine's presence; {util}")
            }
            Basis::Defaults => {
                format!("from defaults, less than a day recorded here yet ({TYPICAL_WEEK}); {util}")
            }
        },
    ]
}

#[cfg(test)]
mod tests;
