//! Kubernetes mode end to end: the real `kube` client against an in-process fake API server
//! (`fake_api`), the fake condor tools (tests/fake-condor), and the `pilotd` binary on the
//! fixtures in tests/fixtures/kubernetes; `incluster` runs the binary with the in-cluster
//! client in a private mount namespace (root, `#[ignore]`d with that reason).

mod backend;
mod bench;
mod cycle;
mod deployment;
pub mod fake_api;
mod fixtures;
mod incluster;
