//! Test support shared by more than one crate's tests, as a crate they take as a
//! dev-dependency (so each is compiled once, checked by clippy once, and has one name):
//!
//! - `utmp`: utmp records built byte by byte (tests/it's `sessions` and `condor_pool`, the
//!   volunteer daemon's unit tests);
//! - `pool`: driving the real HTCondor test pool of tests/pool/up.sh (tests/it's
//!   `condor_pool`, the pilot's `real_condor`).

pub mod pool;
pub mod utmp;
