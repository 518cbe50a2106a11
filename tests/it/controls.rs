//! The owner's controls against another local user. `nobody` (uid 65534, no groups, made
//! with util-linux's `setpriv`) floods the control socket and the status page with idle
//! connections, squats the instance lock; a snooze that cannot be read; keys made while
//! /dev/urandom gives nothing. Each against the real `pilotd run` (no engine: the Docker
//! socket points nowhere, as in `service`), as root, with systemd's default descriptor limit.

use crate::harness::{bin, free_port};
use crate::service::{Setup, lines, scrape, signal, wait_exit, wait_line};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Holds `N` connections to a unix socket or a TCP port on 127.0.0.1 for `SECONDS`, opening
/// a new one whenever the server closes one; prints "flooding" once it made `N` or tried for
/// 2 s (past a server's cap only its backlog takes more), and at the end how many it made and
/// held at most.
const FLOOD: &str = r#"
import resource, socket, sys, time
kind, target, n, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
def connect():
    if kind == "unix":
        s, addr = socket.socket(socket.AF_UNIX), target
    else:
        s, addr = socket.socket(socket.AF_INET), ("127.0.0.1", int(target))
    s.settimeout(0.05)
    try:
        s.connect(addr)
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s
held, made, peak, told = [], 0, 0, False
end = time.time() + secs
while time.time() < end:
    alive = []
    for s in held:
        try:
            if s.recv(1, socket.MSG_PEEK) == b"":
                s.close()
                continue
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            continue
        alive.append(s)
    held, fails = alive, 0
    while len(held) < n and fails < 3 and time.time() < end:
        s = connect()
        if s is None:
            fails += 1
        else:
            held.append(s)
            made += 1
    peak = max(peak, len(held))
    if not told and (made >= n or time.time() > end - secs + 2):
        print("flooding", flush=True)
        told = True
    time.sleep(0.05)
print(f"made {made} held at most {peak}", flush=True)
"#;

/// Binds the abstract socket the instance claim used to be, and tries to open and lock the
/// lock file that replaced it; says what it got, then holds on.
const SQUAT: &str = r#"
import fcntl, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(b"\0" + sys.argv[1].encode())
s.listen(1)
print("abstract socket bound", flush=True)
for mode in ("r", "a"):
    try:
        f = open(sys.argv[2], mode)
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print(f"lock file: locked ({mode})", flush=True)
        break
    except OSError as e:
        print(f"lock file: refused ({mode}): {e.strerror}", flush=True)
print("squatting", flush=True)
time.sleep(120)
"#;

/// `python3 -c script args` as `nobody`: uid and gid 65534, no supplementary groups.
fn as_nobody(script: &str, args: &[&str]) -> Child {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        // Debian's python: a root-only pyenv shim on PATH would not run as nobody.
        .args(["/usr/bin/python3", "-c", script])
        .args(args)
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("setpriv and python3 run")
}

/// Reads the child's stdout until a line contains `needle`; every line read, in order.
fn until_line(
    child: &mut Child,
    needle: &str,
) -> (Vec<String>, BufReader<std::process::ChildStdout>) {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap() == 0 {
            panic!("no line with {needle:?}; saw {seen:?}");
        }
        let done = l.contains(needle);
        seen.push(l.trim_end().to_string());
        if done {
            return (seen, out);
        }
    }
}

/// `pilotd run` with systemd's default descriptor limit (1024), the one `nobody` exhausted.
fn run_with_default_nofile(s: &Setup) -> Child {
    let mut c = s.cmd();
    c.arg("run").stderr(Stdio::piped()).stdout(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 1024, 1024)
                .map_err(std::io::Error::from)
        });
    }
    c.spawn().unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A series' value in a scrape (0 when absent).
fn series(body: &str, name: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// (cycles, cycles whose decision counted the snooze) so far.
fn snoozed_cycles(port: u16) -> (u64, u64) {
    let body = scrape(port);
    (
        series(&body, "pilotd_cycle_duration_seconds_count"),
        series(&body, "pilotd_decisions_total{cause=\"snoozed\"}"),
    )
}

/// How long `pilotd ARGS` took, and its output; it must succeed.
fn timed(s: &Setup, args: &[&str]) -> (Duration, String) {
    let t = Instant::now();
    let o = s.cmd().args(args).output().unwrap();
    let took = t.elapsed();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "pilotd {args:?}: {text}");
    (took, text)
}

/// How long the status page took to answer a GET (None: no answer within 10 s).
fn page_answer(port: u16) -> Option<Duration> {
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
        .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    Some(t.elapsed())
}

/// About 1,000 idle connections by `nobody` to each of the control socket and the status
/// page, held for 12 s against a daemon limited to 1,024 descriptors: `pilotd snooze` and
/// `status` answer within 2 s all along, the daemon holds no more descriptors than the caps
/// allow, and every cycle's decision counts the owner's snooze (it was once read as "no
/// snooze" when the daemon ran out of descriptors, and workers could start).
#[test]
fn nobodys_idle_connections_starve_neither_the_owners_controls_nor_the_snooze() {
    let (metrics, page) = (free_port(), free_port());
    let s = Setup::new(&format!(
        "[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n[page]\nport = {page}\n"
    ));
    // nobody reaches the socket as any local user reaches /run/pilotd (0755).
    std::fs::set_permissions(s.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = run_with_default_nofile(&s);
    let pid = child.id();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    wait_line(&log, "ready: ", &mut seen);
    let (_, text) = timed(&s, &["snooze", "1h"]);
    assert!(text.contains("snoozed by root until"), "{text}");
    wait_line(&log, "decision:", &mut seen);
    std::thread::sleep(Duration::from_millis(1500));
    let idle_fds = open_fds(pid);
    let before = snoozed_cycles(metrics);

    let socket = s.path("control.sock");
    let mut floods = [
        as_nobody(FLOOD, &["unix", socket.to_str().unwrap(), "1000", "12"]),
        as_nobody(FLOOD, &["tcp", &page.to_string(), "1000", "12"]),
    ];
    let mut outs: Vec<_> = floods
        .iter_mut()
        .map(|f| until_line(f, "flooding").1)
        .collect();
    let (mut slowest_snooze, mut slowest_status, mut most_fds) =
        (Duration::ZERO, Duration::ZERO, 0);
    let mut page_times = Vec::new();
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(700));
        let (took, text) = timed(&s, &["snooze", "1h"]);
        assert!(text.contains("snoozed by root until"), "{text}");
        slowest_snooze = slowest_snooze.max(took);
        let (took, text) = timed(&s, &["status"]);
        assert!(text.contains("SNOOZED by root until"), "{text}");
        slowest_status = slowest_status.max(took);
        most_fds = most_fds.max(open_fds(pid));
    }
    page_times.push(page_answer(page));
    for (f, out) in floods.iter_mut().zip(outs.iter_mut()) {
        let _ = f.wait();
        let mut rest = String::new();
        let _ = out.read_to_string(&mut rest);
        eprintln!("flood: {}", rest.trim());
    }
    // Cycles after the flood, counted in full.
    std::thread::sleep(Duration::from_secs(3));
    let after = snoozed_cycles(metrics);
    eprintln!(
        "under the flood: snooze answered within {slowest_snooze:?}, status within {slowest_status:?}; \
         the page answered a GET in {page_times:?}; descriptors {idle_fds} idle, at most {most_fds}; \
         cycles {} of which snoozed {}",
        after.0 - before.0,
        after.1 - before.1
    );
    assert!(
        slowest_snooze < Duration::from_secs(2),
        "snooze took {slowest_snooze:?}"
    );
    assert!(
        slowest_status < Duration::from_secs(2),
        "status took {slowest_status:?}"
    );
    // The caps: 32 on the control socket (4 of them nobody's), 32 on the page.
    assert!(
        most_fds <= idle_fds + 4 + 32 + 8,
        "the daemon held {most_fds} descriptors (idle: {idle_fds})"
    );
    assert!(
        after.0 - before.0 >= 8,
        "cycles went on: {before:?} -> {after:?}"
    );
    assert_eq!(
        after.1 - before.1,
        after.0 - before.0,
        "every cycle's decision counts the snooze: {before:?} -> {after:?}\n{}",
        seen.join("\n")
    );
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    assert!(wait_exit(&mut child, Duration::from_secs(20)).success());
    assert!(!socket.exists(), "a clean stop removes its socket");
}

/// The claim's name for this Setup's engine endpoint and the default instance.
fn claim_digest(s: &Setup) -> String {
    use sha2::{Digest, Sha256};
    let endpoint = format!("unix://{}", s.path("no-docker.sock").display());
    Sha256::digest(format!("{endpoint}\0default").as_bytes())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `nobody` binds the abstract socket that used to be the instance claim and tries to lock
/// the lock file that replaced it: it cannot, and pilotd starts (it used to exit 2, "another
/// pilotd already runs instance").
#[test]
fn a_lock_squatted_by_nobody_does_not_stop_pilotd() {
    let s = Setup::new("");
    let digest = claim_digest(&s);
    let lock = format!("/run/pilotd/instance-{digest}.lock");
    // A first daemon: the lock file exists from here on, as after any earlier run.
    let mut first = s.run();
    let log = lines(&mut first);
    let mut seen = Vec::new();
    wait_line(&log, "ready: ", &mut seen);
    signal(&first, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut first, Duration::from_secs(20));

    let mut squatter = as_nobody(SQUAT, &[&format!("pilotd/instance/{digest}"), &lock]);
    let (said, _out) = until_line(&mut squatter, "squatting");
    assert!(
        said.contains(&"abstract socket bound".to_string()),
        "{said:?}"
    );
    assert!(
        said.iter().all(|l| !l.contains("locked")),
        "nobody locked the lock file: {said:?}"
    );
    let mut child = s.run();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    wait_line(&log, "ready: ", &mut seen);
    let pid = std::fs::read_to_string(&lock).expect("the lock file names its holder");
    assert_eq!(pid.trim(), child.id().to_string());
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    assert!(wait_exit(&mut child, Duration::from_secs(20)).success());
    let _ = squatter.kill();
    let _ = squatter.wait();
}

/// A snooze file that is damaged, or cannot be read at all, counts as snoozed, and `plan`,
/// `status` and the daemon's decision say why; `pilotd resume` ends it.
#[test]
fn a_snooze_that_cannot_be_read_counts_as_snoozed() {
    let s = Setup::new("");
    let snooze = s.path("state/snooze.json");
    let plan = |s: &Setup| -> serde_json::Value {
        let o = s.cmd().args(["plan", "--format", "json"]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let causes = |v: &serde_json::Value| v["causes"].to_string();

    std::fs::write(&snooze, "{\"until\": ").unwrap();
    let v = plan(&s);
    assert!(causes(&v).contains("snoozed"), "{v}");
    assert!(v.to_string().contains("snooze.json is damaged"), "{v}");
    let (_, text) = timed(&s, &["status"]);
    assert!(text.contains("SNOOZED: the owner's snooze in"), "{text}");

    // Unreadable: a directory where the file should be (EISDIR, as EMFILE would be).
    std::fs::remove_file(&snooze).unwrap();
    std::fs::create_dir(&snooze).unwrap();
    let v = plan(&s);
    assert!(causes(&v).contains("snoozed"), "{v}");
    assert!(
        v.to_string().contains("cannot read the owner's snooze"),
        "{v}"
    );

    // The daemon decides the same, and resume (of a damaged file) ends it.
    std::fs::remove_dir(&snooze).unwrap();
    std::fs::write(&snooze, "not json").unwrap();
    let mut child = s.run();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    let line = wait_line(&log, "decision:", &mut seen);
    assert!(
        line.contains("snoozed") && line.contains("is damaged"),
        "{line}"
    );
    let (_, text) = timed(&s, &["resume"]);
    assert!(text.contains("resumed by root"), "{text}");
    assert!(!snooze.exists());
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(20));
}

/// Asks the daemon on its control socket for a status page key.
fn page_key(s: &Setup) -> String {
    let mut c = std::os::unix::net::UnixStream::connect(s.path("control.sock")).unwrap();
    c.write_all(b"{\"command\":\"open\"}\n").unwrap();
    let mut reply = String::new();
    BufReader::new(c).read_line(&mut reply).unwrap();
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let url = v["message"].as_str().unwrap();
    url.split("key=").nth(1).unwrap().to_string()
}

/// Keys come from the kernel's CSPRNG (the getrandom syscall), not from a file that can be
/// missing or empty: with /dev/null mounted over /dev/urandom in the daemon's mount namespace,
/// keys are still random (they used to be 64 zeros).
#[test]
fn keys_are_random_without_dev_urandom() {
    let page = free_port();
    let s = Setup::new(&format!("[page]\nport = {page}\n"));
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .args([
            "sh",
            "-c",
            "mount --bind /dev/null /dev/urandom && exec \"$@\"",
            "sh",
        ])
        .arg(bin())
        .arg("-c")
        .arg(s.path("pilotd.toml"))
        .arg("run")
        .env_remove("NOTIFY_SOCKET")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    wait_line(&log, "ready: ", &mut seen);
    let (a, b) = (page_key(&s), page_key(&s));
    assert_eq!(a.len(), 64, "{a}");
    assert_ne!(a, "0".repeat(64), "a predictable key");
    assert_ne!(a, b, "two keys alike");
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(20));
}
