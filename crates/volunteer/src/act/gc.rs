//! Garbage collection by TTL: finished workers, workers past `die_at`, scratch dirs of workers
//! that no longer exist, and old images of the worker repository that pilotd pulled (or that
//! carry its label) and nothing uses. The selection is pure; only containers and images with
//! pilotd's labels or in its pull record, and only scratch dirs with this instance's name
//! prefix, are ever candidates.

use crate::act::backend::{Backend, BackendError};
use crate::act::scratch::{self, RemovalError, ScratchError};
use crate::settings::WorkerSettings;
use crate::worker::PulledImage;
use crate::worker::{LocalImage, Worker, WorkerState, labels};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A scratch dir younger than this is never removed: its worker may be starting right now
/// (a `pilotd gc` beside a running daemon).
pub(crate) const SCRATCH_MIN_AGE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Item {
    RemoveWorker {
        id: String,
        name: String,
        why: String,
    },
    StopWorker {
        id: String,
        name: String,
        why: String,
    },
    RemoveScratch {
        path: PathBuf,
    },
    /// A worker's private copy of the pool token, left by a worker that is gone.
    RemoveTokenCopy {
        path: PathBuf,
    },
    RemoveImage {
        id: String,
        reference: String,
    },
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::RemoveWorker { name, why, .. } => write!(f, "remove worker {name} ({why})"),
            Item::StopWorker { name, why, .. } => write!(f, "stop worker {name} ({why})"),
            Item::RemoveScratch { path } => {
                write!(f, "remove scratch (dir or disk image) {}", path.display())
            }
            Item::RemoveTokenCopy { path } => write!(f, "remove token copy {}", path.display()),
            Item::RemoveImage { id, reference } => write!(f, "remove image {reference} ({id})"),
        }
    }
}

/// Workers to remove or stop (pure).
pub fn workers(list: &[Worker], now: DateTime<Utc>) -> Vec<Item> {
    list.iter()
        .filter_map(|w| {
            let (id, name) = (w.id.clone(), w.name.clone());
            if w.state.is_finished() || w.state == WorkerState::Created {
                Some(Item::RemoveWorker {
                    id,
                    name,
                    why: w.state.as_str().to_string(),
                })
            } else if matches!(
                w.state,
                WorkerState::Running | WorkerState::Paused | WorkerState::Restarting
            ) && w.die_at.is_some_and(|d| d <= now)
            {
                Some(Item::StopWorker {
                    id,
                    name,
                    why: "past its die_at".into(),
                })
            } else {
                None
            }
        })
        .collect()
}

/// Entries (name, age) of this instance whose worker no longer exists.
fn orphans<'a>(
    root: &'a Path,
    entries: &'a [(String, Duration)],
    list: &'a [Worker],
    prefix: &'a str,
) -> impl Iterator<Item = PathBuf> + 'a {
    entries
        .iter()
        .filter(move |(name, age)| {
            name.starts_with(prefix)
                && *age >= SCRATCH_MIN_AGE
                && !list.iter().any(|w| &w.name == name)
        })
        .map(|(name, _)| root.join(name))
}

/// Scratch dirs (name, age) of this instance whose worker no longer exists (pure).
pub fn scratch(
    root: &Path,
    entries: &[(String, Duration)],
    list: &[Worker],
    prefix: &str,
) -> Vec<Item> {
    let orphans = orphans(root, entries, list, prefix);
    orphans.map(|path| Item::RemoveScratch { path }).collect()
}

/// Token copies (name, age) of this instance whose worker no longer exists (pure).
pub fn token_copies(
    root: &Path,
    entries: &[(String, Duration)],
    list: &[Worker],
    prefix: &str,
) -> Vec<Item> {
    let orphans = orphans(root, entries, list, prefix);
    orphans.map(|path| Item::RemoveTokenCopy { path }).collect()
}

/// Images of the worker repository to remove (pure): pulled by pilotd or labelled by it, not
/// the current digest, not used by any listed worker. The engine refuses to remove an image a
/// container still uses, which is the second guard.
pub fn images(
    local: &[LocalImage],
    current_digest: Option<&str>,
    pulled: &[PulledImage],
    list: &[Worker],
) -> Vec<Item> {
    local
        .iter()
        .filter(|i| {
            let ours = pulled.iter().any(|p| p.id == i.id)
                || i.labels.get(labels::MANAGED).map(String::as_str) == Some("true");
            let digest_of = |r: &String| r.split_once('@').map(|(_, d)| d.to_string());
            let digests: Vec<String> = i.repo_digests.iter().filter_map(digest_of).collect();
            let current = current_digest.is_some_and(|c| digests.iter().any(|d| d == c));
            let used = list.iter().any(|w| digests.contains(&w.image_digest));
            ours && !current && !used
        })
        .map(|i| Item::RemoveImage {
            id: i.id.clone(),
            reference: i
                .repo_digests
                .first()
                .or(i.repo_tags.first())
                .cloned()
                .unwrap_or_default(),
        })
        .collect()
}

/// The entries of the scratch root with their ages, by worker name (a scratch dir, or a disk
/// image `<name>.img`); a missing root has none.
pub fn scratch_entries(root: &Path) -> Vec<(String, Duration)> {
    let mut out: Vec<(String, Duration)> = entries(root, true);
    for (name, age) in entries(root, false) {
        if let Some(worker) = name.strip_suffix(".img")
            && !out.iter().any(|(n, _)| n == worker)
        {
            out.push((worker.to_string(), age));
        }
    }
    out
}

/// Every worker name of this instance with something left in the scratch root or the tokens
/// dir, whatever its age (for `failsafe --remove`, once all workers are gone).
pub(crate) fn leftover_names(w: &WorkerSettings) -> Vec<String> {
    let prefix = w.name_prefix();
    let mut names: Vec<String> = scratch_entries(&w.scratch_root)
        .into_iter()
        .chain(token_entries(&w.tokens_root))
        .map(|(n, _)| n)
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The token copies (files) with their ages; a missing dir has none.
pub fn token_entries(root: &Path) -> Vec<(String, Duration)> {
    entries(root, false)
}

fn entries(root: &Path, dirs: bool) -> Vec<(String, Duration)> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return vec![];
    };
    let now = SystemTime::now();
    dir.flatten()
        .filter(|e| {
            e.file_type()
                .is_ok_and(|t| if dirs { t.is_dir() } else { t.is_file() })
        })
        .filter_map(|e| {
            let age = e
                .metadata()
                .ok()?
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            Some((e.file_name().to_string_lossy().to_string(), age))
        })
        .collect()
}

/// Why one item was not collected.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Scratch(#[from] ScratchError),
    /// An image still used by a container (possibly a foreign one) is kept.
    #[error("kept: {0}")]
    InUse(String),
}

/// What became of one item; shown as the item, or the item and why it was not done.
#[derive(Debug)]
pub struct Collected<'a> {
    pub item: &'a Item,
    pub result: Result<(), GcError>,
}

impl std::fmt::Display for Collected<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.result {
            Ok(()) => write!(f, "{}", self.item),
            Err(e) => write!(f, "{}: {e}", self.item),
        }
    }
}

/// Carries out GC items, each whatever became of the others. A worker, and whatever of one is
/// left outside its container, goes through the executor's one removal (`scratch`).
pub async fn apply<'a, B: Backend>(
    backend: &B,
    worker: &WorkerSettings,
    items: &'a [Item],
    grace: Duration,
) -> Vec<Collected<'a>> {
    let mut out = Vec::new();
    for item in items {
        let result = match item {
            Item::RemoveWorker { id, name, .. } => {
                match scratch::remove_worker(backend, worker, id, name).await {
                    Ok(()) => Ok(()),
                    Err(RemovalError::Container(e)) => Err(e.into()),
                    Err(RemovalError::Leftovers(e)) => Err(e.into()),
                }
            }
            Item::StopWorker { id, .. } => backend.stop(id, grace).await.map_err(GcError::from),
            Item::RemoveTokenCopy { path } | Item::RemoveScratch { path } => {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default();
                scratch::remove(backend, worker, &name)
                    .await
                    .map_err(GcError::from)
            }
            Item::RemoveImage { id, .. } => match backend.remove_image(id).await {
                Ok(()) => Ok(()),
                Err(BackendError::Conflict { message, .. }) => Err(GcError::InUse(message)),
                Err(e) => Err(e.into()),
            },
        };
        out.push(Collected { item, result });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::collections::BTreeMap;

    fn w(name: &str, state: WorkerState, digest: &str, die_at: Option<DateTime<Utc>>) -> Worker {
        Worker {
            name: name.into(),
            die_at,
            image_digest: digest.into(),
            ..Worker::test(&format!("id-{name}"), state)
        }
    }

    fn img(id: &str, digest: &str, label: bool) -> LocalImage {
        LocalImage {
            size: 0,
            id: id.into(),
            repo_digests: vec![format!("r/w@{digest}")],
            repo_tags: vec![],
            labels: if label {
                BTreeMap::from([(labels::MANAGED.to_string(), "true".to_string())])
            } else {
                BTreeMap::new()
            },
            created: None,
        }
    }

    #[test]
    fn token_copies_go_with_their_workers_and_only_ours() {
        let root = Path::new("/s/tokens");
        let old = Duration::from_secs(3600);
        let entries = vec![
            ("pilotd-t-gone".to_string(), old),
            ("pilotd-t-live".to_string(), old),
            ("pilotd-t-young".to_string(), Duration::from_secs(5)),
            ("pilotd-other-gone".to_string(), old),
        ];
        let list = vec![w("pilotd-t-live", WorkerState::Running, "sha256:1", None)];
        assert_eq!(
            token_copies(root, &entries, &list, "pilotd-t-"),
            vec![Item::RemoveTokenCopy {
                path: root.join("pilotd-t-gone")
            }]
        );
    }

    #[test]
    fn selects_exactly_what_is_ours_and_unused() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let list = vec![
            w("pilotd-t-a", WorkerState::Exited, "sha256:1", None),
            w("pilotd-t-b", WorkerState::Running, "sha256:2", Some(now)),
            w(
                "pilotd-t-c",
                WorkerState::Running,
                "sha256:2",
                Some(now + chrono::Duration::hours(1)),
            ),
        ];
        let names: Vec<String> = workers(&list, now).iter().map(|i| i.to_string()).collect();
        assert_eq!(
            names,
            vec![
                "remove worker pilotd-t-a (exited)",
                "stop worker pilotd-t-b (past its die_at)"
            ]
        );

        let old = Duration::from_secs(3600);
        let entries = vec![
            ("pilotd-t-a".to_string(), old),
            ("pilotd-t-gone".to_string(), old),
            ("pilotd-t-new".to_string(), Duration::from_secs(5)),
            ("someone-else".to_string(), old),
        ];
        let root = Path::new("/s");
        assert_eq!(
            scratch(root, &entries, &list, "pilotd-t-"),
            vec![Item::RemoveScratch {
                path: "/s/pilotd-t-gone".into()
            }]
        );

        let pulled = vec![PulledImage {
            id: "old".into(),
            pinned: "r/w@sha256:0".into(),
            pulled_at: now,
        }];
        let local = vec![
            img("old", "sha256:0", false),     // pulled by pilotd, unused: removed
            img("labelled", "sha256:9", true), // labelled: removed
            img("foreign", "sha256:8", false), // neither: kept
            img("current", "sha256:3", true),  // current digest: kept
            img("inuse", "sha256:2", true),    // used by a worker: kept
        ];
        let ids: Vec<String> = images(&local, Some("sha256:3"), &pulled, &list)
            .into_iter()
            .map(|i| match i {
                Item::RemoveImage { id, .. } => id,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(ids, vec!["old", "labelled"]);
    }
}
