//! Everything between "the container started" and "condor_master runs": fetch the pool
//! configuration, install the token, write the pilot's configuration, self-test, and find the
//! StartLog and the startd history. Each failure maps to its exit code (20 configuration, 21 self-test).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::condor_config::{self, CronJob, PILOT_CONFIG_FILE, SlotAds, TokenPlacement};
use crate::fetch::{self, FetchError, FetchPolicy};
use crate::lifecycle::PilotExit;
use crate::selftest::{self, CondorEnv, CondorPrograms, RunAs, SelfTest, SelfTestError};
use crate::settings::LocalDir;
use crate::settings::Settings;

/// The name the token gets in the token directory.
pub const TOKEN_FILE_NAME: &str = "pilot-pool.token";

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("pool token {path}: {reason}")]
    Token { path: PathBuf, reason: String },
    #[error(transparent)]
    SelfTest(#[from] SelfTestError),
}

impl StartupError {
    pub fn exit(&self) -> PilotExit {
        match self {
            StartupError::Fetch(_) | StartupError::Token { .. } => PilotExit::Config,
            StartupError::SelfTest(e) if e.is_config_problem() => PilotExit::Config,
            StartupError::SelfTest(_) => PilotExit::SelfTest,
        }
    }
}

/// What the supervisor needs once everything is in place.
#[derive(Debug)]
pub struct Prepared {
    pub programs: CondorPrograms,
    pub start_log: PathBuf,
    /// `MASTER_LOG`, when condor names one (it does unless the configuration is unusual).
    pub master_log: Option<PathBuf>,
    /// `STARTD_HISTORY`, condor's record of the jobs that left the slot (the pilot's
    /// configuration sets it; `None` only if condor does not answer for it).
    pub startd_history: Option<PathBuf>,
}

/// Copies the token into condor's token directory, readable only by the directory's owner
/// (condor's daemons run as that user). The token's contents are never logged.
fn install_token(source: &Path, dir: &Path) -> Result<PathBuf, StartupError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let fail = |reason: String| StartupError::Token {
        path: source.to_path_buf(),
        reason,
    };
    let token = std::fs::read(source).map_err(|e| fail(format!("cannot read it: {e}")))?;
    if token.iter().all(u8::is_ascii_whitespace) {
        return Err(fail("the file is empty".into()));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    let target = dir.join(TOKEN_FILE_NAME);
    let tmp = dir.join(format!(".{TOKEN_FILE_NAME}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        std::fs::write(&tmp, &token)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        let owner = std::fs::metadata(dir)?;
        if owner.uid() != nix::unistd::geteuid().as_raw() {
            std::os::unix::fs::chown(&tmp, Some(owner.uid()), Some(owner.gid()))?;
        }
        std::fs::rename(&tmp, &target)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(format!("cannot install it into {}: {e}", dir.display()))
    })?;
    Ok(target)
}

/// `PILOT_LOCAL_DIR` mode: the directories the pilot itself writes into must be usable
/// before anything is fetched (condor's own are checked by the self-test once condor can
/// name them).
fn prepare_local_dir(local: &LocalDir, settings: &Settings) -> Result<(), SelfTestError> {
    let user = format!("uid {}", nix::unistd::geteuid());
    for (name, path) in [
        ("PILOT_LOCAL_DIR", local.root.clone()),
        (
            "PILOT_CONDOR_CONFIG_DIR",
            settings.condor_config_dir.clone(),
        ),
        ("PILOT_TOKEN_DIR", settings.token_dir.clone()),
    ] {
        std::fs::create_dir_all(&path).map_err(|e| SelfTestError::CondorDir {
            name,
            path: path.clone(),
            user: user.clone(),
            reason: format!("cannot create it: {e}"),
        })?;
    }
    Ok(())
}

/// The name condor's daemons need when this uid has no passwd entry (see `TokenPlacement`).
fn daemon_name(run_as: RunAs) -> Option<String> {
    let RunAs::Unprivileged { uid, .. } = run_as else {
        return None;
    };
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(_)) => None,
        _ => Some(condor_config::daemon_name_for_uid(uid)),
    }
}

/// The slot-ad attributes as they are now (pilotd's ad file, then CVMFS) and the cron job
/// that keeps them current. A required CVMFS repository that cannot be read fails here (21);
/// an unreadable ad file is only logged (the cron job retries every period).
async fn slot_ads(settings: &Settings) -> Result<SlotAds, SelfTestError> {
    let mut initial = Vec::new();
    if let Some(path) = &settings.ad_file {
        match crate::adfile::read(path) {
            Ok(Some(ad)) => {
                for note in &ad.notes {
                    tracing::warn!("{note}");
                }
                initial.extend(ad.attrs);
            }
            Ok(None) => {
                tracing::info!(path = %path.display(), "no ad file yet; the startd cron job reads it when it appears")
            }
            Err(e) => tracing::warn!("{e}"),
        }
    }
    let findings = selftest::probe_cvmfs(settings.cvmfs.clone()).await?;
    for note in crate::startd_cron::cvmfs_notes(&findings, &settings.cvmfs) {
        tracing::warn!("{note}");
    }
    let cvmfs = findings.ad_lines();
    let readable: Vec<&str> = cvmfs
        .iter()
        .filter(|(k, v)| k.starts_with("HAS_CVMFS_") && v == "True")
        .map(|(k, _)| k.as_str())
        .collect();
    tracing::info!(dir = %settings.cvmfs.dir.display(), repositories = ?readable, "CVMFS probed");
    initial.extend(cvmfs);
    // The cron job is the pilot binary itself; its path goes into condor's configuration
    // unquoted, so it must be as plain as the settings' paths.
    let cron = match std::env::current_exe() {
        Ok(exe) if exe.to_str().is_some_and(crate::settings::is_plain_path) => Some(CronJob {
            executable: exe,
            args: crate::startd_cron::args_for(settings),
            period: settings.ad_period,
        }),
        other => {
            tracing::warn!(exe = ?other, "cannot name the pilot binary plainly for condor: the slot ad keeps the values from start");
            None
        }
    };
    Ok(SlotAds { initial, cron })
}

/// Runs every start-up step in order.
pub async fn prepare(
    settings: &Settings,
    path_var: Option<OsString>,
    now: DateTime<Utc>,
) -> Result<Prepared, StartupError> {
    let run_as = RunAs::current();
    if let Some(local) = &settings.local_dir {
        prepare_local_dir(local, settings)?;
    }
    let policy = FetchPolicy {
        timeout: settings.fetch_timeout,
        max_bytes: settings.fetch_max_bytes,
        allow_http: settings.allow_http,
    };
    let fetched = fetch::fetch_all(&settings.config_sources, &policy).await?;
    fetch::install(&settings.condor_config_dir, &fetched)?;

    install_token(&settings.token_file, &settings.token_dir)?;
    tracing::info!(dir = %settings.token_dir.display(), "pool token installed");

    let mut env = CondorEnv::default();
    if let Some(local) = &settings.local_dir {
        let top = condor_config::render_top_level(local, &settings.condor_config_dir, now);
        let name = local
            .condor_config()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = fetch::write_atomically(&local.root, &name, &top)?;
        tracing::info!(path = %path.display(), base = %local.base_config.display(),
            "condor runs unprivileged from PILOT_LOCAL_DIR");
        env.vars.push(("CONDOR_CONFIG".into(), path));
    }
    let ads = slot_ads(settings).await?;
    let mut text = condor_config::render(
        settings,
        &TokenPlacement {
            dir: &settings.token_dir,
            daemon_name: daemon_name(run_as),
        },
        now,
    );
    text.push_str(&condor_config::render_slot_ads(&ads));
    let path = fetch::write_atomically(&settings.condor_config_dir, PILOT_CONFIG_FILE, &text)?;
    tracing::info!(path = %path.display(), "pilot configuration written");
    if settings.accept_until.is_some_and(|t| t <= now) {
        tracing::warn!("PILOT_ACCEPT_UNTIL has already passed: condor will accept no job");
    }

    let programs = SelfTest {
        run_as,
        condor_master: &settings.condor_master,
        condor_config_val: &settings.condor_config_val,
        env: &env,
        site_command: settings.selftest_cmd.as_deref(),
        site_timeout: settings.selftest_timeout,
        path_var: path_var.as_deref(),
    }
    .run()
    .await?;
    tracing::info!(master = %programs.master.display(), "self-test passed");
    let start_log = selftest::start_log_path(&programs.config_val, &programs.env).await?;
    // MASTER_LOG is `$(LOG)/MasterLog` in condor's defaults; a configuration that drops it
    // still has LOG.
    let master_log =
        match selftest::config_value(&programs.config_val, "MASTER_LOG", &programs.env).await? {
            Some(path) => Some(PathBuf::from(path)),
            None => selftest::config_value(&programs.config_val, "LOG", &programs.env)
                .await?
                .map(|log| PathBuf::from(log).join("MasterLog")),
        };
    let startd_history =
        selftest::config_value(&programs.config_val, "STARTD_HISTORY", &programs.env)
            .await?
            .map(PathBuf::from);
    Ok(Prepared {
        programs,
        start_log,
        master_log,
        startd_history,
    })
}
