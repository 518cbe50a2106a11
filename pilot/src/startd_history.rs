//! What became of the jobs condor ran in the pilot's slot, from condor's own execute-side
//! record: the startd history (`STARTD_HISTORY`, which the pilot's configuration puts at
//! `$(LOG)/startd_history`).
//!
//! When a job leaves a slot, for whatever reason, the startd appends the job's ad to that
//! file in ClassAd long form (`Name = value` lines), closed by a banner line:
//!
//! ```text
//! RemoteUserCpu = 17.0
//! RemoteWallClockTime = 49
//! ...
//! *** Offset = 6907 ClusterId = 4 ProcId = 0 Owner = "alice" CompletionDate = 1796387475
//! ```
//!
//! What tells a completed job from one that left early, found with condor 23.9 in a personal
//! pool and in the pilot on the test pool (the records are kept as test fixtures,
//! pilot/tests/fixtures/startd_history):
//! - a job that ran to its end carries the starter's ticket of execution,
//!   `ToE = [ How = "OF_ITS_OWN_ACCORD"; ... HowCode = 0; ... ]`;
//! - a job vacated by a graceful shutdown of the startd (what the pilot's SIGTERM to the
//!   master does), or removed by its owner while it ran, has no `ToE` at all, and
//!   `ExitBySignal = true` (the starter's soft kill).
//! - `JobStatus` does not tell: the startd's copy says 4 ("completed") for both.
//!
//! So a record is a completed job when its `ToE` says `OF_ITS_OWN_ACCORD` (or `HowCode = 0`),
//! and a vacated one otherwise. The figures of a record are this run's own (a job vacated
//! and run again gets a new record whose `RemoteUserCpu` and `RemoteWallClockTime` count
//! only the new run):
//! - wall seconds: `RemoteWallClockTime` (the starter's count for this run), else
//!   `JobDuration`;
//! - CPU seconds: `RemoteUserCpu + RemoteSysCpu`. Without cgroups (an unprivileged container
//!   has none it may write) condor measures them with its procd, which samples `/proc` every
//!   `PROCD_MAX_SNAPSHOT_INTERVAL`: a process's CPU after the last sample before it exits is
//!   not counted, and a process shorter than the interval may count nothing. The pilot sets
//!   the interval to [`crate::condor_config::PROCD_SNAPSHOT_SECONDS`]; condor's figure is
//!   then low by at most that much per process.
//!
//! Only records appended after the pilot started count (a history kept from an earlier run
//! cannot fake jobs), as with the StartLog (`startlog`). When condor rotates the file
//! (`startd_history` → `startd_history.<time>`, `MAX_HISTORY_LOG`), the unread tail of the
//! rotated file is read first.
//!
//! The parser is pure and bounded: a line longer than [`MAX_LINE`] is skipped (no attribute
//! the pilot reads is that long), a record keeps only the few attributes read here, and a
//! value that is not a number is noted (file, line, attribute) and counted as zero.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use pilot_contract::JobReport;

/// The longest line the parser reads; longer ones (a job's environment) are skipped.
pub const MAX_LINE: usize = 64 * 1024;
/// At most this many notes about unreadable values are kept (the count goes on).
const MAX_NOTES: usize = 5;
/// The `ToE` tag's `How` for a job that ended by itself.
const OF_ITS_OWN_ACCORD: &str = "OF_ITS_OWN_ACCORD";
/// A record's figures above this are not believed (a year of one job's time).
const MAX_SECONDS: f64 = 366.0 * 24.0 * 3600.0;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("condor's startd history {path}: cannot read it: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The attributes of one record that the pilot reads, as text until the record ends.
#[derive(Debug, Default)]
struct PendingRecord {
    /// Any attribute seen at all: a banner with nothing before it is not a job.
    any: bool,
    toe: Option<String>,
    user_cpu: Option<(usize, String)>,
    sys_cpu: Option<(usize, String)>,
    wall: Option<(usize, String)>,
    duration: Option<(usize, String)>,
}

/// Reads history lines one at a time and sums what the records say.
#[derive(Debug, Default)]
pub struct HistoryTally {
    pending: PendingRecord,
    line_no: usize,
    pub completed: u64,
    pub vacated: u64,
    pub wall_seconds: f64,
    pub cpu_seconds: f64,
    pub vacated_cpu_seconds: f64,
    /// Lines that were neither `Name = value` nor a banner, or too long to read.
    pub skipped_lines: u64,
    /// Attributes at the end that no banner closed (the startd died while writing).
    pub unclosed: bool,
    /// What could not be read: `line N: Attr: why`, the first few.
    pub notes: Vec<String>,
    pub unreadable_values: u64,
}

/// Whether a `ToE` value (a nested ClassAd) says the job ended by itself.
fn ended_by_itself(toe: &str) -> bool {
    let inner = toe.trim().trim_start_matches('[').trim_end_matches(']');
    inner.split(';').any(|field| {
        let Some((name, value)) = field.split_once('=') else {
            return false;
        };
        let (name, value) = (name.trim(), value.trim());
        (name.eq_ignore_ascii_case("How") && value.trim_matches('"') == OF_ITS_OWN_ACCORD)
            || (name.eq_ignore_ascii_case("HowCode") && value == "0")
    })
}

impl HistoryTally {
    fn note(&mut self, line: usize, attr: &str, value: &str, why: &str) {
        self.unreadable_values += 1;
        if self.notes.len() < MAX_NOTES {
            let shown: String = value.chars().take(40).collect();
            self.notes.push(format!(
                "line {line}: {attr} = {shown:?}: {why}, counted as 0"
            ));
        }
    }

    /// A number of seconds from a record, or `None` (noted) when it is not a believable one.
    fn seconds(&mut self, attr: &str, found: &Option<(usize, String)>) -> Option<f64> {
        let (line, text) = found.as_ref()?;
        let why = match text.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) => return Some(v),
            Ok(_) => "not between 0 and a year",
            Err(_) => "not a number",
        };
        self.note(*line, attr, text, why);
        None
    }

    /// Ends the record being read and counts it.
    fn close_record(&mut self) {
        let record = std::mem::take(&mut self.pending);
        if !record.any {
            return;
        }
        let completed = record.toe.as_deref().is_some_and(ended_by_itself);
        let user = self.seconds("RemoteUserCpu", &record.user_cpu);
        let sys = self.seconds("RemoteSysCpu", &record.sys_cpu);
        let wall = self
            .seconds("RemoteWallClockTime", &record.wall)
            .or_else(|| self.seconds("JobDuration", &record.duration));
        let cpu = user.unwrap_or(0.0) + sys.unwrap_or(0.0);
        if completed {
            self.completed += 1;
        } else {
            self.vacated += 1;
            self.vacated_cpu_seconds += cpu;
        }
        self.wall_seconds += wall.unwrap_or(0.0);
        self.cpu_seconds += cpu;
    }

    /// Reads one line (without its newline); a banner line ends the record.
    pub fn push_line(&mut self, line: &str) {
        self.line_no += 1;
        let line_no = self.line_no;
        if line.starts_with("*** ") {
            return self.close_record();
        }
        let Some((name, value)) = line.split_once(" = ") else {
            if !line.trim().is_empty() {
                self.skipped_lines += 1;
            }
            return;
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            self.skipped_lines += 1;
            return;
        }
        self.pending.any = true;
        let value = (line_no, value.to_owned());
        let slot = match name.to_ascii_lowercase().as_str() {
            "toe" => {
                self.pending.toe = Some(value.1);
                return;
            }
            "remoteusercpu" => &mut self.pending.user_cpu,
            "remotesyscpu" => &mut self.pending.sys_cpu,
            "remotewallclocktime" => &mut self.pending.wall,
            "jobduration" => &mut self.pending.duration,
            _ => return,
        };
        *slot = Some(value);
    }

    /// A line too long to read: skipped, and the record it belongs to is still read.
    pub fn skip_long_line(&mut self) {
        self.line_no += 1;
        self.skipped_lines += 1;
    }

    /// After the last line: a record no banner closed is not counted (the startd writes the
    /// banner right after the ad, so only a startd that died while writing leaves one).
    pub fn finish(&mut self) {
        if std::mem::take(&mut self.pending).any {
            self.unclosed = true;
        }
    }

    /// Reads a whole text (tests, fixtures).
    pub fn read_text(text: &str) -> Self {
        let mut tally = Self::default();
        for line in text.lines() {
            tally.push_line(line);
        }
        tally.finish();
        tally
    }

    /// The job report: `jobs_started` from the StartLog, the rest from the history.
    pub fn report(&self, jobs_started: u64) -> JobReport {
        JobReport {
            jobs_started,
            jobs_completed: self.completed,
            jobs_vacated: self.vacated,
            job_seconds: self.wall_seconds.round() as u64,
            job_cpu_seconds: self.cpu_seconds,
            vacated_cpu_seconds: self.vacated_cpu_seconds,
        }
    }
}

/// Reads `path` from `offset` into `tally`, line by line, each line at most [`MAX_LINE`].
fn read_into(path: &Path, offset: u64, tally: &mut HistoryTally) -> Result<u64, std::io::Error> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut reader = BufReader::new(file);
    let mut read = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if buf.last() != Some(&b'\n') && buf.len() > MAX_LINE {
            // Too long: drop the rest of it too.
            loop {
                buf.clear();
                let m = reader
                    .by_ref()
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut buf)?;
                read += m as u64;
                if m == 0 || buf.last() == Some(&b'\n') {
                    break;
                }
            }
            tally.skip_long_line();
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        tally.push_line(text.trim_end_matches(['\n', '\r']));
    }
    Ok(read)
}

/// The startd history from where it ended when the pilot started.
#[derive(Debug)]
pub struct HistoryWatch {
    path: PathBuf,
    /// (inode, length) when the watch began; `None` when there was no file yet.
    start: Option<(u64, u64)>,
}

impl HistoryWatch {
    /// Starts before condor does: what the file holds now is an earlier run's.
    pub fn new(path: PathBuf) -> Self {
        let start = std::fs::metadata(&path).ok().map(|m| (m.ino(), m.len()));
        HistoryWatch { path, start }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rotated file (`NAME.<something>` beside it) that is the file the watch began on.
    fn rotated(&self, ino: u64) -> Option<PathBuf> {
        let dir = self.path.parent()?;
        let name = self.path.file_name()?.to_str()?;
        let prefix = format!("{name}.");
        std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
            let file_name = entry.file_name();
            let candidate = file_name.to_str()?;
            (candidate.starts_with(&prefix) && entry.metadata().ok()?.ino() == ino)
                .then(|| entry.path())
        })
    }

    /// Reads every record appended since the watch began, after condor has gone. `Ok(None)`
    /// when condor wrote no history at all (no job left a slot, or it keeps none).
    pub fn read(&self) -> Result<Option<HistoryTally>, HistoryError> {
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| HistoryError::Read { path, source }
        };
        let mut tally = HistoryTally::default();
        let now = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(err(&self.path)(e)),
        };
        let mut any = false;
        match (self.start, &now) {
            (Some((ino, len)), Some(m)) if m.ino() == ino && m.len() >= len => {
                read_into(&self.path, len, &mut tally).map_err(err(&self.path))?;
                any = true;
            }
            (Some((ino, len)), _) => {
                // Rotated (or replaced): the rest of the old file first, then the new one.
                if let Some(old) = self.rotated(ino) {
                    read_into(&old, len, &mut tally).map_err(err(&old))?;
                    tally.finish();
                    any = true;
                } else {
                    tracing::warn!(path = %self.path.display(),
                        "condor's startd history was replaced and its old file is gone: jobs recorded before that are not counted");
                }
                if now.is_some() {
                    read_into(&self.path, 0, &mut tally).map_err(err(&self.path))?;
                    any = true;
                }
            }
            (None, Some(_)) => {
                read_into(&self.path, 0, &mut tally).map_err(err(&self.path))?;
                any = true;
            }
            (None, None) => {}
        }
        tally.finish();
        Ok(any.then_some(tally))
    }
}

/// The job report while condor runs: looked at every `period` and given out again, whole
/// and cumulative, when it changed. pilotd takes the last report line of a worker's output, so
/// a pilot killed at once (pilotd's `fast` eviction, an OOM kill of the container) still
/// leaves the jobs it had finished, at most one period old; the report at the end stays the
/// last word otherwise. Quiet: what is odd in the figures is logged once, at the end.
pub struct Progress<'a> {
    history: Option<&'a HistoryWatch>,
    period: std::time::Duration,
    next: Option<std::time::Instant>,
    /// What the last look saw (jobs started, the history's length): the history is read
    /// again only when one of them changed.
    looked: Option<(u64, Option<u64>)>,
    given: JobReport,
}

impl<'a> Progress<'a> {
    pub fn new(history: Option<&'a HistoryWatch>, period: std::time::Duration) -> Self {
        Progress {
            history,
            period,
            next: None,
            looked: None,
            given: JobReport::default(),
        }
    }

    /// The report to print at `now`, if a period has passed since the last look and it
    /// differs from the last one given (nothing while no job has started).
    pub fn due(&mut self, jobs_started: u64, now: std::time::Instant) -> Option<JobReport> {
        let next = *self.next.get_or_insert(now + self.period);
        if now < next {
            return None;
        }
        self.next = Some(now + self.period);
        let length = self
            .history
            .and_then(|w| std::fs::metadata(w.path()).ok())
            .map(|m| m.len());
        if self.looked.replace((jobs_started, length)) == Some((jobs_started, length)) {
            return None;
        }
        let report = match self.history.map(HistoryWatch::read) {
            Some(Ok(Some(tally))) => tally.report(jobs_started),
            // Unreadable now: the end's report says why; the count is still worth giving.
            _ => JobReport {
                jobs_started,
                ..self.given
            },
        };
        (report != self.given).then(|| {
            self.given = report;
            report
        })
    }
}

/// The job report at the pilot's end: activations from the StartLog, the rest from the
/// history, and one log line that says where the figures came from.
pub fn job_report(jobs_started: u64, history: Option<&HistoryWatch>) -> JobReport {
    let Some(watch) = history else {
        tracing::warn!(
            jobs_started,
            "condor names no startd history: the job report counts started jobs from the StartLog and reports no completions, vacated jobs or times"
        );
        return JobReport {
            jobs_started,
            ..JobReport::default()
        };
    };
    match watch.read() {
        Ok(Some(tally)) => {
            for note in &tally.notes {
                tracing::warn!(path = %watch.path().display(), "startd history: {note}");
            }
            if tally.unreadable_values > tally.notes.len() as u64 {
                tracing::warn!(path = %watch.path().display(), count = tally.unreadable_values,
                    "startd history: more unreadable values, each counted as 0");
            }
            if tally.unclosed {
                tracing::warn!(path = %watch.path().display(),
                    "startd history ends inside a record (the startd died while writing it): that job is not counted");
            }
            let report = tally.report(jobs_started);
            let recorded = report.jobs_completed + report.jobs_vacated;
            if recorded != jobs_started {
                tracing::warn!(
                    jobs_started,
                    recorded,
                    "the StartLog and the startd history disagree on how many jobs ran (a startd that died keeps no record of its last jobs)"
                );
            }
            report
        }
        Ok(None) => {
            if jobs_started > 0 {
                tracing::warn!(path = %watch.path().display(), jobs_started,
                    "no startd history although jobs started: the job report counts them from the StartLog and reports no completions, vacated jobs or times");
            }
            JobReport {
                jobs_started,
                ..JobReport::default()
            }
        }
        Err(e) => {
            tracing::warn!(
                jobs_started,
                "{e}: the job report counts started jobs from the StartLog and reports no completions, vacated jobs or times"
            );
            JobReport {
                jobs_started,
                ..JobReport::default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::startlog::tests::append;

    /// Condor 23.9 (Debian trixie), a personal pool with a partitionable slot, jobs of an
    /// ordinary user: 1 and 3 completed (5 s, CPU spent in forks procd never sampled / too
    /// short for its default interval), 2 removed by its owner while running, 4 vacated by a
    /// graceful startd shutdown (17 s CPU), 5 completed (1 s CPU, 2 s snapshot interval),
    /// 4 again, its second run vacated the same way (34 s CPU).
    const PERSONAL: &str = include_str!("../tests/fixtures/startd_history/personal-condor-23.9");

    #[test]
    fn condors_own_records_tell_completed_from_vacated_and_give_this_runs_figures() {
        let t = HistoryTally::read_text(PERSONAL);
        assert_eq!((t.completed, t.vacated), (3, 3));
        // RemoteWallClockTime: 6 + 45 + 6 + 49 + 7 + 57.
        assert_eq!(t.wall_seconds, 170.0);
        // RemoteUserCpu + RemoteSysCpu: 0 + (0 + 1) + 0 + 17 + 1 + 34.
        assert_eq!(t.cpu_seconds, 53.0);
        assert_eq!(t.vacated_cpu_seconds, 52.0);
        assert!(t.notes.is_empty(), "{:?}", t.notes);
        assert!(!t.unclosed);
        let r = t.report(6);
        assert_eq!(
            r,
            JobReport {
                jobs_started: 6,
                jobs_completed: 3,
                jobs_vacated: 3,
                job_seconds: 170,
                job_cpu_seconds: 53.0,
                vacated_cpu_seconds: 52.0,
            }
        );
    }

    #[test]
    fn the_pilots_own_records_on_the_real_pool_read_as_what_happened() {
        // The shipped worker image on the test pool, condor running as uid 65532
        // (pilot/tests/it/real_condor.rs, the two job-report tests).
        let done = HistoryTally::read_text(include_str!(
            "../tests/fixtures/startd_history/pilot-completed-23.9"
        ));
        assert_eq!(
            done.report(1),
            JobReport {
                jobs_started: 1,
                jobs_completed: 1,
                jobs_vacated: 0,
                job_seconds: 21,
                job_cpu_seconds: 10.0,
                vacated_cpu_seconds: 0.0,
            }
        );
        let vacated = HistoryTally::read_text(include_str!(
            "../tests/fixtures/startd_history/pilot-sigterm-vacated-23.9"
        ));
        assert_eq!(
            vacated.report(1),
            JobReport {
                jobs_started: 1,
                jobs_completed: 0,
                jobs_vacated: 1,
                job_seconds: 21,
                job_cpu_seconds: 10.0,
                vacated_cpu_seconds: 10.0,
            }
        );
    }

    #[test]
    fn the_ticket_of_execution_decides() {
        assert!(ended_by_itself(
            r#"[ How = "OF_ITS_OWN_ACCORD"; Who = "itself"; When = 1796387380; HowCode = 0; ExitCode = 0; ExitBySignal = false ]"#
        ));
        assert!(ended_by_itself("[ HowCode = 0 ]"));
        assert!(!ended_by_itself(
            r#"[ How = "DAEMON_KILLED"; Who = "daemon"; HowCode = 1 ]"#
        ));
        assert!(!ended_by_itself(""));
        assert!(!ended_by_itself("[ garbage ]"));
    }

    #[test]
    fn a_record_without_a_banner_or_a_banner_without_a_record_counts_nothing() {
        let one = "RemoteUserCpu = 3.0\nRemoteWallClockTime = 4\n";
        let t = HistoryTally::read_text(one);
        assert_eq!((t.completed, t.vacated), (0, 0));
        assert!(t.unclosed);
        let t = HistoryTally::read_text("*** Offset = 0\n*** Offset = 0\n");
        assert_eq!((t.completed, t.vacated), (0, 0));
        assert!(!t.unclosed);
    }

    #[test]
    fn values_that_are_not_seconds_are_named_and_count_zero() {
        let text = "RemoteUserCpu = lots\nRemoteSysCpu = -4\nRemoteWallClockTime = NaN\n\
                    JobDuration = 12.5\nToE = [ How = \"OF_ITS_OWN_ACCORD\" ]\n*** Offset = 0\n\
                    RemoteUserCpu = 1e300\nRemoteWallClockTime = 3\n*** Offset = 90\n";
        let t = HistoryTally::read_text(text);
        assert_eq!((t.completed, t.vacated), (1, 1));
        assert_eq!(t.cpu_seconds, 0.0);
        assert_eq!(
            t.wall_seconds, 15.5,
            "JobDuration stands in for a bad wall time"
        );
        assert_eq!(t.unreadable_values, 4);
        assert!(t.notes[0].starts_with("line 1: RemoteUserCpu = \"lots\": not a number"));
        assert!(t.notes[1].contains("line 2: RemoteSysCpu"));
    }

    #[test]
    fn garbage_never_panics_and_never_counts_a_job() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..300 {
            let mut text = String::new();
            for _ in 0..40 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let pick = [
                    "RemoteUserCpu",
                    " = ",
                    "=",
                    "\n",
                    "***",
                    "[",
                    "]",
                    "ToE",
                    "9e9",
                    "-",
                    "\u{fffd}",
                    "How = \"OF_ITS_OWN_ACCORD\"",
                    ";",
                    " ",
                    "x",
                ];
                text.push_str(pick[(seed % pick.len() as u64) as usize]);
            }
            let t = HistoryTally::read_text(&text);
            let banners = text.lines().filter(|l| l.starts_with("*** ")).count() as u64;
            assert!(t.completed + t.vacated <= banners, "{text:?}");
            assert!(t.cpu_seconds.is_finite() && t.cpu_seconds >= 0.0);
        }
    }

    const DONE: &str =
        "RemoteUserCpu = 2.0\nRemoteWallClockTime = 3\nToE = [ HowCode = 0 ]\n*** Offset = 0\n";
    const GONE: &str = "RemoteUserCpu = 5.0\nRemoteWallClockTime = 7\n*** Offset = 0\n";

    #[test]
    fn only_records_written_after_the_watch_began_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("startd_history");
        append(&path, DONE);
        let watch = HistoryWatch::new(path.clone());
        assert_eq!(watch.read().unwrap().unwrap().completed, 0);
        append(&path, GONE);
        let t = watch.read().unwrap().unwrap();
        assert_eq!((t.completed, t.vacated, t.vacated_cpu_seconds), (0, 1, 5.0));
    }

    #[test]
    fn no_file_is_no_history_and_a_file_that_appears_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("startd_history");
        let watch = HistoryWatch::new(path.clone());
        assert!(watch.read().unwrap().is_none());
        append(&path, DONE);
        append(&path, GONE);
        let t = watch.read().unwrap().unwrap();
        assert_eq!((t.completed, t.vacated, t.wall_seconds), (1, 1, 10.0));
    }

    #[test]
    fn a_rotated_history_is_read_from_where_the_watch_began() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("startd_history");
        append(&path, GONE);
        let watch = HistoryWatch::new(path.clone());
        append(&path, DONE);
        std::fs::rename(&path, dir.path().join("startd_history.20261204T120000")).unwrap();
        append(&path, GONE);
        let t = watch.read().unwrap().unwrap();
        assert_eq!((t.completed, t.vacated), (1, 1));
    }

    #[test]
    fn progress_gives_the_report_again_only_when_it_changed_once_a_period() {
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("startd_history");
        let watch = HistoryWatch::new(path.clone());
        let mut p = Progress::new(Some(&watch), Duration::from_secs(30));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Nothing started: nothing to say, then or a period later.
        assert_eq!(p.due(0, at(0)), None);
        assert_eq!(p.due(0, at(30)), None);
        // A job started: said at the next look, not before.
        assert_eq!(p.due(1, at(45)), None);
        let started = p.due(1, at(60)).unwrap();
        assert_eq!((started.jobs_started, started.jobs_completed), (1, 0));
        assert_eq!(p.due(1, at(90)), None, "unchanged: not again");
        // condor wrote its record of the job: the whole report, cumulative.
        append(&path, DONE);
        let done = p.due(1, at(120)).unwrap();
        assert_eq!(
            (done.jobs_started, done.jobs_completed, done.job_seconds),
            (1, 1, 3)
        );
        assert_eq!(done.job_cpu_seconds, 2.0);
        append(&path, GONE);
        let later = p.due(2, at(150)).unwrap();
        assert_eq!((later.jobs_completed, later.jobs_vacated), (1, 1));
        // No history at all: the StartLog's count alone.
        let mut bare = Progress::new(None, Duration::from_secs(1));
        assert_eq!(bare.due(3, at(0)), None);
        assert_eq!(bare.due(3, at(1)).map(|r| r.jobs_started), Some(3));
    }

    #[test]
    fn an_overlong_line_is_skipped_and_its_record_still_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("startd_history");
        let watch = HistoryWatch::new(path.clone());
        let long = format!("Environment = \"{}\"\n", "x".repeat(3 * MAX_LINE));
        append(&path, &format!("{long}{DONE}"));
        let t = watch.read().unwrap().unwrap();
        assert_eq!((t.completed, t.skipped_lines), (1, 1));
    }

    #[test]
    fn an_unreadable_history_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("startd_history");
        std::fs::create_dir(&path).unwrap();
        let watch = HistoryWatch {
            path: path.clone(),
            start: None,
        };
        let e = watch.read().unwrap_err().to_string();
        assert!(
            e.contains("startd_history") && e.contains("cannot read"),
            "{e}"
        );
        // The report then keeps the StartLog's count and zeros for the rest.
        let r = job_report(2, Some(&watch));
        assert_eq!(
            r,
            JobReport {
                jobs_started: 2,
                ..JobReport::default()
            }
        );
    }
}
