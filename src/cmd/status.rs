//! `pilotd status [--format text|json]`: the workers now (from the engine when it answers,
//! else as the daemon last saw them — said so), the last decision with its reasons, the
//! back-off, the image, and the last outcomes. Reads the daemon's status file and the state
//! dir once (`volunteer::record::status::view`); no IPC.

use super::{CmdError, block_on, load_config};
use crate::cli::{Format, Global, StatusArgs};
use chrono::Utc;
use pilotd_core::config::{Mode, SiteFile};
use pilotd_volunteer::inspect;
use pilotd_volunteer::settings::Settings;

pub fn run(g: &Global, a: &StatusArgs) -> Result<String, CmdError> {
    let cfg = load_config(g, SiteFile::Optional, None)?;
    if cfg.site.mode == Mode::Kubernetes {
        return kubernetes_status(&cfg, a.format);
    }
    let s = Settings::resolve(&cfg);
    let view = block_on(inspect::status_view(
        &s,
        super::describe_sources(&cfg),
        Utc::now(),
    ))?
    .map_err(|e| CmdError::Runtime(e.to_string()))?;
    match a.format {
        Format::Json => serde_json::to_string_pretty(&view)
            .map(|s| s + "\n")
            .map_err(|e| CmdError::Runtime(e.to_string())),
        Format::Text => Ok(view.text()),
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
