//! `pilotd check`: validate pilotd.toml and the policy (like `sshd -t`).

use super::{CmdError, load_config};
use crate::cli::Global;
use pilotd_core::config::diag::line_col;
use pilotd_core::config::{MAX_FILE_BYTES, Mode, SiteFile, read_bounded};
use pilotd_volunteer::observe::host::this_machine;
use pilotd_volunteer::record::manifest::{self, ManifestError};
use pilotd_volunteer::settings::Settings;
use std::fmt::Write as _;

pub fn run(g: &Global) -> Result<String, CmdError> {
    let cfg = load_config(g, SiteFile::Optional, this_machine())?;
    let site = match &cfg.site_path {
        Some(p) => format!("{}: ok", p.display()),
        None => format!(
            "{}: not found, using built-in defaults (volunteer mode)",
            g.config.display()
        ),
    };
    let policy = if cfg.site.mode == Mode::Kubernetes && g.policy.is_none() {
        "kubernetes mode: no owner policy is used".to_string()
    } else {
        format!("{}: ok", cfg.policy_path.display())
    };
    let mut out = format!("{site}\n{policy}\n");
    // Warnings name the place in the file as errors do, and refuse nothing.
    if let Some(path) = &cfg.site_path {
        let warnings = cfg.site.warnings();
        if !warnings.is_empty() {
            let src = read_bounded(path, MAX_FILE_BYTES)?;
            for (span, message, hint) in warnings {
                let (line, col) = line_col(&src, span.start);
                let _ = writeln!(
                    out,
                    "{}:{line}:{col}: warning: {message}\n  hint: {hint}",
                    path.display()
                );
            }
        }
    }
    // The stored manifest, held to the rule a fetch is (the daemon refuses it at start).
    if cfg.site.mode == Mode::Volunteer && cfg.site.remote.url.is_some() {
        let s = Settings::resolve(&cfg);
        // Absent, or not readable by this user (the state dir is root's): nothing to say.
        if let Err(e @ (ManifestError::Refused { .. } | ManifestError::Invalid { .. })) =
            manifest::load_checked(&s.state_dir, &s.image.allowed, &s.worker.env)
        {
            let _ = writeln!(
                out,
                "warning: {e}\n  hint: the daemon does not use it and waits for a manifest that passes"
            );
        }
    }
    Ok(out)
}
