//! The environment check before condor starts (the Turin plan's "dummy test"), and the
//! questions the pilot asks condor itself.
//!
//! Checked, in order: the scratch directory is writable (a file is written, synced, read back
//! and removed); `condor_master` and `condor_config_val` are present and runnable (`-version`
//! exits 0, which also proves their shared libraries load); the optional site command exits 0
//! within its timeout. Any failure is exit 21 with the reason.
//!
//! Then `condor_config_val STARTD_LOG` (falling back to `$(LOG)/StartLog`) gives the log the
//! pilot watches for jobs. If condor_config_val runs but rejects the configuration, that is
//! the configuration's fault: exit 20.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    #[error("scratch directory {path} is not usable: {reason}")]
    Scratch { path: PathBuf, reason: String },
    #[error("{name} not found on PATH or not executable; is HTCondor installed in this image?")]
    BinaryMissing { name: String },
    #[error("{command} is not runnable: {reason}")]
    BinaryBroken { command: String, reason: String },
    #[error("site self-test command {command:?} failed: {reason}")]
    SiteCommand { command: String, reason: String },
    #[error("condor rejected the configuration ({command}): {reason}")]
    ConfigRejected { command: String, reason: String },
}

impl SelfTestError {
    /// Configuration that condor refuses is a configuration problem (20); everything else is
    /// the environment failing its self-test (21).
    pub fn is_config_problem(&self) -> bool {
        matches!(self, SelfTestError::ConfigRejected { .. })
    }
}

/// The result of a bounded command.
enum Ran {
    Done(Output),
    TimedOut,
    NotStarted(std::io::Error),
}

/// Runs a command in its own process group and kills the whole group on timeout, so a site
/// command that forks cannot leave processes behind.
async fn run_bounded(program: &Path, args: &[&str], timeout: Duration) -> Ran {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Ran::NotStarted(e),
    };
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => Ran::Done(out),
        Ok(Err(e)) => Ran::NotStarted(e),
        Err(_) => {
            if let Some(pgid) = pgid {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
            Ran::TimedOut
        }
    }
}

/// The last part of a command's stderr (or stdout), enough to say why it failed.
fn tail(out: &Output) -> String {
    let bytes = if out.stderr.iter().any(|b| !b.is_ascii_whitespace()) {
        &out.stderr
    } else {
        &out.stdout
    };
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let start = text.len().saturating_sub(500);
    let start = (start..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    format!("{}; output: {:?}", out.status, &text[start..])
}

/// Finds a program like the shell does: a name with a slash is a path, otherwise PATH.
pub fn resolve(program: &Path, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 {
        return executable(program).then(|| program.to_path_buf());
    }
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

fn check_scratch(scratch: &Path) -> Result<(), SelfTestError> {
    let fail = |reason: String| SelfTestError::Scratch {
        path: scratch.to_path_buf(),
        reason,
    };
    std::fs::create_dir_all(scratch).map_err(|e| fail(format!("cannot create it: {e}")))?;
    let probe = scratch.join(format!(".pilot-selftest-{}", std::process::id()));
    let expected = b"pilot self-test\n";
    let result = (|| {
        use std::io::Write;
        let mut f = std::fs::File::create(&probe)?;
        f.write_all(expected)?;
        f.sync_all()?;
        std::fs::read(&probe)
    })();
    let _ = std::fs::remove_file(&probe);
    match result {
        Ok(read) if read == expected => Ok(()),
        Ok(_) => Err(fail("a file written there read back differently".into())),
        Err(e) => Err(fail(format!("cannot write a file there: {e}"))),
    }
}

async fn check_binary(program: &Path, path_var: Option<&OsStr>) -> Result<PathBuf, SelfTestError> {
    let resolved = resolve(program, path_var).ok_or_else(|| SelfTestError::BinaryMissing {
        name: program.display().to_string(),
    })?;
    let command = format!("{} -version", resolved.display());
    match run_bounded(&resolved, &["-version"], Duration::from_secs(30)).await {
        Ran::Done(out) if out.status.success() => Ok(resolved),
        Ran::Done(out) => Err(SelfTestError::BinaryBroken {
            command,
            reason: tail(&out),
        }),
        Ran::TimedOut => Err(SelfTestError::BinaryBroken {
            command,
            reason: "did not answer within 30s".into(),
        }),
        Ran::NotStarted(e) => Err(SelfTestError::BinaryBroken {
            command,
            reason: e.to_string(),
        }),
    }
}

/// What the self-test needs to know.
pub struct SelfTest<'a> {
    pub scratch: &'a Path,
    pub condor_master: &'a Path,
    pub condor_config_val: &'a Path,
    pub site_command: Option<&'a str>,
    pub site_timeout: Duration,
    pub path_var: Option<&'a OsStr>,
}

/// The condor programs the self-test found.
#[derive(Debug, Clone)]
pub struct CondorPrograms {
    pub master: PathBuf,
    pub config_val: PathBuf,
}

impl SelfTest<'_> {
    pub async fn run(&self) -> Result<CondorPrograms, SelfTestError> {
        check_scratch(self.scratch)?;
        let master = check_binary(self.condor_master, self.path_var).await?;
        let config_val = check_binary(self.condor_config_val, self.path_var).await?;
        if let Some(command) = self.site_command {
            let fail = |reason: String| SelfTestError::SiteCommand {
                command: command.to_owned(),
                reason,
            };
            match run_bounded(Path::new("/bin/sh"), &["-c", command], self.site_timeout).await {
                Ran::Done(out) if out.status.success() => {}
                Ran::Done(out) => return Err(fail(tail(&out))),
                Ran::TimedOut => {
                    return Err(fail(format!(
                        "did not finish within {:?}",
                        self.site_timeout
                    )));
                }
                Ran::NotStarted(e) => return Err(fail(format!("could not start /bin/sh: {e}"))),
            }
        }
        Ok(CondorPrograms { master, config_val })
    }
}

/// One configuration value, as condor evaluates it; `Ok(None)` when it is not defined.
pub async fn config_value(config_val: &Path, name: &str) -> Result<Option<String>, SelfTestError> {
    let command = format!("{} {name}", config_val.display());
    match run_bounded(config_val, &[name], Duration::from_secs(30)).await {
        Ran::Done(out) if out.status.success() => {
            let value = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            Ok((!value.is_empty()).then_some(value))
        }
        Ran::Done(out) if String::from_utf8_lossy(&out.stderr).contains("Not defined") => Ok(None),
        Ran::Done(out) => Err(SelfTestError::ConfigRejected {
            command,
            reason: tail(&out),
        }),
        Ran::TimedOut => Err(SelfTestError::BinaryBroken {
            command,
            reason: "did not answer within 30s".into(),
        }),
        Ran::NotStarted(e) => Err(SelfTestError::BinaryBroken {
            command,
            reason: e.to_string(),
        }),
    }
}

/// The StartLog path condor will write: `STARTD_LOG`, else `$(LOG)/StartLog`.
pub async fn start_log_path(config_val: &Path) -> Result<PathBuf, SelfTestError> {
    if let Some(path) = config_value(config_val, "STARTD_LOG").await? {
        return Ok(PathBuf::from(path));
    }
    match config_value(config_val, "LOG").await? {
        Some(log) => Ok(PathBuf::from(log).join("StartLog")),
        None => Err(SelfTestError::ConfigRejected {
            command: format!("{} LOG", config_val.display()),
            reason: "neither STARTD_LOG nor LOG is defined".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_follows_path_and_explicit_paths() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("condor_master");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path_var = dir.path().as_os_str();
        assert_eq!(resolve(Path::new("condor_master"), Some(path_var)), None);
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            resolve(Path::new("condor_master"), Some(path_var)),
            Some(prog.clone())
        );
        assert_eq!(resolve(&prog, None), Some(prog));
        assert_eq!(resolve(Path::new("nope"), Some(path_var)), None);
    }

    #[test]
    fn scratch_must_be_writable() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_scratch(&dir.path().join("new/sub")).is_ok());
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(check_scratch(&file).is_err());
    }
}
