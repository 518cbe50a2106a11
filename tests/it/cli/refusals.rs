//! What `check` refuses so that the daemon never meets it: values past what the date
//! arithmetic can hold, network modes and image patterns that undo the worker's box, broken
//! small settings, and files others could change or read. Each refusal is exit 2 with
//! FILE:LINE:COL (or the file and the fix), never a panic (exit 101).

use crate::harness::{self, repo};
use assert_cmd::Command;
use predicates::prelude::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `pilotd -c SITE --policy POLICY check`, both written into `dir` (mode 644, root's).
fn check(dir: &Path, site: &str, policy: &str) -> assert_cmd::assert::Assert {
    let s = dir.join("pilotd.toml");
    let p = dir.join("policy.toml");
    std::fs::write(&s, site).unwrap();
    std::fs::write(&p, policy).unwrap();
    Command::new(harness::bin())
        .arg("-c")
        .arg(&s)
        .arg("--policy")
        .arg(&p)
        .arg("check")
        .env("TZ", "UTC")
        .assert()
}

fn at(dir: &Path, file: &str, line: usize, col: usize) -> String {
    format!("{}:{line}:{col}: ", dir.join(file).display())
}

#[test]
fn durations_past_a_hundred_years_are_refused_at_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    check(
        d,
        "interval = \"18446744073709551615\"\n[worker]\nmax_lifetime = \"300000years\"\n",
        "",
    )
    .code(2)
    .stderr(predicate::str::contains(format!(
        "{}duration `18446744073709551615` is too long",
        at(d, "pilotd.toml", 1, 12)
    )))
    .stderr(predicate::str::contains("at most 100 years"));
    check(d, "[worker]\nmax_lifetime = \"300000years\"\n", "")
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{}duration `300000years` is too long",
            at(d, "pilotd.toml", 2, 16)
        )));
    check(
        d,
        "",
        "[schedule]\nevict_before_end = \"300000years\"\n[owner]\nbusy_for = \"300000years\"\nfree_for = 9999999999999\n",
    )
    .code(2)
    .stderr(predicate::str::contains(format!(
        "{}duration `300000years` is too long",
        at(d, "policy.toml", 2, 20)
    )))
    .stderr(predicate::str::contains(format!(
        "{}duration `300000years` is too long",
        at(d, "policy.toml", 4, 12)
    )))
    .stderr(predicate::str::contains(format!(
        "{}duration `9999999999999` is too long",
        at(d, "policy.toml", 5, 12)
    )));
}

#[test]
fn instants_past_year_9999_are_refused_not_panicked_on() {
    for now in ["8210266876799", "-1", "9999-12-31T23:30:00-01:00"] {
        harness::pilotd_without_site()
            .arg("--policy")
            .arg(repo("policies/default.toml"))
            .args(["plan", "--snapshot"])
            .arg(harness::fixture("volunteer/evening-free.json"))
            .args([format!("--now={now}")])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!("--now {now}")))
            .stderr(predicate::str::contains("9999-12-31T23:59:59Z"));
    }
    harness::pilotd_without_site()
        .arg("--policy")
        .arg(repo("policies/default.toml"))
        .args(["schedule", "--now", "8210266876799"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("out of range"));
    // The last accepted second still plans (no overflow just inside the range).
    harness::pilotd_without_site()
        .arg("--policy")
        .arg(repo("policies/default.toml"))
        .args(["schedule", "--now", "253402300799"])
        .assert()
        .success();
}

#[test]
fn host_and_container_networks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for net in ["host", "container:abc123"] {
        check(d, &format!("[worker]\nnetwork = \"{net}\"\n"), "")
            .code(2)
            .stderr(predicate::str::contains(format!(
                "{}[worker] network = \"{net}\" would put jobs past every filter",
                at(d, "pilotd.toml", 2, 11)
            )));
    }
    check(d, "[worker]\nnetwork = \"bridge\"\n", "").success();
}

#[test]
fn image_patterns_with_a_partial_name_star_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    check(
        d,
        "[worker]\nimage = \"registry.example/osg-evil/ep:1\"\nallowed_images = [\"registry.example/osg*\"]\n",
        "",
    )
    .code(2)
    .stderr(predicate::str::contains(format!(
        "{}[worker] allowed_images: pattern `registry.example/osg*`",
        at(d, "pilotd.toml", 3, 19)
    )))
    .stderr(predicate::str::contains(
        "worker image `registry.example/osg-evil/ep:1` is not in allowed_images",
    ));
    check(
        d,
        "[worker]\nimage = \"registry.example/osg/ep:1\"\nallowed_images = [\"registry.example/osg/*\"]\n",
        "",
    )
    .success();
}

#[test]
fn the_small_gaps_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let site =
        "[log]\nlevel = \"info,pilotd=loud[\"\n[worker.env]\n\"A=B\" = \"x\"\n\"\" = \"y\"\n";
    check(d, site, "")
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{}[log] level `info,pilotd=loud[` is not a log filter",
            at(d, "pilotd.toml", 2, 9)
        )))
        .stderr(predicate::str::contains(format!(
            "{}[worker.env] key `A=B` is not an environment variable name",
            at(d, "pilotd.toml", 4, 9)
        )))
        .stderr(predicate::str::contains(format!(
            "{}[worker.env] key `` is not an environment variable name",
            at(d, "pilotd.toml", 5, 6)
        )));
    // The policy is read once pilotd.toml is valid.
    check(
        d,
        "",
        "[share]\nmemory = \"0\"\ngpus = 1000\ndisk = \"0GiB\"\n",
    )
    .code(2)
    .stderr(predicate::str::contains(format!(
        "{}memory = \"0\" shares nothing",
        at(d, "policy.toml", 2, 10)
    )))
    .stderr(predicate::str::contains(format!(
        "{}gpus = 1000 is more than this machine's",
        at(d, "policy.toml", 3, 8)
    )))
    .stderr(predicate::str::contains(format!(
        "{}disk = \"0GiB\" shares nothing",
        at(d, "policy.toml", 4, 8)
    )));
}

fn write_mode(path: &PathBuf, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
#[ignore = "needs root (a root daemon's StrictModes): tests/run.sh runs it as root"]
fn files_others_can_change_or_read_are_refused_when_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "StrictModes is a root daemon's rule: run this test as root (tests/run.sh does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = d.join("pool.token");
    let site = format!("[worker]\ntoken_file = \"{}\"\n", token.display());
    // Missing.
    check(d, &site, "")
        .code(2)
        .stderr(predicate::str::contains(token.display().to_string()))
        .stderr(predicate::str::contains("must exist"));
    // Readable by everyone.
    write_mode(&token, "t\n", 0o644);
    check(d, &site, "")
        .code(2)
        .stderr(predicate::str::contains(
            "the pool token is readable by everyone (mode 644)",
        ))
        .stderr(predicate::str::contains(format!(
            "chown root:root {0} && chmod 600 {0}",
            token.display()
        )));
    write_mode(&token, "t\n", 0o600);
    check(d, &site, "").success();
    // Owned by someone else.
    nix::unistd::chown(&token, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    check(d, &site, "").code(2).stderr(predicate::str::contains(
        "the pool token is owned by uid 65534, not root",
    ));
    nix::unistd::chown(&token, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    // pilotd.toml writable by its group.
    let s = d.join("pilotd.toml");
    check(d, &site, "").success();
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o664)).unwrap();
    Command::new(harness::bin())
        .arg("-c")
        .arg(&s)
        .arg("--policy")
        .arg(d.join("policy.toml"))
        .arg("check")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "pilotd.toml is writable by its group (mode 664)",
        ))
        .stderr(predicate::str::contains("chmod 644"));
}

#[test]
fn oversized_files_are_refused_before_they_are_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A comment line repeated past 1 MiB: valid TOML, but no policy is that large.
    let huge = "# padding padding padding padding padding padding padding padding\n".repeat(20_000);
    check(d, "", &huge)
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{} is larger than 1048576 bytes",
            d.join("policy.toml").display()
        )));
    check(d, &huge, "")
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{} is larger than 1048576 bytes",
            d.join("pilotd.toml").display()
        )));
}

/// Metrics bound beyond loopback are served (a site may want that) but `check` says so, at the
/// key's position; loopback is said nothing about.
#[test]
fn metrics_beyond_loopback_are_warned_at_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (listen, beyond) in [
        ("0.0.0.0:9464", true),
        ("[::]:9464", true),
        ("192.0.2.7:9464", true),
        ("[::ffff:192.0.2.7]:9464", true),
        ("127.0.0.1:9464", false),
        ("[::1]:9464", false),
        ("[::ffff:127.0.0.1]:9464", false),
    ] {
        let a = check(
            d,
            &format!("interval = \"30s\"\n\n[metrics]\nlisten = \"{listen}\"\n"),
            "",
        )
        .success();
        let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
        let warning = format!(
            "{}warning: [metrics] listen = \"{listen}\" serves the metrics beyond loopback",
            at(d, "pilotd.toml", 4, 10)
        );
        assert_eq!(out.contains(&warning), beyond, "{listen}: {out}");
        assert_eq!(out.contains("hint: listen on 127.0.0.1"), beyond, "{out}");
    }
}

/// The stored manifest is held at `check` to the rule a fetch is: one that sets env outside the
/// pool's namespaces is named with why (the daemon would refuse it and wait for a fresh one).
#[test]
fn check_warns_when_the_stored_manifest_would_be_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("state")).unwrap();
    let site = format!(
        "state_dir = \"{}/state\"\n[remote]\nurl = \"https://pool.example.org/m.toml\"\n",
        d.display()
    );
    std::fs::write(
        d.join("state/manifest.toml"),
        "version = \"3\"\n[worker.env]\nGLIDEIN_Site = \"X\"\n",
    )
    .unwrap();
    let a = check(d, &site, "").success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(!out.contains("warning"), "{out}");
    std::fs::write(
        d.join("state/manifest.toml"),
        "version = \"4\"\n[worker.env]\nGLIDEIN_Site = \"X\"\nGLIBC_TUNABLES = \"glibc.rtld.x=1\"\n",
    )
    .unwrap();
    let a = check(d, &site, "").success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains(&format!(
            "warning: remote manifest {}/state/manifest.toml was refused: env GLIBC_TUNABLES may not come from a remote manifest: it steers the loader or the C library",
            d.display()
        )),
        "{out}"
    );
}

/// How a file others could change is made so, and what the refusal says of it.
struct Fault {
    what: &'static str,
    make: fn(&Path),
    says: fn(&str) -> String,
}

fn chown(path: &Path, uid: u32) {
    nix::unistd::chown(path, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Every way someone but root could change a file pilotd obeys: its group or everyone may
/// write it, it is someone else's, or its directory is writable by others.
fn faults() -> [Fault; 4] {
    [
        Fault {
            what: "group-writable",
            make: |p| chmod(p, 0o664),
            says: |name| format!("{name} is writable by its group (mode 664)"),
        },
        Fault {
            what: "world-writable",
            make: |p| chmod(p, 0o666),
            says: |name| format!("{name} is writable by everyone (mode 666)"),
        },
        Fault {
            what: "owned by nobody",
            make: |p| chown(p, 65534),
            says: |name| format!("{name} is owned by uid 65534, not root"),
        },
        Fault {
            what: "in a directory everyone may write",
            make: |p| chmod(p.parent().unwrap(), 0o777),
            says: |name| format!("holding {name} is writable by everyone (mode 777)"),
        },
    ]
}

/// Moves the Setup's policy into a directory of its own (`owner/`), so that its directory can
/// be opened to others while pilotd.toml's is not; its path.
fn policy_in_its_own_directory(s: &crate::service::Setup) -> PathBuf {
    let dir = s.path("owner");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o700);
    let policy = dir.join("policy.toml");
    std::fs::rename(s.path("policy.toml"), &policy).unwrap();
    let site = std::fs::read_to_string(s.path("pilotd.toml")).unwrap();
    let old = format!("policy = \"{}\"", s.path("policy.toml").display());
    assert!(site.contains(&old), "{site}");
    std::fs::write(
        s.path("pilotd.toml"),
        site.replace(&old, &format!("policy = \"{}\"", policy.display())),
    )
    .unwrap();
    policy
}

/// Puts the file (and its directory) back as root keeps them.
fn restore(path: &Path) {
    chown(path, 0);
    chmod(path, 0o644);
    chmod(path.parent().unwrap(), 0o700);
}

/// pilotd.toml and the owner's policy, each made changeable by someone but root in every
/// way: `check` refuses it (exit 2, the file, why, the fix), and so does `run`, which never
/// gets to its first cycle; restored, both are taken.
#[test]
#[ignore = "needs root (a root daemon's StrictModes): tests/run.sh runs it as root"]
fn check_and_run_refuse_pilotd_toml_and_the_policy_when_others_can_change_them() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "StrictModes is a root daemon's rule: run this test as root (tests/run.sh does)"
    );
    let s = crate::service::Setup::new("");
    let policy = policy_in_its_own_directory(&s);
    for (path, name) in [
        (s.path("pilotd.toml"), "pilotd.toml"),
        (policy, "the owner's policy"),
    ] {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        for f in faults() {
            (f.make)(&path);
            let why = (f.says)(name);
            let check = s.cmd().arg("check").output().unwrap();
            let err = String::from_utf8_lossy(&check.stderr);
            assert_eq!(
                check.status.code(),
                Some(2),
                "check, {file} {}: {err}",
                f.what
            );
            assert!(
                err.contains(&format!("refusing to use {}", path.display())) && err.contains(&why),
                "check, {file} {}: {err}",
                f.what
            );
            assert!(
                err.contains("hint: only root may be able to change it"),
                "{err}"
            );
            let mut run = s
                .cmd()
                .arg("run")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let status = crate::service::wait_exit(&mut run, std::time::Duration::from_secs(20));
            let mut err = String::new();
            std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut err).unwrap();
            assert_eq!(status.code(), Some(2), "run, {file} {}: {err}", f.what);
            assert!(err.contains(&why), "run, {file} {}: {err}", f.what);
            assert!(
                !s.path("state/status.json").exists(),
                "run, {file} {}: no cycle ran",
                f.what
            );
            restore(&path);
        }
    }
    let check = s.cmd().arg("check").output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// A running daemon sent SIGHUP after one of its files became changeable by someone but root
/// (and was changed): it refuses the new file, says why and that it keeps the last good
/// configuration, and goes on cycling; the same content, put back as root keeps it, is taken.
#[test]
#[ignore = "needs root (a root daemon's StrictModes): tests/run.sh runs it as root"]
fn a_reload_refuses_a_file_others_can_change_and_keeps_the_last_good_one() {
    use crate::service::{lines, signal, wait_exit, wait_line};
    use nix::sys::signal::Signal;
    use std::time::{Duration, Instant};
    assert!(
        nix::unistd::geteuid().is_root(),
        "StrictModes is a root daemon's rule: run this test as root (tests/run.sh does)"
    );
    let s = crate::service::Setup::new("");
    policy_in_its_own_directory(&s);
    let mut child = s.run();
    let log = lines(&mut child);
    let mut seen = Vec::new();
    wait_line(&log, "decision:", &mut seen);
    let status = s.path("state/status.json");
    let cycles_go_on = |child: &mut std::process::Child| {
        let before = std::fs::metadata(&status).unwrap().modified().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(&status).unwrap().modified().unwrap() <= before {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the daemon must keep running"
            );
            assert!(
                Instant::now() < deadline,
                "no cycle wrote the status in 10 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let policy = s.path("owner/policy.toml");
    let site = s.path("pilotd.toml");
    let changed_policy = format!(
        "{}[share]\nworkers = 1\n",
        std::fs::read_to_string(&policy).unwrap()
    );
    let changed_site = format!(
        "{}\n[log]\nlevel = \"debug\"\n",
        std::fs::read_to_string(&site).unwrap()
    );
    for (path, name, changed) in [
        (&policy, "the owner's policy", &changed_policy),
        (&site, "pilotd.toml", &changed_site),
    ] {
        for f in faults() {
            std::fs::write(path, changed).unwrap();
            (f.make)(path);
            signal(&child, Signal::SIGHUP);
            let line = wait_line(&log, "keeping the last good configuration", &mut seen);
            assert!(line.contains("reload failed"), "{line}");
            assert!(
                line.contains(&format!("refusing to use {}", path.display()))
                    && line.contains(&(f.says)(name)),
                "{name} {}: {line}",
                f.what
            );
            assert!(!line.contains("configuration reloaded"), "{line}");
            cycles_go_on(&mut child);
            // The same content, as root keeps it, is taken.
            restore(path);
            signal(&child, Signal::SIGHUP);
            wait_line(&log, "configuration reloaded", &mut seen);
        }
    }
    signal(&child, Signal::SIGTERM);
    let status = wait_exit(&mut child, Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
}
