//! Image freshness: ask the registry which digest the configured tag names every `refresh`
//! (one small manifest request through the engine, no layers), pull only a digest that is not
//! here yet, and refuse an image the registry has not confirmed for `max_image_age`. A registry
//! that cannot be reached changes nothing for running workers; it is retried with a growing
//! delay and said clearly in the log.

use crate::act::backend::{Backend, BackendError};
use crate::settings::ImageSettings;
use crate::worker::ImageRecord;
use crate::worker::ImageState;
use crate::worker::split_reference;
use chrono::{DateTime, Duration as ChronoDuration, SecondsFormat, Utc};
use pilotd_core::backoff::Backoff;
use pilotd_core::config::site::{image_allowed, is_fully_qualified};
use std::time::Duration;

fn chrono(d: Duration) -> ChronoDuration {
    ChronoDuration::from_std(d).unwrap_or(ChronoDuration::MAX)
}

/// Whether the registry should be asked now (pure).
pub(crate) fn check_due(r: &ImageRecord, now: DateTime<Utc>, s: &ImageSettings) -> bool {
    if r.retry_at.is_some_and(|t| t > now) {
        return false;
    }
    match (r.checked_at, r.verified_at) {
        (None, _) | (_, None) => true,
        (Some(c), Some(v)) => now - c >= chrono(s.refresh) || now - v >= chrono(s.max_age),
    }
}

/// Records a failed registry request (check or pull) and says so in the log; the next try
/// waits `retry`'s delay (`ImageSettings::retry`: jittered per host, so a fleet that lost the
/// registry together does not come back to it in lockstep).
pub(crate) fn record_failure(
    r: &mut ImageRecord,
    what: &str,
    e: &BackendError,
    now: DateTime<Utc>,
    retry: Backoff,
) {
    r.failures = r.failures.saturating_add(1);
    let retry = retry.retry_at(now, r.failures);
    r.retry_at = Some(retry);
    r.last_error = Some(format!("{what}: {e}"));
    tracing::warn!(
        image = %r.reference,
        failures = r.failures,
        retry_at = %retry.to_rfc3339_opts(SecondsFormat::Secs, true),
        "{what} failed: {e}; running workers are unaffected, retrying later"
    );
}

/// Prepares the record for `reference` at `now` and says whether the registry must be asked
/// (pure). A new reference (a reload) starts a new record; a digest reference names its
/// content and needs no question. When it returns true, the check counts as started.
pub(crate) fn check_needed(
    r: &mut ImageRecord,
    reference: &str,
    now: DateTime<Utc>,
    s: &ImageSettings,
) -> bool {
    if r.reference != reference {
        *r = ImageRecord {
            reference: reference.to_string(),
            ..Default::default()
        };
    }
    if let (_, None, Some(digest)) = split_reference(reference) {
        r.digest = Some(digest);
        r.verified_at = Some(now);
        r.checked_at = Some(now);
        return false;
    }
    if !check_due(r, now, s) {
        return false;
    }
    r.checked_at = Some(now);
    true
}

/// Records the registry's answer about `reference` (ignored when the record has moved on to
/// another reference meanwhile). Never fails: problems are recorded and retried.
pub(crate) fn record_check(
    r: &mut ImageRecord,
    reference: &str,
    answer: Result<String, BackendError>,
    now: DateTime<Utc>,
    s: &ImageSettings,
) {
    if r.reference != reference {
        return;
    }
    match answer {
        Ok(digest) => {
            if r.digest.as_deref() != Some(digest.as_str()) {
                tracing::info!(
                    image = reference,
                    old = r.digest.as_deref().unwrap_or("(none)"),
                    new = %digest,
                    "the tag names a new image; new workers will use it, running ones finish their life"
                );
            } else {
                tracing::debug!(image = reference, %digest, "tag unchanged");
            }
            r.digest = Some(digest);
            r.verified_at = Some(now);
            r.failures = 0;
            r.retry_at = None;
            r.last_error = None;
        }
        Err(e) => record_failure(
            r,
            &format!("resolving {reference} at its registry"),
            &e,
            now,
            s.retry,
        ),
    }
}

/// Refreshes the record against the registry when due, waiting for the answer (the one-shot
/// commands; the daemon asks beside its loop instead).
pub(crate) async fn refresh<B: Backend>(
    backend: &B,
    r: &mut ImageRecord,
    reference: &str,
    now: DateTime<Utc>,
    s: &ImageSettings,
) {
    if check_needed(r, reference, now, s) {
        let answer = backend.resolve_image(reference).await;
        record_check(r, reference, answer, now, s);
    }
}

/// What new workers can use now: an allowed reference, resolved, confirmed within
/// `max_age`, pulled.
pub(crate) async fn state<B: Backend>(
    backend: &B,
    r: &ImageRecord,
    s: &ImageSettings,
    pulling: Option<&str>,
    now: DateTime<Utc>,
) -> Result<ImageState, BackendError> {
    let reference = r.reference.as_str();
    if !is_fully_qualified(reference) || !image_allowed(reference, &s.allowed) {
        return unavailable(format!(
            "image {reference} is not a fully qualified reference in allowed_images"
        ));
    }
    let (repository, _, _) = split_reference(reference);
    let Some(digest) = r.digest.clone() else {
        return unavailable(format!(
            "the digest of {reference} is not known yet{}",
            r.last_error
                .as_ref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ));
    };
    if r.verified_at.is_none_or(|v| now - v >= chrono(s.max_age)) {
        return unavailable(format!(
            "{reference} was last confirmed by its registry {}, longer ago than max_image_age",
            r.verified_at
                .map(|v| v.to_rfc3339_opts(SecondsFormat::Secs, true))
                .unwrap_or_else(|| "never".into())
        ));
    }
    if pulling == Some(digest.as_str()) {
        return Ok(ImageState::Pulling { digest });
    }
    let pinned = format!("{repository}@{digest}");
    match backend.local_image(&pinned).await? {
        Some(_) => Ok(ImageState::Ready { digest, pinned }),
        None if r.retry_at.is_some_and(|t| t > now) => unavailable(format!(
            "{pinned} is not here and the registry is being retried ({})",
            r.last_error.as_deref().unwrap_or("no detail")
        )),
        None => Ok(ImageState::NeedsPull { repository, digest }),
    }
}

fn unavailable(reason: String) -> Result<ImageState, BackendError> {
    Ok(ImageState::Unavailable { reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn checks_are_due_by_refresh_age_and_retry() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let h = |n: i64| now - ChronoDuration::hours(n);
        let refresh = Duration::from_secs(6 * 3600);
        let s = ImageSettings {
            allowed: vec![],
            refresh,
            max_age: Duration::from_secs(72 * 3600),
            retry: crate::settings::retry_backoff(refresh),
        };
        let mut r = ImageRecord::default();
        assert!(check_due(&r, now, &s), "never checked");
        r.checked_at = Some(h(1));
        r.verified_at = Some(h(1));
        assert!(!check_due(&r, now, &s));
        r.checked_at = Some(h(6));
        assert!(check_due(&r, now, &s), "refresh elapsed");
        r.retry_at = Some(now + ChronoDuration::seconds(1));
        assert!(!check_due(&r, now, &s), "retry pending");
        let retry = crate::settings::retry_backoff(refresh);
        assert_eq!(retry.delay(1), Duration::from_secs(30));
        assert_eq!(retry.delay(3), Duration::from_secs(120));
        assert_eq!(retry.delay(40), refresh);
        assert_eq!(
            crate::settings::retry_backoff(Duration::from_secs(2)).delay(5),
            Duration::from_secs(2)
        );
    }
}
