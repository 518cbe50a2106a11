//! `pilotd status` as text, from the view (`view::StatusView`): the daemon, the decision and
//! its reasons, the workers (each with its scratch against its share), the back-off, the
//! image, what was learned, what the machine gave and the last outcomes, the latest first.

use super::view::{ManifestView, StatusView};
use crate::outcome::Outcome;
use crate::worker::WorkerState;
use chrono::{DateTime, Duration, Utc};
use pilotd_core::config::Evict;
use std::fmt::Write;

fn human(d: Duration) -> String {
    let s = d.num_seconds();
    let (neg, s) = (s < 0, s.unsigned_abs());
    let text = if s < 120 {
        format!("{s}s")
    } else if s < 7200 {
        format!("{}m", s / 60)
    } else if s < 172_800 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d", s / 86400)
    };
    if neg { format!("-{text}") } else { text }
}

/// Thousandths of a CPU as CPUs: "1", "0.75".
fn cpus(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{:.2}", milli as f64 / 1000.0)
    }
}

fn short_digest(d: &str) -> &str {
    let d = d.strip_prefix("sha256:").unwrap_or(d);
    d.get(..12).unwrap_or(d)
}

impl StatusView {
    /// The text `pilotd status` prints.
    pub fn text(&self) -> String {
        let (s, now) = (&self.status, self.now);
        let ago = |t: DateTime<Utc>| human(now - t);
        let mut out = String::new();
        let (pid, file) = (self.pid, self.status_file.display());
        let daemon = match self.updated_at.map(ago) {
            Some(t) if self.daemon_running => format!("running (pid {pid}), last cycle {t} ago"),
            Some(t) => format!("NOT RUNNING (last cycle {t} ago, pid {pid})"),
            None => format!("no status yet ({file} does not exist)"),
        };
        let _ = writeln!(out, "pilotd: {daemon}; instance {}", self.instance);
        let _ = writeln!(out, "{}", self.config);
        // What is in force beside the decision, each line when there is something to say.
        let manifest = |m: &ManifestView| match &m.version {
            Some(v) => format!("pool manifest: version {v} from {}", m.url),
            None => format!("pool manifest: none accepted yet from {}", m.url),
        };
        let beside = [
            self.snooze.as_ref().map(|z| {
                let until = z.until.format("%Y-%m-%d %H:%M UTC");
                format!("SNOOZED by {} until {until} (`pilotd resume` ends it)", z.by)
            }),
            self.snooze_unreadable.as_ref().map(|why| format!(
                "SNOOZED: {why}; counted as snoozed until it can be read (`pilotd resume` removes it)"
            )),
            self.manifest.as_ref().map(manifest),
            s.engine.as_ref().map(|e| format!("engine: {e}")),
            s.last_error.as_ref().map(|e| format!("last cycle's problem: {e}")),
        ];
        for line in beside.into_iter().flatten() {
            let _ = writeln!(out, "{line}");
        }
        let live = self.workers.as_ref().map(|list| {
            list.iter()
                .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused))
                .count()
        });
        if let Some(d) = &s.decision {
            let verdict = d
                .share()
                .map_or("DO NOT START workers".into(), |s| format!("COMPUTE: {s}"));
            let _ = writeln!(
                out,
                "decision ({} ago): {verdict}; running workers: {}",
                ago(d.at),
                match (d.evict, live) {
                    // No eviction is announced when nothing runs.
                    (_, Some(0)) => "none".to_string(),
                    (Evict::None, _) => "keep".to_string(),
                    (e, _) => format!("evict ({})", e.as_str()),
                }
            );
            for r in d.reasons.iter().chain(&d.notes) {
                let _ = writeln!(out, "  - {r}");
            }
        }
        for line in self.comfort_lines() {
            let _ = writeln!(out, "{line}");
        }
        self.workers_text(&mut out);
        let b = &s.backoff;
        let backoff = match b.not_before.filter(|t| *t > now) {
            Some(t) => format!(
                "{} failure(s); next start in {}{}",
                b.failures,
                human(t - now),
                b.last_outcome
                    .as_ref()
                    .map(|o| format!(" (last: {o})"))
                    .unwrap_or_default()
            ),
            None if b.failures > 0 => format!("{} failure(s), delay over", b.failures),
            None => "none".into(),
        };
        let _ = writeln!(out, "back-off: {backoff}");
        let img = &s.image;
        if !img.reference.is_empty() {
            let _ = writeln!(
                out,
                "image: {} -> {} (confirmed {}){}",
                img.reference,
                img.digest.as_deref().map(short_digest).unwrap_or("unknown"),
                img.verified_at
                    .map(|t| format!("{} ago", ago(t)))
                    .unwrap_or_else(|| "never".into()),
                img.last_error
                    .as_ref()
                    .map(|e| format!("\n  last problem: {e}"))
                    .unwrap_or_default()
            );
        }
        for n in &s.notes {
            let _ = writeln!(out, "note: {n}");
        }
        if let Some(h) = &self.history {
            let _ = writeln!(
                out,
                "learned availability: free {:.0}% of the watched time{}; usually free for {}h from now",
                h.free_fraction * 100.0,
                h.since
                    .map(|t| format!(" since {}", t.format("%Y-%m-%d")))
                    .unwrap_or_default(),
                h.likely_free_hours.unwrap_or_default()
            );
        }
        let _ = writeln!(out, "what this machine gave:");
        if let Some(why) = &self.contribution_unreadable {
            let _ = writeln!(out, "  ({why})");
        }
        for (heading, lines) in self.contribution.sections(&self.tz) {
            match lines.as_slice() {
                [one] => writeln!(out, "  {heading}: {one}"),
                _ => writeln!(out, "  {heading}:\n    {}", lines.join("\n    ")),
            }
            .unwrap_or_default();
        }
        if !s.outcomes.is_empty() {
            let _ = writeln!(out, "recent outcomes:");
            for o in s.outcomes.iter().rev().take(5) {
                let _ = writeln!(out, "  {} ago {}: {}", ago(o.at), o.name, o.outcome);
                // The last lines say why; the status file keeps more (`--format json`).
                for line in &o.output[o.output.len().saturating_sub(10)..] {
                    let _ = writeln!(out, "    | {line}");
                }
            }
        }
        out
    }

    /// The machine's comfort: its hottest CPU sensor and fastest fan at the last cycle, and
    /// the CPU cap in force with why (none of it where there is no sensor and no cap).
    pub(crate) fn comfort_lines(&self) -> Vec<String> {
        let s = &self.status;
        let seen: Vec<String> = [
            s.temperature
                .as_ref()
                .map(|t| format!("hottest CPU sensor {:.0}°C ({})", t.value, t.sensor)),
            s.fan
                .as_ref()
                .map(|f| format!("fastest fan {:.0} rpm ({})", f.value, f.sensor)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let sensors = (!seen.is_empty()).then(|| format!("sensors: {}", seen.join("; ")));
        let cap = s.decision.as_ref().and_then(|d| d.cpu_cap.as_ref());
        let cap = cap.map(|c| {
            let cpus = cpus(c.per_worker_millicpus);
            format!("CPU cap: {cpus} CPU a worker: {}", c.reason)
        });
        sensors.into_iter().chain(cap).collect()
    }

    /// The workers' table: where the list comes from, and each worker's line.
    fn workers_text(&self, out: &mut String) {
        let now = self.now;
        let _ = writeln!(out, "workers (from the {}):", self.workers_from);
        if let Some(e) = &self.workers_error {
            let _ = writeln!(out, "  (cannot list them now: {e})");
        }
        let list = match &self.workers {
            None => return out.push_str("  unknown\n"),
            Some(list) if list.is_empty() => return out.push_str("  none\n"),
            Some(list) => list,
        };
        let _ = writeln!(
            out,
            "  {:<40} {:<8} {:>7} {:>9} {:<12} {:<20} LAST EXIT",
            "NAME", "STATE", "AGE", "EXPIRES", "IMAGE", "SCRATCH"
        );
        for w in list {
            let exit = match w.exit_code.filter(|_| w.state.is_finished()) {
                Some(c) => Outcome::from_exit(Some(c), w.oom_killed).to_string(),
                None => "-".into(),
            };
            // Measured beside the loop, by worker id; "-" until the first measurement.
            let scratch = self.scratch(w).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "  {:<40} {:<8} {:>7} {:>9} {:<12} {scratch:<20} {exit}",
                w.name,
                w.state.as_str(),
                w.created
                    .map(|c| human(now - c))
                    .unwrap_or_else(|| "?".into()),
                w.die_at
                    .map(|d| human(d - now))
                    .unwrap_or_else(|| "-".into()),
                short_digest(&w.image_digest),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::contribution::{Contribution, Ledger, Observed, Summary};
    use crate::record::status::Status;
    use crate::worker::Worker;
    use pilotd_core::config::Policy;
    use pilotd_core::zone::Zone;

    /// A view of a running daemon with no worker, in `tz`, at `now`.
    fn view(status: Status, tz: Zone, now: DateTime<Utc>) -> StatusView {
        let dir = tempfile::tempdir().unwrap();
        let mut v = StatusView::of(status, dir.path(), &Policy::defaults(tz), now);
        v.daemon_running = true;
        (v.workers_from, v.workers) = ("engine", Some(vec![]));
        v
    }

    /// What the machine gave: this week and all time, in text and JSON, and plainly
    /// "nothing recorded yet" before the first cycle counted anything.
    #[test]
    fn what_the_machine_gave_shows_this_week_and_all_time() {
        let rome = Zone::named("Europe/Rome").unwrap();
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let mut c = Contribution::new(Ledger::default());
        let busy = Observed {
            cpu_seconds: 3600.0,
            running: true,
            open: true,
            ..Observed::default()
        };
        // Sunday 22:00 UTC is still last week in Rome (an hour); Monday 09:00 is this week's
        // (the night's gap counts as two intervals).
        let interval = std::time::Duration::from_secs(3600);
        c.record(&rome, at("2026-11-29T21:00:00Z"), interval, busy);
        c.record(&rome, at("2026-11-29T22:00:00Z"), interval, busy);
        c.record(&rome, at("2026-11-30T09:00:00Z"), interval, busy);
        c.ended(
            &rome,
            at("2026-11-30T09:00:00Z"),
            &Outcome::Exited(pilot_contract::PilotExit::RanJobs),
        );
        // Its pilot reported 12 jobs finished and one vacated, 0.2 CPU-hours of it lost.
        c.reported(
            &rome,
            at("2026-11-30T09:00:00Z"),
            Some(&pilot_contract::JobReport {
                jobs_started: 13,
                jobs_completed: 12,
                jobs_vacated: 1,
                job_seconds: 7200,
                job_cpu_seconds: 6840.0,
                vacated_cpu_seconds: 720.0,
            }),
        );
        let now = at("2026-12-02T12:00:00Z");
        let status = Status {
            pid: 7,
            updated_at: Some(now),
            instance: "default".into(),
            ..Status::default()
        };
        let mut view = view(status, rome.clone(), now);
        view.contribution = Summary::of(&c.ledger, &rome, now);
        let text = view.text();
        let from = text.find("what this machine gave:").expect(&text);
        let shown: Vec<&str> = text[from..].lines().take(15).map(str::trim).collect();
        assert_eq!(
            shown[..15],
            [
                "what this machine gave:",
                "This week (2026-W49):",
                "1.0 CPU-hours given",
                "2.0 h computing, 0.0 h paused",
                "2.0 h open to the pool",
                "0.0 h the owner was there",
                "workers: 1 ran jobs, 0 ended without a job, 0 evicted, 0 failed",
                "jobs: 12 finished, 1 vacated (0.2 CPU-hours of work lost); 1.9 CPU-hours in 2.0 job-hours",
                "All time (since 2026-11-29):",
                "3.0 CPU-hours given",
                "3.0 h computing, 0.0 h paused",
                "3.0 h open to the pool",
                "0.0 h the owner was there",
                "workers: 1 ran jobs, 0 ended without a job, 0 evicted, 0 failed",
                "jobs: 12 finished, 1 vacated (0.2 CPU-hours of work lost); 1.9 CPU-hours in 2.0 job-hours",
            ],
            "{text}"
        );
        let json: serde_json::Value = serde_json::to_value(&view).unwrap();
        let c = &json["contribution"];
        assert_eq!(c["week"], "2026-W49");
        assert_eq!(c["this_week"]["cpu_seconds"], 3600.0);
        assert_eq!(c["all_time"]["computing_s"], 3 * 3600);
        assert_eq!(c["all_time"]["ended"]["ran_jobs"], 1);
        // The jobs, beside the figures that were there before (added, nothing renamed).
        let jobs = &c["this_week"]["jobs"];
        assert_eq!(jobs["completed"], 12);
        assert_eq!(jobs["vacated"], 1);
        assert_eq!(jobs["vacated_cpu_seconds"], 720.0);
        assert_eq!(jobs["cpu_seconds"], 6840.0);
        assert_eq!(jobs["workers_reported"], 1);
        assert_eq!(jobs["workers_unreported"], 0);

        // Workers ended, none reported (an older pilot): said so, not "0 finished".
        let mut older = Contribution::new(Ledger::default());
        older.ended(
            &rome,
            now,
            &Outcome::Exited(pilot_contract::PilotExit::RanJobs),
        );
        older.reported(&rome, now, None);
        view.contribution = Summary::of(&older.ledger, &rome, now);
        let text = view.text();
        assert!(
            text.contains("    jobs: not known, the pilot did not report them (1 worker(s) ended without a report)\n"),
            "{text}"
        );

        view.contribution = Summary::of(&Ledger::default(), &rome, now);
        let text = view.text();
        assert!(
            text.contains(
                "  This week (2026-W49): nothing recorded yet\n  All time: nothing recorded yet\n"
            ),
            "{text}"
        );
    }

    /// A worker's line carries its scratch as measured against its share ("-" before the
    /// first measurement).
    /// The sensors and the cap in force, in text and (additive fields) in JSON; nothing of
    /// them where there is no sensor and no cap.
    #[test]
    fn the_machines_comfort_shows_its_sensors_and_the_cap_with_why() {
        use crate::decide::comfort::CpuCap;
        use crate::record::status::Decision;
        use crate::snapshot::Reading;
        let now = Utc::now();
        let plain = view(Status::default(), Zone::utc(), now);
        assert!(plain.comfort_lines().is_empty());
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("temperature").is_none() && json.get("fan").is_none());
        let status = Status {
            temperature: Some(Reading {
                sensor: "coretemp Package id 0".into(),
                value: 83.4,
            }),
            fan: Some(Reading {
                sensor: "thinkpad fan1".into(),
                value: 3100.0,
            }),
            decision: Some(Decision {
                at: now,
                allowed: true,
                workers: 1,
                cpus: 2,
                memory_mib: 1024,
                disk_kib: 1 << 20,
                gpus: 0,
                accept_until: None,
                die_at: None,
                evict: Evict::None,
                reasons: vec![],
                notes: vec![],
                next_change: None,
                cpu_cap: Some(CpuCap {
                    percent: 75,
                    quiet_millicpus: None,
                    per_worker_millicpus: 1500,
                    causes: vec!["temperature".into()],
                    reason: "temperature 83°C (coretemp Package id 0) over max_temperature 80°C: \
                             workers held to 75% of their CPUs"
                        .into(),
                }),
            }),
            ..Status::default()
        };
        let v = view(status, Zone::utc(), now);
        let text = v.text();
        for line in [
            "sensors: hottest CPU sensor 83°C (coretemp Package id 0); fastest fan 3100 rpm (thinkpad fan1)",
            "CPU cap: 1.50 CPU a worker: temperature 83°C (coretemp Package id 0) over max_temperature 80°C: workers held to 75% of their CPUs",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["temperature"]["value"], 83.4);
        assert_eq!(json["fan"]["sensor"], "thinkpad fan1");
        assert_eq!(json["decision"]["cpu_cap"]["per_worker_millicpus"], 1500);
        assert_eq!(json["decision"]["cpu_cap"]["causes"][0], "temperature");
    }

    #[test]
    fn a_workers_line_shows_its_scratch_against_its_share() {
        let now = Utc::now();
        // A digest and an age fill their columns, so "- -" can only be SCRATCH and LAST EXIT.
        let worker = |id: &str| Worker {
            created: Some(now),
            image_digest: "sha256:aa".into(),
            disk_kib: Some(1024 * 1024),
            ..Worker::test(id, WorkerState::Running)
        };
        let mut status = Status {
            pid: 7,
            updated_at: Some(now),
            ..Status::default()
        };
        status.scratch_use.insert(
            "a".into(),
            crate::worker::ScratchUse {
                used_kib: 300 * 1024,
                full: true,
            },
        );
        let mut view = view(status, Zone::utc(), now);
        view.workers = Some(vec![worker("a"), worker("b")]);
        let text = view.text();
        let line = |name: &str| {
            text.lines()
                .find(|l| l.contains(name))
                .unwrap_or_else(|| panic!("no line for {name} in {text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(text.contains("SCRATCH"), "{text}");
        assert!(
            line("pilotd-t-a").contains("FULL: 300MiB of 1GiB"),
            "{text}"
        );
        assert!(line("pilotd-t-b").contains(" - -"), "{text}");
    }
}
