use super::*;
use crate::record::contribution::{Data, Summary, data_line, lines};

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// A week of these hours (open, computing, owner there) and CPU-hours.
fn week(key: &str, open: f64, computing: f64, owner: f64, cpu: f64) -> Week {
    Week {
        week: key.into(),
        tally: Tally {
            cpu_seconds: cpu * 3600.0,
            computing_s: (computing * 3600.0) as u64,
            open_s: (open * 3600.0) as u64,
            owner_present_s: (owner * 3600.0) as u64,
            ..Tally::default()
        },
    }
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The week with these bytes received, sent and pulled.
fn with_data(mut w: Week, received: u64, sent: u64, pulled: u64) -> Week {
    w.tally.network = Data {
        received,
        sent,
        pulled,
    };
    w
}

fn ledger(weeks: Vec<Week>) -> Ledger {
    Ledger {
        since: Some(utc("2026-01-01T00:00:00Z")),
        weeks,
        ..Ledger::default()
    }
}

/// A bar as drawn: its series, week, top, height and tooltip.
#[derive(Debug)]
struct Bar {
    series: String,
    week: String,
    y: f64,
    height: f64,
    title: String,
}

fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let from = tag
        .find(&format!(" {name}=\""))
        .unwrap_or_else(|| panic!("no {name} in {tag}"))
        + name.len()
        + 3;
    &tag[from..from + tag[from..].find('"').unwrap()]
}

fn bars(svg: &str) -> Vec<Bar> {
    svg.split("<rect data-series=")
        .skip(1)
        .map(|r| {
            let tag = format!(" data-series={}", &r[..r.find('>').unwrap()]);
            let title = &r[r.find("<title>").unwrap() + 7..r.find("</title>").unwrap()];
            Bar {
                series: attr(&tag, "data-series").into(),
                week: attr(&tag, "data-week").into(),
                y: attr(&tag, "y").parse().unwrap(),
                height: attr(&tag, "height").parse().unwrap(),
                title: title.into(),
            }
        })
        .collect()
}

/// The week-label texts under the upper panel (bold or not), in drawing order.
fn labels(svg: &str) -> Vec<String> {
    svg.split("<text ")
        .filter(|t| t.contains("text-anchor=\"middle\">") || t.contains("font-weight=\"bold\">W"))
        .filter_map(|t| {
            let text = &t[t.find('>')? + 1..t.find("</text>")?];
            text.starts_with('W').then(|| text.to_string())
        })
        .collect()
}

const NOW: &str = "2026-12-02T12:00:00Z"; // 2026-W49

#[test]
fn no_week_recorded_yet_is_said_in_words_not_drawn_as_an_empty_box() {
    let tz = Zone::utc();
    let html = weekly(&Ledger::default(), &tz, utc(NOW));
    assert_eq!(
        html,
        "<p id=\"weekly-chart\">No week recorded yet: the weeks appear here once pilotd has counted its first cycle.</p>"
    );
    // Weeks kept (a worker ended, say) but no time or CPU counted in any: said too.
    let mut w = week("2026-W49", 0.0, 0.0, 0.0, 0.0);
    w.tally.ended.no_job = 1;
    let html = weekly(
        &ledger(vec![week("2026-W48", 0.0, 0.0, 0.0, 0.0), w]),
        &tz,
        utc(NOW),
    );
    assert!(!html.contains("<svg"), "{html}");
    assert!(
        html.contains(
            "No hours or CPU time counted yet in the weeks recorded (2026-W48 to 2026-W49)."
        ),
        "{html}"
    );
}

/// One week: five bars with their figures in `status`'s words, the week named and marked as
/// the one under way, an accessible name with the figures.
#[test]
fn one_week_is_five_bars_with_the_figures_status_prints() {
    let tz = Zone::utc();
    let mut l = ledger(vec![with_data(
        week("2026-W49", 52.3, 40.1, 3.0, 80.25),
        GIB + 200 * MIB,
        40 * MIB + MIB / 2,
        300 * MIB,
    )]);
    l.weeks[0].tally.cpu_seconds += 7.0; // a figure that needs rounding: 80.25 h + 7 s
    let svg = weekly(&l, &tz, utc(NOW));
    assert!(svg.starts_with("<svg id=\"weekly-chart\""), "{svg}");
    assert!(svg.contains(" role=\"img\""), "{svg}");
    assert!(
        !svg.contains("style="),
        "presentation attributes only: {svg}"
    );
    assert!(!svg.contains("<script"), "{svg}");
    let b = bars(&svg);
    assert_eq!(
        b.iter().map(|b| b.series.as_str()).collect::<Vec<_>>(),
        ["open", "computing", "owner", "cpu", "data"],
        "the bars stand in the legend's order"
    );
    // The legend lists them in that order.
    let legend: Vec<usize> = [
        "open to the pool",
        "computing",
        "the owner there",
        "CPU-hours given",
        "data used",
    ]
    .iter()
    .map(|w| {
        svg.find(&format!(">{w}</text>"))
            .unwrap_or_else(|| panic!("{w} in {svg}"))
    })
    .collect();
    assert!(legend.windows(2).all(|p| p[0] < p[1]), "{legend:?}");

    // Each tooltip's figure is one of the lines `pilotd status` prints for this week.
    let status = Summary::of(&l, &tz, utc(NOW)).sections(&tz)[0].1.clone();
    assert_eq!(status, lines(&l.weeks[0].tally));
    for bar in &b {
        assert_eq!(bar.week, "2026-W49");
        let (week, figure) = bar.title.split_once(": ").unwrap();
        assert_eq!(week, "2026-W49 (this week so far, from Mon 30 Nov)");
        // The data: its total, then status's own line in brackets.
        let figure = match figure.split_once(" of data used (") {
            Some((_, line)) => line.strip_suffix(')').unwrap(),
            None => figure,
        };
        assert!(
            status
                .iter()
                .any(|line| line.starts_with(figure) || line.contains(&format!(", {figure}"))),
            "{figure:?} is not in status's {status:?}"
        );
    }
    assert_eq!(
        b.iter()
            .map(|b| b.title.split_once(": ").unwrap().1)
            .collect::<Vec<_>>(),
        [
            "52.3 h open to the pool",
            "40.1 h computing",
            "3.0 h the owner was there",
            "80.3 CPU-hours given",
            "1.5GiB of data used (data: 1.2GiB received, 40.5MiB sent, 300MiB pulled for the worker image)"
        ]
    );
    assert!(svg.contains("aria-label=\"What this machine gave per week, oldest first, 2026-W49: 2026-W49 (this week so far, from Mon 30 Nov): 52.3 h open to the pool, 40.1 h computing, 3.0 h the owner was there, 80.3 CPU-hours given, 1.5GiB of data used (data: 1.2GiB received, 40.5MiB sent, 300MiB pulled for the worker image).\""), "{svg}");
    // The week under way is bold, under all three panels, over its Monday.
    assert_eq!(
        svg.matches("font-weight=\"bold\">W49</text>").count(),
        3,
        "{svg}"
    );
    assert_eq!(svg.matches(">30 Nov</text>").count(), 3, "{svg}");
    // The CPU and data figures stand above their bars.
    assert!(svg.contains(">80.3</text>"), "{svg}");
    assert!(svg.contains(">1.5GiB</text>"), "{svg}");
}

/// Heights are proportional to the figures on each panel's own axis; the CPU-hours of a
/// many-core machine (beyond 168 a week) do not squash the hours.
#[test]
fn bars_are_proportional_on_their_panels_axes() {
    let tz = Zone::utc();
    let l = ledger(vec![
        with_data(
            week("2026-W48", 100.0, 50.0, 25.0, 2000.0),
            2 * GIB,
            GIB / 2,
            GIB / 2,
        ),
        with_data(week("2026-W49", 160.0, 120.0, 0.0, 500.0), GIB, 0, GIB / 2),
    ]);
    let svg = weekly(&l, &tz, utc(NOW));
    let b = bars(&svg);
    assert_eq!(b.len(), 10);
    let h = |series: &str, week: &str| {
        b.iter()
            .find(|b| b.series == series && b.week == week)
            .unwrap_or_else(|| panic!("{series} {week} in {b:?}"))
    };
    let close = |a: f64, e: f64| assert!((a - e).abs() <= 0.1, "{a} vs {e}");
    // Upper panel: 160 h is the largest, the axis goes to 200 h (a step of 50): 160 units tall.
    let Place { top, height, .. } = UPPER;
    close(h("open", "2026-W49").height, 160.0 / 200.0 * height);
    close(h("open", "2026-W48").height, 100.0 / 200.0 * height);
    close(h("computing", "2026-W48").height, 50.0 / 200.0 * height);
    close(h("owner", "2026-W48").height, 25.0 / 200.0 * height);
    close(h("computing", "2026-W49").height, 120.0 / 200.0 * height);
    assert_eq!(h("owner", "2026-W49").height, 0.0, "nothing is no bar");
    for s in ["open", "computing", "owner"] {
        for w in ["2026-W48", "2026-W49"] {
            close(h(s, w).y + h(s, w).height, top + height);
        }
    }
    assert!(
        svg.contains(">200 h</text>") && svg.contains(">50 h</text>"),
        "{svg}"
    );
    // The CPU's panel on its own axis, to 2000 CPU-hours; the data's on its own in GiB, to
    // 3 GiB (received, sent and pulled together). The larger week fills each.
    for (series, place, smaller) in [
        ("cpu", LOWER, 500.0 / 2000.0),
        ("data", DATA_PLACE, 1.5 / 3.0),
    ] {
        let Place { top, height, .. } = place;
        close(h(series, "2026-W48").height, height);
        close(h(series, "2026-W49").height, smaller * height);
        close(
            h(series, "2026-W49").y + h(series, "2026-W49").height,
            top + height,
        );
    }
    assert!(svg.contains(">2000</text>"), "{svg}");
    assert!(
        svg.contains(">CPU-hours</text>") && svg.contains(">hours</text>"),
        "{svg}"
    );
    assert!(
        svg.contains(">3 GiB</text>") && svg.contains(">1 GiB</text>"),
        "{svg}"
    );
    assert!(svg.contains(">data</text>"), "{svg}");
}

/// The data axis counts in the binary unit its largest week reaches: bytes of a few KiB are
/// not drawn against a GiB axis, nor GiB as thousands of MiB.
#[test]
fn the_data_axis_takes_the_unit_of_its_largest_week() {
    let unit = |values: &[u64]| byte_unit(values.iter().map(|v| *v as f64)).1;
    assert_eq!(unit(&[0, 0]), "MiB", "nothing counted");
    assert_eq!(unit(&[100]), "KiB");
    assert_eq!(unit(&[500 << 10, 10]), "KiB");
    assert_eq!(unit(&[700 * MIB, GIB - 1]), "MiB");
    assert_eq!(unit(&[GIB, 5]), "GiB");
    assert_eq!(unit(&[3 << 40]), "TiB");
    // A week of 700 MiB on a MiB axis: to 800 MiB in steps of 200.
    let l = ledger(vec![with_data(
        week("2026-W49", 1.0, 1.0, 0.0, 1.0),
        700 * MIB,
        0,
        0,
    )]);
    let svg = weekly(&l, &Zone::utc(), utc(NOW));
    assert!(
        svg.contains(">800 MiB</text>") && svg.contains(">200 MiB</text>"),
        "{svg}"
    );
    let b = bars(&svg);
    assert_eq!(b[4].series, "data");
    assert!(
        (b[4].height - 700.0 / 800.0 * DATA_PLACE.height).abs() <= 0.1,
        "{:?}",
        b[4]
    );
    assert!(
        b[4].title.ends_with(&format!(
            ": 700MiB of data used ({})",
            data_line(&l.weeks[0].tally.network)
        )),
        "{:?}",
        b[4]
    );
}

/// A quarter across New Year: twelve weeks, oldest first, labelled by week and Monday; only
/// the week under way bold.
#[test]
fn twelve_weeks_oldest_first_across_new_year() {
    let tz = Zone::utc();
    let keys = [
        "2025-W50", "2025-W51", "2025-W52", "2026-W01", "2026-W02", "2026-W03", "2026-W04",
        "2026-W05", "2026-W06", "2026-W07", "2026-W08", "2026-W09",
    ];
    let l = ledger(
        keys.iter()
            .enumerate()
            .map(|(i, k)| week(k, 10.0 + i as f64, 5.0, 1.0, 20.0))
            .collect(),
    );
    let now = utc("2026-02-25T09:00:00Z"); // Wednesday of 2026-W09
    let svg = weekly(&l, &tz, now);
    let b = bars(&svg);
    assert_eq!(b.len(), 60);
    for series in ["open", "computing", "owner", "cpu", "data"] {
        let order: Vec<&str> = b
            .iter()
            .filter(|b| b.series == series)
            .map(|b| b.week.as_str())
            .collect();
        assert_eq!(order, keys, "{series}");
    }
    let shown = labels(&svg);
    let expected: Vec<String> = [
        "W50", "W51", "W52", "W01", "W02", "W03", "W04", "W05", "W06", "W07", "W08", "W09",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        shown,
        [expected.clone(), expected.clone(), expected].concat(),
        "{svg}"
    );
    assert_eq!(
        svg.matches("font-weight=\"bold\">W").count(),
        3,
        "only W09 is under way"
    );
    assert!(svg.contains("font-weight=\"bold\">W09</text>"), "{svg}");
    // 2026-W01 begins on Monday 29 December 2025.
    assert!(
        svg.contains("<title>2026-W01 (from Mon 29 Dec): 13.0 h open to the pool</title>"),
        "{svg}"
    );
    assert!(
        svg.contains(">Hours per week, 2025-W50 to 2026-W09 (a week has 168)</text>"),
        "{svg}"
    );
    // The bars stand left to right, each week in its own column.
    let xs: Vec<f64> = svg
        .split("<rect data-series=\"open\"")
        .skip(1)
        .map(|r| attr(r, "x").parse().unwrap())
        .collect();
    assert!(
        xs.windows(2).all(|p| p[1] - p[0] > HOUR_BAR * 3.0),
        "{xs:?}"
    );
    assert!(xs[11] + 3.0 * HOUR_BAR < LEFT + PLOT_W, "{xs:?}");
}

/// A week name from a hand-edited file reaches the chart as text, never as markup; a name
/// that is not an ISO week is shown as it is, cut short.
#[test]
fn a_week_name_from_the_file_is_escaped() {
    let tz = Zone::utc();
    let l = ledger(vec![week("<b>\"&'</b>", 1.0, 1.0, 1.0, 1.0)]);
    let svg = weekly(&l, &tz, utc(NOW));
    assert!(!svg.contains("<b>"), "{svg}");
    assert!(
        svg.contains("data-week=\"&lt;b&gt;&quot;&amp;&#39;&lt;/b&gt;\""),
        "{svg}"
    );
    assert!(
        svg.contains("<title>&lt;b&gt;&quot;&amp;&#39;&lt;/b&gt;: 1.0 h open to the pool</title>"),
        "{svg}"
    );
    // The label: its first 8 characters.
    assert!(
        svg.contains(">&lt;b&gt;&quot;&amp;&#39;&lt;/</text>"),
        "{svg}"
    );
    // Not a week: the label is the name, no Monday under it.
    let svg = weekly(
        &ledger(vec![week("2026-W60", 1.0, 1.0, 1.0, 1.0)]),
        &tz,
        utc(NOW),
    );
    assert!(svg.contains(">2026-W60</text>"), "{svg}");
}

/// A little is a visible sliver (as `hours` says "<0.1"), a negative CPU figure from a
/// hand-edited file no bar at all.
#[test]
fn a_little_is_visible_and_a_negative_figure_is_no_bar() {
    let tz = Zone::utc();
    let mut l = ledger(vec![week("2026-W49", 100.0, 0.0, 0.0, 0.0)]);
    l.weeks[0].tally.computing_s = 60;
    l.weeks[0].tally.cpu_seconds = -5.0;
    let svg = weekly(&l, &tz, utc(NOW));
    let b = bars(&svg);
    assert_eq!(b[1].height, 1.0, "{:?}", b[1]);
    // The title as `status` says it, escaped.
    assert!(b[1].title.ends_with(": &lt;0.1 h computing"), "{:?}", b[1]);
    assert_eq!(b[3].height, 0.0, "{:?}", b[3]);
    assert!(b[3].title.ends_with(": 0.0 CPU-hours given"), "{:?}", b[3]);
}

/// Round axes: 0 to the next multiple of 1, 2 or 5 times a power of ten, ticks as precise as
/// the step.
#[test]
fn axes_end_on_round_numbers() {
    let case = |max: f64| {
        let a = Axis::over([max * 0.5, max].into_iter());
        (a.top, a.step, a.tick(a.step))
    };
    assert_eq!(case(168.0), (200.0, 50.0, "50".into()));
    assert_eq!(case(5376.0), (6000.0, 2000.0, "2000".into()));
    assert_eq!(case(10.0), (10.0, 2.0, "2".into()));
    let (top, step, tick) = case(0.3);
    assert!(
        (top - 0.3).abs() < 1e-9 && (step - 0.1).abs() < 1e-9,
        "{top} {step}"
    );
    assert_eq!(tick, "0.1");
    assert_eq!(case(0.0), (1.0, 0.5, "0.5".into()));
}
