//! What the owner is shown about this machine, read once: whether pilotd runs, the last
//! decision and its reasons, the workers, the snooze, the week of windows, what the machine
//! gave, what pilotd learned of the owner's hours, the image, the back-off and the last
//! outcomes. Said three ways from this one view: text (`pilotd status`, `text.rs`), JSON
//! (`pilotd status --format json`, its `Serialize`: a contract) and HTML (the page,
//! `page::render`); none of them reads a fact itself.

use super::Status;
use crate::decide::policy::schedule::{self, Day};
use crate::record::contribution::{self, Data, Ledger, Summary};
use crate::record::history::{self, History};
use crate::record::snooze::{self, Snooze};
use crate::snapshot::Metered;
use crate::worker::Worker;
use chrono::{DateTime, Utc};
use pilotd_core::config::Policy;
use pilotd_core::zone::Zone;
use serde::{Serialize, Serializer};
use std::path::{Path, PathBuf};

/// What the owner is shown. Its JSON is `pilotd status --format json`: the fields in this
/// order, then the rest of the status file under its own keys (`rest_of`); the page's and the
/// text's extra facts are not in it.
#[derive(Debug, Clone, Serialize)]
pub struct StatusView {
    /// The daemon runs: its pid is alive and its status file was written recently
    /// (`gather` looks; the page is served by the daemon itself).
    pub daemon_running: bool,
    pub pid: u32,
    pub updated_at: Option<DateTime<Utc>>,
    pub instance: String,
    /// "engine" (listed now) or "status file" (the daemon's last cycle) or "unknown".
    pub workers_from: &'static str,
    /// `None`: unknown (not an empty list).
    pub workers: Option<Vec<Worker>>,
    /// Why the engine could not list them now, when it was asked and could not.
    pub workers_error: Option<String>,
    /// Where the configuration in force came from (`gather`'s caller says).
    pub config: String,
    /// The pool's manifest in force, if one is configured.
    pub manifest: Option<ManifestView>,
    /// What was learned of the owner's hours, once anything was.
    pub history: Option<LearnedFigures>,
    /// What the machine gave: this week and all time.
    pub contribution: Summary,
    /// Why the contribution ledger cannot be read, when it cannot (counting starts over).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contribution_unreadable: Option<String>,
    /// The bytes pilotd's work moved over the network: today, this week, this month, in all.
    pub network: NetworkView,
    /// The owner's snooze in force (`pilotd snooze`), if any.
    pub snooze: Option<Snooze>,
    /// Why the owner's snooze cannot be read, when it cannot: counted as snoozed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snooze_unreadable: Option<String>,
    /// The daemon's status file as read; empty (but for the instance) when there is none yet.
    #[serde(flatten, serialize_with = "rest_of")]
    pub status: Status,
    /// Where the status file is.
    #[serde(skip)]
    pub status_file: PathBuf,
    #[serde(skip)]
    pub now: DateTime<Utc>,
    /// The policy's time zone: the owner's days and weeks.
    #[serde(skip)]
    pub tz: Zone,
    /// The policy's windows, seven days from today.
    #[serde(skip)]
    pub week: Vec<Day>,
    /// What was learned, hour by hour.
    #[serde(skip)]
    pub learned: History,
    /// What the machine gave, week by week.
    #[serde(skip)]
    pub ledger: Ledger,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ManifestView {
    /// Shown to whoever looks: never the URL's credentials.
    pub url: String,
    /// None until one has been fetched and accepted.
    pub version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LearnedFigures {
    pub since: Option<DateTime<Utc>>,
    /// Share of the watched time the owner was away and the host free.
    pub free_fraction: f64,
    /// How long the host is usually free from now, in hours (`[history] free_threshold`;
    /// `gather` works it out, the page does not show it).
    pub likely_free_hours: Option<i64>,
}

/// The data pilotd's work used (`contribution::Data`: the workers' bytes received and sent,
/// the image pulls), by the periods an owner's plan counts, and the link's price as last
/// observed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkView {
    pub today: Data,
    pub this_week: Data,
    pub this_month: Data,
    pub all_time: Data,
    /// NetworkManager's word on the link at the daemon's last cycle, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metered: Option<Metered>,
}

/// The status file's keys that the view does not already give: one JSON object must not name
/// a key twice (parsers keep one of them, and `workers` is the live list here).
fn rest_of<S: Serializer>(status: &Status, ser: S) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    let serde_json::Value::Object(mut rest) =
        serde_json::to_value(status).map_err(S::Error::custom)?
    else {
        return Err(S::Error::custom("the status is not a JSON object"));
    };
    for key in ["pid", "updated_at", "instance", "workers", "metered"] {
        rest.remove(key);
    }
    rest.serialize(ser)
}

impl StatusView {
    /// The view from the daemon's `status` and the state dir (the snooze, the learned
    /// history, the contribution ledger) with `policy`'s week; the workers as the status file
    /// has them. What only `gather` finds out is left unknown.
    pub(crate) fn of(
        status: Status,
        state_dir: &Path,
        policy: &Policy,
        now: DateTime<Utc>,
    ) -> StatusView {
        let tz = &policy.timezone;
        let snooze = snooze::active(state_dir, now);
        let given = contribution::peek(state_dir);
        let learned = history::peek(state_dir, tz).history;
        StatusView {
            daemon_running: false,
            pid: status.pid,
            updated_at: status.updated_at,
            instance: status.instance.clone(),
            workers_from: if status.workers.is_some() {
                "status file"
            } else {
                "unknown"
            },
            workers: status.workers.clone(),
            workers_error: None,
            config: String::new(),
            manifest: None,
            history: learned.overall().map(|free_fraction| LearnedFigures {
                since: learned.since,
                free_fraction,
                likely_free_hours: None,
            }),
            contribution: Summary::of(&given.ledger, tz, now),
            contribution_unreadable: given.warning,
            network: NetworkView {
                today: given.ledger.today(tz, now),
                this_week: given.ledger.this_week(tz, now).network,
                this_month: given.ledger.this_month(tz, now),
                all_time: given.ledger.all_time.network,
                metered: status.metered,
            },
            snooze: snooze.as_ref().ok().cloned().flatten(),
            snooze_unreadable: snooze.as_ref().err().map(ToString::to_string),
            status,
            status_file: super::path(state_dir),
            now,
            tz: tz.clone(),
            week: schedule::days(policy, now, 7),
            learned,
            ledger: given.ledger,
        }
    }

    /// Worker `w`'s scratch as last measured against its share ("300MiB of 1GiB"), as both
    /// `status` and the page show it; `None` before the first measurement.
    pub(crate) fn scratch(&self, w: &Worker) -> Option<String> {
        let used = self.status.scratch_use.get(&w.id)?;
        Some(used.describe(w.disk_kib))
    }

    /// The view the page draws: `of` the status file in `state_dir`, a damaged one shown as
    /// none yet (the daemon's next write replaces it).
    pub(crate) fn read(state_dir: &Path, policy: &Policy, now: DateTime<Utc>) -> StatusView {
        let status = super::load(&super::path(state_dir))
            .ok()
            .flatten()
            .unwrap_or_default();
        StatusView::of(status, state_dir, policy, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of `status --format json` once: the view's own fields (the live worker list
    /// among them) and the status file's other fields.
    #[test]
    fn the_json_view_names_each_key_once() {
        let dir = tempfile::tempdir().unwrap();
        let status = Status {
            pid: 7,
            workers: Some(vec![]),
            ..Status::default()
        };
        let policy = Policy::defaults(Zone::utc());
        let mut view = StatusView::of(status, dir.path(), &policy, Utc::now());
        (view.workers_from, view.workers) = ("unknown", None);
        let text = serde_json::to_string(&view).unwrap();
        let Keys(keys) = serde_json::from_str(&text).unwrap();
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "a key twice in {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The live list (None here), not the status file's empty one.
        assert!(v["workers"].is_null(), "{text}");
        assert_eq!(v["pid"], 7, "{text}");
        // The status file's own keys follow the view's.
        assert_eq!(keys[..3], ["daemon_running", "pid", "updated_at"], "{text}");
        assert!(keys.iter().any(|k| k == "backoff"), "{text}");
    }

    /// The top-level keys of a JSON object in order, repeats included (a `Value` would keep
    /// only one of each).
    struct Keys(Vec<String>);

    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Keys, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut m: A,
                ) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some(k) = m.next_key::<String>()? {
                        m.next_value::<serde::de::IgnoredAny>()?;
                        keys.push(k);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(V)
        }
    }
}
