//! Volunteer mode and the pilot on the real Docker engine and the local registry
//! (tests/setup-docker.sh, tests/images/build-pilot-image.sh; tests/run.sh runs both).
//!
//! Every test is `#[ignore]`d with that reason, so a plain `cargo test` on a machine without
//! them lists them as ignored instead of passing them; tests/run.sh runs them with
//! `--include-ignored`, and then a missing engine or registry is a failure, never a skip.

mod disk;
mod egress;
mod egress_repair;
mod freshness;
mod input;
mod own_load;
mod page;
mod pilot;
mod sleep;
mod snooze;
mod volunteer;

/// `docker ARGS`, which must succeed; its stdout.
fn docker(args: &str) -> String {
    crate::harness::sh_ok(&format!("docker {args}"))
}
