//! The process as a system service, the same for both modes.

pub mod detach;
pub mod http;
pub mod lifecycle;
pub mod listener;
pub mod logging;
pub mod loopback;
pub mod metrics;
pub mod notify;
pub mod process;
pub mod resident;
pub mod state_file;
