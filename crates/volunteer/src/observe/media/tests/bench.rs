//! The cost of looking for sound and cameras in use, on this machine's real /proc, for
//! tests/bench/use_signals.sh (ignored: a figure, run on its own; it asserts nothing timed).
//! Printed: the median over many scans of each part, in microseconds, with the number of
//! processes and descriptors it went through, so the figure scales to a busier desktop.
//!
//! - `walk, names only`: the walk the exclusive programs already had (`comm` of each process);
//! - `walk, names and devices`: the same walk reading every descriptor's link, what a cycle
//!   pays while a sound stream runs or a video node exists (as root it sees every process);
//! - `alsa tree, no card` and `alsa tree, 2 cards`: the status files, absent here (no sound
//!   card on this machine) and on a fixture tree of two cards with six streams.

use super::{CLOSED, RUNNING, asound};
use crate::observe::host::walk_processes;
use crate::observe::media::streams;
use std::path::Path;
use std::time::Instant;

const RUNS: usize = 200;

fn median_us(mut f: impl FnMut()) -> f64 {
    // One run first: the kernel's dentries for /proc are made on the first walk.
    f();
    let mut t: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[RUNS / 2]
}

#[test]
#[ignore = "a figure for tests/bench/use_signals.sh, not a test"]
fn scan() {
    let proc = Path::new("/proc");
    let pids: Vec<_> = std::fs::read_dir(proc)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .iter()
                .all(u8::is_ascii_digit)
        })
        .collect();
    let listed: Vec<std::path::PathBuf> = pids
        .iter()
        .flat_map(|e| {
            std::fs::read_dir(e.path().join("fd"))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|fd| fd.path())
        .collect();
    let fds = listed.len();
    // Another user namespace's processes list their descriptors but refuse their links.
    let readable = listed
        .iter()
        .filter(|p| std::fs::read_link(p).is_ok())
        .count();
    let names = vec!["no-such-program".to_string()];
    let names_only = median_us(|| {
        std::hint::black_box(walk_processes(proc, &names, false));
    });
    let devices = median_us(|| {
        std::hint::black_box(walk_processes(proc, &names, true));
    });
    let no_card = median_us(|| {
        std::hint::black_box(streams(Path::new("/proc/asound")));
    });
    let d = tempfile::tempdir().unwrap();
    let tree = d.path().join("asound");
    asound(
        &tree,
        &[
            (0, "pcm0p", 0, RUNNING),
            (0, "pcm0c", 0, CLOSED),
            (0, "pcm3p", 0, CLOSED),
            (0, "pcm7p", 0, CLOSED),
            (1, "pcm0p", 0, CLOSED),
            (1, "pcm0c", 0, RUNNING),
        ],
    );
    let two_cards = median_us(|| {
        std::hint::black_box(streams(&tree));
    });
    let uid = nix::unistd::geteuid();
    println!(
        "use signals: {} processes, {fds} descriptors ({readable} of their links readable as uid {uid}), median of {RUNS} scans",
        pids.len()
    );
    println!("  walk, names only:          {names_only:>8.0} us");
    println!(
        "  walk, names and devices:   {devices:>8.0} us ({:.2} us per descriptor)",
        (devices - names_only).max(0.0) / fds.max(1) as f64
    );
    println!("  alsa tree, no card:        {no_card:>8.1} us");
    println!("  alsa tree, 2 cards:        {two_cards:>8.1} us");
}
