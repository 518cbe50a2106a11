//! The remote manifest fetched from a real HTTP server on 127.0.0.1: good, 500, garbage,
//! huge, an image outside allowed_images, unreachable. Every failure is an error that names the
//! URL; only a good manifest comes back.

use pilotd_volunteer::record::manifest::{self, ManifestError};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves one canned response per connection, forever (the test ends the runtime).
async fn serve(status: &'static str, body: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/toml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(&body).await;
            });
        }
    });
    format!("http://127.0.0.1:{}/manifest.toml", addr.port())
}

fn allowed() -> Vec<String> {
    vec!["127.0.0.1:5000/pilotd-test/*".into()]
}

async fn get(url: &str) -> Result<manifest::Manifest, ManifestError> {
    manifest::fetch(
        url,
        64 * 1024,
        Duration::from_secs(5),
        &allowed(),
        &BTreeMap::new(),
    )
    .await
}

const GOOD: &str = r#"version = "7"
[worker]
image = "127.0.0.1:5000/pilotd-test/worker:2"
idle_timeout = "5m"
[worker.env]
GLIDEIN_ResourceName = "LAB-1"
"#;

#[tokio::test]
async fn good_manifest_is_accepted() {
    let url = serve("200 OK", GOOD.as_bytes().to_vec()).await;
    let m = get(&url).await.unwrap();
    assert_eq!(m.version, "7");
    assert_eq!(
        m.worker.image.as_deref(),
        Some("127.0.0.1:5000/pilotd-test/worker:2")
    );
}

#[tokio::test]
async fn server_error_is_reported_with_the_url() {
    let url = serve("500 Internal Server Error", b"oops".to_vec()).await;
    let e = get(&url).await.unwrap_err().to_string();
    assert!(e.contains(&url) && e.contains("HTTP 500"), "{e}");
    assert!(e.contains("last good manifest stays in force"), "{e}");
}

#[tokio::test]
async fn garbage_is_invalid_with_a_position() {
    let url = serve("200 OK", b"version = \"1\"\n[worker\n".to_vec()).await;
    let e = get(&url).await.unwrap_err();
    assert!(matches!(e, ManifestError::Invalid { .. }), "{e}");
    assert!(e.to_string().contains("line 2"), "{e}");
}

#[tokio::test]
async fn huge_manifest_is_refused() {
    let mut body = GOOD.as_bytes().to_vec();
    body.extend(std::iter::repeat_n(b'#', 200 * 1024));
    let url = serve("200 OK", body).await;
    let e = get(&url).await.unwrap_err().to_string();
    assert!(e.contains("larger than 65536 bytes"), "{e}");
}

#[tokio::test]
async fn image_outside_allowed_images_is_refused() {
    let body = GOOD.replace(
        "127.0.0.1:5000/pilotd-test/worker:2",
        "docker.io/someone/else:1",
    );
    let url = serve("200 OK", body.into_bytes()).await;
    let e = get(&url).await.unwrap_err();
    assert!(matches!(e, ManifestError::Refused { .. }), "{e}");
    assert!(
        e.to_string().contains("not in this host's allowed_images"),
        "{e}"
    );
}

#[tokio::test]
async fn unreachable_and_plain_http_elsewhere() {
    // A port nothing listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let e = get(&format!("http://127.0.0.1:{port}/m.toml"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("unreachable"), "{e}");
    let e = get("http://pool.example.org/m.toml")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not https"), "{e}");
    // The user-info trick: the host is evil.example, whatever the text starts with.
    let e = get("http://127.0.0.1@evil.example/m.toml")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not https (its host is evil.example)"), "{e}");
}

/// Answers every request with a redirect to `location`, and counts the requests.
async fn redirect_to(location: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let location = location.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = sock.write_all(head.as_bytes()).await;
            });
        }
    });
    (
        format!("http://127.0.0.1:{}/manifest.toml", addr.port()),
        hits,
    )
}

#[tokio::test]
async fn every_redirect_is_held_to_https_and_credentials_never_show() {
    // A hop to plain http elsewhere ends the fetch before connecting (192.0.2.0/24 is
    // TEST-NET-1: nothing is sent anywhere).
    let (url, hits) =
        redirect_to("http://user:pw@192.0.2.1/m.toml?access_token=s3cret".into()).await;
    let e = get(&url).await.unwrap_err().to_string();
    assert!(e.contains("which is not https"), "{e}");
    assert!(e.contains("192.0.2.1"), "{e}");
    assert!(!e.contains("pw") && !e.contains("s3cret"), "{e}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    // A hop to loopback http is followed (to a real manifest).
    let good = serve("200 OK", GOOD.as_bytes().to_vec()).await;
    let (url, _) = redirect_to(good).await;
    assert_eq!(get(&url).await.unwrap().version, "7");
    // A loop ends after 3 hops.
    let (inner, _) = redirect_to("http://127.0.0.1:1/".into()).await;
    let (a, _) = redirect_to(inner.clone()).await;
    let (b, _) = redirect_to(a).await;
    let (c, _) = redirect_to(b).await;
    let e = get(&c).await.unwrap_err().to_string();
    assert!(e.contains("more than 3 redirects"), "{e}");
    // The manifest's own URL never shows its credentials either.
    let e = get("https://u:pw@127.0.0.1:1/m.toml?token=t0k")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("https://***@127.0.0.1:1/m.toml?token=***"),
        "{e}"
    );
    assert!(!e.contains("pw") && !e.contains("t0k"), "{e}");
}

/// Env that changes what a worker loads, trusts or whom it talks through is refused at fetch,
/// each name with why, whatever its case; the pool's own names in the same manifest would pass.
#[tokio::test]
async fn env_that_steers_loading_trust_or_proxies_is_refused_at_fetch() {
    let refused = [
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "SSL_CERT_FILE",
        "ftp_proxy",
        "HTTPS_PROXY",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "LD_AUDIT",
    ];
    let mut body = String::from("version = \"8\"\n[worker.env]\nGLIDEIN_Site = \"OK\"\n");
    for k in refused {
        body.push_str(&format!("{k} = \"/pilot/evil\"\n"));
    }
    let url = serve("200 OK", body.into_bytes()).await;
    let e = get(&url).await.unwrap_err().to_string();
    for k in refused {
        assert!(
            e.contains(&format!("env {k} may not come from a remote manifest: it ")),
            "{k} not refused with why: {e}"
        );
    }
    assert!(!e.contains("GLIDEIN_Site"), "{e}");
}
