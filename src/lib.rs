//! pilotd puts idle computers to work for an HTCondor pool without getting in the owner's way.
//!
//! Both modes are a reconcile loop: observe → decide (pure) → act. The decision is a pure
//! function of an observation, the configuration and the clock, so it can be printed,
//! replayed and unit-tested.

pub mod backoff;
pub mod cli;
pub mod cmd;
pub mod config;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod service;
pub mod volunteer;
