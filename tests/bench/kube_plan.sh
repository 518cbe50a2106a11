#!/bin/sh
# Benchmark of kubernetes mode (not a test; prints figures):
#  1. `pilotd plan --snapshot` on a generated snapshot of 100,000 idle jobs over 10 schedds and
#     5,000 pods with real API server bodies (about 8.7 kB each, 66 MB of JSON): CPU time and
#     peak RSS (goal: < 0.3 s of CPU, < 150 MiB);
#  2. the API requests one live cycle makes against the fake API server with 5,000 pods
#     (goal: one pod list and one Job list, paginated, plus one request per Job created or
#     deleted).
# Usage: tests/bench/kube_plan.sh [JOBS] [PODS]   (from the repository root)
set -eu
JOBS=${1:-100000}
PODS=${2:-5000}
SCHEDDS=10
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
cargo build --release --bin pilotd >/dev/null 2>&1 || cargo build --release --bin pilotd
bin=${CARGO_TARGET_DIR:-$root/target}/release/pilotd
awk -v JOBS="$JOBS" -v SCHEDDS="$SCHEDDS" -v PODS="$PODS" -f tests/bench/gen_kube_snapshot.awk > "$work/snapshot.json"
cat > "$work/pilotd.toml" <<TOML
mode = "kubernetes"
state_dir = "$work/state"

[kubernetes]
namespace = "osg-opportunistic"
app_name = "osg-direct"
TOML
echo "snapshot: $JOBS idle jobs, $SCHEDDS schedds, $PODS pods, $(du -h "$work/snapshot.json" | cut -f1) of JSON"
# Eleven runs: the median of user + sys CPU, its range, and the largest peak RSS.
for run in 1 2 3 4 5 6 7 8 9 10 11; do
    /usr/bin/time -o "$work/time" -f "%U %S %M" \
        "$bin" -c "$work/pilotd.toml" plan --snapshot "$work/snapshot.json" --format json --now 2026-12-01T21:30:00Z > "$work/plan.json"
    cat "$work/time"
done | awk '{ print $1 + $2, $3 }' | sort -n | awk '
    { cpu[NR] = $1; if ($2 > rss) rss = $2 }
    END { printf "plan --snapshot, %d runs: CPU median %.2f s (%.2f-%.2f s, user + sys), peak RSS %.0f MiB\n", NR, cpu[int((NR + 1) / 2)], cpu[1], cpu[NR], rss / 1024 }'
echo "plan: $(grep -c '"idle_jobs"' "$work/plan.json") shapes, $(grep -c '"backoffLimit"' "$work/plan.json") Job bodies"
PILOTD_BENCH_SNAPSHOT="$work/snapshot.json" cargo test --release --test it -- --ignored --nocapture kubernetes::bench 2>/dev/null | grep '^library replay'
cargo test --release --test it -- --ignored --nocapture kubernetes::cycle::api_requests_of_one_live_cycle 2>/dev/null | grep '^api requests'
