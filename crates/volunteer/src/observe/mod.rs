//! Observe: the probes of the host, its sessions, its owner's input and media, its link's price, the bus and inotify watches they wake on, and the registry's one HEAD.

pub mod bus;
pub mod host;
pub(crate) mod inotify;
pub(crate) mod input;
pub mod logind;
pub(crate) mod media;
pub mod metered;
pub mod registry;
pub(crate) mod sensors;
pub mod sessions;
pub mod terminals;
