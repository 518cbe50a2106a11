//! Where a worker's traffic can go, for real: a pilotd with its defaults puts its workers on
//! its own bridge, whose filter refuses private and host destinations except the site's
//! allowlist. The destinations are test hosts this test makes: a network namespace with a
//! listener on a private address (refused), a second address in it (allowed by
//! `egress_allow`), and a listener on this host (refused through the bridge's gateway). The
//! same private listener is reachable from a container on Docker's default bridge: the test
//! can tell a filter from a listener that is not there. No traffic leaves the machine.

use super::docker;
use crate::harness::{bin, sh, sh_ok};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A network namespace with a veth pair and an HTTP listener on two private addresses.
struct TestHost {
    ns: String,
    host_if: String,
    refused: String,
    allowed: String,
    allowed_net: String,
    listener: Child,
}

impl TestHost {
    fn new() -> TestHost {
        let n = std::process::id() % 200 + 20;
        let ns = format!("pdt-{}", std::process::id());
        let host_if = format!("pdh{n}");
        let ns_if = format!("pdn{n}");
        let refused = format!("10.213.{n}.2");
        let allowed = format!("10.214.{n}.2");
        let _ = sh(&format!(
            "ip netns del {ns} 2>/dev/null; ip link del {host_if} 2>/dev/null"
        ));
        sh_ok(&format!(
            "ip netns add {ns} && ip link add {host_if} type veth peer name {ns_if} && \
             ip link set {ns_if} netns {ns} && \
             ip addr add 10.213.{n}.1/30 dev {host_if} && ip link set {host_if} up && \
             ip netns exec {ns} ip addr add {refused}/30 dev {ns_if} && \
             ip netns exec {ns} ip addr add {allowed}/32 dev {ns_if} && \
             ip netns exec {ns} ip link set {ns_if} up && ip netns exec {ns} ip link set lo up && \
             ip route add {allowed}/32 via {refused}"
        ));
        let listener = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "python3",
                "-m",
                "http.server",
                "8080",
                "--bind",
                "0.0.0.0",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Up when the namespace itself can fetch from it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sh(&format!(
            "ip netns exec {ns} python3 -c 'import urllib.request; urllib.request.urlopen(\"http://{refused}:8080/\", timeout=1)'"
        ))
        .0
        {
            assert!(Instant::now() < deadline, "the test host's listener did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
        TestHost {
            ns,
            host_if,
            refused,
            allowed,
            allowed_net: format!("10.214.{n}.2/32"),
            listener,
        }
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        let _ = self.listener.kill();
        let _ = self.listener.wait();
        let _ = sh(&format!(
            "ip route del {}/32 2>/dev/null; ip link del {} 2>/dev/null; ip netns del {}",
            self.allowed, self.host_if, self.ns
        ));
    }
}

/// A listener on this host, on all addresses (the bridge's gateway among them).
struct HostListener {
    port: u16,
    child: Child,
}

impl HostListener {
    fn new() -> HostListener {
        let port = {
            let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", "0.0.0.0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the host listener did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        HostListener { port, child }
    }
}

impl Drop for HostListener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `container` gets an HTTP answer from `addr` `port` within 3 s (busybox nc: an
/// answer, not just an exit code, since nc exits 0 on its timeout too).
fn reaches(container: &str, addr: &str, port: u16) -> bool {
    sh(&format!(
        "docker exec {container} sh -c 'printf \"GET / HTTP/1.0\\r\\n\\r\\n\" | nc -w 3 {addr} {port}' | grep -q '^HTTP/'"
    ))
    .0
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn workers_reach_neither_private_addresses_nor_the_host_but_what_the_site_allows() {
    let host = TestHost::new();
    let local = HostListener::new();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let instance = format!("egress{}", std::process::id());
    std::fs::write(d.join("utmp"), b"").unwrap();
    std::fs::write(
        d.join("policy.toml"),
        "timezone = \"UTC\"\n[schedule]\nwindows = [ { days = \"daily\", from = \"00:00\", to = \"24:00\" } ]\n\
         [owner]\nmax_owner_cpu = \"100%\"\nfree_for = \"0s\"\non_battery = \"ignore\"\n\
         [share]\ncpus = 1\nmemory = \"256MiB\"\ndisk = \"1GiB\"\nworkers = 1\n[jobs]\nlongest_job = \"1h\"\n",
    )
    .unwrap();
    // Everything about the network is pilotd's default but the one allowed address.
    std::fs::write(
        d.join("pilotd.toml"),
        format!(
            "splay = \"0s\"\npolicy = \"{d}/policy.toml\"\nstate_dir = \"{d}/state\"\ncontrol_socket = \"{d}/control.sock\"\ninterval = \"2s\"\n\
             [host]\nutmp = \"{d}/utmp\"\nscratch = \"{d}/scratch\"\n[docker]\ninstance = \"{instance}\"\n\
             [worker]\nimage = \"127.0.0.1:5000/pilotd-test/worker:v1\"\nallowed_images = [\"127.0.0.1:5000/*\"]\n\
             egress_allow = [\"{allow}\"]\n",
            d = d.display(),
            allow = host.allowed_net
        ),
    )
    .unwrap();
    let config = d.join("pilotd.toml");
    let log = std::fs::File::create(d.join("pilotd.log")).unwrap();
    let mut pilotd = Command::new(bin())
        .arg("-c")
        .arg(&config)
        .arg("run")
        .env("RUST_LOG", "pilotd=info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let cleanup = Cleanup {
        config: config.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let workers = loop {
        let names = docker(&format!(
            "ps --filter label=pilotd.instance={instance} --filter status=running --format '{{{{.Names}}}}'"
        ));
        let names: Vec<String> = names.lines().map(str::to_owned).collect();
        if names.len() == 1 {
            break names;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not start:\n{}",
            std::fs::read_to_string(d.join("pilotd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let w = &workers[0];
    let net = format!("pilotd-{instance}");
    assert_eq!(
        docker(&format!("inspect -f '{{{{.HostConfig.NetworkMode}}}}' {w}")).trim(),
        net
    );
    assert_eq!(
        docker(&format!(
            "network inspect -f '{{{{index .Options \"com.docker.network.bridge.enable_icc\"}}}}' {net}"
        ))
        .trim(),
        "false",
        "no traffic between workers"
    );
    let gateway = docker(&format!(
        "network inspect -f '{{{{(index .IPAM.Config 0).Gateway}}}}' {net}"
    ));

    // The control: from Docker's default bridge, the private listener answers.
    let control = format!("pdt-control-{}", std::process::id());
    sh_ok(&format!(
        "docker run -d --name {control} --network bridge --entrypoint /bin/sleep 127.0.0.1:5000/pilotd-test/worker:v1 60 >/dev/null"
    ));
    let reachable_elsewhere = reaches(&control, &host.refused, 8080);
    let _ = sh(&format!("docker rm -f {control}"));
    assert!(
        reachable_elsewhere,
        "the test host must be reachable without pilotd's filter"
    );

    assert!(
        !reaches(w, &host.refused, 8080),
        "a private address is refused"
    );
    assert!(
        reaches(w, &host.allowed, 8080),
        "egress_allow lets the site's own destination through"
    );
    assert!(
        !reaches(w, gateway.trim(), local.port),
        "the host itself is refused"
    );
    // Names resolve through the host's own resolver even where it is on a private address
    // (this machine's is; so is a home router): the engine's embedded DNS sends the query on
    // from the worker's namespace, through the filter, which opens the DNS port of those
    // resolvers and nothing else of them.
    let resolvers = std::fs::read_to_string("/etc/resolv.conf").unwrap();
    let name = "deb.debian.org";
    assert!(
        sh(&format!("getent hosts {name}")).0,
        "the host itself must resolve {name} (its resolvers: {resolvers})"
    );
    let private = pilotd::volunteer::egress::resolvers::host(std::path::Path::new("/"))
        .into_iter()
        .any(pilotd::config::units::Ipv4Net::refused);
    eprintln!("host resolvers (private: {private}):\n{resolvers}");
    let (resolved, answer) = sh(&format!("docker exec {w} sh -c 'nslookup {name}' 2>&1"));
    assert!(
        resolved && answer.contains("Address"),
        "a worker on pilotd's bridge cannot resolve {name}: {answer}"
    );
    assert!(
        !reaches(w, &host.refused, 53),
        "only the host's resolvers get their DNS port"
    );
    let _ = pilotd.kill();
    let _ = pilotd.wait();
    drop(cleanup);
    // The removal took the network and the filter with it.
    assert!(!sh(&format!("docker network inspect {net}")).0);
}

/// Removes the test instance's workers, network and filter whatever happens.
struct Cleanup {
    config: std::path::PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new(bin())
            .arg("-c")
            .arg(&self.config)
            .args(["failsafe", "--remove", "--grace", "1s"])
            .output();
    }
}
