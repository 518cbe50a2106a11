//! What one read of the sensors costs (ignored: a figure, run on its own; asserts nothing
//! timed): the probe's `read` of a desktop's tree, built as the kernel lays it out, with a
//! 16-core coretemp (the package and every core), a Super I/O chip's 7 fans and its 6
//! temperatures (not read: the CPU's are there), an NVMe disk (never read) and 2 thermal
//! zones. The daemon reads once per cycle (`interval`, 30 s by default). Run:
//!
//!     cargo test --release -p pilotd-volunteer --lib observe::sensors::tests::bench -- --ignored --nocapture
//!
//! On a real machine each hwmon read also runs its driver's code (coretemp reads an MSR on
//! the core it names), which a tree of plain files does not: the figure is the probe's own.

use super::*;

#[test]
#[ignore = "a benchmark: prints what one read of the sensors costs"]
fn what_one_read_costs() {
    let t = Tree::new();
    let mut coretemp = vec![
        ("name".to_string(), "coretemp\n".to_string()),
        ("temp1_label".into(), "Package id 0\n".into()),
        ("temp1_input".into(), "45000\n".into()),
    ];
    for core in 0..16 {
        coretemp.push((format!("temp{}_label", core + 2), format!("Core {core}\n")));
        coretemp.push((format!("temp{}_input", core + 2), "43000\n".into()));
        coretemp.push((format!("temp{}_max", core + 2), "100000\n".into()));
    }
    let mut superio = vec![("name".to_string(), "nct6798\n".to_string())];
    for fan in 1..=7 {
        superio.push((format!("fan{fan}_input"), format!("{}\n", 600 + fan * 100)));
    }
    for temp in 1..=6 {
        superio.push((format!("temp{temp}_input"), "33000\n".into()));
    }
    let as_refs = |v: &[(String, String)]| -> Vec<(String, String)> { v.to_vec() };
    let chip = |entry: &str, device: &str, attrs: &[(String, String)]| {
        let attrs: Vec<(&str, &str)> = attrs
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        t.device("hwmon", entry, device, &attrs);
    };
    chip(
        "hwmon0",
        "pci0000:00/0000:00:1d.0/nvme/nvme0/hwmon0",
        &[
            ("name".into(), "nvme\n".into()),
            ("temp1_input".into(), "38850\n".into()),
        ],
    );
    chip(
        "hwmon1",
        "platform/coretemp.0/hwmon/hwmon1",
        &as_refs(&coretemp),
    );
    chip(
        "hwmon2",
        "platform/nct6775.656/hwmon/hwmon2",
        &as_refs(&superio),
    );
    t.device(
        "thermal",
        "thermal_zone0",
        "virtual/thermal/thermal_zone0",
        &[("type", "acpitz\n"), ("temp", "27800\n")],
    );
    t.device(
        "thermal",
        "thermal_zone1",
        "virtual/thermal/thermal_zone1",
        &[("type", "x86_pkg_temp\n"), ("temp", "45000\n")],
    );
    let median = |mut v: Vec<std::time::Duration>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let runs = 2001;
    let discover: Vec<_> = (0..runs)
        .map(|_| {
            let t0 = std::time::Instant::now();
            std::hint::black_box(t.probe());
            t0.elapsed()
        })
        .collect();
    let probe = t.probe();
    let read: Vec<_> = (0..runs)
        .map(|_| {
            let t0 = std::time::Instant::now();
            std::hint::black_box(probe.read());
            t0.elapsed()
        })
        .collect();
    let s = probe.read().unwrap();
    println!(
        "sensors: {} temperatures and {} fans read; one read: median {:?} (of {runs}); \
         discovery (once, at the start and on a reload): median {:?}",
        s.temperatures.len(),
        s.fans.len(),
        median(read),
        median(discover)
    );
}
