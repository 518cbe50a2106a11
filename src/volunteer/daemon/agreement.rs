//! Issue 24's agreement test: a synthetic month of owner presence and load, lived by the
//! daemon's real cycle (decide → plan → executor → record) against the recording fake engine
//! with a fixed job mix, at synthetic instants; the contribution ledger it writes is what was
//! "measured". The projection then replays the presence timeline the same daemon recorded,
//! and must agree with the measurement within 10 %. Only the host observation is scripted
//! (`Daemon::synthetic_host`): everything after it is the daemon's own.

use super::*;
use crate::volunteer::host::Carry;
use crate::volunteer::projection::{self, Utilization};
use chrono::{Datelike, Timelike};
use std::collections::HashMap;

/// The daemon's interval in this month: five minutes, so that a month of real cycles (each
/// writing the status file, as the daemon does) runs in a debug build's test time; the
/// projection still decides every minute.
const STEP: chrono::Duration = chrono::Duration::minutes(5);
/// The CPUs a worker of the job mix keeps busy, of the 2 it is granted.
const RATE: f64 = 1.6;
const GRANTED: u32 = 2;
const HOST_CPUS: u32 = 8;
/// Minutes of computing each job needs, in turn.
const JOBS: [i64; 3] = [90, 180, 45];

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

/// The fake engine's workers over one step: a running one's CPU counter advances at `RATE`,
/// and it exits (having run jobs) once its job has had its minutes.
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
            s.worker_ns += (RATE * step_ns) as u64;
            let minutes = ran.entry(x.id.clone()).or_default();
            *minutes += STEP.num_minutes();
            let job = started.iter().position(|i| i == &x.id).unwrap_or(0);
            if *minutes >= JOBS[job % JOBS.len()] {
                x.state = WorkerState::Exited;
                x.exit_code = Some(0);
            }
        }
    }
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

    let measured = d.contribution.ledger.all_time;
    let machine = {
        let mut h = HostSnapshot::test(start());
        h.cpus = HOST_CPUS;
        h
    };
    let utilization = Utilization {
        fraction: RATE / f64::from(GRANTED),
        measured: false,
    };
    let timeline = d.presence.timeline.clone();
    let clock = std::time::Instant::now();
    let projected = projection::project(
        &settings,
        &d.learner.history,
        &timeline,
        &machine,
        utilization,
        end,
    );
    let replayed = clock.elapsed();
    // The same month, projected by a policy that ignores logins: the owner's presence is
    // most of what keeps this machine from computing, so it must not agree.
    let mut blind = settings.clone();
    blind.policy.sessions = SessionRule::Ignore;
    let ignoring = projection::project(
        &blind,
        &d.learner.history,
        &timeline,
        &machine,
        utilization,
        end,
    );
    // Deterministic: the same history gives the same figures.
    assert_eq!(
        projection::project(
            &settings,
            &d.learner.history,
            &timeline,
            &machine,
            utilization,
            end
        ),
        projected
    );

    let h = |s: f64| s / 3600.0;
    let cpu_off = (projected.total.cpu_seconds - measured.cpu_seconds) / measured.cpu_seconds;
    let blind_off = (ignoring.total.cpu_seconds - measured.cpu_seconds) / measured.cpu_seconds;
    println!(
        "month lived: {cycles} cycles in {lived:?}; timeline: {} stretches, {:.1} days watched; replay {replayed:?}",
        timeline.runs.len(),
        timeline.watched().num_seconds() as f64 / 86_400.0
    );
    println!(
        "measured : {:.1} CPU-h, {:.1} h computing, {:.1} h open, {:.1} h owner there, {} jobs ran",
        h(measured.cpu_seconds),
        h(measured.computing_s as f64),
        h(measured.open_s as f64),
        h(measured.owner_present_s as f64),
        measured.ended.ran_jobs
    );
    println!(
        "projected: {:.1} CPU-h, {:.1} h computing, {:.1} h open, {:.1} h owner there ({:+.1}% CPU)",
        h(projected.total.cpu_seconds),
        h(projected.total.computing_s),
        h(projected.total.open_s),
        h(projected.total.owner_s),
        cpu_off * 100.0
    );
    println!(
        "ignoring logins: {:.1} CPU-h ({:+.1}%)",
        h(ignoring.total.cpu_seconds),
        blind_off * 100.0
    );
    assert!(measured.ended.ran_jobs > 20, "{measured:?}");
    // The daemon kept the timeline on disk (hourly).
    let saved = crate::volunteer::timeline::peek(&settings.state_dir);
    assert!(saved.warning.is_none(), "{:?}", saved.warning);
    assert_eq!(saved.timeline.runs.first(), timeline.runs.first());
    assert!(saved.timeline.watched() > timeline.watched() - chrono::Duration::minutes(65));
    assert!(
        cpu_off.abs() < 0.10,
        "projected {projected:?}, measured {measured:?}"
    );
    assert!(blind_off.abs() > 0.10, "{ignoring:?}");
}
