//! End to end in a real container on the local Docker engine, with the image from
//! tests/images/build-pilot-image.sh (busybox + pilot + fake condor; no registry needed).
//!
//! `#[ignore]`d with that reason, so a plain `cargo test` lists them as ignored; tests/run.sh
//! builds the image and runs them with `--include-ignored`, and then any Docker failure fails
//! the test: it never silently skips.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::harness::{ConfigServer, Reply, eventually};

const POOL_CONF: &str = "CONDOR_HOST = cm.example.org\n";

fn image() -> String {
    std::env::var("PILOTD_TEST_PILOT_IMAGE").unwrap_or_else(|_| "pilotd-test/pilot:latest".into())
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker {args:?}: {e}"))
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn unique_name(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("pilotd-test-{what}-{}-{nanos}", std::process::id())
}

/// Removes the container even when the test fails.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

fn run_args<'a>(name: &'a str, url: &'a str, mode: &'a str, extra: &[&'a str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--name",
        name,
        "--network",
        "host",
        "-e",
        &format!("PILOT_CONFIG_URLS={url}"),
        "-e",
        "PILOT_ALLOW_HTTP=1",
        "-e",
        &format!("FAKE_CONDOR_MODE={mode}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for e in extra {
        args.push("-e".into());
        args.push((*e).to_owned());
    }
    args
}

/// Runs the container to completion and returns its exit code and logs.
fn run_to_completion(mode: &str, extra: &[&str]) -> (i32, String) {
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Status(200, POOL_CONF.into())],
    )]);
    let url = server.url("/pool.conf");
    let name = unique_name(mode);
    let _guard = Container(name.clone());
    let mut args = run_args(&name, &url, mode, extra);
    args.push(image());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = docker(&args);
    let logs = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().expect("docker run ended by a signal");
    assert_eq!(
        server.hits("/pool.conf"),
        1,
        "the container did not fetch its config: {logs}"
    );
    (code, logs)
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn container_exit_codes_follow_the_contract() {
    docker_ok(&["image", "inspect", "--format", "{{.Id}}", &image()]);
    let (code, logs) = run_to_completion("job", &["PILOT_IDLE_TIMEOUT=2"]);
    assert_eq!(code, 0, "{logs}");
    let (code, logs) = run_to_completion("idle", &["PILOT_IDLE_TIMEOUT=2"]);
    assert_eq!(code, 10, "{logs}");
    let (code, logs) = run_to_completion("crash", &["PILOT_IDLE_TIMEOUT=2"]);
    assert_eq!(code, 30, "{logs}");
    // As PID 1 the pilot itself must kill and reap what condor leaves behind.
    let (code, logs) = run_to_completion(
        "grandchild",
        &[
            "PILOT_IDLE_TIMEOUT=2",
            "FAKE_CONDOR_GRANDCHILD_PIDFILE=/tmp/grandchild.pid",
        ],
    );
    assert_eq!(code, 10, "{logs}");
    assert!(
        logs.contains("terminating processes condor left behind"),
        "{logs}"
    );
}

/// Starts a long-running container, waits for condor, `docker stop -t grace`, and returns
/// (exit code, seconds the stop took, pilot logs, MasterLog).
fn stop_running_container(
    mode: &str,
    grace: u64,
    extra: &[&str],
) -> (i32, Duration, String, String) {
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Status(200, POOL_CONF.into())],
    )]);
    let url = server.url("/pool.conf");
    let name = unique_name(mode);
    let _guard = Container(name.clone());
    let mut args = run_args(&name, &url, mode, extra);
    args.insert(1, "-d".into());
    args.push("-e".into());
    args.push("PILOT_IDLE_TIMEOUT=600".into());
    args.push(image());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    docker_ok(&args);
    eventually(
        "condor to start in the container",
        Duration::from_secs(30),
        || {
            let out = docker(&["logs", &name]);
            String::from_utf8_lossy(&out.stderr).contains("condor_master started")
        },
    );
    let start = Instant::now();
    docker_ok(&["stop", "-t", &grace.to_string(), &name]);
    let took = start.elapsed();
    let code: i32 = docker_ok(&["inspect", "--format", "{{.State.ExitCode}}", &name])
        .parse()
        .unwrap();
    let logs = String::from_utf8_lossy(&docker(&["logs", &name]).stderr).into_owned();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("MasterLog");
    docker_ok(&[
        "cp",
        &format!("{name}:/pilot/condor/log/MasterLog"),
        dest.to_str().unwrap(),
    ]);
    let master_log = std::fs::read_to_string(dest).unwrap();
    (code, took, logs, master_log)
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn docker_stop_shuts_condor_down_gracefully_within_the_grace_period() {
    let grace = 10;
    let (code, took, logs, master_log) = stop_running_container("idle", grace, &[]);
    assert_eq!(code, 143, "{logs}");
    assert!(
        took < Duration::from_secs(grace),
        "stop took {took:?}, longer than the grace period"
    );
    assert!(
        master_log.contains("Performing graceful shutdown"),
        "{master_log}"
    );
    assert!(master_log.contains("EXITING WITH STATUS 0"), "{master_log}");
    assert!(!master_log.contains("fast shutdown"), "{master_log}");
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn docker_stop_of_a_hung_condor_escalates_before_docker_kills() {
    let grace = 10;
    let (code, took, logs, master_log) = stop_running_container(
        "hang-hard",
        grace,
        &["PILOT_GRACEFUL_TIMEOUT=2", "PILOT_FAST_TIMEOUT=2"],
    );
    assert_eq!(
        code, 30,
        "the pilot, not docker's SIGKILL, must end it: {logs}"
    );
    assert!(took < Duration::from_secs(grace), "stop took {took:?}");
    assert!(master_log.contains("(fake: ignoring it)"), "{master_log}");
    assert!(logs.contains("killing it"), "{logs}");
}
