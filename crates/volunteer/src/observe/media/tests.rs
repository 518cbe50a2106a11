//! The media probe on fixture trees written byte for byte as the kernel writes them: ALSA's
//! `status` files (sound/core/pcm.c, `snd_pcm_substream_proc_status_read`: `closed\n`, or
//! `state: %s\n` followed by the owner's pid, times and pointers), and `/proc/PID/fd` links
//! to device nodes. This machine has no sound card: the real tree is absent here, which is
//! the "no sound" case.

use super::*;
use std::fs;

/// The probe's cost, for tests/bench/use_signals.sh (ignored: a figure, run on its own).
mod bench;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

/// A substream that is open and moving data, as `cat /proc/asound/card0/pcm0p/sub0/status`
/// prints it while something plays.
pub(crate) const RUNNING: &str = "state: RUNNING\nowner_pid   : 2315\ntrigger_time: 86532.021470532\ntstamp      : 86547.690131904\ndelay       : 3584\navail       : 512\navail_max   : 1536\n-----\nhw_ptr      : 748416\nappl_ptr    : 752000\n";
/// Open, set up, not started (a player paused before its first sound, a device held idle).
pub(crate) const PREPARED: &str = "state: PREPARED\nowner_pid   : 2315\ntrigger_time: 0.000000000\ntstamp      : 0.000000000\ndelay       : 0\navail       : 4096\navail_max   : 0\n-----\nhw_ptr      : 0\nappl_ptr    : 0\n";
/// Nobody has the substream open.
pub(crate) const CLOSED: &str = "closed\n";

/// An ALSA tree: for each (card, pcm dir, substream, status), the file; with the files the
/// kernel puts beside them (`id`, `info`, a `cards` list and an id link to the card).
pub(crate) fn asound(root: &Path, subs: &[(u32, &str, u32, &str)]) {
    fs::create_dir_all(root).unwrap();
    fs::write(
        root.join("cards"),
        " 0 [PCH            ]: HDA-Intel - HDA Intel PCH\n",
    )
    .unwrap();
    fs::write(
        root.join("version"),
        "Advanced Linux Sound Architecture Driver Version k6.1.0.\n",
    )
    .unwrap();
    for (card, pcm, sub, status) in subs {
        let card_dir = root.join(format!("card{card}"));
        let dir = card_dir.join(pcm).join(format!("sub{sub}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(card_dir.join("id"), "PCH\n").unwrap();
        fs::write(
            card_dir.join(pcm).join("info"),
            format!("card: {card}\ndevice: 0\n"),
        )
        .unwrap();
        fs::write(dir.join("status"), status).unwrap();
        fs::write(dir.join("hw_params"), "closed\n").unwrap();
        let id = root.join("PCH");
        if !id.exists() {
            symlink(format!("card{card}"), id).unwrap();
        }
    }
}

/// A process under `proc`: its `status` (uid) and descriptors linking to `links`.
pub(crate) fn process(proc: &Path, pid: u32, uid: u32, comm: &str, links: &[&str]) {
    let dir = proc.join(pid.to_string());
    fs::create_dir_all(dir.join("fd")).unwrap();
    fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
    fs::write(
        dir.join("status"),
        format!("Name:\t{comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t1\nTracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
    )
    .unwrap();
    for (n, link) in links.iter().enumerate() {
        symlink(link, dir.join("fd").join(n.to_string())).unwrap();
    }
}

fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let (a, p) = (d.path().join("asound"), d.path().join("proc"));
    fs::create_dir_all(&p).unwrap();
    (d, a, p)
}

fn name(uid: u32) -> Option<String> {
    match uid {
        1000 => Some("alice".into()),
        1001 => Some("bob".into()),
        _ => None,
    }
}

#[test]
fn device_links_are_read_by_their_names_alone() {
    let pcm = |card, device, capture| {
        Some(Device::Pcm {
            card,
            device,
            capture,
        })
    };
    let table: [(&str, Option<Device>); 12] = [
        ("/dev/snd/pcmC0D0p", pcm(0, 0, false)),
        ("/dev/snd/pcmC1D3c", pcm(1, 3, true)),
        ("/dev/snd/pcmC10D12p", pcm(10, 12, false)),
        ("/dev/video0", Some(Device::Video)),
        ("/dev/video12", Some(Device::Video)),
        // Controls, timers, MIDI: no stream.
        ("/dev/snd/controlC0", None),
        ("/dev/snd/timer", None),
        ("/dev/snd/pcmC0D0", None),
        ("/dev/snd/pcmC0D0x", None),
        ("/dev/videox", None),
        ("/dev/video", None),
        ("socket:[41532]", None),
    ];
    for (link, want) in table {
        assert_eq!(Device::of_link(link.as_bytes()), want, "{link}");
    }
}

#[test]
fn a_running_substream_names_its_opener() {
    assert_eq!(opener(RUNNING.as_bytes()), Some(2315));
    assert_eq!(opener(CLOSED.as_bytes()), None);
    // Opened in a pid namespace pilotd cannot see into: pid 0, no one.
    assert_eq!(opener(b"state: RUNNING\nowner_pid   : 0\n"), None);
}

#[test]
fn a_substream_runs_only_when_its_status_says_running() {
    assert!(is_running(RUNNING.as_bytes()));
    assert!(!is_running(PREPARED.as_bytes()));
    assert!(!is_running(CLOSED.as_bytes()));
    assert!(!is_running(b"state: PAUSED\nowner_pid   : 7\n"));
    assert!(!is_running(b"state: XRUN\n"));
    assert!(!is_running(b""));
    assert!(!is_running(b"error -19\n"));
}

#[test]
fn running_streams_by_card_device_and_direction() {
    let (_d, a, _) = tree();
    assert_eq!(streams(&a), vec![], "no sound card");
    asound(
        &a,
        &[
            (0, "pcm0p", 0, RUNNING),
            (0, "pcm0c", 0, CLOSED),
            (0, "pcm3p", 0, PREPARED),
            (1, "pcm0c", 0, CLOSED),
            (1, "pcm0c", 1, RUNNING),
        ],
    );
    assert_eq!(
        streams(&a),
        vec![
            Stream {
                card: 0,
                device: 0,
                capture: false,
                opener: Some(2315),
            },
            Stream {
                card: 1,
                device: 0,
                capture: true,
                opener: Some(2315),
            },
        ]
    );
    // Everything closed: nothing.
    let (_d2, a2, _) = tree();
    asound(&a2, &[(0, "pcm0p", 0, CLOSED), (0, "pcm0c", 0, PREPARED)]);
    assert_eq!(streams(&a2), vec![]);
}

/// Whose sound and camera: by the processes holding the devices open, once per uid and kind;
/// a stream no holder of which is seen is one use for nobody yet.
#[test]
fn uses_are_attributed_to_the_holders_uids() {
    let play = Stream {
        card: 0,
        device: 0,
        capture: false,
        opener: None,
    };
    let rec = Stream {
        capture: true,
        ..play
    };
    let no_pid = |_| None;
    let node = |capture| Device::Pcm {
        card: 0,
        device: 0,
        capture,
    };
    let got = uses(
        &[play, rec],
        &[
            (1000, node(false)),
            (1000, node(true)),
            (1001, Device::Video),
            // A device held open that does not run says nothing.
            (
                1001,
                Device::Pcm {
                    card: 0,
                    device: 3,
                    capture: false,
                },
            ),
        ],
        no_pid,
        name,
    );
    let said: Vec<(UseKind, Option<&str>, Option<u32>)> = got
        .iter()
        .map(|u| (u.kind, u.user.as_deref(), u.uid))
        .collect();
    assert_eq!(
        said,
        vec![
            (UseKind::SoundPlaying, Some("alice"), Some(1000)),
            (UseKind::SoundRecorded, Some("alice"), Some(1000)),
            (UseKind::Camera, Some("bob"), Some(1001)),
        ]
    );
    // Nobody seen holding the running stream, and no opener: one use, for nobody yet.
    let got = uses(&[play], &[], no_pid, name);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].kind, got[0].uid, got[0].user.as_deref()),
        (UseKind::SoundPlaying, None, None)
    );
    // No holder's links readable (another user's need CAP_SYS_PTRACE): the opener's uid.
    let opened = Stream {
        opener: Some(2315),
        ..play
    };
    let got = uses(&[opened], &[], |pid| (pid == 2315).then_some(1000), name);
    assert_eq!(
        (got[0].uid, got[0].user.as_deref()),
        (Some(1000), Some("alice"))
    );
    // Holders seen: theirs, whoever opened it.
    let got = uses(&[opened], &[(1001, node(false))], |_| Some(1000), name);
    assert_eq!((got[0].uid, got.len()), (Some(1001), 1));
    // A uid without a name is still that uid.
    let got = uses(&[], &[(4242, Device::Video)], no_pid, name);
    assert_eq!((got[0].uid, got[0].user.as_deref()), (Some(4242), None));
    // Nothing running, no camera held: no use.
    assert_eq!(uses(&[], &[(1000, node(false))], no_pid, name), vec![]);
}

/// The one walk over /proc finds the exclusive programs and the devices' holders together,
/// reading descriptors only when asked.
#[test]
fn one_walk_finds_exclusive_programs_and_device_holders() {
    let (_d, _, p) = tree();
    process(
        &p,
        2315,
        1000,
        "pipewire",
        &[
            "/dev/snd/pcmC0D0p",
            "/dev/snd/controlC0",
            "anon_inode:[eventfd]",
        ],
    );
    process(
        &p,
        4100,
        1001,
        "zoom",
        &["/dev/video0", "/dev/snd/pcmC0D0c", "socket:[41532]"],
    );
    process(&p, 5000, 1000, "matlab", &["/home/alice/data.mat"]);
    process(&p, 1, 0, "systemd", &["/dev/null"]);
    fs::create_dir_all(p.join("self")).unwrap();
    fs::write(p.join("uptime"), "1.0 1.0\n").unwrap();
    let names = vec!["matlab".to_string(), "steam".to_string()];
    let w = walk(&p, &names, true);
    assert_eq!(w.running, vec!["matlab".to_string()]);
    assert_eq!(
        w.holders,
        vec![
            (
                1000,
                Device::Pcm {
                    card: 0,
                    device: 0,
                    capture: false
                }
            ),
            (
                1001,
                Device::Pcm {
                    card: 0,
                    device: 0,
                    capture: true
                }
            ),
            (1001, Device::Video),
        ]
    );
    let w = walk(&p, &names, false);
    assert_eq!(w.running, vec!["matlab".to_string()]);
    assert!(w.holders.is_empty(), "descriptors not read unless asked");
    assert_eq!(
        walk(&p, &[], false),
        crate::observe::host::Processes::default()
    );
}

fn walk(proc: &Path, names: &[String], devices: bool) -> crate::observe::host::Processes {
    crate::observe::host::walk_processes(proc, names, devices)
}

#[test]
fn video_nodes_say_whether_a_camera_can_be_in_use() {
    let d = tempfile::tempdir().unwrap();
    assert!(!has_video(d.path()));
    fs::write(d.path().join("video-not"), "").unwrap();
    fs::write(d.path().join("null"), "").unwrap();
    assert!(!has_video(d.path()));
    fs::write(d.path().join("video0"), "").unwrap();
    assert!(has_video(d.path()));
}
