//! The pilot with the real HTCondor (Debian's condor 23.9) in the shipped worker image (the
//! /Dockerfile's `worker` target on Debian's condor, tests/images/build-shipped-images.sh),
//! against the real pool of tests/pool/up.sh: real jobs of ordinary users, real IDTOKENS, real
//! config fetched over https from a server with a test CA. Each worker runs as pilotd runs it
//! by default: uid 65532, every capability dropped, no-new-privileges. Every exit code of the
//! contract is produced by real condor here.
//!
//! Ignored by a plain `cargo test` (they need the pool); tests/run.sh runs them.

use std::time::Duration;

use pilotd_test_support::pool::{self, Pool, Tag, WorkerRun};

// Generous: a 2-core CI machine runs these side by side, each worker a whole condor.
const SHORT: Duration = Duration::from_secs(150);
const LONG: Duration = Duration::from_secs(300);

/// A job script that reports who ran it, where, and which directory it ran in.
const WHOAMI: &str = "executable = whoami.sh\ntransfer_executable = True\n\
                      output = out.txt\nerror = err.txt\n";

fn write_whoami(pool: &Pool, user: &str) {
    pool.on_ap(
        user,
        "printf '#!/bin/sh\\necho \"ran as $(id -u) on $(hostname) in $PWD\"\\n' > whoami.sh && chmod +x whoami.sh",
    );
}

/// A job that keeps one CPU busy for `$1` seconds in its own process (no forks, so condor's
/// procd sees all of it), then prints the CPU it used as the shell counts it (`times`: user
/// then system, of the shell and of its children).
const BURN: &str = "#!/bin/bash\nwhile (( SECONDS < $1 )); do :; done\ntimes\n";

fn write_burn(pool: &Pool, user: &str) {
    pool.on_ap(
        user,
        &format!(
            "printf '%b' '{}' > burn.sh && chmod +x burn.sh",
            BURN.replace('\n', "\\n")
        ),
    );
}

fn burn_submit(out: &str, seconds: u32) -> String {
    format!(
        "executable = burn.sh\narguments = {seconds}\ntransfer_executable = True\n\
         output = {out}\nerror = {out}.err\n"
    )
}

/// `times` prints "0m12.345s 0m0.010s" for the shell, then its children: the sum, seconds.
fn cpu_from_times(out: &str) -> f64 {
    out.split_whitespace()
        .filter_map(|t| {
            let t = t.strip_suffix('s')?;
            let (m, s) = t.split_once('m')?;
            Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
        })
        .sum()
}

/// The pilot's job report: the last line of its standard output (its logs go to stderr).
fn report_of(worker: &pool::Worker) -> pilot_contract::JobReport {
    let stdout = pool::docker(&["logs", &worker.name]);
    let last = stdout.lines().last().unwrap_or_default();
    match pilot_contract::JobReport::parse_line(last) {
        Some(Ok(r)) => r,
        other => panic!(
            "the last line of the pilot's stdout is no job report ({other:?}): {stdout:?}\n{}",
            worker.diagnose()
        ),
    }
}

/// A report's (started, completed, vacated).
fn jobs(r: &pilot_contract::JobReport) -> (u64, u64, u64) {
    (r.jobs_started, r.jobs_completed, r.jobs_vacated)
}

/// The CPU seconds (user + system) the job's user log gives for its run ("Run Remote Usage"
/// of the termination or eviction event): the access point's view of the same run.
fn run_remote_usage(pool: &Pool, user: &str, name: &str) -> f64 {
    let log = pool.on_ap(user, &format!("cat {name}.log"));
    let line = log
        .lines()
        .rfind(|l| l.contains("Run Remote Usage"))
        .unwrap_or_else(|| panic!("no Run Remote Usage in {name}.log: {log}"))
        .to_owned();
    // "\tUsr 0 00:00:17, Sys 0 00:00:00  -  Run Remote Usage"
    line.split(',')
        .filter_map(|part| {
            let hms = part.split_whitespace().nth(2)?;
            let mut it = hms.split(':').map(|x| x.parse::<f64>().ok());
            Some(it.next()?? * 3600.0 + it.next()?? * 60.0 + it.next()??)
        })
        .sum()
}

/// condor's own record of the worker's jobs, printed for fixtures (run with --nocapture).
fn show_startd_history(worker: &pool::Worker) {
    eprintln!(
        "--- startd_history of {} ---\n{}--- end ---",
        worker.name,
        worker.condor_log("startd_history")
    );
}

/// In a module of its own so that tests/run.sh can leave these tests out of the general run
/// (`--skip real_pool::`) and run them with more threads: they mostly wait on condor.
mod real_pool {
    use super::*;

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_real_job_runs_unprivileged_its_output_returns_and_the_pilot_exits_0() {
        let pool = Pool::from_env();
        let tag = Tag::new("job0");
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_IDLE_TIMEOUT", "30")
            .start();
        worker.wait_advertised(&pool, SHORT);
        write_whoami(&pool, "alice");
        let job = pool.submit(
            "alice",
            &tag,
            "job0",
            &WHOAMI.replace("out.txt", "job0.out"),
        );
        pool.wait_job_status(&job, 4, LONG);
        let out = pool.on_ap("alice", "cat job0.out");
        assert!(
            out.starts_with(&format!(
                "ran as 65532 on {} in /pilot/execute/",
                worker.name
            )),
            "the job's output came back to alice from the unprivileged worker: {out:?}\n{}",
            worker.diagnose()
        );
        let code = worker.wait_exit(LONG);
        assert_eq!(code, 0, "{}", worker.diagnose());
        assert!(
            worker.logs().contains("a job started on this worker"),
            "{}",
            worker.diagnose()
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn no_job_before_the_idle_timeout_is_exit_10() {
        let pool = Pool::from_env();
        let tag = Tag::new("idle10");
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_IDLE_TIMEOUT", "15")
            .start();
        worker.wait_advertised(&pool, SHORT);
        assert_eq!(worker.wait_exit(LONG), 10, "{}", worker.diagnose());
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn root_without_capabilities_fails_the_self_test_with_21_and_says_what_to_do() {
        // The setup that used to fail two seconds into condor: root, every capability dropped.
        let pool = Pool::from_env();
        let tag = Tag::new("root21");
        let worker = WorkerRun::new(&pool, &tag).user("0:0", None).start();
        assert_eq!(worker.wait_exit(SHORT), 21, "{}", worker.diagnose());
        let logs = worker.logs();
        assert!(
            logs.contains("without the SETUID and SETGID capabilities")
                && logs.contains("[worker] user"),
            "{logs}"
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_scratch_dir_the_worker_cannot_write_fails_the_self_test_with_21_naming_it() {
        // The scratch mount as it was before pilotd prepared it: root-owned, 0755.
        let pool = Pool::from_env();
        let tag = Tag::new("scratch21");
        let worker = WorkerRun::new(&pool, &tag)
            .user("65532:65532", None)
            .start();
        assert_eq!(worker.wait_exit(SHORT), 21, "{}", worker.diagnose());
        let logs = worker.logs();
        assert!(
            logs.contains("/pilot/condor") && logs.contains("uid 65532"),
            "{logs}"
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_configuration_condor_rejects_ends_the_worker_with_20_not_a_hang() {
        let pool = Pool::from_env();
        let tag = Tag::new("badconf20");
        let url = pool.publish(
            &format!("{}.conf", tag.0),
            &format!(
                "{}\nthis line is not condor configuration\n",
                pool.standard_config()
            ),
        );
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_CONFIG_URLS", &url)
            .start();
        assert_eq!(worker.wait_exit(SHORT), 20, "{}", worker.diagnose());
        assert!(
            worker.logs().contains("condor rejected the configuration"),
            "{}",
            worker.diagnose()
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn plain_http_configuration_only_with_pilot_allow_http() {
        let pool = Pool::from_env();
        let tag = Tag::new("http");
        let url = pool.http_url("pool.conf");
        let refused = WorkerRun::new(&pool, &tag)
            .name(&format!("pilotd-pool-w-{}-refused", tag.0))
            .env("PILOT_CONFIG_URLS", &url)
            .start();
        assert_eq!(refused.wait_exit(SHORT), 20, "{}", refused.diagnose());
        assert!(
            refused.logs().contains("PILOT_ALLOW_HTTP"),
            "{}",
            refused.logs()
        );

        let allowed = WorkerRun::new(&pool, &tag)
            .env("PILOT_CONFIG_URLS", &url)
            .env("PILOT_ALLOW_HTTP", "1")
            .start();
        allowed.wait_advertised(&pool, SHORT);
        assert!(
            allowed
                .logs()
                .contains("fetched condor configuration url=http://pilotd-pool-web:8080/pool.conf"),
            "{}",
            allowed.logs()
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_token_the_pool_refuses_ends_the_worker_with_20_within_seconds() {
        let pool = Pool::from_env();
        let tag = Tag::new("token20");
        let worker = WorkerRun::new(&pool, &tag)
            .token(&pool.wrong_token())
            .start();
        assert_eq!(worker.wait_exit(SHORT), 20, "{}", worker.diagnose());
        assert!(
            worker
                .logs()
                .contains("the pool refused this worker's credentials"),
            "{}",
            worker.diagnose()
        );
        assert!(
            pool.slot_attrs(&worker.name, &["Name"]).is_empty(),
            "a refused worker is not in the pool"
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_startd_killed_with_sigkill_ends_the_pilot_with_30_at_once() {
        let pool = Pool::from_env();
        let tag = Tag::new("kill30");
        let worker = WorkerRun::new(&pool, &tag).start();
        worker.wait_advertised(&pool, SHORT);
        let master_log = worker.condor_log("MasterLog");
        let pid = master_log
            .lines()
            .filter_map(|l| l.split("condor_startd\", pid and pgroup = ").nth(1))
            .next_back()
            .expect("the master started a startd")
            .trim()
            .to_owned();
        pool::docker(&["exec", &worker.name, "sh", "-c", &format!("kill -9 {pid}")]);
        // The master would restart it in 10 s and keep doing so; the pilot ends condor first.
        let started = std::time::Instant::now();
        assert_eq!(worker.wait_exit(SHORT), 30, "{}", worker.diagnose());
        // The master alone would restart it in 10 s and again for ever, until the idle timeout
        // (300 s here); the pilot ends it at once (seconds, more under load).
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "exit 30 took {:?}\n{}",
            started.elapsed(),
            worker.diagnose()
        );
        assert!(
            worker.logs().contains("died due to signal 9"),
            "{}",
            worker.logs()
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn sigterm_shuts_condor_down_gracefully_with_143() {
        let pool = Pool::from_env();
        let tag = Tag::new("term143");
        let worker = WorkerRun::new(&pool, &tag).start();
        worker.wait_advertised(&pool, SHORT);
        worker.signal("TERM");
        assert_eq!(worker.wait_exit(SHORT), 143, "{}", worker.diagnose());
        assert!(
            worker
                .condor_log("MasterLog")
                .contains("Got SIGTERM. Performing graceful shutdown."),
            "{}",
            worker.diagnose()
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn the_slot_ad_carries_the_owners_limits_and_a_job_that_cannot_finish_in_time_never_starts() {
        let pool = Pool::from_env();
        let tag = Tag::new("slotad");
        let now = chrono::Utc::now().timestamp();
        let (accept, die) = (now + 3600, now + 7200);
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_ACCEPT_UNTIL", &accept.to_string())
            .env("PILOT_DIE_AT", &die.to_string())
            .env("PILOT_FREE_HOURS", "5")
            .start();
        worker.wait_advertised(&pool, SHORT);
        let ad = pool.slot_attrs(
            &worker.name,
            &[
                "PILOT_ACCEPT_UNTIL",
                "PILOT_DIE_AT",
                "PILOT_FREE_HOURS",
                "PILOT_LONGEST_JOB",
            ],
        );
        assert_eq!(
            ad,
            vec![format!("{accept} {die} 5 3600")],
            "{}",
            worker.diagnose()
        );

        write_whoami(&pool, "bob");
        // Declares 10 hours; the owner's deadline is 2 hours away.
        let too_long = pool.submit(
            "bob",
            &tag,
            "toolong",
            &format!(
                "{}allowed_execute_duration = 36000\n",
                WHOAMI.replace("out.txt", "toolong.out")
            ),
        );
        let fits = pool.submit(
            "bob",
            &tag,
            "fits",
            &format!(
                "{}allowed_execute_duration = 600\n",
                WHOAMI.replace("out.txt", "fits.out")
            ),
        );
        // The fitting job runs on this slot, so the negotiator has considered both.
        pool.wait_job_status(&fits, 4, LONG);
        assert_eq!(
            pool.job_status(&too_long),
            Some(1),
            "the 10 h job stays idle\n{}",
            worker.diagnose()
        );
        assert_eq!(pool.job_attr(&too_long, "NumJobStarts"), "0");
        pool.on_ap("bob", &format!("condor_rm {too_long}"));
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_job_then_the_pools_own_shutdown_expression_is_exit_0() {
        // The pool's configuration ends the master itself (as OSPool's does with
        // DAEMON_SHUTDOWN_FAST); a real master stopped that way exits 99, a normal end.
        let pool = Pool::from_env();
        let tag = Tag::new("shutdown99");
        let at = chrono::Utc::now().timestamp() + 30;
        let url = pool.publish(
            &format!("{}.conf", tag.0),
            &format!(
                "{}\nMASTER_UPDATE_INTERVAL = 5\nMASTER.DAEMON_SHUTDOWN_FAST = time() > {at}\n",
                pool.standard_config()
            ),
        );
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_CONFIG_URLS", &url)
            .start();
        worker.wait_advertised(&pool, SHORT);
        write_whoami(&pool, "alice");
        let job = pool.submit(
            "alice",
            &tag,
            "shutdown99",
            &WHOAMI.replace("out.txt", "shutdown99.out"),
        );
        pool.wait_job_status(&job, 4, SHORT);
        assert_eq!(worker.wait_exit(LONG), 0, "{}", worker.diagnose());
        assert!(
            worker.logs().contains("exit=Code(99)"),
            "condor ended itself: {}",
            worker.diagnose()
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn die_at_ends_the_worker_on_time_though_condor_would_notice_minutes_later() {
        // MASTER.DAEMON_SHUTDOWN is evaluated when the master updates the collector, every
        // 5 minutes by default; the owner's deadline cannot wait for that.
        let pool = Pool::from_env();
        let tag = Tag::new("dieat");
        let die_at = chrono::Utc::now().timestamp() + 25;
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_DIE_AT", &die_at.to_string())
            .start();
        worker.wait_advertised(&pool, SHORT);
        assert_eq!(worker.wait_exit(SHORT), 10, "{}", worker.diagnose());
        let late = chrono::Utc::now().timestamp() - die_at;
        // condor alone would notice at its next master update, up to 300 s later.
        assert!(
            late <= 60,
            "the worker ended {late} s after die_at\n{}",
            worker.diagnose()
        );
    }

    /// Writes `text` to `path` as pilotd does: a temporary file beside it, renamed over it,
    /// readable by the worker's uid.
    fn replace_file(path: &std::path::Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        let dir = path.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let tmp = dir.join(".tmp-write");
        std::fs::write(&tmp, text).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    /// Polls the worker's slot ad until `attrs` read `want`; fails with the last reading and
    /// the worker's logs at the deadline.
    fn wait_slot_attrs(
        pool: &Pool,
        worker: &pool::Worker,
        attrs: &[&str],
        want: &[String],
        deadline: Duration,
    ) {
        let start = std::time::Instant::now();
        loop {
            let got = pool.slot_attrs(&worker.name, attrs);
            if got == want {
                return;
            }
            assert!(
                start.elapsed() < deadline,
                "after {deadline:?} the slot ad reads {got:?}, not {want:?}\n{}",
                worker.diagnose()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn pilotds_ad_file_and_cvmfs_reach_the_slot_ad_and_a_rewrite_shows_within_the_period() {
        // The worker's scratch mount stands in for pilotd's read-only ad directory and for
        // a host's /cvmfs: both appear after the pilot started, as a file pilotd writes later
        // and a repository autofs mounts later do, so the startd cron job must find them.
        let pool = Pool::from_env();
        let tag = Tag::new("slotads");
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_AD_FILE", "/pilot/pilotd-ads/pilotd.ad")
            .env("PILOT_AD_PERIOD", "2")
            .env("PILOT_CVMFS_DIR", "/pilot/cvmfs")
            .start();
        let root = worker.scratch.path().to_path_buf();
        let ad = root.join("pilotd-ads/pilotd.ad");
        let manifest = root.join("cvmfs/repo.example.org/.cvmfspublished");
        replace_file(
            &ad,
            "PILOTD_INSTANCE = \"lab-3\"\nPILOTD_SNOOZED = False\nSTART = False\n\
             PILOTD_MACRO = \"$(SEC_TOKEN_DIRECTORY)\"\n",
        );
        replace_file(&manifest, "C0a1b\nS17\nNrepo.example.org\n--\nsignature\n");
        worker.wait_advertised(&pool, SHORT);
        let attrs = [
            "PILOTD_INSTANCE",
            "PILOTD_SNOOZED",
            "HAS_CVMFS_repo_example_org",
            "CVMFS_repo_example_org_REVISION",
            "PILOTD_MACRO",
        ];
        let want = |instance: &str, revision: u32| {
            vec![format!("{instance} false true {revision} undefined")]
        };
        wait_slot_attrs(&pool, &worker, &attrs, &want("lab-3", 17), SHORT);
        // The file's `START = False` line was dropped: the slot's START is the pilot's own.
        let start = pool.on_ap(
            "carol",
            &format!(
                "condor_status -constraint 'Machine == \"{}\"' -af:r START",
                worker.name
            ),
        );
        assert!(
            start.contains(&tag.start_extra()) && start.trim() != "False",
            "START = {start}"
        );

        let rewritten = std::time::Instant::now();
        replace_file(&ad, "PILOTD_INSTANCE = \"lab-4\"\nPILOTD_SNOOZED = False\n");
        replace_file(&manifest, "C0a1c\nS18\nNrepo.example.org\n--\nsignature\n");
        wait_slot_attrs(&pool, &worker, &attrs, &want("lab-4", 18), SHORT);
        let took = rewritten.elapsed();
        eprintln!("slot ad current {took:?} after the rewrite (period 2 s)");
        // One period, the startd's publication and the collector round trip, with room for
        // a loaded machine; far less than the 60 s a missed update would cost.
        assert!(
            took < Duration::from_secs(30),
            "took {took:?}\n{}",
            worker.diagnose()
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_required_cvmfs_repository_the_host_lacks_fails_the_self_test_with_21() {
        let pool = Pool::from_env();
        let tag = Tag::new("cvmfs21");
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_CVMFS_REQUIRED", "oasis.opensciencegrid.org")
            .env("PILOT_CVMFS_TIMEOUT", "5")
            .start();
        assert_eq!(worker.wait_exit(SHORT), 21, "{}", worker.diagnose());
        assert!(
            worker
                .logs()
                .contains("required CVMFS repository oasis.opensciencegrid.org is not readable"),
            "{}",
            worker.diagnose()
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_job_that_burns_cpu_is_reported_completed_with_its_cpu_and_wall_time() {
        let pool = Pool::from_env();
        let tag = Tag::new("report0");
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_IDLE_TIMEOUT", "20")
            .start();
        worker.wait_advertised(&pool, SHORT);
        write_burn(&pool, "alice");
        let job = pool.submit("alice", &tag, "report0", &burn_submit("report0.out", 20));
        pool.wait_job_status(&job, 4, LONG);
        assert_eq!(worker.wait_exit(LONG), 0, "{}", worker.diagnose());
        show_startd_history(&worker);
        let report = report_of(&worker);
        let burned = cpu_from_times(&pool.on_ap("alice", "cat report0.out"));
        let logged = run_remote_usage(&pool, "alice", "report0");
        eprintln!("report {report:?}; the job counted {burned:.2} s CPU; its user log {logged} s");
        assert_eq!(
            jobs(&report),
            (1, 1, 0),
            "{report:?}\n{}",
            worker.diagnose()
        );
        assert_eq!(report.vacated_cpu_seconds, 0.0, "{report:?}");
        // condor samples the job every 5 s and counts whole seconds: its figure is at most
        // what the job used, and at most one interval and a second below it.
        assert!(
            report.job_cpu_seconds > 0.0
                && report.job_cpu_seconds <= burned + 1.0
                && report.job_cpu_seconds >= burned - 6.0,
            "reported {} s CPU, the job used {burned:.2} s\n{}",
            report.job_cpu_seconds,
            worker.diagnose()
        );
        // The same run as the access point saw it.
        assert!(
            (report.job_cpu_seconds - logged).abs() <= 1.0,
            "reported {} s CPU, the job's user log {logged} s",
            report.job_cpu_seconds
        );
        assert!(
            (20..120).contains(&report.job_seconds),
            "a 20 s job ran {} s here",
            report.job_seconds
        );
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_worker_killed_at_once_leaves_the_report_of_the_jobs_it_finished() {
        let pool = Pool::from_env();
        let tag = Tag::new("reportkill");
        let worker = WorkerRun::new(&pool, &tag)
            .env("PILOT_IDLE_TIMEOUT", "600")
            .env("PILOT_REPORT_PERIOD", "2")
            .start();
        worker.wait_advertised(&pool, SHORT);
        write_burn(&pool, "alice");
        let job = pool.submit(
            "alice",
            &tag,
            "reportkill",
            &burn_submit("reportkill.out", 8),
        );
        pool.wait_job_status(&job, 4, LONG);
        // condor's record of the job reaches the report while condor runs on, idle.
        let printed = pool::wait_for("the finished job in the pilot's output", SHORT, || {
            let stdout = pool::docker(&["logs", &worker.name]);
            let last = pilot_contract::JobReport::find_last(stdout.lines())?.ok()?;
            (last.jobs_completed == 1).then_some(last)
        });
        assert!(worker.running(), "{}", worker.diagnose());
        // Killed at once, as pilotd's `fast` eviction does (the engine's SIGKILL to the
        // container's init): no last word, the report it gave stands.
        worker.signal("KILL");
        assert_eq!(worker.wait_exit(LONG), 137, "{}", worker.diagnose());
        let report = report_of(&worker);
        assert_eq!(report, printed);
        assert_eq!(
            jobs(&report),
            (1, 1, 0),
            "{report:?}\n{}",
            worker.diagnose()
        );
        assert!(report.job_seconds >= 8, "{report:?}");
    }

    #[test]
    #[ignore = "needs the real HTCondor pool: run by tests/run.sh"]
    fn a_job_running_when_the_pilot_is_stopped_is_reported_vacated_with_the_cpu_it_lost() {
        let pool = Pool::from_env();
        let tag = Tag::new("report143");
        let worker = WorkerRun::new(&pool, &tag).start();
        worker.wait_advertised(&pool, SHORT);
        write_burn(&pool, "bob");
        let job = pool.submit("bob", &tag, "report143", &burn_submit("report143.out", 600));
        pool.wait_executed("bob", "report143", 1, LONG);
        // Long enough for condor's procd to sample the job a few times.
        std::thread::sleep(Duration::from_secs(20));
        worker.signal("TERM");
        assert_eq!(worker.wait_exit(LONG), 143, "{}", worker.diagnose());
        show_startd_history(&worker);
        let report = report_of(&worker);
        eprintln!("report {report:?}");
        assert_eq!(
            jobs(&report),
            (1, 0, 1),
            "{report:?}\n{}",
            worker.diagnose()
        );
        assert!(
            report.vacated_cpu_seconds > 0.0,
            "{report:?}\n{}",
            worker.diagnose()
        );
        assert_eq!(report.vacated_cpu_seconds, report.job_cpu_seconds);
        assert!(report.job_seconds >= 20, "{report:?}");
        // The access point saw the eviction, with the same CPU.
        wait_for_eviction(&pool, "bob", "report143");
        let logged = run_remote_usage(&pool, "bob", "report143");
        assert!(
            (report.vacated_cpu_seconds - logged).abs() <= 1.0,
            "reported {} s lost, the job's user log {logged} s",
            report.vacated_cpu_seconds
        );
        pool.on_ap("bob", &format!("condor_rm {job}"));
    }
}

fn wait_for_eviction(pool: &Pool, user: &str, name: &str) {
    pool::wait_for(&format!("{user}'s job {name} evicted"), SHORT, || {
        (pool.job_events(user, name, "004 (") >= 1).then_some(())
    });
}
