//! The session probes on the real thing: who is logged in, from utmp files written by the real
//! `utmpdump` (which also checks the encoder of `pilotd_test_support::utmp`), damaged, or
//! missing (`utmp`); from systemd-logind over a real `dbus-daemon` (`logind`); the bus watches
//! believe only the service that owns the name (`bus`); a real pty's last use (`terminals`);
//! sound and cameras in use, from fixture trees of /proc and ALSA's procfs (`media`).
//! The record rules on encoded records alone are unit tests beside the probe
//! (crates/volunteer/src/sessions/tests/).

pub(crate) mod bus;
pub(crate) mod login1;
mod logind;
mod media;
mod terminals;
mod utmp;
