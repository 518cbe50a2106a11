//! The owner's policy engine, pure: `(Policy, HostSnapshot, limits, now) -> Supply`.

pub(crate) mod calendar;
pub(crate) mod data;
pub mod schedule;

use crate::decide::comfort::{self, CpuCap, Quiet};
use crate::snapshot::{HostSnapshot, Session, Sessions, Throttle, UseKind};
use crate::splay::Splay;
use calendar::Period;
use chrono::{DateTime, Utc};
use pilotd_core::config::policy::{BatteryRule, MeteredRule, SessionRule, Window};
use pilotd_core::config::units::Share;
use pilotd_core::config::units::format_duration;
use pilotd_core::config::{Evict, Policy};
use pilotd_core::horizon::{after, before};
use serde::Serialize;
use std::time::Duration;

/// Site limits the policy engine needs from pilotd.toml.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// No worker lives longer than this, whatever the schedule says.
    pub max_lifetime: Duration,
    /// When the host usually stops being free (learned history), if the site asked to use it.
    pub likely_free_until: Option<DateTime<Utc>>,
    /// This host's place in the fleet's spread (`splay`): the first start after a window
    /// opens or pilotd starts, and a pre-window pull, wait for its offset.
    pub splay: Splay,
    /// When this pilotd started (the daemon knows; a one-shot `plan` does not).
    pub started: Option<DateTime<Utc>>,
    /// The data used in the caps' periods (the contribution ledger; `None`: not known, no
    /// cap judged).
    pub data: Option<data::DataUsed>,
}

/// Resources of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Resources {
    pub cpus: u32,
    pub memory_mib: u64,
    pub disk_kib: u64,
    pub gpus: u32,
}

/// Why a decision is what it is, as a stable name (for metrics, logs and scripts); `reasons`
/// says the same in sentences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    OutsideSchedule,
    GuardBand,
    Snoozed,
    SessionsUnknown,
    OwnerPresent,
    Sleeping,
    OnBattery,
    ExclusiveProcess,
    OwnerCpuHigh,
    OwnerCpuEvict,
    WaitingFreeFor,
    TooLittleTime,
    NoRoom,
    /// Free, but this host's turn in the fleet's spread has not come (`splay`).
    FleetSplay,
    /// The machine's link is metered (NetworkManager) and the owner's `on_metered` holds
    /// pilotd's traffic back.
    Metered,
    /// The owner's data cap of the day or the month is reached, or nearly
    /// (`[share] data_per_day`, `data_per_month`).
    DataCap,
    Free,
    /// Over the owner's `max_temperature` or `max_fan` with the CPU quota at its lowest step:
    /// the workers are paused (`comfort`).
    Comfort,
}

impl Cause {
    /// The owner is here or the host is busy: what the availability history counts as not
    /// free (the schedule, the guard band and the latches are about the policy, not the host).
    pub(crate) fn owner_or_host_busy(self) -> bool {
        matches!(
            self,
            Cause::Snoozed
                | Cause::OwnerPresent
                | Cause::SessionsUnknown
                | Cause::Sleeping
                | Cause::OnBattery
                | Cause::ExclusiveProcess
                | Cause::OwnerCpuHigh
                | Cause::OwnerCpuEvict
        )
    }

    /// The owner was there: logged in and active or using the machine without typing, busy on
    /// the CPU, running a program that wants the machine alone, or asking for it (a snooze).
    /// What the contribution counts as "the owner was there"; not a sleeping machine, a
    /// battery or sessions pilotd cannot see.
    pub(crate) fn owner_there(self) -> bool {
        matches!(
            self,
            Cause::OwnerPresent
                | Cause::Snoozed
                | Cause::OwnerCpuHigh
                | Cause::OwnerCpuEvict
                | Cause::ExclusiveProcess
        )
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cause::OutsideSchedule => "outside_schedule",
            Cause::GuardBand => "guard_band",
            Cause::Snoozed => "snoozed",
            Cause::SessionsUnknown => "sessions_unknown",
            Cause::OwnerPresent => "owner_present",
            Cause::Sleeping => "sleeping",
            Cause::OnBattery => "on_battery",
            Cause::ExclusiveProcess => "exclusive_process",
            Cause::OwnerCpuHigh => "owner_cpu_high",
            Cause::OwnerCpuEvict => "owner_cpu_evict",
            Cause::WaitingFreeFor => "waiting_free_for",
            Cause::TooLittleTime => "too_little_time",
            Cause::NoRoom => "no_room",
            Cause::FleetSplay => "fleet_splay",
            Cause::Metered => "metered",
            Cause::DataCap => "data_cap",
            Cause::Free => "free",
            Cause::Comfort => "comfort",
        }
    }
}

/// The decision for one instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Supply {
    /// May new workers start (or paused ones resume)?
    pub allowed: bool,
    /// Target number of workers (0 when not allowed).
    pub workers: u32,
    pub per_worker: Resources,
    /// Workers accept no new job after this instant.
    pub accept_until: Option<DateTime<Utc>>,
    /// Workers must be gone by this instant.
    pub die_at: Option<DateTime<Utc>>,
    /// What to do with running workers now.
    pub evict: Evict,
    /// How long a graceful eviction may take.
    #[serde(skip)]
    pub grace: Duration,
    /// Short human sentences, most important first.
    pub reasons: Vec<String>,
    /// The same, as stable names, in the same order.
    pub causes: Vec<Cause>,
    /// What pilotd can and cannot see, said after the reasons: where the sessions came
    /// from, who is logged in but away and why. They change no decision.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The next instant at which this decision may change on its own (clock only).
    pub next_change: Option<DateTime<Utc>>,
    /// The schedule lets a new worker image be downloaded: an open period (before its guard
    /// band), or the next one opens within `PREFETCH_LEAD` (less this host's pull delay, so
    /// the fleet's pulls spread over it). Never while the machine is closed for longer: a
    /// pull then would use the owner's bandwidth for nothing.
    pub downloads: bool,
    /// Latch state to carry into the next snapshot.
    pub owner_busy_since: Option<DateTime<Utc>>,
    pub host_free_since: Option<DateTime<Utc>>,
    /// The comfort throttle's position, to carry likewise (`comfort`); absent while it
    /// lowers nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Throttle>,
    /// The CPU cap running workers are held to and new ones start under, and why: the
    /// throttle's step, quiet hours. Absent when the workers have their whole share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_cap: Option<CpuCap>,
    /// What a metered link holds back (`causes` then holds `Metered`): the daemon fetches no
    /// manifest and asks the registry nothing while it holds anything.
    #[serde(skip)]
    pub link: LinkHold,
}

/// What the machine's metered link holds back this cycle, by the owner's `on_metered`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkHold {
    /// Nothing: the link is not metered, not known to be, or the owner ignores its price.
    #[default]
    Nothing,
    /// pilotd's downloads (image pulls, the manifest, the registry's check) and new workers;
    /// running workers go on as the other steps decided.
    Downloads,
    /// Downloads and new workers, and the running workers are paused for the link alone
    /// (`on_metered = "pause"`, nothing else asking more of them).
    Workers,
}

/// How long before a window opens a new image is fetched, so workers start on time.
pub(crate) const PREFETCH_LEAD: Duration = Duration::from_secs(30 * 60);

fn hm(t: DateTime<Utc>, p: &Policy) -> String {
    local(t, p, "%H:%M")
}

/// `hm` with seconds: a held start's instant is this host's own, to the second.
fn hms(t: DateTime<Utc>, p: &Policy) -> String {
    local(t, p, "%H:%M:%S")
}

/// `t` in the policy's zone, its time of day as `time` writes it.
fn local(t: DateTime<Utc>, p: &Policy, time: &str) -> String {
    if !pilotd_core::horizon::in_range(t) {
        // Far out of any real clock's reach (a saturated sum): local time may not exist.
        return t.format(&format!("%Y-%m-%d {time} UTC")).to_string();
    }
    let local = t.with_timezone(&p.timezone);
    local.format(&format!("%a {time} %Z")).to_string()
}

/// The owner's policy engine: `(Policy, HostSnapshot, limits, now) -> Supply`. May this
/// machine run workers now, how many, how big, until when, and why. Pure: no I/O, no clock.
///
/// The two latches (owner CPU busy since, host free since) arrive in the snapshot and leave in
/// the `Supply`, so the daemon carries them between cycles and a replay of a saved snapshot
/// decides exactly what the daemon decided.
///
/// Decides what the machine may do at `now`.
pub(crate) fn decide(p: &Policy, h: &HostSnapshot, limits: Limits, now: DateTime<Utc>) -> Supply {
    let mut f = Findings::default();
    let (die_at, downloads, opened) = schedule(p, limits, now, &mut f);
    snooze_and_sleep(p, h, now, &mut f);
    let away_notes = sessions(p, h, now, &mut f);
    battery_and_exclusive(p, h, &mut f);
    let owner_busy_since = owner_cpu(p, h, now, &mut f);
    // The machine's comfort pauses the workers without making the host "busy": once it is
    // cool again they resume at once, with no `free_for` to wait.
    let heat = comfort::throttle(&p.comfort, h.sensors.as_ref(), h.throttle, now);
    if heat.paused {
        f.evict = f.evict.max(Evict::Pause);
        f.say(Cause::Comfort, heat.why.clone());
    }
    f.next.extend(heat.next);
    let (quiet, quiet_next) = quiet_hours(p, h.cpus, now);
    f.next.extend(quiet_next);

    // The link's price is not the owner's presence: the latch "free since" runs on, so the
    // workers start at once when the link is free again, if the host was free meanwhile.
    let host_free_since = (!f.blocked).then(|| h.host_free_since.unwrap_or(now));
    let link = metered(p, h, &mut f);
    let room = data::cap(p, limits.data, now, &mut f);
    let accept_until = die_at.map(|d| before(d, p.longest_job));
    let share = split_share(p, h);
    let cpu_cap = comfort::cap(
        &heat,
        quiet,
        |ends| {
            ends.map(|e| format!(" until {}", hm(e, p)))
                .unwrap_or_default()
        },
        (h.cpus, share.0, u64::from(share.1.cpus) * 1000),
    );
    let allowed = !heat.paused
        && link == LinkHold::Nothing
        && room.workers
        && host_free_since.is_some_and(|since| {
            admit(
                p,
                limits,
                opened,
                now,
                since,
                (accept_until, die_at),
                share,
                &mut f,
            )
        });

    for why in room.pull_held {
        f.say(Cause::DataCap, why);
    }

    // They change no decision, but the owner should know what pilotd can see.
    let mut notes = away_notes;
    if p.sessions != SessionRule::Ignore {
        notes.push(sources(h));
    }

    let Findings {
        reasons,
        causes,
        evict,
        mut next,
        ..
    } = f;
    next.retain(|t| *t > now);
    Supply {
        allowed,
        workers: if allowed { share.0 } else { 0 },
        per_worker: share.1,
        accept_until,
        die_at,
        evict,
        grace: p.grace,
        reasons,
        notes,
        causes,
        next_change: next.into_iter().min(),
        downloads: downloads && link == LinkHold::Nothing && room.pull,
        owner_busy_since,
        host_free_since,
        throttle: heat.state,
        cpu_cap,
        link,
    }
}

/// What the steps of `decide` find, in the order they find it.
#[derive(Default)]
struct Findings {
    reasons: Vec<String>,
    causes: Vec<Cause>,
    /// The strongest eviction any step asks for.
    evict: Evict,
    /// No new worker may start.
    blocked: bool,
    /// Instants at which the decision may change.
    next: Vec<DateTime<Utc>>,
}

impl Findings {
    /// Something that keeps new workers from starting and treats running ones as `evict`
    /// says (`Evict::None`: leaves them be).
    fn block(&mut self, evict: Evict, cause: Cause, reason: String) {
        self.blocked = true;
        self.evict = self.evict.max(evict);
        self.say(cause, reason);
    }

    fn say(&mut self, cause: Cause, reason: String) {
        self.causes.push(cause);
        self.reasons.push(reason);
    }
}

/// The schedule: closed (with the prefetch before it opens), in the guard band before an open
/// period's end, or open until the earliest of that band, the lifetime cap and the learned
/// end of free time. Returns (die_at, downloads, when the open period began): the last only
/// when the fleet's spread needs it.
fn schedule(
    p: &Policy,
    limits: Limits,
    now: DateTime<Utc>,
    f: &mut Findings,
) -> (Option<DateTime<Utc>>, bool, Option<DateTime<Utc>>) {
    match calendar::period_at(&p.windows, &p.timezone, now) {
        Period::Closed { opens } => {
            let mut downloads = false;
            if let Some(o) = opens {
                // This host's pull comes at its offset into the download period.
                let from = after(
                    before(o, PREFETCH_LEAD),
                    limits.splay.pull_delay(PREFETCH_LEAD),
                );
                downloads = now >= from;
                f.next.push(from);
            }
            f.block(
                Evict::Graceful,
                Cause::OutsideSchedule,
                match opens {
                    Some(o) => {
                        format!("outside the schedule; next open period starts {}", hm(o, p))
                    }
                    None => "outside the schedule, and no window opens in the coming week".into(),
                },
            );
            f.next.extend(opens);
            (None, downloads, None)
        }
        Period::Open { ends } => {
            let opened = (!limits.splay.is_off())
                .then(|| calendar::opened_at(&p.windows, &p.timezone, now))
                .flatten();
            let lifetime_cap = limits
                .likely_free_until
                .filter(|t| *t > now)
                .map_or(after(now, limits.max_lifetime), |t| {
                    t.min(after(now, limits.max_lifetime))
                });
            let Some(end) = ends else {
                return (Some(lifetime_cap), true, opened);
            };
            let guard = before(end, p.evict_before_end);
            if now >= guard {
                f.block(
                    Evict::Graceful,
                    Cause::GuardBand,
                    format!(
                        "within {} of the open period's end at {}: workers must be gone",
                        format_duration(p.evict_before_end),
                        hm(end, p)
                    ),
                );
                f.next.push(end);
                (None, false, opened)
            } else {
                f.next.push(guard);
                (Some(guard.min(lifetime_cap)), true, opened)
            }
        }
    }
}

/// The owner said "not now" (`pilotd snooze`): as if they were here, until the instant. A
/// snooze that cannot be read may be one: as if they were here until it can be (the daemon
/// reads it again every cycle). The machine about to sleep counts as the owner's return too,
/// so workers make room within logind's delay; after the wake-up nothing starts before a
/// fresh observation (the latch "free since" restarts here).
fn snooze_and_sleep(p: &Policy, h: &HostSnapshot, now: DateTime<Utc>, f: &mut Findings) {
    if let Some(why) = &h.snooze_unreadable {
        f.block(
            p.on_return,
            Cause::Snoozed,
            format!("{why}; counted as snoozed until it can be read (`pilotd resume` removes it)"),
        );
    } else if let Some(until) = h.snoozed_until.filter(|u| *u > now) {
        f.block(
            p.on_return,
            Cause::Snoozed,
            format!("snoozed by the owner until {}", hm(until, p)),
        );
        f.next.push(until);
    }
    if h.sleeping {
        f.block(
            p.on_return,
            Cause::Sleeping,
            "the machine is going to sleep".into(),
        );
    }
}

/// The owner's sessions, by the policy's rule, and the uses that keep a user here without a
/// key typed (`in_use`); returns the notes on users counted away, and on uses not counted.
fn sessions(p: &Policy, h: &HostSnapshot, now: DateTime<Utc>, f: &mut Findings) -> Vec<String> {
    let mut away_notes: Vec<(String, String)> = Vec::new();
    match &h.sessions {
        // Logins do not matter to this owner, so not knowing them does not either.
        Sessions::Unknown(why) if p.sessions != SessionRule::Ignore => f.block(
            p.on_return,
            Cause::SessionsUnknown,
            format!("cannot tell who is logged in ({why}); assuming the owner is here"),
        ),
        Sessions::Known(list) if p.sessions != SessionRule::Ignore => {
            let mut present: Vec<&str> = Vec::new();
            // A session still within its lock's grace is in use, but not "not locked".
            let mut locked_within_grace: Vec<DateTime<Utc>> = Vec::new();
            for s in list.iter().filter(|s| counts(p, Some(&s.user), s.uid)) {
                let away = match p.sessions {
                    SessionRule::Active => away(s, h.input_idle_s, p, now, &mut f.next),
                    _ => None,
                };
                match away {
                    Some(why) => {
                        away_notes.push((s.user.clone(), format!("{} is away ({why})", s.user)))
                    }
                    None => {
                        present.push(s.user.as_str());
                        if p.sessions == SessionRule::Active {
                            locked_within_grace.extend(s.locked_since);
                        }
                    }
                }
            }
            present.sort_unstable();
            present.dedup();
            let (using, use_notes) = using(p, h, list, now);
            let using: Vec<&(String, Vec<UseKind>)> = using
                .iter()
                .filter(|(user, _)| !present.contains(&user.as_str()))
                .collect();
            // Someone using the machine is not away, whatever their sessions say.
            away_notes.retain(|(user, _)| !using.iter().any(|(u, _)| u == user));
            away_notes.extend(use_notes.into_iter().map(|n| (String::new(), n)));
            let mut said: Vec<String> = Vec::new();
            if !present.is_empty() {
                let how = match (p.sessions, locked_within_grace.iter().min()) {
                    (SessionRule::Active, None) => " and in use (not locked, not idle)".into(),
                    (SessionRule::Active, Some(_)) if h.lock_instants_unknown => format!(
                        " and in use (locked, since unknown: counted as in use for lock_grace, {})",
                        format_duration(p.lock_grace)
                    ),
                    (SessionRule::Active, Some(&since)) => format!(
                        " and in use (locked since {}, not yet for lock_grace, {})",
                        hm(since, p),
                        format_duration(p.lock_grace)
                    ),
                    _ => String::new(),
                };
                said.push(format!("{} logged in{how}", present.join(", ")));
            }
            said.extend(using.iter().map(|(user, kinds)| {
                let kinds: Vec<&str> = kinds.iter().map(|k| k.said()).collect();
                format!("{user} is using the machine: {}", kinds.join(", "))
            }));
            if !said.is_empty() {
                f.block(p.on_return, Cause::OwnerPresent, said.join("; "));
            }
        }
        Sessions::Known(_) | Sessions::Unknown(_) => {}
    }
    away_notes.into_iter().map(|(_, n)| n).collect()
}

/// Whether a user counts as the owner: not in `ignore_users`, not a system account. A user
/// without a name (or a uid) is judged by what is known.
fn counts(p: &Policy, user: Option<&str>, uid: Option<u32>) -> bool {
    user.is_none_or(|u| !p.ignore_users.iter().any(|i| i == u))
        && uid.is_none_or(|uid| uid >= p.system_uid_below)
}

/// Which counted users use the machine without typing, and by what (each kind once, in a
/// stable order); and notes on the uses not counted. A use counts when the policy's key for
/// its kind is on (`media_is_use`, `inhibitors_are_use`) and its user counts. A lock decides
/// between them:
/// - what one watches or listens to (sound playing, an idle inhibitor) does not count while
///   every session of its user at this machine has been locked for `lock_grace`: nobody
///   watches a locked screen, and music left playing in an empty office is no one there;
/// - what needs someone there (sound recorded, a camera) counts, locked or not: a call goes
///   on behind a locked screen, and workers would break up its sound.
fn using(
    p: &Policy,
    h: &HostSnapshot,
    list: &[Session],
    now: DateTime<Utc>,
) -> (Vec<(String, Vec<UseKind>)>, Vec<String>) {
    let mut by_user: Vec<(String, Vec<UseKind>)> = Vec::new();
    let mut notes = Vec::new();
    for u in &h.in_use {
        let on = match u.kind {
            UseKind::IdleInhibitor => p.inhibitors_are_use,
            UseKind::SoundPlaying | UseKind::SoundRecorded | UseKind::Camera => p.media_is_use,
        };
        if !on {
            continue;
        }
        let user = match (&u.user, u.uid) {
            (None, None) => {
                notes.push(format!(
                    "{}, but pilotd cannot tell for whom (no process it can see, nobody in front at the seat): not counted",
                    u.kind.said()
                ));
                continue;
            }
            _ if !counts(p, u.user.as_deref(), u.uid) => continue,
            (Some(name), _) => name.clone(),
            (None, Some(uid)) => format!("uid {uid}"),
        };
        let locked = |s: &&Session| {
            s.locked_since
                .is_some_and(|t| now >= after(t, p.lock_grace))
        };
        let at_desk: Vec<&Session> = list.iter().filter(|s| s.local && s.user == user).collect();
        let behind_lock = !at_desk.is_empty() && at_desk.iter().all(locked);
        if behind_lock && matches!(u.kind, UseKind::SoundPlaying | UseKind::IdleInhibitor) {
            notes.push(format!(
                "{user}'s screen is locked: that {} is not counted (a lock outweighs what is watched or heard; a call or a camera still counts)",
                u.kind.said()
            ));
            continue;
        }
        match by_user.iter_mut().find(|(n, _)| *n == user) {
            Some((_, kinds)) => kinds.push(u.kind),
            None => by_user.push((user, vec![u.kind])),
        }
    }
    for (_, kinds) in &mut by_user {
        kinds.sort_unstable();
        kinds.dedup();
    }
    by_user.sort();
    notes.sort();
    notes.dedup();
    (by_user, notes)
}

/// Whether a counted user uses the machine without typing, by the policy's rule (`using`):
/// what the presence timeline records as someone in use, so that a week's projection counts
/// a film or a call as the owner there, as the decision did.
pub(crate) fn someone_using(p: &Policy, h: &HostSnapshot, now: DateTime<Utc>) -> bool {
    let list = match &h.sessions {
        Sessions::Known(list) if p.sessions != SessionRule::Ignore => list.as_slice(),
        _ => return false,
    };
    !using(p, h, list, now).0.is_empty()
}

fn battery_and_exclusive(p: &Policy, h: &HostSnapshot, f: &mut Findings) {
    if h.on_battery && p.on_battery == BatteryRule::Stop {
        f.block(p.on_return, Cause::OnBattery, "running on battery".into());
    }
    if !h.exclusive_running.is_empty() {
        f.block(
            p.on_return,
            Cause::ExclusiveProcess,
            format!("{} running", h.exclusive_running.join(", ")),
        );
    }
}

/// A metered link (NetworkManager's `Metered`, yes or guess-yes) holds pilotd's traffic back
/// as the owner's `on_metered` says: no download and no new worker, and with "pause" the
/// running workers paused (unless another step asks more of them). A link not known to be
/// metered (no NetworkManager, an old snapshot) holds nothing.
fn metered(p: &Policy, h: &HostSnapshot, f: &mut Findings) -> LinkHold {
    if !h.metered.is_some_and(|m| m.is_metered()) {
        return LinkHold::Nothing;
    }
    let (hold, evict, reason) = match p.on_metered {
        MeteredRule::Ignore => return LinkHold::Nothing,
        MeteredRule::NoDownloads => (LinkHold::Downloads, Evict::None, "no downloads"),
        // Another step asking something of the workers holds them, not the link.
        MeteredRule::Pause => (
            match f.evict {
                Evict::None => LinkHold::Workers,
                _ => LinkHold::Downloads,
            },
            Evict::Pause,
            "no downloads; workers paused",
        ),
    };
    f.evict = f.evict.max(evict);
    f.say(
        Cause::Metered,
        format!("the network is metered (NetworkManager): {reason}"),
    );
    hold
}

/// Owner CPU, latched: a short spike neither evicts nor restarts anything. Returns the latch
/// (busy since) to carry to the next cycle.
fn owner_cpu(
    p: &Policy,
    h: &HostSnapshot,
    now: DateTime<Utc>,
    f: &mut Findings,
) -> Option<DateTime<Utc>> {
    let owner_cpu = h.owner_cpu();
    let high = owner_cpu > p.max_owner_cpu;
    let owner_busy_since = high.then(|| h.owner_busy_since.unwrap_or(now));
    if let Some(since) = owner_busy_since {
        let evict_at = after(since, p.busy_for);
        let above = format!(
            "owner CPU {:.0}% above {:.0}%",
            owner_cpu * 100.0,
            p.max_owner_cpu * 100.0
        );
        if now >= evict_at {
            let secs = now.signed_duration_since(since).num_seconds().max(0) as u64;
            let lasted = format_duration(Duration::from_secs(secs));
            f.block(
                p.on_return,
                Cause::OwnerCpuEvict,
                format!("{above} for {lasted}"),
            );
        } else {
            f.next.push(evict_at);
            f.block(
                Evict::None,
                Cause::OwnerCpuHigh,
                format!(
                    "{above}: no new workers; running ones are evicted if it lasts until {}",
                    hm(evict_at, p)
                ),
            );
        }
    }
    owner_busy_since
}

/// A free host (since `since`) takes workers once it has been free for `free_for`, while a
/// longest job still fits before `die_at`, when the share has room for one, and once this
/// host's turn in the fleet's spread has come (`opened`: when the open period began).
#[allow(clippy::too_many_arguments)]
fn admit(
    p: &Policy,
    limits: Limits,
    opened: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    since: DateTime<Utc>,
    (accept_until, die_at): (Option<DateTime<Utc>>, Option<DateTime<Utc>>),
    (workers, r): (u32, Resources),
    f: &mut Findings,
) -> bool {
    let ready_at = after(since, p.free_for);
    if now < ready_at {
        f.next.push(ready_at);
        f.say(
            Cause::WaitingFreeFor,
            format!(
                "host free since {}; workers start after {} free, at {}",
                hm(since, p),
                format_duration(p.free_for),
                hm(ready_at, p)
            ),
        );
        false
    } else if let Some(a) = accept_until.filter(|a| *a <= now) {
        f.say(
            Cause::TooLittleTime,
            format!(
                "too little time left: a {} job started now would not end before {} (accepting jobs ended {})",
                format_duration(p.longest_job),
                die_at.map(|d| hm(d, p)).unwrap_or_default(),
                hm(a, p)
            ),
        );
        false
    } else if workers == 0 {
        f.say(
            Cause::NoRoom,
            "the share leaves no room for a worker (too little memory or disk)".into(),
        );
        false
    } else if let Some(until) = limits
        .splay
        .start_hold(opened, limits.started, p.free_for)
        .filter(|u| now < *u)
    {
        // Only a start waits: evictions were decided by the steps before, whatever the splay.
        f.next.push(until);
        f.say(
            Cause::FleetSplay,
            format!(
                "start held until {} (fleet splay: this host waits its offset of {}, of up to {}, after {} and {} free)",
                hms(until, p),
                format_duration(limits.splay.offset),
                format_duration(limits.splay.width),
                if opened >= limits.started {
                    "the window opened"
                } else {
                    "pilotd started"
                },
                format_duration(p.free_for)
            ),
        );
        false
    } else {
        f.next.extend(accept_until);
        f.say(
            Cause::Free,
            format!(
                "host free: {workers} worker(s) of {} CPU, {} MiB, until {}",
                r.cpus,
                r.memory_mib,
                die_at
                    .map(|d| hm(d, p))
                    .unwrap_or_else(|| "further notice".into())
            ),
        );
        true
    }
}

/// Why a session counts as away under `sessions = "active"`, or None when it is in use. Any
/// one signal is enough: locked for `lock_grace`; idle for `session_idle` as its source says
/// (logind's idle hint, a terminal's idle time); or, at this machine's own keyboard and unless
/// its desktop reports idleness itself, no input on the machine's keyboards, mice and
/// touchpads for `session_idle`. A use without typing (`using`) is judged after, per user.
/// A signal nobody can read
/// says nothing, so a session with none is in use (fail safe). Pushes onto `next` the instants
/// a lock becomes long enough and the machine's input has been quiet long enough.
fn away(
    s: &Session,
    input_idle_s: Option<u64>,
    p: &Policy,
    now: DateTime<Utc>,
    next: &mut Vec<DateTime<Utc>>,
) -> Option<String> {
    if let Some(since) = s.locked_since {
        let enough = after(since, p.lock_grace);
        if now >= enough {
            return Some(format!("locked since {}", hm(since, p)));
        }
        next.push(enough);
    }
    // Said with the policy's threshold, not the figure: the status file is rewritten only
    // when its text changes.
    let idle = p.session_idle.as_secs();
    if s.idle_s.is_some_and(|i| i >= idle) {
        return Some(format!(
            "idle for {} or more",
            format_duration(p.session_idle)
        ));
    }
    // A desktop that reports idleness (GNOME) knows of what keeps it awake without input (a
    // film, a call, a presentation): its "not idle" outweighs a quiet keyboard and mouse.
    // Where the desktop never reports (KDE), the keyboard and mouse tell.
    if let (true, false, Some(i)) = (s.local, s.idle_reported, input_idle_s) {
        if i >= idle {
            return Some(format!(
                "no keyboard or mouse input for {} or more",
                format_duration(p.session_idle)
            ));
        }
        // Without more input, the session is away then: decide again at that instant.
        next.push(after(now, Duration::from_secs(idle - i)));
    }
    None
}

/// Which sources the sessions came from, as the owner reads it in `plan` and `status`.
fn sources(h: &HostSnapshot) -> String {
    let mut line = match (&h.logind_unavailable, h.utmp_absent) {
        (None, false) => "sessions from logind and utmp".to_string(),
        (None, true) => "sessions from logind; utmp absent".to_string(),
        (Some(why), false) => {
            format!("sessions from utmp alone: systemd-logind cannot be asked ({why})")
        }
        (Some(why), true) => {
            format!("no source of sessions: utmp absent and systemd-logind cannot be asked ({why})")
        }
    };
    line.push_str(match h.input_idle_s {
        Some(_) => "; keyboard and mouse watched",
        None => "; no keyboard or mouse readable",
    });
    line
}

/// The quiet hours `now` is in: the least CPU share (on a machine of `cpus`) among the
/// windows holding it, and when the quiet hours end; or `None`; with when the next quiet
/// hours begin or end (for `next_change`).
pub(crate) fn quiet_hours(
    p: &Policy,
    cpus: u32,
    now: DateTime<Utc>,
) -> (Option<Quiet>, Option<DateTime<Utc>>) {
    let least = |a: Share, b: Share| {
        if comfort::quiet_millicpus(a, cpus, 1) <= comfort::quiet_millicpus(b, cpus, 1) {
            a
        } else {
            b
        }
    };
    let mut inside: Option<Quiet> = None;
    let mut next = None;
    for q in &p.comfort.quiet_hours {
        let w: [Window; 1] = [q.window];
        match calendar::period_at(&w, &p.timezone, now) {
            Period::Open { ends } => {
                inside = Some(Quiet {
                    cpus: inside.map_or(q.cpus, |i| least(i.cpus, q.cpus)),
                    ends: earliest(inside.and_then(|i| i.ends), ends),
                });
                next = earliest(next, ends);
            }
            Period::Closed { opens } => next = earliest(next, opens),
        }
    }
    (inside, next)
}

fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    a.into_iter().chain(b).min()
}

/// Splits the share over the workers: whole CPUs (at least 1), never more than the machine
/// has; fewer workers when the CPU share cannot give each one a CPU. `projection` asks
/// it too, for the CPUs a policy grants.
pub(crate) fn split_share(p: &Policy, h: &HostSnapshot) -> (u32, Resources) {
    let cpus_total = u64::from(h.cpus.max(1));
    let cpu_share = p.share.cpus.of(cpus_total).clamp(1, cpus_total);
    let workers = u64::from(p.share.workers).min(cpu_share).max(1);
    let mem_total = h.memory_total_kib.saturating_mul(1024);
    let mem_share = p.share.memory.of(mem_total).min(mem_total);
    let scratch = h.scratch_free_kib.saturating_mul(1024);
    let disk_share = p.share.disk.of(scratch).min(scratch);
    let r = Resources {
        cpus: (cpu_share / workers) as u32,
        memory_mib: mem_share / workers / (1 << 20),
        disk_kib: disk_share / workers / 1024,
        gpus: (u64::from(p.share.gpus) / workers) as u32,
    };
    // A worker without memory or disk cannot run a job.
    if r.memory_mib == 0 || r.disk_kib == 0 {
        return (0, r);
    }
    (workers as u32, r)
}

#[cfg(test)]
mod tests;
