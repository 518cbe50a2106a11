#!/bin/bash
# The idle footprint of the volunteer daemon next to the BOINC client (not a test: it prints
# figures). Both run side by side for DURATION seconds on this machine, idle: BOINC attached to
# no project, pilotd with a closed schedule (it observes the host and the engine every
# interval but starts nothing). pilotd is the package's build: the `volunteer` profile
# (size-optimized), without the Kubernetes feature. Samples RSS every 10 s (median and max) and CPU time over the whole run
# (utime + stime of the process, as CPU-seconds per hour).
#   DURATION=600 tests/bench/footprint.sh
#   PILOTD_BIN=target/volunteer/pilotd DURATION=600 tests/bench/footprint.sh   # no build
#   BASELINE_BIN=/path/to/older/pilotd DURATION=600 tests/bench/footprint.sh
#       # also runs an older build beside them, in the same run, on the same machine
#   BUS=1 DURATION=600 tests/bench/footprint.sh
#       # the pilotd daemons ask a real logind and NetworkManager, a user logged in, as on a
#       # desktop (tests/bench/idle-daemon.sh's idle_bus_start; the systemd test image)
# Needs root, the Docker engine (tests/setup-docker.sh) and Debian's boinc-client (installed
# here when missing).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
duration=${DURATION:-600}
step=10
command -v boinc >/dev/null || {
    echo "footprint: installing boinc-client" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends boinc-client >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends boinc-client >/dev/null; }
}
# The service must not run twice on this machine: use our own instance only.
systemctl stop boinc-client 2>/dev/null || true
bin=${PILOTD_BIN:-$here/target/volunteer/pilotd}
. "$here/tests/bench/idle-daemon.sh"
[ -n "${PILOTD_BIN:-}" ] || volunteer_build

d=$(mktemp -d); inst="footprint$$"
idle_bus=; idle_bus_container=
cleanup() {
    for p in ${ppid:-} ${opid:-} ${bpid:-}; do kill "$p" 2>/dev/null || true; done
    [ -z "$idle_bus_container" ] || docker rm -f "$idle_bus_container" >/dev/null 2>&1 || true
    wait 2>/dev/null || true
    rm -rf "$d"
}
trap cleanup EXIT
[ -z "${BUS:-}" ] || idle_bus_start "$d"

# pilotd: idle, its schedule closed today.
start_pilotd() { # BIN DIR INSTANCE: starts one idle daemon, prints its pid
    local bin=$1 dir=$2 instance=$3
    idle_daemon_config "$dir" "$instance"
    "$bin" -c "$dir/pilotd.toml" check >/dev/null
    # Its stdout closed: the caller reads this function's output, the pid, to its end.
    env ${idle_bus:+DBUS_SYSTEM_BUS_ADDRESS=$idle_bus} "$bin" -c "$dir/pilotd.toml" run >/dev/null 2>"$dir/pilotd.log" &
    echo $!
}
ppid=$(start_pilotd "$bin" "$d/new" "$inst")
opid=
if [ -n "${BASELINE_BIN:-}" ]; then
    opid=$(start_pilotd "$BASELINE_BIN" "$d/old" "${inst}o")
fi

# BOINC: its own data dir, no project (its GUI RPC listens on loopback only).
mkdir -p "$d/boinc"
(cd "$d/boinc" && exec boinc --dir "$d/boinc" >"$d/boinc.log" 2>&1) &
bpid=$!
sleep 5
for p in $ppid $opid $bpid; do kill -0 "$p" || { echo "footprint: a daemon did not start" >&2; cat "$d"/*.log "$d"/*/pilotd.log >&2; exit 1; }; done

tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{ print ($14 + $15) / t }' "/proc/$1/stat"; }
rss() { awk -v k="${2:-VmRSS}:" '$1 == k { print $2 }' "/proc/$1/status"; }
sample() { # PID NAME: total, anonymous and file-backed resident memory
    rss "$1" >>"$d/$2.rss"; rss "$1" RssAnon >>"$d/$2.anon"; rss "$1" RssFile >>"$d/$2.file"
}
p0=$(cpu $ppid); b0=$(cpu $bpid); o0=$([ -z "$opid" ] || cpu $opid); t0=$(date +%s.%N)
end=$(( $(date +%s) + duration ))
while [ "$(date +%s)" -lt "$end" ]; do
    sample $ppid p; sample $bpid b; [ -z "$opid" ] || sample $opid o
    sleep $step
done
p1=$(cpu $ppid); b1=$(cpu $bpid); o1=$([ -z "$opid" ] || cpu $opid); t1=$(date +%s.%N)

stats() { sort -n "$1" | awk '{ a[NR] = $1 } END { printf "median %.1f MiB, max %.1f MiB", a[int((NR + 1) / 2)] / 1024, a[NR] / 1024 }'; }
median() { sort -n "$1" | awk '{ a[NR] = $1 } END { printf "%.1f", a[int((NR + 1) / 2)] / 1024 }'; }
split() { echo "(anonymous $(median "$d/$1.anon") MiB, file-backed $(median "$d/$1.file") MiB)"; }
size() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
perh() { awk -v a="$1" -v b="$2" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.2f", (b - a) * 3600 / (e - s) }'; }
[ -z "$idle_bus" ] || echo "(the pilotd daemons asking logind and NetworkManager on a system bus, alice logged in)"
echo "idle footprint over $(awk -v s="$t0" -v e="$t1" 'BEGIN { printf "%.0f", e - s }') s, sampled every ${step} s, on $(nproc) cores ($(uname -r)):"
echo "  pilotd $("$bin" --version | awk '{ print $2 }') (volunteer profile, no kubernetes, $(size "$bin")): RSS $(stats "$d/p.rss") $(split p); CPU $(perh "$p0" "$p1") CPU-s/h"
[ -z "$opid" ] || echo "  baseline $BASELINE_BIN ($(size "$BASELINE_BIN")): RSS $(stats "$d/o.rss") $(split o); CPU $(perh "$o0" "$o1") CPU-s/h"
echo "  boinc $(boinc --version 2>/dev/null | head -n 1 | awk '{ print $1 }') (no project):         RSS $(stats "$d/b.rss") $(split b); CPU $(perh "$b0" "$b1") CPU-s/h"
