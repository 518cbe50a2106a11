//! The pilot's own condor configuration file, written last in the config dir so it wins over
//! the fetched pool configuration.
//!
//! Rendering is pure (settings and `now` in, text out). What the file does and why:
//! - one partitionable slot holding the resources pilotd granted (unset → condor detects);
//! - `STARTD_NOCLAIM_SHUTDOWN` from the idle timeout: the startd exits when no slot has had a
//!   claim for that long, which covers both "no job ever came" and "idle after the last job";
//! - `START` is the pool's START (`$(START:True)`) AND `time() < PILOT_ACCEPT_UNTIL` AND the
//!   job's declared `AllowedExecuteDuration` (if any) fits before die_at AND the extra clause;
//! - `PILOT_ACCEPT_UNTIL`, `PILOT_DIE_AT`, `PILOT_LONGEST_JOB` (seconds) and
//!   `PILOT_IDLE_TIMEOUT` are published in the slot ad (`STARTD_ATTRS`), so jobs and the
//!   negotiator can match only work that fits (`TARGET.PILOT_DIE_AT - time() > …`);
//! - `MASTER.DAEMON_SHUTDOWN` ends the master once the startd is gone (the canonical pilot
//!   expression from HTCondor's 50ec2.config) or die_at has passed;
//! - `STARTD_HISTORY` in condor's log dir (the pool cannot move or disable it) and a 5 s procd
//!   sampling interval: the job report's figures (see `startd_history`);
//! - pilotd's ad-file attributes and the CVMFS attributes ([`render_slot_ads`]): their values
//!   at start as `STARTD_ATTRS`, then a startd cron job (the pilot binary itself, `pilot
//!   startd-cron ad`) that re-reads and re-probes every `PILOT_AD_PERIOD`; the cron job's
//!   values replace the start values in the slot ad;
//! - no `DEFAULT_MASTER_SHUTDOWN_SCRIPT`: its equivalent is the pilot itself. condor_master
//!   runs as the pilot's child, and when it exits the pilot exits, so the container ends.
//!   A shutdown script would replace the master's exit status with the script's and hide a
//!   condor failure, which the pilot must report (exit 30).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::settings::{LocalDir, Settings};

/// The generated file's name: sorts after everything the image and the fetch put there.
pub const PILOT_CONFIG_FILE: &str = "99-pilot.conf";

/// Where the startd records every job that leaves the slot (read by `startd_history`).
pub const STARTD_HISTORY: &str = "$(LOG)/startd_history";

/// How often condor's procd samples the jobs' processes (`PROCD_MAX_SNAPSHOT_INTERVAL`,
/// 60 s by default). Without cgroups this sampling is condor's only CPU measure, and CPU
/// after a process's last sample is lost: 5 s keeps a job's reported CPU within seconds of
/// what it used, for a scan of the container's few processes.
pub const PROCD_SNAPSHOT_SECONDS: u32 = 5;

/// Facts of the running container that the configuration depends on.
pub struct TokenPlacement<'a> {
    /// Where the pilot put the pool token, so condor finds it.
    pub dir: &'a Path,
    /// Set when the pilot runs as a uid without a passwd entry: condor names its daemons
    /// `user@host` when not root, and cannot without a user name, so the pilot names them.
    pub daemon_name: Option<String>,
}

/// The name `TokenPlacement::daemon_name` gets for a uid that has no passwd entry.
pub fn daemon_name_for_uid(uid: u32) -> String {
    format!("uid{uid}@$(FULL_HOSTNAME)")
}

/// The top-level configuration of `PILOT_LOCAL_DIR` mode: the image's own configuration
/// first, then the pilot's config dir as the last local config dir, so its files (the
/// fetched pool files, then 99-pilot.conf) are read after everything the image ships.
pub fn render_top_level(local: &LocalDir, config_dir: &Path, now: DateTime<Utc>) -> String {
    format!(
        "# Written by pilot at {} (PILOT_LOCAL_DIR mode). Do not edit: it is rewritten at every\n\
         # start. condor's programs read it through CONDOR_CONFIG.\n\
         include : {}\n\
         LOCAL_CONFIG_DIR = $(LOCAL_CONFIG_DIR), {}\n",
        now.to_rfc3339(),
        local.base_config.display(),
        config_dir.display()
    )
}

/// Condor's own graceful deadline: shorter than the pilot's, so condor finishes its graceful
/// shutdown before the pilot escalates to a fast one.
fn condor_graceful_timeout(pilot_graceful: Duration) -> u64 {
    let secs = pilot_graceful.as_secs();
    secs.saturating_sub((secs / 10).max(5)).max(1)
}

/// Renders the pilot's configuration file.
pub fn render(settings: &Settings, token: &TokenPlacement<'_>, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; `let _` keeps clippy quiet without unwraps.
    let _ = writeln!(
        out,
        "# Written by pilot at {} from its PILOT_* environment. Do not edit: it is rewritten\n\
         # at every start. It sorts last so it overrides the fetched pool configuration.\n",
        now.to_rfc3339()
    );

    let r = &settings.resources;
    out.push_str("# Slot resources granted by pilotd (unset values are detected by condor).\n");
    if let Some(cpus) = r.cpus {
        let _ = writeln!(out, "NUM_CPUS = {cpus}");
    }
    if let Some(mib) = r.memory_mib {
        let _ = writeln!(out, "MEMORY = {mib}");
    }
    if let Some(kib) = r.disk_kib {
        let _ = writeln!(out, "DISK = {kib}");
    }
    let mut slot_type = String::from("cpus=100%, memory=100%, disk=100%");
    match r.gpus {
        Some(0) => {}
        Some(n) => {
            out.push_str("use feature : GPUs\n");
            let _ = write!(slot_type, ", gpus={n}");
        }
        None => {}
    }
    let _ = writeln!(
        out,
        "NUM_SLOTS = 1\nNUM_SLOTS_TYPE_1 = 1\nSLOT_TYPE_1 = {slot_type}\nSLOT_TYPE_1_PARTITIONABLE = True\n"
    );

    if let Some(local) = &settings.local_dir {
        out.push_str(
            "# condor runs as this container's user, from PILOT_LOCAL_DIR (never as root).\n",
        );
        let _ = writeln!(out, "LOCAL_DIR = {}", local.root.display());
        let _ = writeln!(out, "LOG = {}", local.log().display());
        let _ = writeln!(out, "SPOOL = {}", local.spool().display());
        let _ = writeln!(out, "LOCK = {}", local.lock().display());
        let _ = writeln!(out, "RUN = {}", local.run().display());
        out.push('\n');
    }
    if let Some(name) = &token.daemon_name {
        out.push_str("# This uid has no user name; condor needs one to name its daemons.\n");
        let _ = writeln!(out, "MASTER_NAME = {name}\nSTARTD_NAME = {name}\n");
    }

    out.push_str(
        "# condor's own record of each job that leaves the slot (completed or vacated, its wall\n\
         # and CPU time), which the pilot reports at its end; CPU sampled often enough to count.\n",
    );
    let _ = writeln!(out, "STARTD_HISTORY = {STARTD_HISTORY}");
    let _ = writeln!(
        out,
        "PROCD_MAX_SNAPSHOT_INTERVAL = {PROCD_SNAPSHOT_SECONDS}\n"
    );

    out.push_str("# Where jobs run and how the startd authenticates to the pool.\n");
    let _ = writeln!(out, "EXECUTE = {}", settings.scratch.display());
    let _ = writeln!(out, "SEC_TOKEN_DIRECTORY = {}\n", token.dir.display());

    let idle = settings.idle_timeout.as_secs().max(1);
    out.push_str("# Give up when no slot has had a claim for the idle timeout.\n");
    let _ = writeln!(out, "STARTD_NOCLAIM_SHUTDOWN = {idle}\n");

    out.push_str(
        "# Owner-derived limits, advertised in the slot ad so only jobs that fit are matched.\n",
    );
    let _ = writeln!(out, "PILOT_IDLE_TIMEOUT = {idle}");
    let mut attrs = vec!["PILOT_IDLE_TIMEOUT"];
    if let Some(accept) = settings.accept_until {
        let _ = writeln!(out, "PILOT_ACCEPT_UNTIL = {}", accept.timestamp());
        attrs.push("PILOT_ACCEPT_UNTIL");
    }
    if let Some(die) = settings.die_at {
        let _ = writeln!(out, "PILOT_DIE_AT = {}", die.timestamp());
        attrs.push("PILOT_DIE_AT");
    }
    if let Some(longest) = settings.longest_job() {
        let _ = writeln!(out, "PILOT_LONGEST_JOB = {}", longest.as_secs());
        attrs.push("PILOT_LONGEST_JOB");
    }
    if let Some(h) = settings.free_hours {
        let _ = writeln!(out, "PILOT_FREE_HOURS = {h}");
        attrs.push("PILOT_FREE_HOURS");
    }
    let _ = writeln!(out, "STARTD_ATTRS = $(STARTD_ATTRS) {}\n", attrs.join(" "));

    out.push_str(
        "# Accept jobs only while the owner allows and only jobs that can finish in time.\n",
    );
    let mut start = vec!["($(START:True))".to_owned()];
    if settings.accept_until.is_some() {
        start.push("(time() < $(PILOT_ACCEPT_UNTIL))".to_owned());
    }
    if settings.die_at.is_some() {
        start.push(
            "(TARGET.AllowedExecuteDuration =?= undefined || \
             TARGET.AllowedExecuteDuration <= $(PILOT_DIE_AT) - time())"
                .to_owned(),
        );
    }
    if let Some(extra) = &settings.start_extra {
        start.push(format!("({extra})"));
    }
    let _ = writeln!(out, "START = {}\n", start.join(" && "));

    out.push_str(
        "# End condor when the startd is gone (idle timeout) or the owner's deadline passed.\n",
    );
    let mut shutdown =
        vec!["(STARTD_StartTime =?= 0 && (time() - DaemonStartTime) > 60)".to_owned()];
    if settings.die_at.is_some() {
        shutdown.push("(time() > $(PILOT_DIE_AT))".to_owned());
    }
    let _ = writeln!(out, "MASTER.DAEMON_SHUTDOWN = {}", shutdown.join(" || "));
    let _ = writeln!(
        out,
        "SHUTDOWN_GRACEFUL_TIMEOUT = {}",
        condor_graceful_timeout(settings.graceful_timeout)
    );
    out
}

/// The slot-ad attributes that do not come from `PILOT_*` settings: pilotd's ad file and the
/// CVMFS probe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotAds {
    /// Validated `NAME = value` pairs as they were at start (see `adfile`, `cvmfs`).
    pub initial: Vec<(String, String)>,
    /// The cron job that keeps them current, when the pilot could name its own binary.
    pub cron: Option<CronJob>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronJob {
    pub executable: PathBuf,
    /// Arguments needing no quoting (settings allow no space, quote or `$` in them).
    pub args: Vec<String>,
    pub period: Duration,
}

/// The configuration lines for [`SlotAds`], appended to 99-pilot.conf.
pub fn render_slot_ads(ads: &SlotAds) -> String {
    let mut out = String::new();
    if !ads.initial.is_empty() {
        out.push_str(
            "\n# pilotd's ad file and the CVMFS probe, as they were at start (the cron job below\n\
             # keeps them current).\n",
        );
        for (name, value) in &ads.initial {
            let _ = writeln!(out, "{name} = {value}");
        }
        let names: Vec<&str> = ads.initial.iter().map(|(n, _)| n.as_str()).collect();
        let _ = writeln!(out, "STARTD_ATTRS = $(STARTD_ATTRS) {}", names.join(" "));
    }
    if let Some(cron) = &ads.cron {
        let job = crate::startd_cron::JOB_NAME;
        out.push_str(
            "\n# The pilot itself as a startd cron job: re-reads pilotd's ad file and re-probes CVMFS.\n",
        );
        let _ = writeln!(out, "STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) {job}");
        let _ = writeln!(
            out,
            "STARTD_CRON_{job}_EXECUTABLE = {}",
            cron.executable.display()
        );
        let _ = writeln!(out, "STARTD_CRON_{job}_ARGS = {}", cron.args.join(" "));
        let _ = writeln!(
            out,
            "STARTD_CRON_{job}_PERIOD = {}",
            cron.period.as_secs().max(1)
        );
        let _ = writeln!(out, "STARTD_CRON_{job}_MODE = Periodic");
        // A run hung past its period is replaced, not stacked.
        let _ = writeln!(out, "STARTD_CRON_{job}_KILL = True");
        // Without this a changed value waits for the next UPDATE_INTERVAL (5 min by default);
        // a pool that chose a policy keeps it.
        out.push_str("STARTD_CRON_AUTOPUBLISH = $(STARTD_CRON_AUTOPUBLISH:If_Changed)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::SlotResources;
    use std::collections::BTreeMap;

    fn settings(extra: &[(&str, &str)]) -> Settings {
        let mut env: BTreeMap<String, String> = [
            ("PILOT_CONFIG_URLS", "https://c.example.org/pool.conf"),
            ("PILOT_TOKEN_FILE", "/etc/pilotd/pool.token"),
            ("PILOT_IDLE_TIMEOUT", "5m"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        for (k, v) in extra {
            env.insert((*k).to_owned(), (*v).to_owned());
        }
        Settings::from_env(&env).unwrap()
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_150_000, 0).unwrap()
    }

    fn render_with(s: &Settings) -> String {
        let dir = PathBuf::from("/etc/condor/tokens.d");
        render(
            s,
            &TokenPlacement {
                dir: &dir,
                daemon_name: None,
            },
            now(),
        )
    }

    #[test]
    fn learned_free_hours_are_advertised() {
        let text = render_with(&settings(&[("PILOT_FREE_HOURS", "9")]));
        assert!(text.contains("PILOT_FREE_HOURS = 9\n"), "{text}");
        assert!(
            text.contains("STARTD_ATTRS = $(STARTD_ATTRS) PILOT_IDLE_TIMEOUT PILOT_FREE_HOURS"),
            "{text}"
        );
        assert!(!render_with(&settings(&[])).contains("PILOT_FREE_HOURS"));
        assert!(
            Settings::from_env(
                &[
                    ("PILOT_CONFIG_URLS", "https://c/x"),
                    ("PILOT_TOKEN_FILE", "/t"),
                    ("PILOT_FREE_HOURS", "lots"),
                ]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
            )
            .is_err()
        );
    }

    #[test]
    fn full_settings_render_every_knob() {
        let s = settings(&[
            ("PILOT_CPUS", "4"),
            ("PILOT_MEMORY_MIB", "8192"),
            ("PILOT_DISK_KIB", "20971520"),
            ("PILOT_GPUS", "1"),
            ("PILOT_ACCEPT_UNTIL", "1796160600"),
            ("PILOT_DIE_AT", "1796189400"),
            ("PILOT_START_EXTRA", "TARGET.Owner == \"alice\""),
        ]);
        let text = render_with(&s);
        for line in [
            "NUM_CPUS = 4",
            "MEMORY = 8192",
            "DISK = 20971520",
            "use feature : GPUs",
            "SLOT_TYPE_1 = cpus=100%, memory=100%, disk=100%, gpus=1",
            "SLOT_TYPE_1_PARTITIONABLE = True",
            "STARTD_NOCLAIM_SHUTDOWN = 300",
            "PILOT_ACCEPT_UNTIL = 1796160600",
            "PILOT_DIE_AT = 1796189400",
            "PILOT_LONGEST_JOB = 28800",
            "STARTD_ATTRS = $(STARTD_ATTRS) PILOT_IDLE_TIMEOUT PILOT_ACCEPT_UNTIL PILOT_DIE_AT PILOT_LONGEST_JOB",
            "SEC_TOKEN_DIRECTORY = /etc/condor/tokens.d",
            "EXECUTE = /var/lib/condor/execute",
            "MASTER.DAEMON_SHUTDOWN = (STARTD_StartTime =?= 0 && (time() - DaemonStartTime) > 60) || (time() > $(PILOT_DIE_AT))",
            "SHUTDOWN_GRACEFUL_TIMEOUT = 270",
            "STARTD_HISTORY = $(LOG)/startd_history",
            "PROCD_MAX_SNAPSHOT_INTERVAL = 5",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        let start = text.lines().find(|l| l.starts_with("START =")).unwrap();
        assert!(start.starts_with("START = ($(START:True)) && (time() < $(PILOT_ACCEPT_UNTIL))"));
        assert!(start.contains("AllowedExecuteDuration <= $(PILOT_DIE_AT) - time()"));
        assert!(start.ends_with("&& (TARGET.Owner == \"alice\")"));
        assert!(!text.contains("DEFAULT_MASTER_SHUTDOWN_SCRIPT ="));
    }

    #[test]
    fn unset_resources_and_deadlines_leave_condor_defaults() {
        let s = settings(&[]);
        assert_eq!(s.resources, SlotResources::default());
        let text = render_with(&s);
        assert!(!text.contains("NUM_CPUS"));
        assert!(!text.contains("MEMORY ="));
        assert!(!text.contains("PILOT_DIE_AT"));
        assert!(text.contains("START = ($(START:True))\n"));
        assert!(text.contains(
            "MASTER.DAEMON_SHUTDOWN = (STARTD_StartTime =?= 0 && (time() - DaemonStartTime) > 60)\n"
        ));
    }

    #[test]
    fn zero_gpus_does_not_enable_gpu_discovery() {
        let text = render_with(&settings(&[("PILOT_GPUS", "0")]));
        assert!(!text.contains("GPUs"));
    }

    #[test]
    fn local_dir_mode_puts_everything_condor_writes_below_it() {
        let s = settings(&[
            ("PILOT_LOCAL_DIR", "/pilot/condor"),
            ("CONDOR_CONFIG", "/opt/c"),
        ]);
        let text = render_with(&s);
        for line in [
            "LOCAL_DIR = /pilot/condor",
            "LOG = /pilot/condor/log",
            "SPOOL = /pilot/condor/spool",
            "LOCK = /pilot/condor/lock",
            "RUN = /pilot/condor/run",
            "EXECUTE = /pilot/condor/execute",
            "SEC_TOKEN_DIRECTORY = /etc/condor/tokens.d",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        let local = s.local_dir.as_ref().unwrap();
        let top = render_top_level(local, &s.condor_config_dir, now());
        assert!(top.contains("\ninclude : /opt/c\n"), "{top}");
        assert!(
            top.contains("\nLOCAL_CONFIG_DIR = $(LOCAL_CONFIG_DIR), /pilot/condor/config.d\n"),
            "{top}"
        );
        // Without the mode, the image's layout stays.
        assert!(!render_with(&settings(&[])).contains("LOCAL_DIR"));
    }

    #[test]
    fn a_uid_without_a_name_gets_named_daemons() {
        let s = settings(&[]);
        let dir = PathBuf::from("/t");
        let text = render(
            &s,
            &TokenPlacement {
                dir: &dir,
                daemon_name: Some(daemon_name_for_uid(4242)),
            },
            now(),
        );
        assert!(
            text.contains("MASTER_NAME = uid4242@$(FULL_HOSTNAME)\n"),
            "{text}"
        );
        assert!(
            text.contains("STARTD_NAME = uid4242@$(FULL_HOSTNAME)\n"),
            "{text}"
        );
    }

    #[test]
    fn slot_ads_start_as_startd_attrs_and_a_cron_job_keeps_them_current() {
        let ads = SlotAds {
            initial: vec![
                ("PILOTD_INSTANCE".into(), "\"lab-3\"".into()),
                ("HAS_CVMFS_cms_cern_ch".into(), "True".into()),
            ],
            cron: Some(CronJob {
                executable: "/usr/local/bin/pilot".into(),
                args: vec![
                    "startd-cron".into(),
                    "ad".into(),
                    "--cvmfs-dir".into(),
                    "/cvmfs".into(),
                ],
                period: Duration::from_secs(7),
            }),
        };
        let text = render_slot_ads(&ads);
        for line in [
            "PILOTD_INSTANCE = \"lab-3\"",
            "HAS_CVMFS_cms_cern_ch = True",
            "STARTD_ATTRS = $(STARTD_ATTRS) PILOTD_INSTANCE HAS_CVMFS_cms_cern_ch",
            "STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) PILOTADS",
            "STARTD_CRON_PILOTADS_EXECUTABLE = /usr/local/bin/pilot",
            "STARTD_CRON_PILOTADS_ARGS = startd-cron ad --cvmfs-dir /cvmfs",
            "STARTD_CRON_PILOTADS_PERIOD = 7",
            "STARTD_CRON_PILOTADS_MODE = Periodic",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert_eq!(render_slot_ads(&SlotAds::default()), "");
        let no_initial = render_slot_ads(&SlotAds {
            initial: vec![],
            ..ads
        });
        assert!(!no_initial.contains("STARTD_ATTRS"), "{no_initial}");
        assert!(no_initial.contains("STARTD_CRON_JOBLIST"));
    }

    #[test]
    fn rendering_is_deterministic() {
        let s = settings(&[("PILOT_CPUS", "2")]);
        assert_eq!(render_with(&s), render_with(&s));
    }
}
