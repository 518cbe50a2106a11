//! `pilot startd-cron ad …`: the pilot binary as condor's startd cron job, which keeps the
//! slot ad current with pilotd's ad file (`adfile`) and the CVMFS probe (`cvmfs`).
//!
//! The startd runs it every `PILOT_AD_PERIOD` (`STARTD_CRON_PILOTADS_*` in 99-pilot.conf,
//! written by `condor_config::render`) and merges every `NAME = value` line it prints into the
//! slot ads. It prints only lines that passed validation (pilotd's whitelisted `PILOTD_*`
//! attributes and the CVMFS attributes the pilot derives itself); every note about what was
//! dropped goes to stderr, which condor logs. It always exits 0: a missing or broken ad file is
//! not condor's problem, and the values it printed before stay in the ad.
//!
//! Its arguments carry everything it needs (the cron job does not see the pilot's `PILOT_*`
//! environment); [`args_for`] writes them and [`CronArgs::parse`] reads them back.

use std::path::PathBuf;
use std::time::Duration;

use crate::adfile;
use crate::cvmfs::{self, Findings};
use crate::settings::{CvmfsSettings, Settings};

/// The cron job's name in `STARTD_CRON_JOBLIST`.
pub const JOB_NAME: &str = "PILOTADS";
/// The subcommand and its one mode.
pub const SUBCOMMAND: &str = "startd-cron";
pub const MODE: &str = "ad";

/// What one run looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronArgs {
    pub ad_file: Option<PathBuf>,
    pub cvmfs: CvmfsSettings,
}

/// The arguments after the program name, for `STARTD_CRON_PILOTADS_ARGS`. Settings have
/// checked every path and name to need no quoting there.
pub fn args_for(settings: &Settings) -> Vec<String> {
    let c = &settings.cvmfs;
    let mut args = vec![SUBCOMMAND.to_owned(), MODE.to_owned()];
    if let Some(f) = &settings.ad_file {
        args.extend(["--ad-file".to_owned(), f.display().to_string()]);
    }
    args.extend(["--cvmfs-dir".to_owned(), c.dir.display().to_string()]);
    if !c.repos.is_empty() {
        args.extend(["--cvmfs-repos".to_owned(), c.repos.join(",")]);
    }
    if !c.required.is_empty() {
        args.extend(["--cvmfs-required".to_owned(), c.required.join(",")]);
    }
    args.extend([
        "--cvmfs-timeout".to_owned(),
        c.timeout.as_millis().max(1).to_string() + "ms",
    ]);
    args
}

impl CronArgs {
    /// Reads the arguments after `startd-cron`.
    pub fn parse(args: &[String]) -> Result<CronArgs, String> {
        let mut it = args.iter();
        match it.next().map(String::as_str) {
            Some(MODE) => {}
            other => return Err(format!("expected `{SUBCOMMAND} {MODE} …`, got {other:?}")),
        }
        let mut out = CronArgs {
            ad_file: None,
            cvmfs: CvmfsSettings {
                dir: PathBuf::from(crate::settings::defaults::CVMFS_DIR),
                repos: Vec::new(),
                required: Vec::new(),
                timeout: Duration::from_secs(10),
            },
        };
        let list = |v: &str| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|n| cvmfs::valid_repo_name(n))
                .map(str::to_owned)
                .collect()
        };
        while let Some(flag) = it.next() {
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--ad-file" => out.ad_file = Some(PathBuf::from(value)),
                "--cvmfs-dir" => out.cvmfs.dir = PathBuf::from(value),
                "--cvmfs-repos" => out.cvmfs.repos = list(value),
                "--cvmfs-required" => out.cvmfs.required = list(value),
                "--cvmfs-timeout" => {
                    out.cvmfs.timeout = crate::settings::parse_duration(value)
                        .map_err(|e| format!("--cvmfs-timeout {value:?}: {e}"))?;
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        Ok(out)
    }
}

/// The attribute lines and the notes of one look at the ad file and CVMFS.
pub fn collect(args: &CronArgs) -> (Vec<(String, String)>, Vec<String>) {
    let mut attrs = Vec::new();
    let mut notes = Vec::new();
    if let Some(path) = &args.ad_file {
        match adfile::read(path) {
            Ok(Some(ad)) => {
                attrs.extend(ad.attrs);
                notes.extend(ad.notes);
            }
            Ok(None) => notes.push(format!("ad file {} does not exist (yet)", path.display())),
            Err(e) => notes.push(e.to_string()),
        }
    }
    let findings = cvmfs::probe(&args.cvmfs);
    notes.extend(cvmfs_notes(&findings, &args.cvmfs));
    attrs.extend(findings.ad_lines());
    (attrs, notes)
}

/// What the probe could not read, for the log.
pub fn cvmfs_notes(findings: &Findings, c: &CvmfsSettings) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(why) = &findings.listing {
        notes.push(format!("CVMFS: cannot list {}: {why}", c.dir.display()));
    }
    for (name, state, named) in &findings.repos {
        if let cvmfs::Repo::Unreadable { reason } = state
            && *named
        {
            notes.push(format!("CVMFS repository {name}: {reason}"));
        }
    }
    notes
}

/// The cron job's stdout: one `NAME = value` line per attribute.
pub fn render(attrs: &[(String, String)]) -> String {
    attrs.iter().map(|(k, v)| format!("{k} = {v}\n")).collect()
}

/// The subcommand's body: arguments after `startd-cron` in, exit status out.
pub fn main(args: &[String]) -> u8 {
    let args = match CronArgs::parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("pilot {SUBCOMMAND}: {e}");
            return pilot_contract::PilotExit::Config.code();
        }
    };
    let (attrs, notes) = collect(&args);
    for note in notes {
        eprintln!("pilot {SUBCOMMAND}: {note}");
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(render(&attrs).as_bytes());
    let _ = out.flush();
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn settings(extra: &[(&str, &str)]) -> Settings {
        let mut env: BTreeMap<String, String> = [
            ("PILOT_CONFIG_URLS", "https://c.example.org/pool.conf"),
            ("PILOT_TOKEN_FILE", "/t"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        env.retain(|_, v| !v.is_empty());
        Settings::from_env(&env).unwrap()
    }

    #[test]
    fn arguments_round_trip() {
        let s = settings(&[
            ("PILOT_AD_FILE", "/pilotd/ads/pilotd.ad"),
            ("PILOT_CVMFS_DIR", "/mnt/cvmfs"),
            ("PILOT_CVMFS_REPOS", "a.org,b.org"),
            ("PILOT_CVMFS_REQUIRED", "a.org"),
            ("PILOT_CVMFS_TIMEOUT", "1500ms"),
        ]);
        let args = args_for(&s);
        assert_eq!(args[..2], [SUBCOMMAND, MODE]);
        let back = CronArgs::parse(&args[1..]).unwrap();
        assert_eq!(back.ad_file, s.ad_file);
        assert_eq!(back.cvmfs, s.cvmfs);

        let plain = settings(&[]);
        let back = CronArgs::parse(&args_for(&plain)[1..]).unwrap();
        assert_eq!(back.ad_file, None);
        assert_eq!(back.cvmfs, plain.cvmfs);

        assert!(CronArgs::parse(&["other".into()]).is_err());
        assert!(CronArgs::parse(&["ad".into(), "--ad-file".into()]).is_err());
        assert!(CronArgs::parse(&["ad".into(), "--bogus".into(), "x".into()]).is_err());
    }

    #[test]
    fn one_run_prints_only_validated_lines() {
        let dir = tempfile::tempdir().unwrap();
        let ad = dir.path().join("pilotd.ad");
        std::fs::write(
            &ad,
            "PILOTD_INSTANCE = \"lab-3\"\nSTART = False\nPILOTD_SNOOZED = False\n",
        )
        .unwrap();
        let cvmfs = dir.path().join("cvmfs");
        std::fs::create_dir_all(cvmfs.join("x.example.org")).unwrap();
        std::fs::write(cvmfs.join("x.example.org/.cvmfspublished"), "S42\n--\n").unwrap();
        let args = CronArgs {
            ad_file: Some(ad),
            cvmfs: CvmfsSettings {
                dir: cvmfs,
                repos: vec![],
                required: vec![],
                timeout: Duration::from_secs(5),
            },
        };
        let (attrs, notes) = collect(&args);
        assert_eq!(
            render(&attrs),
            "PILOTD_INSTANCE = \"lab-3\"\nPILOTD_SNOOZED = False\n\
             HAS_CVMFS_x_example_org = True\nCVMFS_x_example_org_REVISION = 42\n"
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("line 2: attribute name \"START\""),
            "{notes:?}"
        );
    }
}
