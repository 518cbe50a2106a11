//! pilotd against a real HTCondor pool (tests/pool/up.sh: Debian's condor 23.9 in containers,
//! IDTOKENS, ordinary users submitting real jobs), with the real engine and registry.
//!
//! `#[ignore]`d with a reason, so a plain `cargo test` lists them as ignored rather than
//! passing them: tests/run.sh runs them with `--include-ignored`, and a missing pool is then a
//! failure (`Pool::from_env` panics saying what to run).

#[cfg(feature = "kubernetes")]
mod kubernetes;
mod volunteer;
