//! How a finished worker ended, and what that does to the next start. The pilot's exit code
//! is read through its contract (`pilot_contract::PilotExit`); the outcome feeds the start
//! back-off: a worker that ran no job widens it, one that ran a job resets it.

use chrono::{DateTime, Utc};
use pilot_contract::PilotExit;
use pilotd_core::backoff::Backoff;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a finished worker ended: the pilot's exit code read through its contract, or what
/// happened around it (the memory limit, a start that failed, an image that does not follow
/// the contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "OutcomeRecordForm", into = "OutcomeRecordForm")]
pub enum Outcome {
    /// The pilot ended as its contract says (`exit 0: ran jobs`, `exit 10: …`, 128+n).
    Exited(PilotExit),
    /// The kernel killed it for exceeding its memory limit.
    OutOfMemory,
    /// The container could not be created or started.
    StartFailed { message: String },
    /// pilotd ended it because its scratch was full: the kernel held it to its disk share
    /// (KiB), and a worker that cannot write cannot run a job.
    ScratchFull { share_kib: u64 },
    /// Any other code (an image that does not follow the pilot's contract).
    Other { code: i64 },
}

/// How outcomes are spelled in the status file (`{"kind": "ran_jobs"}`, …). The file outlives
/// pilotd versions (a restarted daemon reads its back-off back), so this spelling stays fixed
/// whatever the in-memory type looks like.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum OutcomeRecordForm {
    RanJobs,
    Idle,
    ConfigFailed,
    SelfTestFailed,
    CondorFailed,
    Signalled { signal: i64 },
    OutOfMemory,
    StartFailed { message: String },
    ScratchFull { share_kib: u64 },
    Other { code: i64 },
}

impl From<OutcomeRecordForm> for Outcome {
    fn from(f: OutcomeRecordForm) -> Outcome {
        match f {
            OutcomeRecordForm::RanJobs => Outcome::Exited(PilotExit::RanJobs),
            OutcomeRecordForm::Idle => Outcome::Exited(PilotExit::Idle),
            OutcomeRecordForm::ConfigFailed => Outcome::Exited(PilotExit::Config),
            OutcomeRecordForm::SelfTestFailed => Outcome::Exited(PilotExit::SelfTest),
            OutcomeRecordForm::CondorFailed => Outcome::Exited(PilotExit::CondorFailed),
            OutcomeRecordForm::Signalled { signal } => match i32::try_from(signal) {
                Ok(n) => Outcome::Exited(PilotExit::Signal(n)),
                Err(_) => Outcome::Other {
                    code: signal.saturating_add(128),
                },
            },
            OutcomeRecordForm::OutOfMemory => Outcome::OutOfMemory,
            OutcomeRecordForm::StartFailed { message } => Outcome::StartFailed { message },
            OutcomeRecordForm::ScratchFull { share_kib } => Outcome::ScratchFull { share_kib },
            OutcomeRecordForm::Other { code } => Outcome::Other { code },
        }
    }
}

impl From<Outcome> for OutcomeRecordForm {
    fn from(o: Outcome) -> OutcomeRecordForm {
        match o {
            Outcome::Exited(PilotExit::RanJobs) => OutcomeRecordForm::RanJobs,
            Outcome::Exited(PilotExit::Idle) => OutcomeRecordForm::Idle,
            Outcome::Exited(PilotExit::Config) => OutcomeRecordForm::ConfigFailed,
            Outcome::Exited(PilotExit::SelfTest) => OutcomeRecordForm::SelfTestFailed,
            Outcome::Exited(PilotExit::CondorFailed) => OutcomeRecordForm::CondorFailed,
            Outcome::Exited(PilotExit::Signal(n)) => OutcomeRecordForm::Signalled {
                signal: i64::from(n),
            },
            Outcome::OutOfMemory => OutcomeRecordForm::OutOfMemory,
            Outcome::StartFailed { message } => OutcomeRecordForm::StartFailed { message },
            Outcome::ScratchFull { share_kib } => OutcomeRecordForm::ScratchFull { share_kib },
            Outcome::Other { code } => OutcomeRecordForm::Other { code },
        }
    }
}

/// What an outcome does to the back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackoffEffect {
    Widen,
    Reset,
    Neutral,
}

impl Outcome {
    pub(crate) fn from_exit(code: Option<i64>, oom_killed: bool) -> Outcome {
        if oom_killed {
            return Outcome::OutOfMemory;
        }
        let code = code.unwrap_or(-1);
        PilotExit::from_code(code).map_or(Outcome::Other { code }, Outcome::Exited)
    }

    /// A worker that ran no job or could not start widens the delay before the next start;
    /// one that ran a job resets it; one ended by a signal (pilotd's own stop) or by the
    /// memory limit says nothing about the pool.
    /// A failure someone must read about (a bad configuration, a failed self-test, condor
    /// failing, the memory limit, an image off the contract): its output is worth keeping.
    pub(crate) fn is_failure(&self) -> bool {
        !matches!(
            self,
            Outcome::Exited(PilotExit::RanJobs | PilotExit::Idle | PilotExit::Signal(_))
        )
    }

    pub(crate) fn effect(&self) -> BackoffEffect {
        match self {
            Outcome::Exited(PilotExit::RanJobs) => BackoffEffect::Reset,
            Outcome::Exited(PilotExit::Signal(_)) | Outcome::OutOfMemory => BackoffEffect::Neutral,
            _ => BackoffEffect::Widen,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Exited(exit) => write!(f, "{exit}"),
            Outcome::OutOfMemory => write!(f, "killed: out of memory"),
            Outcome::StartFailed { message } => write!(f, "failed to start: {message}"),
            Outcome::ScratchFull { share_kib } => write!(
                f,
                "stopped: its scratch filled its disk share of {} MiB",
                share_kib / 1024
            ),
            Outcome::Other { code } => write!(f, "exit {code}"),
        }
    }
}

/// The start back-off as it stands: consecutive failures and the earliest next start.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StartBackoff {
    pub failures: u32,
    pub not_before: Option<DateTime<Utc>>,
    pub last_outcome: Option<Outcome>,
}

impl StartBackoff {
    /// The back-off after `outcome` was observed at `now`, delayed by `policy` after the n-th
    /// consecutive failure.
    pub(crate) fn after(
        &self,
        outcome: &Outcome,
        now: DateTime<Utc>,
        policy: Backoff,
    ) -> StartBackoff {
        match outcome.effect() {
            BackoffEffect::Reset => StartBackoff {
                failures: 0,
                not_before: None,
                last_outcome: Some(outcome.clone()),
            },
            BackoffEffect::Neutral => StartBackoff {
                last_outcome: Some(outcome.clone()),
                ..self.clone()
            },
            BackoffEffect::Widen => {
                let failures = self.failures.saturating_add(1);
                StartBackoff {
                    failures,
                    not_before: Some(policy.retry_at(now, failures)),
                    last_outcome: Some(outcome.clone()),
                }
            }
        }
    }

    pub(crate) fn holds(&self, now: DateTime<Utc>) -> bool {
        self.not_before.is_some_and(|t| t > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::time::Duration;

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap()
    }

    #[test]
    fn outcomes_and_backoff() {
        let policy = Backoff::new(Duration::from_secs(60), Duration::from_secs(300));
        let now = t(20, 0);
        let mut b = StartBackoff::default();
        let mut delays = vec![];
        for _ in 0..5 {
            b = b.after(&Outcome::from_exit(Some(10), false), now, policy);
            delays.push((b.not_before.unwrap() - now).num_seconds());
        }
        assert_eq!(delays, vec![60, 120, 240, 300, 300]);
        let neutral = b.after(&Outcome::from_exit(Some(143), false), now, policy);
        assert_eq!(
            neutral.failures, 5,
            "our own SIGTERM says nothing about the pool"
        );
        let reset = b.after(&Outcome::from_exit(Some(0), false), now, policy);
        assert_eq!((reset.failures, reset.not_before), (0, None));
        let start = StartBackoff::default().after(
            &Outcome::StartFailed {
                message: "x".into(),
            },
            now,
            policy,
        );
        assert_eq!(start.failures, 1);
        assert_eq!(Outcome::from_exit(Some(137), true), Outcome::OutOfMemory);
        assert_eq!(
            Outcome::from_exit(Some(21), false),
            Outcome::Exited(PilotExit::SelfTest)
        );
        assert_eq!(
            Outcome::from_exit(Some(137), false),
            Outcome::Exited(PilotExit::Signal(9))
        );
        assert_eq!(
            Outcome::from_exit(Some(1), false).effect(),
            BackoffEffect::Widen
        );
        // Far too many failures never overflow.
        let huge = StartBackoff {
            failures: u32::MAX - 1,
            ..Default::default()
        }
        .after(&Outcome::Exited(PilotExit::Idle), now, policy);
        assert_eq!((huge.not_before.unwrap() - now).num_seconds(), 300);
    }

    #[test]
    fn outcomes_keep_their_status_file_spelling() {
        for (o, json) in [
            (Outcome::from_exit(Some(0), false), r#"{"kind":"ran_jobs"}"#),
            (Outcome::from_exit(Some(10), false), r#"{"kind":"idle"}"#),
            (
                Outcome::from_exit(Some(20), false),
                r#"{"kind":"config_failed"}"#,
            ),
            (
                Outcome::from_exit(Some(21), false),
                r#"{"kind":"self_test_failed"}"#,
            ),
            (
                Outcome::from_exit(Some(30), false),
                r#"{"kind":"condor_failed"}"#,
            ),
            (
                Outcome::from_exit(Some(143), false),
                r#"{"kind":"signalled","signal":15}"#,
            ),
            (
                Outcome::from_exit(Some(1), true),
                r#"{"kind":"out_of_memory"}"#,
            ),
            (
                Outcome::from_exit(Some(3), false),
                r#"{"kind":"other","code":3}"#,
            ),
            (
                Outcome::from_exit(None, false),
                r#"{"kind":"other","code":-1}"#,
            ),
            (
                Outcome::StartFailed {
                    message: "no".into(),
                },
                r#"{"kind":"start_failed","message":"no"}"#,
            ),
        ] {
            assert_eq!(serde_json::to_string(&o).unwrap(), json);
            assert_eq!(serde_json::from_str::<Outcome>(json).unwrap(), o);
        }
        assert_eq!(
            Outcome::from_exit(Some(10), false).to_string(),
            "exit 10: no job within the idle timeout"
        );
    }
}
