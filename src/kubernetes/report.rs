//! How kubernetes mode's plans look to operators: the text of `pilotd plan` and the table and
//! JSON of `pilotd status` (pure; the JSON of `plan` is the plan itself).

use crate::kubernetes::plan::{ClusterDecision, KubePlan};
use crate::kubernetes::shape::POD_SHAPE;
use std::fmt::Write as _;

/// The text form of `plan` in kubernetes mode.
pub fn plan_text(plan: &KubePlan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "kubernetes plan at {}", plan.now.to_rfc3339());
    if !plan.failed_schedds.is_empty() {
        let _ = writeln!(
            out,
            "skipped schedds (query failed): {}",
            plan.failed_schedds.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "{:<39} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>6}  back-off",
        "shape (CPUs;MEM;DISK;VOLS;GPUs;TYPES;LABELS)",
        "idle",
        "wait",
        "unmat",
        "claim",
        "failed",
        "unknwn",
        "min",
        "submit"
    );
    for c in &plan.clusters {
        let backoff = match &c.backoff {
            None => "-".to_string(),
            Some(b) => format!(
                "{} failures{}{}",
                b.failures,
                if b.trial { ", trial" } else { "" },
                b.next_trial_at
                    .map(|t| format!(", next trial {}", t.to_rfc3339()))
                    .unwrap_or_default()
            ),
        };
        let _ = writeln!(
            out,
            "{:<39} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>6}  {}",
            c.key.to_string(),
            c.idle_jobs,
            c.waiting,
            c.unmatched,
            c.claimed,
            c.failed,
            c.unknown,
            c.min_pods,
            c.submit,
            backoff
        );
        if let Some(e) = &c.error {
            let _ = writeln!(out, "  error: {e}");
        }
    }
    let _ = writeln!(out, "actions:");
    if plan.jobs.is_empty() && plan.delete.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for j in &plan.jobs {
        let labels = j.metadata.labels.as_ref();
        let shape = labels
            .and_then(|l| l.get(POD_SHAPE))
            .cloned()
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  create Job {} (shape digest {shape})",
            j.metadata.name.as_deref().unwrap_or("?")
        );
    }
    for d in &plan.delete {
        let _ = writeln!(out, "  delete finished Job {d} (background propagation)");
    }
    out
}

/// Shapes worth a row in `status`: something is idle, running or failed, or a back-off holds.
fn status_rows(plan: &KubePlan) -> impl Iterator<Item = &ClusterDecision> {
    plan.clusters.iter().filter(|c| {
        c.idle_jobs + c.waiting + c.unmatched + c.claimed + c.failed + c.unknown > 0
            || c.backoff.is_some()
    })
}

/// `pilotd status --format json` in kubernetes mode.
pub fn status_json(plan: &KubePlan) -> serde_json::Value {
    serde_json::json!({
        "mode": "kubernetes",
        "now": plan.now,
        "clusters": status_rows(plan).collect::<Vec<_>>(),
        "failed_schedds": plan.failed_schedds,
    })
}

/// `pilotd status` in kubernetes mode: the table by shape (rows sorted, all-zero rows
/// hidden) with back-off.
pub fn status_text(plan: &KubePlan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<39}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}  Back-off",
        "Cluster (CPUs;MEM;DISK;VOLS;GPUs;TYPES;LABELS)",
        "Idle Jobs",
        "Wait Pods",
        "Unmatched",
        "Run Pods",
        "Failed P",
        "Unknown P"
    );
    let _ = writeln!(out, "{}", "=".repeat(99));
    for c in status_rows(plan) {
        let backoff = c.backoff.as_ref().map_or("-".to_string(), |b| {
            let mut s = format!("{} failures", b.failures);
            if b.trial {
                s.push_str(", trial");
            }
            if let Some(t) = b.next_trial_at {
                s.push_str(&format!(" until {}", t.to_rfc3339()));
            }
            s
        });
        let _ = writeln!(
            out,
            "{:<39}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}  {}",
            c.key.to_string(),
            c.idle_jobs,
            c.waiting,
            c.unmatched,
            c.claimed,
            c.failed,
            c.unknown,
            backoff
        );
    }
    if !plan.failed_schedds.is_empty() {
        let _ = writeln!(out, "skipped schedds: {}", plan.failed_schedds.join(", "));
    }
    out
}
