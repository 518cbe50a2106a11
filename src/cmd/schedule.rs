//! `pilotd schedule`: the owner's week as a grid (days × hours), what the daemon learned of
//! this machine, and what the policy is expected to give per week (`policy::schedule`,
//! `history`, `projection`).

use super::{CmdError, load_config, parse_now};
use crate::cli::{Global, ScheduleArgs};
use chrono::Utc;
use pilotd_core::config::SiteFile;
use pilotd_volunteer::decide::policy::schedule;
use pilotd_volunteer::observe::host::this_machine;
use pilotd_volunteer::{inspect, record::history};
use std::fmt::Write;

pub fn run(g: &Global, a: &ScheduleArgs) -> Result<String, CmdError> {
    let cfg = load_config(g, SiteFile::Optional, this_machine())?;
    let now = parse_now(a.now.as_deref())?.unwrap_or_else(Utc::now);
    // What the daemon learned on this machine, when it has run here.
    let learned = history::peek(&cfg.site.state_dir, &cfg.policy.timezone);
    let mut out = schedule::text(
        &cfg.policy,
        now,
        a.days,
        &cfg.policy_path.display().to_string(),
    );
    if learned.history.overall().is_some() {
        out.push('\n');
        out.push_str(&history::render(&learned.history, &cfg.policy.timezone));
    }
    if let Some(w) = learned.warning {
        let _ = writeln!(out, "\nnote: {w}");
    }
    out.push_str("\nwhat this policy is expected to give per week:\n");
    for line in inspect::expected_week(&cfg.site, &cfg.policy, &cfg.policy, now) {
        let _ = writeln!(out, "  {line}");
    }
    Ok(out)
}
