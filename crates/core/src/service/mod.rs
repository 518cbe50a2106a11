//! The process as a system service, the same for both modes: the loop skeleton both modes run
//! in (`lifecycle`: readiness, watchdog, reload, drain), detaching from the terminal on hosts
//! without systemd (before any tokio runtime exists), systemd's notify protocol, where logs
//! go, the Prometheus listener, how local endpoints are served within limits (`listener`), whose
//! process is on the other end of a loopback TCP connection (`loopback`), the one small HTTP
//! responder of the status page and the metrics (`http`, through `listener`),
//! and replacing state files whole.
//!
//! Imports: `config` only (a reload hands a loaded configuration to the loop).

pub mod detach;
pub mod http;
pub mod lifecycle;
pub mod listener;
pub mod logging;
pub mod loopback;
pub mod metrics;
pub mod notify;
pub mod state_file;
