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
    let mut values: BTreeMap<&'static str, String> = BTreeMap::new();
    values.insert("cpus", r.cpus.to_string());
    values.insert("memory_mib", r.memory_mib.to_string());
    values.insert("disk_kib", r.disk_kib.to_string());
    values.insert("gpus", r.gpus.to_string());
    values.insert(
        "idle_minutes",
        s.idle_timeout.as_secs().div_ceil(60).to_string(),
    );
    values.insert("idle_seconds", s.idle_timeout.as_secs().to_string());
    let opt =
        |t: Option<DateTime<Utc>>, f: fn(DateTime<Utc>) -> String| t.map(f).unwrap_or_default();
    values.insert("accept_until", opt(supply.accept_until, rfc3339));
    values.insert(
        "accept_until_unix",
        opt(supply.accept_until, |t| t.timestamp().to_string()),
    );
    values.insert("die_at", opt(supply.die_at, rfc3339));
    values.insert(
        "die_at_unix",
        opt(supply.die_at, |t| t.timestamp().to_string()),
    );
    values.insert(
        "hours_left",
        supply
            .die_at
            .map(|d| whole_hours(now, d).to_string())
            .unwrap_or_default(),
    );
    values.insert(
        "accept_hours",
        supply
            .accept_until
            .map(|a| whole_hours(now, a).to_string())
            .unwrap_or_default(),
    );
    values.insert(
        "retire_hours",
        match (supply.accept_until, supply.die_at) {
            (Some(a), Some(d)) => whole_hours(a, d).to_string(),
            _ => String::new(),
        },
    );
    values.insert("ad_file", crate::worker::ad::file_in_worker());
    values.insert("worker_name", name.clone());
    values.insert("instance", s.instance.clone());
    values.insert("token_path", s.token_mount.display().to_string());
    values.insert("scratch_path", s.scratch_mount.display().to_string());
    values.insert(
        "free_hours",
        free_hours.map(|h| h.to_string()).unwrap_or_default(),
    );
    let env = s
        .env
        .iter()
        .map(|(k, v)| (k.clone(), template::render(v, &values)))
        .collect();

    let mut l = BTreeMap::new();
    l.insert(labels::MANAGED.to_string(), "true".to_string());
    l.insert(labels::INSTANCE.to_string(), s.instance.clone());
    l.insert(labels::CREATED.to_string(), rfc3339(now));
    if let Some(a) = supply.accept_until {
        l.insert(labels::ACCEPT_UNTIL.to_string(), rfc3339(a));
    }
    if let Some(d) = supply.die_at {
        l.insert(labels::DIE_AT.to_string(), rfc3339(d));
    }
    l.insert(labels::IMAGE_DIGEST.to_string(), digest.to_string());
    l.insert(labels::SPEC_HASH.to_string(), spec_hash);
    l.insert(labels::IMAGE.to_string(), s.image.clone());
    l.insert(labels::DISK_KIB.to_string(), r.disk_kib.to_string());
    let nano_cpus = i64::from(r.cpus.max(1)) * 1_000_000_000;
    l.insert(labels::NANO_CPUS.to_string(), nano_cpus.to_string());

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
