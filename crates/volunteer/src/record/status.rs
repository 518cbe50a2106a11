//! The daemon's status file (`<state_dir>/status.json`): the last decision, the workers, the
//! back-off, the image and what pilotd pulled. `pilotd status` reads it; a restarted daemon
//! takes back the back-off, the image record and (when recent) the policy latches. Workers
//! themselves are *not* restored from here: they are rebuilt from the runtime's labels.
//!
//! Written atomically (temporary file in the same directory, fsync, rename), so a reader or a
//! crash never sees half a file.
//!
//! What the owner is shown of it, with the rest of the state dir, is `view` (read once), said
//! as text by `text.rs`, as JSON by the view's `Serialize`, and as HTML by the page.

use crate::decide::comfort::CpuCap;
use crate::decide::policy::Supply;
use crate::outcome::{Outcome, StartBackoff};
use crate::snapshot::{Reading, Throttle};
use crate::worker::ScratchUse;
use crate::worker::{ImageRecord, PulledImage, Worker};
use chrono::{DateTime, Utc};
use pilotd_core::config::Evict;
use pilotd_core::service::state_file::{StateFileError, Store};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod text;
pub mod view;

/// The decision as recorded (a `Supply` without the parts that are not data).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub at: DateTime<Utc>,
    pub allowed: bool,
    pub workers: u32,
    pub cpus: u32,
    pub memory_mib: u64,
    pub disk_kib: u64,
    pub gpus: u32,
    pub accept_until: Option<DateTime<Utc>>,
    pub die_at: Option<DateTime<Utc>>,
    pub evict: Evict,
    pub reasons: Vec<String>,
    /// What pilotd could see (the sources of sessions, who is away): `Supply::notes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub next_change: Option<DateTime<Utc>>,
    /// The CPU cap the workers run under, and why (`comfort`); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cap: Option<CpuCap>,
}

impl Decision {
    pub(crate) fn of(s: &Supply, at: DateTime<Utc>) -> Decision {
        Decision {
            at,
            allowed: s.allowed,
            workers: s.workers,
            cpus: s.per_worker.cpus,
            memory_mib: s.per_worker.memory_mib,
            disk_kib: s.per_worker.disk_kib,
            gpus: s.per_worker.gpus,
            accept_until: s.accept_until,
            die_at: s.die_at,
            evict: s.evict,
            reasons: s.reasons.clone(),
            notes: s.notes.clone(),
            next_change: s.next_change,
            cpu_cap: s.cpu_cap.clone(),
        }
    }

    /// What it let run, said alike by `pilotd status` and the page: "2 worker(s) of 4 CPU,
    /// 8192 MiB"; `None` when it let nothing start.
    pub(crate) fn share(&self) -> Option<String> {
        let (w, c, m) = (self.workers, self.cpus, self.memory_mib);
        self.allowed
            .then(|| format!("{w} worker(s) of {c} CPU, {m} MiB"))
    }
}

/// A finished worker's outcome, newest last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeRecord {
    pub name: String,
    pub at: DateTime<Utc>,
    pub outcome: Outcome,
    /// A failed worker's last lines of output (the container itself is removed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Status {
    pub pid: u32,
    pub updated_at: Option<DateTime<Utc>>,
    pub instance: String,
    pub engine: Option<String>,
    /// Why the last cycle could not do everything (engine down, probe failed…).
    pub last_error: Option<String>,
    pub decision: Option<Decision>,
    pub owner_busy_since: Option<DateTime<Utc>>,
    pub host_free_since: Option<DateTime<Utc>>,
    pub own_cpu: f64,
    /// As listed in the last cycle; `None` when the list failed (unknown, not empty).
    pub workers: Option<Vec<Worker>>,
    /// What each worker's scratch held at the last measurement, by worker id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scratch_use: BTreeMap<String, ScratchUse>,
    pub backoff: StartBackoff,
    pub image: ImageRecord,
    pub pulled_images: Vec<PulledImage>,
    /// Ids of finished workers whose outcome is already counted (a failed remove must not
    /// count it twice).
    pub recorded: Vec<String>,
    /// Ids of finished workers whose job report is already counted (a worker stopped for a
    /// full scratch has its outcome recorded before it ends, its report after).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reported: Vec<String>,
    pub outcomes: Vec<OutcomeRecord>,
    /// Since when the daemon has seen each logind session locked, by session id: logind
    /// tells only *that* a session is locked, so `pilotd plan` takes the instants from here
    /// to judge `lock_grace` as the daemon does.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub locks: BTreeMap<String, DateTime<Utc>>,
    pub last_actions: Vec<String>,
    pub notes: Vec<String>,
    /// The link's price as the last cycle observed it (NetworkManager; absent when not
    /// known): `status` shows it beside the data used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metered: Option<crate::snapshot::Metered>,
    /// The machine's hottest CPU temperature (°C) and fastest fan (RPM) at the last cycle
    /// (`sensors`); absent where it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Reading>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan: Option<Reading>,
    /// Where the comfort throttle stands: a restarted daemon takes it back, so a hot machine
    /// does not get its whole share back by a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Throttle>,
}

/// The daemon rewrites an unchanged status file this often, so readers can tell it is alive
/// (`pilotd status` allows for it); a changed one is written in the cycle that changed it.
/// Between the two, nothing touches the disk, and an idle laptop's disk may sleep.
pub(crate) const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(600);

impl Status {
    /// The same for a reader: equal but for when it was written and what was measured in
    /// passing (the decision's instant, the workers' CPU to less than a percent).
    pub(crate) fn same_for_readers(&self, other: &Status) -> bool {
        let key = |s: &Status| {
            let mut s = s.clone();
            s.updated_at = None;
            s.pid = 0;
            s.own_cpu = (s.own_cpu * 100.0).round();
            // A sensor moves by a degree or a few RPM every cycle: a reader is told of a
            // change of 5 °C or 500 RPM at once, of less with the heartbeat.
            for (r, by) in [(&mut s.temperature, 5.0), (&mut s.fan, 500.0)] {
                if let Some(r) = r.as_mut() {
                    r.value = (r.value / by).floor();
                }
            }
            if let Some(d) = s.decision.as_mut() {
                d.at = DateTime::<Utc>::UNIX_EPOCH;
            }
            s
        };
        key(self) == key(other)
    }
}

/// How many outcomes the status keeps.
pub(crate) const OUTCOMES_KEPT: usize = 20;

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("status.json")
}

fn store(path: &Path) -> Store<Status> {
    Store::new(path.to_path_buf(), "daemon's status").pretty()
}

/// The status at `path`, `None` when there is none; a damaged one is an error, left for the
/// daemon's next write to replace.
pub fn load(path: &Path) -> Result<Option<Status>, StateFileError> {
    store(path).peek()
}

pub(crate) fn save(path: &Path, status: &Status) -> Result<(), StateFileError> {
    store(path).save(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing_file() {
        let d = tempfile::tempdir().unwrap();
        let p = path(d.path());
        assert_eq!(load(&p).unwrap(), None);
        let s = Status {
            pid: 42,
            instance: "x".into(),
            ..Default::default()
        };
        save(&p, &s).unwrap();
        assert_eq!(load(&p).unwrap(), Some(s));
        std::fs::write(&p, "{").unwrap();
        assert!(load(&p).unwrap_err().to_string().contains("status.json"));
    }
}
