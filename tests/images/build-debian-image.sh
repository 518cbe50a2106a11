#!/bin/sh
# Builds a container image from Debian's own packages, without any container registry:
# debootstrap a minimal trixie root, apt-get the packages inside it with chroot (debootstrap's
# --include cannot resolve virtual dependencies such as condor's python3-cffi-backend), then
# `docker import`. Used for the real-HTCondor image and the real-systemd image.
#
# Usage: tests/images/build-debian-image.sh NAME PACKAGE...
#   prints the image tag, NAME:trixie-<hash>, on stdout. The hash covers this script and the
#   package list, so the image is cached by tag: a second call with the same arguments only
#   inspects it. Needs root, debootstrap and Debian's mirror (deb.debian.org or $DEBIAN_MIRROR).
set -eu
name=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
key=$( (cat "$0"; echo "$*") | sha256sum | cut -c1-12)
tag="$name:trixie-$key"
log() { echo "build-debian-image: $*" >&2; }

if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"
    exit 0
fi
command -v debootstrap >/dev/null 2>&1 || {
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2 \
        || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2; }
}

root=$(mktemp -d "${TMPDIR:-/var/tmp}/pilotd-rootfs.XXXXXX")
cleanup() {
    for m in proc sys dev/pts dev; do umount "$root/$m" 2>/dev/null || true; done
    rm -rf "$root"
}
trap cleanup EXIT INT TERM

log "debootstrap trixie into $root ($mirror)"
debootstrap --variant=minbase trixie "$root" "$mirror" >"$root.debootstrap.log" 2>&1 || {
    tail -n 30 "$root.debootstrap.log" >&2; rm -f "$root.debootstrap.log"; exit 1
}
rm -f "$root.debootstrap.log"
# Nothing started by a package's postinst inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"
log "apt-get install $*"
chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    "apt-get update -qq && apt-get install -y -qq --no-install-recommends $* && apt-get clean" >&2
umount "$root/proc"
rm -f "$root/usr/sbin/policy-rc.d"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/tmp/* "$root"/var/tmp/*
# The image's hostname and resolver come from the engine.
: >"$root/etc/hostname"
log "docker import $tag"
tar -C "$root" --numeric-owner -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c "LABEL pilotd.test-image=$name" - "$tag" >/dev/null
echo "$tag"
