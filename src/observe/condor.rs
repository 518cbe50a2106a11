//! Placeholder until Kubernetes mode lands.
