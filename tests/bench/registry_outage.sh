#!/bin/bash
# Login -> eviction latency while the worker image's registry is slow or down (a figure, not a
# test): evictions must never wait on a registry. The worker's image is pulled through a proxy
# on 127.0.0.1 in front of the test registry; the proxy then (1) forwards, (2) accepts and
# never answers ("slow": every freshness check hangs until [docker] timeout), (3) refuses
# ("down"). refresh = 2s keeps a freshness check due or under way at every login.
# Needs tests/setup-docker.sh first (engine, registry on 127.0.0.1:5000, test images); run as
# root.   LOGINS=10 tests/bench/registry_outage.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${PILOTD_BIN:-$here/target/release/pilotd}
[ -x "$bin" ] || { (cd "$here" && cargo build --release -q --bin pilotd); }
logins=${LOGINS:-10}
d=$(mktemp -d); inst="regout$$"
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null
  [ -n "${proxy:-}" ] && kill "$proxy" 2>/dev/null
  docker ps -aq --filter "label=pilotd.instance=$inst" | xargs -r docker rm -f >/dev/null
  rm -rf "$d"
}
trap cleanup EXIT

# The proxy: its mode is the content of $d/mode (forward | hang | down), read per connection.
echo forward >"$d/mode"
cat >"$d/proxy.py" <<'PY'
import socket, sys, threading
mode_file, port_file = sys.argv[1], sys.argv[2]
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(64)
open(port_file, "w").write(str(srv.getsockname()[1]))
held = []
def pipe(a, b):
    try:
        while (data := a.recv(65536)):
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass
while True:
    c, _ = srv.accept()
    mode = open(mode_file).read().strip()
    if mode == "hang":
        held.append(c)          # accepted, never answered
    elif mode == "down":
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        c.close()               # reset at once
    else:
        u = socket.create_connection(("127.0.0.1", 5000))
        threading.Thread(target=pipe, args=(c, u), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()
PY
python3 "$d/proxy.py" "$d/mode" "$d/port" & proxy=$!
for _ in $(seq 50); do [ -s "$d/port" ] && break; sleep 0.1; done
port=$(cat "$d/port")

cat >"$d/policy.toml" <<P
timezone = "UTC"
[schedule]
windows = [ { days = "daily", from = "00:00", to = "24:00" } ]
[owner]
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

run() { # MODE
  echo "$1" >"$d/mode"
  sleep 3   # a freshness check is now due or under way against the $1 registry
  local lat=() i n m t0 t1
  for i in $(seq "$logins"); do
    n=$(grep -c 'paused:' "$d/log" || true)
    t0=$(date +%s.%N); cat "$d/login.bin" >"$d/utmp"
    for _ in $(seq 500); do [ "$(grep -c 'paused:' "$d/log" || true)" -gt "$n" ] && break; sleep 0.01; done
    [ "$(grep -c 'paused:' "$d/log" || true)" -gt "$n" ] || { echo "$1: no pause within 5 s of a login (see $d/log)"; exit 1; }
    t1=$(grep 'paused:' "$d/log" | tail -1 | cut -c1-27); t1=$(date -d "$t1" +%s.%N)
    lat+=("$(echo "($t1 - $t0) * 1000" | bc -l)")
    m=$(grep -c 'resumed:' "$d/log" || true); : >"$d/utmp"
    for _ in $(seq 500); do [ "$(grep -c 'resumed:' "$d/log" || true)" -gt "$m" ] && break; sleep 0.01; done
    sleep 1.5   # the next check starts against the same registry
  done
  printf '%s\n' "${lat[@]}" | sort -n | awk -v m="$1" '{a[NR]=$1} END {printf "registry %-7s login -> pause sent: p50 %.0f ms  p95 %.0f ms  max %.0f ms  (n=%d)\n", m, a[int(NR*0.5+0.5)], a[int(NR*0.95+0.5)], a[NR], NR}'
}
run forward
run hang
run down
echo "registry failures logged meanwhile: $(grep -c 'running workers are unaffected' "$d/log" || true)"
