//! The pilot's integration tests, in one binary (linked once), one module per topic, with
//! what they share in `harness`:
//!
//! - `fetch`: the config fetch against a scripted HTTP server on 127.0.0.1;
//! - `supervise`: the pilot binary on the host with the fake condor of tests/fake-condor;
//! - `redaction`: the pilot's log names a config URL without its credentials;
//! - `docker`: the pilot in a real container on the local Docker engine (`#[ignore]`d with
//!   that reason, tests/run.sh runs them);
//! - `real_condor`: the pilot with the real HTCondor against the real pool of
//!   tests/pool/up.sh (`#[ignore]`d with a reason, tests/run.sh runs them on their own).

mod docker;
mod fetch;
mod harness;
mod real_condor;
mod redaction;
mod supervise;
