//! What a cycle leaves behind: the outcome of each finished worker (which feeds the
//! back-off) and the jobs its pilot reported (the contribution), the status file's lines, the
//! learned history and the contribution on disk.

use super::Daemon;
use super::executor::Executed;
use crate::backend::Backend;
use crate::contribution::{self, Claim, Ended, Measured};
use crate::history;
use crate::outcome::Outcome;
use crate::plan::{Action, Reason};
use crate::policy::Supply;
use crate::slot_ad;
use crate::snapshot::HostSnapshot;
use crate::status::{self, Decision, OutcomeRecord};
use crate::timeline;
use crate::worker::{Worker, WorkerState};
use chrono::{DateTime, SecondsFormat, Utc};
use pilot_contract::{JobReport, ReportError};

/// How many lines of a failed worker's output are kept (log and status file).
const OUTPUT_LINES: usize = 20;

/// How many of a finished worker's last lines are searched for its pilot's job report: the
/// report is the pilot's last line on stdout, but condor's and the pilot's last words on
/// stderr, interleaved, may follow it; and a pilot killed at once leaves the report it
/// printed while condor ran, which up to a report period of its log may follow.
pub(super) const REPORT_LINES: usize = 200;

/// What a finished worker's output said of its jobs.
enum Report {
    Found(JobReport),
    /// No report line: a pilot older than the report, an image that does not run `pilot`,
    /// or a pilot killed before it could print one.
    Missing,
    /// A report line that cannot be read.
    Damaged(ReportError),
    /// The output itself could not be read (or the container is gone).
    Unread(String),
}

/// How often the learned history and the contribution are written while the daemon runs.
const HISTORY_EVERY: std::time::Duration = std::time::Duration::from_secs(900);
/// How often the presence timeline is: it is the largest of them (hundreds of KB on a busy
/// desktop, `timeline::CPU_FOLD`) and serves only projections, for which a crash's lost hour
/// is nothing; hourly keeps what the daemon writes to a donated disk small.
const TIMELINE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// What one cycle leaves in the status file.
pub(super) struct Record<'a> {
    pub(super) supply: Option<&'a Supply>,
    pub(super) actions: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) errors: Vec<String>,
    pub(super) workers: Option<Vec<Worker>>,
}

impl<B: Backend> Daemon<B> {
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
                // `record_finished` read its report before (the plan removes only workers of
                // the list it saw); one it could not leaves a worker without a report.
                (
                    Action::Remove {
                        id,
                        name,
                        outcome: Some(o),
                    },
                    _,
                ) => {
                    if !self.status.reported.iter().any(|r| r == id) {
                        let gone = Report::Unread("removed before its output was read".into());
                        self.record_report(id, name, (Default::default(), now), gone, now);
                    }
                    self.record_outcome(id, name, o.clone(), Vec::new(), now)
                }
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

    /// Records, for every finished worker, its outcome (with the last lines of output of one
    /// that failed) and the job report its pilot printed last, each once per container: read
    /// here, before the plan removes the container. Every end goes through here: a pilot that
    /// ran out of jobs, one evicted by pilotd's signal (condor's graceful stop lets it print
    /// its report first), one stopped for a full scratch (its outcome recorded when the stop
    /// was sent, its report once it has ended), one that failed.
    pub(super) async fn record_finished(&mut self, b: &B, list: &[Worker], now: DateTime<Utc>) {
        for w in list {
            let recorded = self.status.recorded.iter().any(|r| r == &w.id);
            let reported = self.status.reported.iter().any(|r| r == &w.id);
            if !w.state.is_finished() || (recorded && reported) {
                continue;
            }
            let outcome = Outcome::from_exit(w.exit_code, w.oom_killed);
            let keep_output = !recorded && outcome.is_failure();
            let tail = if reported && !keep_output {
                Ok(Vec::new())
            } else {
                b.output_tail(&w.id, REPORT_LINES).await
            };
            if !reported {
                let report = match &tail {
                    Ok(lines) => match JobReport::find_last(lines.iter().map(String::as_str)) {
                        Some(Ok(r)) => Report::Found(r),
                        Some(Err(e)) => Report::Damaged(e),
                        None => Report::Missing,
                    },
                    Err(e) => Report::Unread(e.to_string()),
                };
                self.record_report(&w.id, &w.name, life(w, now), report, now);
            }
            if recorded {
                continue;
            }
            let output = if keep_output {
                match tail {
                    // The image wrote these: no control character reaches the log or a terminal.
                    // and URL credentials are redacted as in the log.
                    Ok(lines) => lines[lines.len().saturating_sub(OUTPUT_LINES)..]
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

    /// A finished worker's job report, counted once per container into the contribution (and
    /// the metrics), held to what the worker's cgroup used and its life could hold (`Claim`). A report that is
    /// missing, damaged or unreadable counts the worker as one without a report; a damaged
    /// one is logged with its worker, as is a claim cut to its bound.
    fn record_report(
        &mut self,
        id: &str,
        name: &str,
        (lifetime, end): (std::time::Duration, DateTime<Utc>),
        report: Report,
        now: DateTime<Utc>,
    ) {
        let counted = match report {
            Report::Found(r) => {
                let claim = Claim {
                    lifetime,
                    cpus: self
                        .last_snapshot
                        .as_ref()
                        .map_or_else(host_cpus, |h| h.cpus),
                    measured: self.cpu.used(id).map(|(cpu_seconds, at)| Measured {
                        cpu_seconds,
                        after: end.signed_duration_since(at).to_std().unwrap_or_default(),
                    }),
                };
                let (r, cut) = claim.bound(&r);
                if !cut.is_empty() {
                    let used = claim.measured.map_or_else(
                        || "never read".to_string(),
                        |m| {
                            format!(
                                "{:.1} CPU-s read {}s before its end",
                                m.cpu_seconds,
                                m.after.as_secs()
                            )
                        },
                    );
                    tracing::warn!(
                        worker = name,
                        "the job report claims more than the worker's {}s on {} CPU(s) could \
                         hold (its cgroup: {used}); counted up to that: {}",
                        claim.lifetime.as_secs(),
                        claim.cpus,
                        cut.join(", ")
                    );
                }
                tracing::info!(
                    worker = name,
                    jobs_completed = r.jobs_completed,
                    jobs_vacated = r.jobs_vacated,
                    job_cpu_seconds = r.job_cpu_seconds,
                    vacated_cpu_seconds = r.vacated_cpu_seconds,
                    "jobs reported"
                );
                Some(r)
            }
            Report::Missing => {
                tracing::info!(
                    worker = name,
                    "no job report in its output (a pilot older than the report, or an image \
                     that does not run pilot): its jobs are not counted"
                );
                None
            }
            Report::Damaged(e) => {
                tracing::warn!(worker = name, "{e}; its jobs are not counted");
                None
            }
            Report::Unread(e) => {
                tracing::warn!(
                    worker = name,
                    "its job report could not be read ({e}); its jobs are not counted"
                );
                None
            }
        };
        self.contribution
            .reported(&self.s.policy.timezone, now, counted.as_ref());
        if let Some(m) = &self.metrics {
            match &counted {
                Some(r) => {
                    m.jobs_started.inc_by(r.jobs_started);
                    m.jobs_completed.inc_by(r.jobs_completed);
                    m.jobs_vacated.inc_by(r.jobs_vacated);
                    m.job_seconds.inc_by(r.job_seconds);
                    m.job_cpu_seconds.inc_by(r.job_cpu_seconds);
                    m.lost_cpu_seconds.inc_by(r.vacated_cpu_seconds);
                }
                None => {
                    m.workers_unreported.inc();
                }
            }
        }
        // Saved at the cycle's end, as an outcome is.
        self.saved.history = None;
        self.status.reported.push(id.to_string());
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
        self.status.locks = self.logind.locks();
        self.status.last_error = (!r.errors.is_empty()).then(|| r.errors.join("; "));
        self.status.workers = r.workers;
        // The last measurement of each listed worker's scratch, for `status` and the page.
        self.status.scratch_use = self.work.scratch_use.clone();
        if let Some(list) = &self.status.workers {
            self.status
                .scratch_use
                .retain(|id, _| list.iter().any(|w| &w.id == id));
        }
        let heartbeat = pilotd_core::horizon::delta(status::HEARTBEAT);
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

    /// The learned history and the contribution every `HISTORY_EVERY`, the presence timeline
    /// every `TIMELINE_EVERY` (the drain saves them all): they count time, so they change
    /// every cycle, and a crash loses at most that much of them.
    pub(super) fn save_history(&mut self, now: DateTime<Utc>) {
        let due = |at: Option<DateTime<Utc>>, every| {
            at.is_none_or(|at| now.signed_duration_since(at) >= pilotd_core::horizon::delta(every))
        };
        if due(self.saved.history, HISTORY_EVERY) {
            match history::save(&self.s.state_dir, &self.learner.history) {
                Ok(()) => self.saved.history = Some(now),
                Err(e) => tracing::error!("{e}"),
            }
            if let Err(e) = contribution::save(&self.s.state_dir, &self.contribution.ledger) {
                tracing::error!("{e}");
            }
        }
        if due(self.saved.timeline, TIMELINE_EVERY) {
            match timeline::save(&self.s.state_dir, &self.presence.timeline) {
                Ok(()) => self.saved.timeline = Some(now),
                Err(e) => tracing::error!("{e}"),
            }
        }
    }

    /// The machine's slot-ad lines (`slot_ad`), and the week's contribution when the site
    /// turned it on, written when they changed: before this cycle's starts, so a new worker's
    /// mount finds the file.
    pub(super) fn advertise(&mut self, host: &HostSnapshot, supply: &Supply, now: DateTime<Utc>) {
        let mut text = slot_ad::render(&self.worker.instance, &self.s.policy, host, supply, now);
        // What the machine gave leaves it only when the site turned it on.
        if self.s.advertise_contribution {
            let tz = &self.s.policy.timezone;
            text.push_str(&slot_ad::contribution(
                &contribution::Ledger::week_of(tz, now),
                &self.contribution.ledger.this_week(tz, now),
            ));
        }
        if self.advertised.as_deref() == Some(text.as_str()) {
            return;
        }
        match slot_ad::save(&self.s.worker.ad_dir, &text) {
            Ok(()) => self.advertised = Some(text),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}

/// A finished worker's life, from its creation to its end, and that end (`now` when the
/// engine gave none); zero when its creation is unknown, so a report of a worker of unknown
/// age is held to the one second of slack `Claim` gives.
fn life(w: &Worker, now: DateTime<Utc>) -> (std::time::Duration, DateTime<Utc>) {
    let end = w.finished_at.unwrap_or(now);
    let lifetime = w
        .created
        .and_then(|c| end.signed_duration_since(c).to_std().ok())
        .unwrap_or_default();
    (lifetime, end)
}

/// The machine's CPUs when no host observation is at hand.
fn host_cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}
