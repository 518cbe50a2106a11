//! What this machine tells the pool about itself: ClassAd attribute lines that the workers'
//! pilots put in their slot ads (startd cron), so a site sees its fleet with
//! `condor_status -af PILOTD_VERSION PILOTD_INSTANCE ...`: which pilotd and instance, and what
//! limits the machine now (the window's end, a snooze, the eviction mode).
//!
//! pilotd writes the lines to `<state_dir>/ad/slot.ad` whenever they change (atomically, by the
//! state files' writer, which follows no link planted in the directory: a
//! rename in the same directory) and bind-mounts that directory read-only at `/pilotd` in
//! every worker; the site passes `PILOT_AD_FILE = "{ad_file}"` to turn it on in its pilots
//! (docs/site.md, "The fleet in the pool"). Only "when" reaches the pool, never what the
//! owner does: the window's end, whether a snooze holds, and the decision's causes, the
//! schedule's by name and all of the owner's as the one word `owner` (`published`;
//! docs/owner.md, "What the pool learns about this machine").
//!
//! What the machine gave is the donor's: this ISO week's figures (`contribution`: CPU-hours,
//! jobs, work lost) are added only when the site turns it on (`[slot_ad] contribution`).
//!
//! `render` and `contribution` are pure (they take `now` or the figures); `save` is the one
//! write.

use crate::decide::policy::calendar::{self, Period};
use crate::decide::policy::{Cause, Supply};
use crate::record::contribution::Tally;
use crate::snapshot::HostSnapshot;
use crate::worker::ad;
use chrono::{DateTime, Utc};
use pilotd_core::config::Policy;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub(crate) enum SlotAdError {
    #[error(
        "cannot write the slot-ad file {path}: {source}; workers keep advertising the last one"
    )]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The attribute lines for the machine as decided at `now`.
pub(crate) fn render(
    instance: &str,
    policy: &Policy,
    host: &HostSnapshot,
    supply: &Supply,
    now: DateTime<Utc>,
) -> String {
    let window_end = match calendar::period_at(&policy.windows, &policy.timezone, now) {
        Period::Open { ends: Some(t) } => t.timestamp().to_string(),
        // Always open within the horizon, or closed now: no end to advertise.
        Period::Open { ends: None } | Period::Closed { .. } => "undefined".into(),
    };
    let snoozed = host.snoozed_until.is_some_and(|t| t > now) || host.snooze_unreadable.is_some();
    let mut causes: Vec<&str> = Vec::new();
    for c in supply.causes.iter().map(|c| published(*c)) {
        if !causes.contains(&c) {
            causes.push(c);
        }
    }
    let lines = [
        ("PILOTD_VERSION", quoted(env!("CARGO_PKG_VERSION"))),
        ("PILOTD_INSTANCE", quoted(instance)),
        ("PILOTD_COMPUTING", boolean(supply.allowed)),
        ("PILOTD_WINDOW_END", window_end),
        ("PILOTD_SNOOZED", boolean(snoozed)),
        ("PILOTD_ON_RETURN", quoted(policy.on_return.as_str())),
        ("PILOTD_EVICTION", quoted(supply.evict.as_str())),
        ("PILOTD_CAUSES", quoted(&causes.join(","))),
    ];
    ad(&lines)
}

/// The week's contribution as attribute lines, for a site that turned it on: the ISO week
/// (`week`, as the ledger names it) and its figures from the ledger (`t`), hours with one
/// decimal so the file changes every few minutes of computing, not every cycle.
pub(crate) fn contribution(week: &str, t: &Tally) -> String {
    let hours = |secs: f64| format!("{:.1}", secs.max(0.0) / 3600.0);
    let lines = [
        ("PILOTD_CONTRIBUTION_WEEK", quoted(week)),
        ("PILOTD_CPU_HOURS_WEEK", hours(t.cpu_seconds)),
        ("PILOTD_COMPUTING_HOURS_WEEK", hours(t.computing_s as f64)),
        ("PILOTD_JOBS_WEEK", t.jobs.completed.to_string()),
        ("PILOTD_JOBS_VACATED_WEEK", t.jobs.vacated.to_string()),
        (
            "PILOTD_LOST_CPU_HOURS_WEEK",
            hours(t.jobs.vacated_cpu_seconds),
        ),
    ];
    ad(&lines)
}

/// ClassAd lines, `KEY = value` each.
fn ad(lines: &[(&str, String)]) -> String {
    lines.iter().map(|(k, v)| format!("{k} = {v}\n")).collect()
}

/// A cause as the pool may see it: the schedule's own by name (they say "when", which the
/// window's end says too), and every cause that comes from the owner or their machine as the
/// one word `owner`, so the pool never learns whether the owner is at the keyboard, busy on
/// the CPU, on battery or running a program that wants the machine alone. A new cause must be
/// placed here: the match has no catch-all.
fn published(c: Cause) -> &'static str {
    match c {
        Cause::OutsideSchedule
        | Cause::GuardBand
        | Cause::TooLittleTime
        | Cause::FleetSplay
        | Cause::Free => c.as_str(),
        Cause::Snoozed
        | Cause::SessionsUnknown
        | Cause::OwnerPresent
        | Cause::Sleeping
        | Cause::OnBattery
        | Cause::ExclusiveProcess
        | Cause::OwnerCpuHigh
        | Cause::OwnerCpuEvict
        | Cause::WaitingFreeFor
        | Cause::NoRoom
        | Cause::Comfort
        // Where the machine is (a phone's hotspot) is the owner's business too.
        | Cause::Metered
        // The owner's data plan.
        | Cause::DataCap => OWNER,
    }
}

/// The one cause name that stands for all of the owner's.
pub(crate) const OWNER: &str = "owner";

fn boolean(b: bool) -> String {
    if b { "True" } else { "False" }.into()
}

/// A ClassAd string literal. The values are pilotd's own (a version, the instance name the
/// site configured, cause names), but the instance is the site's text: escape it anyway.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes `text` as `<dir>/slot.ad`, readable by every worker's uid, replacing the old file
/// in one rename (a pilot reading it sees the old lines or the new ones, never half). The
/// state files' writer does it: its temporary file has a name no one can predict and is
/// created without following links, so a link planted in the directory redirects nothing.
pub(crate) fn save(dir: &Path, text: &str) -> Result<(), SlotAdError> {
    use std::os::unix::fs::DirBuilderExt;
    let path = dir.join(ad::FILE);
    let err = |source| SlotAdError::Write {
        path: path.clone(),
        source,
    };
    // Workers read it through the bind mount under their own uid: the directory is theirs
    // to traverse.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(err)?;
    pilotd_core::service::state_file::write_atomically_with_mode(&path, text.as_bytes(), 0o644)
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::policy::{Cause, Limits, decide};
    use chrono::TimeZone;
    use pilotd_core::config::Evict;
    use pilotd_core::config::policy::Window;
    use pilotd_core::config::units::{parse_days, parse_time_of_day};

    const LIMITS: Limits = Limits {
        max_lifetime: std::time::Duration::from_secs(24 * 3600),
        likely_free_until: None,
        splay: crate::splay::Splay::OFF,
        started: None,
        data: None,
    };

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, h, m, 0).unwrap()
    }

    /// Days, 08:00-23:00, every day, in UTC; the owner's return pauses.
    fn evening() -> Policy {
        let mut p = Policy::defaults(pilotd_core::zone::Zone::utc());
        p.windows = vec![Window {
            days: parse_days("daily").unwrap(),
            from: parse_time_of_day("08:00").unwrap(),
            to: parse_time_of_day("23:00").unwrap(),
        }];
        p.on_return = Evict::Pause;
        p
    }

    /// A host free for an hour at `now`.
    fn idle(now: DateTime<Utc>) -> HostSnapshot {
        HostSnapshot::test(now).with_free_since(Some(now - chrono::Duration::hours(1)))
    }

    fn ad(p: &Policy, h: &HostSnapshot, now: DateTime<Utc>) -> String {
        let s = decide(p, h, LIMITS, now);
        render("lab-3", p, h, &s, now)
    }

    #[test]
    fn an_open_window_advertises_its_end_and_the_owners_eviction_mode() {
        let p = evening();
        let text = ad(&p, &idle(at(12, 0)), at(12, 0));
        let end = at(23, 0).timestamp();
        assert!(
            text.contains(&format!("PILOTD_WINDOW_END = {end}\n")),
            "{text}"
        );
        assert!(text.contains("PILOTD_INSTANCE = \"lab-3\"\n"), "{text}");
        assert!(text.contains("PILOTD_COMPUTING = True\n"), "{text}");
        assert!(text.contains("PILOTD_SNOOZED = False\n"), "{text}");
        assert!(text.contains("PILOTD_ON_RETURN = \"pause\"\n"), "{text}");
        assert!(text.contains(&format!(
            "PILOTD_VERSION = \"{}\"\n",
            env!("CARGO_PKG_VERSION")
        )));
    }

    #[test]
    fn a_closed_window_or_a_snooze_says_so() {
        let p = evening();
        let closed = ad(&p, &idle(at(6, 0)), at(6, 0));
        assert!(
            closed.contains("PILOTD_WINDOW_END = undefined\n"),
            "{closed}"
        );
        assert!(closed.contains("PILOTD_COMPUTING = False\n"), "{closed}");
        assert!(closed.contains(Cause::OutsideSchedule.as_str()), "{closed}");
        let snoozed = idle(at(12, 0)).with_snooze(Some(at(13, 0)));
        let text = ad(&p, &snoozed, at(12, 0));
        assert!(text.contains("PILOTD_SNOOZED = True\n"), "{text}");
        assert!(text.contains("PILOTD_COMPUTING = False\n"), "{text}");
        // An expired snooze holds nothing.
        let text = ad(&p, &snoozed, at(13, 1));
        assert!(text.contains("PILOTD_SNOOZED = False\n"), "{text}");
    }

    #[test]
    fn every_line_is_a_name_and_a_classad_literal() {
        let p = evening();
        let text = render(
            "a\"b\\c\nd",
            &p,
            &idle(at(12, 0)),
            &decide(&p, &idle(at(12, 0)), LIMITS, at(12, 0)),
            at(12, 0),
        );
        assert!(
            text.contains("PILOTD_INSTANCE = \"a\\\"b\\\\cd\"\n"),
            "{text}"
        );
        for line in text.lines() {
            let (k, v) = line.split_once(" = ").expect(line);
            assert!(
                k.starts_with("PILOTD_")
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            );
            assert!(!v.is_empty(), "{line}");
        }
    }

    /// The line the pool reads for the causes.
    fn causes_line(text: &str) -> &str {
        text.lines()
            .find(|l| l.starts_with("PILOTD_CAUSES = "))
            .expect(text)
    }

    /// A running worker's cron job makes the owner "busy on the CPU": workers keep running (no
    /// eviction), so the pilot keeps publishing; the pool learns only that the owner's side
    /// says no, not what the owner does.
    #[test]
    fn the_pool_never_learns_what_the_owner_does() {
        let p = evening();
        let now = at(12, 0);
        let busy = idle(now).with_cpu(0.9, 0.0);
        let s = decide(&p, &busy, LIMITS, now);
        assert!(s.causes.contains(&Cause::OwnerCpuHigh), "{:?}", s.causes);
        assert_eq!(s.evict, Evict::None, "a block without eviction");
        let text = render("lab-3", &p, &busy, &s, now);
        assert_eq!(causes_line(&text), "PILOTD_CAUSES = \"owner\"", "{text}");
        // Every cause the owner or their machine gives is that one word, once; the
        // schedule's keep their names.
        let all = [
            Cause::OutsideSchedule,
            Cause::GuardBand,
            Cause::Snoozed,
            Cause::SessionsUnknown,
            Cause::OwnerPresent,
            Cause::Sleeping,
            Cause::OnBattery,
            Cause::ExclusiveProcess,
            Cause::OwnerCpuHigh,
            Cause::OwnerCpuEvict,
            Cause::WaitingFreeFor,
            Cause::TooLittleTime,
            Cause::NoRoom,
            Cause::FleetSplay,
            Cause::Free,
            Cause::Comfort,
        ];
        let every = Supply {
            causes: all.to_vec(),
            ..s
        };
        assert_eq!(
            causes_line(&render("lab-3", &p, &busy, &every, now)),
            "PILOTD_CAUSES = \"outside_schedule,guard_band,owner,too_little_time,fleet_splay,free\""
        );
        for c in all.iter().filter(|c| c.owner_or_host_busy()) {
            let one = Supply {
                causes: vec![*c],
                ..every.clone()
            };
            let text = render("lab-3", &p, &busy, &one, now);
            assert_eq!(causes_line(&text), "PILOTD_CAUSES = \"owner\"", "{c:?}");
            assert!(!text.contains(c.as_str()), "{c:?}: {text}");
        }
    }

    /// The week's figures, as ClassAd literals the pilot's whitelist takes (reals, integers,
    /// a quoted string).
    #[test]
    fn the_weeks_contribution_is_lines_of_literals() {
        use crate::record::contribution::Jobs;
        let t = Tally {
            cpu_seconds: 3.5 * 3600.0,
            computing_s: 4 * 3600,
            jobs: Jobs {
                completed: 12,
                vacated: 1,
                vacated_cpu_seconds: 720.0,
                ..Jobs::default()
            },
            ..Tally::default()
        };
        assert_eq!(
            contribution("2026-W49", &t),
            "PILOTD_CONTRIBUTION_WEEK = \"2026-W49\"\n\
             PILOTD_CPU_HOURS_WEEK = 3.5\n\
             PILOTD_COMPUTING_HOURS_WEEK = 4.0\n\
             PILOTD_JOBS_WEEK = 12\n\
             PILOTD_JOBS_VACATED_WEEK = 1\n\
             PILOTD_LOST_CPU_HOURS_WEEK = 0.2\n"
        );
        // A few minutes of computing do not change the file.
        let later = Tally {
            cpu_seconds: t.cpu_seconds + 120.0,
            ..t
        };
        assert_eq!(
            contribution("2026-W49", &later),
            contribution("2026-W49", &t)
        );
    }

    #[test]
    fn save_replaces_the_file_whole_and_leaves_it_world_readable() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("ad");
        save(&d, "PILOTD_A = 1\n").unwrap();
        save(&d, "PILOTD_A = 2\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join(ad::FILE)).unwrap(),
            "PILOTD_A = 2\n"
        );
        let mode = std::fs::metadata(d.join(ad::FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from(ad::FILE)],
            "no temporary left"
        );
    }

    /// Anyone who can write the ad directory (a worker cannot: it is mounted read-only; but
    /// a misconfigured state_dir might let someone) plants links where pilotd once wrote its
    /// temporary file, and at the file itself: pilotd's write goes through neither.
    #[test]
    fn links_planted_in_the_directory_redirect_no_write() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("ad");
        std::fs::create_dir_all(&d).unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        symlink(&victim, d.join(format!(".{}.new", ad::FILE))).unwrap();
        symlink(&victim, d.join(ad::FILE)).unwrap();
        save(&d, "PILOTD_A = 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let meta = std::fs::symlink_metadata(d.join(ad::FILE)).unwrap();
        assert!(meta.file_type().is_file(), "the link itself was replaced");
        assert_eq!(
            std::fs::read_to_string(d.join(ad::FILE)).unwrap(),
            "PILOTD_A = 1\n"
        );
    }
}
