//! `pilotd import-ini FILE`: the pilotd.toml equivalent of an NRP provisioner's
//! `osg_provisioner.conf`, printed.

use super::CmdError;
use crate::cli::ImportIniArgs;
use crate::kubernetes::ini;

pub fn run(a: &ImportIniArgs) -> Result<String, CmdError> {
    Ok(ini::import_file(&a.file)?)
}
