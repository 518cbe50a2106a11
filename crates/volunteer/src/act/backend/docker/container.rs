//! The container a `WorkerSpec` becomes, and the hardening it carries. Pure, so the security
//! settings are unit-tested without an engine.

use crate::worker::{WorkerSpec, labels};
use bollard::models::{
    ContainerCreateBody, DeviceRequest, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, MountVolumeOptions, MountVolumeOptionsDriverConfig,
    ResourcesUlimits,
};
use std::collections::HashMap;

/// tmpfs for /tmp and /var/tmp when the root filesystem is read-only: small (its pages count
/// against the worker's memory limit), no devices, no setuid.
const TMPFS_OPTIONS: &str = "rw,nosuid,nodev,size=256m,mode=1777";
/// How the engine mounts a worker's disk image (`scratch_mount`).
const MOUNT_OPTIONS: &str = "nosuid,nodev,noinit_itable";

/// The declared volumes that the scratch mount does not cover (trailing slashes aside).
pub(super) fn uncovered_volumes(
    declared: &[String],
    scratch_mount: &std::path::Path,
) -> Vec<String> {
    let mut out: Vec<String> = declared
        .iter()
        .filter(|v| {
            std::path::Path::new(v.as_str())
                .components()
                .ne(scratch_mount.components())
        })
        .cloned()
        .collect();
    out.sort();
    out
}

/// The worker's scratch: its disk image's loop device, which the engine mounts as a `local`
/// volume named after the worker (carrying pilotd's labels, so that only pilotd's are ever
/// removed); or, for a measured share, its scratch dir bind-mounted.
fn scratch_mount(spec: &WorkerSpec) -> Mount {
    let target = Some(spec.scratch_mount.display().to_string());
    let Some(device) = &spec.scratch_device else {
        return Mount {
            target,
            source: Some(spec.scratch_dir.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(false),
            ..Default::default()
        };
    };
    let mut l = HashMap::new();
    for key in [labels::MANAGED, labels::INSTANCE] {
        if let Some(v) = spec.labels.get(key) {
            l.insert(key.to_string(), v.clone());
        }
    }
    Mount {
        target,
        source: Some(spec.name.clone()),
        typ: Some(MountType::VOLUME),
        read_only: Some(false),
        volume_options: Some(MountVolumeOptions {
            labels: Some(l),
            driver_config: Some(MountVolumeOptionsDriverConfig {
                name: Some("local".into()),
                options: Some(HashMap::from([
                    ("type".to_string(), "ext4".to_string()),
                    ("device".to_string(), device.display().to_string()),
                    // noinit_itable: the image was allocated whole (fallocate), so its inode
                    // tables already read as zeros. Zeroing them again, as ext4's lazy init
                    // does after the mount, goes through the loop device as write-zeroes,
                    // which punches holes in the image: measured, 4,056 of a 32 MiB image's
                    // 65,544 blocks freed within 15 s, a share no longer held on the host.
                    ("o".to_string(), MOUNT_OPTIONS.to_string()),
                ])),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container a `WorkerSpec` becomes: limits, no privileges, all capabilities dropped
/// unless the site gave some back, the token read-only, and GPUs only when the owner shares
/// them. Pure, so the security settings are unit-tested without an engine.
pub(crate) fn container_body(spec: &WorkerSpec) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(spec.image_pinned.clone()),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        user: spec.user.clone(),
        host_config: Some(host_config(spec)),
        ..Default::default()
    }
}

/// The worker's mounts: its scratch, the token read-only, and CVMFS read-only when shared.
fn worker_mounts(spec: &WorkerSpec) -> Vec<Mount> {
    let mut mounts = vec![scratch_mount(spec)];
    if let Some(token) = &spec.token_file {
        mounts.push(Mount {
            target: Some(spec.token_mount.display().to_string()),
            source: Some(token.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if let Some(dir) = &spec.ad_dir {
        // The machine's slot-ad lines, rewritten by pilotd with a rename: a directory mount,
        // so the worker sees each new file (a file mount would pin the first one).
        mounts.push(Mount {
            target: Some(crate::worker::ad::MOUNT.into()),
            source: Some(dir.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if let Some(cvmfs) = &spec.cvmfs {
        mounts.push(Mount {
            target: Some("/cvmfs".into()),
            source: Some(cvmfs.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            // autofs mounts repositories on first access: they must propagate in.
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RSLAVE),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    mounts
}

/// The limits and hardening: no privileges, all capabilities dropped unless the site gave some
/// back, the owner first for memory, CPU and disk, and the worker's own GPUs only.
fn host_config(spec: &WorkerSpec) -> HostConfig {
    HostConfig {
        nano_cpus: Some(spec.nano_cpus),
        memory: Some(spec.memory_bytes),
        // Equal to memory: no swap on top of the limit (the owner's disk is not ours).
        memory_swap: Some(spec.memory_bytes),
        pids_limit: Some(spec.pids_limit),
        init: Some(true),
        privileged: Some(false),
        security_opt: Some(vec!["no-new-privileges:true".into()]),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
        mounts: Some(worker_mounts(spec)),
        network_mode: spec.network.clone(),
        // Each worker its own GPUs, by index: a count would give every worker GPU 0.
        device_requests: (!spec.gpu_ids.is_empty()).then(|| {
            vec![DeviceRequest {
                driver: Some("nvidia".into()),
                device_ids: Some(spec.gpu_ids.iter().map(u32::to_string).collect()),
                capabilities: Some(vec![vec!["gpu".into()]]),
                ..Default::default()
            }]
        }),
        // The owner's processes come first: the kernel kills a worker before anything of
        // theirs when memory runs out, and a worker gets CPU and disk time only when the owner
        // leaves some (cpu.shares 2 against the default 1024; the I/O weight is ignored, with a
        // warning, on kernels without a weight-aware scheduler).
        oom_score_adj: Some(1000),
        cpu_shares: Some(2),
        blkio_weight: Some(10),
        // The container's log cannot grow without limit on the owner's disk.
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), "10m".to_string()),
                ("max-file".to_string(), "2".to_string()),
            ])),
        }),
        // Open files and processes capped at pilotd's own hard limits, named explicitly: an
        // engine's defaults may lie above what this host lets anyone set (Podman asks for
        // nofile 1048576, and runc fails with "error setting rlimit type 7: operation not
        // permitted" where the host's hard limit is lower and root lacks CAP_SYS_RESOURCE).
        ulimits: Some(own_ulimits()),
        readonly_rootfs: Some(spec.read_only_rootfs),
        tmpfs: spec.read_only_rootfs.then(|| {
            HashMap::from([
                ("/tmp".to_string(), TMPFS_OPTIONS.to_string()),
                ("/var/tmp".to_string(), TMPFS_OPTIONS.to_string()),
            ])
        }),
        ..Default::default()
    }
}

/// pilotd's own hard limits on open files and processes, as a worker's ulimits (soft = hard):
/// a worker never gets more than the daemon has, and no engine is asked to raise a limit.
/// Processes are capped at 32768 as well: Podman's service lowers its own RLIMIT_NPROC to that
/// and its runtime cannot give a container more (the container's pids_limit, 4096 by
/// default, binds first anyway).
fn own_ulimits() -> Vec<ResourcesUlimits> {
    use nix::sys::resource::{Resource, getrlimit};
    const NPROC_CAP: u64 = 32_768;
    [
        ("nofile", Resource::RLIMIT_NOFILE, u64::MAX),
        ("nproc", Resource::RLIMIT_NPROC, NPROC_CAP),
    ]
    .into_iter()
    .filter_map(|(name, r, cap)| {
        let (_, hard) = getrlimit(r).ok()?;
        // RLIM_INFINITY does not fit an i64 limit; leave that one to the engine.
        let hard = i64::try_from(hard.min(cap)).ok()?;
        Some(ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(hard),
            hard: Some(hard),
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn spec(gpus: u32, token: bool) -> WorkerSpec {
        WorkerSpec {
            name: "pilotd-default-1".into(),
            image: "127.0.0.1:5000/w:1".into(),
            image_pinned: "127.0.0.1:5000/w@sha256:ab".into(),
            image_digest: "sha256:ab".into(),
            labels: BTreeMap::from([("pilotd.managed".into(), "true".into())]),
            env: BTreeMap::from([("NUM_CPUS".into(), "2".into())]),
            nano_cpus: 2_000_000_000,
            memory_bytes: 4 << 30,
            gpu_ids: (0..gpus).map(|i| i + 1).collect(),
            read_only_rootfs: true,
            pids_limit: 4096,
            token_file: token.then(|| PathBuf::from("/var/lib/pilotd/tokens/pilotd-default-1")),
            token_source: token.then(|| PathBuf::from("/etc/pilotd/pool.token")),
            owner: Some((65532, 65532)),
            token_mount: "/etc/pilotd/token".into(),
            scratch_dir: "/var/lib/pilotd/scratch/pilotd-default-1".into(),
            disk_image: None,
            scratch_device: None,
            scratch_mount: "/pilot".into(),
            cvmfs: None,
            ad_dir: None,
            cap_add: vec![],
            user: Some("65532:65532".into()),
            network: None,
        }
    }

    #[test]
    fn workers_are_unprivileged_and_limited() {
        let b = container_body(&spec(0, true));
        let h = b.host_config.unwrap();
        assert_eq!(h.nano_cpus, Some(2_000_000_000));
        assert_eq!(h.memory, Some(4 << 30));
        assert_eq!(h.memory_swap, Some(4 << 30), "no swap beyond the limit");
        assert_eq!(h.pids_limit, Some(4096));
        assert_eq!(h.init, Some(true));
        assert_eq!(h.privileged, Some(false));
        assert_eq!(h.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(h.cap_add, None);
        assert_eq!(
            h.security_opt,
            Some(vec!["no-new-privileges:true".to_string()])
        );
        assert_eq!(h.device_requests, None, "no GPU unless shared");
        let mounts = h.mounts.unwrap();
        let token = mounts
            .iter()
            .find(|m| m.target.as_deref() == Some("/etc/pilotd/token"))
            .unwrap();
        assert_eq!(token.read_only, Some(true));
        // The token is a file in the container, never a value in its environment.
        assert!(b.env.unwrap().iter().all(|e| !e.contains("pool.token")));
        assert_eq!(
            b.image.as_deref(),
            Some("127.0.0.1:5000/w@sha256:ab"),
            "pulled by digest"
        );
    }

    #[test]
    fn the_owner_comes_first_and_the_worker_cannot_fill_the_disk() {
        let h = container_body(&spec(0, true)).host_config.unwrap();
        assert_eq!(
            h.oom_score_adj,
            Some(1000),
            "killed before any owner process"
        );
        assert_eq!(h.cpu_shares, Some(2));
        assert_eq!(h.blkio_weight, Some(10));
        let log = h.log_config.unwrap();
        assert_eq!(log.typ.as_deref(), Some("json-file"));
        let opts = log.config.unwrap();
        assert_eq!(opts["max-size"], "10m");
        assert_eq!(opts["max-file"], "2");
        assert_eq!(h.readonly_rootfs, Some(true));
        let tmpfs = h.tmpfs.unwrap();
        assert!(tmpfs["/tmp"].contains("size=256m") && tmpfs["/tmp"].contains("nosuid"));
        assert!(tmpfs.contains_key("/var/tmp"));
        let mut rw = spec(0, true);
        rw.read_only_rootfs = false;
        let h = container_body(&rw).host_config.unwrap();
        assert_eq!(h.readonly_rootfs, Some(false));
        assert_eq!(h.tmpfs, None);
    }

    #[test]
    fn the_scratch_is_the_disk_images_device_mounted_by_the_engine_as_a_labelled_volume() {
        let mut s = spec(0, false);
        s.labels
            .insert(labels::INSTANCE.to_string(), "default".to_string());
        s.scratch_device = Some("/dev/loop7".into());
        let mounts = container_body(&s).host_config.unwrap().mounts.unwrap();
        let m = &mounts[0];
        assert_eq!(m.target.as_deref(), Some("/pilot"));
        assert_eq!(m.typ, Some(MountType::VOLUME));
        assert_eq!(m.source.as_deref(), Some("pilotd-default-1"));
        let v = m.volume_options.as_ref().unwrap();
        let l = v.labels.as_ref().unwrap();
        assert_eq!(l[labels::MANAGED], "true");
        assert_eq!(l[labels::INSTANCE], "default");
        let d = v.driver_config.as_ref().unwrap();
        assert_eq!(d.name.as_deref(), Some("local"));
        let o = d.options.as_ref().unwrap();
        assert_eq!(o["type"], "ext4");
        assert_eq!(o["device"], "/dev/loop7");
        assert_eq!(o["o"], "nosuid,nodev,noinit_itable");
        // A measured share: the scratch dir, bind-mounted.
        s.scratch_device = None;
        let mounts = container_body(&s).host_config.unwrap().mounts.unwrap();
        assert_eq!(mounts[0].typ, Some(MountType::BIND));
        assert_eq!(
            mounts[0].source.as_deref(),
            Some("/var/lib/pilotd/scratch/pilotd-default-1")
        );
    }

    #[test]
    fn declared_volumes_other_than_the_scratch_mount_are_refused() {
        let scratch = std::path::Path::new("/pilot");
        assert!(uncovered_volumes(&["/pilot".into(), "/pilot/".into()], scratch).is_empty());
        assert_eq!(
            uncovered_volumes(
                &["/var/lib/x".into(), "/data".into(), "/pilot".into()],
                scratch
            ),
            vec!["/data".to_string(), "/var/lib/x".to_string()]
        );
        assert!(uncovered_volumes(&[], scratch).is_empty());
    }

    #[test]
    fn shared_gpus_become_a_device_request_for_this_workers_own_devices() {
        let h = container_body(&spec(2, false)).host_config.unwrap();
        let r = h.device_requests.unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].driver.as_deref(), Some("nvidia"));
        assert_eq!(r[0].count, None, "a count would give every worker GPU 0");
        assert_eq!(
            r[0].device_ids,
            Some(vec!["1".to_string(), "2".to_string()])
        );
        assert_eq!(r[0].capabilities, Some(vec![vec!["gpu".to_string()]]));
        assert_eq!(h.mounts.unwrap().len(), 1, "no token mount without a token");
    }
}
