#!/bin/sh
# Builds the pilot test image without any registry: a root filesystem of Debian's
# busybox-static, the pilot binary with the shared libraries ldd lists, and the fake condor
# from tests/fake-condor installed where HTCondor's packages put the real programs
# (/usr/sbin/condor_master, /usr/bin/condor_config_val, /etc/condor/...), run as uid 65532
# with PILOT_LOCAL_DIR=/pilot/condor like the real worker images. Imported with
# `docker import`, tagged pilotd-test/pilot:<hash of its content> and :latest (or
# $PILOT_TEST_IMAGE), the content tag printed last: tests/run.sh passes it on in
# PILOTD_TEST_PILOT_IMAGE, so checkouts testing side by side never run each other's pilot.
#
# Idempotent: rebuilds the binary if needed and re-imports (the tag moves to the new image).
# Needs: cargo, docker, busybox-static (apt-get install -y busybox-static).
# PILOT_PROFILE=release builds an optimised binary (default: debug, which tests already built).
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd)
tag=${PILOT_TEST_IMAGE:-}
profile=${PILOT_PROFILE:-debug}
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || busybox=/bin/busybox
if [ ! -x "$busybox" ] || ! ldd "$busybox" 2>&1 | grep -q "not a dynamic"; then
    echo "build-pilot-image: needs a static busybox: apt-get install -y busybox-static" >&2
    exit 1
fi

cd "$repo"
if [ "$profile" = release ]; then
    cargo build -q -p pilot --release >&2
else
    cargo build -q -p pilot >&2
fi
target_dir=${CARGO_TARGET_DIR:-$repo/target}
pilot="$target_dir/$profile/pilot"
[ -x "$pilot" ] || { echo "build-pilot-image: $pilot was not built" >&2; exit 1; }

if [ -z "$tag" ]; then
    key=$(cat "$pilot" "$0" "$repo"/tests/fake-condor/* | sha256sum | cut -c1-12)
    tag=pilotd-test/pilot:$key
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/usr/bin" "$root/usr/sbin" "$root/usr/local/bin" \
    "$root/etc/condor/config.d" "$root/etc/condor/tokens.d" "$root/etc/pilot" \
    "$root/var/log/condor" "$root/var/lib/condor/execute" "$root/tmp" "$root/proc" \
    "$root/sys" "$root/dev" "$root/pilot"
chmod 1777 "$root/tmp"
# Like the real worker images, it runs as uid 65532 from /pilot (pilotd mounts the worker's
# scratch dir there; a plain `docker run` gets this empty dir of the image's, owned by 65532).
chown 65532:65532 "$root/pilot"
chmod 700 "$root/pilot"

cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

cp "$pilot" "$root/usr/local/bin/pilot"
# The binary's shared libraries, at the paths the dynamic loader looks for them.
for lib in $(ldd "$pilot" | awk '/=>/ { print $3 } !/=>/ && /^\t\// { print $1 }'); do
    [ -f "$lib" ] || continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
# The loader may be asked for by another name (e.g. /lib64/ld-linux-x86-64.so.2 → /lib/...).
interp=$(ldd "$pilot" | awk '/ld-linux/ { print $1 }' | head -n1)
if [ -n "$interp" ] && [ ! -e "$root$interp" ]; then
    mkdir -p "$root$(dirname "$interp")"
    cp -L "$interp" "$root$interp"
fi

# The system trust store, as every real worker image has one: the pilot's TLS client loads it
# at start and refuses to run without any CA (even when only plain-http URLs are used).
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || { echo "build-pilot-image: $ca missing: apt-get install -y ca-certificates" >&2; exit 1; }
mkdir -p "$root/etc/ssl/certs"
cp -L "$ca" "$root/etc/ssl/certs/ca-certificates.crt"

install -m 0755 tests/fake-condor/condor_master "$root/usr/sbin/condor_master"
install -m 0755 tests/fake-condor/condor_config_val "$root/usr/bin/condor_config_val"
cat > "$root/etc/condor/condor_config" <<'CONF'
# Like the condor_config of HTCondor's packages, reduced to what the fake condor reads.
LOCAL_CONFIG_DIR = /etc/condor/config.d
LOG = /var/log/condor
CONF
printf 'fake-pool-token-for-tests\n' > "$root/etc/pilot/pool.token"
chown 65532:65532 "$root/etc/pilot/pool.token"
chmod 0400 "$root/etc/pilot/pool.token"

tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/bin' \
    --change 'ENV CONDOR_CONFIG=/etc/condor/condor_config' \
    --change 'ENV PILOT_TOKEN_FILE=/etc/pilot/pool.token' \
    --change 'ENV PILOT_LOCAL_DIR=/pilot/condor' \
    --change 'ENV PILOT_SCRATCH=/pilot/execute' \
    --change 'USER 65532:65532' \
    --change 'ENTRYPOINT ["/usr/local/bin/pilot"]' \
    - "$tag" >/dev/null
docker tag "$tag" pilotd-test/pilot:latest
echo "$tag"
