//! The weekly chart of "What this machine gave": for each week the contribution ledger keeps
//! (oldest first, at most `contribution::WEEKS_KEPT`), the hours open to the pool, computing
//! and with the owner there, and the CPU-hours given. Inline SVG drawn by the server: no
//! script and nothing fetched, which the page's Content-Security-Policy forbids anyway;
//! colours and sizes are presentation attributes, not styles.
//!
//! Three panels over the same weeks. Above, the three hour figures as grouped bars on one hour
//! axis (a week has 168 hours). Below, the CPU-hours on their own axis: they are CPUs × hours,
//! so a 32-CPU machine can give 5,376 in a week; on the hours' axis they would flatten the
//! other bars to slivers (or be cut off), and one axis for both would invite comparing a CPU
//! count with a clock. Last, the data pilotd's work used (received, sent, pulled for the
//! worker image: what a data plan counts), on an axis of bytes in the binary unit its largest
//! week needs (MiB, GiB). Each bar's tooltip (`<title>`) gives its figure as `pilotd status`
//! prints it (`contribution::hours`, in the words of `contribution::lines`; the data with its
//! total first, then `contribution::data_line`), so the page and `status` say the same. Colours from the Okabe–Ito palette, told apart with the common
//! colour blindnesses; and not by colour alone: the legend lists the series in the order the
//! bars stand, and each bar says what it is when pointed at.
//!
//! Pure: the ledger, the zone and `now` in, markup out. The week names come from the ledger's
//! file and are escaped like everything else the page shows.

use super::markup::esc;
use crate::record::contribution::{Ledger, Tally, WEEKS_KEPT, Week, data_line, hours};
use chrono::{DateTime, NaiveDate, Utc, Weekday};
use pilotd_core::config::units::format_size;
use pilotd_core::zone::Zone;
use std::fmt::Write as _;

/// One figure of a week, as a bar.
struct Series {
    /// Its `data-series` name (what the page test counts).
    name: &'static str,
    /// The legend's words.
    legend: &'static str,
    /// After the number, as `contribution::lines` says it (`52.3 h open to the pool`).
    unit: &'static str,
    fill: &'static str,
    /// The figure in its panel's base unit: seconds (CPU-seconds for the CPU), or bytes.
    value: fn(&Tally) -> f64,
    /// The figure as a number, as `status` writes it (`52.3`, `1.5GiB`).
    number: fn(f64) -> String,
}

/// The upper panel's bars, left to right, as the legend lists them.
const HOURS: [Series; 3] = [
    Series {
        name: "open",
        legend: "open to the pool",
        unit: "h open to the pool",
        fill: "#56B4E9",
        value: |t| t.open_s as f64,
        number: hours,
    },
    Series {
        name: "computing",
        legend: "computing",
        unit: "h computing",
        fill: "#009E73",
        value: |t| t.computing_s as f64,
        number: hours,
    },
    Series {
        name: "owner",
        legend: "the owner there",
        unit: "h the owner was there",
        fill: "#E69F00",
        value: |t| t.owner_present_s as f64,
        number: hours,
    },
];

/// The lower panel's bar.
const CPU: Series = Series {
    name: "cpu",
    legend: "CPU-hours given",
    unit: "CPU-hours given",
    fill: "#CC79A7",
    // A hand-edited file could hold a negative figure: no bar grows downwards.
    value: |t| t.cpu_seconds.max(0.0),
    number: hours,
};

/// The data panel's bar: all the bytes of the week, as the data cap counts them.
const DATA: Series = Series {
    name: "data",
    legend: "data used",
    unit: "of data used",
    fill: "#0072B2",
    value: |t| t.network.total() as f64,
    number: |bytes| format_size(bytes as u64),
};

/// Every series, in the legend's order.
const ALL: [&Series; 5] = [&HOURS[0], &HOURS[1], &HOURS[2], &CPU, &DATA];

// The drawing, in SVG user units (1 = 1 CSS pixel at the size it is drawn).
const WIDTH: f64 = 760.0;
const LEFT: f64 = 66.0;
const PLOT_W: f64 = WIDTH - LEFT - 14.0;
/// A week's column: the width of one of `WEEKS_KEPT`, so a week is as wide on the first
/// Monday as after a quarter, and the chart fills from the left as weeks come.
const SLOT: f64 = PLOT_W / WEEKS_KEPT as f64;
const HOUR_BAR: f64 = 13.0;
const HOUR_GAP: f64 = 2.0;
const CPU_BAR: f64 = 27.0;
/// The hours' panel, under the legend; the CPU's below it, shorter (one bar a week).
const UPPER: Place = Place {
    top: 52.0,
    height: 160.0,
};
const LOWER: Place = Place {
    top: 280.0,
    height: 90.0,
};
/// The data's, as tall as the CPU's (one bar a week), as far under the CPU's week labels as
/// the CPU's header is under the hours'.
const DATA_PLACE: Place = Place {
    top: 438.0,
    height: 90.0,
};
/// Down to the data panel's week labels (its bottom + 28) and a margin.
const HEIGHT: f64 = 568.0;
/// Seconds in an hour: the hour and CPU-hour axes' unit.
const HOUR: f64 = 3600.0;

/// The chart of the ledger's weeks, with `now`'s week (in `tz`) marked as the one under way;
/// when no week is recorded yet, or none counted any time, a sentence that says so.
pub(super) fn weekly(ledger: &Ledger, tz: &Zone, now: DateTime<Utc>) -> String {
    let weeks = &ledger.weeks[ledger.weeks.len().saturating_sub(WEEKS_KEPT)..];
    let (Some(first), Some(last)) = (weeks.first(), weeks.last()) else {
        return "<p id=\"weekly-chart\">No week recorded yet: the weeks appear here once pilotd has counted its first cycle.</p>".into();
    };
    if ALL
        .iter()
        .flat_map(|s| weeks.iter().map(|w| (s.value)(&w.tally)))
        .all(|v| v <= 0.0)
    {
        return format!(
            "<p id=\"weekly-chart\">No hours or CPU time counted yet in the weeks recorded ({}).</p>",
            esc(&span(&first.week, &last.week))
        );
    }
    let current = Ledger::week_of(tz, now);
    let named: Vec<Named> = weeks
        .iter()
        .map(|w| Named::of(&w.week, w.week == current))
        .collect();

    let mut b = String::new();
    let _ = write!(
        b,
        "<svg id=\"weekly-chart\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\" fill=\"#222\" aria-label=\"{}\">",
        esc(&spoken(weeks, &named))
    );
    legend(&mut b);

    let hours_title = format!(
        "Hours per week, {} (a week has 168)",
        span(&first.week, &last.week)
    );
    let (bytes, unit) = byte_unit(weeks.iter().map(|w| (DATA.value)(&w.tally)));
    // Each panel: where, its bars, how wide, the figures' divisor, its header, unit and axis.
    let panels = [
        (
            UPPER,
            &HOURS[..],
            HOUR_BAR,
            HOUR,
            hours_title.as_str(),
            "h",
            "hours",
        ),
        (
            LOWER,
            &[CPU],
            CPU_BAR,
            HOUR,
            "CPU-hours given per week (2 CPUs busy for an hour give 2)",
            "",
            "CPU-hours",
        ),
        (
            DATA_PLACE,
            &[DATA],
            CPU_BAR,
            bytes,
            "Data used per week (received, sent, and pulled for the worker image)",
            unit,
            "data",
        ),
    ];
    for (place, series, width, scale, title, unit, name) in panels {
        let figures = weeks
            .iter()
            .flat_map(|w| series.iter().map(move |s| (s.value)(&w.tally) / scale));
        let panel = Panel {
            place,
            alone: series.len() == 1,
            scale,
            axis: Axis::over(figures),
        };
        panel.frame(&mut b, title, unit, name);
        // The week's bars side by side, centred in its column.
        let n = series.len() as f64;
        for (i, (w, week)) in weeks.iter().zip(&named).enumerate() {
            let x0 = LEFT + i as f64 * SLOT + (SLOT - n * width - (n - 1.0) * HOUR_GAP) / 2.0;
            for (j, s) in series.iter().enumerate() {
                let x = x0 + j as f64 * (width + HOUR_GAP);
                panel.bar(&mut b, s, &w.tally, week, x, width);
            }
        }
        week_labels(&mut b, &named, place.bottom());
    }
    let _ = write!(b, "</svg>");
    b
}

/// "2026-W44 to 2026-W49", or the one week.
fn span(first: &str, last: &str) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first} to {last}")
    }
}

/// A week as the chart names it: its ledger key, its short label (`W47`) and the Monday it
/// starts on, when the key is an ISO week; whether it is the week under way.
struct Named {
    key: String,
    label: String,
    monday: Option<NaiveDate>,
    current: bool,
}

impl Named {
    fn of(key: &str, current: bool) -> Named {
        let week = key.split_once("-W").and_then(|(y, w)| {
            let w: u32 = w.parse().ok()?;
            Some((
                NaiveDate::from_isoywd_opt(y.parse().ok()?, w, Weekday::Mon)?,
                w,
            ))
        });
        let (monday, label) = match week {
            Some((monday, w)) => (Some(monday), format!("W{w:02}")),
            // Not a week pilotd wrote: shown as it is, cut to the column's width.
            None => (None, key.chars().take(8).collect()),
        };
        Named {
            key: key.to_string(),
            label,
            monday,
            current,
        }
    }

    /// The week in a tooltip: `2026-W47 (from Mon 16 Nov)`, `… (this week so far, from …)`.
    fn long(&self) -> String {
        let from = self
            .monday
            .map(|d| format!("from {}", d.format("%a %-d %b")));
        let so_far = self.current.then_some("this week so far".to_string());
        let notes: Vec<String> = so_far.into_iter().chain(from).collect();
        if notes.is_empty() {
            self.key.clone()
        } else {
            format!("{} ({})", self.key, notes.join(", "))
        }
    }
}

/// The binary unit the data axis counts in: the largest its largest week reaches at least
/// one of (`GiB` for 1.5GiB), from KiB up; MiB while nothing was counted.
fn byte_unit(values: impl Iterator<Item = f64>) -> (f64, &'static str) {
    let max = values.fold(0.0_f64, f64::max);
    let units = [(1u64 << 20, "MiB"), (1 << 30, "GiB"), (1 << 40, "TiB")];
    let mut unit = if max <= 0.0 {
        (1u64 << 20, "MiB")
    } else {
        (1 << 10, "KiB")
    };
    for (scale, name) in units {
        if max >= scale as f64 {
            unit = (scale, name);
        }
    }
    (unit.0 as f64, unit.1)
}

/// A figure as `status` says it: `52.3 h open to the pool`; the data with what it is made of
/// in `status`'s own line (`1.5GiB of data used (data: 1.2GiB received, …)`).
fn figure(s: &Series, t: &Tally) -> String {
    let said = format!("{} {}", (s.number)((s.value)(t)), s.unit);
    if s.name == DATA.name {
        format!("{said} ({})", data_line(&t.network))
    } else {
        said
    }
}

/// The chart in words, for a screen reader (`role="img"` hides the bars' own titles).
fn spoken(weeks: &[Week], named: &[Named]) -> String {
    let mut said = format!(
        "What this machine gave per week, oldest first, {}:",
        span(&named[0].key, &named[named.len() - 1].key)
    );
    for (w, n) in weeks.iter().zip(named) {
        let figures: Vec<String> = ALL.iter().map(|s| figure(s, &w.tally)).collect();
        let _ = write!(said, " {}: {}.", n.long(), figures.join(", "));
    }
    said
}

/// The legend, in the order the bars stand: the three hour bars, then the CPU bar below, and
/// the data's under it.
fn legend(b: &mut String) {
    let mut x = LEFT;
    for s in ALL {
        let _ = write!(
            b,
            "<rect x=\"{x:.1}\" y=\"6\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.1}\" y=\"16\">{}</text>",
            s.fill,
            x + 16.0,
            esc(s.legend)
        );
        // Each entry as wide as its words (about 6.6 units a character at this size).
        x += 16.0 + s.legend.len() as f64 * 6.6 + 18.0;
    }
}

/// A value axis from 0 to a round number, with ticks at a round step.
struct Axis {
    top: f64,
    step: f64,
}

impl Axis {
    /// The axis that holds the largest of `values` (in the axis' unit): 0 to the next multiple of a step
    /// of 1, 2 or 5 times a power of ten, with at most 5 steps. Nothing above 0: 0 to 1.
    fn over(values: impl Iterator<Item = f64>) -> Axis {
        let max = values.fold(0.0_f64, f64::max);
        if max <= 0.0 || !max.is_finite() {
            return Axis {
                top: 1.0,
                step: 0.5,
            };
        }
        let rough = max / 5.0;
        let power = 10f64.powf(rough.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * power)
            .find(|s| *s >= rough)
            .unwrap_or(10.0 * power);
        Axis {
            top: (max / step).ceil() * step,
            step,
        }
    }

    /// The height of `value` in a plot `height` tall; a little above 0 is at least one unit,
    /// never a bar that reads as nothing (as `hours` says "<0.1", not "0.0").
    fn height(&self, value: f64, height: f64) -> f64 {
        let h = value / self.top * height;
        if value > 0.0 { h.max(1.0) } else { 0.0 }
    }

    /// A tick's words: as many decimals as the step needs.
    fn tick(&self, value: f64) -> String {
        let decimals = (-self.step.log10().floor()).max(0.0) as usize;
        format!("{value:.decimals$}")
    }
}

/// Where a panel stands: its plot's top and height (its header's baseline 10 above the top).
#[derive(Clone, Copy)]
struct Place {
    top: f64,
    height: f64,
}

impl Place {
    fn bottom(&self) -> f64 {
        self.top + self.height
    }
}

/// A panel of bars: where it stands, its value axis, and what a figure is divided by to be
/// read on it (seconds in an hour, bytes in its unit).
struct Panel {
    place: Place,
    /// One bar a week: its figure stands over it.
    alone: bool,
    scale: f64,
    axis: Axis,
}

impl Panel {
    /// The header, grid lines with their values (`unit` after each), and the axis' name.
    fn frame(&self, b: &mut String, title: &str, unit: &str, name: &str) {
        let Place { top, height } = self.place;
        let header = top - 10.0;
        let axis = &self.axis;
        let _ = write!(
            b,
            "<text x=\"{LEFT}\" y=\"{header}\" font-weight=\"bold\">{}</text>",
            esc(title)
        );
        let steps = (axis.top / axis.step).round() as usize;
        for k in 0..=steps {
            let v = k as f64 * axis.step;
            let y = top + height - v / axis.top * height;
            let _ = write!(
                b,
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{}{}</text>",
                LEFT + PLOT_W,
                if k == 0 { "#888" } else { "#ddd" },
                LEFT - 6.0,
                y + 4.0,
                axis.tick(v),
                if unit.is_empty() {
                    String::new()
                } else {
                    format!(" {unit}")
                }
            );
        }
        let middle = top + height / 2.0;
        let _ = write!(
            b,
            "<text x=\"14\" y=\"{middle:.1}\" text-anchor=\"middle\" font-size=\"11\" transform=\"rotate(-90 14 {middle:.1})\">{}</text>",
            esc(name)
        );
    }

    /// One bar of `s` for `week`, at `x`, with its figure as its tooltip (and over it, when
    /// it stands alone in its week: room for the figure).
    fn bar(&self, b: &mut String, s: &Series, t: &Tally, week: &Named, x: f64, width: f64) {
        let v = (s.value)(t);
        let h = self.axis.height(v / self.scale, self.place.height);
        let y = self.place.bottom() - h;
        let _ = write!(
            b,
            "<rect data-series=\"{}\" data-week=\"{}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{}: {}</title></rect>",
            s.name,
            esc(&week.key),
            s.fill,
            esc(&week.long()),
            esc(&figure(s, t))
        );
        if self.alone && v > 0.0 {
            let _ = write!(
                b,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                x + width / 2.0,
                y - 3.0,
                (s.number)(v)
            );
        }
    }
}

/// The weeks' names under a panel whose plot ends at `bottom`: `W47` (bold for the week
/// under way) over its Monday (`16 Nov`).
fn week_labels(b: &mut String, named: &[Named], bottom: f64) {
    for (i, n) in named.iter().enumerate() {
        let x = LEFT + (i as f64 + 0.5) * SLOT;
        let _ = write!(
            b,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\"{}>{}</text>",
            bottom + 15.0,
            if n.current {
                " font-weight=\"bold\""
            } else {
                ""
            },
            esc(&n.label)
        );
        if let Some(d) = n.monday {
            let _ = write!(
                b,
                "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\" fill=\"#666\">{}</text>",
                bottom + 28.0,
                d.format("%-d %b")
            );
        }
    }
}

#[cfg(test)]
mod tests;
