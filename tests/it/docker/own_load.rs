//! Owner CPU is the machine's CPU minus pilotd's own workers (docs/owner.md, "Owner CPU"), on
//! the real engine: a worker that spins half the machine is not the owner's load, and the same
//! load from a container that is not this pilotd's is.
//!
//! The test judges CPU shares of the whole machine, so it runs alone: tests/run.sh skips it
//! in the parallel run and runs it on its own afterwards (`--test-threads 1`), where the rest
//! of the machine is the engine, the registry and this daemon. The spinning loops scale with
//! the machine: half its CPUs, against a `max_owner_cpu` of 25%.

use super::docker;
use super::volunteer::{Harness, image, policy};
use std::time::Duration;

/// The machine's CPUs, and half of them (at least one): the spinning loops of one burner.
fn cpus_and_half() -> (u32, u32) {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get() as u32);
    (cpus, (cpus / 2).max(1))
}

#[test]
#[ignore = "needs the Docker engine and the local registry, and the machine to itself: tests/run.sh runs it alone"]
fn owner_cpu_leaves_out_pilotds_own_workers_and_counts_everything_else() {
    let (cpus, n) = cpus_and_half();
    // busy_for 4s: two cycles of owner load evict; free_for 0s: resumed at once.
    let p = policy("pause", 1).with_owner_cpu("25%", "4s").with_cpus(n);
    let mut h = Harness::new(
        "ownload",
        &p,
        "",
        &format!("{}\n[worker.env]\nWORKER_BURN = \"{n}\"\n", image("v1")),
    );
    h.start();
    // Waits poll the daemon's status file, not `docker ps`: ten docker commands a second
    // would be load of their own, the owner's by this definition.
    let state_of = |h: &Harness, name: &str| -> Option<String> {
        let status = h.status_file()?;
        let w = status["workers"]
            .as_array()?
            .iter()
            .find(|w| w["name"] == name)?
            .clone();
        Some(w["state"].as_str()?.to_string())
    };
    let name = h.wait_for("1 burning worker", Duration::from_secs(30), || {
        let status = h.status_file()?;
        let w = status["workers"].as_array()?.first()?.clone();
        (w["state"] == "running").then(|| w["name"].as_str().map(str::to_string))?
    });
    let started_at = h.log().len();

    // The worker spins half the machine for six cycles: it is pilotd's, not the owner's. The
    // first cycles after its start are the ones that used to read it as the owner's load.
    h.wait_cycles(6);
    let status = h.status_file().expect("status.json");
    let own = status["own_cpu"].as_f64().expect("own_cpu");
    let expected = f64::from(n) / f64::from(cpus);
    assert!(
        own > expected * 0.6,
        "own_cpu {own}: the worker's spinning ({expected} of the machine) was not seen as pilotd's own"
    );
    assert_eq!(state_of(&h, &name).as_deref(), Some("running"), "{status}");
    assert_eq!(
        status["owner_busy_since"],
        serde_json::Value::Null,
        "{status}"
    );
    assert_eq!(status["decision"]["allowed"], true, "{status}");
    let since_start = h.log()[started_at..].to_string();
    assert!(
        !since_start.contains("owner CPU") && !since_start.contains("owner_cpu"),
        "the worker's own load was read as the owner's:\n{since_start}"
    );
    assert!(!since_start.contains("paused:"), "{since_start}");

    // The same load from a container that is not this pilotd's, even one labelled as another
    // pilotd instance's worker: the owner's. The worker is paused, the other left alone.
    let other = format!("pilotd-ownload-other-{}", std::process::id());
    let _cleanup = RemoveOnDrop(other.clone());
    docker(&format!(
        "run -d --name {other} --label pilotd.managed=true --label pilotd.instance={other} \
         -e WORKER_BURN={n} 127.0.0.1:5000/pilotd-test/worker:v1"
    ));
    h.wait_for(
        "the other container's load to pause the worker",
        Duration::from_secs(60),
        || (state_of(&h, &name)? == "paused").then_some(()),
    );
    let log = h.log();
    assert!(log.contains("owner CPU"), "{log}");
    assert!(log.contains("causes=owner_cpu_evict"), "{log}");
    assert_eq!(
        docker(&format!("inspect -f '{{{{.State.Status}}}}' {other}")).trim(),
        "running",
        "pilotd touched a container that is not its own"
    );

    // It goes: the owner's CPU falls, and the worker resumes (the same container).
    docker(&format!("rm -f {other}"));
    h.wait_for(
        "the worker to resume once the other load is gone",
        Duration::from_secs(60),
        || (state_of(&h, &name)? == "running").then_some(()),
    );
    assert!(h.alive(), "{}", h.log());
    h.term();
}

/// Removes a container the test started, pass or fail.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = crate::harness::sh(&format!("docker rm -f {} >/dev/null 2>&1", self.0));
    }
}
