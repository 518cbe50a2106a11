//! Volunteer mode and the pilot on the real Docker engine and the local registry
//! (tests/setup-docker.sh, tests/images/build-pilot-image.sh; tests/run.sh runs both).
//!
//! Every test is `#[ignore]`d with that reason, so a plain `cargo test` on a machine without
//! them lists them as ignored instead of passing them; tests/run.sh runs them with
//! `--include-ignored`, and then a missing engine or registry is a failure, never a skip.

mod comfort;
mod data;
mod disk;
mod egress;
mod egress_firewalld;
mod egress_repair;
mod engine_refusals;
mod freezer;
mod freshness;
mod hardening;
mod input;
mod metered;
mod own_load;
mod page;
mod pilot;
mod sleep;
mod snooze;
mod use_signal;
mod volunteer;

/// `docker ARGS`, which must succeed; its stdout.
fn docker(args: &str) -> String {
    crate::harness::sh_ok(&format!("docker {args}"))
}

/// A worker's state as the kernel has it: the engine's, except that a worker the engine
/// believes running whose cgroup is frozen is "paused" (pilotd pauses through the freezer
/// where it can reach it, and the engine is not told; `volunteer::act::backend::freezer`).
pub(crate) fn kernel_state(id: &str, engine_state: &str) -> String {
    if engine_state != "running" {
        return engine_state.to_string();
    }
    let (_, out) = crate::harness::sh(&format!(
        "docker inspect -f '{{{{.Id}}}} {{{{.State.Pid}}}}' {id}"
    ));
    let mut f = out.split_whitespace();
    let frozen = match (f.next(), f.next().and_then(|p| p.parse::<u32>().ok())) {
        (Some(full), Some(pid)) => pilotd_volunteer::act::backend::freezer::Freezer::of(pid, full)
            .and_then(|fr| fr.is_frozen().ok())
            .unwrap_or(false),
        _ => false,
    };
    if frozen { "paused" } else { "running" }.to_string()
}

/// The worker's cgroup freezer, as pilotd finds it (full id and init pid from the engine).
fn freezer(id: &str) -> Option<pilotd_volunteer::act::backend::freezer::Freezer> {
    let (_, out) = crate::harness::sh(&format!(
        "docker inspect -f '{{{{.Id}}}} {{{{.State.Pid}}}}' {id}"
    ));
    let mut f = out.split_whitespace();
    let full = f.next()?;
    let pid = f.next()?.parse().ok()?;
    pilotd_volunteer::act::backend::freezer::Freezer::of(pid, full)
}

/// The first instant a worker's cgroup was seen frozen, by a thread polling it every
/// millisecond from `FrozenWatch::start` on.
struct FrozenWatch {
    first: std::sync::Arc<std::sync::Mutex<Option<std::time::SystemTime>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FrozenWatch {
    fn start(id: &str) -> FrozenWatch {
        let f = freezer(id).unwrap_or_else(|| panic!("no cgroup freezer found for {id}"));
        let first = std::sync::Arc::new(std::sync::Mutex::new(None));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (seen, done) = (first.clone(), stop.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if f.is_frozen().unwrap_or(false) {
                    seen.lock()
                        .unwrap()
                        .get_or_insert_with(std::time::SystemTime::now);
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        FrozenWatch { first, stop }
    }

    fn first_frozen(&self) -> Option<std::time::SystemTime> {
        *self.first.lock().unwrap()
    }
}

impl Drop for FrozenWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Resumes a paused worker behind pilotd's back: thaws its cgroup when pilotd froze it (the
/// engine believes it runs), or asks the engine when the engine paused it.
fn unpause_by_hand(id: &str) {
    let engine = docker(&format!("inspect -f '{{{{.State.Status}}}}' {id}"));
    match freezer(id) {
        Some(f) if engine.trim() == "running" => f.thaw().unwrap(),
        _ => {
            docker(&format!("unpause {id}"));
        }
    }
}
