//! The owner's week as it is shown, because owners would rather look than read: the days
//! ahead in half-hour cells (`days`: computing, the guard band before a period ends, off),
//! which `pilotd schedule` and `init` draw as text (`text`, with the share and what stops the
//! workers in words) and the status page as a table. Pure: `now` is given.

use super::calendar::{Cell, cell_at};
use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use pilotd_core::config::Policy;
use pilotd_core::config::policy::SessionRule;
use pilotd_core::config::units::{Share, format_duration, format_size};
use std::fmt::Write;

/// One day of the owner's week.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Day {
    pub date: NaiveDate,
    /// 48 cells, one per half hour from local midnight; `None` for a half hour the day does
    /// not have (a DST gap).
    pub cells: Vec<Option<Cell>>,
}

/// `count` days of `p`'s week from `now`'s local date on.
pub(crate) fn days(p: &Policy, now: DateTime<Utc>, count: u32) -> Vec<Day> {
    let tz = &p.timezone;
    // A caller may pass any instant: past the range local dates may not exist (chrono
    // panics), so the days start at the nearest accepted instant.
    let now = now.clamp(
        pilotd_core::horizon::earliest(),
        pilotd_core::horizon::latest(),
    );
    let today = now.with_timezone(tz).date_naive();
    (0..count)
        .map_while(|d| today.checked_add_signed(Duration::days(i64::from(d))))
        .map(|date| Day {
            date,
            cells: (0..48u32)
                .map(|half| {
                    date.and_hms_opt(half / 2, (half % 2) * 30, 0)
                        .and_then(|n| tz.from_local_datetime(&n).earliest())
                        .map(|t| cell_at(p, t.with_timezone(&Utc)))
                })
                .collect(),
        })
        .collect()
}

/// `pilotd schedule`'s grid of `count` days from `now` (`source` names the policy file), then
/// the share and what stops the workers.
pub fn text(p: &Policy, now: DateTime<Utc>, count: u32, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Schedule of {source} ({}), {count} day(s) from today\n",
        p.timezone
    );
    let _ = writeln!(
        out,
        "            00    03    06    09    12    15    18    21    24"
    );
    let mut compute_halfhours = 0u32;
    for day in days(p, now, count) {
        let row: String = day
            .cells
            .iter()
            // A half hour that does not exist is drawn as a space.
            .map(|cell| cell.map_or(' ', Cell::glyph))
            .collect();
        compute_halfhours += day
            .cells
            .iter()
            .filter(|c| matches!(c, Some(Cell::Compute | Cell::Quiet)))
            .count() as u32;
        let _ = writeln!(out, "{}  {row}", day.date.format("%a %d %b"));
    }
    let _ = writeln!(
        out,
        "\n█ computes   {}▒ guard band (workers leave {} before the end)   · off",
        if p.comfort.quiet_hours.is_empty() {
            ""
        } else {
            "▓ computes, quiet hours   "
        },
        format_duration(p.evict_before_end)
    );
    let hours = f64::from(compute_halfhours) / 2.0;
    let _ = writeln!(
        out,
        "computing {hours:.1} h in these {count} day(s) ({:.0}% of the time)",
        hours * 100.0 / (24.0 * f64::from(count))
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
    for q in &p.comfort.quiet_hours {
        let _ = writeln!(
            out,
            "quiet hours: {} {:02}:{:02}-{:02}:{:02}, at most {} for all workers",
            q.window.days,
            q.window.from / 60,
            q.window.from % 60,
            q.window.to / 60,
            q.window.to % 60,
            match q.cpus {
                Share::Percent(p) => format!("{p}% of the CPUs"),
                Share::Amount(n) => format!("{n} CPU(s)"),
            }
        );
    }
    let c = &p.comfort;
    if c.limits_set() {
        let limits: Vec<String> = [
            c.max_temperature.map(|t| format!("the CPU over {t:.0}°C")),
            c.max_fan.map(|f| format!("a fan over {f} rpm")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let _ = writeln!(
            out,
            "comfort: {} lowers the workers' CPUs a step at a time, and pauses them at the lowest; they rise again a step after {} cool",
            limits.join(" or "),
            format_duration(c.cool_for)
        );
    }
    let who = match p.sessions {
        SessionRule::Any => "anyone logs in".to_string(),
        SessionRule::Active => format!(
            "someone uses a session (idle under {})",
            format_duration(p.session_idle)
        ),
        SessionRule::Ignore => "never for logins".to_string(),
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
        let out = text(&p, utc("2026-01-12T10:00:00Z"), 1, "x");
        let row = out.lines().find(|l| l.starts_with("Mon 12 Jan")).unwrap();
        let cells: Vec<char> = row.chars().skip(12).collect();
        assert_eq!(cells.len(), 48);
        // Monday morning belongs to Sunday's (absent) window: off.
        assert!(cells[..38].iter().all(|c| *c == '·'), "{row}");
        assert!(cells[38..].iter().all(|c| *c == '█'), "{row}");
        let tue = text(&p, utc("2026-01-13T10:00:00Z"), 1, "x");
        let row = tue.lines().find(|l| l.starts_with("Tue 13 Jan")).unwrap();
        let cells: Vec<char> = row.chars().skip(12).collect();
        // 00:00-07:00 compute, 07:00-07:30 guard, then off until 19:00.
        assert!(cells[..14].iter().all(|c| *c == '█'), "{row}");
        assert_eq!(cells[14], '▒', "{row}");
        assert!(cells[15..38].iter().all(|c| *c == '·'), "{row}");
        assert!(out.contains("computing 5.0 h"), "{out}");
    }

    /// Quiet hours show in the grid as their own glyph (still computing time), with their
    /// share and the comfort limits in words under it.
    #[test]
    fn grid_marks_quiet_hours_and_says_the_comfort_limits() {
        use pilotd_core::config::policy::QuietHours;
        let mut p = Policy::defaults(pilotd_core::zone::Zone::utc());
        p.comfort.quiet_hours = vec![QuietHours {
            window: Window {
                days: parse_days("daily").unwrap(),
                from: parse_time_of_day("22:00").unwrap(),
                to: parse_time_of_day("07:00").unwrap(),
            },
            cpus: Share::Amount(1),
        }];
        p.comfort.max_temperature = Some(80.0);
        let out = text(&p, utc("2026-01-12T10:00:00Z"), 1, "x");
        let row = out.lines().find(|l| l.starts_with("Mon 12 Jan")).unwrap();
        let cells: Vec<char> = row.chars().skip(12).collect();
        assert!(cells[..14].iter().all(|c| *c == '▓'), "{row}");
        assert!(cells[14..44].iter().all(|c| *c == '█'), "{row}");
        assert!(cells[44..].iter().all(|c| *c == '▓'), "{row}");
        assert!(out.contains("computing 24.0 h"), "{out}");
        assert!(out.contains("▓ computes, quiet hours"), "{out}");
        assert!(
            out.contains("quiet hours: daily 22:00-07:00, at most 1 CPU(s) for all workers"),
            "{out}"
        );
        assert!(
            out.contains("comfort: the CPU over 80°C lowers the workers' CPUs a step at a time"),
            "{out}"
        );
        // Without them, none of it.
        let plain = text(
            &Policy::defaults(pilotd_core::zone::Zone::utc()),
            utc("2026-01-12T10:00:00Z"),
            1,
            "x",
        );
        assert!(!plain.contains('▓') && !plain.contains("quiet") && !plain.contains("comfort"));
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
            count in 1u32..=28,
        ) {
            let mut p = Policy::defaults(tz);
            p.windows = vec![Window {
                days: parse_days("mon-fri").unwrap(),
                from: parse_time_of_day("19:00").unwrap(),
                to: parse_time_of_day("07:30").unwrap(),
            }];
            p.evict_before_end = std::time::Duration::from_secs(guard);
            let now = DateTime::from_timestamp(secs, 0).unwrap();
            let out = text(&p, now, count, "x");
            proptest::prop_assert!(out.contains("computing "), "{}", out);
        }
    }

    #[test]
    fn dst_gap_is_blank() {
        let p = Policy::defaults(pilotd_core::zone::Zone::named("Europe/Rome").unwrap());
        let out = text(&p, utc("2026-03-29T10:00:00Z"), 1, "x");
        let row = out.lines().find(|l| l.starts_with("Sun 29 Mar")).unwrap();
        let cells: Vec<char> = row.chars().skip(12).collect();
        assert_eq!(cells[4], ' ');
        assert_eq!(cells[5], ' ');
        assert_eq!(cells[6], '█');
    }
}
