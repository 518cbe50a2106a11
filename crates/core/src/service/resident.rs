//! What of the program stays in memory while the daemon idles: once ready, the read-only file
//! pages that start-up mapped are let go, and later faults map back only what the loop runs
//! and its neighbours.
//!
//! Start-up runs code that an idle daemon never runs again (argument parsing, the files'
//! diagnostics, the first cycle's setup), and the kernel maps more than it ran: each fault on
//! a file page maps the pages around it too (fault-around, 64 KiB by default). Those pages
//! stay counted in the daemon's resident memory for good, though nothing touches them. So,
//! once the service is ready, each read-only, unmodified file mapping (the binary's code and
//! constants, the C library's) is advised `MADV_RANDOM` (no read-ahead for it) and
//! `MADV_DONTNEED` (its page table entries dropped). The pages stay in the page cache, shared,
//! so a page the loop needs again comes back with a minor fault, a microsecond or so. It comes
//! back with its neighbours still: on kernel 6.18 the idle loop's faults mapped runs of 128 and
//! 256 KiB (the page cache's large folios; `MADV_RANDOM` does not stop that), which is why the
//! package's build also places the idle loop's functions side by side
//! (`packaging/link-idle-first`).
//!
//! Only mappings that hold no private copy are touched: not writable, and with no anonymous
//! pages in `/proc/self/smaps` (a RELRO segment, written by the loader before it was made
//! read-only, has them; dropping it would give back the file's unrelocated bytes). Nothing of
//! this is needed for correctness: on any doubt a mapping is left alone.

use nix::sys::mman::{MmapAdvise, madvise};
use std::ffi::c_void;
use std::ptr::NonNull;

/// One mapping of `/proc/self/smaps` that may be let go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// The read-only, file-backed mappings of `smaps` that hold no private (anonymous) page and
/// are not locked. Pure: `smaps` is the text of `/proc/self/smaps`.
pub(crate) fn sheddable(smaps: &str) -> Vec<Mapping> {
    /// A mapping being read: whether its header allows it, and whether its lines say it holds
    /// no private page (a missing `Anonymous:` line leaves that unknown: kept) and none locked.
    struct Reading {
        mapping: Mapping,
        candidate: bool,
        clean: Option<bool>,
        locked: bool,
    }
    let finish = |r: Option<Reading>, out: &mut Vec<Mapping>| {
        if let Some(r) = r
            && r.candidate
            && r.clean == Some(true)
            && !r.locked
        {
            out.push(r.mapping);
        }
    };
    let kib = |rest: &str| {
        rest.split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
    };
    let mut out = Vec::new();
    let mut current: Option<Reading> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            finish(current.take(), &mut out);
            let perms = fields.next().unwrap_or("");
            let (_offset, _device) = (fields.next(), fields.next());
            let inode = fields.next().unwrap_or("0");
            let path = fields.next().unwrap_or("");
            // Private, not writable, backed by a file (an inode, and a path: not a
            // pseudo-mapping such as [vdso] or [stack]).
            let candidate = perms.len() == 4
                && perms.starts_with('r')
                && perms.as_bytes()[1] == b'-'
                && perms.ends_with('p')
                && inode != "0"
                && path.starts_with('/');
            current = Some(Reading {
                mapping: Mapping { start, end },
                candidate,
                clean: None,
                locked: false,
            });
            continue;
        }
        let Some(r) = current.as_mut() else {
            continue;
        };
        if let Some(rest) = line.strip_prefix("Anonymous:") {
            r.clean = Some(kib(rest) == Some(0));
        } else if let Some(rest) = line.strip_prefix("Locked:") {
            r.locked = kib(rest) != Some(0);
        }
    }
    finish(current, &mut out);
    out
}

/// Lets go of the read-only file pages start-up mapped (see the module's doc). Returns how
/// many bytes of mappings were advised; 0 where `/proc` cannot be read.
///
/// Never inlined: its entry is where idling starts, which `tests/bench/idle-functions.sh`
/// finds by this name to count only what runs from then on.
#[inline(never)]
pub fn shed_startup_pages() -> usize {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut shed = 0;
    for m in sheddable(&smaps) {
        let len = m.end - m.start;
        let Some(addr) = NonNull::new(m.start as *mut c_void) else {
            continue;
        };
        // SAFETY: the range is a whole mapping of this process, read from the kernel's own
        // list, private, read-only and holding no private page: MADV_RANDOM only changes how
        // later faults read it, and MADV_DONTNEED on such a mapping drops page table entries
        // whose contents the next access maps again, unchanged, from the page cache.
        let advised = unsafe {
            madvise(addr, len, MmapAdvise::MADV_RANDOM)
                .and_then(|()| madvise(addr, len, MmapAdvise::MADV_DONTNEED))
        };
        if advised.is_ok() {
            shed += len;
        }
    }
    shed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four mappings as the kernel lists them (trimmed to the fields read): the binary's code,
    /// its RELRO segment (read-only, but relocated: private pages), its data, and the vdso.
    const SMAPS: &str = "\
55d0c8a00000-55d0c8e00000 r-xp 00200000 fd:01 1234567                    /usr/bin/pilotd
Size:               4096 kB
Rss:                2048 kB
Anonymous:             0 kB
Locked:                0 kB
55d0c8e00000-55d0c8e40000 r--p 00600000 fd:01 1234567                    /usr/bin/pilotd
Size:                256 kB
Anonymous:           256 kB
Locked:                0 kB
55d0c8e40000-55d0c8e48000 rw-p 00640000 fd:01 1234567                    /usr/bin/pilotd
Size:                 32 kB
Anonymous:            32 kB
7ffd1c5f2000-7ffd1c5f4000 r-xp 00000000 00:00 0                          [vdso]
Size:                  8 kB
Anonymous:             0 kB
7f0a1c000000-7f0a1c100000 r--p 00000000 fd:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
Size:               1024 kB
Anonymous:             0 kB
Locked:                0 kB
";

    #[test]
    fn only_unmodified_read_only_file_mappings_are_shed() {
        assert_eq!(
            sheddable(SMAPS),
            vec![
                Mapping {
                    start: 0x55d0c8a00000,
                    end: 0x55d0c8e00000
                },
                Mapping {
                    start: 0x7f0a1c000000,
                    end: 0x7f0a1c100000
                },
            ]
        );
    }

    #[test]
    fn a_locked_or_unreadable_mapping_is_left_alone() {
        let locked = SMAPS.replacen(
            "Locked:                0 kB",
            "Locked:             2048 kB",
            1,
        );
        assert_eq!(sheddable(&locked).len(), 1);
        // Without its Anonymous line a mapping cannot be known clean, and is kept.
        let unknown: String = SMAPS
            .lines()
            .filter(|l| !l.starts_with("Anonymous:"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(sheddable(&unknown), vec![]);
    }

    /// The resident file pages of this process (`RssFile` of /proc/self/status), in KiB.
    fn rss_file_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssFile:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    /// On this very process: its resident file pages fall, and it goes on running the code it
    /// let go of (this test's own, the formatter's, the allocator's).
    #[test]
    fn shedding_this_process_lowers_its_resident_set_and_keeps_it_running() {
        let before = rss_file_kib();
        let shed = shed_startup_pages();
        let after = rss_file_kib();
        assert!(shed > 0, "nothing shed of this test binary");
        assert!(
            after < before,
            "RssFile {before} KiB before, {after} KiB after"
        );
        let again = format!("{:?}", sheddable(SMAPS));
        assert!(again.contains("Mapping"), "{again}");
    }
}
