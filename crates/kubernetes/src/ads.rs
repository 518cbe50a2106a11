//! HTCondor ads as kubernetes mode reads them: evaluated ClassAd values (`AdValue`), the idle
//! job ads of the whitelisted schedds and the startd ads this provisioner's workers advertise.
//! Attribute names match case-insensitively, as ClassAd attribute names do, in snapshots and in
//! the condor tools' output alike; null is undefined.

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// An evaluated ClassAd value. Lists and nested ads never occur in the attributes pilotd
/// reads; the condor probe keeps their text as a string. Written as the bare JSON value,
/// undefined as null.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(untagged)]
pub enum AdValue {
    #[default]
    Undefined,
    Int(i64),
    Real(f64),
    Bool(bool),
    Str(String),
}

impl AdValue {
    fn is_undefined(&self) -> bool {
        *self == AdValue::Undefined
    }

    /// The value as a whole number, as HTCondor converts to int (reals truncate toward zero,
    /// booleans are 0/1); None for undefined, strings and non-finite reals.
    pub(crate) fn as_int(&self) -> Option<i64> {
        match self {
            AdValue::Int(i) => Some(*i),
            AdValue::Real(r) if r.is_finite() => Some(r.trunc() as i64),
            AdValue::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// The value as key text: strings as they are, numbers printed, undefined as None.
    /// The string "Undefined" counts as undefined, as the provisioner's `str(eval())` did.
    pub(crate) fn as_text(&self) -> Option<String> {
        match self {
            AdValue::Undefined => None,
            AdValue::Str(s) if s.eq_ignore_ascii_case("undefined") => None,
            AdValue::Str(s) => Some(s.clone()),
            AdValue::Int(i) => Some(i.to_string()),
            AdValue::Real(r) => Some(r.to_string()),
            AdValue::Bool(b) => Some(b.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for AdValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AdValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an evaluated ClassAd value (number, string, boolean or null)")
            }
            fn visit_unit<E>(self) -> Result<AdValue, E> {
                Ok(AdValue::Undefined)
            }
            fn visit_none<E>(self) -> Result<AdValue, E> {
                Ok(AdValue::Undefined)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<AdValue, D::Error> {
                AdValue::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<AdValue, E> {
                Ok(AdValue::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<AdValue, E> {
                Ok(AdValue::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<AdValue, E> {
                Ok(i64::try_from(v).map_or(AdValue::Real(v as f64), AdValue::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<AdValue, E> {
                Ok(AdValue::Real(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<AdValue, E> {
                Ok(AdValue::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<AdValue, E> {
                Ok(AdValue::Str(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// One idle job: the attributes the shape key and the accounting need, evaluated; written
/// under their ClassAd names, in `JOB_ATTRS` order.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct JobAd {
    pub schedd_name: String,
    pub cluster_id: i64,
    pub proc_id: i64,
    pub job_status: AdValue,
    pub request_cpus: AdValue,
    pub request_memory: AdValue,
    pub request_disk: AdValue,
    #[serde(rename = "RequestGPUs")]
    pub request_gpus: AdValue,
    #[serde(rename = "RequestGPUTypes")]
    pub request_gpu_types: AdValue,
    pub request_labels: AdValue,
    pub request_disk_volumes: AdValue,
    /// True when the job's Requirements constrain GPUs beyond count and type (`require_gpus`
    /// → `RequireGPUs`, or `GPUs_Capability`): pilotd cannot make a pod that surely matches
    /// (see `demand`). The condor probe evaluates `GPU_CONSTRAINT` for it.
    #[serde(
        rename = "ConstrainsGPUs",
        skip_serializing_if = "AdValue::is_undefined"
    )]
    pub constrains_gpus: AdValue,
}

/// Canonical attribute names, in the order the snapshot prints them; `ScheddName` must stay
/// first (the condor probe queries the rest).
pub(crate) const JOB_ATTRS: [&str; 12] = [
    "ScheddName",
    "ClusterId",
    "ProcId",
    "JobStatus",
    "RequestCpus",
    "RequestMemory",
    "RequestDisk",
    "RequestGPUs",
    "RequestGPUTypes",
    "RequestLabels",
    "RequestDiskVolumes",
    "ConstrainsGPUs",
];

/// What the condor probe asks for `ConstrainsGPUs`: the attribute itself cannot be asked, as
/// `RequireGPUs` evaluates to undefined in the job's own ad (it refers to the machine's GPUs),
/// so the job's Requirements text is searched (condor_submit puts `require_gpus` there as
/// `countMatches(MY.RequireGPUs, TARGET.AvailableGPUs)`; checked on HTCondor 23.9).
pub(crate) const GPU_CONSTRAINT: &str =
    r#"regexp("RequireGPUs|GPUs_Capability", unparse(Requirements))"#;

impl JobAd {
    /// Sets an attribute by its ClassAd name (case-insensitive); unknown names are ignored.
    pub(crate) fn set(&mut self, attr: &str, value: AdValue) {
        if let Some(idx) = JOB_ATTRS.iter().position(|a| a.eq_ignore_ascii_case(attr)) {
            self.set_at(idx, value);
        }
    }

    /// Sets the attribute `JOB_ATTRS[idx]` without looking its name up again (snapshots of
    /// 100,000 jobs are read this way).
    fn set_at(&mut self, idx: usize, value: AdValue) {
        let slot = match idx {
            0 => {
                self.schedd_name = match value {
                    AdValue::Str(s) if !s.eq_ignore_ascii_case("undefined") => s,
                    other => other.as_text().unwrap_or_default(),
                };
                return;
            }
            1 => {
                self.cluster_id = value.as_int().unwrap_or(0);
                return;
            }
            2 => {
                self.proc_id = value.as_int().unwrap_or(0);
                return;
            }
            3 => &mut self.job_status,
            4 => &mut self.request_cpus,
            5 => &mut self.request_memory,
            6 => &mut self.request_disk,
            7 => &mut self.request_gpus,
            8 => &mut self.request_gpu_types,
            9 => &mut self.request_labels,
            10 => &mut self.request_disk_volumes,
            11 => &mut self.constrains_gpus,
            _ => return,
        };
        *slot = value;
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.job_status.as_int() == Some(1)
    }
}

impl<'de> Deserialize<'de> for JobAd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JobAd;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a job ad object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JobAd, A::Error> {
                let mut ad = JobAd::default();
                // Keys are matched without allocating for the attributes we ignore, which
                // matters for snapshots of 100,000 jobs.
                // pilotd writes the attributes in JOB_ATTRS order: the next one is tried first.
                let mut next = 0;
                while let Some(AttrKey(idx)) = map.next_key_seed(AttrKeySeed(&JOB_ATTRS, next))? {
                    let Some(idx) = idx else {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    let v: AdValue = map.next_value()?;
                    if idx == 0 && v.as_text().is_none() {
                        return Err(de::Error::custom("ScheddName must be a string"));
                    }
                    ad.set_at(idx, v);
                    next = idx + 1;
                }
                if ad.schedd_name.is_empty() {
                    return Err(de::Error::custom("a job ad has no ScheddName"));
                }
                Ok(ad)
            }
        }
        d.deserialize_map(V)
    }
}

/// Canonical startd attribute names, in the order the condor probe queries them.
pub(crate) const STARTD_ATTRS: [&str; 4] = ["Name", "State", "Activity", "K8SPodName"];

/// A map key resolved to the index of a known attribute (case-insensitively) without
/// allocating, or None for attributes pilotd does not read.
struct AttrKey(Option<usize>);
/// The attribute names, and the position of the name expected next.
struct AttrKeySeed<'a>(&'a [&'static str], usize);

impl<'de> de::DeserializeSeed<'de> for AttrKeySeed<'_> {
    type Value = AttrKey;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<AttrKey, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for AttrKeySeed<'_> {
    type Value = AttrKey;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an attribute name")
    }
    fn visit_str<E>(self, v: &str) -> Result<AttrKey, E> {
        // The name expected next, then the exact spelling anywhere (what pilotd writes), then
        // ClassAd's case-insensitive rule.
        if self.0.get(self.1).is_some_and(|a| *a == v) {
            return Ok(AttrKey(Some(self.1)));
        }
        Ok(AttrKey(self.0.iter().position(|a| *a == v).or_else(|| {
            self.0.iter().position(|a| a.eq_ignore_ascii_case(v))
        })))
    }
}

/// One startd ad advertised by a worker pod (the collector query is restricted to this
/// provisioner's workers).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct StartdAd {
    pub name: String,
    pub state: Option<String>,
    pub activity: Option<String>,
    #[serde(rename = "K8SPodName")]
    pub k8s_pod_name: Option<String>,
}

impl StartdAd {
    pub(crate) fn set(&mut self, attr: &str, value: AdValue) {
        let text = value.as_text();
        match attr.to_ascii_lowercase().as_str() {
            "name" => self.name = text.unwrap_or_default(),
            "state" => self.state = text,
            "activity" => self.activity = text,
            "k8spodname" => self.k8s_pod_name = text,
            _ => {}
        }
    }
}

impl<'de> Deserialize<'de> for StartdAd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StartdAd;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a startd ad object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StartdAd, A::Error> {
                let mut ad = StartdAd::default();
                while let Some(AttrKey(idx)) = map.next_key_seed(AttrKeySeed(&STARTD_ATTRS, 0))? {
                    let Some(idx) = idx else {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    ad.set(STARTD_ATTRS[idx], map.next_value()?);
                }
                Ok(ad)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_by_position_is_reading_by_name() {
        for (idx, attr) in JOB_ATTRS.iter().enumerate() {
            let v = AdValue::Str(format!("v{idx}"));
            let (mut by_name, mut by_index) = (JobAd::default(), JobAd::default());
            by_name.set(attr, v.clone());
            by_index.set_at(idx, v);
            assert_eq!(by_name, by_index, "{attr}");
            let n = AdValue::Int(7);
            by_name.set(attr, n.clone());
            by_index.set_at(idx, n);
            assert_eq!(by_name, by_index, "{attr}");
        }
    }

    #[test]
    fn job_attributes_match_case_insensitively_and_null_is_undefined() {
        let j: JobAd = serde_json::from_str(
            r#"{"scheddname":"ap1","CLUSTERID":7,"procid":2,"jobstatus":1,
                "REQUESTCPUS":4,"requestmemory":8192.0,"RequestGpuTypes":null,"Owner":"x"}"#,
        )
        .unwrap();
        assert_eq!(j.schedd_name, "ap1");
        assert_eq!((j.cluster_id, j.proc_id), (7, 2));
        assert_eq!(j.request_cpus, AdValue::Int(4));
        assert_eq!(j.request_memory.as_int(), Some(8192));
        assert_eq!(j.request_gpu_types, AdValue::Undefined);
        assert!(j.is_idle());
        let back = serde_json::to_value(&j).unwrap();
        assert_eq!(back["RequestCpus"], 4);
        assert!(back["RequestGPUTypes"].is_null());
    }

    #[test]
    fn ads_are_written_under_their_classad_names_in_query_order() {
        let mut j = JobAd {
            schedd_name: "ap1".into(),
            cluster_id: 7,
            request_cpus: AdValue::Int(4),
            request_memory: AdValue::Real(1.5),
            request_gpu_types: AdValue::Str("A100".into()),
            request_labels: AdValue::Bool(true),
            ..JobAd::default()
        };
        let text = serde_json::to_string(&j).unwrap();
        assert_eq!(
            text,
            r#"{"ScheddName":"ap1","ClusterId":7,"ProcId":0,"JobStatus":null,"RequestCpus":4,"RequestMemory":1.5,"RequestDisk":null,"RequestGPUs":null,"RequestGPUTypes":"A100","RequestLabels":true,"RequestDiskVolumes":null}"#,
            "ConstrainsGPUs is left out while undefined"
        );
        j.constrains_gpus = AdValue::Int(1);
        let text = serde_json::to_string(&j).unwrap();
        assert!(
            text.ends_with(r#""RequestDiskVolumes":null,"ConstrainsGPUs":1}"#),
            "{text}"
        );
        let keys: std::collections::BTreeSet<String> =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&text)
                .unwrap()
                .keys()
                .cloned()
                .collect();
        let names = JOB_ATTRS.map(String::from).into_iter().collect();
        assert_eq!(
            keys, names,
            "every attribute of JOB_ATTRS, spelled as there"
        );
        let s = StartdAd {
            name: "slot1@pod".into(),
            k8s_pod_name: Some("pod".into()),
            ..StartdAd::default()
        };
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"Name":"slot1@pod","State":null,"Activity":null,"K8SPodName":"pod"}"#
        );
    }
}
