#!/bin/bash
# Login -> eviction latency while the worker image's registry is slow or down (a figure, not a
# test): evictions must never wait on a registry. The worker's image is pulled through
# tests/bench/registry_proxy.py on 127.0.0.1 in front of the test registry; the proxy then
# (1) forwards, (2) moves no byte on any connection, new or already open (pilotd's freshness
# check reuses a kept-alive connection): every freshness check hangs until [docker] timeout,
# (3) resets every connection. refresh = 2s keeps a freshness check due or under way at every
# login. While hanging, the proxy counts the requests it holds: each login notes whether a
# check was hanging both when it came and when the pause was sent, and the bench fails when
# none was (the figures would not be of a hanging registry). A login with no pause within 5 s
# is a failure, counted in the figures (as "> 5000 ms") and in the exit status.
# Needs tests/setup-docker.sh first (engine, registry on 127.0.0.1:5000, test images); run as
# root.   LOGINS=10 tests/bench/registry_outage.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${PILOTD_BIN:-$here/target/release/pilotd}
[ -x "$bin" ] || { (cd "$here" && cargo build --release -q --bin pilotd); }
logins=${LOGINS:-10}
d=$(mktemp -d); inst="regout$$"
cleanup() {
  set +e
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null
  [ -n "${proxy:-}" ] && kill "$proxy" 2>/dev/null
  docker ps -aq --filter "label=pilotd.instance=$inst" | xargs -r docker rm -f >/dev/null
  # The pull through the proxy left a tag and a digest reference under its port.
  [ -n "${port:-}" ] && docker images --digests --format '{{.Repository}}@{{.Digest}} {{.Repository}}:{{.Tag}}' \
    "127.0.0.1:$port/pilotd-test/worker" | tr ' ' '\n' | grep -v -e '@<none>$' -e ':<none>$' \
    | xargs -r docker rmi >/dev/null 2>&1
  rm -rf "$d"
}
trap cleanup EXIT

# The proxy: its mode is the content of $d/mode (forward | hang | down).
echo forward >"$d/mode"
python3 "$here/tests/bench/registry_proxy.py" "$d/mode" "$d/port" "$d/stats" & proxy=$!
for _ in $(seq 50); do [ -s "$d/port" ] && break; sleep 0.1; done
port=$(cat "$d/port")
# Registry requests received and not answered yet (during the hang: hanging now).
pending() { awk '{ print $6 }' "$d/stats"; }

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
cpus = 1
memory = "512MiB"
disk = "1GiB"
workers = 1
[jobs]
longest_job = "1h"
P
cat >"$d/pilotd.toml" <<C
splay = "0s"
policy = "$d/policy.toml"
state_dir = "$d/state"
interval = "2s"
[host]
utmp = "$d/utmp"
scratch = "$d/scratch"
[docker]
instance = "$inst"
timeout = "30s"
[worker]
image = "127.0.0.1:$port/pilotd-test/worker:v1"
allowed_images = ["127.0.0.1:$port/*"]
refresh = "2s"
C
: >"$d/utmp"
printf '[7] [%05d] [ts/0] [alice   ] [pts/0       ] [10.0.0.5            ] [10.0.0.5       ] [2026-11-30T05:00:00,000000+00:00]\n' $$ | utmpdump -r >"$d/login.bin" 2>/dev/null
RUST_LOG=pilotd=info "$bin" -c "$d/pilotd.toml" run 2>"$d/log" & pid=$!
for _ in $(seq 300); do [ "$(docker ps -q --filter "label=pilotd.instance=$inst" --filter status=running | wc -l)" -ge 1 ] && break; sleep 0.2; done
[ "$(docker ps -q --filter "label=pilotd.instance=$inst" --filter status=running | wc -l)" -ge 1 ] || { echo "no worker started (see $d/log)"; cat "$d/log"; exit 1; }

failed=0
run() { # MODE
  echo "$1" >"$d/mode"
  sleep 3   # a freshness check is now due or under way against the $1 registry
  if [ "$1" = hang ]; then # and hanging: wait for one (35 s at most, past one [docker] timeout)
    for _ in $(seq 320); do [ "$(pending)" -ge 1 ] && break; sleep 0.1; done
  fi
  local lat=() i n m t0 t1 h0 hung=0 timeouts=0
  for i in $(seq "$logins"); do
    n=$(grep -c 'paused:' "$d/log" || true)
    h0=$(pending)
    t0=$(date +%s.%N); cat "$d/login.bin" >"$d/utmp"
    for _ in $(seq 500); do [ "$(grep -c 'paused:' "$d/log" || true)" -gt "$n" ] && break; sleep 0.01; done
    if [ "$(grep -c 'paused:' "$d/log" || true)" -gt "$n" ]; then
      t1=$(grep 'paused:' "$d/log" | tail -1 | cut -c1-27); t1=$(date -d "$t1" +%s.%N)
      lat+=("$(echo "($t1 - $t0) * 1000" | bc -l)")
    else
      timeouts=$((timeouts + 1))
    fi
    [ "$h0" -ge 1 ] && [ "$(pending)" -ge 1 ] && hung=$((hung + 1))
    m=$(grep -c 'resumed:' "$d/log" || true); : >"$d/utmp"
    for _ in $(seq 500); do [ "$(grep -c 'resumed:' "$d/log" || true)" -gt "$m" ] && break; sleep 0.01; done
    sleep 1.5   # the next check starts against the same registry
  done
  { [ ${#lat[@]} -eq 0 ] || printf '%s\n' "${lat[@]}"; } | sort -n | awk -v m="$1" -v t="$timeouts" -v h="$hung" -v hang="$([ "$1" = hang ] && echo 1)" '
    { a[NR] = $1 }
    function f(i) { return i <= NR ? sprintf("%.0f ms", a[i]) : "> 5000 ms" }
    END { n = NR + t; i50 = int(n * 0.5 + 0.5); i95 = int(n * 0.95 + 0.5); if (i50 < 1) i50 = 1; if (i95 < 1) i95 = 1
      printf "registry %-7s login -> pause sent: p50 %s  p95 %s  max %s  (n=%d%s)%s\n", m, f(i50), f(i95), f(n), n,
        t ? sprintf(", %d with no pause within 5 s", t) : "",
        hang ? sprintf("; a check hanging from the login to the pause at %d of %d", h, n) : "" }'
  failed=$((failed + timeouts))
  if [ "$1" = hang ] && [ "$hung" -lt 1 ]; then
    echo "registry hang: no login came while a freshness check hung ($(cat "$d/stats")): not a hanging registry's figures"
    failed=$((failed + 1))
  fi
}
run forward
run hang
echo "  proxy: $(cat "$d/stats")"
run down
echo "registry failures logged meanwhile: $(grep -c 'running workers are unaffected' "$d/log" || true)"
exit $((failed > 0))
