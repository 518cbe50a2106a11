//! The pilot's life while condor runs, as a pure state machine:
//! `on_event(state, event, now) -> (state, effects)`.
//!
//! It reads no clock and touches no process; the supervisor feeds it events (signals,
//! job starts seen in the StartLog, ticks, the master's exit) with the current time and carries
//! out the effects. That keeps every escalation deadline and every exit-code decision testable
//! with a fixed clock.
//!
//! Exit code precedence once condor_master has exited: a condor failure (30, including a
//! daemon that died while condor ran) beats credentials the pool refused (20), which beat a
//! signal (128+n), which beats "ran a job" (0), which beats "idle" (10). A master that exits non-zero,
//! dies of a signal, or has to be killed is always a failure: no child failure can end in 0.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The pilot's exit codes: the contract with pilotd, defined once for both.
pub use pilot_contract::PilotExit;

/// Signals the pilot acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PilotSignal {
    Terminate,
    Interrupt,
    Quit,
}

impl PilotSignal {
    pub fn number(self) -> i32 {
        match self {
            PilotSignal::Terminate => 15,
            PilotSignal::Interrupt => 2,
            PilotSignal::Quit => 3,
        }
    }
}

/// How condor_master ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasterExit {
    Code(i32),
    Signaled(i32),
}

impl MasterExit {
    /// 0 is a normal shutdown; 99 is the status HTCondor documents for a daemon that shut
    /// itself down through DAEMON_SHUTDOWN, also normal.
    fn is_clean(self) -> bool {
        matches!(self, MasterExit::Code(0) | MasterExit::Code(99))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The startd wrote its start-up banner: condor really came up.
    StartdStarted,
    /// A job was activated on a slot (see `startlog`).
    JobStarted,
    /// A condor daemon died abnormally (the master would restart it for ever).
    DaemonDied,
    /// The collector refused this worker's credentials (wrong or expired token).
    Refused,
    Signal(PilotSignal),
    Tick,
    MasterExited(MasterExit),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// SIGTERM to condor_master: graceful shutdown (running jobs may retire).
    GracefulShutdown,
    /// SIGQUIT to condor_master: fast shutdown (jobs are evicted now).
    FastShutdown,
    /// SIGKILL to condor's whole process group.
    KillCondor,
    /// Terminate and reap whatever condor left behind.
    CleanUp,
    Exit(PilotExit),
}

/// Why the pilot is stopping condor itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    Signal(i32),
    /// A condor daemon died: the pilot ends condor rather than watch it restart.
    DaemonDied,
    /// The pool refused the worker's credentials.
    Refused,
    /// No job by the idle timeout plus grace, yet condor did not stop by itself.
    IdleBackstop,
    /// die_at came: the owner's deadline. condor's own `MASTER.DAEMON_SHUTDOWN` is
    /// evaluated only when the master updates the collector (every `MASTER_UPDATE_INTERVAL`,
    /// 5 minutes by default), so the pilot does not wait for it.
    DieAt,
    /// die_at plus grace passed, yet condor did not stop by itself.
    DieBackstop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopLevel {
    Graceful,
    Fast,
    Kill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    Stopping {
        level: StopLevel,
        deadline: DateTime<Utc>,
    },
    Done(PilotExit),
}

/// Deadlines, fixed when condor starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub graceful_timeout: Duration,
    pub fast_timeout: Duration,
    pub kill_timeout: Duration,
    /// If no job has started by then, stop condor (it should have stopped itself earlier).
    pub idle_backstop: Option<DateTime<Utc>>,
    /// The owner's deadline: a graceful shutdown starts then.
    pub die_at: Option<DateTime<Utc>>,
    /// Stop condor fast at this instant whatever it is doing.
    pub die_backstop: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifecycle {
    pub phase: Phase,
    pub limits: Limits,
    pub startd_started: bool,
    pub job_started: bool,
    pub cause: Option<StopCause>,
    /// The pilot had to SIGKILL condor: whatever else happened, that is a condor failure.
    pub killed: bool,
    /// A daemon died while condor ran: a condor failure, whatever else happened.
    pub daemon_died: bool,
    /// The pool refused the worker's credentials: the configuration is unusable.
    pub refused: bool,
}

/// `now + d`, for the deadlines of `PILOT_*` durations.
pub fn after(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    // Checked: an extreme PILOT_* duration saturates instead of panicking.
    now.checked_add_signed(chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl Lifecycle {
    pub fn new(limits: Limits) -> Self {
        Lifecycle {
            phase: Phase::Running,
            limits,
            startd_started: false,
            job_started: false,
            cause: None,
            killed: false,
            daemon_died: false,
            refused: false,
        }
    }

    fn level(&self) -> Option<StopLevel> {
        match self.phase {
            Phase::Stopping { level, .. } => Some(level),
            _ => None,
        }
    }

    /// Moves to at least `level`, never back down.
    fn escalate(&mut self, level: StopLevel, now: DateTime<Utc>) -> Vec<Effect> {
        if self.level().is_some_and(|l| l >= level) {
            return Vec::new();
        }
        let (effect, wait) = match level {
            StopLevel::Graceful => (Effect::GracefulShutdown, self.limits.graceful_timeout),
            StopLevel::Fast => (Effect::FastShutdown, self.limits.fast_timeout),
            StopLevel::Kill => {
                self.killed = true;
                (Effect::KillCondor, self.limits.kill_timeout)
            }
        };
        self.phase = Phase::Stopping {
            level,
            deadline: after(now, wait),
        };
        vec![effect]
    }

    fn stop_for(&mut self, cause: StopCause, level: StopLevel, now: DateTime<Utc>) -> Vec<Effect> {
        // The first signal names the exit code; a signal overrides a backstop because the
        // manager asked for the stop.
        match (self.cause, cause) {
            (None, _)
            | (
                Some(StopCause::IdleBackstop | StopCause::DieAt | StopCause::DieBackstop),
                StopCause::Signal(_),
            ) => {
                self.cause = Some(cause);
            }
            _ => {}
        }
        self.escalate(level, now)
    }

    /// The exit code once condor_master has exited.
    fn verdict(&self, exit: MasterExit) -> PilotExit {
        if self.killed || self.daemon_died || !exit.is_clean() {
            return PilotExit::CondorFailed;
        }
        if self.refused {
            return PilotExit::Config;
        }
        if let Some(StopCause::Signal(n)) = self.cause {
            return PilotExit::Signal(n);
        }
        if self.job_started {
            return PilotExit::RanJobs;
        }
        if !self.startd_started {
            // A clean exit without the startd ever running is a broken condor, not an idle
            // pool; reporting 10 would make pilotd back off for the wrong reason.
            return PilotExit::CondorFailed;
        }
        PilotExit::Idle
    }

    pub fn on_event(mut self, event: Event, now: DateTime<Utc>) -> (Self, Vec<Effect>) {
        if let Phase::Done(_) = self.phase {
            return (self, Vec::new());
        }
        let effects = match event {
            Event::StartdStarted => {
                self.startd_started = true;
                Vec::new()
            }
            Event::JobStarted => {
                self.startd_started = true;
                self.job_started = true;
                Vec::new()
            }
            Event::DaemonDied => {
                self.daemon_died = true;
                self.stop_for(StopCause::DaemonDied, StopLevel::Fast, now)
            }
            Event::Refused => {
                self.refused = true;
                self.stop_for(StopCause::Refused, StopLevel::Fast, now)
            }
            Event::Signal(sig) => {
                let cause = StopCause::Signal(sig.number());
                match (sig, self.level()) {
                    (PilotSignal::Quit, _) | (_, Some(StopLevel::Graceful)) => {
                        // SIGQUIT asks for fast; a second SIGTERM means "hurry".
                        self.stop_for(cause, StopLevel::Fast, now)
                    }
                    _ => self.stop_for(cause, StopLevel::Graceful, now),
                }
            }
            Event::Tick => self.on_tick(now),
            Event::MasterExited(exit) => {
                let verdict = self.verdict(exit);
                self.phase = Phase::Done(verdict);
                vec![Effect::CleanUp, Effect::Exit(verdict)]
            }
        };
        (self, effects)
    }

    fn on_tick(&mut self, now: DateTime<Utc>) -> Vec<Effect> {
        match self.phase {
            Phase::Running => {
                if self.limits.die_backstop.is_some_and(|t| now >= t) {
                    return self.stop_for(StopCause::DieBackstop, StopLevel::Fast, now);
                }
                if self.limits.die_at.is_some_and(|t| now >= t) {
                    return self.stop_for(StopCause::DieAt, StopLevel::Graceful, now);
                }
                if !self.job_started && self.limits.idle_backstop.is_some_and(|t| now >= t) {
                    return self.stop_for(StopCause::IdleBackstop, StopLevel::Graceful, now);
                }
                Vec::new()
            }
            Phase::Stopping {
                level: StopLevel::Graceful,
                ..
            } if self.limits.die_backstop.is_some_and(|t| now >= t) => {
                self.escalate(StopLevel::Fast, now)
            }
            Phase::Stopping { level, deadline } if now >= deadline => match level {
                StopLevel::Graceful => self.escalate(StopLevel::Fast, now),
                StopLevel::Fast => self.escalate(StopLevel::Kill, now),
                StopLevel::Kill => {
                    // Even SIGKILL did not end it (uninterruptible sleep): give up waiting,
                    // report the failure, and let the container runtime finish the job.
                    self.phase = Phase::Done(PilotExit::CondorFailed);
                    vec![Effect::CleanUp, Effect::Exit(PilotExit::CondorFailed)]
                }
            },
            _ => Vec::new(),
        }
    }
}

/// Free-function form of [`Lifecycle::on_event`].
pub fn on_event(state: Lifecycle, event: Event, now: DateTime<Utc>) -> (Lifecycle, Vec<Effect>) {
    state.on_event(event, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn limits() -> Limits {
        Limits {
            graceful_timeout: Duration::from_secs(300),
            fast_timeout: Duration::from_secs(30),
            kill_timeout: Duration::from_secs(5),
            idle_backstop: Some(t(1800)),
            die_at: Some(t(6900)),
            die_backstop: Some(t(7200)),
        }
    }

    /// Runs events in order and returns the final state and all effects.
    fn run(events: &[(i64, Event)]) -> (Lifecycle, Vec<Effect>) {
        let mut state = Lifecycle::new(limits());
        let mut all = Vec::new();
        for (at, ev) in events {
            let (next, effects) = on_event(state, *ev, t(*at));
            state = next;
            all.extend(effects);
        }
        (state, all)
    }

    fn exit_of(effects: &[Effect]) -> Option<PilotExit> {
        effects.iter().find_map(|e| match e {
            Effect::Exit(x) => Some(*x),
            _ => None,
        })
    }

    #[test]
    fn exit_codes_match_the_contract() {
        assert_eq!(PilotExit::RanJobs.code(), 0);
        assert_eq!(PilotExit::Idle.code(), 10);
        assert_eq!(PilotExit::Config.code(), 20);
        assert_eq!(PilotExit::SelfTest.code(), 21);
        assert_eq!(PilotExit::CondorFailed.code(), 30);
        assert_eq!(PilotExit::Signal(15).code(), 143);
        assert_eq!(PilotExit::Signal(3).code(), 131);
    }

    #[test]
    fn a_job_then_a_clean_exit_is_success() {
        let (state, effects) = run(&[
            (1, Event::StartdStarted),
            (60, Event::JobStarted),
            (900, Event::MasterExited(MasterExit::Code(0))),
        ]);
        assert_eq!(
            effects,
            vec![Effect::CleanUp, Effect::Exit(PilotExit::RanJobs)]
        );
        assert_eq!(state.phase, Phase::Done(PilotExit::RanJobs));
    }

    #[test]
    fn no_job_then_a_clean_exit_is_idle() {
        let (_, effects) = run(&[
            (1, Event::StartdStarted),
            (600, Event::Tick),
            (1200, Event::MasterExited(MasterExit::Code(99))),
        ]);
        assert_eq!(exit_of(&effects), Some(PilotExit::Idle));
    }

    #[test]
    fn a_clean_exit_without_a_startd_is_a_condor_failure() {
        let (_, effects) = run(&[(5, Event::MasterExited(MasterExit::Code(0)))]);
        assert_eq!(exit_of(&effects), Some(PilotExit::CondorFailed));
    }

    #[test]
    fn a_crash_is_never_hidden_even_after_a_job() {
        for exit in [
            MasterExit::Code(1),
            MasterExit::Code(4),
            MasterExit::Signaled(11),
            MasterExit::Signaled(15),
        ] {
            let (_, effects) = run(&[
                (1, Event::StartdStarted),
                (2, Event::JobStarted),
                (3, Event::MasterExited(exit)),
            ]);
            assert_eq!(exit_of(&effects), Some(PilotExit::CondorFailed), "{exit:?}");
        }
    }

    #[test]
    fn sigterm_is_graceful_and_escalates_on_deadlines() {
        let (state, effects) = run(&[
            (1, Event::StartdStarted),
            (10, Event::Signal(PilotSignal::Terminate)),
            (309, Event::Tick),
        ]);
        assert_eq!(effects, vec![Effect::GracefulShutdown]);
        assert_eq!(
            state.phase,
            Phase::Stopping {
                level: StopLevel::Graceful,
                deadline: t(310)
            }
        );

        let (state, effects) = on_event(state, Event::Tick, t(310));
        assert_eq!(effects, vec![Effect::FastShutdown]);
        let (state, effects) = on_event(state, Event::Tick, t(339));
        assert!(effects.is_empty());
        let (state, effects) = on_event(state, Event::Tick, t(340));
        assert_eq!(effects, vec![Effect::KillCondor]);
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Signaled(9)), t(341));
        assert_eq!(
            exit_of(&effects),
            Some(PilotExit::CondorFailed),
            "condor that had to be killed did not shut down: a failure"
        );
    }

    #[test]
    fn a_dead_daemon_ends_condor_fast_and_is_a_failure() {
        let (state, effects) = run(&[
            (1, Event::StartdStarted),
            (2, Event::JobStarted),
            (50, Event::DaemonDied),
        ]);
        assert_eq!(effects, vec![Effect::FastShutdown]);
        assert!(state.daemon_died);
        // The master then shuts down cleanly; still a failure, not "ran a job".
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(0)), t(51));
        assert_eq!(exit_of(&effects), Some(PilotExit::CondorFailed));
    }

    #[test]
    fn refused_credentials_are_a_configuration_problem() {
        let (state, effects) = run(&[(1, Event::StartdStarted), (3, Event::Refused)]);
        assert_eq!(effects, vec![Effect::FastShutdown]);
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(0)), t(4));
        assert_eq!(exit_of(&effects), Some(PilotExit::Config));
        // A signal that came first does not hide it; a crash beats it.
        let (state, _) = run(&[
            (1, Event::Signal(PilotSignal::Terminate)),
            (2, Event::Refused),
        ]);
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(0)), t(4));
        assert_eq!(exit_of(&effects), Some(PilotExit::Config));
        let (state, _) = run(&[(1, Event::Refused)]);
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(4)), t(4));
        assert_eq!(exit_of(&effects), Some(PilotExit::CondorFailed));
    }

    #[test]
    fn sigterm_then_clean_exit_reports_the_signal() {
        let (_, effects) = run(&[
            (1, Event::StartdStarted),
            (2, Event::JobStarted),
            (10, Event::Signal(PilotSignal::Terminate)),
            (20, Event::MasterExited(MasterExit::Code(0))),
        ]);
        assert_eq!(exit_of(&effects), Some(PilotExit::Signal(15)));
    }

    #[test]
    fn sigquit_goes_straight_to_fast() {
        let (state, effects) = run(&[(10, Event::Signal(PilotSignal::Quit))]);
        assert_eq!(effects, vec![Effect::FastShutdown]);
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(0)), t(12));
        assert_eq!(exit_of(&effects), Some(PilotExit::Signal(3)));
    }

    #[test]
    fn a_second_sigterm_hurries_and_keeps_the_first_signal() {
        let (state, effects) = run(&[
            (10, Event::Signal(PilotSignal::Terminate)),
            (11, Event::Signal(PilotSignal::Interrupt)),
            (12, Event::Signal(PilotSignal::Terminate)),
        ]);
        assert_eq!(
            effects,
            vec![Effect::GracefulShutdown, Effect::FastShutdown]
        );
        assert_eq!(state.cause, Some(StopCause::Signal(15)));
    }

    #[test]
    fn idle_backstop_stops_condor_when_it_does_not_stop_itself() {
        let (state, effects) = run(&[(1, Event::StartdStarted), (1799, Event::Tick)]);
        assert!(effects.is_empty());
        let (state, effects) = on_event(state, Event::Tick, t(1800));
        assert_eq!(effects, vec![Effect::GracefulShutdown]);
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(0)), t(1810));
        assert_eq!(exit_of(&effects), Some(PilotExit::Idle));
    }

    #[test]
    fn idle_backstop_does_not_fire_once_a_job_ran() {
        let (state, effects) = run(&[
            (1, Event::StartdStarted),
            (100, Event::JobStarted),
            (5000, Event::Tick),
        ]);
        assert!(effects.is_empty());
        assert_eq!(state.phase, Phase::Running);
    }

    #[test]
    fn die_at_starts_a_graceful_shutdown_then_the_backstop_hurries_it() {
        let (state, effects) = run(&[
            (1, Event::StartdStarted),
            (100, Event::JobStarted),
            (6899, Event::Tick),
            (6900, Event::Tick),
        ]);
        assert_eq!(effects, vec![Effect::GracefulShutdown]);
        assert_eq!(state.cause, Some(StopCause::DieAt));
        // The graceful deadline (5 min) is not reached yet, the backstop is.
        let (state, effects) = on_event(state, Event::Tick, t(7200));
        assert_eq!(effects, vec![Effect::FastShutdown]);
        // condor exits cleanly (99: its own DAEMON_SHUTDOWN): a job ran, nothing failed.
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(99)), t(7201));
        assert_eq!(exit_of(&effects), Some(PilotExit::RanJobs));
    }

    #[test]
    fn die_backstop_is_fast_and_a_later_signal_names_the_exit() {
        let (state, effects) = run(&[
            (1, Event::StartdStarted),
            (100, Event::JobStarted),
            (7200, Event::Tick),
        ]);
        assert_eq!(effects, vec![Effect::FastShutdown]);
        assert_eq!(state.cause, Some(StopCause::DieBackstop));
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(0)), t(7210));
        assert_eq!(exit_of(&effects), Some(PilotExit::RanJobs));

        let (state, _) = run(&[
            (7200, Event::Tick),
            (7201, Event::Signal(PilotSignal::Terminate)),
        ]);
        assert_eq!(state.cause, Some(StopCause::Signal(15)));
    }

    #[test]
    fn an_unkillable_condor_still_ends_the_pilot_with_a_failure() {
        let (state, _) = run(&[(0, Event::Signal(PilotSignal::Quit)), (30, Event::Tick)]);
        assert_eq!(
            state.phase,
            Phase::Stopping {
                level: StopLevel::Kill,
                deadline: t(35)
            }
        );
        let (state, effects) = on_event(state, Event::Tick, t(35));
        assert_eq!(exit_of(&effects), Some(PilotExit::CondorFailed));
        let (_, effects) = on_event(state, Event::MasterExited(MasterExit::Code(0)), t(36));
        assert!(effects.is_empty(), "nothing happens after the end");
    }

    #[test]
    fn no_event_sequence_turns_a_failed_master_into_success() {
        // Exhaustive over short sequences: whatever came before, a non-clean master exit or a
        // kill always ends in 30.
        let prefix_events = [
            Event::StartdStarted,
            Event::JobStarted,
            Event::Signal(PilotSignal::Terminate),
            Event::Signal(PilotSignal::Quit),
            Event::Tick,
        ];
        for a in prefix_events {
            for b in prefix_events {
                for exit in [
                    MasterExit::Code(1),
                    MasterExit::Signaled(9),
                    MasterExit::Code(2),
                ] {
                    let (_, effects) = run(&[(1, a), (2, b), (3, Event::MasterExited(exit))]);
                    assert_eq!(exit_of(&effects), Some(PilotExit::CondorFailed));
                }
            }
        }
    }
}
