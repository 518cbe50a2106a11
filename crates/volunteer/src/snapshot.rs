//! The world as data. `HostSnapshot` is what the volunteer policy decides on; its JSON form is
//! the contract `pilotd snapshot` prints and `pilotd plan --snapshot` reads (`read_file`,
//! which tells it from a kubernetes-mode snapshot by its `mode`). Probes (sysinfo, utmp,
//! sysfs, procfs) live in submodules and hold no decisions.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One observation of a volunteer host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSnapshot {
    /// Always "volunteer" for this kind of snapshot.
    pub mode: String,
    pub taken_at: DateTime<Utc>,
    pub cpus: u32,
    /// 1, 5 and 15 minute load averages.
    pub load: [f64; 3],
    /// Busy fraction of the whole machine (0..1), everything included.
    pub cpu_busy: f64,
    /// Busy fraction of the whole machine used by pilotd's own workers (0..1).
    pub own_cpu: f64,
    pub memory_total_kib: u64,
    pub memory_available_kib: u64,
    pub scratch_free_kib: u64,
    pub on_battery: bool,
    /// Names from the policy's `exclusive_processes` that are running now.
    pub exclusive_running: Vec<String>,
    pub sessions: Sessions,
    /// Latch: since when owner CPU has been above the threshold (null when it is not).
    pub owner_busy_since: Option<DateTime<Utc>>,
    /// Latch: since when the host has been free to start workers (null when it is not).
    pub host_free_since: Option<DateTime<Utc>>,
    /// The owner snoozed the machine until this instant (`pilotd snooze`); absent when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<DateTime<Utc>>,
    /// Why the owner's snooze could not be read, when it could not: counted as snoozed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snooze_unreadable: Option<String>,
    /// Why systemd-logind could not be asked, when it could not: `sessions` are then utmp's
    /// alone. Absent when logind answered (its sessions are in `sessions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logind_unavailable: Option<String>,
    /// There is no utmp file: `sessions` are logind's alone (Debian 13 and other systems
    /// that dropped utmp). Without logind either, the sessions are unknown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub utmp_absent: bool,
    /// Seconds since the last keyboard, mouse or touchpad event on this machine (the kernel's
    /// input devices); absent when no input device can be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_idle_s: Option<u64>,
    /// The machine is about to sleep (logind's PrepareForSleep): workers make room as if the
    /// owner were back, and nothing starts until a fresh observation after the wake-up.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sleeping: bool,
    /// logind tells *that* a session is locked, not since when: a one-shot look (`pilotd
    /// plan`, `snapshot`) without the running daemon's record of when it first saw each lock
    /// dates every lock to this observation. Such a lock counts as in use for `lock_grace`,
    /// and the decision says the instant is unknown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lock_instants_unknown: bool,
    /// Signs that someone uses the machine without typing (sound, a camera, an idle
    /// inhibitor), each by kind and whose: never which program, what it plays or who is on
    /// the other end. Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_use: Vec<InUse>,
    /// The machine's temperatures and fan speeds (`sensors`); absent where it has none, or
    /// none could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensors: Option<Sensors>,
    /// Latch: where the comfort throttle stood after the last decision (`comfort`); absent
    /// while it never lowered anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Throttle>,
    /// Whether the machine's link is metered, as NetworkManager says (its `Metered`); absent
    /// when NetworkManager could not be asked (not installed, not running, no bus): the link
    /// is then not known to be metered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metered: Option<Metered>,
}

/// One sign that the machine is in use without a key being typed, by kind and whose.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InUse {
    pub kind: UseKind,
    /// The user it is attributed to; absent when it could not be (a sound stream whose
    /// process pilotd cannot see, on a machine with nobody at its seat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Attributed to the user of the seat's active session, for want of a process to
    /// attribute it to.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_seat: bool,
}

/// What kind of use: the only thing said about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UseKind {
    /// A program holds an idle inhibitor in logind (a player, a presentation,
    /// `systemd-inhibit --what=idle`).
    IdleInhibitor,
    /// A sound card plays (ALSA playback stream running): a film, music.
    SoundPlaying,
    /// A sound card records (ALSA capture stream running): a call, a recording.
    SoundRecorded,
    /// A camera (`/dev/video*`) is held open.
    Camera,
}

impl UseKind {
    /// How `plan` and `status` say it: the kind, nothing of what or who else.
    pub(crate) fn said(self) -> &'static str {
        match self {
            UseKind::IdleInhibitor => "an idle inhibitor is held",
            UseKind::SoundPlaying => "sound is playing",
            UseKind::SoundRecorded => "sound is being recorded",
            UseKind::Camera => "the camera is in use",
        }
    }
}

/// The machine's temperature and fan sensors as read once: what the owner's
/// `max_temperature` and `max_fan` are held to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Sensors {
    /// Degrees Celsius, each with its sensor's name ("coretemp Package id 0").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub temperatures: Vec<Reading>,
    /// Revolutions per minute.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fans: Vec<Reading>,
}

/// One sensor's value, in its unit (°C or RPM), with the name the owner finds in `sensors`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    pub sensor: String,
    pub value: f64,
}

impl Sensors {
    /// The hottest temperature read (the first of equals: the chip's package before the
    /// thermal zone that repeats it).
    pub fn hottest(&self) -> Option<&Reading> {
        highest(&self.temperatures)
    }

    /// The fastest fan read.
    pub fn fastest(&self) -> Option<&Reading> {
        highest(&self.fans)
    }
}

fn highest(readings: &[Reading]) -> Option<&Reading> {
    readings.iter().fold(None, |best, r| match best {
        Some(b) if b.value >= r.value => Some(b),
        _ => Some(r),
    })
}

/// Where the comfort throttle stands: how many steps the workers' CPU quota is down, whether
/// they are paused at the lowest, and the instants its hysteresis counts from. Carried from
/// one decision to the next like the other latches, so a replayed snapshot decides alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throttle {
    /// 0: the whole share; each step lowers the quota (`comfort::STEPS`).
    pub step: u8,
    /// Paused at the lowest step, still over a limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The last change of step or pause.
    pub changed_at: DateTime<Utc>,
    /// Since when the machine has been cool (below the limits by their margins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cool_since: Option<DateTime<Utc>>,
}

/// NetworkManager's word on the primary connection's price (its `NMMetered`): set per
/// connection by the owner, or guessed (a phone's hotspot announces itself metered). A value
/// of a newer NetworkManager that pilotd does not know reads as `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metered {
    Unknown,
    Yes,
    No,
    GuessYes,
    GuessNo,
}

impl Metered {
    /// NetworkManager's number for it (`NM_METERED_*`: 0 unknown, 1 yes, 2 no, 3 guess-yes,
    /// 4 guess-no).
    pub fn from_nm(n: u32) -> Metered {
        match n {
            1 => Metered::Yes,
            2 => Metered::No,
            3 => Metered::GuessYes,
            4 => Metered::GuessNo,
            _ => Metered::Unknown,
        }
    }

    /// Traffic costs the owner: said so, or guessed so (NetworkManager's own advice is to
    /// treat a guessed yes as a yes, and everything else as not metered).
    pub fn is_metered(self) -> bool {
        matches!(self, Metered::Yes | Metered::GuessYes)
    }
}

impl HostSnapshot {
    /// A machine of this size at `taken_at`, quiet: nobody there, nothing running, nothing
    /// known of it but its size. What a projection decides on (the timeline keeps no link: a
    /// projection is of the week's hours, not its networks), and what an observation starts
    /// from.
    pub(crate) fn quiet(
        taken_at: DateTime<Utc>,
        cpus: u32,
        memory_total_kib: u64,
        scratch_free_kib: u64,
    ) -> HostSnapshot {
        HostSnapshot {
            mode: "volunteer".into(),
            taken_at,
            cpus,
            load: [0.0; 3],
            cpu_busy: 0.0,
            own_cpu: 0.0,
            memory_total_kib,
            memory_available_kib: memory_total_kib,
            scratch_free_kib,
            on_battery: false,
            exclusive_running: Vec::new(),
            sessions: Sessions::Known(Vec::new()),
            owner_busy_since: None,
            host_free_since: None,
            snoozed_until: None,
            snooze_unreadable: None,
            logind_unavailable: None,
            utmp_absent: false,
            input_idle_s: None,
            sleeping: false,
            lock_instants_unknown: false,
            in_use: Vec::new(),
            sensors: None,
            throttle: None,
            metered: None,
        }
    }
}

/// Who is logged in. `Unknown` is never read as "nobody": the policy fails safe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sessions {
    Known(Vec<Session>),
    Unknown(String),
}

/// One login session (a utmp USER_PROCESS record whose process is alive).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub user: String,
    /// None when the user name does not resolve on this host.
    pub uid: Option<u32>,
    /// tty line, e.g. "pts/0" or ":0".
    pub line: String,
    pub host: String,
    pub login: DateTime<Utc>,
    /// Seconds since the tty was last used (its atime), or since logind's IdleSinceHint;
    /// None when neither can tell (a graphical login in utmp).
    pub idle_s: Option<u64>,
    /// At this machine's own keyboard and screen (a local console or a graphical session),
    /// not a remote login: only such a session is judged by the machine's input devices.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local: bool,
    /// Since when pilotd has seen the session locked (logind's LockedHint, set by the screen
    /// locker); absent when it is not locked, or when the source cannot tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_since: Option<DateTime<Utc>>,
    /// The session's desktop tells logind when it is idle (it has set `IdleHint` at least
    /// once: GNOME does, KDE never): its "not idle" is believed over a quiet keyboard and
    /// mouse, since it knows of a film or a call that keeps it awake.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle_reported: bool,
}

impl HostSnapshot {
    /// Owner CPU: everything except pilotd's own workers (NonCondorLoadAvg, in BOINC and
    /// HTCondor terms), never negative.
    pub(crate) fn owner_cpu(&self) -> f64 {
        (self.cpu_busy - self.own_cpu).max(0.0)
    }
}

/// Why a snapshot file cannot be replayed; each says which file, and how to get a good one.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    #[error("cannot read {}: {source}\n  hint: write one with `pilotd snapshot > FILE`", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{}:{}: {source}\n  hint: the format is what `pilotd snapshot` prints (README.md, \"Snapshot files\")", path.display(), source.line(), source.column())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: `mode` is {}, expected \"volunteer\" or \"kubernetes\"", path.display(), mode.as_ref().map(|m| format!("\"{m}\"")).unwrap_or_else(|| "missing".into()))]
    Mode { path: PathBuf, mode: Option<String> },
}

/// A snapshot file: the mode field says which kind. A cluster snapshot (possibly 100,000
/// jobs) is kept as bytes, for kubernetes mode's replay to parse once; this crate never reads
/// it.
pub enum SnapshotFile {
    /// Boxed: a host snapshot is ten times a cluster snapshot's bytes.
    Host(Box<HostSnapshot>),
    Cluster(Vec<u8>),
}

/// Only the `mode` of a snapshot; serde skips everything else without building it.
#[derive(Deserialize)]
struct ModeOnly {
    mode: Option<String>,
}

/// The `mode` of a snapshot whose first key it is, as `pilotd snapshot` writes it, read
/// without a pass over the rest (tens of MB for a cluster). Anything else (another key
/// first, an escaped value) is `None`, and the caller reads the whole file for it; a second
/// `mode` further on is still refused, by the full parse that follows.
fn leading_mode(src: &[u8]) -> Option<&str> {
    let ws = |b: &&u8| b.is_ascii_whitespace();
    let mut rest = src;
    for token in [&b"{"[..], b"\"mode\"", b":", b"\""] {
        let skip = rest.iter().take_while(ws).count();
        rest = rest[skip..].strip_prefix(token)?;
    }
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"')
        .then(|| std::str::from_utf8(&rest[..end]).ok())
        .flatten()
}

/// Reads a snapshot file (`plan --snapshot`); errors name the file, line and column.
pub fn read_file(path: &Path) -> Result<SnapshotFile, SnapshotFileError> {
    // Bytes, not a String: a kubernetes snapshot is tens of MB, and serde_json checks the
    // UTF-8 of the strings it keeps without a separate pass over the file.
    let src = std::fs::read(path).map_err(|source| SnapshotFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let located = |source| SnapshotFileError::Parse {
        path: path.to_path_buf(),
        source,
    };
    let mode = match leading_mode(&src) {
        Some(m) => Some(m.to_string()),
        None => {
            serde_json::from_slice::<ModeOnly>(&src)
                .map_err(located)?
                .mode
        }
    };
    match mode.as_deref() {
        Some("volunteer") => serde_json::from_slice::<HostSnapshot>(&src)
            .map(|h| SnapshotFile::Host(Box::new(h)))
            .map_err(located),
        Some("kubernetes") => Ok(SnapshotFile::Cluster(src)),
        _ => Err(SnapshotFileError::Mode {
            path: path.to_path_buf(),
            mode,
        }),
    }
}

#[cfg(test)]
impl HostSnapshot {
    /// A quiet 8-CPU, 16 GiB host with nobody logged in, as a test fixture.
    pub(crate) fn test(taken_at: DateTime<Utc>) -> HostSnapshot {
        HostSnapshot {
            load: [0.1, 0.1, 0.1],
            cpu_busy: 0.02,
            memory_available_kib: 12 << 20,
            ..HostSnapshot::quiet(taken_at, 8, 16 << 20, 200 << 20)
        }
    }

    pub(crate) fn with_snooze(mut self, until: Option<DateTime<Utc>>) -> Self {
        self.snoozed_until = until;
        self
    }

    pub(crate) fn with_session(mut self, user: &str, uid: u32, idle_s: Option<u64>) -> Self {
        let s = Session {
            user: user.into(),
            uid: Some(uid),
            line: "pts/0".into(),
            host: String::new(),
            login: self.taken_at - chrono::Duration::hours(1),
            idle_s,
            local: false,
            locked_since: None,
            idle_reported: false,
        };
        match &mut self.sessions {
            Sessions::Known(v) => v.push(s),
            Sessions::Unknown(_) => self.sessions = Sessions::Known(vec![s]),
        }
        self
    }

    /// A session at this machine's own desk (graphical, from logind), locked since `locked`.
    pub(crate) fn with_desk_session(
        mut self,
        user: &str,
        uid: u32,
        idle_s: Option<u64>,
        locked: Option<DateTime<Utc>>,
    ) -> Self {
        self = self.with_session(user, uid, idle_s);
        if let Sessions::Known(v) = &mut self.sessions
            && let Some(s) = v.last_mut()
        {
            s.line = "logind session 2".into();
            s.local = true;
            s.locked_since = locked;
        }
        self
    }

    /// The last session added, its desktop reporting idleness to logind (GNOME).
    pub(crate) fn idle_reported(mut self) -> Self {
        if let Sessions::Known(v) = &mut self.sessions
            && let Some(s) = v.last_mut()
        {
            s.idle_reported = true;
        }
        self
    }

    /// `kind` in use, attributed to `user` (None: to nobody).
    pub(crate) fn with_use(mut self, kind: UseKind, user: Option<(&str, u32)>) -> Self {
        self.in_use.push(InUse {
            kind,
            user: user.map(|(u, _)| u.to_string()),
            uid: user.map(|(_, uid)| uid),
            by_seat: false,
        });
        self
    }

    pub(crate) fn with_input_idle(mut self, s: Option<u64>) -> Self {
        self.input_idle_s = s;
        self
    }

    pub(crate) fn with_sessions_unknown(mut self, why: &str) -> Self {
        self.sessions = Sessions::Unknown(why.into());
        self
    }

    pub(crate) fn with_cpu(mut self, busy: f64, own: f64) -> Self {
        self.cpu_busy = busy;
        self.own_cpu = own;
        self
    }

    pub(crate) fn with_battery(mut self, on: bool) -> Self {
        self.on_battery = on;
        self
    }

    pub(crate) fn with_free_since(mut self, t: Option<DateTime<Utc>>) -> Self {
        self.host_free_since = t;
        self
    }

    pub(crate) fn with_metered(mut self, m: Option<Metered>) -> Self {
        self.metered = m;
        self
    }

    pub(crate) fn with_busy_since(mut self, t: Option<DateTime<Utc>>) -> Self {
        self.owner_busy_since = t;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leading_mode_is_read_only_when_it_is_unambiguous() {
        let table: [(&str, Option<&str>); 8] = [
            (r#"{"mode":"kubernetes","jobs":[]}"#, Some("kubernetes")),
            ("{\n  \"mode\" : \"volunteer\",\n", Some("volunteer")),
            (r#"{"mode":"other"}"#, Some("other")),
            // Anything else is left to the full parse.
            (r#"{"taken_at":"x","mode":"kubernetes"}"#, None),
            (r#"{"mode":"kube\u0072netes"}"#, None),
            (r#"{"mode":null}"#, None),
            (r#"{"mode":"kubernetes"#, None),
            ("", None),
        ];
        for (src, want) in table {
            assert_eq!(leading_mode(src.as_bytes()), want, "{src}");
        }
    }
}
