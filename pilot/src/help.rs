//! The `pilot --help` text: the environment contract and the exit codes, kept next to the code
//! so the binary documents itself.

pub const HELP: &str = "\
pilot - pilotd's worker entrypoint: fetch the pool's condor configuration, self-test,
run condor_master -f, and exit with a code that says what happened.

USAGE: pilot            (configured only by environment)
       pilot --help | --version
       pilot startd-cron ad ...   (run by condor's startd: prints the slot-ad lines below)

ENVIRONMENT (durations: seconds \"300\" or humantime \"5m\"; instants: RFC 3339 or unix seconds;
an empty value counts as unset)
  PILOT_CONFIG_URLS        required. Comma list of https URLs of condor config files, fetched
                           in order into PILOT_CONDOR_CONFIG_DIR/50-pilot-fetched-NN-<name>.conf
  PILOT_CONFIG_SHA256      optional sha256 pins, same order as the URLs (empty entry = no pin)
  PILOT_TOKEN_FILE         required. Pool IDTOKEN file; copied (0600) into PILOT_TOKEN_DIR
  PILOT_TOKEN_DIR          condor's SEC_TOKEN_DIRECTORY (default /etc/condor/tokens.d)
  PILOT_IDLE_TIMEOUT       STARTD_NOCLAIM_SHUTDOWN: give up without a claim (default 20m)
  PILOT_ACCEPT_UNTIL       START is false from then on; advertised as PILOT_ACCEPT_UNTIL
  PILOT_DIE_AT             condor shuts down then; advertised as PILOT_DIE_AT; with
                           PILOT_ACCEPT_UNTIL also PILOT_LONGEST_JOB = die_at - accept_until
  PILOT_CPUS               NUM_CPUS of the one partitionable slot (default: detected)
  PILOT_MEMORY_MIB         MEMORY in MiB (default: detected)
  PILOT_DISK_KIB           DISK in KiB (default: detected)
  PILOT_GPUS               GPUs in the slot; > 0 enables GPU discovery (default: none)
  PILOT_START_EXTRA        extra ClassAd clause AND-ed into START (one line)
  PILOT_FREE_HOURS         hours the host is usually free from now (pilotd's {free_hours});
                           advertised as PILOT_FREE_HOURS so long jobs can prefer such hosts
  PILOT_CONDOR_CONFIG_DIR  condor's LOCAL_CONFIG_DIR (default /etc/condor/config.d); the pilot
                           writes 99-pilot.conf there, last, so it wins
  PILOT_SCRATCH            EXECUTE directory, checked writable (default /var/lib/condor/execute)
  PILOT_SELFTEST_CMD       optional site check, run with /bin/sh -c; must exit 0
  PILOT_SELFTEST_TIMEOUT   limit for the site check (default 60s)
  PILOT_ALLOW_HTTP         1 permits plain http config URLs (e.g. loopback); default 0
  PILOT_FETCH_TIMEOUT      deadline for all attempts to fetch one URL (default 2m)
  PILOT_FETCH_MAX_BYTES    size limit of one config file (default 1048576)
  PILOT_GRACEFUL_TIMEOUT   after SIGTERM, wait this long before a fast shutdown (default 5m)
  PILOT_FAST_TIMEOUT       after the fast shutdown, wait this long before SIGKILL (default 30s)
  PILOT_IDLE_GRACE         stop condor if no job by idle timeout + this (default 10m)
  PILOT_DIE_GRACE          stop condor fast at die_at + this (default 5m)
  PILOT_CONDOR_MASTER      condor_master program (default: condor_master on PATH)
  PILOT_CONDOR_CONFIG_VAL  condor_config_val program (default: condor_config_val on PATH)
  PILOT_AD_FILE            pilotd's slot-ad attributes, one `PILOTD_NAME = value` per line
                           (values: number, True/False, \"string\"); anything else is dropped.
                           In the slot ad at start and kept current by a startd cron job
                           (default: none)
  PILOT_AD_PERIOD          how often the cron job re-reads it and re-probes CVMFS (default 60)
  PILOT_REPORT_PERIOD      how often, while condor runs, the job report is printed again if it
                           changed, so a pilot killed at once leaves what it knew (default 30)
  PILOT_CVMFS_DIR          where CVMFS repositories are mounted (default /cvmfs)
  PILOT_CVMFS_REPOS        comma list of repositories to advertise (default: every one under
                           PILOT_CVMFS_DIR); each readable one as HAS_CVMFS_<repo> = True and
                           CVMFS_<repo>_REVISION (<repo> with . and - as _)
  PILOT_CVMFS_REQUIRED     comma list of repositories that must be readable, else exit 21
  PILOT_CVMFS_TIMEOUT      limit for reading one repository's revision (default 10)
  PILOT_LOG                log filter for the pilot's own stderr log (default info)

SIGNALS
  SIGTERM, SIGINT  graceful condor shutdown; then fast, then SIGKILL on the deadlines above
  SIGQUIT          fast condor shutdown

EXIT CODES
  0      ran at least one job, then shut down normally
  10     no job arrived within the idle timeout
  20     remote configuration (or the environment's settings) could not be fetched or used
  21     self-test failed (also: a PILOT_CVMFS_REQUIRED repository not readable)
  30     condor failed (did not start, crashed, exited abnormally, or had to be killed)
  128+n  ended by signal n (143 = SIGTERM, 131 = SIGQUIT)

A job counts as run when condor's StartLog (condor_config_val STARTD_LOG, else
$(LOG)/StartLog) gains a \"State change: claim-activation protocol successful\" or
\"Changing activity: Idle -> Busy\" line after the pilot started.

JOB REPORT
  The pilot's last line on standard output, on every exit (and, while condor runs, again
  whenever it changed, every PILOT_REPORT_PERIOD):
  pilot-report v=1 jobs_started=N jobs_completed=N jobs_vacated=N job_seconds=N
    job_cpu_seconds=X vacated_cpu_seconds=X   (one line)
  Started jobs come from the StartLog, the rest from condor's startd history
  (STARTD_HISTORY, set to $(LOG)/startd_history); see docs/site.md, \"The job report\".
";
