//! How the pool, the cluster and the worker image recognise this provisioner and its workers.
//! These are the NRP provisioner's own conventions, kept as they were so that switching from
//! it adopts its pods: the provisioner type the workers advertise in their startd ads, and the
//! labels every worker Job and pod carries (this provisioner's label selector).

/// `K8S_PROVISIONER_TYPE` the worker advertises and the startd query selects on.
pub(crate) const PROVISIONER_TYPE: &str = "PRPHTCondorProvisioner";

/// The labels that make a pod or Job this provisioner's, for `app_name`.
pub(crate) fn selector_labels(app_name: &str) -> [(&'static str, String); 2] {
    [
        ("prp-htcondor-portal", "wn".to_string()),
        ("k8s-app", app_name.to_string()),
    ]
}

/// The label selector of every pod and Job this provisioner owns.
pub(crate) fn selector(app_name: &str) -> String {
    selector_labels(app_name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_is_the_provisioners() {
        assert_eq!(selector("prp-wn"), "prp-htcondor-portal=wn,k8s-app=prp-wn");
    }
}
