//! Volunteer mode: a daemon on a donated machine that lends it to the pool only when the
//! owner's policy allows, and gets out of the way the moment the owner needs it.
//!
//! Observe → decide → act, from the bottom up:
//! - data: `settings` (pilotd.toml and the policy, resolved once), `snapshot` (the host as
//!   observed), `worker` (workers, specs, images), `outcome` (how a worker ended, the start
//!   back-off);
//! - observe: `host`, `sessions` (utmp), `terminals` (a text session's terminals through its
//!   processes) and `logind` (probes: CPU, memory, battery, who is
//!   logged in and how long idle); `bus` (signals on the system bus, believed only from the
//!   service that owns the name, and paced);
//! - decide, pure: `policy` (may the machine compute, how much, until when), `plan` (the
//!   actions of one cycle), `splay` (this host's place in the fleet's spread) and
//!   `projection` (what a policy would give, the recorded weeks replayed through `policy`);
//! - act: `backend` (the Docker engine, and a recording fake for tests);
//! - the owner's word: `owner` (the requests, who may ask them and what asking does, below
//!   both doors), `control` (the socket `pilotd snooze`/`resume`/`open` talk to, authorised by
//!   peer credentials), `page` (the status page on 127.0.0.1, entered by a browser of a uid
//!   the socket invited) and `snooze` (the snooze kept in the state dir);
//! - state and upkeep: `status` (the status file), `history` (learned availability),
//!   `timeline` (when the owner was there, replayable), `contribution` (what the machine gave,
//!   week by week), `manifest` (the pool's remote
//!   manifest), `image` (freshness), `gc`, `slot_ad` (the machine's attributes for its
//!   workers' slot ads);
//! - top: `daemon` (the loop), `inspect` (what one-shot commands ask the engine) and
//!   `failsafe` (the owner protected when the daemon is gone).
//!
//! Imports: `config`, `service`, `backoff`, `pilot_contract`; never `kubernetes` or `cmd`.
//! Pure parts (`policy`, `plan`, `splay`, `outcome`, `settings` but for the machine id
//! `Settings::resolve` reads) read no clock and do no I/O.

pub mod backend;
pub mod bus;
pub mod claim;
pub mod contribution;
pub mod control;
pub mod daemon;
pub mod disk;
pub mod egress;
pub mod failsafe;
pub mod gc;
pub mod history;
pub mod host;
pub mod image;
pub mod input;
pub mod inspect;
pub mod logind;
pub mod loopdev;
pub mod manifest;
pub mod outcome;
pub mod owner;
pub mod page;
pub mod plan;
pub mod policy;
pub mod projection;
pub mod questions;
pub mod registry;
pub mod scratch;
pub mod sessions;
pub mod settings;
pub mod slot_ad;
pub mod snapshot;
pub mod snooze;
pub mod splay;
pub mod status;
pub mod terminals;
pub mod timeline;
pub mod worker;
