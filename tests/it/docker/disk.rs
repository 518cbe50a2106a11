//! The hard disk limit per worker on the real engine and real loop devices: each worker's
//! scratch is an ext4 image of exactly its share (`volunteer::act::scratch`). The attacks of the
//! security probe (issue 21) are the test worker of tests/images/disk-writer: a fast writer
//! that ignores SIGTERM, a deleted file kept open, an inode flood, an image `VOLUME`; and the
//! cleanup after an end and after a crash.
//!
//! "Host usage" here is what the test's state dir holds on the host (`du`), plus what files
//! the worker deleted but keeps open hold on the host's filesystem (seen through
//! /proc/PID/fd, which `du` cannot see). The negative control is the owner's
//! `disk_limit = "measured"`, under which the same attack passes the share as measured here
//! (`the_measured_limit_lets_a_file_deleted_but_kept_open_pass_the_share`).

use super::docker;
use super::volunteer::{Harness, P, image, policy};
use crate::harness::{repo, sh};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const REPO: &str = "127.0.0.1:5000/pilotd-test/worker";
const NEEDS: &str = "needs the Docker engine and root (loop devices)";

/// The disk-writer image (built FROM worker:v1 and pushed once per content): its tag.
fn writer_image(dockerfile: &str) -> String {
    static TAGS: OnceLock<std::sync::Mutex<std::collections::BTreeMap<String, String>>> =
        OnceLock::new();
    let tags = TAGS.get_or_init(Default::default);
    let mut tags = tags.lock().unwrap();
    if let Some(t) = tags.get(dockerfile) {
        return t.clone();
    }
    let dir = repo("tests/images/disk-writer");
    let hash = sh(&format!(
        "cat {d}/entrypoint {d}/{dockerfile} | sha256sum | cut -c1-12",
        d = dir.display()
    ))
    .1
    .trim()
    .to_string();
    let kind = if dockerfile == "Dockerfile" {
        "disk"
    } else {
        "disk-volume"
    };
    let tag = format!("{REPO}:{kind}-{hash}");
    docker(&format!(
        "build -q --build-arg BASE={REPO}:v1 -t {tag} -f {d}/{dockerfile} {d}",
        d = dir.display()
    ));
    docker(&format!("push -q {tag}"));
    tags.insert(dockerfile.to_string(), tag.clone());
    tag
}

/// What the test's dir (state, scratch, disk images) holds on the host, in KiB, plus the
/// host blocks of files the instance's workers deleted but keep open.
fn host_use_kib(h: &Harness) -> u64 {
    let dir = h.path("");
    du_kib(&dir) + deleted_open_kib(h, std::fs::metadata(&dir).unwrap().dev())
}

/// `du -sk dir`, which must work: a failure read as 0 KiB would pass every bound here. A
/// file that vanished while `du` walked (a worker's removal) holds nothing, and `du` still
/// prints the rest's total; anything else it says fails the test.
fn du_kib(dir: &Path) -> u64 {
    let out = std::process::Command::new("du")
        .arg("-sk")
        .arg(dir)
        .output()
        .expect("du runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let vanished = stderr
        .lines()
        .all(|l| l.contains("No such file or directory"));
    assert!(
        out.status.success() || vanished,
        "du -sk {} failed: {stderr}",
        dir.display()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split('\t')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "du -sk {} printed no size: {stdout:?} {stderr}",
                dir.display()
            )
        })
}

fn deleted_open_kib(h: &Harness, host_dev: u64) -> u64 {
    let ids = sh(&format!(
        "docker ps -q --filter label=pilotd.instance={}",
        h.instance()
    ))
    .1;
    // A file open in several processes (a shell and its dd) counts once.
    let mut seen = std::collections::BTreeMap::new();
    for id in ids.split_whitespace() {
        let pids = sh(&format!("docker top {id} -eo pid | tail -n +2")).1;
        for pid in pids.split_whitespace() {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                if let Ok(m) = std::fs::metadata(fd.path())
                    && m.is_file()
                    && m.nlink() == 0
                    && m.dev() == host_dev
                {
                    seen.insert(m.ino(), m.blocks());
                }
            }
        }
    }
    seen.values().sum::<u64>() / 2
}

/// The most the host held while `until` is false, sampled every 100 ms for at most `limit`.
fn peak_while(h: &Harness, limit: Duration, until: impl Fn() -> bool) -> u64 {
    let end = Instant::now() + limit;
    let mut peak = 0;
    while Instant::now() < end && !until() {
        peak = peak.max(host_use_kib(h));
        std::thread::sleep(Duration::from_millis(100));
    }
    peak.max(host_use_kib(h))
}

/// The test's policy: one worker with a 32 MiB share, and a grace long enough that only a
/// SIGKILL ends a worker that ignores SIGTERM.
fn limited(limit: &'static str) -> P {
    P {
        disk: "32MiB",
        disk_limit: limit,
        grace: "20s",
        ..policy("graceful", 1)
    }
}

const SHARE_KIB: u64 = 32 << 10;
/// State files, logs, the token copy and directories beside the image.
const SLACK_KIB: u64 = 4 << 10;

fn disk_harness(tag: &str, limit: &'static str, probe: &str) -> Harness {
    let worker = format!(
        "image = \"{}\"\n[worker.env]\nDISK_PROBE = \"{probe}\"\nDISK_CAP_MIB = \"160\"\n",
        writer_image("Dockerfile")
    );
    Harness::new(tag, &limited(limit), "", &worker)
}

#[test]
#[ignore = "needs the Docker engine and root (loop devices)"]
fn a_fast_writer_ignoring_sigterm_never_holds_more_than_its_share() {
    let _ = NEEDS;
    let mut h = disk_harness("diskfast", "enforced", "fast");
    h.start();
    let first = h.wait_for("a worker", Duration::from_secs(60), || h.running().pop());
    // Through the writing, the stop (SIGTERM ignored: it writes on through the grace) and
    // the end; a replacement waits until the first is gone.
    let peak = peak_while(&h, Duration::from_secs(75), || {
        h.workers().iter().all(|w| w.id != first.id)
    });
    assert!(
        peak <= SHARE_KIB + SLACK_KIB,
        "the host held {peak} KiB for a {SHARE_KIB} KiB share\n{}",
        h.log()
    );
    let log = h.log();
    assert!(
        log.contains("its scratch is full: it filled its disk share of 32 MiB"),
        "{log}"
    );
    assert!(
        log.contains("stopped: its scratch filled its disk share of 32 MiB; backing off"),
        "the worker ended as a failure the back-off counts: {log}"
    );
    let status = std::fs::read_to_string(h.path("state/status.json")).unwrap_or_default();
    assert!(status.contains("\"scratch_full\""), "{status}");
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and root (loop devices)"]
fn a_file_deleted_but_kept_open_stays_inside_the_share() {
    let mut h = disk_harness("diskdel", "enforced", "deleted");
    h.start();
    let w = h.wait_for("a worker", Duration::from_secs(60), || h.running().pop());
    let written = || {
        sh(&format!("docker logs {} 2>&1", w.id))
            .1
            .contains("deleted file written")
    };
    let peak = peak_while(&h, Duration::from_secs(30), written);
    assert!(written(), "the writer finished writing within 30 s");
    assert!(
        peak <= SHARE_KIB + SLACK_KIB,
        "the host held {peak} KiB for a {SHARE_KIB} KiB share\n{}",
        h.log()
    );
    // The filesystem counts what `du` cannot: the worker is found full and ended.
    h.wait_for("the full worker ended", Duration::from_secs(60), || {
        h.log().contains("its scratch is full").then_some(())
    });
    h.term();
}

/// The negative control of the tests above: with the owner's `disk_limit = "measured"`, the
/// same deleted-but-open file grows past the share (to the writer's 160 MiB cap), which this
/// file's measure of the host sees and pilotd's walk cannot; the worker is never found full.
#[test]
#[ignore = "needs the Docker engine and root (loop devices)"]
fn the_measured_limit_lets_a_file_deleted_but_kept_open_pass_the_share() {
    let mut h = disk_harness("diskmeas", "measured", "deleted");
    h.start();
    let w = h.wait_for("a worker", Duration::from_secs(60), || h.running().pop());
    let written = || {
        sh(&format!("docker logs {} 2>&1", w.id))
            .1
            .contains("deleted file written")
    };
    let peak = peak_while(&h, Duration::from_secs(60), written);
    assert!(written(), "the writer finished writing within 60 s");
    assert!(
        peak > SHARE_KIB + SLACK_KIB + (64 << 10),
        "the host held only {peak} KiB: the measure of the host misses the attack\n{}",
        h.log()
    );
    assert!(!h.path("scratch").join(format!("{}.img", w.name)).exists());
    assert!(!h.log().contains("its scratch is full"), "{}", h.log());
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and root (loop devices)"]
fn an_inode_flood_ends_inside_the_share() {
    let mut h = disk_harness("diskinode", "enforced", "entries");
    h.start();
    let w = h.wait_for("a worker", Duration::from_secs(60), || h.running().pop());
    let done = || {
        sh(&format!("docker logs {} 2>&1", w.id))
            .1
            .lines()
            .find_map(|l| l.strip_prefix("disk-writer: ")?.strip_suffix(" entries"))
            .and_then(|n| n.parse::<u64>().ok())
    };
    let peak = peak_while(&h, Duration::from_secs(120), || done().is_some());
    let n = done().expect("the flood ended within 120 s");
    // One inode per 16 KiB of the share: the filesystem said no long before 1,000,000.
    assert!(n < 4096, "{n} entries in a 32 MiB share");
    assert!(
        peak <= SHARE_KIB + SLACK_KIB,
        "the host held {peak} KiB for a {SHARE_KIB} KiB share\n{}",
        h.log()
    );
    h.wait_for("the full worker ended", Duration::from_secs(60), || {
        h.log().contains("its scratch is full").then_some(())
    });
    h.term();
}

#[test]
#[ignore = "needs the Docker engine and root (loop devices)"]
fn an_image_that_declares_a_volume_is_refused_with_the_reason() {
    let tag = writer_image("Dockerfile.volume");
    let mut h = Harness::new(
        "diskvol",
        &limited("enforced"),
        "",
        &format!("image = \"{tag}\"\n"),
    );
    h.start();
    h.wait_for("the refusal", Duration::from_secs(60), || {
        h.log().contains("declares VOLUME /data").then_some(())
    });
    assert!(
        h.workers().is_empty(),
        "no container of it: {:?}",
        h.workers()
    );
    let status = std::fs::read_to_string(h.path("state/status.json")).unwrap_or_default();
    assert!(status.contains("declares VOLUME /data"), "{status}");
    // The failed start left nothing in the scratch root.
    let left = sh(&format!("ls -A {}", h.path("scratch").display())).1;
    assert!(left.trim().is_empty(), "left behind: {left}");
    h.term();
}

/// The instance's disk images, volumes and loop devices, as the host shows them.
fn leftovers(h: &Harness) -> (Vec<String>, String, String) {
    let scratch = h.path("scratch");
    let images: Vec<String> = std::fs::read_dir(&scratch)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    let volumes = sh(&format!(
        "docker volume ls -q --filter label=pilotd.instance={}",
        h.instance()
    ))
    .1;
    let loops = sh(&format!(
        "losetup -a | grep -F '{}' || true",
        scratch.display()
    ))
    .1;
    (images, volumes.trim().to_string(), loops.trim().to_string())
}

#[test]
#[ignore = "needs the Docker engine and root (loop devices)"]
fn everything_of_a_worker_goes_after_its_end_and_after_a_crash() {
    let mut h = Harness::new(
        "diskclean",
        &limited("enforced"),
        "",
        &format!("{}\n[worker.env]\nWORKER_SLEEP = \"3600\"\n", image("v1")),
    );
    h.start();
    let w = h.wait_for("a worker", Duration::from_secs(60), || h.running().pop());
    let (images, volumes, loops) = leftovers(&h);
    assert_eq!(images, vec![format!("{}.img", w.name)]);
    assert_eq!(volumes, w.name);
    assert!(loops.contains(&format!("{}.img", w.name)), "{loops}");
    // The image is allocated whole: the share is taken from the host at start.
    let m = std::fs::metadata(h.path(&format!("scratch/{}.img", w.name))).unwrap();
    assert!(
        m.blocks() * 512 >= SHARE_KIB * 1024,
        "{} blocks",
        m.blocks()
    );
    // The worker's uid owns its scratch and can write there; nosuid, nodev.
    let out = docker(&format!(
        "exec {} sh -c 'touch /pilot/x && stat -c %u /pilot && grep \" /pilot \" /proc/mounts'",
        w.id
    ));
    assert!(out.starts_with("65532\n"), "{out}");
    assert!(out.contains("ext4 rw,nosuid,nodev"), "{out}");
    // Without noinit_itable, ext4's lazy inode-table init punches holes in the image after
    // the mount (seen: the check above failing in a full run), and the share is no longer
    // held on the host.
    assert!(out.contains("noinit_itable"), "{out}");

    // The measured use stays visible to `status` and the page.
    h.wait_for(
        "the measured use in status",
        Duration::from_secs(30),
        || {
            let st = h.status_file()?;
            // Keyed by the full id; `docker ps` shows the short one.
            let uses = st["scratch_use"].as_object()?;
            let (_, u) = uses.iter().find(|(id, _)| id.starts_with(&w.id))?;
            u["used_kib"].as_u64().filter(|&k| k > 0)
        },
    );

    // A crash: pilotd killed, its worker dies too; the next GC finds what is left by its
    // place in the state dir and the instance's labels.
    h.kill9();
    docker(&format!("kill {}", w.id));
    let gc = h.pilotd().arg("gc").output().unwrap();
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let (images, volumes, loops) = leftovers(&h);
    assert!(images.is_empty(), "{images:?}");
    assert_eq!(volumes, "");
    assert_eq!(loops, "");
    assert!(
        !h.path(&format!("state/tokens/{}", w.name)).exists(),
        "the token copy went too"
    );

    // A leftover image and token copy of a worker that is long gone (a crash between the
    // image and the container): GC removes them too.
    let ghost = format!("pilotd-{}-ghost", h.instance());
    for p in [
        format!("scratch/{ghost}.img"),
        format!("state/tokens/{ghost}"),
    ] {
        std::fs::write(h.path(&p), b"x").unwrap();
        sh(&format!("touch -d '-2 min' {}", h.path(&p).display()));
    }
    let gc = h.pilotd().arg("gc").output().unwrap();
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert!(!h.path(&format!("scratch/{ghost}.img")).exists());
    assert!(!h.path(&format!("state/tokens/{ghost}")).exists());

    // An end: a started worker removed by `failsafe --remove` (what the package's prerm
    // runs) takes everything with it.
    h.start();
    let w = h.wait_for("a new worker", Duration::from_secs(60), || {
        h.running().pop()
    });
    h.kill9();
    let out = h
        .pilotd()
        .args(["failsafe", "--remove", "--grace", "1s"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (images, volumes, loops) = leftovers(&h);
    assert!(images.is_empty(), "{images:?}");
    assert_eq!(volumes, "");
    assert_eq!(loops, "");
    assert!(!h.path(&format!("state/tokens/{}", w.name)).exists());
}

#[test]
#[ignore = "needs the Docker engine and root (loop devices)"]
fn a_symlinked_scratch_root_is_refused() {
    let mut h = Harness::new("disklink", &limited("enforced"), "", &image("v1"));
    let real = h.path("elsewhere");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, h.path("scratch")).unwrap();
    h.start();
    h.wait_for("the refusal", Duration::from_secs(60), || {
        h.log().contains("is a symbolic link").then_some(())
    });
    assert!(h.workers().is_empty());
    assert!(Path::new(&real).read_dir().unwrap().next().is_none());
    h.term();
}

/// The start cost of the limit: `start_ms` of pilotd's "started" lines (scratch made ready,
/// the engine's create and start), median of 10 starts with the limit and 10 without.
/// Prints the figures; fails only if the limit costs more than the 0.5 s goal.
#[test]
#[ignore = "needs the Docker engine and root (loop devices)"]
fn start_cost_of_the_disk_limit() {
    let median = |limit: &'static str| {
        let mut h = Harness::new(
            &format!("diskbench{}", &limit[..1]),
            &P {
                disk: "1GiB",
                disk_limit: limit,
                ..policy("graceful", 1)
            },
            "",
            &format!("{}\n[worker.env]\nWORKER_SLEEP = \"0\"\n", image("v1")),
        );
        h.start();
        let ms = h.wait_for("10 starts", Duration::from_secs(180), || {
            let ms: Vec<u64> = h
                .log()
                .lines()
                .filter(|l| l.contains(" started"))
                .filter_map(|l| l.split("start_ms=").nth(1)?.split(' ').next()?.parse().ok())
                .collect();
            (ms.len() >= 10).then_some(ms)
        });
        h.term();
        let mut ms = ms[..10].to_vec();
        ms.sort_unstable();
        (ms[4] + ms[5]) / 2
    };
    let with = median("enforced");
    let without = median("measured");
    println!(
        "start cost (median of 10, 1 GiB share): with the disk limit {with} ms, without {without} ms, extra {} ms",
        with as i64 - without as i64
    );
    assert!(with <= without + 500, "{with} ms against {without} ms");
}
