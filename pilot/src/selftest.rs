//! The environment check before condor starts (the Turin plan's "dummy test"), and the
//! questions the pilot asks condor itself.
//!
//! Checked, in order, each failure exit 21 with the reason and the path:
//! - who condor will run as: the pilot's own uid when it is not root (condor then never
//!   switches users); when it is root, condor switches to its `condor` user, which needs the
//!   SETUID and SETGID capabilities; root without them is refused here instead of condor
//!   failing two seconds later on its log file;
//! - `condor_master` and `condor_config_val` are present and runnable (`-version` exits 0,
//!   which also proves their shared libraries load);
//! - every directory condor writes (LOG, SPOOL, LOCK, RUN, EXECUTE, as condor itself resolves
//!   them from the configuration the pilot just wrote) exists or can be created, and is
//!   writable by that user: a file is written, synced, read back and removed (as root, the
//!   directory's owner and mode are checked against the condor user instead);
//! - the optional site command exits 0 within its timeout;
//! - every CVMFS repository of `PILOT_CVMFS_REQUIRED` is readable (its revision found) within
//!   `PILOT_CVMFS_TIMEOUT` ([`probe_cvmfs`], run by startup before the configuration is
//!   written, since its findings go into the slot ad).
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
    #[error("condor's {name} directory {path} is not usable by {user}: {reason}")]
    CondorDir {
        name: &'static str,
        path: PathBuf,
        user: String,
        reason: String,
    },
    #[error(
        "the pilot runs as root without the SETUID and SETGID capabilities, so condor cannot \
         switch to its condor user (it would fail on its log files); run the worker as an \
         unprivileged user with PILOT_LOCAL_DIR set (pilotd's [worker] user, default \
         65532:65532), or give those capabilities back"
    )]
    RootWithoutCapabilities,
    #[error("{name} not found on PATH or not executable; is HTCondor installed in this image?")]
    BinaryMissing { name: String },
    #[error("{command} is not runnable: {reason}")]
    BinaryBroken { command: String, reason: String },
    #[error("site self-test command {command:?} failed: {reason}")]
    SiteCommand { command: String, reason: String },
    #[error(
        "required CVMFS repository {repo} is not readable: {reason}; mount CVMFS on the host \
         (docs/site.md, \"CVMFS\") or drop it from PILOT_CVMFS_REQUIRED"
    )]
    CvmfsRequired { repo: String, reason: String },
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
async fn run_bounded(program: &Path, args: &[&str], env: &CondorEnv, timeout: Duration) -> Ran {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(env.vars.iter().map(|(k, v)| (k, v)))
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

async fn check_binary(
    program: &Path,
    path_var: Option<&OsStr>,
    env: &CondorEnv,
) -> Result<PathBuf, SelfTestError> {
    let resolved = resolve(program, path_var).ok_or_else(|| SelfTestError::BinaryMissing {
        name: program.display().to_string(),
    })?;
    let command = format!("{} -version", resolved.display());
    match run_bounded(&resolved, &["-version"], env, Duration::from_secs(30)).await {
        Ran::Done(out) if out.status.success() => Ok(resolved),
        ran => Err(not_runnable(command, ran)),
    }
}

/// A condor program that failed, did not answer within its 30 s, or did not start.
fn not_runnable(command: String, ran: Ran) -> SelfTestError {
    let reason = match ran {
        Ran::Done(out) => tail(&out),
        Ran::TimedOut => "did not answer within 30s".into(),
        Ran::NotStarted(e) => e.to_string(),
    };
    SelfTestError::BinaryBroken { command, reason }
}

/// Environment every condor program the pilot runs gets (in `PILOT_LOCAL_DIR` mode,
/// `CONDOR_CONFIG` naming the pilot's top-level configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CondorEnv {
    pub vars: Vec<(String, PathBuf)>,
}

/// Who condor's daemons and jobs will run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAs {
    /// Not root: condor runs everything as this uid and never switches users.
    Unprivileged { uid: u32, gid: u32 },
    /// Root with the capabilities to switch to the condor user.
    Root,
    /// Root without SETUID/SETGID: condor would fail on its first file.
    RootWithoutCapabilities,
}

impl RunAs {
    /// This process, from its ids and its effective capabilities.
    pub fn current() -> RunAs {
        let uid = nix::unistd::geteuid().as_raw();
        if uid != 0 {
            return RunAs::Unprivileged {
                uid,
                gid: nix::unistd::getegid().as_raw(),
            };
        }
        let caps = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| effective_capabilities(&s));
        match caps {
            Some(c) if c & CAN_SWITCH_USERS == CAN_SWITCH_USERS => RunAs::Root,
            // Unreadable capabilities: assume root can (condor will say if not).
            None => RunAs::Root,
            Some(_) => RunAs::RootWithoutCapabilities,
        }
    }
}

/// CAP_SETGID (6) and CAP_SETUID (7).
const CAN_SWITCH_USERS: u64 = (1 << 6) | (1 << 7);

/// The `CapEff:` mask of a /proc/PID/status text.
pub fn effective_capabilities(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

/// Whether a directory with this owner and mode lets `uid`/`gid` create files in it.
fn writable_by(meta: &std::fs::Metadata, uid: u32, gid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mode = meta.mode();
    let (w, x) = if meta.uid() == uid {
        (0o200, 0o100)
    } else if meta.gid() == gid {
        (0o020, 0o010)
    } else {
        (0o002, 0o001)
    };
    mode & w != 0 && mode & x != 0
}

/// The directories condor writes, by their configuration names; RUN may be undefined.
const CONDOR_DIRS: [(&str, bool); 5] = [
    ("LOG", true),
    ("SPOOL", true),
    ("LOCK", true),
    ("RUN", false),
    ("EXECUTE", true),
];

/// What the self-test needs to know.
pub struct SelfTest<'a> {
    pub run_as: RunAs,
    pub condor_master: &'a Path,
    pub condor_config_val: &'a Path,
    pub env: &'a CondorEnv,
    pub site_command: Option<&'a str>,
    pub site_timeout: Duration,
    pub path_var: Option<&'a OsStr>,
}

/// The condor programs the self-test found, and the environment they run with.
#[derive(Debug, Clone)]
pub struct CondorPrograms {
    pub master: PathBuf,
    pub config_val: PathBuf,
    pub env: CondorEnv,
}

impl SelfTest<'_> {
    pub async fn run(&self) -> Result<CondorPrograms, SelfTestError> {
        if self.run_as == RunAs::RootWithoutCapabilities {
            return Err(SelfTestError::RootWithoutCapabilities);
        }
        let master = check_binary(self.condor_master, self.path_var, self.env).await?;
        let config_val = check_binary(self.condor_config_val, self.path_var, self.env).await?;
        self.check_condor_dirs(&config_val).await?;
        if let Some(command) = self.site_command {
            let no_env = CondorEnv::default();
            let sh = Path::new("/bin/sh");
            let reason = match run_bounded(sh, &["-c", command], &no_env, self.site_timeout).await {
                Ran::Done(out) if out.status.success() => None,
                Ran::Done(out) => Some(tail(&out)),
                Ran::TimedOut => Some(format!("did not finish within {:?}", self.site_timeout)),
                Ran::NotStarted(e) => Some(format!("could not start /bin/sh: {e}")),
            };
            if let Some(reason) = reason {
                let command = command.to_owned();
                return Err(SelfTestError::SiteCommand { command, reason });
            }
        }
        Ok(CondorPrograms {
            master,
            config_val,
            env: self.env.clone(),
        })
    }

    /// Every directory condor writes, as condor resolves it, is usable by the user condor
    /// runs as.
    async fn check_condor_dirs(&self, config_val: &Path) -> Result<(), SelfTestError> {
        let (uid, gid, user) = match self.run_as {
            RunAs::Unprivileged { uid, gid } => (uid, gid, format!("uid {uid}")),
            _ => {
                let (uid, gid) = condor_ids(config_val, self.env).await?;
                (uid, gid, format!("the condor user (uid {uid})"))
            }
        };
        for (name, required) in CONDOR_DIRS {
            let Some(value) = config_value(config_val, name, self.env).await? else {
                if required {
                    return Err(SelfTestError::ConfigRejected {
                        command: format!("{} {name}", config_val.display()),
                        reason: format!("{name} is not defined"),
                    });
                }
                continue;
            };
            let path = PathBuf::from(value);
            let fail = |reason: String| SelfTestError::CondorDir {
                name,
                path: path.clone(),
                user: user.clone(),
                reason,
            };
            if !path.is_absolute() {
                return Err(fail("not an absolute path".into()));
            }
            match self.run_as {
                RunAs::Unprivileged { .. } => probe_dir(&path).map_err(fail)?,
                _ => {
                    std::fs::create_dir_all(&path)
                        .map_err(|e| fail(format!("cannot create it: {e}")))?;
                    let meta = std::fs::metadata(&path)
                        .map_err(|e| fail(format!("cannot inspect it: {e}")))?;
                    if !writable_by(&meta, uid, gid) {
                        use std::os::unix::fs::MetadataExt;
                        return Err(fail(format!(
                            "it is owned by uid {} gid {} with mode {:o}",
                            meta.uid(),
                            meta.gid(),
                            meta.mode() & 0o7777
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Probes CVMFS (off the runtime's thread: a read may block until the probe's deadline) and
/// fails on the first required repository that is not readable.
pub async fn probe_cvmfs(
    probe: crate::cvmfs::Probe,
) -> Result<crate::cvmfs::Findings, SelfTestError> {
    let required = probe.required.clone();
    let findings = tokio::task::spawn_blocking(move || crate::cvmfs::probe(&probe))
        .await
        .unwrap_or_default();
    if let Some((repo, reason)) = findings.missing(&required).first() {
        return Err(SelfTestError::CvmfsRequired {
            repo: (*repo).to_owned(),
            reason: (*reason).to_owned(),
        });
    }
    Ok(findings)
}

/// Creates `dir` if needed, then writes, syncs, reads back and removes a file there.
fn probe_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let probe = dir.join(format!(".pilot-selftest-{}", std::process::id()));
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
        Ok(_) => Err("a file written there read back differently".into()),
        Err(e) => Err(format!("cannot write a file there: {e}")),
    }
}

/// The uid and gid condor switches to when started as root: `CONDOR_IDS` ("uid.gid"), else
/// the `condor` user of the image.
async fn condor_ids(config_val: &Path, env: &CondorEnv) -> Result<(u32, u32), SelfTestError> {
    if let Some(ids) = config_value(config_val, "CONDOR_IDS", env).await? {
        let parsed = ids
            .split_once('.')
            .and_then(|(u, g)| Some((u.trim().parse().ok()?, g.trim().parse().ok()?)));
        return parsed.ok_or_else(|| SelfTestError::ConfigRejected {
            command: format!("{} CONDOR_IDS", config_val.display()),
            reason: format!("CONDOR_IDS = {ids:?} is not \"uid.gid\""),
        });
    }
    match nix::unistd::User::from_name("condor") {
        Ok(Some(u)) => Ok((u.uid.as_raw(), u.gid.as_raw())),
        _ => Err(SelfTestError::BinaryBroken {
            command: "the condor user".into(),
            reason: "condor runs as root here but the image has no `condor` user and \
                     CONDOR_IDS is not set"
                .into(),
        }),
    }
}

/// One configuration value, as condor evaluates it; `Ok(None)` when it is not defined.
pub async fn config_value(
    config_val: &Path,
    name: &str,
    env: &CondorEnv,
) -> Result<Option<String>, SelfTestError> {
    let command = format!("{} {name}", config_val.display());
    match run_bounded(config_val, &[name], env, Duration::from_secs(30)).await {
        Ran::Done(out) if out.status.success() => {
            let value = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            Ok((!value.is_empty()).then_some(value))
        }
        Ran::Done(out) if String::from_utf8_lossy(&out.stderr).contains("Not defined") => Ok(None),
        Ran::Done(out) => Err(SelfTestError::ConfigRejected {
            command,
            reason: tail(&out),
        }),
        ran => Err(not_runnable(command, ran)),
    }
}

/// The StartLog path condor will write: `STARTD_LOG`, else `$(LOG)/StartLog`.
pub async fn start_log_path(config_val: &Path, env: &CondorEnv) -> Result<PathBuf, SelfTestError> {
    if let Some(path) = config_value(config_val, "STARTD_LOG", env).await? {
        return Ok(PathBuf::from(path));
    }
    match config_value(config_val, "LOG", env).await? {
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
    fn a_directory_must_take_a_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(probe_dir(&dir.path().join("new/sub")).is_ok());
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(probe_dir(&file).is_err());
    }

    #[test]
    fn capabilities_come_from_capeff() {
        let status = "Name:\tpilot\nCapInh:\t0000000000000000\nCapEff:\t00000000a80425fb\n";
        let caps = effective_capabilities(status).unwrap();
        assert_eq!(caps & CAN_SWITCH_USERS, CAN_SWITCH_USERS);
        // Docker with --cap-drop ALL.
        let dropped = "CapEff:\t0000000000000000\n";
        assert_eq!(effective_capabilities(dropped), Some(0));
        assert_eq!(effective_capabilities("Name: x\n"), None);
    }

    #[test]
    fn writability_follows_owner_group_other() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        let meta = |mode| {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
            std::fs::metadata(&d).unwrap()
        };
        let m = meta(0o755);
        let (uid, gid) = (m.uid(), m.gid());
        assert!(writable_by(&m, uid, gid));
        assert!(!writable_by(&m, uid + 1, gid + 1), "0755 of another owner");
        assert!(!writable_by(&meta(0o775), uid + 1, gid + 1));
        assert!(writable_by(&meta(0o775), uid + 1, gid));
        assert!(writable_by(&meta(0o1777), uid + 1, gid + 1));
        assert!(!writable_by(&meta(0o555), uid, gid));
    }
}
