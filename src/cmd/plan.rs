//! `pilotd plan`: observe (or replay a snapshot), decide, and print the decision and the
//! actions the next cycle would take. Acts on nothing.

use super::{CmdError, block_on, describe_sources, load_config, observe_once, parse_now};
use crate::cli::{Format, Global, PlanArgs};
use chrono::{DateTime, Utc};
use pilotd_core::config::{Config, Machine, Mode, SiteFile};
use pilotd_volunteer::backend;
use pilotd_volunteer::history::{self, History, Outlook};
use pilotd_volunteer::host::Carry;
use pilotd_volunteer::host::this_machine;
use pilotd_volunteer::inspect;
use pilotd_volunteer::manifest;
use pilotd_volunteer::policy::{self, Supply};
use pilotd_volunteer::settings::Settings;
use pilotd_volunteer::snapshot::HostSnapshot;
use pilotd_volunteer::snooze;
use pilotd_volunteer::status;
use serde::Serialize;
use std::path::Path;

/// The JSON printed by `plan --format json` in volunteer mode (a contract: README, "Reading a
/// decision").
#[derive(Debug, Serialize)]
pub struct VolunteerPlan {
    pub mode: &'static str,
    pub now: DateTime<Utc>,
    #[serde(flatten)]
    pub supply: Supply,
    pub actions: Vec<serde_json::Value>,
    /// Workers running or paused now (what an eviction acts on); null when the engine could
    /// not be asked.
    pub live_workers: Option<usize>,
    pub config: String,
}

pub fn run(g: &Global, a: &PlanArgs) -> Result<String, CmdError> {
    let now = parse_now(a.now.as_deref())?;
    let snap = match &a.snapshot {
        Some(path) => Some(read_snapshot(path)?),
        None => None,
    };
    // Check the policy's shares against the machine that was observed.
    let machine = snap.as_ref().map(|s| match s {
        Snapshot::Host(h) => Machine {
            cpus: h.cpus,
            memory_kib: h.memory_total_kib,
            gpus: None,
        },
        Snapshot::Cluster(_) => Machine {
            cpus: u32::MAX,
            memory_kib: u64::MAX / 1024,
            gpus: None,
        },
    });
    let cfg = load_config(g, SiteFile::Optional, machine.or_else(this_machine))?;
    match (cfg.site.mode, snap) {
        (Mode::Kubernetes, snap) => {
            if matches!(snap, Some(Snapshot::Host(_))) {
                return Err(CmdError::Usage(
                    "the snapshot is a volunteer-mode snapshot but pilotd.toml is in kubernetes mode".into(),
                ));
            }
            let cluster = match (snap, a.snapshot.as_deref()) {
                (Some(Snapshot::Cluster(text)), Some(path)) => Some((path, text)),
                _ => None,
            };
            kubernetes_plan(&cfg, cluster, now.unwrap_or_else(Utc::now), a.format)
        }
        (Mode::Volunteer, Some(Snapshot::Cluster(_))) => Err(CmdError::Usage(format!(
            "{} is a kubernetes-mode snapshot, but the configuration is in volunteer mode\n  hint: pass -c with a kubernetes-mode pilotd.toml",
            a.snapshot
                .as_deref()
                .map(Path::display)
                .map(|d| d.to_string())
                .unwrap_or_default()
        ))),
        (Mode::Volunteer, snap) => {
            let host = match snap {
                Some(Snapshot::Host(h)) => *h,
                _ => {
                    let s = Settings::resolve(&cfg);
                    let mut h = observe_once(&s.probe, Carry::default())?;
                    super::lay_on_logind(&mut h, &s.state_dir, &s.probe)?;
                    // The owner's snooze, as the daemon would lay it on this observation.
                    snooze::lay_on(&mut h, &s.state_dir);
                    h
                }
            };
            let now = now.unwrap_or(host.taken_at);
            let plan = volunteer_plan(&cfg, &host, now);
            Ok(match a.format {
                Format::Json => {
                    serde_json::to_string_pretty(&plan)
                        .map_err(|e| CmdError::Runtime(e.to_string()))?
                        + "\n"
                }
                Format::Text => render_text(&cfg, &plan),
            })
        }
    }
}

/// Kubernetes mode: decide from the replayed snapshot (path and text) or a live observation.
#[cfg(feature = "kubernetes")]
fn kubernetes_plan(
    cfg: &Config,
    snapshot: Option<(&Path, Vec<u8>)>,
    now: DateTime<Utc>,
    format: Format,
) -> Result<String, CmdError> {
    use pilotd_kubernetes::plan::decide;
    use pilotd_kubernetes::provisioner::live_snapshot;
    use pilotd_kubernetes::report;
    use pilotd_kubernetes::settings::Settings;
    use pilotd_kubernetes::snapshot::ClusterSnapshot;
    let s = Settings::resolve(cfg)?;
    let snap = match snapshot {
        Some((path, bytes)) => {
            ClusterSnapshot::from_json_bytes(&path.display().to_string(), &bytes)?
        }
        None => block_on(live_snapshot(&s, now))??,
    };
    let plan = decide(&snap, &s.plan, now).plan;
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(&plan)? + "\n",
        Format::Text => report::plan_text(&plan),
    })
}

#[cfg(not(feature = "kubernetes"))]
fn kubernetes_plan(
    _: &Config,
    _: Option<(&Path, Vec<u8>)>,
    _: DateTime<Utc>,
    _: Format,
) -> Result<String, CmdError> {
    Err(super::without_kubernetes())
}

pub fn volunteer_plan(cfg: &Config, host: &HostSnapshot, now: DateTime<Utc>) -> VolunteerPlan {
    let s = Settings::resolve(cfg);
    // The same prediction the daemon uses, when the site enabled it (`[history]
    // predict_die_at`); off by default, so replays depend only on the snapshot.
    let learned = if s.history.predict_die_at {
        history::peek(&s.state_dir, &s.policy.timezone).history
    } else {
        History::new(&s.policy.timezone)
    };
    let outlook = Outlook::at(&s, &learned, now);
    let mut supply = policy::decide(&s.policy, host, outlook.limits, now);
    // The actions the daemon's next cycle would take, from the workers the engine lists now
    // and the image the daemon last resolved (read-only: nothing is pulled or resolved here
    // beyond what the status file lacks). Without the engine there is no worker list, and
    // the output says so instead of planning from an empty one.
    let status = status::load(&status::path(&s.state_dir))
        .ok()
        .flatten()
        .unwrap_or_default();
    // The daemon's template: pilotd.toml's [worker] with the manifest it stored laid on.
    let template = manifest::stored_template(&s);
    if let Some(e) = &template.refused {
        supply.reasons.push(format!(
            "{e}; planned with pilotd.toml's own worker settings, as the daemon starts workers"
        ));
    }
    let next = block_on(async {
        let b = backend::connect(&s.engine)?;
        let recorded = (&status.image, &status.backoff);
        inspect::next_plan(&b, &s, &template.worker, recorded, &supply, now).await
    })
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()));
    let live_workers = next.as_ref().ok().map(|(_, live)| *live);
    let actions = match next {
        Ok((plan, _)) => plan
            .actions
            .iter()
            .map(|a| {
                let mut v = serde_json::to_value(a).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("summary".into(), a.to_string().into());
                }
                v
            })
            .chain(
                plan.notes
                    .into_iter()
                    .map(|n| serde_json::json!({ "action": "none", "summary": n })),
            )
            .collect(),
        Err(why) => {
            supply
                .reasons
                .push(format!("workers unknown, no actions planned: {why}"));
            vec![]
        }
    };
    VolunteerPlan {
        mode: "volunteer",
        now,
        supply,
        actions,
        live_workers,
        config: describe_sources(cfg),
    }
}

/// A snapshot file: the mode field says which kind. A cluster snapshot (possibly 100,000
/// jobs) is kept as text and parsed once, by the kubernetes-mode replay.
pub enum Snapshot {
    /// Boxed: a host snapshot is ten times a cluster snapshot's bytes.
    Host(Box<HostSnapshot>),
    Cluster(Vec<u8>),
}

/// Only the `mode` of a snapshot; serde skips everything else without building it.
#[derive(serde::Deserialize)]
struct ModeOnly {
    mode: Option<String>,
}

/// The `mode` of a snapshot whose first key it is, as `pilotd snapshot` writes it, read
/// without a pass over the rest (tens of MB for a cluster). Anything else (another key
/// first, an escaped value) is `None`, and the caller reads the whole file for it; a second
/// `mode` further on is still refused, by the full parse that follows.
fn leading_mode(src: &[u8]) -> Option<&str> {
    let ws = |b: &&u8| b.is_ascii_whitespace();
    let mut rest = src;
    for token in [&b"{"[..], b"\"mode\"", b":", b"\""] {
        let skip = rest.iter().take_while(ws).count();
        rest = rest[skip..].strip_prefix(token)?;
    }
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"')
        .then(|| std::str::from_utf8(&rest[..end]).ok())
        .flatten()
}

/// Reads a snapshot file; errors name the file, line and column.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, CmdError> {
    // Bytes, not a String: a kubernetes snapshot is tens of MB, and serde_json checks the
    // UTF-8 of the strings it keeps without a separate pass over the file.
    let src = std::fs::read(path).map_err(|e| {
        CmdError::Usage(format!(
            "cannot read {}: {e}\n  hint: write one with `pilotd snapshot > FILE`",
            path.display()
        ))
    })?;
    let located = |e: serde_json::Error| {
        CmdError::Usage(format!(
            "{}:{}:{}: {}\n  hint: the format is what `pilotd snapshot` prints (README.md, \"Snapshot files\")",
            path.display(),
            e.line(),
            e.column(),
            e
        ))
    };
    let mode = match leading_mode(&src) {
        Some(m) => Some(m.to_string()),
        None => {
            serde_json::from_slice::<ModeOnly>(&src)
                .map_err(located)?
                .mode
        }
    };
    match mode.as_deref() {
        Some("volunteer") => serde_json::from_slice::<HostSnapshot>(&src)
            .map(|h| Snapshot::Host(Box::new(h)))
            .map_err(located),
        Some("kubernetes") => Ok(Snapshot::Cluster(src)),
        other => Err(CmdError::Usage(format!(
            "{}: `mode` is {}, expected \"volunteer\" or \"kubernetes\"",
            path.display(),
            other
                .map(|m| format!("\"{m}\""))
                .unwrap_or_else(|| "missing".into())
        ))),
    }
}

fn render_text(cfg: &Config, p: &VolunteerPlan) -> String {
    use std::fmt::Write;
    let tz = &cfg.policy.timezone;
    let local = |t: DateTime<Utc>| {
        t.with_timezone(tz)
            .format("%a %Y-%m-%d %H:%M %Z")
            .to_string()
    };
    let s = &p.supply;
    let mut out = String::new();
    let _ = writeln!(out, "{}", p.config);
    let _ = writeln!(out, "now: {}", local(p.now));
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
    for line in limit_lines(s, p.now, p.live_workers, local) {
        let _ = writeln!(out, "{line}");
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
    if p.actions.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for a in &p.actions {
        // Each action carries a one-line `summary`; fall back to the JSON for anything else.
        match a.get("summary").and_then(|v| v.as_str()) {
            Some(line) => {
                let _ = writeln!(out, "  - {line}");
            }
            None => {
                let _ = writeln!(out, "  - {a}");
            }
        }
    }
    out
}

/// What the decision means for running workers and for new jobs, in lines that are true at
/// `now`: an instant already past is never shown as a limit to come, and no eviction is
/// announced when nothing runs (`live`: workers running or paused; `None` when unknown).
pub fn limit_lines(
    s: &Supply,
    now: DateTime<Utc>,
    live: Option<usize>,
    local: impl Fn(DateTime<Utc>) -> String,
) -> Vec<String> {
    use pilotd_core::config::Evict;
    use pilotd_core::config::units::format_duration;
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
    use pilotd_core::config::Evict;
    use pilotd_volunteer::policy::Resources;

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

    #[test]
    fn the_leading_mode_is_read_only_when_it_is_unambiguous() {
        let table: [(&str, Option<&str>); 8] = [
            (r#"{"mode":"kubernetes","jobs":[]}"#, Some("kubernetes")),
            ("{\n  \"mode\" : \"volunteer\",\n", Some("volunteer")),
            (r#"{"mode":"other"}"#, Some("other")),
            // Anything else is left to the full parse.
            (r#"{"taken_at":"x","mode":"kubernetes"}"#, None),
            (r#"{"mode":"kube\u0072netes"}"#, None),
            (r#"{"mode":null}"#, None),
            (r#"{"mode":"kubernetes"#, None),
            ("", None),
        ];
        for (src, want) in table {
            assert_eq!(leading_mode(src.as_bytes()), want, "{src}");
        }
    }
}
