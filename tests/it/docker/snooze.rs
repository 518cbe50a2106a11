//! The owner's snooze and resume on the real Docker engine, asked by real processes under
//! other uids (the tests run as root; each client is spawned with setuid/setgid and its own
//! supplementary groups), answered by the real `pilotd run` over its control socket.

use super::volunteer::{Harness, image, policy};
use crate::harness::{self, sh, sh_ok};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `pilotd ARGS` run as `uid`/`gid` with exactly the supplementary `groups`.
fn pilotd_as(h: &Harness, uid: u32, gid: u32, groups: &[u32], args: &[&str]) -> Output {
    let mut c = Command::new(harness::bin());
    c.arg("-c").arg(h.path("pilotd.toml")).args(args);
    c.env_remove("PILOTD_CONFIG").env_remove("PILOTD_POLICY");
    let groups: Vec<nix::unistd::Gid> = groups
        .iter()
        .map(|g| nix::unistd::Gid::from_raw(*g))
        .collect();
    let (uid, gid) = (
        nix::unistd::Uid::from_raw(uid),
        nix::unistd::Gid::from_raw(gid),
    );
    // SAFETY: only async-signal-safe calls between fork and exec. Groups, then gid, then uid:
    // std's own uid() would run before pre_exec and leave no right to set the groups.
    unsafe {
        c.pre_exec(move || {
            nix::unistd::setgroups(&groups)?;
            nix::unistd::setgid(gid)?;
            nix::unistd::setuid(uid)?;
            Ok(())
        });
    }
    c.output().expect("pilotd runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `pilotd` group's gid, created as the Debian package's postinst does when this host
/// has none (a system group with no members: nothing else on the host changes).
fn pilotd_gid() -> u32 {
    let (ok, _) = sh("getent group pilotd >/dev/null");
    if !ok {
        sh_ok("groupadd --system pilotd");
    }
    sh_ok("getent group pilotd | cut -d: -f3").parse().unwrap()
}

/// Two uids that this host's passwd and group databases do not know, from 4242 up: a refusal
/// names a uid with no name, whatever users the machine has.
fn unknown_uids() -> (u32, u32) {
    use nix::unistd::{Gid, Group, Uid, User};
    let mut free = (4242..60000).filter(|&n| {
        matches!(User::from_uid(Uid::from_raw(n)), Ok(None))
            && matches!(Group::from_gid(Gid::from_raw(n)), Ok(None))
    });
    (free.next().unwrap(), free.next().unwrap())
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn snooze_and_resume_by_uid_survive_a_restart() {
    let mut h = Harness::new(
        "snooze",
        &policy("pause", 1),
        "",
        &format!("{}\n[worker.env]\n", image("v1")),
    );
    // The owner names "nobody" (uid 65534) in the policy; the harness puts the socket in the
    // test's own dir, which must be reachable by other uids, as /run/pilotd is.
    let socket = h.path("control.sock");
    h.edit(
        "policy.toml",
        &[("[owner]\n", "[owner]\nusers = [\"nobody\"]\n")],
    );
    std::fs::set_permissions(h.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    let group = pilotd_gid();
    let (stranger, member) = unknown_uids();

    h.start();
    h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "everyone may connect; the credentials decide");

    // A uid that is neither root, nor named, nor in the group: refused, nothing changes.
    let o = pilotd_as(&h, stranger, stranger, &[stranger], &["snooze", "1h"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "refused: uid {stranger} may not snooze or resume this machine"
        )),
        "{}",
        text(&o)
    );
    // The daemon has looked again since (a whole cycle ran after the refusal), still computing.
    h.wait_cycles(2);
    assert_eq!(h.running().len(), 1, "a refused snooze changes nothing");
    assert!(!h.path("state/snooze.json").exists());

    // The named user snoozes: the worker is paused (on_return = "pause") at once.
    let t0 = Instant::now();
    let o = pilotd_as(&h, 65534, 65534, &[65534], &["snooze", "1h"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("snoozed by nobody until")
            && text(&o).contains("running workers: paused"),
        "{}",
        text(&o)
    );
    h.wait_for("the worker paused", Duration::from_secs(5), || {
        h.workers()
            .iter()
            .all(|w| w.state == "paused")
            .then_some(())
    });
    let took = t0.elapsed();
    eprintln!("snooze to paused: {took:?}");
    assert!(took < Duration::from_secs(2), "snooze took {took:?}");

    // plan and status say so.
    let plan = h
        .pilotd()
        .args(["plan", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(v["allowed"], false);
    assert_eq!(v["causes"][0], "snoozed", "{v}");
    let plan = h.pilotd().arg("plan").output().unwrap();
    assert!(
        text(&plan).contains("snoozed by the owner until"),
        "{}",
        text(&plan)
    );
    let status = h.pilotd().arg("status").output().unwrap();
    assert!(
        text(&status).contains("SNOOZED by nobody until"),
        "{}",
        text(&status)
    );

    // A restarted daemon keeps the snooze: the worker stays paused over three cycles.
    h.kill9();
    h.start();
    h.wait_cycles(3);
    let w = h.workers();
    assert!(
        w.len() == 1 && w[0].state == "paused",
        "after a restart: {w:?}\n{}",
        h.log()
    );

    // A member of the pilotd group (by its process's groups) resumes: running again.
    let o = pilotd_as(&h, member, member, &[member, group], &["resume"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("resumed by uid {member}")),
        "{}",
        text(&o)
    );
    h.wait_for("the worker running again", Duration::from_secs(5), || {
        (h.running().len() == 1).then_some(())
    });
    assert!(!h.path("state/snooze.json").exists());
    h.term();
    assert!(!socket.exists(), "a clean stop removes its socket");
}
