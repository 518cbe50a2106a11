//! What the engine actually applies to a started worker, read where it takes effect — the
//! kernel's view of the worker's processes (/proc) and its cgroups (cgroup v1, cgroupfs) —
//! and, for what only the engine holds (its log driver), the engine's record of the container
//! (`docker inspect`), never pilotd's own request.

use super::docker;
use super::volunteer::{Harness, image, policy};
use std::time::Duration;

/// The line of /proc/PID/status that starts with `key`, without the key.
fn status_field(pid: &str, key: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// A v1 cgroup file of the process `pid` (its path from /proc/PID/cgroup), trimmed.
fn cgroup_file(pid: &str, controller: &str, file: &str) -> Option<String> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = cgroups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, names, path) = (f.next()?, f.next()?, f.next()?);
        names.split(',').any(|n| n == controller).then_some(path)
    })?;
    std::fs::read_to_string(format!("/sys/fs/cgroup/{controller}{path}/{file}"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// No swap on top of the worker's memory limit, held as far as the kernel offers: where it
/// keeps a swap account (cgroup v1's `memory.memsw.*`, present when the kernel has
/// `CONFIG_MEMCG_SWAP` and swap accounting is on), memory + swap is the memory limit. Where it
/// keeps none, the engine drops the limit ("Your kernel does not support swap limit
/// capabilities") and says so in `docker info`; then only a host without swap holds the
/// promise, and a host with swap fails here with what to do. Neither branch is a skip: each
/// asserts what the kernel offers (the branch taken shows in the test's output).
fn no_swap_on_top(pid: &str, memory_limit: &str) {
    if let Some(swap) = cgroup_file(pid, "memory", "memory.memsw.limit_in_bytes") {
        eprintln!("swap: the kernel keeps a swap account; memory + swap must be {memory_limit}");
        assert_eq!(swap, memory_limit, "memory + swap = memory");
        return;
    }
    let engine_limits_swap = docker("info -f '{{.SwapLimit}}'");
    assert_eq!(
        engine_limits_swap.trim(),
        "false",
        "no memory.memsw.limit_in_bytes in the worker's cgroup, yet the engine says it limits swap"
    );
    let devices: Vec<String> = std::fs::read_to_string("/proc/swaps")
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    eprintln!(
        "swap: the kernel keeps no swap account (no memory.memsw.limit_in_bytes); the host's swap devices: {devices:?}"
    );
    assert!(
        devices.is_empty(),
        "a worker can swap past its memory share here: this kernel keeps no swap account, so the \
         engine drops the limit, and the host has swap ({devices:?}); boot with swapaccount=1 \
         (cgroup v1) or turn swap off"
    );
}

#[test]
#[ignore = "needs the Docker engine and the local registry: tests/run.sh sets them up and runs it"]
fn the_engine_applies_the_workers_hardening() {
    let mut h = Harness::new(
        "harden",
        &policy("pause", 1),
        "",
        &format!(
            "{}\nhttps_proxy = \"http://squid.example.org:3128\"\n[worker.env]\n",
            image("v1")
        ),
    );
    h.start();
    let w = h.wait_for("1 worker", Duration::from_secs(30), || h.running().pop());
    // The engine's init (init = true) and the entrypoint it runs: the worker's own process.
    let init = docker(&format!("inspect -f '{{{{.State.Pid}}}}' {}", w.id));
    let init = init.trim();
    let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).unwrap();
    let pid = children
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("the init {init} runs no entrypoint"))
        .to_string();
    assert!(
        std::fs::read_to_string(format!("/proc/{init}/cmdline"))
            .unwrap()
            .contains("init"),
        "pid {init} is the engine's init"
    );

    for p in [init, pid.as_str()] {
        // The kernel kills a worker first when memory runs out.
        let oom = std::fs::read_to_string(format!("/proc/{p}/oom_score_adj")).unwrap();
        assert_eq!(oom.trim(), "1000", "pid {p}");
        // Not root, no capability at all (bounding set included), no way to gain one back.
        assert_eq!(
            status_field(p, "Uid:"),
            "65532\t65532\t65532\t65532",
            "pid {p}"
        );
        assert_eq!(
            status_field(p, "Gid:"),
            "65532\t65532\t65532\t65532",
            "pid {p}"
        );
        for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
            assert_eq!(status_field(p, cap), "0000000000000000", "pid {p} {cap}");
        }
        assert_eq!(status_field(p, "NoNewPrivs:"), "1", "pid {p}");
    }

    // A read-only root, and writable scratch space only in small tmpfs mounts that run no
    // set-uid program and open no device.
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let mount = |at: &str| {
        mounts
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some(at))
            .unwrap_or_else(|| panic!("no mount at {at}:\n{mounts}"))
            .to_string()
    };
    let root = mount("/");
    let root_opts = root.split_whitespace().nth(5).unwrap();
    assert!(root_opts.split(',').any(|o| o == "ro"), "{root}");
    for at in ["/tmp", "/var/tmp"] {
        let m = mount(at);
        let opts: Vec<&str> = m.split_whitespace().nth(5).unwrap().split(',').collect();
        let (fs, super_opts) = m.split(" - ").nth(1).unwrap().split_once(' ').unwrap();
        assert_eq!(fs, "tmpfs", "{m}");
        for o in ["rw", "nosuid", "nodev"] {
            assert!(opts.contains(&o), "{at} {o}: {m}");
        }
        assert!(super_opts.contains("size=262144k"), "256 MiB: {m}");
    }

    // The machine's slot-ad lines (pilotd's state dir): the worker reads them and cannot
    // change them.
    let ad = mount("/pilotd");
    let ad_opts = ad.split_whitespace().nth(5).unwrap();
    assert!(ad_opts.split(',').any(|o| o == "ro"), "{ad}");
    let text = std::fs::read_to_string(format!("/proc/{pid}/root/pilotd/slot.ad")).unwrap();
    assert!(text.contains("harden\"\n"), "{text}");

    // The site's proxy, in both spellings, in the worker's own environment.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
    for var in ["https_proxy", "HTTPS_PROXY"] {
        let want = format!("{var}=http://squid.example.org:3128");
        assert!(
            environ.contains(&want.as_bytes()),
            "{var} not in the worker's env"
        );
    }

    // The owner's processes come first for CPU: 2 shares against the default 1024.
    assert_eq!(cgroup_file(&pid, "cpu", "cpu.shares").as_deref(), Some("2"));
    // The memory and process limits the spec gives (the policy's 512 MiB for its one worker, no
    // swap on top).
    assert_eq!(
        cgroup_file(&pid, "memory", "memory.limit_in_bytes").as_deref(),
        Some("536870912")
    );
    no_swap_on_top(&pid, "536870912");
    assert_eq!(
        cgroup_file(&pid, "pids", "pids.max").as_deref(),
        Some("4096")
    );
    // The I/O weight: the engine (Docker 20.10, cgroup v1) writes CFQ's blkio.weight, and
    // discards the weight, with a warning, where the kernel has no such file. BFQ's own
    // blkio.bfq.weight is not written: on such a host (this one: BFQ built in, every disk on
    // the "none" scheduler) the worker's I/O is not weighted at all, as docs/security.md says.
    let recorded = docker(&format!(
        "inspect -f '{{{{.HostConfig.BlkioWeight}}}}' {}",
        w.id
    ));
    match cgroup_file(&pid, "blkio", "blkio.weight") {
        Some(weight) => {
            assert_eq!(weight, "10", "the I/O weight");
            assert_eq!(recorded.trim(), "10");
        }
        None => {
            eprintln!("this kernel has no blkio.weight: the engine discarded the I/O weight");
            assert_eq!(recorded.trim(), "0", "no weight where the kernel has none");
        }
    }

    // The container's log is bounded on the owner's disk: 2 files of 10 MB at most (the log
    // driver is the engine's; its record is the only place to read it).
    let log = docker(&format!(
        "inspect -f '{{{{json .HostConfig.LogConfig}}}}' {}",
        w.id
    ));
    let log: serde_json::Value = serde_json::from_str(&log).unwrap();
    assert_eq!(log["Type"], "json-file", "{log}");
    assert_eq!(log["Config"]["max-size"], "10m", "{log}");
    assert_eq!(log["Config"]["max-file"], "2", "{log}");

    // Open files capped at pilotd's own hard limit, soft = hard.
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let own = std::fs::read_to_string("/proc/self/limits").unwrap();
    let nofile = |l: &str| {
        l.lines()
            .find(|x| x.starts_with("Max open files"))
            .map(|x| {
                x.split_whitespace()
                    .skip(3)
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap()
    };
    let hard = nofile(&own).split(' ').nth(1).unwrap().to_string();
    assert_eq!(nofile(&limits), format!("{hard} {hard}"), "{limits}");
    h.term();
}
