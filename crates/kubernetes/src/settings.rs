//! Kubernetes mode's settings, resolved once: the `[kubernetes]` table of pilotd.toml (already
//! parsed and diagnosed by `config`) becomes what each part of the mode works with — where the
//! API server is, what the condor probe asks, the plan's limits and the worker pod template.
//! Nothing past this file reads the table's file structure (spans, units, defaults).

use crate::accounting::Ages;
use crate::backoff::TrialPolicy;
use crate::client::Connection;
use crate::condor::{CondorProbe, INSECURE_QUERY_ENV, job_constraint, startd_constraint};
use crate::config::{KubernetesConfig, full_match_regex};
use crate::identity;
use crate::jobs::PodTemplate;
use crate::plan::PlanSettings;
use pilotd_core::backoff::Backoff;
use pilotd_core::config::Config;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{} has no [kubernetes] table\n  hint: set mode = \"kubernetes\" and add [kubernetes] (convert an NRP osg_provisioner.conf with `pilotd import-ini FILE`)", path.as_ref().map_or("pilotd.toml".to_string(), |p| p.display().to_string()))]
    NotConfigured { path: Option<PathBuf> },
    #[error(
        "bad schedd whitelist: {0}\n  hint: fix [kubernetes] schedd_whitelist / schedd_identity_whitelist"
    )]
    Whitelist(#[from] regex::Error),
    #[error("{}: [kubernetes] is not valid: {source}\n  hint: run `pilotd check`, which shows each problem at its line", path.as_ref().map_or("pilotd.toml".to_string(), |p| p.display().to_string()))]
    Table {
        source: toml::de::Error,
        path: Option<PathBuf>,
    },
}

/// Everything kubernetes mode runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub connection: Connection,
    pub condor: CondorProbe,
    pub plan: PlanSettings,
    /// Time between reconcile cycles.
    pub cycle: Duration,
    /// Where the back-off book survives restarts.
    pub state_file: PathBuf,
}

impl Settings {
    /// The settings of a loaded configuration; it must have a `[kubernetes]` table.
    pub fn resolve(cfg: &Config) -> Result<Settings, SettingsError> {
        let table = cfg
            .site
            .kubernetes
            .as_ref()
            .ok_or_else(|| SettingsError::NotConfigured {
                path: cfg.site_path.clone(),
            })?;
        let table = KubernetesConfig::of_table(table).map_err(|source| SettingsError::Table {
            source,
            path: cfg.site_path.clone(),
        })?;
        Settings::from_table(&table, &cfg.site.state_dir)
    }

    /// The settings of one `[kubernetes]` table; `state_dir` holds the back-off book unless
    /// the table names its own file.
    pub fn from_table(k: &KubernetesConfig, state_dir: &Path) -> Result<Settings, SettingsError> {
        let namespace = k.namespace.get_ref().clone();
        let app_name = k.app_name.get_ref().clone();
        let connection = Connection {
            source: *k.client.get_ref(),
            kubeconfig: k.kubeconfig.as_ref().map(|p| p.get_ref().clone()),
            context: k.context.as_ref().map(|c| c.get_ref().clone()),
            namespace: namespace.clone(),
            selector: identity::selector(&app_name),
            page_size: *k.list_page_size.get_ref(),
        };
        let condor = CondorProbe {
            condor_status: k.condor_status.clone(),
            condor_q: k.condor_q.clone(),
            pool: k.pool.clone(),
            timeout: k.condor_timeout.0,
            schedd_names: full_match_regex(k.schedd_whitelist.get_ref())?,
            schedd_identities: full_match_regex(k.schedd_identity_whitelist.get_ref())?,
            job_constraint: job_constraint(
                k.force_namespace_matching.then_some(namespace.as_str()),
                &k.additional_requirements,
            ),
            startd_constraint: startd_constraint(&app_name, &namespace, &k.k8s_domain),
            max_parallel_queries: *k.max_parallel_queries.get_ref() as usize,
            client_env: INSECURE_QUERY_ENV
                .iter()
                .filter(|_| k.insecure_query)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let pods = PodTemplate {
            app_name,
            namespace,
            condor_host: k.condor_host.clone(),
            k8s_domain: k.k8s_domain.clone(),
            image: k.image.get_ref().clone(),
            image_pull_policy: k.image_pull_policy,
            priority_class: k.priority_class.clone(),
            priority_class_cpu: k.priority_class_cpu.clone(),
            priority_class_gpu: k.priority_class_gpu.clone(),
            service_account_name: k.service_account_name.clone(),
            tolerations: k.tolerations.get_ref().clone(),
            node_selectors: k.node_selectors.get_ref().clone(),
            node_affinity: k.node_affinity.get_ref().clone(),
            labels: k.labels.get_ref().clone(),
            annotations: k.annotations.get_ref().clone(),
            env: k.env.get_ref().clone(),
            pvc_volumes: k.pvc_volumes.get_ref().clone(),
            config_volumes: k.config_volumes.get_ref().clone(),
            resources: k.resources.get_ref().clone(),
            job_ttl: k.job_ttl.0,
            force_namespace_matching: k.force_namespace_matching,
            additional_requirements: k
                .worker_additional_requirements
                .clone()
                .unwrap_or_else(|| k.additional_requirements.clone()),
            request_fuse: k.request_fuse,
            min_ephemeral_storage_mib: k.min_ephemeral_storage_mib,
            use_large_limit: k.use_large_limit,
            token_secret: k.token_secret.clone(),
            token_key: k.token_key.clone(),
            job_label_allow: k.job_label_allow.get_ref().clone(),
            job_volume_allow: k.job_volume_allow.get_ref().clone(),
        };
        let plan = PlanSettings {
            max_pods_per_cluster: *k.max_pods_per_cluster.get_ref(),
            max_submit_pods_per_cluster: *k.max_submit_pods_per_cluster.get_ref(),
            ages: Ages {
                unknown_after: k.unknown_after.0,
                pending_after: k.pending_timeout.get_ref().0,
            },
            backoff: TrialPolicy {
                after: *k.backoff_after.get_ref(),
                delay: Backoff::new(k.backoff_initial.0, k.backoff_max.0),
            },
            cleanup_after: k.cleanup_after.0,
            cleanup_max_per_cycle: k.cleanup_max_per_cycle,
            max_creates_per_cycle: *k.max_creates_per_cycle.get_ref(),
            pods,
        };
        Ok(Settings {
            connection,
            condor,
            plan,
            cycle: k.cycle.get_ref().0,
            state_file: k
                .state_file
                .clone()
                .unwrap_or_else(|| state_dir.join("kubernetes-backoff.json")),
        })
    }

    /// Settings for tests: the table's defaults for namespace `osg`, app `osg-direct`, plus
    /// `extra` TOML lines of the `[kubernetes]` table.
    #[cfg(test)]
    pub(crate) fn test(extra: &str) -> Settings {
        let table = KubernetesConfig::from_table_text(&format!(
            "namespace = \"osg\"\napp_name = \"osg-direct\"\n{extra}"
        ))
        .expect("test table parses");
        Settings::from_table(&table, Path::new("/nonexistent/state")).expect("test table resolves")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_resolves_once_into_what_each_part_uses() {
        let s = Settings::test("k8s_domain = \"nrp-nautilus.io\"\ncycle = \"30s\"\n");
        assert_eq!(s.connection.namespace, "osg");
        assert_eq!(
            s.connection.selector,
            "prp-htcondor-portal=wn,k8s-app=osg-direct"
        );
        assert_eq!(s.connection.page_size, 500);
        assert_eq!(
            s.condor.job_constraint,
            "(JobStatus=?=1) && regexp(RequestK8SNamespace,\"osg\")"
        );
        assert!(
            s.condor
                .startd_constraint
                .contains("(K8SDomain=?=\"nrp-nautilus.io\")")
        );
        assert!(s.condor.schedd_names.is_match("ap20.uc.osg-htc.org"));
        assert_eq!(s.plan.max_pods_per_cluster, 20);
        assert_eq!(s.plan.backoff.after, 2);
        assert_eq!(s.plan.pods.app_name, "osg-direct");
        assert_eq!(s.cycle, Duration::from_secs(30));
        assert_eq!(
            s.state_file,
            PathBuf::from("/nonexistent/state/kubernetes-backoff.json")
        );
    }
}
