//! The session probe: who is logged in, read from a utmp file (default /var/run/utmp), with the
//! idle time of each terminal taken from its atime under /dev.
//!
//! This module owns the *observation* only. It reports every live USER_PROCESS record; deciding
//! which users or uids matter (ignored users, system accounts) is the policy's job.
//!
//! The one rule that shapes everything here: a file we cannot read or make sense of is
//! `Sessions::Unknown`, never "nobody". The policy treats `Unknown` as "owner present", so every
//! doubt resolves toward the owner (ARCHITECTURE.md, "Failing toward the owner").
//!
//! The work is split so that the decisions can be tested without a filesystem:
//! [`read_sessions`] opens the file and wires in the real host ([`LiveHost`]: `kill(pid, 0)`,
//! `getpwnam`, `stat`), and [`sessions_from_entries`] is pure given a [`HostLookup`].

use std::collections::HashMap;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::{Pid, User};
use utmp_rs::{ParseError, UtmpEntry, UtmpParser};

use crate::snapshot::{Session, Sessions};

/// A real utmp holds a few dozen records (one slot per terminal id, reused). The cap exists
/// because the path is configurable: pointed at /dev/zero or a huge file by mistake, the parser
/// would otherwise spin forever on well-formed "empty" records.
pub const MAX_RECORDS: usize = 1 << 16;

/// The size of one record: glibc's `struct utmp` with 32-bit times (the layout utmp-rs reads).
pub(crate) const RECORD_SIZE: usize = 384;

/// USER_PROCESS, the type of a login record.
const USER_PROCESS: i16 = 7;

/// Why the sessions could not be observed. Each one becomes the reason of
/// `Sessions::Unknown`, which the policy reads as "owner present".
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error("cannot read {}: {}", path.display(), describe_io(source))]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{} is not a readable utmp file: none of its {bad} record(s) could be decoded \
         (first problem: {first}); check the utmp path in pilotd.toml",
        path.display()
    )]
    Corrupt {
        path: PathBuf,
        bad: usize,
        first: String,
    },
    #[error(
        "{} has more than {} records, which no utmp file has; check the utmp path in \
         pilotd.toml",
        .0.display(),
        MAX_RECORDS
    )]
    TooLarge(PathBuf),
    #[error(
        "{} is not a regular file ({kind}), so it is not a utmp file; check the utmp path in \
         pilotd.toml",
        path.display()
    )]
    NotAFile { path: PathBuf, kind: &'static str },
}

/// What the probe has to ask the running system about a utmp record. The real answers come
/// from [`LiveHost`]; tests substitute a table.
pub trait HostLookup {
    /// Whether a process with this pid exists. Only called with pid > 0.
    fn is_alive(&self, pid: i32) -> bool;
    /// The uid of a user name, None when the name does not resolve here.
    fn uid_of(&self, user: &str) -> Option<u32>;
    /// Last access time of the terminal device for a utmp line (e.g. "pts/0"), None when
    /// there is no such device (graphical lines like ":0") or it cannot be inspected.
    fn tty_atime(&self, line: &str) -> Option<DateTime<Utc>>;
}

/// The running system: liveness by `kill(pid, 0)`, uids from the user database, terminal
/// atimes from the device directory (normally /dev).
///
/// Liveness is checked in pilotd's pid namespace: pilotd must run in the host's pid namespace
/// (as a systemd service does), or every session would look stale.
#[derive(Debug, Clone, Copy)]
pub struct LiveHost<'a> {
    pub dev: &'a Path,
}

impl HostLookup for LiveHost<'_> {
    fn is_alive(&self, pid: i32) -> bool {
        // ESRCH is the only answer that proves the process is gone. EPERM means it exists
        // but belongs to someone else (pilotd need not be root); anything else is doubt,
        // and doubt counts the session.
        kill(Pid::from_raw(pid), None) != Err(Errno::ESRCH)
    }

    fn uid_of(&self, user: &str) -> Option<u32> {
        // An NSS failure (e.g. LDAP down) is reported like an unknown name: the session is
        // still reported, only without a uid, and the policy decides what that means.
        User::from_name(user).ok().flatten().map(|u| u.uid.as_raw())
    }

    fn tty_atime(&self, line: &str) -> Option<DateTime<Utc>> {
        let rel = Path::new(line);
        // The line comes from a file anyone with utmp write access can forge. Only plain
        // relative names ("pts/0", "tty1") may be joined to the device directory; an empty
        // line would otherwise stat /dev itself and "/etc/x" or "../x" would escape it.
        if line.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return None;
        }
        let atime = std::fs::metadata(self.dev.join(rel))
            .ok()?
            .accessed()
            .ok()?;
        system_time_to_utc(atime)
    }
}

/// Observe the sessions in the utmp file `utmp`, with terminal idle times from device
/// directory `dev` (normally /dev), as of `now`.
///
/// Never fails: anything that prevents a trustworthy answer becomes `Sessions::Unknown` with a
/// reason that names the file and the problem.
pub fn read_sessions(utmp: &Path, dev: &Path, now: DateTime<Utc>) -> Sessions {
    read_utmp(utmp, dev, now).0
}

/// [`read_sessions`], and whether the file does not exist at all. A missing utmp is still
/// `Unknown` here; it becomes "nobody in utmp" only where logind answers instead
/// (`logind::lay_on`), as on Debian 13, whose systemd no longer creates the file.
pub(crate) fn read_utmp(utmp: &Path, dev: &Path, now: DateTime<Utc>) -> (Sessions, bool) {
    let result = read_bounded(utmp)
        .and_then(|bytes| sessions_from_bytes(utmp, &bytes, now, &LiveHost { dev }));
    match result {
        Ok(sessions) => (Sessions::Known(sessions), false),
        Err(e) => {
            let absent = matches!(&e, SessionsError::Read { source, .. }
                if source.kind() == io::ErrorKind::NotFound);
            (Sessions::Unknown(e.to_string()), absent)
        }
    }
}

/// The whole file, read without blocking and without reading more than [`MAX_RECORDS`]
/// records: opened non-blocking (a FIFO at the path would otherwise block the daemon until
/// someone writes to it), then refused unless it is a regular file.
fn read_bounded(path: &Path) -> Result<Vec<u8>, SessionsError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let read_err = |source| SessionsError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(read_err)?;
    let ft = file.metadata().map_err(read_err)?.file_type();
    if !ft.is_file() {
        let kinds = [
            (ft.is_fifo(), "a FIFO"),
            (ft.is_dir(), "a directory"),
            (ft.is_char_device() || ft.is_block_device(), "a device"),
            (ft.is_socket(), "a socket"),
        ];
        let kind = kinds.into_iter().find_map(|(is, kind)| is.then_some(kind));
        let kind = kind.unwrap_or("not a file");
        return Err(SessionsError::NotAFile {
            path: path.to_path_buf(),
            kind,
        });
    }
    let limit = (MAX_RECORDS * RECORD_SIZE) as u64;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > limit {
        return Err(SessionsError::TooLarge(path.to_path_buf()));
    }
    Ok(bytes)
}

/// [`sessions_from_entries`] over the bytes of a utmp file, with one more rule toward the
/// owner: a record utmp-rs cannot decode (a user or host that is not UTF-8, a negative
/// `tv_usec`) but whose raw type is USER_PROCESS with a live pid is still a session, with its
/// names decoded lossily. Skipping it would count a logged-in owner as absent.
pub fn sessions_from_bytes(
    source: &Path,
    bytes: &[u8],
    now: DateTime<Utc>,
    host: &impl HostLookup,
) -> Result<Vec<Session>, SessionsError> {
    let parsed = UtmpParser::from_reader(bytes);
    let raw = bytes.chunks(RECORD_SIZE).map(Some);
    sessions_from_records(source, parsed.zip(raw), now, host)
}

#[cfg(test)]
/// The pure core of the probe: turn parsed utmp records into live sessions.
///
/// `source` only names the file in errors. Rules, each chosen to fail toward the owner:
/// - Bad records are skipped, so one garbled slot cannot blind the probe; but if there are
///   records and *none* decodes, the file is not a utmp file and the answer is an error.
/// - A short final record (a file cut mid-record) is one bad record; the complete records
///   before it still count.
/// - Any other I/O error ends the read with an error: the unread rest might hold a login.
///   (It also stops the parser, which would return the same error forever, e.g. for a
///   directory.)
/// - Only USER_PROCESS records with a user name count, as for `who`.
/// - A DEAD_PROCESS on the same line, later in the file and not older than the login, ends
///   that login (wtmp-style files append the logout instead of rewriting the slot). The time
///   condition keeps a stale DEAD slot from ending a newer login on a reused line.
/// - A login whose pid is not alive is a leftover from a crash and does not count. A pid of 0
///   or less cannot be checked (`kill` would address a process group) and does not count.
pub(crate) fn sessions_from_entries<I>(
    source: &Path,
    entries: I,
    now: DateTime<Utc>,
    host: &impl HostLookup,
) -> Result<Vec<Session>, SessionsError>
where
    I: IntoIterator<Item = Result<UtmpEntry, ParseError>>,
{
    sessions_from_records(source, entries.into_iter().map(|e| (e, None)), now, host)
}

/// Parsed records, each with its raw bytes when known (for the undecodable-login rule).
fn sessions_from_records<'a, I>(
    source: &Path,
    entries: I,
    now: DateTime<Utc>,
    host: &impl HostLookup,
) -> Result<Vec<Session>, SessionsError>
where
    I: IntoIterator<Item = (Result<UtmpEntry, ParseError>, Option<&'a [u8]>)>,
{
    // Keyed by line so that a DEAD_PROCESS costs one lookup: a forged file of thousands of
    // logins and logouts must not make the probe quadratic.
    let mut logins: HashMap<String, Vec<Login>> = HashMap::new();
    let mut good = 0usize;
    let mut bad = 0usize;
    let mut first_bad: Option<String> = None;

    for (index, (entry, raw)) in entries.into_iter().enumerate() {
        if index >= MAX_RECORDS {
            return Err(SessionsError::TooLarge(source.to_path_buf()));
        }
        let entry = match entry {
            Ok(entry) => entry,
            Err(ParseError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                bad += 1;
                first_bad.get_or_insert_with(|| format!("record {index} is truncated"));
                break;
            }
            Err(ParseError::Io(source_err)) => {
                return Err(SessionsError::Read {
                    path: source.to_path_buf(),
                    source: source_err,
                });
            }
            Err(e) => {
                bad += 1;
                first_bad.get_or_insert_with(|| format!("record {index}: {e}"));
                if let Some(login) = raw.and_then(|r| undecodable_login(index, r)) {
                    tracing::debug!(
                        path = %source.display(),
                        record = index,
                        "an undecodable login record counts as a session ({e})"
                    );
                    logins.entry(login.line.clone()).or_default().push(login);
                }
                continue;
            }
        };
        good += 1;
        match entry {
            UtmpEntry::UserProcess {
                pid,
                line,
                user,
                host: remote,
                time,
                ..
            } if !user.is_empty() => logins.entry(line.clone()).or_default().push(Login {
                index,
                pid,
                user,
                line,
                host: remote,
                login: offset_to_utc(time.unix_timestamp(), time.nanosecond()),
            }),
            UtmpEntry::DeadProcess { line, time, .. } => {
                let ended_at = offset_to_utc(time.unix_timestamp(), time.nanosecond());
                if let Some(on_line) = logins.get_mut(&line) {
                    on_line.retain(|l| l.login > ended_at);
                }
            }
            _ => {}
        }
    }

    if good == 0 && bad > 0 {
        return Err(SessionsError::Corrupt {
            path: source.to_path_buf(),
            bad,
            first: first_bad.unwrap_or_default(),
        });
    }
    if bad > 0 {
        tracing::debug!(
            path = %source.display(),
            bad,
            first = first_bad.as_deref().unwrap_or_default(),
            "skipped undecodable utmp records"
        );
    }

    // File order, as `who` prints them.
    let mut logins: Vec<Login> = logins.into_values().flatten().collect();
    logins.sort_by_key(|l| l.index);

    Ok(logins
        .into_iter()
        .filter(|l| l.pid > 0 && host.is_alive(l.pid))
        .map(|l| {
            let idle_s = host
                .tty_atime(&l.line)
                .map(|atime| idle_seconds(now, atime));
            Session {
                uid: host.uid_of(&l.user),
                user: l.user,
                // No remote host, or an X display (a terminal in a desktop session): someone
                // at this machine's keyboard.
                local: l.host.is_empty() || l.host.starts_with(':'),
                line: l.line,
                host: l.host,
                login: l.login,
                idle_s,
                locked_since: None,
                idle_reported: false,
            }
        })
        .collect())
}

/// A login utmp-rs could not decode, from its raw bytes: USER_PROCESS with a pid (checked for
/// life later, like every login). Names are decoded lossily and the time from `tv_sec` alone.
fn undecodable_login(index: usize, raw: &[u8]) -> Option<Login> {
    if raw.len() < RECORD_SIZE {
        return None;
    }
    let i16_at = |o: usize| i16::from_ne_bytes([raw[o], raw[o + 1]]);
    let i32_at = |o: usize| i32::from_ne_bytes([raw[o], raw[o + 1], raw[o + 2], raw[o + 3]]);
    let text = |r: std::ops::Range<usize>| {
        let field = &raw[r];
        let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
        String::from_utf8_lossy(&field[..end]).into_owned()
    };
    if i16_at(0) != USER_PROCESS {
        return None;
    }
    let user = text(44..76);
    Some(Login {
        index,
        pid: i32_at(4),
        // An empty name is still someone: `who` would show the record.
        user: if user.is_empty() {
            "(undecodable)".into()
        } else {
            user
        },
        line: text(8..40),
        host: text(76..332),
        login: offset_to_utc(i64::from(i32_at(340)), 0),
    })
}

/// A USER_PROCESS record not yet checked against the running system.
struct Login {
    /// Position in the file, to report in file order.
    index: usize,
    pid: i32,
    user: String,
    line: String,
    host: String,
    login: DateTime<Utc>,
}

/// Seconds between the terminal's last use and `now`. A tty touched after `now` (clock skew,
/// or `now` taken a moment before the stat) has just been used: 0, not an error.
pub(crate) fn idle_seconds(now: DateTime<Utc>, atime: DateTime<Utc>) -> u64 {
    u64::try_from((now - atime).num_seconds()).unwrap_or(0)
}

/// utmp-rs hands out `time::OffsetDateTime`; the rest of pilotd speaks chrono. Every time the
/// `time` crate can hold fits in chrono, so the fallback is unreachable in practice; it is the
/// epoch rather than dropping the record because a live login matters more than its start.
fn offset_to_utc(secs: i64, nanos: u32) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, nanos).unwrap_or(DateTime::UNIX_EPOCH)
}

/// chrono's `From<SystemTime>` panics outside its range, and a tty's atime can be set to
/// anything by its owner; out of range is "cannot tell", i.e. None.
fn system_time_to_utc(t: SystemTime) -> Option<DateTime<Utc>> {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => DateTime::from_timestamp(i64::try_from(d.as_secs()).ok()?, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).ok()?;
            let back = DateTime::from_timestamp(secs.checked_neg()?, 0)?;
            back.checked_sub_signed(chrono::Duration::nanoseconds(i64::from(d.subsec_nanos())))
        }
    }
}

/// "No such file or directory" rather than io::Error's "... (os error 2)": the reason ends up
/// in `pilotd snapshot` output and logs, read by people.
fn describe_io(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => Errno::from_raw(code).desc().to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use utmp_rs::UtmpError;

    /// The record rules (liveness, DEAD_PROCESS, idle) on encoded records.
    mod records;
    /// Random and damaged utmp files never panic the probe.
    mod robustness;

    /// Record-level rules are tested in `records`; these tests cover the error paths and the
    /// live lookups.
    struct FakeHost;
    impl HostLookup for FakeHost {
        fn is_alive(&self, _pid: i32) -> bool {
            true
        }
        fn uid_of(&self, _user: &str) -> Option<u32> {
            None
        }
        fn tty_atime(&self, _line: &str) -> Option<DateTime<Utc>> {
            None
        }
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2024, 1, 10, 12, 0, 0).unwrap()
    }

    fn run(entries: Vec<Result<UtmpEntry, ParseError>>) -> Result<Vec<Session>, SessionsError> {
        sessions_from_entries(Path::new("/var/run/utmp"), entries, now(), &FakeHost)
    }

    #[test]
    fn no_records_is_nobody() {
        assert!(run(vec![]).unwrap().is_empty());
    }

    #[test]
    fn only_bad_records_is_an_error_not_nobody() {
        let err = run(vec![
            Err(ParseError::Utmp(UtmpError::UnknownType(42))),
            Err(ParseError::Utmp(UtmpError::InvalidUser(Box::new([0xff])))),
        ])
        .unwrap_err();
        assert!(
            matches!(err, SessionsError::Corrupt { bad: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("unknown type 42"), "{err}");
    }

    #[test]
    fn truncated_only_record_is_an_error() {
        let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "size not aligned");
        let err = run(vec![Err(ParseError::Io(eof))]).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn other_io_errors_are_errors_even_after_good_records() {
        let eio = io::Error::from_raw_os_error(libc_eio());
        let err = run(vec![Ok(UtmpEntry::Empty), Err(ParseError::Io(eio))]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot read /var/run/utmp: I/O error",
            "the reason is for people: no '(os error 5)'"
        );
    }

    fn libc_eio() -> i32 {
        Errno::EIO as i32
    }

    #[test]
    fn one_bad_record_among_good_ones_is_skipped() {
        let got = run(vec![
            Err(ParseError::Utmp(UtmpError::UnknownType(42))),
            Ok(UtmpEntry::Empty),
        ])
        .unwrap();
        assert!(got.is_empty());
    }

    #[test]
    fn too_many_records_is_an_error() {
        let entries = std::iter::repeat_with(|| Ok(UtmpEntry::Empty)).take(MAX_RECORDS + 1);
        let err =
            sessions_from_entries(Path::new("/dev/zero"), entries, now(), &FakeHost).unwrap_err();
        assert!(matches!(err, SessionsError::TooLarge(_)), "{err}");
    }

    #[test]
    fn idle_is_whole_seconds_and_never_negative() {
        let t = now();
        assert_eq!(
            idle_seconds(t, t - chrono::Duration::milliseconds(90_500)),
            90
        );
        assert_eq!(idle_seconds(t, t + chrono::Duration::hours(1)), 0);
        assert!(idle_seconds(t, DateTime::<Utc>::MIN_UTC) > 8_000_000_000_000);
    }

    #[test]
    fn tty_lookup_refuses_lines_that_escape_dev() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pts0"), b"").unwrap();
        let host = LiveHost { dev: dir.path() };
        assert!(host.tty_atime("pts0").is_some());
        for line in ["", "/etc/passwd", "../etc/passwd", "pts/../pts0", ".", ":0"] {
            assert_eq!(host.tty_atime(line), None, "line {line:?}");
        }
    }

    #[test]
    fn system_time_conversion_never_panics() {
        let far = UNIX_EPOCH + std::time::Duration::from_secs(u64::MAX / 2);
        assert_eq!(system_time_to_utc(far), None);
        let before = UNIX_EPOCH - std::time::Duration::from_millis(1500);
        assert_eq!(
            system_time_to_utc(before).map(|t| t.timestamp_millis()),
            Some(-1500)
        );
    }

    #[test]
    fn own_pid_is_alive_and_a_pid_beyond_pid_max_is_not() {
        let host = LiveHost {
            dev: Path::new("/dev"),
        };
        assert!(host.is_alive(i32::try_from(std::process::id()).unwrap()));
        // PID_MAX_LIMIT is 2^22 on 64-bit Linux; no pid can be above it.
        assert!(!host.is_alive((1 << 22) + 1));
    }

    #[test]
    fn root_resolves_and_nonsense_does_not() {
        let host = LiveHost {
            dev: Path::new("/dev"),
        };
        assert_eq!(host.uid_of("root"), Some(0));
        assert_eq!(host.uid_of("no-such-user-pilotd"), None);
        assert_eq!(host.uid_of("nul\0inside"), None);
    }
}
