//! Images: the freshness check's digest (one HEAD to the registry, the engine's
//! `/distribution` route only when the registry is out of reach), pulls by digest, and the
//! local images of a repository.

use super::DockerBackend;
use super::errors::registry_error;
use crate::act::backend::{BackendError, Images};
use crate::worker::{LocalImage, Pulled, parse_instant};
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ListImagesOptionsBuilder, RemoveImageOptionsBuilder,
};
use chrono::DateTime;
use futures_util::StreamExt;
use std::collections::BTreeMap;

impl Images for DockerBackend {
    async fn local_image(&self, reference: &str) -> Result<Option<LocalImage>, BackendError> {
        match self.docker.inspect_image(reference).await {
            Ok(i) => Ok(Some(LocalImage {
                size: i.size.unwrap_or_default().max(0) as u64,
                id: i.id.unwrap_or_default(),
                repo_digests: i.repo_digests.unwrap_or_default(),
                repo_tags: i.repo_tags.unwrap_or_default(),
                labels: i
                    .config
                    .and_then(|c| c.labels)
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                created: i.created.as_ref().and_then(|c| parse_instant(Some(c))),
            })),
            Err(e) => match self.err(format!("inspecting image {reference}"), e) {
                BackendError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    async fn resolve_image(&self, reference: &str) -> Result<String, BackendError> {
        let what = format!("resolving {reference} at its registry");
        let direct = match self.resolver.digest(reference).await {
            Ok(d) => return Ok(d),
            // The registry answered (unknown tag, credentials needed): that is the answer.
            Err(e) if e.is_answer() => {
                return Err(BackendError::Registry {
                    what,
                    message: e.to_string(),
                });
            }
            // Not reachable from here: the engine may know a way (a mirror, an insecure
            // registry setting), at the cost of its four requests.
            Err(e) => {
                tracing::debug!("{e}; asking through the engine instead");
                e
            }
        };
        // Both failed: say both, on one line (Podman 4.3 has no /distribution route at all and
        // answers a bare "Not Found" with a newline in it).
        let d = self
            .docker
            .inspect_registry_image(reference, None)
            .await
            .map_err(|e| BackendError::Registry {
                what: what.clone(),
                message: format!(
                    "{direct}; through the engine: {}",
                    registry_error(self.err(what.clone(), e))
                        .to_string()
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            })?;
        d.descriptor
            .digest
            .filter(|d| d.starts_with("sha256:"))
            .ok_or(BackendError::Registry {
                what,
                message: "the registry's answer names no digest".into(),
            })
    }

    async fn pull_image(&self, repository: &str, digest: &str) -> Result<Pulled, BackendError> {
        let pinned = format!("{repository}@{digest}");
        let what = format!("pulling {pinned}");
        let opts = CreateImageOptionsBuilder::default()
            .from_image(repository)
            .tag(digest)
            .build();
        let mut stream = self.docker.create_image(Some(opts), None, None);
        // Per-layer progress: one line when a layer starts, one when it is done, never one
        // per chunk (a pull emits thousands of "Downloading" updates).
        let mut fetched = Fetched::default();
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| registry_error(self.err(what.clone(), e)))?;
            let (Some(layer), Some(status)) = (info.id.as_deref(), info.status.as_deref()) else {
                continue;
            };
            let progress = info.progress_detail.as_ref();
            fetched.saw(
                layer,
                status,
                progress.and_then(|p| p.current),
                progress.and_then(|p| p.total),
            );
            match status {
                "Pulling fs layer" | "Already exists" | "Pull complete" => tracing::info!(
                    image = %pinned,
                    layer,
                    bytes = fetched.size(layer),
                    "{}",
                    status.to_lowercase()
                ),
                _ => {}
            }
        }
        let image = self
            .local_image(&pinned)
            .await?
            .ok_or(BackendError::Registry {
                what,
                message: "the pull ended but the image is not there".into(),
            })?;
        Ok(Pulled {
            image,
            bytes: fetched.bytes(),
        })
    }

    async fn list_images(&self, repository: &str) -> Result<Vec<LocalImage>, BackendError> {
        let opts = ListImagesOptionsBuilder::default().all(false).build();
        let list = self
            .docker
            .list_images(Some(opts))
            .await
            .map_err(|e| self.err(format!("listing images of {repository}"), e))?;
        let ours = |r: &String| {
            r.strip_prefix(repository)
                .is_some_and(|rest| rest.starts_with('@') || rest.starts_with(':'))
        };
        Ok(list
            .into_iter()
            .filter(|i| i.repo_digests.iter().any(ours) || i.repo_tags.iter().any(ours))
            .map(|i| LocalImage {
                size: i.size.max(0) as u64,
                id: i.id,
                repo_digests: i.repo_digests,
                repo_tags: i.repo_tags,
                labels: i.labels.into_iter().collect(),
                created: DateTime::from_timestamp(i.created, 0),
            })
            .collect())
    }

    async fn remove_image(&self, id: &str) -> Result<(), BackendError> {
        let opts = RemoveImageOptionsBuilder::default()
            .force(false)
            .noprune(false)
            .build();
        let asked = self.docker.remove_image(id, Some(opts), None).await;
        self.gone_is_done(format!("removing image {id}"), asked)
    }
}

/// The bytes a pull downloaded, from the engine's progress messages: each layer's size as its
/// "Downloading" progress gives it (`total`; the highest `current` when no total came), for
/// the layers that finished downloading. A layer the engine "Already exists" has is never
/// downloaded and counts nothing. The engine's figure, not the registry's manifest: a
/// manifest lists every layer, the ones already here too, and a donor pays only for what
/// crossed the link. What the progress leaves out (the manifest and the config blob, a few
/// KB) is not counted.
#[derive(Debug, Default)]
pub(crate) struct Fetched {
    /// By layer: its size as far as known, and whether its download completed.
    layers: BTreeMap<String, (u64, bool)>,
}

impl Fetched {
    pub(crate) fn saw(
        &mut self,
        layer: &str,
        status: &str,
        current: Option<i64>,
        total: Option<i64>,
    ) {
        let e = self.layers.entry(layer.to_string()).or_default();
        let known = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
        if status == "Downloading" {
            e.0 = e.0.max(known(total)).max(known(current));
        }
        if matches!(status, "Download complete" | "Verifying Checksum") {
            e.1 = true;
        }
    }

    /// What one layer's download is known to weigh (0 before its progress).
    pub(crate) fn size(&self, layer: &str) -> u64 {
        self.layers.get(layer).map_or(0, |(size, _)| *size)
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.layers
            .values()
            .filter(|(_, done)| *done)
            .fold(0, |sum, (size, _)| sum.saturating_add(*size))
    }
}

#[cfg(test)]
mod tests {
    use super::Fetched;

    #[test]
    fn a_pull_counts_the_layers_it_downloaded_and_not_those_it_had() {
        let mut f = Fetched::default();
        f.saw("a", "Pulling fs layer", None, None);
        f.saw("b", "Already exists", None, None);
        f.saw("a", "Downloading", Some(1_000), Some(5_000_000));
        f.saw("a", "Downloading", Some(5_000_000), Some(5_000_000));
        f.saw("c", "Downloading", Some(700), None);
        f.saw("a", "Download complete", None, None);
        f.saw("c", "Download complete", None, None);
        f.saw("a", "Extracting", Some(9_000_000), Some(9_000_000));
        f.saw("a", "Pull complete", None, None);
        // A layer that never completed its download (the pull failed) counts nothing.
        f.saw("d", "Downloading", Some(400), Some(800));
        assert_eq!(f.bytes(), 5_000_700);
        assert_eq!(f.size("b"), 0);
    }
}
