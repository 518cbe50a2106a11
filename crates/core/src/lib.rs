//! What both modes stand on: time, the two files, the process as a service, its state files.

pub mod backoff;
pub mod config;
pub mod horizon;
pub mod service;
pub mod zone;
