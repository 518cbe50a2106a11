//! `pilotd resume`: ends the owner's snooze (see `snooze`).

use super::{CmdError, ask_daemon};
use crate::cli::Global;
use pilotd_volunteer::owner::request::Request;

pub fn run(g: &Global) -> Result<String, CmdError> {
    ask_daemon(g, Request::Resume)
}
