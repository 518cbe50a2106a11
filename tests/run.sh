#!/usr/bin/env bash
# The one test command (README and .ci/run call it). Installs and starts what the tests need,
# idempotently, so a fresh Debian 12 machine passes: Debian packages, the Docker engine, a
# loopback registry, locally built test images. Then lint and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
log() { printf '\n=== %s (at %d s)\n' "$*" "$SECONDS"; }

# Debian packages the tests use: utmpdump/who (real utmp files), busybox-static (test images),
# docker-registry (a real registry on 127.0.0.1), systemd (systemd-analyze verify), debootstrap
# (the real-systemd container image, tests/systemd), dbus (a real dbus-daemon for the logind
# probe's tests), chromium (the status page in a real browser).
need=()
command -v utmpdump >/dev/null || need+=(util-linux)
command -v who >/dev/null || need+=(coreutils)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v dbus-daemon >/dev/null || need+=(dbus)
command -v chromium >/dev/null || need+=(chromium)
command -v docker >/dev/null || need+=(docker.io)
command -v python3 >/dev/null || need+=(python3)
# ip: the egress test's own resolver in a network namespace of its own (veth, ip netns).
command -v ip >/dev/null || need+=(iproute2)
command -v curl >/dev/null || need+=(curl)
# mke2fs and losetup: each worker's disk limit is an ext4 image on a loop device.
command -v mke2fs >/dev/null || need+=(e2fsprogs)
command -v losetup >/dev/null || need+=(mount)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

log "docker engine, registry and test images"
# setup-docker.sh prints the environment the Docker tests need (the registry and repository)
# as eval-able lines.
docker_env=$(sh tests/setup-docker.sh)   # a failed setup stops here (set -e)
set -a; eval "$docker_env"; set +a
PILOTD_TEST_PILOT_IMAGE=$(bash tests/images/build-pilot-image.sh)
export PILOTD_TEST_PILOT_IMAGE

log "a real HTCondor pool and the shipped worker and provisioner images (Debian's condor, built into images here; cached by tag)"
pool_env=$(bash tests/pool/up.sh)
set -a; eval "$pool_env"; set +a

log "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

log "fuzz targets compile"
# The fuzz crate (fuzz/: its own workspace; running it needs nightly and cargo-fuzz) is
# type-checked with the stable toolchain on every run, so a change of pilotd's API cannot
# break the targets unseen. It starts from the workspace's lock file (the same versions) and
# shares its target dir. Measured: 5 s warm; cold, 1m45s of CPU (3m30s wall on a loaded
# 2-core machine with one job), since the fuzz workspace's own feature set re-checks some
# dependencies.
cp Cargo.lock fuzz/Cargo.lock
cargo check --quiet --manifest-path fuzz/Cargo.toml --bins --target-dir target \
    || { rm -f fuzz/Cargo.lock; exit 1; }
rm -f fuzz/Cargo.lock

log "systemd unit"
# verify checks the binaries the unit names exist; point them at the freshly built one.
cargo build --quiet --bin pilotd
unit_dir=$(mktemp -d)
sed "s|/usr/bin/pilotd|$PWD/target/debug/pilotd|g" systemd/pilotd.service > "$unit_dir/pilotd.service"
systemd-analyze verify "$unit_dir/pilotd.service"
rm -rf "$unit_dir"

log "tests"
# Tests that need the engine, the registry or the pool are #[ignore]d with a reason, so a plain
# `cargo test` elsewhere lists them instead of passing them; here every one of them runs. The
# pool's tests run in the next step, with more threads (they mostly wait on condor). Benchmarks
# (`bench::`, ignored with that reason) print figures for tests/bench (tests/bench/fleet.sh
# also judges its targets) and are skipped here.
log_file="${TMPDIR:-/tmp}/pilotd-test.log"
cargo test --workspace --quiet -- --include-ignored --skip condor_pool --skip real_pool:: \
    --skip kubernetes::bench:: --skip splay::tests::bench:: --skip docker::own_load 2>&1 \
    | tee "$log_file"

log "own-load accounting, alone on the machine"
# It judges CPU shares of the whole machine (a worker spinning half of it is not the owner's
# load; another container doing the same is), so nothing else runs beside it.
cargo test --quiet -p pilotd --test it docker::own_load -- --include-ignored --test-threads 1 2>&1 \
    | tee -a "$log_file"

log "tests against the real HTCondor pool"
cargo test --quiet -p pilot --test it real_condor -- --include-ignored --test-threads 4 2>&1 \
    | tee -a "$log_file"
cargo test --quiet -p pilotd --test it condor_pool -- --include-ignored --test-threads 4 2>&1 \
    | tee -a "$log_file"

# No silent skip: every test above ran. An ignored test here means one was added that this
# script does not know how to run; in CI (CI=true) that is an error, elsewhere a warning.
ignored=$(grep -Eo '[0-9]+ ignored' "$log_file" | awk '{ n += $1 } END { print n + 0 }')
if [ "$ignored" -gt 0 ]; then
    grep -E '^test .* \.\.\. ignored' "$log_file" >&2 || true
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $ignored test(s) ignored; tests/run.sh must run every test" >&2
        exit 1
    fi
    echo "WARNING: $ignored test(s) ignored" >&2
fi

log "the Docker tests again, on Podman's Docker-compatible API (docs/site.md: Container engines)"
# A representative subset (the egress filter is Docker-only); the service and its test
# images are set up by tests/setup-podman.sh, which prints the engine's socket.
podman_env=$(sh tests/setup-podman.sh)
(
  set -a; eval "$podman_env"; set +a
  cargo test --quiet -p pilotd --test it -- --include-ignored --test-threads 2 docker::volunteer docker::snooze \
      docker::freshness docker::page docker::comfort 2>&1 | tee -a "${TMPDIR:-/tmp}/pilotd-test.log"
)

log "the package build's linker (idle code first)"
bash tests/link-order.sh

log "debian package"
bash tests/package.sh

log "the service under a real systemd"
# apt install of the .deb in a container running systemd, driving this host's engine:
# install, hardening, reload, watchdog, crash, fail-safe, stop, upgrade, purge.
bash tests/systemd/run.sh

log "all passed"
