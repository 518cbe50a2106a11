#!/usr/bin/env bash
# A real HTCondor pool in containers, for the tests (and by hand; docs/development.md, "A real HTCondor pool
# for the tests"):
#   pilotd-pool-cm   central manager: collector + negotiator
#   pilotd-pool-ap   access point: schedd; ordinary users alice, bob and carol submit there
#   pilotd-pool-web  the pool's config server: https (test CA) on 8443, http on 8080
# on the Docker network `pilotd-pool`. IDTOKENS as real pools use them: the pool signing key
# lives on the central manager and the access point; the pool's daemons hold a token for
# condor@pilotd-test; workers get one for pilot@pilotd-test that may only advertise.
#
# Also builds (cached by tag) the Debian HTCondor image and, from the shipped /Dockerfile on it,
# the worker and provisioner images (tests/images/build-shipped-images.sh), and pushes the
# worker image to the local registry (tests/setup-docker.sh must have run) for pilotd to pull.
#
# Idempotent: containers whose configuration has not changed are kept. Prints the
# environment the tests need as eval-able lines. Needs root, docker, debootstrap.
#   tests/pool/up.sh          start (or keep) the pool
#   tests/pool/up.sh --down   remove its containers and network
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${PILOTD_POOL_DIR:-/var/tmp/pilotd-pool}
net=pilotd-pool
registry=${PILOTD_TEST_REGISTRY:-127.0.0.1:5000}
log() { echo "pool: $*" >&2; }

if [ "${1:-}" = --down ]; then
    docker rm -f pilotd-pool-cm pilotd-pool-ap pilotd-pool-web >/dev/null 2>&1 || true
    docker network rm "$net" >/dev/null 2>&1 || true
    exit 0
fi

base=$(bash "$repo/tests/images/build-debian-image.sh" pilotd-test/condor condor ca-certificates tini)
mkdir -p "$dir"/{keys,tokens,tls,www}
chmod 755 "$dir" "$dir/www"

# Secrets, made once and kept: the pool signing key, the test CA and the web server's cert.
in_base() { docker run --rm -i -e _CONDOR_TRUST_DOMAIN=pilotd-test -v "$dir/keys:/etc/condor/passwords.d" "$base" "$@"; }
if [ ! -s "$dir/keys/POOL" ]; then
    log "making the pool signing key"
    in_base sh -c 'openssl rand -base64 32 | condor_store_cred add -c -i - >/dev/null'
fi
chmod 600 "$dir/keys/POOL"
token() { # FILE IDENTITY [AUTHZ...]
    local file=$1 id=$2; shift 2
    if [ ! -s "$file" ]; then
        local args=(-identity "$id")
        for a in "$@"; do args+=(-authz "$a"); done
        in_base condor_token_create "${args[@]}" >"$file"
    fi
    chmod 600 "$file"
}
token "$dir/tokens/condor.token" condor@pilotd-test
token "$dir/tokens/worker.token" pilot@pilotd-test ADVERTISE_STARTD ADVERTISE_MASTER READ
# A token signed by another key: well-formed, but the pool must refuse it.
if [ ! -s "$dir/tokens/wrong.token" ]; then
    docker run --rm -e _CONDOR_TRUST_DOMAIN=pilotd-test "$base" sh -c \
        'mkdir -p /etc/condor/passwords.d && openssl rand -base64 32 | condor_store_cred add -c -i - >/dev/null &&
         condor_token_create -identity pilot@pilotd-test -authz ADVERTISE_STARTD -authz ADVERTISE_MASTER -authz READ' \
        >"$dir/tokens/wrong.token"
fi
if [ ! -s "$dir/tls/web.pem" ]; then
    log "making the test CA and the config server's certificate"
    docker run --rm -v "$dir/tls:/tls" -w /tls "$base" sh -c '
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=pilotd test CA" \
            -keyout ca.key -out ca.pem 2>/dev/null &&
        openssl req -newkey rsa:2048 -nodes -subj "/CN=pilotd-pool-web" \
            -keyout web.key -out web.csr 2>/dev/null &&
        printf "subjectAltName=DNS:pilotd-pool-web\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n" >ext &&
        openssl x509 -req -in web.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
            -extfile ext -out web.pem 2>/dev/null && rm -f web.csr ext ca.srl'
fi
chmod 644 "$dir/tls/web.pem" "$dir/tls/ca.pem"; chmod 600 "$dir/tls/web.key" "$dir/tls/ca.key"
install -m 644 "$here/worker-pool.conf" "$dir/www/pool.conf"

# The shipped images, built from the shipped /Dockerfile on Debian's condor as a site builds
# them (tests/images/build-shipped-images.sh; cached by a hash of their inputs). The worker
# image is pushed to the local registry for pilotd to pull.
images=$(bash "$repo/tests/images/build-shipped-images.sh" "$base" "$dir/tls/ca.pem")
worker_local=$(sed -n 1p <<<"$images")
provisioner_image=$(sed -n 2p <<<"$images")
worker_image=$registry/$worker_local
docker tag "$worker_local" "$worker_image"
docker push -q "$worker_image" >/dev/null

# The pool's containers, recreated only when what they run changed.
pkey=$(cat "$here/cm.conf" "$here/ap.conf" "$here/pool-common.conf" "$here/web.py" "$0" \
       <(echo "$base") | sha256sum | cut -c1-12)
docker network inspect "$net" >/dev/null 2>&1 || docker network create "$net" >/dev/null
current() { # NAME: running with this configuration?
    [ "$(docker inspect -f '{{.State.Running}} {{index .Config.Labels "pilotd.pool-key"}}' "$1" 2>/dev/null)" = "true $pkey" ]
}
run_daemon() { # NAME CONF
    local name=$1 conf=$2
    current "$name" && return 0
    docker rm -f "$name" >/dev/null 2>&1 || true
    log "starting $name"
    # A fully qualified host name, as every real pool has: condor_q -name resolves the schedd's
    # name as a host, and a bare container name has no domain ("unknown host").
    docker run -d --name "$name" --hostname "$name.pilotd.test" --network "$net" \
        --network-alias "$name.pilotd.test" \
        --label pilotd.pool-key="$pkey" --label pilotd.test-pool=true \
        -v "$here/pool-common.conf:/etc/condor/pool-common.conf:ro" \
        -v "$here/$conf:/etc/condor/config.d/90-pool.conf:ro" \
        -v "$dir/keys/POOL:/etc/condor/passwords.d/POOL:ro" \
        -v "$dir/tokens/condor.token:/etc/condor/tokens.d/condor.token:ro" \
        --entrypoint /bin/sh "$base" -c '
            for u in alice bob carol; do useradd -m -s /bin/sh "$u"; done
            mkdir -p /var/run/condor /var/lock/condor /var/log/condor /var/lib/condor/spool /var/lib/condor/execute
            chown condor:condor /var/run/condor /var/lock/condor /var/log/condor /var/lib/condor/spool /var/lib/condor/execute
            exec condor_master -f' >/dev/null
}
run_daemon pilotd-pool-cm cm.conf
run_daemon pilotd-pool-ap ap.conf
if ! current pilotd-pool-web; then
    docker rm -f pilotd-pool-web >/dev/null 2>&1 || true
    log "starting pilotd-pool-web"
    docker run -d --name pilotd-pool-web --hostname pilotd-pool-web --network "$net" \
        --label pilotd.pool-key="$pkey" --label pilotd.test-pool=true \
        -v "$here/web.py:/web.py:ro" -v "$dir/www:/www:ro" -v "$dir/tls:/tls:ro" \
        --entrypoint python3 "$base" /web.py /www /tls/web.pem /tls/web.key >/dev/null
fi

# Ready when the collector knows the schedd and the web server answers.
for i in $(seq 1 90); do
    if docker exec pilotd-pool-ap condor_status -schedd -af Name 2>/dev/null | grep -q pilotd-pool-ap \
        && docker exec pilotd-pool-web python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8080/pool.conf")' 2>/dev/null; then
        break
    fi
    [ "$i" = 90 ] && { log "the pool did not come up"; docker logs --tail 20 pilotd-pool-ap >&2;
        docker exec pilotd-pool-cm tail -n 30 /var/log/condor/CollectorLog >&2 || true; exit 1; }
    sleep 1
done
log "ready"
echo "PILOTD_POOL_DIR=$dir"
echo "PILOTD_POOL_NETWORK=$net"
echo "PILOTD_POOL_WORKER_IMAGE=$worker_image"
echo "PILOTD_POOL_CONDOR_IMAGE=$base"
echo "PILOTD_TEST_PROVISIONER_IMAGE=$provisioner_image"
