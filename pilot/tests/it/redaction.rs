//! The pilot's log, end to end: a config URL with credentials (user-info, `?token=`) that
//! cannot be fetched is named in the log without them.

use std::time::Duration;

use crate::harness::{CondorHome, closed_port, stderr_of, wait_with_deadline};

#[test]
fn credentials_in_config_urls_never_reach_the_log() {
    let home = CondorHome::new();
    let url = format!(
        "http://fetcher:hunter2@127.0.0.1:{}/pool.conf?token=s3cr3t&access_token=t0k3n",
        closed_port()
    );
    let mut child = home
        .pilot(&url, "ok")
        .env("PILOT_FETCH_TIMEOUT", "1s")
        .spawn()
        .unwrap();
    let status = wait_with_deadline(&mut child, Duration::from_secs(30));
    let log = stderr_of(&mut child);
    assert_eq!(status.code(), Some(20), "a config failure: {log}");
    assert!(log.contains("127.0.0.1"), "the URL is still named: {log}");
    assert!(log.contains("***@127.0.0.1"), "{log}");
    assert!(log.contains("token=***"), "{log}");
    for secret in ["hunter2", "fetcher", "s3cr3t", "t0k3n"] {
        assert!(
            !log.contains(secret),
            "{secret} leaked into the log:\n{log}"
        );
    }
}
