//! Where the daemon's log goes: the journal when stderr is connected to it, else stderr as
//! text or JSON. Called once, after detaching (the journald layer opens a socket).
//!
//! Text and JSON lines go through `redact::Redacting`: no URL credentials, and a newline in
//! a logged value (a manifest's, a server's) is escaped, so each event is one line. The
//! journal keeps fields apart by itself, and no writer stands between it and a logged value:
//! what may carry credentials (the manifest URL) is redacted where it is logged, and what a
//! worker wrote is escaped where it is read (a worker's output lines, `redact::line`; its
//! job report's damaged key, `pilot_contract::ReportError`).

/// Logs go to the journal when stderr is connected to it (systemd sets `JOURNAL_STREAM`), with
/// structured fields; to stderr otherwise, as text or JSON. `RUST_LOG` wins over `[log] level`.
pub fn init(json: bool, level: Option<&str>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = directives(std::env::var("RUST_LOG").ok().as_deref())
        .or_else(|| directives(level))
        .unwrap_or_else(|| {
            tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO)
        });
    // The journald layer fails when the journal socket is absent (containers): fall back.
    let journald = std::env::var_os("JOURNAL_STREAM")
        .is_some()
        .then(|| tracing_journald::layer().ok())
        .flatten()
        // Fields keep their own names (`WORKER=`, `IMAGE=`), not the crate's default `F_`
        // prefix, so `journalctl -u pilotd WORKER=NAME` reads as the log line does. None of
        // pilotd's field names is one of the journal's own (MESSAGE, PRIORITY, CODE_*, _*).
        .map(|l| {
            l.with_syslog_identifier("pilotd".into())
                .with_field_prefix(None)
        });
    let registry = tracing_subscriber::registry().with(filter);
    if let Some(j) = journald {
        let _ = registry.with(j).try_init();
        return;
    }
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(move || redact::Redacting::new(std::io::stderr(), ansi));
    let _ = if json {
        registry.with(layer.json()).try_init()
    } else {
        registry.with(layer).try_init()
    };
}

/// An error and its causes on one line, `: `-joined; a cause whose text its parent already
/// carries is skipped. The edge prints `Display` alone, and the cause is often what says
/// which failure it was: kube's "client error (Connect)" is the same for a closed port and
/// an unknown CA, reqwest keeps why a redirect was refused in a cause, bollard a socket's
/// "permission denied".
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

/// A filter from a level or `target=level` directives (`info,pilotd=debug`); `None` when
/// absent or not one. `Targets`, not `EnvFilter`: the same directives without span and
/// field matching, which no documented setting uses, and without the regex engine that
/// EnvFilter links in (about 0.2 MiB of the idle daemon's resident memory).
pub(crate) fn directives(text: Option<&str>) -> Option<tracing_subscriber::filter::Targets> {
    text?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;
    use tracing_subscriber::filter::Targets;

    #[test]
    fn levels_and_target_directives_are_filters() {
        let f: Targets = directives(Some("info,pilotd=debug")).unwrap();
        assert!(f.would_enable("pilotd::volunteer", &Level::DEBUG));
        assert!(!f.would_enable("bollard", &Level::DEBUG));
        assert!(f.would_enable("bollard", &Level::INFO));
        let f = directives(Some("warn")).unwrap();
        assert!(!f.would_enable("pilotd", &Level::INFO));
        assert!(directives(Some("info,pilotd=loud[")).is_none());
        assert!(directives(None).is_none());
    }

    #[test]
    fn causes_follow_on_one_line_without_repeats() {
        #[derive(Debug, thiserror::Error)]
        #[error("{0}")]
        struct E(String, #[source] Option<Box<E>>);
        let inner = E("UnknownIssuer".into(), None);
        let mid = E("client error (Connect)".into(), Some(Box::new(inner)));
        let top = E("listing pods failed".into(), Some(Box::new(mid)));
        assert_eq!(
            with_causes(&top),
            "listing pods failed: client error (Connect): UnknownIssuer"
        );
        let echoing = E(
            "refused: UnknownIssuer".into(),
            Some(Box::new(E("UnknownIssuer".into(), None))),
        );
        assert_eq!(with_causes(&echoing), "refused: UnknownIssuer");
    }
}
