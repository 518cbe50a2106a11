//! What the one-shot commands (`plan`, `snapshot`, `status`, `gc`) ask the engine: the workers
//! within a short deadline, how much CPU they use, and the plan the daemon's next cycle would
//! make (`plan_report`, with the decision). Acts on nothing; a command's answer never waits
//! long for an engine that hangs.

use crate::act::backend::{self, Backend, BackendError};
use crate::act::image;
use crate::decide::plan::report::Report;
use crate::decide::plan::{self, InFlight, Observed, Plan};
use crate::decide::policy::Supply;
use crate::outcome::StartBackoff;
use crate::record::history::{self, History, Outlook};
use crate::record::status::view::{ManifestView, StatusView};
use crate::settings::{Settings, WorkerSettings};
use crate::snapshot::HostSnapshot;
use crate::worker::ImageRecord;
use crate::worker::{ImageState, Worker, WorkerState};
use crate::{decide::policy, record::manifest, record::status};
use chrono::{DateTime, Utc};
use pilotd_core::service::state_file::StateFileError;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a command waits for the engine's list.
pub(crate) const LIST_DEADLINE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub(crate) enum InspectError {
    #[error("the engine at {socket} did not answer within {}s", LIST_DEADLINE.as_secs())]
    Timeout { socket: String },
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The workers as the engine lists them now, within `LIST_DEADLINE`.
pub(crate) async fn workers(b: &impl Backend, socket: &str) -> Result<Vec<Worker>, InspectError> {
    tokio::time::timeout(LIST_DEADLINE, b.list_workers())
        .await
        .map_err(|_| InspectError::Timeout {
            socket: socket.to_string(),
        })?
        .map_err(InspectError::from)
}

/// Own-load accounting for one-shot commands: two CPU samples of every running worker `gap`
/// apart, as a fraction of the whole machine. `None` when the engine cannot be asked.
pub async fn own_cpu(backend: &impl Backend, gap: Duration) -> Option<f64> {
    let workers = backend.list_workers().await.ok()?;
    let running: Vec<&Worker> = workers
        .iter()
        .filter(|w| w.state == WorkerState::Running)
        .collect();
    if running.is_empty() {
        return Some(0.0);
    }
    let sample =
        || futures_util::future::join_all(running.iter().map(|w| backend.cpu_sample(&w.id)));
    let first = sample().await;
    tokio::time::sleep(gap).await;
    let second = sample().await;
    let total: f64 = first
        .into_iter()
        .zip(second)
        .filter_map(|(a, b)| b.ok()?.fraction_since(a.ok()?))
        .sum();
    Some(total.clamp(0.0, 1.0))
}

/// The plan the daemon's next cycle would make: workers listed from the engine now, the
/// daemon's worker template (`worker`: `manifest::stored_template`), the image and back-off
/// as the daemon's status file has them (the image resolved at the registry only when the
/// file knows nothing of it), with how many workers run or are paused now (what an eviction
/// would act on). `Err` says why the workers are unknown.
pub(crate) async fn next_plan(
    b: &impl Backend,
    s: &Settings,
    worker: &WorkerSettings,
    recorded: (&ImageRecord, &StartBackoff),
    supply: &Supply,
    now: DateTime<Utc>,
) -> Result<(Plan, usize), InspectError> {
    let list = workers(b, &s.engine.socket).await?;
    let live = list
        .iter()
        .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Paused))
        .count();
    let (image, backoff) = recorded;
    let mut record = image.clone();
    if record.reference != worker.image || record.digest.is_none() {
        image::refresh(b, &mut record, &worker.image, now, &s.image).await;
    }
    let image_state = image::state(b, &record, &s.image, None, now)
        .await
        .unwrap_or_else(|e| ImageState::Unavailable {
            reason: e.to_string(),
        });
    let plan = plan::plan(
        supply,
        Observed {
            scratch_use: &BTreeMap::new(),
            workers: &list,
            in_flight: &InFlight::default(),
            backoff,
            image: &image_state,
            free_hours: None,
            filter_down: None,
        },
        worker,
        now,
    );
    Ok((plan, live))
}

/// What `pilotd plan` reports in volunteer mode for `host` at `now` (`config` says where the
/// configuration came from): the decision the daemon would make, and the actions its next
/// cycle would take from the workers the engine lists now and the image the daemon last
/// resolved (read-only: nothing is pulled or resolved here beyond what the status file
/// lacks). Without the engine there is no worker list, and the report says so instead of
/// planning from an empty one.
pub async fn plan_report(
    s: &Settings,
    host: &HostSnapshot,
    config: String,
    now: DateTime<Utc>,
) -> Report {
    // The same prediction the daemon uses, when the site enabled it (`[history]
    // predict_die_at`); off by default, so replays depend only on the snapshot.
    let learned = if s.history.predict_die_at {
        history::peek(&s.state_dir, &s.policy.timezone).history
    } else {
        History::new(&s.policy.timezone)
    };
    let mut outlook = Outlook::at(s, &learned, now);
    // The data cap judged on what the daemon's ledger counted, as the daemon does; only when
    // the policy sets one, so a policy without a cap plans from the snapshot alone.
    let share = &s.policy.share;
    if share.data_per_day.is_some() || share.data_per_month.is_some() {
        let ledger = crate::record::contribution::peek(&s.state_dir).ledger;
        outlook.limits.data = Some(ledger.data_used(&s.policy.timezone, now));
    }
    let mut supply = policy::decide(&s.policy, host, outlook.limits, now);
    let status = last_status(&s.state_dir).unwrap_or_default();
    // The daemon's template: pilotd.toml's [worker] with the manifest it stored laid on.
    let template = manifest::stored_template(s);
    if let Some(e) = &template.refused {
        supply.reasons.push(format!(
            "{e}; planned with pilotd.toml's own worker settings, as the daemon starts workers"
        ));
    }
    let next = async {
        let b = backend::connect(&s.engine)?;
        let recorded = (&status.image, &status.backoff);
        next_plan(&b, s, &template.worker, recorded, &supply, now).await
    }
    .await;
    let live_workers = next.as_ref().ok().map(|(_, live)| *live);
    let actions = match next {
        Ok((plan, _)) => plan
            .actions
            .iter()
            .map(|a| {
                let mut v = serde_json::to_value(a).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("summary".into(), a.to_string().into());
                }
                v
            })
            .chain(
                plan.notes
                    .into_iter()
                    .map(|n| serde_json::json!({ "action": "none", "summary": n })),
            )
            .collect(),
        Err(why) => {
            supply
                .reasons
                .push(format!("workers unknown, no actions planned: {why}"));
            vec![]
        }
    };
    Report {
        mode: "volunteer",
        now,
        supply,
        actions,
        live_workers,
        config,
    }
}

/// Lays logind's sessions on a one-shot observation, each lock dated as the running daemon
/// dated it: logind tells only *that* a session is locked, so without the daemon's record (no
/// daemon, a stale status file, or one this user cannot read) every lock is dated to this
/// look, and the snapshot says so (`lock_instants_unknown`).
pub async fn lay_on_logind(
    h: &mut HostSnapshot,
    state_dir: &std::path::Path,
    probe: &crate::settings::ProbeSettings,
) {
    let record = last_status(state_dir).filter(|s| {
        // The daemon rewrites its status at least every HEARTBEAT; an older file may
        // miss an unlock and a new lock since.
        s.updated_at.is_some_and(|at| {
            h.taken_at.signed_duration_since(at)
                <= pilotd_core::horizon::delta(status::HEARTBEAT + Duration::from_secs(60))
        })
    });
    let known = record.is_some();
    let mut logind =
        crate::observe::logind::Logind::remembering(record.map(|s| s.locks).unwrap_or_default())
            .looking_in(&probe.proc, &probe.dev);
    let seen = logind.observe(h.taken_at).await;
    crate::observe::logind::lay_on(h, seen);
    h.lock_instants_unknown = !known;
}

/// Lays on a one-shot observation where the running daemon's comfort throttle stands (its
/// status file), so `plan` and `snapshot` decide the workers' CPU cap as the daemon does, not
/// as a throttle that starts over; none when the status cannot be read.
pub fn lay_on_throttle(h: &mut HostSnapshot, state_dir: &std::path::Path) {
    h.throttle = last_status(state_dir).and_then(|s| s.throttle);
}

/// The daemon's last status, if it can be read.
fn last_status(state_dir: &std::path::Path) -> Option<status::Status> {
    status::load(&status::path(state_dir)).ok().flatten()
}

/// Lays NetworkManager's word on the link's price on a one-shot observation (absent when it
/// cannot be asked: not known to be metered).
pub async fn lay_on_link(h: &mut HostSnapshot) {
    let seen = crate::observe::metered::Link::default()
        .observe(h.taken_at)
        .await;
    crate::observe::metered::lay_on(h, seen);
}

/// What `policy` is expected to give per week on this machine, as `schedule` and `init` print
/// it: its recorded presence (`timeline`) replayed through `projection`, or a fresh machine's
/// stated defaults. Reads the state dir `site` names (history, timeline, contribution ledger)
/// and this machine's size and scratch. `running` is the policy the
/// ledger was measured under (the one in force): how busy workers kept the CPUs it granted is
/// the utilization the projection assumes.
pub fn expected_week(
    site: &pilotd_core::config::SiteConfig,
    policy: &pilotd_core::config::Policy,
    running: &pilotd_core::config::Policy,
    now: DateTime<Utc>,
) -> Vec<String> {
    use crate::record::projection::{Utilization, granted_cpus, project, render};
    use crate::{observe::host, record::contribution, record::timeline};
    use pilotd_core::config::{Config, Machine};
    let s = Settings::resolve(&Config {
        site: site.clone(),
        site_path: None,
        policy: policy.clone(),
        policy_path: std::path::PathBuf::new(),
    });
    let learned = history::peek(&s.state_dir, &s.policy.timezone);
    let recorded = timeline::peek(&s.state_dir);
    let ledger = contribution::peek(&s.state_dir);
    let size = host::this_machine().unwrap_or(Machine {
        cpus: 1,
        memory_kib: 0,
        gpus: None,
    });
    // Scratch that cannot be measured yet (no dir): the share decides, not the disk.
    let scratch = host::scratch_free_kib(&s.probe.scratch).unwrap_or(u64::MAX >> 10);
    let machine = HostSnapshot::quiet(now, size.cpus, size.memory_kib, scratch);
    let utilization = Utilization::of(&ledger.ledger.all_time, granted_cpus(running, &machine));
    let p = project(
        &s,
        &learned.history,
        &recorded.timeline,
        &machine,
        utilization,
        now,
    );
    let mut lines = render(&p);
    lines.extend(recorded.warning.map(|w| format!("note: {w}")));
    lines
}

/// The view `pilotd status` prints: `StatusView::of`, with whether the daemon runs, the workers as
/// the engine lists them now (else as the daemon last saw them, and why), the pool's
/// manifest and how long the host is usually free; `config` says where the configuration
/// came from. A damaged status file is an error (the daemon's next write replaces it).
pub async fn status_view(
    s: &Settings,
    config: String,
    now: DateTime<Utc>,
) -> Result<StatusView, StateFileError> {
    let status = status::load(&status::path(&s.state_dir))?.unwrap_or_else(|| status::Status {
        instance: s.engine.instance.clone(),
        ..Default::default()
    });
    // Alive: the pid exists and the file was written recently (an unchanged status is
    // rewritten only every `HEARTBEAT`).
    let stale_after = pilotd_core::horizon::delta(
        s.interval
            .saturating_mul(3)
            .max(status::HEARTBEAT)
            .saturating_add(std::time::Duration::from_secs(60)),
    );
    let running = status.pid > 0
        && nix::sys::signal::kill(nix::unistd::Pid::from_raw(status.pid as i32), None).is_ok()
        && status.updated_at.is_some_and(|t| now - t <= stale_after);
    let live = async {
        let b = backend::connect(&s.engine)?;
        workers(&b, &s.engine.socket).await
    }
    .await;
    let mut v = StatusView::of(status, &s.state_dir, &s.policy, now);
    v.daemon_running = running;
    v.config = config;
    match live {
        Ok(list) => (v.workers_from, v.workers) = ("engine", Some(list)),
        Err(e) => v.workers_error = Some(e.to_string()),
    }
    v.manifest = s.remote.as_ref().map(|r| ManifestView {
        url: redact::credentials(&r.url).into_owned(),
        version: manifest::load_last_good(&s.state_dir)
            .ok()
            .flatten()
            .map(|m| m.version),
    });
    let likely_free = v
        .learned
        .likely_free_for(&s.policy.timezone, now, s.history.free_threshold);
    if let Some(h) = v.history.as_mut() {
        h.likely_free_hours = Some(likely_free.num_hours());
    }
    Ok(v)
}
