//! Kubernetes mode: one provisioner per namespace that turns idle jobs of whitelisted
//! schedds into worker pods.

pub mod accounting;
pub mod ads;
pub mod backoff;
pub mod client;
pub mod condor;
pub mod demand;
pub mod encoding;
pub mod identity;
pub mod ini;
pub mod jobs;
pub mod plan;
pub mod provisioner;
pub mod report;
pub mod settings;
pub mod shape;
pub mod snapshot;
