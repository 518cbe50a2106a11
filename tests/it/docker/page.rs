//! The status page in a real headless Chromium (Debian's `chromium`; tests/run.sh installs
//! it), driven over the DevTools protocol: `pilotd open` gives the key, the browser loads the
//! page, the decision text is checked, the Snooze button is pressed (a real form POST by the
//! browser, with the browser's own Origin and Sec-Fetch-Site), and the worker on the real
//! engine stops. A screenshot is kept at target/artifacts/status-page.png.

use super::volunteer::{Harness, image, policy};
use crate::harness::{self, sh, sh_ok};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Headless Chromium with a fresh profile, attached to its first page.
    fn start() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new("chromium")
            .args([
                "--headless=new",
                "--no-sandbox", // the tests run as root
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--window-size=1100,1400",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium runs (Debian package chromium; tests/run.sh installs it)");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let mut port = None;
        for line in stderr.lines() {
            let line = line.unwrap();
            if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                port = rest.split('/').next().map(str::to_string);
                break;
            }
        }
        let port = port.expect("chromium printed its DevTools address");
        let list: Value = serde_json::from_str(&sh_ok(&format!(
            "curl -fsS http://127.0.0.1:{port}/json/list"
        )))
        .unwrap();
        let page = list
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page target");
        let url = page["webSocketDebuggerUrl"].as_str().unwrap().to_string();
        let (ws, _) = tungstenite::connect(url).unwrap();
        Browser {
            child,
            _profile: profile,
            ws,
            next_id: 1,
        }
    }

    /// One DevTools command, and its result (events in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(tungstenite::Message::text(msg)).unwrap();
        loop {
            let m = self.ws.read().unwrap();
            let Ok(text) = m.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap_or_default();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Evaluates a JavaScript expression in the page; its value.
    fn eval(&mut self, expr: &str) -> Value {
        self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        )["result"]["value"]
            .clone()
    }

    fn text(&mut self) -> String {
        self.eval("document.body ? document.body.innerText : ''")
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn wait_text(&mut self, what: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let t = self.text();
            if t.contains(what) {
                return t;
            }
            assert!(Instant::now() < deadline, "no {what:?} in the page:\n{t}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn the_status_page_in_chromium_snoozes_and_the_worker_stops() {
    let port = free_port();
    let mut h = Harness::new(
        "page",
        &policy("fast", 1),
        &format!("[page]\nport = {port}\n"),
        &format!("{}\n[worker.env]\n", image("v1")),
    );
    h.start();
    h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());

    // Without a session the page shows nothing but how to get one.
    let (_, anon) = sh(&format!("curl -s http://127.0.0.1:{port}/"));
    assert!(
        anon.contains("pilotd open") && !anon.contains("Computing"),
        "{anon}"
    );
    // A foreign Host (DNS rebinding) is refused.
    let (_, rebound) = sh(&format!(
        "curl -s -o /dev/null -w '%{{http_code}}' -H 'Host: evil.example' http://127.0.0.1:{port}/"
    ));
    assert_eq!(rebound, "421");

    let out = h.pilotd().arg("open").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let url = stdout
        .lines()
        .find_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with("http://127.0.0.1:"))
        })
        .unwrap_or_else(|| panic!("no address in {stdout}"))
        .to_string();

    let mut b = Browser::start();
    b.call("Page.enable", json!({}));
    b.call("Page.navigate", json!({"url": url}));
    let text = b.wait_text("pilotd on this machine", Duration::from_secs(15));
    assert!(text.contains("Computing: 1 worker(s)"), "{text}");
    assert!(text.contains("host free"), "the reasons: {text}");
    assert_eq!(
        b.eval("location.search"),
        "",
        "the one-time key left the address bar"
    );
    // The key worked once: used again, it is refused.
    let (_, again) = sh(&format!("curl -s -o /dev/null -w '%{{http_code}}' '{url}'"));
    assert_eq!(again, "403");

    // Without the session cookie a POST is refused for want of a session.
    let (_, forged) = sh(&format!(
        "curl -s -o /dev/null -w '%{{http_code}}' -H 'Origin: http://evil.example' -d hours=1 http://127.0.0.1:{port}/snooze"
    ));
    assert_eq!(forged, "401", "no session without the cookie");
    assert_eq!(h.running().len(), 1);

    // The session cookie as the browser keeps it: out of scripts' reach, never sent by another
    // site, host-only, for the whole page; not Secure, as the page is plain HTTP on loopback.
    let cookies = b.call(
        "Network.getCookies",
        json!({"urls": [format!("http://127.0.0.1:{port}/")]}),
    )["cookies"]
        .clone();
    let session = cookies
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "pilotd_session")
        .unwrap_or_else(|| panic!("no session cookie in {cookies}"))
        .clone();
    assert_eq!(session["httpOnly"], true, "{session}");
    assert_eq!(session["sameSite"], "Strict", "{session}");
    assert_eq!(session["path"], "/", "{session}");
    assert_eq!(session["domain"], "127.0.0.1", "host-only: {session}");
    assert_eq!(session["secure"], false, "{session}");
    assert_eq!(session["session"], false, "it has a lifetime: {session}");
    let sid = session["value"].as_str().unwrap().to_string();
    let csrf = b
        .eval("document.querySelector('input[name=csrf]').value")
        .as_str()
        .unwrap()
        .to_string();

    // Press Snooze in the browser: the worker stops (on_return = "fast").
    let t0 = Instant::now();
    b.eval("document.getElementById('snooze-button').click()");
    h.wait_for("the worker gone", Duration::from_secs(10), || {
        h.running().is_empty().then_some(())
    });
    eprintln!("snooze button -> worker stopped: {:?}", t0.elapsed());
    let text = b.wait_text("Snoozed by", Duration::from_secs(10));
    assert!(text.contains("(status page)"), "{text}");
    let text = b.wait_text("Not computing now", Duration::from_secs(15));
    assert!(text.contains("snoozed by the owner until"), "{text}");
    h.wait_cycles(2);
    assert!(h.running().is_empty(), "no start while snoozed");
    // What the machine gave: the worker the snooze stopped is counted as evicted (its end
    // saves the ledger), in this week's figures and all time's; the page reloads itself.
    let text = b.wait_text("1 evicted", Duration::from_secs(25));
    assert!(text.contains("What this machine gave"), "{text}");
    assert!(text.contains("This week ("), "{text}");
    assert!(text.contains("CPU-hours given"), "{text}");
    assert!(
        text.matches("workers: 0 ran jobs, 0 ended without a job, 1 evicted")
            .count()
            == 2,
        "this week and all time: {text}"
    );
    // No section draws an empty box: learned availability says it in words or shows data.
    assert!(
        !text.contains("Free 0% of the watched time"),
        "an empty grid: {text}"
    );

    let shot = b.call("Page.captureScreenshot", json!({"format": "png"}));
    let png = base64_decode(shot["data"].as_str().unwrap());
    let dir = harness::repo("target/artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("status-page.png"), png).unwrap();
    eprintln!("screenshot: {}", dir.join("status-page.png").display());

    // Resume from the page: a worker runs again.
    b.eval("document.getElementById('resume-button').click()");
    h.wait_for("a worker again", Duration::from_secs(30), || {
        h.running().pop()
    });
    assert!(!h.path("state/snooze.json").exists());

    // With the browser's valid session, each cross-site sign alone is refused; the same
    // request unspoiled snoozes, so each refusal comes from the point under test.
    let good = [
        format!("Origin: http://127.0.0.1:{port}"),
        "Sec-Fetch-Site: same-origin".to_string(),
    ];
    let post = |origin: &str, site: &str, csrf: Option<&str>| {
        let form = csrf.map(|c| format!("-d csrf={c}")).unwrap_or_default();
        let (_, code) = sh(&format!(
            "curl -s -o /dev/null -w '%{{http_code}}' -H 'Cookie: pilotd_session={sid}' \
             -H '{origin}' -H '{site}' -d hours=1 {form} http://127.0.0.1:{port}/snooze"
        ));
        code
    };
    let wrong = "0".repeat(64);
    // (origin, fetch site, token): each request is sent and judged before the next.
    let spoiled: [(&str, &str, &str, Option<&str>); 4] = [
        (
            "a foreign Origin",
            "Origin: http://evil.example",
            &good[1],
            Some(&csrf),
        ),
        (
            "Sec-Fetch-Site: cross-site",
            &good[0],
            "Sec-Fetch-Site: cross-site",
            Some(&csrf),
        ),
        ("no CSRF token", &good[0], &good[1], None),
        ("a wrong CSRF token", &good[0], &good[1], Some(&wrong)),
    ];
    for (what, origin, site, token) in spoiled {
        assert_eq!(post(origin, site, token), "403", "{what}");
        assert!(
            !h.path("state/snooze.json").exists(),
            "{what}: nothing recorded"
        );
    }
    assert_eq!(post(&good[0], &good[1], Some(&csrf)), "303", "the control");
    assert!(h.path("state/snooze.json").exists(), "the control snoozes");
    h.term();
}

/// Standard base64 (the screenshot's encoding).
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            _ => 63,
        }
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, c)| acc | (val(*c) << (18 - 6 * i)));
        let take = chunk.len().saturating_sub(1);
        for i in 0..take {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}
