//! The volunteer-mode CLI as an owner uses it: check, plan, snapshot, schedule, and every
//! class of bad input (exit 2, FILE:LINE:COL, never a panic).

use crate::harness::{self, repo};
use assert_cmd::Command;
use predicates::prelude::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    harness::fixture(&format!("volunteer/{name}"))
}

/// pilotd with no pilotd.toml (built-in defaults) and the given policy.
fn pilotd(policy: &Path) -> Command {
    let mut c = harness::pilotd_without_site();
    c.arg("--policy").arg(policy);
    c
}

#[test]
fn check_accepts_every_shipped_policy() {
    for p in ["default", "nights-and-weekends", "dedicated-server"] {
        let path = repo(&format!("policies/{p}.toml"));
        pilotd(&path)
            .arg("check")
            .assert()
            .success()
            .stdout(predicate::str::contains("built-in defaults"))
            .stdout(predicate::str::contains(format!("{p}.toml: ok")));
    }
}

#[test]
fn check_prints_every_problem_with_file_line_col() {
    // The fixture, with a CPU share one larger than this machine, so that refusal is checked
    // on any machine (the value starts at the same column).
    let cpus = std::thread::available_parallelism().unwrap().get();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken-policy.toml");
    let text = std::fs::read_to_string(fixture("broken-policy.toml")).unwrap();
    assert!(text.contains("cpus = 64"), "the fixture changed");
    std::fs::write(
        &path,
        text.replace("cpus = 64", &format!("cpus = {}", cpus + 1)),
    )
    .unwrap();
    let out = pilotd(&path)
        .arg("check")
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(out).unwrap();
    let f = path.display().to_string();
    for expected in [
        format!("{f}:1:12: unknown time zone `Europe/Rom`"),
        format!("{f}:5:44: window from 19:00 to 19:00 is empty"),
        format!("{f}:6:12: unknown day `funday`"),
        format!("{f}:6:29: `25:00` is not a time of day"),
        format!("{f}:10:13: unknown on_return rule `explode`"),
        format!("{f}:11:17: percentage `120%` must be above 0% and at most 100%"),
        format!("{f}:15:11: workers = 0 is out of range"),
        format!("{f}:18:15: longest_job 1day 6h is longer than the workers' max_lifetime 1day"),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in:\n{err}");
    }
    assert!(
        err.contains(&format!(
            "{f}:14:8: cpus share {} is more than this machine's",
            cpus + 1
        )),
        "{err}"
    );
    assert!(err.matches("\n  hint: ").count() >= 8, "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn syntax_errors_unknown_keys_and_wrong_types_have_positions() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[share\ncpus = 1\n", ":1:7:"),
        (
            "[owner]\nsesions = \"any\"\n",
            ":2:1: unknown field `sesions`",
        ),
        ("[share]\ngpus = \"two\"\n", ":2:8:"),
        (
            "[schedule]\nwindows = [{ days = \"mon\", from = \"09:00\" }]\n",
            ":2:12: missing field `to`",
        ),
    ];
    for (i, (src, expected)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("p{i}.toml"));
        std::fs::write(&p, src).unwrap();
        pilotd(&p)
            .arg("check")
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!(
                "{}{expected}",
                p.display()
            )));
    }
}

#[test]
fn unreadable_files_are_named() {
    pilotd(Path::new("/nonexistent/policy.toml"))
        .arg("check")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cannot read /nonexistent/policy.toml",
        ))
        .stderr(predicate::str::contains("pilotd init"));
    // An explicit pilotd.toml that does not exist is required... only for `run`; a directory
    // given as the config is unreadable and named.
    let dir = tempfile::tempdir().unwrap();
    Command::new(harness::bin())
        .arg("-c")
        .arg(dir.path())
        .arg("--policy")
        .arg(repo("policies/default.toml"))
        .arg("check")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "cannot read {}",
            dir.path().display()
        )));
}

#[test]
fn bad_pilotd_toml_is_reported_with_position() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("pilotd.toml");
    std::fs::write(
        &site,
        "mode = \"volunteer\"\n[worker]\nimage = \"ospool-ep:latest\"\n",
    )
    .unwrap();
    Command::new(harness::bin())
        .arg("-c")
        .arg(&site)
        .arg("--policy")
        .arg(repo("policies/default.toml"))
        .arg("check")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{}:3:9: worker image `ospool-ep:latest` is not fully qualified",
            site.display()
        )));
}

#[test]
fn policy_writable_by_others_is_refused_when_root() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("policy.toml");
    std::fs::write(&p, "").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    let a = pilotd(&p).arg("check").assert();
    if nix::unistd::geteuid().is_root() {
        a.code(2)
            .stderr(predicate::str::contains("refusing to use"))
            .stderr(predicate::str::contains("writable by everyone"))
            .stderr(predicate::str::contains("chmod 644"));
    } else {
        // StrictModes applies to a root daemon only.
        a.success();
    }
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    pilotd(&p).arg("check").assert().success();
}

#[test]
fn plan_replays_a_snapshot_deterministically() {
    let run = || {
        let out = pilotd(&fixture("rome.toml"))
            .args([
                "plan",
                "--format",
                "json",
                "--now",
                "2026-12-01T21:30:00Z",
                "--snapshot",
            ])
            .arg(fixture("evening-free.json"))
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        serde_json::from_slice::<serde_json::Value>(&out).unwrap()
    };
    let a = run();
    assert_eq!(a, run());
    assert_eq!(a["mode"], "volunteer");
    assert_eq!(a["now"], "2026-12-01T21:30:00Z");
    assert_eq!(a["allowed"], true);
    assert_eq!(a["workers"], 1);
    assert_eq!(a["per_worker"]["cpus"], 4);
    assert_eq!(a["per_worker"]["memory_mib"], 8000);
    // Tuesday 22:30 in Rome; the night ends Wednesday 07:30 CET = 06:30Z, minus 10 minutes.
    assert_eq!(a["die_at"], "2026-12-02T06:20:00Z");
    assert_eq!(a["accept_until"], "2026-12-01T22:20:00Z");
    assert_eq!(a["evict"], "none");
    assert_eq!(a["next_change"], "2026-12-01T22:20:00Z");
    assert!(!a["reasons"].as_array().unwrap().is_empty());
    assert!(a["actions"].is_array());
}

#[test]
fn plan_with_an_owner_logged_in_evicts() {
    let out = pilotd(&fixture("rome.toml"))
        .args(["plan", "--format", "json", "--snapshot"])
        .arg(fixture("evening-alice.json"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let a: serde_json::Value = serde_json::from_slice(&out).unwrap();
    // Without --now the snapshot's own instant is used.
    assert_eq!(a["now"], "2026-12-01T21:30:00Z");
    assert_eq!(a["allowed"], false);
    assert_eq!(a["workers"], 0);
    assert_eq!(a["evict"], "graceful");
    assert!(
        a["reasons"][0]
            .as_str()
            .unwrap()
            .contains("alice logged in")
    );
}

#[test]
fn plan_text_explains_itself() {
    pilotd(&fixture("rome.toml"))
        .args(["plan", "--snapshot"])
        .arg(fixture("evening-alice.json"))
        .assert()
        .success()
        .stdout(predicate::str::contains("DO NOT START"))
        .stdout(predicate::str::contains("alice logged in"))
        // The eviction is announced only where workers may run: the engine here lists none of
        // this instance's, or cannot be asked at all.
        .stdout(
            predicate::str::contains("running workers: none\n").or(predicate::str::contains(
                "running workers (if any): evict (graceful)",
            )),
        );
}

#[test]
fn bad_snapshots_and_bad_now_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing_field = dir.path().join("s.json");
    let src = std::fs::read_to_string(fixture("evening-free.json")).unwrap();
    std::fs::write(&missing_field, src.replace("  \"cpus\": 8,\n", "")).unwrap();
    pilotd(&fixture("rome.toml"))
        .arg("plan")
        .arg("--snapshot")
        .arg(&missing_field)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{}:",
            missing_field.display()
        )))
        .stderr(predicate::str::contains("missing field `cpus`"));

    let garbage = dir.path().join("g.json");
    std::fs::write(&garbage, "{\"mode\": \"volunteer\",\n  \"cpus\": ]").unwrap();
    pilotd(&fixture("rome.toml"))
        .arg("plan")
        .arg("--snapshot")
        .arg(&garbage)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{}:2:11:",
            garbage.display()
        )));

    pilotd(&fixture("rome.toml"))
        .args(["plan", "--now", "yesterday", "--snapshot"])
        .arg(fixture("evening-free.json"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--now yesterday"));

    pilotd(&fixture("rome.toml"))
        .args(["plan", "--snapshot", "/nonexistent/snap.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cannot read /nonexistent/snap.json",
        ));
}

#[test]
fn snapshot_prints_the_contract_and_plan_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = pilotd(&repo("policies/default.toml"))
        .arg("snapshot")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    for key in [
        "mode",
        "taken_at",
        "cpus",
        "load",
        "cpu_busy",
        "own_cpu",
        "memory_total_kib",
        "memory_available_kib",
        "scratch_free_kib",
        "on_battery",
        "exclusive_running",
        "sessions",
        "owner_busy_since",
        "host_free_since",
    ] {
        assert!(v.get(key).is_some(), "snapshot lacks {key}: {v}");
    }
    assert_eq!(v["mode"], "volunteer");
    assert_eq!(
        v["cpus"].as_u64().unwrap() as usize,
        std::thread::available_parallelism().unwrap().get()
    );
    let f = dir.path().join("snap.json");
    std::fs::write(&f, &out).unwrap();
    pilotd(&repo("policies/default.toml"))
        .args(["plan", "--format", "json", "--snapshot"])
        .arg(&f)
        .assert()
        .success();
}

/// `schedule` ends with what the policy would give per week: replayed from the presence
/// timeline the daemon recorded in the state dir, or from stated defaults on a fresh machine.
#[test]
fn schedule_projects_the_recorded_weeks() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("pilotd.toml");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    // No fleet spread: its hold of the first start depends on the machine id.
    std::fs::write(
        &site,
        format!("splay = \"0s\"\nstate_dir = \"{}\"\n", state.display()),
    )
    .unwrap();
    let schedule = || {
        let out = Command::new(harness::bin())
            .env_remove("PILOTD_CONFIG")
            .env_remove("PILOTD_POLICY")
            .env("TZ", "UTC")
            .arg("-c")
            .arg(&site)
            .arg("--policy")
            .arg(repo("policies/dedicated-server.toml"))
            .args(["schedule", "--now", "2026-11-30T12:00:00Z", "--days", "1"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        String::from_utf8(out).unwrap()
    };
    let fresh = schedule();
    assert!(
        fresh.contains("what this policy is expected to give per week:")
            && fresh.contains("from defaults, less than a day recorded here yet"),
        "{fresh}"
    );
    // Two days watched, nobody there (2026-11-23 to 25), then a day the owner was logged in
    // (ignored by this policy) with a 90 % load: the CPU rule closes it. Instants in Unix ms.
    std::fs::write(
        state.join("timeline.json"),
        r#"{"version":1,"runs":[
            {"from":1795392000000,"until":1795564800000},
            {"from":1795564800000,"until":1795651200000,
             "presence":{"session":{}},"owner_cpu_pct":90}]}"#,
    )
    .unwrap();
    let out = schedule();
    let line = out
        .lines()
        .find(|l| l.contains("CPU-hours a week"))
        .unwrap_or_else(|| panic!("{out}"));
    // Open two of the three days, less the 5 minutes free before the first start: 7/3 of
    // that a week.
    let open = (48.0 - 5.0 / 60.0) * 7.0 / 3.0;
    assert!(
        line.contains(&format!("{open:.1} h open to the pool")),
        "{line}"
    );
    assert!(
        out.contains("from 3.0 recorded day(s) of this machine's presence"),
        "{out}"
    );
    // A damaged timeline: the defaults, and why.
    std::fs::write(state.join("timeline.json"), "{").unwrap();
    let out = schedule();
    assert!(
        out.contains("from defaults")
            && out.contains("presence timeline")
            && out.contains("corrupted"),
        "{out}"
    );
    assert!(
        state.join("timeline.json").exists(),
        "schedule moves nothing"
    );
}

#[test]
fn schedule_draws_the_week() {
    let out = pilotd(&repo("policies/default.toml"))
        .args(["schedule", "--now", "2026-11-30T12:00:00Z", "--days", "7"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.len() > 12 && l.chars().nth(3) == Some(' '))
        .collect();
    assert!(out.contains("Mon 30 Nov"), "{out}");
    assert!(out.contains("Sun 06 Dec"), "{out}");
    // Saturday is all compute; Monday computes until 07:30 minus the guard band and from 19:00.
    let sat = rows.iter().find(|r| r.starts_with("Sat 05 Dec")).unwrap();
    assert!(sat.chars().skip(12).all(|c| c == '█'), "{sat}");
    let mon = rows.iter().find(|r| r.starts_with("Mon 30 Nov")).unwrap();
    let cells: Vec<char> = mon.chars().skip(12).collect();
    assert_eq!(&cells[..14].iter().collect::<String>(), &"█".repeat(14));
    assert_eq!(cells[14], '▒');
    assert_eq!(cells[20], '·');
    assert_eq!(cells[40], '█');
    assert!(out.contains("50% CPUs"), "{out}");
    pilotd(&repo("policies/default.toml"))
        .args(["schedule", "--days", "0"])
        .assert()
        .code(2);
}
