//! `pilotd snooze [DURATION]`: the owner's "not now", without root. The daemon takes it over
//! its control socket and authorises the caller by peer credentials (`volunteer::owner::control`).

use super::{CmdError, ask_daemon};
use crate::cli::{Global, SnoozeArgs};
use pilotd_core::config::units::parse_duration;
use pilotd_volunteer::owner::request::Request;

pub fn run(g: &Global, a: &SnoozeArgs) -> Result<String, CmdError> {
    let d = parse_duration(&a.duration).map_err(|e| {
        CmdError::Usage(format!(
            "snooze {}: {e}\n  hint: write a duration like 30m, 2h or 1day",
            a.duration
        ))
    })?;
    ask_daemon(
        g,
        Request::Snooze {
            seconds: d.as_secs(),
        },
    )
}
