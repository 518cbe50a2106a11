//! The page's HTML: the signed-in owner's page, drawn from the status view (`status::view`:
//! the daemon's status file, the snooze, the learned history, the contribution ledger and the
//! policy's week, read once, as `pilotd status` reads them); and the short pages that say why
//! there is nothing to see. Every section says plainly when it has nothing to show yet.
//! Everything shown is escaped (`markup::esc`).

use super::chart;
use super::keys::Session;
use super::markup::esc;
use crate::decide::policy::calendar::Cell;
use crate::owner::request::Context;
use crate::record::status::{self, view::StatusView};
use chrono::{DateTime, Utc};
use std::fmt::Write as _;

pub(super) fn locked(why: &str) -> String {
    page_shell(
        "pilotd",
        &format!(
            "<h1>pilotd</h1><p>{}</p><p>To see this machine's page, run <code>pilotd open</code> as its owner: it lets your browser in (a browser of the user who runs it), once, within 2 minutes.</p>",
            esc(why)
        ),
    )
}

pub(super) fn page_shell(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
<style>body{{font-family:sans-serif;max-width:62em;margin:1em auto;padding:0 1em;color:#222}}\
table{{border-collapse:collapse}}td,th{{padding:2px 6px;font-size:90%}}\
.grid td{{width:0.9em;height:1.1em;padding:0}}.learned td{{border:1px solid #ddd}}.c{{background:#2a7}}.q{{background:#7c9}}.g{{background:#ec5}}.o{{background:#eee}}\
.verdict{{font-size:130%;font-weight:bold}}.snoozed{{background:#fde;padding:0.4em}}\
button{{font-size:110%;margin-right:0.5em}}</style></head><body>{}</body></html>",
        esc(title),
        body
    )
}

/// The page for a signed-in owner: the view (`status::view`) of the daemon's status file,
/// the snooze, the policy's week, the contribution ledger and the learned history.
pub(super) fn render(ctx: &Context, s: &Session, now: DateTime<Utc>) -> String {
    let v = StatusView::read(&ctx.state_dir, &ctx.policy, now);
    let tz = &v.tz;
    let local = |t: DateTime<Utc>| t.with_timezone(tz).format("%a %H:%M").to_string();
    let mut b = String::new();
    let _ = write!(b, "<h1>pilotd on this machine</h1>");
    snoozed(&mut b, &v, &local);
    decision(&mut b, &v.status, &local);
    comfort(&mut b, &v);
    buttons(&mut b, s);
    workers(&mut b, &v, &local);
    week(&mut b, &v);
    gave(&mut b, &v);
    learned(&mut b, &v);
    outcomes(&mut b, &v.status, &local);
    // JavaScript only refreshes; everything above works without it.
    let _ = write!(
        b,
        "<script>setTimeout(function(){{location.reload()}},10000)</script>"
    );
    page_shell("pilotd", &b)
}

/// A time as the owner reads it on the page: weekday and hour in the policy's time zone.
type Local<'a> = &'a dyn Fn(DateTime<Utc>) -> String;

/// The snooze in force, if any; one that cannot be read counts as in force, and says so.
fn snoozed(b: &mut String, v: &StatusView, local: Local) {
    let by = v.snooze.as_ref().map(|z| {
        let until = local(z.until);
        format!("Snoozed by {} until {}.", esc(&z.by), esc(&until))
    });
    let unreadable = v.snooze_unreadable.as_ref().map(|why| {
        format!(
            "Snoozed: {}; counted as snoozed until it can be read (Resume removes it).",
            esc(why)
        )
    });
    for words in [by, unreadable].into_iter().flatten() {
        let _ = write!(b, "<p class=\"snoozed\" id=\"snooze\">{words}</p>");
    }
}

/// A section's words in place of what it has nothing of yet: `<p id="{id}">{words}</p>`.
fn plainly(b: &mut String, id: &str, words: &str) {
    let _ = write!(b, "<p id=\"{id}\">{words}</p>");
}

/// The last decision and its reasons.
fn decision(b: &mut String, st: &status::Status, local: Local) {
    let Some(d) = &st.decision else {
        return plainly(b, "decision", "No decision yet.");
    };
    let verdict = d
        .share()
        .map_or("Not computing now".into(), |s| format!("Computing: {s}"));
    let _ = write!(
        b,
        "<p class=\"verdict\" id=\"decision\">{}</p><ul id=\"reasons\">",
        esc(&verdict)
    );
    for r in d.reasons.iter().chain(&d.notes) {
        let _ = write!(b, "<li>{}</li>", esc(r));
    }
    let _ = write!(b, "</ul><p>Decided {}.</p>", esc(&local(d.at)));
}

/// The machine's comfort, as `pilotd status` says it: its sensors, and the CPU cap in force
/// with why; nothing where there is no sensor and no cap.
fn comfort(b: &mut String, v: &StatusView) {
    let lines = v.comfort_lines();
    if lines.is_empty() {
        return;
    }
    let lines: Vec<String> = lines.iter().map(|l| esc(l)).collect();
    let _ = write!(b, "<p id=\"comfort\">{}</p>", lines.join("<br>"));
}

/// The buttons: plain forms with the session's CSRF token.
fn buttons(b: &mut String, s: &Session) {
    let _ = write!(
        b,
        "<form method=\"post\" action=\"/snooze\" style=\"display:inline\"><input type=\"hidden\" name=\"csrf\" value=\"{c}\">\
<select name=\"hours\"><option value=\"1\">1 hour</option><option value=\"3\">3 hours</option><option value=\"24\">1 day</option></select> \
<button id=\"snooze-button\" type=\"submit\">Snooze</button></form>\
<form method=\"post\" action=\"/resume\" style=\"display:inline\"><input type=\"hidden\" name=\"csrf\" value=\"{c}\">\
<button id=\"resume-button\" type=\"submit\">Resume</button></form>\
<p><small>Signed in as {w}. Snooze: no worker starts, running ones are handled as your policy's on_return says.</small></p>",
        c = esc(&s.csrf),
        w = esc(&s.who)
    );
}

/// This machine's workers, each with its scratch against its share.
fn workers(b: &mut String, v: &StatusView, local: Local) {
    let _ = write!(b, "<h2>Workers</h2>");
    match &v.workers {
        None if v.updated_at.is_none() => {
            plainly(b, "workers", "None seen yet: pilotd has not run a cycle.")
        }
        None => plainly(b, "workers", "Unknown (the engine did not answer)."),
        Some(list) if list.is_empty() => plainly(b, "workers", "None."),
        Some(list) => {
            let _ = write!(
                b,
                "<table id=\"workers\"><tr><th>worker</th><th>state</th><th>since</th><th>gone by</th><th>scratch</th></tr>"
            );
            for w in list {
                let _ = write!(
                    b,
                    "<tr><td>{}</td><td>{:?}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&w.name),
                    w.state,
                    w.created.map(local).unwrap_or_default(),
                    w.die_at.map(local).unwrap_or_default(),
                    v.scratch(w).map_or("not measured yet".into(), |u| esc(&u))
                );
            }
            let _ = write!(b, "</table>");
        }
    }
}

/// The week, as `pilotd schedule` draws it: one cell per half hour.
fn week(b: &mut String, v: &StatusView) {
    let _ = write!(
        b,
        "<h2>The week</h2><table class=\"grid\" id=\"schedule\"><tr><th></th>"
    );
    for h in 0..24 {
        let _ = write!(
            b,
            "<th colspan=\"2\">{}</th>",
            if h % 3 == 0 {
                format!("{h:02}")
            } else {
                String::new()
            }
        );
    }
    let _ = write!(b, "</tr>");
    for day in &v.week {
        let _ = write!(b, "<tr><th>{}</th>", day.date.format("%a %d"));
        for cell in &day.cells {
            let class = match cell {
                Some(Cell::Compute) => "c",
                Some(Cell::Quiet) => "q",
                Some(Cell::Guard) => "g",
                _ => "o",
            };
            let _ = write!(b, "<td class=\"{class}\"></td>");
        }
        let _ = write!(b, "</tr>");
    }
    let _ = write!(
        b,
        "</table><p><small><span class=\"c\">&nbsp;&nbsp;</span> computes &nbsp;<span class=\"q\">&nbsp;&nbsp;</span> computes, quiet hours &nbsp;<span class=\"g\">&nbsp;&nbsp;</span> workers leaving &nbsp;<span class=\"o\">&nbsp;&nbsp;</span> yours</small></p>"
    );
}

/// What the machine gave (`contribution`): this week and all time, as `pilotd status` says,
/// and the kept weeks' chart (`chart`).
fn gave(b: &mut String, v: &StatusView) {
    let _ = write!(
        b,
        "<h2>What this machine gave</h2><div id=\"contribution\">"
    );
    if let Some(w) = &v.contribution_unreadable {
        let _ = write!(b, "<p>{}</p>", esc(w));
    }
    for (heading, lines) in v.contribution.sections(&v.tz) {
        match lines.as_slice() {
            [one] => write!(b, "<p><b>{}</b>: {}.</p>", esc(&heading), esc(one)),
            _ => write!(
                b,
                "<p><b>{}</b></p><ul>{}</ul>",
                esc(&heading),
                lines
                    .iter()
                    .map(|l| format!("<li>{}</li>", esc(l)))
                    .collect::<String>()
            ),
        }
        .unwrap_or_default();
    }
    let _ = write!(
        b,
        "<p><b>Week by week</b> (point at a bar for its figure):</p>{}",
        chart::weekly(&v.ledger, &v.tz, v.now)
    );
    let _ = write!(
        b,
        "</div><p><small>Measured on this machine: CPU time from the workers' own counters, hours from pilotd's cycles. Nothing leaves it unless the site collects pilotd's metrics.</small></p>"
    );
}

/// What the daemon learned: the share of each hour of the week the host was free. Watched,
/// never free: said in words (a grid of empty cells read as a broken page).
fn learned(b: &mut String, v: &StatusView) {
    let learned = &v.learned;
    let _ = write!(b, "<h2>Learned availability</h2>");
    let watched_h = learned.buckets.iter().map(|k| k.observed_s).sum::<u64>() / 3600;
    match learned.overall() {
        None => plainly(
            b,
            "learned",
            "Nothing learned yet: pilotd has not watched this machine long enough.",
        ),
        Some(0.0) => {
            let watched = match watched_h {
                0 => "less than an hour".to_string(),
                h => format!("{h} hour(s)"),
            };
            let _ = write!(
                b,
                "<p id=\"learned\">Not free at any time yet (watched {watched} so far): nothing to show by hour yet.</p>"
            );
        }
        Some(all) => {
            let _ = write!(
                b,
                "<p id=\"learned\">Free {:.0}% of the watched time. By hour (Monday first; greener is free more often, grey watched but never free, blank not watched yet):</p><table class=\"grid learned\">",
                all * 100.0
            );
            for day in 0..7 {
                let _ = write!(b, "<tr>");
                for hour in 0..24 {
                    let f = learned.free_fraction(day * 24 + hour);
                    let _ = write!(
                        b,
                        "<td title=\"{}\" style=\"background:{}\"></td>",
                        f.map(|f| format!("{:.0}% free", f * 100.0))
                            .unwrap_or_else(|| "not watched".into()),
                        match f {
                            None => "#fff".into(),
                            Some(0.0) => "#ccc".into(),
                            Some(f) => format!("rgba(34,170,119,{:.2})", f.max(0.15)),
                        }
                    );
                }
                let _ = write!(b, "</tr>");
            }
            let _ = write!(b, "</table>");
        }
    }
}

/// The last ten ends of workers, the latest first.
fn outcomes(b: &mut String, st: &status::Status, local: Local) {
    let _ = write!(b, "<h2>Recent outcomes</h2>");
    if st.outcomes.is_empty() {
        return plainly(b, "outcomes", "None yet.");
    }
    let _ = write!(b, "<ul id=\"outcomes\">");
    for o in st.outcomes.iter().rev().take(10) {
        let (at, name, outcome) = (local(o.at), &o.name, o.outcome.to_string());
        let _ = write!(b, "<li>{} {}: {}</li>", esc(&at), esc(name), esc(&outcome));
    }
    let _ = write!(b, "</ul>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{record::contribution, record::history};
    use chrono::Duration as ChronoDuration;
    use std::time::Instant;

    /// Each worker's measured scratch against its share, as `pilotd status` shows it; a
    /// worker not measured yet says so instead of an empty cell.
    #[test]
    fn the_workers_table_shows_each_scratch_against_its_share() {
        use crate::worker::ScratchUse;
        use crate::worker::{Worker, WorkerState};
        let dir = tempfile::tempdir().unwrap();
        let ctx = Context {
            state_dir: dir.path().to_path_buf(),
            policy: pilotd_core::config::Policy::defaults(pilotd_core::zone::Zone::utc()),
            page: None,
        };
        let worker = |id: &str| Worker {
            disk_kib: Some(1024 * 1024),
            ..Worker::test(id, WorkerState::Running)
        };
        let mut st = status::Status {
            workers: Some(vec![worker("a"), worker("b")]),
            ..Default::default()
        };
        st.scratch_use.insert(
            "a".into(),
            ScratchUse {
                used_kib: 12 * 1024,
                full: false,
            },
        );
        status::save(&status::path(&ctx.state_dir), &st).unwrap();
        let session = Session {
            who: "alice".into(),
            uid: 1000,
            csrf: "0".repeat(64),
            until: Instant::now(),
        };
        let html = render(&ctx, &session, Utc::now());
        assert!(html.contains("<th>scratch</th>"), "{html}");
        assert!(
            html.contains(
                "<td>pilotd-t-a</td><td>Running</td><td></td><td></td><td>12MiB of 1GiB</td>"
            ),
            "{html}"
        );
        assert!(
            html.contains(
                "<td>pilotd-t-b</td><td>Running</td><td></td><td></td><td>not measured yet</td>"
            ),
            "{html}"
        );
    }

    fn page_at(ctx: &Context, now: DateTime<Utc>) -> String {
        let session = Session {
            who: "alice".into(),
            uid: 1000,
            csrf: "0".repeat(64),
            until: Instant::now(),
        };
        render(ctx, &session, now)
    }

    /// Before anything was counted, every section says so in words: no empty grid, no
    /// empty list. Then the figures, as `status` gives them.
    #[test]
    fn each_section_says_plainly_when_it_has_nothing_yet() {
        use crate::record::contribution::{Contribution, Ledger, Observed};
        use crate::record::history::History;
        let dir = tempfile::tempdir().unwrap();
        let tz = pilotd_core::zone::Zone::utc();
        let ctx = Context {
            state_dir: dir.path().to_path_buf(),
            policy: pilotd_core::config::Policy::defaults(tz.clone()),
            page: None,
        };
        let now: DateTime<Utc> = "2026-12-02T12:00:00Z".parse().unwrap();
        let html = page_at(&ctx, now);
        for says in [
            "<p id=\"decision\">No decision yet.</p>",
            "<p id=\"workers\">None seen yet: pilotd has not run a cycle.</p>",
            "<p><b>This week (2026-W49)</b>: nothing recorded yet.</p>",
            "<p><b>All time</b>: nothing recorded yet.</p>",
            "<p id=\"weekly-chart\">No week recorded yet",
            "<p id=\"learned\">Nothing learned yet",
            "<p id=\"outcomes\">None yet.</p>",
        ] {
            assert!(html.contains(says), "{says} in {html}");
        }

        // Watched two hours, never free (the page test's machine, busy with its own build):
        // words, not a grid of empty cells.
        let mut h = History::new(&tz);
        h.record(&tz, now, ChronoDuration::hours(2), false);
        history::save(dir.path(), &h).unwrap();
        let html = page_at(&ctx, now);
        assert!(
            html.contains("Not free at any time yet (watched 2 hour(s) so far)"),
            "{html}"
        );
        assert!(!html.contains("class=\"grid learned\""), "{html}");
        // Free some of the time: the grid, with a legend, busy hours grey.
        h.record(&tz, now, ChronoDuration::hours(2), true);
        history::save(dir.path(), &h).unwrap();
        let html = page_at(&ctx, now);
        assert!(html.contains("Free 50% of the watched time"), "{html}");
        assert!(html.contains("class=\"grid learned\""), "{html}");
        assert!(html.contains("blank not watched yet"), "{html}");

        let mut c = Contribution::new(Ledger::default());
        let busy = Observed {
            cpu_seconds: 5400.0,
            running: true,
            open: true,
            owner_present: false,
            ..Observed::default()
        };
        c.record(
            &tz,
            now - ChronoDuration::hours(1),
            std::time::Duration::from_secs(3600),
            busy,
        );
        c.record(&tz, now, std::time::Duration::from_secs(3600), busy);
        contribution::save(dir.path(), &c.ledger).unwrap();
        let html = page_at(&ctx, now);
        assert!(
            html.contains(
                "<p><b>This week (2026-W49)</b></p><ul><li>3.0 CPU-hours given</li><li>1.0 h computing, 0.0 h paused</li>"
            ),
            "{html}"
        );
        assert!(
            html.contains("<p><b>All time (since 2026-12-02)</b></p>"),
            "{html}"
        );
        // The week drawn, in the section, once it has counted something.
        assert!(!html.contains("No week recorded yet"), "{html}");
        assert!(html.contains("<svg id=\"weekly-chart\""), "{html}");
        assert!(
            html.contains("2026-W49 (this week so far, from Mon 30 Nov): 3.0 CPU-hours given"),
            "{html}"
        );
    }

    /// What the owner or a stranger could put in a name never reaches the page as markup.
    #[test]
    fn everything_shown_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert!(locked("<b>").contains("<p>&lt;b&gt;</p>"));
    }
}
