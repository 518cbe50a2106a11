//! The deployment starts: the container's argv is built from the provisioner image that
//! tests/pool/up.sh built from the Dockerfile's `provisioner` target (its Entrypoint and Cmd, as
//! `docker image inspect` reports them) and from each manifest in deploy/kubernetes exactly as
//! the container runtime and the kubelet build it, and parsed with pilotd's own CLI. (An
//! entrypoint ending in `run` plus the Deployment's `args: [-c, FILE, run]` once made
//! `pilotd run -c FILE run`, which exits 2.) The image's user and its condor client
//! configuration are read from the image itself, by running its own programs.

use crate::harness;
use clap::Parser;
use pilotd::cli::{Cli, Command};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The provisioner image tests/pool/up.sh built (`PILOTD_TEST_PROVISIONER_IMAGE`).
fn provisioner_image() -> String {
    std::env::var("PILOTD_TEST_PROVISIONER_IMAGE").unwrap_or_else(|_| {
        panic!(
            "PILOTD_TEST_PROVISIONER_IMAGE is not set: this test needs the provisioner image \
             built from the Dockerfile; run tests/run.sh, or `eval \"$(tests/pool/up.sh)\"` \
             and export the result"
        )
    })
}

/// What the image's config says a container starts with: ENTRYPOINT and CMD (as Docker
/// records them: an ENTRYPOINT set in a stage clears a CMD inherited from its base) and USER.
struct ImageStart {
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    user: String,
}

fn inspect(image: &str) -> ImageStart {
    let out = harness::sh_ok(&format!("docker image inspect {image}"));
    let all: Value = serde_json::from_str(&out).expect("docker image inspect prints JSON");
    let config = &all[0]["Config"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|s| s.as_str().expect("argv entries are strings").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    ImageStart {
        entrypoint: strings(&config["Entrypoint"]),
        cmd: strings(&config["Cmd"]),
        user: config["User"].as_str().unwrap_or_default().to_string(),
    }
}

/// Runs `program args` in a container of `image` (as the image's user, or `user`); its stdout.
fn in_image(image: &str, user: Option<&str>, program: &str, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new("docker");
    cmd.args(["run", "--rm", "--entrypoint", program]);
    if let Some(u) = user {
        cmd.args(["--user", u]);
    }
    let out = cmd.arg(image).args(args).output().expect("docker runs");
    assert!(
        out.status.success(),
        "{program} {args:?} in {image}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The kubelet's rule: `command` replaces the ENTRYPOINT (and then the image's CMD is not
/// used), `args` replaces the CMD.
fn container_argv(image: (&[String], &[String]), container: &Value) -> Vec<String> {
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array().map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("argv entries are strings").to_string())
                .collect()
        })
    };
    let command = strings(&container["command"]);
    let args = strings(&container["args"]);
    match (command, args) {
        (None, None) => [image.0, image.1].concat(),
        (None, Some(a)) => [image.0.to_vec(), a].concat(),
        (Some(c), None) => c,
        (Some(c), Some(a)) => [c, a].concat(),
    }
}

/// The pilotd command line inside tini's: `tini -- pilotd ARGS`.
fn pilotd_argv(argv: &[String]) -> &[String] {
    assert_eq!(
        argv.first().map(String::as_str),
        Some("/usr/bin/tini"),
        "{argv:?}: tini is PID 1"
    );
    assert_eq!(argv.get(1).map(String::as_str), Some("--"), "{argv:?}");
    assert!(
        argv.get(2).is_some_and(|p| p.ends_with("/pilotd")),
        "{argv:?}: tini runs pilotd"
    );
    &argv[2..]
}

fn manifests() -> Vec<(PathBuf, Value)> {
    let dir = harness::repo("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", f.display()));
        out.extend(docs.into_iter().map(|d| (f.clone(), d)));
    }
    out
}

fn containers(doc: &Value) -> Vec<&Value> {
    let spec = if doc["kind"] == "Pod" {
        &doc["spec"]
    } else {
        &doc["spec"]["template"]["spec"]
    };
    spec["containers"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs the Docker engine and the provisioner image tests/pool/up.sh builds: tests/run.sh runs it"]
fn the_image_and_every_manifest_start_pilotd_run_with_a_config_the_configmap_holds() {
    let name = provisioner_image();
    let built = inspect(&name);
    let image = (built.entrypoint.as_slice(), built.cmd.as_slice());

    // The image on its own (`docker run IMAGE`) runs the provisioner.
    let alone = [image.0, image.1].concat();
    let cli = Cli::try_parse_from(pilotd_argv(&alone))
        .unwrap_or_else(|e| panic!("image argv {alone:?}: {e}"));
    assert!(matches!(cli.command, Command::Run(_)), "{alone:?}");
    // And the image really starts it: pilotd runs on the base's libc, as the image's user, and
    // without a mounted config it stops at the file the CMD names.
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", &name])
        .output()
        .expect("docker runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "docker run {name}: {stderr}");
    assert!(
        stderr.contains("cannot read /etc/pilotd/pilotd.toml"),
        "docker run {name}: {stderr}"
    );

    let docs = manifests();
    let configmaps: Vec<&Value> = docs
        .iter()
        .map(|(_, d)| d)
        .filter(|d| d["kind"] == "ConfigMap")
        .collect();
    let mut started = 0;
    for (file, doc) in &docs {
        for c in containers(doc) {
            let argv = container_argv(image, c);
            let cli = Cli::try_parse_from(pilotd_argv(&argv)).unwrap_or_else(|e| {
                panic!("{}: container {}: {argv:?}: {e}", file.display(), c["name"])
            });
            assert!(
                matches!(cli.command, Command::Run(_)),
                "{}: {argv:?} does not run the provisioner",
                file.display()
            );
            // The config file it names is a key of a ConfigMap mounted at that path.
            let config = cli.global.config;
            let spec = &doc["spec"]["template"]["spec"];
            let mount = c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| config.starts_with(m["mountPath"].as_str().unwrap()))
                .unwrap_or_else(|| panic!("{}: nothing mounted at {config:?}", file.display()));
            let volume = spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == mount["name"])
                .expect("the mount's volume");
            let cm_name = volume["configMap"]["name"]
                .as_str()
                .expect("the config comes from a ConfigMap");
            let rel = config
                .strip_prefix(mount["mountPath"].as_str().unwrap())
                .unwrap();
            let key = rel.to_str().unwrap();
            let cm = configmaps
                .iter()
                .find(|m| m["metadata"]["name"] == cm_name)
                .unwrap_or_else(|| panic!("ConfigMap {cm_name} is not in deploy/kubernetes"));
            let toml = cm["data"][key]
                .as_str()
                .unwrap_or_else(|| panic!("ConfigMap {cm_name} has no key {key}"));
            let site = pilotd_core::config::parse_site_with(
                Path::new(key),
                toml,
                &[pilotd_kubernetes::config::check_table],
            )
            .unwrap_or_else(|e| panic!("{cm_name}/{key}: {e}"));
            assert!(
                site.kubernetes.is_some(),
                "{cm_name}/{key} is kubernetes mode"
            );

            // The pod's user is the image's own non-root user, with a passwd entry (the condor
            // tools look the caller up).
            let ctx = &spec["securityContext"];
            let (uid, gid) = (
                ctx["runAsUser"].as_u64().unwrap(),
                ctx["runAsGroup"].as_u64(),
            );
            assert!(uid != 0);
            let want = match gid {
                Some(g) => format!("{uid}:{g}"),
                None => uid.to_string(),
            };
            assert_eq!(built.user, want, "the image's USER is the pod's runAsUser");
            let uid = uid.to_string();
            let user_name = in_image(&name, Some(&uid), "id", &["-un"]);
            assert!(
                !user_name.is_empty() && !user_name.bytes().all(|b| b.is_ascii_digit()),
                "no passwd entry for runAsUser {uid} in the image: id -un says {user_name:?}"
            );
            started += 1;
        }
    }
    assert_eq!(started, 1, "one provisioner container in deploy/kubernetes");
}

/// The image's condor client reads 50-pilotd-client.conf: every setting of
/// deploy/kubernetes/condor-client.conf is what `condor_config_val` reports in the image, and the
/// CA bundle and directory it names are there (on a Debian base the bundle is not at EL's path
/// unless the Dockerfile links it).
#[test]
#[ignore = "needs the Docker engine and the provisioner image tests/pool/up.sh builds: tests/run.sh runs it"]
fn the_images_condor_client_has_the_client_settings_of_deploy_kubernetes() {
    let image = provisioner_image();
    let sources = in_image(&image, None, "condor_config_val", &["-config"]);
    assert!(
        sources
            .lines()
            .any(|l| l.trim() == "/etc/condor/config.d/50-pilotd-client.conf"),
        "condor in the image does not read 50-pilotd-client.conf:\n{sources}"
    );
    let file = harness::repo("deploy/kubernetes/condor-client.conf");
    let text = std::fs::read_to_string(&file).unwrap();
    let settings: Vec<(&str, &str)> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("{}: not KEY = VALUE: {l}", file.display()));
            (k.trim(), v.trim())
        })
        .collect();
    assert!(settings.len() >= 5, "{settings:?}");
    let keys: Vec<&str> = settings.iter().map(|(k, _)| *k).collect();
    let values = in_image(&image, None, "condor_config_val", &keys);
    let got: Vec<(&str, &str)> = keys.iter().copied().zip(values.lines()).collect();
    assert_eq!(got, settings, "the image's condor client settings");
    let value = |key: &str| settings.iter().find(|(k, _)| *k == key).unwrap().1;
    in_image(
        &image,
        None,
        "test",
        &["-s", value("AUTH_SSL_CLIENT_CAFILE")],
    );
    in_image(
        &image,
        None,
        "test",
        &["-d", value("AUTH_SSL_CLIENT_CADIR")],
    );
}

#[test]
fn argv_rules_are_the_runtimes() {
    let tini_pilotd: Vec<String> = vec![
        "/usr/bin/tini".into(),
        "--".into(),
        "/usr/local/bin/pilotd".into(),
    ];
    let run = vec!["run".to_string()];
    let image = (tini_pilotd.as_slice(), run.as_slice());
    let c: Value = serde_json::json!({"args": ["-c", "/x", "run"]});
    assert_eq!(container_argv(image, &c)[3..], ["-c", "/x", "run"]);
    let c: Value = serde_json::json!({"command": ["/bin/sh"]});
    assert_eq!(container_argv(image, &c), ["/bin/sh"]);
    // The defect this file exists for: an entrypoint that already ends in `run`.
    let old_entrypoint = [tini_pilotd.clone(), run.clone()].concat();
    let old = (old_entrypoint.as_slice(), &[][..]);
    let argv = container_argv(old, &serde_json::json!({"args": ["-c", "/x", "run"]}));
    let e = Cli::try_parse_from(pilotd_argv(&argv)).unwrap_err();
    assert!(e.to_string().contains("unexpected argument 'run'"), "{e}");
}

/// The RBAC rule a request needs: (API group, resource, verb), as the API server's request
/// info reads its path and method.
fn rbac_of(
    method: &str,
    path: &str,
    query: &std::collections::BTreeMap<String, String>,
) -> (String, String, String) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => panic!("not an API path: {path}"),
    };
    let (resource, named) = match rest {
        ["namespaces", _, resource] => (*resource, false),
        ["namespaces", _, resource, _name] => (*resource, true),
        _ => panic!("not a namespaced resource: {path}"),
    };
    let verb = match (method, named) {
        ("GET", false) if query.get("watch").is_some_and(|w| w == "true") => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        other => panic!("{other:?} {path}"),
    };
    (group.into(), resource.into(), verb.into())
}

/// deploy/kubernetes/role.yaml grants exactly what pilotd's Kubernetes client asks: every
/// public call of `KubeBackend` is made against the fake API server, the requests it saw are
/// read as RBAC rules, and each must be granted, with nothing granted beyond them.
#[tokio::test]
async fn the_role_grants_exactly_what_the_client_asks() {
    use super::fake_api::FakeKube;
    use pilotd_kubernetes::client::KubeBackend;
    use std::collections::BTreeSet;
    // The client's public calls, read from its source: a new one must be made below too.
    let source = std::fs::read_to_string(harness::repo("crates/kubernetes/src/client.rs")).unwrap();
    let calls: BTreeSet<&str> = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub async fn "))
        .filter_map(|l| l.split('(').next())
        .filter(|n| *n != "connect")
        .collect();
    assert_eq!(
        calls,
        BTreeSet::from(["create_job", "delete_job", "list_jobs", "list_pods"]),
        "a new call of the client: make it below so the role is checked against it"
    );
    let fake = FakeKube::start().await;
    let table = pilotd_kubernetes::config::KubernetesConfig::from_table_text(
        "namespace = \"ns1\"\napp_name = \"osg-direct\"\n",
    )
    .unwrap();
    let settings =
        pilotd_kubernetes::settings::Settings::from_table(&table, Path::new("/nonexistent"))
            .unwrap();
    let b = KubeBackend::from_client(fake.client("ns1"), &settings.connection);
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "osg-direct-1", "labels": {"prp-htcondor-portal": "wn", "k8s-app": "osg-direct"}},
        "spec": {"template": {"metadata": {"labels": {"prp-htcondor-portal": "wn", "k8s-app": "osg-direct"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "htcondor", "image": "x"}]}}}
    }))
    .unwrap();
    b.create_job(&job).await.unwrap();
    b.list_pods().await.unwrap();
    b.list_jobs().await.unwrap();
    b.delete_job("osg-direct-1").await.unwrap();
    let used: BTreeSet<(String, String, String)> = fake
        .seen()
        .iter()
        .map(|s| rbac_of(&s.method, &s.path, &s.query))
        .collect();
    assert_eq!(used.len(), 4, "{used:?}");

    let role = manifests()
        .into_iter()
        .find(|(_, d)| d["kind"] == "Role")
        .expect("a Role in deploy/kubernetes")
        .1;
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        let list = |k: &str| -> Vec<String> {
            rule[k]
                .as_array()
                .unwrap_or_else(|| panic!("role.yaml: a rule without {k}"))
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        for g in list("apiGroups") {
            for r in list("resources") {
                for v in list("verbs") {
                    assert!(
                        g != "*" && r != "*" && v != "*",
                        "role.yaml grants a wildcard"
                    );
                    granted.insert((g.clone(), r.clone(), v));
                }
            }
        }
    }
    let missing: Vec<_> = used.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "role.yaml lacks {missing:?} (group, resource, verb)"
    );
    let extra: Vec<_> = granted.difference(&used).collect();
    assert!(
        extra.is_empty(),
        "role.yaml grants {extra:?}, which pilotd never asks"
    );
}
