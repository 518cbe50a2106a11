//! `pilotd open`: opens the owner's status page with a one-time key, which the daemon gives
//! only to callers the control socket authorises (as for `snooze`). Prints the address too,
//! for a machine without a desktop or a browser of its own.

use super::{CmdError, ask_daemon};
use crate::cli::Global;
use crate::volunteer::owner::Request;

pub fn run(g: &Global) -> Result<String, CmdError> {
    let url = ask_daemon(g, Request::Open)?.trim().to_string();
    // A desktop session opens it in the owner's browser; elsewhere the address is enough.
    let desktop =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    let opened = desktop
        && std::process::Command::new("xdg-open")
            .arg(&url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    Ok(if opened {
        format!("opened {url} (the key works once, within 2 minutes)\n")
    } else {
        format!(
            "open this address in a browser on this machine (it works once, within 2 minutes):\n{url}\n"
        )
    })
}
