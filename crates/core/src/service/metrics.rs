//! Prometheus metrics for pool operators: an optional listener (`[metrics] listen`, off by
//! default, loopback unless configured) serving the text exposition format on `/metrics`.
//!
//! The registry is plain data that the run loops update; the endpoint answers GET /metrics
//! through `service::http`, the small responder it shares with the status page.
//!
//! It is served within [`LIMITS`] by `service::listener`: at most 16 connections (more wait in
//! the kernel's backlog, not in pilotd's descriptors), each for at most 5 s from accept to its
//! answer taken; a failed accept (out of descriptors) pauses instead of spinning.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
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

/// A series' labels: each family has its own fixed keys (`state`, `cause`, ...).
pub type Labels<const N: usize> = [(&'static str, String); N];
type Label = Labels<1>;

/// The series pilotd exports, as one table: each row is a field of [`Metrics`], its type,
/// how it starts, and its name (under the `pilotd` prefix) and help as a scraper sees them.
/// The rows are registered in their order.
macro_rules! series {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $init:expr, $name:literal, $help:literal;)*) => {
        /// Every series pilotd exports. Cheap to clone (the metric types share their values).
        #[derive(Clone)]
        pub struct Metrics {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Metrics {
            pub fn new() -> (Metrics, Registry) {
                let m = Metrics { $($field: $init,)* };
                let mut r = Registry::with_prefix("pilotd");
                $(r.register($name, $help, m.$field.clone());)*
                (m, r)
            }
        }
    };
}

series! {
    workers: Family<Label, Gauge> = Family::default(),
        "workers", "Worker containers or pods by state";
    decisions: Family<Label, Counter> = Family::default(),
        "decisions", "Decisions by cause (one cycle may count several causes)";
    evictions: Family<Label, Counter> = Family::default(),
        "evictions", "Workers evicted, by mode";
    image_pulls: Counter = Counter::default(), "image_pulls", "Worker image pulls";
    image_pull_bytes: Counter = Counter::default(), "image_pull_bytes",
        "Bytes of worker image layers pulled (downloaded, as the engine's pull progress reports them)";
    backoff_level: Gauge = Gauge::default(),
        "backoff_level", "Consecutive failed workers (start delay grows with it)";
    cycle_seconds: Histogram = Histogram::new(exponential_buckets(0.005, 2.0, 14)),
        "cycle_duration_seconds", "Duration of one reconcile cycle";
    idle_jobs: Family<Label, Gauge> = Family::default(),
        "idle_jobs", "Idle jobs by resource shape (kubernetes mode)";
    pods: Family<Labels<2>, Gauge> = Family::default(),
        "pods", "Worker pods by shape and state (kubernetes mode)";
    allowed: Gauge = Gauge::default(),
        "allowed", "1 when the owner's policy allows computing now";
    /// What the machine gave (volunteer mode, `volunteer::record::contribution`), counted since this
    /// pilotd started: a fleet sums their increase.
    cpu_seconds_given: Counter<f64, AtomicU64> = Counter::default(),
        "cpu_seconds_given", "CPU-seconds pilotd's workers used (their cgroup counters)";
    computing_seconds: Counter = Counter::default(),
        "computing_seconds", "Seconds at least one worker was running";
    paused_seconds: Counter = Counter::default(),
        "paused_seconds", "Seconds workers were there, all paused";
    open_seconds: Counter = Counter::default(),
        "open_seconds", "Seconds the owner's policy allowed computing";
    owner_present_seconds: Counter = Counter::default(), "owner_present_seconds",
        "Seconds the owner was there (active, busy on the CPU, a snooze)";
    workers_ended: Family<Label, Counter> = Family::default(), "workers_ended",
        "Workers that ended, by outcome (ran_jobs, no_job, evicted, failed)";
    /// The jobs the workers' pilots reported at their ends (volunteer mode,
    /// `pilot_contract::JobReport`), and the workers that ended without a report.
    jobs_started: Counter = Counter::default(), "jobs_started",
        "Jobs condor started in the workers' slots, as their pilots reported";
    jobs_completed: Counter = Counter::default(), "jobs_completed",
        "Jobs that ran to their end in a worker, as its pilot reported";
    jobs_vacated: Counter = Counter::default(), "jobs_vacated",
        "Jobs that left a worker before their end (evicted), as its pilot reported";
    job_seconds: Counter = Counter::default(),
        "job_seconds", "Wall-clock seconds the reported jobs ran";
    job_cpu_seconds: Counter<f64, AtomicU64> = Counter::default(),
        "job_cpu_seconds", "CPU-seconds the reported jobs used";
    lost_cpu_seconds: Counter<f64, AtomicU64> = Counter::default(),
        "lost_cpu_seconds", "CPU-seconds of vacated jobs: work lost to evictions";
    workers_unreported: Counter = Counter::default(), "workers_unreported",
        "Workers that ended without a readable job report (an older pilot, an image without pilot, a damaged report)";
    /// The bytes the workers' network interfaces carried (volunteer mode), by `direction`
    /// (`received`, `sent`).
    worker_network_bytes: Family<Label, Counter> = Family::default(), "worker_network_bytes",
        "Bytes the workers' network interfaces received and sent, by direction";
    /// The machine's comfort (volunteer mode, `volunteer::comfort`): its hottest CPU sensor,
    /// its fastest fan, each labelled with the sensor, and the CPUs a worker is capped to,
    /// labelled with why. A series is there only while it holds.
    temperature: Family<Label, Gauge<f64, AtomicU64>> = Family::default(), "temperature_celsius",
        "The machine's hottest CPU temperature sensor (volunteer mode)";
    fan: Family<Label, Gauge<f64, AtomicU64>> = Family::default(),
        "fan_rpm", "The machine's fastest fan (volunteer mode)";
    cpu_cap: Family<Label, Gauge<f64, AtomicU64>> = Family::default(), "cpu_cap_cpus",
        "CPUs each worker is capped to below its share, by why (temperature, fan, cooling, quiet_hours); absent when none";
}

impl Metrics {
    /// The comfort gauges: the hottest sensor and the fastest fan as (sensor, value), the cap
    /// as (why, CPUs per worker); what is `None` has no series.
    pub fn set_comfort(
        &self,
        temperature: Option<(&str, f64)>,
        fan: Option<(&str, f64)>,
        cap: Option<(&str, f64)>,
    ) {
        for (family, key, reading) in [
            (&self.temperature, "sensor", temperature),
            (&self.fan, "sensor", fan),
            (&self.cpu_cap, "cause", cap),
        ] {
            family.clear();
            if let Some((label, v)) = reading {
                family.get_or_create(&[(key, label.into())]).set(v);
            }
        }
    }

    /// Sets the worker gauge for every state seen this cycle; states not given drop to 0.
    pub fn set_workers<'a>(&self, counts: impl IntoIterator<Item = (&'a str, i64)>) {
        let zero = ["running", "paused", "exited", "created", "other"].map(|s| (s, 0));
        for (state, n) in zero.into_iter().chain(counts) {
            self.workers
                .get_or_create(&[("state", state.into())])
                .set(n);
        }
    }

    pub fn count_decision(&self, cause: &str) {
        self.decisions
            .get_or_create(&[("cause", cause.into())])
            .inc();
    }

    pub fn count_worker_ended(&self, outcome: &str) {
        let outcome = [("outcome", outcome.into())];
        self.workers_ended.get_or_create(&outcome).inc();
    }

    /// Bytes a worker's interfaces moved in `direction` (`received`, `sent`).
    pub fn count_network(&self, direction: &str, bytes: u64) {
        let direction = [("direction", direction.into())];
        self.worker_network_bytes
            .get_or_create(&direction)
            .inc_by(bytes);
    }

    pub fn count_eviction(&self, mode: &str) {
        self.evictions.get_or_create(&[("mode", mode.into())]).inc();
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
pub(crate) const LIMITS: Limits = Limits {
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
    let serve = http::serve("metrics", listener, LIMITS, shutdown, move |req, _| {
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
        m.count_network("received", 5000);
        m.count_network("sent", 70);
        m.count_network("received", 1);
        m.backoff_level.set(3);
        m.cycle_seconds.observe(0.02);
        m.pods
            .get_or_create(&[("shape", "c4-m8192".into()), ("state", "claimed".into())])
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
            "pilotd_worker_network_bytes_total{direction=\"received\"} 5001",
            "pilotd_worker_network_bytes_total{direction=\"sent\"} 70",
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

    /// The series a scrape of `Metrics::new()` carries, by sample name, with each one's label
    /// names, and the family names of the `# TYPE` lines. Every metric is touched first: the
    /// encoder leaves out a family with no sample, `# TYPE` line included. The pattern names
    /// every field, so a metric added to `Metrics` does not compile here until it is touched.
    fn served_series() -> (
        std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        Vec<String>,
    ) {
        let (m, r) = Metrics::new();
        let Metrics {
            workers: _,
            decisions: _,
            evictions: _,
            image_pulls,
            image_pull_bytes,
            backoff_level,
            cycle_seconds,
            idle_jobs,
            pods,
            allowed,
            cpu_seconds_given,
            computing_seconds,
            paused_seconds,
            open_seconds,
            owner_present_seconds,
            workers_ended: _,
            jobs_started,
            jobs_completed,
            jobs_vacated,
            job_seconds,
            job_cpu_seconds,
            lost_cpu_seconds,
            workers_unreported,
            worker_network_bytes: _,
            temperature: _,
            fan: _,
            cpu_cap: _,
        } = &m;
        m.set_workers([("running", 1)]);
        m.count_decision("free");
        m.count_eviction("graceful");
        image_pulls.inc();
        image_pull_bytes.inc_by(1);
        backoff_level.set(1);
        cycle_seconds.observe(0.01);
        idle_jobs.get_or_create(&[("shape", "c1".into())]).set(1);
        pods.get_or_create(&[("shape", "c1".into()), ("state", "claimed".into())])
            .set(1);
        allowed.set(1);
        cpu_seconds_given.inc_by(1.5);
        computing_seconds.inc_by(30);
        paused_seconds.inc_by(30);
        open_seconds.inc_by(30);
        owner_present_seconds.inc_by(30);
        m.count_worker_ended("ran_jobs");
        jobs_started.inc();
        jobs_completed.inc();
        jobs_vacated.inc();
        job_seconds.inc_by(60);
        job_cpu_seconds.inc_by(55.5);
        lost_cpu_seconds.inc_by(5.5);
        workers_unreported.inc();
        m.count_network("received", 1);
        m.set_comfort(
            Some(("coretemp Package id 0", 71.0)),
            Some(("thinkpad fan1", 2400.0)),
            Some(("temperature", 1.5)),
        );
        let text = exposition(&r);
        let mut series = std::collections::BTreeMap::new();
        let mut families = Vec::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                families.push(t.split(' ').next().unwrap_or_default().to_string());
            }
            if line.starts_with('#') {
                continue;
            }
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels: &mut std::collections::BTreeSet<String> =
                series.entry(line[..end].to_string()).or_default();
            if let Some(set) = line[end..].strip_prefix('{') {
                // The touched values hold no quote, comma or equals sign.
                for pair in set.split('}').next().unwrap_or_default().split(',') {
                    labels.insert(pair.split('=').next().unwrap_or_default().to_string());
                }
            }
        }
        (series, families)
    }

    /// What one PromQL expression asks for: the metric names it selects and the label names it
    /// matches on or groups by.
    #[derive(Debug, Default)]
    struct Query {
        metrics: Vec<String>,
        labels: Vec<String>,
    }

    /// A small PromQL reader: enough to tell metric names from functions, keywords, label names
    /// and Grafana's `$variables` in the dashboard's expressions, skipping string literals.
    fn read_promql(expr: &str) -> Query {
        const KEYWORDS: [&str; 11] = [
            "offset",
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
            "and",
            "or",
            "unless",
            "bool",
        ];
        // Written `sum by (l) (...)` as well as `sum(...)`: not always followed by a parenthesis.
        const AGGREGATIONS: [&str; 12] = [
            "sum",
            "min",
            "max",
            "avg",
            "group",
            "stddev",
            "stdvar",
            "count",
            "count_values",
            "bottomk",
            "topk",
            "quantile",
        ];
        let mut q = Query::default();
        let b = expr.as_bytes();
        let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
        let (mut i, mut braces, mut grouping) = (0, 0, false);
        while i < b.len() {
            let c = b[i];
            if c == b'"' || c == b'\'' || c == b'`' {
                i += 1;
                while i < b.len() && b[i] != c {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            } else if c == b'$' {
                // A Grafana variable: $name or ${name}.
                i += 1;
                if b.get(i) == Some(&b'{') {
                    while i < b.len() && b[i] != b'}' {
                        i += 1;
                    }
                    i += 1;
                } else {
                    while i < b.len() && ident(b[i]) {
                        i += 1;
                    }
                }
            } else if c.is_ascii_digit() {
                // A number or a duration (5m, 0.95).
                while i < b.len() && (ident(b[i]) || b[i] == b'.') {
                    i += 1;
                }
            } else if ident(c) {
                let start = i;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                let word = &expr[start..i];
                let next = expr[i..].trim_start().chars().next();
                if braces > 0 || grouping {
                    q.labels.push(word.to_string());
                } else if KEYWORDS.contains(&word) {
                    grouping = next == Some('(') && !matches!(word, "and" | "or" | "unless");
                } else if next != Some('(') && !AGGREGATIONS.contains(&word) {
                    q.metrics.push(word.to_string());
                }
            } else {
                match c {
                    b'{' => braces += 1,
                    b'}' => braces -= 1,
                    b')' => grouping = false,
                    _ => {}
                }
                i += 1;
            }
        }
        q
    }

    /// Every expression of the dashboard with where it is: the panels' targets and the
    /// templating variables' queries (`label_values(SELECTOR, LABEL)`).
    fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, Query)> {
        let mut out = Vec::new();
        let panels = dashboard["panels"]
            .as_array()
            .expect("the dashboard has panels");
        assert!(!panels.is_empty(), "the dashboard has no panels");
        for (n, panel) in panels.iter().enumerate() {
            if panel["type"] == "row" {
                continue;
            }
            let title = panel["title"].as_str().unwrap_or_default();
            assert!(!title.is_empty(), "panels[{n}] has no title");
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "panel {title:?}: not on the datasource variable"
            );
            assert!(
                panel["gridPos"]["w"].is_u64(),
                "panel {title:?}: no gridPos"
            );
            let targets = panel["targets"].as_array().map(Vec::as_slice);
            assert!(
                targets.is_some_and(|t| !t.is_empty()),
                "panel {title:?} has no targets"
            );
            for (t, target) in targets.unwrap_or_default().iter().enumerate() {
                let expr = target["expr"].as_str().unwrap_or_default();
                assert!(!expr.is_empty(), "panel {title:?}, targets[{t}]: no expr");
                let uid = &target["datasource"]["uid"];
                assert!(
                    uid.is_null() || uid == "${datasource}",
                    "panel {title:?}, targets[{t}]: not on the datasource variable"
                );
                out.push((format!("panel {title:?}: {expr}"), read_promql(expr)));
            }
        }
        let vars = dashboard["templating"]["list"]
            .as_array()
            .expect("the dashboard has templating variables");
        assert!(
            vars.iter().any(|v| v["name"] == "datasource"
                && v["type"] == "datasource"
                && v["query"] == "prometheus"),
            "no Prometheus datasource variable named datasource"
        );
        for v in vars.iter().filter(|v| v["type"] == "query") {
            let name = v["name"].as_str().unwrap_or_default();
            let text = v["query"]["query"].as_str().or(v["query"].as_str());
            let text = text.unwrap_or_else(|| panic!("variable {name}: no query"));
            let args = text
                .strip_prefix("label_values(")
                .and_then(|a| a.strip_suffix(')'))
                .and_then(|a| a.rsplit_once(','))
                .unwrap_or_else(|| {
                    panic!("variable {name}: not label_values(SELECTOR, LABEL): {text}")
                });
            let mut q = read_promql(args.0);
            q.labels.push(args.1.trim().to_string());
            out.push((format!("variable {name}: {text}"), q));
        }
        out
    }

    /// deploy/grafana/pilotd-fleet.json asks only for series a pilotd scrape carries (exact
    /// sample names: `_total` on counters, `_bucket` on the histogram) and only for their
    /// labels or the target's `job` and `instance`; and it shows every family pilotd serves.
    #[test]
    fn the_fleet_dashboard_queries_only_served_series() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/grafana/pilotd-fleet.json"
        );
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let dashboard: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let (series, families) = served_series();
        let queries = dashboard_queries(&dashboard);
        let mut shown = std::collections::BTreeSet::new();
        for (place, q) in &queries {
            assert!(!q.metrics.is_empty(), "{place}: selects no metric");
            let mut known: std::collections::BTreeSet<&str> = ["job", "instance"].into();
            for m in &q.metrics {
                let labels = series.get(m).unwrap_or_else(|| {
                    panic!(
                        "{place}: {m} is not served; pilotd serves {:?}",
                        series.keys()
                    )
                });
                known.extend(labels.iter().map(String::as_str));
                shown.insert(m.as_str());
            }
            for l in &q.labels {
                assert!(
                    known.contains(l.as_str()),
                    "{place}: no series it selects has label {l}"
                );
            }
        }
        // A family's samples are its name, or its name and the suffix of its type.
        let of = |m: &str, f: &str| {
            m.strip_prefix(f)
                .is_some_and(|s| ["", "_total", "_bucket", "_count", "_sum"].contains(&s))
        };
        for f in &families {
            assert!(shown.iter().any(|m| of(m, f)), "no panel shows {f}");
        }
    }

    #[test]
    fn the_promql_reader_tells_metrics_from_labels_and_functions() {
        let q = read_promql(
            "histogram_quantile(0.95, sum by (job, le) (rate(a_bucket{x=~\"$v\",y!=\"b{c}\"}[$__rate_interval]))) and on (instance) (b == 0) or vector(0)",
        );
        assert_eq!(q.metrics, ["a_bucket", "b"]);
        assert_eq!(q.labels, ["job", "le", "x", "y", "instance"]);
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
