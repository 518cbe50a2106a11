//! The daemon's records (`Records`): the learned history, the presence timeline, the
//! contribution, the slot ad and the status file. A cycle hands them what it observed, decided
//! and did (`CycleOutcome`): counted when it decided (`decided`), before anything is done on it,
//! and written to the status file when it ends (`record`); each finished worker's outcome
//! (which feeds the back-off) and the jobs its pilot reported come in as they are read.

use super::executor::Executed;
use crate::decide::plan::{Action, Reason};
use crate::decide::policy::Supply;
use crate::outcome::Outcome;
use crate::record::contribution::{self, Claim, Contribution, Ended};
use crate::record::history::{self, History, Learner};
use crate::record::slot_ad;
use crate::record::status::{self, Decision, OutcomeRecord, Status};
use crate::record::timeline::{self, Recorder};
use crate::settings::Settings;
use crate::snapshot::HostSnapshot;
use crate::worker::ScratchUse;
use crate::worker::{ImageRecord, PulledImage};
use crate::worker::{LocalImage, Worker, WorkerState};
use chrono::{DateTime, SecondsFormat, Utc};
use pilot_contract::{JobReport, ReportError};
use pilotd_core::service::metrics::Metrics;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests;

/// How many of a finished worker's last lines are searched for its pilot's job report: the
/// report is the pilot's last line on stdout, but condor's and the pilot's last words on
/// stderr, interleaved, may follow it; and a pilot killed at once leaves the report it
/// printed while condor ran, which up to a report period of its log may follow.
pub(super) const REPORT_LINES: usize = 200;

/// What a finished worker's output said of its jobs.
pub(super) enum Report {
    /// The report, and what bounds it (`Claim`).
    Found(JobReport, Claim),
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
/// The contribution is written at the end of a cycle that counted this much data since it
/// was last written: the day's data cap and `status` read the file, and a crash must not
/// lose a download's worth of counting. A worker's keep-alives stay below it and write
/// nothing until the next `HISTORY_EVERY`.
const DATA_UNSAVED_MAX: u64 = 1 << 20;

/// What one cycle observed, decided and did: the decision (none without a host observation),
/// the workers' CPU share it was made with and the CPU-seconds they gave since the last cycle,
/// the workers as listed (none when the engine could not list them; once the cycle acted, as
/// its pauses and resumes left them), its action lines, the plan's notes, what failed, and
/// logind's locks and the scratch measurements as the cycle left them.
#[derive(Default)]
pub(super) struct CycleOutcome<'a> {
    pub(super) now: DateTime<Utc>,
    pub(super) supply: Option<&'a Supply>,
    pub(super) own_cpu: f64,
    pub(super) given: f64,
    pub(super) workers: Option<Vec<Worker>>,
    pub(super) actions: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) errors: Vec<String>,
    pub(super) locks: BTreeMap<String, DateTime<Utc>>,
    pub(super) scratch_use: BTreeMap<String, ScratchUse>,
}

/// What was last written to the state dir, and when (to write only what changed).
#[derive(Default)]
struct Saved {
    status: Option<(Status, DateTime<Utc>)>,
    history: Option<DateTime<Utc>>,
    timeline: Option<DateTime<Utc>>,
    /// Bytes of data counted into the contribution since it was last written.
    data_unsaved: u64,
}

/// The records, taken back from the state dir at the start and written back to it.
pub(super) struct Records {
    /// What `pilotd status` reads, and a restarted daemon takes back.
    status: Status,
    status_path: PathBuf,
    saved: Saved,
    learner: Learner,
    presence: Recorder,
    contribution: Contribution,
    /// The slot-ad lines last written (`<state_dir>/ad/slot.ad`).
    advertised: Option<String>,
    /// The last decision, to log each change once.
    last_decision: Option<String>,
    metrics: Option<Metrics>,
}

impl Records {
    /// What the state dir of `s` remembers as of `now` (what cannot be read starts empty).
    pub(super) fn load(s: &Settings, metrics: Option<Metrics>, now: DateTime<Utc>) -> Records {
        let loaded = history::load(&s.state_dir, &s.policy.timezone);
        let ledger = contribution::load(&s.state_dir);
        let recorded = timeline::load(&s.state_dir);
        for w in [&loaded.warning, &ledger.warning, &recorded.warning]
            .into_iter()
            .flatten()
        {
            tracing::warn!("{w}");
        }
        let status_path = status::path(&s.state_dir);
        Records {
            status: restore(&status_path, s, now),
            status_path,
            saved: Saved::default(),
            learner: Learner::new(loaded.history),
            presence: Recorder::new(recorded.timeline),
            contribution: Contribution::new(ledger.ledger),
            advertised: None,
            last_decision: None,
            metrics,
        }
    }

    pub(super) fn status(&self) -> &Status {
        &self.status
    }

    pub(super) fn history(&self) -> &History {
        &self.learner.history
    }

    #[cfg(test)]
    pub(super) fn ledger(&self) -> &contribution::Ledger {
        &self.contribution.ledger
    }

    #[cfg(test)]
    pub(super) fn timeline(&self) -> &timeline::Timeline {
        &self.presence.timeline
    }

    /// The engine as it described itself (None: not since its settings changed).
    pub(super) fn engine_described(&mut self, engine: Option<String>) {
        self.status.engine = engine;
    }

    /// What is known of the worker image (its tag's digest, checks and failures).
    pub(super) fn image(&mut self) -> &mut ImageRecord {
        &mut self.status.image
    }

    /// An image pilotd pulled (image GC removes only those), which downloaded `bytes`: into
    /// the contribution (the day's data cap counts it), written at the cycle's end.
    pub(super) fn pulled(&mut self, s: &Settings, p: PulledImage, bytes: u64) {
        self.contribution
            .pulled(&s.policy.timezone, p.pulled_at, bytes);
        self.saved.history = None;
        self.status.pulled_images.retain(|old| old.id != p.id);
        self.status.pulled_images.push(p);
    }

    /// Forgets pulls whose image is gone.
    pub(super) fn keep_pulls(&mut self, local: &[LocalImage]) {
        self.status
            .pulled_images
            .retain(|p| local.iter().any(|i| i.id == p.id));
    }

    /// Counts `o`'s decision before the cycle acts on it: the time since the last cycle into
    /// the history, the timeline and the contribution, the slot ad, the latches carried on.
    pub(super) fn decided(&mut self, s: &Settings, host: &HostSnapshot, o: &CycleOutcome) {
        let Some(supply) = o.supply else {
            return;
        };
        let (tz, now) = (&s.policy.timezone, o.now);
        let free = !supply.causes.iter().any(|c| c.owner_or_host_busy());
        self.learner.learn(tz, now, s.interval, free);
        if let Some(m) = &self.metrics {
            m.allowed.set(i64::from(supply.allowed));
            for c in &supply.causes {
                m.count_decision(c.as_str());
            }
        }
        self.presence.record(now, s.interval, host, &s.policy);
        // The workers as listed, before this cycle's actions; unknown (no engine list): none
        // counted as computing.
        let has = |state| {
            o.workers
                .as_ref()
                .is_some_and(|l| l.iter().any(|w| w.state == state))
        };
        let seen = contribution::Observed {
            cpu_seconds: o.given,
            running: has(WorkerState::Running),
            paused: has(WorkerState::Paused),
            open: supply.allowed,
            owner_present: supply.causes.iter().any(|c| c.owner_there()),
        };
        let before = self.contribution.ledger.all_time;
        self.contribution.record(tz, now, s.interval, seen);
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
        self.log_decision_change(supply);
        self.advertise(s, host, supply, now);
        self.status.owner_busy_since = supply.owner_busy_since;
        self.status.host_free_since = supply.host_free_since;
        self.status.own_cpu = o.own_cpu;
        self.status.throttle = supply.throttle;
        let sensors = host.sensors.as_ref();
        self.status.temperature = sensors.and_then(|s| s.hottest()).cloned();
        self.status.fan = sensors.and_then(|s| s.fastest()).cloned();
        if let Some(m) = &self.metrics {
            let st = &self.status;
            let cap = supply.cpu_cap.as_ref().map(|c| (c.causes.join(","), c));
            m.set_comfort(
                st.temperature
                    .as_ref()
                    .map(|r| (r.sensor.as_str(), r.value)),
                st.fan.as_ref().map(|r| (r.sensor.as_str(), r.value)),
                cap.as_ref()
                    .map(|(why, c)| (why.as_str(), c.per_worker_millicpus as f64 / 1000.0)),
            );
        }
        self.status.metered = host.metered;
    }

    /// The workers' network counters read this cycle (`net`), counted before the cycle
    /// decides, so a cap crossed since the last cycle is acted on in this one; `workers`: the
    /// engine's list (`None`: not listed, every worker's mark kept).
    pub(super) fn network(
        &mut self,
        s: &Settings,
        net: &[contribution::NetReading],
        workers: Option<&[Worker]>,
        now: DateTime<Utc>,
    ) {
        if net.is_empty() && workers.is_none() {
            return;
        }
        let listed: Option<Vec<String>> = workers.map(|l| l.iter().map(|w| w.id.clone()).collect());
        let was = self.contribution.ledger.all_time.network;
        self.contribution
            .network(&s.policy.timezone, now, net, listed.as_deref());
        let is = self.contribution.ledger.all_time.network;
        let moved = is.total() - was.total();
        self.saved.data_unsaved = self.saved.data_unsaved.saturating_add(moved);
        if let Some(m) = &self.metrics {
            m.count_network("received", is.received - was.received);
            m.count_network("sent", is.sent - was.sent);
        }
    }

    /// What the day and the month used so far, for the data cap.
    pub(super) fn data_used(
        &self,
        tz: &pilotd_core::zone::Zone,
        now: DateTime<Utc>,
    ) -> crate::decide::policy::data::DataUsed {
        self.contribution.ledger.data_used(tz, now)
    }

    /// One log line per change of decision, saying what changed and why.
    fn log_decision_change(&mut self, s: &Supply) {
        let now = format!(
            "{} (target {} worker(s), evict {})",
            if s.allowed { "compute" } else { "do not start" },
            s.workers,
            s.evict.as_str()
        );
        if self.last_decision.as_deref() != Some(now.as_str()) {
            tracing::info!(
                causes = %s.causes.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(","),
                "decision: {} -> {now}: {}",
                self.last_decision.as_deref().unwrap_or("none"),
                s.reasons.iter().chain(&s.notes).cloned().collect::<Vec<_>>().join("; ")
            );
            self.last_decision = Some(now);
        }
    }

    /// The machine's slot-ad lines (`slot_ad`), and the week's contribution when the site
    /// turned it on, written when they changed: before the cycle's starts, so a new worker's
    /// mount finds the file.
    fn advertise(
        &mut self,
        s: &Settings,
        host: &HostSnapshot,
        supply: &Supply,
        now: DateTime<Utc>,
    ) {
        let mut text = slot_ad::render(&s.worker.instance, &s.policy, host, supply, now);
        // What the machine gave leaves it only when the site turned it on.
        if s.advertise_contribution {
            let tz = &s.policy.timezone;
            text.push_str(&slot_ad::contribution(
                &contribution::Ledger::week_of(tz, now),
                &self.contribution.ledger.this_week(tz, now),
            ));
        }
        if self.advertised.as_deref() == Some(text.as_str()) {
            return;
        }
        match slot_ad::save(&s.worker.ad_dir, &text) {
            Ok(()) => self.advertised = Some(text),
            Err(e) => tracing::warn!("{e}"),
        }
    }

    /// Counts evictions, records outcomes (a removed worker's, a start that failed) and
    /// returns the status file's action lines.
    pub(super) fn executed(
        &mut self,
        s: &Settings,
        executed: Vec<Executed>,
        now: DateTime<Utc>,
    ) -> Vec<String> {
        let mut lines = Vec::with_capacity(executed.len());
        for Executed { action, result } in executed {
            if let (Some(m), Some(mode)) =
                (&self.metrics, action.reason().and_then(Reason::eviction))
            {
                m.count_eviction(mode.as_str());
            }
            let ended = match &action {
                // Recorded even when the remove failed: `recorded` keeps it from counting twice.
                // `record_finished` read its report before (the plan removes only workers of
                // the list it saw); one it could not leaves a worker without a report.
                Action::Remove {
                    id,
                    name,
                    outcome: Some(o),
                } => {
                    if !self.status.reported.iter().any(|r| r == id) {
                        let gone = Report::Unread("removed before its output was read".into());
                        self.reported(s, id, name, gone, now);
                    }
                    Some((id, name, o.clone()))
                }
                // Ended for a full scratch: a failure the back-off counts, recorded now (its
                // exit, by pilotd's signal, would read as neutral).
                Action::Stop {
                    id,
                    name,
                    why: Reason::ScratchFull { share_kib },
                    ..
                } if result.is_ok() => {
                    let share_kib = *share_kib;
                    Some((id, name, Outcome::ScratchFull { share_kib }))
                }
                Action::Start { spec } => result.as_ref().err().map(|e| {
                    let message = e.to_string();
                    (&spec.name, &spec.name, Outcome::StartFailed { message })
                }),
                _ => None,
            };
            if let Some((id, name, outcome)) = ended {
                self.ended(s, id, name, outcome, Vec::new(), now);
            }
            lines.push(match result {
                Ok(_) => action.to_string(),
                Err(e) => format!("FAILED {action}: {e}"),
            });
        }
        lines
    }

    /// A finished worker's job report, counted once per container into the contribution (and
    /// the metrics), held to what the worker's cgroup used and its life could hold (`Claim`).
    /// A report that is missing, damaged or unreadable counts the worker as one without a
    /// report; a damaged one is logged with its worker, as is a claim cut to its bound.
    pub(super) fn reported(
        &mut self,
        s: &Settings,
        id: &str,
        name: &str,
        report: Report,
        now: DateTime<Utc>,
    ) {
        let counted = match report {
            Report::Found(r, claim) => {
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
            .reported(&s.policy.timezone, now, counted.as_ref());
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

    /// A finished worker's outcome (with the last lines of output of one that failed): feeds
    /// the back-off, once per container.
    pub(super) fn ended(
        &mut self,
        s: &Settings,
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
                "worker failed: {outcome}; its last {} line(s) of output:{}",
                output.len(),
                output
                    .iter()
                    .map(|l| format!("\n  | {l}"))
                    .collect::<String>()
            );
        }
        let before = self.status.backoff.failures;
        self.status.backoff = self.status.backoff.after(&outcome, now, s.worker.backoff);
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
        self.contribution.ended(&s.policy.timezone, now, &outcome);
        // Saved at the cycle's end: a worker's end is news to `status` and the page.
        self.saved.history = None;
        if let Some(m) = &self.metrics {
            m.count_worker_ended(Ended::kind(&outcome));
        }
        let st = &mut self.status;
        st.recorded.push(id.to_string());
        st.outcomes.push(OutcomeRecord {
            name: name.to_string(),
            at: now,
            outcome,
            output,
        });
        let excess = st.outcomes.len().saturating_sub(status::OUTCOMES_KEPT);
        st.outcomes.drain(..excess);
    }

    /// Writes what the cycle saw, decided and did to the status file (and the metrics), when
    /// it changed for its readers or the heartbeat is due.
    pub(super) fn record(&mut self, o: CycleOutcome) {
        let st = &mut self.status;
        st.updated_at = Some(o.now);
        st.pid = std::process::id();
        if let Some(s) = o.supply {
            st.decision = Some(Decision::of(s, o.now));
        }
        if !o.actions.is_empty() {
            st.last_actions = o.actions;
        }
        st.notes = o.notes;
        st.locks = o.locks;
        st.last_error = (!o.errors.is_empty()).then(|| o.errors.join("; "));
        // The last measurement of each listed worker's scratch, for `status` and the page.
        st.scratch_use = o.scratch_use;
        if let Some(list) = &o.workers {
            let listed = |id: &String| list.iter().any(|w| &w.id == id);
            st.scratch_use.retain(|id, _| listed(id));
            // A cycle that decided on the engine's list forgets the recorded outcomes and
            // reports of containers that are gone.
            if o.supply.is_some() {
                st.recorded.retain(listed);
                st.reported.retain(listed);
            }
        }
        st.workers = o.workers;
        if let Some(m) = &self.metrics {
            m.backoff_level.set(i64::from(st.backoff.failures));
            if let Some(list) = &st.workers {
                let mut counts: HashMap<&'static str, i64> = HashMap::new();
                for w in list {
                    *counts.entry(metric_state(w.state)).or_default() += 1;
                }
                m.set_workers(counts);
            }
        }
        let heartbeat = pilotd_core::horizon::delta(status::HEARTBEAT);
        let unchanged = self.saved.status.as_ref().is_some_and(|(last, at)| {
            o.now.signed_duration_since(*at) < heartbeat && last.same_for_readers(&self.status)
        });
        if unchanged {
            return;
        }
        if written(status::save(&self.status_path, &self.status)) {
            self.saved.status = Some((self.status.clone(), o.now));
        }
    }

    /// The learned history and the contribution every `HISTORY_EVERY` (and at the end of a
    /// cycle in which a worker ended; the contribution also once `DATA_UNSAVED_MAX` of data
    /// was counted), the presence timeline every `TIMELINE_EVERY`: they
    /// count time, so they change every cycle, and a crash loses at most that much of them.
    pub(super) fn save_due(&mut self, s: &Settings, now: DateTime<Utc>) {
        let due = |at: Option<DateTime<Utc>>, every| {
            at.is_none_or(|at| now.signed_duration_since(at) >= pilotd_core::horizon::delta(every))
        };
        let history_due = due(self.saved.history, HISTORY_EVERY);
        if history_due && written(history::save(&s.state_dir, &self.learner.history)) {
            self.saved.history = Some(now);
        }
        if (history_due || self.saved.data_unsaved >= DATA_UNSAVED_MAX)
            && written(contribution::save(&s.state_dir, &self.contribution.ledger))
        {
            self.saved.data_unsaved = 0;
        }
        if due(self.saved.timeline, TIMELINE_EVERY)
            && written(timeline::save(&s.state_dir, &self.presence.timeline))
        {
            self.saved.timeline = Some(now);
        }
    }

    /// Writes them all (the daemon stops).
    pub(super) fn save_all(&mut self, s: &Settings, now: DateTime<Utc>) {
        self.status.updated_at = Some(now);
        written(status::save(&self.status_path, &self.status));
        (self.saved.history, self.saved.timeline) = (None, None);
        self.save_due(s, now);
    }
}

/// Whether a record was written; why not is logged (the next write tries again).
fn written<E: std::fmt::Display>(write: Result<(), E>) -> bool {
    write.map_err(|e| tracing::error!("{e}")).is_ok()
}

/// Takes back what a previous pilotd recorded. Latches only when recent: an old "host free
/// since" would start workers without the owner's `free_for`.
fn restore(path: &Path, s: &Settings, now: DateTime<Utc>) -> Status {
    let mut status = Status {
        pid: std::process::id(),
        instance: s.engine.instance.clone(),
        ..Default::default()
    };
    match status::load(path) {
        Ok(Some(prev)) => {
            let fresh_for = pilotd_core::horizon::delta(s.interval.saturating_mul(3))
                .max(chrono::Duration::minutes(2));
            if prev.updated_at.is_some_and(|t| now - t <= fresh_for) {
                status.owner_busy_since = prev.owner_busy_since;
                status.host_free_since = prev.host_free_since;
            }
            if prev.instance == status.instance {
                status.backoff = prev.backoff;
                status.recorded = prev.recorded;
                status.reported = prev.reported;
                status.outcomes = prev.outcomes;
            }
            status.image = prev.image;
            status.pulled_images = prev.pulled_images;
            status.throttle = prev.throttle;
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("{e}; starting with an empty status"),
    }
    status
}

/// The `state` label of the workers metric.
fn metric_state(s: WorkerState) -> &'static str {
    match s {
        WorkerState::Running | WorkerState::Paused | WorkerState::Exited | WorkerState::Created => {
            s.as_str()
        }
        _ => "other",
    }
}
