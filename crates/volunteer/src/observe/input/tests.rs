//! Tests of the input probe. No /dev/input or uinput exists where these run, so sysfs is a
//! tree of capability files in a tempdir and the devices are FIFOs carrying `struct
//! input_event` records: a FIFO polls, reads and ends the way an evdev node does for what the
//! watcher uses (readable, drained, no more data).

use super::*;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Instant;
use tempfile::TempDir;
use tokio::sync::mpsc;

/// Capability files as the kernel prints them (`/sys/class/input/eventN/device/capabilities/`,
/// the same bitmaps as the `B:` lines of /proc/bus/input/devices), 64-bit kernels.
type Caps = &'static [(&'static str, &'static str)];

/// "AT Translated Set 2 keyboard" (i8042, nearly every laptop's built-in keyboard).
const AT_KEYBOARD: Caps = &[
    ("ev", "120013"),
    (
        "key",
        "402000000 3803078f800d001 feffffdfffefffff fffffffffffffffe",
    ),
    ("msc", "10"),
    ("led", "7"),
];
/// A three-button USB wheel mouse on Linux >= 5.0 (REL_X, REL_Y, REL_WHEEL,
/// REL_WHEEL_HI_RES; BTN_LEFT, BTN_RIGHT, BTN_MIDDLE).
const USB_MOUSE: Caps = &[
    ("ev", "17"),
    ("key", "70000 0 0 0 0"),
    ("rel", "903"),
    ("msc", "10"),
];
/// "TPPS/2 IBM TrackPoint" (ThinkPads).
const TRACKPOINT: Caps = &[("ev", "7"), ("key", "70000 0 0 0 0"), ("rel", "3")];
/// "SynPS/2 Synaptics TouchPad": BTN_TOOL_FINGER and BTN_TOUCH, ABS_X/Y and multitouch axes.
const SYNAPTICS_TOUCHPAD: Caps = &[
    ("ev", "b"),
    ("key", "e520 30000 0 0 0 0"),
    ("abs", "660800011000003"),
];
/// A single-touch touchscreen, built from the codes: BTN_TOUCH with ABS_X/Y.
const TOUCHSCREEN: Caps = &[("ev", "b"), ("key", "400 0 0 0 0 0"), ("abs", "3")];
/// A pen tablet, built from the codes: BTN_TOOL_PEN, BTN_TOOL_RUBBER, BTN_TOUCH, BTN_STYLUS,
/// BTN_STYLUS2 with ABS_X/Y, ABS_PRESSURE, ABS_DISTANCE (what a Wacom pen reports).
const PEN_TABLET: Caps = &[("ev", "b"), ("key", "1c03 0 0 0 0 0"), ("abs", "3000003")];
/// An absolute pointer with buttons and no touch, built from the codes: what virtual machines'
/// "USB tablets" report so the guest's pointer follows the host's.
const VM_TABLET: Caps = &[("ev", "f"), ("key", "70000 0 0 0 0"), ("abs", "3")];
/// "Power Button" (LNXPWRBN): KEY_POWER only.
const POWER_BUTTON: Caps = &[("ev", "3"), ("key", "10000000000000 0")];
/// "Sleep Button" (LNXSLPBN): KEY_SLEEP only.
const SLEEP_BUTTON: Caps = &[("ev", "3"), ("key", "4000 0 0")];
/// "Lid Switch" (PNP0C0D): SW_LID.
const LID_SWITCH: Caps = &[("ev", "21"), ("sw", "1")];
/// "HDA Intel PCH Headphone": SW_HEADPHONE_INSERT.
const HEADPHONE_JACK: Caps = &[("ev", "21"), ("sw", "4")];
/// "Video Bus" (ACPI video): brightness and video-mode keys.
const VIDEO_BUS: Caps = &[("ev", "3"), ("key", "3e000b00000000 0 0 0")];
/// "ST LIS3LV02DL Accelerometer" (HP laptops' lis3lv02d): ABS_X/Y/Z, no buttons.
const ACCELEROMETER: Caps = &[("ev", "9"), ("abs", "7")];
/// An infrared remote's keys, built from the codes: the digits and Enter (OK) among codes
/// 1 to 31, no letters. Not a keyboard: a stray remote in the room must not count.
const IR_REMOTE: Caps = &[("ev", "3"), ("key", "10000ffc")];
/// "PC Speaker": EV_SND only.
const PC_SPEAKER: Caps = &[("ev", "40001"), ("snd", "6")];

/// A sysfs-like tree and a /dev/input-like directory.
struct Bench {
    _tmp: TempDir,
    dev: PathBuf,
    sys: PathBuf,
}

fn bench() -> Bench {
    let tmp = tempfile::tempdir().unwrap();
    let (dev, sys) = (tmp.path().join("dev"), tmp.path().join("sys"));
    std::fs::create_dir(&dev).unwrap();
    std::fs::create_dir(&sys).unwrap();
    Bench {
        _tmp: tmp,
        dev,
        sys,
    }
}

impl Bench {
    /// `sys/name/device/capabilities/*` with these contents (sysfs ends each with a newline).
    fn classify(&self, name: &str, caps: &[(&str, &str)]) {
        let dir = self.sys.join(name).join("device/capabilities");
        std::fs::create_dir_all(&dir).unwrap();
        for (file, bits) in caps {
            std::fs::write(dir.join(file), format!("{bits}\n")).unwrap();
        }
    }

    /// `dev/name` as a FIFO and a handle to write records into it. Read-write, so opening it
    /// does not wait for the watcher and the FIFO does not end while the test holds it.
    fn plug(&self, name: &str) -> File {
        let path = self.dev.join(name);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&path)
            .unwrap()
    }

    /// Watches this bench; each `wake` is a message on the returned channel.
    fn watch(
        &self,
        last: &Arc<LastInput>,
    ) -> (tokio::task::JoinHandle<()>, mpsc::UnboundedReceiver<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(watch(
            self.dev.clone(),
            self.sys.clone(),
            last.clone(),
            move || tx.send(()).is_ok(),
        ));
        (task, rx)
    }
}

/// One `struct input_event` as the kernel writes it on 64-bit Linux: `struct timeval` (two
/// longs), `__u16 type`, `__u16 code`, `__s32 value`; here KEY_A (30) pressed.
fn key_a_press() -> Vec<u8> {
    let mut record = Vec::with_capacity(RECORD);
    record.extend_from_slice(&1_767_225_600i64.to_ne_bytes()); // tv_sec
    record.extend_from_slice(&250_000i64.to_ne_bytes()); // tv_usec
    record.extend_from_slice(&1u16.to_ne_bytes()); // EV_KEY
    record.extend_from_slice(&30u16.to_ne_bytes()); // KEY_A
    record.extend_from_slice(&1i32.to_ne_bytes()); // pressed
    assert_eq!(record.len(), RECORD);
    record
}

fn send(device: &mut File, record: &[u8]) {
    device.write_all(record).unwrap();
}

/// Waits until `done` holds, for at most 5 s (the watcher reacts in milliseconds; 5 s covers
/// a loaded machine and the one-second rest).
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn names(sys: &Path) -> Vec<(String, Kind)> {
    discover(sys)
        .into_iter()
        .map(|d| (d.name, d.kind))
        .collect()
}

#[cfg(target_pointer_width = "64")]
#[test]
fn keyboards_mice_and_touch_devices_count_and_nothing_else() {
    let b = bench();
    for (name, caps) in [
        ("event0", POWER_BUTTON),
        ("event1", SLEEP_BUTTON),
        ("event2", LID_SWITCH),
        ("event3", AT_KEYBOARD),
        ("event4", VIDEO_BUS),
        ("event5", USB_MOUSE),
        ("event6", SYNAPTICS_TOUCHPAD),
        ("event7", TRACKPOINT),
        ("event8", HEADPHONE_JACK),
        ("event9", ACCELEROMETER),
        ("event10", PC_SPEAKER),
        ("event11", TOUCHSCREEN),
        ("event12", PEN_TABLET),
        ("event13", VM_TABLET),
        ("event14", IR_REMOTE),
    ] {
        b.classify(name, caps);
    }
    assert_eq!(
        names(&b.sys),
        vec![
            ("event3".into(), Kind::Keyboard),
            ("event5".into(), Kind::Mouse),
            ("event6".into(), Kind::Touch),
            ("event7".into(), Kind::Mouse),
            ("event11".into(), Kind::Touch),
            ("event12".into(), Kind::Touch),
            ("event13".into(), Kind::Mouse),
        ]
    );
}

#[cfg(target_pointer_width = "64")]
#[test]
fn damaged_or_partial_capabilities_never_count_and_never_panic() {
    let b = bench();
    // Bitmaps that cannot be read: the device does not count (the EV_KEY bit alone is not
    // enough, nor is a keyboard's ev with a damaged key map).
    b.classify("event0", &[("ev", "zz"), ("key", AT_KEYBOARD[1].1)]);
    b.classify("event1", &[("ev", "120013"), ("key", "fffffffffffffffe q")]);
    b.classify("event2", &[("ev", ""), ("key", AT_KEYBOARD[1].1)]);
    b.classify("event3", &[("key", AT_KEYBOARD[1].1)]); // no ev file
    b.classify("event4", &[("ev", "120013")]); // no key file
    // A mouse's buttons and axes without EV_REL in ev: the axes are not reported.
    b.classify(
        "event5",
        &[("ev", "3"), ("key", "70000 0 0 0 0"), ("rel", "3")],
    );
    // A touchpad's axes with its touch bits in the wrong word.
    b.classify(
        "event6",
        &[("ev", "b"), ("key", "0 e520 0 0 0 0"), ("abs", "3")],
    );
    // A word wider than the kernel's, an absurdly long file, a directory for a file.
    b.classify(
        "event7",
        &[("ev", "1ffffffffffffffff"), ("key", "fffffffffffffffe")],
    );
    let long = "f ".repeat(100_000);
    b.classify("event8", &[("ev", "3"), ("key", &long)]);
    std::fs::create_dir_all(b.sys.join("event9/device/capabilities/ev")).unwrap();
    // No device directory at all, and names that are not evdev devices.
    std::fs::create_dir_all(b.sys.join("event10")).unwrap();
    b.classify("input3", AT_KEYBOARD);
    b.classify("mouse0", USB_MOUSE);
    b.classify("event", AT_KEYBOARD);
    b.classify("event1x", AT_KEYBOARD);
    std::fs::write(b.sys.join("event11"), "not a directory").unwrap();
    assert_eq!(names(&b.sys), vec![]);
    assert_eq!(names(&b.sys.join("missing")), vec![]);
}

#[test]
fn bitmaps_are_read_highest_word_first() {
    let power = Bitmap::parse("10000000000000 0\n").unwrap();
    let power_bit = if Bitmap::WORD == 64 { 116 } else { 84 };
    assert!(power.has(power_bit));
    assert!(!power.has(power_bit - 1) && !power.has(0) && !power.has(10_000));
    let two = Bitmap::parse("1 0 0").unwrap();
    assert!(two.has(2 * Bitmap::WORD));
    assert!(Bitmap::parse("").is_none());
    assert!(Bitmap::parse("0x10").is_none());
    assert!(Bitmap::parse("-1").is_none());
}

#[test]
fn idle_is_counted_from_the_start_until_input_and_unknown_without_devices() {
    let t0 = DateTime::from_timestamp(1_767_225_600, 0).unwrap();
    let at = |s: i64| t0 + chrono::Duration::seconds(s);
    let last = LastInput::new(t0);
    assert_eq!(last.idle_s(at(90)), None, "no device watched: unknown");
    last.set_devices(1);
    assert_eq!(last.idle_s(at(90)), Some(90));
    assert_eq!(
        last.idle_s(at(-5)),
        Some(0),
        "input after now is no idleness"
    );
    assert!(!last.note_input(at(30)), "within the default 60 s gap");
    assert!(last.note_input(at(90)), "60 s without input");
    assert!(!last.note_input(at(20)), "an older instant changes nothing");
    assert_eq!(last.last_input(), Some(at(90)));
    last.set_wake_gap(Duration::MAX);
    assert!(!last.note_input(DateTime::<Utc>::MAX_UTC));
    assert_eq!(last.idle_s(DateTime::<Utc>::MIN_UTC), Some(0));
    last.set_devices(0);
    assert_eq!(last.last_input(), None);
}

#[tokio::test]
async fn input_is_seen_at_once_and_wakes_only_after_a_gap() {
    let b = bench();
    b.classify("event3", AT_KEYBOARD);
    let mut keyboard = b.plug("event3");
    let last = LastInput::new(Utc::now() - chrono::Duration::seconds(100));
    let (task, mut woken) = b.watch(&last);
    until("the keyboard to be watched", || last.devices() == 1).await;
    let idle = last.idle_s(Utc::now()).unwrap();
    assert!((100..=101).contains(&idle), "idle since the start: {idle}");
    assert!(
        woken.try_recv().is_err(),
        "a device found at start is not input"
    );

    let sent = Utc::now();
    send(&mut keyboard, &key_a_press());
    until("the record to be read", || last.reads() == 1).await;
    let seen = last.last_input().unwrap();
    let latency = (seen - sent).num_milliseconds();
    assert!(
        (0..200).contains(&latency),
        "seen {latency} ms after it was sent"
    );
    assert_eq!(last.idle_s(Utc::now()), Some(0));
    assert!(woken.try_recv().is_ok(), "100 s without input: wake");
    // `until` returns only after the watcher's synchronous read-record-wake step: a wake for
    // this record would already be on the channel.
    send(&mut keyboard, &key_a_press());
    until("the second record to be read", || last.reads() == 2).await;
    assert!(
        woken.try_recv().is_err(),
        "about a second after the last: no wake"
    );
    assert!(last.last_input().unwrap() > seen);

    last.set_wake_gap(Duration::from_millis(500));
    send(&mut keyboard, &key_a_press());
    until("the third record to be read", || last.reads() == 3).await;
    assert!(
        woken.try_recv().is_ok(),
        "a second's rest is past a 500 ms gap"
    );
    assert!(!task.is_finished());
    task.abort();
}

#[tokio::test]
async fn records_are_never_parsed_so_garbage_is_input_too() {
    let b = bench();
    b.classify("event5", USB_MOUSE);
    let mut mouse = b.plug("event5");
    let last = LastInput::new(Utc::now());
    let (task, _woken) = b.watch(&last);
    until("the mouse to be watched", || last.devices() == 1).await;
    // Neither a valid type, code nor time: only arriving counts.
    send(&mut mouse, &[0xff; RECORD]);
    until("the garbage record to be read", || last.reads() == 1).await;
    send(&mut mouse, &[0u8; RECORD]);
    until("the zero record to be read", || last.reads() == 2).await;
    assert_eq!(last.idle_s(Utc::now()), Some(0));
    task.abort();
}

/// What this thread has spent: CPU time, and how often it blocked and was woken again (each
/// time the runtime waited in epoll and something woke it).
fn thread_usage() -> (Duration, i64) {
    use nix::sys::resource::{UsageWho, getrusage};
    use nix::sys::time::TimeValLike;
    let usage = getrusage(UsageWho::RUSAGE_THREAD).unwrap();
    let us = usage.user_time().num_microseconds() + usage.system_time().num_microseconds();
    let cpu = Duration::from_micros(u64::try_from(us).unwrap_or(0));
    (cpu, usage.voluntary_context_switches())
}

#[tokio::test]
async fn a_thousand_hertz_mouse_costs_about_one_wake_up_a_second() {
    let b = bench();
    b.classify("event5", USB_MOUSE);
    let mut mouse = b.plug("event5");
    let last = LastInput::new(Utc::now());
    let (task, _woken) = b.watch(&last);
    until("the mouse to be watched", || last.devices() == 1).await;
    // Meanwhile this thread runs the watcher alone (the test waits on the writer's thread).
    let (cpu_before, wakes_before) = thread_usage();
    let started = Instant::now();
    let writer = tokio::task::spawn_blocking(move || {
        let record = key_a_press();
        let mut sent = 0u32;
        while started.elapsed() < Duration::from_secs(3) {
            // A full FIFO would mean the watcher stopped reading; the count below tells.
            if mouse.write_all(&record).is_ok() {
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        (sent, mouse)
    });
    let (sent, _mouse) = writer.await.unwrap();
    let (cpu_after, wakes_after) = thread_usage();
    let (reads, wakes) = (last.reads(), wakes_after - wakes_before);
    let cpu = cpu_after - cpu_before;
    eprintln!("{sent} records in 3 s: {reads} reads, {wakes} wake-ups, {cpu:?} CPU");
    assert!(sent > 1000, "the writer kept up: {sent}");
    assert!((2..=5).contains(&reads), "{reads} reads for {sent} records");
    // Per read: the record's wake, the rest's timer, the writer's end; never one per record.
    assert!(wakes < 30, "{wakes} wake-ups for {sent} records");
    task.abort();
}

#[tokio::test]
async fn devices_plugged_in_later_are_watched_and_removed_ones_dropped() {
    let b = bench();
    for (name, caps) in [
        ("event3", AT_KEYBOARD),
        ("event7", USB_MOUSE),
        ("event8", SYNAPTICS_TOUCHPAD),
    ] {
        b.classify(name, caps);
    }
    let _keyboard = b.plug("event3");
    let last = LastInput::new(Utc::now() - chrono::Duration::seconds(100));
    let (task, mut woken) = b.watch(&last);
    until("the keyboard to be watched", || last.devices() == 1).await;

    let mut mouse = b.plug("event7");
    until("the plugged mouse to be watched", || last.devices() == 2).await;
    assert_eq!(last.idle_s(Utc::now()), Some(0), "plugging in is input");
    assert!(woken.try_recv().is_ok());
    send(&mut mouse, &key_a_press());
    until("the mouse's record to be read", || last.reads() == 1).await;

    std::fs::remove_file(b.dev.join("event7")).unwrap();
    until("the removed mouse to be dropped", || last.devices() == 1).await;
    std::fs::remove_file(b.dev.join("event3")).unwrap();
    until("the keyboard to be dropped", || last.devices() == 0).await;
    assert_eq!(last.idle_s(Utc::now()), None, "no device left: unknown");

    let _touchpad = b.plug("event8");
    until("the touchpad to be watched", || last.devices() == 1).await;
    assert!(!task.is_finished());
    task.abort();
}

#[tokio::test]
async fn a_device_that_ends_is_dropped() {
    let b = bench();
    b.classify("event3", AT_KEYBOARD);
    b.classify("event5", USB_MOUSE);
    let keyboard = b.plug("event3");
    let _mouse = b.plug("event5");
    let last = LastInput::new(Utc::now());
    let (task, _woken) = b.watch(&last);
    until("both devices to be watched", || last.devices() == 2).await;
    // The last writer gone, the FIFO ends: a read of 0 bytes, as a device that went away.
    drop(keyboard);
    until("the ended keyboard to be dropped", || last.devices() == 1).await;
    assert_eq!(last.reads(), 0, "an end is not input");
    task.abort();
}

#[tokio::test]
async fn only_devices_that_count_are_opened() {
    let b = bench();
    b.classify("event0", POWER_BUTTON);
    b.classify("event1", LID_SWITCH);
    b.classify("event3", AT_KEYBOARD);
    b.classify("event9", AT_KEYBOARD);
    let mut power = b.plug("event0");
    let _lid = b.plug("event1");
    let _unknown = b.plug("event2"); // nothing in sysfs
    let _keyboard = b.plug("event3");
    let _mice = b.plug("mice");
    // A regular file cannot be polled: skipped, not fatal.
    std::fs::write(b.dev.join("event9"), key_a_press()).unwrap();
    send(&mut power, &key_a_press());
    let last = LastInput::new(Utc::now());
    let (task, _woken) = b.watch(&last);
    // The first look opens everything it will open before the watcher first yields.
    until("the keyboard to be watched", || last.devices() > 0).await;
    assert_eq!(last.devices(), 1);
    // The power button's record is still in its FIFO: nobody read it.
    let mut left = [0u8; 64];
    assert_eq!(power.read(&mut left).unwrap(), RECORD);
    task.abort();
}

#[tokio::test]
async fn the_watch_ends_when_wake_says_so() {
    let b = bench();
    b.classify("event3", AT_KEYBOARD);
    let mut keyboard = b.plug("event3");
    let last = LastInput::new(Utc::now() - chrono::Duration::seconds(100));
    let task = tokio::spawn(watch(b.dev.clone(), b.sys.clone(), last.clone(), || false));
    until("the keyboard to be watched", || last.devices() == 1).await;
    send(&mut keyboard, &key_a_press());
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the watch returns once wake says stop")
        .unwrap();
}

/// Takes the first back-off delay (5 s) of real time: tokio's paused clock is not built here.
#[tokio::test]
async fn a_missing_input_directory_is_looked_for_again() {
    let b = bench();
    let dev = b.dev.join("input");
    b.classify("event3", AT_KEYBOARD);
    let last = LastInput::new(Utc::now());
    let task = tokio::spawn(watch(dev.clone(), b.sys.clone(), last.clone(), || true));
    // The watcher's first look runs now (one thread): no directory, a back-off begins.
    tokio::task::yield_now().await;
    assert_eq!(last.idle_s(Utc::now()), None);
    std::fs::create_dir(&dev).unwrap();
    nix::unistd::mkfifo(&dev.join("event3"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let created = Instant::now();
    let deadline = created + LOOK_AGAIN.first + Duration::from_secs(5);
    while last.devices() == 0 {
        assert!(
            Instant::now() < deadline,
            "the new directory was never looked at"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = created.elapsed();
    assert!(
        after >= LOOK_AGAIN.first - Duration::from_millis(100),
        "{after:?}"
    );
    assert!(last.idle_s(Utc::now()).is_some());
    task.abort();
}
