#!/bin/bash
# Proves that a change of the code's shape left every decision as it was: replays a corpus of
# snapshots through two builds of pilotd, `plan --snapshot F --now T --format json` (text too),
# and compares the outputs byte for byte.
#
#   tests/plan-identity.sh OLD_PILOTD NEW_PILOTD
#
# The volunteer corpus: 4 snapshots (the two fixtures, and the busy evening on battery and with
# the owner's CPU high) x 4 policies (the three shipped ones and a Rome week) x 18 instants
# (every day of a week, morning, evening, midnight, and the edges of the shipped windows) =
# 288 combinations. The kubernetes corpus: the fixture and two generated snapshots, each with
# the INI fixture converted by the OLD build, at 3 instants, plus one check of every policy.
# Prints how many outputs were compared; exits 1 at the first difference, showing it.
set -euo pipefail
old=$1
new=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$root/tests/fixtures/volunteer/evening-alice.json" "$work" <<'EOF'
import json, sys
src, out = sys.argv[1], sys.argv[2]
s = json.load(open(src))
battery = dict(s, on_battery=True)
json.dump(battery, open(f"{out}/battery.json", "w"))
busy = dict(s, cpu_busy=0.92, load=[7.5, 7.0, 6.0], owner_busy_since="2026-12-01T21:20:00Z")
json.dump(busy, open(f"{out}/busy.json", "w"))
EOF

snapshots=("$root/tests/fixtures/volunteer/evening-alice.json"
    "$root/tests/fixtures/volunteer/evening-free.json" "$work/battery.json" "$work/busy.json")
policies=("$root/policies/default.toml" "$root/policies/nights-and-weekends.toml"
    "$root/policies/dedicated-server.toml" "$root/tests/fixtures/volunteer/rome.toml")
instants=(2026-11-30T06:00:00Z 2026-11-30T18:59:00Z 2026-11-30T19:00:00Z 2026-12-01T07:29:00Z
    2026-12-01T07:30:00Z 2026-12-01T12:00:00Z 2026-12-01T21:30:00Z 2026-12-02T00:00:00Z
    2026-12-02T23:59:59Z 2026-12-03T08:00:00Z 2026-12-03T17:00:00Z 2026-12-04T06:30:00Z
    2026-12-04T22:00:00Z 2026-12-05T00:00:00Z 2026-12-05T13:00:00Z 2026-12-06T10:00:00Z
    2026-12-06T23:00:00Z 2026-12-07T03:00:00Z)

compared=0
same() { # LABEL ARGS...: the two builds print the same, with the same exit code
    local label=$1
    shift
    local a b ra=0 rb=0
    a=$("$old" "$@" 2>&1) || ra=$?
    b=$("$new" "$@" 2>&1) || rb=$?
    if [ "$a" != "$b" ] || [ "$ra" != "$rb" ]; then
        echo "DIFFERENT: $label ($*)" >&2
        diff <(echo "$a"; echo "exit $ra") <(echo "$b"; echo "exit $rb") >&2 || true
        exit 1
    fi
    compared=$((compared + 1))
    echo "$a" | sha256sum >> "$work/seen"
}

# The built-in pilotd.toml but for the engine: a replay asks the engine for its workers and
# the registry for the image's digest, which would make the comparison depend on them (and
# send a DNS query per run); with no engine both builds see none, alike.
none=$work/site.toml
printf '[docker]\nsocket = "unix://%s/no-engine.sock"\n' "$work" > "$none"
for s in "${snapshots[@]}"; do
    for p in "${policies[@]}"; do
        for t in "${instants[@]}"; do
            same volunteer -c "$none" plan --policy "$p" --snapshot "$s" --now "$t" --format json
        done
        same text -c "$none" plan --policy "$p" --snapshot "$s" --format text
    done
done
for p in "${policies[@]}"; do
    same check -c "$none" check --policy "$p"
done

"$old" import-ini "$root/tests/fixtures/kubernetes/osg_provisioner.conf" > "$work/kube.toml"
cp "$root/tests/fixtures/kubernetes/snapshot.json" "$work/k0.json"
awk -v JOBS=2000 -v SCHEDDS=3 -v PODS=100 -f "$root/tests/bench/gen_kube_snapshot.awk" > "$work/k1.json"
awk -v JOBS=50 -v SCHEDDS=2 -v PODS=400 -f "$root/tests/bench/gen_kube_snapshot.awk" > "$work/k2.json"
for k in "$work"/k0.json "$work"/k1.json "$work"/k2.json; do
    for t in 2026-12-01T21:30:00Z 2026-12-01T22:30:00Z 2026-12-03T09:00:00Z; do
        same kubernetes -c "$work/kube.toml" plan --snapshot "$k" --now "$t" --format json
    done
    same kubernetes-text -c "$work/kube.toml" plan --snapshot "$k" --now 2026-12-01T21:30:00Z --format text
done
same kubernetes-check -c "$work/kube.toml" check
# A corpus whose outputs were all alike would prove little: say how many differ.
echo "identical: $compared outputs, $(sort -u "$work/seen" | wc -l) distinct ($((${#snapshots[@]} * ${#policies[@]} * ${#instants[@]})) volunteer plan combinations)"
