//! Table-driven tests over fixed instants, plus properties over random instants and zones.

use super::*;
use chrono::Duration as ChronoDuration;
use pilotd_core::config::policy::Window;
use pilotd_core::config::units::{Share, parse_days, parse_time_of_day};
fn rome() -> pilotd_core::zone::Zone {
    pilotd_core::zone::Zone::named("Europe/Rome").expect("tzdata has Europe/Rome")
}
use proptest::prelude::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn w(days: &str, from: &str, to: &str) -> Window {
    Window {
        days: parse_days(days).unwrap(),
        from: parse_time_of_day(from).unwrap(),
        to: parse_time_of_day(to).unwrap(),
    }
}

/// The classic policy: nights and weekends, in rome().
fn nights_and_weekends() -> Policy {
    let mut p = Policy::defaults(rome());
    p.windows = vec![
        w("mon-fri", "19:00", "07:30"),
        w("sat,sun", "00:00", "24:00"),
    ];
    p
}

const LIMITS: Limits = Limits {
    max_lifetime: Duration::from_secs(24 * 3600),
    likely_free_until: None,
    splay: crate::splay::Splay::OFF,
    started: None,
    data: None,
};

/// A host that has been free for an hour at `now`.
fn free_host(now: DateTime<Utc>) -> HostSnapshot {
    HostSnapshot::test(now).with_free_since(Some(now - ChronoDuration::hours(1)))
}

#[test]
fn weekday_evening_computes_until_the_guard_band() {
    let p = nights_and_weekends();
    // Tuesday 2026-01-13 21:30 rome() = 20:30 UTC. Period ends Wed 07:30 = 06:30 UTC.
    let now = utc("2026-01-13T20:30:00Z");
    let s = decide(&p, &free_host(now), LIMITS, now);
    assert!(s.allowed, "{:?}", s.reasons);
    assert_eq!(s.workers, 1);
    assert_eq!(s.evict, Evict::None);
    assert_eq!(s.die_at, Some(utc("2026-01-14T06:20:00Z")));
    assert_eq!(s.accept_until, Some(utc("2026-01-13T22:20:00Z")));
    assert_eq!(
        s.per_worker,
        Resources {
            cpus: 4,
            memory_mib: 8192,
            disk_kib: 20 << 20,
            gpus: 0
        }
    );
    assert_eq!(s.next_change, Some(utc("2026-01-13T22:20:00Z")));
    assert_eq!(s.causes, vec![Cause::Free]);
}

#[test]
fn table_of_instants() {
    let p = nights_and_weekends();
    // (now, allowed, evict, first reason contains)
    let cases = [
        (
            "2026-01-13T10:00:00Z",
            false,
            Evict::Graceful,
            "outside the schedule",
        ),
        ("2026-01-14T06:25:00Z", false, Evict::Graceful, "within 10m"),
        (
            "2026-01-14T06:19:00Z",
            false,
            Evict::None,
            "too little time left",
        ),
        ("2026-01-17T12:00:00Z", true, Evict::None, "host free"),
        ("2026-01-16T18:00:00Z", true, Evict::None, "host free"),
        ("2026-01-16T17:59:00Z", false, Evict::Graceful, "outside"),
    ];
    for (now, allowed, evict, reason) in cases {
        let now = utc(now);
        let s = decide(&p, &free_host(now), LIMITS, now);
        assert_eq!(s.allowed, allowed, "{now}: {:?}", s.reasons);
        assert_eq!(s.evict, evict, "{now}: {:?}", s.reasons);
        assert!(s.reasons[0].contains(reason), "{now}: {:?}", s.reasons);
        assert_eq!(s.reasons.len(), s.causes.len());
    }
}

#[test]
fn weekend_runs_die_at_capped_by_max_lifetime() {
    let p = nights_and_weekends();
    let now = utc("2026-01-17T12:00:00Z");
    let s = decide(&p, &free_host(now), LIMITS, now);
    assert_eq!(s.die_at, Some(now + ChronoDuration::hours(24)));
    assert_eq!(s.accept_until, Some(now + ChronoDuration::hours(16)));
}

#[test]
fn learned_availability_caps_die_at() {
    let p = nights_and_weekends();
    let now = utc("2026-01-17T12:00:00Z");
    let limits = Limits {
        likely_free_until: Some(now + ChronoDuration::hours(10)),
        ..LIMITS
    };
    let s = decide(&p, &free_host(now), limits, now);
    assert_eq!(s.die_at, Some(now + ChronoDuration::hours(10)));
    assert_eq!(s.accept_until, Some(now + ChronoDuration::hours(2)));
    // A prediction in the past means "no evidence", not "leave now".
    let limits = Limits {
        likely_free_until: Some(now),
        ..LIMITS
    };
    assert_eq!(
        decide(&p, &free_host(now), limits, now).die_at,
        Some(now + ChronoDuration::hours(24))
    );
}

#[test]
fn owner_login_evicts_immediately_with_on_return() {
    for mode in [Evict::Pause, Evict::Graceful, Evict::Fast] {
        let mut p = nights_and_weekends();
        p.on_return = mode;
        let now = utc("2026-01-17T12:00:00Z");
        let h = free_host(now).with_session("alice", 1000, Some(5));
        let s = decide(&p, &h, LIMITS, now);
        assert!(!s.allowed);
        assert_eq!(s.workers, 0);
        assert_eq!(s.evict, mode);
        assert!(
            s.reasons.iter().any(|r| r.contains("alice logged in")),
            "{:?}",
            s.reasons
        );
        assert_eq!(s.host_free_since, None, "the free latch resets");
    }
}

#[test]
fn ignored_users_system_uids_and_idle_sessions() {
    let now = utc("2026-01-17T12:00:00Z");
    let mut p = nights_and_weekends();
    let h = free_host(now)
        .with_session("root", 0, None)
        .with_session("condor", 1001, None);
    assert!(
        decide(&p, &h, LIMITS, now).allowed,
        "ignored users do not count"
    );
    let h = free_host(now).with_session("gdm", 120, None);
    assert!(
        decide(&p, &h, LIMITS, now).allowed,
        "system uids do not count"
    );

    p.sessions = SessionRule::Active;
    let idle = free_host(now).with_session("alice", 1000, Some(3600));
    assert!(decide(&p, &idle, LIMITS, now).allowed, "idle for 1h > 15m");
    let active = free_host(now).with_session("alice", 1000, Some(60));
    assert!(!decide(&p, &active, LIMITS, now).allowed);
    let unknown_idle = free_host(now).with_session("alice", 1000, None);
    assert!(
        !decide(&p, &unknown_idle, LIMITS, now).allowed,
        "unknown idle counts as active"
    );

    p.sessions = SessionRule::Ignore;
    assert!(decide(&p, &active, LIMITS, now).allowed);
}

/// The presence table: sessions at `now` under `sessions = "active"`, 15 min of
/// `session_idle` and 1 min of `lock_grace` (the shipped default's values): a lock (past or
/// within `lock_grace`), logind's idleness, the machine's input devices (for a session at its
/// own keyboard only), and sessions nobody can judge. (what, host, allowed, note contains)
fn presence_table(now: DateTime<Utc>) -> Vec<(&'static str, HostSnapshot, bool, &'static str)> {
    let ago = |s: i64| Some(now - ChronoDuration::seconds(s));
    vec![
        (
            "desk, typing now, not locked",
            free_host(now)
                .with_desk_session("alice", 1000, Some(0), None)
                .with_input_idle(Some(2)),
            false,
            "",
        ),
        (
            "desk locked 5 min ago",
            free_host(now)
                .with_desk_session("alice", 1000, Some(0), ago(300))
                .with_input_idle(Some(2)),
            true,
            "alice is away (locked since",
        ),
        (
            "desk locked 30 s ago: within lock_grace",
            free_host(now).with_desk_session("alice", 1000, Some(0), ago(30)),
            false,
            "",
        ),
        (
            "desk, logind idle for 20 min",
            free_host(now).with_desk_session("alice", 1000, Some(1200), None),
            true,
            "alice is away (idle for 15m or more)",
        ),
        (
            "desk never idle per logind (KDE), no input for 20 min",
            free_host(now)
                .with_desk_session("alice", 1000, Some(0), None)
                .with_input_idle(Some(1200)),
            true,
            "alice is away (no keyboard or mouse input for 15m or more)",
        ),
        (
            "desk, no idle hint, input 5 min ago",
            free_host(now)
                .with_desk_session("alice", 1000, None, None)
                .with_input_idle(Some(300)),
            false,
            "",
        ),
        (
            "desk, nothing can be read: in use (fail safe)",
            free_host(now).with_desk_session("alice", 1000, None, None),
            false,
            "",
        ),
        (
            "ssh typing now while the machine's keyboard is idle: present",
            free_host(now)
                .with_session("bob", 1001, Some(3))
                .with_input_idle(Some(7200)),
            false,
            "",
        ),
        (
            "ssh idle for an hour",
            free_host(now).with_session("bob", 1001, Some(3600)),
            true,
            "bob is away (idle for 15m or more)",
        ),
        (
            "one away, one present: present wins",
            free_host(now)
                .with_desk_session("alice", 1000, Some(0), ago(600))
                .with_session("bob", 1001, Some(3)),
            false,
            "alice is away (locked since",
        ),
    ]
}

/// `sessions = "active"` over the presence table.
#[test]
fn away_when_locked_idle_or_without_input() {
    let now = utc("2026-01-17T12:00:00Z");
    let mut p = nights_and_weekends();
    p.sessions = SessionRule::Active;
    p.session_idle = Duration::from_secs(900);
    p.lock_grace = Duration::from_secs(60);
    let ago = |s: i64| Some(now - ChronoDuration::seconds(s));
    for (what, h, allowed, note) in presence_table(now) {
        let s = decide(&p, &h, LIMITS, now);
        assert_eq!(s.allowed, allowed, "{what}: {:?} {:?}", s.reasons, s.notes);
        assert_eq!(s.reasons.len(), s.causes.len(), "{what}");
        if !allowed {
            assert_eq!(s.causes[0], Cause::OwnerPresent, "{what}");
            assert_eq!(s.evict, p.on_return, "{what}");
        }
        assert!(
            s.notes.iter().any(|n| n.contains(note)),
            "{what}: {:?}",
            s.notes
        );
    }

    // Under "any", a lock changes nothing: any login means the owner is here.
    p.sessions = SessionRule::Any;
    let locked = free_host(now).with_desk_session("alice", 1000, Some(7200), ago(3600));
    assert!(!decide(&p, &locked, LIMITS, now).allowed);
}

/// A policy read from `text` as `pilotd check` reads one (in UTC).
fn read_policy(text: &str) -> Policy {
    let mut d = pilotd_core::config::Diagnostics::new(std::path::Path::new("policy.toml"), text);
    let raw = toml::from_str(text).expect("the policy is TOML");
    let (p, _) = pilotd_core::config::policy::validate(raw, pilotd_core::zone::Zone::utc(), &mut d);
    assert!(d.is_empty(), "{:?}", d.into_vec());
    p
}

/// A key left out means what the docs call its default: an owner who writes a short policy of
/// their own, with an empty `[owner]`, gets the shipped policy's judgement of every session in
/// the presence table (not "any login blocks computing"). Only the schedule is taken from the
/// shipped file, since the built-in window is always open.
#[test]
fn an_empty_owner_table_decides_like_the_shipped_policy() {
    let shipped = read_policy(include_str!("../../../../../policies/default.toml"));
    let mut short = read_policy("[owner]\n");
    short.windows = shipped.windows.clone();
    short.evict_before_end = shipped.evict_before_end;
    // Saturday noon: inside the shipped windows, so presence alone decides.
    let now = utc("2026-01-17T12:00:00Z");
    for (what, h, allowed, _) in presence_table(now) {
        let a = decide(&shipped, &h, LIMITS, now);
        let b = decide(&short, &h, LIMITS, now);
        assert_eq!(
            a.allowed, allowed,
            "{what}: the shipped policy: {:?}",
            a.reasons
        );
        assert_eq!(b, a, "{what}: an empty [owner] decides otherwise");
    }
    assert_eq!(
        short,
        {
            let mut s = shipped.clone();
            s.timezone = short.timezone.clone();
            s
        },
        "every built-in default is the shipped policy's value"
    );
}

/// A session within its lock's grace is in use, and the decision says it is locked (never
/// "not locked"); when the lock's instant is unknown (a one-shot look without the daemon's
/// record), it says that instead of an instant it does not have.
#[test]
fn a_lock_within_its_grace_is_said_as_such() {
    let now = utc("2026-01-17T12:00:00Z");
    let mut p = nights_and_weekends();
    p.sessions = SessionRule::Active;
    p.lock_grace = Duration::from_secs(60);
    let h = free_host(now).with_desk_session(
        "alice",
        1000,
        Some(0),
        Some(now - ChronoDuration::seconds(20)),
    );
    let s = decide(&p, &h, LIMITS, now);
    assert!(!s.allowed);
    assert_eq!(
        s.reasons[0],
        "alice logged in and in use (locked since Sat 12:59 CET, not yet for lock_grace, 1m)"
    );
    let h = HostSnapshot {
        lock_instants_unknown: true,
        ..h
    };
    let s = decide(&p, &h, LIMITS, now);
    assert_eq!(
        s.reasons[0],
        "alice logged in and in use (locked, since unknown: counted as in use for lock_grace, 1m)"
    );
    // Not locked at all: said as before.
    let h = free_host(now).with_desk_session("alice", 1000, Some(0), None);
    let s = decide(&p, &h, LIMITS, now);
    assert_eq!(
        s.reasons[0],
        "alice logged in and in use (not locked, not idle)"
    );
}

#[test]
fn a_lock_within_its_grace_wakes_the_loop_when_the_grace_ends() {
    let now = utc("2026-01-17T12:00:00Z");
    let mut p = nights_and_weekends();
    p.sessions = SessionRule::Active;
    p.lock_grace = Duration::from_secs(60);
    let since = now - ChronoDuration::seconds(20);
    let h = free_host(now).with_desk_session("alice", 1000, Some(0), Some(since));
    let s = decide(&p, &h, LIMITS, now);
    assert!(!s.allowed);
    assert_eq!(s.next_change, Some(since + ChronoDuration::seconds(60)));
}

#[test]
fn quiet_input_wakes_the_loop_when_it_has_been_quiet_for_session_idle() {
    let now = utc("2026-01-17T12:00:00Z");
    let mut p = nights_and_weekends();
    p.sessions = SessionRule::Active;
    p.session_idle = Duration::from_secs(900);
    let h = free_host(now)
        .with_desk_session("alice", 1000, None, None)
        .with_input_idle(Some(600));
    let s = decide(&p, &h, LIMITS, now);
    assert!(!s.allowed);
    assert_eq!(s.next_change, Some(now + ChronoDuration::seconds(300)));
}

#[test]
fn a_coming_sleep_evicts_as_on_return_and_restarts_the_free_latch() {
    let now = utc("2026-01-17T12:00:00Z");
    let p = nights_and_weekends();
    let mut h = free_host(now);
    h.sleeping = true;
    let s = decide(&p, &h, LIMITS, now);
    assert!(!s.allowed);
    assert_eq!(s.evict, p.on_return);
    assert_eq!(s.causes, vec![Cause::Sleeping]);
    assert_eq!(
        s.host_free_since, None,
        "free_for counts again after the wake-up"
    );
}

#[test]
fn the_notes_say_which_sources_decided() {
    let now = utc("2026-01-17T12:00:00Z");
    let p = nights_and_weekends();
    let note = |h: &HostSnapshot| decide(&p, h, LIMITS, now).notes.join(" | ");
    assert!(note(&free_host(now)).contains("sessions from logind and utmp"));
    let mut h = free_host(now);
    h.utmp_absent = true;
    assert!(note(&h).contains("sessions from logind; utmp absent"));
    let mut h = free_host(now);
    h.logind_unavailable = Some("no bus".into());
    assert!(note(&h).contains("sessions from utmp alone: systemd-logind cannot be asked (no bus)"));
    h.utmp_absent = true;
    assert!(note(&h).contains("no source of sessions"));
    assert!(note(&h).contains("no keyboard or mouse readable"));
    assert!(note(&h.clone().with_input_idle(Some(5))).contains("keyboard and mouse watched"));
}

#[test]
fn unknown_sessions_fail_safe() {
    let p = nights_and_weekends();
    let now = utc("2026-01-17T12:00:00Z");
    let h = free_host(now).with_sessions_unknown("cannot read /var/run/utmp: No such file");
    let s = decide(&p, &h, LIMITS, now);
    assert!(!s.allowed);
    assert_eq!(s.evict, p.on_return);
    assert!(
        s.reasons[0].contains("cannot tell who is logged in"),
        "{:?}",
        s.reasons
    );
}

#[test]
fn unknown_sessions_do_not_matter_when_logins_are_ignored() {
    let mut p = nights_and_weekends();
    p.sessions = SessionRule::Ignore;
    let now = utc("2026-01-17T12:00:00Z");
    let h = free_host(now).with_sessions_unknown("cannot read /var/run/utmp");
    let s = decide(&p, &h, LIMITS, now);
    assert!(s.allowed, "{:?}", s.reasons);
}

#[test]
fn owner_cpu_latch() {
    let p = nights_and_weekends(); // max 25%, busy_for 2m, free_for 15m
    let t0 = utc("2026-01-17T12:00:00Z");
    // Total 60% but 50% is our own workers: owner 10%, fine.
    let s = decide(&p, &free_host(t0).with_cpu(0.60, 0.50), LIMITS, t0);
    assert!(s.allowed);
    assert_eq!(s.owner_busy_since, None);

    // Owner at 40%: latch starts, keep running, start none.
    let h = free_host(t0).with_cpu(0.40, 0.0);
    let s = decide(&p, &h, LIMITS, t0);
    assert!(!s.allowed);
    assert_eq!(s.evict, Evict::None);
    assert_eq!(s.owner_busy_since, Some(t0));
    assert_eq!(s.next_change, Some(t0 + ChronoDuration::minutes(2)));

    // 2 minutes later, still busy: evict.
    let t1 = t0 + ChronoDuration::minutes(2);
    let h = HostSnapshot::test(t1)
        .with_cpu(0.40, 0.0)
        .with_busy_since(Some(t0));
    let s = decide(&p, &h, LIMITS, t1);
    assert_eq!(s.evict, p.on_return);

    // CPU drops: the free latch starts now; workers wait free_for.
    let t2 = t1 + ChronoDuration::minutes(1);
    let h = HostSnapshot::test(t2).with_busy_since(Some(t0));
    let s = decide(&p, &h, LIMITS, t2);
    assert_eq!(s.owner_busy_since, None);
    assert_eq!(s.host_free_since, Some(t2));
    assert!(!s.allowed);
    assert_eq!(s.evict, Evict::None);
    assert_eq!(s.next_change, Some(t2 + ChronoDuration::minutes(15)));
    let t3 = t2 + ChronoDuration::minutes(15);
    let h = HostSnapshot::test(t3).with_free_since(s.host_free_since);
    assert!(decide(&p, &h, LIMITS, t3).allowed);
}

#[test]
fn battery_and_exclusive_processes() {
    let mut p = nights_and_weekends();
    let now = utc("2026-01-17T12:00:00Z");
    let s = decide(&p, &free_host(now).with_battery(true), LIMITS, now);
    assert!(!s.allowed);
    assert!(s.reasons.iter().any(|r| r.contains("battery")));
    p.on_battery = BatteryRule::Ignore;
    assert!(decide(&p, &free_host(now).with_battery(true), LIMITS, now).allowed);

    let mut h = free_host(now);
    h.exclusive_running = vec!["matlab".into()];
    let s = decide(&p, &h, LIMITS, now);
    assert!(!s.allowed);
    assert!(s.reasons.iter().any(|r| r.contains("matlab running")));
}

#[test]
fn shares_split_over_workers() {
    let now = utc("2026-01-17T12:00:00Z");
    let mut p = nights_and_weekends();
    p.share.workers = 3;
    p.share.cpus = Share::Percent(75.0); // 6 of 8
    p.share.memory = Share::Amount(9 << 30);
    p.share.gpus = 2;
    let s = decide(&p, &free_host(now), LIMITS, now);
    assert_eq!(s.workers, 3);
    assert_eq!(
        s.per_worker,
        Resources {
            cpus: 2,
            memory_mib: 3072,
            disk_kib: (20 << 20) / 3,
            gpus: 0
        }
    );

    // More workers than shared CPUs: fewer workers, each with a whole CPU.
    p.share.cpus = Share::Amount(2);
    p.share.workers = 4;
    let s = decide(&p, &free_host(now), LIMITS, now);
    assert_eq!((s.workers, s.per_worker.cpus), (2, 1));

    // A share larger than the machine is clamped to it.
    p.share.cpus = Share::Amount(64);
    p.share.workers = 1;
    p.share.memory = Share::Amount(1 << 40);
    let s = decide(&p, &free_host(now), LIMITS, now);
    assert_eq!(s.per_worker.cpus, 8);
    assert_eq!(s.per_worker.memory_mib, 16 << 10);
}

#[test]
fn dst_days_in_rome() {
    let mut p = Policy::defaults(rome());
    p.windows = vec![w("daily", "22:00", "06:00")];
    p.evict_before_end = Duration::ZERO;
    p.longest_job = Duration::from_secs(3600);
    // Saturday 2026-03-28 23:00 CET = 22:00 UTC; Sunday 06:00 CEST = 04:00 UTC.
    let now = utc("2026-03-28T22:00:00Z");
    let s = decide(&p, &free_host(now), LIMITS, now);
    assert_eq!(s.die_at, Some(utc("2026-03-29T04:00:00Z")));
    // Saturday 2026-10-24 23:00 CEST = 21:00 UTC; Sunday 06:00 CET = 05:00 UTC.
    let now = utc("2026-10-24T21:00:00Z");
    let s = decide(&p, &free_host(now), LIMITS, now);
    assert_eq!(s.die_at, Some(utc("2026-10-25T05:00:00Z")));
}

fn any_tz() -> impl Strategy<Value = pilotd_core::zone::Zone> {
    proptest::sample::select(pilotd_core::zone::Zone::available())
        .prop_map(|name| pilotd_core::zone::Zone::named(&name).expect("a zone the database lists"))
}

fn any_window() -> impl Strategy<Value = Window> {
    (1u8..128, 0u16..1440, 1u16..=1440).prop_filter_map("empty", |(d, f, t)| {
        (f != t).then_some(Window {
            days: pilotd_core::config::units::DaySet(d),
            from: f,
            to: t,
        })
    })
}

fn any_instant() -> impl Strategy<Value = DateTime<Utc>> {
    // 2000..2100
    (946_684_800i64..4_102_444_800).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn never_a_worker_while_an_owner_session_is_active(
        tz in any_tz(), ws in proptest::collection::vec(any_window(), 0..4),
        now in any_instant(), idle in 0u64..899,
    ) {
        let mut p = Policy::defaults(tz);
        p.windows = ws;
        p.sessions = SessionRule::Active;
        let h = free_host(now).with_session("alice", 1000, Some(idle));
        let s = decide(&p, &h, LIMITS, now);
        prop_assert!(!s.allowed);
        prop_assert_eq!(s.workers, 0);
        prop_assert!(s.evict != Evict::None);
    }

    #[test]
    fn total_and_within_the_machine(
        tz in any_tz(), ws in proptest::collection::vec(any_window(), 0..4),
        now in any_instant(), workers in 1u32..16, cpus in 1u32..128, pct in 1u32..=100,
    ) {
        let mut p = Policy::defaults(tz);
        p.windows = ws;
        p.share.workers = workers;
        p.share.cpus = Share::Percent(f64::from(pct));
        let mut h = free_host(now);
        h.cpus = cpus;
        let s = decide(&p, &h, LIMITS, now);
        prop_assert!(u64::from(s.workers) * u64::from(s.per_worker.cpus) <= u64::from(cpus));
        prop_assert!(u64::from(s.workers) * s.per_worker.memory_mib * 1024 <= h.memory_total_kib);
        if let (Some(d), Some(a)) = (s.die_at, s.accept_until) {
            prop_assert!(a < d);
            prop_assert!(d <= now + ChronoDuration::hours(24));
        }
        if s.allowed {
            prop_assert!(s.die_at.is_some_and(|d| d > now));
            prop_assert!(calendar::is_open(&p.windows, &p.timezone, now));
        }
        if let Some(n) = s.next_change { prop_assert!(n > now); }
    }

    #[test]
    fn repeats_week_to_week_away_from_dst(
        ws in proptest::collection::vec(any_window(), 1..4), secs in 0i64..(7 * 86400),
    ) {
        // Mid-January weeks in rome() have no DST change within the horizon.
        let now = utc("2026-01-05T00:00:00Z") + ChronoDuration::seconds(secs);
        let later = now + ChronoDuration::weeks(1);
        let mut p = Policy::defaults(rome());
        p.windows = ws;
        let a = decide(&p, &free_host(now), LIMITS, now);
        let b = decide(&p, &free_host(later), LIMITS, later);
        prop_assert_eq!(a.allowed, b.allowed);
        prop_assert_eq!(a.evict, b.evict);
        prop_assert_eq!(a.die_at.map(|d| d + ChronoDuration::weeks(1)), b.die_at);
    }
}

/// Any instant chrono can represent, weighted toward the ends of its range and of pilotd's.
fn extreme_instant() -> impl Strategy<Value = DateTime<Utc>> {
    let min = DateTime::<Utc>::MIN_UTC.timestamp();
    let max = DateTime::<Utc>::MAX_UTC.timestamp();
    prop_oneof![
        (min..=max).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap()),
        (0i64..86_400 * 30).prop_map(move |s| DateTime::from_timestamp(max - s, 0).unwrap()),
        (0i64..86_400 * 30).prop_map(move |s| DateTime::from_timestamp(min + s, 0).unwrap()),
        (0i64..86_400 * 30).prop_map(|s| pilotd_core::horizon::before(
            pilotd_core::horizon::latest(),
            Duration::from_secs(s as u64)
        )),
        any_instant(),
    ]
}

/// Any duration, weighted toward the longest ones (past what `check` accepts too: a
/// snapshot or state file could carry them).
fn extreme_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        any::<u64>().prop_map(Duration::from_secs),
        Just(Duration::MAX),
        Just(pilotd_core::horizon::MAX_DURATION),
        (0u64..86_400 * 14).prop_map(Duration::from_secs),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// No panic and a coherent answer for any instant and any durations: chrono panics on
    /// `instant + duration` past its range, and a panic in the daemon fails open.
    #[test]
    fn decide_is_total_at_extreme_instants_and_durations(
        tz in any_tz(), ws in proptest::collection::vec(any_window(), 0..3),
        now in extreme_instant(), since in proptest::option::of(extreme_instant()),
        busy in proptest::option::of(extreme_instant()),
        busy_for in extreme_duration(), free_for in extreme_duration(),
        evict_before_end in extreme_duration(), longest_job in extreme_duration(),
        max_lifetime in extreme_duration(), likely in proptest::option::of(extreme_instant()),
        cpu in 0.0f64..1.0,
    ) {
        let mut p = Policy::defaults(tz);
        p.windows = ws;
        p.busy_for = busy_for;
        p.free_for = free_for;
        p.evict_before_end = evict_before_end;
        p.longest_job = longest_job;
        let mut h = HostSnapshot::test(now).with_free_since(since);
        h.owner_busy_since = busy;
        h.cpu_busy = cpu;
        let limits = Limits { max_lifetime, likely_free_until: likely, ..LIMITS };
        let s = decide(&p, &h, limits, now);
        if let Some(n) = s.next_change { prop_assert!(n > now); }
        if s.allowed {
            prop_assert!(s.die_at.is_some_and(|d| d > now), "{:?}", s);
        }
        prop_assert_eq!(s.reasons.len(), s.causes.len());
    }
}

/// A snooze that cannot be read fails toward the owner: snoozed, with the reason, whatever
/// instant an earlier read left.
#[test]
fn a_snooze_that_cannot_be_read_counts_as_snoozed() {
    let mut p = nights_and_weekends();
    p.on_return = Evict::Pause;
    let now = utc("2026-01-13T20:30:00Z");
    let mut h = free_host(now);
    h.snooze_unreadable =
        Some("cannot read the owner's snooze in /s/snooze.json: Too many open files".into());
    let s = decide(&p, &h, LIMITS, now);
    assert!(!s.allowed);
    assert_eq!(s.workers, 0);
    assert_eq!(s.evict, Evict::Pause);
    assert_eq!(s.causes, vec![Cause::Snoozed]);
    assert_eq!(
        s.reasons,
        vec![
            "cannot read the owner's snooze in /s/snooze.json: Too many open files; counted as snoozed until it can be read (`pilotd resume` removes it)"
        ]
    );
}

#[test]
fn a_snooze_holds_until_its_instant_then_the_host_is_free_again() {
    let mut p = nights_and_weekends();
    p.on_return = Evict::Pause;
    let now = utc("2026-01-13T20:30:00Z");
    let until = utc("2026-01-13T21:30:00Z");
    let s = decide(&p, &free_host(now).with_snooze(Some(until)), LIMITS, now);
    assert!(!s.allowed);
    assert_eq!(s.workers, 0);
    assert_eq!(s.evict, Evict::Pause, "running workers as on_return says");
    assert_eq!(s.causes, vec![Cause::Snoozed]);
    assert_eq!(s.reasons, vec!["snoozed by the owner until Tue 22:30 CET"]);
    assert_eq!(s.next_change, Some(until), "the loop wakes when it ends");
    assert_eq!(
        s.host_free_since, None,
        "free_for counts again after a snooze"
    );
    // At its end, the snooze is over by itself.
    let s = decide(
        &p,
        &free_host(until).with_snooze(Some(until)),
        LIMITS,
        until,
    );
    assert!(s.allowed, "{:?}", s.reasons);
}

#[test]
fn downloads_follow_the_schedule_with_a_lead() {
    let p = nights_and_weekends();
    // (now, downloads): Tuesday's window opens 19:00 rome() = 18:00 UTC.
    let table = [
        ("2026-01-13T10:00:00Z", false), // closed for hours
        ("2026-01-13T17:29:00Z", false), // 31 minutes before
        ("2026-01-13T17:30:00Z", true),  // 30 minutes before: fetch ahead
        ("2026-01-13T20:30:00Z", true),  // open
        ("2026-01-14T06:25:00Z", false), // the guard band: the period is ending
    ];
    for (now, want) in table {
        let s = decide(&p, &free_host(utc(now)), LIMITS, utc(now));
        assert_eq!(s.downloads, want, "{now}: {:?}", s.reasons);
    }
    // The loop wakes when the lead begins.
    let s = decide(
        &p,
        &free_host(utc("2026-01-13T10:00:00Z")),
        LIMITS,
        utc("2026-01-13T10:00:00Z"),
    );
    assert_eq!(s.next_change, Some(utc("2026-01-13T17:30:00Z")));
}

/// What the contribution counts as "the owner was there": the owner's own doing (a session,
/// their load, their exclusive program, their snooze), never the machine's state or what
/// pilotd cannot see.
#[test]
fn the_owner_is_there_for_their_own_causes_only() {
    let table = [
        (Cause::OwnerPresent, true),
        (Cause::Snoozed, true),
        (Cause::OwnerCpuHigh, true),
        (Cause::OwnerCpuEvict, true),
        (Cause::ExclusiveProcess, true),
        (Cause::SessionsUnknown, false),
        (Cause::Sleeping, false),
        (Cause::OnBattery, false),
        (Cause::OutsideSchedule, false),
        (Cause::GuardBand, false),
        (Cause::WaitingFreeFor, false),
        (Cause::TooLittleTime, false),
        (Cause::NoRoom, false),
        (Cause::FleetSplay, false),
        (Cause::Free, false),
    ];
    for (cause, there) in table {
        assert_eq!(cause.owner_there(), there, "{}", cause.as_str());
    }
}

/// Using the machine without typing (`in_use`) under `sessions = "active"`, 15 min of
/// `session_idle` and 1 min of `lock_grace`: a use makes its user present when the user counts
/// and the policy's key for its kind is on; a lock outweighs what is watched or heard (sound
/// playing, an idle inhibitor), never what needs someone there (sound recorded, a camera); a
/// desktop that reports idleness is believed over a quiet keyboard. (what, policy change,
/// host, allowed, the reason or a note contains)
#[test]
fn use_signals_keep_the_owner_here_as_the_rules_say() {
    use crate::snapshot::UseKind::{Camera, IdleInhibitor, SoundPlaying, SoundRecorded};
    let now = utc("2026-01-17T12:00:00Z");
    let ago = |s: i64| Some(now - ChronoDuration::seconds(s));
    let alice = Some(("alice", 1000));
    // alice at her desk, her keyboard and mouse untouched for 20 minutes, her desktop never
    // reporting idleness (KDE).
    let quiet_desk = || {
        free_host(now)
            .with_desk_session("alice", 1000, Some(0), None)
            .with_input_idle(Some(1200))
    };
    // The same desk locked 5 minutes ago.
    let locked_desk = || {
        free_host(now)
            .with_desk_session("alice", 1000, Some(0), ago(300))
            .with_input_idle(Some(1200))
    };
    type Change = fn(&mut Policy);
    let none: Change = |_| {};
    let table: Vec<(&str, Change, HostSnapshot, bool, &str)> = vec![
        (
            "quiet desk, nothing playing: away (the control)",
            none,
            quiet_desk(),
            true,
            "alice is away (no keyboard or mouse input for 15m or more)",
        ),
        (
            "quiet desk, a film playing",
            none,
            quiet_desk().with_use(SoundPlaying, alice),
            false,
            "alice is using the machine: sound is playing",
        ),
        (
            "quiet desk, a film, media_is_use = false",
            |p| p.media_is_use = false,
            quiet_desk().with_use(SoundPlaying, alice),
            true,
            "alice is away (no keyboard or mouse input",
        ),
        (
            "quiet desk, a call and its camera",
            none,
            quiet_desk()
                .with_use(Camera, alice)
                .with_use(SoundRecorded, alice)
                .with_use(SoundPlaying, alice),
            false,
            "alice is using the machine: sound is playing, sound is being recorded, the camera is in use",
        ),
        (
            "quiet desk, an idle inhibitor",
            none,
            quiet_desk().with_use(IdleInhibitor, alice),
            false,
            "alice is using the machine: an idle inhibitor is held",
        ),
        (
            "quiet desk, an idle inhibitor, inhibitors_are_use = false",
            |p| p.inhibitors_are_use = false,
            quiet_desk().with_use(IdleInhibitor, alice),
            true,
            "alice is away",
        ),
        (
            "GNOME reports idleness and says not idle: believed over a quiet keyboard",
            none,
            quiet_desk().idle_reported(),
            false,
            "alice logged in and in use (not locked, not idle)",
        ),
        (
            "GNOME says idle for 20 minutes: away",
            none,
            free_host(now)
                .with_desk_session("alice", 1000, Some(1200), None)
                .idle_reported()
                .with_input_idle(Some(1200)),
            true,
            "alice is away (idle for 15m or more)",
        ),
        (
            "locked desk, music left playing: away",
            none,
            locked_desk().with_use(SoundPlaying, alice),
            true,
            "alice's screen is locked: that sound is playing is not counted",
        ),
        (
            "locked desk, a presentation's inhibitor: away",
            none,
            locked_desk().with_use(IdleInhibitor, alice),
            true,
            "alice's screen is locked: that an idle inhibitor is held is not counted",
        ),
        (
            "locked desk, a call (sound recorded): here",
            none,
            locked_desk()
                .with_use(SoundRecorded, alice)
                .with_use(SoundPlaying, alice),
            false,
            "alice is using the machine: sound is being recorded",
        ),
        (
            "locked desk, the camera in use: here",
            none,
            locked_desk().with_use(Camera, alice),
            false,
            "alice is using the machine: the camera is in use",
        ),
        (
            "locked 30 s ago (within lock_grace), keyboard quiet, music: here by the music",
            none,
            free_host(now)
                .with_desk_session("alice", 1000, Some(0), ago(30))
                .with_input_idle(Some(1200))
                .with_use(SoundPlaying, alice),
            false,
            "alice is using the machine: sound is playing",
        ),
        (
            "an ssh session idle for an hour, an idle inhibitor: here",
            none,
            free_host(now)
                .with_session("alice", 1000, Some(3600))
                .with_use(IdleInhibitor, alice),
            false,
            "alice is using the machine: an idle inhibitor is held",
        ),
        (
            "no session at all, a camera in use: here",
            none,
            free_host(now).with_use(Camera, alice),
            false,
            "alice is using the machine: the camera is in use",
        ),
        (
            "a system account's sound (uid below system_uid_below): nobody",
            none,
            free_host(now).with_use(SoundPlaying, Some(("mpd", 110))),
            true,
            "",
        ),
        (
            "an ignored user's inhibitor (root): nobody",
            none,
            free_host(now).with_use(IdleInhibitor, Some(("root", 0))),
            true,
            "",
        ),
        (
            "root counted by the owner, its inhibitor is use",
            |p| {
                p.ignore_users.clear();
                p.system_uid_below = 0;
            },
            free_host(now).with_use(IdleInhibitor, Some(("root", 0))),
            false,
            "root is using the machine: an idle inhibitor is held",
        ),
        (
            "sound for nobody (no process seen, nobody at the seat): not counted, said",
            none,
            free_host(now).with_use(SoundPlaying, None),
            true,
            "sound is playing, but pilotd cannot tell for whom",
        ),
        (
            "alice in use at her desk, bob's music: both said",
            none,
            free_host(now)
                .with_desk_session("alice", 1000, Some(0), None)
                .with_input_idle(Some(3))
                .with_use(SoundPlaying, Some(("bob", 1001))),
            false,
            "alice logged in and in use (not locked, not idle); bob is using the machine: sound is playing",
        ),
        (
            "sessions = \"ignore\": uses do not matter either",
            |p| p.sessions = SessionRule::Ignore,
            quiet_desk().with_use(Camera, alice),
            true,
            "",
        ),
        (
            "sessions = \"any\": a use by someone not logged in counts",
            |p| p.sessions = SessionRule::Any,
            free_host(now).with_use(SoundRecorded, Some(("bob", 1001))),
            false,
            "bob is using the machine: sound is being recorded",
        ),
    ];
    for (what, change, h, allowed, said) in table {
        let mut p = nights_and_weekends();
        p.sessions = SessionRule::Active;
        p.session_idle = Duration::from_secs(900);
        p.lock_grace = Duration::from_secs(60);
        change(&mut p);
        let s = decide(&p, &h, LIMITS, now);
        assert_eq!(s.allowed, allowed, "{what}: {:?} {:?}", s.reasons, s.notes);
        if !allowed {
            assert_eq!(s.causes[0], Cause::OwnerPresent, "{what}");
            assert_eq!(s.causes.len(), s.reasons.len(), "{what}");
            assert_eq!(s.evict, p.on_return, "{what}");
        }
        let all = format!("{:?} {:?}", s.reasons, s.notes);
        assert!(all.contains(said), "{what}: {all}");
        // Never the program: the words are the kinds' own.
        for word in ["pipewire", "zoom", "mpv", "firefox"] {
            assert!(!all.contains(word), "{what}: {all}");
        }
    }
}

/// NetworkManager's word on the link, by the owner's `on_metered`: yes and guess-yes hold
/// pilotd's traffic (no downloads, no new worker; with "pause" the workers paused), every
/// other word, and no word at all, decides as an unmetered link does.
#[test]
fn a_metered_link_holds_downloads_and_new_workers_as_the_owner_says() {
    use crate::snapshot::Metered;
    use pilotd_core::config::MeteredRule;
    let p = nights_and_weekends();
    // Tuesday evening, in the window, the host free for an hour.
    let now = utc("2026-01-13T20:30:00Z");
    let free = decide(&p, &free_host(now), LIMITS, now);
    assert!(free.allowed && free.downloads, "{:?}", free.reasons);
    assert_eq!(free.link, LinkHold::Nothing);
    for m in [
        None,
        Some(Metered::No),
        Some(Metered::GuessNo),
        Some(Metered::Unknown),
    ] {
        let s = decide(&p, &free_host(now).with_metered(m), LIMITS, now);
        assert_eq!(s, free, "{m:?}: as if unmetered");
    }
    for m in [Metered::Yes, Metered::GuessYes] {
        let h = free_host(now).with_metered(Some(m));
        let s = decide(&p, &h, LIMITS, now);
        assert!(!s.allowed, "{m:?}");
        assert_eq!(s.workers, 0);
        assert!(!s.downloads, "{m:?}: no downloads");
        assert_eq!(s.evict, Evict::None, "running workers go on");
        assert_eq!(s.link, LinkHold::Downloads);
        assert_eq!(s.causes, vec![Cause::Metered]);
        assert_eq!(
            s.reasons,
            vec!["the network is metered (NetworkManager): no downloads".to_string()]
        );
        // Not the owner's presence: the host stays free, and is not busy in the history.
        assert_eq!(s.host_free_since, free.host_free_since);
        assert!(!Cause::Metered.owner_or_host_busy() && !Cause::Metered.owner_there());

        let mut pause = p.clone();
        pause.on_metered = MeteredRule::Pause;
        let s = decide(&pause, &h, LIMITS, now);
        assert_eq!(s.evict, Evict::Pause);
        assert_eq!(s.link, LinkHold::Workers);
        assert_eq!(
            s.reasons,
            vec![
                "the network is metered (NetworkManager): no downloads; workers paused".to_string()
            ]
        );
        // The owner back as well: their on_return (graceful) wins, and the pause is not the
        // link's alone.
        let s = decide(
            &pause,
            &h.clone().with_session("alice", 1000, Some(0)),
            LIMITS,
            now,
        );
        assert_eq!(s.evict, Evict::Graceful);
        assert_eq!(s.link, LinkHold::Downloads);
        assert_eq!(s.causes, vec![Cause::OwnerPresent, Cause::Metered]);

        let mut ignore = p.clone();
        ignore.on_metered = MeteredRule::Ignore;
        let mut want = decide(&ignore, &free_host(now), LIMITS, now);
        want.link = LinkHold::Nothing;
        assert_eq!(decide(&ignore, &h, LIMITS, now), want, "ignored");
    }
    // Outside the schedule, the prefetch before a window is held too.
    let before = utc("2026-01-13T17:45:00Z");
    let s = decide(&p, &free_host(before), LIMITS, before);
    assert!(s.downloads, "the prefetch half an hour before 19:00");
    let s = decide(
        &p,
        &free_host(before).with_metered(Some(Metered::Yes)),
        LIMITS,
        before,
    );
    assert!(!s.downloads);
    assert_eq!(s.causes, vec![Cause::OutsideSchedule, Cause::Metered]);
}

mod data_cap {
    use super::*;
    use crate::decide::policy::data::{DataUsed, Period, period_end};

    const MIB: u64 = 1 << 20;

    fn capped(day: Option<u64>, month: Option<u64>) -> Policy {
        let mut p = Policy::defaults(rome());
        (p.share.data_per_day, p.share.data_per_month) = (day, month);
        p
    }

    fn with(today: u64, this_month: u64, last_pull: u64) -> Limits {
        Limits {
            data: Some(DataUsed {
                today,
                this_month,
                last_pull,
            }),
            ..LIMITS
        }
    }

    #[test]
    fn periods_end_at_local_midnight_across_changes_of_time() {
        let tz = rome();
        let table = [
            // Summer time begins Sunday 2026-03-29 at 02:00 (a 23-hour day).
            ("2026-03-28T23:30:00Z", Period::Day, "2026-03-29T22:00:00Z"),
            // It ends Sunday 2026-10-25 at 03:00 (a 25-hour day).
            ("2026-10-24T22:00:00Z", Period::Day, "2026-10-25T23:00:00Z"),
            ("2026-10-25T22:59:59Z", Period::Day, "2026-10-25T23:00:00Z"),
            // 23:30 UTC on 31 October is already 1 November in Rome.
            (
                "2026-10-31T22:30:00Z",
                Period::Month,
                "2026-10-31T23:00:00Z",
            ),
            (
                "2026-10-31T23:30:00Z",
                Period::Month,
                "2026-11-30T23:00:00Z",
            ),
            (
                "2026-12-15T12:00:00Z",
                Period::Month,
                "2026-12-31T23:00:00Z",
            ),
        ];
        for (now, period, end) in table {
            assert_eq!(
                period_end(&tz, utc(now), period),
                utc(end),
                "{now} {period:?}"
            );
        }
        // A zone whose midnight a change of time skips (Santiago, 2026-09-06): the first
        // instant of the day.
        let santiago = pilotd_core::zone::Zone::named("America/Santiago").unwrap();
        assert_eq!(
            period_end(&santiago, utc("2026-09-05T12:00:00Z"), Period::Day),
            utc("2026-09-06T04:00:00Z")
        );
    }

    #[test]
    fn at_the_cap_workers_stop_gracefully_until_the_period_ends() {
        let p = capped(Some(2 << 30), None);
        let now = utc("2026-01-13T20:30:00Z");
        let s = decide(&p, &free_host(now), with(2 << 30, 2 << 30, 0), now);
        assert!(!s.allowed && !s.downloads);
        assert_eq!(s.evict, Evict::Graceful);
        assert_eq!(s.causes, vec![Cause::DataCap]);
        assert_eq!(
            s.reasons[0],
            "the day's data cap is reached: 2GiB of 2GiB; workers are stopped until Wed 00:00 CET"
        );
        assert_eq!(s.next_change, Some(utc("2026-01-13T23:00:00Z")));
        // The next day counts from nothing.
        let next = utc("2026-01-13T23:00:00Z");
        let s = decide(&p, &free_host(next), with(0, 2 << 30, 0), next);
        assert!(s.allowed && s.downloads, "{:?}", s.reasons);
    }

    #[test]
    fn before_the_cap_room_for_a_worker_and_for_a_pull_are_judged_apart() {
        let p = capped(Some(100 * MIB), Some(1000 * MIB));
        let now = utc("2026-01-13T20:30:00Z");
        let h = free_host(now);
        // 90 MiB of 100: 10 left, above the 5 MiB margin but not enough for a 30 MiB image.
        let s = decide(&p, &h, with(90 * MIB, 90 * MIB, 30 * MIB), now);
        assert!(s.allowed, "{:?}", s.reasons);
        assert!(!s.downloads, "a pull that would cross the cap");
        assert_eq!(s.evict, Evict::None);
        // 96 of 100: less than the margin, no new worker; running ones go on.
        let s = decide(&p, &h, with(96 * MIB, 96 * MIB, 0), now);
        assert!(!s.allowed && !s.downloads);
        assert_eq!(s.evict, Evict::None);
        assert!(s.reasons[0].starts_with("the day's data cap is near: 96MiB of 100MiB"));
        // The month's cap counts on its own, and ends at the month's end.
        let s = decide(&p, &h, with(0, 1000 * MIB, 0), now);
        assert!(!s.allowed);
        assert_eq!(s.evict, Evict::Graceful);
        assert!(
            s.reasons[0].starts_with("the month's data cap is reached"),
            "{:?}",
            s.reasons
        );
        assert_eq!(s.next_change, Some(utc("2026-01-31T23:00:00Z")));
        // Well below: nothing said, nothing held.
        let s = decide(&p, &h, with(MIB, MIB, 30 * MIB), now);
        assert!(s.allowed && s.downloads && !s.causes.contains(&Cause::DataCap));
    }

    /// Workers may still start near the cap, but no new image comes: the reason says so
    /// after the one that lets them compute, with the figures and when it ends.
    #[test]
    fn a_pull_refused_before_the_cap_is_explained_after_the_reason_to_compute() {
        const GIB: u64 = 1 << 30;
        let p = capped(Some(4 * GIB), None);
        let now = utc("2026-01-13T20:30:00Z");
        let h = free_host(now);
        // 2.9GiB of 4 used: 1.1GiB left, above the 204.8MiB margin, below 1GiB + margin.
        let today = 4 * GIB - GIB - GIB / 10;
        let s = decide(&p, &h, with(today, today, GIB), now);
        assert!(s.allowed && !s.downloads, "{:?}", s.reasons);
        assert_eq!(s.evict, Evict::None);
        assert_eq!(s.causes, vec![Cause::Free, Cause::DataCap]);
        assert_eq!(
            s.reasons[1],
            "the day's data cap leaves 1.1GiB: not enough for a new worker image (1GiB last pulled) and a 5% margin (204.8MiB); no pull until Wed 00:00 CET"
        );
        // The day's end is when the decision changes on its own.
        assert_eq!(s.next_change, Some(utc("2026-01-13T23:00:00Z")));
        // A smaller image fits: nothing said.
        let s = decide(&p, &h, with(today, today, GIB / 2), now);
        assert!(s.allowed && s.downloads, "{:?}", s.reasons);
        assert_eq!(s.causes, vec![Cause::Free]);
    }

    #[test]
    fn no_cap_or_no_count_judges_nothing() {
        let now = utc("2026-01-13T20:30:00Z");
        let h = free_host(now);
        let uncapped = decide(&capped(None, None), &h, with(u64::MAX, u64::MAX, 0), now);
        let unknown = decide(&capped(Some(1), Some(1)), &h, LIMITS, now);
        for s in [uncapped, unknown] {
            assert!(s.allowed && s.downloads, "{:?}", s.reasons);
        }
    }
}
