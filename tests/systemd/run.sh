#!/usr/bin/env bash
# pilotd's whole service life under a real systemd, as on a donated machine: the .deb installed
# with apt in a container that runs systemd as PID 1, the host's Docker engine driven through
# its socket, the busybox test workers of tests/setup-docker.sh. Each scenario prints
# `ok - NAME (SECONDS s): what it showed` or fails the run with the pilotd journal tail.
#
#   install    apt install; unit enabled, not started; init with piped answers; start reaches
#              active (running) through READY=1; systemctl status shows the STATUS= line;
#              nobody logged in and no /run/utmp (Debian 13): logind answers, a worker starts
#   metered    the real NetworkManager takes the container's veth (eth0, which carries its default
#              route) as its primary connection; `nmcli connection modify … connection.metered
#              yes`: plan and status say the network is metered within 5 s (measured from the
#              nmcli change), the worker runs on, and a worker image pilotd knows but the engine
#              no longer has is not pulled; `… metered no`: it is pulled
#   hardening  under the unit's sandbox: Docker socket, state dir, utmp, /proc, metrics port,
#              journal fields (WORKER=, PRIORITY=);
#              the sandbox really applied (NoNewPrivs, seccomp, bounding set, read-only /usr)
#   cgroup     the freezer pilotd pauses workers with is writable in the unit's sandbox (and not
#              under a drop-in ProtectControlGroups=yes: the control)
#   ssh-login  a real user's ssh login through the real sshd (pam_systemd: a logind session of
#              class user) pauses the worker; write->pause latency from logind's session
#              timestamp to the engine's pause event (a hint's, from logind's signal on the bus)
#   ssh-idle   the same ssh session, whose terminal logind does not name: away once her pts
#              (found through her processes in /proc) is idle past session_idle; a key typed
#              through ssh makes her present again (plan at once, the daemon within a cycle)
#   use        alice, her ssh terminal idle past session_idle: away; her `systemd-inhibit
#              --what=idle` (through logind and polkit): present within 5 s, said by kind only;
#              it ends: away within 5 s; a --what=sleep lock is no use; a /dev/video0 (mknod,
#              /dev/null's numbers) one of her processes holds open: present; closed: away
#   lock       the session's owner sets LockedHint over the system bus: away after lock_grace
#              (not before), the worker resumes; unlock -> paused again (latency measured)
#   desktop    a graphical-type (x11) session through PAM (systemd-run -p PAMName=): present;
#              its owner's SetIdleHint(true) -> away after session_idle; SetIdleHint(false) -> paused
#   logind-restart  systemctl restart systemd-logind while alice is there: still paused, the same
#              pilotd; her lock and unlock after the restart are acted on
#   reload     a valid change applied; an invalid one refused with FILE:LINE:COL, last good kept
#              (by the unit's check and by the daemon itself); no /bin/kill needed
#   watchdog   WatchdogSec honoured by a healthy daemon; a SIGSTOPped one is restarted
#   crash      SIGKILL: fail-safe pauses the workers at once, Restart=on-failure brings pilotd
#              back after RestartSec, which adopts (same containers, no duplicates) and resumes
#   failsafe   the service failed and stays down (Restart=no), and a start that fails
#              (ExecStartPre check): workers stay paused, nobody computes
#   stop       drains within TimeoutStopSec; on_shutdown "keep" and "stop" both honoured
#   upgrade    apt install of a newer .deb while a worker runs: edited files kept, daemon
#              restarted on the new binary, the worker adopted
#   purge      apt purge: unit gone, this instance's workers removed, state dir emptied
#
# Usage: tests/systemd/run.sh (as root; tests/run.sh calls it). PILOTD_SYSTEMD_STOP_AFTER=NAME
# ends the run after scenario NAME (a shorter loop while working on one). PILOTD_SYSTEMD_KEEP=1 leaves the
# container and its journal behind for a look (then remove it, its workers and /var/lib/pilotd). Needs the Docker engine and the
# registry of tests/setup-docker.sh (run here, idempotent), debootstrap (installed if missing)
# and Debian's mirror the first time the systemd image is built (cached by tag afterwards).
#
# The engine resolves bind-mount sources on the HOST, so the workers' scratch dirs must have the
# same path inside the systemd container and on the host: the host's /var/lib/pilotd is
# bind-mounted at /var/lib/pilotd. The suite refuses to run when the host already has a
# /var/lib/pilotd it did not create (a real pilotd lives here), and removes it on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

run_id=$$
instance=systemd-test-$run_id
ctr=pilotd-systemd-test-$run_id
state=/var/lib/pilotd
marker=/var/lib/.pilotd-systemd-test
work=$(mktemp -d "${TMPDIR:-/var/tmp}/pilotd-systemd.XXXXXX")
scenario=setup
suite_start=$EPOCHREALTIME

log() { echo "systemd-test: $*" >&2; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# --- host prerequisites ------------------------------------------------------------------------
need=()
command -v utmpdump >/dev/null || need+=(util-linux)
command -v flock >/dev/null || need+=(util-linux)
command -v dpkg-deb >/dev/null || need+=(dpkg)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; }
fi

# One run at a time: the host's /var/lib/pilotd is shared.
exec 9>/var/lock/pilotd-systemd-test.lock
flock -w 900 9 || { log "another systemd suite holds /var/lock/pilotd-systemd-test.lock"; exit 1; }

if [ -e "$state" ] && [ ! -e "$marker" ]; then
  log "FAIL: $state exists on this host and was not created by this suite (is pilotd installed here?)."
  log "      The suite bind-mounts the host's $state into the systemd container; it will not touch yours."
  exit 1
fi

cleanup() {
  local rc=$?
  set +e
  if [ "${PILOTD_SYSTEMD_KEEP:-0}" = 1 ]; then
    log "PILOTD_SYSTEMD_KEEP=1: leaving container $ctr, $state and $work; remove them by hand"
    exit $rc
  fi
  docker rm -f "$ctr" >/dev/null 2>&1
  local ids
  ids=$(docker ps -aq --filter label=pilotd.managed=true --filter "label=pilotd.instance=$instance")
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086
    docker unpause $ids >/dev/null 2>&1
    # shellcheck disable=SC2086
    docker rm -f $ids >/dev/null 2>&1
  fi
  # The metered scenario's own worker image (pulled back by digest, untagged).
  docker images -q --filter "label=pilotd.test.metered=$run_id" | sort -u | xargs -r docker rmi -f >/dev/null 2>&1
  rm -rf "$state" "$marker" "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- helpers ----------------------------------------------------------------------------------
c() { docker exec "$ctr" "$@"; }
ci() { docker exec -i "$ctr" "$@"; }
prop() { c systemctl show -p "$1" --value pilotd.service; }
journal() { c journalctl -u pilotd.service --no-pager -o cat "$@"; }
workers() { # ID STATE, one line per container of this instance
  docker ps -a --filter label=pilotd.managed=true --filter "label=pilotd.instance=$instance" \
    --format '{{.ID}} {{.State}}' | sort
}
ids_in() { workers | awk -v s="$1" '$2 == s { print $1 }' | tr '\n' ' ' | sed 's/ $//'; }
count_in() { workers | awk -v s="$1" '$2 == s' | wc -l; }

fail() {
  {
    echo "not ok - $scenario: $*"
    echo "--- workers of instance $instance:"; workers || true
    echo "--- systemctl status pilotd:"; c systemctl status pilotd.service --no-pager -n 0 2>&1 || true
    echo "--- journal of pilotd.service (last 60 lines):"
    c journalctl -u pilotd.service --no-pager -n 60 2>&1 || true
  } >&2
  exit 1
}
ok() {
  echo "ok - $scenario ($(elapsed "$t_scenario") s): $*"
  if [ "${PILOTD_SYSTEMD_STOP_AFTER:-}" = "$scenario" ]; then
    echo "systemd suite: stopped after $scenario (PILOTD_SYSTEMD_STOP_AFTER)"
    exit 0
  fi
}
# Each scenario starts from a clean slate as far as systemd's start rate limit goes
# (StartLimitBurst=5 in 10s): the suite compresses what would be weeks of service life into
# minutes, and the limit would otherwise refuse the upgrade's restart (start-limit-hit).
# RestartSec=30s keeps automatic restarts far below that limit on a real machine.
begin() {
  scenario=$1
  t_scenario=$EPOCHREALTIME
  c systemctl reset-failed pilotd.service 2>/dev/null || true
}

# wait_for SECONDS WHAT COMMAND...: polls every 0.2 s.
wait_for() {
  local limit=$1 what=$2 t0=$EPOCHREALTIME
  shift 2
  until "$@"; do
    if awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$limit" 'BEGIN { exit !(b - a > l) }'; then
      fail "timed out after ${limit}s waiting for $what"
    fi
    sleep 0.2
  done
}
active_with_new_pid() { # OLD_PID
  local p
  p=$(prop MainPID)
  [ "$(prop ActiveState)" = active ] && [ "$p" != 0 ] && [ "$p" != "$1" ]
}
unit_is() { [ "$(prop ActiveState)" = "$1" ]; }
one_running() { [ "$(count_in running)" = 1 ] && [ "$(workers | wc -l)" = 1 ]; }
all_paused() { [ "$(count_in paused)" -ge 1 ] && [ "$(count_in running)" = 0 ]; }
running_is() { [ "$(ids_in running)" = "$1" ] && [ "$(workers | wc -l)" = 1 ]; }
status_text_has() { [[ "$(prop StatusText)" == *"$1"* ]]; }
# (Output is captured before grep: `producer | grep -q` fails under pipefail when grep exits
# first and the producer gets SIGPIPE.)
status_has() { grep -qF "$1" <<<"$(c pilotd status 2>/dev/null)"; }
# Cycles ended so far, by the daemon's own count (/metrics): neither STATUS= nor the status
# file changes with a cycle that changed nothing.
cycles() {
  c timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/9464 && printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' \
    | awk '/^pilotd_cycle_duration_seconds_count / { print $2 }'
}
cycles_past() { local n; n=$(cycles); [ -n "$n" ] && [ "$n" -gt "$1" ]; } # N
journal_since_has() { grep -qF "$2" <<<"$(journal --since "@$1")"; }
# expect_journal T0 TEXT WHY: TEXT appears in the journal since T0 within 10 s, or fail with WHY.
# (The fail-safe logs when it is done, 2 s after its first look.)
expect_journal() {
  local t0=$EPOCHREALTIME
  until journal_since_has "$1" "$2"; do
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { exit !(b - a > 10) }' && fail "$3"
    sleep 0.2
  done
}
journal_has() { grep -q "$1" <<<"$(journal)"; }
unit_status() { c systemctl status pilotd.service --no-pager -l 2>&1 || true; }
put_utmp() { ci sh -c 'cat > /run/utmp.new && chmod 664 /run/utmp.new && mv /run/utmp.new /run/utmp' <"$1"; }
sh_kill() { c sh -c "kill -$1 $2"; } # /bin/kill (procps) is not in the container, on purpose

# --- logind: real sessions, made by the real sshd and by PAM ------------------------------------
# sessions_table: "ID USER CLASS TYPE STATE" of each logind session, one a line.
sessions_table() {
  local ids
  ids=$(c loginctl list-sessions --no-legend 2>/dev/null | awk '{ print $1 }')
  [ -n "$ids" ] || return 0
  # shellcheck disable=SC2086
  c loginctl show-session $ids -p Id -p Name -p Class -p Type -p State 2>/dev/null | awk -F= '
    function flush() { if (id != "") print id, n, cl, t, st; id = n = cl = t = st = "" }
    /^Id=/ { id = $2 } /^Name=/ { n = $2 } /^Class=/ { cl = $2 } /^Type=/ { t = $2 }
    /^State=/ { st = $2 } /^$/ { flush() } END { flush() }' || true
}
# user_sessions: the sessions of class user (a person's; manager and background are not).
user_sessions() { sessions_table | awk '$3 == "user"'; }
session_of() { # USER TYPE: the id of USER's open class-user session of TYPE
  user_sessions | awk -v u="$1" -v t="$2" '$2 == u && $4 == t && $5 != "closing" { print $1; exit }'
}
has_session() { [ -n "$(session_of "$1" "$2")" ]; }
session_prop() { c loginctl show-session "$1" -p "$2" --value; }
session_path() {
  c busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager \
    GetSession s "$1" | awk '{ print $2 }' | tr -d '"'
}
session_created_ns() { # SESSION: logind's creation time of the session, ns since the epoch
  local us
  us=$(c busctl get-property org.freedesktop.login1 "$(session_path "$1")" \
    org.freedesktop.login1.Session Timestamp | awk '{ print $2 }')
  echo "${us}000"
}
# logind's PropertiesChanged signals of sessions, as the bus delivers them, each with the
# realtime stamp of its delivery (busctl monitor, a D-Bus monitor on the system bus): the
# instant a hint changed, which is what pilotd's urgent path reacts to. Independent of logind,
# so it keeps listening across logind's restart.
signals=/root/login1-signals.json
watch_signals() {
  docker exec -d "$ctr" sh -c "exec busctl monitor --json=short --match \
    'type=signal,interface=org.freedesktop.DBus.Properties,member=PropertiesChanged,path_namespace=/org/freedesktop/login1/session' \
    >$signals 2>&1"
}
signal_us() { # PATH HINT BOOL: the delivery stamp (us) of the last signal setting HINT to BOOL on PATH
  local lines
  lines=$(c cat "$signals")
  grep -F "\"path\":\"$1\"" <<<"$lines" | grep -F "\"$2\":{\"type\":\"b\",\"data\":$3}" \
    | sed -n 's/.*"timestamp-realtime":\([0-9]*\).*/\1/p' | tail -n 1
}
# set_hint USER SESSION Locked|Idle true|false: the session's owner calls logind's
# Set{Locked,Idle}Hint over the system bus, as a screen locker or a desktop's idle monitor does.
# As USER's uid, gid and groups, through setpriv: no PAM, so no session of its own (logind
# authorises a hint by the caller's uid). Then logind's own view is checked, so the scenario
# knows the state is real. hint_ns: when logind's signal of the change was delivered (ns).
set_hint() {
  local uid path out want=no t0 us=
  uid=$(c id -u "$1")
  path=$(session_path "$2")
  out=$(c sh -c 'date +%s%N; exec setpriv --reuid="$1" --regid="$1" --init-groups busctl call \
      org.freedesktop.login1 "$2" org.freedesktop.login1.Session "$3" b "$4"' \
    sh "$uid" "$path" "Set$3Hint" "$4" 2>&1) || fail "$1 could not Set$3Hint($4) on session $2: $out"
  t0=$(head -n 1 <<<"$out")
  [ "$4" = true ] && want=yes
  [ "$(session_prop "$2" "$3Hint")" = "$want" ] \
    || fail "after $1's Set$3Hint($4), logind shows $3Hint=$(session_prop "$2" "$3Hint") for session $2"
  for _ in $(seq 1 20); do
    us=$(signal_us "$path" "$3Hint" "$4")
    [ -n "$us" ] && [ "$us" -ge "${t0:0:16}" ] && break
    us=
    sleep 0.1
  done
  [ -n "$us" ] || fail "no PropertiesChanged($3Hint=$4) of session $2 on the bus (busctl monitor, $signals)"
  hint_ns=${us}000
}
# alice logs in through the real sshd with a pty (-tt: a tty-type session of class user) and
# stays, running a quiet command that reads her terminal as a shell's prompt would. Her keys
# are what is written to the FIFO $alice_keys (alice_types), which a writer holds open so
# that ssh never sends EOF.
alice_keys=/root/alice.keys
ssh_alice() {
  docker exec -d "$ctr" sh -c "rm -f $alice_keys && mkfifo $alice_keys && { sleep infinity >$alice_keys & }
    exec ssh -tt -i /root/.ssh/id_alice \
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes \
    alice@127.0.0.1 'exec cat >/dev/null' <$alice_keys >/root/ssh-alice.log 2>&1"
}
alice_on_tty() { [ -n "$(alice_tty)" ]; }
alice_types() { c sh -c "printf 'x\\n' >$alice_keys"; } # a key and Enter, through ssh
# alice_tty: her remote command's controlling terminal (pts/N), as ps reads it from /proc.
alice_tty() {
  c ps -u alice -o comm=,tty= | awk '$1 == "cat" && $2 ~ /^pts\// { print $2; exit }'
}
# Her ssh client ends; sshd closes her session.
ssh_alice_leaves() {
  c sh -c 'for p in /proc/[0-9]*; do case "$(tr "\0" " " 2>/dev/null <"$p/cmdline")" in
    "ssh -tt "*) kill "${p#/proc/}" ;; esac; done'
}
# latency_ms T0_NS ACTION: ms from T0_NS (ns since the epoch) to the first ACTION (pause,
# unpause) of this instance's workers at or after it, by the engine's own event times.
latency_ms() {
  local t0=$1 ns
  ns=$(docker events --since "${t0:0:10}.${t0:10}" --until "$(date +%s.%N)" \
    --filter "label=pilotd.instance=$instance" --filter type=container --filter "event=$2" \
    --format '{{.TimeNano}}' | awk -v t="$t0" '$1 >= t' | sort -n | awk 'NR == 1')
  [ -n "$ns" ] || fail "no $2 event of the workers since $(date -u -d "@${t0:0:10}" +%T)"
  awk -v a="$t0" -v b="$ns" 'BEGIN { printf "%.0f", (b - a) / 1e6 }'
}
# The owner's return reaches the workers without waiting for a cycle (issue 20: p95 < 50 ms,
# max < 100 ms on the 2-core machine). One sample per check here, so the bound is a sanity
# bound that a cycle's wait (seconds) would break, not the goal; tests/bench/owner_return.sh
# measures the distribution against the goal.
return_bound_ms=${PILOTD_SYSTEMD_RETURN_MS:-500}
within_bound() { # MS WHAT
  [ "$1" -le "$return_bound_ms" ] \
    || fail "$2 took $1 ms (bound $return_bound_ms ms; PILOTD_SYSTEMD_RETURN_MS overrides)"
}
# set_owner KEY VALUE: the owner edits one [owner] key (replaced, or added under [owner]) and
# reloads; the reload ends after the next cycle (READY=1), so the value is in force.
set_owner() {
  if c grep -q "^$1 = " "$policy"; then
    c sed -i "s|^$1 = .*|$1 = $2|" "$policy"
  else
    c sed -i "s|^\[owner\]\$|[owner]\n$1 = $2|" "$policy"
  fi
  c grep -qxF "$1 = $2" "$policy" || fail "could not set $1 = $2 in $policy"
  c systemctl reload pilotd.service || fail "reload after setting $1 = $2 failed"
}

# The fail-safe's bound once systemd sees the daemon end (docs/site.md, "Running as a service", Fail-safe); measured
# about 0.3 s here. Prints the seconds it took.
failsafe_bound=5
time_until_paused() { # T0
  local t0=$1
  wait_for "$failsafe_bound" "the fail-safe to pause the workers (bound ${failsafe_bound}s)" all_paused
  elapsed "$t0"
}

# --- images, packages, container ---------------------------------------------------------------
log "Docker engine, registry and worker images (tests/setup-docker.sh)"
# Without fd 9: a registry (or dockerd) it starts would inherit the lock and hold it after
# this suite ends, and the next run would wait for it in vain.
sh tests/setup-docker.sh >/dev/null 9>&-
image=$(sh tests/systemd/image.sh)
log "systemd image: $image"

log "building the package twice (dev profile; the second with a higher version, for the upgrade)"
mkdir -p "$work/debs/v1" "$work/debs/v2"
deb1=$(packaging/build-deb.sh --profile dev -- --fast --output "$work/debs/v1/" 2>"$work/build.log" | tail -n 1) \
  || { cat "$work/build.log" >&2; log "FAIL: build-deb failed"; exit 1; }
v1=$(dpkg-deb -f "$deb1" Version)
v2="$v1+systemdtest2"
deb2=$(packaging/build-deb.sh --profile dev -- --fast --deb-version "$v2" --output "$work/debs/v2/" 2>"$work/build.log" | tail -n 1) \
  || { cat "$work/build.log" >&2; log "FAIL: build-deb (upgrade) failed"; exit 1; }
[ "$(dpkg-deb -f "$deb2" Version)" = "$v2" ] || { log "FAIL: $deb2 is not version $v2"; exit 1; }
dpkg --compare-versions "$v2" gt "$v1" || { log "FAIL: $v2 is not newer than $v1"; exit 1; }

# utmp files: a boot record (what Debian 12's systemd-update-utmp writes), and the same plus a
# login by alice (uid 1000 in the container) whose pid, 1, is alive there.
boot_rec='[2] [00000] [~~  ] [reboot  ] [~           ] [6.1.0-13-amd64      ] [0.0.0.0        ] [2026-01-01T00:00:00,000000+00:00]'
login_rec='[7] [00001] [ts/9] [alice   ] [pts/9       ] [192.0.2.9           ] [192.0.2.9      ] [2026-01-01T00:00:00,000000+00:00]'
utmp_boot=$work/utmp.boot
utmp_login=$work/utmp.login
printf '%s\n' "$boot_rec" | utmpdump -r >"$utmp_boot" 2>/dev/null
printf '%s\n' "$boot_rec" "$login_rec" | utmpdump -r >"$utmp_login" 2>/dev/null
[ -s "$utmp_boot" ] && [ -s "$utmp_login" ] || { log "FAIL: utmpdump -r wrote no records"; exit 1; }

rm -rf "$state"
mkdir -p "$state"
touch "$marker"
log "starting systemd in container $ctr"
# CAP_NET_ADMIN is NetworkManager's (the metered scenario): without it NetworkManager can only
# watch the engine's eth0 ("connected (externally)", never the primary connection) and fails
# to take it ("do-change-link: Operation not permitted" in its journal).
docker run -d --name "$ctr" --hostname pilotd-systemd-test \
  --cap-add SYS_ADMIN --cap-add DAC_READ_SEARCH --cap-add SYS_PTRACE --cap-add NET_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
  -v /sys/fs/cgroup:/sys/fs/cgroup:ro --tmpfs /run --tmpfs /run/lock -e container=docker \
  --device /dev/loop-control --device-cgroup-rule 'b 7:* rwm' \
  -v /var/run/docker.sock:/run/docker.sock \
  -v "$state:$state" \
  -v "$work/debs:/debs:ro" \
  --entrypoint /lib/systemd/systemd "$image" >/dev/null
booted() {
  local s
  s=$(c systemctl is-system-running 2>/dev/null || true)
  [ "$s" = running ] || [ "$s" = degraded ]
}
wait_for 60 "systemd to boot in the container" booted
# Loop devices, as a host has them: the kernel makes /dev/loopN on demand, and a container's
# /dev has no devtmpfs to show them, so the nodes are made here (the engine's default MKNOD,
# the device rule above). pilotd attaches a worker's image to one; the host's engine mounts it.
c sh -c 'for i in $(seq 0 255); do [ -e /dev/loop$i ] || mknod -m 660 /dev/loop$i b 7 $i; done'
# openssh-server depends on procps, which brings /usr/bin/kill; the reload scenario proves the
# unit needs no kill binary, so it is moved aside (dpkg keeps track of it).
c dpkg-divert --quiet --local --rename --divert /usr/bin/kill.procps --add /usr/bin/kill
log "setup took $(elapsed "$suite_start") s"

policy=/etc/pilotd/policy.toml
site=/etc/pilotd/pilotd.toml

# --- scenarios ---------------------------------------------------------------------------------
scenario_install() {
  begin install
  c sh -c '! [ -e /bin/kill ] && ! [ -e /usr/bin/kill ]' \
    || fail "the container has /bin/kill: the reload test would not prove the unit works without procps"
  local out
  out=$(c sh -c 'cd /debs/v1 && DEBIAN_FRONTEND=noninteractive apt-get install -y ./pilotd_*.deb' 2>&1) \
    || { echo "$out" >&2; fail "apt-get install ./pilotd_*.deb failed"; }
  grep -q 'sudo pilotd init' <<<"$out" || { echo "$out" >&2; fail "no post-install message"; }
  [ "$(c systemctl is-enabled pilotd.service)" = enabled ] || fail "the unit is not enabled after install"
  [ "$(prop ActiveState)" = inactive ] || fail "the unit was started by the install: $(prop ActiveState)"

  # The site's edits: the local test image, this run's instance, metrics on loopback, worker
  # env the busybox test worker reads, no fleet spread (the scenarios time the first start),
  # and a 5s cycle (process and load changes are seen on cycles; logins at once).
  # Workers on Docker's default bridge: pilotd's own filtered network installs iptables rules
  # in pilotd's network namespace, which here is this container's, not the engine's host
  # (tests/it/docker/egress.rs proves the filter on the host).
  # WORKER_TERM_DELAY goes right under the [worker.env] header, wherever that table is.
  c sed -i -e 's|^interval = .*|interval = "5s"\nsplay = "0s"|' \
    -e 's|^image = .*|image = "127.0.0.1:5000/pilotd-test/worker:current"\nnetwork = "bridge"|' \
    -e 's|^allowed_images = .*|allowed_images = ["127.0.0.1:5000/pilotd-test/*"]|' \
    -e 's|^\[worker.env\]$|[worker.env]\nWORKER_TERM_DELAY = "1"|' \
    -e "s|^# instance = .*|instance = \"$instance\"|" "$site"
  printf '%s\n' '' '[metrics]' 'listen = "127.0.0.1:9464"' \
    | ci sh -c "cat >> $site"

  # The owner's answers, piped: always, only sessions in use count ("active", the shipped
  # default: a locked or idle session is away), 1 CPU, 128MiB, 1h jobs, pause, UTC.
  out=$(printf 'always\nactive\n1\n128MiB\n1h\npause\nUTC\n' | ci pilotd init --force 2>&1) \
    || { echo "$out" >&2; fail "pilotd init with piped answers failed"; }
  c grep -q 'days = "daily", from = "00:00", to = "24:00"' "$policy" || fail "init did not write the answers"
  c test -f "$policy.bak" || fail "init --force kept no policy.toml.bak"
  # The owner then edits it by hand: this machine's own load must not block the test workers,
  # and they may start as soon as the host is free.
  # The disk limit is enforced, as on a real machine: each worker's scratch is a 64 MiB ext4
  # image on a loop device (this container was given the loop devices, see below).
  c sed -i -e 's|^max_owner_cpu = .*|max_owner_cpu = "100%"|' -e 's|^free_for = .*|free_for = "0s"|' \
    -e 's|^disk = .*|disk = "64MiB"|' "$policy"
  echo '# edited by the owner (tests/systemd)' | ci sh -c "cat >> $policy"
  # alice logs in over ssh (ssh-login, lock, logind-restart), bob on a "desktop" (desktop).
  c useradd -m -u 1000 alice
  c useradd -m -u 1001 bob
  out=$(c pilotd check 2>&1) || { echo "$out" >&2; fail "pilotd check refuses the edited files"; }

  local t0=$EPOCHREALTIME
  c systemctl start pilotd.service || fail "systemctl start failed"
  local t_start
  t_start=$(elapsed "$t0")
  [ "$(prop ActiveState)/$(prop SubState)" = active/running ] \
    || fail "not active (running) after start: $(prop ActiveState)/$(prop SubState)"
  [ "$(prop Type)" = notify ] || fail "Type is $(prop Type)"
  journal_has '^ready: ' || fail "no 'ready:' line: READY=1 was not what completed the start"
  # Debian 13's systemd no longer creates /run/utmp (Debian 12's does), and nobody is logged
  # in: logind answers on the system bus, so an absent utmp is not "unknown" and a worker
  # starts. `plan` and `status` say which sources decided.
  c test ! -e /run/utmp || fail "the container has /run/utmp: this scenario is Debian 13 without it"
  [ -z "$(user_sessions)" ] || fail "a user session exists before anyone logged in: $(user_sessions)"
  wait_for 90 "the first worker to run with no /run/utmp and nobody logged in" one_running
  first_worker=$(ids_in running)
  # STATUS= is sent after each cycle, counting the workers it found before acting.
  wait_for 10 "STATUS= to show the new decision" status_text_has "worker(s), target 1; host free"
  local text
  text=$(prop StatusText)
  grep -qF "Status: \"$text\"" <<<"$(unit_status)" \
    || fail "systemctl status does not show the STATUS= line"
  local plan st
  plan=$(c pilotd plan 2>&1) || { echo "$plan" >&2; fail "pilotd plan failed"; }
  sources_named "$plan" || fail "pilotd plan does not say sessions come from logind with utmp absent: $plan"
  st=$(c pilotd status 2>&1) || { echo "$st" >&2; fail "pilotd status failed"; }
  sources_named "$st" || fail "pilotd status does not say sessions come from logind with utmp absent: $st"
  ok "apt install (enabled, not started), init from piped answers (sessions = active), start $t_start s to READY=1; no /run/utmp, nobody logged in: worker $first_worker runs; status says '$(grep -m1 -i 'utmp absent' <<<"$st" | sed 's/^ *//')'; STATUS=\"$text\""
}

# A text names logind as the source of sessions and says utmp is absent (the wording is the
# daemon's: "sessions from logind; utmp absent").
sources_named() { grep -qi "logind" <<<"$1" && grep -qi "utmp absent" <<<"$1"; }

scenario_hardening() {
  begin hardening
  local pid status
  pid=$(prop MainPID)
  status=$(c cat "/proc/$pid/status")
  grep -qP '^NoNewPrivs:\t1$' <<<"$status" || fail "NoNewPrivs is not set"
  grep -qP '^Seccomp:\t2$' <<<"$status" || fail "no seccomp filter (SystemCallArchitectures/RestrictNamespaces/...)"
  # CAP_CHOWN(0) CAP_DAC_READ_SEARCH(2) CAP_FOWNER(3) CAP_KILL(5) CAP_NET_ADMIN(12)
  # CAP_SYS_PTRACE(19) = 0x8102d (the container has CAP_NET_ADMIN for NetworkManager)
  grep -qP '^CapBnd:\t000000000008102d$' <<<"$status" || fail "bounding set is not the unit's: $(grep CapBnd <<<"$status")"
  # CAP_SYS_PTRACE reads descriptor links only: attaching and memory access are filtered out.
  local filter
  filter=$(c systemctl show -p SystemCallFilter --value pilotd.service)
  for call in ptrace process_vm_readv process_vm_writev; do
    [[ "$filter" == "~"* && " ${filter#\~} " == *" $call "* ]] || fail "$call is not refused to pilotd: SystemCallFilter=$filter"
  done
  # The file system as pilotd sees it (its mount namespace): read-only but for its state dir.
  local d
  for d in /usr /etc /home/alice /var/lib /root; do
    if c nsenter -t "$pid" -m touch "$d/.pilotd-rw-probe" 2>/dev/null; then
      c nsenter -t "$pid" -m rm -f "$d/.pilotd-rw-probe"
      fail "$d is writable for pilotd (ProtectSystem=strict / ProtectHome=read-only not applied)"
    fi
  done
  c nsenter -t "$pid" -m touch "$state/.pilotd-rw-probe" || fail "$state is not writable for pilotd"
  c rm -f "$state/.pilotd-rw-probe"

  # Docker socket: the worker runs, and status names the engine.
  status_has "engine: " || fail "pilotd status names no engine"
  # State dir: written by the sandboxed daemon within its last cycles.
  # (written when something changed, and every 10 minutes: here, since this daemon started)
  local started
  started=$(c date -d "$(prop ExecMainStartTimestamp)" +%s)
  [ "$(c stat -c %Y "$state/status.json")" -ge "$started" ] || fail "status.json was not written by this daemon"
  c test -f "$state/history.json" || fail "no history.json in the state dir"
  # The disk limit, made under the unit's sandbox: the worker's scratch is its 64 MiB image in
  # the state dir, attached to a loop device (the host sees it: one kernel), and the worker's
  # /pilot is that ext4 filesystem. (Writing past it is tested on the host: docker::disk.)
  local img dev mnt
  img="$state/scratch/$(docker inspect -f '{{.Name}}' "$first_worker" | tr -d /).img"
  c test -f "$img" || fail "no disk image $img for the worker: $(c ls -la "$state/scratch")"
  [ "$(stat -c %s "$img")" = $((64 << 20)) ] || fail "$img is $(stat -c %s "$img") bytes, not the 64 MiB share"
  dev=$(losetup -j "$img" | cut -d: -f1)
  [ -n "$dev" ] || fail "$img is attached to no loop device"
  mnt=$(docker exec "$first_worker" cat /proc/mounts | grep ' /pilot ' || true)
  [[ "$mnt" == "$dev /pilot ext4 "* ]] || fail "the worker's /pilot is not $dev (ext4): $mnt"
  # Metrics port, from inside the container (AF_INET allowed, loopback).
  local metrics
  metrics=$(c timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/9464 && printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3') \
    || fail "cannot connect to the metrics port 127.0.0.1:9464"
  grep -q '^pilotd_workers' <<<"$metrics" || fail "GET /metrics has no pilotd_workers: $(head -c 300 <<<"$metrics")"

  # utmp: alice logs in -> the worker is paused (on_return = pause); she leaves -> resumed.
  local t0=$EPOCHREALTIME
  put_utmp "$utmp_login"
  wait_for 10 "alice's login to pause the worker" all_paused
  local t_login
  t_login=$(elapsed "$t0")
  status_has "alice" || fail "status does not say alice is logged in"
  # Journal fields (docs/site.md, "Running as a service", systemd): the pause is found by a match on the WORKER field,
  # not by grepping text, and carries the priority and identifier that section names.
  local wname entry
  wname=$(docker inspect -f '{{.Name}}' "$first_worker" | tr -d /)
  entry=$(c journalctl -u pilotd.service --no-pager -o verbose "WORKER=$wname" SYSLOG_IDENTIFIER=pilotd 2>&1)
  grep -qE '^ +MESSAGE=paused: ' <<<"$entry" \
    || fail "no journal entry with WORKER=$wname and MESSAGE=paused: …; journalctl -o verbose WORKER=$wname gave: $(tail -n 20 <<<"$entry")"
  grep -qE '^ +PRIORITY=5$' <<<"$entry" || fail "the pause is not logged at PRIORITY=5 (notice): $entry"
  # The field is the journal's, not folded into the text.
  if grep -qF "worker=" <<<"$(journal)"; then
    fail "the journal's text carries 'worker=': fields were folded into MESSAGE"
  fi
  put_utmp "$utmp_boot"
  wait_for 15 "the worker to resume after alice left" running_is "$first_worker"

  # /proc: an exclusive process (by name) makes the owner busy -> paused; gone -> resumed.
  c sed -i 's|^exclusive_processes = .*|exclusive_processes = ["pilotdexcl"]|' "$policy"
  c systemctl reload pilotd.service || fail "reload for exclusive_processes failed"
  c cp /usr/bin/sleep /usr/local/bin/pilotdexcl
  docker exec -d "$ctr" /usr/local/bin/pilotdexcl 300
  wait_for 40 "the exclusive process to pause the worker" all_paused
  c sh -c 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = pilotdexcl ] && kill ${p#/proc/}; done; true'
  wait_for 40 "the worker to resume after the exclusive process ended" running_is "$first_worker"

  # Back to Debian 13: no /run/utmp. From here on sessions are logind's alone (sshd writes
  # no utmp record where the file is absent).
  c rm -f /run/utmp
  wait_for 15 "status to say utmp is absent" status_has "utmp absent"
  running_is "$first_worker" || fail "the worker stopped when /run/utmp went away"

  local denied
  denied=$(journal | grep -E 'Permission denied|Read-only file system|Operation not permitted' || true)
  [ -z "$denied" ] || fail "the sandbox refused something pilotd did: $denied"
  local sd_notes
  sd_notes=$(c journalctl --no-pager -o cat -t systemd | grep -F 'pilotd.service' \
    | grep -Ei 'not supported|ignoring|failed to (set up|apply)|unsupported' | sort -u || true)
  [ -z "$sd_notes" ] || log "note: systemd in this container reported: $sd_notes"
  local exposure
  exposure=$(c systemd-analyze security pilotd.service --no-pager 2>/dev/null | tail -n 1 || true)
  ok "NoNewPrivs, seccomp (ptrace and process_vm_* refused), bounding set 0x8102d, /usr /etc /var/lib /root /home/alice read-only, /var/lib/pilotd writable; engine via socket; the worker's /pilot is its 64 MiB image on $dev; status+history written; /metrics served; alice's utmp login paused the worker in $t_login s and her logout resumed it; an exclusive process (read from /proc) paused it; /run/utmp removed again: still computing; nothing denied in the journal; ${exposure:-no systemd-analyze security}"
}

scenario_reload() {
  begin reload
  local pid t0
  pid=$(prop MainPID)
  status_has "of 1 CPU, 128 MiB" || fail "status does not show the 128 MiB share before the change"
  # Valid: the memory share changes.
  c sed -i 's|^memory = .*|memory = "96MiB"|' "$policy"
  t0=$(date +%s)
  c systemctl reload pilotd.service || fail "reload of a valid policy failed"
  wait_for 15 "status to show the new memory share" status_has "of 1 CPU, 96 MiB"
  expect_journal "$t0" "configuration reloaded" "no 'configuration reloaded' in the journal"
  [ "$(prop MainPID)" = "$pid" ] || fail "reload restarted the daemon"

  # Invalid: refused by the unit's ExecReload check, with FILE:LINE:COL; the last good stays.
  c cp "$policy" "$work_in/policy.good"
  c sed -i 's|^cpus = .*|cpus = "150%"|' "$policy"
  local line
  line=$(c grep -n '^cpus = ' "$policy" | cut -d: -f1)
  t0=$(date +%s)
  if c systemctl reload pilotd.service 2>/dev/null; then fail "reload of an invalid policy succeeded"; fi
  expect_journal "$t0" "$policy:$line:" "the journal does not name $policy:$line:COL"
  [ "$(prop ActiveState)" = active ] && [ "$(prop MainPID)" = "$pid" ] || fail "an invalid reload stopped the daemon"
  # `pilotd status` reads the policy too, so it refuses with the same FILE:LINE:COL...
  local st
  if st=$(c pilotd status 2>&1); then fail "pilotd status accepted the invalid policy"; fi
  grep -qF "$policy:$line:" <<<"$st" || fail "pilotd status does not name $policy:$line:COL: $st"
  # ...while the daemon's own STATUS= (after a fresh cycle) shows the last good share.
  local n
  n=$(cycles)
  [ -n "$n" ] || fail "/metrics has no pilotd_cycle_duration_seconds_count"
  wait_for 15 "a cycle after the refused reload" cycles_past "$n"
  status_text_has "of 1 CPU, 96 MiB" || fail "the last good configuration is not in force: $(prop StatusText)"

  # Invalid, signalled straight to the daemon (no check in front): it refuses it too.
  t0=$(date +%s)
  c systemctl kill --kill-whom=main --signal=HUP pilotd.service
  wait_for 10 "the daemon to refuse the invalid policy" journal_since_has "$t0" "reload failed, keeping the last good configuration"
  expect_journal "$t0" "$policy:$line:" "the daemon's refusal does not name $policy:$line:COL"
  # RELOADING=1 on SIGHUP, READY=1 after the next cycle: systemd sees the reload end.
  wait_for 10 "READY=1 after the refused SIGHUP" unit_is active
  [ "$(prop MainPID)" = "$pid" ] || fail "the daemon died on an invalid SIGHUP"
  status_text_has "of 1 CPU, 96 MiB" || fail "the daemon dropped its last good configuration: $(prop StatusText)"

  c cp "$work_in/policy.good" "$policy"
  c systemctl reload pilotd.service || fail "reload after fixing the policy failed"
  running_is "$first_worker" || fail "the worker did not survive the reloads"
  ok "valid change applied without restart (96 MiB in status); invalid one refused by ExecReload and by the daemon, both naming $policy:$line:COL, last good kept; no /bin/kill in the container"
}

# The scenarios below run on Debian 13's truth: no /run/utmp, logind alone knows the sessions.
scenario_ssh_login() {
  begin ssh-login
  running_is "$first_worker" || fail "no running worker before alice's login"
  c test ! -e /run/utmp || fail "/run/utmp exists: this scenario is about logind alone"
  [ -z "$(user_sessions)" ] || fail "a user session exists before alice's login: $(user_sessions | tr '\n' ';')"
  c sh -c 'install -d -m 700 /root/.ssh && ssh-keygen -q -t ed25519 -N "" -f /root/.ssh/id_alice' >/dev/null
  c sh -c 'install -d -m 700 -o alice -g alice /home/alice/.ssh &&
    install -m 600 -o alice -g alice /root/.ssh/id_alice.pub /home/alice/.ssh/authorized_keys'
  watch_signals
  local t0=$EPOCHREALTIME
  ssh_alice
  wait_for 20 "alice's ssh login to pause the worker" all_paused
  local t_pause
  t_pause=$(elapsed "$t0")
  wait_for 5 "alice's tty session in logind" has_session alice tty
  alice_session=$(session_of alice tty)
  [ "$(session_prop "$alice_session" Service)/$(session_prop "$alice_session" Remote)" = sshd/yes ] \
    || fail "alice's session $alice_session is not a remote sshd one: $(c loginctl show-session "$alice_session")"
  local lat
  lat=$(latency_ms "$(session_created_ns "$alice_session")" pause)
  within_bound "$lat" "alice's ssh login (logind created session $alice_session) -> the pause event"
  local st
  st=$(c pilotd status 2>&1) || true
  grep -q alice <<<"$st" || fail "status does not say alice is here: $st"
  sources_named "$st" || fail "status does not say sessions come from logind with utmp absent: $st"
  c test ! -e /run/utmp || fail "something created /run/utmp"
  ok "alice ssh'd in through sshd (logind session $alice_session: class user, type tty, remote; no utmp): worker paused $lat ms after logind created the session, $t_pause s after ssh was started"
}

# Debian 13's ssh session: logind names no terminal (sshd opens the PAM session before it
# allocates the pty) and there is no utmp; her processes' terminals say when she was there.
scenario_ssh_idle() {
  begin ssh-idle
  all_paused || fail "the worker is not paused while alice is logged in"
  local tty
  tty=$(session_prop "$alice_session" TTY)
  [ -z "$tty" ] || fail "logind names alice's terminal ($tty): this scenario is about a session whose terminal it does not name"
  wait_for 10 "alice's remote command to run on her terminal" alice_on_tty
  local pts
  pts=$(alice_tty)
  set_owner session_idle '"10s"'
  # Away once her terminal has not been used for 10 s, not before.
  local t0=$EPOCHREALTIME used
  wait_for 40 "alice's idle ssh session to count as away (session_idle = 10s)" running_is "$first_worker"
  used=$(c stat -c %X "/dev/$pts")
  local idle_at_resume=$(( $(date +%s) - used ))
  [ "$idle_at_resume" -ge 10 ] || fail "the worker resumed when alice's $pts was idle for only $idle_at_resume s"
  local plan
  plan=$(c pilotd plan 2>&1) || true
  grep -qF "alice is away (idle for 10s or more)" <<<"$plan" || fail "pilotd plan does not say alice is idle: $plan"
  wait_for 10 "pilotd status to say alice is idle" status_has "alice is away (idle for 10s or more)"
  # She types: a key through her ssh session, read by her command on $pts.
  local key_ns
  key_ns=$(date +%s%N)
  alice_types
  plan=$(c pilotd plan 2>&1) || true
  local t_plan
  t_plan=$(awk -v a="${key_ns:0:10}.${key_ns:10}" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  grep -qF "alice logged in and in use (not locked, not idle)" <<<"$plan" || fail "pilotd plan right after alice typed does not say she is in use: $plan"
  wait_for "${PILOTD_SYSTEMD_KEY_S:-7}" "alice's key press to pause the worker" all_paused
  local key_ms
  key_ms=$(latency_ms "$key_ns" pause)
  set_owner session_idle '"15m"'
  all_paused || fail "the worker resumed when session_idle went back to 15m"
  ok "alice's ssh session (logind TTY empty, no utmp; her command on $pts): away after $(elapsed "$t0") s with session_idle = 10s ($pts idle $idle_at_resume s), plan and status say 'idle for 10s or more'; a key through ssh: plan says in use after $t_plan s, the daemon paused the worker $key_ms ms after it (cycle 5s)"
}

# alice's logind locks, as a player or a presentation takes them: systemd-inhibit as her uid
# and groups (setpriv, no PAM: no session of its own), through logind and polkit. The lock's
# who and why are content pilotd must never say. inhibit_pid: the systemd-inhibit process.
inhibit_start() { # WHAT MODE
  c rm -f /root/inhibit.pid
  docker exec -d "$ctr" sh -c "echo \$\$ >/root/inhibit.pid; exec setpriv --reuid=1000 --regid=1000 \
    --init-groups systemd-inhibit --what=$1 --mode=$2 --who='a film player' --why='Playing a film' sleep 600"
  wait_for 5 "systemd-inhibit to start" c test -s /root/inhibit.pid
  inhibit_pid=$(c cat /root/inhibit.pid)
  wait_for 5 "logind to list alice's $1 lock" inhibitor_listed "$1"
}
inhibitor_listed() { # WHAT: logind lists a lock of alice (uid 1000) on exactly WHAT
  grep -qF "\"$1\" \"a film player\" \"Playing a film\"" <<<"$(c busctl call org.freedesktop.login1 \
    /org/freedesktop/login1 org.freedesktop.login1.Manager ListInhibitors 2>&1)"
}
inhibit_stop() { # ends systemd-inhibit and its sleep; logind then drops the lock
  c sh -c "kids=\$(cat /proc/$inhibit_pid/task/$inhibit_pid/children 2>/dev/null); kill $inhibit_pid \$kids"
}
# alice_films: one of her processes holds /dev/video0 open (its pid in film_pid), as a
# camera's viewer does; film_stop closes it.
alice_films() {
  c rm -f /root/film.pid
  docker exec -d "$ctr" sh -c "echo \$\$ >/root/film.pid; exec setpriv --reuid=1000 --regid=1000 \
    --init-groups sh -c 'exec sleep 600 </dev/video0'"
  wait_for 5 "alice's camera viewer to start" c test -s /root/film.pid
  film_pid=$(c cat /root/film.pid)
  wait_for 5 "alice's process to hold /dev/video0" c sh -c "readlink /proc/$film_pid/fd/0 | grep -qx /dev/video0"
}
film_stop() { sh_kill TERM "$film_pid"; }
plan_has() { grep -qF "$1" <<<"$(c pilotd plan 2>&1)"; }
says_no_content() { # TEXT WHERE
  if grep -qF -e 'a film player' -e 'Playing a film' <<<"$1"; then
    fail "$2 names the lock's program or reason: $(grep -F -e 'a film player' -e 'Playing a film' <<<"$1" | head -n 3)"
  fi
}

# Someone using the machine without typing (issue 33): logind's idle locks, at once through
# its PropertiesChanged; a camera held open, at the next cycle.
scenario_use() {
  begin use
  all_paused || fail "the worker is not paused while alice is logged in"
  c systemctl start polkit.service || fail "polkitd is not in the image: logind refuses a user's lock without it"
  set_owner session_idle '"10s"'
  wait_for 40 "alice's idle ssh session to count as away (session_idle = 10s)" running_is "$first_worker"
  plan_has "alice is away (idle for 10s or more)" || fail "plan does not say alice is idle: $(c pilotd plan 2>&1)"

  # A sleep lock (what a desktop's power manager holds) is no use: two cycles on, away.
  inhibit_start sleep delay
  sleep 11
  running_is "$first_worker" || fail "alice's --what=sleep lock paused the worker"
  plan_has "alice is away (idle for 10s or more)" || fail "with her sleep lock, plan does not say alice is away: $(c pilotd plan 2>&1)"
  inhibit_stop

  # An idle lock: she is using the machine, at once. logind's announcement of it, as the
  # bus delivers it, is kept to compare with the tests' stand-in.
  local t0_ns lock_ms back_ms plan announced
  docker exec -d "$ctr" sh -c "exec busctl monitor --json=short --match \
    'type=signal,interface=org.freedesktop.DBus.Properties,member=PropertiesChanged,path=/org/freedesktop/login1' \
    >/root/login1-manager-signals.json 2>&1"
  sleep 0.5
  t0_ns=$(date +%s%N)
  inhibit_start idle block
  wait_for 5 "alice's idle lock to pause the worker" all_paused
  lock_ms=$(latency_ms "$t0_ns" pause)
  plan=$(c pilotd plan 2>&1) || true
  grep -qF "alice is using the machine: an idle inhibitor is held" <<<"$plan" \
    || fail "plan does not say alice uses the machine by an idle inhibitor: $plan"
  says_no_content "$plan" "pilotd plan"
  wait_for 10 "status to say alice uses the machine" status_has "alice is using the machine: an idle inhibitor is held"
  says_no_content "$(c pilotd status 2>&1)" "pilotd status"
  announced=$(grep -F '"BlockInhibited"' <<<"$(c cat /root/login1-manager-signals.json)" | tail -n 1 \
    | grep -o '"payload":{.*' | head -c 400)
  # As the stand-in announces it (sessions::logind, login1.rs): the Manager's BlockInhibited
  # with its new value, nothing else, nothing invalidated (systemd 257 here).
  grep -qF '"data":["org.freedesktop.login1.Manager",{"BlockInhibited":{"type":"s","data":"idle"}},[]]' <<<"$announced" \
    || fail "logind's PropertiesChanged for the lock is not (BlockInhibited = idle, nothing invalidated) as the stand-in sends it: $announced"
  # Its end: away again, at once.
  t0_ns=$(date +%s%N)
  inhibit_stop
  wait_for 5 "the end of alice's idle lock to resume the worker" running_is "$first_worker"
  back_ms=$(latency_ms "$t0_ns" unpause)
  says_no_content "$(journal)" "pilotd's journal"

  # A camera: /dev/null's numbers under a camera's name, held open by a process of hers.
  c sh -c 'rm -f /dev/video0 && mknod -m 666 /dev/video0 c 1 3' || fail "cannot make /dev/video0"
  sleep 6
  running_is "$first_worker" || fail "a camera nobody holds open paused the worker"
  alice_films
  wait_for 15 "alice's camera to pause the worker (at the next cycle)" all_paused
  plan=$(c pilotd plan 2>&1) || true
  grep -qF "alice is using the machine: the camera is in use" <<<"$plan" \
    || fail "plan does not say alice's camera is in use: $plan"
  film_stop
  wait_for 15 "alice's camera closed to resume the worker" running_is "$first_worker"
  c rm -f /dev/video0

  set_owner session_idle '"15m"'
  wait_for 10 "alice (her terminal used within 15m) to be here again" all_paused
  ok "alice's ssh terminal idle past 10s: away; her --what=sleep lock: still away; her idle lock (systemd-inhibit, polkit): paused $lock_ms ms after it started, plan and status say 'an idle inhibitor is held' and nowhere its who or why, logind announced it as the tests' stand-in does; released: resumed $back_ms ms later; /dev/video0 held open by her process: paused at the next cycle, closed: resumed"
}

scenario_lock() {
  begin lock
  all_paused || fail "the worker is not paused while alice is there"
  c cp "$policy" "$work_in/policy.before-logind"
  # lock_grace is honoured: a lock is not away before it.
  set_owner lock_grace '"10s"'
  all_paused || fail "the worker resumed on a reload while alice is there"
  set_hint alice "$alice_session" Locked true
  local lock_ns=$hint_ns
  # The real logind, as the login1 stand-in of the tests behaves
  # (sessions::bus::the_login1_stand_in_serves_seats_and_announces_values_as_logind_does):
  # a lock's PropertiesChanged carries the value and invalidates nothing, and a session
  # without a seat has Seat = ("", "/").
  local path
  path=$(session_path "$alice_session")
  grep -F "\"path\":\"$path\"" <<<"$(c cat "$signals")" \
    | grep -qF '{"LockedHint":{"type":"b","data":true}},[]]' \
    || fail "logind's PropertiesChanged for the lock is not (value sent, nothing invalidated): the stand-in differs; $(c cat "$signals" | tail -n 3)"
  [ "$(c busctl get-property org.freedesktop.login1 "$path" org.freedesktop.login1.Session Seat)" = '(so) "" "/"' ] \
    || fail "alice's ssh session's Seat is not (so) \"\" \"/\" as the stand-in serves it"
  sleep 6
  all_paused || fail "the worker resumed within 6 s of alice's lock, before lock_grace = 10s"
  wait_for 30 "alice's locked session to count as away after lock_grace" running_is "$first_worker"
  local grace_ms
  grace_ms=$(latency_ms "$lock_ns" unpause)
  [ "$grace_ms" -ge 10000 ] || fail "the worker resumed $grace_ms ms after the lock, before lock_grace = 10s"
  # Unlock: she is back.
  set_hint alice "$alice_session" Locked false
  wait_for 10 "alice's unlock to pause the worker" all_paused
  local unlock1_ms
  unlock1_ms=$(latency_ms "$hint_ns" pause)
  within_bound "$unlock1_ms" "alice's unlock -> the pause event"
  # lock_grace = 0s: locked is away at once. Her user manager's session (class manager) stays
  # open all along and never counts.
  set_owner lock_grace '"0s"'
  all_paused || fail "the worker resumed on a reload while alice is there, unlocked"
  set_hint alice "$alice_session" Locked true
  wait_for 10 "alice's lock to let the worker resume" running_is "$first_worker"
  local lock_ms unlock_ms
  lock_ms=$(latency_ms "$hint_ns" unpause)
  [ -n "$(sessions_table | awk '$2 == "alice" && $3 == "manager"')" ] \
    || fail "alice has no manager session: the lock proved nothing about manager sessions"
  set_hint alice "$alice_session" Locked false
  wait_for 10 "alice's unlock to pause the worker" all_paused
  unlock_ms=$(latency_ms "$hint_ns" pause)
  within_bound "$unlock_ms" "alice's unlock (lock_grace = 0s) -> the pause event"
  ok "alice's SetLockedHint(true) as alice over the system bus: with lock_grace = 10s still paused 6 s on, resumed $grace_ms ms after the lock; unlock -> paused in $unlock1_ms ms; lock_grace = 0s: lock -> resumed in $lock_ms ms, unlock -> paused in $unlock_ms ms (her manager session open throughout); logind's signal and Seat as the tests' stand-in serves them"
}

scenario_desktop() {
  begin desktop
  # alice away (locked), so bob's desktop alone decides.
  set_hint alice "$alice_session" Locked true
  wait_for 10 "alice's lock to let the worker resume" running_is "$first_worker"
  set_owner session_idle '"5s"'
  running_is "$first_worker" || fail "the worker stopped on session_idle = 5s with alice locked"
  # bob's graphical-type session: pam_systemd through a PAM service run by systemd, type and
  # class from XDG_SESSION_TYPE and XDG_SESSION_CLASS, as a display manager passes them.
  c systemd-run --quiet --unit=pilotd-test-bob-desktop -p PAMName=login -p User=bob \
    -E XDG_SESSION_TYPE=x11 -E XDG_SESSION_CLASS=user sleep infinity \
    || fail "systemd-run of bob's PAM session failed"
  wait_for 10 "bob's x11 session in logind" has_session bob x11
  bob_session=$(session_of bob x11)
  local shape
  shape=$(c loginctl show-session "$bob_session" -p Type -p Class -p Remote -p IdleHint | sort | tr '\n' ' ')
  [ "$shape" = "Class=user IdleHint=no Remote=no Type=x11 " ] \
    || fail "bob's session $bob_session is not a local x11 user session, not idle: $(c loginctl show-session "$bob_session")"
  wait_for 10 "bob's desktop session to pause the worker" all_paused
  local login_ms
  login_ms=$(latency_ms "$(session_created_ns "$bob_session")" pause)
  within_bound "$login_ms" "bob's desktop login (logind created session $bob_session) -> the pause event"
  # Idle (what a desktop's idle monitor says): away after session_idle, not before.
  set_hint bob "$bob_session" Idle true
  local idle_ns=$hint_ns
  sleep 2
  all_paused || fail "the worker resumed within 2 s of bob's IdleHint, before session_idle = 5s"
  wait_for 30 "bob's idle session to count as away after session_idle" running_is "$first_worker"
  local idle_ms
  idle_ms=$(latency_ms "$idle_ns" unpause)
  [ "$idle_ms" -ge 5000 ] || fail "the worker resumed $idle_ms ms after bob's IdleHint, before session_idle = 5s"
  set_hint bob "$bob_session" Idle false
  wait_for 10 "bob's return (IdleHint false) to pause the worker" all_paused
  local back_ms
  back_ms=$(latency_ms "$hint_ns" pause)
  within_bound "$back_ms" "bob's IdleHint(false) -> the pause event"
  # bob's session ends.
  c systemctl stop pilotd-test-bob-desktop.service
  wait_for 20 "bob's logout to resume the worker" running_is "$first_worker"
  set_owner session_idle '"15m"'
  ok "bob's x11 session (PAM login via systemd-run, class user): paused $login_ms ms after logind created it; SetIdleHint(true) as bob: resumed $idle_ms ms later (session_idle = 5s); SetIdleHint(false): paused in $back_ms ms; his logout: resumed"
}

scenario_logind_restart() {
  begin logind-restart
  # alice is locked (desktop): she unlocks and is there.
  set_hint alice "$alice_session" Locked false
  wait_for 10 "alice's unlock to pause the worker" all_paused
  local pid old_logind new_logind
  pid=$(prop MainPID)
  old_logind=$(c systemctl show -p MainPID --value systemd-logind)
  c systemctl restart systemd-logind || fail "systemctl restart systemd-logind failed"
  new_logind=$(c systemctl show -p MainPID --value systemd-logind)
  [ "$new_logind" != "$old_logind" ] && [ "$new_logind" != 0 ] || fail "logind was not restarted ($old_logind -> $new_logind)"
  [ "$(session_of alice tty)" = "$alice_session" ] \
    || fail "the restarted logind does not know alice's session $alice_session: $(sessions_table | tr '\n' ';')"
  for _ in $(seq 1 24); do # two cycles and more
    all_paused || fail "a worker computes while alice is there, after logind's restart"
    sleep 0.5
  done
  local st
  st=$(c pilotd status 2>&1) || true
  grep -q alice <<<"$st" || fail "after logind's restart, status does not say alice is here: $st"
  sources_named "$st" || fail "after logind's restart, status does not say sessions come from logind: $st"
  # The same daemon follows the new logind: her lock and unlock are acted on.
  set_hint alice "$alice_session" Locked true
  wait_for 20 "alice's lock after logind's restart to let the worker resume" running_is "$first_worker"
  local lock_ms unlock_ms
  lock_ms=$(latency_ms "$hint_ns" unpause)
  set_hint alice "$alice_session" Locked false
  wait_for 10 "alice's unlock after logind's restart to pause the worker" all_paused
  unlock_ms=$(latency_ms "$hint_ns" pause)
  within_bound "$unlock_ms" "alice's unlock after logind's restart -> the pause event"
  [ "$(prop MainPID)" = "$pid" ] || fail "pilotd was restarted (pid $pid -> $(prop MainPID))"
  # She logs out: her session closes, the worker resumes.
  ssh_alice_leaves
  wait_for 20 "alice's logout to resume the worker" running_is "$first_worker"
  c cp "$work_in/policy.before-logind" "$policy"
  c systemctl reload pilotd.service || fail "reload of the policy as before the logind scenarios failed"
  running_is "$first_worker" || fail "the worker stopped when the policy was restored"
  ok "logind restarted (pid $old_logind -> $new_logind) with alice there: session $alice_session kept, worker paused throughout, status from logind, pilotd pid $pid unchanged; her lock then resumed it in $lock_ms ms and her unlock paused it in $unlock_ms ms; her logout resumed it"
}

# The freezer under the unit: pilotd pauses a worker by writing its cgroup's freezer, so the
# unit must leave /sys/fs/cgroup writable (ProtectControlGroups=no). The container's own
# /sys/fs/cgroup is Docker's read-only bind, so a writable freezer hierarchy is mounted here
# first, as a host has it. What is written is THAWED into this container's own (thawed)
# freezer cgroup: a real write through the mount, which changes nothing. (pilotd itself cannot
# freeze a worker from in here: the workers' processes are the host's, outside this container's
# pid namespace; docker::freezer proves the freeze on the host.)
scenario_cgroup() {
  begin cgroup
  local own probe pid
  own=$(c awk -F: '$2 == "freezer" { print $3 }' /proc/1/cgroup)
  [ -n "$own" ] || fail "no freezer line in the container's /proc/1/cgroup"
  c mountpoint -q /sys/fs/cgroup/freezer || fail "no freezer hierarchy at /sys/fs/cgroup/freezer"
  c mount -t cgroup -o freezer cgroup /sys/fs/cgroup/freezer || fail "cannot mount a writable freezer hierarchy"
  probe="echo THAWED > /sys/fs/cgroup/freezer$own/freezer.state"
  c sh -c "$probe" || fail "the freezer is not writable even outside pilotd's sandbox"
  c systemctl restart pilotd.service || fail "restart failed"
  pid=$(prop MainPID)
  c nsenter -t "$pid" -m sh -c "$probe" \
    || fail "the freezer is read-only in pilotd's sandbox: the unit protects /sys/fs/cgroup"
  # Negative control: the same write under ProtectControlGroups=yes is refused.
  dropin 50-test-cgroup "ProtectControlGroups=yes"
  c systemctl restart pilotd.service || fail "restart with ProtectControlGroups=yes failed"
  pid=$(prop MainPID)
  if c nsenter -t "$pid" -m sh -c "$probe" 2>/dev/null; then
    fail "the probe wrote the freezer under ProtectControlGroups=yes: it proves nothing"
  fi
  undropin 50-test-cgroup
  c systemctl restart pilotd.service || fail "restart without the drop-in failed"
  wait_for 30 "the worker to run again" running_is "$first_worker"
  ok "the freezer is writable in pilotd's sandbox (and read-only under ProtectControlGroups=yes, the control)"
}

dropin() { # NAME CONTENT...: a drop-in for pilotd.service, then daemon-reload
  local name=$1
  shift
  c mkdir -p /etc/systemd/system/pilotd.service.d
  printf '%s\n' "[Service]" "$@" | ci sh -c "cat > /etc/systemd/system/pilotd.service.d/$name.conf"
  c systemctl daemon-reload
}
undropin() {
  c rm -f "/etc/systemd/system/pilotd.service.d/$1.conf"
  c systemctl daemon-reload
}

scenario_watchdog() {
  begin watchdog
  dropin 50-test-watchdog "WatchdogSec=4s" "RestartSec=1s"
  c systemctl restart pilotd.service || fail "restart with WatchdogSec=4s failed"
  [ "$(prop WatchdogUSec)" = 4s ] || fail "WatchdogUSec is $(prop WatchdogUSec)"
  local pid restarts
  pid=$(prop MainPID)
  restarts=$(prop NRestarts)
  running_is "$first_worker" || fail "the worker was not adopted across the restart"
  # Healthy: it pings often enough although interval = 5s > 4s/2 (the cycle follows the watchdog).
  sleep 10
  [ "$(prop MainPID)" = "$pid" ] && [ "$(prop NRestarts)" = "$restarts" ] \
    || fail "a healthy daemon was killed by the watchdog (interval 5s > WatchdogSec/2)"
  journal_has "systemd's WatchdogSec needs a sign of life" || fail "no log line about the cycle following the watchdog"
  # Hung: SIGSTOP stops the loop.
  local t0=$EPOCHREALTIME ts
  ts=$(date +%s)
  sh_kill STOP "$pid"
  wait_for 40 "systemd to restart the stopped daemon" active_with_new_pid "$pid"
  local t_restart
  t_restart=$(elapsed "$t0")
  [ "$(prop NRestarts)" -gt "$restarts" ] || fail "NRestarts did not grow"
  expect_journal "$ts" "Watchdog timeout" "systemd did not log a watchdog timeout"
  expect_journal "$ts" "SERVICE_RESULT=watchdog" "the fail-safe did not run with SERVICE_RESULT=watchdog"
  expect_journal "$ts" "paused 1 worker(s) of instance \"$instance\"" "the fail-safe did not pause the worker after the watchdog kill"
  wait_for 15 "the adopted worker to resume" running_is "$first_worker"
  undropin 50-test-watchdog
  c systemctl restart pilotd.service || fail "restart with the packaged WatchdogSec failed"
  [ "$(prop WatchdogUSec)" = 2min ] || fail "packaged WatchdogUSec is $(prop WatchdogUSec), not 2min"
  ok "healthy daemon pinged a 4s watchdog for 10s with interval = 5s (cycle lowered to 2s); SIGSTOP -> watchdog kill, fail-safe, restart in $t_restart s; worker $first_worker adopted"
}

scenario_crash() {
  begin crash
  local pid restarts
  pid=$(prop MainPID)
  restarts=$(prop NRestarts)
  running_is "$first_worker" || fail "no running worker before the crash"
  local t0=$EPOCHREALTIME ts
  ts=$(date +%s)
  sh_kill KILL "$pid"
  crash_pause=$(time_until_paused "$t0")
  # Down for RestartSec (30s, the packaged value): the worker must stay paused all along,
  # until a new daemon exists (MainPID goes from 0 to the new pid when ExecStart forks).
  local samples=0 seen_auto_restart=no p
  while :; do
    p=$(prop MainPID)
    [ "$p" != 0 ] && [ "$p" != "$pid" ] && break
    [ "$(prop SubState)" = auto-restart ] && seen_auto_restart=yes
    if ! all_paused; then
      p=$(prop MainPID)
      # Only a failure if no new daemon existed while the workers were listed.
      if [ "$p" = 0 ] || [ "$p" = "$pid" ]; then
        fail "a worker computes while pilotd is down: $(workers | tr '\n' ' ')"
      fi
    fi
    samples=$((samples + 1))
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { exit !(b - a > 60) }' && fail "no restart within 60s"
    sleep 0.5
  done
  [ "$seen_auto_restart" = yes ] || fail "the unit was never seen waiting to restart (auto-restart)"
  local t_down
  t_down=$(elapsed "$t0")
  wait_for 30 "the restarted daemon to be active" active_with_new_pid "$pid"
  [ "$(prop NRestarts)" = $((restarts + 1)) ] || fail "NRestarts is $(prop NRestarts), expected $((restarts + 1))"
  expect_journal "$ts" "SERVICE_RESULT=signal" "the fail-safe did not report SERVICE_RESULT=signal"
  wait_for 15 "the adopted worker to resume" running_is "$first_worker"
  sleep 3
  running_is "$first_worker" || fail "after adoption: $(workers | tr '\n' ' ') (expected only $first_worker, running)"
  ok "SIGKILL -> workers paused in $crash_pause s; restarted by Restart=on-failure after $t_down s, paused throughout ($samples samples); same container $first_worker adopted and resumed, no duplicate"
}

scenario_failsafe() {
  begin failsafe
  dropin 50-test-norestart "Restart=no"
  local pid t0 ts
  pid=$(prop MainPID)
  t0=$EPOCHREALTIME
  ts=$(date +%s)
  sh_kill KILL "$pid"
  local t_pause
  t_pause=$(time_until_paused "$t0")
  wait_for 10 "the unit to be failed" unit_is failed
  [ "$(prop Result)" = signal ] || fail "Result is $(prop Result)"
  local i
  for i in $(seq 1 20); do
    all_paused || fail "a worker computes while the service is failed: $(workers | tr '\n' ' ')"
    [ "$(prop ActiveState)" = failed ] || fail "the unit left the failed state by itself"
    sleep 0.5
  done
  expect_journal "$ts" "paused 1 worker(s) of instance \"$instance\"" "the fail-safe did not say what it paused"
  c systemctl start pilotd.service || fail "start after the failure failed"
  wait_for 15 "the adopted worker to resume" running_is "$first_worker"

  # A start that fails (the ExecStartPre check) after a clean stop: the clean stop keeps the
  # worker (on_shutdown = keep), the failed start pauses it.
  c cp "$policy" "$work_in/policy.good"
  c sed -i 's|^workers = .*|workers = 0|' "$policy"
  ts=$(date +%s)
  if c systemctl restart pilotd.service 2>/dev/null; then fail "restart with an invalid policy succeeded"; fi
  wait_for 10 "the failed start to pause the worker" all_paused
  [ "$(prop ActiveState)" = failed ] || fail "ActiveState after a failed start: $(prop ActiveState)"
  expect_journal "$ts" "SERVICE_RESULT=exit-code" "the fail-safe did not run after the failed start"
  c cp "$work_in/policy.good" "$policy"
  c systemctl start pilotd.service || fail "start with the fixed policy failed"
  wait_for 15 "the worker to resume" running_is "$first_worker"

  # pilotd.toml broken when the daemon dies: the fail-safe still finds this instance's workers
  # (built-in socket, the instance the last daemon recorded in status.json).
  c cp "$site" "$work_in/site.good"
  echo 'this is not toml' | ci sh -c "cat >> $site"
  pid=$(prop MainPID)
  t0=$EPOCHREALTIME
  ts=$(date +%s)
  sh_kill KILL "$pid"
  local t_pause_broken
  t_pause_broken=$(time_until_paused "$t0")
  expect_journal "$ts" "using the built-in socket unix:///var/run/docker.sock and instance \"$instance\"" \
    "the fail-safe did not say how it found the workers without pilotd.toml"
  c cp "$work_in/site.good" "$site"
  c systemctl start pilotd.service || fail "start with the fixed pilotd.toml failed"
  wait_for 15 "the worker to resume" running_is "$first_worker"
  undropin 50-test-norestart
  ok "failed unit (SIGKILL, Restart=no): paused in $t_pause s and still paused 10 s later; a failed start (bad policy) paused it too; with pilotd.toml broken, paused in $t_pause_broken s via the recorded instance; each next start adopted and resumed $first_worker"
}

scenario_stop() {
  begin stop
  local t0 ts t_keep t_stop
  # on_shutdown = "keep" (the default): the worker keeps running, untouched by the fail-safe.
  t0=$EPOCHREALTIME
  ts=$(date +%s)
  c systemctl stop pilotd.service || fail "systemctl stop failed"
  t_keep=$(elapsed "$t0")
  [ "$(prop ActiveState)" = inactive ] && [ "$(prop Result)" = success ] \
    || fail "after stop: $(prop ActiveState), result $(prop Result)"
  expect_journal "$ts" "stopped cleanly" "the fail-safe did not stay out of a clean stop"
  running_is "$first_worker" || fail "on_shutdown = keep: the worker did not keep running"

  # on_shutdown = "stop": the drain stops the worker gracefully (it takes 1s to vacate).
  c sed -i 's|^max_lifetime = \(.*\)|max_lifetime = \1\non_shutdown = "stop"|' "$site"
  c grep -q '^on_shutdown = "stop"' "$site" || fail "could not set on_shutdown"
  c systemctl start pilotd.service || fail "start failed"
  running_is "$first_worker" || fail "the worker was not adopted"
  t0=$EPOCHREALTIME
  ts=$(date +%s)
  c systemctl stop pilotd.service || fail "systemctl stop failed"
  t_stop=$(elapsed "$t0")
  [ "$(prop Result)" = success ] || fail "stop result $(prop Result)"
  [ "$(count_in running)" = 0 ] && [ "$(count_in paused)" = 0 ] || fail "on_shutdown = stop left: $(workers | tr '\n' ' ')"
  expect_journal "$ts" 'on_shutdown = "stop"' "the drain did not say it stops the workers"
  local timeout_s
  timeout_s=$(prop TimeoutStopUSec)
  [ "$timeout_s" = 15min ] || fail "TimeoutStopUSec is $timeout_s"

  c sed -i '/^on_shutdown = "stop"$/d' "$site"
  c systemctl start pilotd.service || fail "start failed"
  wait_for 60 "a new worker" one_running
  first_worker=$(ids_in running)
  ok "keep: stopped in $t_keep s, worker left running; stop: drained in $t_stop s (TimeoutStopSec 15min), worker stopped gracefully; a new worker $first_worker after the next start"
}

scenario_upgrade() {
  begin upgrade
  local pid sums started out ts
  pid=$(prop MainPID)
  ts=$(date +%s)
  sums=$(c sha256sum "$site" "$policy")
  started=$(docker inspect -f '{{.State.StartedAt}}' "$first_worker")
  out=$(c sh -c 'cd /debs/v2 && DEBIAN_FRONTEND=noninteractive apt-get install -y ./pilotd_*.deb' 2>&1) \
    || { echo "$out" >&2; fail "apt-get install of the newer package failed"; }
  [ "$(c dpkg-query -W -f '${Version}' pilotd)" = "$v2" ] || fail "not upgraded to $v2"
  [ "$(c sha256sum "$site" "$policy")" = "$sums" ] || fail "the upgrade changed the edited configuration"
  c grep -q '^# edited by the owner (tests/systemd)' "$policy" || fail "the owner's edit is gone"
  [ -z "$(c find /etc/pilotd -name '*.dpkg-*')" ] || fail "the upgrade left .dpkg-* files"
  wait_for 30 "the daemon to be restarted" active_with_new_pid "$pid"
  local exe
  exe=$(c readlink "/proc/$(prop MainPID)/exe")
  [ "$exe" = /usr/bin/pilotd ] || fail "the daemon runs $exe, not the new /usr/bin/pilotd"
  sleep 3
  running_is "$first_worker" || fail "after the upgrade: $(workers | tr '\n' ' ') (expected $first_worker running)"
  [ "$(docker inspect -f '{{.State.StartedAt}}' "$first_worker")" = "$started" ] || fail "the worker was restarted"
  expect_journal "$ts" "failsafe: pilotd stopped cleanly" "no clean stop in the upgrade's restart"
  if journal_since_has "$ts" "ended abnormally"; then fail "the fail-safe paused workers during the upgrade"; fi
  ok "$v1 -> $v2 with a worker running: edited pilotd.toml and policy kept byte for byte, daemon restarted on the new binary, $first_worker adopted untouched"
}

scenario_purge() {
  begin purge
  local out
  running_is "$first_worker" || fail "no running worker before purge"
  c sh -c 'umask 077 && echo test-token > /etc/pilotd/pool.token'
  local t0=$EPOCHREALTIME t_purge
  out=$(c sh -c 'DEBIAN_FRONTEND=noninteractive apt-get purge -y pilotd' 2>&1) \
    || { echo "$out" >&2; fail "apt-get purge failed"; }
  t_purge=$(elapsed "$t0")
  grep -q "removed 1 worker(s) of instance \"$instance\"" <<<"$out" || { echo "$out" >&2; fail "purge did not say which workers it removed"; }
  [ -z "$(workers)" ] || fail "workers left after purge: $(workers | tr '\n' ' ')"
  c test ! -e /usr/lib/systemd/system/pilotd.service || fail "the unit file is still there"
  c test ! -e /etc/systemd/system/multi-user.target.wants/pilotd.service || fail "the enable link is still there"
  [ "$(c systemctl show -p LoadState --value pilotd.service)" = not-found ] || fail "systemd still knows pilotd.service"
  c test ! -e "$site" -a ! -e "$policy" || fail "purge left the conffiles"
  # dpkg's purge also deletes a conffile's backups (.bak, ~, .dpkg-old, ...): init's
  # policy.toml.bak goes too. A file of another name (the pool token) stays.
  c test ! -e "$policy.bak" || fail "purge kept policy.toml.bak (dpkg removes a conffile's .bak)"
  c test -f /etc/pilotd/pool.token || fail "purge removed pool.token, which dpkg does not own"
  [ -z "$(c find "$state" -mindepth 1)" ] || fail "purge left state: $(c find "$state" -mindepth 1 | head)"
  grep -q 'removed /var/lib/pilotd' <<<"$out" || fail "purge did not say it removed the state dir"
  ok "apt purge in $t_purge s: unit and enable link gone, conffiles and policy.toml.bak gone (pool.token kept), this instance's worker removed and said so, $state emptied"
}


# --- NetworkManager: the real one, owning the container's link ---------------------------------
# Its global Metered, as pilotd reads it: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no.
nm_metered() {
  c busctl get-property org.freedesktop.NetworkManager /org/freedesktop/NetworkManager \
    org.freedesktop.NetworkManager Metered | awk '{ print $2 }'
}
nm_primary() {
  c busctl get-property org.freedesktop.NetworkManager /org/freedesktop/NetworkManager \
    org.freedesktop.NetworkManager PrimaryConnection | awk '{ print $2 }' | tr -d '"'
}
metered_said="the network is metered (NetworkManager): no downloads"
engine_has() { docker image inspect "$1" >/dev/null 2>&1; }
engine_lacks() { ! engine_has "$1"; }

scenario_metered() {
  begin metered
  running_is "$first_worker" || fail "no running worker before the link is metered"
  # NetworkManager (enabled in the image, running since boot) sees eth0, the engine's veth, as
  # configured by someone else. A profile of its own with the same address and default route
  # makes eth0 its device and that connection its primary one, whose metered flag is the
  # global Metered pilotd reads.
  local addr gw out
  addr=$(c ip -4 -o addr show dev eth0 | awk '{ print $4; exit }')
  gw=$(c ip route show default | awk '{ print $3; exit }')
  [ -n "$addr" ] && [ -n "$gw" ] || fail "eth0 has no address or no default route: $(c ip route 2>&1)"
  c nmcli connection add type ethernet con-name donor ifname eth0 ipv4.method manual \
    ipv4.addresses "$addr" ipv4.gateway "$gw" ipv6.method disabled connection.autoconnect no >/dev/null \
    || fail "nmcli could not add the connection"
  out=$(c nmcli connection up donor 2>&1) \
    || fail "NetworkManager could not take eth0 ($out): $(c journalctl -u NetworkManager --no-pager -n 20 -o cat)"
  [ "$(c nmcli -g GENERAL.CONNECTION device show eth0)" = donor ] || fail "eth0 is not NetworkManager's: $(c nmcli device)"
  [ "$(nm_primary)" != / ] || fail "NetworkManager has no primary connection: $(c nmcli general)"
  grep -q "^default via $gw dev eth0 proto static" <<<"$(c ip route show default)" \
    || fail "the default route is not NetworkManager's: $(c ip route show default)"
  [ "$(nm_metered)" = 4 ] || fail "NetworkManager's Metered is $(nm_metered), not 4 (guess-no) on a wired link"
  ! status_has "$metered_said" || fail "status says the network is metered before it is"

  # A worker image of this run alone (v1 with a label: a digest of its own), pushed, then named
  # in the site file: pilotd asks the registry (the link is free), finds it here, and keeps it
  # in mind for new workers while the running one finishes its life.
  local repo=127.0.0.1:5000/pilotd-test/worker tag digest t0
  tag=nm-$run_id
  docker create --name "$ctr-nm" "$repo:v1" >/dev/null || fail "docker create from $repo:v1 failed"
  docker commit -c "LABEL pilotd.test.metered=$run_id" "$ctr-nm" "$repo:$tag" >/dev/null \
    || fail "docker commit failed"
  docker rm "$ctr-nm" >/dev/null
  digest=$(docker push "$repo:$tag" 2>/dev/null | sed -n 's/.*digest: \(sha256:[0-9a-f]*\).*/\1/p')
  [ -n "$digest" ] || fail "the push of $repo:$tag printed no digest"
  t0=$(date +%s)
  c sed -i "s|^image = .*|image = \"$repo:$tag\"|" "$site"
  c systemctl reload pilotd.service || fail "reload with image $repo:$tag failed"
  wait_for 15 "pilotd to resolve $repo:$tag" journal_since_has "$t0" "the tag names a new image"

  # Metered: status is what the daemon decided (NetworkManager's signal, the urgent path),
  # plan what a one-shot reads of NetworkManager itself.
  local t_nm t_status="" t_plan=""
  t_nm=$EPOCHREALTIME
  c nmcli connection modify donor connection.metered yes || fail "nmcli connection modify failed"
  until [ -n "$t_status" ] && [ -n "$t_plan" ]; do
    [ -z "$t_status" ] && status_has "$metered_said" && t_status=$(elapsed "$t_nm")
    [ -z "$t_plan" ] && plan_has "$metered_said" && t_plan=$(elapsed "$t_nm")
    awk -v a="$t_nm" -v b="$EPOCHREALTIME" 'BEGIN { exit !(b - a > 5) }' \
      && fail "5 s after nmcli set metered yes (Metered = $(nm_metered)): status '${t_status:-not yet}', plan '${t_plan:-not yet}': $(c pilotd plan 2>&1)"
    sleep 0.1
  done
  [ "$(nm_metered)" = 1 ] || fail "NetworkManager's Metered is $(nm_metered) after metered yes, not 1"

  # The image leaves the engine: pilotd knows its digest and must pull it, and does not, for
  # two cycles; the running worker goes on (no-downloads, the default).
  local t_rmi n events
  t_rmi=$(date +%s.%N)
  docker rmi "$repo:$tag" >/dev/null || fail "docker rmi $repo:$tag failed"
  n=$(cycles)
  wait_for 20 "two cycles on the metered link" cycles_past $((n + 1))
  plan_has "@$digest waits: the network is metered" || fail "plan does not say the new image waits for the link: $(c pilotd plan 2>&1)"
  engine_lacks "$repo@$digest" || fail "$repo@$digest was pulled on a metered link"
  events=$(docker events --since "$t_rmi" --until "$(date +%s.%N)" --filter type=image --filter event=pull \
    --format '{{.Actor.ID}}')
  ! grep -qF "$repo" <<<"$events" || fail "the engine pulled on a metered link: $events"
  running_is "$first_worker" || fail "the running worker did not go on with on_metered = no-downloads"

  # Free again: the pull comes.
  local t_free t_pull
  t_free=$EPOCHREALTIME
  c nmcli connection modify donor connection.metered no || fail "nmcli connection modify failed"
  wait_for 15 "the pull of $repo@$digest once the link is not metered" engine_has "$repo@$digest"
  t_pull=$(elapsed "$t_free")
  [ "$(nm_metered)" = 2 ] || fail "NetworkManager's Metered is $(nm_metered) after metered no, not 2"
  ! status_has "$metered_said" || fail "status still says the network is metered"

  c sed -i "s|^image = .*|image = \"$repo:current\"|" "$site"
  c systemctl reload pilotd.service || fail "reload back to $repo:current failed"
  running_is "$first_worker" || fail "the worker did not survive the metered link"
  ok "NetworkManager owns eth0 (default via $gw, primary connection); nmcli metered yes -> status says '$metered_said' after $t_status s, plan after $t_plan s (Metered 4 -> 1); $repo@$digest not pulled for two cycles, worker $first_worker ran on; metered no (Metered 2) -> pulled after $t_pull s"
}

work_in=/root/pilotd-test
c mkdir -p "$work_in"
scenario_install
scenario_metered
scenario_hardening
scenario_cgroup
scenario_ssh_login
scenario_ssh_idle
scenario_use
scenario_lock
scenario_desktop
scenario_logind_restart
scenario_reload
scenario_watchdog
scenario_crash
scenario_failsafe
scenario_stop
scenario_upgrade
scenario_purge
echo "systemd suite: all scenarios passed in $(elapsed "$suite_start") s; fail-safe: workers paused $crash_pause s after SIGKILL"
