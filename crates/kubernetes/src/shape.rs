//! `ShapeKey`: the resource shape a job asks for and a worker pod offers, over all seven
//! fields the NRP provisioner clusters on (CPUs, Memory, Disk, DiskVolumes, GPUs, GPUTypes,
//! Labels) with the same defaults and floors on both sides. A pod carries every field (labels
//! when label-safe, otherwise an annotation plus a label-safe hash) so that it maps back to
//! exactly the key it was made for; a key the pods cannot be counted against would get new
//! pods every cycle without limit (the provisioner's GPUTypes/Labels defect).

use crate::ads::JobAd;
use crate::config::is_label_value;
use crate::observed::Meta;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The worker's START expression requires Memory == 4096 MiB below this (and undefined).
pub(crate) const MEMORY_FLOOR_MIB: u64 = 4096;
/// The worker's START expression requires Disk == 8000000 KiB below this (and undefined).
pub(crate) const DISK_FLOOR_KIB: u64 = 8_000_000;

/// Pod label (and annotation) names of the key fields; their one home is
/// `config::kubernetes_names`, which `check` reserves them in.
pub(crate) use crate::config::names::{
    POD_CPUS, POD_DISK, POD_DISK_VOLUMES, POD_GPU_TYPES, POD_GPUS, POD_LABELS, POD_MEMORY,
    POD_SHAPE,
};
/// Prefix of a label value that stands for a value kept in the annotation of the same name.
const HASH_PREFIX: &str = "sha256-";

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ShapeKey {
    pub cpus: u64,
    pub memory_mib: u64,
    pub disk_kib: u64,
    /// Encoded comma list of `PVC_NAME:MOUNT_PATH`.
    pub disk_volumes: String,
    pub gpus: u64,
    /// Comma list of GPU product names.
    pub gpu_types: String,
    /// Encoded comma list of `KEY:VALUE`.
    pub labels: String,
}

fn floor(v: Option<i64>, floor: u64) -> u64 {
    match v {
        Some(n) if n > 0 && n as u64 >= floor => n as u64,
        _ => floor,
    }
}

impl ShapeKey {
    /// The job side: evaluated Request* values, undefined → default, memory and disk below
    /// their floors → the floor (the provisioner drops such values, then defaults them).
    pub(crate) fn from_job(job: &JobAd) -> ShapeKey {
        ShapeKey {
            cpus: floor(job.request_cpus.as_int(), 1),
            memory_mib: floor(job.request_memory.as_int(), MEMORY_FLOOR_MIB),
            disk_kib: floor(job.request_disk.as_int(), DISK_FLOOR_KIB),
            disk_volumes: job.request_disk_volumes.as_text().unwrap_or_default(),
            gpus: job.request_gpus.as_int().map_or(0, |g| g.max(0) as u64),
            gpu_types: job.request_gpu_types.as_text().unwrap_or_default(),
            labels: job.request_labels.as_text().unwrap_or_default(),
        }
    }

    /// The pod side: the same fields read back from a pod's (or its Job's) labels and
    /// annotations, with the same defaults and floors.
    pub(crate) fn from_meta(meta: &Meta) -> ShapeKey {
        let (labels, annotations) = (&meta.labels, &meta.annotations);
        let num = |name: &str| labels.get(name).and_then(|v| v.parse::<i64>().ok());
        let text = |name: &str| {
            annotations
                .get(name)
                .or_else(|| labels.get(name))
                .cloned()
                .unwrap_or_default()
        };
        ShapeKey {
            cpus: floor(num(POD_CPUS), 1),
            memory_mib: floor(num(POD_MEMORY), MEMORY_FLOOR_MIB),
            disk_kib: floor(num(POD_DISK), DISK_FLOOR_KIB),
            disk_volumes: text(POD_DISK_VOLUMES),
            gpus: num(POD_GPUS).map_or(0, |g| g.max(0) as u64),
            gpu_types: text(POD_GPU_TYPES),
            labels: text(POD_LABELS),
        }
    }

    /// Labels and annotations that make a pod map back to this key.
    pub(crate) fn pod_metadata(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let mut labels = BTreeMap::new();
        let mut annotations = BTreeMap::new();
        labels.insert(POD_CPUS.to_string(), self.cpus.to_string());
        labels.insert(POD_MEMORY.to_string(), self.memory_mib.to_string());
        labels.insert(POD_DISK.to_string(), self.disk_kib.to_string());
        labels.insert(POD_GPUS.to_string(), self.gpus.to_string());
        for (name, value) in [
            (POD_DISK_VOLUMES, &self.disk_volumes),
            (POD_GPU_TYPES, &self.gpu_types),
            (POD_LABELS, &self.labels),
        ] {
            if is_label_value(value) && !value.starts_with(HASH_PREFIX) {
                labels.insert(name.to_string(), value.clone());
            } else {
                labels.insert(name.to_string(), format!("{HASH_PREFIX}{}", digest(value)));
                annotations.insert(name.to_string(), value.clone());
            }
        }
        labels.insert(POD_SHAPE.to_string(), digest(&self.to_string()));
        (labels, annotations)
    }

    /// GPU product names asked for, empty when any GPU will do.
    pub(crate) fn gpu_type_list(&self) -> Vec<String> {
        split_list(&self.gpu_types)
    }
}

/// A comma list with blanks dropped.
pub(crate) fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// 40 hex digits of SHA-256: label-safe and collision-free in practice.
fn digest(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

fn escape(s: &str) -> String {
    s.replace('%', "%25").replace(';', "%3B")
}

/// Single pass, so an escaped `%` followed by `3B` is never read as `;`.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(r) = tail.strip_prefix("%3B") {
            out.push(';');
            rest = r;
        } else if let Some(r) = tail.strip_prefix("%25") {
            out.push('%');
            rest = r;
        } else {
            out.push('%');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// `CPUs;Memory;Disk;DiskVolumes;GPUs;GPUTypes;Labels`, the provisioner's key text
/// (`1;4096;8000000;;0;;` for a default job); `;` and `%` inside values are percent-escaped.
impl fmt::Display for ShapeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{};{};{};{};{};{};{}",
            self.cpus,
            self.memory_mib,
            self.disk_kib,
            escape(&self.disk_volumes),
            self.gpus,
            escape(&self.gpu_types),
            escape(&self.labels)
        )
    }
}

/// Why text is not a shape key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeKeyError {
    #[error("`{0}` is not a shape key (CPUs;Memory;Disk;DiskVolumes;GPUs;GPUTypes;Labels)")]
    Fields(String),
    #[error("`{key}`: {field} `{value}` is not a number")]
    Number {
        key: String,
        field: &'static str,
        value: String,
    },
}

impl FromStr for ShapeKey {
    type Err = ShapeKeyError;
    fn from_str(s: &str) -> Result<ShapeKey, ShapeKeyError> {
        let parts: Vec<&str> = s.split(';').collect();
        if parts.len() != 7 {
            return Err(ShapeKeyError::Fields(s.to_string()));
        }
        let num = |i: usize, field: &'static str| {
            parts[i].parse::<u64>().map_err(|_| ShapeKeyError::Number {
                key: s.to_string(),
                field,
                value: parts[i].to_string(),
            })
        };
        Ok(ShapeKey {
            cpus: num(0, "CPUs")?,
            memory_mib: num(1, "Memory")?,
            disk_kib: num(2, "Disk")?,
            disk_volumes: unescape(parts[3]),
            gpus: num(4, "GPUs")?,
            gpu_types: unescape(parts[5]),
            labels: unescape(parts[6]),
        })
    }
}

impl Serialize for ShapeKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ShapeKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ads::AdValue;

    fn job(attrs: &[(&str, AdValue)]) -> JobAd {
        let mut j = JobAd {
            schedd_name: "ap".into(),
            job_status: AdValue::Int(1),
            ..JobAd::default()
        };
        for (k, v) in attrs {
            j.set(k, v.clone());
        }
        j
    }

    fn pod_for(key: &ShapeKey) -> Meta {
        let (labels, annotations) = key.pod_metadata();
        Meta {
            name: "p".into(),
            labels,
            annotations,
            ..Meta::default()
        }
    }

    #[test]
    fn default_job_has_the_provisioners_key_text() {
        assert_eq!(
            ShapeKey::from_job(&job(&[])).to_string(),
            "1;4096;8000000;;0;;"
        );
        let k = ShapeKey::from_job(&job(&[
            ("RequestCpus", AdValue::Int(4)),
            ("RequestMemory", AdValue::Int(8192)),
            ("RequestGPUs", AdValue::Int(1)),
        ]));
        assert_eq!(k.to_string(), "4;8192;8000000;;1;;");
    }

    #[test]
    fn floors_apply_below_and_keep_values_at_or_above() {
        let k = |m: i64, d: i64| {
            ShapeKey::from_job(&job(&[
                ("RequestMemory", AdValue::Int(m)),
                ("RequestDisk", AdValue::Int(d)),
            ]))
        };
        assert_eq!(
            (k(1024, 100).memory_mib, k(1024, 100).disk_kib),
            (4096, 8_000_000)
        );
        assert_eq!(
            (k(4095, 7_999_999).memory_mib, k(4095, 7_999_999).disk_kib),
            (4096, 8_000_000)
        );
        assert_eq!(
            (k(4096, 8_000_000).memory_mib, k(4096, 8_000_000).disk_kib),
            (4096, 8_000_000)
        );
        assert_eq!(
            (k(4097, 8_000_001).memory_mib, k(4097, 8_000_001).disk_kib),
            (4097, 8_000_001)
        );
        let neg = ShapeKey::from_job(&job(&[("RequestCpus", AdValue::Int(-3))]));
        assert_eq!(neg.cpus, 1);
        let undefined_text = ShapeKey::from_job(&job(&[(
            "RequestGPUTypes",
            AdValue::Str("Undefined".into()),
        )]));
        assert_eq!(undefined_text.gpu_types, "");
    }

    #[test]
    fn each_field_distinct_gives_a_distinct_key_and_pods_map_back() {
        let base = job(&[]);
        let variants: Vec<(&str, AdValue)> = vec![
            ("RequestCpus", AdValue::Int(2)),
            ("RequestMemory", AdValue::Int(16384)),
            ("RequestDisk", AdValue::Int(20_000_000)),
            ("RequestDiskVolumes", AdValue::Str("data:/data".into())),
            ("RequestGPUs", AdValue::Int(1)),
            (
                "RequestGPUTypes",
                AdValue::Str("NVIDIA-A100,NVIDIA-A40".into()),
            ),
            ("RequestLabels", AdValue::Str("team:astro".into())),
        ];
        let mut keys = vec![ShapeKey::from_job(&base)];
        for (attr, v) in variants {
            let mut j = base.clone();
            j.set(attr, v);
            keys.push(ShapeKey::from_job(&j));
        }
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
            assert_eq!(&ShapeKey::from_meta(&pod_for(a)), a, "pod of {a} maps back");
            assert_eq!(a.to_string().parse::<ShapeKey>().unwrap(), *a);
        }
    }

    #[test]
    fn unsafe_values_go_to_annotations_with_a_hash_label() {
        let key = ShapeKey {
            gpu_types: "NVIDIA-A100,NVIDIA-A40".into(),
            labels: "a:b;c%3B".into(),
            ..ShapeKey::from_job(&job(&[]))
        };
        let (labels, annotations) = key.pod_metadata();
        assert!(labels[POD_GPU_TYPES].starts_with("sha256-"));
        assert!(labels.values().all(|v| is_label_value(v)));
        assert_eq!(annotations[POD_GPU_TYPES], "NVIDIA-A100,NVIDIA-A40");
        assert!(!annotations.contains_key(POD_DISK_VOLUMES));
        assert_eq!(ShapeKey::from_meta(&pod_for(&key)), key);
        assert_eq!(key.to_string().parse::<ShapeKey>().unwrap(), key);
        assert_eq!(key.gpu_type_list(), vec!["NVIDIA-A100", "NVIDIA-A40"]);
    }

    #[test]
    fn a_pod_without_key_labels_has_the_default_key() {
        assert_eq!(
            ShapeKey::from_meta(&Meta::default()).to_string(),
            "1;4096;8000000;;0;;"
        );
        assert!("1;2;3".parse::<ShapeKey>().is_err());
    }
}
