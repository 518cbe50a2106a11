//! The throttle as a table (one decision each), its hysteresis against a noisy sensor over an
//! hour, the quiet hours, the cap a worker gets, and what `policy::decide` makes of them.

use super::*;
use crate::decide::policy::{Cause, Limits, decide, quiet_hours};
use crate::snapshot::{HostSnapshot, Reading};
use chrono::{Duration as Delta, TimeZone};
use pilotd_core::config::Evict;
use pilotd_core::config::Policy;
use pilotd_core::config::policy::{QuietHours, Window};
use pilotd_core::config::units::{parse_days, parse_time_of_day};
use pilotd_core::zone::Zone;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
}

fn s(secs: i64) -> DateTime<Utc> {
    t0() + Delta::seconds(secs)
}

fn limits() -> Comfort {
    Comfort {
        max_temperature: Some(80.0),
        max_fan: Some(3000),
        cool_for: Duration::from_secs(180),
        quiet_hours: vec![],
    }
}

fn sensors(celsius: Option<f64>, rpm: Option<f64>) -> Sensors {
    Sensors {
        temperatures: celsius
            .map(|c| {
                vec![
                    Reading {
                        sensor: "coretemp Core 0".into(),
                        value: c - 2.0,
                    },
                    Reading {
                        sensor: "coretemp Package id 0".into(),
                        value: c,
                    },
                ]
            })
            .unwrap_or_default(),
        fans: rpm
            .map(|r| {
                vec![Reading {
                    sensor: "thinkpad fan1".into(),
                    value: r,
                }]
            })
            .unwrap_or_default(),
    }
}

fn at(step: u8, paused: bool, changed: i64, cool: Option<i64>) -> Option<Throttle> {
    Some(Throttle {
        step,
        paused,
        changed_at: s(changed),
        cool_since: cool.map(s),
    })
}

struct Row {
    name: &'static str,
    limits: Comfort,
    last: Option<Throttle>,
    reading: Option<(Option<f64>, Option<f64>)>,
    now: i64,
    want: Option<Throttle>,
    percent: u32,
    next: Option<i64>,
}

#[test]
fn the_throttle_steps_down_at_once_and_up_slowly() {
    let rows = [
        Row {
            name: "cool and whole: nothing to carry",
            limits: limits(),
            last: None,
            reading: Some((Some(60.0), Some(1800.0))),
            now: 0,
            want: None,
            percent: 100,
            next: None,
        },
        Row {
            name: "over from the whole share: a step down at once",
            limits: limits(),
            last: None,
            reading: Some((Some(81.0), Some(1800.0))),
            now: 0,
            want: at(1, false, 0, None),
            percent: 75,
            next: None,
        },
        Row {
            name: "still over right after a step: held until STEP_DOWN_EVERY",
            limits: limits(),
            last: at(1, false, 0, None),
            reading: Some((Some(85.0), None)),
            now: 2,
            want: at(1, false, 0, None),
            percent: 75,
            next: Some(5),
        },
        Row {
            name: "still over the next cycle: the next step",
            limits: limits(),
            last: at(1, false, 0, None),
            reading: Some((Some(85.0), None)),
            now: 30,
            want: at(2, false, 30, None),
            percent: 50,
            next: None,
        },
        Row {
            name: "over at the lowest step: paused",
            limits: limits(),
            last: at(3, false, 0, None),
            reading: Some((Some(82.0), None)),
            now: 30,
            want: at(3, true, 30, None),
            percent: 25,
            next: None,
        },
        Row {
            name: "paused and still over: stays so, nothing changes",
            limits: limits(),
            last: at(3, true, 30, None),
            reading: Some((Some(81.0), None)),
            now: 60,
            want: at(3, true, 30, None),
            percent: 25,
            next: None,
        },
        Row {
            name: "paused a moment ago and still over: nothing more to come, no instant",
            limits: limits(),
            last: at(3, true, 30, None),
            reading: Some((Some(81.0), None)),
            now: 32,
            want: at(3, true, 30, None),
            percent: 25,
            next: None,
        },
        Row {
            name: "within the margin below the limit: held, coolness not counted",
            limits: limits(),
            last: at(2, false, 0, Some(10)),
            reading: Some((Some(77.0), Some(1800.0))),
            now: 300,
            want: at(2, false, 0, None),
            percent: 50,
            next: None,
        },
        Row {
            name: "cool for the first time: counted from now, no rise yet",
            limits: limits(),
            last: at(2, false, 0, None),
            reading: Some((Some(74.0), Some(1800.0))),
            now: 300,
            want: at(2, false, 0, Some(300)),
            percent: 50,
            next: Some(480),
        },
        Row {
            name: "cool for cool_for: the pause ends first, at the lowest step",
            limits: limits(),
            last: at(3, true, 0, Some(100)),
            reading: Some((Some(70.0), Some(1800.0))),
            now: 280,
            want: at(3, false, 280, Some(100)),
            percent: 25,
            next: Some(460),
        },
        Row {
            name: "cool long enough, but the last change was a minute ago: held",
            limits: limits(),
            last: at(3, false, 280, Some(100)),
            reading: Some((Some(70.0), Some(1800.0))),
            now: 340,
            want: at(3, false, 280, Some(100)),
            percent: 25,
            next: Some(460),
        },
        Row {
            name: "cool and cool_for since the last change: one step up",
            limits: limits(),
            last: at(3, false, 280, Some(100)),
            reading: Some((Some(70.0), Some(1800.0))),
            now: 460,
            want: at(2, false, 460, Some(100)),
            percent: 50,
            next: Some(640),
        },
        Row {
            name: "the last step up: the whole share, nothing to carry",
            limits: limits(),
            last: at(1, false, 0, Some(0)),
            reading: Some((Some(70.0), Some(1800.0))),
            now: 200,
            want: None,
            percent: 100,
            next: None,
        },
        Row {
            name: "a fan over max_fan: a step down too",
            limits: limits(),
            last: None,
            reading: Some((Some(60.0), Some(3100.0))),
            now: 0,
            want: at(1, false, 0, None),
            percent: 75,
            next: None,
        },
        Row {
            name: "a fan within 10% of max_fan: not quiet yet, held",
            limits: limits(),
            last: at(1, false, 0, Some(0)),
            reading: Some((Some(60.0), Some(2800.0))),
            now: 600,
            want: at(1, false, 0, None),
            percent: 75,
            next: None,
        },
        Row {
            name: "no reading while lowered: held (the cap is not lifted blind)",
            limits: limits(),
            last: at(2, false, 0, Some(0)),
            reading: None,
            now: 600,
            want: at(2, false, 0, None),
            percent: 50,
            next: None,
        },
        Row {
            name: "a limit's own reading missing: not cool, held",
            limits: limits(),
            last: at(1, false, 0, Some(0)),
            reading: Some((Some(60.0), None)),
            now: 600,
            want: at(1, false, 0, None),
            percent: 75,
            next: None,
        },
        Row {
            name: "only max_temperature set: no fan needed to be cool",
            limits: Comfort {
                max_fan: None,
                ..limits()
            },
            last: at(1, false, 0, Some(0)),
            reading: Some((Some(60.0), None)),
            now: 600,
            want: None,
            percent: 100,
            next: None,
        },
        Row {
            name: "the limits taken out of the policy: the whole share at once",
            limits: Comfort {
                max_temperature: None,
                max_fan: None,
                ..limits()
            },
            last: at(3, true, 0, None),
            reading: Some((Some(95.0), Some(5000.0))),
            now: 1,
            want: None,
            percent: 100,
            next: None,
        },
    ];
    for r in rows {
        let reading = r.reading.map(|(c, f)| sensors(c, f));
        let v = throttle(&r.limits, reading.as_ref(), r.last, s(r.now));
        assert_eq!(v.state, r.want, "{}", r.name);
        assert_eq!(v.percent, r.percent, "{}", r.name);
        assert_eq!(v.paused, r.want.is_some_and(|w| w.paused), "{}", r.name);
        assert_eq!(v.next, r.next.map(s), "{}", r.name);
        assert_eq!(v.why.is_empty(), r.want.is_none(), "{}: {}", r.name, v.why);
    }
}

#[test]
fn the_throttle_says_why() {
    let hot = sensors(Some(83.4), Some(3200.0));
    let v = throttle(&limits(), Some(&hot), None, t0());
    assert_eq!(
        v.why,
        "temperature 83°C (coretemp Package id 0) over max_temperature 80°C, fan 3200 rpm \
         (thinkpad fan1) over max_fan 3000 rpm: workers held to 75% of their CPUs"
    );
    assert_eq!(v.causes, ["temperature", "fan"]);
    let v = throttle(&limits(), Some(&hot), at(3, false, 0, None), s(60));
    assert!(
        v.why
            .ends_with("workers paused at the lowest step (25% of their CPUs)"),
        "{}",
        v.why
    );
    let cool = sensors(Some(70.0), Some(1500.0));
    let v = throttle(&limits(), Some(&cool), at(2, false, 0, None), s(60));
    assert_eq!(
        v.why,
        "cooler (70°C, 1500 rpm): workers held to 50% of their CPUs, one step more after 3m cool"
    );
    assert_eq!(v.causes, ["cooling"]);
}

/// The changes of (step, paused) a run of readings makes, one decision per reading.
fn changes(c: &Comfort, readings: impl IntoIterator<Item = (i64, f64)>) -> usize {
    let mut last: Option<Throttle> = None;
    let mut n = 0;
    for (secs, celsius) in readings {
        let v = throttle(
            c,
            Some(&sensors(Some(celsius), Some(1000.0))),
            last,
            s(secs),
        );
        let pos = |t: Option<Throttle>| t.map_or((0, false), |t| (t.step, t.paused));
        if pos(v.state) != pos(last) {
            n += 1;
        }
        last = v.state;
    }
    n
}

/// A sensor that wavers around the limit every 30 s cycle for an hour, by a degree (never
/// cool: within the margin) or by ten (cool, but never for `cool_for`): the quota goes down
/// its three steps and pauses, and that is all, 4 changes in the hour.
#[test]
fn a_noisy_sensor_around_the_limit_makes_four_changes_an_hour() {
    for low in [79.0, 70.0] {
        let readings = (0..120).map(|i| (i * 30, if i % 2 == 0 { 81.0 } else { low }));
        assert_eq!(changes(&limits(), readings), 4, "alternating 81/{low}");
    }
}

/// Any sensor, decided every 2 s for an hour: at most `2 × ⌈3600 / cool_for⌉ + 4` changes
/// (44 at 3 minutes). The worst case goes over once right after each rise, which the bound
/// allows for: it is reached within a few changes, so the bound is the real one.
#[test]
fn any_sensor_makes_a_bounded_number_of_changes_an_hour() {
    let c = limits();
    let bound = 2 * 3600_usize.div_ceil(180) + 4;
    assert_eq!(bound, 44);
    // Readings drawn from over, within the margin and cool (splitmix64, fixed seeds).
    for seed in 1..=50u64 {
        let mut x = seed;
        let mut next = move || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        // Long cool stretches now and then, so rises happen too.
        let mut readings = Vec::new();
        let mut secs = 0;
        while secs < 3600 {
            let r = next();
            let (celsius, cycles) = match r % 4 {
                0 => (81.0, 1),
                1 => (77.0, 1 + r % 3),
                _ => (70.0, 1 + (r >> 8) % 120),
            };
            for _ in 0..cycles {
                readings.push((secs as i64, celsius));
                secs += 2;
            }
        }
        let n = changes(&c, readings.into_iter().filter(|(t, _)| *t < 3600));
        assert!(n <= bound, "seed {seed}: {n} changes");
    }
    // The adversary: over for one reading right after every rise, cool otherwise.
    let pos = |t: Option<Throttle>| t.map_or((0, false), |t| (t.step, t.paused));
    let (mut last, mut rose) = (None, true);
    let mut readings = Vec::new();
    for secs in (0..3600).step_by(2) {
        let celsius = if rose { 81.0 } else { 70.0 };
        let now = throttle(
            &c,
            Some(&sensors(Some(celsius), Some(1000.0))),
            last,
            s(secs),
        );
        rose = pos(now.state) < pos(last);
        last = now.state;
        readings.push((secs, celsius));
    }
    let n = changes(&c, readings);
    assert!((30..=bound).contains(&n), "the adversary made {n} changes");
}

fn w(days: &str, from: &str, to: &str) -> Window {
    Window {
        days: parse_days(days).unwrap(),
        from: parse_time_of_day(from).unwrap(),
        to: parse_time_of_day(to).unwrap(),
    }
}

fn quiet_policy() -> Policy {
    let mut p = Policy::defaults(Zone::utc());
    p.comfort.quiet_hours = vec![
        QuietHours {
            window: w("daily", "22:00", "07:00"),
            cpus: Share::Amount(2),
        },
        QuietHours {
            window: w("tue", "23:00", "23:30"),
            cpus: Share::Amount(1),
        },
    ];
    p
}

#[test]
fn quiet_hours_give_the_least_share_and_their_end() {
    let p = quiet_policy();
    let utc = |h, m| Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap(); // a Tuesday
    assert_eq!(quiet_hours(&p, 8, utc(12, 0)), (None, Some(utc(22, 0))));
    assert_eq!(
        quiet_hours(&p, 8, utc(22, 30)),
        (
            Some(Quiet {
                cpus: Share::Amount(2),
                ends: Some(utc(7, 0) + Delta::days(1))
            }),
            Some(utc(23, 0))
        )
    );
    // Both hold: the lesser share, until the first of them ends.
    assert_eq!(
        quiet_hours(&p, 8, utc(23, 10)).0,
        Some(Quiet {
            cpus: Share::Amount(1),
            ends: Some(utc(23, 30))
        })
    );
    assert_eq!(
        quiet_hours(&Policy::defaults(Zone::utc()), 8, utc(23, 10)),
        (None, None)
    );
}

#[test]
fn a_worker_gets_the_lesser_of_its_share_and_the_quiet_hours_times_the_step() {
    let whole = Verdict::whole();
    assert_eq!(cap(&whole, None, |_| String::new(), (8, 2, 2000)), None);
    let half = Verdict {
        percent: 50,
        why: "hot".into(),
        causes: vec!["temperature"],
        ..Verdict::whole()
    };
    let c = cap(&half, None, |_| String::new(), (8, 2, 2000)).unwrap();
    assert_eq!(c.nano_for(2_000_000_000), 1_000_000_000);
    assert_eq!(c.per_worker_millicpus, 1000);
    // Quiet hours of 1 CPU on 2 workers: half a CPU each, then the step.
    let q = cap(
        &half,
        Some(Quiet {
            cpus: Share::Amount(1),
            ends: None,
        }),
        |_| " until 07:00".into(),
        (8, 2, 2000),
    )
    .unwrap();
    assert_eq!(q.quiet_millicpus, Some(500));
    assert_eq!(q.nano_for(2_000_000_000), 250_000_000);
    assert_eq!(q.per_worker_millicpus, 250);
    assert_eq!(q.causes, ["temperature", "quiet_hours"]);
    assert_eq!(q.reason, "quiet hours until 07:00: 1 CPU(s); hot");
    // 25% of a 2-CPU machine in quiet hours, one worker: half a CPU.
    let q = cap(
        &whole,
        Some(Quiet {
            cpus: Share::Percent(25.0),
            ends: None,
        }),
        |_| String::new(),
        (2, 1, 1000),
    )
    .unwrap();
    assert_eq!(q.nano_for(1_000_000_000), 500_000_000);
    // Never below what the engine accepts (0.01 CPU).
    let tiny = CpuCap {
        percent: 25,
        quiet_millicpus: Some(10),
        per_worker_millicpus: 10,
        causes: vec![],
        reason: String::new(),
    };
    assert_eq!(tiny.nano_for(1_000_000_000), 10_000_000);
}

const LIMITS: Limits = Limits {
    max_lifetime: Duration::from_secs(24 * 3600),
    likely_free_until: None,
    splay: crate::splay::Splay::OFF,
    started: None,
    data: None,
};

/// The decision: a step down caps the workers without stopping them; at the lowest step the
/// workers pause (cause `comfort`), and the host stays free, so they resume as soon as the
/// throttle lets them, without `free_for` again.
#[test]
fn decide_caps_then_pauses_and_keeps_the_host_free() {
    let mut p = Policy::defaults(Zone::utc());
    p.comfort = limits();
    let now = t0();
    let mut h = HostSnapshot::test(now).with_free_since(Some(now - Delta::hours(1)));
    h.sensors = Some(sensors(Some(84.0), None));
    let s1 = decide(&p, &h, LIMITS, now);
    assert!(s1.allowed, "{:?}", s1.reasons);
    assert_eq!(s1.evict, Evict::None);
    let cap = s1.cpu_cap.clone().unwrap();
    assert_eq!((cap.percent, cap.per_worker_millicpus), (75, 3000));
    assert_eq!(s1.throttle.map(|t| t.step), Some(1));

    h.throttle = at(3, false, -60, None);
    let s2 = decide(&p, &h, LIMITS, now);
    assert!(!s2.allowed);
    assert_eq!(s2.evict, Evict::Pause);
    assert_eq!(s2.causes, [Cause::Comfort]);
    assert!(
        s2.reasons[0].contains("workers paused at the lowest step"),
        "{:?}",
        s2.reasons
    );
    assert_eq!(
        s2.host_free_since, h.host_free_since,
        "heat is not the owner"
    );
    assert!(!Cause::Comfort.owner_or_host_busy() && !Cause::Comfort.owner_there());

    // Cool for cool_for: the pause ends, and the workers may run at once.
    h.throttle = at(3, true, -200, Some(-190));
    h.sensors = Some(sensors(Some(60.0), Some(1000.0)));
    let s3 = decide(&p, &h, LIMITS, now);
    assert!(s3.allowed, "{:?}", s3.reasons);
    assert_eq!(s3.cpu_cap.unwrap().percent, 25);
    assert_eq!(s3.next_change, Some(now + Delta::seconds(180)));

    // A policy without comfort keys decides as before: no cap, nothing carried.
    let plain = decide(&Policy::defaults(Zone::utc()), &h, LIMITS, now);
    assert_eq!((plain.cpu_cap, plain.throttle), (None, None));
}

/// Quiet hours cap the workers from their start to their end, with the end said, and the
/// decision changes by itself when they begin and end.
#[test]
fn decide_caps_in_quiet_hours() {
    let p = quiet_policy();
    let utc = |h, m| Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap();
    let h = HostSnapshot::test(utc(21, 0)).with_free_since(Some(utc(20, 0)));
    let before = decide(&p, &h, LIMITS, utc(21, 0));
    assert_eq!(before.cpu_cap, None);
    assert_eq!(before.next_change, Some(utc(22, 0)));
    let night = decide(&p, &h, LIMITS, utc(22, 30));
    let cap = night.cpu_cap.unwrap();
    assert_eq!(cap.per_worker_millicpus, 2000);
    assert_eq!(cap.reason, "quiet hours until Wed 07:00 UTC: 2 CPU(s)");
    assert!(night.allowed);
}
