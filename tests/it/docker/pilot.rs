//! pilotd and the pilot together, end to end on the real Docker engine: `pilotd run` pulls the
//! pilot test image from the local registry, starts it with env templated from the owner's
//! decision, and reads what happened from the pilot's exit code — a worker that ran a job
//! (exit 0) keeps the back-off at zero, one that saw no job (exit 10) widens it.
//!

use crate::harness::{self, sh_ok as sh};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The locally built pilot image (tests/images/build-pilot-image.sh, its content-addressed tag
/// from tests/run.sh), pushed to the loopback registry under the same tag (pilotd pulls by
/// digest); returns the registry reference.
fn push_pilot_image() -> String {
    let local = std::env::var("PILOTD_TEST_PILOT_IMAGE")
        .unwrap_or_else(|_| "pilotd-test/pilot:latest".into());
    let image = format!("127.0.0.1:5000/{local}");
    sh(&format!(
        "docker tag {local} {image} && docker push -q {image} >/dev/null"
    ));
    image
}

/// Serves one condor config file on the host's address on Docker's default bridge, where the
/// workers are (`network = "host"`, which reached loopback, is refused by `check`).
fn config_server() -> String {
    let gateway = harness::sh_ok("ip -4 -o addr show docker0 | awk '{print $4}' | cut -d/ -f1");
    assert!(!gateway.is_empty(), "docker0 has no IPv4 address");
    let listener = std::net::TcpListener::bind((gateway.as_str(), 0)).unwrap();
    let url = format!("http://{}/pool.conf", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            let mut buf = [0u8; 2048];
            let _ = c.read(&mut buf);
            let body = "CONDOR_HOST = cm.example.org\n";
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

struct Run {
    dir: tempfile::TempDir,
    instance: String,
    child: Child,
}

impl Run {
    fn start(image: &str, tag: &str, mode: &str) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let instance = format!("p{}-{tag}", std::process::id());
        std::fs::write(d.join("utmp"), b"").unwrap();
        std::fs::write(d.join("token"), "pool-token\n").unwrap();
        // A root daemon refuses a token others can read (`config::ownership`).
        std::fs::set_permissions(
            d.join("token"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        std::fs::write(
            d.join("policy.toml"),
            "timezone = \"UTC\"\n[schedule]\nwindows = [{ days = \"daily\", from = \"00:00\", to = \"24:00\" }]\n\
             [owner]\nmax_owner_cpu = \"100%\"\nfree_for = \"0s\"\non_battery = \"ignore\"\n\
             [share]\ncpus = 1\nmemory = \"256MiB\"\ndisk = \"1GiB\"\nworkers = 1\n[jobs]\nlongest_job = \"1h\"\n",
        )
        .unwrap();
        let url = config_server();
        std::fs::write(
            d.join("pilotd.toml"),
            format!(
                r#"splay = "0s"
policy = "{d}/policy.toml"
state_dir = "{d}/state"
control_socket = "{d}/control.sock"
interval = "2s"
[host]
utmp = "{d}/utmp"
scratch = "{d}/scratch"
[docker]
instance = "{instance}"
[worker]
image = "{image}"
allowed_images = ["127.0.0.1:5000/*"]
idle_timeout = "3s"
token_file = "{d}/token"
network = "bridge"
backoff_base = "1s"
backoff_max = "2s"
[worker.env]
PILOT_CONFIG_URLS = "{url}"
PILOT_ALLOW_HTTP = "1"
PILOT_TOKEN_FILE = "{{token_path}}"
PILOT_LOCAL_DIR = "{{scratch_path}}/condor"
PILOT_SCRATCH = "{{scratch_path}}/execute"
PILOT_CPUS = "{{cpus}}"
PILOT_MEMORY_MIB = "{{memory_mib}}"
PILOT_DISK_KIB = "{{disk_kib}}"
PILOT_IDLE_TIMEOUT = "{{idle_seconds}}"
PILOT_ACCEPT_UNTIL = "{{accept_until}}"
PILOT_DIE_AT = "{{die_at}}"
FAKE_CONDOR_MODE = "{mode}"
"#,
                d = d.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(d.join("pilotd.log")).unwrap();
        let child = Command::new(harness::bin())
            .arg("-c")
            .arg(d.join("pilotd.toml"))
            .arg("run")
            .env("RUST_LOG", "pilotd=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Run {
            dir,
            instance,
            child,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn status(&self) -> String {
        let out = Command::new(harness::bin())
            .arg("-c")
            .arg(self.path("pilotd.toml"))
            .arg("status")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Waits until `pilotd status` satisfies `done`.
    fn wait_status(&self, what: &str, done: impl Fn(&str) -> bool, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let s = self.status();
            if done(&s) {
                return s;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.path("pilotd.log")).unwrap_or_default();
                panic!("status never showed {what}:\n{s}\n--- pilotd log ---\n{log}");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker ps -aq --filter label=pilotd.instance={} | xargs -r docker rm -f",
                self.instance
            ))
            .output();
    }
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_pilot_that_ran_a_job_reports_exit_0_and_keeps_backoff_at_zero() {
    let image = push_pilot_image();
    let run = Run::start(&image, "job", "job");
    // The outcome is recorded (not just visible on the exited container).
    let s = run.wait_status(
        "a recorded exit 0",
        |s| {
            s.split("recent outcomes:")
                .nth(1)
                .is_some_and(|o| o.contains("exit 0: ran jobs"))
        },
        Duration::from_secs(90),
    );
    assert!(s.contains("back-off: none"), "{s}");
    // The worker got the owner's decision through its env, and the token as a file only.
    let log = std::fs::read_to_string(run.path("pilotd.log")).unwrap();
    assert!(
        !log.contains("pool-token"),
        "the token never appears in pilotd's log"
    );
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_pilot_that_saw_no_job_reports_exit_10_and_widens_backoff() {
    let image = push_pilot_image();
    let run = Run::start(&image, "idle", "idle");
    let s = run.wait_status(
        "a recorded exit 10 and a back-off",
        |s| {
            s.split("recent outcomes:")
                .nth(1)
                .is_some_and(|o| o.contains("exit 10: no job within the idle timeout"))
                && s.lines()
                    .any(|l| l.starts_with("back-off:") && l.contains("failure(s)"))
        },
        Duration::from_secs(90),
    );
    assert!(
        s.contains("(last: exit 10") || s.contains("delay over"),
        "{s}"
    );
}
