//! What pilotd and its worker entrypoint `pilot` write to logs and errors:
//!
//! - no credentials from URLs: the user-info of `https://user:pw@host/` and the values of
//!   query parameters such as `?token=`, `access_token=`, `sig=` become `***`
//!   ([`credentials`]); a URL in a log is a pointer for a human, never a key;
//! - one event per line: a newline or another control character inside a logged value (a
//!   manifest's env value, a server's error text) is escaped, so it cannot forge a log line
//!   ([`Redacting`], the writer both binaries log through).
//!
//! Imports: nothing (both binaries link it; the pilot runs inside every worker).

use std::borrow::Cow;
use std::io::{self, Write};

/// Query parameter names whose values are secrets (compared lowercase). Any name containing
/// `token`, `secret`, `password` or `signature` counts too.
const SECRET_PARAMS: &[&str] = &[
    "key",
    "api_key",
    "apikey",
    "sig",
    "auth",
    "authorization",
    "pass",
    "passwd",
    "pwd",
    "credential",
    "x-amz-credential",
    "session",
    "sessionid",
    "code",
];

fn secret_param(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    SECRET_PARAMS.contains(&n.as_str())
        || ["token", "secret", "password", "signature"]
            .iter()
            .any(|s| n.contains(s))
}

/// Where a URL's authority or a parameter's value ends inside free text.
fn ends_value(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')' | ']' | ',')
}

/// `text` with the credentials of every URL in it replaced by `***`: user-info before an `@`
/// in the authority, and the values of secret query parameters. Text without them is
/// returned as it is.
pub fn credentials(text: &str) -> Cow<'_, str> {
    let mut out = userinfo(text);
    if let Cow::Owned(s) = query_secrets(&out) {
        out = Cow::Owned(s);
    }
    out
}

fn userinfo(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut copied = 0;
    let mut search = 0;
    while let Some(i) = text[search..].find("://") {
        let start = search + i + 3;
        let len = text[start..]
            .find(|c: char| ends_value(c) || matches!(c, '/' | '?' | '#'))
            .unwrap_or(text.len() - start);
        let authority = &text[start..start + len];
        if let Some(at) = authority.rfind('@') {
            out.push_str(&text[copied..start]);
            out.push_str("***");
            copied = start + at;
        }
        search = start + len;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

fn query_secrets(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut copied = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if matches!(bytes[i], b'?' | b'&' | b';') {
            let name_start = i + 1;
            let name_len = text[name_start..]
                .find(|c: char| c == '=' || ends_value(c) || matches!(c, '&' | '#' | '?'))
                .unwrap_or(text.len() - name_start);
            let eq = name_start + name_len;
            if name_len > 0 && bytes.get(eq) == Some(&b'=') && secret_param(&text[name_start..eq]) {
                let value_start = eq + 1;
                let value_len = text[value_start..]
                    .find(|c: char| ends_value(c) || matches!(c, '&' | '#' | ';'))
                    .unwrap_or(text.len() - value_start);
                if value_len > 0 {
                    out.push_str(&text[copied..value_start]);
                    out.push_str("***");
                    copied = value_start + value_len;
                }
                i = value_start + value_len;
                continue;
            }
        }
        i += 1;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// `text` as one log line: credentials redacted, and every control character but a final
/// newline (and the terminal's colour escapes, when `keep_ansi`) escaped like Rust does
/// (`\n`, `\r`, `\u{7}`).
pub fn line(text: &str, keep_ansi: bool) -> String {
    let text = credentials(text);
    let (body, end) = match text.strip_suffix('\n') {
        Some(b) => (b, "\n"),
        None => (text.as_ref(), ""),
    };
    let mut out = String::with_capacity(body.len() + end.len());
    for c in body.chars() {
        if c.is_control() && c != '\t' && !(keep_ansi && c == '\u{1b}') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push_str(end);
    out
}

/// A writer for a log formatter that writes one event per `write` call (tracing-subscriber's
/// fmt layer does): each event leaves as [`line`] made it.
#[derive(Debug)]
pub struct Redacting<W> {
    inner: W,
    keep_ansi: bool,
}

impl<W: Write> Redacting<W> {
    pub fn new(inner: W, keep_ansi: bool) -> Self {
        Redacting { inner, keep_ansi }
    }
}

impl<W: Write> Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.inner
            .write_all(line(&text, self.keep_ansi).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_and_secret_parameters_are_redacted() {
        let cases = [
            (
                "GET https://u:pw@pool.example.org/x failed",
                "GET https://***@pool.example.org/x failed",
            ),
            ("http://user@host/", "http://***@host/"),
            (
                "https://a.example/c?token=abc&x=1#f",
                "https://a.example/c?token=***&x=1#f",
            ),
            (
                "url=https://a/b?x=1&access_token=s3cret, retrying",
                "url=https://a/b?x=1&access_token=***, retrying",
            ),
            (
                "https://s3.example/o?X-Amz-Signature=ff&X-Amz-Credential=k&v=2",
                "https://s3.example/o?X-Amz-Signature=***&X-Amz-Credential=***&v=2",
            ),
            (
                "two: https://a:b@x/ and https://c:d@y/?sig=1",
                "two: https://***@x/ and https://***@y/?sig=***",
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(credentials(raw), want, "{raw}");
        }
        for clean in [
            "https://pool.example.org/10-pool?x=1",
            "mail me at a@b.example",
            "tokens left: 3",
            "",
        ] {
            assert!(matches!(credentials(clean), Cow::Borrowed(_)), "{clean}");
        }
    }

    #[test]
    fn a_value_cannot_forge_a_second_log_line() {
        let forged = "version 7\n2026-12-01T00:00:00Z  INFO pilotd: owner approved\r\u{7}\n";
        let l = line(forged, false);
        assert_eq!(l.matches('\n').count(), 1, "{l}");
        assert!(l.ends_with('\n'));
        assert!(l.contains("version 7\\n2026"), "{l}");
        assert!(l.contains("\\r\\u{7}"), "{l}");
        assert_eq!(
            line("\u{1b}[1mbold\u{1b}[0m\n", true),
            "\u{1b}[1mbold\u{1b}[0m\n"
        );
        assert!(line("\u{1b}[1m", false).starts_with("\\u{1b}"));
        let mut out = Vec::new();
        Redacting::new(&mut out, false)
            .write_all(b"fetch https://u:p@h/?token=t\nnext\n")
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "fetch https://***@h/?token=***\\nnext\n"
        );
    }
}
