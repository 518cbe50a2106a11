//! The page over HTTP: its listener and limits, the routes (`/open` lets an invited uid's
//! browser in; `/` shows the page to a session; POST `/snooze` and `/resume` press the
//! buttons), the checks that refuse forged requests (Host, Origin, Sec-Fetch-Site, CSRF
//! token, and the uid of the connection), and the headers every answer carries. Served
//! through `service::http`, as the metrics are; its listener tells each connection's uid
//! (`service::loopback`).

use super::keys::{Doors, INVITATION_LIFE, KeyError, random_hex, session_cookie};
use super::markup::esc;
use super::render::{locked, page_shell, render};
use crate::owner::request::{self, Context, Request};
use chrono::{DateTime, Utc};
use pilotd_core::service::http::{self, Request as HttpRequest, Response};
use pilotd_core::service::listener::{Limits, Peer};
use pilotd_core::service::loopback::LoopbackListener;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

#[derive(Debug, thiserror::Error)]
pub(crate) enum PageError {
    #[error(
        "cannot serve the status page on 127.0.0.1:{port}: {source}\n  hint: another program uses the port; choose another under [page] in pilotd.toml"
    )]
    Bind { port: u16, source: std::io::Error },
    /// No keys, no page.
    #[error(transparent)]
    Keys(#[from] KeyError),
}

impl PageError {
    /// Why the page is not served, in a few words (for `pilotd open`'s refusal).
    pub(crate) fn cause(&self) -> String {
        match self {
            PageError::Bind { source, .. } => source.to_string(),
            PageError::Keys(e) => e.to_string(),
        }
    }
}

/// Who may hold what: 32 connections at most, 24 of them one uid's (the listener tells it),
/// so a user holding all it can leaves the owner's browser 8; and a short deadline: a browser
/// sends its request at once and takes a page of a few KiB.
pub(crate) const LIMITS: Limits = Limits {
    total: 32,
    per_peer: 24,
    deadline: Duration::from_secs(5),
};

/// Sent with every answer: never cached, never framed, no script or style from elsewhere,
/// forms only to this page, and no address leaked to another site.
const GUARDS: [(&str, &str); 4] = [
    ("cache-control", "no-store"),
    ("x-frame-options", "DENY"),
    (
        "content-security-policy",
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("referrer-policy", "same-origin"),
];

/// Binds the page's port, once the kernel's random generator has answered: a page that could
/// not make keys is not served at all.
pub(crate) async fn bind(port: u16) -> Result<TcpListener, PageError> {
    random_hex()?;
    TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| PageError::Bind { port, source })
}

/// Serves the page until `shutdown` completes; `doors` are the invitations the control
/// socket hands out and the sessions they open, `wake` starts an urgent cycle after a press.
pub(crate) async fn serve(
    listener: TcpListener,
    port: u16,
    doors: Doors,
    ctx: watch::Receiver<Context>,
    wake: mpsc::Sender<()>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let page = Page { port, doors, wake };
    let listener = LoopbackListener(listener);
    http::serve(
        "status page",
        listener,
        LIMITS,
        shutdown,
        move |req, peer| {
            let ctx = ctx.borrow().clone();
            let uid = match peer {
                Peer::Uid(uid) => Some(uid),
                Peer::Unknown => None,
            };
            let mut r = page.decide(req, uid, &ctx, Instant::now(), Utc::now());
            let guards = GUARDS.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            r.headers.splice(0..0, guards);
            r
        },
    )
    .await
}

fn html(status: &'static str, body: String) -> Response {
    Response::new(status, "text/html; charset=utf-8", body)
}

/// A short page that says `words` (escaped) and nothing else.
fn said(status: &'static str, words: &str) -> Response {
    html(
        status,
        page_shell("pilotd", &format!("<p>{}</p>", esc(words))),
    )
}

fn redirect(to: &str) -> Response {
    let mut r = html("303 See Other", String::new());
    r.headers.push(("location".into(), to.into()));
    r
}

/// What the page answers with: its port (the one Host and Origin it accepts), its invitations
/// and sessions, and the loop a press wakes.
struct Page {
    port: u16,
    doors: Doors,
    wake: mpsc::Sender<()>,
}

/// The names this listener answers to (`Host`): a foreign name resolving to 127.0.0.1 is
/// not one of them (DNS rebinding).
fn ours(host: &str, port: u16) -> bool {
    host == format!("127.0.0.1:{port}") || host == format!("localhost:{port}")
}

/// Whether a request comes from this page (not another site): its Origin, when sent, is this
/// listener, and Sec-Fetch-Site, when sent, says same-origin.
fn same_origin(req: &HttpRequest, port: u16) -> bool {
    let origin_ok = req.headers.get("origin").is_none_or(|o| {
        o.strip_prefix("http://")
            .is_some_and(|host| ours(host, port))
    });
    origin_ok && user_started(req)
}

/// Whether a navigation to `/open` may use an invitation: one the user started (an address
/// opened or typed: `Sec-Fetch-Site: none`), or from this page; never one another site
/// started, which could use up the owner's invitation.
fn user_started(req: &HttpRequest) -> bool {
    req.headers
        .get("sec-fetch-site")
        .is_none_or(|s| s == "none" || s == "same-origin")
}

/// A uid as the user database names it.
fn user_name(uid: u32) -> String {
    request::Peer::named(uid, vec![]).label()
}

impl Page {
    /// The answer to one request that came on a connection of `uid` (None: not known); `now`
    /// for invitations and sessions, `wall` for the snooze.
    fn decide(
        &self,
        req: &HttpRequest,
        uid: Option<u32>,
        ctx: &Context,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> Response {
        let port = self.port;
        if !req.headers.get("host").is_some_and(|h| ours(h, port)) {
            return said(
                "421 Misdirected Request",
                "This page answers only at 127.0.0.1.",
            );
        }
        let session = self.doors.session_of(req, port, uid, now);
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/open") if session.is_some() => redirect("/"),
            ("GET", "/open") => {
                let Some(uid) = uid else {
                    return html(
                        "403 Forbidden",
                        locked(
                            "pilotd cannot tell which user this browser runs as, so it lets no one in from it.",
                        ),
                    );
                };
                if !user_started(req) {
                    return html(
                        "403 Forbidden",
                        locked(
                            "Another site sent the browser here; open this page with pilotd open.",
                        ),
                    );
                }
                match self.doors.admit(uid, now) {
                    Err(e) => {
                        tracing::error!("{e}");
                        said("503 Service Unavailable", &e.to_string())
                    }
                    Ok(Some(sid)) => {
                        let mut r = redirect("/");
                        r.headers
                            .push(("set-cookie".into(), session_cookie(&sid, port)));
                        r
                    }
                    Ok(None) => {
                        let (name, minutes) = (user_name(uid), INVITATION_LIFE.as_secs() / 60);
                        tracing::info!(
                            uid,
                            "status page: a browser of {name} came to /open uninvited"
                        );
                        html(
                            "403 Forbidden",
                            locked(&format!(
                                "This browser runs as {name}, and pilotd open was not run as {name} in the last {minutes} minutes (or its browser came in already): it lets in a browser of the user who runs it, once."
                            )),
                        )
                    }
                }
            }
            ("GET", "/") => match session {
                Some(s) => html("200 OK", render(ctx, &s, wall)),
                None => html("401 Unauthorized", locked("")),
            },
            ("POST", "/snooze") | ("POST", "/resume") => {
                let Some(s) = session else {
                    return html("401 Unauthorized", locked(""));
                };
                // (Referrer-Policy is same-origin, not no-referrer: with no-referrer a browser
                // sends `Origin: null` on its own form posts.)
                if !same_origin(req, port) || req.form.get("csrf") != Some(&s.csrf) {
                    let header = |k: &str| req.headers.get(k).map_or("-", String::as_str);
                    tracing::warn!(
                        origin = header("origin"),
                        sec_fetch_site = header("sec-fetch-site"),
                        csrf_ok = req.form.get("csrf") == Some(&s.csrf),
                        "status page: a {} refused as cross-site",
                        req.path
                    );
                    return html(
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
                let reply = request::carry_out(
                    &command,
                    &format!("{} (status page)", s.who),
                    s.uid,
                    ctx,
                    wall,
                );
                if reply.ok {
                    tracing::info!("{}", reply.message);
                    let _ = self.wake.try_send(());
                    redirect("/")
                } else {
                    said("400 Bad Request", &reply.message)
                }
            }
            _ => said("404 Not Found", "Not here."),
        }
    }
}

#[cfg(test)]
mod tests;
