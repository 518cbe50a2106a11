//! Giving back the pages of code that only starting up used.
//!
//! An idle daemon's resident memory is mostly its own executable: the pages of code it has
//! ever run stay mapped, and a start runs much that a cycle never runs again (argument
//! parsing, configuration and its diagnostics, the first connections). Reading a page of code
//! also maps its neighbours (the kernel's fault-around), so a cycle that runs a few functions
//! keeps whole runs of the binary mapped.
//!
//! So after a cycle, now and then, pilotd tells the kernel that its code is read at random
//! (no fault-around) and pages it out of its own mappings. What the next cycles run is mapped
//! again from the page cache, page by page; the rest is no longer pilotd's. Nothing is lost:
//! these pages are clean copies of the file. Only the executable's own mappings are touched,
//! never data, the heap or the stacks.

use std::time::{Duration, Instant};

/// How often the code pages are given back: once after the first cycle, then at this pace,
/// so that a rare task (the hourly GC, a manifest refresh) does not keep its code mapped for
/// ever, while the idle cost stays a few milliseconds an hour.
const EVERY: Duration = Duration::from_secs(3600);

/// When the code pages were last given back.
#[derive(Debug, Default)]
pub struct Shed {
    last: Option<Instant>,
}

impl Shed {
    /// After a cycle at `now`: gives the code pages back when it is time. Returns whether it
    /// did; a kernel that refuses (MADV_PAGEOUT needs Linux 5.4) changes nothing else.
    pub fn after_cycle(&mut self, now: Instant) -> bool {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < EVERY)
        {
            return false;
        }
        self.last = Some(now);
        own_code()
            .into_iter()
            .map(|(start, len)| give_back(start, len))
            .fold(false, |any, ok| any | ok)
    }
}

/// The mappings of this process's own executable, as (start, length), from /proc/self/maps.
fn own_code() -> Vec<(usize, usize)> {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return Vec::new();
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?;
            // Read-only or executable file pages only: a writable mapping may hold changes.
            if perms.contains('w') || std::path::Path::new(path) != exe {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            let start = usize::from_str_radix(a, 16).ok()?;
            let end = usize::from_str_radix(b, 16).ok()?;
            Some((start, end.checked_sub(start)?))
        })
        .collect()
}

fn give_back(start: usize, len: usize) -> bool {
    use nix::libc::{MADV_PAGEOUT, MADV_RANDOM, madvise};
    let addr = start as *mut nix::libc::c_void;
    // SAFETY: the range is one of this process's own read-only file mappings, read from
    // /proc/self/maps; MADV_RANDOM and MADV_PAGEOUT change how its pages are faulted in and
    // kept, never their contents (a clean file page is read again when next used).
    unsafe { madvise(addr, len, MADV_RANDOM) == 0 && madvise(addr, len, MADV_PAGEOUT) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident_file_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("RssFile:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            .unwrap()
    }

    #[test]
    fn the_own_code_is_found_and_given_back_at_its_pace() {
        let code = own_code();
        assert!(!code.is_empty(), "the test binary's own mappings");
        let before = resident_file_kib();
        let mut shed = Shed::default();
        let t0 = Instant::now();
        assert!(shed.after_cycle(t0), "the first cycle gives the pages back");
        let after = resident_file_kib();
        assert!(
            after < before,
            "resident file pages {before} kB -> {after} kB"
        );
        assert!(
            !shed.after_cycle(t0 + Duration::from_secs(60)),
            "not again within the hour"
        );
        assert!(shed.after_cycle(t0 + EVERY), "again after an hour");
    }
}
