//! Pausing a worker with the kernel's cgroup freezer, directly.
//!
//! Why not the engine's pause: `docker pause` goes dockerd → containerd → shim → a fresh
//! `runc` process, four programs that must each get the CPU on a machine the workers keep
//! busy. Measured on the 2-core test host under load: the engine's pause took 28 ms at the
//! median and 163 ms at worst, the write into the worker's `freezer.state` 0.7 ms and 6 ms
//! (`tests/bench/owner_return.sh`). The owner waits for the slower one, so pilotd freezes the
//! worker's cgroup itself, and the engine's pause stays the way where the cgroup cannot be
//! reached (pilotd in a container of its own, an unknown layout).
//!
//! The engine is not told: a worker frozen here shows as running in `docker ps`, and the
//! engine's own pause would refuse it (runc sees it paused: "container not running"). So the
//! Docker backend keeps the two apart: a worker the engine lists as running whose cgroup is
//! frozen was frozen by pilotd (nothing else freezes pilotd's workers) and is reported
//! paused; it is thawed here to resume, and before the engine stops, kills or removes it (a
//! frozen task in cgroup v1 does not die of SIGKILL until thawed).
//!
//! Safety: a cgroup is used only when the container's own init process's cgroup path names
//! the container's full id, so a reused pid can never point pilotd at anything else, and only
//! for containers the backend listed by pilotd's labels.
//!
//! The same cgroup holds the worker's CPU quota (`CpuQuota`): the engine sets it (`docker
//! update --cpus`), and pilotd reads it back there, and writes it itself where the engine
//! did not (Podman 4's Docker-compatible API has no update call; later Podmans are reported
//! to take `NanoCpus` there without applying it).
//!
//! Pure parsing (`freezer_of`, `cgroup_dir`) apart from the file I/O.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// A container's freezer: cgroup v1's `freezer.state` or cgroup v2's `cgroup.freeze`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freezer {
    /// The cgroup's directory in the v1 freezer hierarchy.
    V1(PathBuf),
    /// The cgroup's directory in the unified (v2) hierarchy.
    V2(PathBuf),
}

/// How long a freeze is waited for before it is left to finish on its own: tasks in an
/// uninterruptible sleep (a disk, NFS) freeze when it ends; all others are stopped by then.
const SETTLE: Duration = Duration::from_millis(500);

impl Freezer {
    /// The freezer of the container `id` whose init process is `pid`, as this process sees
    /// the cgroup file systems; `None` when it cannot be used from here.
    pub fn of(pid: u32, id: &str) -> Option<Freezer> {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let f = freezer_of(&cgroup, &mounts, id)?;
        f.control().exists().then_some(f)
    }

    fn control(&self) -> PathBuf {
        match self {
            Freezer::V1(d) => d.join("freezer.state"),
            Freezer::V2(d) => d.join("cgroup.freeze"),
        }
    }

    /// Freezes the cgroup and waits (briefly) for every task to be stopped.
    pub(crate) async fn freeze(&self) -> std::io::Result<()> {
        let what = match self {
            Freezer::V1(_) => "FROZEN",
            Freezer::V2(_) => "1",
        };
        std::fs::write(self.control(), what)?;
        let deadline = tokio::time::Instant::now() + SETTLE;
        while !self.settled() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    /// Every task stopped (a state that cannot be read ends the wait: nothing to wait for).
    fn settled(&self) -> bool {
        match self {
            Freezer::V1(d) => std::fs::read_to_string(d.join("freezer.state"))
                .map_or(true, |s| s.trim() == "FROZEN"),
            Freezer::V2(d) => std::fs::read_to_string(d.join("cgroup.events"))
                .map_or(true, |s| s.lines().any(|l| l == "frozen 1")),
        }
    }

    pub fn thaw(&self) -> std::io::Result<()> {
        let what = match self {
            Freezer::V1(_) => "THAWED",
            Freezer::V2(_) => "0",
        };
        std::fs::write(self.control(), what)
    }

    /// Asked to be frozen (v1's FREEZING counts: the tasks still running are the ones in the
    /// kernel, and they stop on their way out).
    pub fn is_frozen(&self) -> std::io::Result<bool> {
        Ok(match self {
            Freezer::V1(d) => std::fs::read_to_string(d.join("freezer.state"))?.trim() != "THAWED",
            Freezer::V2(d) => std::fs::read_to_string(d.join("cgroup.freeze"))?.trim() == "1",
        })
    }
}

/// The freezer of the container `id`, from its init process's `/proc/PID/cgroup` and this
/// process's `/proc/self/mountinfo`. The v1 freezer hierarchy wins where both exist (a hybrid
/// host: the engine's runc freezes there). `None` unless the cgroup path names `id` and its
/// hierarchy is mounted whole (root `/`) here.
pub(crate) fn freezer_of(cgroup: &str, mountinfo: &str, id: &str) -> Option<Freezer> {
    cgroup_dir(cgroup, mountinfo, id, "freezer").map(|(v1, dir)| match v1 {
        true => Freezer::V1(dir),
        false => Freezer::V2(dir),
    })
}

/// The container `id`'s directory in the cgroup v1 hierarchy of `controller` (true), or in
/// the unified (v2) hierarchy (false), from its init process's `/proc/PID/cgroup` and this
/// process's `/proc/self/mountinfo`. The v1 hierarchy wins where both exist (a hybrid host:
/// the engine's runc writes there). `None` unless the cgroup path names `id` and its
/// hierarchy is mounted whole (root `/`) here.
pub(crate) fn cgroup_dir(
    cgroup: &str,
    mountinfo: &str,
    id: &str,
    controller: &str,
) -> Option<(bool, PathBuf)> {
    if id.len() < 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut v1 = None;
    let mut v2 = None;
    for line in cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(num), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if num == "0" && controllers.is_empty() {
            v2 = Some(path);
        } else if controllers.split(',').any(|c| c == controller) {
            v1 = Some(path);
        }
    }
    let names_id = |p: &str| p.split('/').any(|seg| seg.contains(id));
    let (mut v1_mount, mut unified_mount) = (None, None);
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        let (Some(root), Some(point), Some(fstype), Some(opts)) =
            (pre.get(3), pre.get(4), post.first(), post.get(2))
        else {
            continue;
        };
        if *root != "/" {
            continue;
        }
        match *fstype {
            "cgroup" if opts.split(',').any(|o| o == controller) => {
                v1_mount = Some(unescape(point));
            }
            "cgroup2" => unified_mount = Some(unescape(point)),
            _ => {}
        }
    }
    let under = |mount: PathBuf, path: &str| mount.join(path.trim_start_matches('/'));
    match (v1, v1_mount, v2, unified_mount) {
        (Some(p), Some(m), _, _) if names_id(p) => Some((true, under(m, p))),
        (None, _, Some(p), Some(m)) if names_id(p) && p != "/" => Some((false, under(m, p))),
        _ => None,
    }
}

/// A container's CPU quota in its cgroup: v1's `cpu.cfs_quota_us` over `cpu.cfs_period_us`,
/// or v2's `cpu.max` ("QUOTA PERIOD", or "max PERIOD": unlimited). What the kernel enforces,
/// whatever the engine recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CpuQuota {
    V1(PathBuf),
    V2(PathBuf),
}

impl CpuQuota {
    /// The CPU quota of the container `id` whose init process is `pid`; `None` when it cannot
    /// be reached from here.
    pub(crate) fn of(pid: u32, id: &str) -> Option<CpuQuota> {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let q = match cgroup_dir(&cgroup, &mounts, id, "cpu")? {
            (true, dir) => CpuQuota::V1(dir),
            (false, dir) => CpuQuota::V2(dir),
        };
        q.period().is_some().then_some(q)
    }

    /// The period the quota is counted over, in microseconds.
    fn period(&self) -> Option<i64> {
        self.figure("cpu.cfs_period_us", 1)
    }

    /// A positive figure of the CPU controller: v1's `file`, or the `word`th word of v2's
    /// `cpu.max` ("max" there, no quota, is none).
    fn figure(&self, file: &str, word: usize) -> Option<i64> {
        let text = match self {
            CpuQuota::V1(d) => std::fs::read_to_string(d.join(file)).ok()?,
            CpuQuota::V2(d) => {
                let max = std::fs::read_to_string(d.join("cpu.max")).ok()?;
                max.split_whitespace().nth(word)?.to_string()
            }
        };
        text.trim().parse().ok().filter(|v| *v > 0)
    }

    /// The quota in force as NanoCpus (10⁹ a CPU); `None`: unlimited, or unreadable.
    pub(crate) fn read(&self) -> Option<i64> {
        let quota = self.figure("cpu.cfs_quota_us", 0)?;
        Some(quota.saturating_mul(1_000_000_000) / self.period()?)
    }

    /// Sets the quota to `nano_cpus` over the period already there.
    pub(crate) fn write(&self, nano_cpus: i64) -> std::io::Result<()> {
        let period = self
            .period()
            .ok_or_else(|| std::io::Error::other("its CPU period cannot be read"))?;
        let quota = (nano_cpus.saturating_mul(period) / 1_000_000_000).max(1000);
        match self {
            CpuQuota::V1(d) => std::fs::write(d.join("cpu.cfs_quota_us"), quota.to_string()),
            CpuQuota::V2(d) => std::fs::write(d.join("cpu.max"), format!("{quota} {period}")),
        }
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> PathBuf {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// What the backend knows of its workers' freezers, shared by its clones: the freezer found
/// for each worker (`None`: none usable, the engine pauses it), and which workers pilotd froze
/// itself (the engine believes them running).
#[derive(Debug, Default)]
pub struct Freezers {
    inner: Mutex<Known>,
}

#[derive(Debug, Default)]
struct Known {
    of: HashMap<String, Option<Freezer>>,
    frozen: HashSet<String>,
    /// A freeze was refused once already (said once, at warn level).
    refused: bool,
}

impl Freezers {
    /// `Some(freezer or none)` once looked up, `None` when never looked up.
    pub(crate) fn get(&self, id: &str) -> Option<Option<Freezer>> {
        self.lock().of.get(id).cloned()
    }

    pub(crate) fn set(&self, id: &str, f: Option<Freezer>) {
        self.lock().of.insert(id.to_string(), f);
    }

    pub(crate) fn frozen_here(&self, id: &str) -> bool {
        self.lock().frozen.contains(id)
    }

    pub(crate) fn mark(&self, id: &str, frozen: bool) {
        let mut k = self.lock();
        if frozen {
            k.frozen.insert(id.to_string());
        } else {
            k.frozen.remove(id);
        }
    }

    /// True the first time only: a refused freeze is worth one warning per daemon, since every
    /// later pause goes the same slower way for the same reason.
    pub(crate) fn first_refusal(&self) -> bool {
        !std::mem::replace(&mut self.lock().refused, true)
    }

    /// Forgets workers that are no longer listed.
    pub(crate) fn retain(&self, ids: &HashSet<&str>) {
        let mut k = self.lock();
        k.of.retain(|id, _| ids.contains(id.as_str()));
        k.frozen.retain(|id| ids.contains(id.as_str()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        // Poisoned only by a panic while holding it, which the maps survive.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "41d90db4030ecfc242f74502865ff12621eaa45b46d286ead075293456bb72ee";

    const HYBRID_MOUNTS: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
41 33 0:36 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,freezer
42 33 0:37 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,cpu,cpuacct
";

    fn v1_cgroup(id: &str) -> String {
        format!(
            "12:freezer:/docker/{id}\n4:cpu,cpuacct:/docker/{id}\n1:name=systemd:/docker/{id}\n0::/docker/{id}\n"
        )
    }

    #[test]
    fn a_hybrid_host_uses_the_v1_freezer_the_engine_uses() {
        assert_eq!(
            freezer_of(&v1_cgroup(ID), HYBRID_MOUNTS, ID),
            Some(Freezer::V1(PathBuf::from(format!(
                "/sys/fs/cgroup/freezer/docker/{ID}"
            ))))
        );
    }

    #[test]
    fn a_unified_host_uses_cgroup_freeze_of_the_scope() {
        let mounts = "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
        let cgroup = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(
            freezer_of(&cgroup, mounts, ID),
            Some(Freezer::V2(PathBuf::from(format!(
                "/sys/fs/cgroup/system.slice/docker-{ID}.scope"
            ))))
        );
        // Podman's crun puts the container's processes one level below its scope.
        let cgroup = format!("0::/machine.slice/libpod-{ID}.scope/container\n");
        assert_eq!(
            freezer_of(&cgroup, mounts, ID),
            Some(Freezer::V2(PathBuf::from(format!(
                "/sys/fs/cgroup/machine.slice/libpod-{ID}.scope/container"
            ))))
        );
    }

    #[test]
    fn a_cgroup_that_does_not_name_the_container_is_never_used() {
        // A reused pid: the process now lives in someone else's cgroup.
        let other = v1_cgroup("aaaabbbbccccdddd");
        assert_eq!(freezer_of(&other, HYBRID_MOUNTS, ID), None);
        // The root cgroup (a host process).
        assert_eq!(freezer_of("12:freezer:/\n0::/\n", HYBRID_MOUNTS, ID), None);
        // Not an id at all.
        assert_eq!(freezer_of(&v1_cgroup(ID), HYBRID_MOUNTS, "../.."), None);
        assert_eq!(freezer_of(&v1_cgroup(ID), HYBRID_MOUNTS, ""), None);
    }

    #[test]
    fn a_hierarchy_mounted_from_a_subtree_is_not_guessed_at() {
        // Inside a container with its own cgroup namespace the mount's root is not "/".
        let mounts =
            "41 33 0:36 /docker/abc /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n";
        assert_eq!(freezer_of(&v1_cgroup(ID), mounts, ID), None);
        // No freezer hierarchy and no unified one: nothing.
        assert_eq!(freezer_of(&v1_cgroup(ID), "", ID), None);
    }

    #[test]
    fn the_cpu_quota_is_found_in_the_cpu_hierarchy_or_the_unified_one() {
        assert_eq!(
            cgroup_dir(&v1_cgroup(ID), HYBRID_MOUNTS, ID, "cpu"),
            Some((
                true,
                PathBuf::from(format!("/sys/fs/cgroup/cpu,cpuacct/docker/{ID}"))
            ))
        );
        let mounts = "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
        let cgroup = format!("0::/machine.slice/libpod-{ID}.scope/container\n");
        assert_eq!(
            cgroup_dir(&cgroup, mounts, ID, "cpu"),
            Some((
                false,
                PathBuf::from(format!(
                    "/sys/fs/cgroup/machine.slice/libpod-{ID}.scope/container"
                ))
            ))
        );
        assert_eq!(
            cgroup_dir(&v1_cgroup("aaaabbbbccccdddd"), HYBRID_MOUNTS, ID, "cpu"),
            None
        );
    }

    #[test]
    fn a_cpu_quota_is_read_and_written_over_its_period() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = CpuQuota::V1(dir.path().to_path_buf());
        std::fs::write(dir.path().join("cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::write(dir.path().join("cpu.cfs_quota_us"), "-1\n").unwrap();
        assert_eq!(v1.read(), None, "unlimited");
        v1.write(750_000_000).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cpu.cfs_quota_us")).unwrap(),
            "75000"
        );
        assert_eq!(v1.read(), Some(750_000_000));

        let v2 = CpuQuota::V2(dir.path().to_path_buf());
        std::fs::write(dir.path().join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(v2.read(), None, "unlimited");
        v2.write(250_000_000).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cpu.max")).unwrap(),
            "25000 100000"
        );
        assert_eq!(v2.read(), Some(250_000_000));
        // A cgroup without the files is no quota.
        let empty = tempfile::tempdir().unwrap();
        assert!(CpuQuota::V2(empty.path().to_path_buf()).write(1).is_err());
    }

    #[test]
    fn escaped_mount_points_are_unescaped() {
        assert_eq!(unescape("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
        assert_eq!(unescape("/end\\04"), PathBuf::from("/end\\04"));
    }

    #[tokio::test]
    async fn freezing_and_thawing_write_the_control_file() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = Freezer::V1(dir.path().to_path_buf());
        std::fs::write(dir.path().join("freezer.state"), "THAWED\n").unwrap();
        assert!(v1.control().exists());
        assert!(!v1.is_frozen().unwrap());
        // A plain file keeps what was written, as the kernel's reads FROZEN once done.
        v1.freeze().await.unwrap();
        assert!(v1.is_frozen().unwrap());
        v1.thaw().unwrap();
        assert!(!v1.is_frozen().unwrap());

        let v2 = Freezer::V2(dir.path().to_path_buf());
        std::fs::write(dir.path().join("cgroup.freeze"), "0\n").unwrap();
        v2.freeze().await.unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cgroup.freeze")).unwrap(),
            "1"
        );
        assert!(v2.is_frozen().unwrap());
        v2.thaw().unwrap();
        assert!(!v2.is_frozen().unwrap());
    }

    #[test]
    fn what_is_known_follows_the_listed_workers() {
        let k = Freezers::default();
        assert_eq!(k.get("a"), None);
        k.set("a", None);
        k.set("b", Some(Freezer::V1("/x".into())));
        k.mark("b", true);
        assert_eq!(k.get("a"), Some(None));
        assert!(k.frozen_here("b"));
        k.retain(&["a"].into_iter().collect());
        assert_eq!(k.get("b"), None);
        assert!(!k.frozen_here("b"));
    }
}
