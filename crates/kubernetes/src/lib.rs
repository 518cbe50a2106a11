//! Kubernetes mode: a provisioner that turns idle HTCondor jobs into worker pods, a Job each.

pub mod accounting;
pub mod ads;
pub mod backoff;
pub mod client;
pub mod condor;
pub mod config;
pub mod demand;
pub mod encoding;
pub mod identity;
pub mod ini;
pub mod jobs;
pub mod observed;
pub mod plan;
pub mod provisioner;
pub mod report;
pub mod settings;
pub mod shape;
pub mod snapshot;
