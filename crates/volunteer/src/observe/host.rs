//! Host probes for volunteer mode: CPU, load, memory, scratch space, battery and exclusive
//! processes, plus the session probe. One long-lived sysinfo `System`, because CPU usage is
//! the difference between two refreshes.

use crate::observe::media;
use crate::observe::sensors::{self, SensorProbe};
use crate::observe::sessions;
use crate::settings::ProbeSettings;
use crate::snapshot::{HostSnapshot, InUse, Throttle};
use chrono::{DateTime, Utc};
use pilotd_core::config::Machine;
use std::path::{Path, PathBuf};
use std::time::Duration;
use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot observe this host's CPU and memory: {0}")]
    System(String),
    #[error("cannot read free space of the scratch directory {}: {source}\n  hint: create it or set [host] scratch in pilotd.toml", path.display())]
    Scratch { path: PathBuf, source: nix::Error },
}

pub struct HostProbe {
    system: System,
    cfg: ProbeSettings,
    /// Sound and cameras in use as last looked at (`observe` looks again only with a fresh
    /// CPU reading: not in an urgent cycle, which must not wait for a walk of every
    /// process's descriptors).
    in_use: Vec<InUse>,
    /// The temperature and fan sensors, found once.
    sensors: SensorProbe,
}

/// State carried between observations (the policy's latches) and pilotd's own usage.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Carry {
    /// Fraction of the whole machine used by pilotd's workers.
    pub own_cpu: f64,
    pub owner_busy_since: Option<DateTime<Utc>>,
    pub host_free_since: Option<DateTime<Utc>>,
    /// Where the comfort throttle stood after the last decision.
    pub throttle: Option<Throttle>,
}

impl HostProbe {
    /// One observation of this host for a one-shot command: samples CPU over a short
    /// interval (this thread sleeps through it).
    pub fn observe_once(cfg: &ProbeSettings, carry: Carry) -> Result<HostSnapshot, ProbeError> {
        let mut probe = HostProbe::new(cfg.clone())?;
        std::thread::sleep(probe.prime());
        probe.observe(chrono::Utc::now(), carry, true)
    }

    pub(crate) fn new(cfg: ProbeSettings) -> Result<HostProbe, ProbeError> {
        let system = System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing().with_usage())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        )
        .map_err(|e| ProbeError::System(e.to_string()))?;
        let sensors = SensorProbe::discover(&sensors::class_dir(&cfg.power_supply));
        Ok(HostProbe {
            system,
            cfg,
            sensors,
            in_use: Vec::new(),
        })
    }

    /// The sensors found, to say once where there are none (`sensors`).
    pub(crate) fn sensors(&self) -> &SensorProbe {
        &self.sensors
    }

    /// CPU usage is measured since the previous refresh; a one-shot command calls this
    /// first and waits before `observe` so the reading covers a real interval.
    pub(crate) fn prime(&mut self) -> Duration {
        self.system.refresh_cpu_usage();
        sysinfo::MINIMUM_CPU_UPDATE_INTERVAL.max(Duration::from_millis(250))
    }

    /// The host now. `refresh_cpu` false keeps the CPU figure of the last refresh, so the
    /// next one covers the whole window since it (the daemon's own-load accounting must
    /// cover the same window; see `daemon::cycle::CpuMeter`), and the sound and cameras in
    /// use as last seen: they are looked at with the CPU, at most every cycle, never in an
    /// urgent one (a use only keeps the owner here: the input or the login that woke an urgent
    /// cycle says as much).
    pub(crate) fn observe(
        &mut self,
        now: DateTime<Utc>,
        carry: Carry,
        refresh_cpu: bool,
    ) -> Result<HostSnapshot, ProbeError> {
        if refresh_cpu {
            self.system.refresh_cpu_usage();
        }
        self.system.refresh_memory();
        let cpus = self.system.cpus().len().max(1) as u32;
        let load = System::load_average()
            .map(|l| [l.one, l.five, l.fifteen])
            .map_err(|e| ProbeError::System(format!("load average: {e}")))?;
        let cpu_busy = f64::from(self.system.global_cpu_usage() / 100.0).clamp(0.0, 1.0);
        let (sessions, utmp_absent) = sessions::read_utmp(&self.cfg.utmp, &self.cfg.dev, now);
        // The processes are walked once, for the exclusive programs and the devices alike;
        // their descriptors are read only when a stream runs or a camera exists.
        let streams = (self.cfg.media && refresh_cpu).then(|| media::streams(&self.cfg.asound));
        let devices = streams
            .as_ref()
            .is_some_and(|s| !s.is_empty() || media::has_video(&self.cfg.dev));
        let processes = walk_processes(&self.cfg.proc, &self.cfg.exclusive_processes, devices);
        match streams {
            Some(streams) => {
                let proc = &self.cfg.proc;
                self.in_use = media::uses(
                    &streams,
                    &processes.holders,
                    |pid| media::uid_of_pid(proc, pid),
                    media::user_of,
                )
            }
            None if !self.cfg.media => self.in_use.clear(),
            None => {}
        }
        let memory_total_kib = self.system.total_memory() / 1024;
        let scratch_free_kib = scratch_free_kib(&self.cfg.scratch)?;
        // What this look leaves out, the caller lays on: the owner's snooze (it lives in the
        // state dir), logind's sessions, locks and sleep (`logind::lay_on`, asked
        // asynchronously), the input devices (watched beside the loop) and NetworkManager's
        // link (`metered::lay_on`).
        Ok(HostSnapshot {
            load,
            cpu_busy,
            own_cpu: carry.own_cpu.clamp(0.0, 1.0),
            memory_available_kib: self.system.available_memory() / 1024,
            on_battery: on_battery(&self.cfg.power_supply),
            exclusive_running: processes.running,
            sessions,
            utmp_absent,
            owner_busy_since: carry.owner_busy_since,
            host_free_since: carry.host_free_since,
            // logind's idle inhibitors join these when it answers (`logind::lay_on`).
            in_use: self.in_use.clone(),
            // Nothing to read on a machine without sensors: no reading at all.
            sensors: self.sensors.read(),
            throttle: carry.throttle,
            ..HostSnapshot::quiet(now, cpus, memory_total_kib, scratch_free_kib)
        })
    }
}

/// The machine's CPU count and memory, for checking the policy's shares against it; cheap (no
/// CPU sampling).
pub fn this_machine() -> Option<Machine> {
    let mut sys = System::new_with_specifics(
        RefreshKind::nothing().with_memory(MemoryRefreshKind::nothing().with_ram()),
    )
    .ok()?;
    sys.refresh_memory();
    let cpus = std::thread::available_parallelism().ok()?.get() as u32;
    Some(Machine {
        cpus,
        memory_kib: sys.total_memory() / 1024,
        gpus: Some(nvidia_gpus(Path::new("/dev"))),
    })
}

/// NVIDIA GPUs: the `nvidiaN` device nodes under `dev` (the ones Docker's nvidia driver
/// hands to workers by index); `nvidiactl`, `nvidia-uvm` and the like are not GPUs.
pub(crate) fn nvidia_gpus(dev: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dev) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n.strip_prefix("nvidia")
                    .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .count() as u32
}

/// Free space for unprivileged use on the filesystem holding `path` (or its nearest existing
/// ancestor: the scratch dir may not exist before the first worker).
pub(crate) fn scratch_free_kib(path: &Path) -> Result<u64, ProbeError> {
    let existing = path
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    let st = nix::sys::statvfs::statvfs(existing).map_err(|source| ProbeError::Scratch {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64) / 1024)
}

/// On battery when a battery is discharging and no mains supply is online. A machine without
/// power-supply information is on mains.
pub(crate) fn on_battery(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let read = |p: &Path, f: &str| {
        std::fs::read_to_string(p.join(f))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let mut discharging = false;
    let mut mains_online = false;
    for e in entries.flatten() {
        let p = e.path();
        match read(&p, "type").as_str() {
            "Mains" => mains_online |= read(&p, "online") == "1",
            "Battery" => discharging |= read(&p, "status") == "Discharging",
            _ => {}
        }
    }
    discharging && !mains_online
}

/// What one walk over /proc found: which exclusive programs run, and who holds a sound or
/// video device open.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Processes {
    /// Names from the policy's list that are running, by the kernel's process name, sorted.
    pub running: Vec<String>,
    /// (uid, device) of every process holding a sound or video device open, once each,
    /// sorted. Only processes whose descriptors pilotd may read are seen (all, as root).
    pub holders: Vec<(u32, media::Device)>,
}

/// One walk over the processes under `proc` for what the host probe asks of them: the
/// process name (`/proc/PID/comm`) of each when `names` lists programs, and when `devices`,
/// the devices each holds open (the `/proc/PID/fd` links; a holder's uid from its `status`).
/// Nothing else of a process is read; no walk at all when neither is asked.
pub(crate) fn walk_processes(proc: &Path, names: &[String], devices: bool) -> Processes {
    let mut found = Processes::default();
    if names.is_empty() && !devices {
        return found;
    }
    let pids = std::fs::read_dir(proc)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .iter()
                .all(u8::is_ascii_digit)
        });
    for e in pids {
        let dir = e.path();
        if !names.is_empty()
            && let Ok(comm) = std::fs::read_to_string(dir.join("comm"))
            && names.iter().any(|n| n == comm.trim())
        {
            found.running.push(comm.trim().to_string());
        }
        if devices {
            let held = devices_held(&dir);
            if !held.is_empty()
                && let Some(uid) = e
                    .file_name()
                    .to_str()
                    .and_then(|pid| pid.parse().ok())
                    .and_then(|pid| media::uid_of_pid(proc, pid))
            {
                found.holders.extend(held.into_iter().map(|d| (uid, d)));
            }
        }
    }
    found.running.sort();
    found.running.dedup();
    found.holders.sort_unstable();
    found.holders.dedup();
    found
}

/// The sound and video devices a process holds open, from its descriptors' links (each once).
/// A process whose descriptors cannot be read (another user's, without root; gone) holds none.
/// Each link is read relative to the open `fd` directory (`readlinkat`): a path from /proc
/// down for each would have the kernel look the process up again for every descriptor.
fn devices_held(pid_dir: &Path) -> Vec<media::Device> {
    use nix::fcntl::OFlag;
    let Ok(mut dir) = nix::dir::Dir::open(
        &pid_dir.join("fd"),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        return Vec::new();
    };
    let names: Vec<std::ffi::CString> = dir
        .iter()
        .flatten()
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes().iter().all(u8::is_ascii_digit))
        .collect();
    let mut held: Vec<media::Device> = names
        .iter()
        .filter_map(|n| nix::fcntl::readlinkat(&dir, n.as_c_str()).ok())
        .filter_map(|link| media::Device::of_link(link.as_encoded_bytes()))
        .collect();
    held.sort_unstable();
    held.dedup();
    held
}

/// Which of `names` are running, by the kernel's process name (`/proc/PID/comm`), sorted.
#[cfg(test)]
pub(crate) fn running_processes(proc: &Path, names: &[String]) -> Vec<String> {
    walk_processes(proc, names, false).running
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn battery_states() {
        let d = tempfile::tempdir().unwrap();
        assert!(!on_battery(d.path()), "no supplies: mains");
        let bat = d.path().join("BAT0");
        std::fs::create_dir(&bat).unwrap();
        std::fs::write(bat.join("type"), "Battery\n").unwrap();
        std::fs::write(bat.join("status"), "Discharging\n").unwrap();
        assert!(on_battery(d.path()));
        let ac = d.path().join("AC");
        std::fs::create_dir(&ac).unwrap();
        std::fs::write(ac.join("type"), "Mains\n").unwrap();
        std::fs::write(ac.join("online"), "1\n").unwrap();
        assert!(!on_battery(d.path()));
        std::fs::write(ac.join("online"), "0\n").unwrap();
        assert!(on_battery(d.path()));
        assert!(!on_battery(Path::new("/nonexistent/power")));
    }

    #[test]
    fn finds_this_test_process_by_name() {
        let me = std::fs::read_to_string("/proc/self/comm")
            .unwrap()
            .trim()
            .to_string();
        let found = running_processes(Path::new("/proc"), &[me.clone(), "no-such-proc-xyz".into()]);
        assert_eq!(found, vec![me]);
        assert!(running_processes(Path::new("/proc"), &[]).is_empty());
    }

    #[test]
    fn scratch_space_of_a_missing_dir_is_its_parents() {
        let d = tempfile::tempdir().unwrap();
        let free = scratch_free_kib(&d.path().join("not/yet/there")).unwrap();
        assert_eq!(free, scratch_free_kib(d.path()).unwrap());
        assert!(free > 0);
    }
}
