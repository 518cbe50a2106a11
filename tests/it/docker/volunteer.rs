//! Volunteer mode against the real Docker engine and the local registry (tests/setup-docker.sh).
//!
//! `#[ignore]`d with that reason; tests/run.sh runs them with `--include-ignored`, and then every
//! failure is a failure, never a skip. Each test drives the real `pilotd run` binary with its
//! own `pilotd.instance` label, temp dir, utmp file and (where needed) its own registry tag,
//! and removes its containers when done, pass or fail.

use super::docker;
use crate::harness::{self, sh};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const REPO: &str = "127.0.0.1:5000/pilotd-test/worker";

/// One container of a test instance, as `docker ps -a` shows it.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) state: String,
    pub(super) digest: String,
}

pub(super) struct Harness {
    dir: tempfile::TempDir,
    instance: String,
    child: Option<Child>,
}

impl Harness {
    /// `p` is the policy; `worker` a TOML fragment for the `[worker]` table.
    pub(super) fn new(tag: &str, p: &P, site: &str, worker: &str) -> Harness {
        let instance = format!("t{}-{}", std::process::id(), tag);
        let dir = tempfile::tempdir().unwrap();
        let p_dir = dir.path();
        std::fs::write(p_dir.join("token"), "s3cret-token-value\n").unwrap();
        // A root daemon refuses a token others can read (`config::ownership`).
        std::fs::set_permissions(
            p_dir.join("token"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        std::fs::write(p_dir.join("utmp"), b"").unwrap();
        let policy = format!(
            "timezone = \"UTC\"\n{}\n[owner]\nsessions = \"any\"\nmax_owner_cpu = \"{}\"\nbusy_for = \"{}\"\nfree_for = \"0s\"\non_battery = \"ignore\"\non_return = \"{}\"\ngrace = \"{}\"\n[share]\ncpus = {}\nmemory = \"512MiB\"\ndisk = \"{}\"\ndisk_limit = \"{}\"\nworkers = {}\n[jobs]\nlongest_job = \"{}\"\n",
            p.schedule,
            p.max_owner_cpu,
            p.busy_for,
            p.on_return,
            p.grace,
            p.cpus,
            p.disk,
            p.disk_limit,
            p.workers,
            p.longest_job
        );
        std::fs::write(p_dir.join("policy.toml"), policy).unwrap();
        let p = p_dir;
        // The engine under test: Docker's default socket, or another Docker-compatible API
        // (tests/setup-podman.sh sets PILOTD_TEST_ENGINE_SOCKET for Podman's service).
        let engine = std::env::var("PILOTD_TEST_ENGINE_SOCKET")
            .map(|s| format!("socket = \"{s}\"\n"))
            .unwrap_or_default();
        let site = format!(
            "mode = \"volunteer\"\nsplay = \"0s\"\npolicy = \"{d}/policy.toml\"\nstate_dir = \"{d}/state\"\ncontrol_socket = \"{d}/control.sock\"\ninterval = \"2s\"\n{site}\n[host]\nutmp = \"{d}/utmp\"\nscratch = \"{d}/scratch\"\n[docker]\n{engine}instance = \"{instance}\"\n[worker]\nallowed_images = [\"127.0.0.1:\"]\nrefresh = \"2s\"\ntoken_file = \"{d}/token\"\nbackoff_base = \"1s\"\nbackoff_max = \"2s\"\n{worker}\n",
            d = p.display(),
        );
        // Patterns match whole components (no `127.0.0.1:*`): allow the registry of the
        // image the test names (a forwarder's port), else the test registry.
        let registry = worker
            .lines()
            .find_map(|l| l.strip_prefix("image = \""))
            .and_then(|r| r.split('/').next())
            .unwrap_or("127.0.0.1:5000");
        let site = site.replace(
            "[\"127.0.0.1:\"]",
            &format!("[\"{registry}/*\", \"127.0.0.1:5000/*\"]"),
        );
        std::fs::write(p.join("pilotd.toml"), site).unwrap();
        Harness {
            dir,
            instance,
            child: None,
        }
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Rewrites a file of the test's directory: each `(from, to)` replaces the first `from`,
    /// which must be there (an edit that matched nothing would leave the test proving the
    /// defaults instead of what it names).
    pub(super) fn edit(&self, name: &str, edits: &[(&str, &str)]) {
        let path = self.path(name);
        let mut text = std::fs::read_to_string(&path).unwrap();
        for (from, to) in edits {
            assert!(
                text.contains(from),
                "{}: no {from:?} to edit",
                path.display()
            );
            text = text.replacen(from, to, 1);
        }
        std::fs::write(&path, text).unwrap();
    }

    pub(super) fn pilotd(&self) -> Command {
        let mut c = Command::new(harness::bin());
        c.arg("-c").arg(self.path("pilotd.toml"));
        c
    }

    pub(super) fn start(&mut self) {
        self.start_command(self.pilotd());
    }

    /// `start`, with these environment variables set for pilotd.
    pub(super) fn start_with(&mut self, env: &[(&str, &str)]) {
        let mut c = self.pilotd();
        c.envs(env.iter().copied());
        self.start_command(c);
    }

    /// `start` with the programs of `dir` found before the host's (a test's stand-ins).
    pub(super) fn start_with_path(&mut self, dir: &Path) {
        self.start_with_path_and(Some(dir), &[]);
    }

    /// `start` with the programs of `dir` (when given) found before the host's, and these
    /// environment variables set.
    pub(super) fn start_with_path_and(&mut self, dir: Option<&Path>, env: &[(&str, &str)]) {
        let mut c = self.pilotd();
        if let Some(dir) = dir {
            c.env(
                "PATH",
                format!(
                    "{}:{}",
                    dir.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            );
        }
        c.envs(env.iter().copied());
        self.start_command(c);
    }

    fn start_command(&mut self, mut c: Command) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("pilotd.log"))
            .unwrap();
        let child = c
            .arg("run")
            .env("RUST_LOG", "pilotd=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("pilotd starts");
        self.child = Some(child);
    }

    /// The running pilotd's process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub(super) fn instance(&self) -> &str {
        &self.instance
    }

    pub(super) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(super) fn term(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = sh(&format!("kill -TERM {}", c.id()));
            let _ = c.wait();
        }
    }

    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(self.path("pilotd.log")).unwrap_or_default()
    }

    /// Rewrites `interval` in pilotd.toml (applied by `reload` or the next `start`).
    pub(super) fn set_interval(&self, interval: &str) {
        let path = self.path("pilotd.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("interval = "))
            .unwrap()
            .to_owned();
        std::fs::write(
            &path,
            text.replace(&line, &format!("interval = \"{interval}\"")),
        )
        .unwrap();
    }

    /// SIGHUP, then waits until the daemon says the new configuration is in effect.
    pub(super) fn reload(&self) {
        let before = self.log().matches("configuration reloaded").count();
        let pid = self.child.as_ref().expect("running").id();
        let _ = sh(&format!("kill -HUP {pid}"));
        self.wait_for("the reload to apply", Duration::from_secs(20), || {
            (self.log().matches("configuration reloaded").count() > before).then_some(())
        });
    }

    pub(super) fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The state file as the running daemon last wrote it.
    pub(super) fn status_file(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.path("state/status.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits until the running daemon has finished `n` more cycles (it logs each at debug
    /// level; the status file is rewritten only when it changes).
    pub(super) fn wait_cycles(&self, n: usize) {
        let done = |log: &str| log.matches("cycle done: ").count();
        let before = done(&self.log());
        self.wait_for(&format!("{n} cycles"), Duration::from_secs(60), || {
            (done(&self.log()) >= before + n).then_some(())
        });
    }

    pub(super) fn workers(&self) -> Vec<Seen> {
        let out = docker(&format!(
            "ps -a --filter label=pilotd.instance={} --format '{{{{.ID}}}} {{{{.Names}}}} {{{{.State}}}} {{{{.Label \"pilotd.image-digest\"}}}}'",
            self.instance
        ));
        out.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3).then(|| Seen {
                    id: f[0].into(),
                    name: f[1].into(),
                    state: super::kernel_state(f[0], f[2]),
                    digest: f.get(3).unwrap_or(&"").to_string(),
                })
            })
            .collect()
    }

    pub(super) fn running(&self) -> Vec<Seen> {
        self.workers()
            .into_iter()
            .filter(|w| w.state == "running")
            .collect()
    }

    /// Polls `cond` until it holds, or fails with the log.
    pub(super) fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut cond: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = cond() {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; workers: {:?}\n--- pilotd log ---\n{}",
                    self.workers(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The owner logs in: a USER_PROCESS record whose pid (this test process) is alive.
    pub(super) fn login(&self) {
        let rec = format!(
            "[7] [{:05}] [ts/0] [alice   ] [pts/0       ] [10.0.0.5            ] [10.0.0.5       ] [2026-11-30T05:00:00,000000+00:00]\n",
            std::process::id()
        );
        self.write_utmp(&rec);
    }

    /// A login at the machine's own console `line` (no remote host).
    pub(super) fn login_local(&self, line: &str) {
        let rec = format!(
            "[7] [{:05}] [ts/9] [alice   ] [{line:<12}] [                    ] [0.0.0.0        ] [2026-11-30T05:00:00,000000+00:00]\n",
            std::process::id()
        );
        self.write_utmp(&rec);
    }

    /// Replaces the utmp file with the record `rec` (utmpdump's text form), written whole.
    fn write_utmp(&self, rec: &str) {
        let tmp = self.path("utmp.txt");
        std::fs::write(&tmp, rec).unwrap();
        let (ok, out) = sh(&format!(
            "utmpdump -r < {} > {} 2>/dev/null && cat {} > {}",
            tmp.display(),
            self.path("utmp.bin").display(),
            self.path("utmp.bin").display(),
            self.path("utmp").display()
        ));
        assert!(ok, "utmpdump -r failed: {out}");
    }

    pub(super) fn logout(&self) {
        std::fs::write(self.path("utmp"), b"").unwrap();
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.kill9();
        // What the package does on removal: the workers, then pilotd's network and filter.
        let _ = self
            .pilotd()
            .args(["failsafe", "--remove", "--grace", "1s"])
            .output();
        let _ = sh(&format!(
            "docker ps -aq --filter label=pilotd.instance={} | xargs -r docker rm -f >/dev/null 2>&1",
            self.instance
        ));
    }
}

const ALWAYS: &str = "[schedule]\nwindows = [ { days = \"daily\", from = \"00:00\", to = \"24:00\" } ]\nevict_before_end = \"10s\"\n";

/// A test policy.
pub(super) struct P {
    pub(super) schedule: String,
    pub(super) on_return: &'static str,
    pub(super) grace: &'static str,
    pub(super) workers: u32,
    pub(super) longest_job: &'static str,
    pub(super) disk: &'static str,
    /// `[share] disk_limit`: "enforced" (the default) or "measured".
    pub(super) disk_limit: &'static str,
    pub(super) max_owner_cpu: String,
    pub(super) busy_for: &'static str,
    pub(super) cpus: u32,
}

/// Most tests keep the owner's CPU out of the way (`100%`): the machine runs other tests.
pub(super) fn policy(on_return: &'static str, workers: u32) -> P {
    P {
        schedule: ALWAYS.into(),
        on_return,
        grace: "10s",
        disk: "1GiB",
        disk_limit: "enforced",
        workers,
        longest_job: "1h",
        max_owner_cpu: "100%".into(),
        busy_for: "2m",
        cpus: 2,
    }
}

impl P {
    /// The owner is busy above `max` of the machine's CPU (not counting pilotd's workers),
    /// held for `busy_for`.
    pub(super) fn with_owner_cpu(self, max: &str, busy_for: &'static str) -> P {
        P {
            max_owner_cpu: max.into(),
            busy_for,
            ..self
        }
    }

    /// Each worker's CPU share.
    pub(super) fn with_cpus(self, cpus: u32) -> P {
        P { cpus, ..self }
    }
}

pub(super) fn image(tag: &str) -> String {
    format!("image = \"{REPO}:{tag}\"")
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn start_to_target_evict_by_pause_resume_and_adopt_after_sigkill() {
    // A foreign container (no labels) and a worker of another pilotd instance (every label
    // pilotd puts on its own, another instance's name): never touched, adoption included.
    let foreign = format!("pilotd-foreign-{}", std::process::id());
    docker(&format!("run -d --name {foreign} {REPO}:v1"));
    let other = format!("pilotd-other-{}", std::process::id());
    docker(&format!(
        "run -d --name {other} --label pilotd.managed=true --label pilotd.instance=other-{} \
         --label pilotd.created=2026-01-01T00:00:00Z --label pilotd.die-at=2026-01-01T00:00:00Z {REPO}:v1",
        std::process::id()
    ));
    let mut h = Harness::new(
        "pause",
        &policy("pause", 2),
        "",
        &format!(
            "{}\nmax_starts_per_cycle = 1\n[worker.env]\nNUM_CPUS = \"{{cpus}}\"\nMEMORY = \"{{memory_mib}}\"\n",
            image("v1")
        ),
    );
    h.start();
    let two = h.wait_for("2 workers", Duration::from_secs(30), || {
        let r = h.running();
        (r.len() == 2).then_some(r)
    });
    // The container is the WorkerSpec: limits, init, no privileges, token bind-mounted only.
    let inspect = docker(&format!(
        "inspect -f '{{{{.HostConfig.NanoCpus}}}} {{{{.HostConfig.Memory}}}} {{{{.HostConfig.MemorySwap}}}} {{{{.HostConfig.PidsLimit}}}} {{{{.HostConfig.Init}}}} {{{{.HostConfig.Privileged}}}}' {}",
        two[0].id
    ));
    assert_eq!(inspect, "1000000000 268435456 268435456 4096 true false");
    // No capability and no new privileges, as the worker's own process sees it (engines
    // spell CapDrop and SecurityOpt differently: Docker "[ALL]", Podman the expanded list).
    let status = docker(&format!(
        "exec {} sh -c 'grep -E \"^(CapEff|CapPrm|NoNewPrivs)\" /proc/self/status'",
        two[0].id
    ));
    assert_eq!(
        status.split_whitespace().collect::<Vec<_>>(),
        [
            "CapPrm:",
            "0000000000000000",
            "CapEff:",
            "0000000000000000",
            "NoNewPrivs:",
            "1"
        ],
        "{status}"
    );
    let env = docker(&format!(
        "inspect -f '{{{{json .Config.Env}}}}' {}",
        two[0].id
    ));
    assert!(
        env.contains("NUM_CPUS=1") && env.contains("MEMORY=256"),
        "{env}"
    );
    assert!(!env.contains("s3cret"), "the token is never in env: {env}");
    let mounts = docker(&format!("inspect -f '{{{{json .Mounts}}}}' {}", two[0].id));
    let mounts: serde_json::Value = serde_json::from_str(&mounts).unwrap();
    let token = mounts
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Destination"] == "/etc/pilotd/token")
        .unwrap_or_else(|| panic!("no token mount: {mounts}"));
    assert_eq!(
        token["RW"], false,
        "the token is mounted read-only: {token}"
    );
    let logs = docker(&format!("logs {}", two[0].id));
    assert!(logs.contains("token=readable"), "{logs}");
    assert!(!h.log().contains("s3cret"), "the token is never logged");

    // A cycle every 10 minutes from now on, applied by SIGHUP: only the utmp watch (inotify)
    // can make the next steps happen in time, not the timer.
    h.set_interval("10m");
    h.reload();
    // The owner logs in: both paused, within seconds (event-driven).
    h.login();
    h.wait_for("both paused", Duration::from_secs(20), || {
        let w = h.workers();
        (w.len() == 2 && w.iter().all(|w| w.state == "paused")).then_some(())
    });
    // Leaves: resumed.
    h.logout();
    h.wait_for("both resumed", Duration::from_secs(5), || {
        (h.running().len() == 2).then_some(())
    });

    // SIGKILL and restart (a cycle every 2 s again): the same two containers are adopted,
    // none added, over three cycles of the new daemon, which keeps running.
    let before: Vec<String> = two.iter().map(|w| w.id.clone()).collect();
    h.kill9();
    h.set_interval("2s");
    h.start();
    h.wait_cycles(3);
    assert!(h.alive(), "the restarted pilotd died:\n{}", h.log());
    let mut after: Vec<String> = h.workers().into_iter().map(|w| w.id).collect();
    let mut before = before;
    before.sort();
    after.sort();
    assert_eq!(after, before, "adopted, no duplicate, no orphan");

    // `pilotd status` sees them.
    let out = h
        .pilotd()
        .args(["status", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["workers_from"], "engine");
    assert_eq!(v["workers"].as_array().unwrap().len(), 2);
    h.term();

    for c in [&foreign, &other] {
        let state = docker(&format!("inspect -f '{{{{.State.Status}}}}' {c}"));
        assert_eq!(state, "running", "{c} is not pilotd's to touch");
        docker(&format!("rm -f {c}"));
    }
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn graceful_and_fast_eviction() {
    for (mode, want_exit) in [("graceful", "143"), ("fast", "137")] {
        let mut h = Harness::new(
            mode,
            &policy(mode, 1),
            "",
            &format!("{}\n[worker.env]\nWORKER_TERM_DELAY = \"1\"\n", image("v1")),
        );
        h.start();
        let w = h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());
        h.login();
        // The worker goes; pilotd records its outcome and removes it.
        h.wait_for("worker removed", Duration::from_secs(20), || {
            h.workers().is_empty().then_some(())
        });
        let log = h.log();
        let ended = log
            .lines()
            .find(|l| l.contains("worker ended") && l.contains(&w.name))
            .unwrap_or_else(|| panic!("{mode}: no outcome line in\n{log}"));
        assert!(
            ended.contains(&format!("exit {want_exit}")),
            "{mode}: {ended}"
        );
        if mode == "graceful" {
            assert!(log.contains("stopping: eviction: graceful"), "{log}");
        }
        h.term();
    }
}

/// A worker whose last line is a job report (as `pilot` prints it) ends on its own; the real
/// pilotd reads the report from the real engine's log before removing the container, and
/// `pilotd status --format json` shows its jobs under `contribution`.
#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_workers_job_report_shows_in_status() {
    let report = "pilot-report v=1 jobs_started=2 jobs_completed=2 jobs_vacated=0 job_seconds=2 job_cpu_seconds=1.5 vacated_cpu_seconds=0.0";
    let mut h = Harness::new(
        "report",
        &policy("graceful", 1),
        "",
        &format!(
            "{}
[worker.env]
WORKER_SLEEP = \"2\"
WORKER_REPORT = \"{report}\"
",
            image("v1")
        ),
    );
    h.start();
    let jobs = h.wait_for("a reported job", Duration::from_secs(40), || {
        let out = h
            .pilotd()
            .args(["status", "--format", "json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let jobs = v["contribution"]["all_time"]["jobs"].clone();
        (jobs["workers_reported"].as_u64() >= Some(1)).then_some(jobs)
    });
    // Workers keep ending (each exits after 2 s): whole multiples of one report.
    let n = jobs["workers_reported"].as_u64().unwrap();
    assert_eq!(jobs["completed"].as_u64(), Some(2 * n), "{jobs}");
    assert_eq!(jobs["started"].as_u64(), Some(2 * n), "{jobs}");
    assert_eq!(jobs["vacated"].as_u64(), Some(0), "{jobs}");
    assert_eq!(jobs["cpu_seconds"].as_f64(), Some(1.5 * n as f64), "{jobs}");
    let text = h.pilotd().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("jobs: "), "{text}");
    assert!(h.log().contains("jobs reported"), "{}", h.log());
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn die_at_stops_the_worker_and_a_fresh_one_replaces_it() {
    // max_lifetime 12s: every worker's die_at is 12 s after its start.
    let mut h = Harness::new(
        "dieat",
        &P {
            grace: "5s",
            longest_job: "2s",
            ..policy("graceful", 1)
        },
        "",
        &format!("{}\nmax_lifetime = \"12s\"\n", image("v1")),
    );
    h.start();
    let first = h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());
    h.wait_for("first stopped at die_at", Duration::from_secs(30), || {
        h.workers().iter().all(|w| w.id != first.id).then_some(())
    });
    assert!(h.log().contains("past its die_at"), "{}", h.log());
    h.wait_for("replacement", Duration::from_secs(15), || {
        h.running().into_iter().find(|w| w.id != first.id)
    });
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_worker_that_fills_its_scratch_beyond_its_disk_share_is_stopped() {
    // A 16 MiB share the owner chose to have only measured (no loop devices); the worker
    // writes 48 MiB into its scratch dir at start. (The enforced limit: docker::disk.)
    let mut h = Harness::new(
        "disk",
        &P {
            disk: "16MiB",
            disk_limit: "measured",
            ..policy("graceful", 1)
        },
        "",
        &format!("{}\n[worker.env]\nWORKER_FILL_MIB = \"48\"\n", image("v1")),
    );
    h.start();
    let first = h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());
    h.wait_for(
        "the worker stopped for its disk use",
        Duration::from_secs(60),
        || h.workers().iter().all(|w| w.id != first.id).then_some(()),
    );
    // Measured while the worker may still be writing: anything over the share, at most 48.
    let log = h.log();
    let held: Option<u64> = log
        .split("its scratch dir holds ")
        .nth(1)
        .and_then(|rest| rest.split_once(" MiB, over its disk share of 16 MiB"))
        .and_then(|(n, _)| n.parse().ok());
    assert!(
        held.is_some_and(|n| n > 16 && n <= 48),
        "no stop for {held:?} MiB over the 16 MiB share:\n{log}"
    );
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn window_closing_stops_workers_gracefully() {
    // The window ends at the next whole minute at least 25 s away; workers must be gone 10 s
    // before that.
    let now = chrono::Utc::now();
    let mut end = (now + chrono::Duration::seconds(85)).timestamp() / 60 * 60;
    if end - now.timestamp() > 85 {
        end -= 60;
    }
    let end = chrono::DateTime::from_timestamp(end, 0).unwrap();
    // The window opened two hours before its end; near midnight it wraps past it (`to` earlier
    // than `from`), which the policy allows, so this runs at any hour.
    let from = (end - chrono::Duration::hours(2)).format("%H:%M");
    let to = end.format("%H:%M");
    let mut h = Harness::new(
        "window",
        &P {
            schedule: format!(
                "[schedule]\nwindows = [ {{ days = \"daily\", from = \"{from}\", to = \"{to}\" }} ]\nevict_before_end = \"10s\"\n"
            ),
            longest_job: "1s",
            ..policy("pause", 1)
        },
        "",
        &image("v1"),
    );
    h.start();
    h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());
    h.wait_for(
        "worker gone before the window ends",
        Duration::from_secs(100),
        || h.workers().is_empty().then_some(()),
    );
    assert!(
        chrono::Utc::now() < end,
        "gone before the end of the window"
    );
    // Stopped gracefully at its die_at (= window end − evict_before_end) or by the eviction
    // that starts at the same instant, whichever cycle comes first.
    let log = h.log();
    assert!(
        log.contains("stopping: past its die_at") || log.contains("stopping: eviction: graceful"),
        "{log}"
    );
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_moved_tag_is_pulled_and_used_by_new_workers() {
    let tag = format!("moving-{}", std::process::id());
    let push = |v: &str| {
        docker(&format!("tag {REPO}:{v} {REPO}:{tag}"));
        let out = docker(&format!("push {REPO}:{tag}"));
        let d = out
            .split_whitespace()
            .find(|w| w.starts_with("sha256:"))
            .unwrap_or_default()
            .to_string();
        docker(&format!("rmi {REPO}:{tag}"));
        d
    };
    let v1 = push("v1");
    // Workers live 3 s and exit 0 ("ran jobs"), so new ones keep starting.
    let mut h = Harness::new(
        "tag",
        &policy("graceful", 1),
        "",
        &format!("{}\n[worker.env]\nWORKER_SLEEP = \"3\"\n", image(&tag)),
    );
    h.start();
    h.wait_for("a v1 worker", Duration::from_secs(30), || {
        h.workers().into_iter().find(|w| w.digest == v1)
    });
    let v2 = push("v2");
    assert_ne!(v1, v2);
    // Drop the local copy so pilotd really pulls from the registry: the image itself, not
    // just its tag (Podman keeps an image that was pulled by digest when a tag goes).
    let _ = sh(&format!(
        "docker rmi -f $(docker image inspect -f '{{{{.Id}}}}' {REPO}:v2)"
    ));
    h.wait_for("a v2 worker", Duration::from_secs(40), || {
        h.workers().into_iter().find(|w| w.digest == v2)
    });
    let log = h.log();
    assert!(log.contains("the tag names a new image"), "{log}");
    assert!(log.contains("pulled"), "{log}");
    h.term();
    // Put v2 back for the next run (setup-docker.sh would rebuild it otherwise).
    let _ = sh(&format!(
        "docker pull -q {REPO}@{v2} && docker tag {REPO}@{v2} {REPO}:v2"
    ));
}

/// A TCP forwarder in front of the registry that can be switched off (registry down) and on.
struct Forwarder {
    port: u16,
    up: Arc<AtomicBool>,
}

impl Forwarder {
    fn start() -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let flag = up.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                if !flag.load(Ordering::SeqCst) {
                    drop(client); // refused: the registry is down
                    continue;
                }
                let Ok(server) = TcpStream::connect("127.0.0.1:5000") else {
                    continue;
                };
                let flag = flag.clone();
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    flag.clone(),
                );
                pipe(server, client, flag);
            }
        });
        Forwarder { port, up }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, up: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 16384];
        loop {
            if !up.load(Ordering::SeqCst) {
                break;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn registry_down_leaves_workers_alone_and_is_retried() {
    let fwd = Forwarder::start();
    let reference = format!("127.0.0.1:{}/pilotd-test/worker:v1", fwd.port);
    let mut h = Harness::new(
        "regdown",
        &policy("graceful", 1),
        "",
        &format!("image = \"{reference}\"\n"),
    );
    h.start();
    let w = h.wait_for("1 worker", Duration::from_secs(60), || h.running().pop());
    fwd.up.store(false, Ordering::SeqCst);
    h.wait_for("a clear log line", Duration::from_secs(15), || {
        h.log()
            .lines()
            .find(|l| l.contains("resolving") && l.contains("running workers are unaffected"))
            .map(str::to_string)
    });
    // The outage is in the status, for `pilotd status`.
    let err = h.wait_for("the outage in the status", Duration::from_secs(30), || {
        let v = h.status_file()?;
        v["image"]["last_error"].as_str().map(str::to_owned)
    });
    assert!(err.contains("127.0.0.1"), "names the registry: {err}");
    let still: Vec<String> = h.running().into_iter().map(|w| w.id).collect();
    assert_eq!(
        still,
        vec![w.id.clone()],
        "the running worker is unaffected"
    );
    // Back up: the next check succeeds.
    let failures_logged = h.log().matches("running workers are unaffected").count();
    fwd.up.store(true, Ordering::SeqCst);
    h.wait_for("registry confirmed again", Duration::from_secs(20), || {
        let out = h
            .pilotd()
            .args(["status", "--format", "json"])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        // Present and null: a missing key would read as null too.
        (v["image"].get("last_error") == Some(&serde_json::Value::Null)).then_some(())
    });
    assert!(failures_logged >= 1);
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn no_new_worker_on_an_image_the_registry_has_not_confirmed_for_max_image_age() {
    let fwd = Forwarder::start();
    let reference = format!("127.0.0.1:{}/pilotd-test/worker:v1", fwd.port);
    let mut h = Harness::new(
        "imgage",
        &policy("graceful", 1),
        "",
        &format!(
            "image = \"{reference}\"\nmax_image_age = \"4s\"\n[worker.env]\nWORKER_SLEEP = \"6\"\n"
        ),
    );
    h.start();
    let first = h.wait_for("1 worker", Duration::from_secs(60), || h.running().pop());
    // The registry goes away; the worker ends on its own a few seconds later, and its
    // replacement must wait: the image is no longer confirmed.
    fwd.up.store(false, Ordering::SeqCst);
    let note = h.wait_for("the refusal in the status", Duration::from_secs(60), || {
        let v = h.status_file()?;
        v["notes"]
            .as_array()?
            .iter()
            .filter_map(|n| n.as_str())
            .find(|n| n.contains("longer ago than max_image_age"))
            .map(str::to_owned)
    });
    assert!(note.contains("no worker can start"), "{note}");
    assert!(
        h.workers().iter().all(|w| w.id == first.id),
        "no other worker started: {:?}",
        h.workers()
    );
    // Confirmed again: a new worker starts.
    fwd.up.store(true, Ordering::SeqCst);
    h.wait_for("a new worker", Duration::from_secs(60), || {
        h.running().into_iter().find(|w| w.id != first.id)
    });
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn on_shutdown_stop_stops_the_workers_and_keep_leaves_them() {
    for (mode, left) in [("stop", 0), ("keep", 1)] {
        let mut h = Harness::new(
            &format!("shut{mode}"),
            &policy("graceful", 1),
            "",
            &format!("{}\non_shutdown = \"{mode}\"\n", image("v1")),
        );
        h.start();
        h.wait_for("1 worker", Duration::from_secs(60), || h.running().pop());
        h.term();
        assert_eq!(h.running().len(), left, "on_shutdown = {mode}: {}", h.log());
    }
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn gc_removes_exactly_what_it_should() {
    let h = Harness::new("gc", &policy("graceful", 1), "", &image("v1"));
    let inst = &h.instance;
    // An exited worker of this instance, an exited one of no instance (foreign), and scratch
    // dirs: an orphan, a young one, and one that is not pilotd's.
    docker(&format!(
        "run --name pilotd-{inst}-exited --label pilotd.managed=true --label pilotd.instance={inst} -e WORKER_SLEEP=0 {REPO}:v1"
    ));
    let foreign = format!("gc-foreign-{}", std::process::id());
    docker(&format!("run --name {foreign} -e WORKER_SLEEP=0 {REPO}:v1"));
    let scratch = h.path("scratch");
    for d in ["orphan", "young"] {
        std::fs::create_dir_all(scratch.join(format!("pilotd-{inst}-{d}"))).unwrap();
    }
    std::fs::create_dir_all(scratch.join("not-pilotd")).unwrap();
    sh(&format!(
        "touch -d '-2 hours' {0}/pilotd-{inst}-orphan {0}/not-pilotd",
        scratch.display()
    ));

    let dry = h.pilotd().args(["gc", "--dry-run"]).output().unwrap();
    let dry = String::from_utf8_lossy(&dry.stdout).to_string();
    assert!(
        dry.contains(&format!("would remove worker pilotd-{inst}-exited")),
        "{dry}"
    );
    assert!(
        dry.contains("orphan") && !dry.contains("young") && !dry.contains("not-pilotd"),
        "{dry}"
    );
    assert!(!dry.contains(&foreign), "{dry}");
    assert_eq!(h.workers().len(), 1, "dry run removes nothing");

    let out = h.pilotd().arg("gc").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(h.workers().is_empty());
    assert!(!scratch.join(format!("pilotd-{inst}-orphan")).exists());
    assert!(scratch.join(format!("pilotd-{inst}-young")).exists());
    assert!(scratch.join("not-pilotd").exists());
    let state = docker(&format!("inspect -f '{{{{.State.Status}}}}' {foreign}"));
    assert_eq!(state, "exited", "the foreign container is still there");
    docker(&format!("rm -f {foreign}"));
    let _ = Path::new(".");
}
