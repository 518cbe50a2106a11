//! Volunteer mode end to end: `pilotd run` with its defaults (workers as uid 65532, every
//! capability dropped) pulls the condor worker image from the local registry, and its workers
//! join the real pool and run real jobs; an owner's login evicts or pauses them, and the jobs
//! survive.

use crate::harness::bin;
use pilotd_test_support::pool::{self, Pool, Tag, wait_for};
use pilotd_test_support::utmp;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

// Generous: a 2-core CI machine runs these side by side, each worker a whole condor.
const LONG: Duration = Duration::from_secs(300);

/// One donated machine: a pilotd with its own instance, state dir, utmp file and policy,
/// whose workers join the test pool and accept only this test's jobs.
struct Machine {
    dir: tempfile::TempDir,
    instance: String,
    tag: Tag,
    child: Option<Child>,
}

impl Machine {
    /// `on_return`: how a login treats running workers; `idle`: the pilot's idle timeout.
    fn new(pool: &Pool, name: &str, on_return: &str, idle: &str) -> Machine {
        Machine::with(pool, name, on_return, idle, "", "")
    }

    /// As `new`, with lines added to `[worker]` and to `[worker.env]`.
    fn with(
        pool: &Pool,
        name: &str,
        on_return: &str,
        idle: &str,
        worker: &str,
        env: &str,
    ) -> Machine {
        let tag = Tag::new(name);
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let d = dir.path();
        let instance = format!("pool-{}", tag.0);
        std::fs::write(d.join("utmp"), b"").unwrap();
        std::fs::copy(pool.worker_token(), d.join("pool.token")).unwrap();
        // A root daemon refuses a token others can read (`config::ownership`).
        std::fs::set_permissions(
            d.join("pool.token"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        std::fs::write(
            d.join("policy.toml"),
            format!(
                "timezone = \"UTC\"\n[schedule]\nwindows = [{{ days = \"daily\", from = \"00:00\", to = \"24:00\" }}]\n\
                 [owner]\nsessions = \"any\"\nmax_owner_cpu = \"100%\"\nfree_for = \"0s\"\non_battery = \"ignore\"\n\
                 on_return = \"{on_return}\"\ngrace = \"60s\"\n\
                 [share]\ncpus = 1\nmemory = \"1GiB\"\ndisk = \"2GiB\"\nworkers = 1\n[jobs]\nlongest_job = \"1h\"\n"
            ),
        )
        .unwrap();
        // Everything else is pilotd's default: no user, no capabilities, no mounts given.
        std::fs::write(
            d.join("pilotd.toml"),
            format!(
                r#"splay = "0s"
policy = "{d}/policy.toml"
state_dir = "{d}/state"
control_socket = "{d}/control.sock"
interval = "60s"
[host]
utmp = "{d}/utmp"
scratch = "{d}/scratch"
[docker]
instance = "{instance}"
[worker]
image = "{image}"
allowed_images = ["127.0.0.1:5000/*"]
idle_timeout = "{idle}"
token_file = "{d}/pool.token"
network = "{network}"
backoff_base = "2s"
backoff_max = "4s"
{worker}
[worker.env]
PILOT_CONFIG_URLS = "{url}"
PILOT_TOKEN_FILE = "{{token_path}}"
PILOT_CPUS = "{{cpus}}"
PILOT_MEMORY_MIB = "{{memory_mib}}"
PILOT_DISK_KIB = "{{disk_kib}}"
PILOT_IDLE_TIMEOUT = "{{idle_seconds}}"
PILOT_ACCEPT_UNTIL = "{{accept_until}}"
PILOT_DIE_AT = "{{die_at}}"
PILOT_FREE_HOURS = "{{free_hours}}"
PILOT_START_EXTRA = '{start}'
PILOTD_TEST_TAG = "{tag}"
{env}
"#,
                d = d.display(),
                image = pool.worker_image,
                network = pool.network,
                url = pool.config_url(),
                start = tag.start_extra(),
                tag = tag.0,
            ),
        )
        .unwrap();
        let mut m = Machine {
            dir,
            instance,
            tag,
            child: None,
        };
        m.start();
        m
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("pilotd.log"))
            .unwrap();
        self.child = Some(
            Command::new(bin())
                .arg("-c")
                .arg(self.path("pilotd.toml"))
                .arg("run")
                .env("RUST_LOG", "pilotd=info")
                .env_remove("NOTIFY_SOCKET")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
    }

    /// `pilotd status` as its owner reads it: (text, `--format json`).
    fn owner_status(&self) -> (String, serde_json::Value) {
        let run = |json: bool| {
            let mut c = Command::new(bin());
            c.arg("-c").arg(self.path("pilotd.toml")).arg("status");
            if json {
                c.args(["--format", "json"]);
            }
            let out = c.output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let json = serde_json::from_str(&run(true)).unwrap_or(serde_json::Value::Null);
        (run(false), json)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("pilotd.log")).unwrap_or_default()
    }

    fn status(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.path("state/status.json")).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }

    /// This instance's containers: (name, state), oldest first.
    fn workers(&self) -> Vec<(String, String)> {
        let out = pool::docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=pilotd.instance={}", self.instance),
            "--format",
            "{{.CreatedAt}}\t{{.Names}}\t{{.State}}",
        ]);
        let mut rows: Vec<(String, String, String)> = out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                // The state as the kernel has it: a worker pilotd froze is "paused" though
                // the engine says running.
                (f.len() == 3).then(|| {
                    (
                        f[0].into(),
                        f[1].into(),
                        crate::docker::kernel_state(f[1], f[2]),
                    )
                })
            })
            .collect();
        rows.sort();
        rows.into_iter().map(|(_, n, s)| (n, s)).collect()
    }

    fn wait_worker(&self, what: &str, f: impl Fn(&[(String, String)]) -> bool) {
        wait_for(what, LONG, || f(&self.workers()).then_some(()));
    }

    /// The running worker's name (its startd is named after the container's hostname).
    fn running_worker(&self) -> String {
        wait_for("a running worker", LONG, || {
            self.workers()
                .into_iter()
                .find(|(_, s)| s == "running")
                .map(|(n, _)| n)
        })
    }

    fn hostname(name: &str) -> String {
        pool::docker(&["inspect", "-f", "{{.Config.Hostname}}", name])
            .trim()
            .to_owned()
    }

    fn login(&self) {
        let pid = std::process::id() as i32;
        let secs = chrono::Utc::now().timestamp() as i32;
        let utmp = utmp::file(&[utmp::Record::user(pid, "alice", "pts/42", secs)]);
        std::fs::write(self.path("utmp"), utmp).unwrap();
    }

    fn logout(&self) {
        std::fs::write(self.path("utmp"), b"").unwrap();
    }

    fn diagnose(&self) -> String {
        format!(
            "workers: {:?}\n--- pilotd log ---\n{}",
            self.workers(),
            pool::tail(&self.log(), 60)
        )
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker ps -aq --filter label=pilotd.instance={} | xargs -r docker rm -f >/dev/null 2>&1",
                self.instance
            ))
            .status();
    }
}

/// A job script that runs `secs` seconds and says where it ran.
fn job_body(pool: &Pool, user: &str, name: &str, secs: u32) -> String {
    burning_job_body(pool, user, name, 0, secs)
}

/// A job script that keeps a CPU busy for `burn` seconds, then sleeps `secs` seconds and says
/// where it ran: CPU time the pilot's report and pilotd's counters must find. One process
/// spins (no fork per turn): condor measures a job's CPU by sampling its processes, and
/// misses processes that live between two samples.
fn burning_job_body(pool: &Pool, user: &str, name: &str, burn: u32, secs: u32) -> String {
    // `timeout 0` would mean no limit at all.
    let spin = if burn > 0 {
        format!("timeout {burn} sh -c \"while :; do :; done\"\\n")
    } else {
        String::new()
    };
    pool.on_ap(
        user,
        &format!(
            "printf '#!/bin/sh\\n{spin}sleep {secs}\\necho \"ran as $(id -u) on $(hostname)\"\\n' > {name}.sh && chmod +x {name}.sh"
        ),
    );
    format!(
        "executable = {name}.sh\ntransfer_executable = True\noutput = {name}.out\nerror = {name}.err\n"
    )
}

fn status_of(pool: &Pool, job: &str) -> Option<u32> {
    pool.job_status(job)
}

#[test]
#[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
fn a_real_job_runs_on_a_worker_pilotd_started_with_its_defaults_then_a_fresh_worker_follows() {
    let pool = Pool::from_env();
    // The owner's page too ([page] is the file's last table, after [worker.env]).
    let port = crate::harness::free_port();
    // The pilot's idle timeout outlasts pilotd's interval (60 s): after the job, pilotd reads
    // the worker's cgroup at least once more, so what it counted holds all of the burn.
    let m = Machine::with(
        &pool,
        "vjob",
        "graceful",
        "90s",
        "",
        &format!("[page]\nport = {port}"),
    );
    let first = m.running_worker();
    // The CPU the worker's cgroup used, read by the test itself every 500 ms until the
    // container is gone (its cgroup goes with it): the highest reading.
    let cgroup_cpu = {
        let id = pool::docker(&["inspect", "-f", "{{.Id}}", &first])
            .trim()
            .to_owned();
        // CPU-seconds from cgroup v1's cpuacct (ns) or v2's cpu.stat (usage_usec), as the
        // engine's cgroup driver placed the container.
        let read = move || -> Option<f64> {
            let v1 = format!("/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage");
            if let Ok(ns) = std::fs::read_to_string(&v1) {
                return ns.trim().parse::<f64>().ok().map(|ns| ns / 1e9);
            }
            [
                format!("/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat"),
                format!("/sys/fs/cgroup/docker/{id}/cpu.stat"),
            ]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())?
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))?
            .trim()
            .parse::<f64>()
            .ok()
            .map(|us| us / 1e6)
        };
        assert!(
            read().is_some(),
            "the worker's cgroup is not where the test looks for it"
        );
        let last = std::sync::Arc::new(std::sync::Mutex::new(0.0f64));
        let keep = last.clone();
        std::thread::spawn(move || {
            let end = std::time::Instant::now() + 3 * LONG;
            while let Some(s) = read() {
                let mut l = keep.lock().unwrap();
                *l = l.max(s);
                drop(l);
                if std::time::Instant::now() > end {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        last
    };
    let host = Machine::hostname(&first);
    wait_for(
        &format!("{first}'s slot in the pool\n{}", m.diagnose()),
        LONG,
        || (!pool.slot_attrs(&host, &["Name"]).is_empty()).then_some(()),
    );
    // The worker runs unprivileged, as pilotd's default says.
    assert_eq!(
        pool::docker(&[
            "inspect",
            "-f",
            "{{.Config.User}} {{.HostConfig.CapDrop}}",
            &first
        ])
        .trim(),
        "65532:65532 [ALL]"
    );
    // The job keeps a CPU busy for 20 s: CPU time the pilot's report and pilotd must find
    // (condor measures a job's CPU by sampling its processes, so a burst of a few seconds can
    // read as none: docs/site.md, "The job report").
    let body = burning_job_body(&pool, "alice", "vjob", 20, 1);
    let job = pool.submit("alice", &m.tag, "vjob", &body);
    pool.wait_job_status(&job, 4, LONG);
    let out = pool.on_ap("alice", "cat vjob.out");
    assert_eq!(
        out.trim(),
        format!("ran as 65532 on {host}"),
        "{}",
        m.diagnose()
    );
    // The pilot exits 0 at its idle timeout; pilotd records it and starts a fresh worker.
    let outcome = wait_for(&format!("the outcome of {first}"), LONG, || {
        m.status()["outcomes"].as_array().and_then(|o| {
            o.iter()
                .find(|r| r["name"] == first.as_str())
                .map(|r| r["outcome"]["kind"].as_str().unwrap_or("").to_owned())
        })
    });
    assert_eq!(outcome, "ran_jobs", "{}", m.diagnose());
    assert_eq!(m.status()["backoff"]["failures"], 0, "{}", m.diagnose());
    // What the machine gave, as the owner sees it: the pilot reported its job (condor's own
    // record of it) and pilotd counted it with the CPU the worker's cgroup used.
    let (text, json) = m.owner_status();
    let jobs = &json["contribution"]["all_time"]["jobs"];
    assert_eq!(jobs["completed"], 1, "{json:#}\n{}", m.diagnose());
    assert_eq!(jobs["started"], 1, "{json:#}");
    assert_eq!(jobs["vacated"], 0, "{json:#}");
    assert_eq!(jobs["workers_reported"], 1, "{json:#}");
    let job_cpu = jobs["cpu_seconds"].as_f64().unwrap();
    // condor's samples saw part of the 20 s burn, never more than the job's whole life.
    assert!(
        (5.0..=25.0).contains(&job_cpu),
        "job CPU {job_cpu}: {json:#}"
    );
    assert!(jobs["job_seconds"].as_u64().unwrap() >= 20, "{json:#}");
    assert!(text.contains("jobs: 1 finished, 0 vacated"), "{text}");
    // The CPU-hours given: what pilotd read of the worker's cgroup, against what the test
    // read of it (its last reading before the end). The ledger on disk was written when the
    // first worker's end was recorded, before any reading of the fresh one (the next save is
    // 15 min later); pilotd's last reading of the first was at most one interval before its
    // end, the job long over, condor idle.
    let given = json["contribution"]["all_time"]["cpu_seconds"]
        .as_f64()
        .unwrap();
    let used = *cgroup_cpu.lock().unwrap();
    println!("CPU given: pilotd counted {given:.2} CPU-s, the worker's cgroup used {used:.2}");
    // The job's CPU was the cgroup's too (condor samples it: at most a little less).
    assert!(
        used >= job_cpu,
        "the cgroup used {used} CPU-s, the job alone {job_cpu}"
    );
    assert!(
        given <= used + 0.5 && given >= used - f64::max(3.0, used * 0.1),
        "pilotd counted {given} CPU-s; the worker's cgroup used {used}: {json:#}"
    );
    assert!(
        job_cpu <= given + 0.5,
        "the job's {job_cpu} CPU-s inside the {given} given"
    );
    // The owner's page says the same: in through `pilotd open`'s address, as the owner's
    // browser gets in (root's curl, as root ran `open`; it follows to the page with the
    // session cookie).
    let out = Command::new(bin())
        .arg("-c")
        .arg(m.path("pilotd.toml"))
        .arg("open")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let url = said
        .split_whitespace()
        .find(|w| w.starts_with(&format!("http://127.0.0.1:{port}/")))
        .unwrap_or_else(|| panic!("no page address in {said:?}: {}", m.diagnose()))
        .to_owned();
    let jar = m.path("cookies");
    let page = Command::new("curl")
        .args(["-fsSL", "-c"])
        .arg(&jar)
        .arg("-b")
        .arg(&jar)
        .arg(&url)
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.contains("jobs: 1 finished, 0 vacated"),
        "the page does not show the job: {page}"
    );
    m.wait_worker("a fresh worker", |w| {
        w.iter().any(|(n, s)| n != &first && s == "running")
    });
}

#[test]
#[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
fn an_owners_login_evicts_gracefully_and_the_job_goes_back_to_the_queue_then_runs_again() {
    let pool = Pool::from_env();
    let m = Machine::new(&pool, "vevict", "graceful", "10m");
    let first = m.running_worker();
    // The job burns a CPU for its first 60 s: work the eviction loses.
    let body = burning_job_body(&pool, "bob", "vevict", 60, 600);
    let job = pool.submit("bob", &m.tag, "vevict", &body);
    // Really executing (JobStatus turns 2 when the shadow starts, before the job does).
    pool.wait_executed("bob", "vevict", 1, LONG);
    // Long enough for condor's sampling of the job's processes to have seen the burn.
    std::thread::sleep(Duration::from_secs(25));

    m.login();
    // The worker goes within the grace (60 s); the job is idle again, not held or removed.
    m.wait_worker("the worker gone after the login", |w| {
        !w.iter().any(|(n, s)| n == &first && s == "running")
    });
    pool.wait_job_status(&job, 1, LONG);
    assert_eq!(pool.job_events("bob", "vevict", "004 ("), 1, "evicted once");
    assert!(
        m.workers().iter().all(|(_, s)| s != "running"),
        "no worker while the owner is here: {}",
        m.diagnose()
    );

    // The evicted worker's pilot reported the job it gave back, and the work lost with it.
    let jobs = wait_for("the evicted worker's job report", LONG, || {
        let (_, json) = m.owner_status();
        let jobs = json["contribution"]["all_time"]["jobs"].clone();
        (jobs["workers_reported"] == 1).then_some(jobs)
    });
    assert_eq!(jobs["vacated"], 1, "{jobs:#}\n{}", m.diagnose());
    assert_eq!(jobs["completed"], 0, "{jobs:#}");
    let lost = jobs["vacated_cpu_seconds"].as_f64().unwrap();
    assert!(lost >= 5.0, "work lost {lost} CPU-s: {jobs:#}");
    assert_eq!(jobs["cpu_seconds"].as_f64().unwrap(), lost, "{jobs:#}");

    m.logout();
    // The same job runs again on the next worker.
    pool.wait_executed("bob", "vevict", 2, LONG);
    pool.on_ap("bob", &format!("condor_rm {job}"));
}

#[test]
#[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
fn a_paused_worker_keeps_its_job_which_completes_after_the_owner_leaves() {
    let pool = Pool::from_env();
    let m = Machine::new(&pool, "vpause", "pause", "10m");
    let worker = m.running_worker();
    let body = job_body(&pool, "alice", "vpause", 40);
    let job = pool.submit("alice", &m.tag, "vpause", &body);
    pool.wait_executed("alice", "vpause", 1, LONG);

    m.login();
    m.wait_worker("the worker paused", |w| {
        w.iter().any(|(n, s)| n == &worker && s == "paused")
    });
    // Frozen for longer than the job has left to run, and still not done.
    std::thread::sleep(Duration::from_secs(45));
    assert_eq!(status_of(&pool, &job), Some(2), "still running, frozen");
    assert_eq!(pool.job_events("alice", "vpause", "005 ("), 0);

    m.logout();
    pool.wait_job_status(&job, 4, LONG);
    assert_eq!(
        pool.times_executed("alice", "vpause"),
        1,
        "the job was never restarted\n{}",
        m.diagnose()
    );
    let out = pool.on_ap("alice", "cat vpause.out");
    assert!(out.starts_with("ran as 65532"), "{out}");
    assert!(Path::new(&m.path("state")).exists());
}

/// A host directory made a shared mount point, as a host's `/cvmfs` under autofs is, so that
/// a mount made below it later propagates into workers (`rslave`); unmounted on drop.
struct CvmfsDir {
    dir: tempfile::TempDir,
    repos: Vec<PathBuf>,
}

impl CvmfsDir {
    fn new() -> CvmfsDir {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let d = dir.path().display();
        crate::harness::sh_ok(&format!("mount --bind {d} {d} && mount --make-rshared {d}"));
        CvmfsDir {
            dir,
            repos: Vec::new(),
        }
    }

    /// Mounts a tmpfs holding a repository's `.cvmfspublished` (revision `rev`) at
    /// `<dir>/<repo>`, as autofs mounts a repository on first access.
    fn mount(&mut self, repo: &str, rev: u64) {
        let at = self.dir.path().join(repo);
        std::fs::create_dir(&at).unwrap();
        crate::harness::sh_ok(&format!(
            "mount -t tmpfs -o size=1m {repo} {}",
            at.display()
        ));
        std::fs::write(
            at.join(".cvmfspublished"),
            format!("C0123abcd\nN{repo}\nS{rev}\nT1764700000\n--\n0123abcd\n"),
        )
        .unwrap();
        self.repos.push(at);
    }
}

/// A container this test started, removed however the test ends.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = crate::harness::sh(&format!("docker rm -f {}", self.0));
    }
}

impl Drop for CvmfsDir {
    fn drop(&mut self) {
        for r in self.repos.iter().rev() {
            let _ = crate::harness::sh(&format!("umount -l {}", r.display()));
        }
        let _ = crate::harness::sh(&format!("umount -l {}", self.dir.path().display()));
    }
}

#[test]
#[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
fn the_pool_sees_pilotds_attributes_and_a_cvmfs_repository_mounted_after_the_start() {
    let pool = Pool::from_env();
    let mut cvmfs = CvmfsDir::new();
    let m = Machine::with(
        &pool,
        "vfleet",
        "pause",
        "10m",
        &format!("cvmfs = \"{}\"", cvmfs.dir.path().display()),
        "PILOT_AD_FILE = \"{ad_file}\"\nPILOT_AD_PERIOD = \"2\"",
    );
    let worker = m.running_worker();
    let host = Machine::hostname(&worker);
    let version = env!("CARGO_PKG_VERSION");
    let attrs = [
        "PILOTD_VERSION",
        "PILOTD_INSTANCE",
        "PILOTD_COMPUTING",
        "PILOTD_SNOOZED",
        "PILOTD_ON_RETURN",
        "PILOTD_EVICTION",
        "PILOTD_WINDOW_END",
    ];
    // condor_status -af prints strings bare and undefined as "undefined" (always open).
    let want = format!("{version} {} true false pause none undefined", m.instance);
    let seen = wait_for(
        &format!("pilotd's attributes in {host}'s slot ad\n{}", m.diagnose()),
        LONG,
        || {
            pool.slot_attrs(&host, &attrs)
                .into_iter()
                .find(|l| l == &want)
        },
    );
    assert_eq!(seen, want);

    // The control: the same directory bound into a container of the same image with a
    // private mount, started before the repository appears, never sees it. So the check
    // below fails if pilotd's bind were private, as the engine's default is.
    let image = crate::harness::sh_ok(&format!(
        "docker inspect -f '{{{{.Config.Image}}}}' {worker}"
    ));
    let control = format!("pilotd-test-cvmfs-private-{}", std::process::id());
    crate::harness::sh_ok(&format!(
        "docker run -d --rm --name {control} --entrypoint sleep \
         --mount type=bind,src={},dst=/cvmfs,readonly,bind-propagation=private {} 600",
        cvmfs.dir.path().display(),
        image.trim()
    ));
    let _control = RemoveOnDrop(control.clone());
    // The control must be able to look at all: it sees the bound directory itself.
    let (ok, listed) = crate::harness::sh(&format!("docker exec {control} ls -d /cvmfs"));
    assert!(
        ok,
        "the private-bind control cannot look at /cvmfs: {listed}"
    );

    // A repository appears below the host's directory after the worker started: the worker
    // sees it through its rslave mount, and the pilot's next probe advertises it.
    cvmfs.mount("test-repo.example.org", 4242);
    let (ok, published) = crate::harness::sh(&format!(
        "docker exec {worker} cat /cvmfs/test-repo.example.org/.cvmfspublished"
    ));
    assert!(ok && published.contains("S4242"), "{published}");
    let (ok, seen) = crate::harness::sh(&format!(
        "docker exec {control} cat /cvmfs/test-repo.example.org/.cvmfspublished"
    ));
    assert!(
        !ok && !seen.contains("S4242"),
        "a private bind saw a repository mounted after its start, so this test cannot tell \
         rslave from private: {seen}"
    );
    let cvmfs_attrs = [
        "HAS_CVMFS_test_repo_example_org",
        "CVMFS_test_repo_example_org_REVISION",
    ];
    wait_for(
        &format!("the repository in {host}'s slot ad\n{}", m.diagnose()),
        LONG,
        || {
            pool.slot_attrs(&host, &cvmfs_attrs)
                .into_iter()
                .find(|l| l == "true 4242")
        },
    );
}

/// A process that keeps one CPU busy until dropped: the owner's CPU, as a cron job of the
/// owner's (or one a worker's job set off) would be.
struct Spinner(Child);

impl Spinner {
    fn new() -> Spinner {
        Spinner(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The owner's CPU goes above the policy's threshold while a worker runs: that blocks new
/// workers but evicts nothing before `busy_for`, so the pilot keeps publishing pilotd's
/// attributes. The pool sees that the machine does not take more work and that the owner's
/// side is why (`owner`), never which of the owner's causes it is.
#[test]
#[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
fn the_pool_learns_no_owner_cause_while_the_owner_keeps_the_cpu_busy() {
    let pool = Pool::from_env();
    let m = Machine::with(
        &pool,
        "vcause",
        "pause",
        "10m",
        "",
        "PILOT_AD_FILE = \"{ad_file}\"\nPILOT_AD_PERIOD = \"2\"",
    );
    let worker = m.running_worker();
    let host = Machine::hostname(&worker);
    let attrs = ["PILOTD_COMPUTING", "PILOTD_EVICTION", "PILOTD_CAUSES"];
    wait_for(
        &format!("a computing machine in {host}'s slot ad\n{}", m.diagnose()),
        LONG,
        || {
            pool.slot_attrs(&host, &attrs)
                .into_iter()
                .find(|l| l == "true none free")
        },
    );

    // The owner's CPU above the threshold, for longer than a cycle, and eviction an hour off.
    let _owner = Spinner::new();
    let policy = std::fs::read_to_string(m.path("policy.toml"))
        .unwrap()
        .replace(
            "max_owner_cpu = \"100%\"",
            "max_owner_cpu = \"1%\"\nbusy_for = \"1h\"",
        );
    std::fs::write(m.path("policy.toml"), policy).unwrap();
    let pid = m.child.as_ref().unwrap().id();
    crate::harness::sh_ok(&format!("kill -HUP {pid}"));
    wait_for(
        &format!("pilotd's owner_cpu_high decision\n{}", m.diagnose()),
        LONG,
        || m.log().contains("causes=owner_cpu_high").then_some(()),
    );
    let seen = wait_for(
        &format!("the block in {host}'s slot ad\n{}", m.diagnose()),
        LONG,
        || {
            pool.slot_attrs(&host, &attrs)
                .into_iter()
                .find(|l| l.starts_with("false"))
        },
    );
    assert_eq!(seen, "false none owner", "{}", m.diagnose());
    let ad = std::fs::read_to_string(m.path("state/ad/slot.ad")).unwrap();
    assert!(!ad.contains("owner_cpu"), "{ad}");
    assert!(
        m.workers().iter().any(|(_, s)| s == "running"),
        "the block evicts nothing: {:?}",
        m.workers()
    );
}
