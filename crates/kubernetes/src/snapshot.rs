//! `ClusterSnapshot`: what kubernetes mode observes in one cycle (idle job ads from the
//! whitelisted schedds, the startd ads its workers advertise, its pods and Jobs) and the
//! back-off book carried between cycles, as plain data. Its JSON form is the contract
//! `pilotd snapshot` prints and `pilotd plan --snapshot FILE` reads (README.md, "Snapshot
//! files").

use crate::ads::{JobAd, StartdAd};
use crate::backoff::BackoffBook;
use crate::observed::{WorkerJob, WorkerPod};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One observation of the pool and the namespace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterSnapshot {
    /// Always "kubernetes" for this kind of snapshot.
    pub mode: String,
    pub taken_at: DateTime<Utc>,
    pub jobs: Vec<JobAd>,
    pub startds: Vec<StartdAd>,
    /// Pod objects as the Kubernetes API returns them, read for what a decision needs
    /// (`observed`): a full body reads the same as the subset pilotd writes.
    pub pods: Vec<WorkerPod>,
    /// This provisioner's Jobs (pods not yet made, cleanup); absent in hand-written snapshots.
    #[serde(default)]
    pub kube_jobs: Vec<WorkerJob>,
    /// Back-off state carried between cycles, so a replay decides what the daemon decided.
    #[serde(default)]
    pub backoff: BackoffBook,
    /// Schedds whose query failed in this observation (skipped, logged).
    #[serde(default)]
    pub failed_schedds: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "{path}:{line}:{column}: not a kubernetes snapshot: {message}\n  hint: make one with `pilotd snapshot` in kubernetes mode"
    )]
    Parse {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "{path}: snapshot mode is `{mode}`, not `kubernetes`\n  hint: replay it with a pilotd.toml of the same mode"
    )]
    WrongMode { path: String, mode: String },
}

impl ClusterSnapshot {
    /// Parses a snapshot file's text; `path` only names it in errors.
    pub fn from_json(path: &str, text: &str) -> Result<ClusterSnapshot, SnapshotError> {
        let snap: ClusterSnapshot = serde_json::from_str(text).map_err(|e| located(path, e))?;
        snap.of_mode(path)
    }

    /// As `from_json`, from the file's bytes. One UTF-8 pass over the whole file, then the
    /// `&str` parser: serde_json's byte parser checks every key and kept string on its own,
    /// and on a 66 MB snapshot of real pod bodies (managedFields are mostly keys) those
    /// small checks cost about a tenth of the parse (callgrind, tests/bench/kube_plan.sh).
    /// Bytes that are not UTF-8 go to the byte parser, which says where.
    pub fn from_json_bytes(path: &str, bytes: &[u8]) -> Result<ClusterSnapshot, SnapshotError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => ClusterSnapshot::from_json(path, text),
            Err(_) => {
                let snap: ClusterSnapshot =
                    serde_json::from_slice(bytes).map_err(|e| located(path, e))?;
                snap.of_mode(path)
            }
        }
    }

    fn of_mode(self, path: &str) -> Result<ClusterSnapshot, SnapshotError> {
        if self.mode != "kubernetes" {
            return Err(SnapshotError::WrongMode {
                path: path.to_string(),
                mode: self.mode,
            });
        }
        Ok(self)
    }
}

fn located(path: &str, e: serde_json::Error) -> SnapshotError {
    SnapshotError::Parse {
        path: path.to_string(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_without_schedd_is_rejected_with_a_position() {
        let e = ClusterSnapshot::from_json(
            "s.json",
            r#"{"mode":"kubernetes","taken_at":"2026-12-01T21:30:00Z","jobs":[{"ClusterId":1}],"startds":[],"pods":[]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("s.json:1:"), "{e}");
        assert!(e.contains("ScheddName"), "{e}");
    }

    #[test]
    fn the_design_example_parses() {
        let s = ClusterSnapshot::from_json(
            "x",
            r#"{
  "mode": "kubernetes",
  "taken_at": "2026-12-01T21:30:00Z",
  "jobs":    [ { "ScheddName": "ap20.uc.osg-htc.org", "ClusterId": 12, "ProcId": 0, "JobStatus": 1,
                 "RequestCpus": 4, "RequestMemory": 8192, "RequestDisk": 10000000, "RequestGPUs": 1,
                 "RequestGPUTypes": null, "RequestLabels": null, "RequestDiskVolumes": null } ],
  "startds": [ { "Name": "slot1@osg-direct-x", "State": "Claimed", "Activity": "Busy",
                 "K8SPodName": "osg-direct-x" } ],
  "pods":    [ {"apiVersion":"v1","kind":"Pod","metadata":{"name":"osg-direct-x"},"status":{"phase":"Running"}} ]
}"#,
        )
        .unwrap();
        assert_eq!(s.jobs.len(), 1);
        assert_eq!(s.startds[0].k8s_pod_name.as_deref(), Some("osg-direct-x"));
        assert_eq!(s.pods[0].metadata.name, "osg-direct-x");
        assert!(s.kube_jobs.is_empty());
        let e = ClusterSnapshot::from_json(
            "v.json",
            r#"{"mode":"volunteer","taken_at":"2026-12-01T21:30:00Z","jobs":[],"startds":[],"pods":[]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("not `kubernetes`"));
    }
}
