//! Living as a system service: detaching from the terminal on hosts without systemd (before
//! any tokio runtime exists), and talking to systemd (`Type=notify`) when it is there.

pub mod detach;
pub mod lifecycle;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod state_file;
