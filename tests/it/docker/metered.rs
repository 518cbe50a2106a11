//! A metered link with the real `pilotd run`, the real engine and the local registry, the
//! NetworkManager of tests/it/metered.rs on a real dbus-daemon standing in for the machine's:
//! while the link is metered no image is pulled and no worker starts; once it is not, the
//! image is pulled and a worker starts; metered again, the running worker goes on
//! (`no-downloads`), or is paused within a second and resumed after (`pause`), each set off by
//! NetworkManager's signal alone (the daemon's next regular cycle is an hour away).

use super::docker;
use super::volunteer::{Harness, image, policy};
use crate::harness::sh;
use crate::metered::FakeNetworkManager;
use std::time::{Duration, Instant};

const REPO: &str = "127.0.0.1:5000/pilotd-test/worker";

/// An image of this test's own in the registry (v1 with a label naming the test, so its id is
/// new) and absent from the engine: a worker can only start once pilotd has pulled it.
fn own_image(tag: &str) -> String {
    let out = sh(&format!(
        "printf 'FROM {REPO}:v1\\nLABEL pilotd.test={tag}\\n' | docker build -q -t {REPO}:{tag} - && docker push {REPO}:{tag}"
    ));
    assert!(out.0, "building the test image: {}", out.1);
    // The push's last line: "TAG: digest: sha256:… size: N".
    let digest = out
        .1
        .split_whitespace()
        .skip_while(|w| *w != "digest:")
        .nth(1)
        .expect("the push names its digest")
        .to_string();
    let id = docker(&format!("image inspect -f '{{{{.Id}}}}' {REPO}:{tag}"));
    docker(&format!("rmi -f {}", id.trim()));
    digest
}

fn pulled(digest: &str) -> bool {
    sh(&format!(
        "docker image inspect {REPO}@{digest} >/dev/null 2>&1"
    ))
    .0
}

fn reasons(h: &Harness) -> String {
    h.status_file()
        .map(|v| v["decision"]["reasons"].to_string())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn no_pull_and_no_start_on_a_metered_link_and_both_once_it_is_not() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tag = format!("metered-{}", std::process::id());
    let digest = own_image(&tag);
    assert!(!pulled(&digest), "the test image is still in the engine");
    let mut h = Harness::new(
        "metered",
        &policy("graceful", 1),
        "",
        &format!("{}\n[worker.env]\n", image(&tag)),
    );
    let nm = rt.block_on(FakeNetworkManager::start(&h.path(""), 1));
    h.start_with(&[
        ("DBUS_SYSTEM_BUS_ADDRESS", &nm.address),
        ("RUST_LOG", "debug"),
    ]);
    h.wait_cycles(3);
    assert!(h.workers().is_empty(), "a worker started on a metered link");
    assert!(!pulled(&digest), "pulled on a metered link:\n{}", h.log());
    assert!(!h.log().contains("pulling"), "{}", h.log());
    let said = reasons(&h);
    assert!(
        said.contains("the network is metered (NetworkManager): no downloads"),
        "{said}"
    );
    let status = h.pilotd().arg("status").output().unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("the network is metered (NetworkManager): no downloads"),
        "{status}"
    );

    // Only NetworkManager's signal wakes the daemon from here on.
    h.set_interval("1h");
    h.reload();
    std::thread::sleep(Duration::from_secs(1));
    let sent = Instant::now();
    rt.block_on(nm.set(2));
    let worker = h.wait_for(
        "a worker once the link is free",
        Duration::from_secs(60),
        || h.running().pop(),
    );
    eprintln!("not metered -> pulled and running in {:?}", sent.elapsed());
    assert_eq!(worker.digest, digest);
    assert!(pulled(&digest));

    // Metered again: no-downloads lets the running worker finish its jobs.
    rt.block_on(nm.set(3));
    h.wait_for("the metered decision", Duration::from_secs(5), || {
        reasons(&h).contains("metered").then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(h.running().len(), 1, "the running worker was stopped");

    // pause: the worker is paused for the link, within a second of the signal.
    h.edit(
        "policy.toml",
        &[("[owner]\n", "[owner]\non_metered = \"pause\"\n")],
    );
    h.reload();
    rt.block_on(nm.set(2));
    h.wait_for("running, the link free", Duration::from_secs(10), || {
        (h.workers()[0].state == "running").then_some(())
    });
    let frozen = super::FrozenWatch::start(&worker.id);
    let sent = std::time::SystemTime::now();
    rt.block_on(nm.set(1));
    let at = h.wait_for("the worker paused", Duration::from_secs(5), || {
        frozen.first_frozen()
    });
    let took = at.duration_since(sent).unwrap_or_default();
    eprintln!("metered (pause) -> worker frozen in {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}\n{}", h.log());
    assert!(h.log().contains("the network is metered"), "{}", h.log());
    rt.block_on(nm.set(2));
    h.wait_for("the worker resumed", Duration::from_secs(5), || {
        (h.workers()[0].state == "running").then_some(())
    });
    h.term();
    let _ = sh(&format!("docker rmi -f {REPO}@{digest} >/dev/null 2>&1"));
}
