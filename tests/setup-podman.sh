#!/bin/sh
# Podman's Docker-compatible API for pilotd's Docker integration tests, idempotently and
# without internet (after tests/setup-docker.sh, whose registry and images it reuses):
#  1. Debian's podman and catatonit (the init a worker's HostConfig.Init asks for);
#  2. the loopback test registry marked insecure (plain HTTP) for podman;
#  3. `podman system service` on a socket of its own, with this host's hard limits as the
#     default ulimits (podman's default nofile=1048576 is above them here, and runc then fails
#     with "error setting rlimit type 7: operation not permitted"; pilotd's own workers name
#     their ulimits explicitly and need no such default).
# Prints the environment the tests need (eval-able) on its last lines: the engine socket for
# pilotd (PILOTD_TEST_ENGINE_SOCKET) and for the docker CLI the tests inspect with (DOCKER_HOST).
#
# Usage: tests/setup-podman.sh            (as root)
set -eu
work=${PILOTD_TEST_WORK:-/tmp/pilotd-docker-tests}/podman
mkdir -p "$work"
log() { echo "setup-podman: $*" >&2; }

for p in podman catatonit; do
    if ! dpkg -s "$p" >/dev/null 2>&1; then
        log "installing $p"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$p" >&2 || {
            apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$p" >&2
        }
    fi
done

mkdir -p /etc/containers/registries.conf.d
cat >/etc/containers/registries.conf.d/50-pilotd-test.conf <<'CONF'
# pilotd's tests (tests/setup-podman.sh): the loopback test registry speaks plain HTTP.
[[registry]]
location = "127.0.0.1:5000"
insecure = true
CONF

cat >"$work/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=32768:32768"]
CONF

sock=$work/podman.sock
# A service whose working directory is gone (the checkout it was started from, removed since)
# answers pings but starts no container ("conmon: Failed to get working directory"): stop it.
pid=$(cat "$work/service.pid" 2>/dev/null || true)
if [ -n "$pid" ] && case "$(readlink "/proc/$pid/cwd" 2>/dev/null)" in *" (deleted)") true;; *) false;; esac; then
    log "podman service $pid lost its working directory; restarting it"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do [ -e "/proc/$pid" ] || break; sleep 0.25; done
    rm -f "$sock"
fi
if ! curl -fsS -m 2 --unix-socket "$sock" http://podman/_ping >/dev/null 2>&1; then
    log "starting podman system service on $sock (log: $work/service.log)"
    # From /, as a daemon does: it outlives the checkout that started it.
    (cd / && CONTAINERS_CONF="$work/containers.conf" exec nohup podman system service --time=0 \
        "unix://$sock" >>"$work/service.log" 2>&1) &
    echo $! >"$work/service.pid"
    i=0
    until curl -fsS -m 2 --unix-socket "$sock" http://podman/_ping >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -gt 30 ] && { log "podman service did not come up; see $work/service.log"; exit 1; }
        sleep 0.5
    done
fi

# The test images, as setup-docker.sh left them in the registry: tests tag and push them.
for v in v1 v2; do
    podman pull -q "127.0.0.1:5000/pilotd-test/worker:$v" >/dev/null
done

echo "PILOTD_TEST_ENGINE_SOCKET=unix://$sock"
echo "DOCKER_HOST=unix://$sock"
