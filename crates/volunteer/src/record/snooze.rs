//! The owner's snooze (`pilotd snooze`): "not now" until an instant, kept in
//! `<state_dir>/snooze.json` so it survives a daemon restart. The daemon lays it on every
//! observation (`HostSnapshot::snoozed_until`) and the policy decides on it like any other
//! sign that the owner needs the machine. A snooze whose instant has passed is simply over;
//! `resume` removes the file.

use crate::snapshot::HostSnapshot;
use chrono::{DateTime, Utc};
use pilotd_core::service::state_file::{StateFileError, Store};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One snooze: until when, who asked, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snooze {
    pub until: DateTime<Utc>,
    /// The user name (or `uid N`) of whoever asked.
    pub by: String,
    pub at: DateTime<Utc>,
}

/// The longest snooze taken: a forgotten snooze must not retire a machine for good.
pub(crate) const LONGEST: std::time::Duration = std::time::Duration::from_secs(7 * 86_400);

pub(crate) fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("snooze.json")
}

fn store(state_dir: &Path) -> Store<Snooze> {
    Store::new(path(state_dir), "owner's snooze").pretty()
}

/// The snooze in force at `now`, if any. A file that is there but cannot be read or makes no
/// sense is an error, never "no snooze": the owner said "not now" and pilotd cannot tell until
/// when, so callers count it as snoozed (`lay_on`) and say why. (Out of descriptors, this
/// once read as "no snooze", and workers started while the owner had snoozed.)
pub(crate) fn active(
    state_dir: &Path,
    now: DateTime<Utc>,
) -> Result<Option<Snooze>, StateFileError> {
    Ok(store(state_dir).peek()?.filter(|s| s.until > now))
}

/// Lays the owner's snooze on an observation, as the policy decides on it: the instant it
/// ends, or, when it cannot be read, why (which the policy counts as snoozed).
pub fn lay_on(h: &mut HostSnapshot, state_dir: &Path) {
    (h.snoozed_until, h.snooze_unreadable) = match active(state_dir, h.taken_at) {
        Ok(s) => (s.map(|s| s.until), None),
        Err(e) => {
            tracing::warn!("{e}; counted as snoozed until it can be read");
            (None, Some(e.to_string()))
        }
    };
}

pub(crate) fn save(state_dir: &Path, s: &Snooze) -> Result<(), StateFileError> {
    store(state_dir).save(s)
}

/// Ends any snooze, a damaged one included; whether one was in force at `now`.
pub(crate) fn clear(state_dir: &Path, now: DateTime<Utc>) -> Result<bool, StateFileError> {
    let was = !matches!(active(state_dir, now), Ok(None));
    store(state_dir).remove().map(|()| was)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_until_it_ends_and_cleared_by_resume() {
        let d = tempfile::tempdir().unwrap();
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(active(d.path(), now).unwrap(), None);
        let s = Snooze {
            until: now + chrono::Duration::hours(1),
            by: "alice".into(),
            at: now,
        };
        save(d.path(), &s).unwrap();
        assert_eq!(active(d.path(), now).unwrap(), Some(s.clone()));
        // Over at its instant, without anyone removing the file.
        assert_eq!(active(d.path(), s.until).unwrap(), None);
        assert!(clear(d.path(), now).unwrap());
        assert!(!clear(d.path(), now).unwrap());
        assert_eq!(active(d.path(), now).unwrap(), None);
    }

    /// A snooze that is there but cannot be read counts as snoozed, with the reason; never as
    /// "no snooze". `resume` still clears it.
    #[test]
    fn an_unreadable_or_damaged_snooze_counts_as_snoozed() {
        let d = tempfile::tempdir().unwrap();
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let seen = |d: &Path| {
            let mut h = HostSnapshot::test(now);
            lay_on(&mut h, d);
            h
        };
        assert_eq!(seen(d.path()).snooze_unreadable, None, "no file: no snooze");
        // Damaged (no panic either).
        std::fs::write(path(d.path()), "{").unwrap();
        let h = seen(d.path());
        let why = h.snooze_unreadable.expect("damaged counts as snoozed");
        assert!(why.contains("snooze.json is damaged"), "{why}");
        assert!(clear(d.path(), now).unwrap(), "resume ends it");
        assert_eq!(seen(d.path()).snooze_unreadable, None);
        // Unreadable: a directory where the file should be reads as an I/O error (EISDIR),
        // as a missing descriptor (EMFILE) would.
        std::fs::create_dir(path(d.path())).unwrap();
        let why = seen(d.path())
            .snooze_unreadable
            .expect("unreadable counts as snoozed");
        assert!(why.contains("cannot read the owner's snooze"), "{why}");
    }
}
