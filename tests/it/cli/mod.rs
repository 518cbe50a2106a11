//! The volunteer-mode commands as an owner and an install script use them.

mod init;
mod refusals;
mod volunteer;
