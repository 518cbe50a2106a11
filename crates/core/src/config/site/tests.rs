use super::*;
use crate::config::diag::Diagnostics;

#[test]
fn worker_users_are_numeric_or_the_images() {
    assert_eq!(WorkerUser::parse("65532:65532"), Ok(WorkerUser::DEFAULT));
    assert_eq!(
        WorkerUser::parse("1000"),
        Ok(WorkerUser::Ids {
            uid: 1000,
            gid: 1000
        })
    );
    assert_eq!(
        WorkerUser::parse("1000:50"),
        Ok(WorkerUser::Ids { uid: 1000, gid: 50 })
    );
    assert_eq!(WorkerUser::parse("image"), Ok(WorkerUser::Image));
    for bad in [
        "condor",
        "1000:condor",
        "",
        ":",
        "-1",
        "4294967295",
        "1:2:3",
    ] {
        assert!(WorkerUser::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        WorkerUser::DEFAULT.engine_user().as_deref(),
        Some("65532:65532")
    );
    assert_eq!(WorkerUser::Image.engine_user(), None);
    // Unset means the default, never the image's root.
    assert_eq!(
        SiteConfig::defaults().worker.worker_user(),
        WorkerUser::DEFAULT
    );
}

#[test]
fn a_user_name_is_refused_at_its_position() {
    let text = "[worker]\nuser = \"condor\"\n";
    let site: SiteConfig = toml::from_str(text).unwrap();
    let mut d = Diagnostics::new(std::path::Path::new("pilotd.toml"), text);
    site.validate_worker(&mut d);
    let e = d.into_vec().into_iter().next().expect("refused");
    assert!(
        e.message.contains("user `condor` is not a numeric uid"),
        "{e:?}"
    );
    assert_eq!((e.line, e.col), (2, 8));
}

#[test]
fn qualification() {
    assert!(is_fully_qualified(
        "hub.opensciencegrid.org/osg-htc/ospool-ep:25-release"
    ));
    assert!(is_fully_qualified("127.0.0.1:5000/pilotd-test/worker:1"));
    assert!(is_fully_qualified("localhost/worker:1"));
    assert!(is_fully_qualified("r.example.org/a/b@sha256:abc"));
    assert!(!is_fully_qualified("ospool-ep:25-release"));
    assert!(!is_fully_qualified("osg-htc/ospool-ep:25"));
    assert!(!is_fully_qualified(
        "hub.opensciencegrid.org/osg-htc/ospool-ep"
    ));
    assert!(!is_fully_qualified("127.0.0.1:5000/worker"));
}

#[test]
fn allow_list() {
    let pats = vec!["hub.opensciencegrid.org/osg-htc/*".to_string()];
    assert!(image_allowed(
        "hub.opensciencegrid.org/osg-htc/ospool-ep:25",
        &pats
    ));
    assert!(!image_allowed("hub.opensciencegrid.org/evil/x:1", &pats));
    assert!(!image_allowed(
        "hub.opensciencegrid.org/osg-htcx/x:1",
        &pats
    ));
}

#[test]
fn patterns_match_whole_components_or_nothing() {
    let pats = |p: &str| vec![p.to_string()];
    // A partial-name `*` would let `osg-evil` through: refused, and matches nothing.
    assert!(check_image_pattern("registry.example/osg*").is_err());
    assert!(!image_allowed(
        "registry.example/osg-evil/x:1",
        &pats("registry.example/osg*")
    ));
    assert!(!image_allowed(
        "registry.example/osg/x:1",
        &pats("registry.example/osg*")
    ));
    for bad in [
        "*",
        "/*",
        "a/*/b:1",
        "r.example/a:1:*",
        "r.example/a@sha256:x:*",
    ] {
        assert!(check_image_pattern(bad).is_err(), "{bad}");
    }
    // `path/*`: everything below the component, at any depth, never a sibling.
    let under = pats("registry.example/osg/*");
    assert!(image_allowed("registry.example/osg/ep:1", &under));
    assert!(image_allowed("registry.example/osg/a/b@sha256:ab", &under));
    assert!(!image_allowed("registry.example/osg-evil/ep:1", &under));
    assert!(!image_allowed("registry.example/osg", &under));
    // `name:*`: every tag and digest of one repository, not of a longer name.
    let tags = pats("127.0.0.1:5000/pool/ep:*");
    assert!(image_allowed("127.0.0.1:5000/pool/ep:25", &tags));
    assert!(image_allowed("127.0.0.1:5000/pool/ep@sha256:ab", &tags));
    assert!(!image_allowed("127.0.0.1:5000/pool/ep-evil:25", &tags));
    assert!(!image_allowed("127.0.0.1:5000/pool/ep/x:25", &tags));
    // Exact references and digests.
    let exact = pats("r.example/a/b@sha256:ab");
    assert!(image_allowed("r.example/a/b@sha256:ab", &exact));
    assert!(!image_allowed("r.example/a/b@sha256:abc", &exact));
}

#[test]
fn only_https_or_loopback_http_on_the_parsed_url() {
    for ok in [
        "https://pool.example.org/m.toml",
        "http://127.0.0.1:8080/m",
        "http://localhost/m",
        "http://[::1]:9/m",
        "http://127.0.0.2/m",
    ] {
        assert!(secure_url(ok).is_ok(), "{ok}");
    }
    for bad in [
        "http://pool.example.org/m",
        "http://127.0.0.1@evil.example/m",
        "http://localhost:80@evil.example/m",
        "http://user@host/",
        "ftp://127.0.0.1/m",
        "file:///etc/passwd",
        "not a url",
    ] {
        assert!(secure_url(bad).is_err(), "{bad}");
    }
    let e = secure_url("http://u:pw@evil.example/?token=t")
        .unwrap_err()
        .to_string();
    assert!(!e.contains("pw") && !e.contains("=t"), "{e}");
    assert!(e.contains("evil.example"), "{e}");
}

#[test]
fn env_names_are_plain_identifiers() {
    for good in ["NUM_CPUS", "_X", "a1"] {
        assert!(is_env_name(good), "{good}");
    }
    for bad in ["", "A=B", "1X", "A B", "A\nB", "Ä"] {
        assert!(!is_env_name(bad), "{bad:?}");
    }
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = SiteConfig::defaults();
    assert_eq!(c.mode, Mode::Volunteer);
    assert_eq!(c.interval.0, Duration::from_secs(30));
    assert_eq!(c.max_lifetime(), Duration::from_secs(86400));
    assert_eq!(c.host.utmp, PathBuf::from("/var/run/utmp"));
}

/// `check`'s lines for a pilotd.toml of `src`.
fn site_diags(src: &str) -> Vec<String> {
    let cfg: SiteConfig = toml::from_str(src).expect("parses");
    let mut d = Diagnostics::new(std::path::Path::new("pilotd.toml"), src);
    cfg.validate(&mut d);
    d.into_vec().into_iter().map(|x| x.to_string()).collect()
}

#[test]
fn the_sites_proxy_reaches_workers_in_both_spellings() {
    let cfg: SiteConfig = toml::from_str(
        "[worker]\nhttp_proxy = \"http://squid.example.org:3128\"\n\
         https_proxy = \"http://squid.example.org:3128\"\nno_proxy = \"localhost,.example.org\"\n",
    )
    .unwrap();
    let env: std::collections::BTreeMap<String, String> =
        cfg.worker.proxy_env().into_iter().collect();
    assert_eq!(env.len(), 6, "{env:?}");
    for name in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"] {
        assert_eq!(env[name], "http://squid.example.org:3128", "{name}");
    }
    assert_eq!(env["NO_PROXY"], "localhost,.example.org");
    assert!(site_diags("[worker]\nhttp_proxy = \"http://squid.example.org:3128\"\n").is_empty());
    // None set: no proxy variable at all.
    assert!(SiteConfig::defaults().worker.proxy_env().is_empty());
}

#[test]
fn a_proxy_workers_cannot_use_is_refused_at_its_line() {
    let out = site_diags("[worker]\nhttp_proxy = \"http://pool:s3cret@squid.example.org:3128\"\n");
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].starts_with("pilotd.toml:2:14: [worker] http_proxy"),
        "{out:?}"
    );
    assert!(out[0].contains("every job"), "{out:?}");
    assert!(
        !out[0].contains("s3cret"),
        "the password is not shown: {out:?}"
    );
    let out = site_diags("[worker]\nhttps_proxy = \"socks5://squid.example.org:1080\"\n");
    assert!(
        out[0].contains("not an http:// or https:// proxy URL"),
        "{out:?}"
    );
    // A campus proxy on a private address: pilotd's own network refuses it unless allowed.
    let private = "[worker]\nhttp_proxy = \"http://10.20.0.5:3128\"\n";
    let out = site_diags(private);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].contains("egress_allow = [\"10.20.0.5/32\"]"),
        "{out:?}"
    );
    assert!(site_diags(&format!("{private}egress_allow = [\"10.20.0.0/16\"]\n")).is_empty());
    assert!(site_diags(&format!("{private}network = \"bridge\"\n")).is_empty());
    // Set twice.
    let out =
        site_diags("[worker]\nno_proxy = \"localhost\"\n[worker.env]\nNO_PROXY = \"localhost\"\n");
    assert!(
        out[0].contains("also set as [worker.env] NO_PROXY"),
        "{out:?}"
    );
}

/// `[slot_ad] contribution`: off unless set; a value that is not true or false, or a key the
/// table does not have, is refused at its FILE:LINE:COL; turned on without a pilot that
/// publishes the file, `check` warns at the key.
#[test]
fn the_slot_ads_contribution_is_the_sites_choice_and_refused_when_misspelt() {
    assert!(!SiteConfig::defaults().slot_ad.contribution());
    let refused =
        |src: &str| match crate::config::parse_site(std::path::Path::new("pilotd.toml"), src) {
            Err(crate::config::ConfigError::Invalid(d)) => d[0].to_string(),
            other => panic!("{src}: not refused: {other:?}"),
        };
    let e = refused("[slot_ad]\ncontribution = \"yes\"\n");
    assert!(e.starts_with("pilotd.toml:2:16: "), "{e}");
    assert!(e.contains("bool"), "{e}");
    let e = refused("[slot_ad]\ncpu_hours = true\n");
    assert!(e.starts_with("pilotd.toml:2:1: "), "{e}");
    assert!(e.contains("cpu_hours") && e.contains("contribution"), "{e}");

    let on = "[slot_ad]\ncontribution = true\n";
    let cfg: SiteConfig = toml::from_str(on).unwrap();
    assert!(cfg.slot_ad.contribution());
    assert!(site_diags(on).is_empty(), "a warning, not an error");
    let warned = cfg.warnings();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(
        crate::config::diag::line_col(on, warned[0].0.start),
        (2, 16)
    );
    assert!(warned[0].1.contains("no pilot publishes"), "{warned:?}");
    let published: SiteConfig = toml::from_str(&format!(
        "{on}[worker.env]\nPILOT_AD_FILE = \"{{ad_file}}\"\n"
    ))
    .unwrap();
    assert!(published.warnings().is_empty());
    assert!(
        toml::from_str::<SiteConfig>("[slot_ad]\ncontribution = false\n")
            .unwrap()
            .warnings()
            .is_empty()
    );
}
