use super::*;
use crate::record::timeline::Recorder;
use pilotd_core::config::{Config, SiteConfig};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn settings() -> Settings {
    let site: SiteConfig = toml::from_str("splay = \"0s\"\n[worker]\nimage = \"x/y:1\"\n").unwrap();
    let mut policy = Policy::defaults(pilotd_core::zone::Zone::utc());
    policy.free_for = std::time::Duration::from_secs(600);
    policy.share.cpus = pilotd_core::config::units::Share::Amount(2);
    Settings::resolve(&Config {
        site,
        site_path: None,
        policy,
        policy_path: "policy.toml".into(),
    })
}

/// Two days watched minute by minute: nobody there but 09:00–17:00 on the first.
fn two_days() -> Timeline {
    let mut r = Recorder::default();
    let p = settings().policy;
    let start = utc("2027-01-04T00:00:00Z");
    let mut t = start;
    while t <= start + Duration::days(2) {
        let mut h = HostSnapshot::test(t);
        let hour = (t - start).num_hours();
        if (9..17).contains(&hour) {
            h = h.with_session("alice", 4242, Some(0));
        }
        r.record(t, std::time::Duration::from_secs(60), &h, &p);
        t += Duration::seconds(60);
    }
    r.timeline
}

#[test]
fn replays_the_recorded_presence_through_decide() {
    let s = settings();
    let tl = two_days();
    // Run-length encoded: quiet, owner, quiet.
    assert_eq!(tl.runs.len(), 3, "{tl:?}");
    let u = Utilization {
        fraction: 0.5,
        measured: false,
    };
    let end = utc("2027-01-06T00:00:00Z");
    let p = project(
        &s,
        &History::new(&s.policy.timezone),
        &tl,
        &HostSnapshot::test(end),
        u,
        end,
    );
    assert_eq!(p.basis, Basis::Recorded { days: 2.0 });
    let h = |x: f64| x / 3600.0;
    // 8 h with the owner; open 48 h less those 8, less `free_for` twice (the first start and
    // after the owner left) and the first minute (nothing decided before it).
    assert!((h(p.total.owner_s) - 8.0).abs() < 0.02, "{p:?}");
    let open = 48.0 - 8.0 - 2.0 * 10.0 / 60.0;
    assert!((h(p.total.open_s) - open).abs() < 0.05, "{p:?}");
    // Computing a step behind the decision; 2 CPUs half busy.
    assert!((h(p.total.cpu_seconds) - open).abs() < 0.1, "{p:?}");
    assert!(
        (h(p.per_week.cpu_seconds) - open * 3.5).abs() < 0.5,
        "{p:?}"
    );
    // A policy that ignores logins gives more, from the same weeks.
    let mut blind = s.clone();
    blind.policy.sessions = pilotd_core::config::policy::SessionRule::Ignore;
    let q = project(
        &blind,
        &History::new(&s.policy.timezone),
        &tl,
        &HostSnapshot::test(end),
        u,
        end,
    );
    assert!(q.total.open_s > p.total.open_s + 7.0 * 3600.0, "{q:?}");
    let lines = render(&p);
    assert!(
        lines[1].starts_with("from 2.0 recorded day(s)"),
        "{lines:?}"
    );
}

/// Quiet hours give the workers less CPU while they hold, as the daemon caps them live: the
/// same weeks, with 1 CPU of the 2 from 00:00 to 06:00, give a quarter of those hours' CPU
/// less, and the same hours open and computing.
#[test]
fn quiet_hours_give_less_cpu_in_their_hours() {
    use pilotd_core::config::policy::{QuietHours, Window};
    use pilotd_core::config::units::{DaySet, Share};
    let s = settings();
    let tl = two_days();
    let u = Utilization {
        fraction: 0.5,
        measured: false,
    };
    let end = utc("2027-01-06T00:00:00Z");
    let run = |s: &Settings| {
        project(
            s,
            &History::new(&s.policy.timezone),
            &tl,
            &HostSnapshot::test(end),
            u,
            end,
        )
    };
    let whole = run(&s);
    let mut quiet = s.clone();
    quiet.policy.comfort.quiet_hours = vec![QuietHours {
        window: Window {
            days: DaySet(0x7f),
            from: 0,
            to: 6 * 60,
        },
        cpus: Share::Amount(1),
    }];
    let q = run(&quiet);
    assert_eq!(q.total.open_s, whole.total.open_s);
    assert_eq!(q.total.computing_s, whole.total.computing_s);
    // Two nights of 6 h, at 1 CPU instead of 2, half busy (less the first night's
    // `free_for` and first minute, when nothing computed yet).
    let less = (whole.total.cpu_seconds - q.total.cpu_seconds) / 3600.0;
    assert!(
        (less - (6.0 + 6.0 - 11.0 / 60.0) * 0.5).abs() < 0.05,
        "{less}"
    );
}

#[test]
fn a_gap_is_the_machine_off_and_restarts_the_wait() {
    let s = settings();
    let p = &s.policy;
    let mut r = Recorder::default();
    let start = utc("2027-01-04T00:00:00Z");
    for m in (0..=60).chain(180..=240) {
        let t = start + Duration::minutes(m);
        r.record(
            t,
            std::time::Duration::from_secs(60),
            &HostSnapshot::test(t),
            p,
        );
    }
    assert_eq!(r.timeline.runs.len(), 2, "{:?}", r.timeline);
    assert_eq!(r.timeline.watched(), Duration::minutes(120));
    let u = Utilization {
        fraction: 1.0,
        measured: false,
    };
    let end = start + Duration::minutes(240);
    let f = replay(
        &s,
        &History::new(&p.timezone),
        &r.timeline,
        &HostSnapshot::test(end),
        u.fraction,
    );
    // Each stretch waits its 10 minutes free before opening.
    assert_eq!(f.open_s, (2 * (60 - 10)) as f64 * 60.0, "{f:?}");
}

#[test]
fn a_fresh_machine_projects_the_stated_typical_week() {
    let s = settings();
    let now = utc("2027-01-06T12:00:00Z");
    let p = project(
        &s,
        &History::new(&s.policy.timezone),
        &Timeline::default(),
        &HostSnapshot::test(now),
        Utilization::of(&Tally::default(), 2),
        now,
    );
    assert_eq!(p.basis, Basis::Defaults);
    assert!(!p.utilization.measured);
    // An hour recorded is not a week's evidence either: the same defaults.
    let mut hour = Timeline::default();
    hour.push(now - Duration::hours(1), now, Seen::default());
    let q = project(
        &s,
        &History::new(&s.policy.timezone),
        &hour,
        &HostSnapshot::test(now),
        p.utilization,
        now,
    );
    assert_eq!(q, p);
    // 45 h at the desk a week.
    assert!((p.per_week.owner_s / 3600.0 - 45.0).abs() < 0.1, "{p:?}");
    let lines = render(&p);
    assert!(lines[1].starts_with("from defaults"), "{lines:?}");
    assert!(lines[1].contains("90%"), "{lines:?}");
}

#[test]
fn utilization_is_measured_once_an_hour_was_computed() {
    let mut t = Tally {
        cpu_seconds: 3.0 * 3600.0,
        computing_s: 3600,
        ..Tally::default()
    };
    assert_eq!(Utilization::of(&t, 4).fraction, 0.75);
    assert!(Utilization::of(&t, 4).measured);
    t.computing_s = 600;
    assert_eq!(Utilization::of(&t, 4).fraction, DEFAULT_UTILIZATION);
}

#[test]
fn cpu_folded_into_stretches_projects_as_every_cycle_would() {
    // A week at the default 30 s, nobody logged in, the owner's CPU noisy around the policy's
    // 25 %: idle noise, busy spells that cross it, builds of a few minutes.
    let s = settings();
    let p = &s.policy;
    let step = Duration::seconds(30);
    let start = utc("2027-01-04T00:00:00Z");
    let (mut folded, mut exact) = (Recorder::default(), Timeline::default());
    let mut noise = crate::record::timeline::tests::Noise::new(3);
    let (mut spell_until, mut build_until) = (start, start);
    let mut t = start;
    while t <= start + Duration::days(7) {
        if noise.next() < 0.003 {
            spell_until = t + Duration::minutes(5 + (noise.next() * 40.0) as i64);
        }
        if noise.next() < 0.002 {
            build_until = t + Duration::minutes(1 + (noise.next() * 8.0) as i64);
        }
        let owner = if t < build_until {
            0.9
        } else if t < spell_until {
            0.15 + noise.next() * 0.2
        } else {
            noise.next() * 0.07
        };
        let h = HostSnapshot::test(t).with_cpu(owner, 0.0);
        folded.record(t, step.to_std().unwrap(), &h, p);
        if t > start {
            exact.push_unfolded(t - step, t, Seen::of(&h, p, t));
        }
        t += step;
    }
    let replayed = |tl: &Timeline| {
        let end = start + Duration::days(7);
        replay(
            &s,
            &History::new(&p.timezone),
            tl,
            &HostSnapshot::test(end),
            1.0,
        )
    };
    let (a, b) = (replayed(&folded.timeline), replayed(&exact));
    eprintln!(
        "folded {} stretches: {a:?}\nunfolded {} stretches: {b:?}",
        folded.timeline.runs.len(),
        exact.runs.len()
    );
    assert!(folded.timeline.runs.len() * 3 < exact.runs.len());
    let off = |x: f64, y: f64| (x - y).abs() / y;
    assert!(off(a.open_s, b.open_s) < 0.03, "open: {a:?} vs {b:?}");
    assert!(
        off(a.cpu_seconds, b.cpu_seconds) < 0.03,
        "cpu: {a:?} vs {b:?}"
    );
}
