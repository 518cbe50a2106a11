//! Arbitrary bytes as a utmp file through the session probe's pure core: it must never panic,
//! and never ask about a pid that `kill` would read as a process group.
#![no_main]

use std::path::Path;

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use pilotd_volunteer::observe::sessions::{HostLookup, sessions_from_bytes};

/// A deterministic host (no syscalls, so runs reproduce): even pids alive, user names with
/// an 'a' known, lines starting with "pts" inspectable at a time derived from the line.
struct Deterministic;

impl HostLookup for Deterministic {
    fn is_alive(&self, pid: i32) -> bool {
        assert!(pid > 0, "liveness asked about pid {pid}");
        pid % 2 == 0
    }
    fn uid_of(&self, user: &str) -> Option<u32> {
        user.contains('a').then_some(1000)
    }
    fn tty_atime(&self, line: &str) -> Option<DateTime<Utc>> {
        line.starts_with("pts")
            .then(|| DateTime::from_timestamp(i64::try_from(line.len()).ok()? << 28, 0))
            .flatten()
    }
}

fuzz_target!(|data: &[u8]| {
    let now = DateTime::from_timestamp(1_704_888_000, 0).unwrap_or_default();
    // The path the daemon takes: parsed records with their raw bytes, so an undecodable
    // login record is decoded lossily (and must not panic either).
    if let Ok(sessions) = sessions_from_bytes(Path::new("fuzz"), data, now, &Deterministic) {
        assert!(sessions.iter().all(|s| !s.user.is_empty()));
    }
});
