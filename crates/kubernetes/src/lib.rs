//! Kubernetes mode: one provisioner per namespace that turns idle jobs of whitelisted schedds
//! into worker pods, one Kubernetes Job per pod (a drop-in for the NRP provisioner).
//!
//! Observe → decide → act, from the bottom up:
//! - vocabulary: `identity` (how the pool and the cluster know this provisioner's workers),
//!   `encoding` (the provisioner's list/dict strings), `ads` (condor job and startd ads),
//!   `shape` (the resource shape a pod is made for), `observed` (what a decision reads of a
//!   pod or Job, parsed straight from the API's bodies);
//! - pure decisions: `accounting` (pods by shape and state), `demand` (how many pods a shape
//!   may get), `backoff` (shapes on trial), `jobs` (Job bodies), `plan` (one cycle),
//!   `report` (how plans and status look);
//! - observe and act: `condor` (the HTCondor tools), `client` (the API server), `snapshot`
//!   (one observation, the `plan --snapshot` contract);
//! - `ini` (`import-ini`), `settings` (the `[kubernetes]` table resolved once) and on top
//!   `provisioner` (the loop).
//!
//! Imports: `config`, `service`, `backoff`; never `volunteer` or `cmd`. Compiled only with the
//! `kubernetes` feature (on by default; off for the volunteer package).

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
