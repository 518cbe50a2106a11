//! The pool as kubernetes mode sees it, through the HTCondor command-line tools (there is no
//! Rust HTCondor client). The interface is deliberately narrow, so a real pool is a matter of
//! configuration (`condor_status`, `condor_q`, `pool` in `[kubernetes]`) and tests use small
//! fake executables:
//!
//! ```text
//! condor_status [-pool P] -schedd -af:V Name AuthenticatedIdentity
//! condor_status [-pool P] -constraint C_STARTD -af:V Name State Activity K8SPodName
//! condor_q      [-pool P] -name SCHEDD -allusers -constraint C_JOBS -af:V ClusterId ProcId JobStatus \
//!               RequestCpus RequestMemory RequestDisk RequestGPUs RequestGPUTypes \
//!               RequestLabels RequestDiskVolumes \
//!               'regexp("RequireGPUs|GPUs_Capability", unparse(Requirements))'
//! ```
//!
//! `-af` (autoformat) prints each ad on one line with its expressions *evaluated*, one value
//! per requested attribute separated by single spaces; `:V` prints values in ClassAd syntax
//! (`%V`), so strings are quoted (`"ap1.example.org"`), an undefined value is the bare word
//! `undefined` and can never be confused with the string "undefined". Attribute names are
//! case-insensitive in ClassAds and the values come back by position, so the spelling does
//! not matter. `-allusers` is needed: since HTCondor 8.5.2 `condor_q` shows only the caller's
//! own jobs unless the caller is a queue superuser, and `-constraint` does not lift that (the
//! provisioner's identity owns no jobs, so without it every query is empty). The startd query
//! asks for slot ads, condor_status's default, and not `-startd`: since HTCondor 23 that flag
//! returns the startd daemon ads, which carry the worker's `K8S*` attributes but no `State`,
//! so every worker would count as unclaimed. A non-zero exit status is a failed query. `C_JOBS` is
//! `(JobStatus=?=1) && regexp(RequestK8SNamespace,"NS") && (ADDITIONAL)` as the NRP
//! provisioner built it; `C_STARTD` selects this provisioner's workers by their K8S* attrs.

use crate::ads::{AdValue, GPU_CONSTRAINT, JobAd, STARTD_ATTRS, StartdAd};
use crate::identity::PROVISIONER_TYPE;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CondorError {
    #[error("cannot run {}: {source}\n  hint: install the HTCondor tools or set [kubernetes] {key} to their path", path.display())]
    Spawn {
        path: PathBuf,
        key: &'static str,
        source: std::io::Error,
    },
    #[error("{} {args} did not finish within {secs}s\n  hint: check the collector/schedd is reachable, or raise [kubernetes] condor_timeout", path.display())]
    Timeout {
        path: PathBuf,
        args: String,
        secs: u64,
    },
    #[error("{} {args} failed ({status}): {stderr}\n  hint: run the same command by hand to see why", path.display())]
    Failed {
        path: PathBuf,
        args: String,
        status: String,
        stderr: String,
    },
    #[error("{} output line {line}: {source}: `{text}`\n  hint: pilotd reads `-af:V` output (one ad per line, ClassAd-quoted values)", path.display())]
    Output {
        path: PathBuf,
        line: usize,
        source: AfLineError,
        text: String,
    },
    #[error("every whitelisted schedd failed ({}); nothing is submitted this cycle\n  hint: see the errors logged above for each schedd", .0.join(", "))]
    AllScheddsFailed(Vec<String>),
}

/// The job attributes queried, in output order: the snapshot's attributes without
/// `ScheddName`, which condor_q does not print (the probe knows which schedd it asked).
pub(crate) const JOB_ATTRS: &[&str] = super::ads::JOB_ATTRS.split_first().expect("non-empty").1;

/// A schedd ad from the collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheddAd {
    pub name: String,
    pub authenticated_identity: String,
}

/// The condor side of one observation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolObservation {
    pub jobs: Vec<JobAd>,
    pub startds: Vec<StartdAd>,
    /// Whitelisted schedds whose query failed (logged and skipped).
    pub failed_schedds: Vec<String>,
}

/// `(JobStatus=?=1)` + the namespace clause unless matching is off + the site's extra
/// requirements, exactly as the provisioner built it. `namespace` is `None` when the site
/// turned namespace matching off.
pub(crate) fn job_constraint(namespace: Option<&str>, additional_requirements: &str) -> String {
    let mut c = String::from("(JobStatus=?=1)");
    if let Some(ns) = namespace {
        c.push_str(&format!(" && regexp(RequestK8SNamespace,\"{ns}\")"));
    }
    if !additional_requirements.is_empty() {
        c.push_str(&format!(" && ({additional_requirements})"));
    }
    c
}

/// Selects the startds of this provisioner's own workers.
pub(crate) fn startd_constraint(app_name: &str, namespace: &str, k8s_domain: &str) -> String {
    format!(
        "(K8SProvisionerType=?=\"{PROVISIONER_TYPE}\")&&(K8SProvisionerName=?=\"{app_name}\")&&(K8SNamespace=?=\"{namespace}\")&&(K8SDomain=?=\"{k8s_domain}\")"
    )
}

/// Why one line of `-af:V` output could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AfLineError {
    #[error("unterminated string")]
    Unterminated,
    #[error("`{0}` is not a ClassAd value")]
    NotAValue(String),
    #[error("{got} values, expected {expected}")]
    Count { got: usize, expected: usize },
}

/// Parses one `-af:V` line into exactly `n` values.
pub(crate) fn parse_af_line(line: &str, n: usize) -> Result<Vec<AdValue>, AfLineError> {
    let mut out = Vec::with_capacity(n);
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b' ' || b[i] == b'\t' {
            i += 1;
            continue;
        }
        if b[i] == b'"' {
            let mut s = String::new();
            let mut j = i + 1;
            let mut closed = false;
            while j < b.len() {
                match b[j] {
                    b'\\' if j + 1 < b.len() => {
                        let c = line[j + 1..].chars().next().unwrap_or('\\');
                        s.push(match c {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                        j += 1 + c.len_utf8();
                    }
                    b'"' => {
                        closed = true;
                        j += 1;
                        break;
                    }
                    _ => {
                        // Copy a whole UTF-8 character.
                        let ch = line[j..].chars().next().unwrap_or('\u{FFFD}');
                        s.push(ch);
                        j += ch.len_utf8();
                    }
                }
            }
            if !closed {
                return Err(AfLineError::Unterminated);
            }
            out.push(AdValue::Str(s));
            i = j;
            continue;
        }
        if b[i] == b'{' || b[i] == b'[' {
            // A list or nested ad: keep its text (never one of the attributes we read).
            let (open, close) = if b[i] == b'{' {
                (b'{', b'}')
            } else {
                (b'[', b']')
            };
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                if b[j] == open {
                    depth += 1;
                } else if b[j] == close {
                    depth -= 1;
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                j += 1;
            }
            out.push(AdValue::Str(line[i..j].to_string()));
            i = j;
            continue;
        }
        let end = line[i..].find([' ', '\t']).map_or(line.len(), |e| i + e);
        let word = &line[i..end];
        let v = match word.to_ascii_lowercase().as_str() {
            "undefined" | "error" => AdValue::Undefined,
            "true" => AdValue::Bool(true),
            "false" => AdValue::Bool(false),
            _ => {
                if let Ok(n) = word.parse::<i64>() {
                    AdValue::Int(n)
                } else if let Ok(r) = word.parse::<f64>() {
                    AdValue::Real(r)
                } else {
                    return Err(AfLineError::NotAValue(word.to_string()));
                }
            }
        };
        out.push(v);
        i = end;
    }
    if out.len() != n {
        return Err(AfLineError::Count {
            got: out.len(),
            expected: n,
        });
    }
    Ok(out)
}

/// Runs the condor tools named in the config, with what it asks them resolved once: the
/// whitelists compiled, the constraints built.
#[derive(Debug, Clone)]
pub struct CondorProbe {
    pub condor_status: PathBuf,
    pub condor_q: PathBuf,
    pub pool: Option<String>,
    pub timeout: Duration,
    /// Schedd `Name` must match entirely.
    pub schedd_names: Regex,
    /// Schedd `AuthenticatedIdentity` must match entirely.
    pub schedd_identities: Regex,
    pub job_constraint: String,
    pub startd_constraint: String,
    /// Extra environment of every tool run (`_CONDOR_*` settings), e.g. `insecure_query`'s.
    pub client_env: Vec<(String, String)>,
    /// condor_q processes running at once.
    pub max_parallel_queries: usize,
}

/// The client settings of `[kubernetes] insecure_query`: the tools may talk to a collector or
/// schedd that offers no authentication, encryption or integrity (what the upstream
/// provisioner's multi-user client configuration did for pools that need it). Read-only
/// queries only: the provisioner sends nothing a daemon acts on.
pub(crate) const INSECURE_QUERY_ENV: [(&str, &str); 3] = [
    ("_CONDOR_SEC_CLIENT_AUTHENTICATION", "OPTIONAL"),
    ("_CONDOR_SEC_CLIENT_ENCRYPTION", "OPTIONAL"),
    ("_CONDOR_SEC_CLIENT_INTEGRITY", "OPTIONAL"),
];

impl CondorProbe {
    async fn run(
        &self,
        path: &Path,
        key: &'static str,
        args: Vec<String>,
    ) -> Result<String, CondorError> {
        let mut full = Vec::new();
        if let Some(p) = &self.pool {
            full.push("-pool".to_string());
            full.push(p.clone());
        }
        full.extend(args);
        let shown = full.join(" ");
        let spawn = |source| CondorError::Spawn {
            path: path.to_path_buf(),
            key,
            source,
        };
        let child = tokio::process::Command::new(path)
            .args(&full)
            .envs(self.client_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(spawn)?;
        let Ok(out) = tokio::time::timeout(self.timeout, child.wait_with_output()).await else {
            return Err(CondorError::Timeout {
                path: path.to_path_buf(),
                args: shown,
                secs: self.timeout.as_secs(),
            });
        };
        let out = out.map_err(spawn)?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(CondorError::Failed {
                path: path.to_path_buf(),
                args: shown,
                status: out.status.to_string(),
                stderr: stderr.trim().lines().last().unwrap_or("").to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn lines(
        path: &Path,
        text: &str,
        n: usize,
    ) -> impl Iterator<Item = Result<Vec<AdValue>, CondorError>> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(move |(i, l)| {
                parse_af_line(l, n).map_err(|source| CondorError::Output {
                    path: path.to_path_buf(),
                    line: i + 1,
                    source,
                    text: l.to_string(),
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
    }

    pub(crate) async fn schedds(&self) -> Result<Vec<ScheddAd>, CondorError> {
        let args = ["-schedd", "-af:V", "Name", "AuthenticatedIdentity"]
            .map(String::from)
            .to_vec();
        let text = self.run(&self.condor_status, "condor_status", args).await?;
        let mut out = Vec::new();
        for vals in Self::lines(&self.condor_status, &text, 2) {
            let vals = vals?;
            // Ads without Name or AuthenticatedIdentity are skipped, as the provisioner did.
            if let (Some(name), Some(id)) = (vals[0].as_text(), vals[1].as_text()) {
                out.push(ScheddAd {
                    name,
                    authenticated_identity: id,
                });
            }
        }
        Ok(out)
    }

    pub(crate) async fn startds(&self, constraint: &str) -> Result<Vec<StartdAd>, CondorError> {
        let mut args = vec!["-constraint".into(), constraint.into(), "-af:V".into()];
        args.extend(STARTD_ATTRS.iter().map(|s| s.to_string()));
        let text = self.run(&self.condor_status, "condor_status", args).await?;
        let mut out = Vec::new();
        for vals in Self::lines(&self.condor_status, &text, STARTD_ATTRS.len()) {
            let mut ad = StartdAd::default();
            for (attr, v) in STARTD_ATTRS.iter().zip(vals?) {
                ad.set(attr, v);
            }
            if !ad.name.is_empty() {
                out.push(ad);
            }
        }
        Ok(out)
    }

    pub(crate) async fn idle_jobs(
        &self,
        schedd: &str,
        constraint: &str,
    ) -> Result<Vec<JobAd>, CondorError> {
        let mut args = vec![
            "-name".into(),
            schedd.into(),
            "-allusers".into(),
            "-constraint".into(),
            constraint.into(),
            "-af:V".into(),
        ];
        args.extend(JOB_ATTRS.iter().map(|a| {
            if *a == "ConstrainsGPUs" {
                GPU_CONSTRAINT.to_string()
            } else {
                a.to_string()
            }
        }));
        let text = self.run(&self.condor_q, "condor_q", args).await?;
        let mut out = Vec::new();
        for vals in Self::lines(&self.condor_q, &text, JOB_ATTRS.len()) {
            let mut ad = JobAd {
                schedd_name: schedd.to_string(),
                ..JobAd::default()
            };
            for (attr, v) in JOB_ATTRS.iter().zip(vals?) {
                ad.set(attr, v);
            }
            out.push(ad);
        }
        Ok(out)
    }

    /// Schedds from the collector, kept when Name and AuthenticatedIdentity both match the
    /// whitelist entirely; their idle jobs (concurrently); the workers' startd ads. One failing
    /// schedd is logged and skipped; all failing is an error (the cycle submits nothing).
    pub(crate) async fn observe(&self) -> Result<PoolObservation, CondorError> {
        let schedds: Vec<ScheddAd> = self
            .schedds()
            .await?
            .into_iter()
            .filter(|s| {
                self.schedd_names.is_match(&s.name)
                    && self.schedd_identities.is_match(&s.authenticated_identity)
            })
            .collect();
        // At most `max_parallel_queries` condor_q at once, results in schedd order: a pool
        // with dozens of whitelisted schedds must not fork dozens of tools (and open as many
        // connections) every cycle.
        use futures_util::StreamExt as _;
        let results: Vec<_> = futures_util::stream::iter(
            schedds
                .iter()
                .map(|s| self.idle_jobs(&s.name, &self.job_constraint)),
        )
        .buffered(self.max_parallel_queries.max(1))
        .collect()
        .await;
        let mut obs = PoolObservation::default();
        for (s, r) in schedds.iter().zip(results) {
            match r {
                Ok(jobs) => obs.jobs.extend(jobs),
                Err(e) => {
                    tracing::warn!(schedd = %s.name, error = %e, "schedd query failed; skipping it this cycle");
                    obs.failed_schedds.push(s.name.clone());
                }
            }
        }
        if !schedds.is_empty() && obs.failed_schedds.len() == schedds.len() {
            return Err(CondorError::AllScheddsFailed(obs.failed_schedds));
        }
        obs.startds = self.startds(&self.startd_constraint).await?;
        Ok(obs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn af_v_values_are_typed() {
        let v = parse_af_line(
            r#"12 0 1 4 8192 1.5e7 undefined "NVIDIA-A100,NVIDIA \"X\"" error {"a","b"}"#,
            10,
        )
        .unwrap();
        assert_eq!(v[0], AdValue::Int(12));
        assert_eq!(v[5], AdValue::Real(1.5e7));
        assert_eq!(v[6], AdValue::Undefined);
        assert_eq!(v[7], AdValue::Str("NVIDIA-A100,NVIDIA \"X\"".into()));
        assert_eq!(v[8], AdValue::Undefined);
        assert_eq!(v[9], AdValue::Str("{\"a\",\"b\"}".into()));
        // The string "undefined" stays a string under :V.
        assert_eq!(
            parse_af_line("\"undefined\"", 1).unwrap()[0],
            AdValue::Str("undefined".into())
        );
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        assert_eq!(
            parse_af_line("1 2", 3).unwrap_err().to_string(),
            "2 values, expected 3"
        );
        assert_eq!(
            parse_af_line("\"open", 1).unwrap_err(),
            AfLineError::Unterminated
        );
        assert!(
            parse_af_line("foo", 1)
                .unwrap_err()
                .to_string()
                .contains("not a ClassAd value")
        );
        assert!(parse_af_line("\"é\\", 1).is_err());
        assert_eq!(
            parse_af_line("\"\\é\"", 1).unwrap()[0],
            AdValue::Str("é".into())
        );
    }

    #[test]
    fn constraints_are_the_provisioners() {
        assert_eq!(
            job_constraint(Some("osg"), "(ProjectName=?=\"x\")"),
            "(JobStatus=?=1) && regexp(RequestK8SNamespace,\"osg\") && ((ProjectName=?=\"x\"))"
        );
        assert_eq!(
            startd_constraint("osg-direct", "osg", "nrp-nautilus.io"),
            "(K8SProvisionerType=?=\"PRPHTCondorProvisioner\")&&(K8SProvisionerName=?=\"osg-direct\")&&(K8SNamespace=?=\"osg\")&&(K8SDomain=?=\"nrp-nautilus.io\")"
        );
        assert_eq!(job_constraint(None, ""), "(JobStatus=?=1)");
    }
}
