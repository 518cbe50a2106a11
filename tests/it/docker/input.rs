//! The owner at this machine's keyboard, on the real engine: a local login whose idleness
//! nothing else can tell (no terminal to look at, no logind), judged by the machine's input
//! devices. No `/dev/input` or `uinput` exists here, so `[host] dev` points at a directory whose
//! `input/event0` is a FIFO carrying real `struct input_event` records, and `power_supply` at a
//! sysfs-like tree whose `class/input/event0` has a real keyboard's capability bitmaps.

use super::volunteer::{Harness, image, policy};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

/// A PS/2 keyboard's `ev` and `key` bitmaps, as its /sys/class/input/eventN/device/capabilities
/// show them.
const KEYBOARD: [(&str, &str); 2] = [
    ("ev", "120013"),
    (
        "key",
        "402000000 3803078f800d001 feffffdfffefffff fffffffffffffffe",
    ),
];

/// One `struct input_event` (timeval, type, code, value: EV_KEY, KEY_A, pressed).
fn key_press() -> Vec<u8> {
    let mut r = Vec::with_capacity(24);
    r.extend_from_slice(&0i64.to_ne_bytes());
    r.extend_from_slice(&0i64.to_ne_bytes());
    r.extend_from_slice(&1u16.to_ne_bytes());
    r.extend_from_slice(&30u16.to_ne_bytes());
    r.extend_from_slice(&1i32.to_ne_bytes());
    r
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_key_after_a_quiet_spell_pauses_at_once_and_quiet_input_lets_workers_compute() {
    let mut h = Harness::new(
        "input",
        &policy("pause", 1),
        "",
        &format!("{}\n[worker.env]\n", image("v1")),
    );
    // The fake devices: /dev/input/event0 (a FIFO) and its class entry.
    let dev = h.path("dev");
    std::fs::create_dir_all(dev.join("input")).unwrap();
    nix::unistd::mkfifo(
        &dev.join("input/event0"),
        nix::sys::stat::Mode::from_bits(0o600).unwrap(),
    )
    .unwrap();
    let caps = h.path("sys/class/input/event0/device/capabilities");
    std::fs::create_dir_all(&caps).unwrap();
    for (f, v) in KEYBOARD {
        std::fs::write(caps.join(f), format!("{v}\n")).unwrap();
    }
    std::fs::create_dir_all(h.path("sys/class/power_supply")).unwrap();
    // Held open for writing (read-write: opening a FIFO write-only would wait for a reader).
    let mut keyboard = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(dev.join("input/event0"))
        .unwrap();

    // A long interval: only the input trigger and the decision's own next change act fast.
    let host = format!(
        "[host]\ndev = \"{}\"\npower_supply = \"{}\"\n",
        dev.display(),
        h.path("sys/class/power_supply").display()
    );
    h.edit(
        "pilotd.toml",
        &[
            ("interval = \"2s\"", "interval = \"60s\""),
            ("[host]\n", &host),
        ],
    );
    h.edit(
        "policy.toml",
        &[(
            "sessions = \"any\"\n",
            "sessions = \"active\"\nsession_idle = \"4s\"\n",
        )],
    );
    // A local console login (no remote host, no terminal under our `dev` to read).
    h.login_local("tty9");

    h.start();
    // Just started: the last input counts as now, so alice is here; 4 s without input, away.
    let t0 = Instant::now();
    let w = h.wait_for(
        "a worker once input was quiet",
        Duration::from_secs(30),
        || h.running().pop(),
    );
    assert!(
        t0.elapsed() >= Duration::from_secs(4),
        "started before the input was quiet for session_idle"
    );
    assert!(
        h.log()
            .contains("alice is away (no keyboard or mouse input for 4s or more)"),
        "{}",
        h.log()
    );

    // A key after the quiet spell: paused at once, though the next tick is a minute away.
    let pressed = Instant::now();
    keyboard.write_all(&key_press()).unwrap();
    h.wait_for("the worker paused", Duration::from_secs(10), || {
        (h.workers().iter().find(|x| x.id == w.id)?.state == "paused").then_some(())
    });
    let took = pressed.elapsed();
    eprintln!("key press -> paused: {took:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");

    // Quiet again for session_idle: resumed by the decision's own next change.
    h.wait_for("the worker resumed", Duration::from_secs(20), || {
        (h.workers().iter().find(|x| x.id == w.id)?.state == "running").then_some(())
    });
}
