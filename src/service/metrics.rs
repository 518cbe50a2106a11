//! Prometheus metrics for pool operators: an optional listener (`[metrics] listen`, off by
//! default, loopback unless configured) serving the text exposition format on `/metrics`.
//!
//! The registry is plain data that the run loops update; the endpoint answers GET /metrics
//! through `service::http`, the small responder it shares with the status page.
//!
//! It is served within [`LIMITS`] by `service::listener`: at most 16 connections (more wait in
//! the kernel's backlog, not in pilotd's descriptors), each for at most 5 s from accept to its
//! answer taken; a failed accept (out of descriptors) pauses instead of spinning.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

use super::http::{self, Response};
use super::listener::Limits;

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(
        "cannot listen for metrics on {addr}: {source}\n  hint: pick a free port in [metrics] listen, or remove the key to turn metrics off"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShapeLabel {
    pub shape: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShapeStateLabel {
    pub shape: String,
    pub state: String,
}

/// Every series pilotd exports. Cheap to clone (the metric types share their values).
#[derive(Clone)]
pub struct Metrics {
    pub workers: Family<StateLabel, Gauge>,
    pub decisions: Family<CauseLabel, Counter>,
    pub evictions: Family<ModeLabel, Counter>,
    pub image_pulls: Counter,
    pub image_pull_bytes: Counter,
    pub backoff_level: Gauge,
    pub cycle_seconds: Histogram,
    pub idle_jobs: Family<ShapeLabel, Gauge>,
    pub pods: Family<ShapeStateLabel, Gauge>,
    pub allowed: Gauge,
}

impl Metrics {
    pub fn new() -> (Metrics, Registry) {
        let m = Metrics {
            workers: Family::default(),
            decisions: Family::default(),
            evictions: Family::default(),
            image_pulls: Counter::default(),
            image_pull_bytes: Counter::default(),
            backoff_level: Gauge::default(),
            cycle_seconds: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            idle_jobs: Family::default(),
            pods: Family::default(),
            allowed: Gauge::default(),
        };
        let mut r = Registry::with_prefix("pilotd");
        r.register(
            "workers",
            "Worker containers or pods by state",
            m.workers.clone(),
        );
        r.register(
            "decisions",
            "Decisions by cause (one cycle may count several causes)",
            m.decisions.clone(),
        );
        r.register("evictions", "Workers evicted, by mode", m.evictions.clone());
        r.register("image_pulls", "Worker image pulls", m.image_pulls.clone());
        r.register(
            "image_pull_bytes",
            "Bytes of worker image layers pulled",
            m.image_pull_bytes.clone(),
        );
        r.register(
            "backoff_level",
            "Consecutive failed workers (start delay grows with it)",
            m.backoff_level.clone(),
        );
        r.register(
            "cycle_duration_seconds",
            "Duration of one reconcile cycle",
            m.cycle_seconds.clone(),
        );
        r.register(
            "idle_jobs",
            "Idle jobs by resource shape (kubernetes mode)",
            m.idle_jobs.clone(),
        );
        r.register(
            "pods",
            "Worker pods by shape and state (kubernetes mode)",
            m.pods.clone(),
        );
        r.register(
            "allowed",
            "1 when the owner's policy allows computing now",
            m.allowed.clone(),
        );
        (m, r)
    }

    /// Sets the worker gauge for every state seen this cycle; states not given drop to 0.
    pub fn set_workers<'a>(&self, counts: impl IntoIterator<Item = (&'a str, i64)>) {
        for state in ["running", "paused", "exited", "created", "other"] {
            self.workers
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(0);
        }
        for (state, n) in counts {
            self.workers
                .get_or_create(&StateLabel {
                    state: state.into(),
                })
                .set(n);
        }
    }

    pub fn count_decision(&self, cause: &str) {
        self.decisions
            .get_or_create(&CauseLabel {
                cause: cause.into(),
            })
            .inc();
    }

    pub fn count_eviction(&self, mode: &str) {
        self.evictions
            .get_or_create(&ModeLabel { mode: mode.into() })
            .inc();
    }
}

/// The text exposition of a registry.
pub fn exposition(r: &Registry) -> String {
    let mut out = String::new();
    // Encoding into a String cannot fail for well-formed metric names.
    let _ = prometheus_client::encoding::text::encode(&mut out, r);
    out
}

/// A scraper needs one connection; TCP tells no uid, so the total and the deadline are what
/// hold idle clients to a few of pilotd's descriptors.
pub const LIMITS: Limits = Limits {
    total: 16,
    per_peer: 16,
    deadline: std::time::Duration::from_secs(5),
};

/// Binds the listener now (so a bad address fails the start, with its message) and returns
/// the serving future, which ends when `shutdown` completes.
pub async fn listen(
    addr: SocketAddr,
    registry: Arc<std::sync::Mutex<Registry>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send), MetricsError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError::Bind { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let serve = http::serve("metrics", listener, LIMITS, shutdown, move |req| {
        answer(req, &registry)
    });
    Ok((bound, serve))
}

/// The scrape endpoint: GET /metrics and nothing else.
fn answer(req: &http::Request, registry: &std::sync::Mutex<Registry>) -> Response {
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/metrics") => {
            let body = match registry.lock() {
                Ok(r) => exposition(&r),
                Err(poisoned) => exposition(&poisoned.into_inner()),
            };
            Response::new(
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body,
            )
        }
        ("GET", _) => Response::new(
            "404 Not Found",
            "text/plain",
            "only /metrics is served here\n".to_string(),
        ),
        _ => Response::new(
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_real_scrape_returns_the_series() {
        let (m, r) = Metrics::new();
        m.set_workers([("running", 2), ("paused", 1)]);
        m.count_decision("owner_present");
        m.count_eviction("graceful");
        m.image_pulls.inc();
        m.image_pull_bytes.inc_by(1234);
        m.backoff_level.set(3);
        m.cycle_seconds.observe(0.02);
        m.pods
            .get_or_create(&ShapeStateLabel {
                shape: "c4-m8192".into(),
                state: "claimed".into(),
            })
            .set(5);
        let registry = Arc::new(std::sync::Mutex::new(r));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, serve) = listen("127.0.0.1:0".parse().unwrap(), registry, async {
            let _ = rx.await;
        })
        .await
        .unwrap();
        let server = tokio::spawn(serve);

        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        for series in [
            "pilotd_workers{state=\"running\"} 2",
            "pilotd_workers{state=\"paused\"} 1",
            "pilotd_workers{state=\"exited\"} 0",
            "pilotd_decisions_total{cause=\"owner_present\"} 1",
            "pilotd_evictions_total{mode=\"graceful\"} 1",
            "pilotd_image_pulls_total 1",
            "pilotd_image_pull_bytes_total 1234",
            "pilotd_backoff_level 3",
            "pilotd_cycle_duration_seconds_count 1",
            "pilotd_pods{shape=\"c4-m8192\",state=\"claimed\"} 5",
            "# EOF",
        ] {
            assert!(body.contains(series), "missing {series} in\n{body}");
        }

        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.starts_with("HTTP/1.1 404"), "{body}");
        let _ = tx.send(());
        server.await.unwrap();
    }

    /// Past the cap a connection waits (in the backlog) until a slot frees: idle clients can
    /// hold at most LIMITS.total descriptors of pilotd, never all of them.
    #[tokio::test]
    async fn connections_past_the_cap_wait_for_a_free_slot() {
        let (_, r) = Metrics::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, serve) = listen(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(std::sync::Mutex::new(r)),
            async {
                let _ = rx.await;
            },
        )
        .await
        .unwrap();
        let server = tokio::spawn(serve);
        let mut idle = Vec::new();
        for _ in 0..LIMITS.total {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        let scrape = async {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await.unwrap();
            let mut body = String::new();
            s.read_to_string(&mut body).await.unwrap();
            body
        };
        tokio::pin!(scrape);
        // All slots are held by idle clients: no answer yet.
        let early = tokio::time::timeout(std::time::Duration::from_millis(700), &mut scrape).await;
        assert!(early.is_err(), "answered past the cap: {early:?}");
        // One idle client leaves: the waiting scrape is served.
        drop(idle.pop());
        let body = tokio::time::timeout(std::time::Duration::from_secs(3), &mut scrape)
            .await
            .expect("served once a slot freed");
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        let _ = tx.send(());
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_taken_port_is_a_clear_error() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let (_, r) = Metrics::new();
        let e = match listen(addr, Arc::new(std::sync::Mutex::new(r)), async {}).await {
            Err(e) => e,
            Ok(_) => panic!("bound a taken port"),
        };
        assert!(
            e.to_string()
                .contains(&format!("cannot listen for metrics on {addr}")),
            "{e}"
        );
    }
}
