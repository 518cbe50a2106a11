//! The owner's `policy.toml`: when the machine may compute, what counts as "the owner is
//! here", how much of the machine to share and the longest job the owner accepts.
//!
//! Parsed in two passes: serde (with `deny_unknown_fields`) catches syntax errors, unknown
//! keys and wrong types; then `validate` checks every value and collects all problems with
//! their positions. The keys are a contract: owners and install scripts write them.

use super::diag::Diagnostics;
use super::units::{
    DaySet, Minute, Share, ShareUnit, StrOrInt, parse_celsius, parse_days, parse_rpm, parse_share,
    parse_time_of_day,
};
use crate::zone::Zone;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::time::Duration;
use toml::Spanned;

// ---------------------------------------------------------------------------------------
// Raw file shape. Values that need checking are `Spanned` strings so that validation can
// report all of them with positions.

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    timezone: Option<Spanned<String>>,
    #[serde(default)]
    schedule: RawSchedule,
    #[serde(default)]
    owner: RawOwner,
    #[serde(default)]
    share: RawShare,
    #[serde(default)]
    jobs: RawJobs,
    #[serde(default)]
    comfort: RawComfort,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSchedule {
    windows: Option<Spanned<Vec<RawWindow>>>,
    evict_before_end: Option<Spanned<StrOrInt>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    days: Spanned<String>,
    from: Spanned<String>,
    to: Spanned<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawOwner {
    sessions: Option<Spanned<String>>,
    session_idle: Option<Spanned<StrOrInt>>,
    lock_grace: Option<Spanned<StrOrInt>>,
    keep_awake: Option<bool>,
    media_is_use: Option<bool>,
    inhibitors_are_use: Option<bool>,
    ignore_users: Option<Vec<String>>,
    system_uid_below: Option<u32>,
    max_owner_cpu: Option<Spanned<StrOrInt>>,
    busy_for: Option<Spanned<StrOrInt>>,
    free_for: Option<Spanned<StrOrInt>>,
    exclusive_processes: Option<Vec<String>>,
    on_battery: Option<Spanned<String>>,
    on_return: Option<Spanned<String>>,
    on_metered: Option<Spanned<String>>,
    grace: Option<Spanned<StrOrInt>>,
    users: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawShare {
    cpus: Option<Spanned<StrOrInt>>,
    memory: Option<Spanned<StrOrInt>>,
    disk: Option<Spanned<StrOrInt>>,
    disk_limit: Option<Spanned<String>>,
    gpus: Option<Spanned<i64>>,
    workers: Option<Spanned<i64>>,
    data_per_day: Option<Spanned<StrOrInt>>,
    data_per_month: Option<Spanned<StrOrInt>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawJobs {
    longest_job: Option<Spanned<StrOrInt>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawComfort {
    max_temperature: Option<Spanned<StrOrInt>>,
    max_fan: Option<Spanned<StrOrInt>>,
    cool_for: Option<Spanned<StrOrInt>>,
    quiet_hours: Option<Spanned<Vec<RawQuiet>>>,
}

/// A window of the week with a lower CPU share, written like a schedule window.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuiet {
    days: Spanned<String>,
    from: Spanned<String>,
    to: Spanned<String>,
    cpus: Spanned<StrOrInt>,
}

// ---------------------------------------------------------------------------------------
// Validated policy.

/// How logged-in users count toward "the owner is here".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionRule {
    /// Any login of a counted user means present.
    Any,
    /// Only sessions in use mean present: not locked for `lock_grace`, not idle for
    /// `session_idle` (logind's idle hint, the terminal's idle time, or, at the machine's own
    /// keyboard, its input devices).
    Active,
    /// Logins do not matter (a dedicated server).
    Ignore,
}

/// What happens to running workers when the owner needs the machine.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Evict {
    #[default]
    None,
    /// `docker pause`: frozen, resumed when the owner leaves.
    Pause,
    /// SIGTERM, condor finishes or vacates, killed after `grace`.
    Graceful,
    /// Killed at once.
    Fast,
}

impl Evict {
    pub fn as_str(self) -> &'static str {
        match self {
            Evict::None => "none",
            Evict::Pause => "pause",
            Evict::Graceful => "graceful",
            Evict::Fast => "fast",
        }
    }
}

/// How a worker's disk share holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskLimit {
    /// The kernel enforces it: the worker's scratch is a filesystem of exactly its share
    /// (needs loop devices). The default.
    Enforced,
    /// Measured now and then, and the worker stopped when found over it: a fast writer can
    /// pass the share by what it writes between two measurements. Only the owner's policy can
    /// choose this (for hosts without loop devices, e.g. pilotd inside a container).
    Measured,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BatteryRule {
    Stop,
    Ignore,
}

/// What a metered link (a phone's hotspot, a connection the owner marked metered in
/// NetworkManager) holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeteredRule {
    /// No image pull, no manifest fetch, no new worker; running workers may finish their
    /// jobs. The default: the gigabytes are the image and the new workers' first jobs, and a
    /// running job stopped would be lost work.
    NoDownloads,
    /// As `NoDownloads`, and running workers are paused (frozen, they move no data) until the
    /// link is no longer metered.
    Pause,
    /// The link's price does not matter to this owner.
    Ignore,
}

impl MeteredRule {
    pub fn as_str(self) -> &'static str {
        match self {
            MeteredRule::NoDownloads => "no-downloads",
            MeteredRule::Pause => "pause",
            MeteredRule::Ignore => "ignore",
        }
    }
}

/// One weekly window, in the policy's local time. `to <= from` wraps past midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub days: DaySet,
    pub from: Minute,
    pub to: Minute,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub timezone: Zone,
    pub windows: Vec<Window>,
    pub evict_before_end: Duration,
    pub sessions: SessionRule,
    pub session_idle: Duration,
    /// A session locked this long is away (`sessions = "active"`).
    pub lock_grace: Duration,
    /// Keep the machine from sleeping on its own idle timer while workers compute in an open
    /// window (never blocks a sleep the owner asks for).
    pub keep_awake: bool,
    /// Sound playing or recorded, or a camera in use, by a counted user means that user is
    /// here, as a session in use does (a film, music, a call: no typing needed).
    pub media_is_use: bool,
    /// An idle inhibitor a counted user holds in logind (a player, a presentation,
    /// `systemd-inhibit --what=idle`) means that user is here.
    pub inhibitors_are_use: bool,
    pub ignore_users: Vec<String>,
    pub system_uid_below: u32,
    /// Fraction of the whole machine (0..=1).
    pub max_owner_cpu: f64,
    pub busy_for: Duration,
    pub free_for: Duration,
    pub exclusive_processes: Vec<String>,
    pub on_battery: BatteryRule,
    pub on_return: Evict,
    /// What a metered link holds back (NetworkManager's `Metered`).
    pub on_metered: MeteredRule,
    pub grace: Duration,
    /// Users who may snooze and resume this machine without root (`pilotd snooze`), beside
    /// root and the members of the `pilotd` group.
    pub users: Vec<String>,
    pub share: ShareSpec,
    pub longest_job: Duration,
    /// What the machine must not become while it computes: hot, loud (`[comfort]`).
    pub comfort: Comfort,
}

/// `[comfort]`: limits on the machine's temperature and fan speed, which lower the workers'
/// CPU quota step by step while the machine is over them (and pause them at the lowest
/// step), and the quiet hours, in which the CPU share is lower. Off unless set.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Comfort {
    /// The hottest the machine's CPU may get, in degrees Celsius.
    pub max_temperature: Option<f64>,
    /// The fastest any of its fans may spin, in RPM.
    pub max_fan: Option<u64>,
    /// How long the machine must stay cool (below the limits by their margin) before the
    /// CPU quota rises a step, and the least time between two rises.
    pub cool_for: Duration,
    pub quiet_hours: Vec<QuietHours>,
}

impl Comfort {
    /// A temperature or fan limit is set: the sensors are read and the throttle runs.
    pub fn limits_set(&self) -> bool {
        self.max_temperature.is_some() || self.max_fan.is_some()
    }
}

/// One window of quiet hours: within it, the workers share at most `cpus` of the machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuietHours {
    pub window: Window,
    pub cpus: Share,
}

/// `cool_for` unless the policy says otherwise: three minutes keeps a fan from ramping up and
/// down with every job's phase, and lets a heat sink shed what it stored.
pub const DEFAULT_COOL_FOR: Duration = Duration::from_secs(180);
/// The temperatures a `max_temperature` may name: below 40 °C a working CPU is always over it,
/// above 105 °C it is already throttling itself.
pub const TEMPERATURE_RANGE: std::ops::RangeInclusive<f64> = 40.0..=105.0;
/// The fan speeds a `max_fan` may name (RPM).
pub const FAN_RANGE: std::ops::RangeInclusive<u64> = 300..=20_000;

#[derive(Debug, Clone, PartialEq)]
pub struct ShareSpec {
    pub cpus: Share,
    pub memory: Share,
    pub disk: Share,
    pub disk_limit: DiskLimit,
    pub gpus: u32,
    pub workers: u32,
    /// The most data pilotd's work may use in a day of the policy's zone (the workers'
    /// bytes received and sent, and image pulls); `None`: no cap (the default).
    pub data_per_day: Option<u64>,
    /// The same for a calendar month: a donor's plan is monthly.
    pub data_per_month: Option<u64>,
}

/// Positions of the values that can only be checked against a machine or another file
/// (`config::parse_policy` checks them; the policy itself is plain data).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicySpans {
    pub cpus: Range<usize>,
    pub memory: Range<usize>,
    pub gpus: Range<usize>,
    pub longest_job: Range<usize>,
}

impl Policy {
    /// The built-in defaults (what a policy.toml that sets nothing means), with a window that
    /// is always open; the shipped policies narrow it.
    pub fn defaults(timezone: Zone) -> Policy {
        Policy {
            timezone,
            windows: vec![Window {
                days: DaySet::ALL,
                from: 0,
                to: 1440,
            }],
            evict_before_end: Duration::from_secs(600),
            // What docs/owner.md and policies/default.toml call the default: only a session
            // in use means the owner is here (a locked or long-idle login does not).
            sessions: SessionRule::Active,
            session_idle: Duration::from_secs(900),
            lock_grace: Duration::from_secs(60),
            keep_awake: false,
            media_is_use: true,
            inhibitors_are_use: true,
            ignore_users: vec!["root".into(), "condor".into()],
            system_uid_below: 1000,
            max_owner_cpu: 0.25,
            busy_for: Duration::from_secs(120),
            free_for: Duration::from_secs(900),
            exclusive_processes: vec![],
            on_battery: BatteryRule::Stop,
            on_return: Evict::Graceful,
            on_metered: MeteredRule::NoDownloads,
            grace: Duration::from_secs(600),
            users: vec![],
            share: ShareSpec {
                cpus: Share::Percent(50.0),
                memory: Share::Percent(50.0),
                disk: Share::Amount(20 << 30),
                disk_limit: DiskLimit::Enforced,
                gpus: 0,
                workers: 1,
                data_per_day: None,
                data_per_month: None,
            },
            longest_job: Duration::from_secs(8 * 3600),
            comfort: Comfort {
                cool_for: DEFAULT_COOL_FOR,
                ..Comfort::default()
            },
        }
    }
}

/// More windows than any week needs (each half hour of the week could be its own window at
/// 336); 200,000 windows once made `schedule` take 102 s.
pub(crate) const MAX_WINDOWS: usize = 336;

/// Second pass: every value checked, every problem recorded (in the order of the steps).
pub fn validate(mut raw: RawPolicy, local_tz: Zone, d: &mut Diagnostics) -> (Policy, PolicySpans) {
    let mut p = Policy::defaults(local_tz);
    let mut spans = PolicySpans::default();
    validate_timezone(&raw.timezone, &mut p, d);
    validate_schedule(raw.schedule, &mut p, d);
    validate_presence(&mut raw.owner, &mut p, d);
    validate_return(raw.owner, &mut p, d);
    validate_share(&raw.share, &mut p, &mut spans, d);
    validate_share_not_nothing(&raw.share, &p, d);
    validate_jobs(&raw.jobs, &mut p, &mut spans, d);
    validate_comfort(&raw.comfort, &mut p, d);
    (p, spans)
}

fn validate_timezone(timezone: &Option<Spanned<String>>, p: &mut Policy, d: &mut Diagnostics) {
    if let Some(tz) = timezone {
        match tz.get_ref().parse::<Zone>() {
            Ok(z) => p.timezone = z,
            Err(_) => d.error(
                tz.span(),
                format!("unknown time zone `{}`", tz.get_ref()),
                "use an IANA name such as \"Europe/Rome\" or \"America/Chicago\" (see `timedatectl list-timezones`), or remove the key to use the system's zone",
            ),
        }
    }
}

/// `[schedule]`: the windows (not too many, not none) and the eviction lead.
fn validate_schedule(schedule: RawSchedule, p: &mut Policy, d: &mut Diagnostics) {
    if let Some(ws) = schedule.windows {
        let span = ws.span();
        let ws = ws.into_inner();
        if ws.len() > MAX_WINDOWS {
            d.error(
                span.clone(),
                format!(
                    "{} windows are more than the {MAX_WINDOWS} a week can use",
                    ws.len()
                ),
                "merge windows: one window can name several days, e.g. days = \"mon-fri\"",
            );
        } else {
            if ws.is_empty() {
                d.error(
                    span,
                    "`windows` is empty, so the machine would never compute",
                    "add a window such as { days = \"daily\", from = \"00:00\", to = \"24:00\" }",
                );
            }
            p.windows = ws.iter().filter_map(|w| window(w, d)).collect();
        }
    }
    dur(&schedule.evict_before_end, &mut p.evict_before_end, d);
}

/// `[owner]`, what tells the owner is here: sessions, their idleness and locks, the owner's
/// CPU use and processes.
fn validate_presence(o: &mut RawOwner, p: &mut Policy, d: &mut Diagnostics) {
    if let Some(s) = &o.sessions {
        match s.get_ref().as_str() {
            "any" => p.sessions = SessionRule::Any,
            "active" => p.sessions = SessionRule::Active,
            "ignore" => p.sessions = SessionRule::Ignore,
            other => d.error(
                s.span(),
                format!("unknown sessions rule `{other}`"),
                "use \"any\" (any login means the owner is here), \"active\" (only sessions in use: not locked for lock_grace, not idle for session_idle) or \"ignore\"",
            ),
        }
    }
    dur(&o.session_idle, &mut p.session_idle, d);
    dur(&o.lock_grace, &mut p.lock_grace, d);
    p.keep_awake = o.keep_awake.unwrap_or(p.keep_awake);
    p.media_is_use = o.media_is_use.unwrap_or(p.media_is_use);
    p.inhibitors_are_use = o.inhibitors_are_use.unwrap_or(p.inhibitors_are_use);
    if let Some(u) = o.ignore_users.take() {
        p.ignore_users = u;
    }
    p.system_uid_below = o.system_uid_below.unwrap_or(p.system_uid_below);
    if let Some(c) = &o.max_owner_cpu {
        match parse_share(c.get_ref(), ShareUnit::Count) {
            Ok(Share::Percent(pc)) => p.max_owner_cpu = pc / 100.0,
            Ok(Share::Amount(_)) => d.error(
                c.span(),
                format!("max_owner_cpu {} must be a percentage", c.get_ref()),
                "write it like \"25%\" (of the whole machine)",
            ),
            Err(e) => d.error(c.span(), e, "write it like \"25%\" (of the whole machine)"),
        }
    }
    dur(&o.busy_for, &mut p.busy_for, d);
    dur(&o.free_for, &mut p.free_for, d);
    if let Some(x) = o.exclusive_processes.take() {
        p.exclusive_processes = x;
    }
}

/// `[owner]`, what pilotd does then: on battery, on the owner's return, on a metered link, the
/// grace, and who may snooze.
fn validate_return(o: RawOwner, p: &mut Policy, d: &mut Diagnostics) {
    if let Some(b) = &o.on_battery {
        match b.get_ref().as_str() {
            "stop" => p.on_battery = BatteryRule::Stop,
            "ignore" => p.on_battery = BatteryRule::Ignore,
            other => d.error(
                b.span(),
                format!("unknown on_battery rule `{other}`"),
                "use \"stop\" or \"ignore\"",
            ),
        }
    }
    if let Some(r) = &o.on_return {
        match r.get_ref().as_str() {
            "pause" => p.on_return = Evict::Pause,
            "graceful" => p.on_return = Evict::Graceful,
            "fast" => p.on_return = Evict::Fast,
            other => d.error(
                r.span(),
                format!("unknown on_return rule `{other}`"),
                "use \"pause\", \"graceful\" or \"fast\"",
            ),
        }
    }
    if let Some(m) = &o.on_metered {
        match m.get_ref().as_str() {
            "no-downloads" => p.on_metered = MeteredRule::NoDownloads,
            "pause" => p.on_metered = MeteredRule::Pause,
            "ignore" => p.on_metered = MeteredRule::Ignore,
            other => d.error(
                m.span(),
                format!("unknown on_metered rule `{other}`"),
                "use \"no-downloads\" (no image pulls, manifest fetches or new workers; running ones finish their jobs), \"pause\" (also pause running workers) or \"ignore\"",
            ),
        }
    }
    dur(&o.grace, &mut p.grace, d);
    p.users = o.users.unwrap_or_else(|| p.users.clone());
}

/// `[share]`: CPUs, memory and disk (with their positions), the disk limit, GPUs, workers.
fn validate_share(s: &RawShare, p: &mut Policy, spans: &mut PolicySpans, d: &mut Diagnostics) {
    let mut disk_span = 0..0;
    for (v, unit, out, span) in [
        (
            &s.cpus,
            ShareUnit::Count,
            &mut p.share.cpus,
            &mut spans.cpus,
        ),
        (
            &s.memory,
            ShareUnit::Bytes,
            &mut p.share.memory,
            &mut spans.memory,
        ),
        (&s.disk, ShareUnit::Bytes, &mut p.share.disk, &mut disk_span),
    ] {
        share(v, unit, out, span, d);
    }
    if let Some(l) = &s.disk_limit {
        match l.get_ref().as_str() {
            "enforced" => p.share.disk_limit = DiskLimit::Enforced,
            "measured" => p.share.disk_limit = DiskLimit::Measured,
            other => d.error(
                l.span(),
                format!("unknown disk_limit `{other}`"),
                "use \"enforced\" (the kernel holds each worker to its share; the default) or \"measured\" (only where loop devices are missing)",
            ),
        }
    }
    if let Some(g) = &s.gpus {
        spans.gpus = g.span();
        match u32::try_from(*g.get_ref()) {
            Ok(n) => p.share.gpus = n,
            Err(_) => d.error(
                g.span(),
                "gpus must be 0 or more",
                "write a whole number, e.g. 0",
            ),
        }
    }
    for (v, out) in [
        (&s.data_per_day, &mut p.share.data_per_day),
        (&s.data_per_month, &mut p.share.data_per_month),
    ] {
        data_cap(v, out, d);
    }
    if let Some(w) = &s.workers {
        match u32::try_from(*w.get_ref()) {
            Ok(n) if (1..=256).contains(&n) => p.share.workers = n,
            _ => d.error(
                w.span(),
                format!("workers = {} is out of range", w.get_ref()),
                "use a whole number from 1 to 256; the share is split evenly between the workers",
            ),
        }
    }
}

/// A share of 0 CPUs, memory or disk would never start a worker.
fn validate_share_not_nothing(s: &RawShare, p: &Policy, d: &mut Diagnostics) {
    if let Some(c) = &s.cpus
        && p.share.cpus == Share::Amount(0)
    {
        d.error(
            c.span(),
            "cpus = 0 shares nothing",
            "share at least 1 CPU, or \"50%\"",
        );
    }
    for (key, v, share) in [
        ("memory", &s.memory, p.share.memory),
        ("disk", &s.disk, p.share.disk),
    ] {
        if let Some(v) = v
            && share == Share::Amount(0)
        {
            d.error(
                v.span(),
                format!(
                    "{key} = {} shares nothing: no worker could start",
                    v.get_ref()
                ),
                format!("share some {key}, e.g. {key} = \"50%\" or \"8GiB\""),
            );
        }
    }
}

/// `[jobs] longest_job`: a duration, not 0.
fn validate_jobs(jobs: &RawJobs, p: &mut Policy, spans: &mut PolicySpans, d: &mut Diagnostics) {
    if let Some(l) = &jobs.longest_job {
        spans.longest_job = l.span();
        let mut v = p.longest_job;
        dur(&jobs.longest_job, &mut v, d);
        if v.is_zero() {
            d.error(
                l.span(),
                "longest_job cannot be 0",
                "write the longest job you accept, e.g. \"8h\"",
            );
        }
        p.longest_job = v;
    }
}

/// `[comfort]`: the temperature and fan limits within what a machine can mean, the time to
/// stay cool, and the quiet hours (windows, each with a CPU share that is not nothing).
fn validate_comfort(c: &RawComfort, p: &mut Policy, d: &mut Diagnostics) {
    if let Some(t) = &c.max_temperature {
        let hint =
            "write the hottest the CPU may get, e.g. \"80C\" (laptops run hotter by design: 90C)";
        match parse_celsius(t.get_ref()) {
            Ok(v) if TEMPERATURE_RANGE.contains(&v) => p.comfort.max_temperature = Some(v),
            Ok(v) => d.error(
                t.span(),
                format!(
                    "max_temperature {v}C is outside {}C to {}C",
                    TEMPERATURE_RANGE.start(),
                    TEMPERATURE_RANGE.end()
                ),
                hint,
            ),
            Err(e) => d.error(t.span(), e, hint),
        }
    }
    if let Some(f) = &c.max_fan {
        let hint = "write the fastest a fan may spin, e.g. \"3000rpm\" (`sensors` shows what the fans do now)";
        match parse_rpm(f.get_ref()) {
            Ok(v) if FAN_RANGE.contains(&v) => p.comfort.max_fan = Some(v),
            Ok(v) => d.error(
                f.span(),
                format!(
                    "max_fan {v}rpm is outside {}rpm to {}rpm",
                    FAN_RANGE.start(),
                    FAN_RANGE.end()
                ),
                hint,
            ),
            Err(e) => d.error(f.span(), e, hint),
        }
    }
    dur(&c.cool_for, &mut p.comfort.cool_for, d);
    if let Some(qs) = &c.quiet_hours {
        if qs.get_ref().len() > MAX_WINDOWS {
            d.error(
                qs.span(),
                format!(
                    "{} quiet hours are more than the {MAX_WINDOWS} a week can use",
                    qs.get_ref().len()
                ),
                "merge them: one window can name several days, e.g. days = \"mon-fri\"",
            );
            return;
        }
        for q in qs.get_ref() {
            let cpus = match parse_share(q.cpus.get_ref(), ShareUnit::Count) {
                Ok(Share::Amount(0)) => {
                    d.error(
                        q.cpus.span(),
                        "cpus = 0 in quiet hours would stop the workers, which is the schedule's to say",
                        "leave these hours out of [schedule] windows instead, or share at least 1 CPU or \"10%\"",
                    );
                    None
                }
                Ok(c) => Some(c),
                Err(e) => {
                    d.error(
                        q.cpus.span(),
                        e,
                        "write a count like 1 or a percentage like \"25%\" (of the whole machine)",
                    );
                    None
                }
            };
            let window = window_of(&q.days, &q.from, &q.to, d);
            if let (Some(window), Some(cpus)) = (window, cpus) {
                p.comfort.quiet_hours.push(QuietHours { window, cpus });
            }
        }
    }
}

fn dur(v: &Option<Spanned<StrOrInt>>, out: &mut Duration, d: &mut Diagnostics) {
    let Some(v) = v else { return };
    match v.get_ref().duration() {
        Ok(x) => *out = x,
        Err(e) => d.error(
            v.span(),
            e,
            "durations look like \"90s\", \"15m\", \"8h\" or \"1h 30m\"",
        ),
    }
}

fn share(
    v: &Option<Spanned<StrOrInt>>,
    unit: ShareUnit,
    out: &mut Share,
    span: &mut Range<usize>,
    d: &mut Diagnostics,
) {
    let Some(v) = v else { return };
    *span = v.span();
    match parse_share(v.get_ref(), unit) {
        Ok(s) => *out = s,
        Err(e) => d.error(
            v.span(),
            e,
            match unit {
                ShareUnit::Count => "write a count like 4 or a percentage like \"50%\"",
                ShareUnit::Bytes => "write a size like \"8GiB\" or a percentage like \"50%\"",
            },
        ),
    }
}

/// A data cap: a size above zero ("2GiB", "500MB"); a percentage has nothing to be a
/// percentage of.
fn data_cap(v: &Option<Spanned<StrOrInt>>, out: &mut Option<u64>, d: &mut Diagnostics) {
    let Some(v) = v else { return };
    let hint = "write a size like \"2GiB\" or \"500MB\"; leave the key out for no cap";
    let text = match v.get_ref() {
        StrOrInt::Str(s) => s.clone(),
        StrOrInt::Int(n) => n.to_string(),
    };
    match super::units::parse_size(&text) {
        Ok(0) => d.error(v.span(), "a data cap of 0 would never start a worker", hint),
        Ok(n) => *out = Some(n),
        Err(e) => d.error(v.span(), e, hint),
    }
}

fn window(w: &RawWindow, d: &mut Diagnostics) -> Option<Window> {
    window_of(&w.days, &w.from, &w.to, d)
}

/// A window's days and times, as the schedule's windows and the quiet hours write them.
fn window_of(
    days: &Spanned<String>,
    from: &Spanned<String>,
    to: &Spanned<String>,
    d: &mut Diagnostics,
) -> Option<Window> {
    let (w_from, w_to) = (from, to);
    let days = parse_days(days.get_ref())
        .map_err(|e| d.error(days.span(), e, "e.g. days = \"mon-fri\""))
        .ok();
    let from = parse_time_of_day(w_from.get_ref())
        .map_err(|e| d.error(w_from.span(), e, "e.g. from = \"19:00\""))
        .ok();
    let to = parse_time_of_day(w_to.get_ref())
        .map_err(|e| {
            d.error(
                w_to.span(),
                e,
                "e.g. to = \"07:30\" (earlier than from wraps past midnight)",
            )
        })
        .ok();
    let (days, from, to) = (days?, from?, to?);
    if from == 1440 {
        d.error(
            w_from.span(),
            "a window cannot start at 24:00",
            "start at \"00:00\" instead",
        );
        return None;
    }
    if from == to {
        d.error(
            w_to.span(),
            format!("window from {} to {} is empty", w_from.get_ref(), w_to.get_ref()),
            "for a whole day write from = \"00:00\", to = \"24:00\"; an earlier `to` wraps past midnight",
        );
        return None;
    }
    Some(Window { days, from, to })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    pub(crate) fn parse(src: &str) -> Result<Policy, Vec<String>> {
        let mut d = Diagnostics::new(Path::new("policy.toml"), src);
        let raw: RawPolicy = match toml::from_str(src) {
            Ok(r) => r,
            Err(e) => {
                d.toml_error(&e, "");
                return Err(d.into_vec().iter().map(|x| x.to_string()).collect());
            }
        };
        let (p, _) = validate(raw, crate::zone::Zone::utc(), &mut d);
        if d.is_empty() {
            Ok(p)
        } else {
            Err(d.into_vec().iter().map(|x| x.to_string()).collect())
        }
    }

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(
            parse("").unwrap(),
            Policy::defaults(crate::zone::Zone::utc())
        );
    }

    #[test]
    fn reads_every_documented_key() {
        let p = parse(
            r#"
timezone = "Europe/Rome"
[schedule]
windows = [
  { days = "mon-fri", from = "19:00", to = "07:30" },
  { days = "sat,sun", from = "00:00", to = "24:00" },
]
evict_before_end = "10m"
[owner]
sessions = "active"
session_idle = "15m"
ignore_users = ["root"]
system_uid_below = 500
max_owner_cpu = "30%"
busy_for = "2m"
free_for = "15m"
exclusive_processes = ["matlab"]
on_battery = "ignore"
on_return = "pause"
on_metered = "pause"
grace = "5m"
[share]
cpus = "50%"
memory = "8GiB"
disk = "20GiB"
disk_limit = "measured"
gpus = 1
workers = 2
data_per_day = "2GiB"
data_per_month = "30GB"
[jobs]
longest_job = "4h"
"#,
        )
        .unwrap();
        assert_eq!(p.timezone, crate::zone::Zone::named("Europe/Rome").unwrap());
        assert_eq!(p.windows.len(), 2);
        assert_eq!(
            p.windows[0],
            Window {
                days: DaySet(0b11111),
                from: 1140,
                to: 450
            }
        );
        assert_eq!(p.sessions, SessionRule::Active);
        assert_eq!(p.system_uid_below, 500);
        assert!((p.max_owner_cpu - 0.30).abs() < 1e-9);
        assert_eq!(p.on_battery, BatteryRule::Ignore);
        assert_eq!(p.on_return, Evict::Pause);
        assert_eq!(p.on_metered, MeteredRule::Pause);
        assert_eq!(p.grace, Duration::from_secs(300));
        assert_eq!(p.share.memory, Share::Amount(8 << 30));
        assert_eq!(p.share.workers, 2);
        assert_eq!(p.share.disk_limit, DiskLimit::Measured);
        assert_eq!(p.share.data_per_day, Some(2 << 30));
        assert_eq!(p.share.data_per_month, Some(30_000_000_000));
        assert_eq!(
            parse("").unwrap().share.data_per_day,
            None,
            "off by default"
        );
        assert_eq!(p.longest_job, Duration::from_secs(4 * 3600));
        // Unset, the kernel enforces the disk share, and a metered link holds downloads.
        assert_eq!(parse("").unwrap().share.disk_limit, DiskLimit::Enforced);
        assert_eq!(parse("").unwrap().on_metered, MeteredRule::NoDownloads);
        let ignore = parse("[owner]\non_metered = \"ignore\"\n").unwrap();
        assert_eq!(ignore.on_metered, MeteredRule::Ignore);
    }

    #[test]
    fn collects_every_semantic_error_with_positions() {
        let errs = parse(
            r#"timezone = "Europe/Rom"
[schedule]
windows = [
  { days = "mon-fri", from = "19:00", to = "19:00" },
  { days = "funday", from = "25:00", to = "07:00" },
]
[owner]
on_return = "explode"
max_owner_cpu = "120%"
[share]
cpus = "150%"
workers = 0
disk_limit = "off"
"#,
        )
        .unwrap_err();
        let all = errs.join("\n");
        assert!(
            all.contains("policy.toml:1:12: unknown time zone `Europe/Rom`"),
            "{all}"
        );
        assert!(
            all.contains("policy.toml:4:44: window from 19:00 to 19:00 is empty"),
            "{all}"
        );
        assert!(
            all.contains("policy.toml:5:12: unknown day `funday`"),
            "{all}"
        );
        assert!(
            all.contains("policy.toml:5:29: `25:00` is not a time of day"),
            "{all}"
        );
        assert!(
            all.contains("policy.toml:8:13: unknown on_return rule"),
            "{all}"
        );
        assert!(all.contains("policy.toml:9:17:"), "{all}");
        assert!(all.contains("policy.toml:11:8:"), "{all}");
        assert!(
            all.contains("policy.toml:12:11: workers = 0 is out of range"),
            "{all}"
        );
        assert!(
            all.contains("policy.toml:13:14: unknown disk_limit `off`"),
            "{all}"
        );
        assert_eq!(errs.len(), 9, "{all}");
        assert!(errs.iter().all(|e| e.contains("\n  hint: ")), "{all}");
    }

    #[test]
    fn a_data_cap_is_a_size_above_zero_refused_at_its_value() {
        let e = parse("[share]\ndata_per_day = \"50%\"\ndata_per_month = 0\n").unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("policy.toml:2:16: "), "{e:?}");
        assert!(
            e[1].starts_with("policy.toml:3:18: a data cap of 0 would never start a worker"),
            "{e:?}"
        );
        assert!(e.iter().all(|e| e.contains("\"2GiB\"")), "{e:?}");
    }

    #[test]
    fn comfort_is_off_unless_set_and_reads_its_keys() {
        let off = parse("").unwrap().comfort;
        assert!(!off.limits_set());
        assert!(off.quiet_hours.is_empty());
        assert_eq!(off.cool_for, DEFAULT_COOL_FOR);
        let c = parse(
            r#"[comfort]
max_temperature = "80C"
max_fan = "3000rpm"
cool_for = "5m"
quiet_hours = [
  { days = "daily", from = "22:00", to = "07:00", cpus = 1 },
  { days = "sat,sun", from = "12:00", to = "14:00", cpus = "25%" },
]
"#,
        )
        .unwrap()
        .comfort;
        assert_eq!(c.max_temperature, Some(80.0));
        assert_eq!(c.max_fan, Some(3000));
        assert_eq!(c.cool_for, Duration::from_secs(300));
        assert_eq!(
            c.quiet_hours,
            vec![
                QuietHours {
                    window: Window {
                        days: DaySet::ALL,
                        from: 22 * 60,
                        to: 7 * 60
                    },
                    cpus: Share::Amount(1)
                },
                QuietHours {
                    window: Window {
                        days: DaySet(0b110_0000),
                        from: 12 * 60,
                        to: 14 * 60
                    },
                    cpus: Share::Percent(25.0)
                },
            ]
        );
        // Bare numbers are degrees and RPM.
        let c = parse("[comfort]\nmax_temperature = 75\nmax_fan = 2500\n")
            .unwrap()
            .comfort;
        assert_eq!((c.max_temperature, c.max_fan), (Some(75.0), Some(2500)));
    }

    #[test]
    fn comfort_errors_have_positions() {
        let errs = parse(
            r#"[comfort]
max_temperature = "176F"
max_fan = "90000rpm"
cool_for = "soon"
quiet_hours = [
  { days = "daily", from = "22:00", to = "22:00", cpus = 1 },
  { days = "mon", from = "01:00", to = "02:00", cpus = 0 },
  { days = "mon", from = "01:00", to = "02:00", cpus = "lots" },
  { days = "mon", from = "01:00", to = "02:00", cpu = 1 },
]
"#,
        )
        .unwrap_err();
        let all = errs.join("\n");
        // An unknown key is a syntax error: reported alone, with its position.
        assert!(all.contains("policy.toml:9:"), "{all}");
        assert!(all.contains("unknown field `cpu`"), "{all}");
        let errs = parse(
            r#"[comfort]
max_temperature = "176F"
max_fan = "90000rpm"
cool_for = "soon"
quiet_hours = [
  { days = "daily", from = "22:00", to = "22:00", cpus = 1 },
  { days = "mon", from = "01:00", to = "02:00", cpus = 0 },
  { days = "mon", from = "01:00", to = "02:00", cpus = "lots" },
]
[share]
cpus = 2
"#,
        )
        .unwrap_err();
        let all = errs.join("\n");
        for want in [
            "policy.toml:2:19: `176F` is not a temperature",
            "policy.toml:3:11: max_fan 90000rpm is outside 300rpm to 20000rpm",
            "policy.toml:4:12: `soon` is not a duration",
            "policy.toml:6:42: window from 22:00 to 22:00 is empty",
            "policy.toml:7:56: cpus = 0 in quiet hours",
            "policy.toml:8:56: `lots` is neither a count nor a percentage",
        ] {
            assert!(all.contains(want), "{want}\n{all}");
        }
        assert_eq!(errs.len(), 6, "{all}");
        let e = parse("[comfort]\nmax_temperature = 30\n").unwrap_err();
        assert!(
            e[0].starts_with("policy.toml:2:19: max_temperature 30C is outside 40C to 105C"),
            "{e:?}"
        );
    }

    #[test]
    fn an_unknown_on_metered_rule_is_refused_at_its_value() {
        let e = parse("[owner]\non_return = \"pause\"\non_metered = \"cheap\"\n").unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("policy.toml:3:14: unknown on_metered rule `cheap`"),
            "{e:?}"
        );
        assert!(e[0].contains("\"no-downloads\""), "{e:?}");
    }

    #[test]
    fn wrapping_and_overlapping_windows_are_legal() {
        let p = parse(
            r#"[schedule]
windows = [
  { days = "daily", from = "22:00", to = "06:00" },
  { days = "daily", from = "05:00", to = "08:00" },
  { days = "sat", from = "00:00", to = "24:00" },
]"#,
        )
        .unwrap();
        assert_eq!(p.windows.len(), 3);
    }

    #[test]
    fn more_windows_than_a_week_holds_are_refused_at_the_list() {
        let one = "{ days = \"mon\", from = \"00:00\", to = \"00:30\" },";
        let src = format!("[schedule]\nwindows = [{}]\n", one.repeat(MAX_WINDOWS + 1));
        let e = parse(&src).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("policy.toml:2:11: 337 windows are more than the 336"),
            "{e:?}"
        );
        let src = format!("[schedule]\nwindows = [{}]\n", one.repeat(MAX_WINDOWS));
        assert_eq!(parse(&src).unwrap().windows.len(), MAX_WINDOWS);
    }

    #[test]
    fn unknown_keys_and_bad_syntax_have_positions() {
        let e = parse("[owner]\nsesions = \"any\"\n").unwrap_err();
        assert!(
            e[0].starts_with("policy.toml:2:1: unknown field `sesions`"),
            "{e:?}"
        );
        let e = parse("[share\ncpus = 1").unwrap_err();
        assert!(e[0].starts_with("policy.toml:1:"), "{e:?}");
    }

    /// Using the machine without typing counts by default; each kind of signal can be turned
    /// off alone, and a value that is not a boolean is refused at its position.
    #[test]
    fn use_signals_are_on_unless_the_owner_turns_them_off() {
        let p = parse("").unwrap();
        assert!(p.media_is_use && p.inhibitors_are_use);
        let p = parse("[owner]\nmedia_is_use = false\n").unwrap();
        assert!(!p.media_is_use && p.inhibitors_are_use);
        let p = parse("[owner]\ninhibitors_are_use = false\n").unwrap();
        assert!(p.media_is_use && !p.inhibitors_are_use);
        let e = parse("[owner]\nsessions = \"active\"\nmedia_is_use = \"yes\"\n").unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("policy.toml:3:16: invalid type: string \"yes\", expected a boolean"),
            "{e:?}"
        );
        let e = parse("[owner]\ninhibitors_are_use = 1\n").unwrap_err();
        assert!(e[0].starts_with("policy.toml:2:22: "), "{e:?}");
    }
}
