//! Benchmark figures for tests/bench/kube_plan.sh (ignored: it prints numbers, it does not
//! judge them): the kubernetes-mode replay path alone — read the snapshot file, parse it,
//! decide, render the JSON plan — with its wall time and the process's peak RSS.

use pilotd_kubernetes::config::KubernetesConfig;
use pilotd_kubernetes::plan::decide;
use pilotd_kubernetes::settings::Settings;
use pilotd_kubernetes::snapshot::ClusterSnapshot;
use std::time::Instant;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
#[ignore = "benchmark figure; run by tests/bench/kube_plan.sh with PILOTD_BENCH_SNAPSHOT"]
fn plan_from_snapshot_figures() {
    let path = std::env::var("PILOTD_BENCH_SNAPSHOT").expect("PILOTD_BENCH_SNAPSHOT=FILE");
    let table = KubernetesConfig::from_table_text(
        "namespace = \"osg-opportunistic\"\napp_name = \"osg-direct\"\n",
    )
    .unwrap();
    let cfg = Settings::from_table(&table, std::path::Path::new("/nonexistent")).unwrap();
    let now = "2026-12-01T21:30:00Z".parse().unwrap();
    let start = Instant::now();
    let text = std::fs::read_to_string(&path).unwrap();
    let snap = ClusterSnapshot::from_json(&path, &text).unwrap();
    drop(text);
    let parsed = start.elapsed();
    let plan = decide(&snap, &cfg.plan, now).plan;
    let out = serde_json::to_string_pretty(&plan).unwrap();
    let total = start.elapsed();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    println!(
        "library replay: {} jobs, {} pods → {} shapes, {} Job bodies; parse {:.3} s, total {:.3} s, peak RSS {} KiB",
        snap.jobs.len(),
        snap.pods.len(),
        v["clusters"].as_array().unwrap().len(),
        v["jobs"].as_array().unwrap().len(),
        parsed.as_secs_f64(),
        total.as_secs_f64(),
        peak_rss_kib()
    );
}
