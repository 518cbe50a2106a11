//! The data a machine used, counted on the real engine: a worker downloads from an HTTP server
//! this test runs in a network namespace of its own (an address the site's `egress_allow`
//! lets through pilotd's filter), and the bytes its interfaces received reach the contribution
//! ledger, read back through `pilotd status --format json`; a pull of an image with a layer
//! the engine does not have is counted by what it downloaded; a daemon killed in the middle
//! of a download and started again loses no more than one interval of it.

use super::docker;
use super::volunteer::{Harness, policy};
use crate::harness::{sh, sh_ok};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = "127.0.0.1:5000/pilotd-test/worker";
const MIB: u64 = 1 << 20;

/// An HTTP server that answers `GET /N` with N bytes, sent at most `RATE` bytes a second
/// (argv[2]), so a download lasts long enough to be cut or capped. Prints `ready`.
const SERVER: &str = r#"
import http.server, sys, time
rate = int(sys.argv[2])
block = b"\x5a" * 65536
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n = int(self.path.strip("/"))
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        start, sent = time.monotonic(), 0
        while sent < n:
            chunk = block[: min(len(block), n - sent)]
            try:
                self.wfile.write(chunk)
            except OSError:
                return
            sent += len(chunk)
            ahead = sent / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer.allow_reuse_address = True
s = http.server.ThreadingHTTPServer((sys.argv[1], 8080), H)
print("ready", flush=True)
s.serve_forever()
"#;

/// A network namespace with one address, reached from this host through a veth pair, where
/// `SERVER` listens.
pub(super) struct Origin {
    ns: String,
    host_if: String,
    /// The server's address (`egress_allow` names it).
    pub(super) addr: String,
    server: Child,
}

impl Origin {
    pub(super) fn new(tag: u32, rate: u64) -> Origin {
        let n = (std::process::id() + tag) % 200 + 20;
        let ns = format!("pdd-{}-{tag}", std::process::id());
        let host_if = format!("pdd{n}");
        let ns_if = format!("pde{n}");
        let (host_side, addr) = (format!("10.216.{n}.1"), format!("10.216.{n}.2"));
        let _ = sh(&format!(
            "ip netns del {ns} 2>/dev/null; ip link del {host_if} 2>/dev/null"
        ));
        sh_ok(&format!(
            "ip netns add {ns} && ip link add {host_if} type veth peer name {ns_if} && \
             ip link set {ns_if} netns {ns} && \
             ip addr add {host_side}/30 dev {host_if} && ip link set {host_if} up && \
             ip netns exec {ns} ip addr add {addr}/30 dev {ns_if} && \
             ip netns exec {ns} ip link set {ns_if} up && ip netns exec {ns} ip link set lo up && \
             ip netns exec {ns} ip route add default via {host_side}"
        ));
        let mut server = Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-c", SERVER, &addr])
            .arg(rate.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(server.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready", "the test's HTTP server did not start");
        Origin {
            ns,
            host_if,
            addr,
            server,
        }
    }

    /// The `[worker]` keys that let workers reach it.
    pub(super) fn allow(&self) -> String {
        format!("egress_allow = [\"{}/32\"]\n", self.addr)
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = sh(&format!(
            "ip link del {} 2>/dev/null; ip netns del {}",
            self.host_if, self.ns
        ));
    }
}

/// `worker` fetches `bytes` from `origin` in the background; the returned child ends with
/// the download.
pub(super) fn download(worker: &str, origin: &Origin, bytes: u64) -> Child {
    Command::new("docker")
        .args(["exec", worker, "wget", "-q", "-O", "/dev/null"])
        .arg(format!("http://{}:8080/{bytes}", origin.addr))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// `pilotd status --format json`'s `network` object.
pub(super) fn network(h: &Harness) -> serde_json::Value {
    let out = h
        .pilotd()
        .args(["status", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    v["network"].clone()
}

fn bytes(v: &serde_json::Value, period: &str, key: &str) -> u64 {
    v[period][key].as_u64().unwrap_or(0)
}

/// An image of this test's own in the registry, absent from the engine, whose one new layer
/// is `mib` MiB of random bytes (gzip cannot shrink them): pulling it downloads that much.
/// Returns the pushed layer's compressed size as the registry's manifest has it.
fn image_with_layer(tag: &str, mib: u64) -> u64 {
    let out = sh(&format!(
        "printf 'FROM {REPO}:v1\\nRUN head -c {} /dev/urandom > /pull-blob\\nLABEL pilotd.test={tag}\\n' | docker build -q -t {REPO}:{tag} - && docker push {REPO}:{tag} >/dev/null",
        mib * MIB
    ));
    assert!(out.0, "building the test image: {}", out.1);
    let manifest = sh_ok(&format!(
        "curl -sf -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' http://127.0.0.1:5000/v2/pilotd-test/worker/manifests/{tag}"
    ));
    let m: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    let layers = m["layers"].as_array().unwrap();
    let id = docker(&format!("image inspect -f '{{{{.Id}}}}' {REPO}:{tag}"));
    docker(&format!("rmi -f {}", id.trim()));
    layers.last().unwrap()["size"].as_u64().unwrap()
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_workers_download_and_the_image_pull_are_counted() {
    let origin = Origin::new(0, 40 * MIB);
    let tag = format!("data-{}", std::process::id());
    let layer = image_with_layer(&tag, 3);
    let mut h = Harness::new(
        "data",
        &policy("graceful", 1),
        "",
        &format!("image = \"{REPO}:{tag}\"\n{}[worker.env]\n", origin.allow()),
    );
    h.start();
    let w = h.wait_for("a running worker", Duration::from_secs(60), || {
        h.running().pop()
    });
    // The pull is counted when it ends, before the worker starts.
    let pulled = bytes(&network(&h), "all_time", "pulled");
    eprintln!("pulled: {pulled} B counted; the new layer is {layer} B in the registry");
    assert!(
        pulled >= layer && pulled <= layer + layer / 20,
        "pull counted {pulled} B for a {layer} B layer\n{}",
        h.log()
    );
    h.wait_cycles(2);
    let before = bytes(&network(&h), "all_time", "received");
    let size = 50 * MIB;
    let status = download(&w.id, &origin, size).wait().unwrap();
    assert!(status.success(), "the worker's download failed");
    h.wait_cycles(2);
    let n = network(&h);
    let got = bytes(&n, "all_time", "received") - before;
    eprintln!(
        "a {size} B download counted as {got} B received ({:+.2}%); {n}",
        (got as f64 / size as f64 - 1.0) * 100.0
    );
    assert!(
        got >= size && got <= size + size / 20,
        "{got} B counted for a {size} B download"
    );
    assert!(bytes(&n, "all_time", "sent") > 0, "{n}");
    // Today, this week and this month hold it too (one test, one day, bar midnight).
    for period in ["today", "this_week", "this_month"] {
        assert!(bytes(&n, period, "received") >= got, "{period}: {n}");
    }
    let text = h.pilotd().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("MiB received, "), "{text}");
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_restart_in_mid_download_loses_at_most_one_interval() {
    // 8 MiB/s: 50 MiB take about 6 s; pilotd's interval is 2 s, so one interval is 16 MiB.
    let rate = 8 * MIB;
    let origin = Origin::new(1, rate);
    let mut h = Harness::new(
        "datarestart",
        &policy("graceful", 1),
        "",
        &format!("image = \"{REPO}:v1\"\n{}[worker.env]\n", origin.allow()),
    );
    h.start();
    let w = h.wait_for("a running worker", Duration::from_secs(60), || {
        h.running().pop()
    });
    h.wait_cycles(2);
    let before = bytes(&network(&h), "all_time", "received");
    let size = 50 * MIB;
    let mut fetch = download(&w.id, &origin, size);
    std::thread::sleep(Duration::from_secs(3));
    let killed = Instant::now();
    h.kill9();
    h.start();
    let status = fetch.wait().unwrap();
    assert!(status.success(), "the worker's download failed");
    eprintln!("the download ended {:?} after the kill", killed.elapsed());
    h.wait_cycles(3);
    assert_eq!(
        h.running().pop().map(|r| r.id),
        Some(w.id.clone()),
        "the restarted daemon adopted the worker"
    );
    let got = bytes(&network(&h), "all_time", "received") - before;
    let interval = 2 * rate;
    eprintln!(
        "after a SIGKILL in mid-download: {got} B counted of {size} B ({:.1}% lost)",
        (1.0 - got as f64 / size as f64) * 100.0
    );
    assert!(
        got + interval >= size && got <= size + size / 20,
        "{got} B counted for a {size} B download cut by a restart\n{}",
        h.log()
    );
    h.term();
}

/// A time zone of this test's own, compiled by zic into `dir` (pilotd finds it through
/// `TZDIR`): its offset puts local midnight `secs` seconds from now, so the day's data cap
/// ends while the test waits.
fn zone_with_midnight_in(dir: &std::path::Path, secs: u64) -> std::time::SystemTime {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let midnight = now + secs;
    // local = UTC + offset, and local midnight falls at `midnight`.
    let mut offset = (86_400 - midnight % 86_400) as i64 % 86_400;
    if offset > 43_200 {
        offset -= 86_400;
    }
    let (sign, o) = (if offset < 0 { "-" } else { "" }, offset.unsigned_abs());
    let rule = format!(
        "Zone Pilotd/Soon {sign}{}:{:02}:{:02} - PSOON\n",
        o / 3600,
        o / 60 % 60,
        o % 60
    );
    std::fs::write(dir.join("soon.zi"), rule).unwrap();
    sh_ok(&format!(
        "zic -d {} {}",
        dir.display(),
        dir.join("soon.zi").display()
    ));
    std::time::UNIX_EPOCH + Duration::from_secs(midnight)
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn at_the_days_data_cap_the_worker_stops_and_none_starts_until_the_next_day() {
    let rate = 4 * MIB;
    let origin = Origin::new(2, rate);
    let mut h = Harness::new(
        "datacap",
        &policy("graceful", 1),
        "",
        &format!("image = \"{REPO}:v1\"\n{}[worker.env]\n", origin.allow()),
    );
    let tzdir = h.path("zoneinfo");
    std::fs::create_dir_all(&tzdir).unwrap();
    let tzdir_env = tzdir.display().to_string();
    h.start_with(&[("TZDIR", &tzdir_env)]);
    let w = h.wait_for("a running worker", Duration::from_secs(60), || {
        h.running().pop()
    });
    // The cap, in a zone whose day ends 45 s from now.
    let midnight = zone_with_midnight_in(&tzdir, 45);
    h.edit(
        "policy.toml",
        &[
            ("timezone = \"UTC\"", "timezone = \"Pilotd/Soon\""),
            ("[share]\n", "[share]\ndata_per_day = \"20MiB\"\n"),
        ],
    );
    h.reload();
    let status = |h: &Harness| -> serde_json::Value {
        let out = h
            .pilotd()
            .env("TZDIR", &tzdir_env)
            .args(["status", "--format", "json"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    };
    let before = bytes(&status(&h)["network"], "today", "received");
    let started = Instant::now();
    let mut fetch = download(&w.id, &origin, 50 * MIB);
    // The cap is crossed once 20 MiB of the day are used; one cycle (2 s) later the
    // decision stops the worker (its SIGTERM ends it at once).
    let crossing = Duration::from_secs_f64((20 * MIB - before) as f64 / rate as f64);
    let gone = h.wait_for(
        "the worker stopped at the cap",
        Duration::from_secs(30),
        || {
            h.running()
                .iter()
                .all(|r| r.id != w.id)
                .then(|| started.elapsed())
        },
    );
    let _ = fetch.wait();
    let v = status(&h);
    eprintln!(
        "cap crossed about {crossing:?} after the download began, the worker gone at {gone:?}; \
         today: {}",
        v["network"]["today"]
    );
    // What the worker received past the cap until it stopped, by the engine's own counters:
    // no more than one interval (2 s) of the download. (The wall clock tells less: the
    // exec's start and the stop's own time, loaded machine, are in it.)
    let today = bytes(&v["network"], "today", "received") + bytes(&v["network"], "today", "sent");
    let over = today.saturating_sub(20 * MIB);
    eprintln!(
        "{over} B past the cap before the worker stopped (one interval: {} B)",
        2 * rate
    );
    assert!(
        today >= 20 * MIB && over <= 2 * rate,
        "{today} B used for a 20 MiB cap\n{}",
        h.log()
    );
    let reasons = v["decision"]["reasons"].to_string();
    assert!(
        reasons.contains("the day's data cap is reached: 2") && reasons.contains("of 20MiB"),
        "{reasons}"
    );
    let text = h
        .pilotd()
        .env("TZDIR", &tzdir_env)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("the day's data cap is reached"), "{text}");
    // `pilotd plan` judges the cap on the daemon's ledger as the daemon does.
    let plan = h
        .pilotd()
        .env("TZDIR", &tzdir_env)
        .arg("plan")
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(plan.contains("the day's data cap is reached"), "{plan}");
    // Nothing starts again before the day ends...
    while std::time::SystemTime::now() + Duration::from_secs(2) < midnight {
        assert!(
            h.running().is_empty(),
            "a worker started under the day's cap\n{}",
            h.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // ...and one does once it has.
    h.wait_for("a worker on the next day", Duration::from_secs(30), || {
        h.running().pop()
    });
    assert!(std::time::SystemTime::now() >= midnight);
    h.term();
}
