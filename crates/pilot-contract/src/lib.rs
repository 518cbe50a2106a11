//! The contract between pilotd and `pilot`, its worker entrypoint: how a worker ends.
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
