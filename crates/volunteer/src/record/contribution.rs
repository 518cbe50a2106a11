//! What the machine gave: per ISO week in the policy's time zone (the last `WEEKS_KEPT`) and
//! in all, the CPU time pilotd's workers used, the time they computed or sat paused, the time
//! the policy allowed computing, the time the owner was there, how the workers ended, and the
//! jobs their pilots reported (`Jobs`: started, completed, vacated, their time and CPU, the
//! work evictions lost); and the bytes the workers received and sent over the network and
//! the image pulls downloaded (`Data`), per day as well, for the owner's data cap.
//! Kept in the state dir (`contribution.json`), written atomically, survives restarts; a
//! corrupted file is set aside as `contribution.json.corrupt` and counting starts over.
//!
//! Measured, not guessed: the CPU time is the workers' own cgroup counters (the deltas the
//! daemon's CPU meter reads every cycle), the times are the cycles' observations, the jobs
//! are each pilot's own report at its end (`pilot_contract::JobReport`), held to what the
//! worker's cgroup used and its life could hold (`Claim::bound`). The
//! counters are pure data (`Contribution::record` takes `now` and the values); only `load`
//! and `save` touch the filesystem. Nothing here leaves the machine unless the site scrapes
//! pilotd's metrics.

use crate::decide::policy::data::DataUsed;
use crate::outcome::Outcome;
use crate::record::history::CycleClock;
use crate::worker::NetSample;
use chrono::{DateTime, Datelike, SubsecRound, Utc};
use pilot_contract::{JobReport, PilotExit};
use pilotd_core::service::state_file::{StateFileError, Store};
use pilotd_core::zone::Zone;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FILE: &str = "contribution.json";
/// Weeks kept besides the all-time total: a quarter.
pub(crate) const WEEKS_KEPT: usize = 12;
/// Days kept of the data figures: the month the cap counts, and the one before.
pub(crate) const DAYS_KEPT: usize = 62;

/// How the workers that ended, ended (from `Outcome`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    /// The pilot ran at least one job.
    pub ran_jobs: u64,
    /// The pilot found no job and left.
    pub no_job: u64,
    /// Ended by a signal: pilotd evicted it (or it was stopped).
    pub evicted: u64,
    /// Anything else: a bad configuration, a failed self-test, condor failing, the memory
    /// limit, a full scratch, a start that failed, an image off the contract.
    pub failed: u64,
}

impl Ended {
    /// The kind an outcome counts as (also the metrics' `outcome` label).
    pub(crate) fn kind(o: &Outcome) -> &'static str {
        match o {
            Outcome::Exited(PilotExit::RanJobs) => "ran_jobs",
            Outcome::Exited(PilotExit::Idle) => "no_job",
            Outcome::Exited(PilotExit::Signal(_)) => "evicted",
            _ => "failed",
        }
    }

    fn count(&mut self, o: &Outcome) {
        let n = match Ended::kind(o) {
            "ran_jobs" => &mut self.ran_jobs,
            "no_job" => &mut self.no_job,
            "evicted" => &mut self.evicted,
            _ => &mut self.failed,
        };
        *n = n.saturating_add(1);
    }
}

/// The figures of one stretch of time (a week, or all time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// CPU time pilotd's workers used, in CPU-seconds (two busy CPUs for an hour: 7200).
    pub cpu_seconds: f64,
    /// At least one worker was running.
    pub computing_s: u64,
    /// Workers were there, all paused (the owner came back, a snooze).
    pub paused_s: u64,
    /// The policy allowed computing.
    pub open_s: u64,
    /// The owner was there (logged in and active, busy on the CPU, a snooze, an exclusive
    /// program).
    pub owner_present_s: u64,
    pub ended: Ended,
    /// What the pilots reported of their jobs (absent from a ledger older than the reports:
    /// zero).
    #[serde(default)]
    pub jobs: Jobs,
    /// The bytes over the network (absent from a ledger older than the count: zero).
    #[serde(default)]
    pub network: Data,
}

/// Bytes over the network that pilotd's work cost the owner: what the workers' interfaces
/// received and sent (the engine's counters of their network namespaces, deltas cycle to
/// cycle) and what pulls of the worker image downloaded (the engine's pull progress).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Data {
    pub received: u64,
    pub sent: u64,
    pub pulled: u64,
}

impl Data {
    /// All of it: what a data plan counts.
    pub(crate) fn total(&self) -> u64 {
        self.received
            .saturating_add(self.sent)
            .saturating_add(self.pulled)
    }

    fn add(&mut self, d: Data) {
        self.received = self.received.saturating_add(d.received);
        self.sent = self.sent.saturating_add(d.sent);
        self.pulled = self.pulled.saturating_add(d.pulled);
    }
}

/// One day in the policy's zone (`2026-01-05`), its data only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Day {
    pub day: String,
    #[serde(flatten)]
    pub network: Data,
}

/// The workers' network counters as last counted, and when: kept in the ledger, written with
/// the totals they are counted into, so a daemon that crashed counts from where the file
/// left off (a worker still alive loses nothing; one that ended since loses what it moved
/// after the file was written, its counters gone with it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Marks {
    pub at: Option<DateTime<Utc>>,
    pub workers: BTreeMap<String, NetSample>,
}

/// One worker's network counters as read this cycle, with its creation (its label).
#[derive(Debug, Clone, PartialEq)]
pub struct NetReading {
    pub id: String,
    pub created: Option<DateTime<Utc>>,
    pub sample: NetSample,
}

impl Marks {
    /// The bytes `r` adds: from its mark; all of its counters for a worker created since
    /// the last reading (they began at zero then); none for one without a mark that was
    /// already there (adopted with no mark: its counters cover time nobody can tell
    /// apart). The mark moves to `r` either way.
    pub(crate) fn count(&mut self, r: &NetReading) -> NetSample {
        let new = match self.workers.get(&r.id) {
            Some(mark) => r.sample.since(*mark),
            // The label has whole seconds.
            None if r
                .created
                .zip(self.at)
                .is_some_and(|(c, at)| c >= at.trunc_subsecs(0)) =>
            {
                r.sample
            }
            None => NetSample::default(),
        };
        self.workers.insert(r.id.clone(), r.sample);
        new
    }
}

/// The jobs the workers' pilots reported at their ends (`JobReport`), summed; and how many
/// workers reported and how many ended without a report (an older pilot, an image that does
/// not run `pilot`, a report that could not be read, output gone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Jobs {
    /// Jobs condor activated in the workers' slots.
    pub started: u64,
    /// Jobs that ran to their end here.
    pub completed: u64,
    /// Jobs that left before their end (evicted, or still running when condor stopped).
    pub vacated: u64,
    /// Wall-clock seconds the jobs ran, completed and vacated.
    pub job_seconds: u64,
    /// CPU-seconds the jobs used, completed and vacated.
    pub cpu_seconds: f64,
    /// CPU-seconds of the vacated jobs: the work evictions lost (unless a job checkpointed).
    pub vacated_cpu_seconds: f64,
    /// Workers whose pilot reported.
    pub workers_reported: u64,
    /// Workers that ended without a readable report.
    pub workers_unreported: u64,
}

impl Jobs {
    fn add(&mut self, report: Option<&JobReport>) {
        let Some(r) = report else {
            self.workers_unreported = self.workers_unreported.saturating_add(1);
            return;
        };
        self.workers_reported = self.workers_reported.saturating_add(1);
        self.started = self.started.saturating_add(r.jobs_started);
        self.completed = self.completed.saturating_add(r.jobs_completed);
        self.vacated = self.vacated.saturating_add(r.jobs_vacated);
        self.job_seconds = self.job_seconds.saturating_add(r.job_seconds);
        self.cpu_seconds += r.job_cpu_seconds;
        self.vacated_cpu_seconds += r.vacated_cpu_seconds;
    }
}

/// A worker's report held to what it could have done. A job inside the worker could print
/// a line that looks like the pilot's (its output goes to condor's files, but nothing stops
/// a job from writing to the pilot's terminal), so a report is believed only up to:
/// - job CPU: the CPU the worker's own cgroup used. pilotd reads that counter every cycle
///   (`Measured`); a worker's cgroup goes with its end, so what it used after the last
///   reading is bounded by that stretch × the machine's CPUs (the whole life, for a worker
///   never read). condor's figure for a job is that job's processes' CPU, which its
///   container's cgroup counts too;
/// - job wall-seconds: the worker's lifetime × the machine's CPUs (a slot per CPU, a job per
///   slot at a time);
/// - starts: one per `SECONDS_PER_START` of that (see there);
/// - consistency: completed ≤ started, vacated ≤ started − completed, and the vacated jobs'
///   CPU ≤ all the jobs' CPU.
///
/// A claim beyond its bound is cut to it and the cut named (the daemon logs it): the rest of
/// the report still counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Claim {
    /// From the worker's creation to its end.
    pub lifetime: std::time::Duration,
    /// The machine's CPUs.
    pub cpus: u32,
    /// The worker's cgroup as pilotd last read it; `None` when never read (it lived less
    /// than a cycle, or the engine gave no statistics).
    pub measured: Option<Measured>,
}

/// What pilotd read of a worker's own cgroup: the CPU it had used, and how much of the
/// worker's life came after that reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub cpu_seconds: f64,
    pub after: std::time::Duration,
}

/// Slot-seconds per job start a report may claim: at most one start every 2 s on each CPU
/// of the machine for the worker's life. A start is a claim activation (the StartLog's,
/// `pilot::startlog`): condor's startd forks a new `condor_starter` for it, which reads
/// condor's configuration, makes the job's sandbox and takes the job from the shadow on the
/// access point over the network, and once the job exits sends its final update and its
/// output back before the slot can be activated again. condor 23.9's own records of a slot
/// fed back to back (pilot/tests/fixtures/startd_history/personal-condor-23.9) show that
/// cost: the shadow's start (`JobCurrentStartDate`) 1–2 s before the job's
/// (`JobStartDate`), and a 5 s job 6 s in the slot (`RemoteWallClockTime`), so an empty job
/// takes about 2 s of a slot. The bound counts every CPU of the machine, not the worker's
/// share of them, so it is that or looser for any worker.
pub(crate) const SECONDS_PER_START: u64 = 2;

impl Claim {
    /// The report as far as it is believable, and the names of the keys that were cut.
    pub(crate) fn bound(&self, r: &JobReport) -> (JobReport, Vec<&'static str>) {
        let cpus = f64::from(self.cpus.max(1));
        // A second of slack: the creation label and the engine's end are whole seconds.
        let slot_seconds = |d: std::time::Duration| (d.as_secs_f64().ceil() + 1.0) * cpus;
        let wall = slot_seconds(self.lifetime) as u64;
        let cpu = match self.measured {
            Some(m) => m.cpu_seconds.max(0.0) + slot_seconds(m.after.min(self.lifetime)),
            None => slot_seconds(self.lifetime),
        };
        let mut out = *r;
        let mut cut = Vec::new();
        let starts = wall / SECONDS_PER_START;
        cap(&mut out.jobs_started, starts, "jobs_started", &mut cut);
        let started = out.jobs_started;
        cap(&mut out.jobs_completed, started, "jobs_completed", &mut cut);
        let unfinished = started - out.jobs_completed;
        cap(&mut out.jobs_vacated, unfinished, "jobs_vacated", &mut cut);
        cap(&mut out.job_seconds, wall, "job_seconds", &mut cut);
        cap(&mut out.job_cpu_seconds, cpu, "job_cpu_seconds", &mut cut);
        let all = out.job_cpu_seconds;
        cap(
            &mut out.vacated_cpu_seconds,
            all,
            "vacated_cpu_seconds",
            &mut cut,
        );
        (out, cut)
    }
}

/// `v` held to `max`; `key` named in `cut` when that cut it.
fn cap<T: PartialOrd>(v: &mut T, max: T, key: &'static str, cut: &mut Vec<&'static str>) {
    if *v > max {
        *v = max;
        cut.push(key);
    }
}

impl Tally {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Tally::default()
    }

    fn add(&mut self, o: &Observed, secs: u64) {
        self.cpu_seconds += o.cpu_seconds.max(0.0);
        let add = |n: &mut u64, yes: bool| {
            if yes {
                *n = n.saturating_add(secs);
            }
        };
        add(&mut self.computing_s, o.running);
        add(&mut self.paused_s, !o.running && o.paused);
        add(&mut self.open_s, o.open);
        add(&mut self.owner_present_s, o.owner_present);
    }
}

/// The day of `t` in `tz`, as the ledger names it (`2026-01-05`).
pub(crate) fn day_of(tz: &Zone, t: DateTime<Utc>) -> String {
    t.with_timezone(tz).format("%Y-%m-%d").to_string()
}

/// One ISO week in the policy's zone (`2026-W03`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Week {
    pub week: String,
    #[serde(flatten)]
    pub tally: Tally,
}

/// The ledger on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub version: u32,
    /// When counting started (this file's first record).
    pub since: Option<DateTime<Utc>>,
    /// Oldest first, at most `WEEKS_KEPT`.
    pub weeks: Vec<Week>,
    pub all_time: Tally,
    /// Oldest first, at most `DAYS_KEPT` (absent from an older ledger: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<Day>,
    #[serde(default)]
    pub marks: Marks,
    /// What the last pull of the worker image downloaded: what the next one may cost.
    #[serde(default)]
    pub last_pull: u64,
}

impl Default for Ledger {
    fn default() -> Ledger {
        Ledger {
            version: 1,
            since: None,
            weeks: Vec::new(),
            all_time: Tally::default(),
            days: Vec::new(),
            marks: Marks::default(),
            last_pull: 0,
        }
    }
}

impl Ledger {
    /// The ISO week of `t` in `tz`, as the ledger names it.
    pub(crate) fn week_of(tz: &Zone, t: DateTime<Utc>) -> String {
        let w = t.with_timezone(tz).iso_week();
        format!("{}-W{:02}", w.year(), w.week())
    }

    /// The figures of the week `now` lies in (empty when nothing was counted in it).
    pub(crate) fn this_week(&self, tz: &Zone, now: DateTime<Utc>) -> Tally {
        let key = Ledger::week_of(tz, now);
        self.weeks
            .iter()
            .find(|w| w.week == key)
            .map(|w| w.tally)
            .unwrap_or_default()
    }

    /// The data of the day `now` lies in (none when nothing was counted in it).
    pub(crate) fn today(&self, tz: &Zone, now: DateTime<Utc>) -> Data {
        let key = day_of(tz, now);
        self.days
            .iter()
            .find(|d| d.day == key)
            .map(|d| d.network)
            .unwrap_or_default()
    }

    /// The data of the calendar month `now` lies in, in `tz`.
    pub(crate) fn this_month(&self, tz: &Zone, now: DateTime<Utc>) -> Data {
        let month = now.with_timezone(tz).format("%Y-%m-").to_string();
        let mut sum = Data::default();
        for d in self.days.iter().filter(|d| d.day.starts_with(&month)) {
            sum.add(d.network);
        }
        sum
    }

    /// What a data cap counts at `now`.
    pub(crate) fn data_used(&self, tz: &Zone, now: DateTime<Utc>) -> DataUsed {
        DataUsed {
            today: self.today(tz, now).total(),
            this_month: self.this_month(tz, now).total(),
            last_pull: self.last_pull,
        }
    }

    /// The day of `now`, added when new (the oldest beyond `DAYS_KEPT` dropped); `None` for
    /// a day older than all those kept (a clock set far back: counted in the week only).
    fn day_mut(&mut self, tz: &Zone, now: DateTime<Utc>) -> Option<&mut Data> {
        let key = day_of(tz, now);
        if !self.days.iter().any(|d| d.day == key) {
            self.days.push(Day {
                day: key.clone(),
                network: Data::default(),
            });
            // A clock set back keeps the days in the order of their names.
            self.days.sort_by(|a, b| a.day.cmp(&b.day));
            let excess = self.days.len().saturating_sub(DAYS_KEPT);
            self.days.drain(..excess);
        }
        self.days
            .iter_mut()
            .find(|d| d.day == key)
            .map(|d| &mut d.network)
    }

    /// The week of `now`, added when new (the oldest beyond `WEEKS_KEPT` dropped).
    fn week_mut(&mut self, tz: &Zone, now: DateTime<Utc>) -> &mut Tally {
        let key = Ledger::week_of(tz, now);
        if self.weeks.last().is_none_or(|w| w.week != key) {
            match self.weeks.iter().position(|w| w.week == key) {
                // A clock set back into a week already kept: count there.
                Some(i) => return &mut self.weeks[i].tally,
                None => self.weeks.push(Week {
                    week: key,
                    tally: Tally::default(),
                }),
            }
            let excess = self.weeks.len().saturating_sub(WEEKS_KEPT);
            self.weeks.drain(..excess);
        }
        let last = self.weeks.len() - 1;
        &mut self.weeks[last].tally
    }
}

/// What one cycle saw, for the interval that ends at its `now`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observed {
    /// CPU-seconds pilotd's workers used since the last cycle (their counters' deltas).
    pub cpu_seconds: f64,
    /// At least one worker was running.
    pub running: bool,
    /// At least one worker was paused.
    pub paused: bool,
    /// The decision allowed computing.
    pub open: bool,
    /// The decision saw the owner there.
    pub owner_present: bool,
}

/// Counts each cycle into the ledger: the time since the last cycle (`CycleClock`: a gap
/// counts as at most two intervals), attributed to the week `now` lies in.
#[derive(Debug, Clone, PartialEq)]
pub struct Contribution {
    pub ledger: Ledger,
    clock: CycleClock,
}

impl Contribution {
    pub(crate) fn new(ledger: Ledger) -> Contribution {
        Contribution {
            ledger,
            clock: CycleClock::default(),
        }
    }

    /// Counts the interval ending at `now` as `o` says. The CPU counted is all of `o`'s,
    /// whatever the elapsed time: the counters measured it, the clock did not.
    pub(crate) fn record(
        &mut self,
        tz: &Zone,
        now: DateTime<Utc>,
        interval: std::time::Duration,
        o: Observed,
    ) {
        let secs = self.clock.elapsed(now, interval).num_seconds().max(0) as u64;
        if secs == 0 && o.cpu_seconds <= 0.0 {
            return;
        }
        self.count(tz, now, |t| t.add(&o, secs));
    }

    /// Counts `f` into the week of `now` and into all time.
    fn count(&mut self, tz: &Zone, now: DateTime<Utc>, f: impl Fn(&mut Tally)) {
        self.ledger.since.get_or_insert(now);
        f(self.ledger.week_mut(tz, now));
        f(&mut self.ledger.all_time);
    }

    /// Counts the workers' network counters read at `now` (`readings`) into the day, the week
    /// and all time; `listed`: the engine's list of this cycle, whose workers alone keep a
    /// mark (`None`: not listed, every mark kept).
    pub(crate) fn network(
        &mut self,
        tz: &Zone,
        now: DateTime<Utc>,
        readings: &[NetReading],
        listed: Option<&[String]>,
    ) {
        let mut moved = Data::default();
        for r in readings {
            let n = self.ledger.marks.count(r);
            moved.received = moved.received.saturating_add(n.received);
            moved.sent = moved.sent.saturating_add(n.sent);
        }
        if let Some(ids) = listed {
            self.ledger.marks.workers.retain(|id, _| ids.contains(id));
        }
        self.ledger.marks.at = Some(now);
        self.count_data(tz, now, moved);
    }

    /// A pull of the worker image downloaded `bytes`, finished at `now`.
    pub(crate) fn pulled(&mut self, tz: &Zone, now: DateTime<Utc>, bytes: u64) {
        self.ledger.last_pull = bytes;
        self.count_data(
            tz,
            now,
            Data {
                pulled: bytes,
                ..Data::default()
            },
        );
    }

    fn count_data(&mut self, tz: &Zone, now: DateTime<Utc>, d: Data) {
        if d == Data::default() {
            return;
        }
        if let Some(day) = self.ledger.day_mut(tz, now) {
            day.add(d);
        }
        self.count(tz, now, |t| t.network.add(d));
    }

    /// A worker's pilot reported its jobs at its end (`None`: it ended without a readable
    /// report), at `now`; the daemon calls this once per container, with the report already
    /// held to its `Claim`.
    pub(crate) fn reported(&mut self, tz: &Zone, now: DateTime<Utc>, report: Option<&JobReport>) {
        self.count(tz, now, |t| t.jobs.add(report));
    }

    /// A worker ended with `outcome` at `now` (the daemon calls this once per container).
    pub(crate) fn ended(&mut self, tz: &Zone, now: DateTime<Utc>, outcome: &Outcome) {
        self.count(tz, now, |t| t.ended.count(outcome));
    }
}

/// What `load` found.
#[derive(Debug)]
pub struct Loaded {
    pub ledger: Ledger,
    /// Set when the file was unusable (and set aside): say so in the log.
    pub warning: Option<String>,
}

pub(crate) fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

fn store(state_dir: &Path) -> Store<Ledger> {
    Store::new(path(state_dir), "contribution ledger").checked(|l| {
        (l.version == 1 && l.weeks.len() <= WEEKS_KEPT && l.days.len() <= DAYS_KEPT)
            .then_some(())
            .ok_or_else(|| "unexpected version or size".to_string())
    })
}

/// Reads the ledger (for the daemon). Missing → empty. Unreadable or corrupted → empty, the
/// bad file renamed to `contribution.json.corrupt`.
pub(crate) fn load(state_dir: &Path) -> Loaded {
    let (ledger, warning) = store(state_dir).load_or(Ledger::default);
    Loaded { ledger, warning }
}

/// Reads the ledger without changing anything (for `status` and the page).
pub(crate) fn peek(state_dir: &Path) -> Loaded {
    let (ledger, warning) = store(state_dir).peek_or(Ledger::default);
    Loaded { ledger, warning }
}

/// Writes the ledger atomically: a crash leaves the old or the new file.
pub(crate) fn save(state_dir: &Path, l: &Ledger) -> Result<(), StateFileError> {
    store(state_dir).save(l)
}

/// What `status` and the page show: this week's figures and all time's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// When counting started.
    pub since: Option<DateTime<Utc>>,
    /// This ISO week in the policy's zone (`2026-W49`).
    pub week: String,
    pub this_week: Tally,
    pub all_time: Tally,
}

impl Summary {
    pub(crate) fn of(l: &Ledger, tz: &Zone, now: DateTime<Utc>) -> Summary {
        Summary {
            since: l.since,
            week: Ledger::week_of(tz, now),
            this_week: l.this_week(tz, now),
            all_time: l.all_time,
        }
    }

    /// The two stretches with their headings: ("This week (2026-W49)", lines), ("All time
    /// (since …)", lines).
    pub(crate) fn sections(&self, tz: &Zone) -> [(String, Vec<String>); 2] {
        let since = self
            .since
            .map(|t| format!(" (since {})", t.with_timezone(tz).format("%Y-%m-%d")))
            .unwrap_or_default();
        [
            (format!("This week ({})", self.week), lines(&self.this_week)),
            (format!("All time{since}"), lines(&self.all_time)),
        ]
    }
}

/// Hours, as `status` and the page print them (one decimal): a little is "<0.1", never a
/// "0.0" that reads as nothing.
pub(crate) fn hours(secs: f64) -> String {
    let h = secs / 3600.0;
    if h > 0.0 && h < 0.05 {
        return "<0.1".into();
    }
    format!("{h:.1}")
}

/// The lines `status` and the page show for one stretch: CPU-hours given, hours computing,
/// open and with the owner there, how the workers ended, their jobs as the pilots reported
/// them (or that they did not), and the data their work moved.
pub(crate) fn lines(t: &Tally) -> Vec<String> {
    if t.is_empty() {
        return vec!["nothing recorded yet".into()];
    }
    let mut lines = vec![
        format!("{} CPU-hours given", hours(t.cpu_seconds)),
        format!(
            "{} h computing, {} h paused",
            hours(t.computing_s as f64),
            hours(t.paused_s as f64)
        ),
        format!("{} h open to the pool", hours(t.open_s as f64)),
        format!("{} h the owner was there", hours(t.owner_present_s as f64)),
        format!(
            "workers: {} ran jobs, {} ended without a job, {} evicted, {} failed",
            t.ended.ran_jobs, t.ended.no_job, t.ended.evicted, t.ended.failed
        ),
        jobs_line(&t.jobs),
    ];
    // Only once something was counted: a ledger from before the count says nothing of it.
    if t.network != Data::default() {
        lines.push(data_line(&t.network));
    }
    lines
}

/// The bytes pilotd's work moved: "data: 1.2GiB received, 40.5MiB sent, 300MiB pulled for
/// the worker image".
pub(crate) fn data_line(d: &Data) -> String {
    use pilotd_core::config::units::format_size;
    format!(
        "data: {} received, {} sent, {} pulled for the worker image",
        format_size(d.received),
        format_size(d.sent),
        format_size(d.pulled)
    )
}

/// The jobs as the pilots reported them: "jobs: 12 finished, 1 vacated (0.2 CPU-hours of work
/// lost); 4.8 CPU-hours in 5.0 job-hours", said plainly when no worker reported yet, or
/// none did (an older pilot, an image that does not run `pilot`).
fn jobs_line(j: &Jobs) -> String {
    let unreported = match j.workers_unreported {
        0 => String::new(),
        n => format!("; {n} worker(s) ended without a report"),
    };
    if j.workers_reported == 0 {
        return if j.workers_unreported == 0 {
            "jobs: none reported yet (a worker's pilot reports them at its end)".into()
        } else {
            format!(
                "jobs: not known, the pilot did not report them ({} worker(s) ended without a report)",
                j.workers_unreported
            )
        };
    }
    format!(
        "jobs: {} finished, {} vacated ({} CPU-hours of work lost); {} CPU-hours in {} job-hours{unreported}",
        j.completed,
        j.vacated,
        hours(j.vacated_cpu_seconds),
        hours(j.cpu_seconds),
        hours(j.job_seconds as f64),
    )
}

#[cfg(test)]
mod tests;
