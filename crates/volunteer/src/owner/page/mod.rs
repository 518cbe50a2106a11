//! The owner's status page on 127.0.0.1: what the machine does and why, Snooze and Resume.

mod chart;
mod http;
mod keys;
mod markup;
mod render;

pub(crate) use http::{bind, serve};
pub(crate) use keys::Doors;
