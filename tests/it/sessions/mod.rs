//! The session probes: who is logged in, from utmp files built byte by byte
//! (tests/fixtures/utmp/record.rs), written by the real `utmpdump`, damaged, or missing; and
//! from systemd-logind over a real `dbus-daemon` (`logind`); the bus watches believe only the
//! service that owns the name (`bus`).

pub(crate) mod bus;
pub(crate) mod login1;
mod logind;
mod pure;
mod robustness;
mod terminals;
mod utmp;

#[path = "../../fixtures/utmp/record.rs"]
pub(crate) mod record;
