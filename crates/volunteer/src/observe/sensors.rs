//! Probe: the machine's temperatures and fan speeds, as the kernel shows them in sysfs.
//!
//! Two classes hold them (units as the kernel documents them):
//! - `hwmon/hwmon*/` (Documentation/hwmon/sysfs-interface.rst, and
//!   Documentation/ABI/testing/sysfs-class-hwmon): the chip's `name` (coretemp, k10temp,
//!   nct6775, thinkpad…), `temp<N>_input` in millidegrees Celsius and `fan<N>_input` in RPM,
//!   each with an optional `temp<N>_label` / `fan<N>_label` ("Package id 0", "Tctl"). Older
//!   drivers keep the attributes in the chip's `device/` directory instead: looked for there
//!   when the class directory has none.
//! - `thermal/thermal_zone*/` (Documentation/ABI/testing/sysfs-class-thermal): `type`
//!   ("x86_pkg_temp", "acpitz", "cpu-thermal") and `temp`, millidegrees Celsius.
//!
//! Which sensors are read is found once (`discover`): the CPU's where the machine shows any
//! (the chips coretemp, k10temp, zenpower, and thermal zones of the CPU package): that is the
//! heat the workers make, and what the owner's `max_temperature` speaks of; elsewhere every
//! temperature but the disks'. Disk sensors (`nvme`, `drivetemp`) are never read: each read
//! is a command to the drive, and "reading the drive temperature may reset the spin down
//! timer" (Documentation/hwmon/drivetemp.rst). Every fan is read.
//!
//! A read is a few small files, every cycle (`interval`); a sensor that fails to answer (the
//! kernel's ENODATA for a disabled one, EIO, a chip gone) or gives a value no working sensor
//! gives is left out of that reading. The probe decides nothing: `comfort` does.

use crate::snapshot::{Reading, Sensors};
use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests;

/// hwmon chips that measure the CPU itself.
const CPU_CHIPS: [&str; 4] = ["coretemp", "k10temp", "zenpower", "cpu_thermal"];
/// hwmon chips of disks: reading them wakes the drive or keeps it from sleeping.
const DISK_CHIPS: [&str; 2] = ["nvme", "drivetemp"];
/// Readings outside these bounds come from no working sensor: an unconnected diode input of a
/// Super I/O chip reads -128 °C or 127 °C, a stalled tachometer's counter overflows.
const PLAUSIBLE_CELSIUS: std::ops::Range<f64> = -40.0..127.0;
const PLAUSIBLE_RPM: std::ops::Range<f64> = 0.0..30_000.0;

/// The sensors of this machine, found once; `read` takes their values.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SensorProbe {
    /// Where they were looked for (the sysfs class directory).
    class: PathBuf,
    temperatures: Vec<Source>,
    fans: Vec<Source>,
}

/// One sensor: its name as the owner reads it, and the file holding its value.
#[derive(Debug, Clone, PartialEq)]
struct Source {
    sensor: String,
    input: PathBuf,
    /// A CPU's own sensor.
    cpu: bool,
}

/// The class directory of `power_supply` (`[host] power_supply`, `/sys/class/power_supply`):
/// the sensors' classes are its siblings, so a test pointing one elsewhere points all.
pub(crate) fn class_dir(power_supply: &Path) -> PathBuf {
    power_supply
        .parent()
        .unwrap_or(Path::new("/sys/class"))
        .to_path_buf()
}

impl SensorProbe {
    /// The sensors under `class` (`/sys/class`): hwmon chips and thermal zones, the CPU's
    /// alone where there are any (see the module's doc). Nothing found is an empty probe.
    pub(crate) fn discover(class: &Path) -> SensorProbe {
        let mut temperatures = Vec::new();
        let mut fans = Vec::new();
        for chip in numbered(&class.join("hwmon"), "hwmon") {
            hwmon_chip(&chip, &mut temperatures, &mut fans);
        }
        for zone in numbered(&class.join("thermal"), "thermal_zone") {
            let Some(kind) = first_line(&zone.join("type")) else {
                continue;
            };
            temperatures.push(Source {
                cpu: kind == "x86_pkg_temp" || kind.contains("cpu"),
                sensor: kind,
                input: zone.join("temp"),
            });
        }
        if temperatures.iter().any(|s| s.cpu) {
            temperatures.retain(|s| s.cpu);
        }
        SensorProbe {
            class: class.to_path_buf(),
            temperatures,
            fans,
        }
    }

    /// No sensor was found: nothing to read, ever (until the next `discover`).
    pub(crate) fn is_empty(&self) -> bool {
        self.temperatures.is_empty() && self.fans.is_empty()
    }

    /// The line the daemon logs once at its start: what it reads, or that there is nothing.
    pub(crate) fn said(&self) -> String {
        if self.is_empty() {
            return format!(
                "no temperature or fan sensor under {} (hwmon, thermal); none is read",
                self.class.display()
            );
        }
        let names = |s: &[Source]| {
            s.iter()
                .map(|s| s.sensor.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "reading {} temperature sensor(s) ({}) and {} fan(s) ({}) every cycle",
            self.temperatures.len(),
            names(&self.temperatures),
            self.fans.len(),
            names(&self.fans)
        )
    }

    /// The sensors' values now; `None` when none could be read.
    pub(crate) fn read(&self) -> Option<Sensors> {
        let read = |sources: &[Source], scale: f64, plausible: &std::ops::Range<f64>| {
            sources
                .iter()
                .filter_map(|s| {
                    let raw: i64 = first_line(&s.input)?.parse().ok()?;
                    let value = raw as f64 / scale;
                    plausible.contains(&value).then(|| Reading {
                        sensor: s.sensor.clone(),
                        value,
                    })
                })
                .collect::<Vec<_>>()
        };
        let sensors = Sensors {
            temperatures: read(&self.temperatures, 1000.0, &PLAUSIBLE_CELSIUS),
            fans: read(&self.fans, 1.0, &PLAUSIBLE_RPM),
        };
        (!sensors.temperatures.is_empty() || !sensors.fans.is_empty()).then_some(sensors)
    }
}

/// One hwmon chip's temperature and fan inputs, with their labels.
fn hwmon_chip(chip: &Path, temperatures: &mut Vec<Source>, fans: &mut Vec<Source>) {
    let fallback = chip
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The attributes live in the class directory, or (older drivers) in the device's.
    let dir = if inputs(chip).is_empty() {
        chip.join("device")
    } else {
        chip.to_path_buf()
    };
    let name = first_line(&chip.join("name"))
        .or_else(|| first_line(&dir.join("name")))
        .unwrap_or(fallback);
    if DISK_CHIPS.contains(&name.as_str()) {
        return;
    }
    for (kind, n) in inputs(&dir) {
        let channel = format!("{kind}{n}");
        let label = first_line(&dir.join(format!("{channel}_label"))).unwrap_or(channel.clone());
        let source = Source {
            sensor: format!("{name} {label}"),
            input: dir.join(format!("{channel}_input")),
            cpu: CPU_CHIPS.contains(&name.as_str()),
        };
        match kind {
            "temp" => temperatures.push(source),
            _ => fans.push(source),
        }
    }
}

/// The `temp<N>_input` and `fan<N>_input` files of a directory, as (kind, N), in order.
fn inputs(dir: &Path) -> Vec<(&'static str, u32)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(&'static str, u32)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?.strip_suffix("_input")?;
            ["temp", "fan"].into_iter().find_map(|kind| {
                crate::observe::media::digits(name.strip_prefix(kind)?.as_bytes())
                    .map(|n| (kind, n))
            })
        })
        .collect();
    found.sort_unstable();
    found
}

/// The entries `<prefix><N>` of a class directory, by N (hwmon2 before hwmon10).
fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort_unstable();
    found.into_iter().map(|(_, p)| p).collect()
}

/// A sysfs attribute's value: its first line, trimmed; `None` when it cannot be read or is
/// empty.
fn first_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_string())
}
