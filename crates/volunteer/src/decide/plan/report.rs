//! What `pilotd plan` prints in volunteer mode: the decision and the actions the daemon's
//! next cycle would take (`Report`; its JSON is a contract, README "Reading a decision"), and
//! its text (`inspect::plan_report` gathers it).

use crate::decide::policy::Supply;
use chrono::{DateTime, Utc};
use pilotd_core::config::Evict;
use pilotd_core::config::units::format_duration;
use pilotd_core::zone::Zone;
use serde::Serialize;
use std::fmt::Write;

/// The JSON printed by `plan --format json` in volunteer mode.
#[derive(Debug, Serialize)]
pub struct Report {
    pub mode: &'static str,
    pub now: DateTime<Utc>,
    #[serde(flatten)]
    pub supply: Supply,
    pub actions: Vec<serde_json::Value>,
    /// Workers running or paused now (what an eviction acts on); null when the engine could
    /// not be asked.
    pub live_workers: Option<usize>,
    /// Where the configuration came from.
    pub config: String,
}

impl Report {
    /// The text form, instants in the policy's zone `tz`.
    pub fn text(&self, tz: &Zone) -> String {
        let local = |t: DateTime<Utc>| {
            t.with_timezone(tz)
                .format("%a %Y-%m-%d %H:%M %Z")
                .to_string()
        };
        let s = &self.supply;
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.config);
        let _ = writeln!(out, "now: {}", local(self.now));
        let verdict = if s.allowed {
            format!(
                "COMPUTE: {} worker(s), each {} CPU, {} MiB memory, {} GiB disk, {} GPU",
                s.workers,
                s.per_worker.cpus,
                s.per_worker.memory_mib,
                s.per_worker.disk_kib / (1 << 20),
                s.per_worker.gpus
            )
        } else {
            "DO NOT START workers".to_string()
        };
        let _ = writeln!(out, "decision: {verdict}");
        for line in limit_lines(s, self.now, self.live_workers, local) {
            let _ = writeln!(out, "{line}");
        }
        if let Some(cap) = &s.cpu_cap {
            let _ = writeln!(
                out,
                "CPU cap: {:.2} CPU a worker: {}",
                cap.per_worker_millicpus as f64 / 1000.0,
                cap.reason
            );
        }
        let _ = writeln!(out, "why:");
        for r in s.reasons.iter().chain(&s.notes) {
            let _ = writeln!(out, "  - {r}");
        }
        let _ = writeln!(
            out,
            "next change: {}",
            s.next_change
                .map(local)
                .unwrap_or_else(|| "none expected (only events can change this)".into())
        );
        let _ = writeln!(out, "actions:");
        if self.actions.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for a in &self.actions {
            // Each action carries a one-line `summary`; fall back to the JSON for anything else.
            let line = a.get("summary").and_then(|v| v.as_str());
            let _ = writeln!(
                out,
                "  - {}",
                line.map_or_else(|| a.to_string(), str::to_string)
            );
        }
        out
    }
}

/// What the decision means for running workers and for new jobs, in lines that are true at
/// `now`: an instant already past is never shown as a limit to come, and no eviction is
/// announced when nothing runs (`live`: workers running or paused; `None` when unknown).
pub(crate) fn limit_lines(
    s: &Supply,
    now: DateTime<Utc>,
    live: Option<usize>,
    local: impl Fn(DateTime<Utc>) -> String,
) -> Vec<String> {
    let mut lines = Vec::new();
    match (s.evict, live) {
        (_, Some(0)) => lines.push("running workers: none".to_string()),
        (Evict::None, _) => lines.push("running workers: keep".to_string()),
        (e, Some(n)) => lines.push(format!("running workers: evict {n} ({})", e.as_str())),
        (e, None) => lines.push(format!("running workers (if any): evict ({})", e.as_str())),
    }
    match (s.accept_until, s.die_at) {
        (Some(a), _) if a > now => lines.push(format!("accept jobs until: {}", local(a))),
        // accept_until is die_at minus the longest job: their gap is that job's length.
        (Some(a), Some(d)) => lines.push(format!(
            "no new jobs: too late for the longest job ({})",
            format_duration((d - a).to_std().unwrap_or_default())
        )),
        (Some(_), None) => lines.push("no new jobs: too late for the longest job".to_string()),
        (None, _) => {}
    }
    match s.die_at {
        Some(d) if d > now => lines.push(format!("workers gone by: {}", local(d))),
        Some(_) => lines.push("workers must be gone now".to_string()),
        None => {}
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::policy::Resources;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn supply(evict: Evict, accept: Option<&str>, die: Option<&str>) -> Supply {
        Supply {
            allowed: false,
            workers: 0,
            per_worker: Resources::default(),
            accept_until: accept.map(at),
            die_at: die.map(at),
            evict,
            grace: std::time::Duration::ZERO,
            reasons: vec![],
            causes: vec![],
            notes: vec![],
            next_change: None,
            downloads: true,
            owner_busy_since: None,
            host_free_since: None,
            throttle: None,
            cpu_cap: None,
            link: crate::decide::policy::LinkHold::Nothing,
        }
    }

    #[test]
    fn limits_are_true_at_now() {
        let now = "2026-12-01T20:00:00Z";
        let fmt = |t: DateTime<Utc>| t.format("%H:%M").to_string();
        // (evict, accept_until, die_at, live workers) -> lines
        type Case<'a> = (
            Evict,
            Option<&'a str>,
            Option<&'a str>,
            Option<usize>,
            Vec<&'a str>,
        );
        let table: Vec<Case> = vec![
            // Plenty of time: both limits lie ahead.
            (
                Evict::None,
                Some("2026-12-01T22:00:00Z"),
                Some("2026-12-02T06:00:00Z"),
                Some(1),
                vec![
                    "running workers: keep",
                    "accept jobs until: 22:00",
                    "workers gone by: 06:00",
                ],
            ),
            // Two hours before the end with 8h jobs: accepting ended at 22:00 yesterday —
            // never printed as a limit to come.
            (
                Evict::None,
                Some("2026-12-01T14:00:00Z"),
                Some("2026-12-01T22:00:00Z"),
                Some(1),
                vec![
                    "running workers: keep",
                    "no new jobs: too late for the longest job (8h)",
                    "workers gone by: 22:00",
                ],
            ),
            // Accepting ends exactly now: too late as well.
            (
                Evict::None,
                Some(now),
                Some("2026-12-02T04:00:00Z"),
                None,
                vec![
                    "running workers: keep",
                    "no new jobs: too late for the longest job (8h)",
                    "workers gone by: 04:00",
                ],
            ),
            // Outside the schedule with nothing running: no eviction line.
            (
                Evict::Graceful,
                None,
                None,
                Some(0),
                vec!["running workers: none"],
            ),
            // Outside the schedule with two workers: they are named.
            (
                Evict::Graceful,
                None,
                None,
                Some(2),
                vec!["running workers: evict 2 (graceful)"],
            ),
            // The engine could not be asked: conditional.
            (
                Evict::Pause,
                None,
                None,
                None,
                vec!["running workers (if any): evict (pause)"],
            ),
        ];
        for (evict, accept, die, live, want) in table {
            let got = limit_lines(&supply(evict, accept, die), at(now), live, fmt);
            assert_eq!(got, want, "{evict:?} {accept:?} {die:?} {live:?}");
        }
    }
}
