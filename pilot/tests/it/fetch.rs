//! Config fetch against a scripted HTTP server on 127.0.0.1: success, 404 without retry,
//! 5xx then success, timeout, oversized body, sha256 mismatch, unreachable host.

use std::time::{Duration, Instant};

use crate::harness::{ConfigServer, Reply, closed_port};
use pilot::fetch::{FetchError, FetchPolicy, fetch_all};
use pilot::settings::ConfigSource;
use reqwest::Url;
use sha2::{Digest, Sha256};

const BODY: &str = "CONDOR_HOST = cm.example.org\nUSE_CCB = True\n";

fn policy(timeout_ms: u64) -> FetchPolicy {
    // reqwest is built without a provider; the binary installs ring, so must the tests.
    let _ = rustls::crypto::ring::default_provider().install_default();
    FetchPolicy {
        timeout: Duration::from_millis(timeout_ms),
        max_bytes: 64 * 1024,
        allow_http: true,
    }
}

fn source(url: &str, sha256: Option<String>) -> ConfigSource {
    ConfigSource {
        url: Url::parse(url).unwrap(),
        sha256,
    }
}

#[tokio::test]
async fn success_in_order_with_a_matching_pin() {
    let server = ConfigServer::start(vec![
        ("/a.conf", vec![Reply::Status(200, BODY.into())]),
        ("/b.conf", vec![Reply::Status(200, "X = 1\n".into())]),
    ]);
    let pin = format!("{:x}", Sha256::digest(BODY.as_bytes()));
    let fetched = fetch_all(
        &[
            source(&server.url("/a.conf"), Some(pin)),
            source(&server.url("/b.conf"), None),
        ],
        &policy(3000),
    )
    .await
    .unwrap();
    assert_eq!(fetched[0].body, BODY);
    assert_eq!(fetched[0].file_name, "50-pilot-fetched-00-a.conf");
    assert_eq!(fetched[1].file_name, "50-pilot-fetched-01-b.conf");
}

#[tokio::test]
async fn not_found_is_final_and_not_retried() {
    let server = ConfigServer::start(vec![]);
    let start = Instant::now();
    let err = fetch_all(&[source(&server.url("/missing.conf"), None)], &policy(5000))
        .await
        .unwrap_err();
    assert!(
        matches!(err, FetchError::Refused { status, .. } if status == 404),
        "{err}"
    );
    assert_eq!(server.hits("/missing.conf"), 1);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "no back-off for a 4xx"
    );
}

#[tokio::test]
async fn server_errors_are_retried_until_success() {
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![
            Reply::Status(500, "oops".into()),
            Reply::Status(503, "busy".into()),
            Reply::Status(200, BODY.into()),
        ],
    )]);
    let fetched = fetch_all(&[source(&server.url("/pool.conf"), None)], &policy(5000))
        .await
        .unwrap();
    assert_eq!(fetched[0].body, BODY);
    assert_eq!(server.hits("/pool.conf"), 3);
}

#[tokio::test]
async fn persistent_server_errors_give_up_at_the_deadline() {
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Status(502, "bad gateway".into())],
    )]);
    let start = Instant::now();
    let err = fetch_all(&[source(&server.url("/pool.conf"), None)], &policy(1500))
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::GaveUp { .. }), "{err}");
    assert!(err.to_string().contains("502"), "{err}");
    assert!(server.hits("/pool.conf") >= 2);
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Hang(Duration::from_secs(10))],
    )]);
    let start = Instant::now();
    let err = fetch_all(&[source(&server.url("/pool.conf"), None)], &policy(1000))
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::GaveUp { .. }), "{err}");
    assert!(err.to_string().contains("timed out"), "{err}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_and_without_a_length() {
    let big = "X = 1\n".repeat(20_000);
    let server = ConfigServer::start(vec![
        ("/declared.conf", vec![Reply::Status(200, big)]),
        ("/streamed.conf", vec![Reply::Chunked(1024 * 1024)]),
    ]);
    for path in ["/declared.conf", "/streamed.conf"] {
        let err = fetch_all(&[source(&server.url(path), None)], &policy(3000))
            .await
            .unwrap_err();
        assert!(
            matches!(err, FetchError::TooLarge { limit: 65536, .. }),
            "{path}: {err}"
        );
        assert_eq!(
            server.hits(path),
            1,
            "{path}: a size violation is not retried"
        );
    }
}

#[tokio::test]
async fn a_sha256_mismatch_is_refused() {
    let server = ConfigServer::start(vec![("/pool.conf", vec![Reply::Status(200, BODY.into())])]);
    let wrong = "0".repeat(64);
    let err = fetch_all(
        &[source(&server.url("/pool.conf"), Some(wrong.clone()))],
        &policy(3000),
    )
    .await
    .unwrap_err();
    match err {
        FetchError::Checksum {
            expected, actual, ..
        } => {
            assert_eq!(expected, wrong);
            assert_eq!(actual, format!("{:x}", Sha256::digest(BODY.as_bytes())));
        }
        other => panic!("expected a checksum error, got {other}"),
    }
}

#[tokio::test]
async fn an_unreachable_host_is_retried_then_reported() {
    let url = format!("http://127.0.0.1:{}/pool.conf", closed_port());
    let start = Instant::now();
    let err = fetch_all(&[source(&url, None)], &policy(1200))
        .await
        .unwrap_err();
    match &err {
        FetchError::GaveUp { attempts, last, .. } => {
            assert!(*attempts >= 2, "{err}");
            assert!(last.contains("onnect"), "{err}");
        }
        other => panic!("expected GaveUp, got {other}"),
    }
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn plain_http_is_refused_unless_allowed() {
    let server = ConfigServer::start(vec![("/pool.conf", vec![Reply::Status(200, BODY.into())])]);
    let mut strict = policy(1000);
    strict.allow_http = false;
    let err = fetch_all(&[source(&server.url("/pool.conf"), None)], &strict)
        .await
        .unwrap_err();
    assert_eq!(server.hits("/pool.conf"), 0, "{err}");
}

#[tokio::test]
async fn binary_data_is_not_configuration() {
    let server = ConfigServer::start(vec![(
        "/pool.conf",
        vec![Reply::Status(200, "A = 1\0".into())],
    )]);
    let err = fetch_all(&[source(&server.url("/pool.conf"), None)], &policy(1000))
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::NotText { .. }), "{err}");
}
