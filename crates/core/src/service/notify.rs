//! systemd's notify protocol (`Type=notify`): READY after the first successful cycle, STATUS
//! with the current decision, WATCHDOG pings, STOPPING on shutdown. Every call is a no-op when
//! `NOTIFY_SOCKET` is unset (not under systemd), and a failure to notify never stops pilotd.

use sd_notify::NotifyState;
use std::time::Duration;

/// READY with the cycle's STATUS: sent after every cycle, which also completes a reload.
pub fn ready(status: &str) {
    let _ = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn watchdog() {
    let _ = sd_notify::notify(&[NotifyState::Watchdog]);
}

/// systemd v253+ requires a MONOTONIC_USEC with RELOADING, or it fails the reload.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => {
            let _ = sd_notify::notify(&[NotifyState::Reloading, now]);
        }
        Err(_) => {
            let _ = sd_notify::notify(&[NotifyState::Reloading]);
        }
    }
}

pub fn stopping() {
    let _ = sd_notify::notify(&[NotifyState::Stopping]);
}

/// How often to ping the watchdog: half its timeout, if systemd set one.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|d| d / 2)
}
