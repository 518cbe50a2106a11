//! The probe on sysfs trees laid out as on real machines: the class entries are symlinks into
//! `devices/`, and every attribute holds what the kernel prints (a decimal number or a label,
//! then a newline). This machine is a VM without any sensor, so fixture trees are all there is.

use super::*;
use std::os::unix::fs::symlink;

/// What one read costs (ignored: a figure).
mod bench;

/// A sysfs root: `class/` beside `devices/`.
struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Tree {
        let t = Tree(tempfile::tempdir().unwrap());
        std::fs::create_dir_all(t.class().join("hwmon")).unwrap();
        std::fs::create_dir_all(t.class().join("thermal")).unwrap();
        t
    }

    fn class(&self) -> PathBuf {
        self.0.path().join("class")
    }

    /// A device directory under `devices/` with these attributes, and its class entry
    /// `class/<class>/<entry>` as the kernel makes it: a relative symlink.
    fn device(&self, class: &str, entry: &str, device: &str, attrs: &[(&str, &str)]) {
        let dir = self.0.path().join("devices").join(device);
        for (name, value) in attrs {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, value).unwrap();
        }
        std::fs::create_dir_all(&dir).unwrap();
        symlink(
            format!("../../devices/{device}"),
            self.class().join(class).join(entry),
        )
        .unwrap();
    }

    fn probe(&self) -> SensorProbe {
        SensorProbe::discover(&self.class())
    }
}

fn readings(r: &[Reading]) -> Vec<(&str, f64)> {
    r.iter().map(|r| (r.sensor.as_str(), r.value)).collect()
}

/// An Intel laptop (a ThinkPad): ACPI's zone, the EC's fan and temperature, an NVMe disk,
/// the CPU's coretemp, the wifi card's sensor (which answers ENODATA while the card is down:
/// here a read that fails).
fn intel_laptop() -> Tree {
    let t = Tree::new();
    t.device(
        "hwmon",
        "hwmon0",
        "virtual/thermal/thermal_zone0/hwmon0",
        &[
            ("name", "acpitz\n"),
            ("temp1_input", "45000\n"),
            ("temp1_crit", "128000\n"),
        ],
    );
    t.device(
        "hwmon",
        "hwmon1",
        "platform/thinkpad_hwmon/hwmon/hwmon1",
        &[
            ("name", "thinkpad\n"),
            ("fan1_input", "2431\n"),
            ("pwm1", "255\n"),
            ("pwm1_enable", "2\n"),
            ("temp1_input", "45000\n"),
        ],
    );
    t.device(
        "hwmon",
        "hwmon2",
        "pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/hwmon2",
        &[
            ("name", "nvme\n"),
            ("temp1_label", "Composite\n"),
            ("temp1_input", "32850\n"),
            ("temp1_max", "84850\n"),
        ],
    );
    t.device(
        "hwmon",
        "hwmon3",
        "platform/coretemp.0/hwmon/hwmon3",
        &[
            ("name", "coretemp\n"),
            ("temp1_label", "Package id 0\n"),
            ("temp1_input", "52000\n"),
            ("temp1_max", "100000\n"),
            ("temp1_crit", "100000\n"),
            ("temp1_crit_alarm", "0\n"),
            ("temp2_label", "Core 0\n"),
            ("temp2_input", "50000\n"),
            ("temp3_label", "Core 1\n"),
            ("temp3_input", "49000\n"),
        ],
    );
    t.device(
        "hwmon",
        "hwmon4",
        "pci0000:00/0000:00:14.3/hwmon/hwmon4",
        &[("name", "iwlwifi_1\n"), ("temp1_input/unreadable", "")],
    );
    t.device(
        "thermal",
        "thermal_zone0",
        "virtual/thermal/thermal_zone0",
        &[
            ("type", "acpitz\n"),
            ("temp", "45000\n"),
            ("mode", "enabled\n"),
        ],
    );
    t.device(
        "thermal",
        "thermal_zone1",
        "virtual/thermal/thermal_zone1",
        &[
            ("type", "x86_pkg_temp\n"),
            ("temp", "52000\n"),
            ("mode", "enabled\n"),
        ],
    );
    t
}

#[test]
fn an_intel_laptop_reads_its_cpu_and_its_fan_never_its_disk() {
    let t = intel_laptop();
    let s = t.probe().read().unwrap();
    assert_eq!(
        readings(&s.temperatures),
        [
            ("coretemp Package id 0", 52.0),
            ("coretemp Core 0", 50.0),
            ("coretemp Core 1", 49.0),
            ("x86_pkg_temp", 52.0),
        ]
    );
    assert_eq!(readings(&s.fans), [("thinkpad fan1", 2431.0)]);
    assert_eq!(s.hottest().unwrap().sensor, "coretemp Package id 0");
    assert_eq!(s.fastest().unwrap().value, 2431.0);
    assert_eq!(
        t.probe().said(),
        "reading 4 temperature sensor(s) (coretemp Package id 0, coretemp Core 0, \
         coretemp Core 1, x86_pkg_temp) and 1 fan(s) (thinkpad fan1) every cycle"
    );
    // A new value is read as it comes; the files are found once.
    let package =
        t.0.path()
            .join("devices/platform/coretemp.0/hwmon/hwmon3/temp1_input");
    std::fs::write(&package, "91000\n").unwrap();
    let s = t.probe().read().unwrap();
    assert_eq!(s.hottest().unwrap().value, 91.0);
}

/// An AMD desktop: k10temp (Tctl, the control temperature, and a CCD's), a Super I/O chip's
/// fans (the first header empty), the graphics card's zero-RPM fan, an NVMe disk, and no
/// thermal zone at all.
#[test]
fn an_amd_desktop_reads_tctl_and_every_fan() {
    let t = Tree::new();
    t.device(
        "hwmon",
        "hwmon0",
        "pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0/hwmon0",
        &[
            ("name", "nvme\n"),
            ("temp1_label", "Composite\n"),
            ("temp1_input", "38850\n"),
        ],
    );
    t.device(
        "hwmon",
        "hwmon1",
        "pci0000:00/0000:00:18.3/hwmon/hwmon1",
        &[
            ("name", "k10temp\n"),
            ("temp1_label", "Tctl\n"),
            ("temp1_input", "61375\n"),
            ("temp3_label", "Tccd1\n"),
            ("temp3_input", "58250\n"),
        ],
    );
    t.device(
        "hwmon",
        "hwmon2",
        "platform/nct6775.656/hwmon/hwmon2",
        &[
            ("name", "nct6798\n"),
            ("fan1_input", "0\n"),
            ("fan2_input", "1183\n"),
            ("temp1_label", "SYSTIN\n"),
            ("temp1_input", "33000\n"),
            ("temp3_label", "AUXTIN0\n"),
            ("temp3_input", "-62000\n"),
        ],
    );
    t.device(
        "hwmon",
        "hwmon10",
        "pci0000:00/0000:00:03.1/0000:0b:00.0/hwmon/hwmon10",
        &[
            ("name", "amdgpu\n"),
            ("temp1_label", "edge\n"),
            ("temp1_input", "41000\n"),
            ("fan1_input", "0\n"),
        ],
    );
    let s = t.probe().read().unwrap();
    assert_eq!(
        readings(&s.temperatures),
        [("k10temp Tctl", 61.375), ("k10temp Tccd1", 58.25)]
    );
    // hwmon10 comes after hwmon2: by number, not by name.
    assert_eq!(
        readings(&s.fans),
        [
            ("nct6798 fan1", 0.0),
            ("nct6798 fan2", 1183.0),
            ("amdgpu fan1", 0.0)
        ]
    );
}

/// A Raspberry Pi: the SoC's thermal zone and its hwmon twin.
#[test]
fn a_raspberry_pi_reads_its_soc() {
    let t = Tree::new();
    t.device(
        "thermal",
        "thermal_zone0",
        "virtual/thermal/thermal_zone0",
        &[("type", "cpu-thermal\n"), ("temp", "48312\n")],
    );
    t.device(
        "hwmon",
        "hwmon0",
        "virtual/thermal/thermal_zone0/hwmon0",
        &[("name", "cpu_thermal\n"), ("temp1_input", "48312\n")],
    );
    t.device(
        "hwmon",
        "hwmon1",
        "platform/soc/soc:firmware/raspberrypi-hwmon/hwmon/hwmon1",
        &[("name", "rpi_volt\n"), ("in0_lcrit_alarm", "0\n")],
    );
    let s = t.probe().read().unwrap();
    assert_eq!(
        readings(&s.temperatures),
        [("cpu_thermal temp1", 48.312), ("cpu-thermal", 48.312)]
    );
    assert!(s.fans.is_empty());
}

/// A machine without a CPU sensor: every temperature but the disk's, from a driver that keeps
/// its attributes in the device's directory (the class entry holds none), and a Super I/O
/// input with no diode on it (-128 °C), which is no reading.
#[test]
fn without_a_cpu_sensor_every_temperature_but_the_disks() {
    let t = Tree::new();
    t.device(
        "hwmon",
        "hwmon0",
        "platform/w83627ehf.656/hwmon/hwmon0",
        &[
            ("device/name", "w83627ehf\n"),
            ("device/temp1_input", "38000\n"),
            ("device/temp2_input", "-128000\n"),
            ("device/fan1_input", "1500\n"),
            ("device/fan1_label", "CPU fan\n"),
        ],
    );
    t.device(
        "hwmon",
        "hwmon1",
        "platform/drivetemp/hwmon1",
        &[("name", "drivetemp\n"), ("temp1_input", "35000\n")],
    );
    t.device(
        "thermal",
        "thermal_zone0",
        "virtual/thermal/thermal_zone0",
        &[("type", "acpitz\n"), ("temp", "27800\n")],
    );
    let s = t.probe().read().unwrap();
    assert_eq!(
        readings(&s.temperatures),
        [("w83627ehf temp1", 38.0), ("acpitz", 27.8)]
    );
    assert_eq!(readings(&s.fans), [("w83627ehf CPU fan", 1500.0)]);
}

/// A VM (this machine): no hwmon class at all, an empty thermal class. Nothing is found and
/// nothing is read; a tree that is not there is the same.
#[test]
fn a_machine_without_sensors_has_an_empty_probe() {
    let t = Tree::new();
    std::fs::remove_dir(t.class().join("hwmon")).unwrap();
    let p = t.probe();
    assert!(p.is_empty());
    assert_eq!(p.read(), None);
    assert!(
        p.said().starts_with("no temperature or fan sensor under"),
        "{}",
        p.said()
    );
    assert!(SensorProbe::discover(Path::new("/nonexistent/class")).is_empty());
    // A sensor whose every read fails reads as none, not as 0 °C.
    let t = Tree::new();
    t.device(
        "thermal",
        "thermal_zone0",
        "virtual/thermal/thermal_zone0",
        &[("type", "iwlwifi_1\n"), ("temp/unreadable", "")],
    );
    let p = t.probe();
    assert!(!p.is_empty());
    assert_eq!(p.read(), None);
}

#[test]
fn the_class_dir_is_the_power_supplys_parent() {
    assert_eq!(
        class_dir(Path::new("/sys/class/power_supply")),
        Path::new("/sys/class")
    );
    assert_eq!(class_dir(Path::new("/tmp/x/power")), Path::new("/tmp/x"));
}
