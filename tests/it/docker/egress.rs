//! Where a worker's traffic can go, for real: a pilotd with its defaults puts its workers on
//! its own bridge, whose filter refuses private and host destinations except the site's
//! allowlist. The destinations are test hosts this test makes: a network namespace with a
//! listener on a private address (refused), a second address in it (allowed by
//! `egress_allow`), and a listener on this host (refused through the bridge's gateway). The
//! same private listener is reachable from a container on Docker's default bridge: the test
//! can tell a filter from a listener that is not there. No traffic leaves the machine.
//!
//! Name servers too: the namespace answers DNS on its refused address and on a third one, the
//! resolver this test's pilotd is given, and this host answers DNS on its end of the
//! namespace's link. pilotd runs in a mount namespace of its own where the test's resolv.conf
//! is bound over /etc/resolv.conf: the file pilotd reads, nothing added for tests.

use super::docker;
use crate::harness::{bin, sh, sh_ok};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A name server that answers every `A` question with its first argument (every other type
/// with no record), on UDP port 53 of each further argument: one socket per address, so each
/// answer comes from the address asked. Prints `ready` once it listens.
const DNS_SERVER: &str = r#"
import select, socket, struct, sys
ip = socket.inet_aton(sys.argv[1])
socks = []
for addr in sys.argv[2:]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 53))
    socks.append(s)
print("ready", flush=True)
while True:
    for s in select.select(socks, [], [])[0]:
        q, peer = s.recvfrom(512)
        i = 12
        while i < len(q) and q[i]:
            i += q[i] + 1
        if len(q) < 12 or i + 5 > len(q):
            continue
        a = q[i + 1:i + 3] == b"\x00\x01"
        r = q[:2] + struct.pack("!HHHHH", 0x8180, 1, int(a), 0, 0) + q[12:i + 5]
        if a:
            r += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + ip
        s.sendto(r, peer)
"#;

/// The name the test resolves, and what each server answers for it: the namespace's, and
/// this host's own.
const NAME: &str = "pilotd-dns-test.example";
const NS_ANSWER: &str = "10.99.0.1";
const HOST_ANSWER: &str = "10.99.0.2";

/// `DNS_SERVER` run by `prefix` (`ip netns exec <ns>`, or nothing), once it listens.
fn dns_server(prefix: &[&str], answer: &str, addrs: &[&str]) -> Child {
    let mut args: Vec<&str> = prefix.to_vec();
    args.extend(["python3", "-c", DNS_SERVER, answer]);
    args.extend(addrs);
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        "ready",
        "the DNS server on {addrs:?} did not start"
    );
    child
}

/// A network namespace with a veth pair, an HTTP listener on its private addresses and a DNS
/// server on two of them.
struct TestHost {
    ns: String,
    host_if: String,
    /// This host's end of the link (an address of the host's own).
    host_side: String,
    refused: String,
    allowed: String,
    allowed_net: String,
    /// The private name server the test's pilotd is told about.
    resolver: String,
    listener: Child,
    dns: Child,
}

impl TestHost {
    fn new() -> TestHost {
        let n = std::process::id() % 200 + 20;
        let ns = format!("pdt-{}", std::process::id());
        let host_if = format!("pdh{n}");
        let ns_if = format!("pdn{n}");
        let host_side = format!("10.213.{n}.1");
        let refused = format!("10.213.{n}.2");
        let allowed = format!("10.214.{n}.2");
        let resolver = format!("10.215.{n}.2");
        let _ = sh(&format!(
            "ip netns del {ns} 2>/dev/null; ip link del {host_if} 2>/dev/null"
        ));
        sh_ok(&format!(
            "ip netns add {ns} && ip link add {host_if} type veth peer name {ns_if} && \
             ip link set {ns_if} netns {ns} && \
             ip addr add {host_side}/30 dev {host_if} && ip link set {host_if} up && \
             ip netns exec {ns} ip addr add {refused}/30 dev {ns_if} && \
             ip netns exec {ns} ip addr add {allowed}/32 dev {ns_if} && \
             ip netns exec {ns} ip addr add {resolver}/32 dev {ns_if} && \
             ip netns exec {ns} ip link set {ns_if} up && ip netns exec {ns} ip link set lo up && \
             ip route add {allowed}/32 via {refused} && ip route add {resolver}/32 via {refused}"
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
        let dns = dns_server(
            &["ip", "netns", "exec", &ns],
            NS_ANSWER,
            &[&refused, &resolver],
        );
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
            host_side,
            refused,
            allowed,
            allowed_net: format!("10.214.{n}.2/32"),
            resolver,
            listener,
            dns,
        }
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        for c in [&mut self.listener, &mut self.dns] {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = sh(&format!(
            "ip route del {}/32 2>/dev/null; ip route del {}/32 2>/dev/null; ip link del {} 2>/dev/null; ip netns del {}",
            self.allowed, self.resolver, self.host_if, self.ns
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

/// Whether `container` gets `answer` for `NAME` from the DNS server at `addr` (busybox
/// nslookup; a refused query fails at once, a dropped one after its 5 s timeout).
fn resolves(container: &str, addr: &str, answer: &str) -> bool {
    let (_, out) = sh(&format!(
        "docker exec {container} busybox nslookup {NAME} {addr} 2>&1"
    ));
    out.lines()
        .any(|l| l.starts_with("Address:") && l.trim_end().ends_with(answer))
}

/// A child process killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
    // The host's resolvers, as pilotd sees them: the namespace's private server, and this
    // host itself (its end of the link), as a hostile DHCP server would name it.
    let resolv_conf = d.join("resolv.conf");
    std::fs::write(
        &resolv_conf,
        format!(
            "nameserver {}\nnameserver {}\n",
            host.host_side, host.resolver
        ),
    )
    .unwrap();
    let host_dns = dns_server(&[], HOST_ANSWER, &[&host.host_side]);
    let host_dns = Reaped(host_dns);
    let log = std::fs::File::create(d.join("pilotd.log")).unwrap();
    // A mount namespace of its own (private: nothing propagates back to the host) where the
    // test's file is /etc/resolv.conf; `exec`, so the child is pilotd itself.
    let mut pilotd = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$1\" /etc/resolv.conf && exec \"$2\" -c \"$3\" run")
        .arg("sh")
        .arg(&resolv_conf)
        .arg(bin())
        .arg(&config)
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
    // And every DNS server this test asks answers there.
    let control_resolves = [
        resolves(&control, &host.resolver, NS_ANSWER),
        resolves(&control, &host.refused, NS_ANSWER),
        resolves(&control, &host.host_side, HOST_ANSWER),
    ];
    let _ = sh(&format!("docker rm -f {control}"));
    assert!(
        reachable_elsewhere,
        "the test host must be reachable without pilotd's filter"
    );
    assert_eq!(
        control_resolves, [true; 3],
        "every DNS server must answer without pilotd's filter"
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
    // Names: the engine's embedded DNS sends a worker's queries on from the worker's own
    // network namespace, so a query the worker sends to a server itself takes the same way
    // through the filter. Each server the worker is refused answered the control above.
    let chain = pilotd_volunteer::network::names(&instance).2;
    let opened = |addr: &str| -> Vec<String> {
        sh_ok("iptables -w 10 -S")
            .lines()
            .filter(|l| {
                l.starts_with(&format!("-A {chain}-"))
                    && l.contains(&format!("-d {addr}/32"))
                    && l.contains("--dport 53")
            })
            .map(str::to_owned)
            .collect()
    };
    // 1. A worker resolves a name through the host's private resolver.
    assert!(
        resolves(w, &host.resolver, NS_ANSWER),
        "a worker resolves through the host's private resolver"
    );
    // 2. A DNS server on another private address is refused.
    assert!(
        !resolves(w, &host.refused, NS_ANSWER),
        "only the host's resolvers get their DNS port"
    );
    // 3. A resolver that is this host itself is never opened: the worker does not reach the
    // host's DNS listener, while the forward opening above works beside it.
    assert!(
        !resolves(w, &host.host_side, HOST_ANSWER),
        "a resolver on the host's own address gives workers the host's DNS port"
    );
    // The rules say the same: the resolver's port for forwarded traffic only, nothing for
    // the host's address.
    let fwd = format!("-A {chain}-F");
    let rules = opened(&host.resolver);
    assert!(
        rules.len() == 2 && rules.iter().all(|r| r.starts_with(&fwd)),
        "{rules:?}"
    );
    assert_eq!(opened(&host.host_side), Vec::<String>::new());
    // 4. Without the opening the name does not resolve: the resolver gone from resolv.conf
    // (a laptop that moved), the next check rebuilds the filter without it.
    std::fs::write(&resolv_conf, format!("nameserver {}\n", host.host_side)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !opened(&host.resolver).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the filter still opens the resolver pilotd no longer sees:\n{}",
            std::fs::read_to_string(d.join("pilotd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        !resolves(w, &host.resolver, NS_ANSWER),
        "the name still resolves without the opening: the test proves nothing"
    );
    drop(host_dns);
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
