//! Pure: the machine's comfort. The owner's `[comfort]` keys bound how hot and how loud the
//! machine may get while it computes, and name quiet hours with a lower CPU share; this
//! module turns them, the sensors' reading and the throttle's last position into the CPU cap
//! the workers run under now (`CpuCap`), applied live through the engine (`docker update
//! --cpus`: no restart, no lost job). No I/O, no clock: `now` is an argument.
//!
//! The throttle (`throttle`):
//! - over a limit (the hottest CPU sensor above `max_temperature`, or any fan above
//!   `max_fan`), the quota drops one step (`STEPS`: 100%, 75%, 50%, 25% of each worker's
//!   share) per decision, at most one every `STEP_DOWN_EVERY`; still over at the lowest step,
//!   the workers are paused;
//! - it rises again one step at a time, and only when the machine has been cool (a margin
//!   below the limits: `TEMPERATURE_MARGIN`, `FAN_MARGIN`) for `cool_for` without a break,
//!   and `cool_for` after the last change: first the pause ends, then each step;
//! - between the limit and its margin, or without a reading, the cap holds.
//!
//! The quiet hours the decision is in come from `policy` (they are windows of its week);
//! `cap` lays their share and the throttle's step together.
//!
//! So a sensor that wavers around a limit makes few changes: a reading over the limit breaks
//! the cool stretch, every rise needs `cool_for` of coolness after the last change, and a
//! step down needs a level to fall to, i.e. a rise before it (or one of the four levels of a
//! first descent). In any hour that is at most `2 × ⌈3600 s / cool_for⌉ + 4` changes (44 at
//! the default 3 minutes), and a sensor that alternates across the limit every cycle without
//! staying cool for `cool_for` makes at most 4 in all (three steps down and the pause).

use crate::snapshot::{Sensors, Throttle};
use chrono::{DateTime, Utc};
use pilotd_core::config::policy::Comfort;
use pilotd_core::config::units::{Share, format_duration};
use pilotd_core::horizon::after;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[cfg(test)]
mod tests;

/// The throttle's levels: the share of each worker's CPUs it leaves, in percent.
pub(crate) const STEPS: [u32; 4] = [100, 75, 50, 25];
const LOWEST: u8 = (STEPS.len() - 1) as u8;
/// How far below `max_temperature` the machine must be to count as cool (°C).
pub(crate) const TEMPERATURE_MARGIN: f64 = 5.0;
/// How far below `max_fan` every fan must be to count as quiet (a share of `max_fan`).
pub(crate) const FAN_MARGIN: f64 = 0.1;
/// The least time between two steps down: cycles in quick succession (an owner's trigger
/// right after a regular cycle) decide on readings taken before the last step could act.
pub(crate) const STEP_DOWN_EVERY: Duration = Duration::from_secs(5);
/// The least CPU the engine accepts for a worker (`docker update --cpus 0.01`).
const MIN_NANO_CPUS: i64 = 10_000_000;

/// The CPU cap in force, and why. Each running worker's quota is held to `nano_for` of its
/// whole share; new workers start under it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuCap {
    /// The share of each worker's CPUs the throttle leaves, in percent (100: not throttled).
    pub percent: u32,
    /// In quiet hours, the CPUs one worker may use at most (thousandths of a CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_millicpus: Option<u64>,
    /// What it means for a worker of the current share (thousandths of a CPU).
    pub per_worker_millicpus: u64,
    /// Why, as stable names (for metrics and scripts): `temperature` or `fan` (over its
    /// limit), `cooling` (under it, not yet cool for long enough), `quiet_hours`.
    pub causes: Vec<String>,
    /// Why, in words: the reading against its limit, or the quiet hours and their end.
    pub reason: String,
}

impl CpuCap {
    /// The quota (NanoCpus, as the engine counts) of a worker whose whole share is
    /// `full_nano` under this cap.
    pub(crate) fn nano_for(&self, full_nano: i64) -> i64 {
        let base = match self.quiet_millicpus {
            Some(m) => full_nano.min(i64::try_from(m).unwrap_or(i64::MAX / 1_000_000) * 1_000_000),
            None => full_nano,
        };
        (base / 100 * i64::from(self.percent)).max(MIN_NANO_CPUS)
    }
}

/// The quiet hours a decision is in: the least CPU share among the windows holding it, and
/// when they end (`policy::quiet_hours`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Quiet {
    pub(crate) cpus: Share,
    pub(crate) ends: Option<DateTime<Utc>>,
}

/// What the throttle decided: where it stands now (`None`: the whole share, nothing to
/// carry), the share it leaves, whether the workers pause, why, and when it may next change
/// on its own.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    pub(crate) state: Option<Throttle>,
    pub(crate) percent: u32,
    pub(crate) paused: bool,
    /// Empty while the machine is within its limits and nothing is lowered.
    pub(crate) why: String,
    /// The same as stable names (`CpuCap::causes`).
    pub(crate) causes: Vec<&'static str>,
    pub(crate) next: Option<DateTime<Utc>>,
}

impl Verdict {
    fn whole() -> Verdict {
        Verdict {
            state: None,
            percent: 100,
            paused: false,
            why: String::new(),
            causes: Vec::new(),
            next: None,
        }
    }
}

/// The throttle's next position, from its last (`last`), the limits and the sensors' reading
/// at `now` (see the module's doc). Without limits it lets go at once.
pub(crate) fn throttle(
    c: &Comfort,
    sensors: Option<&Sensors>,
    last: Option<Throttle>,
    now: DateTime<Utc>,
) -> Verdict {
    if !c.limits_set() {
        return Verdict::whole();
    }
    let mut over = Vec::new();
    let mut causes = Vec::new();
    let mut cool = true;
    let mut seen = Vec::new();
    // Each limit set: what it limits, the highest reading, the maximum, the reading that
    // counts as cool (the margin below it), and the unit its readings are said in.
    let hot = sensors.and_then(Sensors::hottest);
    let fan = sensors.and_then(Sensors::fastest);
    let temperature = c
        .max_temperature
        .map(|m| ("temperature", hot, m, m - TEMPERATURE_MARGIN, "°C"));
    let fan = c
        .max_fan
        .map(|m| ("fan", fan, m as f64, m as f64 * (1.0 - FAN_MARGIN), " rpm"));
    for (what, reading, max, cool_at, unit) in [temperature, fan].into_iter().flatten() {
        match reading {
            Some(r) if r.value > max => {
                causes.push(what);
                over.push(format!(
                    "{what} {:.0}{unit} ({}) over max_{what} {max:.0}{unit}",
                    r.value, r.sensor
                ))
            }
            Some(r) => {
                cool &= r.value <= cool_at;
                seen.push(format!("{:.0}{unit}", r.value));
            }
            None => cool = false,
        }
    }
    let fresh = last.is_none();
    let mut s = last.unwrap_or(Throttle {
        step: 0,
        paused: false,
        changed_at: now,
        cool_since: None,
    });
    let mut next = None;
    if !over.is_empty() {
        s.cool_since = None;
        let may_at = after(s.changed_at, STEP_DOWN_EVERY);
        if fresh || now >= may_at {
            if s.step < LOWEST {
                s.step += 1;
                s.changed_at = now;
            } else if !s.paused {
                s.paused = true;
                s.changed_at = now;
            }
        } else if s.step < LOWEST || !s.paused {
            // A step (or the pause) is still to come: decide again when it may.
            next = Some(may_at);
        }
    } else if cool {
        let since = *s.cool_since.get_or_insert(now);
        let rise_at = after(since, c.cool_for).max(after(s.changed_at, c.cool_for));
        if s.step > 0 || s.paused {
            if now >= rise_at {
                if s.paused {
                    s.paused = false;
                } else {
                    s.step -= 1;
                }
                s.changed_at = now;
            }
            if s.step > 0 || s.paused {
                next = Some(after(s.changed_at, c.cool_for).max(rise_at));
            }
        }
    } else {
        // Within a margin of a limit, or a reading missing: hold, and count coolness anew.
        s.cool_since = None;
    }
    let percent = STEPS[usize::from(s.step)];
    let why = if !over.is_empty() {
        let done = if s.paused {
            format!("workers paused at the lowest step ({percent}% of their CPUs)")
        } else {
            format!("workers held to {percent}% of their CPUs")
        };
        format!("{}: {done}", over.join(", "))
    } else if s.step == 0 && !s.paused {
        String::new()
    } else {
        let now_at = if s.paused {
            "workers paused".to_string()
        } else {
            format!("workers held to {percent}% of their CPUs")
        };
        let reading = if seen.is_empty() {
            "no sensor reading".to_string()
        } else {
            seen.join(", ")
        };
        if cool {
            format!(
                "cooler ({reading}): {now_at}, one step more after {} cool",
                format_duration(c.cool_for)
            )
        } else {
            format!("{reading}, not yet cool: {now_at} until it is")
        }
    };
    let state = (s.step > 0 || s.paused).then_some(s);
    if over.is_empty() && state.is_some() {
        causes.push("cooling");
    }
    Verdict {
        causes,
        paused: s.paused,
        percent,
        state,
        why,
        next,
    }
}

/// The quiet hours' share as thousandths of a CPU for each of `workers` on a machine of
/// `cpus`.
pub(crate) fn quiet_millicpus(share: Share, cpus: u32, workers: u32) -> u64 {
    let total = match share {
        Share::Percent(p) => (f64::from(cpus) * 1000.0 * p / 100.0).floor() as u64,
        Share::Amount(n) => n.saturating_mul(1000),
    };
    (total / u64::from(workers.max(1))).max(10)
}

/// The cap in force, when anything caps the workers: the throttle below its whole share, or
/// quiet hours. `full_millicpus` is one worker's whole share now.
pub(crate) fn cap(
    verdict: &Verdict,
    quiet: Option<Quiet>,
    quiet_said: impl FnOnce(Option<DateTime<Utc>>) -> String,
    (cpus, workers, full_millicpus): (u32, u32, u64),
) -> Option<CpuCap> {
    if verdict.percent == 100 && quiet.is_none() {
        return None;
    }
    let quiet_millicpus = quiet.map(|q| quiet_millicpus(q.cpus, cpus, workers));
    let base = quiet_millicpus.map_or(full_millicpus, |q| q.min(full_millicpus));
    let mut reason = Vec::new();
    let mut causes: Vec<String> = verdict.causes.iter().map(|c| c.to_string()).collect();
    if let Some(Quiet { cpus: share, ends }) = quiet {
        causes.push("quiet_hours".into());
        let share = match share {
            Share::Percent(p) => format!("{p}% of the machine"),
            Share::Amount(n) => format!("{n} CPU(s)"),
        };
        reason.push(format!("quiet hours{}: {share}", quiet_said(ends)));
    }
    if !verdict.why.is_empty() {
        reason.push(verdict.why.clone());
    }
    Some(CpuCap {
        percent: verdict.percent,
        quiet_millicpus,
        per_worker_millicpus: (base * u64::from(verdict.percent) / 100).max(10),
        causes,
        reason: reason.join("; "),
    })
}
