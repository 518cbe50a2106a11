//! The pilot binary end to end on the host, with the fake condor_master from
//! tests/fake-condor: every exit code of the contract is provoked here, and no process may
//! outlive the pilot.

use std::time::{Duration, Instant};

use crate::harness::{
    CondorHome, ConfigServer, Reply, eventually, process_gone, stderr_of, wait_with_deadline,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const POOL_CONF: &str = "# pool configuration served to the pilot\nCONDOR_HOST = cm.example.org\n";
const LONG: Duration = Duration::from_secs(30);

fn pool_server() -> ConfigServer {
    ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Status(200, POOL_CONF.into())],
    )])
}

/// Runs the pilot to completion and returns its exit code and stderr.
fn run(
    home: &CondorHome,
    server: &ConfigServer,
    mode: &str,
    extra: &[(&str, &str)],
) -> (i32, String) {
    let mut cmd = home.pilot(&server.url("/pool.conf"), mode);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let status = wait_with_deadline(&mut child, LONG);
    let stderr = stderr_of(&mut child);
    (status.code().expect("pilot ended by a signal"), stderr)
}

/// Starts the pilot and waits until the fake condor is up.
fn start_until_condor_runs(
    home: &CondorHome,
    server: &ConfigServer,
    mode: &str,
    extra: &[(&str, &str)],
) -> std::process::Child {
    let mut cmd = home.pilot(&server.url("/pool.conf"), mode);
    cmd.env("PILOT_IDLE_TIMEOUT", "60");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    eventually("condor to start", LONG, || home.master_pid().is_some());
    child
}

fn signal(child: &std::process::Child, sig: Signal) {
    kill(Pid::from_raw(child.id() as i32), sig).unwrap();
}

#[test]
fn exit_0_after_a_job_ran() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(&home, &server, "job", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("a job started"), "{err}");
    // The fetched and the generated configuration are in place.
    let fetched =
        std::fs::read_to_string(home.root().join("config.d/50-pilot-fetched-00-pool.conf"))
            .unwrap();
    assert_eq!(fetched, POOL_CONF);
    let own = std::fs::read_to_string(home.root().join("config.d/99-pilot.conf")).unwrap();
    assert!(own.contains("STARTD_NOCLAIM_SHUTDOWN = 2"), "{own}");
    // The token reached condor's token dir, private, and never the log.
    let token = home.root().join("tokens.d/pilot-pool.token");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&token).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        !err.contains("secret"),
        "the token leaked into the log: {err}"
    );
}

#[test]
fn exit_10_when_no_job_came() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(&home, &server, "idle", &[]);
    assert_eq!(code, 10, "{err}");
    assert!(home.master_log().contains("EXITING WITH STATUS 0"));
}

#[test]
fn exit_10_from_the_idle_backstop_when_condor_does_not_stop_itself() {
    // `hang` ignores its idle timeout and SIGTERM: the pilot stops it (graceful, then fast).
    let home = CondorHome::new();
    let server = pool_server();
    let start = Instant::now();
    let (code, err) = run(
        &home,
        &server,
        "hang",
        &[
            ("PILOT_IDLE_TIMEOUT", "1"),
            ("PILOT_IDLE_GRACE", "1"),
            ("PILOT_GRACEFUL_TIMEOUT", "1"),
        ],
    );
    assert_eq!(code, 10, "{err}");
    assert!(home.master_log().contains("Performing fast shutdown"));
    assert!(start.elapsed() < Duration::from_secs(15));
}

#[test]
fn exit_20_on_unusable_environment() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(
        &home,
        &server,
        "idle",
        &[("PILOT_IDLE_TIMEOUT", "soon"), ("PILOT_CPUS", "-1")],
    );
    assert_eq!(code, 20, "{err}");
    assert!(
        err.contains("PILOT_IDLE_TIMEOUT") && err.contains("PILOT_CPUS"),
        "{err}"
    );
    assert!(home.master_log().is_empty(), "condor must not start");
}

#[test]
fn exit_20_when_the_config_url_is_404() {
    let home = CondorHome::new();
    let server = ConfigServer::start(vec![]);
    let (code, err) = run(&home, &server, "idle", &[]);
    assert_eq!(code, 20, "{err}");
    assert_eq!(server.hits("/pool.conf"), 1, "a 404 is not retried");
    assert!(err.contains("404"), "{err}");
}

#[test]
fn exit_20_when_condor_rejects_the_fetched_config() {
    let home = CondorHome::new();
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Status(200, "this is not condor config\n".into())],
    )]);
    let (code, err) = run(&home, &server, "idle", &[]);
    assert_eq!(code, 20, "{err}");
    assert!(err.contains("condor rejected the configuration"), "{err}");
}

#[test]
fn exit_20_when_the_token_is_missing() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(
        &home,
        &server,
        "idle",
        &[("PILOT_TOKEN_FILE", "/nonexistent/pool.token")],
    );
    assert_eq!(code, 20, "{err}");
    assert!(err.contains("/nonexistent/pool.token"), "{err}");
}

#[test]
fn exit_21_when_scratch_is_not_writable() {
    let home = CondorHome::new();
    let server = pool_server();
    let file = home.root().join("a-file");
    std::fs::write(&file, "").unwrap();
    let (code, err) = run(
        &home,
        &server,
        "idle",
        &[("PILOT_SCRATCH", file.to_str().unwrap())],
    );
    assert_eq!(code, 21, "{err}");
    assert!(
        err.contains("condor's EXECUTE directory") && err.contains("a-file"),
        "{err}"
    );
}

#[test]
fn exit_21_naming_a_log_dir_the_condor_user_cannot_write() {
    use std::os::unix::fs::PermissionsExt;
    let home = CondorHome::new();
    let server = pool_server();
    let log = home.root().join("log");
    std::fs::create_dir(&log).unwrap();
    // Owned by the test's user (condor's user here) but not writable by it.
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o555)).unwrap();
    let (code, err) = run(&home, &server, "idle", &[]);
    assert_eq!(code, 21, "{err}");
    assert!(
        err.contains("condor's LOG directory") && err.contains(log.to_str().unwrap()),
        "{err}"
    );
}

#[test]
fn local_dir_mode_runs_condor_from_its_own_directory() {
    let home = CondorHome::new();
    let server = pool_server();
    let mut child = home
        .pilot_local(&server.url("/pool.conf"), "job")
        .spawn()
        .unwrap();
    let status = wait_with_deadline(&mut child, LONG);
    let err = stderr_of(&mut child);
    assert_eq!(status.code(), Some(0), "{err}");
    let local = home.root().join("local");
    // condor read the pilot's top-level file, which includes the image's configuration and
    // adds the pilot's config dir last: the fake master wrote its logs where 99-pilot.conf
    // put LOG, and found the StartLog there.
    let top = std::fs::read_to_string(local.join("condor_config")).unwrap();
    assert!(
        top.contains(&format!(
            "include : {}",
            home.root().join("condor_config").display()
        )),
        "{top}"
    );
    assert!(local.join("log/MasterLog").is_file(), "{err}");
    assert!(local.join("config.d/99-pilot.conf").is_file());
    assert!(
        local
            .join("config.d/50-pilot-fetched-00-pool.conf")
            .is_file()
    );
    assert!(local.join("tokens.d/pilot-pool.token").is_file());
    for dir in ["spool", "lock", "run", "execute"] {
        assert!(local.join(dir).is_dir(), "{dir} was not prepared");
    }
    // The image's own log dir was never used.
    assert!(!home.root().join("log/MasterLog").exists());
}

#[test]
fn exit_21_when_condor_is_not_installed() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(&home, &server, "idle", &[("PATH", "/usr/bin:/bin")]);
    assert_eq!(code, 21, "{err}");
    assert!(err.contains("condor_master not found"), "{err}");
}

#[test]
fn exit_21_when_the_site_command_fails() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(
        &home,
        &server,
        "idle",
        &[("PILOT_SELFTEST_CMD", "echo no cvmfs >&2; exit 3")],
    );
    assert_eq!(code, 21, "{err}");
    assert!(err.contains("no cvmfs"), "{err}");
}

#[test]
fn exit_30_when_condor_crashes() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(&home, &server, "crash", &[]);
    assert_eq!(code, 30, "{err}");
}

#[test]
fn exit_30_when_condor_crashes_even_after_a_job() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(&home, &server, "job-then-crash", &[]);
    assert_eq!(code, 30, "a job must not hide the crash: {err}");
}

#[test]
fn exit_30_at_once_when_a_daemon_dies_instead_of_waiting_for_its_restarts() {
    let home = CondorHome::new();
    let server = pool_server();
    let started = Instant::now();
    let (code, err) = run(
        &home,
        &server,
        "startd-killed",
        &[("PILOT_IDLE_TIMEOUT", "60")],
    );
    assert_eq!(code, 30, "{err}");
    assert!(err.contains("a condor daemon died"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}: the pilot waited for the master's restarts",
        started.elapsed()
    );
    assert!(
        home.master_log().contains("Got SIGQUIT"),
        "condor was shut down fast"
    );
}

#[test]
fn no_job_starts_once_accept_until_has_passed() {
    let home = CondorHome::new();
    let server = pool_server();
    let past = (chrono::Utc::now() - chrono::Duration::seconds(5)).timestamp();
    let (code, err) = run(
        &home,
        &server,
        "job",
        &[("PILOT_ACCEPT_UNTIL", &past.to_string())],
    );
    assert_eq!(code, 10, "{err}");
}

#[test]
fn exit_30_when_condor_exits_without_a_startd() {
    let home = CondorHome::new();
    let server = pool_server();
    let (code, err) = run(&home, &server, "no-startd", &[]);
    assert_eq!(code, 30, "{err}");
}

#[test]
fn exit_143_on_sigterm_with_a_graceful_condor_shutdown() {
    let home = CondorHome::new();
    let server = pool_server();
    let mut child = start_until_condor_runs(&home, &server, "idle", &[]);
    signal(&child, Signal::SIGTERM);
    let status = wait_with_deadline(&mut child, LONG);
    assert_eq!(status.code(), Some(143), "{}", stderr_of(&mut child));
    let log = home.master_log();
    assert!(log.contains("Performing graceful shutdown"), "{log}");
    assert!(!log.contains("fast shutdown"), "{log}");
}

#[test]
fn exit_131_on_sigquit_with_a_fast_condor_shutdown() {
    let home = CondorHome::new();
    let server = pool_server();
    let mut child = start_until_condor_runs(&home, &server, "idle", &[]);
    signal(&child, Signal::SIGQUIT);
    let status = wait_with_deadline(&mut child, LONG);
    assert_eq!(status.code(), Some(131), "{}", stderr_of(&mut child));
    assert!(home.master_log().contains("Performing fast shutdown"));
}

#[test]
fn sigterm_escalates_to_fast_when_condor_hangs() {
    let home = CondorHome::new();
    let server = pool_server();
    let mut child =
        start_until_condor_runs(&home, &server, "hang", &[("PILOT_GRACEFUL_TIMEOUT", "2")]);
    let start = Instant::now();
    signal(&child, Signal::SIGTERM);
    let status = wait_with_deadline(&mut child, LONG);
    assert_eq!(status.code(), Some(143), "{}", stderr_of(&mut child));
    assert!(start.elapsed() >= Duration::from_secs(2));
    let log = home.master_log();
    assert!(
        log.contains("graceful shutdown. (fake: ignoring it)")
            && log.contains("Performing fast shutdown."),
        "{log}"
    );
}

#[test]
fn exit_30_when_condor_must_be_killed_and_nothing_is_left() {
    let home = CondorHome::new();
    let server = pool_server();
    let mut child = start_until_condor_runs(
        &home,
        &server,
        "hang-hard",
        &[("PILOT_GRACEFUL_TIMEOUT", "1"), ("PILOT_FAST_TIMEOUT", "1")],
    );
    let master = home.master_pid().expect("master pid in MasterLog");
    signal(&child, Signal::SIGTERM);
    let status = wait_with_deadline(&mut child, LONG);
    assert_eq!(status.code(), Some(30), "{}", stderr_of(&mut child));
    eventually(
        "the killed master to be gone",
        Duration::from_secs(2),
        || process_gone(master),
    );
}

#[test]
fn exit_143_on_sigterm_before_condor_starts() {
    let home = CondorHome::new();
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Hang(Duration::from_secs(20))],
    )]);
    let mut cmd = home.pilot(&server.url("/pool.conf"), "idle");
    cmd.env("PILOT_FETCH_TIMEOUT", "30s");
    let mut child = cmd.spawn().unwrap();
    eventually("the fetch to start", LONG, || server.hits("/pool.conf") > 0);
    signal(&child, Signal::SIGTERM);
    let status = wait_with_deadline(&mut child, Duration::from_secs(5));
    assert_eq!(status.code(), Some(143), "{}", stderr_of(&mut child));
}

#[test]
fn a_grandchild_left_behind_by_condor_is_killed_and_reaped() {
    let home = CondorHome::new();
    let server = pool_server();
    let pidfile = home.root().join("grandchild.pid");
    let (code, err) = run(
        &home,
        &server,
        "grandchild",
        &[("FAKE_CONDOR_GRANDCHILD_PIDFILE", pidfile.to_str().unwrap())],
    );
    assert_eq!(code, 10, "{err}");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        process_gone(pid),
        "grandchild {pid} survived the pilot: {err}"
    );
    assert!(
        err.contains("terminating processes condor left behind"),
        "{err}"
    );
}

#[test]
fn help_documents_the_environment_and_exit_codes() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pilot"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "PILOT_CONFIG_URLS",
        "PILOT_CONFIG_SHA256",
        "PILOT_TOKEN_FILE",
        "PILOT_IDLE_TIMEOUT",
        "PILOT_ACCEPT_UNTIL",
        "PILOT_DIE_AT",
        "PILOT_CPUS",
        "PILOT_MEMORY_MIB",
        "PILOT_DISK_KIB",
        "PILOT_GPUS",
        "PILOT_START_EXTRA",
        "PILOT_CONDOR_CONFIG_DIR",
        "PILOT_SCRATCH",
        "PILOT_SELFTEST_CMD",
        "PILOT_ALLOW_HTTP",
        "PILOT_FETCH_TIMEOUT",
        "PILOT_REPORT_PERIOD",
        "128+n",
        " 30 ",
        " 21 ",
    ] {
        assert!(text.contains(needle), "--help lacks {needle}");
    }
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_pilot"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(20));
}

/// The pilot's standard output after it ended.
fn stdout_of(child: &mut std::process::Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut s);
    }
    s
}

#[test]
fn the_job_report_is_the_last_line_on_stdout_on_every_path() {
    let home = CondorHome::new();
    let server = pool_server();
    // A job ran, but the fake condor keeps no startd history: the StartLog's count, zeros
    // for the rest, and the log says why.
    let mut child = home
        .pilot(&server.url("/pool.conf"), "job")
        .spawn()
        .unwrap();
    let status = wait_with_deadline(&mut child, LONG);
    let (out, err) = (stdout_of(&mut child), stderr_of(&mut child));
    assert_eq!(status.code(), Some(0), "{err}");
    let last = out.lines().last().unwrap_or_default();
    let report = pilot_contract::JobReport::parse_line(last)
        .unwrap_or_else(|| panic!("the last stdout line is no report: {out:?}"))
        .unwrap();
    assert_eq!(
        report,
        pilot_contract::JobReport {
            jobs_started: 1,
            ..Default::default()
        }
    );
    assert!(
        err.contains("no startd history although jobs started"),
        "{err}"
    );
    assert!(
        !err.contains("pilot-report"),
        "the report goes to stdout only: {err}"
    );

    // Ended before condor started (a 404 configuration): a report of zeros all the same.
    let home = CondorHome::new();
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Status(404, String::new())],
    )]);
    let mut child = home
        .pilot(&server.url("/pool.conf"), "job")
        .spawn()
        .unwrap();
    let status = wait_with_deadline(&mut child, LONG);
    let out = stdout_of(&mut child);
    assert_eq!(status.code(), Some(20));
    assert_eq!(
        out.lines()
            .last()
            .and_then(pilot_contract::JobReport::parse_line),
        Some(Ok(pilot_contract::JobReport::default())),
        "{out:?}"
    );
}

#[test]
fn a_pilot_killed_at_once_leaves_the_report_it_gave_while_condor_ran() {
    use std::io::BufRead;
    let home = CondorHome::new();
    let server = pool_server();
    let mut child = start_until_condor_runs(
        &home,
        &server,
        "job",
        &[
            ("PILOT_REPORT_PERIOD", "1"),
            ("FAKE_CONDOR_JOB_SECONDS", "60"),
        ],
    );
    // Its standard output as it comes, as the engine's log keeps it.
    let out = child.stdout.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(l);
            }
        })
    };
    let last_report = || {
        let l = lines.lock().unwrap();
        pilot_contract::JobReport::find_last(l.iter().map(String::as_str)).and_then(Result::ok)
    };
    // The job started and still runs: the report says so within a period or two.
    eventually("a report of the running job", LONG, || {
        last_report().is_some_and(|r| r.jobs_started == 1)
    });
    // Killed at once, as pilotd's `fast` eviction does: no last word, the earlier one stands.
    let master = home.master_pid().unwrap();
    signal(&child, Signal::SIGKILL);
    let _ = kill(Pid::from_raw(master), Signal::SIGKILL);
    let status = wait_with_deadline(&mut child, LONG);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    reader.join().unwrap();
    let all = lines.lock().unwrap().clone();
    assert_eq!(
        pilot_contract::JobReport::find_last(all.iter().map(String::as_str)),
        Some(Ok(pilot_contract::JobReport {
            jobs_started: 1,
            ..Default::default()
        })),
        "{all:?}"
    );
    // Given once: unchanged, it is not repeated every period.
    assert_eq!(all.len(), 1, "{all:?}");
}
