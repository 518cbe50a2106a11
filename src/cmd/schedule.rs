//! `pilotd schedule`: the owner's week as a grid (days × hours), because owners would rather
//! look than read: when the machine computes, the guard band before each period ends, and how
//! much of the machine it uses.

use super::{CmdError, load_config, parse_now};
use crate::cli::{Global, ScheduleArgs};
use chrono::{DateTime, Duration, TimeZone, Utc};
use pilotd_core::config::units::{Share, format_duration, format_size};
use pilotd_core::config::{Config, Machine, Policy, SiteConfig, SiteFile};
use pilotd_volunteer::host::this_machine;
use pilotd_volunteer::policy::calendar::{Cell, cell_at};
use pilotd_volunteer::settings::Settings;
use std::fmt::Write;
use std::path::PathBuf;

pub fn run(g: &Global, a: &ScheduleArgs) -> Result<String, CmdError> {
    let cfg = load_config(g, SiteFile::Optional, this_machine())?;
    let now = parse_now(a.now.as_deref())?.unwrap_or_else(Utc::now);
    // What the daemon learned on this machine, when it has run here.
    let learned = pilotd_volunteer::history::peek(&cfg.site.state_dir, &cfg.policy.timezone);
    let mut out = render(
        &cfg.policy,
        now,
        a.days,
        &cfg.policy_path.display().to_string(),
    );
    if learned.history.overall().is_some() {
        out.push('\n');
        out.push_str(&pilotd_volunteer::history::render(
            &learned.history,
            &cfg.policy.timezone,
        ));
    }
    if let Some(w) = learned.warning {
        out.push_str(&format!("\nnote: {w}\n"));
    }
    out.push_str("\nwhat this policy is expected to give per week:\n");
    for line in expected(&cfg.site, &cfg.policy, &cfg.policy, now) {
        let _ = writeln!(out, "  {line}");
    }
    Ok(out)
}

/// What `policy` is expected to give per week on this machine (`projection`): its recorded
/// presence replayed through the daemon's decision, or a fresh machine's stated defaults.
/// `init` prints it too, for the policy it wrote and the one it replaced. `running` is the
/// policy the contribution ledger was measured under (the one in force): how busy workers
/// kept the CPUs it granted is the utilization the projection assumes.
pub fn expected(
    site: &SiteConfig,
    policy: &Policy,
    running: &Policy,
    now: DateTime<Utc>,
) -> Vec<String> {
    use pilotd_volunteer::{contribution, history, projection, timeline};
    let s = Settings::resolve(&Config {
        site: site.clone(),
        site_path: None,
        policy: policy.clone(),
        policy_path: PathBuf::new(),
    });
    let learned = history::peek(&s.state_dir, &s.policy.timezone);
    let recorded = timeline::peek(&s.state_dir);
    let ledger = contribution::peek(&s.state_dir);
    let size = this_machine().unwrap_or(Machine {
        cpus: 1,
        memory_kib: 0,
        gpus: None,
    });
    // Scratch that cannot be measured yet (no dir): the share decides, not the disk.
    let scratch =
        pilotd_volunteer::host::scratch_free_kib(&s.probe.scratch).unwrap_or(u64::MAX >> 10);
    let machine = projection::machine(size.cpus, size.memory_kib, scratch, now);
    let utilization = projection::Utilization::of(
        &ledger.ledger.all_time,
        projection::granted_cpus(running, &machine),
    );
    let p = projection::project(
        &s,
        &learned.history,
        &recorded.timeline,
        &machine,
        utilization,
        now,
    );
    let mut lines = projection::render(&p);
    lines.extend(recorded.warning.map(|w| format!("note: {w}")));
    lines
}

pub fn render(p: &Policy, now: DateTime<Utc>, days: u32, source: &str) -> String {
    let tz = &p.timezone;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Schedule of {source} ({tz}), {days} day(s) from today\n"
    );
    let _ = writeln!(
        out,
        "            00    03    06    09    12    15    18    21    24"
    );
    // `--now` is checked, but a caller may pass any instant: past the range local dates may
    // not exist (chrono panics), so the grid starts at the nearest accepted instant.
    let now = now.clamp(
        pilotd_core::horizon::earliest(),
        pilotd_core::horizon::latest(),
    );
    let today = now.with_timezone(tz).date_naive();
    let mut compute_halfhours = 0u32;
    for d in 0..days {
        let Some(date) = today.checked_add_signed(Duration::days(i64::from(d))) else {
            break;
        };
        let mut row = String::new();
        for half in 0..48u32 {
            let naive = date.and_hms_opt(half / 2, (half % 2) * 30, 0);
            // A half hour that does not exist (DST gap) is drawn as a space.
            let cell = naive
                .and_then(|n| tz.from_local_datetime(&n).earliest())
                .map(|t| t.with_timezone(&Utc))
                .map(|t| cell_at(p, t));
            if cell == Some(Cell::Compute) {
                compute_halfhours += 1;
            }
            row.push(cell.map_or(' ', Cell::glyph));
        }
        let _ = writeln!(out, "{}  {row}", date.format("%a %d %b"));
    }
    let _ = writeln!(
        out,
        "\n█ computes   ▒ guard band (workers leave {} before the end)   · off",
        format_duration(p.evict_before_end)
    );
    let hours = f64::from(compute_halfhours) / 2.0;
    let _ = writeln!(
        out,
        "computing {hours:.1} h in these {days} day(s) ({:.0}% of the time)",
        hours * 100.0 / (24.0 * f64::from(days))
    );
    let share = |s: Share, bytes: bool| match (s, bytes) {
        (Share::Percent(x), _) => format!("{x}%"),
        (Share::Amount(n), true) => format_size(n),
        (Share::Amount(n), false) => n.to_string(),
    };
    let _ = writeln!(
        out,
        "share while computing: {} CPUs, {} memory, {} disk, {} GPUs, in {} worker(s); jobs up to {}",
        share(p.share.cpus, false),
        share(p.share.memory, true),
        share(p.share.disk, true),
        p.share.gpus,
        p.share.workers,
        format_duration(p.longest_job)
    );
    let who = match p.sessions {
        pilotd_core::config::policy::SessionRule::Any => "anyone logs in".to_string(),
        pilotd_core::config::policy::SessionRule::Active => format!(
            "someone uses a session (idle under {})",
            format_duration(p.session_idle)
        ),
        pilotd_core::config::policy::SessionRule::Ignore => "never for logins".to_string(),
    };
    let _ = writeln!(
        out,
        "stops when: {who}, or owner CPU stays above {:.0}% for {}; on return: {}; starts after {} free",
        p.max_owner_cpu * 100.0,
        format_duration(p.busy_for),
        p.on_return.as_str(),
        format_duration(p.free_for)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pilotd_core::config::policy::Window;
    use pilotd_core::config::units::{parse_days, parse_time_of_day};
    use proptest::strategy::Strategy;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn grid_marks_compute_guard_and_off() {
        let mut p = Policy::defaults(pilotd_core::zone::Zone::named("Europe/Rome").unwrap());
        p.windows = vec![Window {
            days: parse_days("mon-fri").unwrap(),
            from: parse_time_of_day("19:00").unwrap(),
            to: parse_time_of_day("07:30").unwrap(),
        }];
        p.evict_before_end = std::time::Duration::from_secs(1800);
        let out = render(&p, utc("2026-01-12T10:00:00Z"), 1, "x");
        let row = out.lines().find(|l| l.starts_with("Mon 12 Jan")).unwrap();
        let cells: Vec<char> = row.chars().skip(12).collect();
        assert_eq!(cells.len(), 48);
        // Monday morning belongs to Sunday's (absent) window: off.
        assert!(cells[..38].iter().all(|c| *c == '·'), "{row}");
        assert!(cells[38..].iter().all(|c| *c == '█'), "{row}");
        let tue = render(&p, utc("2026-01-13T10:00:00Z"), 1, "x");
        let row = tue.lines().find(|l| l.starts_with("Tue 13 Jan")).unwrap();
        let cells: Vec<char> = row.chars().skip(12).collect();
        // 00:00-07:00 compute, 07:00-07:30 guard, then off until 19:00.
        assert!(cells[..14].iter().all(|c| *c == '█'), "{row}");
        assert_eq!(cells[14], '▒', "{row}");
        assert!(cells[15..38].iter().all(|c| *c == '·'), "{row}");
        assert!(out.contains("computing 5.0 h"), "{out}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(60))]

        /// Any instant chrono holds, any guard band and any zone: a grid, never a panic.
        #[test]
        fn the_grid_is_total_at_extreme_instants(
            secs in proptest::prop_oneof![
                DateTime::<Utc>::MIN_UTC.timestamp()..=DateTime::<Utc>::MAX_UTC.timestamp(),
                (pilotd_core::horizon::latest().timestamp() - 30 * 86_400)..=pilotd_core::horizon::latest().timestamp(),
                (DateTime::<Utc>::MAX_UTC.timestamp() - 86_400)..=DateTime::<Utc>::MAX_UTC.timestamp(),
            ],
            guard in proptest::prop_oneof![proptest::prelude::any::<u64>(), 0u64..86_400],
            tz in proptest::sample::select(pilotd_core::zone::Zone::available())
                .prop_map(|name| pilotd_core::zone::Zone::named(&name).expect("a zone the database lists")),
            days in 1u32..=28,
        ) {
            let mut p = Policy::defaults(tz);
            p.windows = vec![Window {
                days: parse_days("mon-fri").unwrap(),
                from: parse_time_of_day("19:00").unwrap(),
                to: parse_time_of_day("07:30").unwrap(),
            }];
            p.evict_before_end = std::time::Duration::from_secs(guard);
            let now = DateTime::from_timestamp(secs, 0).unwrap();
            let out = render(&p, now, days, "x");
            proptest::prop_assert!(out.contains("computing "), "{}", out);
        }
    }

    #[test]
    fn dst_gap_is_blank() {
        let p = Policy::defaults(pilotd_core::zone::Zone::named("Europe/Rome").unwrap());
        let out = render(&p, utc("2026-03-29T10:00:00Z"), 1, "x");
        let row = out.lines().find(|l| l.starts_with("Sun 29 Mar")).unwrap();
        let cells: Vec<char> = row.chars().skip(12).collect();
        assert_eq!(cells[4], ' ');
        assert_eq!(cells[5], ' ');
        assert_eq!(cells[6], '█');
    }
}
