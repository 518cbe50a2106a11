#!/bin/sh
# Points 127.0.0.1:5000/pilotd-test/worker:current at image VERSION (v1 or v2) in the registry,
# the way a release moves a tag. Prints the new digest.
set -eu
repo=${PILOTD_TEST_REPO:-127.0.0.1:5000/pilotd-test/worker}
docker tag "$repo:$1" "$repo:current"
docker push "$repo:current" 2>/dev/null | sed -n 's/.*digest: \(sha256:[0-9a-f]*\).*/\1/p'
