//! Fleet benchmark for tests/bench/fleet.sh (ignored: a figure, run on its own): 10,000
//! virtual hosts (seeded random machine ids) sharing one policy over a simulated week, each
//! driven by pilotd's own pure code — `Settings::resolve_for` (the splay of its machine id),
//! `policy::decide`, `plan::plan` and the manifest's `Refresh` — at the instants the daemon
//! wakes at (the decision's `next_change`, 50 ms after, as `daemon::wake` does; its cycle
//! timer for the manifest's fetches). Counted per second: registry pulls (`Pull` actions),
//! collector registrations (`Start` actions: one startd each) and manifest fetches.
//!
//! The fleet boots together on Saturday 12:00 inside the weekend's window (so the start
//! after pilotd starts is spread too), a new image tag is published on Tuesday 12:00 (closed:
//! pulled in the download period before 18:00), windows open on weekday evenings. Every host
//! is free (the worst case: no owner spreads anything). Judged: each peak at most
//! 2 × hosts ÷ splay seconds, and no first start later than the splay after the instant the
//! policy let the host start (window open or boot, plus `free_for`).

use crate::decide::plan::{Action, InFlight, Observed, plan};
use crate::decide::policy::{Limits, decide};
use crate::record::manifest::Refresh;
use crate::settings::Settings;
use crate::snapshot::HostSnapshot;
use crate::splay::Splay;
use crate::worker::{ImageState, Worker, WorkerState};
use chrono::{DateTime, Duration as Delta, Utc};
use pilotd_core::config::Config;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

const POLICY: &str = r#"
timezone = "UTC"
[schedule]
windows = [ { days = "mon-fri", from = "18:00", to = "08:00" },
            { days = "sat,sun", from = "00:00", to = "24:00" } ]
"#;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// splitmix64: the seeded machine ids and cycle phases.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[derive(Default)]
struct Counts {
    pulls: HashMap<i64, u32>,
    starts: HashMap<i64, u32>,
    fetches: HashMap<i64, u32>,
    /// Per first start of a period: how long after the policy first let the host start.
    late_ms: Vec<i64>,
}

fn bump(m: &mut HashMap<i64, u32>, t: DateTime<Utc>) {
    *m.entry(t.timestamp()).or_default() += 1;
}

/// Peak and median (over the seconds that had any) requests per second, and the total.
fn rates(m: &HashMap<i64, u32>) -> (u32, u32, u64) {
    let mut v: Vec<u32> = m.values().copied().collect();
    v.sort_unstable();
    let total = v.iter().map(|n| u64::from(*n)).sum();
    (
        v.last().copied().unwrap_or(0),
        v.get(v.len() / 2).copied().unwrap_or(0),
        total,
    )
}

fn simulate(hosts: usize, splay: Duration) -> Counts {
    let dir = std::path::Path::new("/nonexistent");
    let site = pilotd_core::config::parse_site(
        &dir.join("pilotd.toml"),
        &format!(
            "splay = \"{}s\"\n[worker]\nimage = \"reg.example.org/pool/ep:1\"\nallowed_images = [\"reg.example.org/pool/*\"]\n[remote]\nurl = \"https://pool.example.org/m.toml\"\n",
            splay.as_secs()
        ),
    )
    .unwrap();
    let policy = pilotd_core::config::parse_policy(
        &dir.join("policy.toml"),
        POLICY,
        &site,
        None,
        pilotd_core::zone::Zone::utc(),
    )
    .unwrap();
    let cfg = Config {
        site,
        site_path: None,
        policy,
        policy_path: dir.join("policy.toml"),
    };
    let (t0, end) = (utc("2026-11-28T12:00:00Z"), utc("2026-12-05T12:00:00Z"));
    let published = utc("2026-12-01T12:00:00Z");
    let wake = Delta::milliseconds(50);
    let mut rng = Rng(22);
    let mut c = Counts::default();
    for _ in 0..hosts {
        let machine_id = format!("{:016x}{:016x}", rng.next(), rng.next());
        let phase = Delta::milliseconds((rng.next() % 30_000) as i64);
        let s = Settings::resolve_for(&cfg, &machine_id);
        let limits = Limits {
            max_lifetime: s.max_lifetime,
            likely_free_until: None,
            splay: s.fleet,
            started: Some(t0),
        };
        // The manifest: fetched at the first cycle at or after each due instant.
        let every = s.remote.as_ref().unwrap().refresh;
        let interval = Delta::from_std(s.interval).unwrap();
        let mut refresh = Refresh::starting(t0, &s.fleet);
        let mut t = t0;
        while t < end {
            if refresh.start_if_due(t, every, &s.fleet) {
                bump(&mut c.fetches, t);
                refresh.finished();
            }
            let due = refresh.due().unwrap_or(t);
            let k = ((due - t0 - phase).num_milliseconds() + interval.num_milliseconds() - 1)
                .div_euclid(interval.num_milliseconds())
                .max(0);
            t = (t0 + phase + interval * k as i32).max(t + Delta::milliseconds(1));
        }
        // Decide, plan, act, at each instant the daemon wakes at.
        let mut workers: Vec<Worker> = Vec::new();
        let mut image = ImageState::Ready {
            digest: "sha256:aa".into(),
            pinned: "reg.example.org/pool/ep@sha256:aa".into(),
        };
        let mut fresh = false;
        let mut free_since = None;
        let mut first_start_due: Option<DateTime<Utc>> = None;
        let mut n = 0u32;
        let mut t = t0;
        while t < end {
            if !fresh && t >= published {
                fresh = true;
                image = ImageState::NeedsPull {
                    repository: "reg.example.org/pool/ep".into(),
                    digest: "sha256:bb".into(),
                };
            }
            let host = HostSnapshot::test(t).with_free_since(free_since);
            let supply = decide(&s.policy, &host, limits, t);
            free_since = supply.host_free_since;
            // The instant the policy alone would first let this host start.
            let unspread = decide(
                &s.policy,
                &host,
                Limits {
                    splay: Splay::OFF,
                    ..limits
                },
                t,
            );
            if unspread.allowed && workers.is_empty() {
                first_start_due.get_or_insert(t);
            }
            let p = plan(
                &supply,
                Observed {
                    workers: &workers,
                    in_flight: &InFlight::default(),
                    backoff: &Default::default(),
                    image: &image,
                    free_hours: None,
                    scratch_use: &BTreeMap::new(),
                    filter_down: None,
                },
                &s.worker,
                t,
            );
            for a in &p.actions {
                match a {
                    Action::Start { .. } => {
                        bump(&mut c.starts, t);
                        if let Some(due) = first_start_due.take() {
                            c.late_ms.push((t - due).num_milliseconds());
                        }
                        n += 1;
                        workers.push(Worker {
                            die_at: supply.die_at,
                            accept_until: supply.accept_until,
                            ..Worker::test(&n.to_string(), WorkerState::Running)
                        });
                    }
                    Action::Pull { digest, .. } => {
                        bump(&mut c.pulls, t);
                        image = ImageState::Ready {
                            digest: digest.clone(),
                            pinned: format!("reg.example.org/pool/ep@{digest}"),
                        };
                    }
                    Action::Stop { id, .. } | Action::Kill { id, .. } => {
                        workers.retain(|w| &w.id != id)
                    }
                    _ => {}
                }
            }
            if workers.is_empty() && !supply.allowed && !unspread.allowed {
                first_start_due = None;
            }
            let mut next = supply.next_change.map_or(end, |n| n + wake);
            if !fresh {
                next = next.min(published + phase);
            }
            // A worker past its die_at is stopped at the next cycle.
            for w in &workers {
                if let Some(d) = w.die_at.filter(|d| *d > t) {
                    next = next.min(d + wake);
                }
            }
            // A plan that acted is followed by a cycle at the next tick (what it started or
            // stopped is listed then).
            if !p.actions.is_empty() {
                next = next.min(t + interval);
            }
            t = next.max(t + Delta::milliseconds(1));
        }
    }
    c
}

#[test]
#[ignore = "benchmark figure; run by tests/bench/fleet.sh"]
fn fleet_week_figures() {
    let hosts: usize = std::env::var("FLEET_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let splay_s: u64 = std::env::var("FLEET_SPLAY_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut failures = Vec::new();
    for width in [0, splay_s] {
        let started = std::time::Instant::now();
        let c = simulate(hosts, Duration::from_secs(width));
        println!(
            "splay {width}s, {hosts} hosts, one week (simulated in {:.1} s):",
            started.elapsed().as_secs_f64()
        );
        let target = if width == 0 {
            f64::INFINITY
        } else {
            2.0 * hosts as f64 / width as f64
        };
        for (what, m) in [
            ("registry pulls", &c.pulls),
            ("collector registrations (worker starts)", &c.starts),
            ("manifest fetches", &c.fetches),
        ] {
            let (peak, median, total) = rates(m);
            if std::env::var("FLEET_DEBUG").is_ok() {
                let mut v: Vec<(&i64, &u32)> = m.iter().collect();
                v.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
                let top: Vec<String> = v
                    .iter()
                    .take(3)
                    .map(|(t, n)| format!("{} {n}", DateTime::from_timestamp(**t, 0).unwrap()))
                    .collect();
                println!("  top {what}: {top:?}");
            }
            println!(
                "  {what}: peak {peak}/s, median {median}/s over the {} seconds with any, {total} in all{}",
                m.len(),
                if width == 0 {
                    String::new()
                } else {
                    format!(" (target: peak <= {target:.1}/s)")
                }
            );
            if f64::from(peak) > target {
                failures.push(format!(
                    "splay {width}s: {what} peak {peak}/s > {target:.1}/s"
                ));
            }
        }
        let latest = c.late_ms.iter().max().copied().unwrap_or(0);
        println!(
            "  first starts of a period: {}; latest {:.3} s after the policy let its host start (target: < {width} s + the 50 ms wake)",
            c.late_ms.len(),
            latest as f64 / 1000.0
        );
        if width > 0 && latest >= (width * 1000 + 100) as i64 {
            failures.push(format!("splay {width}s: a start {latest} ms late"));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}
