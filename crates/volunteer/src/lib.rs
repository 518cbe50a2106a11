//! Volunteer mode: lends a donated machine to the pool while its owner does not need it.

pub mod network;
pub(crate) mod outcome;
pub mod settings;
pub mod snapshot;
pub(crate) mod splay;
pub mod worker;

pub mod act;
pub mod decide;
pub mod observe;
pub mod record;

pub mod daemon;
pub mod inspect;
pub mod owner;
