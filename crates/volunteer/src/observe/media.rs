//! Probe: sound playing or recorded, and cameras in use — the owner watching a film, listening
//! to music or in a call, none of which types a key. By kind and whose only: nothing here
//! reads what is played, recorded or filmed, nor which program does it.
//!
//! - **Sound**: ALSA's procfs tree says of each PCM substream whether it moves data. Its
//!   `card<C>/pcm<D><p|c>/sub<S>/status` reads `closed` while nobody has it open, and while
//!   open starts with `state: <STATE>` (the kernel's `snd_pcm_substream_proc_status_read`,
//!   sound/core/pcm.c; the files are described in Documentation/sound/designs/procfile.rst).
//!   `RUNNING` is a stream under way: `p` playback (a film, music), `c` capture (a call, a
//!   recording). A sound server (PipeWire, PulseAudio) closes the device a few seconds after
//!   its last stream ends, so a running substream is sound now, not a player left open.
//! - **Whose**: the processes that hold the stream's device node `/dev/snd/pcmC<C>D<D><p|c>`
//!   open (`/proc/PID/fd` links, read by the one walk over /proc of `host::walk_processes`),
//!   by their uid: on a desktop that is the user's own sound server. Another user's links
//!   need CAP_SYS_PTRACE (the kernel's ptrace read check); without them (`pilotd plan` as a
//!   user) the stream is its opener's (`owner_pid` in the status, whose `status` anyone may
//!   read), and with neither it is attributed later to the seat's active session
//!   (`logind::lay_on`).
//! - **Cameras**: a process holding a `/dev/video<N>` open, by its uid.
//!
//! Observation only: the policy decides whether a user counts and what a lock means. The
//! procfs and ALSA roots are parameters, so tests build both in a temp dir.

use crate::snapshot::{InUse, UseKind};
use std::path::Path;

/// A device node whose being held open says the machine is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Device {
    /// `/dev/snd/pcmC<card>D<device><p|c>`: one PCM device of a sound card, one direction.
    Pcm {
        card: u32,
        device: u32,
        capture: bool,
    },
    /// `/dev/video<N>`: a camera (or another video capture device).
    Video,
}

impl Device {
    /// The device a `/proc/PID/fd/N` link names, when it is one of these. The link is the
    /// node's path as the process opened it, which for device nodes is `/dev/...` in its own
    /// mount namespace.
    pub(crate) fn of_link(link: &[u8]) -> Option<Device> {
        if let Some(n) = link.strip_prefix(b"/dev/video") {
            return digits(n).map(|_| Device::Video);
        }
        let rest = link.strip_prefix(b"/dev/snd/pcmC")?;
        let d = rest.iter().position(|&b| b == b'D')?;
        let (device, capture) = device_side(&rest[d + 1..])?;
        Some(Device::Pcm {
            card: digits(&rest[..d])?,
            device,
            capture,
        })
    }
}

/// A number written in ASCII digits only (no sign, no space), as device names carry them.
pub(crate) fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// One PCM stream under way: which card and device, which direction, and the process that
/// opened it (`owner_pid` in its status, in pilotd's pid namespace), when the kernel says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stream {
    pub card: u32,
    pub device: u32,
    pub capture: bool,
    pub opener: Option<u32>,
}

/// The PCM streams running now, from ALSA's procfs tree at `asound` (normally /proc/asound),
/// once each, sorted. No sound card (no tree, or no `card<N>`), nothing running. The tree is
/// a few small files per card; `id` links (`PCH -> card0`) are not followed twice, only
/// `card<N>` directories are read.
pub(crate) fn streams(asound: &Path) -> Vec<Stream> {
    let mut out = Vec::new();
    for card in numbered(asound, "card") {
        let card_dir = asound.join(format!("card{card}"));
        let Ok(pcms) = std::fs::read_dir(&card_dir) else {
            continue;
        };
        for pcm in pcms.flatten() {
            let name = pcm.file_name();
            let Some((device, capture)) = name
                .as_encoded_bytes()
                .strip_prefix(b"pcm")
                .and_then(device_side)
            else {
                continue;
            };
            for sub in numbered(&pcm.path(), "sub") {
                let Ok(status) = std::fs::read(pcm.path().join(format!("sub{sub}/status"))) else {
                    continue;
                };
                if is_running(&status) {
                    out.push(Stream {
                        card,
                        device,
                        capture,
                        opener: opener(&status),
                    });
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The numbers N of the entries named `<prefix>N` in `dir`.
fn numbered(dir: &Path, prefix: &str) -> Vec<u32> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            digits(
                e.file_name()
                    .as_encoded_bytes()
                    .strip_prefix(prefix.as_bytes())?,
            )
        })
        .collect()
}

/// `<D>p` or `<D>c` (after `pcm` in a card's directory, after `D` in a device node): the
/// device number and whether it is the capture side.
fn device_side(name: &[u8]) -> Option<(u32, bool)> {
    let (dir, device) = name.split_last()?;
    let capture = match dir {
        b'p' => false,
        b'c' => true,
        _ => return None,
    };
    Some((digits(device)?, capture))
}

/// A substream's `status` says it is running: its first line is `state: RUNNING` (a closed
/// one reads `closed`, an open one that does not move data `state: PREPARED`, `PAUSED`...).
pub(crate) fn is_running(status: &[u8]) -> bool {
    status
        .split(|&b| b == b'\n')
        .next()
        .and_then(|l| l.strip_prefix(b"state:"))
        .is_some_and(|s| s.trim_ascii() == b"RUNNING")
}

/// The pid a running substream's `status` names as its opener (`owner_pid   : 2315`).
fn opener(status: &[u8]) -> Option<u32> {
    status
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"owner_pid"))
        .and_then(|rest| rest.trim_ascii().strip_prefix(b":"))
        .and_then(|pid| digits(pid.trim_ascii()))
        .filter(|pid| *pid > 0)
}

/// What the running streams and the devices' holders say: each kind of use once per uid,
/// sorted. A stream is its holders' (who has its device open); when none can be seen (their
/// descriptors need a right pilotd may lack), its opener's, by `uid_of_pid`; else it is one
/// use attributed to nobody (yet). `user_of` names a uid (None: a uid without a name, still
/// counted by its number).
pub(crate) fn uses(
    streams: &[Stream],
    holders: &[(u32, Device)],
    uid_of_pid: impl Fn(u32) -> Option<u32>,
    user_of: impl Fn(u32) -> Option<String>,
) -> Vec<InUse> {
    let mut out: Vec<(UseKind, Option<u32>)> = Vec::new();
    for s in streams {
        let kind = if s.capture {
            UseKind::SoundRecorded
        } else {
            UseKind::SoundPlaying
        };
        let node = Device::Pcm {
            card: s.card,
            device: s.device,
            capture: s.capture,
        };
        let before = out.len();
        out.extend(
            holders
                .iter()
                .filter(|(_, d)| *d == node)
                .map(|(uid, _)| (kind, Some(*uid))),
        );
        if out.len() == before {
            out.push((kind, s.opener.and_then(&uid_of_pid)));
        }
    }
    out.extend(
        holders
            .iter()
            .filter(|(_, d)| *d == Device::Video)
            .map(|(uid, _)| (UseKind::Camera, Some(*uid))),
    );
    out.sort_unstable();
    out.dedup();
    out.into_iter()
        .map(|(kind, uid)| InUse {
            kind,
            user: uid.and_then(&user_of),
            uid,
            by_seat: false,
        })
        .collect()
}

/// The real uid of process `pid` under `proc` (the `Uid:` line of its `status`, which anyone
/// may read).
pub(crate) fn uid_of_pid(proc: &Path, pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(proc.join(pid.to_string()).join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether `dev` holds a video device node (`video<N>`): without one no camera can be in use,
/// and the walk need not read any process's descriptors for one.
pub(crate) fn has_video(dev: &Path) -> bool {
    !numbered(dev, "video").is_empty()
}

/// A uid's user name from the user database; None when it has none (or NSS fails).
pub(crate) fn user_of(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

#[cfg(test)]
mod tests;
