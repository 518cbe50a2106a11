//! Issue 24's agreement test: a synthetic month of owner presence and load, lived by the
//! daemon's real cycle (decide → plan → executor → record) against the recording fake engine
//! with a fixed job mix, at synthetic instants; the contribution ledger it writes is what was
//! "measured". The projection then replays the presence timeline the same daemon recorded,
//! with the utilization `Utilization::of` takes from that ledger (as `pilotd schedule` does),
//! and must agree with the measurement on every figure — hours open, hours computing, hours
//! with the owner there, CPU-hours — within `TOLERANCE`. Only the host observation and the
//! workers' CPU are scripted (`Daemon::synthetic_host`, `advance`): everything between is the
//! daemon's own.
//!
//! The tolerance is what the negative controls below justify: a projection that drops the
//! owner-CPU rule, the snoozes, `free_for` or the logins is run on the same month and must
//! fall outside it. With the utilization measured from the ledger, the CPU-hours agree exactly
//! as well as the hours computing do (the projection's CPU is hours computing × CPUs granted ×
//! the ledger's CPU per computing hour per granted CPU), so the hours are what is tested; the
//! CPU figure checks that `Utilization::of` and `granted_cpus` count the CPUs the way the
//! ledger does, on workers whose use of their CPUs varies from job to job.

use super::{Machine, first_cycles};
use crate::observe::host::Carry;
use crate::record::contribution::Tally;
use crate::record::projection::{self, Figures, Utilization};
use crate::settings::Settings;
use crate::snapshot::HostSnapshot;
use crate::worker::WorkerState;
use chrono::{DateTime, Datelike, Timelike, Utc};
use pilotd_core::config::policy::SessionRule;
use pilotd_core::config::units::Share;
use pilotd_core::config::{Evict, Policy};
use std::collections::HashMap;
use std::time::Duration;

/// The daemon's interval in this month: five minutes, so that a month of real cycles (each
/// writing the status file, as the daemon does) runs in a debug build's test time; the
/// projection still decides every minute.
const STEP: chrono::Duration = chrono::Duration::minutes(5);
const GRANTED: u32 = 2;
const HOST_CPUS: u32 = 8;
/// The pilots' mix, in turn: minutes of computing each worker's pilot needs before it exits,
/// and the CPUs (of the `GRANTED`) it keeps busy meanwhile: the projection is not told these.
/// Pilots of hours, as in a pool: the ledger counts a step by the workers running at its end,
/// so each worker's end costs it one step that the projection (which replaces workers at
/// once, as the daemon does on the engine's exit event) counts; with 5-minute steps, pilots
/// of an hour or two would put that alone at 5 %, these at about 0.6 %.
const JOBS: [(i64, f64); 3] = [(600, 1.9), (1440, 1.2), (300, 0.5)];
/// A worker's first step: the pilot starts its condor and waits for a match, nearly idle.
const STARTING: f64 = 0.1;
/// How far the projection may be from the measurement on each figure (relative): 1 %, what
/// the negative controls justify. The projection is 0.5 % off (hours computing: the ledger's
/// step per worker's end, above); each control is off by 3.8 % or more on at least one figure
/// (without the snoozes: hours with the owner there −3.9 %, hours computing +2.4 %; without
/// the owner-CPU rule: the owner's hours −7.1 %; without `free_for`: hours computing +5.0 %;
/// ignoring logins: +43 % computing). The 10 % this test held before let the first three
/// pass, and on CPU-hours alone a tolerance over 2.4 % lets the snoozes pass.
/// docs/performance.md, "The projection against a month the daemon lived", has the figures.
const TOLERANCE: f64 = 0.01;

fn start() -> DateTime<Utc> {
    // A Monday, UTC (the test policy's zone).
    DateTime::parse_from_rfc3339("2027-01-04T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// Minute of the day and day of the month (0 = the first Monday).
fn when(t: DateTime<Utc>) -> (u32, i64, u32) {
    let m = t.hour() * 60 + t.minute();
    let day = (t - start()).num_days();
    (m, day, t.weekday().num_days_from_monday())
}

/// Saturdays 02:00–08:00 the machine sleeps: nobody watches, nothing runs.
fn off(t: DateTime<Utc>) -> bool {
    let (m, _, wd) = when(t);
    wd == 5 && (120..480).contains(&m)
}

/// Someone at the machine: weekday office hours with a lunch break, and every third evening.
fn present(t: DateTime<Utc>) -> bool {
    let (m, day, wd) = when(t);
    (wd < 5 && ((540..720).contains(&m) || (780..1050).contains(&m)))
        || (day % 3 == 0 && (1200..1320).contains(&m))
}

/// The owner's CPU: 30 % at the desk, 90 % for a 40-minute build at 18:00 on weekdays
/// (nobody logged in: only the CPU rule sees it), 2 % otherwise.
fn owner_cpu(t: DateTime<Utc>) -> f64 {
    let (m, _, wd) = when(t);
    if present(t) {
        0.3
    } else if wd < 5 && (1080..1120).contains(&m) {
        0.9
    } else {
        0.02
    }
}

/// Sundays 14:00–16:00 the owner snoozed pilotd.
fn snoozed_until(t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let (m, _, wd) = when(t);
    (wd == 6 && (840..960).contains(&m))
        .then(|| t - chrono::Duration::minutes(i64::from(m)) + chrono::Duration::hours(16))
}

fn host(now: DateTime<Utc>, carry: Carry) -> HostSnapshot {
    let mut h = HostSnapshot::test(now)
        .with_cpu((owner_cpu(now) + carry.own_cpu).min(1.0), carry.own_cpu)
        .with_busy_since(carry.owner_busy_since)
        .with_free_since(carry.host_free_since)
        .with_snooze(snoozed_until(now));
    h.cpus = HOST_CPUS;
    if present(now) {
        h = h.with_session("alice", 4242, Some(0));
    }
    // logind's announcement, the cycle before the machine sleeps.
    h.sleeping = off(now + STEP);
    h
}

fn policy(m: &Machine) -> Policy {
    let mut p = m.policy();
    p.sessions = SessionRule::Any;
    p.max_owner_cpu = 0.5;
    p.busy_for = Duration::from_secs(600);
    p.free_for = Duration::from_secs(900);
    p.on_return = Evict::Pause;
    p.share.cpus = Share::Amount(u64::from(GRANTED));
    p
}

/// The fake engine's workers over one step: a running one's CPU counter advances at its
/// job's rate (`STARTING` in its first step), and it exits (having run jobs) once its job has
/// had its minutes.
fn advance(m: &Machine, ran: &mut HashMap<String, i64>, started: &mut Vec<String>) {
    let mut w = m.engine.lock();
    let w = &mut *w;
    for x in w.workers.iter_mut() {
        if !matches!(x.state, WorkerState::Running | WorkerState::Paused) {
            continue;
        }
        if !started.contains(&x.id) {
            started.push(x.id.clone());
        }
        let s = w.cpu.entry(x.id.clone()).or_default();
        let step_ns = STEP.num_seconds() as f64 * 1e9;
        s.system_ns += (f64::from(HOST_CPUS) * step_ns) as u64;
        if x.state == WorkerState::Running {
            let minutes = ran.entry(x.id.clone()).or_default();
            let job = started.iter().position(|i| i == &x.id).unwrap_or(0);
            let (needs, rate) = JOBS[job % JOBS.len()];
            let rate = if *minutes == 0 { STARTING } else { rate };
            s.worker_ns += (rate * step_ns) as u64;
            *minutes += STEP.num_minutes();
            if *minutes >= needs {
                x.state = WorkerState::Exited;
                x.exit_code = Some(0);
            }
        }
    }
}

/// Each figure's relative distance from the measured month (projected − measured) ÷ measured.
fn gaps(p: &Figures, m: &Tally) -> [(&'static str, f64); 4] {
    let rel = |p: f64, m: f64| (p - m) / m;
    [
        ("hours open", rel(p.open_s, m.open_s as f64)),
        ("hours computing", rel(p.computing_s, m.computing_s as f64)),
        (
            "hours with the owner there",
            rel(p.owner_s, m.owner_present_s as f64),
        ),
        ("CPU-hours", rel(p.cpu_seconds, m.cpu_seconds)),
    ]
}

/// The figure farthest from the measurement, and how far.
fn worst(p: &Figures, m: &Tally) -> (&'static str, f64) {
    gaps(p, m)
        .into_iter()
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        .unwrap()
}

fn describe(p: &Figures, m: &Tally) -> String {
    gaps(p, m)
        .iter()
        .map(|(what, g)| format!("{what} {:+.2}%", g * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "current_thread")]
async fn the_projection_agrees_with_a_month_the_daemon_lived() {
    let m = Machine::new();
    let mut s = m.settings();
    s.policy = policy(&m);
    s.interval = STEP.to_std().unwrap();
    let settings = s.clone();
    let mut d = m.daemon_with(s);
    d.synthetic_host = Some(Box::new(host));

    let clock = std::time::Instant::now();
    let end = start() + chrono::Duration::days(30);
    first_cycles(&mut d, start()).await;
    let (mut ran, mut started) = (HashMap::new(), Vec::new());
    let mut t = start();
    let mut cycles = 0;
    while t < end {
        let before = t;
        t += STEP;
        if off(t) {
            continue;
        }
        if !off(before) {
            advance(&m, &mut ran, &mut started);
        }
        d.cycle(t, false).await;
        cycles += 1;
        tokio::task::yield_now().await;
        while let Some(Ok(done)) = d.work.tasks.try_join_next() {
            d.task_done(done, t);
        }
    }
    let lived = clock.elapsed();

    let measured = d.records.ledger().all_time;
    let machine = {
        let mut h = HostSnapshot::test(start());
        h.cpus = HOST_CPUS;
        h
    };
    // As `pilotd schedule` takes it: the ledger's CPU per computing second per CPU granted.
    let utilization = Utilization::of(
        &measured,
        projection::granted_cpus(&settings.policy, &machine),
    );
    assert!(utilization.measured, "{utilization:?}");
    let timeline = d.records.timeline().clone();
    let project = |s: &Settings, timeline: &crate::record::timeline::Timeline| {
        projection::project(s, d.records.history(), timeline, &machine, utilization, end).total
    };
    let clock = std::time::Instant::now();
    let projected = project(&settings, &timeline);
    let replayed = clock.elapsed();
    // Deterministic: the same history gives the same figures.
    assert_eq!(project(&settings, &timeline), projected);

    // The negative controls: projections that each leave out one thing the daemon obeyed
    // this month. Each must fall outside the tolerance, or the tolerance could not tell.
    let mut controls = Vec::new();
    let mut blind = settings.clone();
    blind.policy.sessions = SessionRule::Ignore;
    controls.push(("ignoring logins", project(&blind, &timeline)));
    let mut no_cpu = timeline.clone();
    for r in no_cpu.runs.iter_mut() {
        r.seen.owner_cpu_pct = 0;
    }
    controls.push(("without the owner-CPU rule", project(&settings, &no_cpu)));
    let mut no_snooze = timeline.clone();
    for r in no_snooze.runs.iter_mut() {
        r.seen.snoozed = false;
    }
    controls.push(("without the snoozes", project(&settings, &no_snooze)));
    let mut eager = settings.clone();
    eager.policy.free_for = Duration::ZERO;
    controls.push(("without free_for", project(&eager, &timeline)));

    let h = |s: f64| s / 3600.0;
    println!(
        "month lived: {cycles} cycles in {lived:?}; timeline: {} stretches, {:.1} days watched; replay {replayed:?}",
        timeline.runs.len(),
        timeline.watched().num_seconds() as f64 / 86_400.0
    );
    println!(
        "measured : {:.1} CPU-h, {:.1} h computing, {:.1} h open, {:.1} h owner there, {} jobs ran; utilization {:.1}%",
        h(measured.cpu_seconds),
        h(measured.computing_s as f64),
        h(measured.open_s as f64),
        h(measured.owner_present_s as f64),
        measured.ended.ran_jobs,
        utilization.fraction * 100.0
    );
    println!(
        "projected: {:.1} CPU-h, {:.1} h computing, {:.1} h open, {:.1} h owner there ({})",
        h(projected.cpu_seconds),
        h(projected.computing_s),
        h(projected.open_s),
        h(projected.owner_s),
        describe(&projected, &measured)
    );
    for (name, c) in &controls {
        println!("{name}: {}", describe(c, &measured));
    }
    assert!(measured.ended.ran_jobs > 20, "{measured:?}");
    // The daemon kept the timeline on disk (hourly).
    let saved = crate::record::timeline::peek(&settings.state_dir);
    assert!(saved.warning.is_none(), "{:?}", saved.warning);
    assert_eq!(saved.timeline.runs.first(), timeline.runs.first());
    assert!(saved.timeline.watched() > timeline.watched() - chrono::Duration::minutes(65));
    let (what, gap) = worst(&projected, &measured);
    assert!(
        gap.abs() < TOLERANCE,
        "{what} {:+.2}%: projected {projected:?}, measured {measured:?}",
        gap * 100.0
    );
    for (name, c) in &controls {
        let (what, gap) = worst(c, &measured);
        assert!(
            gap.abs() > TOLERANCE,
            "a projection {name} agrees within {}% ({what} {:+.2}%): {c:?}",
            TOLERANCE * 100.0,
            gap * 100.0
        );
    }
}
