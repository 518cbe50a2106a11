//! What the tests share: the `pilotd` binary under test, the repository's files and fixtures,
//! and shell commands.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `pilotd` binary cargo built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pilotd"))
}

/// A file of the repository (policies, examples, deployment manifests).
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A file under tests/fixtures.
pub fn fixture(path: &str) -> PathBuf {
    repo("tests/fixtures").join(path)
}

/// `pilotd` as an owner without a pilotd.toml runs it (built-in defaults): nothing taken from
/// the caller's environment (`PILOTD_CONFIG`, `PILOTD_POLICY`), times in UTC.
pub fn pilotd_without_site() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::new(bin());
    c.arg("-c").arg("/nonexistent/pilotd.toml");
    c.env_remove("PILOTD_CONFIG")
        .env_remove("PILOTD_POLICY")
        .env("TZ", "UTC");
    c
}

/// Runs `cmd` with `sh -c`: whether it succeeded, and its stdout, trimmed.
pub fn sh(cmd: &str) -> (bool, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("sh runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

/// Runs `cmd` with `sh -c`, which must succeed; its stdout, trimmed.
pub fn sh_ok(cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "{cmd} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A loopback port free right now (the kernel's pick), for a listener the test starts next.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
