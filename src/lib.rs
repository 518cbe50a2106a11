//! pilotd puts idle computers to work for an HTCondor pool without getting in the owner's way.
//!
//! Both modes are a reconcile loop: observe (`observe`) → decide (pure: `policy`, `demand`,
//! `plan`) → act (`backend`). The decision is a pure function of an observation, the
//! configuration and the clock, so it can be printed, replayed and unit-tested.

pub mod backend;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod daemon;
pub mod demand;
pub mod observe;
pub mod plan;
pub mod policy;
pub mod service;
