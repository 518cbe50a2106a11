//! How the pilot knows what condor did: it reads condor's own logs, the StartLog for jobs and
//! the MasterLog for daemons that died.
//!
//! The path is what condor itself reports: `condor_config_val STARTD_LOG` (by default
//! `$(LOG)/StartLog`), asked after the pilot's configuration is written. The startd writes,
//! for every job it activates on a slot (condor_startd.V6 `activate_claim`):
//!
//! ```text
//! 03/05/19 22:37:54 slot1_1: State change: claim-activation protocol successful
//! 03/05/19 22:37:54 slot1_1: Changing activity: Idle -> Busy
//! ```
//!
//! Either line means a job started; each is written once per activation, so their count is
//! the job report's `jobs_started` (see `startd_history` for the rest of the report). HTCondor's own test suite counts busy slots the same way
//! (`"Changing activity: Idle -> Busy" in line`). The startd's start-up banner
//! (`** condor_startd (CONDOR_STARTD) STARTING UP`) tells that the startd ran at all, so a
//! condor that exits "cleanly" without ever starting a startd is reported as a failure, not
//! as an idle pool.
//!
//! Why the log and not a query: the log needs no running daemon, no network and no
//! authorization, it survives the startd's exit (the pilot reads it after condor is gone),
//! and it is written by the daemon that actually activated the job. Only bytes written after
//! the pilot started count, so a log kept from an earlier run cannot fake a job. The log is
//! read incrementally; when condor rotates it (StartLog → StartLog.old, `MAX_STARTD_LOG`), the
//! unread tail of the old file is read first.
//!
//! Two more things a pilot must not wait out until its idle timeout:
//! - a daemon that died: the master logs `The STARTD (pid 20) died due to signal 9 (Killed)`
//!   or `The STARTD (pid 20) exited with status 4` and restarts it ten seconds later, for
//!   ever. A pilot is disposable, so the first abnormal exit ends it as a condor failure (30)
//!   and pilotd starts a fresh worker; `exited with status 0` is a normal shutdown;
//! - a pool that refuses the worker's credentials: every collector update then logs
//!   `SECMAN: required authentication with collector … failed, so aborting command
//!   UPDATE_STARTD_AD` (or `UPDATE_MASTER_AD` in the MasterLog). A token does not become
//!   valid by waiting, so that is a configuration problem (20).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::lifecycle::Event;

const ACTIVATION: &str = "State change: claim-activation protocol successful";
const IDLE_TO_BUSY: &str = "Changing activity: Idle -> Busy";
const JOB_START_MARKERS: [&str; 2] = [ACTIVATION, IDLE_TO_BUSY];
const STARTD_BANNER: &str = "condor_startd (CONDOR_STARTD) STARTING UP";
const REFUSED_BY_COLLECTOR: &str = "SECMAN: required authentication with collector";

/// What one StartLog line says about the pilot's life, if anything.
pub fn classify_line(line: &str) -> Option<Event> {
    if JOB_START_MARKERS.iter().any(|m| line.contains(m)) {
        Some(Event::JobStarted)
    } else if line.contains(STARTD_BANNER) {
        Some(Event::StartdStarted)
    } else {
        refused(line)
    }
}

/// The collector refused this worker's credentials (either daemon's log).
fn refused(line: &str) -> Option<Event> {
    (line.contains(REFUSED_BY_COLLECTOR) && line.contains("failed")).then_some(Event::Refused)
}

/// What one MasterLog line says: a daemon that died abnormally, or refused credentials.
pub fn classify_master_line(line: &str) -> Option<Event> {
    if let Some(rest) = line.split("The ").nth(1)
        && rest.contains(" (pid ")
    {
        if rest.contains(") died due to ") {
            return Some(Event::DaemonDied);
        }
        if let Some(status) = rest.split(") exited with status ").nth(1) {
            let code = status.trim().parse::<i64>().unwrap_or(-1);
            return (code != 0).then_some(Event::DaemonDied);
        }
    }
    refused(line)
}

/// Follows one log from where it ended when the pilot started.
#[derive(Debug)]
struct LogFollower {
    path: PathBuf,
    /// (inode, offset) of what has been read.
    position: Option<(u64, u64)>,
    /// An incomplete last line, kept until its newline arrives.
    partial: String,
}

/// Follows the StartLog and the MasterLog from where they ended when the pilot started.
#[derive(Debug)]
pub struct StartLogWatch {
    start: LogFollower,
    master: Option<LogFollower>,
    /// The events given so far: each kind is given once.
    seen: Vec<Event>,
    /// Lines of each start marker: condor 23.9 writes both for every activation (a claim
    /// reused for the next job is activated again), so either counts the jobs; the larger
    /// count holds if a version writes only one.
    activations: u64,
    idle_to_busy: u64,
}

fn rotated(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".old");
    PathBuf::from(name)
}

/// Appends what follows `offset` in `path` to `into`; returns the number of bytes read.
fn read_from(path: &Path, offset: u64, into: &mut String) -> u64 {
    let Ok(mut file) = File::open(path) else {
        return 0;
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return 0;
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return 0;
    }
    // Condor logs are ASCII in practice; a stray byte must not lose the whole chunk.
    into.push_str(&String::from_utf8_lossy(&bytes));
    bytes.len() as u64
}

impl LogFollower {
    /// Starts following `path`, ignoring everything already in it.
    fn new(path: PathBuf) -> Self {
        let position = std::fs::metadata(&path).ok().map(|m| (m.ino(), m.len()));
        LogFollower {
            path,
            position,
            partial: String::new(),
        }
    }

    /// The complete lines appended since the last call. Errors reading the log are not
    /// fatal: the log may not exist yet.
    fn lines(&mut self) -> Vec<String> {
        let mut text = String::new();
        let meta = std::fs::metadata(&self.path).ok();
        match (self.position, &meta) {
            (Some((ino, offset)), Some(m)) if m.ino() == ino && m.len() >= offset => {
                let read = read_from(&self.path, offset, &mut text);
                self.position = Some((ino, offset + read));
            }
            (Some((ino, offset)), _) => {
                // Rotated or truncated: finish the old file if it is the one we were reading.
                let old = rotated(&self.path);
                if std::fs::metadata(&old).is_ok_and(|m| m.ino() == ino) {
                    read_from(&old, offset, &mut text);
                }
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                self.position = None;
                if let Some(m) = meta {
                    let read = read_from(&self.path, 0, &mut text);
                    self.position = Some((m.ino(), read));
                }
            }
            (None, Some(m)) => {
                let read = read_from(&self.path, 0, &mut text);
                self.position = Some((m.ino(), read));
            }
            (None, None) => {}
        }
        let combined = std::mem::take(&mut self.partial) + &text;
        let end = combined.rfind('\n').map_or(0, |i| i + 1);
        let (complete, rest) = combined.split_at(end);
        self.partial = rest.to_owned();
        complete.lines().map(str::to_owned).collect()
    }
}

impl StartLogWatch {
    /// Starts watching the StartLog and, when known, the MasterLog, ignoring everything
    /// already in them.
    pub fn new(start_log: PathBuf, master_log: Option<PathBuf>) -> Self {
        StartLogWatch {
            start: LogFollower::new(start_log),
            master: master_log.map(LogFollower::new),
            seen: Vec::new(),
            activations: 0,
            idle_to_busy: 0,
        }
    }

    /// The jobs condor activated in this pilot's slots so far (for the job report).
    pub fn jobs_started(&self) -> u64 {
        self.activations.max(self.idle_to_busy)
    }

    pub fn path(&self) -> &Path {
        &self.start.path
    }

    /// Reads what was appended since the last call and returns the new events (each kind at
    /// most once over the watch's life).
    pub fn poll(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        let mut lines: Vec<(String, bool)> = Vec::new();
        if let Some(master) = &mut self.master {
            lines.extend(master.lines().into_iter().map(|l| (l, true)));
        }
        lines.extend(self.start.lines().into_iter().map(|l| (l, false)));
        for (line, from_master) in lines {
            let event = if from_master {
                classify_master_line(&line)
            } else {
                if line.contains(ACTIVATION) {
                    self.activations += 1;
                } else if line.contains(IDLE_TO_BUSY) {
                    self.idle_to_busy += 1;
                }
                classify_line(&line)
            };
            let Some(event) = event.filter(|e| !self.seen.contains(e)) else {
                continue;
            };
            match event {
                Event::DaemonDied => tracing::error!(line = %line.trim(), "a condor daemon died"),
                Event::Refused => {
                    tracing::error!(line = %line.trim(), "the pool refused this worker's credentials")
                }
                _ => {}
            }
            self.seen.push(event);
            events.push(event);
        }
        events
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// Appends to a log as condor does (also used by `startd_history`'s tests).
    pub(crate) fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn real_startd_lines_are_recognised() {
        assert_eq!(
            classify_line(
                "03/05/19 22:37:54 slot1_1: State change: claim-activation protocol successful"
            ),
            Some(Event::JobStarted)
        );
        assert_eq!(
            classify_line("03/05/19 22:37:54 slot1_1: Changing activity: Idle -> Busy"),
            Some(Event::JobStarted)
        );
        assert_eq!(
            classify_line("11/30/26 05:16:00 ** condor_startd (CONDOR_STARTD) STARTING UP"),
            Some(Event::StartdStarted)
        );
        assert_eq!(
            classify_line("03/05/19 22:38:09 slot1_1: Changing activity: Busy -> Idle"),
            None
        );
        assert_eq!(
            classify_line("slot1: Changing state: Unclaimed -> Matched"),
            None
        );
    }

    #[test]
    fn real_master_lines_are_recognised() {
        for line in [
            "12/01/26 06:47:49 The STARTD (pid 20) died due to signal 9 (Killed)",
            "12/01/26 06:47:49 The STARTD (pid 20) exited with status 4",
            "12/01/26 06:47:49 The STARTD (pid 20) died due to exception ACCESS_VIOLATION",
        ] {
            assert_eq!(
                classify_master_line(line),
                Some(Event::DaemonDied),
                "{line}"
            );
        }
        assert_eq!(
            classify_master_line("12/01/26 06:44:01 The STARTD (pid 20) exited with status 0"),
            None
        );
        assert_eq!(
            classify_master_line(
                "12/01/26 06:47:49 restarting /usr/sbin/condor_startd in 10 seconds"
            ),
            None
        );
        assert_eq!(
            classify_master_line(
                "12/01/26 06:47:06 SECMAN: required authentication with collector pilotd-pool-cm failed, so aborting command UPDATE_MASTER_AD."
            ),
            Some(Event::Refused)
        );
        assert_eq!(
            classify_line(
                "12/01/26 06:47:03 SECMAN: required authentication with collector pilotd-pool-cm failed, so aborting command UPDATE_STARTD_AD."
            ),
            Some(Event::Refused)
        );
    }

    #[test]
    fn a_dead_daemon_in_the_master_log_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let start = dir.path().join("StartLog");
        let master = dir.path().join("MasterLog");
        append(
            &master,
            "x The STARTD (pid 1) died due to signal 9 (Killed)\n",
        );
        let mut watch = StartLogWatch::new(start, Some(master.clone()));
        assert!(
            watch.poll().is_empty(),
            "a previous run's death does not count"
        );
        append(
            &master,
            "x The STARTD (pid 2) died due to signal 9 (Killed)\n",
        );
        append(&master, "x The STARTD (pid 3) exited with status 4\n");
        assert_eq!(watch.poll(), vec![Event::DaemonDied]);
        append(&master, "x The STARTD (pid 4) exited with status 4\n");
        assert!(watch.poll().is_empty());
    }

    #[test]
    fn old_content_is_ignored_and_new_lines_are_seen_once() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("StartLog");
        append(
            &log,
            "01/01/26 00:00:00 slot1_1: Changing activity: Idle -> Busy\n",
        );
        let mut watch = StartLogWatch::new(log.clone(), None);
        assert!(
            watch.poll().is_empty(),
            "a previous run's job does not count"
        );

        append(
            &log,
            "01/01/26 00:01:00 ** condor_startd (CONDOR_STARTD) STARTING UP\n",
        );
        append(&log, "01/01/26 00:02:00 slot1_1: Changing activity: Idle");
        assert_eq!(watch.poll(), vec![Event::StartdStarted]);
        append(&log, " -> Busy\n");
        assert_eq!(
            watch.poll(),
            vec![Event::JobStarted],
            "a line split across writes"
        );
        append(
            &log,
            "01/01/26 00:03:00 slot1_2: Changing activity: Idle -> Busy\n",
        );
        assert!(watch.poll().is_empty());
        assert_eq!(
            watch.jobs_started(),
            2,
            "both activations count, the old one not"
        );
    }

    #[test]
    fn every_activation_counts_once_though_condor_writes_two_lines_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("StartLog");
        let mut watch = StartLogWatch::new(log.clone(), None);
        // As condor 23.9 writes them: two jobs on two dynamic slots, then a claim reused.
        append(
            &log,
            "12/04/26 12:29:34 slot1_1: State change: claim-activation protocol successful\n\
             12/04/26 12:29:34 slot1_1: Changing activity: Idle -> Busy\n\
             12/04/26 12:29:34 slot1_2: State change: claim-activation protocol successful\n\
             12/04/26 12:29:34 slot1_2: Changing activity: Idle -> Busy\n\
             12/04/26 12:29:40 slot1_1: Changing activity: Busy -> Idle\n\
             12/04/26 12:30:19 slot1_2: Changing activity: Busy -> Idle\n\
             12/04/26 12:30:19 slot1_2: State change: claim-activation protocol successful\n\
             12/04/26 12:30:19 slot1_2: Changing activity: Idle -> Busy\n\
             12/04/26 12:31:15 slot1_2: Changing activity: Busy -> Retiring\n",
        );
        watch.poll();
        assert_eq!(watch.jobs_started(), 3);
    }

    #[test]
    fn a_missing_log_appears_later() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log/StartLog");
        let mut watch = StartLogWatch::new(log.clone(), None);
        assert!(watch.poll().is_empty());
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        append(
            &log,
            "x ** condor_startd (CONDOR_STARTD) STARTING UP\nx slot1_1: State change: claim-activation protocol successful\n",
        );
        assert_eq!(watch.poll(), vec![Event::StartdStarted, Event::JobStarted]);
    }

    #[test]
    fn rotation_reads_the_unread_tail_of_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("StartLog");
        append(&log, "x ** condor_startd (CONDOR_STARTD) STARTING UP\n");
        let mut watch = StartLogWatch::new(log.clone(), None);
        append(&log, "x slot1_1: Changing activity: Idle -> Busy\n");
        // Condor rotates before the pilot polls.
        std::fs::rename(&log, dir.path().join("StartLog.old")).unwrap();
        append(&log, "x slot1: new file\n");
        assert_eq!(watch.poll(), vec![Event::JobStarted]);
    }
}
