//! The one HTTP/1.1 responder of pilotd's local web endpoints (the status page and the
//! metrics): one request per connection, bounded in size, answered with `connection: close`.
//! Both endpoints need nothing more, and every line here is code on someone else's machine,
//! so it stays this small instead of pulling in a web framework.
//!
//! It serves through [`listener::serve`]: each endpoint's [`Limits`] cap its connections,
//! drop a client that has not taken its answer by the deadline (slow or idle alike), and end
//! the server on shutdown. The endpoint only turns a [`Request`] into a [`Response`].

use super::listener::{self, Limits, Listener, Peer};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A request head, or a body, past this size is dropped unanswered: neither endpoint takes
/// more than a small form.
pub(crate) const MAX_REQUEST: usize = 16 * 1024;

/// A request as far as pilotd's endpoints need it.
#[derive(Debug, Default)]
pub struct Request {
    pub method: String,
    /// The target without its query.
    pub path: String,
    pub query: HashMap<String, String>,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    /// The body read as a URL-encoded form (the only body these endpoints take).
    pub form: HashMap<String, String>,
}

#[derive(Debug)]
pub struct Response {
    pub status: &'static str,
    pub content_type: &'static str,
    /// Sent after the content type, length and `connection: close`, in this order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn new(status: &'static str, content_type: &'static str, body: String) -> Response {
        Response {
            status,
            content_type,
            headers: vec![],
            body,
        }
    }

    /// The response as it goes on the wire.
    fn to_wire(&self) -> String {
        let mut out = format!(
            "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        for (k, v) in &self.headers {
            let _ = write!(out, "{k}: {v}\r\n");
        }
        out.push_str("\r\n");
        out.push_str(&self.body);
        out
    }
}

/// Serves `listener` within `limits` until `shutdown` completes: `answer` turns each request,
/// and who sent it as far as the listener tells, into its response. `name` starts the
/// server's log lines ("status page", "metrics").
pub async fn serve<L, F>(
    name: &'static str,
    listener: L,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    answer: F,
) where
    L: Listener<Conn = TcpStream>,
    F: Fn(&Request, Peer) -> Response + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    listener::serve(name, listener, limits, shutdown, move |sock, peer| {
        let answer = answer.clone();
        async move { respond(sock, peer, &*answer).await }
    })
    .await
}

async fn respond(
    mut sock: TcpStream,
    peer: Peer,
    answer: &(impl Fn(&Request, Peer) -> Response + ?Sized),
) {
    // Bounded in size here, in time by the listener's deadline; a request cut short (or past
    // the bound) gets no answer.
    let Some(req) = read_request(&mut sock).await else {
        return;
    };
    let wire = answer(&req, peer).to_wire();
    // A client that does not read its answer is dropped at the listener's deadline.
    let _ = sock.write_all(wire.as_bytes()).await;
    let _ = sock.shutdown().await;
}

async fn read_request(sock: &mut TcpStream) -> Option<Request> {
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
    Some(Request {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn forms_are_unescaped() {
        assert_eq!(unescape("a%3Ab+c%2"), "a:b c%2");
        assert_eq!(unescape("%e2%82%ac%"), "€%");
        let f = form_decode(b"hours=3&csrf=ab%2Bc&novalue");
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!((f["hours"].as_str(), f["csrf"].as_str()), ("3", "ab+c"));
    }

    /// Sends `raw` to a server answering with the request it read, and returns the answer.
    async fn exchange(raw: &[u8]) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = listener::Stop::new();
        let limits = Limits {
            total: 2,
            per_peer: 2,
            deadline: Duration::from_secs(2),
        };
        let server = tokio::spawn(serve("test", listener, limits, stop.signal(), |req, _| {
            let mut r = Response::new(
                "200 OK",
                "text/plain",
                format!("{} {} {:?} {:?}", req.method, req.path, req.query, req.form),
            );
            r.headers
                .push(("x-seen".into(), req.headers["host"].clone()));
            r
        }));
        let mut s = TcpStream::connect(addr).await.unwrap();
        // The server may close an oversized request before it is all written.
        let _ = s.write_all(raw).await;
        let _ = s.shutdown().await;
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        stop.stop();
        server.await.unwrap();
        out
    }

    /// A form post in two writes is read whole (head, then its body by content-length), and
    /// answered with the content type, the length, `connection: close` and its own headers.
    #[tokio::test]
    async fn a_request_is_read_whole_and_answered_once() {
        let out = exchange(
            b"POST /snooze?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\nContent-Length: 7\r\n\r\nhours=3",
        )
        .await;
        let body = "POST /snooze {\"x\": \"1\"} {\"hours\": \"3\"}";
        assert_eq!(
            out,
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\nx-seen: 127.0.0.1:1\r\n\r\n{body}",
                body.len()
            )
        );
    }

    /// A head cut short by the client, or one past the bound, gets no answer.
    #[tokio::test]
    async fn a_cut_or_oversized_request_is_not_answered() {
        assert_eq!(exchange(b"GET / HTTP/1.1\r\nHost: x\r\n").await, "");
        let mut big = b"GET / HTTP/1.1\r\nHost: x\r\nx-pad: ".to_vec();
        // (Read in chunks, a head is dropped once past the bound, not at its exact byte.)
        big.resize(2 * MAX_REQUEST, b'a');
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(exchange(&big).await, "");
    }
}
