//! The terminals of a login session, and when each was last used: for sessions whose terminal
//! logind does not name. sshd opens the PAM session before it allocates the pty, so logind's
//! session of an ssh login has an empty `TTY` (Debian 13); without utmp nothing else ties the
//! session to its `/dev/pts/N`, and a session nothing can judge counts as in use for good.
//!
//! The session's processes say which terminals it uses: every process in its scope cgroup
//! (logind's `Scope`, e.g. `session-3.scope`, found in `/proc/PID/cgroup`) and its leader
//! (logind's `Leader`). Each one's controlling terminal is field 7 of `/proc/PID/stat`
//! (`tty_nr`, proc(5)), a device number turned here into `pts/N` or `ttyN` under the device
//! directory. A terminal's last use is its atime, as for utmp's lines (`sessions`): the kernel
//! sets it when a program reads input from it, at most every 8 seconds. That is *when* the
//! terminal was used, never what was typed: nothing here reads a terminal.
//!
//! Observation only: this yields instants; how idle is away is the policy's business. The
//! `/proc` and device roots are parameters so that tests build both in a temp dir.

use std::collections::HashMap;
use std::path::Path;

use chrono::{DateTime, Utc};

/// One session to look for: its scope cgroup's name and its leader's pid, as logind says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Wanted {
    /// The unit name of the session's scope (`session-3.scope`), None when logind named none.
    pub scope: Option<String>,
    /// The session's leader, None when logind named none (0 is none).
    pub leader: Option<u32>,
}

/// For each wanted session (same order), the most recent use of any terminal one of its
/// processes has as controlling terminal; None when no process of it has a terminal (or none
/// could be inspected). One pass over `proc`, reading the cgroup file only of processes that
/// have a terminal (most have none), so a machine with thousands of daemons costs one small
/// read per process.
pub fn last_use(proc: &Path, dev: &Path, wanted: &[Wanted]) -> Vec<Option<DateTime<Utc>>> {
    let mut ttys: Vec<Vec<u32>> = vec![Vec::new(); wanted.len()];
    if wanted.iter().any(|w| w.scope.is_some()) {
        let pids = std::fs::read_dir(proc)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
        for pid in pids {
            let Some(tty) = controlling_tty(proc, pid) else {
                continue;
            };
            let Ok(cgroup) = std::fs::read_to_string(proc.join(pid.to_string()).join("cgroup"))
            else {
                continue;
            };
            for (i, w) in wanted.iter().enumerate() {
                if w.scope.as_deref().is_some_and(|s| in_scope(&cgroup, s)) {
                    ttys[i].push(tty);
                }
            }
        }
    }
    for (i, w) in wanted.iter().enumerate() {
        if let Some(tty) = w
            .leader
            .filter(|p| *p > 0)
            .and_then(|p| controlling_tty(proc, p))
        {
            ttys[i].push(tty);
        }
    }
    // A terminal shared by several sessions (or processes) is looked at once.
    let mut atimes: HashMap<u32, Option<DateTime<Utc>>> = HashMap::new();
    ttys.into_iter()
        .map(|list| {
            list.into_iter()
                .filter_map(|tty| {
                    *atimes
                        .entry(tty)
                        .or_insert_with(|| device_line(tty).and_then(|line| line_atime(dev, &line)))
                })
                .max()
        })
        .collect()
}

/// The controlling terminal of `pid` (`tty_nr`, 0 for none, read as None).
fn controlling_tty(proc: &Path, pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")).ok()?;
    tty_nr(&stat).filter(|t| *t != 0)
}

/// Field 7 of a `/proc/PID/stat` line (proc(5)): `pid (comm) state ppid pgrp session tty_nr
/// ...`. The command name may hold spaces and parentheses, so the fields are counted from the
/// last `)`.
pub(crate) fn tty_nr(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // state, ppid, pgrp, session, tty_nr: the fifth field after the name.
    let field = rest.split_ascii_whitespace().nth(4)?;
    // Printed as a signed int; the kernel's encoding fits 32 bits.
    field
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// Whether a `/proc/PID/cgroup` text places the process in the scope `scope`: a path of any
/// hierarchy (`0::/user.slice/user-1000.slice/session-3.scope` on cgroup v2,
/// `1:name=systemd:/...` on v1) with that component. A process in a cgroup below the scope
/// (a sub-cgroup it made) is in it too.
pub(crate) fn in_scope(cgroup: &str, scope: &str) -> bool {
    cgroup.lines().any(|line| {
        line.splitn(3, ':')
            .nth(2)
            .is_some_and(|path| path.split('/').any(|c| c == scope))
    })
}

/// The device line (relative to the device directory) of a `tty_nr`, or None for a device
/// that is no terminal a person types at. The kernel encodes the number as
/// `minor & 0xff | major << 8 | (minor & !0xff) << 12` (new_encode_dev). Pseudo-terminals
/// are majors 136-143 (`pts/N`, N = (major - 136) * 256 + minor), virtual consoles major 4
/// minors 1-63 (`ttyN`) and serial lines major 4 minors 64-255 (`ttyS(N - 64)`).
pub(crate) fn device_line(tty_nr: u32) -> Option<String> {
    let major = (tty_nr >> 8) & 0xfff;
    let minor = (tty_nr & 0xff) | ((tty_nr >> 12) & 0xfff00);
    match major {
        136..=143 => Some(format!("pts/{}", (major - 136) * 256 + minor)),
        4 if (1..64).contains(&minor) => Some(format!("tty{minor}")),
        4 if (64..256).contains(&minor) => Some(format!("ttyS{}", minor - 64)),
        _ => None,
    }
}

/// The atime of the terminal at `line` under `dev`, None when it cannot be inspected. Lines
/// come from logind (its `TTY`) or from [`device_line`]; either way only plain relative names
/// are joined to the device directory (`sessions::LiveHost` holds the rule).
pub(crate) fn line_atime(dev: &Path, line: &str) -> Option<DateTime<Utc>> {
    use crate::observe::sessions::HostLookup;
    crate::observe::sessions::LiveHost { dev }.tty_atime(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;
    use std::time::{Duration, SystemTime};

    /// The stat line of a process with controlling terminal `tty_nr`, as the kernel prints it
    /// (a comm with a space and parentheses, as sshd's children have).
    fn stat(pid: u32, tty_nr: u32) -> String {
        format!(
            "{pid} (sshd: alice (priv)) S 1 {pid} {pid} {tty_nr} {pid} 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123 456 789\n"
        )
    }

    const PTS: fn(u32) -> u32 = |n| ((136 + n / 256) << 8) | (n % 256);

    struct Fixture {
        _dir: tempfile::TempDir,
        proc: PathBuf,
        dev: PathBuf,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let proc = dir.path().join("proc");
            let dev = dir.path().join("dev");
            fs::create_dir_all(&proc).unwrap();
            fs::create_dir_all(dev.join("pts")).unwrap();
            Fixture {
                _dir: dir,
                proc,
                dev,
            }
        }
        fn process(&self, pid: u32, tty_nr: u32, cgroup: &str) {
            let d = self.proc.join(pid.to_string());
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("stat"), stat(pid, tty_nr)).unwrap();
            fs::write(d.join("cgroup"), cgroup).unwrap();
        }
        /// A terminal under dev last used `ago` seconds before now.
        fn terminal(&self, line: &str, ago: u64) -> DateTime<Utc> {
            let path = self.dev.join(line);
            let f = fs::File::create(&path).unwrap();
            let at = SystemTime::now() - Duration::from_secs(ago);
            f.set_times(fs::FileTimes::new().set_accessed(at)).unwrap();
            DateTime::<Utc>::from(at)
        }
    }

    fn scope(s: &str, leader: Option<u32>) -> Wanted {
        Wanted {
            scope: Some(s.into()),
            leader,
        }
    }

    #[test]
    fn tty_nr_is_field_seven_counted_from_the_last_parenthesis() {
        assert_eq!(tty_nr(&stat(42, 34816)), Some(34816));
        assert_eq!(tty_nr("7 (a) b) c) S 1 7 7 1025 7"), Some(1025));
        assert_eq!(tty_nr("7 (bash) S 1 7 7 0 -1"), Some(0));
        for bad in [
            "",
            "7 bash S 1 7 7 0",
            "7 (bash) S 1 7",
            "7 (bash) S 1 7 7 x 1",
        ] {
            assert_eq!(tty_nr(bad), None, "{bad:?}");
        }
        assert_eq!(
            tty_nr("7 (bash) S 1 7 7 -5 1"),
            None,
            "negative is no device"
        );
    }

    #[test]
    fn device_numbers_become_terminal_lines() {
        assert_eq!(device_line(PTS(0)).as_deref(), Some("pts/0"));
        assert_eq!(device_line(PTS(7)).as_deref(), Some("pts/7"));
        assert_eq!(device_line(PTS(300)).as_deref(), Some("pts/300"));
        // pts/1000: major 139, minor 232.
        assert_eq!(device_line(PTS(1000)).as_deref(), Some("pts/1000"));
        assert_eq!(device_line((4 << 8) | 2).as_deref(), Some("tty2"));
        assert_eq!(device_line((4 << 8) | 64).as_deref(), Some("ttyS0"));
        // A minor above 255 is encoded in the high bits: major 136, minor 256 + 5 is pts/261.
        assert_eq!(
            device_line((136 << 8) | 5 | (1 << 20)).as_deref(),
            Some("pts/261")
        );
        // tty0 (the current console), /dev/tty, /dev/console, /dev/null: not a person's.
        for n in [4 << 8, 5 << 8, (5 << 8) | 1, (1 << 8) | 3, 0] {
            assert_eq!(device_line(n), None, "{n:#x}");
        }
    }

    #[test]
    fn scopes_match_whole_components_on_v1_and_v2() {
        let v2 = "0::/user.slice/user-1000.slice/session-3.scope\n";
        assert!(in_scope(v2, "session-3.scope"));
        assert!(!in_scope(v2, "session-33.scope"));
        let v1 =
            "12:pids:/user.slice\n1:name=systemd:/user.slice/user-1000.slice/session-33.scope\n";
        assert!(in_scope(v1, "session-33.scope"));
        assert!(!in_scope(v1, "session-3.scope"));
        assert!(in_scope(
            "0::/user.slice/session-3.scope/sub\n",
            "session-3.scope"
        ));
        assert!(!in_scope("garbage session-3.scope\n", "session-3.scope"));
    }

    #[test]
    fn a_sessions_last_use_is_its_most_recent_terminal() {
        let f = Fixture::new();
        let recent = f.terminal("pts/1", 30);
        f.terminal("pts/0", 600);
        f.terminal("pts/2", 5);
        // Session 3: its priv sshd (the leader, no terminal), a shell on pts/0 and an editor on
        // pts/1 (the most recent). Session 4's process on pts/2 is not session 3's.
        let s3 = "0::/user.slice/user-1000.slice/session-3.scope\n";
        f.process(100, 0, s3);
        f.process(101, PTS(0), s3);
        f.process(102, PTS(1), s3);
        f.process(
            200,
            PTS(2),
            "0::/user.slice/user-1001.slice/session-4.scope\n",
        );
        // A process whose terminal has no device node: skipped.
        f.process(103, PTS(9), s3);
        let got = last_use(&f.proc, &f.dev, &[scope("session-3.scope", Some(100))]);
        assert_eq!(got, vec![Some(recent)]);
    }

    #[test]
    fn without_a_terminal_the_session_has_no_last_use() {
        let f = Fixture::new();
        f.terminal("pts/0", 60);
        f.process(100, 0, "0::/user.slice/user-1000.slice/session-3.scope\n");
        f.process(101, PTS(0), "0::/system.slice/ssh.service\n");
        let got = last_use(
            &f.proc,
            &f.dev,
            &[scope("session-3.scope", Some(100)), Wanted::default()],
        );
        assert_eq!(got, vec![None, None]);
    }

    #[test]
    fn the_leaders_terminal_counts_without_a_scope() {
        let f = Fixture::new();
        let at = f.terminal("tty2", 90);
        f.process(100, (4 << 8) | 2, "0::/somewhere/else\n");
        let wanted = Wanted {
            scope: None,
            leader: Some(100),
        };
        assert_eq!(last_use(&f.proc, &f.dev, &[wanted]), vec![Some(at)]);
        // A leader that is gone, or pid 0: nothing.
        for leader in [Some(999), Some(0), None] {
            let w = Wanted {
                scope: None,
                leader,
            };
            assert_eq!(last_use(&f.proc, &f.dev, &[w]), vec![None], "{leader:?}");
        }
    }

    #[test]
    fn unreadable_or_odd_proc_entries_are_skipped() {
        let f = Fixture::new();
        let at = f.terminal("pts/0", 20);
        let s3 = "0::/user.slice/user-1000.slice/session-3.scope\n";
        f.process(101, PTS(0), s3);
        // No stat, garbage stat, no cgroup, a non-pid entry.
        fs::create_dir_all(f.proc.join("102")).unwrap();
        fs::write(f.proc.join("102/cgroup"), s3).unwrap();
        f.process(103, 0, s3);
        fs::write(f.proc.join("103/stat"), "nonsense").unwrap();
        fs::create_dir_all(f.proc.join("104")).unwrap();
        fs::write(f.proc.join("104/stat"), stat(104, PTS(0))).unwrap();
        fs::create_dir_all(f.proc.join("self")).unwrap();
        fs::write(f.proc.join("self/stat"), stat(1, PTS(0))).unwrap();
        let got = last_use(&f.proc, &f.dev, &[scope("session-3.scope", None)]);
        assert_eq!(got, vec![Some(at)]);
        // No /proc at all: nothing known, no panic.
        let gone = f.proc.join("nowhere");
        assert_eq!(
            last_use(&gone, &f.dev, &[scope("session-3.scope", Some(1))]),
            vec![None]
        );
    }
}
