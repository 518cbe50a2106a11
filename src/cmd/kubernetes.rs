//! Placeholder until Kubernetes mode lands (the Kubernetes-mode engineer replaces this file).
use crate::config::Config;
use chrono::{DateTime, Utc};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("kubernetes mode is not built yet")]
pub struct KubeCmdError;

pub fn import_ini(_path: &Path) -> Result<String, KubeCmdError> {
    Err(KubeCmdError)
}
pub fn plan(_cfg: &Config, _s: Option<&Path>, _now: DateTime<Utc>, _json: bool) -> Result<String, KubeCmdError> {
    Err(KubeCmdError)
}
pub fn snapshot(_cfg: &Config) -> Result<String, KubeCmdError> {
    Err(KubeCmdError)
}
