//! Record: the state pilotd keeps in its state dir and what it reads back from it (status, history, timeline, contribution, slot ad, manifest, snooze, the week's projection).

pub(crate) mod contribution;
pub mod history;
pub mod manifest;
pub mod projection;
pub(crate) mod slot_ad;
pub mod snooze;
pub mod status;
pub(crate) mod timeline;
