//! Act: the engine and what pilotd makes beside it (the filter, scratch images, loop devices, images), and the fail-safe.

pub mod backend;
pub mod claim;
pub(crate) mod disk;
pub mod egress;
pub mod failsafe;
pub mod gc;
pub(crate) mod image;
pub(crate) mod loopdev;
pub(crate) mod scratch;
