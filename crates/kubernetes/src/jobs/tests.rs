use super::*;
use crate::observed::{ContainerSeen, Meta, PodStatusSeen, WorkerPod};
use crate::settings::Settings;
use crate::shape::POD_GPU_TYPES;

fn cfg(extra: &str) -> PodTemplate {
    Settings::test(extra).plan.pods
}

/// The pod the Job controller would make from a Job body (its template's metadata plus the
/// controller's job-name label), as a decision reads it.
pub(crate) fn pod_of(job: &Job, name: &str, phase: &str) -> WorkerPod {
    let tmpl = job.spec.as_ref().unwrap().template.clone();
    let mut meta: Meta =
        serde_json::from_value(serde_json::to_value(tmpl.metadata.unwrap()).unwrap()).unwrap();
    meta.name = name.into();
    meta.labels.insert(
        "batch.kubernetes.io/job-name".into(),
        job.metadata.name.clone().unwrap_or_default(),
    );
    WorkerPod {
        metadata: meta,
        status: PodStatusSeen {
            phase: Some(phase.into()),
            container_statuses: (phase != "Pending").then(|| {
                vec![ContainerSeen {
                    name: "htcondor".into(),
                }]
            }),
            start_time: None,
        },
        ..WorkerPod::default()
    }
}

fn key(s: &str) -> ShapeKey {
    s.parse().unwrap()
}

fn env_of(job: &Job) -> BTreeMap<String, String> {
    job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn one_job_per_pod_with_units_the_worker_matches() {
    let c = cfg("");
    let job = job_body(&key("4;8192;10000000;;1;;"), &c, "osg-direct-1-000000").unwrap();
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(
        (spec.parallelism, spec.completions, spec.backoff_limit),
        (Some(1), Some(1), Some(0))
    );
    assert_eq!(spec.ttl_seconds_after_finished, Some(86400));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let res = pod.containers[0].resources.as_ref().unwrap();
    let (req, lim) = (res.requests.as_ref().unwrap(), res.limits.as_ref().unwrap());
    // Large-limit over-commit (the default): 75 % CPU, 80 % memory requested.
    assert_eq!(req["cpu"].0, "3000m");
    assert_eq!(lim["cpu"].0, "4250m");
    assert_eq!(req["memory"].0, "6553Mi");
    assert_eq!(lim["memory"].0, "9192Mi");
    // Storage floor 20000 MiB = 20480000 KiB beats the job's 10000000 KiB, in Ki.
    assert_eq!(req["ephemeral-storage"].0, "20480000Ki");
    assert_eq!(lim["ephemeral-storage"].0, "20480000Ki");
    assert_eq!(lim["nvidia.com/gpu"].0, "1");
    assert_eq!(lim["smarter-devices/fuse"].0, "1");
    let env = env_of(&job);
    assert_eq!(env["DISK"], "10000000", "DISK stays the job's own KiB");
    assert_eq!(env["MEMORY"], "8192");
    assert_eq!(env["NUM_CPUS"], "4");
    assert_eq!(env["NUM_GPUS"], "1");
    assert_eq!(env["K8S_PROVISIONER_TYPE"], "PRPHTCondorProvisioner");
    assert_eq!(env["K8S_PROVISIONER_NAME"], "osg-direct");
    assert_eq!(env["K8S_NAMESPACE"], "osg");
    assert_eq!(env["K8S_DOMAIN"], "optiputer.net");
    assert_eq!(env["FORCE_K8SNAMESPACE_MATCHING"], "yes");
    assert!(!env.contains_key("ADDITIONAL_REQUIREMENTS"));
    let phys = pod.containers[0].env.as_ref().unwrap().last().unwrap();
    assert_eq!(phys.name, "PHYSICAL_HOSTNAME");
    assert_eq!(
        phys.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "spec.nodeName"
    );
    // No requirement → no affinity block at all; nothing empty emitted.
    assert!(pod.affinity.is_none());
    assert!(pod.node_selector.is_none() && pod.tolerations.is_none());
    let json = serde_json::to_value(&job).unwrap();
    assert!(json["spec"]["template"]["spec"].get("affinity").is_none());
    assert_eq!(json["kind"], "Job");
    assert_eq!(json["apiVersion"], "batch/v1");
}

#[test]
fn exact_resources_without_large_limit() {
    let c = cfg("use_large_limit = false\nmin_ephemeral_storage_mib = 0\nrequest_fuse = false\n");
    let job = job_body(&key("2;4096;9000000;;0;;"), &c, "n").unwrap();
    let res = job.spec.unwrap().template.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap();
    let (req, lim) = (res.requests.unwrap(), res.limits.unwrap());
    assert_eq!(req, lim);
    assert_eq!(req["cpu"].0, "2");
    assert_eq!(req["memory"].0, "5096Mi");
    assert_eq!(req["ephemeral-storage"].0, "9000000Ki");
    assert!(!req.contains_key("nvidia.com/gpu") && !req.contains_key("smarter-devices/fuse"));
}

#[test]
fn gpu_types_and_site_rules_become_node_affinity() {
    let c = cfg(
        "tolerations = [\"nautilus.io/noceph\"]\npriority_class = \"opportunistic\"\npriority_class_gpu = \"gpu-prio\"\n\
         [[node_affinity]]\nkey = \"nautilus.io/low-power\"\noperator = \"NotIn\"\nvalues = [\"true\"]\n",
    );
    let k = ShapeKey {
        gpus: 1,
        gpu_types: "NVIDIA-A100,NVIDIA-A40".into(),
        ..key("1;4096;8000000;;0;;")
    };
    let job = job_body(&k, &c, "n").unwrap();
    let pod = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
    let terms = pod
        .affinity
        .unwrap()
        .node_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    let exprs = terms[0].match_expressions.clone().unwrap();
    assert_eq!(exprs[0].key, "nautilus.io/low-power");
    assert_eq!(exprs[0].operator, "NotIn");
    assert_eq!(exprs[1].key, "nvidia.com/gpu.product");
    assert_eq!(exprs[1].operator, "In");
    assert_eq!(
        exprs[1].values.clone().unwrap(),
        vec!["NVIDIA-A100", "NVIDIA-A40"]
    );
    assert_eq!(pod.priority_class_name.as_deref(), Some("gpu-prio"));
    let t = &pod.tolerations.unwrap()[0];
    assert_eq!(
        (t.operator.as_deref(), t.effect.as_deref()),
        (Some("Exists"), Some("NoSchedule"))
    );
    // The GPU type list is not label-safe: annotation + hash label, and the pod maps back.
    let tmpl = job
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .clone()
        .unwrap();
    assert_eq!(
        tmpl.annotations.unwrap()[POD_GPU_TYPES],
        "NVIDIA-A100,NVIDIA-A40"
    );
    assert_eq!(
        ShapeKey::from_meta(&pod_of(&job, "p", "Pending").metadata),
        k
    );
    // CPU pods fall back to the generic class.
    let cpu = job_body(&key("1;4096;8000000;;0;;"), &c, "n").unwrap();
    assert_eq!(
        cpu.spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .priority_class_name
            .as_deref(),
        Some("opportunistic")
    );
}

#[test]
fn volumes_token_labels_and_env_as_the_worker_expects() {
    let c = cfg(
        "additional_requirements = \"(ProjectName=?=\\\"x\\\")\"\nforce_namespace_matching = false\n\
         job_label_allow = [\"team\"]\njob_volume_allow = [\"scratch\"]\n\
         [labels]\nosg-provisioner = \"wn\"\n[env]\nGLIDEIN_Site = \"SDSC-PRP\"\n\
         [annotations]\n\"container.apparmor.security.beta.kubernetes.io/htcondor\" = \"unconfined\"\n\
         [[pvc_volumes]]\nclaim = \"cvmfs\"\npath = \"/cvmfs\"\nhost_to_container = true\n\
         [[config_volumes]]\nconfig_map = \"wn-glidein-config\"\npath = \"/etc/condor/config.d/40_glidein.config\"\n",
    );
    let k = ShapeKey {
        disk_volumes: "scratch:!/scratch".into(),
        labels: "team:astro".into(),
        ..key("1;4096;8000000;;0;;")
    };
    let job = job_body(&k, &c, "n").unwrap();
    let tmpl = job.spec.as_ref().unwrap().template.clone();
    let meta = tmpl.metadata.unwrap();
    let labels = meta.labels.unwrap();
    assert_eq!(labels["k8s-app"], "osg-direct");
    assert_eq!(labels["prp-htcondor-portal"], "wn");
    assert_eq!(labels["osg-provisioner"], "wn");
    assert_eq!(labels["team"], "astro", "RequestLabels become pod labels");
    assert_eq!(labels["PodCPUs"], "1");
    assert_eq!(job.metadata.labels.as_ref().unwrap(), &labels);
    assert_eq!(
        meta.annotations.unwrap()["container.apparmor.security.beta.kubernetes.io/htcondor"],
        "unconfined"
    );
    let spec = tmpl.spec.unwrap();
    let mounts = spec.containers[0].volume_mounts.clone().unwrap();
    let cvmfs = mounts.iter().find(|m| m.mount_path == "/cvmfs").unwrap();
    assert_eq!(cvmfs.mount_propagation.as_deref(), Some("HostToContainer"));
    let scratch = mounts.iter().find(|m| m.mount_path == "/scratch").unwrap();
    assert_eq!(scratch.read_only, Some(true));
    let cm = mounts
        .iter()
        .find(|m| m.mount_path.ends_with("40_glidein.config"))
        .unwrap();
    assert_eq!(cm.sub_path.as_deref(), Some("40_glidein.config"));
    let token = mounts.iter().find(|m| m.mount_path == TOKEN_PATH).unwrap();
    assert_eq!(
        (token.sub_path.as_deref(), token.read_only),
        (Some("prp-wn.token"), Some(true))
    );
    let vols = spec.volumes.unwrap();
    let secret = vols.iter().find_map(|v| v.secret.clone()).unwrap();
    assert_eq!(
        secret.secret_name.as_deref(),
        Some("prp-htcondor-wn-secret")
    );
    assert_eq!(secret.default_mode, Some(0o400));
    let env = env_of(&job);
    assert_eq!(env["FORCE_K8SNAMESPACE_MATCHING"], "no");
    assert_eq!(env["ADDITIONAL_REQUIREMENTS"], "(ProjectName=?=\"x\")");
    assert_eq!(env["GLIDEIN_Site"], "SDSC-PRP");
}

#[test]
fn job_labels_and_volumes_reach_the_pod_only_when_the_site_allows_them() {
    let c = cfg(
        "job_label_allow = [\"team\", \"example.org/\", \"k8s-app\"]\njob_volume_allow = [\"shared\"]\n",
    );
    let with = |labels: &str, volumes: &str| ShapeKey {
        labels: labels.into(),
        disk_volumes: volumes.into(),
        ..key("1;4096;8000000;;0;;")
    };
    let refused = |k: ShapeKey| job_body(&k, &c, "n").unwrap_err().to_string();
    assert!(job_body(&with("team:astro,example.org/x:y", "shared:/data"), &c, "n").is_ok());
    let e = refused(with("app:evil-service", ""));
    assert!(
        e.contains("RequestLabels entry `app:evil-service` is not in [kubernetes] job_label_allow"),
        "{e}"
    );
    // Reserved keys are never taken from a job, even when the list names them.
    let e = refused(with("k8s-app:other", ""));
    assert!(e.contains("is reserved"), "{e}");
    let e = refused(with("controller-uid:x", ""));
    assert!(
        e.contains("is reserved (the Job controller owns it)"),
        "{e}"
    );
    let e = refused(with("", "home-of-someone:/data"));
    assert!(e.contains("RequestDiskVolumes entry `home-of-someone:/data` is not in [kubernetes] job_volume_allow"), "{e}");
}

/// A job's volumes never share a mount point (the API server would refuse the Job) nor sit at,
/// above or inside what the site and pilotd mount; each refusal names the entry and why.
#[test]
fn job_volumes_at_a_taken_place_are_refused_with_what_is_there() {
    let c = cfg("job_volume_allow = [\"a\", \"b\"]\n\
         [[pvc_volumes]]\nclaim = \"cvmfs\"\npath = \"/cvmfs\"\n\
         [[config_volumes]]\nconfig_map = \"wn-config\"\npath = \"/etc/condor/config.d/40_glidein.config\"\n");
    let with = |volumes: &str| ShapeKey {
        disk_volumes: volumes.into(),
        ..key("1;4096;8000000;;0;;")
    };
    let ok = job_body(&with("a:/data,b:!/data/cache,a:/other"), &c, "n").unwrap();
    let mounts = ok.spec.unwrap().template.spec.unwrap().containers[0]
        .volume_mounts
        .clone()
        .unwrap();
    assert_eq!(
        mounts.len(),
        6,
        "cvmfs, three of the job's, the ConfigMap file, the token"
    );
    for (volumes, why) in [
        (
            "a:/data,b:/data/",
            "entry `b:/data/` mounts at /data, where the job's `a:/data` is mounted too",
        ),
        (
            "a:/etc/condor/tokens.d/prp-wn.token",
            "mounts at /etc/condor/tokens.d/prp-wn.token, where the pool token is mounted",
        ),
        (
            "a:/etc/condor",
            "mounts at /etc/condor, over the site's ConfigMap `wn-config` ([kubernetes] config_volumes) at /etc/condor/config.d/40_glidein.config",
        ),
        (
            "a:/etc/condor/tokens.d",
            "mounts at /etc/condor/tokens.d, over the pool token at /etc/condor/tokens.d/prp-wn.token",
        ),
        (
            "a:#/",
            "mounts at /, over the site's PVC `cvmfs` ([kubernetes] pvc_volumes) at /cvmfs",
        ),
        (
            "b:/cvmfs/x",
            "mounts at /cvmfs/x, inside the site's PVC `cvmfs` ([kubernetes] pvc_volumes) at /cvmfs",
        ),
        (
            "a:/etc/condor/config.d/40_glidein.config",
            "where the site's ConfigMap `wn-config` ([kubernetes] config_volumes) is mounted",
        ),
        (
            "a:/x/../etc",
            "must be PVC_NAME:/absolute/mount/path (no `..` in the path)",
        ),
    ] {
        let e = job_body(&with(volumes), &c, "n").unwrap_err().to_string();
        assert!(e.contains("RequestDiskVolumes entry `"), "{volumes}: {e}");
        assert!(e.contains(why), "{volumes}: {e}");
    }
}

#[test]
fn job_gpu_types_are_intersected_with_the_sites_gpu_product_rule() {
    // The IceCube configuration: GPU nodes of these products only.
    let c = cfg(
        "[[node_affinity]]\nkey = \"nvidia.com/gpu.product\"\noperator = \"In\"\n\
                 values = [\"NVIDIA-GeForce-RTX-3090\", \"NVIDIA-A40\"]\n\
                 [[node_affinity]]\nkey = \"nvidia.com/gpu.product\"\noperator = \"NotIn\"\nvalues = [\"NVIDIA-A10\"]\n\
                 [[node_affinity]]\nkey = \"nautilus.io/low-power\"\noperator = \"NotIn\"\nvalues = [\"true\"]\n",
    );
    let exprs = |types: &str| {
        let k = ShapeKey {
            gpu_types: types.into(),
            ..key("1;4096;8000000;;1;;")
        };
        job_body(&k, &c, "n").map(|j| {
            let spec = j.spec.unwrap().template.spec.unwrap();
            spec.affinity
                .unwrap()
                .node_affinity
                .unwrap()
                .required_during_scheduling_ignored_during_execution
                .unwrap()
                .node_selector_terms[0]
                .match_expressions
                .clone()
                .unwrap()
                .into_iter()
                .map(|e| (e.key, e.operator, e.values.unwrap()))
                .collect::<Vec<_>>()
        })
    };
    let both = exprs("NVIDIA-A100,NVIDIA-A40,NVIDIA-A10").unwrap();
    assert_eq!(
        both,
        vec![
            (
                "nautilus.io/low-power".into(),
                "NotIn".into(),
                vec!["true".to_string()]
            ),
            (
                GPU_PRODUCT_LABEL.into(),
                "In".into(),
                vec!["NVIDIA-A40".to_string()]
            ),
        ],
        "one expression on the product label: the intersection"
    );
    // An A100-only job: no node of the site could take it.
    let e = exprs("NVIDIA-A100").unwrap_err().to_string();
    assert!(e.contains("RequestGPUTypes entry `NVIDIA-A100` has no GPU type the site's nvidia.com/gpu.product rule allows"), "{e}");
    // Without GPU types the site's rules stay as they are.
    let plain = exprs("").unwrap();
    assert_eq!(plain.len(), 3);
}
