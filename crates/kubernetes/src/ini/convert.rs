//! The writing half of `import-ini`: the pilotd.toml of a parsed INI, step by step in the
//! order the provisioner read its keys, with `[kubernetes]`'s defaults (the provisioner's)
//! for the keys the INI leaves out.

use super::{IniError, IniFile, IniValue, UPSTREAM_APP_NAME};
use crate::config::{PullPolicy, defaults};
use crate::encoding::{parse_dict, parse_list};
use crate::jobs::mount_flags;
use std::fmt::Write as _;

/// The keys the provisioner reads, so anything else is reported as ignored in the output.
const K8S_KEYS: &[&str] = &[
    "namespace",
    "condor_host",
    "k8s_image",
    "k8s_image_pull_policy",
    "priority_class",
    "priority_class_cpu",
    "priority_class_gpu",
    "service_account_name",
    "tolerations_list",
    "node_selectors_dict",
    "node_affinity_dict",
    "labels_dict",
    "annotations_dict",
    "envs_dict",
    "pvc_volumes_dict",
    "config_volumes_dict",
    "app_name",
    "k8s_job_ttl",
    "k8s_domain",
    "force_k8s_namespace_matching",
    "request_fuse",
    "storage_mbs",
    "resources_dict",
    "additional_requirements",
    "use_large_limit",
    "max_pods_per_cluster",
    "max_submit_pods_per_cluster",
];
const HTCONDOR_KEYS: &[&str] = &[
    "namespace",
    "condor_host",
    "app_name",
    "k8s_domain",
    "force_k8s_namespace_matching",
    "additional_requirements",
    "schedd_whitelist_regexp",
];
const DEFAULT_ONLY_KEYS: &[&str] = &["sleep_time"];

/// A TOML string literal (basic string, escaped).
fn q(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A TOML array of string literals.
fn list(items: &[String]) -> String {
    format!(
        "[{}]",
        items.iter().map(|s| q(s)).collect::<Vec<_>>().join(", ")
    )
}

/// A TOML key, quoted when it is not a bare key.
fn k(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        s.to_string()
    } else {
        q(s)
    }
}

struct Reader<'a> {
    ini: &'a IniFile,
    k8s: &'static str,
    htc: &'static str,
}

impl<'a> Reader<'a> {
    /// `[k8s]` and `[htcondor]` where the INI has them, else `[DEFAULT]`.
    fn of(ini: &'a IniFile) -> Reader<'a> {
        let section = |name: &'static str| {
            if ini.sections.contains_key(name) {
                name
            } else {
                "DEFAULT"
            }
        };
        Reader {
            ini,
            k8s: section("k8s"),
            htc: section("htcondor"),
        }
    }
    fn k8s(&self, key: &str) -> Result<Option<IniValue>, IniError> {
        self.ini.get(self.k8s, key)
    }
    fn htc(&self, key: &str) -> Result<Option<IniValue>, IniError> {
        self.ini.get(self.htc, key)
    }
    fn value_err(&self, line: usize, key: &str, message: String, hint: &str) -> IniError {
        IniError::Value {
            path: self.ini.path.clone(),
            line,
            key: key.to_string(),
            message,
            hint: hint.to_string(),
        }
    }
    fn int(&self, v: Option<IniValue>, key: &str) -> Result<Option<u64>, IniError> {
        match v {
            None => Ok(None),
            Some(v) => v.raw.trim().parse::<u64>().map(Some).map_err(|_| {
                self.value_err(
                    v.line,
                    key,
                    format!("`{}` is not a whole number", v.raw),
                    "the provisioner reads this key with int()",
                )
            }),
        }
    }
    fn k8s_int(&self, key: &str) -> Result<Option<u64>, IniError> {
        self.int(self.k8s(key)?, key)
    }
    fn dict(&self, key: &str) -> Result<Vec<(String, String)>, IniError> {
        match self.k8s(key)? {
            None => Ok(Vec::new()),
            Some(v) => parse_dict(&v.raw).map_err(|e| {
                self.value_err(
                    v.line,
                    key,
                    e.to_string(),
                    "separate entries with `,` and key from value with one `:`; write a literal `:` as &colon; and `,` as &comma;",
                )
            }),
        }
    }
}

/// Writes the pilotd.toml equivalent of a parsed INI file: `[k8s]` settings come from the
/// `[k8s]` section (else `[DEFAULT]`), `[htcondor]` settings from `[htcondor]` (else
/// `[DEFAULT]`), `sleep_time` from `[DEFAULT]`, as the provisioner's main read them. A key the
/// INI leaves out gets the `[kubernetes]` default (`config::kubernetes::defaults`), which is
/// the provisioner's.
pub(crate) fn convert(ini: &IniFile) -> Result<String, IniError> {
    let r = Reader::of(ini);
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "# pilotd.toml converted by `pilotd import-ini` from {}\n# Every setting of the NRP provisioner is listed; values not in the INI are the provisioner's defaults.\n",
        ini.path.display()
    );
    let _ = writeln!(w, "mode = \"kubernetes\"\n\n[kubernetes]");
    write_cluster(&r, w)?;
    write_pod_settings(&r, w)?;
    write_job_settings(&r, w)?;
    write_queries(&r, w)?;
    // Tables and arrays of tables come last: TOML puts every later bare key inside them.
    let tables = Tables::read(&r)?;
    write_ignored(&r, w);
    tables.write(w);
    Ok(out)
}

/// `key = "value"`: the INI's value, or the default when the INI leaves the key out.
fn write_str(w: &mut String, key: &str, v: Option<IniValue>, d: &str) {
    let _ = writeln!(w, "{key} = {}", q(&str_or(v, d)));
}

/// The value, or the default when the INI leaves the key out.
fn str_or(v: Option<IniValue>, d: &str) -> String {
    v.map(|v| v.raw).unwrap_or_else(|| d.to_string())
}

/// A yes/no key as the provisioner compared it (`!= "no"`: anything else means on).
fn not_no(v: Option<IniValue>, d: bool) -> bool {
    v.map_or(d, |v| v.raw != "no")
}

/// Where the workers go: namespace, client, collector, app name, domain.
fn write_cluster(r: &Reader, w: &mut String) -> Result<(), IniError> {
    let namespace = match r.k8s("namespace")? {
        Some(v) if !v.raw.trim().is_empty() => v.raw.trim().to_string(),
        _ => {
            return Err(IniError::Missing {
                path: r.ini.path.clone(),
                message: "no `namespace` in [DEFAULT] or [k8s]".into(),
                hint: "the provisioner took it from pod.conf ($K8S_NAMESPACE): add `namespace=<your namespace>` under [DEFAULT] and convert again".into(),
            });
        }
    };
    let _ = writeln!(w, "namespace = {}", q(&namespace));
    let _ = writeln!(
        w,
        "client = \"in-cluster\"                 # or \"kubeconfig\" (+ kubeconfig = PATH, context = NAME)"
    );
    write_str(
        w,
        "condor_host",
        r.k8s("condor_host")?,
        defaults::CONDOR_HOST,
    );
    // The provisioner's main sets app_name = osg-wn before it reads the INI (its library
    // default prp-wn never applies), so an INI without app_name made osg-wn pods.
    let k8s_app = str_or(r.k8s("app_name")?, UPSTREAM_APP_NAME);
    let htc_app = str_or(r.htc("app_name")?, UPSTREAM_APP_NAME);
    if k8s_app != htc_app {
        let v = r.htc("app_name")?.or(r.k8s("app_name")?);
        return Err(r.value_err(
            v.map_or(0, |v| v.line),
            "app_name",
            format!("[k8s] app_name `{k8s_app}` differs from [htcondor] app_name `{htc_app}`"),
            "pilotd uses one app_name for Jobs and the startd query; put app_name in [DEFAULT]",
        ));
    }
    let _ = writeln!(w, "app_name = {}", q(&k8s_app));
    write_str(w, "k8s_domain", r.k8s("k8s_domain")?, defaults::K8S_DOMAIN);
    Ok(())
}

/// The worker pod: image, pull policy, priority classes, service account, tolerations.
fn write_pod_settings(r: &Reader, w: &mut String) -> Result<(), IniError> {
    write_str(w, "image", r.k8s("k8s_image")?, defaults::IMAGE);
    let policy = str_or(
        r.k8s("k8s_image_pull_policy")?,
        PullPolicy::default().as_str(),
    );
    if !matches!(policy.as_str(), "Always" | "IfNotPresent" | "Never") {
        let line = r.k8s("k8s_image_pull_policy")?.map_or(0, |v| v.line);
        return Err(r.value_err(
            line,
            "k8s_image_pull_policy",
            format!("`{policy}` is not a Kubernetes pull policy"),
            "use Always, IfNotPresent or Never",
        ));
    }
    let _ = writeln!(w, "image_pull_policy = {}", q(&policy));
    for (ini_key, toml_key) in [
        ("priority_class", "priority_class"),
        ("priority_class_cpu", "priority_class_cpu"),
        ("priority_class_gpu", "priority_class_gpu"),
        ("service_account_name", "service_account_name"),
    ] {
        match r.k8s(ini_key)? {
            Some(v) if !v.raw.is_empty() => {
                let _ = writeln!(w, "{toml_key} = {}", q(&v.raw));
            }
            _ => {
                let _ = writeln!(w, "# {toml_key} = \"...\"");
            }
        }
    }
    let tolerations = r
        .k8s("tolerations_list")?
        .map(|v| parse_list(&v.raw))
        .unwrap_or_default();
    let _ = writeln!(w, "tolerations = {}", list(&tolerations));
    Ok(())
}

/// What every Job carries: TTL, namespace matching, requirements, FUSE, storage, limits.
fn write_job_settings(r: &Reader, w: &mut String) -> Result<(), IniError> {
    let ttl = r.k8s_int("k8s_job_ttl")?.unwrap_or(defaults::JOB_TTL_SECS);
    let _ = writeln!(w, "job_ttl = \"{ttl}s\"");
    // The provisioner compares with "no" in both places: anything else means "on".
    let force = not_no(
        r.htc("force_k8s_namespace_matching")?,
        defaults::FORCE_NAMESPACE_MATCHING,
    );
    let force_k8s = not_no(
        r.k8s("force_k8s_namespace_matching")?,
        defaults::FORCE_NAMESPACE_MATCHING,
    );
    if force != force_k8s {
        let line = r.htc("force_k8s_namespace_matching")?.map_or(0, |v| v.line);
        return Err(r.value_err(
            line,
            "force_k8s_namespace_matching",
            "[k8s] and [htcondor] disagree".into(),
            "put force_k8s_namespace_matching in [DEFAULT]",
        ));
    }
    let _ = writeln!(w, "force_namespace_matching = {force}");
    // Two values upstream: [htcondor]'s narrows the schedd query, [k8s]'s is the workers'
    // ADDITIONAL_REQUIREMENTS (their START). Kept apart, as they were.
    let k8s_req = str_or(r.k8s("additional_requirements")?, "");
    let htc_req = str_or(r.htc("additional_requirements")?, "");
    let _ = writeln!(
        w,
        "additional_requirements = {}          # the schedd query ([htcondor])",
        q(&htc_req)
    );
    if k8s_req != htc_req {
        let _ = writeln!(
            w,
            "worker_additional_requirements = {}   # the workers' START ([k8s])",
            q(&k8s_req)
        );
    }
    let _ = writeln!(
        w,
        "request_fuse = {}",
        not_no(r.k8s("request_fuse")?, defaults::REQUEST_FUSE)
    );
    let storage = match r.k8s("storage_mbs")? {
        Some(v) if v.raw.trim().is_empty() => 0,
        v => r
            .int(v, "storage_mbs")?
            .unwrap_or(defaults::MIN_EPHEMERAL_STORAGE_MIB),
    };
    let _ = writeln!(
        w,
        "min_ephemeral_storage_mib = {storage}    # storage_mbs; 0 = no minimum"
    );
    // Compared with "yes" upstream: anything else means off.
    let large = r
        .k8s("use_large_limit")?
        .map_or(defaults::USE_LARGE_LIMIT, |v| v.raw == "yes");
    let _ = writeln!(w, "use_large_limit = {large}");
    Ok(())
}

/// Which schedds are asked, how many pods, how often, and the token and condor tools.
fn write_queries(r: &Reader, w: &mut String) -> Result<(), IniError> {
    let whitelist = r.htc("schedd_whitelist_regexp")?;
    write_str(w, "schedd_whitelist", whitelist, defaults::MATCH_ALL);
    let _ = writeln!(w, "schedd_identity_whitelist = {}", q(defaults::MATCH_ALL));
    let max_pods = r.k8s_int("max_pods_per_cluster")?;
    let max_pods = max_pods.unwrap_or(defaults::MAX_PODS_PER_CLUSTER);
    let max_submit = r.k8s_int("max_submit_pods_per_cluster")?;
    let max_submit = max_submit.unwrap_or(defaults::MAX_SUBMIT_PODS_PER_CLUSTER);
    let sleep = r
        .int(r.ini.get("DEFAULT", "sleep_time")?, "sleep_time")?
        .unwrap_or(defaults::CYCLE_SECS);
    let _ = writeln!(w, "max_pods_per_cluster = {max_pods}");
    let _ = writeln!(w, "max_submit_pods_per_cluster = {max_submit}");
    let _ = writeln!(w, "cycle = \"{sleep}s\"");
    let _ = writeln!(
        w,
        "token_secret = {}\ntoken_key = {}\ncondor_status = {}\ncondor_q = {}",
        q(defaults::TOKEN_SECRET),
        q(defaults::TOKEN_KEY),
        q(defaults::CONDOR_STATUS),
        q(defaults::CONDOR_Q)
    );
    Ok(())
}

/// Ignored keys are listed so nothing is lost silently.
fn write_ignored(r: &Reader, w: &mut String) {
    let mut ignored = Vec::new();
    for (sec, keys) in std::iter::once(("DEFAULT", &r.ini.defaults))
        .chain(r.ini.sections.iter().map(|(s, k)| (s.as_str(), k)))
    {
        for key in keys.keys() {
            let known = K8S_KEYS.contains(&key.as_str())
                || HTCONDOR_KEYS.contains(&key.as_str())
                || DEFAULT_ONLY_KEYS.contains(&key.as_str());
            let used_section = sec == "DEFAULT" || sec == r.k8s || sec == r.htc;
            if !known || !used_section {
                ignored.push(format!("[{sec}] {key}"));
            }
        }
    }
    if !ignored.is_empty() {
        let _ = writeln!(
            w,
            "# INI keys the provisioner never read: {}",
            ignored.join(", ")
        );
    }
}

/// The INI's dicts, as the tables and arrays of tables they become.
struct Tables {
    /// (key, operator, values).
    affinity: Vec<(String, &'static str, Vec<String>)>,
    /// (claim, path, read_only, host_to_container).
    pvcs: Vec<(String, String, bool, bool)>,
    config_volumes: Vec<(String, String)>,
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    envs: Vec<(String, String)>,
    node_selectors: Vec<(String, String)>,
    resources: Vec<(String, String)>,
}

impl Tables {
    /// Read in the order the provisioner read them, with what provisioner_main.py added.
    fn read(r: &Reader) -> Result<Tables, IniError> {
        let affinity = r
            .dict("node_affinity_dict")?
            .iter()
            .map(|(key, values)| {
                let (op, key) = key
                    .strip_prefix('^')
                    .map_or(("In", key.as_str()), |k| ("NotIn", k));
                (
                    key.to_string(),
                    op,
                    values.split('|').map(str::to_string).collect(),
                )
            })
            .collect();
        let mut pvcs: Vec<_> = r
            .dict("pvc_volumes_dict")?
            .into_iter()
            .map(|(claim, path)| {
                let (p, ro, h2c) = mount_flags(&path);
                (claim, p.to_string(), ro, h2c)
            })
            .collect();
        // provisioner_main.py always mounted CVMFS this way; it is part of the site's setup.
        if !pvcs.iter().any(|(c, ..)| c == "cvmfs") {
            pvcs.push(("cvmfs".into(), "/cvmfs".into(), false, true));
        }
        let config_volumes = r.dict("config_volumes_dict")?;
        let mut labels = r.dict("labels_dict")?;
        // provisioner_main.py added this label to every Job and pod.
        if !labels.iter().any(|(k, _)| k == "osg-provisioner") {
            labels.push(("osg-provisioner".into(), "wn".into()));
        }
        let annotations = r.dict("annotations_dict")?;
        let mut envs = r.dict("envs_dict")?;
        if !envs.iter().any(|(k, _)| k == "CVMFS_REPOS") {
            envs.push((
                "CVMFS_REPOS".into(),
                "config-osg.opensciencegrid.org,oasis.opensciencegrid.org".into(),
            ));
        }
        Ok(Tables {
            affinity,
            pvcs,
            config_volumes,
            labels,
            annotations,
            envs,
            node_selectors: r.dict("node_selectors_dict")?,
            resources: r.dict("resources_dict")?,
        })
    }

    fn write(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "\n# CVMFS_REPOS: provisioner_main.py appended <x>.opensciencegrid.org for each of CVMFS_MOUNTS."
        );
        for (name, map) in [
            ("node_selectors", &self.node_selectors),
            ("labels", &self.labels),
            ("annotations", &self.annotations),
            ("env", &self.envs),
            ("resources", &self.resources),
        ] {
            let _ = writeln!(w, "\n[kubernetes.{name}]");
            for (key, value) in map {
                let _ = writeln!(w, "{} = {}", k(key), q(value));
            }
        }
        for (key, op, values) in &self.affinity {
            let _ = writeln!(
                w,
                "\n[[kubernetes.node_affinity]]\nkey = {}\noperator = \"{op}\"\nvalues = {}",
                q(key),
                list(values)
            );
        }
        for (claim, path, ro, h2c) in &self.pvcs {
            let _ = writeln!(
                w,
                "\n[[kubernetes.pvc_volumes]]\nclaim = {}\npath = {}\nread_only = {ro}\nhost_to_container = {h2c}",
                q(claim),
                q(path)
            );
        }
        for (cm, path) in &self.config_volumes {
            let _ = writeln!(
                w,
                "\n[[kubernetes.config_volumes]]\nconfig_map = {}\npath = {}",
                q(cm),
                q(path)
            );
        }
    }
}
