//! pilotd puts idle computers to work for an HTCondor pool without getting in the owner's way.
//!
//! The house, mode first (ARCHITECTURE.md draws it):
//! - `volunteer`: volunteer mode, whole (probes, the owner's policy, the plan, the Docker
//!   backend, the daemon);
//! - `kubernetes`: kubernetes mode, whole (condor probe, demand by shape, the plan, Job
//!   bodies, the API client, the provisioner loop); only with the `kubernetes` feature;
//! - shared below both: `config` (the two files, read and diagnosed), `service` (the process
//!   as a system service, and the loop skeleton both modes run in), `backoff`, `horizon`
//!   (the range of instants and durations, and saturating arithmetic on them), `zone` (the
//!   owner's time zone, from the system's tz database);
//! - above both: `cli` (the command line) and `cmd` (one file per subcommand: the edge).
//!
//! Both modes are a reconcile loop: observe → decide (pure) → act. The decision is a pure
//! function of an observation, the settings and the clock, so it can be printed, replayed and
//! unit-tested. Imports only go down: `cmd` → modes → `service` → `config`; the two modes
//! never import each other.

pub mod backoff;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod horizon;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod service;
pub mod volunteer;
pub mod zone;
