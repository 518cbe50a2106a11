//! `pilotd import-ini`: reads the NRP provisioner's `osg_provisioner.conf` with Python
//! `configparser` semantics (sections, `[DEFAULT]` inheritance, lowercase keys, `=`/`:`
//! delimiters, indented continuation lines, `%%` and `%(name)s` interpolation) and the
//! provisioner's own list/dict encoding (`,` and `:` separators, then `&colon;` `&comma;`
//! `&amp;` decoded in that order, `^` = NotIn, `|` = value list, `!`/`#` mount prefixes), and
//! writes the equivalent commented pilotd.toml in kubernetes mode. Every error names the file
//! and the line of the offending value.

use crate::kubernetes::encoding::{parse_dict, parse_list};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The app_name the upstream provisioner runs with when its INI names none.
pub const UPSTREAM_APP_NAME: &str = "osg-wn";

#[derive(Debug, thiserror::Error)]
pub enum IniError {
    #[error("cannot read {}: {source}\n  hint: check the path of the provisioner's osg_provisioner.conf", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: {message}\n  hint: {hint}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
        hint: String,
    },
    #[error("{}:{line}: {key}: {message}\n  hint: {hint}", path.display())]
    Value {
        path: PathBuf,
        line: usize,
        key: String,
        message: String,
        hint: String,
    },
    #[error("{}: {message}\n  hint: {hint}", path.display())]
    Missing {
        path: PathBuf,
        message: String,
        hint: String,
    },
}

/// One value as configparser stores it, with the line it started on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniValue {
    pub raw: String,
    pub line: usize,
}

/// A parsed INI file: `[DEFAULT]` plus named sections, keys lowercased.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IniFile {
    pub path: PathBuf,
    pub defaults: BTreeMap<String, IniValue>,
    pub sections: BTreeMap<String, BTreeMap<String, IniValue>>,
}

impl IniFile {
    /// Parses configparser syntax. Comments are whole lines starting with `#` or `;`
    /// (configparser's default: no inline comments).
    pub fn parse(path: &Path, src: &str) -> Result<IniFile, IniError> {
        let mut ini = IniFile {
            path: path.to_path_buf(),
            ..IniFile::default()
        };
        let mut current: Option<String> = None;
        let mut last_key: Option<String> = None;
        let syntax = |line: usize, message: String, hint: &str| IniError::Syntax {
            path: path.to_path_buf(),
            line,
            message,
            hint: hint.into(),
        };
        for (idx, text) in src.lines().enumerate() {
            let lineno = idx + 1;
            let trimmed = text.trim();
            let indented = text.starts_with([' ', '\t']);
            if trimmed.is_empty() {
                // configparser ends a multi-line value at a blank line only when the next
                // line is not indented; empty continuation lines are rare enough in these
                // files that treating a blank line as the end is safe.
                last_key = None;
                continue;
            }
            if trimmed.starts_with('#') || trimmed.starts_with(';') {
                continue;
            }
            if indented && let (Some(key), Some(sec)) = (&last_key, &current) {
                let table = if sec == "DEFAULT" {
                    &mut ini.defaults
                } else {
                    ini.sections.entry(sec.clone()).or_default()
                };
                if let Some(v) = table.get_mut(key) {
                    v.raw.push('\n');
                    v.raw.push_str(trimmed);
                }
                continue;
            }
            if let Some(rest) = trimmed.strip_prefix('[') {
                let Some(name) = rest.strip_suffix(']') else {
                    return Err(syntax(
                        lineno,
                        format!("section header `{trimmed}` has no closing `]`"),
                        "write it like [k8s]",
                    ));
                };
                let name = name.trim().to_string();
                if name != "DEFAULT" {
                    ini.sections.entry(name.clone()).or_default();
                }
                current = Some(name);
                last_key = None;
                continue;
            }
            let Some(sec) = &current else {
                return Err(syntax(
                    lineno,
                    "a key before any section header".into(),
                    "put keys under [DEFAULT], [k8s] or [htcondor]",
                ));
            };
            let Some(pos) = trimmed.find(['=', ':']) else {
                return Err(syntax(
                    lineno,
                    format!("`{trimmed}` is neither `key = value` nor a section header"),
                    "write key=value",
                ));
            };
            let key = trimmed[..pos].trim().to_lowercase();
            if key.is_empty() {
                return Err(syntax(lineno, "empty key".into(), "write key=value"));
            }
            let value = trimmed[pos + 1..].trim().to_string();
            let table = if sec == "DEFAULT" {
                &mut ini.defaults
            } else {
                ini.sections.entry(sec.clone()).or_default()
            };
            table.insert(
                key.clone(),
                IniValue {
                    raw: value,
                    line: lineno,
                },
            );
            last_key = Some(key);
        }
        Ok(ini)
    }

    /// configparser lookup: the section's own key, else `[DEFAULT]`'s, interpolated.
    pub fn get(&self, section: &str, key: &str) -> Result<Option<IniValue>, IniError> {
        let raw = self
            .sections
            .get(section)
            .and_then(|s| s.get(key))
            .or_else(|| self.defaults.get(key));
        match raw {
            None => Ok(None),
            Some(v) => Ok(Some(IniValue {
                raw: self.interpolate(section, key, v, 0)?,
                line: v.line,
            })),
        }
    }

    /// BasicInterpolation: `%%` is a literal `%`, `%(name)s` is another key of the section.
    fn interpolate(
        &self,
        section: &str,
        key: &str,
        v: &IniValue,
        depth: usize,
    ) -> Result<String, IniError> {
        let err = |message: String| IniError::Value {
            path: self.path.clone(),
            line: v.line,
            key: key.to_string(),
            message,
            hint: "write a literal % as %%".into(),
        };
        if depth > 10 {
            return Err(err("interpolation nests deeper than 10 levels".into()));
        }
        let mut out = String::new();
        let mut rest = v.raw.as_str();
        while let Some(i) = rest.find('%') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(r) = after.strip_prefix('%') {
                out.push('%');
                rest = r;
            } else if let Some(r) = after.strip_prefix('(') {
                let Some(end) = r.find(")s") else {
                    return Err(err("`%(` without a closing `)s`".into()));
                };
                let name = r[..end].to_lowercase();
                let target = self
                    .sections
                    .get(section)
                    .and_then(|s| s.get(&name))
                    .or_else(|| self.defaults.get(&name))
                    .ok_or_else(|| err(format!("`%({name})s` names no key")))?;
                out.push_str(&self.interpolate(section, &name, target, depth + 1)?);
                rest = &r[end + 2..];
            } else {
                return Err(err("a lone `%` (configparser rejects it)".into()));
            }
        }
        out.push_str(rest);
        Ok(out)
    }
}

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

impl Reader<'_> {
    fn k8s(&self, key: &str) -> Result<Option<IniValue>, IniError> {
        self.ini.get(self.k8s, key)
    }
    fn htc(&self, key: &str) -> Result<Option<IniValue>, IniError> {
        self.ini.get(self.htc, key)
    }
    fn value_err(&self, v: &IniValue, key: &str, message: String, hint: &str) -> IniError {
        IniError::Value {
            path: self.ini.path.clone(),
            line: v.line,
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
                    &v,
                    key,
                    format!("`{}` is not a whole number", v.raw),
                    "the provisioner reads this key with int()",
                )
            }),
        }
    }
    fn dict(&self, key: &str) -> Result<Vec<(String, String)>, IniError> {
        match self.k8s(key)? {
            None => Ok(Vec::new()),
            Some(v) => parse_dict(&v.raw).map_err(|e| {
                self.value_err(
                    &v,
                    key,
                    e.to_string(),
                    "separate entries with `,` and key from value with one `:`; write a literal `:` as &colon; and `,` as &comma;",
                )
            }),
        }
    }
}

/// Converts an `osg_provisioner.conf` (read from `path`) to a complete pilotd.toml.
pub fn import_file(path: &Path) -> Result<String, IniError> {
    let src = std::fs::read_to_string(path).map_err(|e| IniError::Read {
        path: path.to_path_buf(),
        source: e,
    })?;
    convert(&IniFile::parse(path, &src)?)
}

/// Writes the pilotd.toml equivalent of a parsed INI file: `[k8s]` settings come from the
/// `[k8s]` section (else `[DEFAULT]`), `[htcondor]` settings from `[htcondor]` (else
/// `[DEFAULT]`), `sleep_time` from `[DEFAULT]`, as the provisioner's main read them.
pub fn convert(ini: &IniFile) -> Result<String, IniError> {
    let r = Reader {
        ini,
        k8s: if ini.sections.contains_key("k8s") {
            "k8s"
        } else {
            "DEFAULT"
        },
        htc: if ini.sections.contains_key("htcondor") {
            "htcondor"
        } else {
            "DEFAULT"
        },
    };
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "# pilotd.toml converted by `pilotd import-ini` from {}\n# Every setting of the NRP provisioner is listed; values not in the INI are the provisioner's defaults.\n",
        ini.path.display()
    );
    let _ = writeln!(w, "mode = \"kubernetes\"\n\n[kubernetes]");

    let namespace = match r.k8s("namespace")? {
        Some(v) if !v.raw.trim().is_empty() => v.raw.trim().to_string(),
        _ => {
            return Err(IniError::Missing {
                path: ini.path.clone(),
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

    let str_or = |v: Option<IniValue>, d: &str| v.map(|v| v.raw).unwrap_or_else(|| d.to_string());
    let _ = writeln!(
        w,
        "condor_host = {}",
        q(&str_or(
            r.k8s("condor_host")?,
            "prp-cm-htcondor.htcondor-portal.svc.cluster.local"
        ))
    );
    // The provisioner's main sets app_name = osg-wn before it reads the INI (its library
    // default prp-wn never applies), so an INI without app_name made osg-wn pods.
    let k8s_app = str_or(r.k8s("app_name")?, UPSTREAM_APP_NAME);
    let htc_app = str_or(r.htc("app_name")?, UPSTREAM_APP_NAME);
    if k8s_app != htc_app {
        let v = r.htc("app_name")?.or(r.k8s("app_name")?);
        let line = v.map_or(0, |v| v.line);
        return Err(IniError::Value {
            path: ini.path.clone(),
            line,
            key: "app_name".into(),
            message: format!(
                "[k8s] app_name `{k8s_app}` differs from [htcondor] app_name `{htc_app}`"
            ),
            hint:
                "pilotd uses one app_name for Jobs and the startd query; put app_name in [DEFAULT]"
                    .into(),
        });
    }
    let _ = writeln!(w, "app_name = {}", q(&k8s_app));
    let _ = writeln!(
        w,
        "k8s_domain = {}",
        q(&str_or(r.k8s("k8s_domain")?, "optiputer.net"))
    );
    let _ = writeln!(
        w,
        "image = {}",
        q(&str_or(r.k8s("k8s_image")?, "sfiligoi/prp-portal-wn"))
    );
    let policy = str_or(r.k8s("k8s_image_pull_policy")?, "Always");
    if !matches!(policy.as_str(), "Always" | "IfNotPresent" | "Never") {
        let v = r.k8s("k8s_image_pull_policy")?.unwrap_or(IniValue {
            raw: policy.clone(),
            line: 0,
        });
        return Err(r.value_err(
            &v,
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
    let _ = writeln!(
        w,
        "tolerations = [{}]",
        tolerations
            .iter()
            .map(|t| q(t))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let ttl = r
        .int(r.k8s("k8s_job_ttl")?, "k8s_job_ttl")?
        .unwrap_or(86400);
    let _ = writeln!(w, "job_ttl = \"{ttl}s\"");
    // The provisioner compares with "no" in both places: anything else means "on".
    let force = str_or(r.htc("force_k8s_namespace_matching")?, "yes");
    let force_k8s = str_or(r.k8s("force_k8s_namespace_matching")?, "yes");
    if (force == "no") != (force_k8s == "no") {
        let line = r.htc("force_k8s_namespace_matching")?.map_or(0, |v| v.line);
        return Err(IniError::Value {
            path: ini.path.clone(),
            line,
            key: "force_k8s_namespace_matching".into(),
            message: "[k8s] and [htcondor] disagree".into(),
            hint: "put force_k8s_namespace_matching in [DEFAULT]".into(),
        });
    }
    let _ = writeln!(w, "force_namespace_matching = {}", force != "no");
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
        str_or(r.k8s("request_fuse")?, "yes") != "no"
    );
    let storage = match r.k8s("storage_mbs")? {
        Some(v) if v.raw.trim().is_empty() => 0,
        v => r.int(v, "storage_mbs")?.unwrap_or(20000),
    };
    let _ = writeln!(
        w,
        "min_ephemeral_storage_mib = {storage}    # storage_mbs; 0 = no minimum"
    );
    let _ = writeln!(
        w,
        "use_large_limit = {}",
        str_or(r.k8s("use_large_limit")?, "yes") == "yes"
    );
    let _ = writeln!(
        w,
        "schedd_whitelist = {}",
        q(&str_or(r.htc("schedd_whitelist_regexp")?, ".*"))
    );
    let _ = writeln!(w, "schedd_identity_whitelist = \".*\"");
    let max_pods = r
        .int(r.k8s("max_pods_per_cluster")?, "max_pods_per_cluster")?
        .unwrap_or(20);
    let max_submit = r
        .int(
            r.k8s("max_submit_pods_per_cluster")?,
            "max_submit_pods_per_cluster",
        )?
        .unwrap_or(1000);
    let sleep = r
        .int(ini.get("DEFAULT", "sleep_time")?, "sleep_time")?
        .unwrap_or(120);
    let _ = writeln!(w, "max_pods_per_cluster = {max_pods}");
    let _ = writeln!(w, "max_submit_pods_per_cluster = {max_submit}");
    let _ = writeln!(w, "cycle = \"{sleep}s\"");
    let _ = writeln!(
        w,
        "token_secret = \"prp-htcondor-wn-secret\"\ntoken_key = \"prp-wn.token\"\ncondor_status = \"condor_status\"\ncondor_q = \"condor_q\""
    );

    // Tables and arrays of tables come last: TOML puts every later bare key inside them.
    let mut affinity = Vec::new();
    let aff_dict = r.dict("node_affinity_dict")?;
    for (key, values) in &aff_dict {
        let (op, key) = match key.strip_prefix('^') {
            Some(k) => ("NotIn", k),
            None => ("In", key.as_str()),
        };
        affinity.push((
            key.to_string(),
            op,
            values.split('|').map(str::to_string).collect::<Vec<_>>(),
        ));
    }
    let mut pvcs = Vec::new();
    for (claim, path) in r.dict("pvc_volumes_dict")? {
        let mut p = path.as_str();
        let (mut ro, mut h2c) = (false, false);
        loop {
            if let Some(rest) = p.strip_prefix('!') {
                ro = true;
                p = rest;
            } else if let Some(rest) = p.strip_prefix('#') {
                h2c = true;
                p = rest;
            } else {
                break;
            }
        }
        pvcs.push((claim, p.to_string(), ro, h2c));
    }
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
    let node_selectors = r.dict("node_selectors_dict")?;
    let resources = r.dict("resources_dict")?;

    // Ignored keys are listed so nothing is lost silently.
    let mut ignored = Vec::new();
    for (sec, keys) in std::iter::once(("DEFAULT", &ini.defaults))
        .chain(ini.sections.iter().map(|(s, k)| (s.as_str(), k)))
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

    let _ = writeln!(
        w,
        "\n# CVMFS_REPOS: provisioner_main.py appended <x>.opensciencegrid.org for each of CVMFS_MOUNTS."
    );
    for (name, map) in [
        ("node_selectors", &node_selectors),
        ("labels", &labels),
        ("annotations", &annotations),
        ("env", &envs),
        ("resources", &resources),
    ] {
        let _ = writeln!(w, "\n[kubernetes.{name}]");
        for (key, value) in map {
            let _ = writeln!(w, "{} = {}", k(key), q(value));
        }
    }
    for (key, op, values) in &affinity {
        let _ = writeln!(
            w,
            "\n[[kubernetes.node_affinity]]\nkey = {}\noperator = \"{op}\"\nvalues = [{}]",
            q(key),
            values.iter().map(|v| q(v)).collect::<Vec<_>>().join(", ")
        );
    }
    for (claim, path, ro, h2c) in &pvcs {
        let _ = writeln!(
            w,
            "\n[[kubernetes.pvc_volumes]]\nclaim = {}\npath = {}\nread_only = {ro}\nhost_to_container = {h2c}",
            q(claim),
            q(path)
        );
    }
    for (cm, path) in &config_volumes {
        let _ = writeln!(
            w,
            "\n[[kubernetes.config_volumes]]\nconfig_map = {}\npath = {}",
            q(cm),
            q(path)
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::kubernetes::{AffinityOperator, KubernetesConfig};

    const OSGVO: &str = r#"[DEFAULT]
namespace=osg-opportunistic
k8s_domain=nrp-nautilus.io
app_name=osg-direct
force_k8s_namespace_matching=no

[k8s]
k8s_image=sfiligoi/prp-portal-wn:ospool
tolerations_list=nautilus.io/noceph,nautilus.io/chase-ci
priority_class=opportunistic
max_submit_pods_per_cluster=300
k8s_job_ttl=3600
use_large_limit=no
node_affinity_dict=^nautilus.io/low-power:true,nvidia.com/gpu.product:NVIDIA-A10|NVIDIA-A40
envs_dict=GLIDEIN_Site:SDSC-PRP,OSG_SQUID_LOCATION:10.110.90.167&colon;3128
annotations_dict=container.apparmor.security.beta.kubernetes.io/htcondor:unconfined
pvc_volumes_dict=data:!#/data

[htcondor]
schedd_whitelist_regexp=(login.*\.osgconnect\.net)|(ap.*\.osg-htc\.org)
additional_requirements=(!isUndefined(ProjectName))
"#;

    fn parse(src: &str) -> IniFile {
        IniFile::parse(Path::new("osg_provisioner.conf"), src).unwrap()
    }

    #[test]
    fn default_inheritance_lowercase_keys_and_interpolation() {
        let ini = parse("[DEFAULT]\nApp_Name = x\nbase=/d\n[k8s]\npath=%(base)s/y 100%%\n");
        assert_eq!(ini.get("k8s", "app_name").unwrap().unwrap().raw, "x");
        assert_eq!(ini.get("k8s", "path").unwrap().unwrap().raw, "/d/y 100%");
        let ini = parse("[k8s]\nbad=50%\n");
        let e = ini.get("k8s", "bad").unwrap_err().to_string();
        assert!(e.starts_with("osg_provisioner.conf:2: bad:"), "{e}");
    }

    #[test]
    fn colon_delimiter_and_continuation_lines() {
        let ini = parse("[k8s]\nkey: value\nmulti=a,\n  b\n");
        assert_eq!(ini.get("k8s", "key").unwrap().unwrap().raw, "value");
        assert_eq!(ini.get("k8s", "multi").unwrap().unwrap().raw, "a,\nb");
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let e = IniFile::parse(Path::new("f.conf"), "[k8s]\nthis is junk\n").unwrap_err();
        assert!(e.to_string().starts_with("f.conf:2:"), "{e}");
        let e = IniFile::parse(Path::new("f.conf"), "x=1\n").unwrap_err();
        assert!(e.to_string().starts_with("f.conf:1:"), "{e}");
    }

    #[test]
    fn bad_dict_entry_is_an_error_with_its_line() {
        let ini = parse("[DEFAULT]\nnamespace=ns\n[k8s]\n\nenvs_dict=A:1,B:2:3\n");
        let e = convert(&ini).unwrap_err().to_string();
        assert!(e.starts_with("osg_provisioner.conf:5: envs_dict:"), "{e}");
        assert!(e.contains("B:2:3"), "{e}");
    }

    #[test]
    fn missing_namespace_says_where_it_came_from() {
        let e = convert(&parse("[k8s]\napp_name=x\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("pod.conf"), "{e}");
    }

    #[test]
    fn converted_file_is_a_valid_config_with_the_same_meaning() {
        let text = convert(&parse(OSGVO)).unwrap();
        let table: toml::Table = toml::from_str(&text).expect(&text);
        assert_eq!(table["mode"].as_str(), Some("kubernetes"));
        let k = KubernetesConfig::from_table_text(&toml::to_string(&table["kubernetes"]).unwrap())
            .expect(&text);
        assert_eq!(k.namespace.get_ref(), "osg-opportunistic");
        assert_eq!(k.app_name.get_ref(), "osg-direct");
        assert_eq!(k.k8s_domain, "nrp-nautilus.io");
        assert_eq!(k.image.get_ref(), "sfiligoi/prp-portal-wn:ospool");
        assert_eq!(
            *k.tolerations.get_ref(),
            vec!["nautilus.io/noceph", "nautilus.io/chase-ci"]
        );
        assert_eq!(k.priority_class.as_deref(), Some("opportunistic"));
        assert_eq!(*k.max_submit_pods_per_cluster.get_ref(), 300);
        assert_eq!(*k.max_pods_per_cluster.get_ref(), 20);
        assert_eq!(k.job_ttl.0.as_secs(), 3600);
        assert!(!k.use_large_limit && !k.force_namespace_matching && k.request_fuse);
        assert_eq!(k.node_affinity.get_ref().len(), 2);
        assert_eq!(k.node_affinity.get_ref()[0].key, "nautilus.io/low-power");
        assert_eq!(
            k.node_affinity.get_ref()[0].operator,
            AffinityOperator::NotIn
        );
        assert_eq!(
            k.node_affinity.get_ref()[1].values,
            vec!["NVIDIA-A10", "NVIDIA-A40"]
        );
        assert_eq!(k.env.get_ref()["OSG_SQUID_LOCATION"], "10.110.90.167:3128");
        assert_eq!(k.env.get_ref()["GLIDEIN_Site"], "SDSC-PRP");
        assert_eq!(k.labels.get_ref()["osg-provisioner"], "wn");
        assert_eq!(
            k.annotations.get_ref()["container.apparmor.security.beta.kubernetes.io/htcondor"],
            "unconfined"
        );
        let data = k
            .pvc_volumes
            .get_ref()
            .iter()
            .find(|p| p.claim == "data")
            .unwrap();
        assert!(data.read_only && data.host_to_container && data.path == "/data");
        let cvmfs = k
            .pvc_volumes
            .get_ref()
            .iter()
            .find(|p| p.claim == "cvmfs")
            .unwrap();
        assert!(cvmfs.host_to_container && !cvmfs.read_only);
        assert_eq!(
            k.schedd_whitelist.get_ref(),
            r"(login.*\.osgconnect\.net)|(ap.*\.osg-htc\.org)"
        );
        assert_eq!(k.additional_requirements, "(!isUndefined(ProjectName))");
        assert_eq!(k.cycle().as_secs(), 120);
    }

    #[test]
    fn bad_integer_names_key_and_line() {
        let ini = parse("[DEFAULT]\nnamespace=n\nsleep_time=2m\n");
        let e = convert(&ini).unwrap_err().to_string();
        assert!(e.starts_with("osg_provisioner.conf:3: sleep_time:"), "{e}");
    }
}
