# Generates a kubernetes-mode snapshot (the `pilotd snapshot` JSON contract) for the
# benchmark: JOBS idle jobs over SCHEDDS schedds in 20 shapes, PODS worker pods (Running,
# Pending, Failed, Succeeded) of the same shapes, and a startd ad for most running pods.
# Each pod is the body a real API server returns for a worker pod (about 8.7 kB): the
# managedFields of kube-controller-manager and of the kubelet, owner reference and
# finalizer, the cvmfs PVC, token Secret and projected service-account volumes, 14 env vars,
# resources, tolerations, 5 conditions and a container status.
# Usage: awk -v JOBS=100000 -v SCHEDDS=10 -v PODS=5000 -f gen_kube_snapshot.awk
BEGIN {
    srand(42)
    ncpu = split("1 1 1 2 4 8 1 1 16 2", cpus, " ")
    split("2048 4096 8192 16384 32000", mems, " ")
    split("1000000 8000000 20000000", disks, " ")
    printf "{\"mode\":\"kubernetes\",\"taken_at\":\"2026-12-01T21:30:00Z\",\"jobs\":["
    for (i = 0; i < JOBS; i++) {
        s = i % 20
        c = cpus[(s % ncpu) + 1]; m = mems[(s % 5) + 1]; d = disks[(s % 3) + 1]
        g = (s == 7 || s == 13) ? 1 : 0
        gt = (s == 13) ? "\"NVIDIA-A100,NVIDIA-A40\"" : "null"
        printf "%s{\"ScheddName\":\"ap%d.uc.osg-htc.org\",\"ClusterId\":%d,\"ProcId\":%d,\"JobStatus\":1,\"RequestCpus\":%d,\"RequestMemory\":%d,\"RequestDisk\":%d,\"RequestGPUs\":%d,\"RequestGPUTypes\":%s,\"RequestLabels\":null,\"RequestDiskVolumes\":null,\"Owner\":\"user%d\"}",
            (i ? "," : ""), i % SCHEDDS, int(i / 100), i % 100, c, m, d, g, gt, i % 97
    }
    printf "],\"startds\":["
    first = 1
    for (i = 0; i < PODS; i++) {
        if (i % 4 == 0 || i % 4 == 1) {
            printf "%s{\"Name\":\"slot1@osg-direct-p%d\",\"State\":\"%s\",\"Activity\":\"%s\",\"K8SPodName\":\"osg-direct-p%d\"}",
                (first ? "" : ","), i, (i % 4 == 0 ? "Claimed" : "Unclaimed"), (i % 4 == 0 ? "Busy" : "Idle"), i
            first = 0
        }
    }
    printf "],\"pods\":["
    for (i = 0; i < PODS; i++) {
        s = i % 20
        c = cpus[(s % ncpu) + 1]; m = mems[(s % 5) + 1]; d = disks[(s % 3) + 1]
        if (m < 4096) m = 4096
        if (d < 8000000) d = 8000000
        g = (s == 7 || s == 13) ? 1 : 0
        r = i % 10
        phase = (r < 6) ? "Running" : (r < 8) ? "Pending" : (r == 8) ? "Failed" : "Succeeded"
        printf "%s", (i ? "," : "")
        pod(i, c, m, d, g, phase)
    }
    printf "]}\n"
}

function uid(n) { return sprintf("%08x-%04x-4%03x-8%03x-%012x", n * 2654435761 % 4294967296, n % 65536, n % 4096, (n * 7) % 4096, n * 40503) }
function pod(i, c, m, d, g, phase,    name, job, u, ju, node, created, started, cs, conds, env, mf) {
    job = sprintf("osg-direct-6750a0b8-%06x", i)
    name = sprintf("%s-%05x", job, (i * 7919) % 1048576)
    u = uid(i + 1); ju = uid(i + 1000003)
    node = sprintf("node-%d.nrp-nautilus.io", i % 300)
    # Pending pods were made a few minutes ago (within pending_timeout); the others earlier.
    created = (phase == "Pending") ? "2026-12-01T21:25:00Z" : "2026-12-01T20:00:00Z"
    started = "2026-12-01T20:00:04Z"
    mf = "\"managedFields\":[{\"manager\":\"kube-controller-manager\",\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"" created "\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":{\"f:annotations\":{\".\":{},\"f:container.apparmor.security.beta.kubernetes.io/htcondor\":{}},\"f:finalizers\":{\".\":{},\"v:\\\"batch.kubernetes.io/job-tracking\\\"\":{}},\"f:generateName\":{},\"f:labels\":{\".\":{},\"f:PodCPUs\":{},\"f:PodDisk\":{},\"f:PodDiskVolumes\":{},\"f:PodGPUTypes\":{},\"f:PodGPUs\":{},\"f:PodLabels\":{},\"f:PodMemory\":{},\"f:app.kubernetes.io/managed-by\":{},\"f:batch.kubernetes.io/controller-uid\":{},\"f:batch.kubernetes.io/job-name\":{},\"f:controller-uid\":{},\"f:job-name\":{},\"f:k8s-app\":{},\"f:pilotd.io/shape\":{},\"f:prp-htcondor-portal\":{}},\"f:ownerReferences\":{\".\":{},\"k:{\\\"uid\\\":\\\"" ju "\\\"}\":{}}},\"f:spec\":{\"f:affinity\":{\".\":{},\"f:nodeAffinity\":{\".\":{},\"f:requiredDuringSchedulingIgnoredDuringExecution\":{}}},\"f:containers\":{\"k:{\\\"name\\\":\\\"htcondor\\\"}\":{\".\":{},\"f:env\":{\".\":{},\"k:{\\\"name\\\":\\\"CONDOR_HOST\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":\\\"DISK\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":\\\"MEMORY\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":\\\"NUM_CPUS\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":\\\"NUM_GPUS\\\"}\":{\".\":{},\"f:name\":{},\"f:value\":{}},\"k:{\\\"name\\\":\\\"PHYSICAL_HOSTNAME\\\"}\":{\".\":{},\"f:name\":{},\"f:valueFrom\":{\".\":{},\"f:fieldRef\":{}}}},\"f:image\":{},\"f:imagePullPolicy\":{},\"f:name\":{},\"f:resources\":{\".\":{},\"f:limits\":{\".\":{},\"f:cpu\":{},\"f:ephemeral-storage\":{},\"f:memory\":{},\"f:smarter-devices/fuse\":{}},\"f:requests\":{\".\":{},\"f:cpu\":{},\"f:ephemeral-storage\":{},\"f:memory\":{},\"f:smarter-devices/fuse\":{}}},\"f:terminationMessagePath\":{},\"f:terminationMessagePolicy\":{},\"f:volumeMounts\":{\".\":{},\"k:{\\\"mountPath\\\":\\\"/cvmfs\\\"}\":{\".\":{},\"f:mountPath\":{},\"f:mountPropagation\":{},\"f:name\":{}},\"k:{\\\"mountPath\\\":\\\"/etc/condor/tokens.d/prp-wn.token\\\"}\":{\".\":{},\"f:mountPath\":{},\"f:name\":{},\"f:readOnly\":{},\"f:subPath\":{}}}}},\"f:dnsPolicy\":{},\"f:enableServiceLinks\":{},\"f:priorityClassName\":{},\"f:restartPolicy\":{},\"f:schedulerName\":{},\"f:securityContext\":{},\"f:serviceAccount\":{},\"f:serviceAccountName\":{},\"f:terminationGracePeriodSeconds\":{},\"f:tolerations\":{},\"f:volumes\":{\".\":{},\"k:{\\\"name\\\":\\\"pvc-0\\\"}\":{\".\":{},\"f:name\":{},\"f:persistentVolumeClaim\":{\".\":{},\"f:claimName\":{}}},\"k:{\\\"name\\\":\\\"token\\\"}\":{\".\":{},\"f:name\":{},\"f:secret\":{\".\":{},\"f:defaultMode\":{},\"f:items\":{},\"f:secretName\":{}}}}}}}"
    if (phase != "Pending")
        mf = mf ",{\"manager\":\"kubelet\",\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"" started "\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f:conditions\":{\"k:{\\\"type\\\":\\\"ContainersReady\\\"}\":{\".\":{},\"f:lastProbeTime\":{},\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}},\"k:{\\\"type\\\":\\\"Initialized\\\"}\":{\".\":{},\"f:lastProbeTime\":{},\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}},\"k:{\\\"type\\\":\\\"PodReadyToStartContainers\\\"}\":{\".\":{},\"f:lastProbeTime\":{},\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}},\"k:{\\\"type\\\":\\\"Ready\\\"}\":{\".\":{},\"f:lastProbeTime\":{},\"f:lastTransitionTime\":{},\"f:status\":{},\"f:type\":{}}},\"f:containerStatuses\":{},\"f:hostIP\":{},\"f:hostIPs\":{},\"f:phase\":{},\"f:podIP\":{},\"f:podIPs\":{\".\":{},\"k:{\\\"ip\\\":\\\"10.244.1.2\\\"}\":{\".\":{},\"f:ip\":{}}},\"f:startTime\":{}}},\"subresource\":\"status\"}"
    mf = mf "]"
    env = "[{\"name\":\"K8S_PROVISIONER_TYPE\",\"value\":\"PRPHTCondorProvisioner\"},{\"name\":\"K8S_PROVISIONER_NAME\",\"value\":\"osg-direct\"},{\"name\":\"CONDOR_HOST\",\"value\":\"prp-cm-htcondor.htcondor-portal.svc.cluster.local\"},{\"name\":\"STARTD_NOCLAIM_SHUTDOWN\",\"value\":\"1200\"},{\"name\":\"K8S_NAMESPACE\",\"value\":\"osg-opportunistic\"},{\"name\":\"K8S_DOMAIN\",\"value\":\"nrp-nautilus.io\"},{\"name\":\"NUM_CPUS\",\"value\":\"" c "\"},{\"name\":\"NUM_GPUS\",\"value\":\"" g "\"},{\"name\":\"MEMORY\",\"value\":\"" m "\"},{\"name\":\"DISK\",\"value\":\"" d "\"},{\"name\":\"FORCE_K8SNAMESPACE_MATCHING\",\"value\":\"no\"},{\"name\":\"GLIDEIN_Site\",\"value\":\"SDSC-PRP\"},{\"name\":\"GLIDEIN_ResourceName\",\"value\":\"SDSC-PRP-OSPool-Provisioner\"},{\"name\":\"PHYSICAL_HOSTNAME\",\"valueFrom\":{\"fieldRef\":{\"apiVersion\":\"v1\",\"fieldPath\":\"spec.nodeName\"}}}]"
    conds = "[{\"type\":\"PodReadyToStartContainers\",\"status\":\"" (phase == "Running" ? "True" : "False") "\",\"lastProbeTime\":null,\"lastTransitionTime\":\"" started "\"},{\"type\":\"Initialized\",\"status\":\"True\",\"lastProbeTime\":null,\"lastTransitionTime\":\"" started "\"},{\"type\":\"Ready\",\"status\":\"" (phase == "Running" ? "True" : "False") "\",\"lastProbeTime\":null,\"lastTransitionTime\":\"" started "\"},{\"type\":\"ContainersReady\",\"status\":\"" (phase == "Running" ? "True" : "False") "\",\"lastProbeTime\":null,\"lastTransitionTime\":\"" started "\"},{\"type\":\"PodScheduled\",\"status\":\"" (phase == "Pending" ? "False" : "True") "\",\"lastProbeTime\":null,\"lastTransitionTime\":\"" created "\"" (phase == "Pending" ? ",\"reason\":\"Unschedulable\",\"message\":\"0/300 nodes are available: 300 Insufficient cpu. preemption: 0/300 nodes are available: 300 No preemption victims found for incoming pod.\"" : "") "}]"
    if (phase == "Running")
        cs = ",\"containerStatuses\":[{\"name\":\"htcondor\",\"state\":{\"running\":{\"startedAt\":\"" started "\"}},\"lastState\":{},\"ready\":true,\"restartCount\":0,\"image\":\"docker.io/sfiligoi/prp-portal-wn:ospool\",\"imageID\":\"docker.io/sfiligoi/prp-portal-wn@sha256:5f1d8e0b4c1f6b0c1d7a3f2e9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c\",\"containerID\":\"containerd://" u u "\",\"started\":true,\"volumeMounts\":[{\"name\":\"pvc-0\",\"mountPath\":\"/cvmfs\"},{\"name\":\"token\",\"mountPath\":\"/etc/condor/tokens.d/prp-wn.token\",\"readOnly\":true,\"recursiveReadOnly\":\"Disabled\"},{\"name\":\"kube-api-access-" substr(u, 1, 5) "\",\"mountPath\":\"/var/run/secrets/kubernetes.io/serviceaccount\",\"readOnly\":true,\"recursiveReadOnly\":\"Disabled\"}]}]"
    else if (phase == "Pending")
        cs = ""
    else
        cs = ",\"containerStatuses\":[{\"name\":\"htcondor\",\"state\":{\"terminated\":{\"exitCode\":" (phase == "Failed" ? 1 : 0) ",\"reason\":\"" (phase == "Failed" ? "Error" : "Completed") "\",\"startedAt\":\"" started "\",\"finishedAt\":\"2026-12-01T21:00:00Z\",\"containerID\":\"containerd://" u u "\"}},\"lastState\":{},\"ready\":false,\"restartCount\":0,\"image\":\"docker.io/sfiligoi/prp-portal-wn:ospool\",\"imageID\":\"docker.io/sfiligoi/prp-portal-wn@sha256:5f1d8e0b4c1f6b0c1d7a3f2e9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c\",\"containerID\":\"containerd://" u u "\",\"started\":false}]"
    printf "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"generateName\":\"%s-\",\"namespace\":\"osg-opportunistic\",\"uid\":\"%s\",\"resourceVersion\":\"%d\",\"creationTimestamp\":\"%s\",\"labels\":{\"PodCPUs\":\"%d\",\"PodDisk\":\"%d\",\"PodDiskVolumes\":\"\",\"PodGPUTypes\":\"\",\"PodGPUs\":\"%d\",\"PodLabels\":\"\",\"PodMemory\":\"%d\",\"app.kubernetes.io/managed-by\":\"pilotd\",\"batch.kubernetes.io/controller-uid\":\"%s\",\"batch.kubernetes.io/job-name\":\"%s\",\"controller-uid\":\"%s\",\"job-name\":\"%s\",\"k8s-app\":\"osg-direct\",\"pilotd.io/shape\":\"%040x\",\"prp-htcondor-portal\":\"wn\"},\"annotations\":{\"container.apparmor.security.beta.kubernetes.io/htcondor\":\"unconfined\"},\"ownerReferences\":[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"%s\",\"uid\":\"%s\",\"controller\":true,\"blockOwnerDeletion\":true}],\"finalizers\":[\"batch.kubernetes.io/job-tracking\"],%s},",
        name, job, u, 4000000 + i, created, c, d, g, m, ju, job, ju, job, s, job, ju, mf
    printf "\"spec\":{\"volumes\":[{\"name\":\"pvc-0\",\"persistentVolumeClaim\":{\"claimName\":\"cvmfs\"}},{\"name\":\"token\",\"secret\":{\"secretName\":\"prp-htcondor-wn-secret\",\"items\":[{\"key\":\"prp-wn.token\",\"path\":\"prp-wn.token\"}],\"defaultMode\":256}},{\"name\":\"kube-api-access-%s\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{\"expirationSeconds\":3607,\"path\":\"token\"}},{\"configMap\":{\"name\":\"kube-root-ca.crt\",\"items\":[{\"key\":\"ca.crt\",\"path\":\"ca.crt\"}]}},{\"downwardAPI\":{\"items\":[{\"path\":\"namespace\",\"fieldRef\":{\"apiVersion\":\"v1\",\"fieldPath\":\"metadata.namespace\"}}]}}],\"defaultMode\":420}}],\"containers\":[{\"name\":\"htcondor\",\"image\":\"sfiligoi/prp-portal-wn:ospool\",\"env\":%s,\"resources\":{\"limits\":{\"cpu\":\"%d\",\"ephemeral-storage\":\"%dKi\",\"memory\":\"%dMi\",\"smarter-devices/fuse\":\"1\"},\"requests\":{\"cpu\":\"%d\",\"ephemeral-storage\":\"%dKi\",\"memory\":\"%dMi\",\"smarter-devices/fuse\":\"1\"}},\"volumeMounts\":[{\"name\":\"pvc-0\",\"mountPath\":\"/cvmfs\",\"mountPropagation\":\"HostToContainer\"},{\"name\":\"token\",\"readOnly\":true,\"mountPath\":\"/etc/condor/tokens.d/prp-wn.token\",\"subPath\":\"prp-wn.token\"},{\"name\":\"kube-api-access-%s\",\"readOnly\":true,\"mountPath\":\"/var/run/secrets/kubernetes.io/serviceaccount\"}],\"terminationMessagePath\":\"/dev/termination-log\",\"terminationMessagePolicy\":\"File\",\"imagePullPolicy\":\"Always\"}],\"restartPolicy\":\"Never\",\"terminationGracePeriodSeconds\":30,\"dnsPolicy\":\"ClusterFirst\",\"serviceAccountName\":\"default\",\"serviceAccount\":\"default\",%s\"securityContext\":{},\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"nautilus.io/low-power\",\"operator\":\"NotIn\",\"values\":[\"true\"]}]}]}}},\"schedulerName\":\"default-scheduler\",\"tolerations\":[{\"key\":\"node.kubernetes.io/not-ready\",\"operator\":\"Exists\",\"effect\":\"NoExecute\",\"tolerationSeconds\":300},{\"key\":\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\",\"effect\":\"NoExecute\",\"tolerationSeconds\":300}],\"priorityClassName\":\"opportunistic\",\"priority\":-10,\"enableServiceLinks\":true,\"preemptionPolicy\":\"PreemptLowerPriority\"},",
        substr(u, 1, 5), env, c, d, m + 1000, c, d, m + 1000, substr(u, 1, 5), (phase == "Pending" ? "" : "\"nodeName\":\"" node "\",")
    printf "\"status\":{\"phase\":\"%s\",\"conditions\":%s,%s\"qosClass\":\"Guaranteed\"%s%s}}",
        phase, conds, (phase == "Pending" ? "" : "\"hostIP\":\"10.0.1." (i % 250) "\",\"hostIPs\":[{\"ip\":\"10.0.1." (i % 250) "\"}],\"podIP\":\"10.244.1.2\",\"podIPs\":[{\"ip\":\"10.244.1.2\"}],"), (phase == "Pending" ? "" : ",\"startTime\":\"" started "\""), cs
}
