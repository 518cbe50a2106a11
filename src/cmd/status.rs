//! `pilotd status [--format text|json]`: the workers now (from the engine when it answers,
//! else as the daemon last saw them — said so), the last decision with its reasons, the
//! back-off, the image, and the last outcomes. Reads the daemon's status file; no IPC.

use super::{CmdError, block_on, load_config};
use crate::cli::{Format, Global, StatusArgs};
use chrono::{DateTime, Utc};
use pilotd_core::config::{Mode, SiteFile};
use pilotd_volunteer::settings::Settings;
use pilotd_volunteer::status as state;
use pilotd_volunteer::worker::{Worker, WorkerState};
use pilotd_volunteer::{backend, inspect};
use pilotd_volunteer::{contribution, history, manifest};
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, Serialize)]
struct StatusView<'a> {
    daemon_running: bool,
    pid: u32,
    updated_at: Option<DateTime<Utc>>,
    instance: &'a str,
    /// "engine" (listed now) or "status file" (the daemon's last cycle) or "unknown".
    workers_from: &'static str,
    workers: Option<Vec<Worker>>,
    workers_error: Option<String>,
    /// Where the configuration in force came from.
    config: String,
    /// The pool's manifest in force, if one is configured.
    manifest: Option<ManifestView>,
    history: Option<HistoryView>,
    /// What the machine gave: this week and all time (`volunteer::contribution`).
    contribution: contribution::Summary,
    /// Why the contribution ledger cannot be read, when it cannot (counting starts over).
    #[serde(skip_serializing_if = "Option::is_none")]
    contribution_unreadable: Option<String>,
    /// The owner's snooze in force (`pilotd snooze`), if any.
    snooze: Option<pilotd_volunteer::snooze::Snooze>,
    /// Why the owner's snooze cannot be read, when it cannot: counted as snoozed.
    #[serde(skip_serializing_if = "Option::is_none")]
    snooze_unreadable: Option<String>,
    /// The rest of the daemon's status file, without the keys above: one JSON object must not
    /// name a key twice (parsers keep one of them, and `workers` is the live list here).
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
    #[serde(skip)]
    status: &'a state::Status,
}

/// The status file's fields that the view does not already give.
fn rest_of(status: &state::Status) -> Result<serde_json::Map<String, serde_json::Value>, CmdError> {
    let serde_json::Value::Object(mut m) =
        serde_json::to_value(status).map_err(|e| CmdError::Runtime(e.to_string()))?
    else {
        return Err(CmdError::Runtime("the status is not a JSON object".into()));
    };
    for key in ["pid", "updated_at", "instance", "workers"] {
        m.remove(key);
    }
    Ok(m)
}

#[derive(Debug, Serialize)]
struct ManifestView {
    url: String,
    /// None until one has been fetched and accepted.
    version: Option<String>,
}

#[derive(Debug, Serialize)]
struct HistoryView {
    since: Option<DateTime<Utc>>,
    /// Share of the watched time the owner was away and the host free.
    free_fraction: f64,
    /// How long the host is usually free from now.
    likely_free_hours: i64,
}

pub fn run(g: &Global, a: &StatusArgs) -> Result<String, CmdError> {
    let cfg = load_config(g, SiteFile::Optional, None)?;
    if cfg.site.mode == Mode::Kubernetes {
        return kubernetes_status(&cfg, a.format);
    }
    let s = Settings::resolve(&cfg);
    let path = state::path(&s.state_dir);
    let status = state::load(&path)
        .map_err(|e| CmdError::Runtime(e.to_string()))?
        .unwrap_or_else(|| state::Status {
            instance: s.engine.instance.clone(),
            ..Default::default()
        });
    let now = Utc::now();
    // Alive: the pid exists and the file was written recently (an unchanged status is
    // rewritten only every `HEARTBEAT`).
    let stale_after = pilotd_core::horizon::delta(
        s.interval
            .saturating_mul(3)
            .max(state::HEARTBEAT)
            .saturating_add(std::time::Duration::from_secs(60)),
    );
    let running = status.pid > 0
        && nix::sys::signal::kill(nix::unistd::Pid::from_raw(status.pid as i32), None).is_ok()
        && status.updated_at.is_some_and(|t| now - t <= stale_after);

    let live = block_on(async {
        let b = backend::connect(&s.engine)?;
        inspect::workers(&b, &s.engine.socket).await
    })
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()));
    let (workers_from, workers, workers_error) = match live {
        Ok(w) => ("engine", Some(w), None),
        Err(e) if status.workers.is_some() => ("status file", status.workers.clone(), Some(e)),
        Err(e) => ("unknown", None, Some(e)),
    };
    let manifest = s.remote.as_ref().map(|r| ManifestView {
        // Shown to whoever runs `status`: never the URL's credentials.
        url: redact::credentials(&r.url).into_owned(),
        version: manifest::load_last_good(&s.state_dir)
            .ok()
            .flatten()
            .map(|m| m.version),
    });
    let learned = history::peek(&s.state_dir, &s.policy.timezone).history;
    let history = learned.overall().map(|free_fraction| HistoryView {
        since: learned.since,
        free_fraction,
        likely_free_hours: learned
            .likely_free_for(&s.policy.timezone, now, s.history.free_threshold)
            .num_hours(),
    });
    let ledger = contribution::peek(&s.state_dir);
    let given = contribution::Summary::of(&ledger.ledger, &s.policy.timezone, now);
    let snooze = pilotd_volunteer::snooze::active(&s.state_dir, now);
    let view = StatusView {
        contribution: given,
        contribution_unreadable: ledger.warning,
        config: super::describe_sources(&cfg),
        manifest,
        history,
        daemon_running: running,
        snooze: snooze.as_ref().ok().cloned().flatten(),
        snooze_unreadable: snooze.as_ref().err().map(ToString::to_string),
        pid: status.pid,
        updated_at: status.updated_at,
        instance: &status.instance,
        workers_from,
        workers,
        workers_error,
        rest: rest_of(&status)?,
        status: &status,
    };
    match a.format {
        Format::Json => serde_json::to_string_pretty(&view)
            .map(|s| s + "\n")
            .map_err(|e| CmdError::Runtime(e.to_string())),
        Format::Text => Ok(render(&view, now, &path, &s.policy.timezone)),
    }
}

/// Kubernetes mode: the live table by shape, with back-off.
#[cfg(feature = "kubernetes")]
fn kubernetes_status(
    cfg: &pilotd_core::config::Config,
    format: Format,
) -> Result<String, CmdError> {
    use pilotd_kubernetes::plan::decide;
    use pilotd_kubernetes::provisioner::live_snapshot;
    use pilotd_kubernetes::report;
    use pilotd_kubernetes::settings::Settings as KubernetesSettings;
    let s = KubernetesSettings::resolve(cfg)?;
    let now = Utc::now();
    let snap = block_on(live_snapshot(&s, now))??;
    let plan = decide(&snap, &s.plan, now).plan;
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(&report::status_json(&plan))? + "\n",
        Format::Text => report::status_text(&plan),
    })
}

#[cfg(not(feature = "kubernetes"))]
fn kubernetes_status(_: &pilotd_core::config::Config, _: Format) -> Result<String, CmdError> {
    Err(super::without_kubernetes())
}

fn ago(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    human(now - t)
}

fn human(d: chrono::Duration) -> String {
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

fn short_digest(d: &str) -> &str {
    let d = d.strip_prefix("sha256:").unwrap_or(d);
    d.get(..12).unwrap_or(d)
}

fn render(
    v: &StatusView<'_>,
    now: DateTime<Utc>,
    path: &std::path::Path,
    tz: &pilotd_core::zone::Zone,
) -> String {
    let s = v.status;
    let mut out = String::new();
    let _ = match (v.daemon_running, s.updated_at) {
        (true, Some(t)) => writeln!(
            out,
            "pilotd: running (pid {}), last cycle {} ago; instance {}",
            v.pid,
            ago(now, t),
            v.instance
        ),
        (false, Some(t)) => writeln!(
            out,
            "pilotd: NOT RUNNING (last cycle {} ago, pid {}); instance {}",
            ago(now, t),
            v.pid,
            v.instance
        ),
        (_, None) => writeln!(
            out,
            "pilotd: no status yet ({} does not exist); instance {}",
            path.display(),
            v.instance
        ),
    };
    let _ = writeln!(out, "{}", v.config);
    if let Some(z) = &v.snooze {
        let _ = writeln!(
            out,
            "SNOOZED by {} until {} (`pilotd resume` ends it)",
            z.by,
            z.until.format("%Y-%m-%d %H:%M UTC")
        );
    }
    if let Some(why) = &v.snooze_unreadable {
        let _ = writeln!(
            out,
            "SNOOZED: {why}; counted as snoozed until it can be read (`pilotd resume` removes it)"
        );
    }
    if let Some(m) = &v.manifest {
        let _ = writeln!(
            out,
            "pool manifest: {} from {}",
            m.version
                .as_deref()
                .map_or("none accepted yet".to_string(), |v| format!("version {v}")),
            m.url
        );
    }
    if let Some(e) = &s.engine {
        let _ = writeln!(out, "engine: {e}");
    }
    if let Some(e) = &s.last_error {
        let _ = writeln!(out, "last cycle's problem: {e}");
    }
    let live = v.workers.as_ref().map(|list| {
        list.iter()
            .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused))
            .count()
    });
    if let Some(d) = &s.decision {
        let verdict = if d.allowed {
            format!(
                "COMPUTE: {} worker(s) of {} CPU, {} MiB",
                d.workers, d.cpus, d.memory_mib
            )
        } else {
            "DO NOT START workers".into()
        };
        let _ = writeln!(
            out,
            "decision ({} ago): {verdict}; running workers: {}",
            ago(now, d.at),
            match (d.evict, live) {
                // No eviction is announced when nothing runs.
                (_, Some(0)) => "none".to_string(),
                (pilotd_core::config::Evict::None, _) => "keep".to_string(),
                (e, _) => format!("evict ({})", e.as_str()),
            }
        );
        for r in d.reasons.iter().chain(&d.notes) {
            let _ = writeln!(out, "  - {r}");
        }
    }
    let _ = writeln!(out, "workers (from the {}):", v.workers_from);
    if let Some(e) = &v.workers_error {
        let _ = writeln!(out, "  (cannot list them now: {e})");
    }
    match &v.workers {
        None => {
            let _ = writeln!(out, "  unknown");
        }
        Some(list) if list.is_empty() => {
            let _ = writeln!(out, "  none");
        }
        Some(list) => {
            let _ = writeln!(
                out,
                "  {:<40} {:<8} {:>7} {:>9} {:<12} {:<20} LAST EXIT",
                "NAME", "STATE", "AGE", "EXPIRES", "IMAGE", "SCRATCH"
            );
            for w in list {
                let exit = match (w.state, w.exit_code) {
                    (WorkerState::Exited | WorkerState::Dead, Some(c)) => {
                        pilotd_volunteer::outcome::Outcome::from_exit(Some(c), w.oom_killed)
                            .to_string()
                    }
                    _ => "-".into(),
                };
                // Measured beside the loop, by worker id; "-" until the first measurement.
                let scratch = v
                    .status
                    .scratch_use
                    .get(&w.id)
                    .map(|u| u.describe(w.disk_kib))
                    .unwrap_or_else(|| "-".into());
                let _ = writeln!(
                    out,
                    "  {:<40} {:<8} {:>7} {:>9} {:<12} {scratch:<20} {exit}",
                    w.name,
                    w.state.as_str(),
                    w.created.map(|c| ago(now, c)).unwrap_or_else(|| "?".into()),
                    w.die_at
                        .map(|d| human(d - now))
                        .unwrap_or_else(|| "-".into()),
                    short_digest(&w.image_digest),
                );
            }
        }
    }
    let b = &s.backoff;
    let _ = match b.not_before.filter(|t| *t > now) {
        Some(t) => writeln!(
            out,
            "back-off: {} failure(s); next start in {}{}",
            b.failures,
            human(t - now),
            b.last_outcome
                .as_ref()
                .map(|o| format!(" (last: {o})"))
                .unwrap_or_default()
        ),
        None if b.failures > 0 => writeln!(out, "back-off: {} failure(s), delay over", b.failures),
        None => writeln!(out, "back-off: none"),
    };
    let img = &s.image;
    if !img.reference.is_empty() {
        let _ = writeln!(
            out,
            "image: {} -> {} (confirmed {}){}",
            img.reference,
            img.digest.as_deref().map(short_digest).unwrap_or("unknown"),
            img.verified_at
                .map(|t| format!("{} ago", ago(now, t)))
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
    if let Some(h) = &v.history {
        let _ = writeln!(
            out,
            "learned availability: free {:.0}% of the watched time{}; usually free for {}h from now",
            h.free_fraction * 100.0,
            h.since
                .map(|t| format!(" since {}", t.format("%Y-%m-%d")))
                .unwrap_or_default(),
            h.likely_free_hours
        );
    }
    let _ = writeln!(out, "what this machine gave:");
    if let Some(why) = &v.contribution_unreadable {
        let _ = writeln!(out, "  ({why})");
    }
    for (heading, lines) in v.contribution.sections(tz) {
        match lines.as_slice() {
            [one] => writeln!(out, "  {heading}: {one}"),
            _ => writeln!(out, "  {heading}:\n    {}", lines.join("\n    ")),
        }
        .unwrap_or_default();
    }
    if !s.outcomes.is_empty() {
        let _ = writeln!(out, "recent outcomes:");
        for o in s.outcomes.iter().rev().take(5) {
            let _ = writeln!(out, "  {} ago {}: {}", ago(now, o.at), o.name, o.outcome);
            // The last lines say why; the status file keeps more (`--format json`).
            for line in &o.output[o.output.len().saturating_sub(10)..] {
                let _ = writeln!(out, "    | {line}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of `status --format json` once: the view's own fields (the live worker list
    /// among them) and the status file's other fields.
    #[test]
    fn the_json_view_names_each_key_once() {
        let status = state::Status {
            pid: 7,
            workers: Some(vec![]),
            ..state::Status::default()
        };
        let view = StatusView {
            daemon_running: false,
            pid: status.pid,
            updated_at: status.updated_at,
            instance: &status.instance,
            workers_from: "unknown",
            workers: None,
            workers_error: None,
            config: String::new(),
            manifest: None,
            history: None,
            contribution: contribution::Summary::of(
                &contribution::Ledger::default(),
                &pilotd_core::zone::Zone::utc(),
                Utc::now(),
            ),
            contribution_unreadable: None,
            snooze: None,
            snooze_unreadable: None,
            rest: rest_of(&status).unwrap(),
            status: &status,
        };
        let text = serde_json::to_string(&view).unwrap();
        let Keys(keys) = serde_json::from_str(&text).unwrap();
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "a key twice in {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The live list (None here), not the status file's empty one.
        assert!(v["workers"].is_null(), "{text}");
    }

    /// What the machine gave: this week and all time, in text and JSON, and plainly
    /// "nothing recorded yet" before the first cycle counted anything.
    #[test]
    fn what_the_machine_gave_shows_this_week_and_all_time() {
        use pilotd_volunteer::contribution::{Contribution, Ledger, Observed};
        let rome = pilotd_core::zone::Zone::named("Europe/Rome").unwrap();
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
            &pilotd_volunteer::outcome::Outcome::Exited(pilot_contract::PilotExit::RanJobs),
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
        let status = state::Status::default();
        let mut view = StatusView {
            daemon_running: true,
            pid: 7,
            updated_at: Some(now),
            instance: "default",
            workers_from: "engine",
            workers: Some(vec![]),
            workers_error: None,
            config: String::new(),
            manifest: None,
            history: None,
            contribution: contribution::Summary::of(&c.ledger, &rome, now),
            contribution_unreadable: None,
            snooze: None,
            snooze_unreadable: None,
            rest: serde_json::Map::new(),
            status: &status,
        };
        let path = std::path::Path::new("/nonexistent");
        let text = render(&view, now, path, &rome);
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
            &pilotd_volunteer::outcome::Outcome::Exited(pilot_contract::PilotExit::RanJobs),
        );
        older.reported(&rome, now, None);
        view.contribution = contribution::Summary::of(&older.ledger, &rome, now);
        let text = render(&view, now, path, &rome);
        assert!(
            text.contains("    jobs: not known, the pilot did not report them (1 worker(s) ended without a report)\n"),
            "{text}"
        );

        view.contribution = contribution::Summary::of(&Ledger::default(), &rome, now);
        let text = render(&view, now, path, &rome);
        assert!(
            text.contains(
                "  This week (2026-W49): nothing recorded yet\n  All time: nothing recorded yet\n"
            ),
            "{text}"
        );
    }

    /// A worker's line carries its scratch as measured against its share ("-" before the
    /// first measurement).
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
        let mut status = state::Status::default();
        status.scratch_use.insert(
            "a".into(),
            pilotd_volunteer::disk::ScratchUse {
                used_kib: 300 * 1024,
                full: true,
            },
        );
        let view = StatusView {
            daemon_running: true,
            pid: 7,
            updated_at: Some(now),
            instance: "default",
            workers_from: "engine",
            workers: Some(vec![worker("a"), worker("b")]),
            workers_error: None,
            config: String::new(),
            manifest: None,
            history: None,
            contribution: contribution::Summary::of(
                &contribution::Ledger::default(),
                &pilotd_core::zone::Zone::utc(),
                Utc::now(),
            ),
            contribution_unreadable: None,
            snooze: None,
            snooze_unreadable: None,
            rest: serde_json::Map::new(),
            status: &status,
        };
        let text = render(
            &view,
            now,
            std::path::Path::new("/nonexistent"),
            &pilotd_core::zone::Zone::utc(),
        );
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

    /// The top-level keys of a JSON object in order, repeats included (a `Value` would keep
    /// only one of each).
    struct Keys(Vec<String>);

    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Keys, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut m: A,
                ) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some(k) = m.next_key::<String>()? {
                        m.next_value::<serde::de::IgnoredAny>()?;
                        keys.push(k);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(V)
        }
    }
}
