//! `pilotd check`: validate pilotd.toml and the policy (like `sshd -t`).

use super::{CmdError, load_config};
use crate::cli::Global;
use crate::config::{Mode, SiteFile};
use crate::volunteer::host::this_machine;

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
    Ok(format!("{site}\n{policy}\n"))
}
