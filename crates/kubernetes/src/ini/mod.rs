//! `pilotd import-ini`: the NRP provisioner's INI read as Python's configparser does.

mod convert;

pub(crate) use convert::convert;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The app_name the upstream provisioner runs with when its INI names none.
pub(crate) const UPSTREAM_APP_NAME: &str = "osg-wn";

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

/// `pilotd import-ini`: reads the NRP provisioner's `osg_provisioner.conf` with Python
/// `configparser` semantics (sections, `[DEFAULT]` inheritance, lowercase keys, `=`/`:`
/// delimiters, indented continuation lines, `%%` and `%(name)s` interpolation) and the
/// provisioner's own list/dict encoding (`,` and `:` separators, then `&colon;` `&comma;`
/// `&amp;` decoded in that order, `^` = NotIn, `|` = value list, `!`/`#` mount prefixes), and
/// writes the equivalent commented pilotd.toml in kubernetes mode. Every error names the file
/// and the line of the offending value.
///
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
    pub(crate) fn parse(path: &Path, src: &str) -> Result<IniFile, IniError> {
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
    pub(crate) fn get(&self, section: &str, key: &str) -> Result<Option<IniValue>, IniError> {
        let raw = self
            .sections
            .get(section)
            .and_then(|s| s.get(key))
            .or_else(|| self.defaults.get(key));
        raw.map(|v| {
            let raw = self.interpolate(section, key, v, 0)?;
            Ok(IniValue { raw, line: v.line })
        })
        .transpose()
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

/// Converts an `osg_provisioner.conf` (read from `path`) to a complete pilotd.toml.
pub fn import_file(path: &Path) -> Result<String, IniError> {
    let src = std::fs::read_to_string(path).map_err(|e| IniError::Read {
        path: path.to_path_buf(),
        source: e,
    })?;
    convert(&IniFile::parse(path, &src)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AffinityOperator, KubernetesConfig};

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

    /// An INI that sets only the namespace: every key import-ini writes from its own defaults
    /// reads back as `[kubernetes]`'s default for that key. The destructuring names every
    /// field, so a new key fails to compile here until it is compared or said to differ.
    #[test]
    fn keys_the_ini_leaves_out_get_the_kubernetes_tables_defaults() {
        let text = convert(&parse("[DEFAULT]\nnamespace=osg\n")).unwrap();
        let table: toml::Table = toml::from_str(&text).expect(&text);
        let converted =
            KubernetesConfig::from_table_text(&toml::to_string(&table["kubernetes"]).unwrap())
                .expect(&text);
        let defaults = KubernetesConfig::from_table_text("namespace = \"osg\"\n").unwrap();
        macro_rules! same_as_defaults {
            ($($field:ident),* $(,)?) => {{
                // What provisioner_main.py set before or after reading the INI, on purpose
                // not `[kubernetes]`'s defaults (see `convert`).
                let KubernetesConfig {
                    $($field,)*
                    app_name: _,
                    labels: _,
                    env: _,
                    pvc_volumes: _,
                } = &defaults;
                $(assert_eq!(
                    &converted.$field,
                    $field,
                    "import-ini writes another `{}` than [kubernetes]'s default",
                    stringify!($field)
                );)*
            }};
        }
        same_as_defaults!(
            namespace,
            client,
            kubeconfig,
            context,
            condor_host,
            k8s_domain,
            image,
            image_pull_policy,
            priority_class,
            priority_class_cpu,
            priority_class_gpu,
            service_account_name,
            tolerations,
            node_selectors,
            node_affinity,
            annotations,
            config_volumes,
            resources,
            job_label_allow,
            job_volume_allow,
            job_ttl,
            force_namespace_matching,
            additional_requirements,
            worker_additional_requirements,
            request_fuse,
            min_ephemeral_storage_mib,
            use_large_limit,
            schedd_whitelist,
            schedd_identity_whitelist,
            max_pods_per_cluster,
            max_submit_pods_per_cluster,
            cycle,
            token_secret,
            token_key,
            condor_status,
            condor_q,
            pool,
            insecure_query,
            max_parallel_queries,
            max_creates_per_cycle,
            condor_timeout,
            unknown_after,
            pending_timeout,
            backoff_after,
            backoff_initial,
            backoff_max,
            cleanup_after,
            cleanup_max_per_cycle,
            list_page_size,
            state_file,
        );
        assert_eq!(converted.app_name.get_ref(), UPSTREAM_APP_NAME);
    }

    #[test]
    fn bad_integer_names_key_and_line() {
        let ini = parse("[DEFAULT]\nnamespace=n\nsleep_time=2m\n");
        let e = convert(&ini).unwrap_err().to_string();
        assert!(e.starts_with("osg_provisioner.conf:3: sleep_time:"), "{e}");
    }
}
