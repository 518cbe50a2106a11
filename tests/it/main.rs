//! pilotd's integration tests, in one binary (linked once, as ripgrep does), one module per
//! topic, with what they share in `harness`:
//!
//! - `cli`: the commands an owner types (`check`, `plan`, `snapshot`, `schedule`, `init`);
//! - `docs`: every `pilotd` command README.md and docs/*.md show, run as shown;
//! - `house`: ARCHITECTURE.md's crates, modules and imports against the code;
//! - `sessions`: the utmp probe against real and damaged files;
//! - `manifest`: the pool's manifest fetched from a real HTTP server;
//! - `metered`: NetworkManager's metered link on a real dbus-daemon (`plan`, the watch, `run`);
//! - `service`: `pilotd run` as a system service (systemd notify, reload, `--daemon`, metrics);
//! - `controls`: the owner's controls against another local user (descriptor floods, lock
//!   squatting), an unreadable snooze, keys without /dev/urandom;
//! - `docker`: volunteer mode and the pilot on the real Docker engine (after
//!   tests/setup-docker.sh; `#[ignore]`d with that reason, tests/run.sh runs them);
//! - `kubernetes`: kubernetes mode against an in-process fake API server and fake condor tools
//!   (only when the `kubernetes` feature is on, as it is by default).
//!
//! - `condor_pool`: both modes against a real HTCondor pool (tests/pool/up.sh); `#[ignore]`d
//!   with a reason, and run by tests/run.sh with `--include-ignored`.

mod cli;
mod condor_pool;
mod controls;
mod docker;
mod docs;
mod harness;
mod house;
#[cfg(feature = "kubernetes")]
mod kubernetes;
mod manifest;
mod metered;
mod service;
mod sessions;
