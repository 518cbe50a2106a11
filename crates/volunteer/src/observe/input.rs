//! Probe: when this machine last had keyboard, mouse or touch input, read from the kernel's
//! input devices (`/dev/input/eventN`). Desktops that never set logind's `IdleHint` (KDE,
//! most Wayland compositors) leave `logind` blind to a graphical session's idleness; the
//! kernel sees every key press and pointer move whatever the desktop does.
//!
//! **Privacy.** Only the time at which input arrives is kept. Records are read whole into a
//! scratch buffer that nothing examines: their type, code and value (which key, where the
//! pointer went) are never parsed, stored or logged, and the buffer is overwritten by the next
//! read. Devices are opened read-only and never grabbed (`EVIOCGRAB`) or written to, so the
//! desktop receives every event exactly as before; a device another program grabs (a key
//! remapper) reads as silent here, and its virtual device, which is watched like any other,
//! carries the input instead.
//!
//! Which devices count (`discover`, after udev's `input_id`): keyboards with the letter keys,
//! mice (relative X/Y and a left button, or absolute X/Y and a left button as virtual
//! machines' tablets report), touchpads, touchscreens and tablets (absolute X/Y with a touch,
//! finger or pen tool). Power and sleep buttons, lid and jack switches, accelerometers and the
//! "Video Bus" brightness keys fire without a person at the keyboard and never count.
//!
//! Cost. The daemon's runtime has one thread and must stay near idle: after a device yields
//! input it is drained and then left alone for `REST` (the kernel keeps queuing meanwhile and
//! drops the oldest with `SYN_DROPPED`, which costs nothing here), so a 1000 Hz mouse wakes the
//! watcher about once a second, not a thousand times. A device at rest is waited on, so the
//! first input after a quiet spell is seen at once: that is the owner coming back.
//!
//! Devices come and go (USB, Bluetooth): `dev_dir` is watched with inotify, and a device the
//! kernel removed reads `ENODEV` and is dropped. A device that appears after the first look
//! counts as input: someone plugged it in or touched it awake. No `dev_dir` (a server, a
//! container) means no answer (`idle_s` is `None`) and another look after a slow back-off.

use crate::observe::inotify::{DirWatch, InotifyError};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use futures_util::future::{AbortHandle, Abortable};
use futures_util::stream::FuturesUnordered;
use nix::sys::inotify::{AddWatchFlags, InotifyEvent};
use pilotd_core::backoff::Backoff;
use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Input after at least this long without any wakes the daemon, unless set otherwise.
pub(crate) const DEFAULT_WAKE_GAP: Duration = Duration::from_secs(60);
/// How long a device that just yielded input is left alone before it is waited on again.
const REST: Duration = Duration::from_secs(1);
/// How soon a missing or lost `dev_dir` is looked at again: 5 s doubling to 5 min, because a
/// machine without input devices usually stays that way and idle cost matters more there.
const LOOK_AGAIN: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
/// Where inotify is unavailable (exhausted instances), `dev_dir` is listed this often instead.
const RESCAN: Duration = Duration::from_secs(30);
/// One `struct input_event` (24 bytes on 64-bit Linux: timeval, type, code, value).
pub(crate) const RECORD: usize = size_of::<nix::libc::input_event>();
/// Records read per `read(2)`: a device rested for `REST` is drained in a call or two.
const BATCH: usize = 64;

/// The last input, shared between the watcher (`watch`, the only writer) and the daemon's
/// cycle. Atomics only: the cycle never waits on the watcher.
#[derive(Debug)]
pub struct LastInput {
    /// Unix milliseconds of the last input (or of the start, before any).
    last_ms: AtomicI64,
    /// Devices being watched; none means the last input is unknown.
    devices: AtomicUsize,
    wake_gap_ms: AtomicU64,
    /// Times a device was read: the watcher's wake-ups for input, which `REST` bounds.
    reads: AtomicU64,
}

impl LastInput {
    /// `start`: when watching began. Until a first event, the last input counts as `start`
    /// (fail toward the owner: just started means maybe just used).
    pub(crate) fn new(start: DateTime<Utc>) -> Arc<LastInput> {
        Arc::new(LastInput {
            last_ms: AtomicI64::new(start.timestamp_millis()),
            devices: AtomicUsize::new(0),
            wake_gap_ms: AtomicU64::new(millis(DEFAULT_WAKE_GAP)),
            reads: AtomicU64::new(0),
        })
    }

    /// Seconds since the last input at `now` (0 if it arrived after `now`); `None` while no
    /// input device can be read (no `dev_dir`, not root, none of the right kind).
    pub(crate) fn idle_s(&self, now: DateTime<Utc>) -> Option<u64> {
        let last = self.last_known_ms()?;
        let idle_ms = now.timestamp_millis().saturating_sub(last);
        Some(u64::try_from(idle_ms).unwrap_or(0) / 1000)
    }

    #[cfg(test)]
    /// When the last input arrived; `None` while no input device can be read.
    pub(crate) fn last_input(&self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_millis(self.last_known_ms()?)
    }

    /// How many input devices are being watched.
    pub(crate) fn devices(&self) -> usize {
        self.devices.load(Ordering::Acquire)
    }

    /// How many times a device has been read since the start: the watcher's wake-ups for
    /// input (at most about one a second per device, whatever its event rate).
    #[cfg(test)]
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Input arriving after at least this long without input calls the watcher's wake
    /// (settable on reload).
    pub(crate) fn set_wake_gap(&self, gap: Duration) {
        self.wake_gap_ms.store(millis(gap), Ordering::Relaxed);
    }

    fn last_known_ms(&self) -> Option<i64> {
        (self.devices() > 0).then(|| self.last_ms.load(Ordering::Acquire))
    }

    /// Input arrived `at`: is it the first after at least the wake gap?
    fn note_input(&self, at: DateTime<Utc>) -> bool {
        let at = at.timestamp_millis();
        let before = self.last_ms.fetch_max(at, Ordering::AcqRel);
        let gap = i64::try_from(self.wake_gap_ms.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        at.saturating_sub(before) >= gap
    }

    fn set_devices(&self, n: usize) {
        self.devices.store(n, Ordering::Release);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What kind of input device an `eventN` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Keyboard,
    /// Relative or absolute pointer with a left button.
    Mouse,
    /// Touchpad, touchscreen or drawing tablet.
    Touch,
}

#[cfg(test)]
/// One input device that counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// `eventN`: the name under both `sys_dir` and `dev_dir`.
    pub name: String,
    pub kind: Kind,
}

#[cfg(test)]
/// Which `eventN` devices under `sys_dir` (normally /sys/class/input) are keyboards, mice or
/// touch devices, in the kernel's numbering order. Anything unreadable is left out.
pub(crate) fn discover(sys_dir: &Path) -> Vec<Device> {
    let Ok(entries) = std::fs::read_dir(sys_dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, Device)> = entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let number = event_number(&name)?;
            let kind = classify(sys_dir, &name)?;
            Some((number, Device { name, kind }))
        })
        .collect();
    found.sort_by_key(|(n, _)| *n);
    found.into_iter().map(|(_, d)| d).collect()
}

/// `N` of a name `eventN`; other names under /dev/input (`mice`, `js0`, `by-id`) are not
/// evdev devices of their own.
fn event_number(name: &str) -> Option<u32> {
    crate::observe::media::digits(name.strip_prefix("event")?.as_bytes())
}

// Event types and codes (linux/input-event-codes.h).
const EV_KEY: usize = 0x01;
const EV_REL: usize = 0x02;
const EV_ABS: usize = 0x03;
const REL_X: usize = 0x00;
const REL_Y: usize = 0x01;
const ABS_X: usize = 0x00;
const ABS_Y: usize = 0x01;
const BTN_LEFT: usize = 0x110;
const BTN_TOOL_PEN: usize = 0x140;
const BTN_TOOL_FINGER: usize = 0x145;
const BTN_TOUCH: usize = 0x14a;
const BTN_STYLUS: usize = 0x14b;

/// The kind of `sys_dir/name`, from `device/capabilities/{ev,key,rel,abs}`; `None` for a
/// device that does not count or whose capabilities cannot be read.
fn classify(sys_dir: &Path, name: &str) -> Option<Kind> {
    let caps = sys_dir.join(name).join("device/capabilities");
    let ev = Bitmap::read(&caps.join("ev"))?;
    // A type the device does not report, or a bitmap that cannot be read, is no capability:
    // a damaged file can only make a device count less.
    let read = |ev_type: usize, file: &str| match ev.has(ev_type) {
        true => Bitmap::read(&caps.join(file)).unwrap_or_default(),
        false => Bitmap::default(),
    };
    let key = read(EV_KEY, "key");
    let rel = read(EV_REL, "rel");
    let abs = read(EV_ABS, "abs");
    // udev's test: ESC, the digits and Q..S, codes 1 to 31, all present.
    if (1..=31).all(|code| key.has(code)) {
        return Some(Kind::Keyboard);
    }
    let abs_xy = abs.has(ABS_X) && abs.has(ABS_Y);
    if abs_xy
        && [BTN_TOUCH, BTN_TOOL_FINGER, BTN_TOOL_PEN, BTN_STYLUS]
            .iter()
            .any(|&b| key.has(b))
    {
        return Some(Kind::Touch);
    }
    if key.has(BTN_LEFT) && ((rel.has(REL_X) && rel.has(REL_Y)) || abs_xy) {
        return Some(Kind::Mouse);
    }
    None
}

/// A capability bitmap as sysfs prints it: hexadecimal `unsigned long`s separated by spaces,
/// the highest word first (so "10000000000000 0" is bit 116, KEY_POWER, on 64-bit).
#[derive(Debug, Default)]
struct Bitmap(Vec<u64>);

impl Bitmap {
    /// The kernel's word size, which sysfs prints in: the platform's `long`.
    const WORD: usize = nix::libc::c_ulong::BITS as usize;

    fn read(path: &Path) -> Option<Bitmap> {
        // Sysfs attributes are a page at most; a bigger file is not one.
        let mut text = String::new();
        File::open(path)
            .ok()?
            .take(4096)
            .read_to_string(&mut text)
            .ok()?;
        Bitmap::parse(&text)
    }

    fn parse(text: &str) -> Option<Bitmap> {
        let mut words = text
            .split_ascii_whitespace()
            .map(|w| u64::from_str_radix(w, 16).ok())
            .collect::<Option<Vec<u64>>>()?;
        // On a 32-bit kernel a word wider than 32 bits is not something sysfs prints.
        let too_wide = |w: u64| w.checked_shr(Self::WORD as u32).unwrap_or(0) != 0;
        if words.is_empty() || words.iter().any(|&w| too_wide(w)) {
            return None;
        }
        words.reverse();
        Some(Bitmap(words))
    }

    fn has(&self, bit: usize) -> bool {
        self.0
            .get(bit / Self::WORD)
            .is_some_and(|w| (w >> (bit % Self::WORD)) & 1 == 1)
    }
}

/// Why `dev_dir` cannot be watched right now (another look follows after a back-off).
#[derive(Debug, thiserror::Error)]
enum WatchError {
    #[error("{} is not a directory", dir.display())]
    Missing { dir: PathBuf },
    #[error("listing {}: {source}", dir.display())]
    List { dir: PathBuf, source: io::Error },
    #[error("{} was removed or moved", dir.display())]
    Gone { dir: PathBuf },
    #[error("reading inotify events for {}: {source}", dir.display())]
    Events { dir: PathBuf, source: io::Error },
}

/// The watcher asked to stop: `wake` returned false.
struct Stop;

/// Watches the devices under `dev_dir` (normally /dev/input) classified by `sys_dir`
/// (normally /sys/class/input), recording input in `last`, until `wake` returns false. `wake`
/// is called once for input arriving after at least the wake gap without any.
pub(crate) async fn watch(
    dev_dir: PathBuf,
    sys_dir: PathBuf,
    last: Arc<LastInput>,
    mut wake: impl FnMut() -> bool,
) {
    let mut watcher = Watcher {
        dev_dir,
        sys_dir,
        last,
        wake: &mut wake,
        first_look: true,
    };
    let mut failures = 0u32;
    loop {
        let (result, watched) = watcher.watch_dir().await;
        watcher.first_look = false;
        watcher.last.set_devices(0);
        let Err(e) = result else { return };
        failures = if watched {
            1
        } else {
            failures.saturating_add(1)
        };
        let wait = LOOK_AGAIN.delay(failures);
        tracing::debug!(
            "no input devices to watch ({e}); looking again in {}s",
            wait.as_secs()
        );
        tokio::time::sleep(wait).await;
    }
}

/// One device's turn: rest if it just yielded input, wait for input, drain it.
type Turn = Pin<Box<dyn Future<Output = (String, Outcome)> + Send>>;

enum Outcome {
    /// Input arrived; the device comes back for its next turn.
    Input(AsyncFd<File>),
    /// End of file (a FIFO's writer left) or an error (`ENODEV`: unplugged).
    Ended(Option<io::Error>),
}

/// A device at the start of its turn.
enum Watched {
    /// Registered with the runtime: input wakes the turn at once.
    Ready(AsyncFd<File>),
    /// Just read. Out of the runtime's epoll set while it rests: a registered device wakes
    /// the thread on every event the kernel queues (evdev wakes its readers at each
    /// SYN_REPORT), read or not, so resting alone would still cost a 1000 Hz mouse a
    /// thousand wake-ups a second.
    Resting(File),
}

struct Watcher<'w, W> {
    dev_dir: PathBuf,
    sys_dir: PathBuf,
    last: Arc<LastInput>,
    wake: &'w mut W,
    /// The devices found by the very first look are not input; any found later are.
    first_look: bool,
}

/// The devices being watched: a handle to cancel each one's pending turn, and the turns.
#[derive(Default)]
struct Open {
    handles: HashMap<String, AbortHandle>,
    turns: FuturesUnordered<Abortable<Turn>>,
}

impl Open {
    fn queue(&mut self, name: String, device: Watched) {
        let (handle, registration) = AbortHandle::new_pair();
        self.handles.insert(name.clone(), handle);
        let turn: Turn = Box::pin(async move {
            let file = match device {
                Watched::Ready(file) => file,
                Watched::Resting(file) => {
                    tokio::time::sleep(REST).await;
                    // Input queued meanwhile makes it readable as soon as it is registered.
                    match register(file) {
                        Ok(file) => file,
                        Err(e) => return (name, Outcome::Ended(Some(e))),
                    }
                }
            };
            let outcome = next_input(file).await;
            (name, outcome)
        });
        self.turns.push(Abortable::new(turn, registration));
    }

    fn drop_device(&mut self, name: &str) -> bool {
        self.handles.remove(name).map(|h| h.abort()).is_some()
    }
}

impl<W: FnMut() -> bool> Watcher<'_, W> {
    /// Watches `dev_dir` until it goes away or `wake` says stop; also says whether the
    /// directory was there to watch at all.
    async fn watch_dir(&mut self) -> (Result<Stop, WatchError>, bool) {
        if !self.dev_dir.is_dir() {
            let dir = self.dev_dir.clone();
            return (Err(WatchError::Missing { dir }), false);
        }
        // The watch is set before the listing so no device slips in between.
        let inotify = self
            .inotify()
            .inspect_err(|e| {
                tracing::warn!(
                    "cannot watch {} with inotify ({e}); listing it every {}s instead",
                    self.dev_dir.display(),
                    RESCAN.as_secs()
                )
            })
            .ok();
        let mut open = Open::default();
        let hotplug = !self.first_look;
        match self.rescan(&mut open, hotplug) {
            Ok(false) => {}
            Ok(true) => return (Ok(Stop), true),
            Err(e) => return (Err(e), false),
        }
        (self.serve(inotify.as_ref(), &mut open).await, true)
    }

    async fn serve(
        &mut self,
        inotify: Option<&DirWatch>,
        open: &mut Open,
    ) -> Result<Stop, WatchError> {
        loop {
            tokio::select! {
                events = dir_events(inotify, &self.dev_dir) => {
                    let stop = match events {
                        None => self.rescan(open, true)?,
                        Some(events) => self.on_dir_events(open, events?)?,
                    };
                    if stop {
                        return Ok(Stop);
                    }
                }
                Some(turn) = open.turns.next(), if !open.turns.is_empty() => {
                    // A cancelled turn belongs to a device already dropped.
                    let Ok((name, outcome)) = turn else { continue };
                    match outcome {
                        Outcome::Input(file) => {
                            self.last.reads.fetch_add(1, Ordering::Relaxed);
                            open.queue(name, Watched::Resting(file.into_inner()));
                            if self.input_arrived() {
                                return Ok(Stop);
                            }
                        }
                        Outcome::Ended(error) => {
                            open.handles.remove(&name);
                            self.last.set_devices(open.handles.len());
                            match error {
                                None => tracing::debug!("input device {name} ended"),
                                Some(e) => tracing::debug!("input device {name} dropped: {e}"),
                            }
                        }
                    }
                }
            }
        }
    }

    /// Records input now and wakes the daemon after a gap; true when `wake` says stop.
    fn input_arrived(&mut self) -> bool {
        // Recorded before the wake, so the cycle the wake starts sees it.
        self.last.note_input(Utc::now()) && !(self.wake)()
    }

    fn inotify(&self) -> Result<DirWatch, InotifyError> {
        // IN_ATTRIB: udev sets a new node's group and mode after the kernel created it, and a
        // node that could not be opened yet is tried again then.
        DirWatch::new(
            &self.dev_dir,
            AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_ATTRIB
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_MOVED_FROM
                | AddWatchFlags::IN_DELETE_SELF
                | AddWatchFlags::IN_MOVE_SELF,
        )
    }

    /// Acts on what changed in `dev_dir`; true when `wake` says stop.
    fn on_dir_events(
        &mut self,
        open: &mut Open,
        events: Vec<InotifyEvent>,
    ) -> Result<bool, WatchError> {
        for event in events {
            let mask = event.mask;
            if mask.intersects(
                AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF
                    | AddWatchFlags::IN_IGNORED,
            ) {
                let dir = self.dev_dir.clone();
                return Err(WatchError::Gone { dir });
            }
            if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                if self.rescan(open, true)? {
                    return Ok(true);
                }
                continue;
            }
            let Some(name) = event.name.and_then(|n| n.into_string().ok()) else {
                continue;
            };
            if event_number(&name).is_none() {
                continue;
            }
            if mask.intersects(AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM) {
                if open.drop_device(&name) {
                    self.last.set_devices(open.handles.len());
                    tracing::debug!("input device {name} removed");
                }
            } else if !open.handles.contains_key(&name) && self.add(open, name, true) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Brings the watched devices in line with a listing of `dev_dir`; true when `wake`
    /// says stop.
    fn rescan(&mut self, open: &mut Open, hotplug: bool) -> Result<bool, WatchError> {
        let listing = std::fs::read_dir(&self.dev_dir).map_err(|source| WatchError::List {
            dir: self.dev_dir.clone(),
            source,
        })?;
        let present: Vec<String> = listing
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| event_number(name).is_some())
            .collect();
        let gone: Vec<String> = (open.handles.keys())
            .filter(|name| !present.contains(name))
            .cloned()
            .collect();
        for name in gone {
            open.drop_device(&name);
        }
        self.last.set_devices(open.handles.len());
        for name in present {
            if !open.handles.contains_key(&name) && self.add(open, name, hotplug) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Starts watching `dev_dir/name` if it counts and can be opened; a device plugged in
    /// (`hotplug`) is input. True when `wake` says stop.
    fn add(&mut self, open: &mut Open, name: String, hotplug: bool) -> bool {
        let Some(kind) = classify(&self.sys_dir, &name) else {
            return false;
        };
        let path = self.dev_dir.join(&name);
        let file = match open_device(&path) {
            Ok(file) => file,
            Err(e) => {
                tracing::debug!("cannot open input device {}: {e}", path.display());
                return false;
            }
        };
        tracing::debug!("watching input device {name} ({kind:?})");
        open.queue(name, Watched::Ready(file));
        self.last.set_devices(open.handles.len());
        hotplug && self.input_arrived()
    }
}

/// Opens an input device read-only and non-blocking. Never `EVIOCGRAB`, never a write: the
/// desktop must see every event as if pilotd were not there.
fn open_device(path: &Path) -> io::Result<AsyncFd<File>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path)?;
    register(file)
}

/// Adds `file` to the runtime's epoll set (`AsyncFd::into_inner` takes it out again).
fn register(file: File) -> io::Result<AsyncFd<File>> {
    // SAFETY: the `File` owns its descriptor and lives inside the `AsyncFd`, which never
    // replaces or closes it, so the descriptor stays open and the same for its whole life.
    unsafe { AsyncFd::register_with_interest(file, Interest::READABLE) }.map_err(Into::into)
}

/// What changed in `dev_dir`: `None` when it is time to list it again (no inotify).
async fn dir_events(
    inotify: Option<&DirWatch>,
    dir: &Path,
) -> Option<Result<Vec<InotifyEvent>, WatchError>> {
    let Some(fd) = inotify else {
        tokio::time::sleep(RESCAN).await;
        return None;
    };
    Some(fd.events().await.map_err(|source| WatchError::Events {
        dir: dir.to_path_buf(),
        source,
    }))
}

/// Waits until `file` has input and drains it. The bytes are never looked at (see the module
/// doc): arriving is all that counts.
async fn next_input(file: AsyncFd<File>) -> Outcome {
    loop {
        let mut guard = match file.readable().await {
            Ok(guard) => guard,
            Err(e) => return Outcome::Ended(Some(e)),
        };
        // Hung up (a device gone, a FIFO's writer left): that readiness never clears, so a
        // read that then finds nothing must end the device rather than wait again at once.
        let hung_up = guard.ready().is_read_closed();
        let mut got = false;
        let drained = guard.try_io(|f| drain(f.get_ref(), &mut got));
        // Input that came before an error or the end still came; the next turn sees the end.
        if got {
            drop(guard);
            return Outcome::Input(file);
        }
        match drained {
            Err(_would_block) if hung_up => return Outcome::Ended(None),
            Err(_would_block) => continue,
            Ok(Ok(())) => return Outcome::Ended(None),
            Ok(Err(e)) => return Outcome::Ended(Some(e)),
        }
    }
}

/// Reads `file` until it would block (`Err(WouldBlock)`), ends (`Ok`) or fails, setting `got`
/// if anything was read. Whole records: evdev returns only whole `input_event`s.
fn drain(mut file: &File, got: &mut bool) -> io::Result<()> {
    let mut scratch = [0u8; RECORD * BATCH];
    loop {
        match file.read(&mut scratch) {
            Ok(0) => return Ok(()),
            Ok(_) => *got = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
