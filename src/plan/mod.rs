//! Pure planning: from a decision and the observed workers to the actions of one cycle.

pub mod kubernetes;
pub mod volunteer;
