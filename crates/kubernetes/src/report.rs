//! How kubernetes mode's plans look to operators: the text of `pilotd plan` and the table and
//! JSON of `pilotd status` (pure; the JSON of `plan` is the plan itself).

use crate::jobs::shape_digest;
use crate::plan::{ClusterDecision, KubePlan};
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
        let _ = write!(out, "{:<39}", c.key.to_string());
        for n in c.counts() {
            let _ = write!(out, " {n:>6}");
        }
        let _ = write!(out, " {:>5} {:>6}", c.min_pods, c.submit);
        let _ = writeln!(out, "  {}", backoff_text(c, ", next trial "));
        if let Some(e) = &c.error {
            let _ = writeln!(out, "  error: {e}");
        }
    }
    for u in &plan.unsupported {
        let _ = writeln!(
            out,
            "not provisioned: {} idle job(s) of shape {}: {}",
            u.idle_jobs, u.key, u.reason
        );
    }
    let _ = writeln!(out, "actions:");
    if plan.jobs.is_empty() && plan.delete.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for j in &plan.jobs {
        let shape = shape_digest(j);
        let _ = writeln!(
            out,
            "  create Job {} (shape digest {shape})",
            j.metadata.name.as_deref().unwrap_or("?")
        );
    }
    for d in &plan.delete {
        let why = if plan.stuck.contains(d) {
            "stuck Pending past pending_timeout"
        } else {
            "finished"
        };
        let _ = writeln!(out, "  delete Job {d} ({why}; background propagation)");
    }
    out
}

/// `N failures[, trial][<next>T]`, or `-` for a shape without back-off.
fn backoff_text(c: &ClusterDecision, next: &str) -> String {
    let Some(b) = &c.backoff else {
        return "-".into();
    };
    let mut s = format!("{} failures", b.failures);
    if b.trial {
        s.push_str(", trial");
    }
    if let Some(t) = b.next_trial_at {
        s.push_str(&format!("{next}{}", t.to_rfc3339()));
    }
    s
}

/// Shapes worth a row in `status`: something is idle, running or failed, or a back-off holds.
fn status_rows(plan: &KubePlan) -> impl Iterator<Item = &ClusterDecision> {
    plan.clusters
        .iter()
        .filter(|c| !c.is_quiet() || c.backoff.is_some() || c.error.is_some())
}

/// `pilotd status --format json` in kubernetes mode.
pub fn status_json(plan: &KubePlan) -> serde_json::Value {
    serde_json::json!({
        "mode": "kubernetes",
        "now": plan.now,
        "clusters": status_rows(plan).collect::<Vec<_>>(),
        "failed_schedds": plan.failed_schedds,
        "unsupported": plan.unsupported,
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
        let _ = write!(out, "{:<39}", c.key.to_string());
        for n in c.counts() {
            let _ = write!(out, "{n:>9}");
        }
        let _ = writeln!(out, "  {}", backoff_text(c, " until "));
        if let Some(e) = &c.error {
            let _ = writeln!(out, "  gets no pods: {e}");
        }
    }
    for u in &plan.unsupported {
        let _ = writeln!(
            out,
            "not provisioned: {} idle job(s) of {}: {}",
            u.idle_jobs, u.key, u.reason
        );
    }
    if !plan.failed_schedds.is_empty() {
        let _ = writeln!(out, "skipped schedds: {}", plan.failed_schedds.join(", "));
    }
    out
}
