//! What a worker is, as data shared by the plan (pure), the backends and the status file:
//! the worker as observed (`Worker`, rebuilt from the runtime's labels), the spec of a new one
//! (`WorkerSpec`, built by the plan, executed verbatim by a backend), local images, CPU samples,
//! the label names and image references.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Label names. A container without `managed` and the daemon's `instance` is never touched.
pub(crate) mod labels {
    pub(crate) const MANAGED: &str = "pilotd.managed";
    pub(crate) const INSTANCE: &str = "pilotd.instance";
    pub(crate) const CREATED: &str = "pilotd.created";
    pub(crate) const ACCEPT_UNTIL: &str = "pilotd.accept-until";
    pub(crate) const DIE_AT: &str = "pilotd.die-at";
    pub(crate) const IMAGE_DIGEST: &str = "pilotd.image-digest";
    pub(crate) const SPEC_HASH: &str = "pilotd.spec-hash";
    /// The image reference as configured (tag form), for `status`.
    pub(crate) const IMAGE: &str = "pilotd.image";
    /// The GPU indices given to the worker ("0,1"), so no two workers share one.
    pub(crate) const GPUS: &str = "pilotd.gpus";
    /// The worker's disk share in KiB, which its scratch dir may not exceed.
    pub(crate) const DISK_KIB: &str = "pilotd.disk-kib";
    /// The worker's whole CPU share (NanoCpus), which a lifted CPU cap gives back.
    pub(crate) const NANO_CPUS: &str = "pilotd.nano-cpus";
}

/// A worker's state as the runtime reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Created but never started (pilotd died between create and start).
    Created,
    Running,
    Paused,
    Restarting,
    /// Being removed by the engine.
    Removing,
    Exited,
    Dead,
    /// A state string this build does not know (newer engine, Podman's "stopped").
    Unknown,
}

impl WorkerState {
    pub(crate) fn parse(s: &str) -> WorkerState {
        use WorkerState::*;
        // Podman says "stopped" for what Docker calls "exited".
        let s = if s == "stopped" { "exited" } else { s };
        let known = [Created, Running, Paused, Restarting, Removing, Exited, Dead];
        known
            .into_iter()
            .find(|w| w.as_str() == s)
            .unwrap_or(Unknown)
    }
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            WorkerState::Created => "created",
            WorkerState::Running => "running",
            WorkerState::Paused => "paused",
            WorkerState::Restarting => "restarting",
            WorkerState::Removing => "removing",
            WorkerState::Exited => "exited",
            WorkerState::Dead => "dead",
            WorkerState::Unknown => "unknown",
        }
    }
    /// Finished: its outcome can be recorded and the container removed.
    pub(crate) fn is_finished(self) -> bool {
        matches!(self, WorkerState::Exited | WorkerState::Dead)
    }
}

/// A worker as observed, rebuilt from the runtime and its labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Worker {
    pub id: String,
    pub name: String,
    pub state: WorkerState,
    /// From the `pilotd.created` label (the engine's own time when the label is unreadable).
    pub created: Option<DateTime<Utc>>,
    pub accept_until: Option<DateTime<Utc>>,
    pub die_at: Option<DateTime<Utc>>,
    /// The configured reference it was started from.
    pub image: String,
    pub image_digest: String,
    pub spec_hash: String,
    /// Only for finished workers.
    pub exit_code: Option<i64>,
    pub finished_at: Option<DateTime<Utc>>,
    pub oom_killed: bool,
    /// GPU indices given to it (from its label).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
    /// Its disk share (from its label); `None` for workers of older pilotds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_kib: Option<u64>,
    /// Its CPU quota as the engine holds it now (NanoCpus: 10⁹ a CPU), which a CPU cap
    /// lowers (`comfort`); `None` for a finished worker, or one the engine would not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nano_cpus: Option<i64>,
    /// Its whole CPU share (from its label); `None` for workers of older pilotds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_nano_cpus: Option<i64>,
}

impl Worker {
    /// A worker as its labels describe it (`label` reads one by name); what the engine alone
    /// knows (its end, its quota) is left for the caller to fill in.
    pub(crate) fn from_labels<'a>(
        id: String,
        name: String,
        state: WorkerState,
        label: impl Fn(&str) -> Option<&'a String>,
    ) -> Worker {
        let text = |key| label(key).cloned().unwrap_or_default();
        Worker {
            id,
            name,
            state,
            created: parse_instant(label(labels::CREATED)),
            accept_until: parse_instant(label(labels::ACCEPT_UNTIL)),
            die_at: parse_instant(label(labels::DIE_AT)),
            image: text(labels::IMAGE),
            image_digest: text(labels::IMAGE_DIGEST),
            spec_hash: text(labels::SPEC_HASH),
            exit_code: None,
            finished_at: None,
            oom_killed: false,
            gpus: parse_gpus_label(label(labels::GPUS)),
            disk_kib: label(labels::DISK_KIB).and_then(|v| v.parse().ok()),
            nano_cpus: None,
            share_nano_cpus: label(labels::NANO_CPUS).and_then(|v| v.parse().ok()),
        }
    }

    #[cfg(test)]
    /// A test worker `pilotd-t-ID` in `state`, nothing else known; set the rest with struct
    /// update syntax.
    pub(crate) fn test(id: &str, state: WorkerState) -> Worker {
        Worker::from_labels(id.into(), format!("pilotd-t-{id}"), state, |_| None)
    }
}

/// GPU indices as a label value ("0,1") and back; anything unreadable is dropped.
pub(crate) fn gpus_label(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

pub(crate) fn parse_gpus_label(v: Option<&String>) -> Vec<u32> {
    v.map(|v| v.split(',').filter_map(|i| i.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Everything needed to create one worker container. Built by the plan (pure), executed
/// verbatim by a backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerSpec {
    pub name: String,
    /// The configured reference (tag form), recorded in a label for `status`.
    pub image: String,
    /// `repo@sha256:…`: workers always run the exact image that was resolved and pulled.
    pub image_pinned: String,
    pub image_digest: String,
    pub labels: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub nano_cpus: i64,
    pub memory_bytes: i64,
    /// GPUs requested from the engine's NVIDIA device driver, by index: each worker its own.
    pub gpu_ids: Vec<u32>,
    /// The root filesystem is read-only (tmpfs at /tmp and /var/tmp); the worker writes only
    /// to its scratch dir.
    pub read_only_rootfs: bool,
    pub pids_limit: i64,
    /// Host path bind-mounted read-only at `token_mount`: this worker's own copy of the
    /// site's token, readable by the worker's uid. Never in env.
    pub token_file: Option<PathBuf>,
    /// The site's token file the copy is made from (root's, 0600; never mounted itself).
    pub token_source: Option<PathBuf>,
    /// The ids the scratch dir and the token copy are given to (`None`: the image's user,
    /// unknown to pilotd).
    pub owner: Option<(u32, u32)>,
    pub token_mount: PathBuf,
    /// Host path of this worker's scratch dir, mounted at `scratch_mount` when its disk share
    /// is only measured (`disk_image` is `None`).
    pub scratch_dir: PathBuf,
    /// The disk image whose filesystem is the worker's scratch, of exactly its disk share:
    /// the kernel enforces the share (`scratch`). `None`: the owner chose a measured share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_image: Option<DiskImage>,
    /// The loop device the image is attached to, filled in by the executor just before the
    /// start (the engine mounts it as a `local` volume named after the worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch_device: Option<PathBuf>,
    pub scratch_mount: PathBuf,
    pub cvmfs: Option<PathBuf>,
    /// Host directory of the machine's slot-ad file (`slot_ad`), bind-mounted read-only at
    /// `slot_ad::MOUNT`.
    pub ad_dir: Option<PathBuf>,
    pub cap_add: Vec<String>,
    pub user: Option<String>,
    pub network: Option<String>,
}

/// A worker's disk image: where it lives and how big it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiskImage {
    pub path: PathBuf,
    pub bytes: u64,
}

/// A local image, as the engine has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalImage {
    /// Config digest (`sha256:…`), the engine's image id.
    pub id: String,
    /// `repo@sha256:…` entries: present for pulled or pushed images.
    pub repo_digests: Vec<String>,
    pub repo_tags: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub created: Option<DateTime<Utc>>,
    /// Bytes on disk as the engine reports them (0 when unknown).
    pub size: u64,
}

/// A pull's result: the image now local, and the bytes the engine downloaded for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    pub image: LocalImage,
    /// The layers' bytes the engine fetched (their compressed sizes, as its pull progress
    /// reported them); a layer the engine already had costs nothing and counts nothing.
    pub bytes: u64,
}

/// Cumulative CPU counters of one worker, from the engine's stats. The fraction of the whole
/// machine between two samples is `Δworker / Δsystem` (both in ns, system over all CPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuSample {
    pub worker_ns: u64,
    pub system_ns: u64,
    /// The bytes its network interfaces carried, read in the same statistics call (`None`:
    /// the engine gave no network figures, as for a worker that has ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetSample>,
}

/// Cumulative bytes a worker's network interfaces received and sent (all of them, summed), as
/// the engine's statistics report them. The counters live in the worker's network namespace:
/// they start at zero with it, and start again at zero when the container restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NetSample {
    pub received: u64,
    pub sent: u64,
}

impl NetSample {
    /// The bytes moved since `prev`, per direction; never negative. A counter below its
    /// previous reading started again from zero (the container restarted): all of it is new.
    pub(crate) fn since(self, prev: NetSample) -> NetSample {
        let delta = |now: u64, before: u64| now.checked_sub(before).unwrap_or(now);
        NetSample {
            received: delta(self.received, prev.received),
            sent: delta(self.sent, prev.sent),
        }
    }
}

impl CpuSample {
    /// The fraction of the whole machine the worker used since `prev`; `None` when the
    /// counters went backwards (the engine restarted) or no time passed.
    pub(crate) fn fraction_since(self, prev: CpuSample) -> Option<f64> {
        let worker = self.worker_ns.checked_sub(prev.worker_ns)?;
        let system = self.system_ns.checked_sub(prev.system_ns)?;
        (system > 0).then(|| (worker as f64 / system as f64).clamp(0.0, 1.0))
    }
}

/// What the daemon knows about the worker image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum ImageState {
    /// Resolved and present locally: new workers use `pinned` (`repo@sha256:…`).
    Ready { digest: String, pinned: String },
    /// The registry points the tag at `digest`, which is not here yet.
    NeedsPull { repository: String, digest: String },
    /// A pull of `digest` is running.
    Pulling { digest: String },
    /// Nothing usable (registry unreachable and no fresh local image, reference not allowed…).
    Unavailable { reason: String },
}

/// Splits a fully qualified reference into repository and tag or digest:
/// `host:5000/a/b:tag` → (`host:5000/a/b`, Some(tag), None); `host/a@sha256:…` → digest.
pub fn split_reference(reference: &str) -> (String, Option<String>, Option<String>) {
    if let Some((repo, digest)) = reference.split_once('@') {
        let repo = strip_tag(repo);
        return (repo.to_string(), None, Some(digest.to_string()));
    }
    let repo = strip_tag(reference);
    let tag = reference
        .get(repo.len() + 1..)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    (repo.to_string(), tag, None)
}

fn strip_tag(s: &str) -> &str {
    // A ':' after the last '/' is a tag; one before it is a registry port.
    let slash = s.rfind('/').map(|i| i + 1).unwrap_or(0);
    match s[slash..].rfind(':') {
        Some(i) => &s[..slash + i],
        None => s,
    }
}

/// Parses an RFC 3339 label value; a malformed label reads as absent (never a panic).
pub(crate) fn parse_instant(s: Option<&String>) -> Option<DateTime<Utc>> {
    s.and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_repository_tag_and_digest() {
        assert_eq!(
            split_reference("127.0.0.1:5000/pilotd-test/worker:1"),
            (
                "127.0.0.1:5000/pilotd-test/worker".into(),
                Some("1".into()),
                None
            )
        );
        assert_eq!(
            split_reference("hub.example.org/a/b@sha256:abc"),
            (
                "hub.example.org/a/b".into(),
                None,
                Some("sha256:abc".into())
            )
        );
        assert_eq!(
            split_reference("localhost:5000/w"),
            ("localhost:5000/w".into(), None, None)
        );
    }

    #[test]
    fn cpu_fraction_is_a_share_of_the_machine() {
        let a = CpuSample {
            worker_ns: 1_000,
            system_ns: 10_000,
            net: None,
        };
        let b = CpuSample {
            worker_ns: 3_000,
            system_ns: 18_000,
            net: None,
        };
        assert_eq!(b.fraction_since(a), Some(0.25));
        assert_eq!(
            a.fraction_since(b),
            None,
            "counters went backwards (restart)"
        );
        assert_eq!(a.fraction_since(a), None);
    }

    #[test]
    fn network_deltas_are_never_negative() {
        let at = |received, sent| NetSample { received, sent };
        assert_eq!(at(500, 70).since(at(200, 20)), at(300, 50));
        // The container restarted: its counters began again at zero.
        assert_eq!(at(40, 90).since(at(200, 20)), at(40, 70));
        assert_eq!(at(0, 0).since(at(200, 20)), at(0, 0));
    }

    #[test]
    fn unknown_states_are_not_errors() {
        assert_eq!(WorkerState::parse("stopped"), WorkerState::Exited);
        assert_eq!(WorkerState::parse("weird"), WorkerState::Unknown);
    }
}

/// One worker's scratch, as last measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScratchUse {
    pub used_kib: u64,
    /// Its disk image's filesystem has no room left (or no inode).
    pub full: bool,
}

/// What a worker's image filesystem holds, and whether it is full: less than 1% of it (at
/// least one block) or no inode left. A job writing to the last byte is ended; one that
/// leaves itself a little room is not.
impl ScratchUse {
    /// For `status` and the page: "12MiB of 1GiB", "FULL: 1GiB of 1GiB" (`share_kib` from the
    /// worker's label; the share alone when it is unknown).
    pub(crate) fn describe(&self, share_kib: Option<u64>) -> String {
        let used = pilotd_core::config::units::format_size(self.used_kib.saturating_mul(1024));
        let of = share_kib
            .map(|k| {
                format!(
                    " of {}",
                    pilotd_core::config::units::format_size(k.saturating_mul(1024))
                )
            })
            .unwrap_or_default();
        if self.full {
            format!("FULL: {used}{of}")
        } else {
            format!("{used}{of}")
        }
    }
}

/// A worker's scratch image: its file under the scratch root and its size. The plan names it
/// in a new worker's spec; `scratch` makes and removes it.
pub(crate) mod scratch_image {
    use std::path::{Path, PathBuf};

    /// The smallest image mke2fs makes a usable ext4 filesystem of.
    pub(crate) const MIN_BYTES: u64 = 4 << 20;

    /// The image of a worker named `name` under the scratch root.
    pub(crate) fn path(scratch_root: &Path, name: &str) -> PathBuf {
        scratch_root.join(format!("{name}.img"))
    }

    /// The image's size for a share: whole 4 KiB blocks, at least what mke2fs needs.
    pub(crate) fn bytes(share_kib: u64) -> u64 {
        (share_kib.saturating_mul(1024) / 4096 * 4096).max(MIN_BYTES)
    }
}

/// Where the machine's slot ad (`slot_ad`, written into `<state_dir>/ad`) appears in each
/// worker: the directory's read-only mount, and the file in it.
pub(crate) mod ad {
    pub(crate) const MOUNT: &str = "/pilotd";
    pub(crate) const FILE: &str = "slot.ad";

    /// The file as workers see it (the `{ad_file}` template value).
    pub(crate) fn file_in_worker() -> String {
        format!("{MOUNT}/{FILE}")
    }
}

/// What pilotd knows about its worker image.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ImageRecord {
    /// The configured reference (tag or digest form).
    pub reference: String,
    /// The digest the registry last named for it.
    pub digest: Option<String>,
    /// Last attempt to ask the registry, successful or not.
    pub checked_at: Option<DateTime<Utc>>,
    /// Last time the registry confirmed `digest`.
    pub verified_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// Consecutive failed registry checks or pulls.
    pub failures: u32,
    /// No registry request (check or pull) before this instant, after failures.
    pub retry_at: Option<DateTime<Utc>>,
}

/// An image pilotd pulled: only these (and images labelled by pilotd) are ever removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PulledImage {
    pub id: String,
    pub pinned: String,
    pub pulled_at: DateTime<Utc>,
}
