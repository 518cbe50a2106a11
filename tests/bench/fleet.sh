#!/bin/sh
# Fleet benchmark (issue 22; not a test of the machine, it needs no engine): 10,000 virtual
# hosts with seeded random machine ids share one policy for a simulated week, each driven by
# pilotd's own pure scheduling code (settings → splay, policy::decide, plan::plan, the
# manifest's Refresh) at the instants its daemon would wake. Prints the per-second peak and
# median of registry pulls, collector registrations (worker starts) and manifest fetches,
# without splay and with it, and fails when a peak exceeds 2 × hosts ÷ splay seconds or a first
# start comes later than the splay after its host could start.
#   FLEET_HOSTS=10000 FLEET_SPLAY_S=300 tests/bench/fleet.sh     (from anywhere)
# The peak target is a fleet's: below a few thousand hosts, random peaks pass twice the mean.
set -eu
cd "$(dirname "$0")/../.."
out=$(mktemp); trap 'rm -f "$out"' EXIT
rc=0
cargo test --quiet -p pilotd-volunteer --lib splay::tests::bench:: -- --ignored --nocapture >"$out" 2>&1 || rc=$?
grep -E '^(splay|  [a-z])' "$out" || cat "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: a target was missed (see above)" >&2; exit "$rc"; }
