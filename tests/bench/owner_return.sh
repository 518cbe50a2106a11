#!/bin/bash
# The owner's return under load (a figure, not a test; it judges nothing): the time from the
# owner's arrival being written to both workers' cgroups being frozen, with two workers burning the whole
# machine (WORKER_BURN: each spins the CPU its share gives it) and the worker image's registry
# hanging (tests/bench/registry_proxy.py in front of the test registry, moving no byte on any
# connection, the freshness check's kept-alive one included, so every freshness check, due
# every REFRESH, hangs until [docker] timeout). The proxy counts the requests it holds: each
# arrival notes whether a check was hanging both when it came and when both workers were
# frozen, and the bench fails when none was (the figures would not be of a hanging registry).
#
#   1. utmp: LOGINS logins written in place into a utmp file (the one record slot rewritten
#      from DEAD_PROCESS to USER_PROCESS and back with pwrite, as login(3) and logout(3) do),
#      pilotd on the host with sessions = "any", on_return = "pause". LOGINS=0 skips it.
#   2. logind (LOCKS changes; LOCKS=0 skips): the real-systemd container (tests/systemd/image.sh,
#      Debian 13, no utmp), pilotd on the host on the container's system bus, alice logged in
#      through the container's real sshd,
#      her session's LockedHint set and cleared by her over the system bus; unlock -> pause,
#      with sessions = "active", lock_grace = "0s". Skipped, and said so, when this pilotd
#      does not know lock_grace.
#   3. logind idle inhibitors (INHIBITS starts; INHIBITS=0 skips): the same container and
#      pilotd, alice's session locked (away), polkitd running; alice (uid 1000, setpriv, as
#      tests/systemd/run.sh's inhibit_start) starts `systemd-inhibit --what=idle --mode=block`,
#      holds it a random 1-3 s and ends it: its start -> pause (the use signal of issue 33), its
#      end -> unpause. Her ssh session is remote, so her lock does not outweigh the inhibitor.
#
# Times: the write's from the writer itself (utmp: python reads the clock just before pwrite;
# logind: the delivery stamp of logind's PropertiesChanged signal, from busctl monitor, and,
# as a bound, `date` in the container just before busctl or systemd-inhibit starts), the
# pause's from a watcher of the workers' cgroup freezers (below).
# Between two arrivals the owner leaves, both workers are unpaused, and a random 1-3 s passes,
# so arrivals land at every phase of the INTERVAL cycle. Prints p50/p95/max to the first and
# to the second worker's pause; an arrival that froze both workers not within 10 s is a
# failure, counted in those figures (as "> 10000 ms") and in the exit status.
#
# pilotd is the package's build (volunteer profile, no kubernetes) unless PILOTD_BIN is given.
# Needs root, python3, tests/setup-docker.sh first (engine, registry on 127.0.0.1:5000, test
# images); parts 2 and 3 also need the systemd image (built by debootstrap on first use).
# KEEP=1 leaves the daemons' logs (LOG=pilotd=debug for more) and the event lists in a temp dir.
#   LOGINS=30 LOCKS=30 INHIBITS=30 INTERVAL=5s REFRESH=2s tests/bench/owner_return.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
logins=${LOGINS:-30}
locks=${LOCKS:-30}
inhibits=${INHIBITS:-30}
interval=${INTERVAL:-5s}
refresh=${REFRESH:-2s}
bin=${PILOTD_BIN:-${CARGO_TARGET_DIR:-$here/target}/volunteer/pilotd}
. "$here/tests/bench/idle-daemon.sh"
[ -n "${PILOTD_BIN:-}" ] || volunteer_build
command -v utmpdump >/dev/null && command -v python3 >/dev/null || { echo "owner_return: needs utmpdump and python3" >&2; exit 1; }

d=$(mktemp -d "${TMPDIR:-/var/tmp}/pilotd-owner-return.XXXXXX")
inst=ownret$$
inst2=ownretld$$
ctr=pilotd-owner-return-$$
cleanup() {
  set +e
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null
  for p in ${proxy:-} ${events:-} ${W_PID:-}; do kill "$p" 2>/dev/null; done
  docker rm -f "$ctr" >/dev/null 2>&1
  for i in $inst $inst2; do
    docker ps -aq --filter "label=pilotd.instance=$i" | xargs -r docker rm -f >/dev/null
  done
  # The pull through the proxy left a tag and a digest reference under its port.
  [ -n "${port:-}" ] && docker images --digests --format '{{.Repository}}@{{.Digest}} {{.Repository}}:{{.Tag}}' \
    "127.0.0.1:$port/pilotd-test/worker" | tr ' ' '\n' | grep -v -e '@<none>$' -e ':<none>$' \
    | xargs -r docker rmi >/dev/null 2>&1
  wait 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then log "KEEP=1: logs and events left in $d"; else rm -rf "$d"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { echo "owner_return: $*" >&2; }

# --- the registry, through a proxy that forwards, hangs or refuses (its mode: $d/mode) --------
echo forward >"$d/mode"
python3 "$here/tests/bench/registry_proxy.py" "$d/mode" "$d/port" "$d/stats" &
proxy=$!
for _ in $(seq 50); do [ -s "$d/port" ] && break; sleep 0.1; done
port=$(cat "$d/port")
# Registry requests received and not answered yet (during the hang: hanging now).
pending() { awk '{ print $6 }' "$d/stats"; }
hanging_check() { # WHAT: wait (35 s at most, past one [docker] timeout) for a check to hang
  for _ in $(seq 350); do [ "$(pending)" -ge 1 ] && return 0; sleep 0.1; done
  log "$1: no freshness check reached the hanging registry within 35 s ($(cat "$d/stats"))"; return 1
}

# --- pilotd's files ---------------------------------------------------------------------------
write_policy() { # FILE SESSIONS [EXTRA OWNER LINES]
  cat >"$1" <<P
timezone = "UTC"
[schedule]
windows = [ { days = "daily", from = "00:00", to = "24:00" } ]
[owner]
sessions = "$2"
${3:-}
max_owner_cpu = "100%"
free_for = "0s"
on_return = "pause"
on_battery = "ignore"
[share]
cpus = "100%"
memory = "512MiB"
disk = "1GiB"
workers = 2
[jobs]
longest_job = "1h"
P
}
write_site() { # FILE POLICY STATE INSTANCE UTMP [EXTRA WORKER LINES]
  cat >"$1" <<C
splay = "0s"
policy = "$2"
state_dir = "$3"
control_socket = "$3.control.sock"
interval = "$interval"
[host]
utmp = "$5"
scratch = "$d/scratch"
[docker]
instance = "$4"
timeout = "30s"
[worker]
image = "127.0.0.1:$port/pilotd-test/worker:v1"
allowed_images = ["127.0.0.1:$port/*"]
refresh = "$refresh"
${6:-}
[worker.env]
WORKER_BURN = "1"
C
}

running() { docker ps -q --filter "label=pilotd.instance=$1" --filter status=running | wc -l; }
wait_running() { # INSTANCE N WHAT
  for _ in $(seq 600); do [ "$(running "$1")" -ge "$2" ] && return 0; sleep 0.2; done
  log "$3: $2 running workers did not come within 120 s"; return 1
}
# When each of one instance's workers stops and starts computing, as the kernel sees it: its
# cgroup's freezer (v1 freezer.state FROZEN/THAWED, v2 cgroup.events "frozen"), polled every
# 0.5 ms by a watcher at nice 0. pilotd freezes a worker's cgroup itself where it can reach it
# and asks the engine otherwise (whose runc freezes the same cgroup), so one clock serves both.
# Lines as "TIME_NS pause|unpause"; a poll that runs late under load only adds to the figure.
cat >"$d/freezer.py" <<'PY'
import sys, time
files = sys.argv[1:]
def frozen(f):
    s = open(f).read()
    return s.strip() == "FROZEN" if f.endswith("freezer.state") else "frozen 1" in s.split("\n")
last = [frozen(f) for f in files]
while True:
    for i, f in enumerate(files):
        now = frozen(f)
        if now != last[i]:
            print(time.time_ns(), "pause" if now else "unpause", flush=True)
            last[i] = now
    time.sleep(0.0005)
PY
freezer_file() { # CONTAINER: its freezer's state file, from its init process's cgroup
  local pid line
  pid=$(docker inspect -f '{{.State.Pid}}' "$1")
  line=$(grep -E '^[0-9]+:([^:]*,)?freezer(,[^:]*)?:' "/proc/$pid/cgroup" || true)
  if [ -n "$line" ]; then echo "/sys/fs/cgroup/freezer${line##*:}/freezer.state"
  else echo "/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$pid/cgroup")/cgroup.events"; fi
}
watch_events() { # INSTANCE FILE
  local files=()
  for c in $(docker ps -q --no-trunc --filter "label=pilotd.instance=$1" --filter status=running); do
    files+=("$(freezer_file "$c")")
  done
  python3 "$d/freezer.py" "${files[@]}" >"$2" &
  events=$!
}
count() { grep -c " $2\$" "$1" || true; } # FILE ACTION
wait_count() { # FILE ACTION N: true once N such events are in FILE (10 s at most)
  for _ in $(seq 1000); do [ "$(count "$1" "$2")" -ge "$3" ] && return 0; sleep 0.01; done
  return 1
}
# after_ms FILE ACTION T0_NS K: ms from T0_NS to the K-th ACTION event at or after it.
after_ms() {
  awk -v a="$2" -v t="$3" '$2 == a && $1 >= t { print $1 }' "$1" | sort -n \
    | awk -v k="$4" -v t="$3" 'NR == k { printf "%.1f\n", ($1 - t) / 1e6 }'
}
# paused_after EVENTS N T0_NS FIRST LAST [T0_NS FIRST LAST...]: once N pauses are in EVENTS (10 s
# at most), appends for each T0 the ms from it to the first and to the second pause at or after
# it; counts a timeout otherwise, and a hung check where one hung from h0's reading to now.
paused_after() {
  local ev=$1 n=$2
  shift 2
  if wait_count "$ev" pause "$n"; then
    while [ $# -ge 3 ]; do
      after_ms "$ev" pause "$1" 1 >>"$2"
      after_ms "$ev" pause "$1" 2 >>"$3"
      shift 3
    done
  else
    timeouts=$((timeouts + 1))
  fi
  if [ "$h0" -ge 1 ] && [ "$(pending)" -ge 1 ]; then hung=$((hung + 1)); fi
}
settle() { sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 1 + 2 * r / 32767 }')"; }
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
busy_pct() { # "BUSY0 TOTAL0" "BUSY1 TOTAL1"
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.0f", 100 * (y[1] - x[1]) / (y[2] - x[2]) }'
}
summary() { # LABEL FILE TIMEOUTS (one latency per line; TIMEOUTS arrivals with none: > 10 s)
  sort -n "$2" | awk -v l="$1" -v t="${3:-0}" '{ a[NR] = $1 } END {
    n = NR + t
    if (n == 0) { printf "%s: no samples\n", l; exit }
    i50 = int(n * 0.50 + 0.5); i95 = int(n * 0.95 + 0.5); if (i95 < 1) i95 = 1; if (i50 < 1) i50 = 1
    printf "%s: p50 %s  p95 %s  max %s  (n=%d%s)\n", l, f(a, i50), f(a, i95), f(a, n), n,
      t ? sprintf(", %d with no pause within 10 s", t) : "" }
  function f(a, i) { return i <= NR ? sprintf("%.0f ms", a[i]) : "> 10000 ms" }'
}

# --- part 1: utmp logins ----------------------------------------------------------------------
mkdir -p "$d/scratch"
printf '[7] [%05d] [ts/0] [alice   ] [pts/0       ] [10.0.0.5            ] [10.0.0.5       ] [2026-11-30T05:00:00,000000+00:00]\n' $$ \
  | utmpdump -r >"$d/login.bin" 2>/dev/null
[ "$(stat -c %s "$d/login.bin")" = 384 ] || { log "utmpdump -r did not write one 384-byte record"; exit 1; }
# The writer: one record slot, rewritten in place; prints the clock read just before each pwrite.
cat >"$d/writer.py" <<'PY'
import os, struct, sys, time
path, login = sys.argv[1], open(sys.argv[2], "rb").read()
dead = bytearray(login)
struct.pack_into("<h", dead, 0, 8)   # DEAD_PROCESS, as logout(3) leaves the slot
dead[44:76] = bytes(32)              # ut_user
dead[76:332] = bytes(256)            # ut_host
recs = {"login": login, "logout": bytes(dead)}
open(path, "wb").write(recs["logout"])
print("ready", flush=True)
for line in sys.stdin:
    rec = recs[line.strip()]
    fd = os.open(path, os.O_WRONLY)
    t = time.time_ns()
    os.pwrite(fd, rec, 0)
    os.close(fd)
    print(t, flush=True)
PY
echo "owner return under load: 2 workers burning, registry hanging, interval $interval, refresh $refresh, $(nproc) cores ($(uname -r)), pilotd $("$bin" --version | awk '{ print $2 }')"
failed=0
if [ "$logins" -gt 0 ]; then
  coproc W { exec python3 "$d/writer.py" "$d/utmp" "$d/login.bin"; }
  read -r _ <&"${W[0]}"
  write() { echo "$1" >&"${W[1]}"; read -r t_w <&"${W[0]}"; }

  write_policy "$d/policy.toml" any
  write_site "$d/pilotd.toml" "$d/policy.toml" "$d/state" "$inst" "$d/utmp"
  "$bin" -c "$d/pilotd.toml" check >/dev/null
  RUST_LOG=${LOG:-pilotd=info} "$bin" -c "$d/pilotd.toml" run 2>"$d/log" &
  pid=$!
  wait_running "$inst" 2 "utmp part" || { tail -n 30 "$d/log" >&2; exit 1; }
  echo hang >"$d/mode"
  hanging_check "utmp part"
  watch_events "$inst" "$d/events"
  sleep 0.5
  : >"$d/first"; : >"$d/last"
  timeouts=0; hung=0
  b0=$(busy)
  for i in $(seq "$logins"); do
    np=$(count "$d/events" pause); nu=$(count "$d/events" unpause)
    h0=$(pending)
    write login
    paused_after "$d/events" $((np + 2)) "$t_w" "$d/first" "$d/last"
    write logout
    wait_count "$d/events" unpause $((nu + 2)) || { log "login $i: the workers were not unpaused within 10 s"; tail -n 20 "$d/log" >&2; exit 1; }
    settle
  done
  b1=$(busy)
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  kill "$events" 2>/dev/null || true; events=
  echo "  host CPU busy during the logins: $(busy_pct "$b0" "$b1")% (paused workers included)"
  summary "  utmp login -> first pause " "$d/first" "$timeouts"
  summary "  utmp login -> second pause" "$d/last" "$timeouts"
  echo "  utmp logins with a freshness check hanging from the login to both pauses: $hung of $logins ($(cat "$d/stats"))"
  echo "  utmp, each login -> first pause (ms, in order): $(tr '\n' ' ' <"$d/first")"
  failed=$((failed + timeouts))
  [ "$hung" -ge 1 ] || { log "utmp part: no login came while a freshness check hung: not a hanging registry's figures"; failed=$((failed + 1)); }
  docker ps -aq --filter "label=pilotd.instance=$inst" | xargs -r docker rm -f >/dev/null
fi

# --- parts 2 and 3: logind lock changes and idle inhibitors in the real-systemd container -------
[ "$locks" -gt 0 ] || [ "$inhibits" -gt 0 ] || exit $((failed > 0))
image=$(sh "$here/tests/systemd/image.sh")
mkdir -p "$d/dbus"
docker run -d --name "$ctr" --hostname pilotd-owner-return \
  --cap-add SYS_ADMIN --cap-add DAC_READ_SEARCH --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
  -v /sys/fs/cgroup:/sys/fs/cgroup:ro --tmpfs /run --tmpfs /run/lock -e container=docker \
  -v "$d:$d" -v "$d/dbus:/run/dbus" \
  --entrypoint /lib/systemd/systemd "$image" >/dev/null
c() { docker exec "$ctr" "$@"; }
for _ in $(seq 300); do
  s=$(c systemctl is-system-running 2>/dev/null || true)
  [ "$s" = running ] || [ "$s" = degraded ] && break
  sleep 0.2
done
write_policy "$d/policy2.toml" active $'session_idle = "15m"\nlock_grace = "0s"'
# pilotd runs on the host, as the package installs it, and asks the container's logind over
# the container's system bus (its /run/dbus is a directory of the host's): the sessions are
# the container's, the workers and their cgroups the host's. No utmp, as on Debian 13.
write_site "$d/pilotd2.toml" "$d/policy2.toml" "$d/state2" "$inst2" "$d/no-utmp"
bus="unix:path=$d/dbus/system_bus_socket"
if ! out=$("$bin" -c "$d/pilotd2.toml" check 2>&1); then
  echo "logind part skipped: this pilotd refuses sessions = \"active\" with lock_grace: $(tr '\n' ' ' <<<"$out")"
  exit $((failed > 0))
fi
c useradd -m -u 1000 alice
c sh -c 'install -d -m 700 /root/.ssh && ssh-keygen -q -t ed25519 -N "" -f /root/.ssh/id_alice' >/dev/null
c sh -c 'install -d -m 700 -o alice -g alice /home/alice/.ssh &&
  install -m 600 -o alice -g alice /root/.ssh/id_alice.pub /home/alice/.ssh/authorized_keys'
docker exec -d "$ctr" sh -c 'sleep infinity | exec ssh -tt -i /root/.ssh/id_alice \
  -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes \
  alice@127.0.0.1 "exec sleep infinity" >/root/ssh-alice.log 2>&1'
session=
for _ in $(seq 100); do
  session=$(c loginctl list-sessions --no-legend | awk '$3 == "alice" && $6 == "user" { print $1; exit }' || true)
  [ -n "$session" ] && break
  sleep 0.1
done
[ -n "$session" ] || { log "alice's ssh login made no logind session"; c cat /root/ssh-alice.log >&2; exit 1; }
path=$(c busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager GetSession s "$session" | awk '{ print $2 }' | tr -d '"')
# logind's PropertiesChanged signals of alice's session, each stamped when the bus delivered
# it (busctl monitor): the instant her hint changed, which pilotd's urgent path reacts to.
docker exec -d "$ctr" sh -c "exec busctl monitor --json=short --match \
  'type=signal,interface=org.freedesktop.DBus.Properties,member=PropertiesChanged,path=$path' >$d/signals.json 2>&1"
# And the Manager's, which announce an inhibitor taken or released (BlockInhibited).
docker exec -d "$ctr" sh -c "exec busctl monitor --json=short --match \
  'type=signal,interface=org.freedesktop.DBus.Properties,member=PropertiesChanged,path=/org/freedesktop/login1' \
  >$d/manager-signals.json 2>&1"
sleep 0.5
# lock true|false: alice sets her session's LockedHint. t_w: the container's clock just before
# busctl starts (docker exec not counted); t_s: the delivery of logind's signal of the change.
lock() {
  t_w=$(c sh -c 't0=$(date +%s%N); setpriv --reuid=1000 --regid=1000 --init-groups busctl call \
    org.freedesktop.login1 "$1" org.freedesktop.login1.Session SetLockedHint b "$2" && echo "$t0"' \
    sh "$path" "$1")
  [ -n "$t_w" ] || { log "alice's SetLockedHint($1) failed"; exit 1; }
  t_s=
  for _ in $(seq 50); do
    t_s=$(grep -F "\"LockedHint\":{\"type\":\"b\",\"data\":$1}" "$d/signals.json" \
      | sed -n 's/.*"timestamp-realtime":\([0-9]*\).*/\1/p' | tail -n 1 || true)
    [ -n "$t_s" ] && [ "$t_s" -ge "${t_w:0:16}" ] && break
    t_s=
    sleep 0.05
  done
  [ -n "$t_s" ] || { log "no PropertiesChanged(LockedHint=$1) seen on the bus"; exit 1; }
  t_s=${t_s}000
}
# signal_after FILE PATTERN NOT T0_NS WHAT: sets t_s to the delivery (ns) of the first signal
# in FILE matching the extended regex PATTERN and not NOT at or after T0_NS; 5 s at most.
signal_after() {
  t_s=
  for _ in $(seq 100); do
    t_s=$(grep -E "$2" "$1" | grep -Ev "$3" | sed -n 's/.*"timestamp-realtime":\([0-9]*\).*/\1/p' \
      | awk -v t="${4:0:16}" '$1 >= t' | sort -n | head -n 1 || true)
    [ -n "$t_s" ] && break
    sleep 0.05
  done
  [ -n "$t_s" ] || { log "no PropertiesChanged($5) seen on the bus within 5 s"; exit 1; }
  t_s=${t_s}000
}
# inhibit start|stop: alice takes an idle lock as a film player does (systemd-inhibit as her
# uid and groups, through logind and polkit), or ends it (systemd-inhibit and its sleep killed:
# logind drops the lock when its descriptor closes). t_w: the container's clock just before
# systemd-inhibit starts or the kill; t_s: the delivery of logind's BlockInhibited change.
blocks='"BlockInhibited":\{"type":"s","data":'
inhibit() {
  if [ "$1" = start ]; then
    c rm -f /root/inhibit.pid /root/inhibit.t
    docker exec -d "$ctr" sh -c 'echo $$ >/root/inhibit.pid; date +%s%N >/root/inhibit.t; exec setpriv \
      --reuid=1000 --regid=1000 --init-groups systemd-inhibit --what=idle --mode=block \
      --who=bench --why=bench sleep 600'
    t_w=
    for _ in $(seq 100); do
      t_w=$(c cat /root/inhibit.t 2>/dev/null || true)
      [ -n "$t_w" ] && break
      sleep 0.05
    done
    [ -n "$t_w" ] || { log "alice's systemd-inhibit did not start"; exit 1; }
    inhibit_pid=$(c cat /root/inhibit.pid)
    signal_after "$d/manager-signals.json" "$blocks\"[^\"]*idle" '^$' "$t_w" "BlockInhibited with idle"
  else
    t_w=$(c sh -c "kids=\$(cat /proc/$inhibit_pid/task/$inhibit_pid/children 2>/dev/null); \
      t=\$(date +%s%N); kill $inhibit_pid \$kids && echo \$t")
    [ -n "$t_w" ] || { log "alice's systemd-inhibit could not be ended"; exit 1; }
    signal_after "$d/manager-signals.json" "$blocks" "$blocks\"[^\"]*idle" "$t_w" "BlockInhibited without idle"
  fi
}
echo forward >"$d/mode"
lock true # away: the workers may start
DBUS_SYSTEM_BUS_ADDRESS=$bus RUST_LOG=${LOG:-pilotd=info} "$bin" -c "$d/pilotd2.toml" run 2>"$d/log2" &
pid=$!
wait_running "$inst2" 2 "logind part" || { tail -n 30 "$d/log2" >&2; exit 1; }
echo hang >"$d/mode"
hanging_check "logind part"
watch_events "$inst2" "$d/events2"
sleep 0.5
echo "  logind (systemd $(c systemctl --version | awk 'NR == 1 { print $2 }'), alice's ssh session $session, no utmp):"
if [ "$locks" -gt 0 ]; then
  : >"$d/first2"; : >"$d/last2"; : >"$d/first2s"; : >"$d/last2s"
  timeouts=0; hung=0
  for i in $(seq "$locks"); do
    np=$(count "$d/events2" pause); nu=$(count "$d/events2" unpause)
    h0=$(pending)
    lock false # she is back
    paused_after "$d/events2" $((np + 2)) "$t_w" "$d/first2" "$d/last2" "$t_s" "$d/first2s" "$d/last2s"
    lock true
    wait_count "$d/events2" unpause $((nu + 2)) || { log "lock $i: the workers were not unpaused within 10 s"; tail -n 20 "$d/log2" >&2; exit 1; }
    settle
  done
  summary "  logind unlock (its signal) -> first pause  " "$d/first2s" "$timeouts"
  summary "  logind unlock (its signal) -> second pause " "$d/last2s" "$timeouts"
  summary "  logind unlock (asked for: busctl started) -> first pause " "$d/first2" "$timeouts"
  summary "  logind unlock (asked for: busctl started) -> second pause" "$d/last2" "$timeouts"
  echo "  unlocks with a freshness check hanging from the unlock to both pauses: $hung of $locks ($(cat "$d/stats"))"
  echo "  logind, each unlock (its signal) -> first pause (ms, in order): $(tr '\n' ' ' <"$d/first2s")"
  echo "  logind, each unlock (asked for) -> first pause (ms, in order): $(tr '\n' ' ' <"$d/first2")"
  failed=$((failed + timeouts))
  [ "$hung" -ge 1 ] || { log "logind part: no unlock came while a freshness check hung: not a hanging registry's figures"; failed=$((failed + 1)); }
fi

# --- part 3: alice's idle inhibitors -----------------------------------------------------------
# Her session stays locked (lock_grace 0s: away), so the inhibitor alone makes her present.
if [ "$inhibits" -gt 0 ]; then
  c systemctl start polkit.service || { log "polkitd does not start: logind refuses alice's inhibitor without it"; exit 1; }
  : >"$d/first3s"; : >"$d/last3s"; : >"$d/first3"; : >"$d/last3"; : >"$d/back3s"; : >"$d/back3s2"
  timeouts=0; hung=0
  for i in $(seq "$inhibits"); do
    np=$(count "$d/events2" pause); nu=$(count "$d/events2" unpause)
    h0=$(pending)
    inhibit start
    paused_after "$d/events2" $((np + 2)) "$t_s" "$d/first3s" "$d/last3s" "$t_w" "$d/first3" "$d/last3"
    # Held a while, as a short film: the end is a use signal of its own, and logind's
    # announcements pass at once only within pilotd's burst (observe::bus::BURST).
    settle
    inhibit stop
    if wait_count "$d/events2" unpause $((nu + 2)); then
      after_ms "$d/events2" unpause "$t_s" 1 >>"$d/back3s"
      after_ms "$d/events2" unpause "$t_s" 2 >>"$d/back3s2"
    else
      log "inhibitor $i: its end did not unpause the workers within 10 s"; tail -n 20 "$d/log2" >&2; exit 1
    fi
    settle
  done
  echo "  logind idle inhibitors (alice's systemd-inhibit --what=idle --mode=block, her session locked):"
  summary "  inhibitor taken (its signal) -> first pause  " "$d/first3s" "$timeouts"
  summary "  inhibitor taken (its signal) -> second pause " "$d/last3s" "$timeouts"
  summary "  inhibitor taken (asked for: systemd-inhibit started) -> first pause " "$d/first3" "$timeouts"
  summary "  inhibitor taken (asked for: systemd-inhibit started) -> second pause" "$d/last3" "$timeouts"
  summary "  inhibitor released (its signal) -> first unpause " "$d/back3s"
  summary "  inhibitor released (its signal) -> second unpause" "$d/back3s2"
  echo "  inhibitors taken with a freshness check hanging from the start to both pauses: $hung of $inhibits ($(cat "$d/stats"))"
  echo "  each inhibitor taken (its signal) -> first pause (ms, in order): $(tr '\n' ' ' <"$d/first3s")"
  echo "  each inhibitor taken (asked for) -> first pause (ms, in order): $(tr '\n' ' ' <"$d/first3")"
  failed=$((failed + timeouts))
  [ "$hung" -ge 1 ] || { log "inhibitor part: no inhibitor came while a freshness check hung: not a hanging registry's figures"; failed=$((failed + 1)); }
fi
exit $((failed > 0))
