//! `pilotd import-ini FILE`: the pilotd.toml equivalent of an NRP provisioner's
//! `osg_provisioner.conf`, printed.

use super::CmdError;
use crate::cli::ImportIniArgs;

#[cfg(feature = "kubernetes")]
pub fn run(a: &ImportIniArgs) -> Result<String, CmdError> {
    Ok(pilotd_kubernetes::ini::import_file(&a.file)?)
}

#[cfg(not(feature = "kubernetes"))]
pub fn run(_: &ImportIniArgs) -> Result<String, CmdError> {
    Err(super::without_kubernetes())
}
