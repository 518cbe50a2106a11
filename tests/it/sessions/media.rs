//! Sound and cameras in use, as the real `pilotd plan` decides them: ALSA's procfs tree and
//! /proc built in a temp dir (pilotd.toml's `[host] asound` and `proc`), their files byte
//! for byte as the kernel writes them (sound/core/pcm.c, `snd_pcm_substream_proc_status_read`;
//! `/proc/PID/fd` links and `status`, proc(5)), with alice's desktop session served by the
//! login1 stand-in. This machine has no sound card and no camera: the trees stand in for them.

use super::login1::{FakeLogind, Hints, Kind, micros_ago};
use super::logind::{run, said, says_no_content, setup};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

const RUNNING: &str = "state: RUNNING\nowner_pid   : 2315\ntrigger_time: 86532.021470532\ntstamp      : 86547.690131904\ndelay       : 3584\navail       : 512\navail_max   : 1536\n-----\nhw_ptr      : 748416\nappl_ptr    : 752000\n";
const CLOSED: &str = "closed\n";

/// One substream's status under `asound` (card 0, device 0).
fn stream(d: &Path, pcm: &str, status: &str) {
    let dir = d.join("asound/card0").join(pcm).join("sub0");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("status"), status).unwrap();
}

/// A process under the test's /proc, of `uid`, holding `links` open; none: gone.
fn process(d: &Path, pid: u32, uid: u32, links: &[&str]) {
    let dir = d.join("proc").join(pid.to_string());
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("fd")).unwrap();
    fs::write(
        dir.join("status"),
        format!("Name:\tpipewire\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t1\nTracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
    )
    .unwrap();
    fs::write(dir.join("comm"), "pipewire\n").unwrap();
    for (n, link) in links.iter().enumerate() {
        symlink(link, dir.join("fd").join((n + 3).to_string())).unwrap();
    }
}

/// `pilotd snapshot`'s uses: what the observation carries of them, as JSON.
fn observed_uses(dir: &Path, bus: &str) -> serde_json::Value {
    let out = std::process::Command::new(crate::harness::bin())
        .arg("-c")
        .arg(dir.join("pilotd.toml"))
        .arg("snapshot")
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus)
        .env_remove("PILOTD_CONFIG")
        .env_remove("PILOTD_POLICY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["in_use"].clone()
}

async fn observed(dir: &Path, bus: &str) -> serde_json::Value {
    let (d, a) = (dir.to_path_buf(), bus.to_string());
    tokio::task::spawn_blocking(move || observed_uses(&d, &a))
        .await
        .unwrap()
}

/// alice at her desk, her desktop saying she has been idle for 10 minutes: away, unless
/// something she plays, records or films keeps her here. A lock outweighs what she plays,
/// not a call (sound recorded) or a camera; a stream whose holder cannot be seen is its
/// opener's, and with neither to be seen hers as the one in front at the seat;
/// `media_is_use = false` turns it all off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sound_and_cameras_keep_their_user_here_by_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d, "0s");
    let site = fs::read_to_string(d.join("pilotd.toml")).unwrap();
    fs::write(
        d.join("pilotd.toml"),
        site.replace(
            "[host]\n",
            &format!(
                "[host]\nproc = \"{p}/proc\"\nasound = \"{p}/asound\"\n",
                p = d.display()
            ),
        ),
    )
    .unwrap();
    fs::create_dir_all(d.join("proc")).unwrap();
    stream(d, "pcm0p", CLOSED);
    stream(d, "pcm0c", CLOSED);
    let logind = FakeLogind::start(d).await;
    let address = logind.address.clone();
    let desk = logind.add("2", "alice", 1000, Kind::Desk).await;
    *desk.hints.lock().unwrap() = Hints {
        idle: true,
        idle_since_us: micros_ago(Duration::from_secs(600)),
        locked: false,
    };
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    assert!(
        said(&v).contains("alice is away (idle for 5m or more)"),
        "{}",
        said(&v)
    );

    // Music: her sound server holds the device (its stream opened by her player, 2315).
    stream(d, "pcm0p", RUNNING);
    process(
        d,
        2400,
        1000,
        &[
            "/dev/snd/controlC0",
            "/dev/snd/pcmC0D0p",
            "anon_inode:[eventfd]",
        ],
    );
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert_eq!(v["causes"][0], "owner_present");
    assert_eq!(
        v["reasons"][0],
        "alice is using the machine: sound is playing"
    );
    says_no_content(&v);
    assert!(!said(&v).contains("pipewire"), "{}", said(&v));
    // The observation says the kind and whose, named as her session (the user database of
    // this machine may name uid 1000 otherwise), and nothing of the program.
    assert_eq!(
        observed(d, &address).await,
        serde_json::json!([{ "kind": "sound_playing", "user": "alice", "uid": 1000 }])
    );

    // The sound server's descriptors cannot be seen (another user's need CAP_SYS_PTRACE):
    // the stream is its opener's (`owner_pid` in its status), still hers.
    process(d, 2400, 1000, &[]);
    process(d, 2315, 1000, &[]);
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert_eq!(
        v["reasons"][0],
        "alice is using the machine: sound is playing"
    );
    assert_eq!(
        observed(d, &address).await,
        serde_json::json!([{ "kind": "sound_playing", "user": "alice", "uid": 1000 }])
    );
    // Nor its opener (gone from this /proc): hers as the one in front at the seat.
    fs::remove_dir_all(d.join("proc/2315")).unwrap();
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert_eq!(
        observed(d, &address).await,
        serde_json::json!([{ "kind": "sound_playing", "user": "alice", "uid": 1000, "by_seat": true }])
    );

    // She locks her screen and leaves the music on: away (lock_grace is 0s here).
    desk.hints.lock().unwrap().locked = true;
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    assert!(
        said(&v).contains("alice's screen is locked: that sound is playing is not counted"),
        "{}",
        said(&v)
    );

    // A call behind the locked screen: her microphone records. Here.
    stream(d, "pcm0c", RUNNING);
    process(d, 2315, 1000, &["/dev/snd/pcmC0D0p", "/dev/snd/pcmC0D0c"]);
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert_eq!(
        v["reasons"][0],
        "alice is using the machine: sound is being recorded"
    );

    // The call ends; her camera stays open (no sound at all): here.
    stream(d, "pcm0p", CLOSED);
    stream(d, "pcm0c", CLOSED);
    process(d, 2315, 1000, &[]);
    fs::write(d.join("dev/video0"), "").unwrap();
    process(d, 4100, 1000, &["/dev/video0", "socket:[41532]"]);
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], false, "{}", said(&v));
    assert_eq!(
        v["reasons"][0],
        "alice is using the machine: the camera is in use"
    );

    // The owner does not count media: away.
    let policy = fs::read_to_string(d.join("policy.toml")).unwrap();
    fs::write(
        d.join("policy.toml"),
        policy.replace("[owner]\n", "[owner]\nmedia_is_use = false\n"),
    )
    .unwrap();
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
    fs::write(d.join("policy.toml"), &policy).unwrap();

    // The camera closed: away again.
    process(d, 4100, 1000, &["socket:[41532]"]);
    let v = run(d, &address).await.unwrap();
    assert_eq!(v["allowed"], true, "{}", said(&v));
}
