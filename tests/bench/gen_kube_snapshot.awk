# Generates a kubernetes-mode snapshot (the `pilotd snapshot` JSON contract) for the
# benchmark: JOBS idle jobs over SCHEDDS schedds in 20 shapes, PODS worker pods (Running,
# Pending, Failed, Succeeded) of the same shapes, and a startd ad for most running pods.
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
        cs = (phase == "Pending") ? "" : ",\"containerStatuses\":[{\"name\":\"htcondor\",\"image\":\"sfiligoi/prp-portal-wn:ospool\",\"imageID\":\"\",\"ready\":true,\"restartCount\":0}]"
        printf "%s{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"osg-direct-p%d\",\"namespace\":\"osg-opportunistic\",\"uid\":\"u%d\",\"resourceVersion\":\"%d\",\"creationTimestamp\":\"2026-12-01T20:00:00Z\",\"labels\":{\"k8s-app\":\"osg-direct\",\"prp-htcondor-portal\":\"wn\",\"PodCPUs\":\"%d\",\"PodMemory\":\"%d\",\"PodDisk\":\"%d\",\"PodGPUs\":\"%d\",\"PodDiskVolumes\":\"\",\"PodGPUTypes\":\"\",\"PodLabels\":\"\",\"job-name\":\"osg-direct-j%d\"}},\"spec\":{\"restartPolicy\":\"Never\",\"nodeName\":\"node%d.nrp-nautilus.io\",\"containers\":[{\"name\":\"htcondor\",\"image\":\"sfiligoi/prp-portal-wn:ospool\",\"resources\":{\"requests\":{\"cpu\":\"%d\",\"memory\":\"%dMi\",\"ephemeral-storage\":\"%dKi\"},\"limits\":{\"cpu\":\"%d\",\"memory\":\"%dMi\",\"ephemeral-storage\":\"%dKi\"}},\"env\":[{\"name\":\"NUM_CPUS\",\"value\":\"%d\"},{\"name\":\"MEMORY\",\"value\":\"%d\"},{\"name\":\"DISK\",\"value\":\"%d\"}]}]},\"status\":{\"phase\":\"%s\",\"startTime\":\"2026-12-01T20:01:00Z\"%s}}",
            (i ? "," : ""), i, i, i, c, m, d, g, i, i % 300, c, m + 1000, d, c, m + 1000, d, c, m, d, phase, cs
    }
    printf "]}\n"
}
