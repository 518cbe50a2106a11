//! The owner's status page on 127.0.0.1 (`[page] port`): the decision and its reasons, the
//! workers, the week (the `schedule` grid), the learned availability and recent outcomes,
//! with Snooze and Resume buttons. Plain HTML forms: it works without JavaScript, which only
//! reloads it every 10 s.
//!
//! Who may look and press: a browser cannot show peer credentials, so the page trusts what
//! the control socket already proved. `pilotd open`, run by the owner, asks the daemon over
//! the socket (authorised by SO_PEERCRED, like `snooze`) for a one-time key, valid 2 minutes,
//! and opens `http://127.0.0.1:PORT/?key=…`. The page trades the key for a session cookie
//! (HttpOnly, SameSite=Strict, 12 h) and redirects to `/`, so the key leaves the address bar
//! and cannot be used again. Without a session the page says how to get one and shows
//! nothing else.
//!
//! Cross-site requests are refused three ways: the `Host` must be this listener (no DNS
//! rebinding), a POST whose `Origin` or `Sec-Fetch-Site` says another site is refused, and
//! every form carries the session's CSRF token.

use crate::service::listener::{self, Limits};
use crate::volunteer::control::{self, Context, Request};
use crate::volunteer::history;
use crate::volunteer::policy::calendar::{Cell, cell_at};
use crate::volunteer::snooze;
use crate::volunteer::status;
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

const KEY_LIFE: Duration = Duration::from_secs(120);
const SESSION_LIFE: Duration = Duration::from_secs(12 * 3600);
const COOKIE: &str = "pilotd_session";
const MAX_REQUEST: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error(
        "cannot serve the status page on 127.0.0.1:{port}: {source}\n  hint: another program uses the port; choose another under [page] in pilotd.toml"
    )]
    Bind { port: u16, source: std::io::Error },
    #[error(
        "the kernel's random generator (getrandom) failed: {0}; the status page does not serve without keys no one can guess\n  hint: this is a kernel or sandbox problem (a seccomp filter refusing getrandom?); `pilotd snooze` and `resume` still work"
    )]
    Random(String),
}

/// Who may hold what: TCP tells no uid, so the total and a short deadline are what keep idle
/// clients from holding more than 32 of pilotd's descriptors; a browser sends its request at
/// once and takes a page of a few KiB.
pub const LIMITS: Limits = Limits {
    total: 32,
    per_peer: 32,
    deadline: Duration::from_secs(5),
};

/// One-time keys and sessions, shared by the control socket (which hands out keys) and the
/// page (which trades them for sessions).
#[derive(Debug, Clone, Default)]
pub struct Doors(Arc<Mutex<DoorState>>);

#[derive(Debug, Default)]
struct DoorState {
    /// key → (who, valid until)
    keys: HashMap<String, (String, Instant)>,
    /// session id → session
    sessions: HashMap<String, Session>,
}

#[derive(Debug, Clone)]
struct Session {
    who: String,
    csrf: String,
    until: Instant,
}

impl Doors {
    /// A new one-time key for `who`.
    pub fn new_key(&self, who: &str, now: Instant) -> Result<String, PageError> {
        let key = random_hex()?;
        if let Ok(mut d) = self.0.lock() {
            d.keys.retain(|_, (_, until)| *until > now);
            d.keys
                .insert(key.clone(), (who.to_string(), now + KEY_LIFE));
        }
        Ok(key)
    }

    /// Trades a valid key (once) for a new session: (session id, who).
    fn redeem(&self, key: &str, now: Instant) -> Result<Option<(String, String)>, PageError> {
        let (sid, csrf) = (random_hex()?, random_hex()?);
        let Ok(mut d) = self.0.lock() else {
            return Ok(None);
        };
        let Some((who, until)) = d.keys.remove(key) else {
            return Ok(None);
        };
        if until <= now {
            return Ok(None);
        }
        d.sessions.retain(|_, s| s.until > now);
        d.sessions.insert(
            sid.clone(),
            Session {
                who: who.clone(),
                csrf,
                until: now + SESSION_LIFE,
            },
        );
        Ok(Some((sid, who)))
    }

    fn session(&self, sid: &str, now: Instant) -> Option<Session> {
        let d = self.0.lock().ok()?;
        d.sessions.get(sid).filter(|s| s.until > now).cloned()
    }
}

/// 32 bytes from the kernel's CSPRNG, as hex; never anything weaker: a key, session id or
/// CSRF token someone could predict would open the owner's controls to them.
fn random_hex() -> Result<String, PageError> {
    hex_from(getrandom::getrandom)
}

fn hex_from(
    fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
) -> Result<String, PageError> {
    let mut b = [0u8; 32];
    fill(&mut b).map_err(|e| PageError::Random(e.to_string()))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Binds the page's port, once the kernel's random generator has answered: a page that could
/// not make keys is not served at all.
pub async fn bind(port: u16) -> Result<TcpListener, PageError> {
    random_hex()?;
    TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| PageError::Bind { port, source })
}

/// Serves the page until `shutdown` completes; `wake` starts an urgent cycle after a press.
pub async fn serve(
    listener: TcpListener,
    port: u16,
    ctx: watch::Receiver<Context>,
    wake: mpsc::Sender<()>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    listener::serve("status page", listener, LIMITS, shutdown, move |sock, _| {
        let ctx = ctx.borrow().clone();
        let wake = wake.clone();
        async move { respond(sock, port, &ctx, &wake).await }
    })
    .await
}

/// A request as far as the page needs it.
#[derive(Debug, Default)]
struct HttpRequest {
    method: String,
    path: String,
    query: HashMap<String, String>,
    headers: HashMap<String, String>,
    form: HashMap<String, String>,
}

async fn read_request(sock: &mut TcpStream) -> Option<HttpRequest> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 2048];
    let head_end = loop {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_REQUEST {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if length > MAX_REQUEST {
        return None;
    }
    while buf.len() < head_end + length {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = &buf[head_end..(head_end + length).min(buf.len())];
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    Some(HttpRequest {
        method,
        path: path.to_string(),
        query: form_decode(query.as_bytes()),
        headers,
        form: form_decode(body),
    })
}

fn form_decode(b: &[u8]) -> HashMap<String, String> {
    String::from_utf8_lossy(b)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (unescape(k), unescape(v)))
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                // Bytes, not a str slice: a multi-byte character there must not panic.
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            x => out.push(x),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

struct Response {
    status: &'static str,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn html(status: &'static str, body: String) -> Response {
        Response {
            status,
            headers: vec![],
            body,
        }
    }
    fn redirect(to: &str) -> Response {
        Response {
            status: "303 See Other",
            headers: vec![("location".into(), to.into())],
            body: String::new(),
        }
    }
}

async fn respond(mut sock: TcpStream, port: u16, ctx: &Context, wake: &mpsc::Sender<()>) {
    let Some(req) = read_request(&mut sock).await else {
        return;
    };
    let resp = decide(&req, port, ctx, wake, Instant::now(), Utc::now());
    let mut out = format!(
        "HTTP/1.1 {}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nx-frame-options: DENY\r\ncontent-security-policy: default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'none'; form-action 'self'; frame-ancestors 'none'\r\nreferrer-policy: same-origin\r\nconnection: close\r\n",
        resp.status,
        resp.body.len()
    );
    for (k, v) in &resp.headers {
        let _ = write!(out, "{k}: {v}\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&resp.body);
    let _ = sock.write_all(out.as_bytes()).await;
    let _ = sock.shutdown().await;
}

fn cookie(req: &HttpRequest) -> Option<String> {
    req.headers.get("cookie").and_then(|c| {
        c.split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)
            .map(|(_, v)| v.to_string())
    })
}

/// Whether a request comes from this page (not another site): its Origin, when sent, is this
/// listener, and Sec-Fetch-Site, when sent, says same-origin.
fn same_origin(req: &HttpRequest, port: u16) -> bool {
    let ours = [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ];
    let origin_ok = req
        .headers
        .get("origin")
        .is_none_or(|o| ours.iter().any(|x| x == o));
    let site_ok = req
        .headers
        .get("sec-fetch-site")
        .is_none_or(|s| s == "same-origin" || s == "none");
    origin_ok && site_ok
}

fn decide(
    req: &HttpRequest,
    port: u16,
    ctx: &Context,
    wake: &mpsc::Sender<()>,
    now: Instant,
    wall: DateTime<Utc>,
) -> Response {
    // DNS rebinding: a foreign name resolving to 127.0.0.1 does not get this page.
    let host_ok = req
        .headers
        .get("host")
        .is_some_and(|h| *h == format!("127.0.0.1:{port}") || *h == format!("localhost:{port}"));
    if !host_ok {
        return Response::html(
            "421 Misdirected Request",
            page_shell("pilotd", "<p>This page answers only at 127.0.0.1.</p>"),
        );
    }
    let session = cookie(req).and_then(|sid| ctx.doors.session(&sid, now));
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/") if req.query.contains_key("key") => {
            match ctx.doors.redeem(&req.query["key"], now) {
                Err(e) => {
                    tracing::error!("{e}");
                    Response::html(
                        "503 Service Unavailable",
                        page_shell("pilotd", &format!("<p>{}</p>", esc(&e.to_string()))),
                    )
                }
                Ok(Some((sid, _))) => {
                    let mut r = Response::redirect("/");
                    r.headers.push((
                        "set-cookie".into(),
                        format!(
                            "{COOKIE}={sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
                            SESSION_LIFE.as_secs()
                        ),
                    ));
                    r
                }
                Ok(None) => Response::html("403 Forbidden", locked("That key is used or expired.")),
            }
        }
        ("GET", "/") => match session {
            Some(s) => Response::html("200 OK", render(ctx, &s, wall)),
            None => Response::html("401 Unauthorized", locked("")),
        },
        ("POST", "/snooze") | ("POST", "/resume") => {
            let Some(s) = session else {
                return Response::html("401 Unauthorized", locked(""));
            };
            // (Referrer-Policy is same-origin, not no-referrer: with no-referrer a browser
            // sends `Origin: null` on its own form posts.)
            if !same_origin(req, port) || req.form.get("csrf") != Some(&s.csrf) {
                tracing::warn!(
                    origin = req.headers.get("origin").map(String::as_str).unwrap_or("-"),
                    sec_fetch_site = req
                        .headers
                        .get("sec-fetch-site")
                        .map(String::as_str)
                        .unwrap_or("-"),
                    csrf_ok = req.form.get("csrf") == Some(&s.csrf),
                    "status page: a {} refused as cross-site",
                    req.path
                );
                return Response::html(
                    "403 Forbidden",
                    page_shell(
                        "pilotd: refused",
                        "<p>Refused: this request did not come from this page.</p>",
                    ),
                );
            }
            let command = if req.path == "/snooze" {
                let hours: u64 = req
                    .form
                    .get("hours")
                    .and_then(|h| h.parse().ok())
                    .unwrap_or(1);
                Request::Snooze {
                    seconds: hours.saturating_mul(3600),
                }
            } else {
                Request::Resume
            };
            let reply =
                control::carry_out(&command, &format!("{} (status page)", s.who), ctx, wall);
            if reply.ok {
                tracing::info!("{}", reply.message);
                let _ = wake.try_send(());
                Response::redirect("/")
            } else {
                Response::html(
                    "400 Bad Request",
                    page_shell("pilotd", &format!("<p>{}</p>", esc(&reply.message))),
                )
            }
        }
        _ => Response::html("404 Not Found", page_shell("pilotd", "<p>Not here.</p>")),
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn locked(why: &str) -> String {
    page_shell(
        "pilotd",
        &format!(
            "<h1>pilotd</h1><p>{}</p><p>To see this machine's page, run <code>pilotd open</code> as its owner: it opens this page with a key only you can get.</p>",
            esc(why)
        ),
    )
}

fn page_shell(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
<style>body{{font-family:sans-serif;max-width:62em;margin:1em auto;padding:0 1em;color:#222}}\
table{{border-collapse:collapse}}td,th{{padding:2px 6px;font-size:90%}}\
.grid td{{width:0.9em;height:1.1em;padding:0}}.c{{background:#2a7}}.g{{background:#ec5}}.o{{background:#eee}}\
.verdict{{font-size:130%;font-weight:bold}}.snoozed{{background:#fde;padding:0.4em}}\
button{{font-size:110%;margin-right:0.5em}}</style></head><body>{}</body></html>",
        esc(title),
        body
    )
}

/// The page for a signed-in owner, from the daemon's status file, the snooze, the learned
/// history and the policy.
fn render(ctx: &Context, s: &Session, now: DateTime<Utc>) -> String {
    let tz = &ctx.policy.timezone;
    let local = |t: DateTime<Utc>| t.with_timezone(tz).format("%a %H:%M").to_string();
    let st = status::load(&status::path(&ctx.state_dir))
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut b = String::new();
    let _ = write!(b, "<h1>pilotd on this machine</h1>");
    match snooze::active(&ctx.state_dir, now) {
        Ok(Some(z)) => {
            let _ = write!(
                b,
                "<p class=\"snoozed\" id=\"snooze\">Snoozed by {} until {}.</p>",
                esc(&z.by),
                esc(&local(z.until))
            );
        }
        Ok(None) => {}
        Err(e) => {
            let _ = write!(
                b,
                "<p class=\"snoozed\" id=\"snooze\">Snoozed: {}; counted as snoozed until it can be read (Resume removes it).</p>",
                esc(&e.to_string())
            );
        }
    }
    match &st.decision {
        Some(d) => {
            let verdict = if d.allowed {
                format!(
                    "Computing: {} worker(s) of {} CPU, {} MiB",
                    d.workers, d.cpus, d.memory_mib
                )
            } else {
                "Not computing now".to_string()
            };
            let _ = write!(
                b,
                "<p class=\"verdict\" id=\"decision\">{}</p><ul id=\"reasons\">",
                esc(&verdict)
            );
            for r in d.reasons.iter().chain(&d.notes) {
                let _ = write!(b, "<li>{}</li>", esc(r));
            }
            let _ = write!(b, "</ul><p>Decided {}.</p>", esc(&local(d.at)));
        }
        None => {
            let _ = write!(b, "<p id=\"decision\">No decision yet.</p>");
        }
    }
    // The buttons: plain forms with the session's CSRF token.
    let _ = write!(
        b,
        "<form method=\"post\" action=\"/snooze\" style=\"display:inline\"><input type=\"hidden\" name=\"csrf\" value=\"{c}\">\
<select name=\"hours\"><option value=\"1\">1 hour</option><option value=\"3\">3 hours</option><option value=\"24\">1 day</option></select> \
<button id=\"snooze-button\" type=\"submit\">Snooze</button></form>\
<form method=\"post\" action=\"/resume\" style=\"display:inline\"><input type=\"hidden\" name=\"csrf\" value=\"{c}\">\
<button id=\"resume-button\" type=\"submit\">Resume</button></form>\
<p><small>Signed in as {w}. Snooze: no worker starts, running ones are handled as your policy's on_return says.</small></p>",
        c = esc(&s.csrf),
        w = esc(&s.who)
    );

    let _ = write!(b, "<h2>Workers</h2>");
    match &st.workers {
        None => {
            let _ = write!(
                b,
                "<p id=\"workers\">Unknown (the engine did not answer).</p>"
            );
        }
        Some(list) if list.is_empty() => {
            let _ = write!(b, "<p id=\"workers\">None.</p>");
        }
        Some(list) => {
            let _ = write!(
                b,
                "<table id=\"workers\"><tr><th>worker</th><th>state</th><th>since</th><th>gone by</th><th>scratch</th></tr>"
            );
            for w in list {
                let _ = write!(
                    b,
                    "<tr><td>{}</td><td>{:?}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&w.name),
                    w.state,
                    w.created.map(local).unwrap_or_default(),
                    w.die_at.map(local).unwrap_or_default(),
                    st.scratch_use
                        .get(&w.id)
                        .map(|u| esc(&u.describe(w.disk_kib)))
                        .unwrap_or_else(|| "not measured yet".into())
                );
            }
            let _ = write!(b, "</table>");
        }
    }

    // The week, as `pilotd schedule` draws it: one cell per half hour.
    let _ = write!(
        b,
        "<h2>The week</h2><table class=\"grid\" id=\"schedule\"><tr><th></th>"
    );
    for h in 0..24 {
        let _ = write!(
            b,
            "<th colspan=\"2\">{}</th>",
            if h % 3 == 0 {
                format!("{h:02}")
            } else {
                String::new()
            }
        );
    }
    let _ = write!(b, "</tr>");
    let today = now.with_timezone(tz).date_naive();
    for day in 0..7 {
        let date = today + ChronoDuration::days(day);
        let _ = write!(b, "<tr><th>{}</th>", date.format("%a %d"));
        for half in 0..48 {
            let t = date
                .and_hms_opt(half / 2, (half % 2) * 30, 0)
                .and_then(|n| n.and_local_timezone(tz.clone()).earliest())
                .map(|t| t.with_timezone(&Utc));
            let class = match t.map(|t| cell_at(&ctx.policy, t)) {
                Some(Cell::Compute) => "c",
                Some(Cell::Guard) => "g",
                _ => "o",
            };
            let _ = write!(b, "<td class=\"{class}\"></td>");
        }
        let _ = write!(b, "</tr>");
    }
    let _ = write!(
        b,
        "</table><p><small><span class=\"c\">&nbsp;&nbsp;</span> computes &nbsp;<span class=\"g\">&nbsp;&nbsp;</span> workers leaving &nbsp;<span class=\"o\">&nbsp;&nbsp;</span> yours</small></p>"
    );

    // What the daemon learned: the share of each hour of the week the host was free.
    let learned = history::peek(&ctx.state_dir, tz).history;
    let _ = write!(b, "<h2>Learned availability</h2>");
    match learned.overall() {
        None => {
            let _ = write!(b, "<p id=\"learned\">Nothing learned yet.</p>");
        }
        Some(all) => {
            let _ = write!(
                b,
                "<p id=\"learned\">Free {:.0}% of the watched time. By hour (Monday first):</p><table class=\"grid\">",
                all * 100.0
            );
            for day in 0..7 {
                let _ = write!(b, "<tr>");
                for hour in 0..24 {
                    let f = learned.free_fraction(day * 24 + hour);
                    let _ = write!(
                        b,
                        "<td title=\"{}\" style=\"background:{}\"></td>",
                        f.map(|f| format!("{:.0}% free", f * 100.0))
                            .unwrap_or_else(|| "not watched".into()),
                        f.map(|f| format!("rgba(34,170,119,{f:.2})"))
                            .unwrap_or_else(|| "#fff".into())
                    );
                }
                let _ = write!(b, "</tr>");
            }
            let _ = write!(b, "</table>");
        }
    }

    let _ = write!(b, "<h2>Recent outcomes</h2>");
    if st.outcomes.is_empty() {
        let _ = write!(b, "<p id=\"outcomes\">None yet.</p>");
    } else {
        let _ = write!(b, "<ul id=\"outcomes\">");
        for o in st.outcomes.iter().rev().take(10) {
            let _ = write!(
                b,
                "<li>{} {}: {}</li>",
                esc(&local(o.at)),
                esc(&o.name),
                esc(&o.outcome.to_string())
            );
        }
        let _ = write!(b, "</ul>");
    }
    // JavaScript only refreshes; everything above works without it.
    let _ = write!(
        b,
        "<script>setTimeout(function(){{location.reload()}},10000)</script>"
    );
    page_shell("pilotd", &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, path: &str, headers: &[(&str, &str)]) -> HttpRequest {
        HttpRequest {
            method: method.into(),
            path: path.into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn cross_site_requests_are_told_apart() {
        let p = 8466;
        let ok = [
            req("POST", "/snooze", &[]),
            req(
                "POST",
                "/snooze",
                &[
                    ("origin", "http://127.0.0.1:8466"),
                    ("sec-fetch-site", "same-origin"),
                ],
            ),
        ];
        for r in ok {
            assert!(same_origin(&r, p), "{r:?}");
        }
        let refused = [
            req("POST", "/snooze", &[("origin", "http://evil.example")]),
            req("POST", "/snooze", &[("origin", "http://127.0.0.1:9999")]),
            req("POST", "/snooze", &[("sec-fetch-site", "cross-site")]),
            req("POST", "/snooze", &[("sec-fetch-site", "same-site")]),
        ];
        for r in refused {
            assert!(!same_origin(&r, p), "{r:?}");
        }
    }

    /// A page on port 8466 with a state dir of its own, and an owner's session on it: the
    /// cookie the key was traded for and the CSRF token its page carries.
    struct Signed {
        _dir: tempfile::TempDir,
        ctx: Context,
        wake: (mpsc::Sender<()>, mpsc::Receiver<()>),
        set_cookie: String,
        sid: String,
        csrf: String,
    }

    const PORT: u16 = 8466;

    fn signed_in() -> Signed {
        let dir = tempfile::tempdir().unwrap();
        let ctx = Context {
            state_dir: dir.path().to_path_buf(),
            policy: crate::config::Policy::defaults(crate::zone::Zone::utc()),
            page_port: Some(PORT),
            doors: Doors::default(),
        };
        let wake = mpsc::channel(1);
        let key = ctx.doors.new_key("alice", Instant::now()).unwrap();
        let mut get = req("GET", "/", &[("host", "127.0.0.1:8466")]);
        get.query.insert("key".into(), key);
        let r = decide(&get, PORT, &ctx, &wake.0, Instant::now(), Utc::now());
        assert_eq!(r.status, "303 See Other");
        let set_cookie = r
            .headers
            .iter()
            .find(|(k, _)| k == "set-cookie")
            .map(|(_, v)| v.clone())
            .expect("a session cookie");
        let sid = set_cookie
            .split(';')
            .next()
            .and_then(|kv| kv.strip_prefix("pilotd_session="))
            .unwrap()
            .to_string();
        let csrf = ctx.doors.session(&sid, Instant::now()).unwrap().csrf;
        Signed {
            _dir: dir,
            ctx,
            wake,
            set_cookie,
            sid,
            csrf,
        }
    }

    impl Signed {
        /// A snooze pressed on this page, as the browser sends it; `change` spoils one point.
        fn snooze(&mut self, change: impl FnOnce(&mut HttpRequest)) -> Response {
            let cookie = format!("pilotd_session={}", self.sid);
            let mut r = req(
                "POST",
                "/snooze",
                &[
                    ("host", "127.0.0.1:8466"),
                    ("cookie", &cookie),
                    ("origin", "http://127.0.0.1:8466"),
                    ("sec-fetch-site", "same-origin"),
                ],
            );
            r.form.insert("hours".into(), "1".into());
            r.form.insert("csrf".into(), self.csrf.clone());
            change(&mut r);
            decide(
                &r,
                PORT,
                &self.ctx,
                &self.wake.0,
                Instant::now(),
                Utc::now(),
            )
        }

        fn snoozed(&self) -> bool {
            snooze::active(&self.ctx.state_dir, Utc::now())
                .unwrap()
                .is_some()
        }
    }

    /// Each worker's measured scratch against its share, as `pilotd status` shows it; a
    /// worker not measured yet says so instead of an empty cell.
    #[test]
    fn the_workers_table_shows_each_scratch_against_its_share() {
        use crate::volunteer::disk::ScratchUse;
        use crate::volunteer::worker::{Worker, WorkerState};
        let s = signed_in();
        let worker = |id: &str| Worker {
            disk_kib: Some(1024 * 1024),
            ..Worker::test(id, WorkerState::Running)
        };
        let mut st = status::Status {
            workers: Some(vec![worker("a"), worker("b")]),
            ..Default::default()
        };
        st.scratch_use.insert(
            "a".into(),
            ScratchUse {
                used_kib: 12 * 1024,
                full: false,
            },
        );
        status::save(&status::path(&s.ctx.state_dir), &st).unwrap();
        let session = s.ctx.doors.session(&s.sid, Instant::now()).unwrap();
        let html = render(&s.ctx, &session, Utc::now());
        assert!(html.contains("<th>scratch</th>"), "{html}");
        assert!(
            html.contains(
                "<td>pilotd-t-a</td><td>Running</td><td></td><td></td><td>12MiB of 1GiB</td>"
            ),
            "{html}"
        );
        assert!(
            html.contains(
                "<td>pilotd-t-b</td><td>Running</td><td></td><td></td><td>not measured yet</td>"
            ),
            "{html}"
        );
    }

    /// With a valid session, each cross-site sign alone refuses the press: a foreign Origin,
    /// a cross-site Sec-Fetch-Site, a missing or a wrong CSRF token. The same request without
    /// the spoiled point snoozes, so each refusal comes from the point under test.
    #[test]
    fn a_valid_session_is_refused_for_each_cross_site_sign_alone() {
        type Spoil = fn(&mut HttpRequest);
        let spoils: [(&str, Spoil); 5] = [
            ("a foreign Origin", |r| {
                r.headers
                    .insert("origin".into(), "http://evil.example".into());
            }),
            ("this page's Origin on another port", |r| {
                r.headers
                    .insert("origin".into(), "http://127.0.0.1:9999".into());
            }),
            ("Sec-Fetch-Site: cross-site", |r| {
                r.headers
                    .insert("sec-fetch-site".into(), "cross-site".into());
            }),
            ("no CSRF token", |r| {
                r.form.remove("csrf");
            }),
            ("a wrong CSRF token", |r| {
                r.form.insert("csrf".into(), "0".repeat(64));
            }),
        ];
        for (what, spoil) in spoils {
            let mut s = signed_in();
            let r = s.snooze(spoil);
            assert_eq!(r.status, "403 Forbidden", "{what}");
            assert!(r.body.contains("did not come from this page"), "{what}");
            assert!(!s.snoozed(), "{what}: nothing recorded");
            assert!(s.wake.1.try_recv().is_err(), "{what}: no cycle woken");
            // The control: the same session, the same request, unspoiled.
            let r = s.snooze(|_| {});
            assert_eq!(r.status, "303 See Other", "{what}: control");
            assert!(s.snoozed(), "{what}: control snoozes");
            assert!(s.wake.1.try_recv().is_ok(), "{what}: control wakes a cycle");
        }
        // Another session's token is a wrong token too.
        let mut a = signed_in();
        let b = signed_in();
        let r = a.snooze(|r| {
            r.form.insert("csrf".into(), b.csrf.clone());
        });
        assert_eq!(r.status, "403 Forbidden");
    }

    /// The session cookie: not readable by scripts, never sent by another site, for the whole
    /// page, host-only (no Domain: a cookie for 127.0.0.1 alone), and as long as the session.
    /// No Secure: the page is plain HTTP on loopback, where a Secure cookie is not one a
    /// browser must send back.
    #[test]
    fn the_session_cookie_carries_its_flags() {
        let s = signed_in();
        let mut parts = s.set_cookie.split(';').map(str::trim);
        let first = parts.next().unwrap();
        assert_eq!(first, format!("pilotd_session={}", s.sid));
        assert_eq!(s.sid.len(), 64, "a 256-bit random id");
        let attrs: Vec<String> = parts.map(|p| p.to_ascii_lowercase()).collect();
        let has = |a: &str| attrs.iter().any(|x| x == a);
        assert!(has("httponly"), "{attrs:?}");
        assert!(has("samesite=strict"), "{attrs:?}");
        assert!(has("path=/"), "{attrs:?}");
        assert!(
            has(&format!("max-age={}", SESSION_LIFE.as_secs())),
            "{attrs:?}"
        );
        assert!(
            !attrs.iter().any(|x| x.starts_with("domain")),
            "host-only: {attrs:?}"
        );
        assert!(!has("secure"), "plain HTTP on loopback: {attrs:?}");
        assert_eq!(attrs.len(), 4, "nothing else: {attrs:?}");
    }

    /// Keys come from the kernel's CSPRNG, never from a fallback: a generator that fails is an
    /// error the page shows, not 64 zeros.
    #[test]
    fn keys_are_random_or_refused() {
        let (a, b) = (random_hex().unwrap(), random_hex().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert_ne!(a, "0".repeat(64));
        let e = hex_from(|_| Err(getrandom::Error::UNSUPPORTED)).unwrap_err();
        assert!(e.to_string().contains("random generator"), "{e}");
        let d = Doors::default();
        let k = d.new_key("alice", Instant::now()).unwrap();
        assert_ne!(k, d.new_key("alice", Instant::now()).unwrap());
    }

    #[test]
    fn keys_are_good_once_and_briefly() {
        let d = Doors::default();
        let t0 = Instant::now();
        let k = d.new_key("alice", t0).unwrap();
        let (sid, who) = d.redeem(&k, t0).unwrap().unwrap();
        assert_eq!(who, "alice");
        assert!(d.redeem(&k, t0).unwrap().is_none(), "once");
        assert!(d.session(&sid, t0).is_some());
        assert!(d.session(&sid, t0 + SESSION_LIFE).is_none());
        let late = d.new_key("alice", t0).unwrap();
        assert!(d.redeem(&late, t0 + KEY_LIFE).unwrap().is_none(), "briefly");
        assert_eq!(unescape("a%3Ab+c%2"), "a:b c%2");
    }
}
