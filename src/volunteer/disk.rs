//! How much of the disk a worker uses: the blocks under its scratch dir, measured beside the
//! loop. A worker's disk share is enforced by measurement, not by a filesystem quota: quotas
//! need a filesystem prepared for them (XFS project quotas under overlay2) or a loop device
//! per worker, neither of which a donated desktop has; the engine's `--storage-opt size` works
//! only on such filesystems. The root filesystem is read-only and the container log capped, so
//! the scratch dir is the one place a worker can fill; a worker found over its share is
//! stopped (`plan::Reason::DiskShareExceeded`).

use std::collections::BTreeMap;
use std::path::Path;

/// A walk stops after this many entries: a worker that made millions of files is measured
/// from what was counted, which is already a lower bound of its use.
pub const MAX_ENTRIES: usize = 1_000_000;

/// KiB allocated under `dir` (blocks on disk, links not followed, other filesystems not
/// entered), counting at most `max_entries` entries. A missing dir uses nothing.
pub fn usage_kib(dir: &Path, max_entries: usize) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(root) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let device = root.dev();
    let mut blocks: u64 = root.blocks();
    let mut seen = 1usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            if seen >= max_entries {
                return blocks / 2;
            }
            seen += 1;
            let Ok(m) = e.metadata() else { continue };
            blocks = blocks.saturating_add(m.blocks());
            if m.is_dir() && m.dev() == device {
                stack.push(e.path());
            }
        }
    }
    // st_blocks counts 512-byte units.
    blocks / 2
}

/// The use of each named worker's scratch dir under `root`: (worker id, name) → KiB.
pub fn measure(root: &Path, workers: &[(String, String)]) -> BTreeMap<String, u64> {
    workers
        .iter()
        .map(|(id, name)| (id.clone(), usage_kib(&root.join(name), MAX_ENTRIES)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_allocated_below_the_dir_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("w");
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/b/f"), vec![7u8; 1 << 20]).unwrap();
        std::fs::write(d.join("g"), vec![1u8; 256 << 10]).unwrap();
        // A link to something big outside counts as the link only.
        let outside = dir.path().join("big");
        std::fs::write(&outside, vec![1u8; 4 << 20]).unwrap();
        std::os::unix::fs::symlink(&outside, d.join("link")).unwrap();
        let kib = usage_kib(&d, MAX_ENTRIES);
        assert!((1280..1400).contains(&kib), "{kib} KiB");
        assert_eq!(usage_kib(&dir.path().join("missing"), MAX_ENTRIES), 0);
        // The entry cap ends the walk early with a lower bound.
        assert!(usage_kib(&d, 2) < kib);
        let m = measure(dir.path(), &[("id1".into(), "w".into())]);
        assert_eq!(m["id1"], kib);
    }
}
