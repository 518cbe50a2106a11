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
