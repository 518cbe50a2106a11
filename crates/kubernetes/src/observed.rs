//! What a decision needs of a worker pod or Job, and nothing more. A real API server returns
//! about 8.7 kB per pod (managedFields of two managers, the pod spec with its volumes and 14
//! env vars, five conditions, a container status); a decision reads a dozen fields. These
//! types deserialize straight from the API's bodies (a list page, a snapshot file), skipping
//! the rest without building it, so memory follows the number of pods, not their size.
//! They serialize as a subset of the same object (`apiVersion`, `kind`, `metadata`,
//! `status`), so a snapshot written by `pilotd snapshot` is still a list of Pod and Job
//! objects as the API knows them, and a snapshot holding full objects reads the same.

// From their one home, not through `shape`: `shape` reads `Meta` from here.
use crate::config::names::{POD_DISK_VOLUMES, POD_GPU_TYPES, POD_LABELS};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// The label the Job controller puts on a Job's pods (Kubernetes 1.27+), and its older name.
pub(crate) const JOB_NAME_LABELS: [&str; 2] = ["batch.kubernetes.io/job-name", "job-name"];

/// The annotations a decision reads: the shape fields too long or odd for a label.
const KEPT_ANNOTATIONS: [&str; 3] = [POD_DISK_VOLUMES, POD_GPU_TYPES, POD_LABELS];

fn kept_annotations<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let mut all: BTreeMap<String, String> =
        Option::<BTreeMap<String, String>>::deserialize(d)?.unwrap_or_default();
    all.retain(|k, _| KEPT_ANNOTATIONS.contains(&k.as_str()));
    Ok(all)
}

/// The metadata a decision reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    pub name: String,
    #[serde(
        deserialize_with = "null_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
    /// Only the shape annotations (`PodDiskVolumes`, `PodGPUTypes`, `PodLabels`).
    #[serde(
        deserialize_with = "kept_annotations",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<DateTime<Utc>>,
}

/// One container's status: that it exists is what tells a pod whose worker ran from one that
/// never started a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerSeen {
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStatusSeen {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<DateTime<Utc>>,
    /// `None` when the API gave no list at all (the pod never got as far as a container).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerSeen>>,
}

/// A worker pod as a decision sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkerPod {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    #[serde(deserialize_with = "null_default")]
    pub status: PodStatusSeen,
}

impl Default for WorkerPod {
    fn default() -> Self {
        WorkerPod {
            api_version: "v1".into(),
            kind: "Pod".into(),
            metadata: Meta::default(),
            status: PodStatusSeen::default(),
        }
    }
}

fn null_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl WorkerPod {
    /// The Job this pod belongs to, from the Job controller's label.
    pub(crate) fn job_name(&self) -> Option<&str> {
        JOB_NAME_LABELS
            .iter()
            .find_map(|l| self.metadata.labels.get(*l))
            .map(String::as_str)
    }
}

/// One Job condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobConditionSeen {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JobStatusSeen {
    #[serde(
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub conditions: Vec<JobConditionSeen>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<DateTime<Utc>>,
}

/// A worker Job as a decision sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkerJob {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    #[serde(deserialize_with = "null_default")]
    pub status: JobStatusSeen,
}

impl Default for WorkerJob {
    fn default() -> Self {
        WorkerJob {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            metadata: Meta::default(),
            status: JobStatusSeen::default(),
        }
    }
}

/// How a Job ended, if it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobEnd {
    Complete,
    Failed,
}

impl WorkerJob {
    /// How and when the Job finished (its Complete or Failed condition became true).
    pub(crate) fn finished(&self) -> Option<(JobEnd, Option<DateTime<Utc>>)> {
        let c = self
            .status
            .conditions
            .iter()
            .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")?;
        let end = if c.type_ == "Complete" {
            JobEnd::Complete
        } else {
            JobEnd::Failed
        };
        Some((end, c.last_transition_time.or(self.status.completion_time)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod as a real API server returns it (trimmed of nothing a decision could miss).
    const REAL_POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"osg-direct-6750a0b8-000001-x2k9q","generateName":"osg-direct-6750a0b8-000001-","namespace":"osg","uid":"0b9f","resourceVersion":"123","creationTimestamp":"2026-12-01T21:00:00Z","labels":{"PodCPUs":"1","batch.kubernetes.io/job-name":"osg-direct-6750a0b8-000001","job-name":"osg-direct-6750a0b8-000001","controller-uid":"0b9f"},"annotations":{"PodGPUTypes":"A100,A40","kubectl.kubernetes.io/last-applied-configuration":"{}"},"ownerReferences":[{"apiVersion":"batch/v1","kind":"Job","name":"osg-direct-6750a0b8-000001","uid":"0b9f","controller":true,"blockOwnerDeletion":true}],"finalizers":["batch.kubernetes.io/job-tracking"],"managedFields":[{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2026-12-01T21:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{}}}]},"spec":{"containers":[{"name":"htcondor","image":"x","env":[{"name":"A","value":"1"}]}]},"status":{"phase":"Failed","conditions":[{"type":"Ready","status":"False"}],"startTime":"2026-12-01T21:00:05Z","containerStatuses":[{"name":"htcondor","ready":false,"restartCount":0,"image":"x","imageID":"","state":{"terminated":{"exitCode":1}}}]}}"#;

    #[test]
    fn a_real_pod_body_keeps_only_what_a_decision_reads_and_round_trips() {
        let p: WorkerPod = serde_json::from_str(REAL_POD).unwrap();
        assert_eq!(p.metadata.name, "osg-direct-6750a0b8-000001-x2k9q");
        assert_eq!(p.job_name(), Some("osg-direct-6750a0b8-000001"));
        assert_eq!(p.status.phase.as_deref(), Some("Failed"));
        assert_eq!(p.status.container_statuses.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            p.metadata.annotations.keys().collect::<Vec<_>>(),
            vec!["PodGPUTypes"],
            "unrelated annotations are not kept"
        );
        let again: WorkerPod = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(again, p);
        // A pod without status, labels or a phase (a hand-written snapshot) still reads.
        let bare: WorkerPod =
            serde_json::from_str(r#"{"metadata":{"name":"x","labels":null},"status":null}"#)
                .unwrap();
        assert_eq!(bare.status, PodStatusSeen::default());
    }

    #[test]
    fn a_job_says_how_and_when_it_ended() {
        let j: WorkerJob = serde_json::from_str(r#"{"metadata":{"name":"j"},"status":{"conditions":[{"type":"FailureTarget","status":"True"},{"type":"Failed","status":"True","lastTransitionTime":"2026-12-01T21:00:00Z"}]}}"#).unwrap();
        let (end, at) = j.finished().unwrap();
        assert_eq!(end, JobEnd::Failed);
        assert_eq!(at.unwrap().to_rfc3339(), "2026-12-01T21:00:00+00:00");
        assert!(WorkerJob::default().finished().is_none());
    }
}
