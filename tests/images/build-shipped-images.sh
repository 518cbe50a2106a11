#!/usr/bin/env bash
# Builds the shipped images from the shipped /Dockerfile, offline, as a site builds them from its
# own HTCondor base (docs/site.md, "The worker image"): the `worker` target on the test pool's
# site base (Debian's condor plus the test CA, tests/images/worker-base) and the `provisioner`
# target on Debian's condor (its client tools). The binaries come from the build context
# (BINARIES=context): this checkout's pilot and pilotd, built here (debug, glibc: the bases are
# Debian trixie, newer than the build host's Debian 12), and Debian's tini-static from BASE.
# The classic builder, so no BuildKit (buildx) is needed.
#
# Usage: tests/images/build-shipped-images.sh BASE CA_FILE
#   BASE: the Debian condor image (tests/images/build-debian-image.sh ... condor ca-certificates tini)
#   prints two tags, the worker's then the provisioner's, each named by a hash of all its
#   inputs (the Dockerfile, the binaries, the base, the files copied in, this script), so a
#   second call with the same inputs only inspects them.
set -euo pipefail
base=$1 ca=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}
log() { echo "build-shipped-images: $*" >&2; }
hash() { cat "$@" | sha256sum | cut -c1-12; }

build() { # TAG ARGS...: docker build, quiet unless it fails
    local tag=$1 out; shift
    local start=$SECONDS
    out=$(mktemp)
    # --force-rm: a failed step leaves no stopped container behind.
    if ! DOCKER_BUILDKIT=0 docker build --force-rm "$@" -t "$tag" >"$out" 2>&1; then
        tail -n 40 "$out" >&2; rm -f "$out"; log "building $tag failed"; exit 1
    fi
    rm -f "$out"
    log "built $tag in $((SECONDS - start)) s"
}

# dist/: the binaries the Dockerfile takes with BINARIES=context. Debug info stripped (the
# debug pilotd is 290 MB with it, 70 MB without); rewritten only when changed.
( cd "$repo" && cargo build -q -p pilot -p pilotd --bin pilot --bin pilotd )
mkdir -p "$repo/dist"
stage() { # SRC NAME
    local tmp="$repo/dist/.$2.new"
    objcopy --strip-debug "$1" "$tmp"
    if cmp -s "$tmp" "$repo/dist/$2"; then rm -f "$tmp"; else mv "$tmp" "$repo/dist/$2"; fi
}
stage "$target_dir/debug/pilot" pilot
stage "$target_dir/debug/pilotd" pilotd
docker run --rm --entrypoint cat "$base" /usr/bin/tini-static >"$repo/dist/.tini.new"
chmod 755 "$repo/dist/.tini.new"
if cmp -s "$repo/dist/.tini.new" "$repo/dist/tini"; then rm -f "$repo/dist/.tini.new"; else mv "$repo/dist/.tini.new" "$repo/dist/tini"; fi

# The site base: Debian's condor and the site's (here: the test pool's) CA.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
install -m 644 "$ca" "$ctx/extra-ca.crt"
cp "$here/worker-base/Dockerfile" "$ctx/Dockerfile"
site_base=pilotd-test/worker-base:$(hash "$ctx/extra-ca.crt" "$ctx/Dockerfile" <(echo "$base"))
docker image inspect "$site_base" >/dev/null 2>&1 \
    || build "$site_base" -q --build-arg BASE="$base" "$ctx"

# Both targets from the one Dockerfile. The classic builder builds every stage before the
# target, so both bases are given to both builds.
args=(-q -f "$repo/Dockerfile" --build-arg BINARIES=context
      --build-arg WORKER_BASE="$site_base" --build-arg PROVISIONER_BASE="$base")
worker=pilotd-test/condor-worker:$(hash "$repo/Dockerfile" "$repo/dist/pilot" "$repo/dist/tini" "$0" \
    <(echo "$site_base"))
docker image inspect "$worker" >/dev/null 2>&1 || build "$worker" "${args[@]}" --target worker "$repo"
provisioner=pilotd-test/provisioner:$(hash "$repo/Dockerfile" "$repo/dist/pilotd" "$repo/dist/tini" "$0" \
    "$repo/deploy/kubernetes/condor-client.conf" <(echo "$base"))
docker image inspect "$provisioner" >/dev/null 2>&1 \
    || build "$provisioner" "${args[@]}" --target provisioner "$repo"
echo "$worker"
echo "$provisioner"
