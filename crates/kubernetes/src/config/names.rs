//! Names and values as the Kubernetes API server validates them, so that `pilotd check`
//! refuses what every Job create would otherwise fail on with 422 (apimachinery's
//! `validation.IsQualifiedName`, `IsValidLabelValue`, `IsDNS1123Label/Subdomain`,
//! `IsEnvVarName`, and `resource.ParseQuantity`), plus the label, annotation and env names
//! pilotd itself writes on every worker, which neither the site nor a job may set: a site
//! annotation named `PodLabels` would win over the label when pods are read back, and map the
//! pods to another shape.

/// The shape's pod label (and annotation) names, as the NRP provisioner and existing worker
/// pods use them.
pub(crate) const POD_CPUS: &str = "PodCPUs";
pub(crate) const POD_MEMORY: &str = "PodMemory";
pub(crate) const POD_DISK: &str = "PodDisk";
pub(crate) const POD_GPUS: &str = "PodGPUs";
pub(crate) const POD_DISK_VOLUMES: &str = "PodDiskVolumes";
pub(crate) const POD_GPU_TYPES: &str = "PodGPUTypes";
pub(crate) const POD_LABELS: &str = "PodLabels";
/// Label-safe digest of the whole key, for selecting one shape's pods.
pub(crate) const POD_SHAPE: &str = "pilotd.io/shape";

/// The shape's labels and annotations, which pilotd writes on every worker Job and pod.
const SHAPE_NAMES: [&str; 7] = [
    POD_CPUS,
    POD_MEMORY,
    POD_DISK,
    POD_GPUS,
    POD_DISK_VOLUMES,
    POD_GPU_TYPES,
    POD_LABELS,
];
/// The other labels pilotd writes on every worker (the provisioner's selector, its own mark),
/// and the ones the Job controller owns.
const PILOTD_LABELS: [&str; 3] = [
    "prp-htcondor-portal",
    "k8s-app",
    "app.kubernetes.io/managed-by",
];
const CONTROLLER_LABELS: [&str; 2] = ["job-name", "controller-uid"];

/// Env names pilotd sets on every worker from the shape and the site's settings.
pub(crate) const PILOTD_ENV: [&str; 13] = [
    "K8S_PROVISIONER_TYPE",
    "K8S_PROVISIONER_NAME",
    "CONDOR_HOST",
    "STARTD_NOCLAIM_SHUTDOWN",
    "K8S_NAMESPACE",
    "K8S_DOMAIN",
    "NUM_CPUS",
    "NUM_GPUS",
    "MEMORY",
    "DISK",
    "FORCE_K8SNAMESPACE_MATCHING",
    "ADDITIONAL_REQUIREMENTS",
    "PHYSICAL_HOSTNAME",
];

/// Resources pilotd sets from the shape (`resources` may add others, never these).
pub(crate) const PILOTD_RESOURCES: [&str; 4] =
    ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"];

/// Where every worker's container reads the pool token (the worker image's `01_token.sh`):
/// pilotd mounts the site's token secret there, so nothing else may be mounted at, above or
/// below it.
pub(crate) const TOKEN_PATH: &str = "/etc/condor/tokens.d/prp-wn.token";

/// A mount path as the container sees it, to compare mounts: absolute, `//` and `.` parts
/// dropped, no trailing `/`. `None` for a relative path or one with a `..` part (which would
/// name another place than it reads as). The API server compares mount paths as strings
/// ("must be unique"); the runtime mounts `/data` and `/data/` at one place, so pilotd
/// compares them as this.
pub(crate) fn mount_point(path: &str) -> Option<String> {
    let rest = path.strip_prefix('/')?;
    let mut out = String::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => {
                out.push('/');
                out.push_str(p);
            }
        }
    }
    Some(if out.is_empty() { "/".into() } else { out })
}

/// Whether one of two mount points (from `mount_point`) is the other or lies under it: a
/// mount there would hide the other one, or be hidden by it.
pub(crate) fn mounts_overlap(a: &str, b: &str) -> bool {
    let under = |inner: &str, outer: &str| {
        outer == "/"
            || inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|r| r.starts_with('/'))
    };
    under(a, b) || under(b, a)
}

/// A ConfigMap or Secret key (`IsConfigMapKey`): at most 253 of `[-._a-zA-Z0-9]`, neither `.`
/// nor `..` nor starting with `..`. pilotd uses the key as the file's name in the volume too.
pub(crate) fn is_config_map_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && k != "."
        && !k.starts_with("..")
}

/// Why a label key is not one the site or a job may set, if it is reserved.
pub(crate) fn reserved_label(key: &str) -> Option<&'static str> {
    if SHAPE_NAMES.contains(&key) || PILOTD_LABELS.contains(&key) || key.starts_with("pilotd.io/") {
        return Some("pilotd writes it on every worker (the shape and the selector)");
    }
    if CONTROLLER_LABELS.contains(&key) || key.starts_with("batch.kubernetes.io/") {
        return Some("the Job controller owns it");
    }
    // Kubernetes' own domains; app.kubernetes.io's recommended labels are for everyone
    // (but managed-by, which pilotd sets, is in the list above).
    let kubernetes_domain = |p: &str| {
        p != "app.kubernetes.io"
            && ["kubernetes.io", "k8s.io"]
                .iter()
                .any(|d| p == *d || p.ends_with(&format!(".{d}")))
    };
    if key
        .split_once('/')
        .is_some_and(|(p, _)| kubernetes_domain(p))
    {
        return Some("the kubernetes.io and k8s.io prefixes are Kubernetes' own");
    }
    None
}

/// Why an annotation key is not one the site may set, if it is reserved: pilotd's shape
/// annotations (read back before the labels) and its own prefix.
pub(crate) fn reserved_annotation(key: &str) -> Option<&'static str> {
    (SHAPE_NAMES.contains(&key) || key.starts_with("pilotd.io/"))
        .then_some("pilotd writes it on every worker and reads the shape back from it")
}

/// RFC 1123 label: what Kubernetes requires of namespaces and (as a prefix) of Job names.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: object names (PVCs, ConfigMaps, Secrets, priority classes, service
/// accounts) and the prefix of qualified names.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A qualified name (label and annotation keys, resource names): optional DNS subdomain
/// prefix + '/' + a name of at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both
/// ends.
pub fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

/// A label value: empty, or at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both
/// ends.
pub fn is_label_value(v: &str) -> bool {
    if v.is_empty() {
        return true;
    }
    let bytes = v.as_bytes();
    v.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// An env var name as the API server accepts it (`IsEnvVarName`: a C identifier that may
/// also hold '-' and '.', not starting with a digit).
pub(crate) fn is_env_name(n: &str) -> bool {
    let mut bytes = n.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || matches!(b, b'_' | b'-' | b'.'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A resource quantity as `resource.ParseQuantity` reads it: a signed decimal number, then
/// a binary-SI suffix (Ki Mi Gi Ti Pi Ei), a decimal-SI one (n u m k M G T P E) or a decimal
/// exponent (e3, E-2), e.g. "1", "0.5", "100m", "4Gi", "1e3".
pub(crate) fn is_quantity(q: &str) -> bool {
    let s = q.strip_prefix(['+', '-']).unwrap_or(q);
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    let digits_ok = {
        let mut parts = num.splitn(2, '.');
        let int = parts.next().unwrap_or("");
        let frac = parts.next();
        !num.is_empty()
            && !frac.is_some_and(|f| f.contains('.'))
            && (int.chars().any(|c| c.is_ascii_digit())
                || frac.is_some_and(|f| f.chars().any(|c| c.is_ascii_digit())))
    };
    let suffix_ok = match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        s => match s.strip_prefix(['e', 'E']) {
            Some(exp) => {
                let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit())
            }
            None => false,
        },
    };
    digits_ok && suffix_ok
}

/// A resource name: a standard one (`cpu`, `memory`, `ephemeral-storage`, `hugepages-*`) or
/// an extended one, which must be qualified with a domain outside kubernetes.io
/// (`nvidia.com/gpu`, `smarter-devices/fuse`).
pub(crate) fn is_resource_name(n: &str) -> bool {
    if ["cpu", "memory", "ephemeral-storage", "storage"].contains(&n) || n.starts_with("hugepages-")
    {
        return true;
    }
    match n.split_once('/') {
        Some((prefix, _)) => {
            is_label_key(n) && prefix != "kubernetes.io" && !prefix.ends_with(".kubernetes.io")
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_as_the_api_server_parses_them() {
        for ok in [
            "1", "0.5", ".5", "100m", "4Gi", "1e3", "1E-2", "+2", "20000Mi", "1.5Ki", "7n",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in [
            "one gig", "", "1 Gi", "1GB", "Gi", "1.2.3", "1e", "1x", "--1", ".", "4gi",
        ] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn env_names_keys_values_and_names() {
        assert!(is_env_name("GLIDEIN_Site") && is_env_name("a.b-c") && is_env_name("_X"));
        assert!(
            !is_env_name("MY VAR") && !is_env_name("1X") && !is_env_name("") && !is_env_name("A=B")
        );
        assert!(is_label_key("nvidia.com/gpu.product") && is_label_key("PodCPUs"));
        assert!(!is_label_key("bad key") && !is_label_key("/x") && !is_label_key("a/b/c"));
        assert!(
            !is_label_key("Example.com/x"),
            "the prefix is a lowercase DNS subdomain"
        );
        assert!(is_label_value("NVIDIA-A100") && is_label_value(""));
        assert!(
            !is_label_value("A100,V100")
                && !is_label_value("-x")
                && !is_label_value(&"a".repeat(64))
        );
        assert!(is_dns_subdomain("cvmfs") && is_dns_subdomain("a.b-c"));
        assert!(!is_dns_subdomain("Data") && !is_dns_subdomain("a..b") && !is_dns_subdomain("a_b"));
        assert!(is_resource_name("nvidia.com/gpu") && is_resource_name("hugepages-2Mi"));
        assert!(!is_resource_name("gpu") && !is_resource_name("kubernetes.io/x"));
    }

    #[test]
    fn mount_points_compare_as_the_container_sees_them() {
        assert_eq!(mount_point("/data/").as_deref(), Some("/data"));
        assert_eq!(mount_point("//data/./x").as_deref(), Some("/data/x"));
        assert_eq!(mount_point("/").as_deref(), Some("/"));
        assert_eq!(mount_point("data"), None);
        assert_eq!(mount_point("/data/../etc"), None);
        assert!(mounts_overlap("/etc/condor", TOKEN_PATH));
        assert!(mounts_overlap(TOKEN_PATH, "/etc/condor/tokens.d"));
        assert!(mounts_overlap("/", "/cvmfs") && mounts_overlap("/cvmfs", "/cvmfs"));
        assert!(!mounts_overlap(
            "/etc/condor/tokens",
            "/etc/condor/tokens.d"
        ));
        assert!(!mounts_overlap("/data", "/data2"));
        assert!(is_config_map_key("40_glidein.config") && is_config_map_key("prp-wn.token"));
        for bad in ["", ".", "..", "..x", "a/b", "a b"] {
            assert!(!is_config_map_key(bad), "{bad}");
        }
    }

    #[test]
    fn reserved_names_are_pilotds_and_kubernetes_own() {
        for k in [
            "PodLabels",
            "PodCPUs",
            "pilotd.io/shape",
            "k8s-app",
            "prp-htcondor-portal",
            "controller-uid",
            "job-name",
            "batch.kubernetes.io/job-name",
            "kubernetes.io/hostname",
            "node.kubernetes.io/x",
            "k8s.io/x",
            "app.kubernetes.io/managed-by",
        ] {
            assert!(reserved_label(k).is_some(), "{k}");
        }
        for k in [
            "team",
            "example.org/team",
            "osg-provisioner",
            "app.kubernetes.io/name",
            "kubernetes.io.example/x",
        ] {
            assert_eq!(reserved_label(k), None, "{k}");
        }
        assert!(reserved_annotation("PodGPUTypes").is_some());
        assert_eq!(
            reserved_annotation("container.apparmor.security.beta.kubernetes.io/htcondor"),
            None,
            "Kubernetes' own annotations are for the site to set"
        );
    }
}
