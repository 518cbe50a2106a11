//! `pilotd open`: opens the owner's status page. The daemon, asked over the control socket
//! (authorised as for `snooze`), invites the caller's uid and answers with the page's
//! address, which carries no secret: what lets the browser in is that it runs as the same
//! user (the page checks each connection's uid), so the address may be in any process's argv
//! and any local user may read it. Prints the address too, for a machine without a desktop or
//! a browser of its own.

use super::{CmdError, ask_daemon};
use crate::cli::Global;
use pilotd_volunteer::owner::request::Request;

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
    let who = "a browser running as you, once, within 2 minutes";
    Ok(if opened {
        format!("opened {url} (it lets in {who})\n")
    } else {
        format!("open this address in a browser on this machine (it lets in {who}):\n{url}\n")
    })
}
