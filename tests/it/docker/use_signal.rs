//! A use signal and the sessions together, with the real `pilotd run` and the real engine:
//! the login1 of tests/it/sessions/login1.rs on a real dbus-daemon stands in for logind. An
//! urgent cycle after an inhibitor's news alone asks logind for its locks only and takes the
//! sessions as last listed; a session's own change must still reach the workers at once.
//! The interval is long (60 s), so only the urgent path can act within the waits.

use super::volunteer::{Harness, image, policy};
use crate::sessions::login1::{FakeLogind, Hints, Kind};
use std::time::Duration;

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn an_inhibitor_and_an_unlock_each_pause_at_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut h = Harness::new(
        "usesignal",
        &policy("pause", 1),
        "",
        &format!("{}\n[worker.env]\n", image("v1")),
    );
    // Sessions from logind, judged as in use or not (the harness's "any" counts every login).
    h.edit(
        "policy.toml",
        &[(
            "sessions = \"any\"\n",
            "sessions = \"active\"\nlock_grace = \"0s\"\n",
        )],
    );
    let logind = rt.block_on(FakeLogind::start(&h.path("")));
    // alice at the machine's seat, her screen locked: away.
    let desk = rt.block_on(logind.add("2", "alice", 1000, Kind::Desk));
    *desk.hints.lock().unwrap() = Hints {
        locked: true,
        ..Hints::default()
    };
    h.start_with(&[("DBUS_SYSTEM_BUS_ADDRESS", &logind.address)]);
    let worker = h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());
    h.set_interval("60s");
    h.reload();
    let state = || h.workers()[0].state.clone();
    let now_is = |want: &'static str| move || (state() == want).then_some(());

    // A call on her locked laptop is not the point here: an idle lock of another user, bob,
    // whose session is elsewhere, is use on its own (no lock of his outweighs it).
    let lock = rt.block_on(logind.take("idle", "block", 1001, 4243));
    h.wait_for(
        "bob's idle lock to pause the worker",
        Duration::from_secs(5),
        now_is("paused"),
    );
    rt.block_on(logind.release(&lock));
    h.wait_for(
        "the lock's end to resume the worker",
        Duration::from_secs(5),
        now_is("running"),
    );

    // Only inhibitor news since the sessions were last listed: her unlock, announced as
    // logind does, must be listed anew and pause the worker at once.
    *desk.hints.lock().unwrap() = Hints::default();
    rt.block_on(logind.changed(&desk));
    h.wait_for(
        "alice's unlock to pause the worker",
        Duration::from_secs(5),
        now_is("paused"),
    );
    assert_eq!(h.workers()[0].id, worker.id);
    assert!(
        h.log().contains("alice logged in and in use"),
        "{}",
        h.log()
    );
}
