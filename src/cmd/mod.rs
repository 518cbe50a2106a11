//! One file per subcommand: the edge of the program.

pub mod check;
pub mod completions;
pub mod failsafe;
pub mod gc;
pub mod import_ini;
pub mod init;
pub mod manpages;
pub mod open;
pub mod plan;
pub mod resume;
pub mod run;
pub mod schedule;
pub mod snapshot;
pub mod snooze;
pub mod status;

use crate::cli::Global;
use chrono::{DateTime, Utc};
use pilotd_core::config::{self, Config, ConfigError, Machine, SiteFile};
use pilotd_volunteer::observe::host::ProbeError;

/// One file per subcommand (youki style): the edge of the program. Each loads the
/// configuration, resolves the mode's settings, does its one thing and returns what it prints,
/// or a `CmdError` that `main` maps to an exit code; nothing here calls `process::exit`. `run`
/// is where the process becomes a service: detaching, logging, the runtime, signal handlers,
/// the metrics listener, then the mode's loop.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Bad arguments or bad input files: exit 2.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// Something failed at run time: exit 1.
    #[error("{0}")]
    Runtime(String),
    #[error("cannot start the async runtime: {0}")]
    AsyncRuntime(std::io::Error),
    #[error("cannot print JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[cfg(feature = "kubernetes")]
    #[error(transparent)]
    ImportIni(#[from] pilotd_kubernetes::ini::IniError),
    #[cfg(feature = "kubernetes")]
    #[error(transparent)]
    KubernetesSettings(#[from] pilotd_kubernetes::settings::SettingsError),
    #[cfg(feature = "kubernetes")]
    #[error(transparent)]
    Snapshot(#[from] pilotd_kubernetes::snapshot::SnapshotError),
    #[cfg(feature = "kubernetes")]
    #[error(transparent)]
    Provisioner(#[from] pilotd_kubernetes::provisioner::ProvisionerError),
    #[error(transparent)]
    Daemon(#[from] pilotd_volunteer::daemon::DaemonError),
    #[error(transparent)]
    Control(#[from] pilotd_volunteer::owner::control::ControlError),
    /// The daemon refused the owner's request (not authorised, or a bad duration).
    #[error("{0}")]
    Refused(String),
    /// The fail-safe could not do all it was asked; `note` says which pilotd.toml it took.
    #[error("{note}{source}")]
    Failsafe {
        note: String,
        source: Box<pilotd_volunteer::act::failsafe::FailsafeError>,
    },
}

impl CmdError {
    /// 0 ok, 1 runtime failure, 2 bad usage or invalid configuration.
    pub fn exit_code(&self) -> u8 {
        match self {
            CmdError::Config(_) | CmdError::Usage(_) => 2,
            #[cfg(feature = "kubernetes")]
            CmdError::ImportIni(_) => 2,
            CmdError::Probe(_)
            | CmdError::Runtime(_)
            | CmdError::AsyncRuntime(_)
            | CmdError::Json(_)
            | CmdError::Daemon(_)
            | CmdError::Control(_)
            | CmdError::Refused(_)
            | CmdError::Failsafe { .. } => 1,
            #[cfg(feature = "kubernetes")]
            CmdError::KubernetesSettings(_) | CmdError::Snapshot(_) | CmdError::Provisioner(_) => 1,
        }
    }
}

/// What a build without kubernetes mode says when asked for it (its config check refuses
/// `mode = "kubernetes"` first, so this is the last line of defence).
#[cfg(not(feature = "kubernetes"))]
pub fn without_kubernetes() -> CmdError {
    CmdError::Usage(
        "this pilotd is built without kubernetes mode (the `kubernetes` feature)\n  hint: run kubernetes mode from the provisioner image".into(),
    )
}

/// The mode tables this build checks in pilotd.toml, beyond the core's keys.
#[cfg(feature = "kubernetes")]
pub const MODES: &config::ModeTables = &[pilotd_kubernetes::config::check_table];
#[cfg(not(feature = "kubernetes"))]
pub const MODES: &config::ModeTables = &[refuse_kubernetes];

/// A build without kubernetes mode refuses `mode = "kubernetes"` where the file is checked;
/// the `[kubernetes]` table itself stays valid and unread.
#[cfg(not(feature = "kubernetes"))]
fn refuse_kubernetes(site: &config::SiteConfig, _: &str, d: &mut config::Diagnostics) {
    if site.mode == config::Mode::Kubernetes {
        d.error(
            0..0,
            "mode = \"kubernetes\" is not in this build of pilotd (built without the `kubernetes` feature)",
            "this package runs volunteer mode only; run kubernetes mode from the provisioner image",
        );
    }
}

/// Loads the configuration for a command that may run without pilotd.toml.
pub fn load_config(
    g: &Global,
    site: SiteFile,
    machine: Option<Machine>,
) -> Result<Config, CmdError> {
    Ok(config::load(
        &g.config,
        site,
        MODES,
        g.policy.as_deref(),
        machine,
    )?)
}

/// Runs one future to completion on a single-threaded runtime: one-shot commands ask the
/// engine or the cluster one thing and print the answer.
pub fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, CmdError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CmdError::AsyncRuntime)?;
    Ok(rt.block_on(f))
}

/// Parses `--now` (`horizon::parse_instant`).
pub fn parse_now(s: Option<&str>) -> Result<Option<DateTime<Utc>>, CmdError> {
    s.map(|s| {
        pilotd_core::horizon::parse_instant(s).map_err(|e| CmdError::Usage(format!("--now {e}")))
    })
    .transpose()
}

/// Sends the owner's request to the daemon's control socket (pilotd.toml `control_socket`;
/// only pilotd.toml is read, which owners may read, not the policy).
pub fn ask_daemon(
    g: &Global,
    req: pilotd_volunteer::owner::request::Request,
) -> Result<String, CmdError> {
    let (site, _) = config::load_site(&g.config, SiteFile::Optional, MODES)?;
    let reply = block_on(pilotd_volunteer::owner::control::ask(
        &site.control_socket,
        &req,
    ))??;
    if reply.ok {
        Ok(reply.message + "\n")
    } else {
        Err(CmdError::Refused(reply.message))
    }
}

/// Where the configuration came from, for output.
pub fn describe_sources(cfg: &Config) -> String {
    let site = match &cfg.site_path {
        Some(p) => p.display().to_string(),
        None => "built-in defaults (no pilotd.toml)".into(),
    };
    format!("config: {site}; policy: {}", cfg.policy_path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The build's mode tables are checked where pilotd.toml is read, with the core's keys.
    #[cfg(feature = "kubernetes")]
    #[test]
    fn a_broken_kubernetes_table_is_reported_at_its_line() {
        let e = config::parse_site_with(
            Path::new("pilotd.toml"),
            "interval = \"30s\"\n[kubernetes]\nnamespace = \"Not_A_Label\"\n",
            MODES,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("pilotd.toml:3:"), "{e}");
        assert!(e.contains("namespace"), "{e}");
        // The core alone does not look into a mode's table.
        config::parse_site(
            Path::new("pilotd.toml"),
            "[kubernetes]\nnamespace = \"Not_A_Label\"\n",
        )
        .unwrap();
    }

    #[cfg(not(feature = "kubernetes"))]
    #[test]
    fn a_build_without_kubernetes_mode_refuses_it_and_says_so() {
        let e = config::parse_site_with(
            Path::new("pilotd.toml"),
            "mode = \"kubernetes\"\n[kubernetes]\nnamespace = \"osg\"\n",
            MODES,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not in this build of pilotd"), "{e}");
        // A volunteer file with a [kubernetes] table (shared by both modes) stays valid.
        config::parse_site_with(
            Path::new("pilotd.toml"),
            "[kubernetes]\nnamespace = \"osg\"\n",
            MODES,
        )
        .unwrap();
    }
}
