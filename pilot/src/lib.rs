//! pilotd's worker entrypoint as a library: the `pilot` binary is a thin shell around these
//! modules, and the pure ones (`settings`, `condor_config`, `lifecycle`, `adfile`'s and `startd_history`'s parsers) are
//! unit-tested with no environment, clock or processes.

pub mod adfile;
pub mod condor_config;
pub mod cvmfs;
pub mod fetch;
pub mod help;
pub mod lifecycle;
pub mod selftest;
pub mod settings;
pub mod startd_cron;
pub mod startd_history;
pub mod startlog;
pub mod startup;
pub mod supervise;
