//! Freshness in one request, measured in the local registry's own access log
//! (tests/setup-docker.sh starts Debian's docker-registry with its access log on): an
//! unchanged tag costs pilotd one HEAD of the manifest, and no blob (config or layer) at all.

use pilotd_volunteer::act::backend::{Images, docker::DockerBackend};
use pilotd_volunteer::observe::registry::USER_AGENT;
use pilotd_volunteer::settings::EngineSettings;
use std::path::PathBuf;
use std::time::Duration;

const REGISTRY: &str = "127.0.0.1:5000";
const NAME: &str = "pilotd-test/worker";

/// Puts v1's manifest under a tag of this test's own, straight through the registry's API
/// (no engine involved), so daemons of tests running beside it never ask for the same path.
fn own_tag() -> String {
    let tag = format!("fresh-{}", std::process::id());
    let accept = "application/vnd.docker.distribution.manifest.v2+json";
    crate::harness::sh_ok(&format!(
        "curl -fsS -H 'Accept: {accept}' http://{REGISTRY}/v2/{NAME}/manifests/v1 -o /tmp/{tag}.json && \
         curl -fsS -X PUT -H 'Content-Type: {accept}' --data-binary @/tmp/{tag}.json http://{REGISTRY}/v2/{NAME}/manifests/{tag} && rm -f /tmp/{tag}.json"
    ));
    tag
}

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
/// `agent`, as "METHOD PATH", once the registry has logged every request answered before this
/// call: the registry writes its access line just after answering, so this asks it for a
/// marker of its own and waits until the marker's line, and a line containing `expect`, are
/// in the log.
fn requests_since(log: &PathBuf, from: u64, agent: &str, expect: &str) -> Vec<String> {
    let marker = format!(
        "marker-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    crate::harness::sh(&format!(
        "curl -s -o /dev/null -A pilotd-test-marker http://{REGISTRY}/v2/{NAME}/manifests/{marker}"
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let bytes = std::fs::read(log).unwrap();
        let text = String::from_utf8_lossy(&bytes[from as usize..]).to_string();
        if text.contains(&marker) && text.contains(expect) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the registry did not log {marker} and {expect:?} within 10 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    text.lines()
        .filter(|l| l.contains(agent) && !l.contains("level=") && !l.contains(&marker))
        .filter_map(|l| {
            let req = l.split('"').nth(1)?;
            let mut f = req.split_whitespace();
            Some(format!("{} {}", f.next()?, f.next()?))
        })
        .collect()
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn an_unchanged_tag_costs_one_head_and_no_blob() {
    let log = access_log();
    let tag = own_tag();
    let reference = format!("{REGISTRY}/{NAME}:{tag}");
    let engine = EngineSettings {
        socket: std::env::var("PILOTD_TEST_ENGINE_SOCKET")
            .unwrap_or("unix:///var/run/docker.sock".into()),
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
        "curl -fsS --unix-socket {} http://engine/distribution/{reference}/json | sed 's/.*\"digest\":\"\\([^\"]*\\)\".*/\\1/'",
        engine.socket.trim_start_matches("unix://")
    ));
    // Podman 4.3 has no /distribution route: the registry's own answer is the reference then.
    let engine_digest = if engine_digest.starts_with("sha256:") {
        engine_digest
    } else {
        crate::harness::sh_ok(&format!(
            "curl -fsSI -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' http://{REGISTRY}/v2/{NAME}/manifests/{tag} | tr -d '\\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: //p'"
        ))
    };
    // The engine's route under concurrency: what names this test's tag (the manifest GET by
    // digest and the config blob it adds cannot be told apart from other tests' pulls).
    let via_engine: Vec<String> = requests_since(&log, before, "", &tag)
        .into_iter()
        .filter(|r| r.contains(&tag))
        .collect();
    eprintln!("through the engine, naming the tag: {via_engine:?}");

    for round in 0..2 {
        let before = std::fs::metadata(&log).unwrap().len();
        let digest = rt.block_on(b.resolve_image(&reference)).unwrap();
        assert_eq!(
            digest, engine_digest,
            "the digest docker pull would resolve"
        );
        // pilotd's requests: this tag's, plus any that are not another tag's HEAD (daemons
        // of tests running beside this one HEAD their own tags, and nothing else).
        let head = format!("HEAD /v2/{NAME}/manifests/{tag}");
        let ours = requests_since(&log, before, USER_AGENT.split(' ').next().unwrap(), &head);
        let seen: Vec<&String> = ours
            .iter()
            .filter(|r| r.ends_with(&format!("/manifests/{tag}")) || !r.starts_with("HEAD "))
            .collect();
        eprintln!("pilotd, check {round}: {seen:?}");
        assert_eq!(seen, vec![&head], "one manifest request, nothing else");
        // Nobody else (the engine) asked about the tag.
        let all = requests_since(&log, before, "", &head);
        let about_tag: Vec<&String> = all.iter().filter(|r| r.contains(&tag)).collect();
        assert_eq!(about_tag.len(), 1, "{about_tag:?}");
    }

    // An unknown tag is the registry's answer, not a reason to ask again through the engine.
    let before = std::fs::metadata(&log).unwrap().len();
    let e = rt
        .block_on(b.resolve_image("127.0.0.1:5000/pilotd-test/worker:no-such-tag"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("HTTP 404"), "{e}");
    let asked: Vec<String> = requests_since(&log, before, "", "no-such-tag")
        .into_iter()
        .filter(|r| r.contains("no-such-tag"))
        .collect();
    assert_eq!(
        asked.len(),
        1,
        "the engine was not asked as well: {asked:?}"
    );
}
