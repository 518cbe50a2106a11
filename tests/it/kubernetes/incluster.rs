//! `[kubernetes] client = "in-cluster"` end to end: the real `pilotd` binary connects as it
//! does in a pod, through `kube::Config::incluster()` — the API server from
//! `KUBERNETES_SERVICE_HOST`/`_PORT`, the service account's token, CA and namespace from
//! /var/run/secrets/kubernetes.io/serviceaccount/ — and talks HTTPS with the token as a bearer
//! credential to the fake API server (`FakeKube::start_tls`), whose certificate it must verify
//! against the account's ca.crt.
//!
//! kube reads those files at fixed paths that no setting moves, so each pilotd gets a private
//! mount namespace with a tmpfs over /run (`unshare --mount`): the account exists for that
//! process only and the host's /var/run is never written. That takes root (CAP_SYS_ADMIN), so
//! the tests are `#[ignore]`d with that reason; tests/run.sh runs them (`--include-ignored`).

use super::cycle::{NS, Pool, first_cycle_shapes, jobs_by_shape};
use super::fake_api::FakeKube;
use crate::harness;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// What kube's in-cluster config reads; also the mount point of a pod's service account.
const ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A pod's service account volume; a `None` file is left out.
struct Account {
    token: Option<String>,
    ca_pem: Option<String>,
    namespace: Option<String>,
}

impl Account {
    /// A complete account for `fake`: its CA, this token, the provisioner's namespace.
    fn of(fake: &FakeKube, token: &str) -> Account {
        Account {
            token: Some(token.to_string()),
            ca_pem: fake.ca_pem.clone(),
            namespace: Some(NS.to_string()),
        }
    }
}

/// A pilotd.toml for the binary: kubernetes mode against `pool`'s fake condor tools, the
/// in-cluster client, state in the pool's directory, and a cycle long enough that one run
/// makes exactly one.
fn site_file(pool: &Pool) -> PathBuf {
    let dir = pool.dir.path();
    let text = format!(
        "mode = \"kubernetes\"\nstate_dir = '{}'\n\n[kubernetes]\n{}",
        dir.join("state").display(),
        pool.table("client = \"in-cluster\"\ncycle = \"1h\"\n")
    );
    let path = dir.join("pilotd.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `pilotd -c SITE ARGS` as in a pod: in a private mount namespace whose /run (where
/// /var/run leads on Debian; resolved, so a real /var/run directory works too) is a fresh
/// tmpfs holding only `account`, with the service environment pointing at `fake`. stdout and
/// stderr go to `name`.out / `name`.err in the pool's directory (a file never fills up and
/// blocks the daemon as an unread pipe can).
fn in_pod(pool: &Pool, fake: &FakeKube, account: &Account, name: &str, args: &[&str]) -> Command {
    let dir = pool.dir.path();
    // The tmpfs would hide the test's own files if they lived under /run.
    let run = std::fs::canonicalize("/var/run").unwrap_or_else(|_| "/var/run".into());
    assert!(
        !dir.canonicalize().unwrap().starts_with(&run),
        "{} is under {}, which the private tmpfs hides: set TMPDIR elsewhere",
        dir.display(),
        run.display()
    );
    let staged = dir.join(format!("{name}-account"));
    std::fs::create_dir(&staged).unwrap();
    for (file, text) in [
        ("token", &account.token),
        ("ca.crt", &account.ca_pem),
        ("namespace", &account.namespace),
    ] {
        if let Some(text) = text {
            std::fs::write(staged.join(file), text).unwrap();
        }
    }
    let site = site_file(pool);
    // unshare execs sh, which execs pilotd: the child's pid is pilotd's, for SIGTERM.
    let script = format!(
        "set -e\nrun=$(readlink -f /var/run)\nmount -t tmpfs -o mode=0755 tmpfs \"$run\"\n\
         mkdir -p {ACCOUNT_DIR}\ncp -R \"$1\"/. {ACCOUNT_DIR}/\nshift\nexec \"$@\"\n"
    );
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ])
    .arg(&staged)
    .arg(harness::bin())
    .arg("-c")
    .arg(&site)
    .args(args)
    .env("KUBERNETES_SERVICE_HOST", fake.addr.ip().to_string())
    .env("KUBERNETES_SERVICE_PORT", fake.addr.port().to_string())
    .env_remove("KUBECONFIG")
    .env_remove("PILOTD_CONFIG")
    .env_remove("PILOTD_POLICY")
    .env("TZ", "UTC")
    .stdin(Stdio::null())
    .stdout(std::fs::File::create(dir.join(format!("{name}.out"))).unwrap())
    .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
    .kill_on_drop(true);
    c
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

/// Waits (polling the fake, never a fixed sleep) until `done`, the child exits, or a generous
/// deadline for a debug build on a loaded machine passes.
async fn wait_until(child: &mut Child, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !done() && child.try_wait().unwrap().is_none() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs a one-shot command in a pod to its end: whether it succeeded, stdout, stderr.
async fn one_shot(
    pool: &Pool,
    fake: &FakeKube,
    account: &Account,
    name: &str,
    args: &[&str],
) -> (bool, String, String) {
    let mut child = in_pod(pool, fake, account, name, args).spawn().unwrap();
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .unwrap_or_else(|_| panic!("pilotd {args:?} did not finish"))
        .unwrap();
    let dir = pool.dir.path();
    (
        status.success(),
        read(dir, &format!("{name}.out")),
        read(dir, &format!("{name}.err")),
    )
}

#[tokio::test]
#[ignore = "needs root for a private mount namespace (unshare) holding the service account at kube's fixed /var/run/secrets path; tests/run.sh runs it"]
async fn in_cluster_client_sends_the_account_token_over_verified_tls_and_creates_the_jobs() {
    let pool = Pool::new();
    let fake = FakeKube::start_tls().await;
    // A token no other source has: a request carrying it got it from the account's file.
    let token = format!("sa-token-{}-in-cluster", std::process::id());
    let account = Account::of(&fake, &token);

    let mut daemon = in_pod(&pool, &fake, &account, "run", &["run"])
        .spawn()
        .unwrap();
    // The first cycle creates 6 Jobs (the pool of cycle.rs: 3 default, 2 four-CPU, 1 GPU).
    wait_until(&mut daemon, || fake.jobs().len() >= 6).await;
    // Stop it as Kubernetes stops a pod. No id: it has already exited (the asserts below
    // show why); never signal pid 0, which is this test's whole process group.
    if let Some(pid) = daemon.id() {
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
    let status = tokio::time::timeout(Duration::from_secs(60), daemon.wait())
        .await
        .expect("pilotd stops on SIGTERM")
        .unwrap();
    let log = read(pool.dir.path(), "run.err");
    assert_eq!(fake.jobs().len(), 6, "one cycle's Jobs: {log}");
    assert!(status.success(), "{status}: {log}");
    assert_eq!(jobs_by_shape(&fake), first_cycle_shapes());
    assert!(fake.jobs().iter().all(|j| j["metadata"]["namespace"] == NS));
    // The cycle's whole traffic (one pod list, one Job list, 6 creates), each with the
    // account's token as its bearer credential.
    let seen = fake.seen();
    assert_eq!(fake.store.lock().unwrap().count("GET"), 2, "{seen:?}");
    assert_eq!(fake.store.lock().unwrap().count("POST"), 6, "{seen:?}");
    let bearer = format!("Bearer {token}");
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some(bearer.as_str())),
        "{seen:?}"
    );

    // The one-shot commands connect the same way: `snapshot` lists the pods the fake Job
    // controller made for those Jobs, with the same credential.
    fake.clear_seen();
    let (ok, out, err) = one_shot(&pool, &fake, &account, "snapshot", &["snapshot"]).await;
    assert!(ok, "{err}");
    let snap: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(snap["mode"], "kubernetes");
    let pods = snap["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 6, "{out}");
    let jobs: Vec<String> = fake
        .jobs()
        .iter()
        .map(|j| j["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    for p in pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        assert!(
            jobs.iter().any(|j| name.starts_with(&format!("{j}-"))),
            "{name} is a pod of one of {jobs:?}"
        );
    }
    assert_eq!(snap["kube_jobs"].as_array().unwrap().len(), 6, "{out}");
    let seen = fake.seen();
    assert_eq!(seen.len(), 2, "a pod list and a Job list: {seen:?}");
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some(bearer.as_str())),
        "{seen:?}"
    );
}

#[tokio::test]
#[ignore = "needs root for a private mount namespace (unshare) holding the service account at kube's fixed /var/run/secrets path; tests/run.sh runs it"]
async fn in_cluster_client_outside_a_pod_or_without_its_token_fails_and_creates_nothing() {
    let pool = Pool::new();
    let fake = FakeKube::start_tls().await;

    // No service account at all: not in a pod, and the message says so.
    let none = Account {
        token: None,
        ca_pem: None,
        namespace: None,
    };
    let (ok, _, err) = one_shot(&pool, &fake, &none, "bare", &["run"]).await;
    assert!(!ok, "{err}");
    assert!(
        err.contains("cannot use the in-cluster service account"),
        "{err}"
    );
    assert!(err.contains("hint: run pilotd inside a pod"), "{err}");

    // An account without its token: the daemon does not start; the message names the file
    // and is the account's error (kube reads the token only when the client is built).
    let no_token = Account {
        token: None,
        ..Account::of(&fake, "unused")
    };
    let (ok, _, err) = one_shot(&pool, &fake, &no_token, "no-token", &["run"]).await;
    assert!(!ok, "{err}");
    assert!(err.contains(&format!("{ACCOUNT_DIR}/token")), "{err}");
    assert!(
        err.contains("cannot use the in-cluster service account")
            && err.contains("hint: run pilotd inside a pod"),
        "{err}"
    );

    assert!(fake.seen().is_empty(), "{:?}", fake.seen());
    assert!(fake.jobs().is_empty());
}

#[tokio::test]
#[ignore = "needs root for a private mount namespace (unshare) holding the service account at kube's fixed /var/run/secrets path; tests/run.sh runs it"]
async fn in_cluster_client_refuses_a_server_its_ca_did_not_sign() {
    let pool = Pool::new();
    let fake = FakeKube::start_tls().await;
    // Another cluster's CA: the fake's certificate does not chain to it.
    let other = FakeKube::start_tls().await;
    let account = Account {
        ca_pem: other.ca_pem.clone(),
        ..Account::of(&fake, "sa-token")
    };
    let (ok, out, err) = one_shot(&pool, &fake, &account, "wrong-ca", &["snapshot"]).await;
    assert!(!ok, "{out}{err}");
    assert!(err.contains("listing pods"), "{err}");
    // The message carries the cause, so a refused CA does not read like a closed port ...
    assert!(err.contains("UnknownIssuer"), "{err}");
    // ... and the server's side agrees: the client reached it and refused its certificate
    // in the handshake with an unknown-CA alert.
    let refused = fake.store.lock().unwrap().handshake_failures.clone();
    assert!(
        !refused.is_empty() && refused.iter().all(|e| e.contains("UnknownCA")),
        "{refused:?} / {err}"
    );
    // So no request, and no token, reached the server.
    assert!(fake.seen().is_empty(), "{:?}", fake.seen());
    assert!(fake.jobs().is_empty());
}
