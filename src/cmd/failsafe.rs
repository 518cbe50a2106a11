//! `pilotd failsafe`: protects the owner when the daemon is gone (`volunteer::act::failsafe`).
//!
//! - `pilotd failsafe` is the unit's `ExecStopPost=`. systemd tells it how the daemon ended in
//!   `SERVICE_RESULT` (and `EXIT_CODE`, `EXIT_STATUS`). After a clean stop (`success`) it does
//!   nothing: workers follow `[worker] on_shutdown`. After anything else it pauses every
//!   running worker of this instance. Without `SERVICE_RESULT` (run by hand) it pauses too.
//! - `pilotd failsafe --remove` stops (SIGTERM, then SIGKILL after `--grace`) and deletes
//!   every worker of this instance, and their scratch dirs, whatever `SERVICE_RESULT` says:
//!   the package's `prerm` runs it when pilotd is removed.
//!
//! The instance and the socket come from pilotd.toml; when that file cannot be read or is
//! invalid, from the built-in socket and the instance the last daemon recorded in its status
//! file, because a broken pilotd.toml must not leave workers running unsupervised.

use super::{CmdError, block_on};
use crate::cli::{FailsafeArgs, Global};
use pilotd_core::config::{self, Mode, SiteConfig, SiteFile};
use pilotd_volunteer::act::failsafe::{self, Order, ServiceEnd};
use pilotd_volunteer::record::status;
use pilotd_volunteer::settings::{EngineSettings, WorkerSettings};
use std::path::Path;

pub fn run(g: &Global, a: &FailsafeArgs) -> Result<String, CmdError> {
    let end = ServiceEnd::from_env();
    if !a.remove && end.is_clean() {
        return Ok(failsafe::after_clean_stop(&end));
    }
    let (site, note) = site_or_fallback(&g.config);
    if site.mode == Mode::Kubernetes {
        return Ok(
            "failsafe: kubernetes mode: worker pods are the cluster's, nothing to do\n".into(),
        );
    }
    let note = note.map(|n| format!("failsafe: {n}\n")).unwrap_or_default();
    let order = if a.remove {
        Order::Remove { grace: a.grace }
    } else {
        Order::Pause
    };
    let (settings, engine) = (
        WorkerSettings::of_site(&site),
        EngineSettings::of_site(&site),
    );
    match block_on(failsafe::protect(&engine, &settings, &end, order))? {
        Ok(done) => Ok(note + &done),
        Err(e) => Err(CmdError::Failsafe {
            note,
            source: Box::new(e),
        }),
    }
}

/// pilotd.toml, or what is needed to find this instance's workers without it.
fn site_or_fallback(path: &Path) -> (SiteConfig, Option<String>) {
    match config::load_site(path, SiteFile::Optional, super::MODES) {
        Ok((site, _)) => (site, None),
        Err(e) => {
            let mut site = SiteConfig::defaults();
            let recorded = status::load(&status::path(&site.state_dir))
                .ok()
                .flatten()
                .map(|s| s.instance)
                .filter(|i| config::site::valid_instance(i));
            if let Some(i) = recorded {
                site.docker.instance = toml::Spanned::new(0..0, i);
            }
            let note = format!(
                "{e}\nfailsafe: using the built-in socket {} and instance \"{}\" (the last daemon's)",
                site.docker.socket,
                site.docker.instance.get_ref()
            );
            (site, Some(note))
        }
    }
}
