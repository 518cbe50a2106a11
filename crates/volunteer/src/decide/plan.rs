//! Volunteer planning (pure): from the decision (`Supply`), the observed workers, the back-off
//! state and the image state to the actions of one cycle. No I/O, no clock: `now` is an
//! argument, so `pilotd plan` prints exactly what `pilotd run` would do.
//!
//! Rules, in the order the actions come out (evictions first: they are what the owner waits for):
//! - A worker past its `die_at` is stopped gracefully; a paused one is killed (its time is
//!   over, and thawing it on the owner's machine just to let it drain is not worth it).
//! - Eviction per `supply.evict`: `pause` pauses running workers; `graceful` stops them
//!   (SIGTERM, SIGKILL after `grace`); a *paused* worker is first resumed and then stopped
//!   gracefully, so condor can vacate its job and report it instead of losing it silently —
//!   the owner chose "graceful", i.e. chose to give workers `grace` to leave; `fast` kills.
//! - Finished workers are removed after their outcome is recorded (the outcome feeds the
//!   back-off). A container created but never started (pilotd died in between) is removed.
//! - When allowed: paused workers resume, surplus workers (the target shrank) are stopped
//!   gracefully, newest first (they have done the least work), and missing workers start, at
//!   most `max_starts_per_cycle` per cycle, only with a resolved and pulled image, and not
//!   while the back-off holds.
//! - Every worker that stays (running, or paused and resuming) is held to the decision's CPU
//!   cap (`Supply::cpu_cap`: the comfort throttle, quiet hours), lowered or raised live
//!   (`Limit`) before a resume; once no cap holds, one pilotd lowered gets its whole share
//!   back (its label says what that was). New workers start under the cap.
//! - While the workers' traffic filter is down (it could not be restored), running workers
//!   are paused (one already being stopped is killed: its grace would run unfiltered), paused
//!   ones stay paused, finished ones are removed, and nothing else happens: no resume, no
//!   start, no pull.
//! - A new image digest is pulled only while workers may run, or up to `PREFETCH_LEAD` (less
//!   the host's pull delay in the fleet's spread) before a window opens when only the schedule
//!   holds workers back (so they start on time), or when the site allows pulls while the owner
//!   is present — within the schedule's season in every case: never while the machine is
//!   closed for days, nor while the host's start waits for its turn in the fleet's spread.
//! - While the link is metered and the owner's `on_metered` holds it (`Supply::link`), nothing
//!   is pulled and nothing starts; with "pause", running workers are paused for it
//!   (`Reason::Metered`, not an eviction), and resume once the link is free again.
//!
//! The spec of a new worker (resources, env template, labels) is `spec.rs`; what `pilotd plan`
//! prints of a decision and its plan, `report.rs`.

use crate::decide::policy::{Cause, LinkHold, Supply};
use crate::outcome::{Outcome, StartBackoff};
use crate::settings::WorkerSettings;
use crate::worker::ImageState;
use crate::worker::ScratchUse;
use crate::worker::{Worker, WorkerSpec, WorkerState, gpus_label, labels};
use chrono::{DateTime, SecondsFormat, Utc};
use pilotd_core::config::Evict;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Why the plan acts on a worker. Logs and status show it as a sentence; metrics count only
/// evictions as evictions (a surplus worker or one past its `die_at` is stopped, not evicted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The owner needs the machine; the decision says how.
    Eviction(Evict),
    /// Past its `die_at`: stopped gracefully.
    PastDieAt,
    /// Paused past its `die_at`: killed (thawing it on the owner's machine only to let it
    /// drain is not worth it).
    PausedPastDieAt,
    /// Resumed only so that a graceful eviction can let it drain.
    ResumeToDrain,
    /// Resumed: the host is free again.
    HostFree,
    /// The target shrank (policy reload, less memory): more workers than it.
    Surplus { target: u32 },
    /// pilotd is shutting down with `[worker] on_shutdown = "stop"`.
    Shutdown,
    /// Its scratch dir holds more than its disk share (KiB used, KiB shared).
    DiskShareExceeded { used_kib: u64, share_kib: u64 },
    /// Its scratch, a filesystem of exactly its disk share, is full (KiB shared): it cannot
    /// write, so it cannot run a job.
    ScratchFull { share_kib: u64 },
    /// The workers' traffic filter is down and could not be restored.
    FilterDown,
    /// The decision caps the workers' CPUs (`comfort`: the machine is hot or loud, quiet
    /// hours).
    CpuCap,
    /// No cap holds any more: the worker gets its whole share back.
    WholeShare,
    /// The machine's link is metered and the owner's `on_metered` pauses the workers.
    Metered,
}

impl Reason {
    /// The eviction mode when this is an eviction, for the `evictions` metric.
    pub(crate) fn eviction(self) -> Option<Evict> {
        match self {
            Reason::Eviction(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Eviction(Evict::Pause | Evict::None) => f.write_str("owner needs the machine"),
            Reason::Eviction(e) => write!(f, "eviction: {}", e.as_str()),
            Reason::PastDieAt => f.write_str("past its die_at"),
            Reason::PausedPastDieAt => f.write_str("paused past its die_at"),
            Reason::ResumeToDrain => f.write_str("to let it drain"),
            Reason::HostFree => f.write_str("the host is free again"),
            Reason::Surplus { target } => write!(f, "more workers than the target of {target}"),
            Reason::Shutdown => f.write_str("pilotd is shutting down (on_shutdown = \"stop\")"),
            Reason::DiskShareExceeded {
                used_kib,
                share_kib,
            } => write!(
                f,
                "its scratch dir holds {} MiB, over its disk share of {} MiB",
                used_kib / 1024,
                share_kib / 1024
            ),
            Reason::ScratchFull { share_kib } => write!(
                f,
                "its scratch is full: it filled its disk share of {} MiB",
                share_kib / 1024
            ),
            Reason::FilterDown => f.write_str("its traffic filter is down"),
            Reason::CpuCap => f.write_str("the CPU cap in force"),
            Reason::WholeShare => f.write_str("no CPU cap: its whole share"),
            Reason::Metered => f.write_str("the network is metered"),
        }
    }
}

/// In `plan --format json` a reason is its sentence, as it always was.
impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One thing the daemon will do. The order of a plan is the order of execution.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub(crate) enum Action {
    Pause {
        id: String,
        name: String,
        why: Reason,
    },
    Unpause {
        id: String,
        name: String,
        why: Reason,
    },
    /// SIGTERM, then SIGKILL after `grace_s`.
    Stop {
        id: String,
        name: String,
        grace_s: u64,
        why: Reason,
    },
    Kill {
        id: String,
        name: String,
        why: Reason,
    },
    /// Sets a live worker's CPU quota (`docker update --cpus`), in NanoCpus (10⁹ a CPU).
    Limit {
        id: String,
        name: String,
        nano_cpus: i64,
        why: Reason,
    },
    /// Record `outcome` (feeds the back-off), then remove the container and its scratch dir.
    Remove {
        id: String,
        name: String,
        outcome: Option<Outcome>,
    },
    Pull {
        repository: String,
        digest: String,
    },
    Start {
        spec: Box<WorkerSpec>,
    },
}

impl Action {
    /// Why this action acts on a worker (`None` for removals, pulls and starts).
    pub(crate) fn reason(&self) -> Option<Reason> {
        match self {
            Action::Pause { why, .. }
            | Action::Unpause { why, .. }
            | Action::Stop { why, .. }
            | Action::Kill { why, .. }
            | Action::Limit { why, .. } => Some(*why),
            Action::Remove { .. } | Action::Pull { .. } | Action::Start { .. } => None,
        }
    }

    fn pause(w: &Worker, why: Reason) -> Action {
        let (id, name) = (w.id.clone(), w.name.clone());
        Action::Pause { id, name, why }
    }

    fn unpause(w: &Worker, why: Reason) -> Action {
        let (id, name) = (w.id.clone(), w.name.clone());
        Action::Unpause { id, name, why }
    }

    fn stop(w: &Worker, grace_s: u64, why: Reason) -> Action {
        let (id, name) = (w.id.clone(), w.name.clone());
        Action::Stop {
            id,
            name,
            grace_s,
            why,
        }
    }

    fn kill(w: &Worker, why: Reason) -> Action {
        let (id, name) = (w.id.clone(), w.name.clone());
        Action::Kill { id, name, why }
    }

    /// The removal of a finished worker, with its outcome, or of one created and never
    /// started (no outcome).
    fn remove(w: &Worker) -> Action {
        let (id, name) = (w.id.clone(), w.name.clone());
        let outcome = w
            .state
            .is_finished()
            .then(|| Outcome::from_exit(w.exit_code, w.oom_killed));
        Action::Remove { id, name, outcome }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Pause { name, why, .. } => write!(f, "pause {name} ({why})"),
            Action::Unpause { name, why, .. } => write!(f, "resume {name} ({why})"),
            Action::Stop {
                name, grace_s, why, ..
            } => {
                write!(f, "stop {name} within {grace_s}s ({why})")
            }
            Action::Kill { name, why, .. } => write!(f, "kill {name} ({why})"),
            Action::Limit {
                name,
                nano_cpus,
                why,
                ..
            } => write!(f, "limit {name} to {} CPU ({why})", cpus(*nano_cpus)),
            Action::Remove { name, outcome, .. } => match outcome {
                Some(o) => write!(f, "remove {name} ({o})"),
                None => write!(f, "remove {name}"),
            },
            Action::Pull { repository, digest } => write!(f, "pull {repository}@{digest}"),
            Action::Start { spec } => write!(
                f,
                "start {} ({} CPU, {} MiB, image {})",
                spec.name,
                cpus(spec.nano_cpus),
                spec.memory_bytes >> 20,
                spec.image_pinned
            ),
        }
    }
}

/// NanoCpus as CPUs, as `docker update --cpus` writes them: whole ones without a fraction.
fn cpus(nano: i64) -> String {
    if nano % 1_000_000_000 == 0 {
        (nano / 1_000_000_000).to_string()
    } else {
        format!("{:.2}", nano as f64 / 1e9)
    }
}

/// Operations the daemon has started and not finished (long graceful stops, pulls), so a
/// cycle does not issue them twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InFlight {
    pub stopping: BTreeSet<String>,
    pub pulling: Option<String>,
    /// A registry check of the worker image runs beside the loop.
    pub checking: bool,
}

/// What the plan looks at besides the decision.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    pub workers: &'a [Worker],
    pub in_flight: &'a InFlight,
    pub backoff: &'a StartBackoff,
    pub image: &'a ImageState,
    /// How many hours the host is usually free from now (learned history); workers get it as
    /// `{free_hours}` so the pool can prefer long-free machines for long jobs.
    pub free_hours: Option<u64>,
    /// What each worker's scratch held at the last measurement, by worker id.
    pub scratch_use: &'a BTreeMap<String, ScratchUse>,
    /// Why the workers' traffic filter is down (it could not be restored), while it is.
    pub filter_down: Option<&'a str>,
}

/// How long a worker over its disk share gets to stop: short, it may still be writing.
pub(crate) const DISK_STOP_GRACE_S: u64 = 30;

/// The actions of one cycle and why nothing more is done.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub notes: Vec<String>,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Plans one cycle.
pub(crate) fn plan(
    supply: &Supply,
    obs: Observed<'_>,
    s: &WorkerSettings,
    now: DateTime<Utc>,
) -> Plan {
    if let Some(why) = obs.filter_down {
        return hold_unfiltered(&obs, why);
    }
    let Sorted {
        mut actions,
        removals,
        mut staying,
        held_paused,
        held_for_disk,
        mut notes,
    } = sort_workers(supply, &obs, now);
    actions.extend(removals);
    if held_paused > 0 {
        notes.push(format!("{held_paused} worker(s) stay paused"));
    }
    if supply.allowed {
        fit_to_target(supply, &mut staying, &mut actions);
    }
    // Before the resumes: a worker resumes under the cap in force.
    let resumes = actions
        .iter()
        .position(|a| {
            matches!(
                a,
                Action::Unpause {
                    why: Reason::HostFree,
                    ..
                }
            )
        })
        .unwrap_or(actions.len());
    let limits = cap_live(supply, &staying);
    actions.splice(resumes..resumes, limits);
    let mut p = Plan { actions, notes };
    pull_new_image(supply, &obs, s, &mut p);
    let missing = (supply.workers as usize).saturating_sub(staying.len() + held_for_disk);
    if supply.allowed && missing > 0 {
        start_missing(supply, &obs, s, now, missing, &mut p);
    }
    p
}

/// The filter is down: no worker may send a packet. Running ones are paused (frozen, they
/// send nothing, and resume where they were once it is back); one being stopped is killed,
/// since its grace would run unfiltered; finished ones are removed. Nothing resumes, starts
/// or is pulled.
fn hold_unfiltered(obs: &Observed<'_>, why: &str) -> Plan {
    let mut actions = Vec::new();
    for w in obs.workers {
        match w.state {
            WorkerState::Running | WorkerState::Restarting
                if obs.in_flight.stopping.contains(&w.id) =>
            {
                actions.push(Action::kill(w, Reason::FilterDown))
            }
            WorkerState::Running | WorkerState::Restarting => {
                actions.push(Action::pause(w, Reason::FilterDown))
            }
            WorkerState::Exited | WorkerState::Dead | WorkerState::Created => {
                actions.push(Action::remove(w))
            }
            WorkerState::Paused | WorkerState::Removing | WorkerState::Unknown => {}
        }
    }
    Plan {
        actions,
        notes: vec![format!(
            "workers paused and none starts: the traffic filter is down ({})",
            why.lines().next().unwrap_or(why)
        )],
    }
}

/// What becomes of each listed worker, before targets, pulls and starts.
struct Sorted<'a> {
    /// Evictions and expiries, in list order: what the owner waits for comes first.
    actions: Vec<Action>,
    removals: Vec<Action>,
    /// Workers that stay (running, or paused and resuming), oldest first.
    staying: Vec<&'a Worker>,
    held_paused: u32,
    /// Workers being stopped for their disk use: their scratch holds its share until they
    /// are gone, so no replacement starts before (the owner's disk share holds).
    held_for_disk: usize,
    notes: Vec<String>,
}

fn sort_workers<'a>(supply: &Supply, obs: &Observed<'a>, now: DateTime<Utc>) -> Sorted<'a> {
    let mut out = Sorted {
        actions: Vec::new(),
        removals: Vec::new(),
        staying: Vec::new(),
        held_paused: 0,
        held_for_disk: 0,
        notes: Vec::new(),
    };
    let grace_s = supply.grace.as_secs();
    for w in obs.workers {
        if obs.in_flight.stopping.contains(&w.id) {
            if disk_reason(w, obs.scratch_use.get(&w.id)).is_some() {
                out.held_for_disk += 1;
            }
            continue;
        }
        let expired = w.die_at.is_some_and(|d| d <= now);
        if let Some(why) = disk_reason(w, obs.scratch_use.get(&w.id))
            && matches!(w.state, WorkerState::Running | WorkerState::Restarting)
        {
            out.actions
                .push(Action::stop(w, grace_s.min(DISK_STOP_GRACE_S), why));
            out.held_for_disk += 1;
            continue;
        }
        let graceful = || Action::stop(w, grace_s, Reason::Eviction(Evict::Graceful));
        let fast = || Action::kill(w, Reason::Eviction(Evict::Fast));
        match w.state {
            WorkerState::Exited | WorkerState::Dead | WorkerState::Created => {
                out.removals.push(Action::remove(w))
            }
            WorkerState::Removing => {}
            WorkerState::Unknown => out.notes.push(format!(
                "{} is in a state this pilotd does not know; left alone",
                w.name
            )),
            WorkerState::Running | WorkerState::Restarting if expired => out
                .actions
                .push(Action::stop(w, grace_s, Reason::PastDieAt)),
            WorkerState::Running | WorkerState::Restarting => match supply.evict {
                Evict::None => out.staying.push(w),
                Evict::Pause => out.actions.push(Action::pause(
                    w,
                    match supply.link {
                        LinkHold::Workers => Reason::Metered,
                        _ => Reason::Eviction(Evict::Pause),
                    },
                )),
                Evict::Graceful => out.actions.push(graceful()),
                Evict::Fast => out.actions.push(fast()),
            },
            WorkerState::Paused if expired => {
                out.actions.push(Action::kill(w, Reason::PausedPastDieAt))
            }
            WorkerState::Paused => match supply.evict {
                Evict::Pause => out.held_paused += 1,
                Evict::Graceful => {
                    out.actions.push(Action::unpause(w, Reason::ResumeToDrain));
                    out.actions.push(graceful());
                }
                Evict::Fast => out.actions.push(fast()),
                Evict::None if supply.allowed => out.staying.push(w),
                Evict::None => out.held_paused += 1,
            },
        }
    }
    out
}

/// Surplus workers (the target shrank: a policy reload, less memory) stop, newest first (they
/// have done the least work); paused ones that stay resume.
fn fit_to_target(supply: &Supply, staying: &mut Vec<&Worker>, actions: &mut Vec<Action>) {
    let target = supply.workers as usize;
    while staying.len() > target {
        let Some(w) = staying.pop() else { break };
        let why = Reason::Surplus {
            target: supply.workers,
        };
        actions.push(Action::stop(w, supply.grace.as_secs(), why));
    }
    for w in staying.iter().filter(|w| w.state == WorkerState::Paused) {
        actions.push(Action::unpause(w, Reason::HostFree));
    }
}

/// The workers that stay, each held to the cap in force (or given back its whole share): a
/// `Limit` for each whose quota the engine holds otherwise. A worker whose quota is not known
/// is left as it is; so is one of an older pilotd (no share on its label) when no cap holds.
fn cap_live(supply: &Supply, staying: &[&Worker]) -> Vec<Action> {
    let share = i64::from(supply.per_worker.cpus.max(1)) * 1_000_000_000;
    staying
        .iter()
        .filter_map(|w| {
            let now = w.nano_cpus?;
            let (target, why) = match &supply.cpu_cap {
                Some(cap) => (
                    cap.nano_for(w.share_nano_cpus.unwrap_or(share)),
                    Reason::CpuCap,
                ),
                None => (w.share_nano_cpus?, Reason::WholeShare),
            };
            (now != target).then(|| Action::Limit {
                id: w.id.clone(),
                name: w.name.clone(),
                nano_cpus: target,
                why,
            })
        })
        .collect()
}

/// A new digest is pulled in the download season (`Supply::downloads`: the schedule's, on a
/// link not held and with room under the data cap) while workers may run, or while either
/// only the schedule holds workers back (the window opens soon) or the site lets pulls use
/// the owner's bandwidth.
fn pull_new_image(supply: &Supply, obs: &Observed<'_>, s: &WorkerSettings, p: &mut Plan) {
    let ImageState::NeedsPull { repository, digest } = obs.image else {
        return;
    };
    if obs.in_flight.pulling.is_some() {
        return;
    }
    let only_the_schedule = supply.causes.iter().all(|c| *c == Cause::OutsideSchedule);
    // A start held for the fleet's spread holds its pull too: pulled at the host's turn, the
    // fleet's pulls spread like its starts.
    let held = supply.causes.contains(&Cause::FleetSplay);
    // `downloads` holds for a machine allowed to compute too: near the owner's data cap,
    // workers on the image here may start while a new image would not fit.
    if supply.downloads
        && (supply.allowed || (!held && (only_the_schedule || s.pull_while_owner_present)))
    {
        p.actions.push(Action::Pull {
            repository: repository.clone(),
            digest: digest.clone(),
        });
    } else {
        let why = if supply.link != LinkHold::Nothing {
            "the network is metered"
        } else if supply.causes.contains(&Cause::DataCap) {
            "the data cap leaves no room for it"
        } else if held {
            "this host's turn in the fleet's spread has not come"
        } else if supply.downloads {
            "no downloads while the owner needs the machine"
        } else {
            "no downloads until shortly before the next window opens"
        };
        p.notes
            .push(format!("new image {repository}@{digest} waits: {why}"));
    }
}

/// The shared GPUs (indices `0..workers × per-worker GPUs`, the host's first ones) that no
/// worker still here holds, lowest first (pure).
fn free_gpus(supply: &Supply, workers: &[Worker]) -> Vec<u32> {
    let total = supply.workers.saturating_mul(supply.per_worker.gpus);
    (0..total)
        .filter(|id| {
            !workers
                .iter()
                .any(|w| !w.state.is_finished() && w.gpus.contains(id))
        })
        .collect()
}

/// Starts `missing` workers, at most `max_starts_per_cycle`, when the back-off allows and the
/// image is here; otherwise says why not.
fn start_missing(
    supply: &Supply,
    obs: &Observed<'_>,
    s: &WorkerSettings,
    now: DateTime<Utc>,
    missing: usize,
    p: &mut Plan,
) {
    if obs.backoff.holds(now) {
        p.notes.push(format!(
            "back-off: no start before {} after {} failure(s){}",
            rfc3339(obs.backoff.not_before.unwrap_or(now)),
            obs.backoff.failures,
            obs.backoff
                .last_outcome
                .as_ref()
                .map(|o| format!(" (last: {o})"))
                .unwrap_or_default()
        ));
        return;
    }
    match obs.image {
        ImageState::Ready { digest, pinned } => {
            let n = missing.min(s.max_starts_per_cycle as usize);
            let mut free = free_gpus(supply, obs.workers);
            for i in 0..n {
                let gpus = supply.per_worker.gpus as usize;
                let ids: Vec<u32> = free.drain(..gpus.min(free.len())).collect();
                if ids.len() < gpus {
                    // Every shared GPU is held by a worker that is still here.
                    p.notes.push(format!(
                        "no GPU free for another worker ({} shared, all in use)",
                        supply.workers.saturating_mul(supply.per_worker.gpus)
                    ));
                    break;
                }
                let mut spec = worker_spec(supply, s, digest, pinned, now, i, obs.free_hours);
                if let Some(cap) = &supply.cpu_cap {
                    spec.nano_cpus = cap.nano_for(spec.nano_cpus);
                }
                spec.labels
                    .insert(labels::GPUS.to_string(), gpus_label(&ids));
                spec.gpu_ids = ids;
                p.actions.push(Action::Start {
                    spec: Box::new(spec),
                });
            }
            if n < missing {
                p.notes.push(format!(
                    "{} more worker(s) start in later cycles (max_starts_per_cycle = {})",
                    missing - n,
                    s.max_starts_per_cycle
                ));
            }
        }
        ImageState::NeedsPull { digest, .. } | ImageState::Pulling { digest } => p
            .notes
            .push(format!("workers start once {digest} is pulled")),
        ImageState::Unavailable { reason } => {
            p.notes.push(format!("no worker can start: {reason}"))
        }
    }
}

/// Why a worker's disk use ends it: a full scratch (its image filesystem), or a measured
/// scratch dir over its share. A worker of an older pilotd has no recorded share.
fn disk_reason(w: &Worker, used: Option<&ScratchUse>) -> Option<Reason> {
    let (share_kib, u) = (w.disk_kib?, used?);
    if u.full {
        Some(Reason::ScratchFull { share_kib })
    } else if u.used_kib > share_kib {
        Some(Reason::DiskShareExceeded {
            used_kib: u.used_kib,
            share_kib,
        })
    } else {
        None
    }
}

pub(crate) mod report;
mod spec;
pub(crate) use spec::worker_spec;

#[cfg(test)]
mod tests;
