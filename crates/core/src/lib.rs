//! What both modes stand on: time (`horizon`, `zone`, `backoff`), the two files read and
//! diagnosed (`config`), and the process as a system service with its state files
//! (`service`). It names no mode; ARCHITECTURE.md lists the modules and who imports whom.

pub mod backoff;
pub mod config;
pub mod horizon;
pub mod service;
pub mod zone;
