#!/bin/sh
# Real components for pilotd's Docker integration tests, idempotently and without internet:
#  1. a Docker engine that answers (the running one; else Debian's docker.io, started here);
#  2. Debian's docker-registry on 127.0.0.1:5000 (config: tests/images/worker/registry.yml);
#  3. two test worker images built locally with `docker import` (busybox-static + a script),
#     pushed under ONE tag in turn so tests can move the tag:
#       127.0.0.1:5000/pilotd-test/worker:v1   image "v1"
#       127.0.0.1:5000/pilotd-test/worker:v2   image "v2"
#       127.0.0.1:5000/pilotd-test/worker:current  -> v1 (tests re-point it with tag-move.sh)
# Prints the environment the tests need (eval-able) on its last lines.
#
# Usage: tests/setup-docker.sh            (as root)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${PILOTD_TEST_WORK:-/tmp/pilotd-docker-tests}
registry=127.0.0.1:5000
repo=$registry/pilotd-test/worker
mkdir -p "$work"
log() { echo "setup-docker: $*" >&2; }

need_apt() {
    if ! dpkg -s "$1" >/dev/null 2>&1; then
        log "installing $1"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >&2 || {
            apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >&2
        }
    fi
}

# 1. Docker engine.
if ! docker info >/dev/null 2>&1; then
    need_apt docker.io
    if ! docker info >/dev/null 2>&1; then
        log "starting dockerd (log: $work/dockerd.log)"
        # Long-lived: without the systemd suite's lock (fd 9), which it would hold for as
        # long as it runs, blocking the next suite.
        nohup dockerd >"$work/dockerd.log" 2>&1 9>&- &
        i=0
        until docker info >/dev/null 2>&1; do
            i=$((i + 1))
            [ $i -gt 60 ] && { log "dockerd did not come up; see $work/dockerd.log"; exit 1; }
            sleep 1
        done
    fi
fi
command -v docker-init >/dev/null 2>&1 || log "warning: docker-init not found; workers use HostConfig.init"

# 2. Registry.
if ! curl -fsS -m 2 "http://$registry/v2/" >/dev/null 2>&1; then
    need_apt docker-registry
    mkdir -p "$work/registry-storage"
    sed "s#@STORAGE@#$work/registry-storage#" "$here/images/worker/registry.yml" >"$work/registry.yml"
    log "starting docker-registry on $registry (log: $work/registry.log)"
    # Debian installs it as a service too; a service already on :5000 answered above.
    nohup docker-registry serve "$work/registry.yml" >>"$work/registry.log" 2>&1 9>&- &
    echo $! >"$work/registry.pid"
    i=0
    until curl -fsS -m 2 "http://$registry/v2/" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -gt 30 ] && { log "registry did not come up; see $work/registry.log"; exit 1; }
        sleep 0.5
    done
fi

# 3. Images: a root filesystem of busybox-static plus the entrypoint, one per version.
need_apt busybox-static
busybox=$(command -v busybox || echo /bin/busybox)
# The label names the version and the entrypoint's content, so a changed entrypoint rebuilds.
content=$(cat "$here/images/worker/entrypoint" "$0" | sha256sum | cut -c1-12)
build() { # build VERSION
    if docker image inspect "$repo:$1" >/dev/null 2>&1 \
        && [ "$(docker image inspect -f '{{index .Config.Labels "pilotd.test-image"}}' "$repo:$1")" = "$1-$content" ]; then
        return 0
    fi
    root=$(mktemp -d)
    mkdir -p "$root/bin" "$root/etc/pilotd" "$root/tmp" "$root/proc" "$root/sys" "$root/dev" "$root/pilot"
    cp "$busybox" "$root/bin/busybox"
    for a in sh sleep cat echo kill ls id true dd wget nc; do ln -s busybox "$root/bin/$a"; done
    cp "$here/images/worker/entrypoint" "$root/entrypoint"
    chmod 755 "$root/entrypoint"
    echo "$1" >"$root/etc/worker-version"
    chmod 1777 "$root/tmp"
    log "building $repo:$1"
    tar -C "$root" -c . | docker import \
        -c 'ENTRYPOINT ["/entrypoint"]' -c 'ENV PATH=/bin' \
        -c "LABEL pilotd.test-image=$1-$content" - "$repo:$1" >/dev/null
    rm -rf "$root"
}
build v1
build v2
for v in v1 v2; do docker push -q "$repo:$v" >/dev/null; done
# `current` starts at v1; tests move it with tests/images/worker/tag-move.sh.
"$here/images/worker/tag-move.sh" v1 >/dev/null

echo "PILOTD_TEST_REGISTRY=$registry"
echo "PILOTD_TEST_REPO=$repo"
