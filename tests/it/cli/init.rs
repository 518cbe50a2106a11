//! `pilotd init` as an owner or an install script uses it: piped answers, `--yes` with flags,
//! never overwriting without `--force`, and always a policy `pilotd check` accepts.

use crate::harness::pilotd_without_site as pilotd;
use predicates::prelude::*;
use std::path::Path;

fn check(policy: &Path) {
    pilotd()
        .arg("--policy")
        .arg(policy)
        .arg("check")
        .assert()
        .success();
}

#[test]
fn piped_answers_write_a_policy_check_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("policy.toml");
    // One answer per line; an empty line takes the default; "200%" is asked again.
    let answers = "mon-fri 18:00-08:00; sat,sun 00:00-24:00\nactive\n200%\n75%\n\n4h\npause\nEurope/Rome\npause\n";
    pilotd()
        .args(["init", "--output"])
        .arg(&out)
        .write_stdin(answers)
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("wrote {}", out.display())))
        .stdout(predicate::str::contains("█"))
        .stderr(predicate::str::contains("When may this machine compute?"))
        .stderr(predicate::str::contains(
            "must be above 0% and at most 100%",
        ));
    check(&out);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("{ days = \"mon-fri\", from = \"18:00\", to = \"08:00\" }"),
        "{text}"
    );
    assert!(text.contains("sessions = \"active\""));
    assert!(text.contains("cpus = \"75%\""));
    assert!(
        text.contains("memory = \"50%\""),
        "the empty answer took the default"
    );
    assert!(text.contains("on_return = \"pause\""));
    assert!(text.contains("on_metered = \"pause\""), "{text}");
    assert!(text.contains("timezone = \"Europe/Rome\""));
    assert!(
        text.lines().filter(|l| l.starts_with('#')).count() >= 10,
        "the file is commented"
    );

    // The owner's file is never overwritten by accident.
    pilotd()
        .args(["init", "--yes", "--output"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--force"));
    pilotd()
        .args(["init", "--yes", "--force", "--when", "always", "--output"])
        .arg(&out)
        .assert()
        .success();
    check(&out);
    assert!(
        std::fs::read_to_string(out.with_extension("toml.bak"))
            .unwrap()
            .contains("18:00")
    );
}

#[test]
fn scripted_install_with_flags() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("etc/pilotd/policy.toml");
    pilotd()
        .args([
            "init",
            "--yes",
            "--when",
            "nights",
            "--sessions",
            "ignore",
            "--cpus",
            "2",
        ])
        .args([
            "--memory",
            "4GiB",
            "--longest-job",
            "6h",
            "--on-return",
            "fast",
            "--on-metered",
            "ignore",
            "--timezone",
            "America/Chicago",
        ])
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    check(&out);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("daily")
            && text.contains("sessions = \"ignore\"")
            && text.contains("cpus = \"2\"")
            && text.contains("on_metered = \"ignore\""),
        "{text}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o644
    );
}

#[test]
fn bad_flags_and_missing_answers_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.toml");
    pilotd()
        .args(["init", "--yes", "--on-return", "explode", "--output"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--on-return explode: answer pause, graceful or fast",
        ));
    pilotd()
        .args(["init", "--yes", "--when", "mon 25:00-26:00", "--output"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a time of day"));
    // Input ends after two answers and --yes is not given: nothing is written.
    pilotd()
        .args(["init", "--output"])
        .arg(&out)
        .write_stdin("always\nany\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("end of input"));
    assert!(!out.exists());
}

/// Writing a policy prints what it is expected to give per week; replacing one prints the
/// old one's beside it, so the owner sees what the change is worth.
#[test]
fn a_new_policy_is_projected_beside_the_one_it_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("policy.toml");
    let first = pilotd()
        .args(["init", "--yes", "--when", "nights", "--cpus", "2"])
        .arg("--output")
        .arg(&out)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let first = String::from_utf8(first).unwrap();
    assert!(
        first.contains("what this policy is expected to give per week:")
            && !first.contains("the policy it replaced"),
        "{first}"
    );
    let second = pilotd()
        .args([
            "init", "--yes", "--force", "--when", "always", "--cpus", "2",
        ])
        .arg("--output")
        .arg(&out)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let second = String::from_utf8(second).unwrap();
    let figures: Vec<&str> = second
        .lines()
        .filter(|l| l.contains("CPU-hours a week"))
        .collect();
    assert_eq!(figures.len(), 2, "{second}");
    assert!(
        second.contains("the policy it replaced (kept as .bak) would give:"),
        "{second}"
    );
    // Always open gives more than nights alone, from the same weeks.
    let cpu_hours = |l: &str| l.trim().split(' ').next().unwrap().parse::<f64>().unwrap();
    assert!(cpu_hours(figures[0]) > cpu_hours(figures[1]), "{second}");
}
