//! Kubernetes mode: one provisioner per namespace that turns idle jobs of whitelisted
//! schedds into worker pods.

pub mod accounting;
pub mod backoff;
pub mod client;
pub mod condor;
pub mod demand;
pub mod ini;
pub mod plan;
pub mod provisioner;
pub mod shape;
pub mod snapshot;
