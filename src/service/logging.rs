//! Where the daemon's log goes: the journal when stderr is connected to it, else stderr as
//! text or JSON. Called once, after detaching (the journald layer opens a socket).
//!
//! Text and JSON lines go through `redact::Redacting`: no URL credentials, and a newline in
//! a logged value (a manifest's, a server's) is escaped, so each event is one line. The
//! journal keeps fields apart by itself; what may carry credentials (the manifest URL) is
//! redacted where it is logged.

/// Logs go to the journal when stderr is connected to it (systemd sets `JOURNAL_STREAM`), with
/// structured fields; to stderr otherwise, as text or JSON. `RUST_LOG` wins over `[log] level`.
pub fn init(json: bool, level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level.unwrap_or("info")))
        .unwrap_or_else(|_| EnvFilter::new("info"));
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
    if let Some(j) = journald {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(j)
            .try_init();
        return;
    }
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(move || redact::Redacting::new(std::io::stderr(), ansi));
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
