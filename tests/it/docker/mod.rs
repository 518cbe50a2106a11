//! Volunteer mode and the pilot on the real Docker engine and the local registry
//! (tests/setup-docker.sh, tests/images/build-pilot-image.sh; tests/run.sh runs both).
//!
//! Runs only with `PILOTD_DOCKER_TESTS=1`; then every failure is a failure, never a skip.

mod egress;
mod freshness;
mod page;
mod pilot;
mod snooze;
mod volunteer;

/// Whether the Docker tests may run here; says so when they may not.
fn enabled() -> bool {
    if std::env::var("PILOTD_DOCKER_TESTS").as_deref() == Ok("1") {
        return true;
    }
    eprintln!("skipped: set PILOTD_DOCKER_TESTS=1 after tests/setup-docker.sh to run Docker tests");
    false
}

/// `docker ARGS`, which must succeed; its stdout.
fn docker(args: &str) -> String {
    crate::harness::sh_ok(&format!("docker {args}"))
}
