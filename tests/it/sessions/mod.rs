//! The session probe: who is logged in, from utmp files built byte by byte
//! (tests/fixtures/utmp/record.rs), written by the real `utmpdump`, damaged, or missing.

mod pure;
mod robustness;
mod utmp;

#[path = "../../fixtures/utmp/record.rs"]
pub(crate) mod record;
