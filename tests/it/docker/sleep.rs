//! A suspend, as logind announces it, with the real `pilotd run` and the real engine: the
//! login1 of tests/it/sessions/login1.rs on a real dbus-daemon stands in for logind (a
//! container cannot suspend). pilotd holds a delay lock on sleep; on `PrepareForSleep(true)`
//! it pauses the worker (on_return = "pause") and only then lets the lock go; after the
//! wake-up nothing resumes before a fresh look at the owner. The owner's `keep_awake` holds an
//! idle lock only while a worker computes. A `PrepareForSleep` sent by anyone but logind
//! (`nobody`, through the real `dbus-send`) changes nothing.

use super::volunteer::{Harness, image, policy};
use crate::sessions::login1::{FakeLogind, Inhibitor, forge};
use std::time::{Duration, SystemTime};

fn held(logind: &FakeLogind, what: &str, mode: &str) -> Option<Inhibitor> {
    logind
        .inhibitors()
        .into_iter()
        .find(|i| i.what == what && i.mode == mode && i.released_at().is_none())
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_sleep_pauses_before_the_lock_goes_and_the_wake_up_looks_again() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut h = Harness::new(
        "sleep",
        &policy("pause", 1),
        "",
        &format!("{}\n[worker.env]\n", image("v1")),
    );
    h.edit(
        "policy.toml",
        &[("[owner]\n", "[owner]\nkeep_awake = true\n")],
    );
    let logind = rt.block_on(FakeLogind::start(&h.path("")));
    h.start_with(&[("DBUS_SYSTEM_BUS_ADDRESS", &logind.address)]);
    let worker = h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());
    let sleep_lock = h.wait_for("the sleep delay lock", Duration::from_secs(10), || {
        held(&logind, "sleep", "delay")
    });
    h.wait_for(
        "keep_awake's idle lock while computing",
        Duration::from_secs(10),
        || held(&logind, "idle", "block"),
    );

    // Any local user can say the machine goes to sleep on the system bus (issue 35): `nobody`
    // does, as does root on a connection that is not logind's. Believed, the worker would be
    // paused and stay so until a real wake-up; it is not (cycles run every 2 s meanwhile).
    let frozen = super::FrozenWatch::start(&worker.id);
    for _ in 0..3 {
        forge(
            &logind.address,
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager.PrepareForSleep",
            &["boolean:true"],
        );
    }
    rt.block_on(async {
        let other = zbus::connection::Builder::address(logind.address.as_str())
            .unwrap()
            .build()
            .await
            .unwrap();
        other
            .emit_signal(
                None::<&str>,
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager",
                "PrepareForSleep",
                &(true,),
            )
            .await
            .unwrap();
    });
    h.wait_cycles(2);
    assert_eq!(frozen.first_frozen(), None, "paused on a forged sleep");
    assert_eq!(h.workers()[0].state, "running");
    assert!(!h.log().contains("going to sleep"), "{}", h.log());
    assert!(
        sleep_lock.released_at().is_none(),
        "the sleep lock went on a forged sleep"
    );
    drop(frozen);

    // The machine is about to sleep: logind says so.
    let frozen = super::FrozenWatch::start(&worker.id);
    let announced = SystemTime::now();
    rt.block_on(logind.emit("PrepareForSleep", &(true,)));
    let released = h.wait_for("the sleep lock released", Duration::from_secs(10), || {
        sleep_lock.released_at()
    });
    let paused = frozen
        .first_frozen()
        .expect("the worker's cgroup was frozen before the sleep lock went");
    assert!(
        paused <= released,
        "paused {paused:?} after the lock went {released:?}"
    );
    eprintln!(
        "PrepareForSleep -> paused {:?}, -> lock released {:?}",
        paused.duration_since(announced).unwrap_or_default(),
        released.duration_since(announced).unwrap_or_default()
    );
    assert_eq!(h.workers()[0].state, "paused");
    assert!(h.log().contains("going to sleep"), "{}", h.log());
    assert!(
        held(&logind, "idle", "block").is_none(),
        "no idle lock while nothing computes"
    );

    // The owner logged in while the machine slept; it wakes up.
    h.login();
    rt.block_on(logind.emit("PrepareForSleep", &(false,)));
    h.wait_for(
        "a new sleep lock after the wake-up",
        Duration::from_secs(10),
        || held(&logind, "sleep", "delay"),
    );
    h.wait_cycles(3);
    assert_eq!(
        h.workers()[0].state,
        "paused",
        "nothing resumes before the owner was looked at again:\n{}",
        h.log()
    );

    // The owner leaves: the worker resumes, and keep_awake holds the machine awake again.
    h.logout();
    h.wait_for("the worker resumed", Duration::from_secs(10), || {
        (h.workers()[0].state == "running").then_some(())
    });
    h.wait_for("the idle lock again", Duration::from_secs(10), || {
        held(&logind, "idle", "block")
    });
}
