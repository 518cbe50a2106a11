//! Kubernetes mode end to end: the real `kube` client against an in-process fake API server
//! (`fake_api`), the fake condor tools (tests/fake-condor), and the `pilotd` binary on the
//! fixtures in tests/fixtures/kubernetes.

mod backend;
mod bench;
mod cycle;
mod deployment;
pub mod fake_api;
mod fixtures;
