//! `pilotd snapshot`: print the current observation as JSON (what `plan --snapshot` reads).

use super::{CmdError, block_on, load_config};
use crate::cli::Global;
use pilotd_core::config::{self, Config, ConfigError, Mode, Policy, SiteFile};
use pilotd_volunteer::observe::host::{Carry, HostProbe};
use pilotd_volunteer::settings::Settings;
use pilotd_volunteer::{act::backend, inspect};
use std::time::Duration;

pub fn run(g: &Global) -> Result<String, CmdError> {
    // The policy only names exclusive processes here; a host without one can still be observed.
    let cfg = match load_config(g, SiteFile::Optional, None) {
        Err(CmdError::Config(ConfigError::Read { path, .. }))
            if g.policy.as_ref().is_none_or(|p| *p != path) && path != g.config =>
        {
            let (site, site_path) = config::load_site(&g.config, SiteFile::Optional, super::MODES)?;
            Config {
                policy: Policy::defaults(config::local_timezone()),
                policy_path: site.policy.clone(),
                site,
                site_path,
            }
        }
        other => other?,
    };
    if cfg.site.mode == Mode::Kubernetes {
        return kubernetes_snapshot(&cfg);
    }
    // Own workers' CPU from their stats, so a snapshot replays the daemon's owner-load view.
    let s = Settings::resolve(&cfg);
    let own_cpu = block_on(async {
        let b = backend::connect(&s.engine).ok()?;
        inspect::own_cpu(&b, Duration::from_millis(500)).await
    })?;
    let carry = Carry {
        own_cpu: own_cpu.unwrap_or(0.0),
        ..Carry::default()
    };
    let mut snap = HostProbe::observe_once(&s.probe, carry)?;
    block_on(inspect::lay_on_logind(&mut snap, &s.state_dir, &s.probe))?;
    block_on(inspect::lay_on_link(&mut snap))?;
    inspect::lay_on_throttle(&mut snap, &s.state_dir);
    pilotd_volunteer::record::snooze::lay_on(&mut snap, &s.state_dir);
    serde_json::to_string_pretty(&snap)
        .map(|s| s + "\n")
        .map_err(|e| CmdError::Runtime(format!("cannot encode the snapshot: {e}")))
}

/// Kubernetes mode: the live observation of the pool and the namespace.
#[cfg(feature = "kubernetes")]
fn kubernetes_snapshot(cfg: &Config) -> Result<String, CmdError> {
    use pilotd_kubernetes::provisioner::live_snapshot;
    use pilotd_kubernetes::settings::Settings;
    let s = Settings::resolve(cfg)?;
    let snap = block_on(live_snapshot(&s, chrono::Utc::now()))??;
    Ok(serde_json::to_string_pretty(&snap)? + "\n")
}

#[cfg(not(feature = "kubernetes"))]
fn kubernetes_snapshot(_: &Config) -> Result<String, CmdError> {
    Err(super::without_kubernetes())
}
