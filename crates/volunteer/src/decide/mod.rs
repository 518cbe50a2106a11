//! Decide, purely: may the machine compute now and how much (`policy`), and the actions of one cycle (`plan`).

pub mod comfort;
pub(crate) mod plan;
pub mod policy;
