//! The contract between pilotd and `pilot`, its worker entrypoint: how a worker ends (its exit
//! code) and what it did (its job report, `JobReport`).
//!
//! `pilot` exits with one of these codes; pilotd reads the code from the finished container
//! and turns it into the worker's outcome (which feeds its start back-off). Both sides link
//! this crate, so the numbers and their meanings are written once. The codes are part of the
//! public contract (docs/site.md, "The pilot (worker entrypoint)"): worker images that do not
//! run `pilot` follow them too.

use std::fmt;

/// How a pilot ended, as its exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PilotExit {
    /// 0: ran at least one job, then condor shut down normally.
    RanJobs,
    /// 10: no job arrived within the idle timeout.
    Idle,
    /// 20: configuration (environment, remote fetch, token, or condor rejecting the config)
    /// unusable.
    Config,
    /// 21: self-test failed: condor's programs or directories unusable, the site's
    /// `PILOT_SELFTEST_CMD` failing, or a CVMFS repository of `PILOT_CVMFS_REQUIRED` that
    /// cannot be read (the host lacks CVMFS, or its mount hangs). pilotd backs off as for any
    /// self-test failure: the host has to be fixed, retrying soon does not help.
    SelfTest,
    /// 30: condor failed (did not start, crashed, exited abnormally, had to be killed).
    CondorFailed,
    /// 128+n: ended by signal n.
    Signal(i32),
}

impl PilotExit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            PilotExit::RanJobs => 0,
            PilotExit::Idle => 10,
            PilotExit::Config => 20,
            PilotExit::SelfTest => 21,
            PilotExit::CondorFailed => 30,
            PilotExit::Signal(n) => u8::try_from(128 + n.clamp(1, 127)).unwrap_or(255),
        }
    }

    /// Reads an exit code back; `None` for a code outside the contract (an image that does not
    /// follow it). Signals are the classic ones, 1 to 31: a container runtime reports a
    /// process killed by signal n as 128+n.
    pub fn from_code(code: i64) -> Option<PilotExit> {
        match code {
            0 => Some(PilotExit::RanJobs),
            10 => Some(PilotExit::Idle),
            20 => Some(PilotExit::Config),
            21 => Some(PilotExit::SelfTest),
            30 => Some(PilotExit::CondorFailed),
            129..=159 => i32::try_from(code - 128).ok().map(PilotExit::Signal),
            _ => None,
        }
    }
}

/// `exit CODE: meaning`, as pilotd's status and log lines show it.
impl fmt::Display for PilotExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            PilotExit::RanJobs => write!(f, "exit {code}: ran jobs"),
            PilotExit::Idle => write!(f, "exit {code}: no job within the idle timeout"),
            PilotExit::Config => write!(f, "exit {code}: remote configuration failed"),
            PilotExit::SelfTest => write!(f, "exit {code}: self-test failed"),
            PilotExit::CondorFailed => write!(f, "exit {code}: condor failed"),
            PilotExit::Signal(n) => write!(f, "exit {code}: signal {n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_documented_ones_and_read_back() {
        for (exit, code) in [
            (PilotExit::RanJobs, 0),
            (PilotExit::Idle, 10),
            (PilotExit::Config, 20),
            (PilotExit::SelfTest, 21),
            (PilotExit::CondorFailed, 30),
            (PilotExit::Signal(15), 143),
            (PilotExit::Signal(3), 131),
            (PilotExit::Signal(9), 137),
        ] {
            assert_eq!(exit.code(), code, "{exit:?}");
            assert_eq!(PilotExit::from_code(i64::from(code)), Some(exit));
        }
        for foreign in [1, 2, 128, 160, 255, -1] {
            assert_eq!(PilotExit::from_code(foreign), None, "{foreign}");
        }
        assert_eq!(PilotExit::Signal(500).code(), 255);
        assert_eq!(PilotExit::Signal(15).to_string(), "exit 143: signal 15");
        assert_eq!(
            PilotExit::Idle.to_string(),
            "exit 10: no job within the idle timeout"
        );
    }
}

/// What a pilot tells pilotd about the jobs condor ran in its slot, in one line of its output
/// at its end (its exit record), so pilotd can count jobs and the work evictions lost without
/// a channel of its own into the container:
///
/// ```text
/// pilot-report v=1 jobs_started=3 jobs_completed=2 jobs_vacated=1 job_seconds=5400 job_cpu_seconds=5012.4 vacated_cpu_seconds=610.0
/// ```
///
/// Versioned so either side can be older than the other:
/// - a key keeps its meaning for ever; a new figure is a new key, and `v` goes up only when a
///   reader must know that keys were added;
/// - a reader takes the keys it knows and ignores the others, so a newer pilot's line still
///   reads;
/// - a pilot older than the report writes no line at all: pilotd then knows the exit code's
///   "ran jobs" and nothing more, and says so.
///
/// The line is the pilot's last on its standard output; while condor runs the pilot also
/// prints it, whole and cumulative, whenever it changed, so a pilot killed at once leaves the
/// figures of a moment before. pilotd reads the last one in the worker's output (a job's
/// output goes to condor's files, never to the pilot's stdout).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobReport {
    /// Jobs condor activated in this pilot's slots (the StartLog's activations).
    pub jobs_started: u64,
    /// Jobs that ran to their end here (condor's own history of the slot says so).
    pub jobs_completed: u64,
    /// Jobs that left the slot before their end: vacated (pilotd or the pool evicted them),
    /// or still running when condor was stopped.
    pub jobs_vacated: u64,
    /// Wall-clock seconds the jobs ran here, completed and vacated.
    pub job_seconds: u64,
    /// CPU-seconds (user and system) the jobs used here, completed and vacated.
    pub job_cpu_seconds: f64,
    /// CPU-seconds of the vacated jobs: work lost to evictions, unless the job checkpointed.
    pub vacated_cpu_seconds: f64,
}

/// A report line that names itself but cannot be read: which key, and why.
///
/// Both come from the worker's output, which a job can write to: pilotd logs them as root,
/// to the journal too, where no escaping writer stands in between. So the key is at most 40
/// characters of what was read with each control character escaped (`\u{1b}`, `\n`), and
/// `why` quotes the value as Rust's `{:?}` does: neither can carry a terminal escape or
/// break a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportError {
    pub key: String,
    pub why: String,
}

/// At most 40 characters of `text`, each control character escaped (as the logs do, crate
/// `redact`, which this crate does not link: it has no dependencies).
fn quoted_key(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().take(40) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pilot report: {}: {}", self.key, self.why)
    }
}

impl std::error::Error for ReportError {}

impl JobReport {
    /// The marker that starts the line.
    pub const MARKER: &'static str = "pilot-report";
    /// The version this crate writes.
    pub const VERSION: u32 = 1;

    /// The line the pilot prints (no newline).
    pub fn to_line(&self) -> String {
        format!(
            "{} v={} jobs_started={} jobs_completed={} jobs_vacated={} job_seconds={} \
             job_cpu_seconds={:.1} vacated_cpu_seconds={:.1}",
            Self::MARKER,
            Self::VERSION,
            self.jobs_started,
            self.jobs_completed,
            self.jobs_vacated,
            self.job_seconds,
            self.job_cpu_seconds,
            self.vacated_cpu_seconds,
        )
    }

    /// Reads one output line: `None` when it is not a report line, an error when it is one
    /// but a known key's value is not a number (a report is all or nothing: half a report
    /// would count jobs without their time). Keys a newer pilot added are ignored.
    pub fn parse_line(line: &str) -> Option<Result<JobReport, ReportError>> {
        let rest = line.trim().strip_prefix(Self::MARKER)?;
        if !rest.starts_with(' ') {
            return None;
        }
        let mut r = JobReport::default();
        let mut version = None;
        for token in rest.split_ascii_whitespace() {
            let Some((key, value)) = token.split_once('=') else {
                return Some(Err(ReportError {
                    key: quoted_key(token),
                    why: "expected key=value".into(),
                }));
            };
            let err = |why: &str| ReportError {
                key: quoted_key(key),
                why: format!(
                    "{why}, got {:?}",
                    value.chars().take(40).collect::<String>()
                ),
            };
            let count = |slot: &mut u64| -> Result<(), ReportError> {
                *slot = value
                    .parse::<u64>()
                    .map_err(|_| err("expected a whole number"))?;
                Ok(())
            };
            let seconds = |slot: &mut f64| -> Result<(), ReportError> {
                let v = value
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| err("expected seconds, a number 0 or above"))?;
                *slot = v;
                Ok(())
            };
            let read = match key {
                "v" => value
                    .parse::<u32>()
                    .map(|v| version = Some(v))
                    .map_err(|_| err("expected a version number")),
                "jobs_started" => count(&mut r.jobs_started),
                "jobs_completed" => count(&mut r.jobs_completed),
                "jobs_vacated" => count(&mut r.jobs_vacated),
                "job_seconds" => count(&mut r.job_seconds),
                "job_cpu_seconds" => seconds(&mut r.job_cpu_seconds),
                "vacated_cpu_seconds" => seconds(&mut r.vacated_cpu_seconds),
                _ => Ok(()),
            };
            if let Err(e) = read {
                return Some(Err(e));
            }
        }
        if version.is_none() {
            return Some(Err(ReportError {
                key: "v".into(),
                why: "missing: a report line names its version".into(),
            }));
        }
        Some(Ok(r))
    }

    /// The report in a worker's output: its last report line (the pilot prints one, at its
    /// end). `None` when there is none (a pilot older than the report, or an image that does
    /// not run `pilot`).
    pub fn find_last<'a>(
        lines: impl DoubleEndedIterator<Item = &'a str>,
    ) -> Option<Result<JobReport, ReportError>> {
        lines.rev().find_map(JobReport::parse_line)
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // A worker's output is the job's side of the boundary: pilotd reads it as root, so
        // every line must end in a report, an error or "not a report", never a panic, and an
        // error names at most 40 characters of what it read, none a control character.
        #[test]
        fn any_line_reads_without_panic(
            line in ".{0,300}",
            tail in "[ -~]{0,200}",
            noise in "[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}a-z=]{0,80}",
        ) {
            for l in [
                line.clone(),
                format!("pilot-report {tail}"),
                format!("pilot-report v=1 {line}"),
                format!("pilot-report v=1 {noise}"),
            ] {
                if let Some(Err(e)) = JobReport::parse_line(&l) {
                    // Escaped, a character is at most six (`\u{9f}`).
                    prop_assert!(e.key.chars().count() <= 40 * 6);
                    let shown = e.to_string();
                    prop_assert!(!shown.chars().any(char::is_control), "{shown:?}");
                    prop_assert!(shown.chars().count() <= 600, "{shown}");
                }
            }
        }

        // What the pilot writes, pilotd reads back: counts exactly, seconds to the tenth.
        #[test]
        fn every_report_reads_back(
            n in proptest::array::uniform4(any::<u64>()),
            cpu in 0.0f64..1e12,
            lost in 0.0f64..1e12,
        ) {
            let r = JobReport {
                jobs_started: n[0],
                jobs_completed: n[1],
                jobs_vacated: n[2],
                job_seconds: n[3],
                job_cpu_seconds: cpu,
                vacated_cpu_seconds: lost,
            };
            let back = JobReport::parse_line(&r.to_line()).unwrap().unwrap();
            prop_assert_eq!(
                (back.jobs_started, back.jobs_completed, back.jobs_vacated, back.job_seconds),
                (n[0], n[1], n[2], n[3])
            );
            prop_assert!((back.job_cpu_seconds - cpu).abs() <= 0.05 + cpu * 1e-15);
            prop_assert!((back.vacated_cpu_seconds - lost).abs() <= 0.05 + lost * 1e-15);
        }
    }

    fn sample() -> JobReport {
        JobReport {
            jobs_started: 3,
            jobs_completed: 2,
            jobs_vacated: 1,
            job_seconds: 5400,
            job_cpu_seconds: 5012.4,
            vacated_cpu_seconds: 610.0,
        }
    }

    #[test]
    fn a_report_reads_back_what_was_written() {
        let line = sample().to_line();
        assert_eq!(
            line,
            "pilot-report v=1 jobs_started=3 jobs_completed=2 jobs_vacated=1 job_seconds=5400 \
             job_cpu_seconds=5012.4 vacated_cpu_seconds=610.0"
        );
        assert_eq!(JobReport::parse_line(&line), Some(Ok(sample())));
    }

    #[test]
    fn other_lines_are_not_reports() {
        for line in [
            "",
            "pilot exiting",
            "pilot-reporter v=1",
            "  INFO pilot-report is written at the end",
        ] {
            assert_eq!(JobReport::parse_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn a_newer_pilots_keys_are_ignored_and_missing_keys_are_zero() {
        let r = JobReport::parse_line("pilot-report v=2 jobs_started=4 gpu_seconds=12 x=y")
            .unwrap()
            .unwrap();
        assert_eq!(r.jobs_started, 4);
        assert_eq!(r.job_seconds, 0);
    }

    #[test]
    fn a_damaged_report_names_its_key() {
        for (line, key) in [
            ("pilot-report v=1 jobs_started=-1", "jobs_started"),
            ("pilot-report v=1 job_cpu_seconds=NaN", "job_cpu_seconds"),
            ("pilot-report v=1 job_cpu_seconds=-3", "job_cpu_seconds"),
            ("pilot-report v=1 jobs_completed", "jobs_completed"),
            ("pilot-report jobs_started=1", "v"),
            ("pilot-report v=one", "v"),
        ] {
            let e = JobReport::parse_line(line).unwrap().unwrap_err();
            assert_eq!(e.key, key, "{line}: {e}");
        }
    }

    /// A job that prints a report line of its own chooses the key pilotd names in its log
    /// line: a terminal escape or a newline in it arrives escaped.
    #[test]
    fn a_damaged_reports_key_carries_no_control_character() {
        for (line, key) in [
            (
                "pilot-report v=1 \u{1b}]0;owned\u{7}\u{1b}[2J",
                "\\u{1b}]0;owned\\u{7}\\u{1b}[2J",
            ),
            ("pilot-report v=1 a\u{1b}[31mred", "a\\u{1b}[31mred"),
            ("pilot-report v=1 x\u{b}y\u{85}z", "x\\u{b}y\\u{85}z"),
        ] {
            let e = JobReport::parse_line(line).unwrap().unwrap_err();
            assert_eq!(e.key, key, "{line:?}");
            let shown = e.to_string();
            assert!(!shown.chars().any(char::is_control), "{shown:?}");
        }
        // The value is quoted too.
        let e = JobReport::parse_line("pilot-report v=1 jobs_started=\u{1b}[2J")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "pilot report: jobs_started: expected a whole number, got \"\\u{1b}[2J\""
        );
    }

    #[test]
    fn the_last_report_in_the_output_counts() {
        let first = JobReport {
            jobs_started: 1,
            ..JobReport::default()
        };
        let out = [
            first.to_line(),
            "condor_master exited".to_string(),
            sample().to_line(),
            "pilot exiting".to_string(),
        ];
        assert_eq!(
            JobReport::find_last(out.iter().map(String::as_str)),
            Some(Ok(sample()))
        );
        assert_eq!(JobReport::find_last(["a", "b"].into_iter()), None);
    }
}
