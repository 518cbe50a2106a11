//! The command line (a contract: install scripts and owners type it). Parsing only.

use clap::{Args, Parser, Subcommand, ValueEnum};
use pilotd_core::config::units::{UnitError, parse_duration};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "pilotd",
    version,
    about = "Puts idle computers to work for an HTCondor pool without getting in the owner's way",
    long_about = "pilotd runs HTCondor workers on a donated machine only when its owner's policy allows \
                  (volunteer mode), or provisions worker pods for idle jobs (kubernetes mode).\n\n\
                  Exit codes: 0 ok, 1 runtime failure, 2 bad usage or invalid configuration."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct Global {
    /// pilotd.toml (optional for check, plan, snapshot and schedule: built-in defaults apply)
    #[arg(
        short = 'c',
        long = "config",
        global = true,
        env = "PILOTD_CONFIG",
        default_value = "/etc/pilotd/pilotd.toml"
    )]
    pub config: PathBuf,
    /// The owner's policy file (overrides `policy` in pilotd.toml)
    #[arg(long, global = true, env = "PILOTD_POLICY")]
    pub policy: Option<PathBuf>,
    /// Log format on stderr
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon (foreground by default, for systemd)
    Run(RunArgs),
    /// Validate pilotd.toml and the policy; print every error as FILE:LINE:COL (exit 0 or 2)
    Check,
    /// Observe (or read a snapshot), decide, and print the decision and next actions; acts on nothing
    Plan(PlanArgs),
    /// Print the current observation as JSON (the format `plan --snapshot` reads)
    Snapshot,
    /// Workers now, the last decision and back-off
    Status(StatusArgs),
    /// The owner's week at a glance: when the machine computes and how much
    Schedule(ScheduleArgs),
    /// Write a commented policy.toml by asking the owner a few questions
    // Boxed: its answers, one flag each, make it the largest command by far.
    Init(Box<InitArgs>),
    /// One garbage-collection pass
    Gc(GcArgs),
    /// Convert an NRP provisioner osg_provisioner.conf to a pilotd.toml in kubernetes mode
    ImportIni(ImportIniArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout
    Completions(CompletionsArgs),
    /// Write the man pages (pilotd.1 and pilotd-SUBCOMMAND.1) into a directory
    Manpages(ManpagesArgs),
    /// "Not now": no worker starts for DURATION (default 1h) and running ones are handled as the
    /// policy's on_return says; for root, the policy's [owner] users and the pilotd group
    Snooze(SnoozeArgs),
    /// End a snooze: workers may start again when the policy allows
    Resume,
    /// Open the status page on 127.0.0.1 in your browser (same users as snooze)
    Open,
    /// After pilotd ended abnormally (systemd's ExecStopPost, SERVICE_RESULT not "success"):
    /// pause this instance's workers until a pilotd decides again; --remove deletes them
    Failsafe(FailsafeArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Detach from the terminal (for hosts without systemd)
    #[arg(long)]
    pub daemon: bool,
    /// PID file, locked while the daemon runs
    #[arg(long)]
    pub pidfile: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct FailsafeArgs {
    /// Stop and delete this instance's workers and their scratch dirs instead of pausing them,
    /// whatever SERVICE_RESULT says (what the package does when pilotd is removed)
    #[arg(long)]
    pub remove: bool,
    /// With --remove: how long each worker gets after SIGTERM before SIGKILL, e.g. "10s"
    #[arg(long, default_value = "10s", value_parser = parse_grace)]
    pub grace: Duration,
}

/// `--grace`: a duration as pilotd.toml writes one, at most an hour (the package's prerm
/// waits for it, and so does whoever removes the package).
fn parse_grace(s: &str) -> Result<Duration, String> {
    let longer = || format!("`{s}` is longer than an hour");
    match parse_duration(s) {
        Ok(d) if d > Duration::from_secs(3600) => Err(longer()),
        Ok(d) => Ok(d),
        Err(UnitError::DurationRange(_)) => Err(longer()),
        Err(_) => Err(format!("`{s}` is not a duration like \"10s\"")),
    }
}

#[derive(Debug, Args)]
pub struct SnoozeArgs {
    /// How long, e.g. "30m", "2h", "1day" (at most 7 days)
    #[arg(default_value = "1h")]
    pub duration: String,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Decide for this instant (RFC 3339) instead of now; defaults to the snapshot's time
    /// when --snapshot is given
    #[arg(long)]
    pub now: Option<String>,
    /// Replay a saved observation (from `pilotd snapshot`) instead of observing this host
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// How many days to draw, starting today
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=28))]
    pub days: u32,
    /// Draw from this instant (RFC 3339) instead of now
    #[arg(long)]
    pub now: Option<String>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write the policy (default: the policy path of pilotd.toml)
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Do not ask; take the flags (and defaults for what they do not set)
    #[arg(long)]
    pub yes: bool,
    /// Overwrite an existing policy file
    #[arg(long)]
    pub force: bool,
    /// When the machine may compute: "nights-and-weekends", "nights", "weekends", "always",
    /// or windows like "mon-fri 19:00-07:30; sat,sun 00:00-24:00"
    #[arg(long)]
    pub when: Option<String>,
    /// What counts as the owner being here: any, active or ignore
    #[arg(long)]
    pub sessions: Option<String>,
    /// Share of CPUs ("50%" or a count)
    #[arg(long)]
    pub cpus: Option<String>,
    /// Share of memory ("50%" or a size like "8GiB")
    #[arg(long)]
    pub memory: Option<String>,
    /// The longest job accepted, e.g. "8h"
    #[arg(long)]
    pub longest_job: Option<String>,
    /// What happens to workers when the owner comes back: pause, graceful or fast
    #[arg(long)]
    pub on_return: Option<String>,
    /// What a metered network holds back: no-downloads, pause or ignore
    #[arg(long)]
    pub on_metered: Option<String>,
    /// The hottest the CPU may get while workers compute, e.g. "80C", or "none"
    #[arg(long)]
    pub max_temperature: Option<String>,
    /// The fastest any fan may spin while workers compute, e.g. "3000rpm", or "none"
    #[arg(long)]
    pub max_fan: Option<String>,
    /// IANA time zone (default: the system's)
    #[arg(long)]
    pub timezone: Option<String>,
    /// Whether sound playing or recorded, a camera in use or an idle inhibitor counts as
    /// the owner using the machine: yes or no
    #[arg(long)]
    pub media: Option<String>,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Print what would be removed, remove nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct ImportIniArgs {
    /// The provisioner's INI file (osg_provisioner.conf)
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for, e.g. `pilotd completions bash > /etc/bash_completion.d/pilotd`
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManpagesArgs {
    /// Directory to write the pages into (created if missing; existing pages are replaced)
    pub dir: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_parses() {
        assert_eq!(parse_grace("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_grace("3").unwrap(), Duration::from_secs(3));
        assert!(parse_grace("2h").is_err());
        assert!(parse_grace("soon").is_err());
    }

    #[test]
    fn grace_says_why_it_refuses() {
        assert_eq!(
            parse_grace("2h").unwrap_err(),
            "`2h` is longer than an hour"
        );
        assert_eq!(
            parse_grace("200years").unwrap_err(),
            "`200years` is longer than an hour"
        );
        assert_eq!(
            parse_grace("soon").unwrap_err(),
            "`soon` is not a duration like \"10s\""
        );
        assert_eq!(parse_grace("1h").unwrap(), Duration::from_secs(3600));
    }
}
