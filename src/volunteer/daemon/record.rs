//! What a cycle leaves behind: the outcome of each finished worker (which feeds the
//! back-off), the status file's lines, the learned history and the contribution on disk.

use super::Daemon;
use super::executor::Executed;
use crate::volunteer::backend::{AnyBackend, Backend};
use crate::volunteer::contribution::{self, Ended};
use crate::volunteer::history;
use crate::volunteer::outcome::Outcome;
use crate::volunteer::plan::{Action, Reason};
use crate::volunteer::policy::Supply;
use crate::volunteer::slot_ad;
use crate::volunteer::snapshot::HostSnapshot;
use crate::volunteer::status::{self, Decision, OutcomeRecord};
use crate::volunteer::worker::{Worker, WorkerState};
use chrono::{DateTime, SecondsFormat, Utc};

/// How many lines of a failed worker's output are kept (log and status file).
const OUTPUT_LINES: usize = 20;

/// How often the learned history is written while the daemon runs.
const HISTORY_EVERY: std::time::Duration = std::time::Duration::from_secs(900);

/// What one cycle leaves in the status file.
pub(super) struct Record<'a> {
    pub(super) supply: Option<&'a Supply>,
    pub(super) actions: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) errors: Vec<String>,
    pub(super) workers: Option<Vec<Worker>>,
}

impl Daemon {
    /// Counts evictions, records outcomes (a removed worker's, a start that failed) and
    /// returns the status file's action lines.
    pub(super) fn record_executed(
        &mut self,
        executed: Vec<Executed>,
        now: DateTime<Utc>,
    ) -> Vec<String> {
        let mut lines = Vec::with_capacity(executed.len());
        for Executed { action, result } in executed {
            if matches!(action, Action::Start { .. } | Action::Remove { .. }) {
                self.cpu.acted();
            }
            if let (Some(m), Some(mode)) =
                (&self.metrics, action.reason().and_then(Reason::eviction))
            {
                m.count_eviction(mode.as_str());
            }
            match (&action, &result) {
                // Recorded even when the remove failed: `recorded` keeps it from counting twice.
                (
                    Action::Remove {
                        id,
                        name,
                        outcome: Some(o),
                    },
                    _,
                ) => self.record_outcome(id, name, o.clone(), Vec::new(), now),
                // Ended for a full scratch: a failure the back-off counts, recorded now (its
                // exit, by pilotd's signal, would read as neutral).
                (
                    Action::Stop {
                        id,
                        name,
                        why: Reason::ScratchFull { share_kib },
                        ..
                    },
                    Ok(_),
                ) => self.record_outcome(
                    id,
                    name,
                    Outcome::ScratchFull {
                        share_kib: *share_kib,
                    },
                    Vec::new(),
                    now,
                ),
                (Action::Start { spec }, Err(e)) => self.record_outcome(
                    &spec.name,
                    &spec.name,
                    Outcome::StartFailed {
                        message: e.to_string(),
                    },
                    Vec::new(),
                    now,
                ),
                _ => {}
            }
            lines.push(match result {
                Ok(_) => action.to_string(),
                Err(e) => format!("FAILED {action}: {e}"),
            });
        }
        lines
    }

    /// Records the outcome of every finished worker not recorded yet, with the last lines of
    /// output of one that failed (read before the plan removes the container).
    pub(super) async fn record_finished(
        &mut self,
        b: &AnyBackend,
        list: &[Worker],
        now: DateTime<Utc>,
    ) {
        for w in list {
            if !matches!(w.state, WorkerState::Exited | WorkerState::Dead)
                || self.status.recorded.iter().any(|r| r == &w.id)
            {
                continue;
            }
            let outcome = Outcome::from_exit(w.exit_code, w.oom_killed);
            let output = if outcome.is_failure() {
                match b.output_tail(&w.id, OUTPUT_LINES).await {
                    // The image wrote these: no control character reaches the log or a terminal.
                    // and URL credentials are redacted as in the log.
                    Ok(lines) => lines
                        .iter()
                        .map(|l| redact::line(l.trim_end_matches('\n'), false))
                        .collect(),
                    Err(e) => vec![format!("(its output could not be read: {e})")],
                }
            } else {
                Vec::new()
            };
            self.record_outcome(&w.id, &w.name, outcome, output, now);
        }
    }

    /// A finished worker's outcome: feeds the back-off, once per container.
    pub(super) fn record_outcome(
        &mut self,
        id: &str,
        name: &str,
        outcome: Outcome,
        output: Vec<String>,
        now: DateTime<Utc>,
    ) {
        if self.status.recorded.iter().any(|r| r == id) {
            return;
        }
        if !output.is_empty() {
            tracing::error!(
                worker = name,
                "worker failed: {outcome}; its last {} line(s) of output:\n{}",
                output.len(),
                output
                    .iter()
                    .map(|l| format!("  | {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        let before = self.status.backoff.failures;
        self.status.backoff = self
            .status
            .backoff
            .after(&outcome, now, self.worker.backoff);
        let b = &self.status.backoff;
        if b.failures > before {
            tracing::warn!(
                worker = name,
                failures = b.failures,
                next_start = %b
                    .not_before
                    .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
                    .unwrap_or_default(),
                "worker ended without running a job: {outcome}; backing off"
            );
        } else {
            tracing::info!(worker = name, "worker ended: {outcome}");
        }
        self.contribution
            .ended(&self.s.policy.timezone, now, &outcome);
        // Saved at the cycle's end: a worker's end is news to `status` and the page.
        self.saved.history = None;
        if let Some(m) = &self.metrics {
            m.count_worker_ended(Ended::kind(&outcome));
        }
        self.status.recorded.push(id.to_string());
        self.status.outcomes.push(OutcomeRecord {
            name: name.to_string(),
            at: now,
            outcome,
            output,
        });
        let excess = self
            .status
            .outcomes
            .len()
            .saturating_sub(status::OUTCOMES_KEPT);
        self.status.outcomes.drain(..excess);
    }

    /// Writes what this cycle saw, decided and did to the status file.
    pub(super) fn finish(&mut self, now: DateTime<Utc>, r: Record<'_>) {
        self.status.updated_at = Some(now);
        self.status.pid = std::process::id();
        if let Some(s) = r.supply {
            self.status.decision = Some(Decision::of(s, now));
        }
        if !r.actions.is_empty() {
            self.status.last_actions = r.actions;
        }
        self.status.notes = r.notes;
        self.status.last_error = (!r.errors.is_empty()).then(|| r.errors.join("; "));
        self.status.workers = r.workers;
        // The last measurement of each listed worker's scratch, for `status` and the page.
        self.status.scratch_use = self.work.scratch_use.clone();
        if let Some(list) = &self.status.workers {
            self.status
                .scratch_use
                .retain(|id, _| list.iter().any(|w| &w.id == id));
        }
        let heartbeat = crate::horizon::delta(status::HEARTBEAT);
        let unchanged = self.saved.status.as_ref().is_some_and(|(last, at)| {
            now.signed_duration_since(*at) < heartbeat && last.same_for_readers(&self.status)
        });
        if unchanged {
            return;
        }
        match status::save(&self.status_path, &self.status) {
            Ok(()) => self.saved.status = Some((self.status.clone(), now)),
            Err(e) => tracing::error!("{e}"),
        }
    }

    /// What the interval ending at `now` gave (`contribution`): the workers' CPU the meter
    /// read, and what the cycle saw of them (as listed, before this cycle's actions) and of
    /// the decision. Workers unknown (no engine list): none counted as computing.
    pub(super) fn count_contribution(
        &mut self,
        now: DateTime<Utc>,
        supply: &Supply,
        workers: Option<&[Worker]>,
    ) {
        let has = |state| workers.is_some_and(|l| l.iter().any(|w| w.state == state));
        let seen = contribution::Observed {
            cpu_seconds: self.cpu.take_given(),
            running: has(WorkerState::Running),
            paused: has(WorkerState::Paused),
            open: supply.allowed,
            owner_present: supply.causes.iter().any(|c| c.owner_there()),
        };
        let before = self.contribution.ledger.all_time;
        self.contribution
            .record(&self.s.policy.timezone, now, self.s.interval, seen);
        if let Some(m) = &self.metrics {
            let after = &self.contribution.ledger.all_time;
            m.cpu_seconds_given
                .inc_by(after.cpu_seconds - before.cpu_seconds);
            m.computing_seconds
                .inc_by(after.computing_s - before.computing_s);
            m.paused_seconds.inc_by(after.paused_s - before.paused_s);
            m.open_seconds.inc_by(after.open_s - before.open_s);
            m.owner_present_seconds
                .inc_by(after.owner_present_s - before.owner_present_s);
        }
    }

    /// The learned history and the contribution, every `HISTORY_EVERY` (the drain saves the
    /// rest): they count time, so they change every cycle, and a crash loses at most that
    /// much of them.
    pub(super) fn save_history(&mut self, now: DateTime<Utc>) {
        let every = crate::horizon::delta(HISTORY_EVERY);
        if self
            .saved
            .history
            .is_some_and(|at| now.signed_duration_since(at) < every)
        {
            return;
        }
        match history::save(&self.s.state_dir, &self.learner.history) {
            Ok(()) => self.saved.history = Some(now),
            Err(e) => tracing::error!("{e}"),
        }
        if let Err(e) = contribution::save(&self.s.state_dir, &self.contribution.ledger) {
            tracing::error!("{e}");
        }
    }

    /// The machine's slot-ad lines (`slot_ad`), written when they changed: before this
    /// cycle's starts, so a new worker's mount finds the file.
    pub(super) fn advertise(&mut self, host: &HostSnapshot, supply: &Supply, now: DateTime<Utc>) {
        let text = slot_ad::render(&self.worker.instance, &self.s.policy, host, supply, now);
        if self.advertised.as_deref() == Some(text.as_str()) {
            return;
        }
        match slot_ad::save(&slot_ad::dir(&self.s.state_dir), &text) {
            Ok(()) => self.advertised = Some(text),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}
