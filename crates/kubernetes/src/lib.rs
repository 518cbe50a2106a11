//! Kubernetes mode: a provisioner that turns idle HTCondor jobs into worker pods, a Job each.

pub(crate) mod accounting;
pub(crate) mod ads;
pub mod backoff;
pub mod client;
pub(crate) mod condor;
pub mod config;
pub(crate) mod demand;
pub(crate) mod encoding;
pub(crate) mod identity;
pub mod ini;
pub(crate) mod jobs;
pub(crate) mod observed;
pub mod plan;
pub mod provisioner;
pub mod report;
pub mod settings;
pub mod shape;
pub mod snapshot;
