//! `pilotd plan`: observe (or replay a snapshot), decide, and print the decision and the
//! actions the next cycle would take (`volunteer::decide::plan::report`, `kubernetes::report`). Acts
//! on nothing.

use super::{CmdError, block_on, describe_sources, load_config, parse_now};
use crate::cli::{Format, Global, PlanArgs};
use chrono::{DateTime, Utc};
use pilotd_core::config::{Config, Machine, Mode, SiteFile};
use pilotd_volunteer::observe::host::{Carry, HostProbe, this_machine};
use pilotd_volunteer::settings::Settings;
use pilotd_volunteer::snapshot::{self, SnapshotFile};
use pilotd_volunteer::{inspect, record::snooze};
use std::path::Path;

pub fn run(g: &Global, a: &PlanArgs) -> Result<String, CmdError> {
    let now = parse_now(a.now.as_deref())?;
    let snap = match &a.snapshot {
        Some(path) => Some(snapshot::read_file(path).map_err(|e| CmdError::Usage(e.to_string()))?),
        None => None,
    };
    // Check the policy's shares against the machine that was observed.
    let machine = snap.as_ref().map(|s| match s {
        SnapshotFile::Host(h) => Machine {
            cpus: h.cpus,
            memory_kib: h.memory_total_kib,
            gpus: None,
        },
        SnapshotFile::Cluster(_) => Machine {
            cpus: u32::MAX,
            memory_kib: u64::MAX / 1024,
            gpus: None,
        },
    });
    let cfg = load_config(g, SiteFile::Optional, machine.or_else(this_machine))?;
    match (cfg.site.mode, snap) {
        (Mode::Kubernetes, snap) => {
            if matches!(snap, Some(SnapshotFile::Host(_))) {
                return Err(CmdError::Usage(
                    "the snapshot is a volunteer-mode snapshot but pilotd.toml is in kubernetes mode".into(),
                ));
            }
            let cluster = match (snap, a.snapshot.as_deref()) {
                (Some(SnapshotFile::Cluster(text)), Some(path)) => Some((path, text)),
                _ => None,
            };
            kubernetes_plan(&cfg, cluster, now, a.format)
        }
        (Mode::Volunteer, Some(SnapshotFile::Cluster(_))) => Err(CmdError::Usage(format!(
            "{} is a kubernetes-mode snapshot, but the configuration is in volunteer mode\n  hint: pass -c with a kubernetes-mode pilotd.toml",
            a.snapshot.as_deref().unwrap_or(Path::new("")).display()
        ))),
        (Mode::Volunteer, snap) => {
            let s = Settings::resolve(&cfg);
            let host = match snap {
                Some(SnapshotFile::Host(h)) => *h,
                _ => {
                    let mut h = HostProbe::observe_once(&s.probe, Carry::default())?;
                    block_on(inspect::lay_on_logind(&mut h, &s.state_dir, &s.probe))?;
                    block_on(inspect::lay_on_link(&mut h))?;
                    inspect::lay_on_throttle(&mut h, &s.state_dir);
                    // The owner's snooze, as the daemon would lay it on this observation.
                    snooze::lay_on(&mut h, &s.state_dir);
                    h
                }
            };
            let now = now.unwrap_or(host.taken_at);
            let report = block_on(inspect::plan_report(&s, &host, describe_sources(&cfg), now))?;
            Ok(match a.format {
                Format::Json => serde_json::to_string_pretty(&report)? + "\n",
                Format::Text => report.text(&cfg.policy.timezone),
            })
        }
    }
}

/// Kubernetes mode: decide from the replayed snapshot (path and text) or a live observation,
/// at `now`, or else at the snapshot's own time (a replay is deterministic) or the clock's.
#[cfg(feature = "kubernetes")]
fn kubernetes_plan(
    cfg: &Config,
    snapshot: Option<(&Path, Vec<u8>)>,
    now: Option<DateTime<Utc>>,
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
        None => block_on(live_snapshot(&s, now.unwrap_or_else(Utc::now)))??,
    };
    let now = now.unwrap_or(snap.taken_at);
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
    _: Option<DateTime<Utc>>,
    _: Format,
) -> Result<String, CmdError> {
    Err(super::without_kubernetes())
}
