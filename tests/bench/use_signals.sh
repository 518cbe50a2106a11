#!/bin/sh
# What looking for sound and cameras in use costs a cycle on this machine (not a test: it
# asserts nothing timed): the one walk over /proc with and without every descriptor's link
# read, and ALSA's status files. Prints medians in microseconds; run as root to walk every
# process's descriptors, as the daemon does.
#   tests/bench/use_signals.sh     (from anywhere)
set -eu
cd "$(dirname "$0")/../.."
out=$(mktemp); trap 'rm -f "$out"' EXIT
rc=0
nice -n 10 cargo test --quiet --release -p pilotd-volunteer --lib media::tests::bench:: -- --ignored --nocapture >"$out" 2>&1 || rc=$?
grep -E '^(use signals|  [a-z])' "$out" || cat "$out"
exit "$rc"
