//! The record rules of the session probe, on encoded utmp records and a table-driven host:
//! no filesystem, no real processes, no user database.

use std::cell::RefCell;
use std::path::Path;

use crate::observe::sessions::{HostLookup, SessionsError, sessions_from_entries};
use crate::snapshot::Session;
use chrono::{DateTime, TimeZone, Utc};
use pilotd_test_support::utmp::{self, LOGIN_PROCESS, Record};
use utmp_rs::UtmpParser;

/// 2024-01-10 12:00:00 UTC.
const NOW: i32 = 1_704_888_000;
const ALIVE: i32 = 100;
const DEAD: i32 = 200;

/// pid 100 alive, everything else dead; alice is uid 1000; pts/0 used 5 minutes ago, pts/1
/// "used" in the future. Records every pid it is asked about.
#[derive(Default)]
struct Table {
    asked: RefCell<Vec<i32>>,
}

impl HostLookup for Table {
    fn is_alive(&self, pid: i32) -> bool {
        self.asked.borrow_mut().push(pid);
        pid == ALIVE
    }
    fn uid_of(&self, user: &str) -> Option<u32> {
        (user == "alice").then_some(1000)
    }
    fn tty_atime(&self, line: &str) -> Option<DateTime<Utc>> {
        match line {
            "pts/0" => Some(at(NOW - 300)),
            "pts/1" => Some(at(NOW + 60)),
            _ => None,
        }
    }
}

fn at(secs: i32) -> DateTime<Utc> {
    Utc.timestamp_opt(i64::from(secs), 0).unwrap()
}

fn sessions(records: &[Record<'_>], host: &Table) -> Vec<Session> {
    let bytes = utmp::file(records);
    sessions_from_entries(
        Path::new("utmp"),
        UtmpParser::from_reader(&bytes[..]),
        at(NOW),
        host,
    )
    .unwrap()
}

fn users(records: &[Record<'_>]) -> Vec<String> {
    sessions(records, &Table::default())
        .into_iter()
        .map(|s| s.user)
        .collect()
}

#[test]
fn a_live_login_is_reported_with_everything_known_about_it() {
    let got = sessions(
        &[Record {
            host: "203.0.113.7",
            usecs: 500_000,
            ..Record::user(ALIVE, "alice", "pts/0", NOW - 3600)
        }],
        &Table::default(),
    );
    assert_eq!(
        got,
        vec![Session {
            user: "alice".into(),
            uid: Some(1000),
            line: "pts/0".into(),
            host: "203.0.113.7".into(),
            login: at(NOW - 3600) + chrono::Duration::milliseconds(500),
            idle_s: Some(300),
            local: false,
            locked_since: None,
        }]
    );
}

#[test]
fn unknown_user_and_uninspectable_line_are_none_not_dropped() {
    let got = sessions(
        &[Record::user(ALIVE, "bob", ":0", NOW - 60)],
        &Table::default(),
    );
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].uid, got[0].idle_s), (None, None));
}

#[test]
fn tty_used_after_now_is_idle_zero() {
    let got = sessions(
        &[Record::user(ALIVE, "alice", "pts/1", NOW - 60)],
        &Table::default(),
    );
    assert_eq!(got[0].idle_s, Some(0));
}

#[test]
fn sessions_come_in_file_order() {
    let order = [
        ("zed", "pts/7"),
        ("amy", "pts/3"),
        ("kim", "tty1"),
        ("bea", ":0"),
        ("amy", "pts/5"),
    ];
    let records: Vec<_> = order
        .iter()
        .map(|(u, l)| Record::user(ALIVE, u, l, NOW - 60))
        .collect();
    assert_eq!(users(&records), order.map(|(u, _)| u));
}

#[test]
fn stale_login_does_not_count() {
    assert!(users(&[Record::user(DEAD, "carol", "pts/1", NOW - 60)]).is_empty());
}

#[test]
fn unverifiable_pids_do_not_count_and_are_never_passed_to_kill() {
    // kill(0, ..) and kill(-1, ..) address process groups and would always "succeed".
    let host = Table::default();
    let got = sessions(
        &[
            Record::user(0, "zero", "pts/1", NOW - 60),
            Record::user(-1, "minus", "pts/2", NOW - 60),
            Record::user(ALIVE, "alice", "pts/3", NOW - 60),
        ],
        &host,
    );
    assert_eq!(got.len(), 1);
    assert_eq!(*host.asked.borrow(), vec![ALIVE]);
}

#[test]
fn only_user_processes_with_a_name_count() {
    let login = Record {
        kind: LOGIN_PROCESS,
        ..Record::user(ALIVE, "LOGIN", "tty2", NOW - 60)
    };
    assert!(users(&[login, Record::user(ALIVE, "", "pts/0", NOW - 60)]).is_empty());
}

#[test]
fn later_dead_process_ends_the_login_on_its_line() {
    assert!(
        users(&[
            Record::user(ALIVE, "dave", "pts/2", NOW - 600),
            Record::dead("pts/2", NOW - 300),
        ])
        .is_empty()
    );
}

#[test]
fn dead_process_on_another_line_does_not() {
    assert_eq!(
        users(&[
            Record::user(ALIVE, "dave", "pts/2", NOW - 600),
            Record::dead("pts/3", NOW - 300),
        ]),
        ["dave"]
    );
}

#[test]
fn dead_process_older_than_the_login_does_not_end_it() {
    // Either place in the file: a stale DEAD slot for a reused line must not hide a newer login.
    assert_eq!(
        users(&[
            Record::dead("pts/2", NOW - 900),
            Record::user(ALIVE, "erin", "pts/2", NOW - 600),
        ]),
        ["erin"]
    );
    assert_eq!(
        users(&[
            Record::user(ALIVE, "erin", "pts/2", NOW - 600),
            Record::dead("pts/2", NOW - 900),
        ]),
        ["erin"]
    );
}

#[test]
fn login_after_a_logout_on_the_same_line_counts() {
    assert_eq!(
        users(&[
            Record::user(ALIVE, "dave", "pts/2", NOW - 900),
            Record::dead("pts/2", NOW - 600),
            Record::user(ALIVE, "erin", "pts/2", NOW - 300),
        ]),
        ["erin"]
    );
}

#[test]
fn a_bad_record_is_skipped_and_the_rest_still_count() {
    let mut bytes = utmp::file(&[
        Record::user(ALIVE, "mallory", "pts/9", NOW - 60),
        Record::user(ALIVE, "alice", "pts/0", NOW - 60),
    ]);
    // Make the first record's user invalid UTF-8.
    bytes[44] = 0xff;
    let got = sessions_from_entries(
        Path::new("utmp"),
        UtmpParser::from_reader(&bytes[..]),
        at(NOW),
        &Table::default(),
    )
    .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].user, "alice");
}

#[test]
fn nothing_decodable_is_an_error_naming_the_file() {
    let mut bytes = utmp::file(&[Record::user(ALIVE, "alice", "pts/0", NOW - 60)]);
    bytes[0] = 0x7f; // unknown record type
    let err = sessions_from_entries(
        Path::new("/run/utmp"),
        UtmpParser::from_reader(&bytes[..]),
        at(NOW),
        &Table::default(),
    )
    .unwrap_err();
    assert!(matches!(err, SessionsError::Corrupt { bad: 1, .. }));
    assert!(
        err.to_string()
            .starts_with("/run/utmp is not a readable utmp file"),
        "{err}"
    );
}
