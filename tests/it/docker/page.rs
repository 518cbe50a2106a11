//! The status page in a real headless Chromium (Debian's `chromium`; tests/run.sh installs
//! it), driven over the DevTools protocol: `pilotd open` invites the browser's user (root
//! here), the browser loads the page, the decision text is checked, the Snooze button is pressed (a real form POST by the
//! browser, with the browser's own Origin and Sec-Fetch-Site), and the worker on the real
//! engine stops. The page loads with a ledger of several weeks written beforehand (in
//! `contribution.json`'s own format), so the weekly chart of what the machine gave is drawn,
//! checked in the DOM against the ledger and against `pilotd status`, and rendered under the
//! page's Content-Security-Policy without a console error. Screenshots are kept at
//! target/artifacts/status-page.png (the page) and status-page-gave.png (that section, as
//! docs/owner.md shows it).

use super::volunteer::{Harness, image, policy};
use crate::harness::{self, free_port, sh, sh_ok};
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
    /// What the page said on its console (and exceptions thrown), as DevTools reported it
    /// while answering commands; CSP violations arrive here too.
    console: Vec<Value>,
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
            console: Vec::new(),
        }
    }

    /// One DevTools command, and its result; events in between are skipped, but for the
    /// console's, which are kept (`errors`).
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
            if matches!(
                v["method"].as_str(),
                Some("Log.entryAdded" | "Runtime.consoleAPICalled" | "Runtime.exceptionThrown")
            ) {
                self.console.push(v);
            }
        }
    }

    /// The errors the page's console got so far: log entries of level error (a CSP violation,
    /// a failed load), `console.error` calls and exceptions thrown.
    fn errors(&mut self) -> Vec<Value> {
        // A command's round trip delivers what the browser reported before it.
        self.eval("1");
        self.console
            .iter()
            .filter(|e| match e["method"].as_str() {
                Some("Log.entryAdded") => e["params"]["entry"]["level"] == "error",
                Some("Runtime.consoleAPICalled") => {
                    matches!(e["params"]["type"].as_str(), Some("error" | "assert"))
                }
                _ => true,
            })
            .cloned()
            .collect()
    }

    /// Evaluates a JavaScript expression in the page; its value.
    fn eval(&mut self, expr: &str) -> Value {
        self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        )["result"]["value"]
            .clone()
    }

    /// Keeps the part of the page `region` (a JavaScript expression giving x, y, width and
    /// height in the page's pixels, fold or not) as target/artifacts/`name`.
    fn screenshot(&mut self, region: &str, name: &str) {
        let clip: Value = serde_json::from_str(
            self.eval(&format!(
                "JSON.stringify(Object.assign({region}, {{scale: 1}}))"
            ))
            .as_str()
            .unwrap(),
        )
        .unwrap();
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "clip": clip, "captureBeyondViewport": true}),
        );
        let png = base64_decode(shot["data"].as_str().unwrap());
        let dir = harness::repo("target/artifacts");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), png).unwrap();
        eprintln!("screenshot: {}", dir.join(name).display());
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

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn the_status_page_in_chromium_snoozes_and_the_worker_stops() {
    let port = free_port();
    let mut h = Harness::new(
        "page",
        &policy("fast", 1),
        &format!("[page]\nport = {port}\n"),
        // The worker prints a job report, as `pilot` does, when it is asked to stop.
        &format!(
            "{}\n[worker.env]\nWORKER_REPORT = \"{REPORT}\"\n",
            image("v1")
        ),
    );
    let ledger = several_weeks(&h);
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
    b.call("Log.enable", json!({}));
    b.call("Runtime.enable", json!({}));
    b.call("Page.navigate", json!({"url": url}));
    let text = b.wait_text("pilotd on this machine", Duration::from_secs(15));
    assert!(text.contains("Computing: 1 worker(s)"), "{text}");
    assert!(text.contains("host free"), "the reasons: {text}");
    assert!(url.ends_with("/open") && !url.contains('?'), "{url}");
    assert_eq!(b.eval("location.pathname"), "/", "{url} led to the page");
    // The invitation worked once: used again, even by the same user, it is refused.
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
        .find(|c| c["name"] == format!("pilotd_session_{port}").as_str())
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
    let this_week = ledger["weeks"].as_array().unwrap().last().unwrap()["ended"].clone();
    let all_time = ledger["all_time"]["ended"].clone();
    let ended = |e: &Value| {
        format!(
            "workers: {} ran jobs, {} ended without a job, {} evicted, {} failed",
            e["ran_jobs"],
            e["no_job"],
            e["evicted"].as_u64().unwrap() + 1,
            e["failed"]
        )
    };
    let text = b.wait_text(&ended(&this_week), Duration::from_secs(25));
    assert!(text.contains("What this machine gave"), "{text}");
    assert!(text.contains("This week ("), "{text}");
    assert!(text.contains("CPU-hours given"), "{text}");
    assert!(text.contains(&ended(&all_time)), "all time: {text}");
    // The jobs the earlier pilots reported, and this worker as one that could not: `fast`
    // kills at once, before the report it prints on SIGTERM (a graceful stop's report is
    // read: docker::volunteer::a_workers_job_report_shows_in_status).
    let jobs = |j: &Value| {
        format!(
            "jobs: {} finished, {} vacated (",
            j["completed"], j["vacated"]
        )
    };
    let text = b.wait_text(
        "1 worker(s) ended without a report",
        Duration::from_secs(10),
    );
    let this_jobs = &ledger["weeks"].as_array().unwrap().last().unwrap()["jobs"];
    for j in [this_jobs, &ledger["all_time"]["jobs"]] {
        let at = text
            .find(&jobs(j))
            .unwrap_or_else(|| panic!("no {}: {text}", jobs(j)));
        let line = text[at..].lines().next().unwrap_or_default();
        assert!(
            line.ends_with("; 1 worker(s) ended without a report"),
            "{line}"
        );
    }
    weekly_chart(&mut b, &h, &ledger);
    // No section draws an empty box: learned availability says it in words or shows data.
    assert!(
        !text.contains("Free 0% of the watched time"),
        "an empty grid: {text}"
    );

    // The whole page, below the window's fold too (the chart is near its end); and the
    // section alone, as docs/owner.md shows it.
    b.screenshot(
        "{x: 0, y: 0, width: document.documentElement.scrollWidth, \
          height: document.documentElement.scrollHeight}",
        "status-page.png",
    );
    b.screenshot(
        "(() => { const c = document.getElementById('contribution'); \
         const h = c.previousElementSibling, note = c.nextElementSibling; \
         const top = h.getBoundingClientRect().top + scrollY - 6; \
         const r = document.body.getBoundingClientRect(); \
         return {x: r.left, y: top, width: r.width, \
           height: note.getBoundingClientRect().bottom + scrollY + 8 - top}; })()",
        "status-page-gave.png",
    );
    let errors = b.errors();
    assert!(errors.is_empty(), "the page's console: {errors:#?}");

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
            "curl -s -o /dev/null -w '%{{http_code}}' -H 'Cookie: pilotd_session_{port}={sid}' \
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

/// The page test's worker's last line: what `pilot` prints of its slot's jobs (small enough
/// for the seconds the worker lives, which bound what pilotd believes of it).
const REPORT: &str = "pilot-report v=1 jobs_started=2 jobs_completed=1 jobs_vacated=1 job_seconds=4 job_cpu_seconds=3.0 vacated_cpu_seconds=1.0";

/// A machine's last six weeks, this one under way, in `contribution.json`'s format as the
/// daemon writes it: a desktop lending half its 8 CPUs at night and on weekends, whose pilots
/// reported their jobs. Written into the state dir before the daemon starts, which goes on
/// counting into it.
fn several_weeks(h: &Harness) -> Value {
    use chrono::{Datelike, Utc};
    // (open, computing, owner there, CPU-hours; ran jobs, no job, evicted, failed), oldest first.
    let figures = [
        (86.5, 78.2, 41.0, 301.6, [11, 2, 1, 0]),
        (92.0, 85.4, 38.5, 329.9, [12, 1, 2, 0]),
        (61.5, 40.3, 52.0, 148.7, [6, 4, 3, 1]),
        (98.0, 91.7, 35.5, 356.2, [14, 0, 1, 0]),
        (88.5, 80.1, 44.0, 312.4, [12, 2, 1, 0]),
        (24.0, 21.3, 16.5, 82.7, [3, 1, 0, 0]),
    ];
    // The data their work used: MiB received, sent and pulled for the worker image (a new
    // image in the second and fifth weeks).
    let data: [[u64; 3]; 6] = [
        [1843, 96, 0],
        [2150, 120, 410],
        [960, 44, 0],
        [2330, 131, 0],
        [2010, 102, 410],
        [512, 27, 0],
    ];
    let mut all_data = [0u64; 3];
    let now = Utc::now();
    let mut all = [0.0; 5];
    let mut all_ended = [0u64; 4];
    let mut all_jobs = [0.0; 6];
    let weeks: Vec<Value> = figures
        .iter()
        .enumerate()
        .zip(data)
        .map(|((i, (open, computing, owner, cpu, ended)), mib)| {
            let w = (now - chrono::Duration::weeks((figures.len() - 1 - i) as i64)).iso_week();
            let secs = |h: f64| (h * 3600.0).round();
            for (sum, v) in all.iter_mut().zip([*open, *computing, *owner, *cpu, 1.5]) {
                *sum += secs(v);
            }
            for (sum, n) in all_ended.iter_mut().zip(ended) {
                *sum += n;
            }
            // Four jobs a worker that ran jobs, a job vacated per eviction (1.2 CPU-hours
            // lost each), jobs busy 85 % of the CPU time given, 90 % of the hours computing.
            let jobs = [
                (ended[0] * 4) as f64,
                ended[2] as f64,
                secs(computing * 0.9),
                secs(cpu * 0.85),
                secs(ended[2] as f64 * 1.2),
                ended.iter().sum::<u64>() as f64,
            ];
            for (sum, v) in all_jobs.iter_mut().zip(jobs) {
                *sum += v;
            }
            let bytes = mib.map(|m| m << 20);
            for (sum, v) in all_data.iter_mut().zip(bytes) {
                *sum += v;
            }
            json!({
                "week": format!("{}-W{:02}", w.year(), w.week()),
                "cpu_seconds": secs(*cpu),
                "computing_s": secs(*computing) as u64,
                "paused_s": secs(1.5) as u64,
                "open_s": secs(*open) as u64,
                "owner_present_s": secs(*owner) as u64,
                "ended": {"ran_jobs": ended[0], "no_job": ended[1], "evicted": ended[2], "failed": ended[3]},
                "jobs": jobs_json(&jobs),
                "network": {"received": bytes[0], "sent": bytes[1], "pulled": bytes[2]},
            })
        })
        .collect();
    let ledger = json!({
        "version": 1,
        "since": (now - chrono::Duration::weeks(6)).to_rfc3339(),
        "weeks": weeks,
        "all_time": {
            "cpu_seconds": all[3],
            "computing_s": all[1] as u64,
            "paused_s": all[4] as u64,
            "open_s": all[0] as u64,
            "owner_present_s": all[2] as u64,
            "ended": {"ran_jobs": all_ended[0], "no_job": all_ended[1], "evicted": all_ended[2], "failed": all_ended[3]},
            "jobs": jobs_json(&all_jobs),
            "network": {"received": all_data[0], "sent": all_data[1], "pulled": all_data[2]},
        },
    });
    std::fs::create_dir_all(h.path("state")).unwrap();
    std::fs::write(h.path("state/contribution.json"), ledger.to_string()).unwrap();
    ledger
}

/// A ledger's `jobs` from (finished, vacated, job-seconds, CPU-seconds, CPU-seconds lost,
/// workers reported).
fn jobs_json(j: &[f64; 6]) -> Value {
    json!({
        "started": (j[0] + j[1]) as u64,
        "completed": j[0] as u64,
        "vacated": j[1] as u64,
        "job_seconds": j[2] as u64,
        "cpu_seconds": j[3],
        "vacated_cpu_seconds": j[4],
        "workers_reported": j[5] as u64,
        "workers_unreported": 0,
    })
}

/// The weekly chart as Chromium drew it: a bar for each figure of each week in the ledger
/// (oldest first), each past week's tooltip the ledger's figure, this week's the figures
/// `pilotd status` prints now, every bar laid out with the height its figure gives.
fn weekly_chart(b: &mut Browser, h: &Harness, written: &Value) {
    // What the daemon saved last (the eviction's save; nothing else writes while snoozed).
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(h.path("state/contribution.json")).unwrap())
            .unwrap();
    let weeks: Vec<String> = saved["weeks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["week"].as_str().unwrap().to_string())
        .collect();
    assert!(weeks.len() >= 6, "the six weeks written: {saved}");
    let drawn: Vec<(String, String, String, f64)> = serde_json::from_str(
        b.eval(
            "JSON.stringify(Array.from(document.querySelectorAll('#weekly-chart rect[data-series]'), \
             r => [r.dataset.series, r.dataset.week, r.querySelector('title').textContent, \
                   r.getBoundingClientRect().height]))",
        )
        .as_str()
        .unwrap(),
    )
    .unwrap();
    assert_eq!(drawn.len(), 5 * weeks.len(), "five bars a week: {drawn:?}");
    for series in ["open", "computing", "owner", "cpu", "data"] {
        let order: Vec<&str> = drawn
            .iter()
            .filter(|d| d.0 == series)
            .map(|d| d.1.as_str())
            .collect();
        assert_eq!(order, weeks, "{series}: oldest first");
    }
    assert_eq!(
        b.eval("document.getElementById('weekly-chart').getAttribute('role')"),
        "img"
    );
    let bar = |series: &str, week: &str| {
        drawn
            .iter()
            .find(|d| d.0 == series && d.1 == week)
            .unwrap_or_else(|| panic!("no {series} bar for {week}: {drawn:?}"))
            .clone()
    };
    // A past week, as written: 356.2 CPU-hours, 98.0 h open, 35.5 h with the owner there.
    let peak = written["weeks"][3]["week"].as_str().unwrap();
    let (_, _, title, peak_h) = bar("cpu", peak);
    assert!(
        title.starts_with(&format!("{peak} (from ")) && title.ends_with(": 356.2 CPU-hours given"),
        "{title}"
    );
    assert!(bar("open", peak).2.ends_with(": 98.0 h open to the pool"));
    assert!(
        bar("owner", peak)
            .2
            .ends_with(": 35.5 h the owner was there")
    );
    // Drawn to scale on the CPU axis (the largest week fills most of it).
    let (_, _, _, low_h) = bar("cpu", written["weeks"][2]["week"].as_str().unwrap());
    assert!(
        (low_h / peak_h - 148.7 / 356.2).abs() < 0.02,
        "148.7 vs 356.2 CPU-hours drawn {low_h} vs {peak_h} px"
    );
    // The data, as written, on its own axis: 2330 MiB received, 131 MiB sent and nothing
    // pulled in that week; 2680 MiB in all in the second, the largest (a pull of 410 MiB);
    // 1004 MiB in the third.
    let title = bar("data", peak).2;
    assert!(
        title.ends_with(": 2.4GiB of data used (data: 2.3GiB received, 131MiB sent, 0B pulled for the worker image)"),
        "{title}"
    );
    let (_, _, title, largest) = bar("data", written["weeks"][1]["week"].as_str().unwrap());
    assert!(
        title.ends_with(": 2.6GiB of data used (data: 2.1GiB received, 120MiB sent, 410MiB pulled for the worker image)"),
        "{title}"
    );
    let (_, _, _, low) = bar("data", written["weeks"][2]["week"].as_str().unwrap());
    assert!(
        (low / largest - 1004.0 / 2680.0).abs() < 0.02,
        "1004 vs 2680 MiB drawn {low} vs {largest} px"
    );

    // This week: the same figures as `pilotd status` prints.
    let out = h.pilotd().arg("status").output().unwrap();
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    let this_week: Vec<&str> = status
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("This week ("))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with("All time"))
        .map(str::trim)
        .collect();
    assert!(this_week.len() >= 4, "this week in status: {status}");
    let now = weeks.last().unwrap();
    for series in ["open", "computing", "owner", "cpu", "data"] {
        let (_, _, title, _) = bar(series, now);
        let figure = title.split_once(": ").unwrap().1;
        // The data bar: its total, then status's own line in brackets.
        let figure = match figure.split_once(" of data used (") {
            Some((_, line)) => line.strip_suffix(')').unwrap(),
            None => figure,
        };
        assert!(
            this_week.iter().any(|l| l.starts_with(figure)),
            "the page's {figure:?} is not in status's {this_week:?}"
        );
    }
    let (_, _, title, _) = bar("cpu", now);
    assert!(title.contains("this week so far"), "{title}");
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
