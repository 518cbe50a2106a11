//! A machine that gets hot while its worker computes, driven through the real cycle on the
//! recording fake engine: the sensors are a sysfs tree in the machine's dir (beside its
//! `power_supply`), read by the real probe.

use super::*;
use crate::worker::labels;

/// The machine's CPU package sensor (coretemp), at `celsius`.
fn heat(m: &Machine, celsius: u32) {
    let chip = m.dir.path().join("hwmon/hwmon3");
    std::fs::create_dir_all(&chip).unwrap();
    std::fs::write(chip.join("name"), "coretemp\n").unwrap();
    std::fs::write(chip.join("temp1_label"), "Package id 0\n").unwrap();
    std::fs::write(chip.join("temp1_input"), format!("{}\n", celsius * 1000)).unwrap();
}

/// The calls that changed the worker: its quota (`limit`), pauses and resumes.
fn changes(m: &Machine) -> Vec<String> {
    m.engine
        .calls()
        .into_iter()
        .filter(|c| {
            ["limit", "pause", "unpause"]
                .iter()
                .any(|v| c.starts_with(v))
        })
        .collect()
}

#[tokio::test]
async fn a_hot_machine_caps_its_worker_step_by_step_pauses_it_and_gives_it_back() {
    let m = Machine::new();
    heat(&m, 60);
    let mut s = m.settings();
    s.policy.comfort.max_temperature = Some(80.0);
    s.policy.comfort.cool_for = Duration::from_secs(120);
    let (metrics, registry) = Metrics::new();
    let engine = m.engine.clone();
    let mut d = Daemon::new(
        s.clone(),
        Box::new(move |_| Ok(engine.clone())),
        Some(metrics),
        Utc::now(),
    )
    .unwrap();
    let t0 = Utc::now();
    let t = |secs: i64| t0 + chrono::Duration::seconds(secs);
    first_cycles(&mut d, t(0)).await;
    let id = m.engine.lock().workers[0].id.clone();
    assert_eq!(
        m.engine.lock().specs[0].labels[labels::NANO_CPUS],
        "1000000000"
    );
    assert_eq!(d.status().temperature.as_ref().unwrap().value, 60.0);
    assert!(changes(&m).is_empty(), "{:?}", changes(&m));

    // Hot: a step down every cycle, then the pause at the lowest step.
    heat(&m, 85);
    for secs in [30, 60, 90, 120] {
        d.cycle(t(secs), false).await;
    }
    assert_eq!(
        changes(&m),
        [
            format!("limit {id} 750000000"),
            format!("limit {id} 500000000"),
            format!("limit {id} 250000000"),
            format!("pause {id}"),
        ]
    );
    let decision = d.status().decision.clone().unwrap();
    assert!(!decision.allowed);
    assert_eq!(decision.evict, Evict::Pause);
    assert!(
        decision.reasons[0]
            .starts_with("temperature 85°C (coretemp Package id 0) over max_temperature 80°C"),
        "{:?}",
        decision.reasons
    );
    let metrics = pilotd_core::service::metrics::exposition(&registry);
    for line in [
        "pilotd_temperature_celsius{sensor=\"coretemp Package id 0\"} 85.0",
        "pilotd_cpu_cap_cpus{cause=\"temperature\"} 0.25",
        "pilotd_decisions_total{cause=\"comfort\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    // A restart does not give a hot machine its whole share back.
    let engine = m.engine.clone();
    let mut d = Daemon::new(s, Box::new(move |_| Ok(engine.clone())), None, t(125)).unwrap();
    assert_eq!(
        d.status().throttle.map(|t| (t.step, t.paused)),
        Some((3, true))
    );

    // Cool: nothing for cool_for, then the pause ends (at the lowest step), then a step up
    // each cool_for, until the whole share is back and no cap is left.
    heat(&m, 60);
    d.cycle(t(150), false).await;
    d.cycle(t(200), false).await;
    assert_eq!(changes(&m).len(), 4, "{:?}", changes(&m));
    for secs in [270, 390, 510, 630] {
        d.cycle(t(secs), false).await;
    }
    assert_eq!(
        changes(&m)[4..],
        [
            format!("unpause {id}"),
            format!("limit {id} 500000000"),
            format!("limit {id} 750000000"),
            format!("limit {id} 1000000000"),
        ]
    );
    let status = d.status();
    assert_eq!(status.decision.as_ref().unwrap().cpu_cap, None);
    assert_eq!(status.throttle, None);
    let w = &status.workers.as_ref().unwrap()[0];
    assert_eq!(
        (w.state, w.nano_cpus),
        (WorkerState::Running, Some(1_000_000_000))
    );
    assert_eq!(m.calls("start").len(), 1, "the same worker all along");
}
