//! `pilotd snapshot`: print the current observation as JSON (what `plan --snapshot` reads).

use super::{CmdError, load_config, observe_once};
use crate::cli::Global;
use crate::config::{Mode, SiteFile};
use crate::observe::host::Carry;

pub fn run(g: &Global) -> Result<String, CmdError> {
    let cfg = load_config(g, SiteFile::Optional, None)?;
    if cfg.site.mode == Mode::Kubernetes {
        return super::kubernetes::snapshot(&cfg).map_err(|e| CmdError::Runtime(e.to_string()));
    }
    let snap = observe_once(&cfg, Carry::default())?;
    serde_json::to_string_pretty(&snap)
        .map(|s| s + "\n")
        .map_err(|e| CmdError::Runtime(format!("cannot encode the snapshot: {e}")))
}
