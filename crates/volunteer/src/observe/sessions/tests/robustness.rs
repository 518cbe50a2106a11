//! The session probe on hostile input: random bytes and random damage to a valid utmp file
//! must never panic, through the pure core and through the real file path.
//!
//! The same property is a cargo-fuzz target (fuzz/fuzz_targets/utmp_parse.rs) for longer runs.

use std::path::Path;

use crate::observe::sessions::{HostLookup, read_sessions, sessions_from_entries};
use crate::snapshot::Sessions;
use chrono::{DateTime, TimeZone, Utc};
use pilotd_test_support::utmp::{self, BOOT_TIME, RECORD_SIZE, Record};
use proptest::prelude::*;
use utmp_rs::UtmpParser;

const NOW: i32 = 1_704_888_000;

/// Every pid alive, every user known, every tty just used: the host that lets the most
/// records through to the later stages.
struct Everything;

impl HostLookup for Everything {
    fn is_alive(&self, pid: i32) -> bool {
        assert!(pid > 0, "liveness asked about pid {pid}");
        true
    }
    fn uid_of(&self, _user: &str) -> Option<u32> {
        Some(1000)
    }
    fn tty_atime(&self, _line: &str) -> Option<DateTime<Utc>> {
        Some(Utc.timestamp_opt(i64::from(NOW) - 10, 0).unwrap())
    }
}

fn valid_file() -> Vec<u8> {
    utmp::file(&[
        Record {
            kind: BOOT_TIME,
            line: "~",
            user: "reboot",
            host: "6.1.0",
            ..Record::dead("~", NOW - 7200)
        },
        Record::user(4242, "root", "tty1", NOW - 3600),
        Record {
            host: "203.0.113.7",
            ..Record::user(4243, "alice", "pts/0", NOW - 1800)
        },
        Record::user(4244, "bob", ":0", NOW - 900),
        Record::dead("pts/1", NOW - 60),
    ])
}

fn now() -> DateTime<Utc> {
    Utc.timestamp_opt(i64::from(NOW), 0).unwrap()
}

/// The pure core, plus the invariants any answer must satisfy.
fn check(bytes: &[u8]) {
    let result = sessions_from_entries(
        Path::new("fuzz"),
        UtmpParser::from_reader(bytes),
        now(),
        &Everything,
    );
    if let Ok(sessions) = result {
        let complete = bytes.len() / RECORD_SIZE;
        assert!(sessions.len() <= complete, "more sessions than records");
        assert!(sessions.iter().all(|s| !s.user.is_empty()));
    } else if bytes.is_empty() {
        panic!("an empty file is nobody, not an error");
    }
}

/// Damage to a file: overwrite bytes, then optionally cut it or splice junk in.
#[derive(Debug, Clone)]
enum Damage {
    Overwrite(Vec<(usize, u8)>),
    Truncate(usize),
    Insert(usize, Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        prop::collection::vec((any::<usize>(), any::<u8>()), 1..32).prop_map(Damage::Overwrite),
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..800))
            .prop_map(|(at, junk)| Damage::Insert(at, junk)),
    ]
}

fn apply(mut bytes: Vec<u8>, damages: &[Damage]) -> Vec<u8> {
    for d in damages {
        let len = bytes.len().max(1);
        match d {
            Damage::Overwrite(edits) => {
                for (at, b) in edits {
                    if let Some(slot) = bytes.get_mut(at % len) {
                        *slot = *b;
                    }
                }
            }
            Damage::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
            Damage::Insert(at, junk) => {
                let at = at % (bytes.len() + 1);
                bytes.splice(at..at, junk.iter().copied());
            }
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4 * RECORD_SIZE)) {
        check(&bytes);
    }

    #[test]
    fn damaged_utmp_never_panics(damages in prop::collection::vec(damage(), 1..4)) {
        check(&apply(valid_file(), &damages));
    }

    /// Only the type field of each record is random: every record type, known or not, with
    /// otherwise plausible contents.
    #[test]
    fn any_record_types_never_panic(types in prop::collection::vec(any::<i16>(), 5)) {
        let mut bytes = valid_file();
        for (i, t) in types.iter().enumerate() {
            bytes[i * RECORD_SIZE..i * RECORD_SIZE + 2].copy_from_slice(&t.to_ne_bytes());
        }
        check(&bytes);
    }

    /// Overwrites only: the record structure survives, so undamaged records still decode.
    #[test]
    fn overwritten_bytes_leave_undamaged_records_readable(
        edits in prop::collection::vec((0..5 * RECORD_SIZE, any::<u8>()), 1..8)
    ) {
        let bytes = apply(valid_file(), &[Damage::Overwrite(edits.clone())]);
        let touched: Vec<usize> = edits.iter().map(|(at, _)| at / RECORD_SIZE).collect();
        let got = sessions_from_entries(
            Path::new("fuzz"),
            UtmpParser::from_reader(&bytes[..]),
            now(),
            &Everything,
        );
        // Record 1 is root on tty1; it still counts unless it, or the DEAD record (4) that
        // could now name its line, was hit.
        if !touched.contains(&1) && !touched.contains(&4) {
            let sessions = got.expect("undamaged records decode");
            prop_assert!(sessions.iter().any(|s| s.user == "root" && s.line == "tty1"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The real path: a file on disk, real kill(pid, 0) on whatever pids the damage produced
    /// (signal 0 sends nothing), real stat under an empty device directory.
    #[test]
    fn damaged_file_on_disk_never_panics(damages in prop::collection::vec(damage(), 1..4)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("utmp");
        std::fs::write(&path, apply(valid_file(), &damages)).unwrap();
        let dev = dir.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        match read_sessions(&path, &dev, now()) {
            Sessions::Known(v) => prop_assert!(v.iter().all(|s| s.idle_s.is_none())),
            Sessions::Unknown(why) => prop_assert!(why.contains(path.to_str().unwrap())),
        }
    }
}
