//! pilotd as a system service, with real processes and signals: systemd's notify protocol
//! captured on a socket the test owns, SIGHUP reload with a valid and an invalid file,
//! `--daemon` with a live and a stale pid file, and a daemon that fails before it is ready.
//! The Docker socket points nowhere on purpose: the service layer must work (and say why no
//! worker starts) without an engine.

use crate::harness::bin;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    pub(crate) fn new(extra: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("state")).unwrap();
        // An empty utmp file: nobody is logged in (missing would mean "unknown").
        std::fs::write(d.join("utmp"), b"").unwrap();
        std::fs::write(
            d.join("policy.toml"),
            "[schedule]\nwindows = [{ days = \"daily\", from = \"00:00\", to = \"24:00\" }]\n",
        )
        .unwrap();
        std::fs::write(
            d.join("pilotd.toml"),
            format!(
                "splay = \"0s\"\npolicy = \"{p}/policy.toml\"\nstate_dir = \"{p}/state\"\ncontrol_socket = \"{p}/control.sock\"\ninterval = \"1s\"\n\
                 [host]\nutmp = \"{p}/utmp\"\n[docker]\nsocket = \"unix://{p}/no-docker.sock\"\n\
                 [worker]\nimage = \"127.0.0.1:5000/pilotd-test/worker:current\"\n\
                 allowed_images = [\"127.0.0.1:5000/*\"]\n{extra}",
                p = d.display()
            ),
        )
        .unwrap();
        Setup { dir }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A Setup whose daemon serves metrics on a free loopback port.
    pub(crate) fn with_metrics() -> (Setup, u16) {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let s = Setup::new(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
        (s, port)
    }

    /// `pilotd run` in the foreground, its stderr piped (see `lines`).
    pub(crate) fn run(&self) -> Child {
        self.cmd()
            .arg("run")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub(crate) fn cmd(&self) -> Command {
        let mut c = Command::new(bin());
        c.arg("-c").arg(self.path("pilotd.toml"));
        c.env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM")
            .env("RUST_LOG", "info");
        c
    }
}

/// Collects the child's stderr lines on a channel.
pub(crate) fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

pub(crate) fn wait_line(
    rx: &mpsc::Receiver<String>,
    needle: &str,
    seen: &mut Vec<String>,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(l.clone());
            if l.contains(needle) {
                return l;
            }
        }
    }
    panic!(
        "no log line containing {needle:?}; saw:\n{}",
        seen.join("\n")
    );
}

pub(crate) fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

pub(crate) fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("pilotd did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn recv_until(sock: &UnixDatagram, needle: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).to_string();
            seen.push(msg.clone());
            if msg.contains(needle) {
                return;
            }
        }
    }
    panic!("no notification containing {needle:?}; got {seen:?}");
}

#[test]
fn notifies_systemd_and_reloads_keeping_the_last_good_config() {
    let s = Setup::new("");
    let sock_path = s.path("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut child = s
        .cmd()
        .arg("run")
        .env("NOTIFY_SOCKET", &sock_path)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    let mut notes = Vec::new();

    // READY with a STATUS line that carries the decision, after the first cycle.
    recv_until(&sock, "READY=1", &mut notes);
    assert!(notes.iter().any(|n| n.contains("STATUS=")), "{notes:?}");
    // Without an engine the decision says so instead of pretending there are no workers.
    wait_line(&log, "decision:", &mut seen);

    // An invalid policy: reported with file:line:col, the daemon keeps the old one.
    let policy = s.path("policy.toml");
    let good = std::fs::read_to_string(&policy).unwrap();
    std::fs::write(&policy, "[owner]\non_return = \"explode\"\n").unwrap();
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    recv_until(&sock, "RELOADING=1", &mut notes);
    let line = wait_line(&log, "keeping the last good configuration", &mut seen);
    assert!(line.contains("reload failed"), "{line}");
    // One event, one line: the diagnostics follow on it, their newlines escaped.
    assert!(
        line.contains(&format!(
            "configuration:\\n{}:2:13: unknown on_return rule",
            policy.display()
        )),
        "{line}"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the daemon must keep running"
    );
    // It still completes cycles and tells systemd it is ready again.
    recv_until(&sock, "READY=1", &mut notes);

    // A valid file is taken.
    std::fs::write(
        &policy,
        good + "[share]
workers = 1
",
    )
    .unwrap();
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    wait_line(&log, "configuration reloaded", &mut seen);

    // SIGTERM: STOPPING, then a clean exit.
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    recv_until(&sock, "STOPPING=1", &mut notes);
    let status = wait_exit(&mut child, Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{}", seen.join("\n"));
}

fn read_pid(p: &Path) -> i32 {
    std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

fn wait_dead(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(pid) {
        assert!(Instant::now() < deadline, "daemon {pid} did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn daemon_mode_with_live_and_stale_pid_files() {
    let s = Setup::new("");
    let pidfile = s.path("pilotd.pid");

    // Stale: a pid file left by a dead process, not locked.
    std::fs::write(&pidfile, "999999999\n").unwrap();
    let started = Instant::now();
    let out = s
        .cmd()
        .args(["run", "--daemon", "--pidfile"])
        .arg(&pidfile)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The parent waited for the daemon's first cycle, but not for long.
    assert!(started.elapsed() < Duration::from_secs(15));
    let pid = read_pid(&pidfile);
    assert!(alive(pid));
    assert_ne!(pid as u32, std::process::id());

    // Live: a second daemon is refused in the foreground, naming the running one.
    let out = s
        .cmd()
        .args(["run", "--daemon", "--pidfile"])
        .arg(&pidfile)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("already running as pid {pid}")),
        "{err}"
    );
    assert!(alive(pid), "the running daemon is untouched");
    assert_eq!(read_pid(&pidfile), pid);

    // Its log went to the state dir.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    wait_dead(pid);
    let log = std::fs::read_to_string(s.path("state/pilotd.log")).unwrap();
    assert!(log.contains("pilotd starting in volunteer mode"), "{log}");
}

#[test]
fn daemon_that_fails_before_ready_fails_its_parent() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let s = Setup::new(&format!("[metrics]\nlisten = \"{addr}\"\n"));
    let out = s.cmd().args(["run", "--daemon"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the daemon failed to start"), "{err}");
    assert!(
        err.contains(&format!("cannot listen for metrics on {addr}")),
        "{err}"
    );
}

#[test]
fn metrics_are_scraped_from_a_running_daemon() {
    let (s, port) = Setup::with_metrics();
    let mut child = s.run();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    wait_line(&log, "decision:", &mut seen);
    // The cycle that logged the decision records its duration when it ends: scrape until then.
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let body = scrape(port);
        if body.contains("pilotd_cycle_duration_seconds_count") || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(20));
    for series in [
        "pilotd_allowed 0",
        // Which cause depends on this machine's load right now; one was counted.
        "pilotd_decisions_total{cause=",
        "pilotd_cycle_duration_seconds_count",
        "pilotd_backoff_level 0",
        "# EOF",
    ] {
        assert!(body.contains(series), "missing {series} in\n{body}");
    }
}

pub(crate) fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// The status code and body the manifest server answers with.
type Reply = std::sync::Arc<std::sync::Mutex<(u16, Vec<u8>)>>;

/// A tiny HTTP server on 127.0.0.1 whose single response the test can change at any time.
fn manifest_server() -> (String, Reply) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/manifest.toml", listener.local_addr().unwrap());
    let reply = std::sync::Arc::new(std::sync::Mutex::new((200u16, Vec::new())));
    let r = reply.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            let mut buf = [0u8; 2048];
            let _ = c.read(&mut buf);
            let (status, body) = r.lock().unwrap().clone();
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = c.write_all(head.as_bytes());
            let _ = c.write_all(&body);
        }
    });
    (url, reply)
}

#[test]
fn manifest_failures_keep_the_last_good_one_and_history_survives_corruption() {
    let (url, reply) = manifest_server();
    *reply.lock().unwrap() = (
        200,
        b"version = \"7\"\n[worker]\nimage = \"127.0.0.1:5000/pilotd-test/worker:v2\"\n".to_vec(),
    );
    let s = Setup::new(&format!("[remote]\nurl = \"{url}\"\nrefresh = \"1s\"\n"));
    // A corrupted history from an earlier life: set aside, counting starts over.
    std::fs::write(
        s.path("state/history.json"),
        b"{\"version\":1,\"buckets\":[",
    )
    .unwrap();
    // And a contribution ledger cut short: the same (logged right after the history).
    std::fs::write(
        s.path("state/contribution.json"),
        b"{\"version\":1,\"weeks\":[",
    )
    .unwrap();
    let mut child = s.run();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    wait_line(&log, "history.json.corrupt", &mut seen);
    let line = wait_line(&log, "contribution.json.corrupt", &mut seen);
    assert!(line.contains("starting over"), "{line}");
    assert_eq!(
        std::fs::read(s.path("state/contribution.json.corrupt")).unwrap(),
        b"{\"version\":1,\"weeks\":["
    );
    wait_line(&log, "remote manifest applied", &mut seen);
    assert!(s.path("state/manifest.toml").exists());

    for (status, body, expect) in [
        (500u16, b"oops".to_vec(), "HTTP 500"),
        (200, b"version = \"8\"\n[worker\n".to_vec(), "is invalid"),
        (
            200,
            b"version = \"9\"\n[worker]\nimage = \"docker.io/x/y:1\"\n".to_vec(),
            "not in this host's allowed_images",
        ),
        (200, vec![b'#'; 100 * 1024], "larger than 65536 bytes"),
    ] {
        *reply.lock().unwrap() = (status, body);
        let line = wait_line(&log, expect, &mut seen);
        assert!(line.contains(&url), "{line}");
        assert!(
            line.contains("keeping the last good manifest (version 7)"),
            "{line}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the daemon keeps running"
        );
    }
    // The history is being counted again, in a valid file (written by a later cycle).
    let deadline = Instant::now() + Duration::from_secs(30);
    let h: serde_json::Value = loop {
        let parsed = std::fs::read(s.path("state/history.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        match parsed {
            Some(h) => break h,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            None => panic!("history.json was not rewritten as valid JSON in 30 s"),
        }
    };
    assert_eq!(h["buckets"].as_array().unwrap().len(), 168);
    // The ledger too (written right after the history), counting from scratch.
    let deadline = Instant::now() + Duration::from_secs(10);
    let ledger: serde_json::Value = loop {
        let parsed = std::fs::read(s.path("state/contribution.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        match parsed {
            Some(l) => break l,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            None => panic!("contribution.json was not rewritten as valid JSON"),
        }
    };
    assert_eq!(ledger["version"], 1, "{ledger}");
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(20));

    // status says which manifest is in force.
    let out = s.cmd().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("pool manifest: version 7 from {url}")),
        "{text}"
    );
    assert!(text.contains("learned availability:"), "{text}");
}

#[test]
fn a_second_daemon_with_the_same_instance_on_the_same_engine_is_refused() {
    // Seen on a real host: two pilotds with one instance (two state dirs) removed each
    // other's workers every cycle. The second one must refuse to start and say why.
    let s = Setup::new("");
    let mut first = s.cmd().arg("run").stderr(Stdio::piped()).spawn().unwrap();
    let rx = lines(&mut first);
    let mut seen = Vec::new();
    wait_line(&rx, "ready", &mut seen);
    let other_state = s.path("state-2");
    let config = std::fs::read_to_string(s.path("pilotd.toml"))
        .unwrap()
        .replace(
            &format!("state_dir = \"{}\"", s.path("state").display()),
            &format!("state_dir = \"{}\"", other_state.display()),
        );
    std::fs::write(s.path("pilotd-2.toml"), config).unwrap();
    let out = Command::new(bin())
        .arg("-c")
        .arg(s.path("pilotd-2.toml"))
        .arg("run")
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "another pilotd (pid {}) already runs instance",
            first.id()
        )),
        "{err}"
    );
    assert!(!other_state.join("status.json").exists(), "it did nothing");
    // Once the first is gone, the instance is free again.
    signal(&first, nix::sys::signal::Signal::SIGKILL);
    let _ = first.wait();
    let mut second = Command::new(bin())
        .arg("-c")
        .arg(s.path("pilotd-2.toml"))
        .arg("run")
        .env_remove("NOTIFY_SOCKET")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(&mut second);
    wait_line(&rx, "ready", &mut seen);
    signal(&second, nix::sys::signal::Signal::SIGTERM);
    let _ = wait_exit(&mut second, Duration::from_secs(20));
}

/// CPU seconds (user + system) a process has used so far, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name may hold spaces; the fields after its closing parenthesis are fixed.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Out of file descriptors under a flood of idle connections, the metrics listener pauses
/// between accepts instead of spinning (it used to burn 80-90 % of a core), and the daemon
/// keeps cycling.
#[test]
fn the_metrics_listener_backs_off_when_out_of_descriptors() {
    let (s, port) = Setup::with_metrics();
    let mut child = s.run();
    let pid = child.id();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    wait_line(&log, "decision:", &mut seen);
    // Leave the daemon two descriptors beyond what it holds now.
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64;
    let limit = nix::libc::rlimit {
        rlim_cur: open + 2,
        rlim_max: open + 2,
    };
    let rc = unsafe {
        nix::libc::prlimit(
            pid as nix::libc::pid_t,
            nix::libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let flood: Vec<std::net::TcpStream> = (0..40)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_seconds(pid) - before;
    let warned = wait_line(&log, "metrics: cannot accept a connection", &mut seen);
    assert!(warned.contains("pausing"), "{warned}");
    assert!(
        used < 0.6,
        "the daemon used {used:.2} s of CPU in 3 s while out of descriptors"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the daemon must keep running"
    );
    drop(flood);
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(20));
}

/// A reload onto the most extreme policy `check` accepts (every duration at its 100-year
/// bound, windows that end soon) keeps a daemon that decides and stays alive; one past the
/// bound is refused by the reload (the last good one stays) instead of crashing the daemon
/// (which used to exit 101, and fail open under Restart=on-failure).
#[test]
fn a_reload_onto_extreme_durations_survives() {
    let s = Setup::new("max_lifetime = \"100years\"\n");
    let mut child = s.run();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    wait_line(&log, "decision:", &mut seen);
    let policy = s.path("policy.toml");
    std::fs::write(
        &policy,
        "[schedule]\nwindows = [{ days = \"daily\", from = \"00:00\", to = \"24:00\" }]\n\
         evict_before_end = \"100years\"\n[owner]\nbusy_for = \"100years\"\nfree_for = \"100years\"\n\
         grace = \"100years\"\nsession_idle = \"100years\"\nmax_owner_cpu = \"1%\"\n[jobs]\nlongest_job = \"100years\"\n",
    )
    .unwrap();
    pilotd_check(&s);
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    wait_line(&log, "configuration reloaded", &mut seen);
    // Cycles go on with it (interval = 1s): the status file is rewritten after each.
    cycles_go_on(&s, &mut child);

    std::fs::write(&policy, "[owner]\nbusy_for = \"300000years\"\n").unwrap();
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    let line = wait_line(&log, "keeping the last good configuration", &mut seen);
    assert!(
        line.contains("duration `300000years` is too long"),
        "{line}"
    );
    cycles_go_on(&s, &mut child);
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let status = wait_exit(&mut child, Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
}

/// The daemon is alive and its status file is written again within a few seconds.
fn cycles_go_on(s: &Setup, child: &mut Child) {
    let status = s.path("state/status.json");
    let before = std::fs::metadata(&status).unwrap().modified().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the daemon must survive"
        );
        let now = std::fs::metadata(&status).unwrap().modified().unwrap();
        if now > before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no cycle wrote the status in 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `pilotd check` on a Setup's files must pass (what the reload is about to read).
fn pilotd_check(s: &Setup) {
    let out = s.cmd().arg("check").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn log_format_json_prints_one_json_object_per_event() {
    let s = Setup::new("");
    let mut child = s
        .cmd()
        .args(["--log-format", "json", "run"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    let line = wait_line(&log, "decision:", &mut seen);
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(20));
    // Every line is a JSON object with a level and a message; the decision's causes are a
    // field of their own, not text in the message.
    for l in &seen {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{l}"
        );
    }
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert!(v["fields"]["causes"].is_string(), "{line}");
}
