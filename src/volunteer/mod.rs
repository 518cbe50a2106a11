//! Volunteer mode: a daemon on a donated machine that lends it to the pool only when the
//! owner's policy allows.

pub mod backend;
pub mod daemon;
pub mod gc;
pub mod history;
pub mod host;
pub mod image;
pub mod inspect;
pub mod manifest;
pub mod outcome;
pub mod plan;
pub mod policy;
pub mod sessions;
pub mod settings;
pub mod snapshot;
pub mod status;
pub mod worker;
