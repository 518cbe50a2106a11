//! The session probe against real binary utmp files, written by util-linux `utmpdump -r` from
//! the text fixtures in tests/fixtures/utmp/, with coreutils `who FILE` as the oracle.
//!
//! `who` does not check liveness or DEAD_PROCESS records, so it is compared on the records
//! that are alive and not logged out; the records the probe must drop are asserted separately
//! (and asserted to be in `who`'s output, so the fixture really contains them).
//!
//! Needs `utmpdump` (Debian: util-linux) and `who` (Debian: coreutils); both are Essential
//! packages, and a missing one fails the test with the package to install.

#[allow(dead_code)]
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, TimeZone, Utc};
use pilotd_test_support::utmp::{self, RECORD_SIZE, Record};
use pilotd_volunteer::observe::sessions::read_sessions;
use pilotd_volunteer::snapshot::{Session, Sessions};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/utmp");

/// A pid that is certainly alive: this test process.
fn alive_pid() -> u32 {
    std::process::id()
}

/// A pid that cannot exist: the kernel never hands out pids at or above pid_max.
fn stale_pid() -> u32 {
    let max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("read /proc/sys/kernel/pid_max")
        .trim()
        .parse::<u32>()
        .expect("pid_max is a number");
    max + 1
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 1, 10, 12, 0, 0).unwrap()
}

fn run_tool(program: &str, package: &str, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let mut child = Command::new(program)
        .args(args)
        // `who` prints local time; pin it so its output does not depend on the machine.
        .env("TZ", "UTC")
        .env("LC_ALL", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}); install the Debian package {package}")
        });
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A fixture with its pid placeholders filled in. utmpdump segfaults (util-linux 2.38) on a
/// pid field shorter than five characters, so pids are zero-padded like its own output.
fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURES).join(name))
        .unwrap()
        .replace("@ALIVE@", &format!("{:05}", alive_pid()))
        .replace("@STALE@", &format!("{:05}", stale_pid()))
}

/// Binary utmp bytes for utmpdump text.
fn undump(text: &str) -> Vec<u8> {
    run_tool("utmpdump", "util-linux", &["-r"], text.as_bytes())
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// (user, line) of every login `who` reports, sorted.
fn who(file: &Path) -> Vec<(String, String)> {
    let out = run_tool("who", "coreutils", &[file.to_str().unwrap()], b"");
    let mut v: Vec<_> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            (f.next().unwrap().to_string(), f.next().unwrap().to_string())
        })
        .collect();
    v.sort();
    v
}

fn known(s: Sessions) -> Vec<Session> {
    match s {
        Sessions::Known(v) => v,
        Sessions::Unknown(why) => panic!("expected known sessions, got Unknown({why})"),
    }
}

fn unknown(s: Sessions) -> String {
    match s {
        Sessions::Unknown(why) => why,
        Sessions::Known(v) => panic!("expected Unknown, got {v:?}"),
    }
}

fn user_lines(v: &[Session]) -> Vec<(String, String)> {
    let mut v: Vec<_> = v.iter().map(|s| (s.user.clone(), s.line.clone())).collect();
    v.sort();
    v
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = v
        .iter()
        .map(|(u, l)| (u.to_string(), l.to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn encoder_writes_the_bytes_utmpdump_writes() {
    // The byte encoder (used where utmpdump cannot help) must agree with the real tool.
    let records = [
        Record {
            id: "ts/0",
            host: "203.0.113.7",
            usecs: 250_000,
            ..Record::user(4242, "alice", "pts/0", 1_704_877_200)
        },
        Record {
            id: "ts/0",
            ..Record::dead("pts/0", 1_704_880_800)
        },
    ];
    let text: String = records
        .iter()
        .map(|r| {
            let t = Utc.timestamp_opt(i64::from(r.secs), 0).unwrap();
            format!(
                "[{}] [{:05}] [{:<4}] [{:<8}] [{:<12}] [{:<20}] [0.0.0.0        ] [{}]\n",
                r.kind,
                r.pid,
                r.id,
                r.user,
                r.line,
                r.host,
                t.format(&format!("%Y-%m-%dT%H:%M:%S,{:06}+00:00", r.usecs))
            )
        })
        .collect();
    assert_eq!(undump(&text), utmp::file(&records));
}

#[test]
fn live_logins_match_who() {
    let dir = tempfile::tempdir().unwrap();
    let utmp = write(dir.path(), "utmp", &undump(&fixture_text("logins.txt")));
    let dev = tempfile::tempdir().unwrap();

    let got = known(read_sessions(&utmp, dev.path(), now()));

    assert_eq!(user_lines(&got), who(&utmp));
    assert_eq!(
        user_lines(&got),
        pairs(&[
            ("root", "tty1"),
            ("alice", "pts/0"),
            ("bob", ":0"),
            ("nosuchuser.pilotd", "pts/4"),
        ])
    );
    let by_user = |u: &str| got.iter().find(|s| s.user == u).unwrap();
    assert_eq!(by_user("alice").host, "203.0.113.7");
    assert_eq!(
        by_user("alice").login,
        Utc.with_ymd_and_hms(2024, 1, 10, 9, 0, 0).unwrap() + chrono::Duration::milliseconds(250)
    );
    assert_eq!(by_user("bob").host, ":0");
    assert_eq!(by_user("root").host, "");
    assert_eq!(by_user("root").uid, Some(0));
    assert_eq!(by_user("nosuchuser.pilotd").uid, None);
    // The fake dev directory is empty: no line can be inspected.
    assert!(got.iter().all(|s| s.idle_s.is_none()));
}

#[test]
fn stale_logged_out_and_odd_records_do_not_count() {
    let dir = tempfile::tempdir().unwrap();
    let utmp = write(dir.path(), "utmp", &undump(&fixture_text("mixed.txt")));
    let dev = tempfile::tempdir().unwrap();

    let got = user_lines(&known(read_sessions(&utmp, dev.path(), now())));

    let dropped = pairs(&[
        ("carol", "pts/1"), // stale pid
        ("dave", "pts/2"),  // logged out by a later DEAD_PROCESS
        ("grace", "pts/7"), // pid 0: cannot be checked
        ("heidi", "pts/8"), // stale and logged out
    ]);
    let oracle = who(&utmp);
    for d in &dropped {
        assert!(oracle.contains(d), "fixture should make who list {d:?}");
        assert!(!got.contains(d), "{d:?} must not count");
    }
    let expected: Vec<_> = oracle
        .into_iter()
        .filter(|p| !dropped.contains(p))
        .collect();
    assert_eq!(got, expected);
    // erin and frank survive DEAD_PROCESS records for their lines that are older than them.
    assert_eq!(
        got,
        pairs(&[("alice", "pts/0"), ("erin", "pts/3"), ("frank", "pts/5")])
    );
}

#[test]
fn truncated_file_keeps_its_complete_records() {
    let dir = tempfile::tempdir().unwrap();
    let full = undump(&fixture_text("logins.txt"));
    // Records 0..5 are boot, run level, getty, root on tty1, alice on pts/0; cut into the 6th.
    let cut = write(dir.path(), "cut", &full[..5 * RECORD_SIZE + 100]);
    let dev = tempfile::tempdir().unwrap();

    let got = known(read_sessions(&cut, dev.path(), now()));

    assert_eq!(
        user_lines(&got),
        pairs(&[("root", "tty1"), ("alice", "pts/0")])
    );
    assert_eq!(user_lines(&got), who(&cut));
}

#[test]
fn file_cut_inside_its_first_record_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let full = undump(&fixture_text("logins.txt"));
    let cut = write(dir.path(), "cut", &full[..100]);

    let why = unknown(read_sessions(&cut, dir.path(), now()));

    assert!(why.contains("truncated"), "{why}");
    assert!(why.contains(cut.to_str().unwrap()), "{why}");
}

#[test]
fn random_bytes_never_panic_and_never_hide_good_records() {
    let dir = tempfile::tempdir().unwrap();
    let good = undump(&fixture_text("logins.txt"));
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for round in 0..32 {
        let noise: Vec<u8> = (0..(round * 997) % 20_000 + 1)
            .map(|_| {
                // xorshift64: deterministic, so a failure reproduces.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();

        // Noise alone: any answer but a panic.
        let path = write(dir.path(), "noise", &noise);
        let _ = read_sessions(&path, dir.path(), now());

        // Good records followed by noise: the good ones still count.
        let mut mixed = good.clone();
        mixed.extend_from_slice(&noise);
        let path = write(dir.path(), "mixed", &mixed);
        let got = user_lines(&known(read_sessions(&path, dir.path(), now())));
        for want in pairs(&[("root", "tty1"), ("alice", "pts/0"), ("bob", ":0")]) {
            assert!(
                got.contains(&want),
                "round {round}: {want:?} missing from {got:?}"
            );
        }
    }
}

#[test]
fn missing_file_is_unknown_not_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("utmp");

    let why = unknown(read_sessions(&path, dir.path(), now()));

    assert_eq!(
        why,
        format!("cannot read {}: No such file or directory", path.display())
    );
}

#[test]
fn directory_is_unknown() {
    let dir = tempfile::tempdir().unwrap();

    let why = unknown(read_sessions(dir.path(), dir.path(), now()));

    assert_eq!(
        why,
        format!(
            "{} is not a regular file (a directory), so it is not a utmp file; check the utmp path in pilotd.toml",
            dir.path().display()
        )
    );
}

#[test]
fn endless_file_is_unknown() {
    // /dev/zero would decode as an endless run of EMPTY records: a device is refused before
    // reading, and a huge regular file after MAX_RECORDS records' worth of bytes.
    let why = unknown(read_sessions(
        Path::new("/dev/zero"),
        Path::new("/dev"),
        now(),
    ));
    assert!(why.contains("is not a regular file (a device)"), "{why}");
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("utmp");
    let f = std::fs::File::create(&huge).unwrap();
    f.set_len((pilotd_volunteer::observe::sessions::MAX_RECORDS * RECORD_SIZE + 1) as u64)
        .unwrap();
    let why = unknown(read_sessions(&huge, dir.path(), now()));
    assert!(why.contains("more than"), "{why}");
}

/// An empty utmp is "nobody": every login program appends its record, so a login cannot be
/// present without one. (A host where no program writes utmp at all cannot be told apart
/// from the file; a logind source would cover that. A missing file is Unknown.)
#[test]
fn empty_file_is_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "utmp", b"");

    assert_eq!(
        read_sessions(&path, dir.path(), now()),
        Sessions::Known(vec![])
    );
    assert!(who(&path).is_empty());
}

#[test]
fn idle_time_comes_from_the_tty_atime() {
    let dir = tempfile::tempdir().unwrap();
    let utmp = write(dir.path(), "utmp", &undump(&fixture_text("logins.txt")));
    let dev = tempfile::tempdir().unwrap();
    std::fs::create_dir(dev.path().join("pts")).unwrap();
    let set_atime = |rel: &str, t: DateTime<Utc>| {
        let f = std::fs::File::create(dev.path().join(rel)).unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(t.timestamp() as u64);
        f.set_times(std::fs::FileTimes::new().set_accessed(t).set_modified(t))
            .unwrap();
    };
    set_atime("pts/0", now() - chrono::Duration::seconds(300));
    // Touched after `now`: idle 0, not negative.
    set_atime("tty1", now() + chrono::Duration::seconds(60));

    let got = known(read_sessions(&utmp, dev.path(), now()));

    let idle = |u: &str| got.iter().find(|s| s.user == u).unwrap().idle_s;
    assert_eq!(idle("alice"), Some(300));
    assert_eq!(idle("root"), Some(0));
    assert_eq!(idle("bob"), None, "\":0\" is not a tty");
    assert_eq!(idle("nosuchuser.pilotd"), None, "no pts/4 in the fake dev");
}

/// A live login utmp-rs cannot decode still counts: failing toward the owner.
#[test]
fn undecodable_live_logins_count_as_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let alive = alive_pid() as i32;
    let good = Record::user(alive, "bob", "pts/1", 1_704_880_000);
    let mut bad_user = Record::user(alive, "alice", "pts/2", 1_704_880_000).encode();
    bad_user[44..50].copy_from_slice(b"al\xffce\0");
    let mut bad_host = Record::user(alive, "carol", "pts/3", 1_704_880_000).encode();
    bad_host[76..80].copy_from_slice(b"\xfe\xfe\xfe\0");
    let mut negative_usec = Record::user(alive, "dave", "pts/4", 1_704_880_000);
    negative_usec.usecs = -1;
    // The same undecodable login with a dead pid is a leftover and does not count.
    let mut stale = Record::user(stale_pid() as i32, "eve", "pts/5", 1_704_880_000).encode();
    stale[44..48].copy_from_slice(b"e\xffe\0");
    let mut bytes = good.encode().to_vec();
    bytes.extend_from_slice(&bad_user);
    bytes.extend_from_slice(&bad_host);
    bytes.extend_from_slice(&negative_usec.encode());
    bytes.extend_from_slice(&stale);
    let path = write(dir.path(), "utmp", &bytes);
    let got = known(read_sessions(&path, dir.path(), now()));
    assert_eq!(
        user_lines(&got),
        pairs(&[
            ("al\u{fffd}ce", "pts/2"),
            ("bob", "pts/1"),
            ("carol", "pts/3"),
            ("dave", "pts/4"),
        ]),
        "{got:?}"
    );
    let carol = got.iter().find(|s| s.user == "carol").unwrap();
    assert_eq!(carol.host, "\u{fffd}\u{fffd}\u{fffd}");
    assert_eq!(
        got.iter()
            .find(|s| s.user == "dave")
            .unwrap()
            .login
            .timestamp(),
        1_704_880_000
    );
}

/// A FIFO at the utmp path: "unknown" at once, not a daemon blocked until someone writes.
#[test]
fn a_fifo_at_the_utmp_path_is_unknown_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("utmp");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (path, dev) = (fifo.clone(), dir.path().to_path_buf());
    std::thread::spawn(move || {
        let _ = tx.send(read_sessions(&path, &dev, now()));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("reading a FIFO at the utmp path must not block");
    let why = unknown(got);
    assert!(why.contains("is not a regular file (a FIFO)"), "{why}");
    assert!(why.contains(fifo.to_str().unwrap()), "{why}");
}
