//! The spec of a new worker (pure): resources from the decision, the env templated, and the
//! labels that let a restarted pilotd rebuild everything; and the hash that tells `status`
//! which workers still run an older configuration.

use super::rfc3339;
use crate::decide::policy::Supply;
use crate::settings::WorkerSettings;
use crate::worker::scratch_image;
use crate::worker::{DiskImage, WorkerSpec, labels};
use chrono::{DateTime, Utc};
use pilotd_core::config::policy::DiskLimit;
use pilotd_core::config::site::WorkerUser;
use pilotd_core::config::template;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

fn whole_hours(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    ((to - from).num_seconds() / 3600).max(0)
}

/// The spec of a new worker: resources from the decision, env templated, labels that let a
/// restarted pilotd rebuild everything.
pub(crate) fn worker_spec(
    supply: &Supply,
    s: &WorkerSettings,
    digest: &str,
    pinned: &str,
    now: DateTime<Utc>,
    index: usize,
    free_hours: Option<u64>,
) -> WorkerSpec {
    let r = supply.per_worker;
    let name = format!(
        "{}{}-{index}",
        s.name_prefix(),
        now.format("%Y%m%d-%H%M%S%3f")
    );
    let spec_hash = spec_hash(supply, s, digest);
    let at = |t: Option<DateTime<Utc>>| t.map(rfc3339).unwrap_or_default();
    let unix = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp().to_string());
    let hours = |from, to| whole_hours(from, to).to_string();
    let (accept_until, die_at) = (supply.accept_until, supply.die_at);
    let idle = s.idle_timeout.as_secs();
    let values: BTreeMap<&'static str, String> = BTreeMap::from([
        ("cpus", r.cpus.to_string()),
        ("memory_mib", r.memory_mib.to_string()),
        ("disk_kib", r.disk_kib.to_string()),
        ("gpus", r.gpus.to_string()),
        ("idle_minutes", idle.div_ceil(60).to_string()),
        ("idle_seconds", idle.to_string()),
        ("accept_until", at(accept_until)),
        ("accept_until_unix", unix(accept_until).unwrap_or_default()),
        ("die_at", at(die_at)),
        ("die_at_unix", unix(die_at).unwrap_or_default()),
        (
            "hours_left",
            die_at.map(|d| hours(now, d)).unwrap_or_default(),
        ),
        (
            "accept_hours",
            accept_until.map(|a| hours(now, a)).unwrap_or_default(),
        ),
        (
            "retire_hours",
            accept_until
                .zip(die_at)
                .map(|(a, d)| hours(a, d))
                .unwrap_or_default(),
        ),
        ("ad_file", crate::worker::ad::file_in_worker()),
        ("worker_name", name.clone()),
        ("instance", s.instance.clone()),
        ("token_path", s.token_mount.display().to_string()),
        ("scratch_path", s.scratch_mount.display().to_string()),
        (
            "free_hours",
            free_hours.map(|h| h.to_string()).unwrap_or_default(),
        ),
    ]);
    let env = s
        .env
        .iter()
        .map(|(k, v)| (k.clone(), template::render(v, &values)))
        .collect();

    let nano_cpus = i64::from(r.cpus.max(1)) * 1_000_000_000;
    let l = [
        (labels::MANAGED, "true".to_string()),
        (labels::INSTANCE, s.instance.clone()),
        (labels::CREATED, rfc3339(now)),
        (labels::IMAGE_DIGEST, digest.to_string()),
        (labels::SPEC_HASH, spec_hash),
        (labels::IMAGE, s.image.clone()),
        (labels::DISK_KIB, r.disk_kib.to_string()),
        (labels::NANO_CPUS, nano_cpus.to_string()),
    ]
    .into_iter()
    .chain(accept_until.map(|a| (labels::ACCEPT_UNTIL, rfc3339(a))))
    .chain(die_at.map(|d| (labels::DIE_AT, rfc3339(d))))
    .map(|(k, v)| (k.to_string(), v))
    .collect();

    WorkerSpec {
        image: s.image.clone(),
        image_pinned: pinned.to_string(),
        image_digest: digest.to_string(),
        labels: l,
        env,
        nano_cpus,
        gpu_ids: Vec::new(),
        read_only_rootfs: s.read_only_rootfs,
        memory_bytes: i64::try_from(r.memory_mib.saturating_mul(1 << 20)).unwrap_or(i64::MAX),
        pids_limit: s.pids_limit,
        token_file: s.token_file.as_ref().map(|_| s.tokens_root.join(&name)),
        token_source: s.token_file.clone(),
        owner: match s.user {
            WorkerUser::Ids { uid, gid } => Some((uid, gid)),
            WorkerUser::Image => None,
        },
        token_mount: s.token_mount.clone(),
        scratch_dir: s.scratch_root.join(&name),
        disk_image: (s.disk_limit == DiskLimit::Enforced).then(|| DiskImage {
            path: scratch_image::path(&s.scratch_root, &name),
            bytes: scratch_image::bytes(r.disk_kib),
        }),
        scratch_device: None,
        scratch_mount: s.scratch_mount.clone(),
        cvmfs: s.cvmfs.clone(),
        ad_dir: Some(s.ad_dir.clone()),
        cap_add: s.cap_add.clone(),
        user: s.user.engine_user(),
        network: s.network.clone(),
        name,
    }
}

/// A short hash of everything that shapes a worker except time and name: a changed hash tells
/// `status` which workers still run an older configuration.
pub(crate) fn spec_hash(supply: &Supply, s: &WorkerSettings, digest: &str) -> String {
    let r = supply.per_worker;
    let mut h = Sha256::new();
    let canonical = format!(
        "{digest}\n{} {} {} {}\n{:?}\n{:?} {:?} {:?} {:?} {:?} {:?} {} {}",
        r.cpus,
        r.memory_mib,
        r.disk_kib,
        r.gpus,
        s.env,
        s.token_file,
        s.token_mount,
        s.scratch_mount,
        s.cvmfs,
        s.cap_add,
        s.user,
        s.pids_limit,
        s.network.as_deref().unwrap_or("")
    );
    h.update(canonical.as_bytes());
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}
