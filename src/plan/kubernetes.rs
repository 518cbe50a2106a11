//! Placeholder until Kubernetes planning lands.
