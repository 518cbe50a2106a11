//! The engine's refusals of a state change, asked of the real engine: the status and words
//! the Docker backend's `already_there` reads as "already done", and those it must keep as
//! errors. The recording fake (crates/volunteer/src/backend/fake.rs) answers with these same words.

use super::docker;
use pilotd_volunteer::act::backend::{BackendError, Workers, docker::DockerBackend};
use pilotd_volunteer::settings::EngineSettings;
use std::time::{Duration, Instant};

const REPO: &str = "127.0.0.1:5000/pilotd-test/worker";

/// The engine's raw answer to `METHOD PATH`: "STATUS message".
fn raw(socket: &str, method: &str, path: &str) -> String {
    let out = crate::harness::sh_ok(&format!(
        "curl -s --unix-socket {socket} -X {method} -w ' %{{http_code}}' http://engine{path}"
    ));
    // No body (204, 304): the code alone, trimmed of its space.
    let (body, code) = out.rsplit_once(' ').unwrap_or(("", &out));
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_default();
    format!("{code} {message}").trim().to_string()
}

/// A container of this test's own that ignores SIGTERM (`sleep` as PID 1, no init); removed
/// when dropped, whatever the test left it in.
struct Container(String);

impl Container {
    fn start(instance: &str) -> Container {
        Container(
            docker(&format!(
                "run -d --label pilotd-test={instance} --entrypoint sleep {REPO}:v1 300"
            ))
            .trim()
            .to_string(),
        )
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        crate::harness::sh(&format!("docker rm -f {} >/dev/null 2>&1", self.0));
    }
}

/// The test engine for `instance`: pilotd's backend, a runtime to drive it, and the socket's
/// path (for requests the backend does not make).
fn engine(instance: &str) -> (DockerBackend, tokio::runtime::Runtime, String) {
    let socket =
        std::env::var("PILOTD_TEST_ENGINE_SOCKET").unwrap_or("unix:///var/run/docker.sock".into());
    let path = socket.trim_start_matches("unix://").to_string();
    let engine = EngineSettings {
        socket,
        instance: instance.to_string(),
        timeout: Duration::from_secs(10),
    };
    let b = DockerBackend::connect(&engine).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (b, rt, path)
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn the_engines_refusals_are_read_in_its_own_words() {
    let instance = format!("refusals-{}", std::process::id());
    let (b, rt, path) = engine(&instance);
    let worker = Container::start(&instance);
    let id = worker.0.clone();
    let c = |path: &str| format!("/containers/{id}{path}");

    // Unpausing a running worker: 500 (not 409), read as done.
    assert_eq!(
        raw(&path, "POST", &c("/unpause")),
        format!("500 Container {id} is not paused")
    );
    rt.block_on(b.unpause(&id)).unwrap();

    // Pausing a worker the engine paused: 409, read as done. (The backend pauses through the
    // cgroup freezer where it can, without the engine: the engine's pause is asked here.)
    assert_eq!(raw(&path, "POST", &c("/pause")), "204");
    rt.block_on(b.pause(&id)).unwrap();
    assert_eq!(
        raw(&path, "POST", &c("/pause")),
        format!("409 Container {id} is already paused")
    );
    rt.block_on(b.pause(&id)).unwrap();

    // Removing a paused or a running worker: refused, and an error (the daemon stops first).
    assert_eq!(
        raw(&path, "DELETE", &c("?force=false&v=true")),
        format!(
            "409 You cannot remove a paused container {id}. Unpause and then stop the container before attempting removal or force remove"
        )
    );
    match rt.block_on(b.remove(&id)) {
        Err(BackendError::Conflict { message, .. }) => {
            assert!(
                message.contains("cannot remove a paused container"),
                "{message}"
            )
        }
        other => panic!("removing a paused worker: {other:?}"),
    }
    rt.block_on(b.unpause(&id)).unwrap();
    assert_eq!(
        raw(&path, "DELETE", &c("?force=false&v=true")),
        format!(
            "409 You cannot remove a running container {id}. Stop the container before attempting removal or force remove"
        )
    );
    match rt.block_on(b.remove(&id)) {
        Err(BackendError::Conflict { message, .. }) => {
            assert!(
                message.contains("cannot remove a running container"),
                "{message}"
            )
        }
        other => panic!("removing a running worker: {other:?}"),
    }
    assert_eq!(
        docker(&format!("inspect -f '{{{{.State.Status}}}}' {id}")).trim(),
        "running"
    );

    // Stop honours its grace: a process that ignores SIGTERM is killed once it has passed.
    let t0 = Instant::now();
    rt.block_on(b.stop(&id, Duration::from_secs(1))).unwrap();
    let took = t0.elapsed();
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert_eq!(
        docker(&format!("inspect -f '{{{{.State.ExitCode}}}}' {id}")).trim(),
        "137"
    );

    // A stopped worker: stop answers 304 (a success), kill 409 (read as done), pause 409 (an
    // error: there is nothing to pause), unpause 500 (read as done).
    assert_eq!(raw(&path, "POST", &c("/stop?t=1")), "304");
    rt.block_on(b.stop(&id, Duration::from_secs(1))).unwrap();
    assert_eq!(
        raw(&path, "POST", &c("/kill?signal=SIGKILL")),
        format!("409 Cannot kill container: {id}: Container {id} is not running")
    );
    rt.block_on(b.kill(&id)).unwrap();
    assert_eq!(
        raw(&path, "POST", &c("/pause")),
        format!("409 Container {id} is not running")
    );
    match rt.block_on(b.pause(&id)) {
        Err(BackendError::Conflict { message, .. }) => {
            assert!(message.contains("is not running"), "{message}")
        }
        other => panic!("pausing a stopped worker: {other:?}"),
    }
    rt.block_on(b.unpause(&id)).unwrap();

    // Removed, then gone: 404 is done for stop, kill and remove.
    rt.block_on(b.remove(&id)).unwrap();
    assert_eq!(
        raw(&path, "DELETE", &c("")),
        format!("404 No such container: {id}")
    );
    rt.block_on(b.remove(&id)).unwrap();
    rt.block_on(b.stop(&id, Duration::from_secs(1))).unwrap();
    rt.block_on(b.kill(&id)).unwrap();
}

/// A paused worker that honours SIGTERM, stopped: the engine resumes a container it paused
/// before it signals it (Docker 20.10 and later), so the process gets the SIGTERM and ends at
/// once with 143, long before the grace; the Docker backend thaws a worker it froze through
/// the cgroup itself before it asks the engine, with the same end. The recording fake
/// (crates/volunteer/src/backend/fake.rs) stops a paused worker this way.
#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_paused_worker_that_honours_sigterm_is_resumed_and_ends_143() {
    let instance = format!("paused-stop-{}", std::process::id());
    let (b, rt, path) = engine(&instance);
    // PID 1 gets no signal it has no handler for: the trap is its SIGTERM handler (a worker
    // has the engine's init for that), and `wait` returns as soon as the signal arrives.
    let honours_term = || {
        Container(
            docker(&format!(
                "run -d --label pilotd-test={instance} --entrypoint sh {REPO}:v1 \
                 -c 'trap \"exit 143\" TERM; sleep 300 & wait'"
            ))
            .trim()
            .to_string(),
        )
    };
    let grace = Duration::from_secs(20);
    let state = |id: &str| docker(&format!("inspect -f '{{{{.State.Status}}}}' {id}"));
    let exit_code = |id: &str| docker(&format!("inspect -f '{{{{.State.ExitCode}}}}' {id}"));

    // Paused by the engine.
    let by_engine = honours_term();
    let id = by_engine.0.clone();
    // The trap is set before the engine pauses it (sh sets it first thing).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        raw(&path, "POST", &format!("/containers/{id}/pause")),
        "204"
    );
    assert_eq!(state(&id).trim(), "paused");
    let t0 = Instant::now();
    rt.block_on(b.stop(&id, grace)).unwrap();
    let took = t0.elapsed();
    assert_eq!(exit_code(&id).trim(), "143", "SIGTERM reached it");
    assert!(
        took < Duration::from_secs(5),
        "ended by SIGTERM, not the grace: {took:?}"
    );

    // Frozen by the backend itself (the engine still lists it running).
    let by_backend = honours_term();
    let id = by_backend.0.clone();
    std::thread::sleep(Duration::from_millis(500));
    rt.block_on(b.pause(&id)).unwrap();
    assert_eq!(
        state(&id).trim(),
        "running",
        "frozen through its cgroup, not by the engine"
    );
    let t0 = Instant::now();
    rt.block_on(b.stop(&id, grace)).unwrap();
    let took = t0.elapsed();
    assert_eq!(exit_code(&id).trim(), "143", "SIGTERM reached it");
    assert!(
        took < Duration::from_secs(5),
        "ended by SIGTERM, not the grace: {took:?}"
    );
}
