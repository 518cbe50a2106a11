//! Driving the real HTCondor test pool of `tests/pool/up.sh` from Rust tests: run workers
//! the way pilotd runs them, submit jobs as ordinary users, read the queue and the collector.
//!
//! Shared by the pilot's tests and pilotd's, so both speak to the pool the same way. Tests
//! share one pool and run in parallel: each test takes a [`Tag`], its workers accept only jobs
//! carrying that tag (`PILOT_START_EXTRA`) and its jobs carry it (`+PilotTest`), so no test's
//! job can land on another test's worker.
//!
//! The pool's address and images come from the environment `tests/pool/up.sh` prints
//! (tests/run.sh exports it). Tests that need the pool are `#[ignore]`d with a reason, so a
//! plain `cargo test` lists them as ignored instead of passing them silently; tests/run.sh
//! runs them with `--include-ignored`, and a missing pool is then a failure, not a skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The uid:gid pilotd runs workers as by default, and the worker image's `pilot` user.
pub const WORKER_UID: u32 = 65532;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test needs the real HTCondor pool; run tests/run.sh, or \
             `eval \"$(tests/pool/up.sh)\"` after tests/setup-docker.sh and export the result"
        )
    })
}

/// Runs a command, returns its output; panics with everything it printed when it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn docker(args: &[&str]) -> String {
    run(Command::new("docker").args(args))
}

fn docker_output(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs")
}

/// Polls `f` until it returns `Some` or `deadline` passes (then panics naming `what`).
pub fn wait_for<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A name unique to one test in one run: container names, job tags, config file names.
#[derive(Debug, Clone)]
pub struct Tag(pub String);

impl Tag {
    pub fn new(test: &str) -> Tag {
        Tag(format!("{test}-{}", std::process::id()))
    }
    /// The START clause that admits only this test's jobs.
    pub fn start_extra(&self) -> String {
        format!("TARGET.PilotTest =?= \"{}\"", self.0)
    }
    /// The requirement that sends a job only to this test's workers (they advertise the tag
    /// from PILOTD_TEST_TAG, see tests/pool/worker-pool.conf).
    pub fn requirement(&self) -> String {
        format!("TARGET.PilotTestTag =?= \"{}\"", self.0)
    }
}

/// The pool as tests/pool/up.sh left it.
#[derive(Debug, Clone)]
pub struct Pool {
    pub dir: PathBuf,
    pub network: String,
    pub worker_image: String,
    pub condor_image: String,
}

impl Pool {
    pub fn from_env() -> Pool {
        Pool {
            dir: PathBuf::from(env("PILOTD_POOL_DIR")),
            network: env("PILOTD_POOL_NETWORK"),
            worker_image: env("PILOTD_POOL_WORKER_IMAGE"),
            condor_image: env("PILOTD_POOL_CONDOR_IMAGE"),
        }
    }

    /// The pool's token for workers (identity pilot@pilotd-test, may only advertise).
    pub fn worker_token(&self) -> PathBuf {
        self.dir.join("tokens/worker.token")
    }

    /// A well-formed token signed by another key: the collector refuses it.
    pub fn wrong_token(&self) -> PathBuf {
        self.dir.join("tokens/wrong.token")
    }

    /// The test CA the config server's certificate is signed by.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("tls/ca.pem")
    }

    /// Publishes a condor configuration file on the pool's config server; returns its https
    /// URL (the http one is [`Pool::http_url`]).
    pub fn publish(&self, name: &str, text: &str) -> String {
        let path = self.dir.join("www").join(name);
        std::fs::write(&path, text).unwrap();
        format!("https://pilotd-pool-web:8443/{name}")
    }

    /// The pool's standard worker configuration (CONDOR_HOST, security), over https.
    pub fn config_url(&self) -> String {
        "https://pilotd-pool-web:8443/pool.conf".into()
    }

    pub fn http_url(&self, name: &str) -> String {
        format!("http://pilotd-pool-web:8080/{name}")
    }

    /// The text of the pool's standard worker configuration, to extend in a test.
    pub fn standard_config(&self) -> String {
        std::fs::read_to_string(self.dir.join("www/pool.conf")).unwrap()
    }

    /// Runs a command on the access point as `user`, in their home.
    pub fn on_ap(&self, user: &str, script: &str) -> String {
        let home = if user == "root" {
            "/root".to_owned()
        } else {
            format!("/home/{user}")
        };
        run(Command::new("docker").args([
            "exec",
            "-u",
            user,
            "-w",
            &home,
            "pilotd-pool-ap",
            "sh",
            "-c",
            script,
        ]))
    }

    /// Submits one job as `user` (an ordinary user, not a queue superuser) with this test's
    /// tag; `body` holds the submit commands before `queue`. Returns "cluster.proc".
    pub fn submit(&self, user: &str, tag: &Tag, name: &str, body: &str) -> String {
        let submit = format!(
            "{body}\n+PilotTest = \"{}\"\nrequirements = {}\nrequest_cpus = 1\nrequest_memory = 64\nrequest_disk = 1024\n\
             should_transfer_files = YES\nlog = {name}.log\nqueue\n",
            tag.0,
            tag.requirement()
        );
        // A file left by an earlier run of the same test must not be read as this job's.
        let script = format!(
            "rm -f {name}.log {name}.out {name}.err && cat > {name}.sub <<'EOF'\n{submit}EOF\ncondor_submit -terse {name}.sub"
        );
        let out = self.on_ap(user, &script);
        // -terse prints "cluster.proc - cluster.proc".
        let id = out.split_whitespace().next().unwrap_or_default().to_owned();
        assert!(id.contains('.'), "unexpected condor_submit output: {out}");
        id
    }

    /// A job's JobStatus (1 idle, 2 running, 4 completed, 5 held, ...), from the queue or the
    /// history; `None` when the schedd does not know it.
    pub fn job_status(&self, id: &str) -> Option<u32> {
        let q = self.on_ap(
            "root",
            &format!("condor_q -allusers {id} -af JobStatus; condor_history {id} -af JobStatus"),
        );
        q.split_whitespace().next().and_then(|s| s.parse().ok())
    }

    /// One attribute of a job (queue, then history), as condor prints it with -af.
    pub fn job_attr(&self, id: &str, attr: &str) -> String {
        self.on_ap(
            "root",
            &format!("condor_q -allusers {id} -af {attr}; condor_history {id} -af {attr}"),
        )
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
    }

    /// How many times `user`'s job `name` (submitted by [`Pool::submit`]) began executing, from
    /// its user log (`001 (...) Job executing on host`), which the shadow writes at once
    /// (queue attributes such as NumJobStarts are updated lazily).
    pub fn times_executed(&self, user: &str, name: &str) -> usize {
        self.job_events(user, name, "001 (")
    }

    /// How many events of one kind (e.g. `"004 ("` evicted, `"005 ("` terminated) the job's
    /// user log holds.
    pub fn job_events(&self, user: &str, name: &str, event: &str) -> usize {
        self.on_ap(user, &format!("cat {name}.log 2>/dev/null || true"))
            .lines()
            .filter(|l| l.starts_with(event))
            .count()
    }

    pub fn wait_executed(&self, user: &str, name: &str, times: usize, deadline: Duration) {
        wait_for(
            &format!("{user}'s job {name} to have begun executing {times} time(s)"),
            deadline,
            || (self.times_executed(user, name) >= times).then_some(()),
        );
    }

    /// Waits until one attribute of a job (as -af prints it) is `want`.
    pub fn wait_job_attr(&self, id: &str, attr: &str, want: &str, deadline: Duration) {
        wait_for(&format!("job {id}'s {attr} to be {want}"), deadline, || {
            (self.job_attr(id, attr) == want).then_some(())
        });
    }

    pub fn wait_job_status(&self, id: &str, want: u32, deadline: Duration) {
        wait_for(
            &format!("job {id} to reach JobStatus {want}"),
            deadline,
            || (self.job_status(id) == Some(want)).then_some(()),
        );
    }

    /// The slot ads of a worker whose startd is named after `host`, as `attr` values.
    pub fn slot_attrs(&self, host: &str, attrs: &[&str]) -> Vec<String> {
        let out = self.on_ap(
            "carol",
            &format!(
                "condor_status -constraint 'Machine == \"{host}\" || splitSlotName(Name)[1] == \"{host}\"' -af {}",
                attrs.join(" ")
            ),
        );
        out.lines().map(str::to_owned).collect()
    }
}

/// How one worker container is run: as pilotd runs it (unprivileged uid, every capability
/// dropped, no-new-privileges, a read-only root, its own scratch dir owned by that uid, the
/// token read-only), on the pool's network.
pub struct WorkerRun<'a> {
    pool: &'a Pool,
    name: String,
    env: Vec<(String, String)>,
    token: PathBuf,
    user: String,
    scratch_owner: Option<u32>,
}

/// A running (or finished) worker container; removed with its scratch dir on drop.
pub struct Worker {
    pub name: String,
    pub scratch: tempfile::TempDir,
    _token_dir: tempfile::TempDir,
}

impl<'a> WorkerRun<'a> {
    pub fn new(pool: &'a Pool, tag: &Tag) -> WorkerRun<'a> {
        let env = vec![
            ("PILOT_CONFIG_URLS".into(), pool.config_url()),
            ("PILOT_TOKEN_FILE".into(), "/etc/pilotd/token".into()),
            ("PILOT_CPUS".into(), "1".into()),
            ("PILOT_MEMORY_MIB".into(), "512".into()),
            ("PILOT_START_EXTRA".into(), tag.start_extra()),
            ("PILOT_IDLE_TIMEOUT".into(), "300".into()),
            ("PILOTD_TEST_TAG".into(), tag.0.clone()),
        ];
        WorkerRun {
            pool,
            name: format!("pilotd-pool-w-{}", tag.0),
            env,
            token: pool.worker_token(),
            user: format!("{WORKER_UID}:{WORKER_UID}"),
            scratch_owner: Some(WORKER_UID),
        }
    }

    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn without_env(mut self, key: &str) -> Self {
        self.env.retain(|(k, _)| k != key);
        self
    }

    pub fn token(mut self, token: &Path) -> Self {
        self.token = token.to_path_buf();
        self
    }

    /// Run as this user ("uid:gid"); the scratch dir stays root-owned unless `owner` is set.
    pub fn user(mut self, user: &str, owner: Option<u32>) -> Self {
        self.user = user.into();
        self.scratch_owner = owner;
        self
    }

    pub fn start(self) -> Worker {
        let scratch = tempfile::Builder::new()
            .prefix("pilotd-pool-scratch")
            .tempdir_in("/var/tmp")
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        if let Some(uid) = self.scratch_owner {
            std::os::unix::fs::chown(scratch.path(), Some(uid), Some(uid)).unwrap();
            std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o700))
                .unwrap();
        } else {
            std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        // The token as pilotd hands it over: a private copy the worker's uid can read.
        let token_dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let token = token_dir.path().join("token");
        std::fs::copy(&self.token, &token).unwrap();
        let owner = self
            .user
            .split(':')
            .next()
            .and_then(|u| u.parse().ok())
            .unwrap_or(0);
        std::os::unix::fs::chown(&token, Some(owner), Some(owner)).unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o400)).unwrap();

        let _ = docker_output(&["rm", "-f", &self.name]);
        let mut args: Vec<String> = [
            "run",
            "-d",
            "--name",
            &self.name,
            "--hostname",
            &self.name,
            "--network",
            &self.pool.network,
            "--user",
            &self.user,
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            // A read-only root with tmpfs /tmp and /var/tmp, as pilotd's default
            // (`[worker] read_only_rootfs`) starts workers.
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/var/tmp",
            "--label",
            "pilotd.test-pool-worker=true",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push("-v".into());
        args.push(format!("{}:/pilot", scratch.path().display()));
        args.push("-v".into());
        args.push(format!("{}:/etc/pilotd/token:ro", token.display()));
        for (k, v) in &self.env {
            args.push("-e".into());
            args.push(format!("{k}={v}"));
        }
        args.push(self.pool.worker_image.clone());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&refs);
        Worker {
            name: self.name,
            scratch,
            _token_dir: token_dir,
        }
    }
}

impl Worker {
    /// Waits for the container to exit and returns the pilot's exit code.
    pub fn wait_exit(&self, deadline: Duration) -> i64 {
        wait_for(&format!("worker {} to exit", self.name), deadline, || {
            let state = docker(&[
                "inspect",
                "-f",
                "{{.State.Status}} {{.State.ExitCode}}",
                &self.name,
            ]);
            let mut it = state.split_whitespace();
            match (it.next(), it.next()) {
                (Some("exited"), Some(code)) => code.parse().ok(),
                _ => None,
            }
        })
    }

    pub fn running(&self) -> bool {
        docker(&["inspect", "-f", "{{.State.Running}}", &self.name]).trim() == "true"
    }

    /// The pilot's log (the container's stderr).
    pub fn logs(&self) -> String {
        let out = docker_output(&["logs", &self.name]);
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// One of condor's own logs, kept on the scratch mount.
    pub fn condor_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.scratch.path().join("condor/log").join(name))
            .unwrap_or_default()
    }

    /// Everything to look at when an assertion about this worker fails.
    pub fn diagnose(&self) -> String {
        format!(
            "--- pilot ---\n{}\n--- MasterLog ---\n{}\n--- StartLog (tail) ---\n{}",
            self.logs(),
            self.condor_log("MasterLog"),
            tail(&self.condor_log("StartLog"), 40)
        )
    }

    /// Sends a signal to the container's init (tini), which forwards it to the pilot.
    pub fn signal(&self, signal: &str) {
        docker(&["kill", "-s", signal, &self.name]);
    }

    /// Waits until this worker's slot is in the collector.
    pub fn wait_advertised(&self, pool: &Pool, deadline: Duration) {
        wait_for(
            &format!("{}'s slot in the collector", self.name),
            deadline,
            || (!pool.slot_attrs(&self.name, &["Name"]).is_empty()).then_some(()),
        );
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = docker_output(&["rm", "-f", &self.name]);
        // Condor's files belong to the worker's uid; the test runs as root and removes them
        // with the TempDir.
    }
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
