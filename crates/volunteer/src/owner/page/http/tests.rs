//! Tests of the page's routes and checks, on `Page::decide` as a browser's requests reach it,
//! and of the headers a served answer carries.

use super::*;
use crate::owner::page::keys::SESSION_LIFE;
use crate::owner::request::Invitations;
use crate::record::snooze;

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
/// cookie alice's browser (uid 1000) got at `/open` and the CSRF token its page carries.
struct Signed {
    _dir: tempfile::TempDir,
    ctx: Context,
    page: Page,
    /// What a press wakes.
    woken: mpsc::Receiver<()>,
    set_cookie: String,
    sid: String,
    csrf: String,
}

const PORT: u16 = 8466;
const ALICE: u32 = 1000;
const NOBODY: u32 = 65534;

/// A browser's navigation to `/open`, as one opened from `pilotd open` sends it.
fn open_request() -> HttpRequest {
    req(
        "GET",
        "/open",
        &[("host", "127.0.0.1:8466"), ("sec-fetch-site", "none")],
    )
}

fn set_cookie(r: &Response) -> Option<String> {
    r.headers
        .iter()
        .find(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.clone())
}

fn signed_in() -> Signed {
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context {
        state_dir: dir.path().to_path_buf(),
        policy: pilotd_core::config::Policy::defaults(pilotd_core::zone::Zone::utc()),
        page: None,
    };
    let (wake, woken) = mpsc::channel(1);
    let page = Page {
        port: PORT,
        doors: Doors::default(),
        wake,
    };
    page.doors.invite("alice", ALICE, Instant::now());
    let r = page.decide(
        &open_request(),
        Some(ALICE),
        &ctx,
        Instant::now(),
        Utc::now(),
    );
    assert_eq!(r.status, "303 See Other");
    let set_cookie = set_cookie(&r).expect("a session cookie");
    let sid = set_cookie
        .split(';')
        .next()
        .and_then(|kv| kv.strip_prefix("pilotd_session_8466="))
        .unwrap()
        .to_string();
    let csrf = page.doors.session(&sid, Instant::now()).unwrap().csrf;
    Signed {
        _dir: dir,
        ctx,
        page,
        woken,
        set_cookie,
        sid,
        csrf,
    }
}

impl Signed {
    /// A snooze pressed on this page, as alice's browser sends it; `change` spoils one point.
    fn snooze(&mut self, change: impl FnOnce(&mut HttpRequest)) -> Response {
        self.snooze_as(ALICE, change)
    }

    /// A snooze pressed with this session's cookie and token on a connection of `uid`.
    fn snooze_as(&mut self, uid: u32, change: impl FnOnce(&mut HttpRequest)) -> Response {
        let cookie = format!("pilotd_session_8466={}", self.sid);
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
        self.page
            .decide(&r, Some(uid), &self.ctx, Instant::now(), Utc::now())
    }

    /// The page itself, with this session's cookie, on a connection of `uid` (None: unknown).
    fn get(&self, uid: Option<u32>) -> Response {
        let cookie = format!("pilotd_session_8466={}", self.sid);
        let r = req(
            "GET",
            "/",
            &[("host", "127.0.0.1:8466"), ("cookie", &cookie)],
        );
        self.page
            .decide(&r, uid, &self.ctx, Instant::now(), Utc::now())
    }

    fn snoozed(&self) -> bool {
        snooze::active(&self.ctx.state_dir, Utc::now())
            .unwrap()
            .is_some()
    }
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
        assert!(s.woken.try_recv().is_err(), "{what}: no cycle woken");
        // The control: the same session, the same request, unspoiled.
        let r = s.snooze(|_| {});
        assert_eq!(r.status, "303 See Other", "{what}: control");
        assert!(s.snoozed(), "{what}: control snoozes");
        assert!(s.woken.try_recv().is_ok(), "{what}: control wakes a cycle");
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
    assert_eq!(
        first,
        format!("pilotd_session_8466={}", s.sid),
        "named for its port"
    );
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

/// A served answer carries the guard headers, the page's own ones after them, and the body
/// its length says; a request for another host is refused before anything else.
#[tokio::test]
async fn a_served_answer_carries_the_guards() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context {
        state_dir: dir.path().to_path_buf(),
        policy: pilotd_core::config::Policy::defaults(pilotd_core::zone::Zone::utc()),
        page: None,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_, ctx) = watch::channel(ctx);
    let (wake, _woken) = mpsc::channel(1);
    let stop = pilotd_core::service::listener::Stop::new();
    let server = tokio::spawn(serve(
        listener,
        port,
        Doors::default(),
        ctx,
        wake,
        stop.signal(),
    ));
    let get = |host: String| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let head = format!("GET /open HTTP/1.1\r\nHost: {host}\r\n\r\n");
        s.write_all(head.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    let out = get(format!("127.0.0.1:{port}")).await;
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let lines: Vec<&str> = head.split("\r\n").collect();
    assert_eq!(lines[0], "HTTP/1.1 403 Forbidden", "{out}");
    for (k, v) in GUARDS {
        assert!(
            lines.contains(&format!("{k}: {v}").as_str()),
            "{k} in {out}"
        );
    }
    assert!(lines.contains(&"content-type: text/html; charset=utf-8"));
    assert!(lines.contains(&format!("content-length: {}", body.len()).as_str()));
    // This process's uid, told by the listener, was not invited.
    let me = nix::unistd::geteuid().as_raw();
    assert!(
        body.contains(&format!("This browser runs as {}", user_name(me))),
        "{body}"
    );
    let out = get(format!("rebound.example:{port}")).await;
    assert!(out.starts_with("HTTP/1.1 421 Misdirected Request"), "{out}");
    assert!(!out.contains("This browser"), "{out}");
    stop.stop();
    server.await.unwrap();
}

/// `pilotd open` invites alice (uid 1000): her invitation lets no other uid in, and is not
/// used up by one; a connection whose uid is not known gets nothing; a navigation another
/// site started does not use it up; alice's own browser then gets in, once.
#[test]
fn an_invitation_lets_in_its_uid_alone() {
    let s = signed_in();
    let now = Instant::now();
    s.page.doors.invite("alice", ALICE, now);
    let decide = |r: &HttpRequest, uid| s.page.decide(r, uid, &s.ctx, now, Utc::now());
    for (what, uid) in [
        ("nobody", Some(NOBODY)),
        ("root", Some(0)),
        ("unknown", None),
    ] {
        let r = decide(&open_request(), uid);
        assert_eq!(r.status, "403 Forbidden", "{what}");
        assert!(set_cookie(&r).is_none(), "{what}: no session");
    }
    let mut cross = open_request();
    cross
        .headers
        .insert("sec-fetch-site".into(), "cross-site".into());
    let r = decide(&cross, Some(ALICE));
    assert_eq!(r.status, "403 Forbidden");
    assert!(
        r.body.contains("Another site sent the browser here"),
        "{}",
        r.body
    );
    // Still there for alice's own navigation; then used.
    let r = decide(&open_request(), Some(ALICE));
    assert_eq!(r.status, "303 See Other");
    assert!(set_cookie(&r).is_some());
    let r = decide(&open_request(), Some(ALICE));
    assert_eq!(r.status, "403 Forbidden", "once");
    assert!(r.body.contains("This browser runs as"), "{}", r.body);
}

/// Alice's session cookie, sent by her browser to another user's server on another port of
/// 127.0.0.1 and replayed from there, opens nothing: not the page, not a press; from alice's
/// own connection the same cookie and token work.
#[test]
fn a_session_serves_its_own_uid_alone() {
    let mut s = signed_in();
    for (what, uid) in [
        ("nobody", Some(NOBODY)),
        ("root", Some(0)),
        ("unknown", None),
    ] {
        let r = s.get(uid);
        assert_eq!(r.status, "401 Unauthorized", "{what}");
        assert!(!r.body.contains("Snooze"), "{what}: {}", r.body);
    }
    let r = s.snooze_as(NOBODY, |_| {});
    assert_eq!(r.status, "401 Unauthorized");
    assert!(!s.snoozed(), "nothing recorded");
    assert!(s.woken.try_recv().is_err(), "no cycle woken");
    assert_eq!(s.get(Some(ALICE)).status, "200 OK");
    assert_eq!(s.snooze(|_| {}).status, "303 See Other", "the control");
    assert!(s.snoozed());
}

/// The page shows the machine's sensors and the CPU cap in force with why, escaped, as
/// `pilotd status` says them; and nothing of them where the status has none.
#[test]
fn the_page_shows_the_machines_comfort() {
    let signed = signed_in();
    let body = signed.get(Some(ALICE)).body;
    assert!(!body.contains("id=\"comfort\""), "{body}");
    let status = serde_json::json!({
        "pid": 1, "updated_at": null, "instance": "x", "engine": null, "last_error": null,
        "decision": {
            "at": "2026-12-01T12:00:00Z", "allowed": true, "workers": 1, "cpus": 2,
            "memory_mib": 1024, "disk_kib": 1024, "gpus": 0, "accept_until": null,
            "die_at": null, "evict": "none", "reasons": [], "next_change": null,
            "cpu_cap": { "percent": 50, "per_worker_millicpus": 1000,
                         "causes": ["temperature"], "reason": "hot <&> loud" }
        },
        "owner_busy_since": null, "host_free_since": null, "own_cpu": 0.0, "workers": [],
        "backoff": { "failures": 0, "not_before": null, "last_outcome": null },
        "image": { "reference": "", "digest": null, "checked_at": null, "verified_at": null,
                   "last_error": null, "failures": 0, "retry_at": null },
        "pulled_images": [], "recorded": [], "outcomes": [], "last_actions": [], "notes": [],
        "temperature": { "sensor": "k10temp Tctl", "value": 81.0 }
    });
    std::fs::write(
        crate::record::status::path(&signed.ctx.state_dir),
        status.to_string(),
    )
    .unwrap();
    let body = signed.get(Some(ALICE)).body;
    assert!(
        body.contains(
            "<p id=\"comfort\">sensors: hottest CPU sensor 81°C (k10temp Tctl)<br>\
             CPU cap: 1 CPU a worker: hot &lt;&amp;&gt; loud</p>"
        ),
        "{body}"
    );
}
