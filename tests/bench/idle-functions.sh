#!/bin/bash
# Writes packaging/idle-functions.txt: the functions the volunteer daemon runs while it idles,
# which packaging/link-idle-first places side by side in the package's binary. Run it again
# when the idle cycle changes (new signals, a dependency's upgrade); a function missing from
# the list still runs, its page just stays resident beside code nothing runs.
#
# How: the package's build runs idle (tests/bench/idle-daemon.sh: schedule closed today, the
# default interval) under valgrind's callgrind. Its counters are zeroed as it becomes ready
# (as it lets go of start-up's pages), so start-up is left out; after DURATION seconds the
# functions that ran are dumped, demangled without their hashes (so the list survives a
# rebuild). Two runs, as donated
# machines differ: one with no system bus (a server), one asking a real systemd-logind and
# NetworkManager with alice logged in (tests/bench/idle-daemon.sh's idle_bus_start). The list
# is the union of both: what both ran first.
#   DURATION=600 tests/bench/idle-functions.sh                 # about 2 x DURATION
#   PILOTD_BIN=target/volunteer/pilotd OUT=/tmp/idle.txt DURATION=120 RUNS=host tests/bench/idle-functions.sh
# Needs root (the Docker engine's socket; tests/setup-docker.sh) and valgrind (installed here
# when missing). The registry need not run: a failing image check is part of what idles.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
duration=${DURATION:-600}
out=${OUT:-$here/packaging/idle-functions.txt}
command -v valgrind >/dev/null || {
    echo "idle-functions: installing valgrind" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
}
. "$here/tests/bench/idle-daemon.sh"
bin=${PILOTD_BIN:-$here/target/volunteer/pilotd}
[ -n "${PILOTD_BIN:-}" ] || volunteer_build

runs=${RUNS:-host bus}
d=$(mktemp -d); pid=; idle_bus_container=
cleanup() {
    [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
    [ -z "$idle_bus_container" ] || docker rm -f "$idle_bus_container" >/dev/null 2>&1 || true
    wait 2>/dev/null || true
    rm -rf "$d"
}
trap cleanup EXIT

# record RUN: the daemon idles under callgrind, its counters zeroed as it enters the function
# that lets go of start-up's pages (the moment it is ready); the dump of what ran from then on,
# for DURATION seconds, is $d/RUN.out.
record() {
    local run=$1 dir=$d/$1
    idle_daemon_config "$dir" "idlefns$$$run"
    "$bin" -c "$dir/pilotd.toml" check >/dev/null
    env ${bus:+DBUS_SYSTEM_BUS_ADDRESS=$bus} \
        valgrind --tool=callgrind --demangle=no --dump-instr=no --zero-before='*shed_startup_pages*' \
        --callgrind-out-file="$dir/cg.out" "$bin" -c "$dir/pilotd.toml" run >/dev/null 2>"$dir/log" &
    pid=$!
    for _ in $(seq 120); do
        grep -q 'ready: ' "$dir/log" && break
        kill -0 "$pid" 2>/dev/null || { cat "$dir/log" >&2; echo "idle-functions: the daemon exited" >&2; exit 1; }
        sleep 1
    done
    grep -q 'ready: ' "$dir/log" || { cat "$dir/log" >&2; echo "idle-functions: the daemon never said it was ready" >&2; exit 1; }
    echo "idle-functions: $run: ready; recording the idle daemon for ${duration} s" >&2
    sleep "$duration"
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    cp "$(ls "$dir"/cg.out.* | tail -n 1)" "$d/$run.out"
}

dumps=()
for run in $runs; do
    bus=
    case $run in
        host) ;;
        bus) idle_bus_start "$d"; bus=$idle_bus ;;
        *) echo "idle-functions: unknown run '$run' (host, bus)" >&2; exit 1 ;;
    esac
    record "$run"
    dumps+=("$d/$run.out")
done

# The program's functions that ran after the zeroing (callgrind names a function once in full,
# as "(id) name", then by its id alone), by their demangled names from the binary's own symbol
# table, paired line by line. Placed first, those every run ran; then those of some runs (on a
# machine without the bus, its code then sits apart from what runs); by name within each.
nm --defined-only --no-sort "$bin" | cut -d' ' -f3- >"$d/mangled"
nm --defined-only --no-sort -C "$bin" | cut -d' ' -f3- >"$d/demangled"
paste -d '\t' "$d/mangled" "$d/demangled" >"$d/pairs"
python3 - "$(readlink -f "$bin")" "$d/pairs" "${dumps[@]}" >"$d/list" <<'PY'
import os, re, sys


def lookup(table, s):
    m = re.match(r'\((\d+)\)(?: (.*))?$', s)
    if not m:
        return s
    if m.group(2) is not None:
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1))


def ran_in(dump, obj):
    names, objs, ran = {}, {}, set()
    cur = call = None
    for line in open(dump, errors='replace'):
        line = line.rstrip('\n')
        if line.startswith('ob='):
            cur = lookup(objs, line[3:])
        elif line.startswith('cob='):
            call = lookup(objs, line[4:])
        elif line.startswith(('fn=', 'cfn=')):
            key, _, rest = line.partition('=')
            name = lookup(names, rest)
            where = call if key == 'cfn' and call else cur
            if where and os.path.realpath(where) == obj and name:
                ran.add(name)
            call = None
    return ran


obj, pairs, dumps = sys.argv[1], sys.argv[2], sys.argv[3:]
demangled = dict(line.rstrip('\n').split('\t', 1) for line in open(pairs) if '\t' in line)
runs = {}
for dump in dumps:
    for name in {demangled[m] for m in ran_in(dump, obj) if m in demangled}:
        runs[name] = runs.get(name, 0) + 1
for name in sorted(runs, key=lambda n: (-runs[n], n)):
    print(name)
PY
[ -s "$d/list" ] || { echo "idle-functions: no function of $bin was recorded" >&2; exit 1; }
cp "$d/list" "$out"
echo "idle-functions: $(wc -l <"$out") functions written to $out" >&2
