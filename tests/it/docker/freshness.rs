//! Freshness in one request, measured in the local registry's own access log
//! (tests/setup-docker.sh starts Debian's docker-registry with its access log on): an
//! unchanged tag costs pilotd one HEAD of the manifest, and no blob (config or layer) at all.

use super::enabled;
use pilotd::volunteer::backend::{Backend, docker::DockerBackend};
use pilotd::volunteer::registry::USER_AGENT;
use pilotd::volunteer::settings::EngineSettings;
use std::path::PathBuf;
use std::time::Duration;

const REFERENCE: &str = "127.0.0.1:5000/pilotd-test/worker:v1";

fn access_log() -> PathBuf {
    let work = std::env::var("PILOTD_TEST_WORK").unwrap_or("/tmp/pilotd-docker-tests".into());
    let p = PathBuf::from(work).join("registry.log");
    assert!(
        p.exists(),
        "{} is missing: the registry must be the one tests/setup-docker.sh starts",
        p.display()
    );
    p
}

/// The access-log lines written since `from` (bytes) by clients whose user agent contains
/// `agent`, as "METHOD PATH".
fn requests_since(log: &PathBuf, from: u64, agent: &str) -> Vec<String> {
    // The registry writes its access line just after answering.
    std::thread::sleep(Duration::from_millis(300));
    let text = std::fs::read(log).unwrap();
    String::from_utf8_lossy(&text[from as usize..])
        .lines()
        .filter(|l| l.contains(agent) && !l.contains("level="))
        .filter_map(|l| {
            let req = l.split('"').nth(1)?;
            let mut f = req.split_whitespace();
            Some(format!("{} {}", f.next()?, f.next()?))
        })
        .collect()
}

#[test]
fn an_unchanged_tag_costs_one_head_and_no_blob() {
    if !enabled() {
        return;
    }
    let log = access_log();
    let engine = EngineSettings {
        socket: "unix:///var/run/docker.sock".into(),
        instance: format!("fresh-{}", std::process::id()),
        timeout: Duration::from_secs(10),
    };
    let b = DockerBackend::connect(&engine).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // What the engine's own route costs, for comparison (and the digest it names).
    let before = std::fs::metadata(&log).unwrap().len();
    let engine_digest = crate::harness::sh_ok(&format!(
        "curl -fsS --unix-socket /var/run/docker.sock http://engine/distribution/{REFERENCE}/json | sed 's/.*\"digest\":\"\\([^\"]*\\)\".*/\\1/'"
    ));
    let via_engine = requests_since(&log, before, "UpstreamClient(curl");
    eprintln!(
        "through the engine: {} requests: {via_engine:?}",
        via_engine.len()
    );

    for round in 0..2 {
        let before = std::fs::metadata(&log).unwrap().len();
        let digest = rt.block_on(b.resolve_image(REFERENCE)).unwrap();
        assert_eq!(
            digest, engine_digest,
            "the digest docker pull would resolve"
        );
        let seen = requests_since(&log, before, USER_AGENT.split(' ').next().unwrap());
        eprintln!("pilotd, check {round}: {seen:?}");
        assert_eq!(
            seen,
            vec!["HEAD /v2/pilotd-test/worker/manifests/v1".to_string()],
            "one manifest request, nothing else"
        );
        let engine_side = requests_since(&log, before, "docker/");
        assert!(
            engine_side.is_empty(),
            "the engine asked nothing: {engine_side:?}"
        );
    }

    // An unknown tag is the registry's answer, not a reason to ask again through the engine.
    let before = std::fs::metadata(&log).unwrap().len();
    let e = rt
        .block_on(b.resolve_image("127.0.0.1:5000/pilotd-test/worker:no-such-tag"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("HTTP 404"), "{e}");
    assert!(requests_since(&log, before, "docker/").is_empty());
}
