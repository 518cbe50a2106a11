//! `pilotd gc [--dry-run]`: one garbage-collection pass — finished workers, workers past their
//! `die_at`, orphaned scratch dirs, old worker images pilotd pulled. Only what carries this
//! instance's labels (or is in its pull record) is a candidate. A failed list removes nothing.
//!
//! Beside a running daemon, removing a finished worker here means the daemon does not see its
//! outcome (the back-off does not count it); that is the price of an on-demand pass.

use super::{CmdError, block_on, load_config};
use crate::cli::{GcArgs, Global};
use chrono::Utc;
use pilotd_core::config::SiteFile;
use pilotd_volunteer::act::backend::{self, Images, Workers};
use pilotd_volunteer::act::gc;
use pilotd_volunteer::record::manifest;
use pilotd_volunteer::record::status as state;
use pilotd_volunteer::settings::Settings;
use pilotd_volunteer::worker::split_reference;
use std::fmt::Write;

pub fn run(g: &Global, a: &GcArgs) -> Result<String, CmdError> {
    let cfg = load_config(g, SiteFile::Optional, None)?;
    let s = Settings::resolve(&cfg);
    // The daemon's template (its image may be the manifest's): an image in use stays.
    let template = manifest::stored_template(&s);
    let settings = &template.worker;
    let status = state::load(&state::path(&s.state_dir))
        .ok()
        .flatten()
        .unwrap_or_default();
    block_on(async {
        let b = backend::connect(&s.engine).map_err(|e| CmdError::Runtime(e.to_string()))?;
        let list = b.list_workers().await.map_err(|e| {
            CmdError::Runtime(format!(
                "{e}\n  (a failed list is not an empty list: nothing was removed)"
            ))
        })?;
        let now = Utc::now();
        let mut items = gc::workers(&list, now);
        items.extend(gc::scratch(
            &settings.scratch_root,
            &gc::scratch_entries(&settings.scratch_root),
            &list,
            &settings.name_prefix(),
        ));
        items.extend(gc::token_copies(
            &settings.tokens_root,
            &gc::token_entries(&settings.tokens_root),
            &list,
            &settings.name_prefix(),
        ));
        let (repository, _, _) = split_reference(&settings.image);
        let current = status
            .image
            .digest
            .clone()
            .filter(|_| status.image.reference == settings.image);
        let images = b
            .list_images(&repository)
            .await
            .map_err(|e| CmdError::Runtime(e.to_string()))?;
        items.extend(gc::images(
            &images,
            current.as_deref(),
            &status.pulled_images,
            &list,
        ));

        let mut out = String::new();
        if items.is_empty() {
            let _ = writeln!(out, "nothing to collect (instance {})", settings.instance);
            return Ok(out);
        }
        if a.dry_run {
            for i in &items {
                let _ = writeln!(out, "would {i}");
            }
            return Ok(out);
        }
        let mut failed = 0;
        for c in gc::apply(&b, settings, &items, s.policy.grace).await {
            if c.result.is_ok() {
                let _ = writeln!(out, "done: {c}");
            } else {
                failed += 1;
                let _ = writeln!(out, "not done: {c}");
            }
        }
        if failed > 0 {
            return Err(CmdError::Runtime(format!(
                "{out}{failed} item(s) could not be collected"
            )));
        }
        Ok(out)
    })?
}
