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
//! - A new image digest is pulled only while workers may run (or when the site allows pulls
//!   while the owner is present): downloads obey the schedule.

use crate::config::Evict;
use crate::config::template;
use crate::volunteer::outcome::{Outcome, StartBackoff};
use crate::volunteer::policy::Supply;
use crate::volunteer::settings::WorkerSettings;
use crate::volunteer::worker::ImageState;
use crate::volunteer::worker::{Worker, WorkerSpec, WorkerState, labels};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
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
}

impl Reason {
    /// The eviction mode when this is an eviction, for the `evictions` metric.
    pub fn eviction(self) -> Option<Evict> {
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
pub enum Action {
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
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Action::Pause { why, .. }
            | Action::Unpause { why, .. }
            | Action::Stop { why, .. }
            | Action::Kill { why, .. } => Some(*why),
            Action::Remove { .. } | Action::Pull { .. } | Action::Start { .. } => None,
        }
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
            Action::Remove { name, outcome, .. } => match outcome {
                Some(o) => write!(f, "remove {name} ({o})"),
                None => write!(f, "remove {name}"),
            },
            Action::Pull { repository, digest } => write!(f, "pull {repository}@{digest}"),
            Action::Start { spec } => write!(
                f,
                "start {} ({} CPU, {} MiB, image {})",
                spec.name,
                spec.nano_cpus / 1_000_000_000,
                spec.memory_bytes >> 20,
                spec.image_pinned
            ),
        }
    }
}

/// Operations the daemon has started and not finished (long graceful stops, pulls), so a
/// cycle does not issue them twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InFlight {
    pub stopping: BTreeSet<String>,
    pub pulling: Option<String>,
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
}

/// The actions of one cycle and why nothing more is done.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub notes: Vec<String>,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn whole_hours(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    ((to - from).num_seconds() / 3600).max(0)
}

/// Plans one cycle.
pub fn plan(supply: &Supply, obs: Observed<'_>, s: &WorkerSettings, now: DateTime<Utc>) -> Plan {
    let mut evictions = Vec::new();
    let mut removals = Vec::new();
    let mut notes = Vec::new();
    let grace_s = supply.grace.as_secs();
    // Workers that stay (running, or paused and resuming/held), oldest first.
    let mut staying: Vec<&Worker> = Vec::new();
    let mut held_paused = 0u32;

    for w in obs.workers {
        if obs.in_flight.stopping.contains(&w.id) {
            continue;
        }
        let expired = w.die_at.is_some_and(|d| d <= now);
        let id = w.id.clone();
        let name = w.name.clone();
        match w.state {
            WorkerState::Exited | WorkerState::Dead => removals.push(Action::Remove {
                id,
                name,
                outcome: Some(Outcome::from_exit(w.exit_code, w.oom_killed)),
            }),
            WorkerState::Created => removals.push(Action::Remove {
                id,
                name,
                outcome: None,
            }),
            WorkerState::Removing => {}
            WorkerState::Unknown => notes.push(format!(
                "{name} is in a state this pilotd does not know; left alone"
            )),
            WorkerState::Running | WorkerState::Restarting => {
                if expired {
                    evictions.push(Action::Stop {
                        id,
                        name,
                        grace_s,
                        why: Reason::PastDieAt,
                    });
                    continue;
                }
                match supply.evict {
                    Evict::None => staying.push(w),
                    Evict::Pause => evictions.push(Action::Pause {
                        id,
                        name,
                        why: Reason::Eviction(Evict::Pause),
                    }),
                    Evict::Graceful => evictions.push(Action::Stop {
                        id,
                        name,
                        grace_s,
                        why: Reason::Eviction(Evict::Graceful),
                    }),
                    Evict::Fast => evictions.push(Action::Kill {
                        id,
                        name,
                        why: Reason::Eviction(Evict::Fast),
                    }),
                }
            }
            WorkerState::Paused => {
                if expired {
                    evictions.push(Action::Kill {
                        id,
                        name,
                        why: Reason::PausedPastDieAt,
                    });
                    continue;
                }
                match supply.evict {
                    Evict::Pause => held_paused += 1,
                    Evict::Graceful => {
                        evictions.push(Action::Unpause {
                            id: id.clone(),
                            name: name.clone(),
                            why: Reason::ResumeToDrain,
                        });
                        evictions.push(Action::Stop {
                            id,
                            name,
                            grace_s,
                            why: Reason::Eviction(Evict::Graceful),
                        });
                    }
                    Evict::Fast => evictions.push(Action::Kill {
                        id,
                        name,
                        why: Reason::Eviction(Evict::Fast),
                    }),
                    Evict::None if supply.allowed => staying.push(w),
                    Evict::None => held_paused += 1,
                }
            }
        }
    }

    let mut actions = evictions;
    actions.extend(removals);

    if held_paused > 0 {
        notes.push(format!("{held_paused} worker(s) stay paused"));
    }

    if supply.allowed {
        // Surplus: the target shrank (policy reload, less memory). Stop the newest.
        let target = supply.workers as usize;
        while staying.len() > target {
            let Some(w) = staying.pop() else { break };
            actions.push(Action::Stop {
                id: w.id.clone(),
                name: w.name.clone(),
                grace_s,
                why: Reason::Surplus {
                    target: supply.workers,
                },
            });
        }
        for w in &staying {
            if w.state == WorkerState::Paused {
                actions.push(Action::Unpause {
                    id: w.id.clone(),
                    name: w.name.clone(),
                    why: Reason::HostFree,
                });
            }
        }
    }

    // The image: pull a new digest while downloads are allowed.
    let may_download = supply.allowed || s.pull_while_owner_present;
    match obs.image {
        ImageState::NeedsPull { repository, digest } if obs.in_flight.pulling.is_none() => {
            if may_download {
                actions.push(Action::Pull {
                    repository: repository.clone(),
                    digest: digest.clone(),
                });
            } else {
                notes.push(format!(
                    "new image {repository}@{digest} waits: no downloads while workers may not run"
                ));
            }
        }
        _ => {}
    }

    let missing = (supply.workers as usize).saturating_sub(staying.len());
    if supply.allowed && missing > 0 {
        if obs.backoff.holds(now) {
            notes.push(format!(
                "back-off: no start before {} after {} failure(s){}",
                rfc3339(obs.backoff.not_before.unwrap_or(now)),
                obs.backoff.failures,
                obs.backoff
                    .last_outcome
                    .as_ref()
                    .map(|o| format!(" (last: {o})"))
                    .unwrap_or_default()
            ));
        } else {
            match obs.image {
                ImageState::Ready { digest, pinned } => {
                    let n = missing.min(s.max_starts_per_cycle as usize);
                    for i in 0..n {
                        actions.push(Action::Start {
                            spec: Box::new(worker_spec(
                                supply,
                                s,
                                digest,
                                pinned,
                                now,
                                i,
                                obs.free_hours,
                            )),
                        });
                    }
                    if n < missing {
                        notes.push(format!(
                            "{} more worker(s) start in later cycles (max_starts_per_cycle = {})",
                            missing - n,
                            s.max_starts_per_cycle
                        ));
                    }
                }
                ImageState::NeedsPull { digest, .. } | ImageState::Pulling { digest } => {
                    notes.push(format!("workers start once {digest} is pulled"))
                }
                ImageState::Unavailable { reason } => {
                    notes.push(format!("no worker can start: {reason}"))
                }
            }
        }
    }
    Plan { actions, notes }
}

/// The spec of a new worker: resources from the decision, env templated, labels that let a
/// restarted pilotd rebuild everything.
pub fn worker_spec(
    supply: &Supply,
    s: &WorkerSettings,
    digest: &str,
    pinned: &str,
    now: DateTime<Utc>,
    index: usize,
    free_hours: Option<u64>,
) -> WorkerSpec {
    let r = supply.per_worker;
    let name = format!(
        "{}{}-{index}",
        s.name_prefix(),
        now.format("%Y%m%d-%H%M%S%3f")
    );
    let spec_hash = spec_hash(supply, s, digest);
    let mut values: BTreeMap<&'static str, String> = BTreeMap::new();
    values.insert("cpus", r.cpus.to_string());
    values.insert("memory_mib", r.memory_mib.to_string());
    values.insert("disk_kib", r.disk_kib.to_string());
    values.insert("gpus", r.gpus.to_string());
    values.insert(
        "idle_minutes",
        s.idle_timeout.as_secs().div_ceil(60).to_string(),
    );
    values.insert("idle_seconds", s.idle_timeout.as_secs().to_string());
    let opt =
        |t: Option<DateTime<Utc>>, f: fn(DateTime<Utc>) -> String| t.map(f).unwrap_or_default();
    values.insert("accept_until", opt(supply.accept_until, rfc3339));
    values.insert(
        "accept_until_unix",
        opt(supply.accept_until, |t| t.timestamp().to_string()),
    );
    values.insert("die_at", opt(supply.die_at, rfc3339));
    values.insert(
        "die_at_unix",
        opt(supply.die_at, |t| t.timestamp().to_string()),
    );
    values.insert(
        "hours_left",
        supply
            .die_at
            .map(|d| whole_hours(now, d).to_string())
            .unwrap_or_default(),
    );
    values.insert(
        "accept_hours",
        supply
            .accept_until
            .map(|a| whole_hours(now, a).to_string())
            .unwrap_or_default(),
    );
    values.insert(
        "retire_hours",
        match (supply.accept_until, supply.die_at) {
            (Some(a), Some(d)) => whole_hours(a, d).to_string(),
            _ => String::new(),
        },
    );
    values.insert("worker_name", name.clone());
    values.insert("instance", s.instance.clone());
    values.insert("token_path", s.token_mount.display().to_string());
    values.insert("scratch_path", s.scratch_mount.display().to_string());
    values.insert(
        "free_hours",
        free_hours.map(|h| h.to_string()).unwrap_or_default(),
    );
    let env = s
        .env
        .iter()
        .map(|(k, v)| (k.clone(), template::render(v, &values)))
        .collect();

    let mut l = BTreeMap::new();
    l.insert(labels::MANAGED.to_string(), "true".to_string());
    l.insert(labels::INSTANCE.to_string(), s.instance.clone());
    l.insert(labels::CREATED.to_string(), rfc3339(now));
    if let Some(a) = supply.accept_until {
        l.insert(labels::ACCEPT_UNTIL.to_string(), rfc3339(a));
    }
    if let Some(d) = supply.die_at {
        l.insert(labels::DIE_AT.to_string(), rfc3339(d));
    }
    l.insert(labels::IMAGE_DIGEST.to_string(), digest.to_string());
    l.insert(labels::SPEC_HASH.to_string(), spec_hash);
    l.insert(labels::IMAGE.to_string(), s.image.clone());

    WorkerSpec {
        image: s.image.clone(),
        image_pinned: pinned.to_string(),
        image_digest: digest.to_string(),
        labels: l,
        env,
        nano_cpus: i64::from(r.cpus.max(1)) * 1_000_000_000,
        gpus: r.gpus,
        memory_bytes: i64::try_from(r.memory_mib.saturating_mul(1 << 20)).unwrap_or(i64::MAX),
        pids_limit: s.pids_limit,
        token_file: s.token_file.clone(),
        token_mount: s.token_mount.clone(),
        scratch_dir: s.scratch_root.join(&name),
        scratch_mount: s.scratch_mount.clone(),
        cvmfs: s.cvmfs.clone(),
        cap_add: s.cap_add.clone(),
        user: s.user.clone(),
        network: s.network.clone(),
        name,
    }
}

/// A short hash of everything that shapes a worker except time and name: a changed hash tells
/// `status` which workers still run an older configuration.
pub fn spec_hash(supply: &Supply, s: &WorkerSettings, digest: &str) -> String {
    let r = supply.per_worker;
    let mut h = Sha256::new();
    let canonical = format!(
        "{digest}\n{} {} {} {}\n{:?}\n{:?} {:?} {:?} {:?} {:?} {:?} {} {}",
        r.cpus,
        r.memory_mib,
        r.disk_kib,
        r.gpus,
        s.env,
        s.token_file,
        s.token_mount,
        s.scratch_mount,
        s.cvmfs,
        s.cap_add,
        s.user,
        s.pids_limit,
        s.network.as_deref().unwrap_or("")
    );
    h.update(canonical.as_bytes());
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Backoff;
    use crate::volunteer::policy::Resources;
    use chrono::TimeZone;
    use pilot_contract::PilotExit;
    use std::path::PathBuf;
    use std::time::Duration;

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap()
    }

    fn supply(allowed: bool, workers: u32, evict: Evict) -> Supply {
        Supply {
            allowed,
            workers: if allowed { workers } else { 0 },
            per_worker: Resources {
                cpus: 2,
                memory_mib: 4096,
                disk_kib: 10 << 20,
                gpus: 0,
            },
            accept_until: Some(t(23, 0)),
            die_at: Some(t(23, 59)),
            evict,
            grace: Duration::from_secs(600),
            reasons: vec![],
            causes: vec![],
            next_change: None,
            owner_busy_since: None,
            host_free_since: None,
        }
    }

    fn settings() -> WorkerSettings {
        WorkerSettings {
            instance: "test".into(),
            image: "127.0.0.1:5000/pilotd-test/worker:1".into(),
            max_starts_per_cycle: 1,
            idle_timeout: Duration::from_secs(1200),
            env: BTreeMap::from([
                ("NUM_CPUS".to_string(), "{cpus}".to_string()),
                (
                    "ACCEPT".to_string(),
                    "{accept_hours}h/{retire_hours}h".to_string(),
                ),
                ("NAME".to_string(), "{worker_name}".to_string()),
                ("LIT".to_string(), "{{cpus}}".to_string()),
            ]),
            token_file: Some("/etc/pilotd/pool.token".into()),
            token_mount: "/etc/pilotd/token".into(),
            scratch_root: "/var/lib/pilotd/scratch".into(),
            scratch_mount: "/pilot".into(),
            cvmfs: None,
            cap_add: vec![],
            pids_limit: 4096,
            user: None,
            network: None,
            pull_while_owner_present: false,
            backoff: Backoff::new(Duration::from_secs(60), Duration::from_secs(3600)),
        }
    }

    fn worker(id: &str, state: WorkerState, created: DateTime<Utc>) -> Worker {
        Worker {
            id: id.into(),
            name: format!("pilotd-test-{id}"),
            state,
            created: Some(created),
            accept_until: Some(t(23, 0)),
            die_at: Some(t(23, 59)),
            image: "127.0.0.1:5000/pilotd-test/worker:1".into(),
            image_digest: "sha256:aa".into(),
            spec_hash: String::new(),
            exit_code: None,
            finished_at: None,
            oom_killed: false,
        }
    }

    fn ready() -> ImageState {
        ImageState::Ready {
            digest: "sha256:aa".into(),
            pinned: "127.0.0.1:5000/pilotd-test/worker@sha256:aa".into(),
        }
    }

    /// Actions in a compact form: "start", "stop ID", "pause ID", …
    fn short(p: &Plan) -> Vec<String> {
        p.actions
            .iter()
            .map(|a| match a {
                Action::Pause { id, .. } => format!("pause {id}"),
                Action::Unpause { id, .. } => format!("unpause {id}"),
                Action::Stop { id, .. } => format!("stop {id}"),
                Action::Kill { id, .. } => format!("kill {id}"),
                Action::Remove { id, .. } => format!("remove {id}"),
                Action::Pull { digest, .. } => format!("pull {digest}"),
                Action::Start { .. } => "start".into(),
            })
            .collect()
    }

    struct Case {
        name: &'static str,
        supply: Supply,
        workers: Vec<Worker>,
        image: ImageState,
        backoff: StartBackoff,
        stopping: &'static [&'static str],
        max_starts: u32,
        pull_while_owner_present: bool,
        now: DateTime<Utc>,
        want: &'static [&'static str],
    }

    fn case(
        name: &'static str,
        supply: Supply,
        workers: Vec<Worker>,
        want: &'static [&'static str],
    ) -> Case {
        Case {
            name,
            supply,
            workers,
            image: ready(),
            backoff: StartBackoff::default(),
            stopping: &[],
            max_starts: 1,
            pull_while_owner_present: false,
            now: t(20, 0),
            want,
        }
    }

    #[test]
    fn plans() {
        use WorkerState::*;
        let old = t(19, 0);
        let new = t(19, 30);
        let mut exited = worker("e", Exited, old);
        exited.exit_code = Some(10);
        let mut expired = worker("x", Running, old);
        expired.die_at = Some(t(19, 59));
        let mut expired_paused = worker("xp", Paused, old);
        expired_paused.die_at = Some(t(20, 0));
        let cases = vec![
            case(
                "start to target, one per cycle",
                supply(true, 2, Evict::None),
                vec![],
                &["start"],
            ),
            Case {
                max_starts: 3,
                ..case(
                    "start several when allowed to",
                    supply(true, 2, Evict::None),
                    vec![],
                    &["start", "start"],
                )
            },
            case(
                "at target: nothing",
                supply(true, 1, Evict::None),
                vec![worker("a", Running, old)],
                &[],
            ),
            case(
                "evict pause",
                supply(false, 0, Evict::Pause),
                vec![worker("a", Running, old), worker("b", Paused, old)],
                &["pause a"],
            ),
            case(
                "evict graceful; a paused worker resumes to drain",
                supply(false, 0, Evict::Graceful),
                vec![worker("a", Running, old), worker("b", Paused, old)],
                &["stop a", "unpause b", "stop b"],
            ),
            case(
                "evict fast",
                supply(false, 0, Evict::Fast),
                vec![worker("a", Running, old), worker("b", Paused, old)],
                &["kill a", "kill b"],
            ),
            case(
                "not allowed, no eviction: keep running, keep paused",
                supply(false, 0, Evict::None),
                vec![worker("a", Running, old), worker("b", Paused, old)],
                &[],
            ),
            case(
                "host free again: resume paused",
                supply(true, 2, Evict::None),
                vec![worker("a", Running, old), worker("b", Paused, new)],
                &["unpause b"],
            ),
            case(
                "past die_at: stop; paused past die_at: kill; then replace",
                supply(true, 2, Evict::None),
                vec![expired, expired_paused],
                &["stop x", "kill xp", "start"],
            ),
            case(
                "exited: remove and record",
                supply(true, 1, Evict::None),
                vec![exited.clone(), worker("a", Running, old)],
                &["remove e"],
            ),
            case(
                "created, never started: remove",
                supply(true, 1, Evict::None),
                vec![worker("c", Created, old), worker("a", Running, old)],
                &["remove c"],
            ),
            case(
                "surplus: stop the newest",
                supply(true, 1, Evict::None),
                vec![worker("a", Running, old), worker("b", Running, new)],
                &["stop b"],
            ),
            Case {
                stopping: &["a"],
                ..case(
                    "a stop in flight is not repeated",
                    supply(false, 0, Evict::Graceful),
                    vec![worker("a", Running, old)],
                    &[],
                )
            },
            Case {
                stopping: &["a"],
                ..case(
                    "a worker being stopped does not count",
                    supply(true, 1, Evict::None),
                    vec![worker("a", Running, old)],
                    &["start"],
                )
            },
            Case {
                backoff: StartBackoff {
                    failures: 2,
                    not_before: Some(t(20, 1)),
                    last_outcome: Some(Outcome::Exited(PilotExit::Idle)),
                },
                ..case(
                    "back-off holds starts",
                    supply(true, 1, Evict::None),
                    vec![],
                    &[],
                )
            },
            Case {
                backoff: StartBackoff {
                    failures: 2,
                    not_before: Some(t(20, 0)),
                    last_outcome: Some(Outcome::Exited(PilotExit::Idle)),
                },
                ..case(
                    "back-off over",
                    supply(true, 1, Evict::None),
                    vec![],
                    &["start"],
                )
            },
            Case {
                image: ImageState::NeedsPull {
                    repository: "r/w".into(),
                    digest: "sha256:bb".into(),
                },
                ..case(
                    "new digest: pull first, start later",
                    supply(true, 1, Evict::None),
                    vec![],
                    &["pull sha256:bb"],
                )
            },
            Case {
                image: ImageState::NeedsPull {
                    repository: "r/w".into(),
                    digest: "sha256:bb".into(),
                },
                ..case(
                    "no download while workers may not run",
                    supply(false, 0, Evict::Pause),
                    vec![],
                    &[],
                )
            },
            Case {
                image: ImageState::NeedsPull {
                    repository: "r/w".into(),
                    digest: "sha256:bb".into(),
                },
                pull_while_owner_present: true,
                ..case(
                    "unless the site allows it",
                    supply(false, 0, Evict::Pause),
                    vec![],
                    &["pull sha256:bb"],
                )
            },
            Case {
                image: ImageState::Pulling {
                    digest: "sha256:bb".into(),
                },
                ..case(
                    "pull in flight: wait",
                    supply(true, 1, Evict::None),
                    vec![],
                    &[],
                )
            },
            Case {
                image: ImageState::Unavailable {
                    reason: "registry down".into(),
                },
                ..case(
                    "no image: no start, running ones unaffected",
                    supply(true, 2, Evict::None),
                    vec![worker("a", Running, old)],
                    &[],
                )
            },
        ];
        for c in cases {
            let mut s = settings();
            s.max_starts_per_cycle = c.max_starts;
            s.pull_while_owner_present = c.pull_while_owner_present;
            let in_flight = InFlight {
                stopping: c.stopping.iter().map(|x| x.to_string()).collect(),
                pulling: matches!(c.image, ImageState::Pulling { .. }).then(|| "sha256:bb".into()),
            };
            let p = plan(
                &c.supply,
                Observed {
                    workers: &c.workers,
                    in_flight: &in_flight,
                    backoff: &c.backoff,
                    image: &c.image,
                    free_hours: None,
                },
                &s,
                c.now,
            );
            assert_eq!(short(&p), c.want, "case: {} (notes: {:?})", c.name, p.notes);
        }
    }

    #[test]
    fn only_evictions_are_evictions() {
        let mut expired = worker("x", WorkerState::Running, t(19, 0));
        expired.die_at = Some(t(19, 59));
        let workers = vec![
            expired,
            worker("a", WorkerState::Running, t(19, 0)),
            worker("b", WorkerState::Running, t(19, 30)),
        ];
        let in_flight = InFlight::default();
        let backoff = StartBackoff::default();
        let image = ready();
        let obs = |workers| Observed {
            workers,
            in_flight: &in_flight,
            backoff: &backoff,
            image: &image,
            free_hours: None,
        };
        // The target shrank to one: the newest is a surplus, the expired one past die_at.
        let p = plan(
            &supply(true, 1, Evict::None),
            obs(&workers),
            &settings(),
            t(20, 0),
        );
        let reasons: Vec<Reason> = p.actions.iter().filter_map(Action::reason).collect();
        assert_eq!(
            reasons,
            vec![Reason::PastDieAt, Reason::Surplus { target: 1 }]
        );
        assert!(reasons.iter().all(|r| r.eviction().is_none()));
        // The owner is back: every running worker is evicted, and counted as such.
        let p = plan(
            &supply(false, 0, Evict::Fast),
            obs(&workers[1..]),
            &settings(),
            t(20, 0),
        );
        let modes: Vec<Evict> = p
            .actions
            .iter()
            .filter_map(|a| a.reason()?.eviction())
            .collect();
        assert_eq!(modes, vec![Evict::Fast, Evict::Fast]);
        assert_eq!(
            p.actions[0].to_string(),
            "kill pilotd-test-a (eviction: fast)"
        );
        let json = serde_json::to_value(&p.actions[0]).unwrap();
        assert_eq!(json["why"], "eviction: fast", "the JSON keeps the sentence");
    }

    #[test]
    fn a_start_spec_carries_limits_labels_and_templated_env() {
        let s = settings();
        let now = t(20, 0);
        let spec = worker_spec(
            &supply(true, 1, Evict::None),
            &s,
            "sha256:aa",
            "r/w@sha256:aa",
            now,
            0,
            None,
        );
        assert_eq!(spec.name, "pilotd-test-20261201-200000000-0");
        assert_eq!(spec.nano_cpus, 2_000_000_000);
        assert_eq!(spec.memory_bytes, 4096 << 20);
        assert_eq!(spec.env["NUM_CPUS"], "2");
        assert_eq!(
            spec.env["ACCEPT"], "3h/0h",
            "accept 20:00→23:00, retire 23:00→23:59"
        );
        assert_eq!(spec.env["NAME"], spec.name);
        assert_eq!(spec.env["LIT"], "{cpus}");
        assert!(
            spec.env.values().all(|v| !v.contains("pool.token")),
            "no token in env"
        );
        assert_eq!(spec.labels[labels::MANAGED], "true");
        assert_eq!(spec.labels[labels::INSTANCE], "test");
        assert_eq!(spec.labels[labels::DIE_AT], "2026-12-01T23:59:00Z");
        assert_eq!(spec.labels[labels::ACCEPT_UNTIL], "2026-12-01T23:00:00Z");
        assert_eq!(spec.labels[labels::CREATED], "2026-12-01T20:00:00Z");
        assert_eq!(spec.labels[labels::IMAGE_DIGEST], "sha256:aa");
        assert_eq!(spec.labels[labels::SPEC_HASH].len(), 16);
        assert_eq!(
            spec.scratch_dir,
            PathBuf::from("/var/lib/pilotd/scratch").join(&spec.name)
        );
        let other = worker_spec(
            &supply(true, 1, Evict::None),
            &s,
            "sha256:bb",
            "r/w@sha256:bb",
            now,
            0,
            None,
        );
        assert_ne!(
            spec.labels[labels::SPEC_HASH],
            other.labels[labels::SPEC_HASH]
        );
    }
}
