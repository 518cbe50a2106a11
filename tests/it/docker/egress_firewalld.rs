//! A firewall reload that firewalld announces is repaired at once, not at the next cycle: the
//! real `pilotd run`, the real engine and iptables, and firewalld's two signals on a real
//! dbus-daemon of the test's own. firewalld itself does not run here: with its iptables backend
//! it would flush the whole filter table, Docker's rules for every other test included, so
//! the test does what such a reload does to pilotd (its jumps deleted) and announces it as
//! firewalld does: `org.fedoraproject.FirewallD1.Reloaded`, and the name changing owner on
//! the bus (a restart). The interval is 15 s, and no cycle runs between the announcement and
//! the repair: the repair is the signal's.

use super::egress_repair::{Setup, now};
use crate::sessions::bus::FakeFirewalld;
use std::time::Duration;

/// How long the repair took after the announcement, for one way of announcing it.
fn repaired_after(s: &Setup, announce: impl FnOnce()) -> f64 {
    s.after_a_cycle();
    // Before the announcement the worker reaches the host: the probe works, and nothing
    // repaired the filter on its own meanwhile.
    let before = s.drop_until_through();
    let cycles = || s.h.log().matches("cycle done: ").count();
    let (announced, cycles_before) = (now(), cycles());
    announce();
    let repaired = s.wait_jumps_back(&before, Duration::from_secs(30));
    assert_eq!(
        cycles(),
        cycles_before,
        "no cycle ran between the announcement and the repair\n--- pilotd log ---\n{}",
        s.h.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    let after = s.secret.since(repaired + 0.2);
    assert!(
        after.is_empty(),
        "{} connection(s) got through after the repair",
        after.len()
    );
    repaired - announced
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn a_reload_firewalld_announces_is_repaired_at_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let firewalld = rt.block_on(FakeFirewalld::start(dir.path()));
    let s = Setup::start_on(
        "egress-firewalld",
        None,
        &[("DBUS_SYSTEM_BUS_ADDRESS", &firewalld.address)],
        Some("15s"),
    );
    let on_reload = repaired_after(&s, || rt.block_on(firewalld.reloaded()));
    let on_restart = repaired_after(&s, || rt.block_on(firewalld.restart()));
    eprintln!(
        "repaired {on_reload:.3}s after firewalld's Reloaded, {on_restart:.3}s after its restart (interval 15s)"
    );
    for (what, took) in [("Reloaded", on_reload), ("a restart", on_restart)] {
        assert!(
            took < 2.0,
            "repaired {took:.3}s after {what}, not at once\n--- pilotd log ---\n{}",
            s.h.log()
        );
    }
    assert_eq!(
        s.h.log()
            .matches("the firewall was reloaded; checking the workers' traffic filter now")
            .count(),
        // Its restart is two changes of owner: it left, it came back.
        3,
        "{}",
        s.h.log()
    );
}
