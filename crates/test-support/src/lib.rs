//! Support several test binaries share, as a dev-dependency.

pub mod pool;
pub mod utmp;
