//! What the engine tells about itself and its workers: its version, a worker's output and
//! CPU time, and the stream of workers' exits.

use super::DockerBackend;
use crate::act::backend::{BackendError, BackendEvent, Observe};
use crate::worker::CpuSample;
use bollard::query_parameters::{EventsOptionsBuilder, LogsOptionsBuilder, StatsOptionsBuilder};
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::time::Duration;

impl Observe for DockerBackend {
    /// Tells Docker from Podman in the log.
    async fn describe_engine(&self) -> Result<String, BackendError> {
        let v = self
            .docker
            .version()
            .await
            .map_err(|e| self.err("asking the engine's version", e))?;
        let names: Vec<String> = v
            .components
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect();
        Ok(format!(
            "{} {} (API {})",
            if names.is_empty() {
                "engine".to_string()
            } else {
                names.join("+")
            },
            v.version.unwrap_or_default(),
            v.api_version.unwrap_or_default()
        ))
    }
    async fn output_tail(&self, id: &str, lines: usize) -> Result<Vec<String>, BackendError> {
        let opts = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail(&lines.to_string())
            .build();
        let mut stream = self.docker.logs(id, Some(opts));
        let mut text = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| self.err(format!("reading the output of worker {id}"), e))?;
            text.extend_from_slice(chunk.as_ref());
        }
        let text = String::from_utf8_lossy(&text);
        let all: Vec<String> = text.lines().map(str::to_owned).collect();
        Ok(all[all.len().saturating_sub(lines)..].to_vec())
    }

    async fn cpu_sample(&self, id: &str) -> Result<CpuSample, BackendError> {
        // one_shot: one reading without the engine's own 1 s second sample; the caller
        // differences two readings over its own interval.
        let opts = StatsOptionsBuilder::default()
            .stream(false)
            .one_shot(true)
            .build();
        let what = format!("reading CPU usage of worker {id}");
        let mut stream = self.docker.stats(id, Some(opts));
        let stats = match stream.next().await {
            Some(Ok(s)) => s,
            Some(Err(e)) => return Err(self.err(what, e)),
            None => {
                return Err(BackendError::Rejected {
                    what,
                    message: "the engine sent no statistics".into(),
                });
            }
        };
        let cpu = stats.cpu_stats.unwrap_or_default();
        Ok(CpuSample {
            worker_ns: cpu.cpu_usage.and_then(|u| u.total_usage).unwrap_or(0),
            system_ns: cpu.system_cpu_usage.unwrap_or(0),
        })
    }

    async fn watch(&self, tx: tokio::sync::mpsc::Sender<BackendEvent>) -> Result<(), BackendError> {
        let mut filters = self.label_filter();
        filters.insert("type".into(), vec!["container".into()]);
        filters.insert("event".into(), vec!["die".into(), "oom".into()]);
        // The timeout covers only the response headers, which the engine sends at once; a
        // long one anyway, in case an engine holds them back until the first event.
        let docker = self
            .docker
            .clone()
            .with_timeout(Duration::from_secs(86_400));
        let opts = EventsOptionsBuilder::default().filters(&filters).build();
        let mut stream = docker.events(Some(opts));
        while let Some(ev) = stream.next().await {
            let ev = ev.map_err(|e| self.err("watching worker events", e))?;
            let actor = ev.actor.unwrap_or_default();
            let attrs: BTreeMap<String, String> =
                actor.attributes.unwrap_or_default().into_iter().collect();
            let event = BackendEvent::WorkerExited {
                id: actor.id.unwrap_or_default(),
                name: attrs.get("name").cloned().unwrap_or_default(),
            };
            if tx.send(event).await.is_err() {
                return Ok(());
            }
        }
        Ok(())
    }
}
