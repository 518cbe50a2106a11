//! Everything between "the container started" and "condor_master runs": fetch the pool
//! configuration, install the token, write the pilot's configuration, self-test, and find the
//! StartLog. Each failure maps to its exit code (20 configuration, 21 self-test).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::condor_config::{self, PILOT_CONFIG_FILE, TokenPlacement};
use crate::fetch::{self, FetchError, FetchPolicy};
use crate::lifecycle::PilotExit;
use crate::selftest::{self, CondorPrograms, SelfTest, SelfTestError};
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

/// Runs every start-up step in order.
pub async fn prepare(
    settings: &Settings,
    path_var: Option<OsString>,
    now: DateTime<Utc>,
) -> Result<Prepared, StartupError> {
    let policy = FetchPolicy {
        timeout: settings.fetch_timeout,
        max_bytes: settings.fetch_max_bytes,
        allow_http: settings.allow_http,
    };
    let fetched = fetch::fetch_all(&settings.config_sources, &policy).await?;
    fetch::install(&settings.condor_config_dir, &fetched)?;

    install_token(&settings.token_file, &settings.token_dir)?;
    tracing::info!(dir = %settings.token_dir.display(), "pool token installed");

    let text = condor_config::render(
        settings,
        &TokenPlacement {
            dir: &settings.token_dir,
        },
        now,
    );
    let path = fetch::write_atomically(&settings.condor_config_dir, PILOT_CONFIG_FILE, &text)?;
    tracing::info!(path = %path.display(), "pilot configuration written");
    if settings.accept_until.is_some_and(|t| t <= now) {
        tracing::warn!("PILOT_ACCEPT_UNTIL has already passed: condor will accept no job");
    }

    let programs = SelfTest {
        scratch: &settings.scratch,
        condor_master: &settings.condor_master,
        condor_config_val: &settings.condor_config_val,
        site_command: settings.selftest_cmd.as_deref(),
        site_timeout: settings.selftest_timeout,
        path_var: path_var.as_deref(),
    }
    .run()
    .await?;
    tracing::info!(master = %programs.master.display(), "self-test passed");
    let start_log = selftest::start_log_path(&programs.config_val).await?;
    Ok(Prepared {
        programs,
        start_log,
    })
}
