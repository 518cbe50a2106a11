//! The fleet's spread: the host offset, the held start and pull in the policy's decision, the
//! manifest's fetch grid, and `splay` in pilotd.toml. Tables over fixed instants.

use super::*;
use crate::decide::policy::{Cause, Limits, decide};
use crate::snapshot::HostSnapshot;
use pilotd_core::config::Policy;
use pilotd_core::config::policy::Window;
use pilotd_core::config::units::{parse_days, parse_time_of_day};
use pilotd_core::zone::Zone;

/// The fleet benchmark of tests/bench/fleet.sh (ignored: a figure, run on its own).
mod bench;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const MIN: u64 = 60;

/// Weekday evenings 18:00–08:00 UTC; `free_for` as the defaults say (15 min).
fn evenings() -> Policy {
    let mut p = Policy::defaults(Zone::utc());
    p.windows = vec![Window {
        days: parse_days("mon-fri").unwrap(),
        from: parse_time_of_day("18:00").unwrap(),
        to: parse_time_of_day("08:00").unwrap(),
    }];
    p
}

fn limits(splay: Splay, started: Option<DateTime<Utc>>) -> Limits {
    Limits {
        max_lifetime: Duration::from_secs(24 * 3600),
        likely_free_until: None,
        splay,
        started,
    }
}

#[test]
fn the_offset_is_stable_per_host_different_across_hosts_and_below_the_splay() {
    let w = Duration::from_secs(5 * MIN);
    let a = Splay::of_host(w, "4c4c4544004e3010804cb4c04f4e3732", "default");
    // Pinned (and computed apart, with Python's hashlib): a changed hash would move every
    // host of a fleet at once on upgrade.
    assert_eq!(a.offset, Duration::from_millis(87_092));
    assert_eq!(
        a,
        Splay::of_host(w, "4c4c4544004e3010804cb4c04f4e3732\n", "default"),
        "the file's newline is not part of the id"
    );
    assert_ne!(
        a.offset,
        Splay::of_host(w, "4c4c4544004e3010804cb4c04f4e3732", "gpu").offset,
        "a second instance on the host has its own place"
    );
    let offsets: std::collections::BTreeSet<Duration> = (0..1000)
        .map(|i| Splay::of_host(w, &format!("{i:032x}"), "default").offset)
        .collect();
    assert!(offsets.len() > 990, "{} distinct of 1000", offsets.len());
    assert!(offsets.iter().all(|o| *o < w));
    // Spread over the whole width, not bunched: every minute of it holds about a fifth.
    for m in 0..5 {
        let lo = Duration::from_secs(m * MIN);
        let n = offsets.range(lo..lo + Duration::from_secs(MIN)).count();
        assert!((150..250).contains(&n), "minute {m}: {n}");
    }
    let off = Splay::of_host(
        Duration::ZERO,
        "4c4c4544004e3010804cb4c04f4e3732",
        "default",
    );
    assert_eq!(off.offset, Duration::ZERO);
    assert!(off.is_off());
    // A width below the offset's resolution still gives an offset below it.
    assert_eq!(
        Splay::of_host(Duration::from_micros(900), "x", "y").offset,
        Duration::ZERO
    );
}

#[test]
fn the_first_start_after_a_window_opens_waits_for_the_hosts_turn() {
    let p = evenings();
    let splay = Splay::with_offset(
        Duration::from_secs(5 * MIN),
        Duration::from_secs(3 * MIN + 12),
    );
    // Monday 18:00 opens; the host has been free since then; free_for is 15 min.
    let open = utc("2026-11-30T18:00:00Z");
    let host = |now| HostSnapshot::test(now).with_free_since(Some(open));
    // (now, splay, allowed, cause, next change)
    let cases = [
        (
            "2026-11-30T18:14:59Z",
            splay,
            false,
            Cause::WaitingFreeFor,
            "2026-11-30T18:15:00Z",
        ),
        (
            "2026-11-30T18:15:00Z",
            splay,
            false,
            Cause::FleetSplay,
            "2026-11-30T18:18:12Z",
        ),
        (
            "2026-11-30T18:18:11Z",
            splay,
            false,
            Cause::FleetSplay,
            "2026-11-30T18:18:12Z",
        ),
        (
            "2026-11-30T18:18:12Z",
            splay,
            true,
            Cause::Free,
            "2026-11-30T23:50:00Z",
        ),
        // Negative control: no splay, no hold.
        (
            "2026-11-30T18:15:00Z",
            Splay::OFF,
            true,
            Cause::Free,
            "2026-11-30T23:50:00Z",
        ),
    ];
    for (now, splay, allowed, cause, next) in cases {
        let now = utc(now);
        let s = decide(&p, &host(now), limits(splay, None), now);
        assert_eq!(
            (s.allowed, s.causes.clone()),
            (allowed, vec![cause]),
            "{now}: {:?}",
            s.reasons
        );
        assert_eq!(s.next_change, Some(utc(next)), "{now}: {:?}", s.reasons);
        assert_eq!(s.evict, pilotd_core::config::Evict::None);
    }
    let now = utc("2026-11-30T18:16:00Z");
    let s = decide(&p, &host(now), limits(splay, None), now);
    assert_eq!(
        s.reasons,
        vec![
            "start held until Mon 18:18:12 UTC (fleet splay: this host waits its offset of 3m 12s, of up to 5m, after the window opened and 15m free)"
        ]
    );
}

#[test]
fn the_first_start_after_pilotd_starts_waits_too_and_only_the_first() {
    let p = evenings();
    let splay = Splay::with_offset(Duration::from_secs(5 * MIN), Duration::from_secs(4 * MIN));
    // Started Tuesday 20:00, inside a window opened at 18:00; free since it started.
    let started = utc("2026-12-01T20:00:00Z");
    let host = |now| HostSnapshot::test(now).with_free_since(Some(started));
    let cases = [
        ("2026-12-01T20:15:00Z", Some(started), Cause::FleetSplay),
        ("2026-12-01T20:18:59Z", Some(started), Cause::FleetSplay),
        ("2026-12-01T20:19:00Z", Some(started), Cause::Free),
        // Negative control: `pilotd plan` knows no daemon start, and the window opened long ago.
        ("2026-12-01T20:15:00Z", None, Cause::Free),
    ];
    for (now, started, cause) in cases {
        let now = utc(now);
        let s = decide(&p, &host(now), limits(splay, started), now);
        assert_eq!(s.causes, vec![cause], "{now}: {:?}", s.reasons);
    }
    let now = utc("2026-12-01T20:15:00Z");
    let s = decide(&p, &host(now), limits(splay, Some(started)), now);
    assert!(
        s.reasons[0].contains("after pilotd started"),
        "{:?}",
        s.reasons
    );
    // The owner left later: the natural spread of the fleet's owners, no hold on top.
    let left = utc("2026-12-01T21:00:00Z");
    let now = utc("2026-12-01T21:15:00Z");
    let s = decide(
        &p,
        &HostSnapshot::test(now).with_free_since(Some(left)),
        limits(splay, Some(started)),
        now,
    );
    assert_eq!(s.causes, vec![Cause::Free], "{:?}", s.reasons);
}

#[test]
fn an_always_open_policy_holds_only_after_pilotd_starts() {
    let p = Policy::defaults(Zone::utc());
    let splay = Splay::with_offset(Duration::from_secs(5 * MIN), Duration::from_secs(2 * MIN));
    let now = utc("2026-12-02T12:00:00Z");
    let host = HostSnapshot::test(now).with_free_since(Some(now - chrono::Duration::hours(1)));
    assert_eq!(
        decide(&p, &host, limits(splay, None), now).causes,
        vec![Cause::Free]
    );
    let started = now - chrono::Duration::minutes(16);
    let s = decide(&p, &host, limits(splay, Some(started)), now);
    assert_eq!(s.causes, vec![Cause::FleetSplay], "{:?}", s.reasons);
    assert_eq!(s.next_change, Some(utc("2026-12-02T12:01:00Z")));
}

#[test]
fn a_new_image_is_pulled_at_the_hosts_turn_in_the_download_period() {
    let p = evenings();
    let host = |now| HostSnapshot::test(now);
    let splay = Splay::with_offset(
        Duration::from_secs(5 * MIN),
        Duration::from_secs(3 * MIN + 12),
    );
    // The period opens 30 min before the window (17:30): this host's turn is 17:33:12.
    let cases = [
        ("2026-11-30T17:29:59Z", splay, false),
        ("2026-11-30T17:33:11Z", splay, false),
        ("2026-11-30T17:33:12Z", splay, true),
        // Negative control: without splay the period opens at 17:30 for every host.
        ("2026-11-30T17:30:00Z", Splay::OFF, true),
    ];
    for (now, splay, downloads) in cases {
        let now = utc(now);
        let s = decide(&p, &host(now), limits(splay, None), now);
        assert_eq!(s.downloads, downloads, "{now}");
        assert!(!s.allowed);
    }
    let now = utc("2026-11-30T17:31:00Z");
    let s = decide(&p, &host(now), limits(splay, None), now);
    assert_eq!(s.next_change, Some(utc("2026-11-30T17:33:12Z")));
}

#[test]
fn a_splay_wider_than_half_the_download_period_is_scaled_into_it() {
    let lead = Duration::from_secs(30 * MIN);
    let cases = [
        // (width, offset, pull delay)
        (5 * MIN, 3 * MIN, 3 * MIN),
        (15 * MIN, 14 * MIN, 14 * MIN),
        (60 * MIN, 30 * MIN, 7 * MIN + 30),
        (60 * MIN, 60 * MIN - 1, 15 * MIN - 1),
        (0, 0, 0),
    ];
    for (w, o, want) in cases {
        let s = Splay::with_offset(Duration::from_secs(w), Duration::from_secs(o));
        let d = s.pull_delay(lead);
        assert!(
            d.abs_diff(Duration::from_secs(want)) < Duration::from_secs(1),
            "{w} {o}: {d:?}"
        );
        assert!(d < lead / 2 || w == 0);
    }
}

#[test]
fn manifest_fetches_fall_on_the_hosts_own_grid() {
    let every = Duration::from_secs(3600);
    let splay = Splay::with_offset(
        Duration::from_secs(5 * MIN),
        Duration::from_secs(2 * MIN + 5),
    );
    // (fetch at, next due)
    let cases = [
        ("2026-12-01T10:00:00Z", "2026-12-01T11:02:05Z"),
        ("2026-12-01T10:31:00Z", "2026-12-01T11:02:05Z"),
        ("2026-12-01T10:32:06Z", "2026-12-01T12:02:05Z"),
        ("2026-12-01T11:02:05Z", "2026-12-01T12:02:05Z"),
    ];
    for (now, due) in cases {
        assert_eq!(splay.next_fetch(utc(now), every), utc(due), "{now}");
    }
    // Negative control: without splay, an hour after the fetch, wherever that was.
    let now = utc("2026-12-01T10:31:00Z");
    assert_eq!(
        Splay::OFF.next_fetch(now, every),
        utc("2026-12-01T11:31:00Z")
    );

    // The daemon's refresh: the first fetch waits for the offset, then the grid.
    use crate::record::manifest::Refresh;
    let start = utc("2026-12-01T10:00:00Z");
    let mut r = Refresh::starting(start, &splay);
    assert!(!r.start_if_due(start, every, &splay));
    assert!(!r.start_if_due(utc("2026-12-01T10:02:04Z"), every, &splay));
    assert!(r.start_if_due(utc("2026-12-01T10:02:05Z"), every, &splay));
    r.finished();
    assert_eq!(r.due(), Some(utc("2026-12-01T11:02:05Z")));
    let mut r = Refresh::starting(start, &Splay::OFF);
    assert!(
        r.start_if_due(start, every, &Splay::OFF),
        "no splay: at once"
    );
}

#[test]
fn the_host_settings_carry_the_splay_and_jitter_the_start_backoff() {
    let cfg = |text: &str| pilotd_core::config::Config {
        site: pilotd_core::config::parse_site(std::path::Path::new("pilotd.toml"), text).unwrap(),
        site_path: None,
        policy: Policy::defaults(Zone::utc()),
        policy_path: std::path::Path::new("p.toml").into(),
    };
    let s = crate::settings::Settings::resolve_for(&cfg(""), "machine-a");
    assert_eq!(
        s.fleet.width,
        Duration::from_secs(300),
        "the documented default"
    );
    assert_eq!(
        s.fleet,
        Splay::of_host(s.fleet.width, "machine-a", "default")
    );
    assert!(s.worker.backoff.jitter.is_some());
    assert!(s.image.retry.jitter.is_some(), "registry retries too");
    let s = crate::settings::Settings::resolve_for(&cfg("splay = \"0s\"\n"), "machine-a");
    assert!(s.fleet.is_off());
    assert_eq!(s.worker.backoff.jitter, None, "no splay, no jitter");
    assert_eq!(s.image.retry.jitter, None);
    let s = crate::settings::Settings::resolve_for(&cfg("splay = \"10m\"\n"), "m");
    assert_eq!(s.fleet.width, Duration::from_secs(600));
}

#[test]
fn a_bad_splay_is_refused_at_its_position() {
    let path = std::path::Path::new("pilotd.toml");
    let e = pilotd_core::config::parse_site(path, "interval = \"30s\"\nsplay = \"5 parsecs\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("pilotd.toml:2:9"), "{e}");
    let e = pilotd_core::config::parse_site(path, "splay = \"2h\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pilotd.toml:1:9") && e.contains("at most 1h"),
        "{e}"
    );
    assert!(pilotd_core::config::parse_site(path, "splay = \"1h\"\n").is_ok());
}
