//! Pausing through the cgroup freezer (`volunteer::act::backend::freezer`), on the real engine: the
//! Docker backend freezes a worker's cgroup itself, reports it paused though the engine says
//! running, thaws it to resume, and before the engine stops it; a worker the engine paused (an
//! older pilotd's) still resumes through the engine.

use super::docker;
use pilotd_volunteer::act::backend::{Workers, docker::DockerBackend};
use pilotd_volunteer::settings::EngineSettings;
use pilotd_volunteer::worker::WorkerState;
use std::time::{Duration, Instant};

struct Burner {
    id: String,
    instance: String,
}

impl Burner {
    /// A container carrying pilotd's labels for a test instance of its own, spinning a CPU.
    fn start(tag: &str) -> Burner {
        let instance = format!("{tag}{}", std::process::id());
        let image = format!(
            "{}:v1",
            std::env::var("PILOTD_TEST_REPO").expect("PILOTD_TEST_REPO (tests/setup-docker.sh)")
        );
        let id = docker(&format!(
            "run -d --label pilotd.managed=true --label pilotd.instance={instance} \
             --cpu-shares 2 -e WORKER_BURN=1 {image}"
        ))
        .trim()
        .to_string();
        Burner { id, instance }
    }

    fn backend(&self) -> DockerBackend {
        DockerBackend::connect(&EngineSettings {
            socket: std::env::var("PILOTD_TEST_ENGINE_SOCKET")
                .unwrap_or("unix:///var/run/docker.sock".into()),
            instance: self.instance.clone(),
            timeout: Duration::from_secs(20),
        })
        .unwrap()
    }

    fn engine_state(&self) -> String {
        docker(&format!("inspect -f '{{{{.State.Status}}}}' {}", self.id))
            .trim()
            .to_string()
    }

    /// CPU nanoseconds the container's tasks used over `over`.
    fn cpu_used(&self, over: Duration) -> u64 {
        let read = || -> u64 {
            let pid = docker(&format!("inspect -f '{{{{.State.Pid}}}}' {}", self.id));
            let cg = std::fs::read_to_string(format!("/proc/{}/cgroup", pid.trim())).unwrap();
            let path = cg
                .lines()
                .find_map(|l| {
                    let mut f = l.splitn(3, ':');
                    let (_, c, p) = (f.next()?, f.next()?, f.next()?);
                    c.split(',').any(|c| c == "cpuacct").then(|| p.to_string())
                })
                .expect("a cpuacct hierarchy (cgroup v1, as on this host)");
            std::fs::read_to_string(format!("/sys/fs/cgroup/cpuacct{path}/cpuacct.usage"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let a = read();
        std::thread::sleep(over);
        read() - a
    }

    fn state_listed(&self, b: &DockerBackend, rt: &tokio::runtime::Runtime) -> WorkerState {
        rt.block_on(b.list_workers())
            .unwrap()
            .into_iter()
            .find(|w| w.id == self.id)
            .expect("the worker is listed")
            .state
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        // Thawed first: a frozen cgroup v1 task does not die of SIGKILL.
        if let Some(f) = super::freezer(&self.id) {
            let _ = f.thaw();
        }
        let _ = crate::harness::sh(&format!("docker rm -f {}", self.id));
    }
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_worker_is_paused_through_its_cgroup_and_resumed_and_stopped_after_a_thaw() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let w = Burner::start("freeze");
    let b = w.backend();
    assert_eq!(w.state_listed(&b, &rt), WorkerState::Running);
    assert!(
        w.cpu_used(Duration::from_millis(300)) > 0,
        "the burner burns"
    );

    rt.block_on(b.pause(&w.id)).unwrap();
    let f = super::freezer(&w.id).expect("the freezer of a container on this host");
    assert!(f.is_frozen().unwrap(), "pause froze the cgroup");
    assert_eq!(
        w.engine_state(),
        "running",
        "the engine was not asked (its pause would be the slow way)"
    );
    assert_eq!(
        w.cpu_used(Duration::from_millis(300)),
        0,
        "frozen tasks use no CPU"
    );
    assert_eq!(w.state_listed(&b, &rt), WorkerState::Paused);

    // A restarted pilotd (a new backend, nothing in memory) sees it paused too: the kernel
    // holds the state, and resuming thaws it.
    let b2 = w.backend();
    assert_eq!(w.state_listed(&b2, &rt), WorkerState::Paused);
    rt.block_on(b2.unpause(&w.id)).unwrap();
    assert!(!f.is_frozen().unwrap());
    assert_eq!(w.state_listed(&b2, &rt), WorkerState::Running);
    assert!(
        w.cpu_used(Duration::from_millis(300)) > 0,
        "computing again"
    );

    // Frozen, then stopped gracefully: thawed first, so the job gets its SIGTERM and drains
    // (the test worker exits 143 on it); frozen, SIGTERM would wait out the grace and the job
    // would end by SIGKILL (137).
    rt.block_on(b2.pause(&w.id)).unwrap();
    assert!(f.is_frozen().unwrap());
    let t = Instant::now();
    rt.block_on(b2.stop(&w.id, Duration::from_secs(30)))
        .unwrap();
    assert_eq!(w.engine_state(), "exited");
    assert_eq!(
        docker(&format!("inspect -f '{{{{.State.ExitCode}}}}' {}", w.id)).trim(),
        "143",
        "the job handled SIGTERM"
    );
    eprintln!("graceful stop of a frozen worker: {:?}", t.elapsed());
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_worker_the_engine_paused_resumes_through_the_engine() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let w = Burner::start("engpause");
    let b = w.backend();
    docker(&format!("pause {}", w.id));
    assert_eq!(w.state_listed(&b, &rt), WorkerState::Paused);
    // Asked to pause it again (a fail-safe after a crash): already paused, left to the engine.
    rt.block_on(b.pause(&w.id)).unwrap();
    rt.block_on(b.unpause(&w.id)).unwrap();
    assert_eq!(w.engine_state(), "running");
    assert!(!super::freezer(&w.id).unwrap().is_frozen().unwrap());
    assert_eq!(w.state_listed(&b, &rt), WorkerState::Running);
}
