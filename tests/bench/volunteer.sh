#!/bin/bash
# Volunteer-mode figures (not a test): login-to-eviction latency, pilotd's steady-state RSS and
# CPU with 0 and 4 workers, and the registry cost of a freshness check when the tag is unchanged.
# Needs tests/setup-docker.sh first (engine, registry on 127.0.0.1:5000, test images); run as root.
#   LOGINS=20 SAMPLE=30 tests/bench/volunteer.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${PILOTD_BIN:-$here/target/release/pilotd}
[ -x "$bin" ] || { (cd "$here" && cargo build --release -q --bin pilotd); }
logins=${LOGINS:-20}; sample=${SAMPLE:-30}
reglog=${PILOTD_TEST_WORK:-/tmp/pilotd-docker-tests}/registry.log
d=$(mktemp -d); inst="bench$$"
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; docker ps -aq --filter "label=pilotd.instance=$inst" | xargs -r docker rm -f >/dev/null; rm -rf "$d"; }
trap cleanup EXIT
write_conf() { # WORKERS REFRESH [INTERVAL]
cat >"$d/policy.toml" <<P
timezone = "UTC"
[schedule]
windows = [ { days = "daily", from = "00:00", to = "24:00" } ]
[owner]
sessions = "any"
max_owner_cpu = "100%"
free_for = "0s"
on_return = "pause"
on_battery = "ignore"
[share]
cpus = "100%"
memory = "1GiB"
disk = "1GiB"
workers = $1
[jobs]
longest_job = "1h"
P
cat >"$d/pilotd.toml" <<C
splay = "0s"
policy = "$d/policy.toml"
state_dir = "$d/state"
interval = "${3:-30s}"
[host]
utmp = "$d/utmp"
scratch = "$d/scratch"
[docker]
instance = "$inst"
[worker]
image = "127.0.0.1:5000/pilotd-test/worker:v1"
allowed_images = ["127.0.0.1:5000/*"]
refresh = "$2"
max_starts_per_cycle = 4
C
}
start() { RUST_LOG=${LOG:-pilotd=info} "$bin" -c "$d/pilotd.toml" run 2>"$d/log" & pid=$!; }
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
wait_workers() { for _ in $(seq 100); do [ "$(docker ps -q --filter "label=pilotd.instance=$inst" --filter status=running | wc -l)" -ge "$1" ] && return; sleep 0.2; done; echo "workers did not start" >&2; exit 1; }
: >"$d/utmp"
printf '[7] [%05d] [ts/0] [alice   ] [pts/0       ] [10.0.0.5            ] [10.0.0.5       ] [2026-11-30T05:00:00,000000+00:00]\n' $$ | utmpdump -r >"$d/login.bin" 2>/dev/null

echo "== owner login -> eviction signal (pause sent), $logins logins, 1 worker"
write_conf 1 6h; start; wait_workers 1
lat=()
for i in $(seq "$logins"); do
  n=$(grep -c 'paused:' "$d/log" || true)
  t0=$(date +%s.%N); cat "$d/login.bin" >"$d/utmp"
  for _ in $(seq 200); do [ "$(grep -c 'paused:' "$d/log" || true)" -gt "$n" ] && break; sleep 0.01; done
  t1=$(grep 'paused:' "$d/log" | tail -1 | cut -c1-27); t1=$(date -d "$t1" +%s.%N)
  lat+=("$(echo "($t1 - $t0) * 1000" | bc -l)")
  m=$(grep -c 'resumed:' "$d/log" || true); : >"$d/utmp"
  for _ in $(seq 200); do [ "$(grep -c 'resumed:' "$d/log" || true)" -gt "$m" ] && break; sleep 0.01; done
  sleep 0.3
done
printf '%s\n' "${lat[@]}" | sort -n | awk '{a[NR]=$1} END {printf "latency ms: p50 %.0f  p95 %.0f  max %.0f  (n=%d)\n", a[int(NR*0.5+0.5)], a[int(NR*0.95+0.5)], a[NR], NR}'
stop

measure() { # LABEL
  local t0 c0 c1 hz rss
  hz=$(getconf CLK_TCK)
  c0=$(awk '{print $14+$15}' "/proc/$pid/stat"); t0=$(date +%s.%N)
  sleep "$sample"
  c1=$(awk '{print $14+$15}' "/proc/$pid/stat"); rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  echo "$1: RSS ${rss} KiB; CPU $(echo "($c1-$c0)/$hz" | bc -l | xargs printf '%.2f') s in ${sample}s -> $(echo "($c1-$c0)/$hz*3600/$sample" | bc -l | xargs printf '%.1f') s per hour (extrapolated from a ${sample}s sample, interval 30s)"
}
echo "== steady state"
docker ps -aq --filter "label=pilotd.instance=$inst" | xargs -r docker rm -f >/dev/null
write_conf 0 6h; sed -i 's/^workers = 0/workers = 1/; s/^\[share\]/[share]/' "$d/policy.toml"
: >"$d/utmp"; cat "$d/login.bin" >"$d/utmp"   # owner present: 0 workers
start; sleep 3; measure "0 workers"; stop
: >"$d/utmp"; write_conf 4 6h  # 4 workers, or one per CPU on smaller machines
start; wait_workers "$(nproc | awk '{print ($1<4)?$1:4}')"; sleep 2; measure "$(docker ps -q --filter "label=pilotd.instance=$inst" | wc -l) workers"; stop

echo "== freshness check, tag unchanged (refresh = 2s)"
set +o pipefail  # tail|head closes pipes early
docker ps -aq --filter "label=pilotd.instance=$inst" | xargs -r docker rm -f >/dev/null
# A cycle every 2 s re-checks the tag every 2 s; debug level logs each unchanged check.
: >"$d/utmp"; write_conf 1 2s 2s; LOG=pilotd=debug start; sleep 3
l0=$(wc -l <"$reglog"); c0=$(grep -c 'tag unchanged' "$d/log" || true)
sleep 20
l1=$(wc -l <"$reglog"); c1=$(grep -c 'tag unchanged' "$d/log" || true)
checks=$((c1 - c0))
[ "$checks" -gt 0 ] || { echo "no freshness check was observed in 20 s (see $d/log)"; exit 1; }
bytes=$(tail -n +"$((l0 + 1))" "$reglog" | head -n "$((l1 - l0))" | grep -o '" [0-9][0-9][0-9] [0-9]*' | awk '{s+=$3} END {print s+0}')
reqs=$(tail -n +"$((l0 + 1))" "$reglog" | head -n "$((l1 - l0))" | grep -c '"\(GET\|HEAD\) /v2' || true)
echo "checks: $checks; registry requests: $reqs ($(echo "$reqs/$checks" | bc -l | xargs printf '%.1f') per check); response bytes: $bytes ($(echo "$bytes/$checks" | bc -l | xargs printf '%.0f') per check, bodies only, from the registry's access log)"
stop
