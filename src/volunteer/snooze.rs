//! The owner's snooze (`pilotd snooze`): "not now" until an instant, kept in
//! `<state_dir>/snooze.json` so it survives a daemon restart. The daemon lays it on every
//! observation (`HostSnapshot::snoozed_until`) and the policy decides on it like any other
//! sign that the owner needs the machine. A snooze whose instant has passed is simply over;
//! `resume` removes the file.

use crate::service::state_file::write_atomically;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SnoozeError {
    #[error("cannot write {}: {source}\n  hint: pilotd needs a writable state_dir (pilotd.toml `state_dir`)", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One snooze: until when, who asked, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snooze {
    pub until: DateTime<Utc>,
    /// The user name (or `uid N`) of whoever asked.
    pub by: String,
    pub at: DateTime<Utc>,
}

/// The longest snooze taken: a forgotten snooze must not retire a machine for good.
pub const LONGEST: std::time::Duration = std::time::Duration::from_secs(7 * 86_400);

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("snooze.json")
}

/// The snooze in force at `now`, if any. An unreadable or damaged file counts as no snooze
/// and is said in the log: the policy's other rules still protect the owner, and a snooze
/// that cannot be read cannot be shown or resumed either.
pub fn active(state_dir: &Path, now: DateTime<Utc>) -> Option<Snooze> {
    let p = path(state_dir);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("cannot read {}: {e}; no snooze in force", p.display());
            return None;
        }
    };
    match serde_json::from_str::<Snooze>(&text) {
        Ok(s) if s.until > now => Some(s),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!("{} is damaged ({e}); no snooze in force", p.display());
            None
        }
    }
}

pub fn save(state_dir: &Path, s: &Snooze) -> Result<(), SnoozeError> {
    let p = path(state_dir);
    let mut body = serde_json::to_vec_pretty(s).unwrap_or_default();
    body.push(b'\n');
    write_atomically(&p, &body).map_err(|source| SnoozeError::Write { path: p, source })
}

/// Ends any snooze; whether one was in force at `now`.
pub fn clear(state_dir: &Path, now: DateTime<Utc>) -> Result<bool, SnoozeError> {
    let was = active(state_dir, now).is_some();
    let p = path(state_dir);
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(was),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(was),
        Err(source) => Err(SnoozeError::Remove { path: p, source }),
    }
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
        assert_eq!(active(d.path(), now), None);
        let s = Snooze {
            until: now + chrono::Duration::hours(1),
            by: "alice".into(),
            at: now,
        };
        save(d.path(), &s).unwrap();
        assert_eq!(active(d.path(), now), Some(s.clone()));
        // Over at its instant, without anyone removing the file.
        assert_eq!(active(d.path(), s.until), None);
        assert!(clear(d.path(), now).unwrap());
        assert!(!clear(d.path(), now).unwrap());
        assert_eq!(active(d.path(), now), None);
        // A damaged file is no snooze (and no panic).
        std::fs::write(path(d.path()), "{").unwrap();
        assert_eq!(active(d.path(), now), None);
    }
}
