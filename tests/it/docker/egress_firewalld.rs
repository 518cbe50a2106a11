//! A firewall reload that firewalld announces is repaired at once, not at the next cycle: the
//! real `pilotd run`, the real engine and iptables, and firewalld's two signals on a real
//! dbus-daemon of the test's own. firewalld itself does not run here: with its iptables backend
//! it would flush the whole filter table, Docker's rules for every other test included, so
//! the test does what such a reload does to pilotd (its jumps deleted) and announces it as
//! firewalld does: `org.fedoraproject.FirewallD1.Reloaded`, and the name changing owner on
//! the bus (a restart). The interval is 15 s, and no cycle runs between the announcement and
//! the repair: the repair is the signal's. A `Reloaded` from anyone but firewalld (`nobody`,
//! through the real `dbus-send`) sets off nothing; firewalld's own, flooding, one check per
//! `firewalld::PACE`.

use super::egress_repair::{Setup, now};
use crate::sessions::bus::FakeFirewalld;
use crate::sessions::login1::forge;
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

const CHECKED: &str = "the firewall was reloaded; checking the workers' traffic filter now";

/// How many checks firewalld's announcements set off so far.
fn checks(s: &Setup) -> usize {
    s.h.log().matches(CHECKED).count()
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

    // Anyone may send a `Reloaded` on the system bus (issue 35): `nobody` does, and root on a
    // connection that is not firewalld's. Nothing is checked for it, and the filter the test
    // took down stays down until firewalld's own announcement, which repairs it at once.
    let forged_then_real = || {
        for _ in 0..3 {
            forge(
                &firewalld.address,
                "/org/fedoraproject/FirewallD1",
                "org.fedoraproject.FirewallD1.Reloaded",
                &[],
            );
        }
        rt.block_on(async {
            zbus::connection::Builder::address(firewalld.address.as_str())
                .unwrap()
                .build()
                .await
                .unwrap()
                .emit_signal(
                    None::<&str>,
                    "/org/fedoraproject/FirewallD1",
                    "org.fedoraproject.FirewallD1",
                    "Reloaded",
                    &(),
                )
                .await
                .unwrap();
        });
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(checks(&s), 0, "a forgery set off a check\n{}", s.h.log());
        assert!(
            s.jumps().len() < 2,
            "the filter was repaired on a forgery: {:?}\n{}",
            s.jumps(),
            s.h.log()
        );
        rt.block_on(firewalld.reloaded());
    };
    let on_forged = repaired_after(&s, forged_then_real) - 3.0;
    assert_eq!(checks(&s), 1, "{}", s.h.log());
    let on_reload = repaired_after(&s, || rt.block_on(firewalld.reloaded()));
    let on_restart = repaired_after(&s, || rt.block_on(firewalld.restart()));
    eprintln!(
        "repaired {on_reload:.3}s after firewalld's Reloaded, {on_restart:.3}s after its restart, {on_forged:.3}s after its Reloaded that followed forgeries (interval 15s)"
    );
    for (what, took) in [
        ("Reloaded", on_reload),
        ("a restart", on_restart),
        ("Reloaded after forgeries", on_forged),
    ] {
        assert!(
            took < 2.0,
            "repaired {took:.3}s after {what}, not at once\n--- pilotd log ---\n{}",
            s.h.log()
        );
    }
    // Its restart is two changes of owner: it left, it came back (both within the burst that
    // passes at once, `bus::BURST`).
    s.h.wait_for("a check for each change", Duration::from_secs(5), || {
        (checks(&s) == 4).then_some(())
    });

    // firewalld itself flooding: what is left of the burst, then one check per pace at most,
    // not one per signal.
    let pace = pilotd_volunteer::act::egress::firewalld::PACE;
    std::thread::sleep(pace);
    let before = checks(&s);
    let t0 = std::time::Instant::now();
    let mut sent = 0;
    while t0.elapsed() < Duration::from_secs(6) {
        rt.block_on(firewalld.reloaded());
        sent += 1;
    }
    std::thread::sleep(pace * 2);
    let set_off = checks(&s) - before;
    eprintln!("{sent} Reloaded in 6 s from firewalld: {set_off} checks");
    assert!(
        (2..=pilotd_volunteer::observe::bus::BURST as usize + 4).contains(&set_off),
        "{set_off} checks for {sent} announcements in 6 s\n{}",
        s.h.log()
    );
}
