# syntax=docker/dockerfile:1
#
# Two images from one workspace (BuildKit builds only the stages a target needs):
#
#   docker build --target worker      -t pilotd/worker .       # HTCondor EP + pilot entrypoint
#   docker build --target provisioner -t pilotd/provisioner .  # pilotd for Kubernetes mode
#
# Build args: RUST_VERSION (default 1.95), HTCONDOR_TAG (default lts-el9; any tag of
# htcondor/execute and htcondor/base, e.g. 24.0-el9, latest-el9).
#
# The binaries are built for musl and linked statically, so they run on the EL9 HTCondor
# images whatever glibc those carry, and tini-static needs no loader either.

ARG RUST_VERSION=1.95
ARG HTCONDOR_TAG=lts-el9

FROM docker.io/library/rust:${RUST_VERSION}-alpine AS rust-build
# musl-dev: libc headers and crt objects for ring's C and assembly parts.
RUN apk add --no-cache musl-dev tini-static
WORKDIR /src
# Only what cargo needs: the build context's target/ and .git are never read.
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY pilot ./pilot
COPY crates ./crates

FROM rust-build AS pilot-build
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p pilot \
 && install -D -m 0755 target/release/pilot /out/pilot

FROM rust-build AS pilotd-build
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p pilotd --bin pilotd --features kubernetes \
 && install -D -m 0755 target/release/pilotd /out/pilotd

# The worker: HTCondor's execute-node image (condor_master in /usr/sbin, condor_config_val in
# /usr/bin), started by the pilot instead of the image's supervisord. tini is PID 1 because
# condor_master cannot run as PID 1 and someone must reap what escapes the pilot.
# condor runs unprivileged, as the user pilotd runs workers as (uid 65532, every capability
# dropped), from the scratch mount: PILOT_LOCAL_DIR makes the pilot write a top-level config
# that includes the image's own and puts LOG, SPOOL, LOCK, RUN and EXECUTE below /pilot. The
# image itself stays read-only to the worker. (tests/images/condor-worker/Dockerfile is the
# same image from Debian's condor, built offline by the tests.)
FROM docker.io/htcondor/execute:${HTCONDOR_TAG} AS worker
COPY --from=rust-build /sbin/tini-static /usr/bin/tini
COPY --from=pilot-build /out/pilot /usr/local/bin/pilot
RUN groupadd -g 65532 pilot \
 && useradd -u 65532 -g 65532 -d /pilot -M -s /sbin/nologin -c "pilotd worker" pilot
ENV PILOT_LOCAL_DIR=/pilot/condor \
    PILOT_SCRATCH=/pilot/execute
USER 65532:65532
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/pilot"]
# The base image's CMD (/start.sh) would become the pilot's arguments: clear it.
CMD []

# The provisioner: pilotd in Kubernetes mode. It queries schedds with the HTCondor
# command-line tools (condor_q, condor_status), so it starts from HTCondor's base image.
# - The entrypoint is pilotd itself and the subcommand is the CMD, so a Deployment's `args`
#   (`-c FILE run`) replace the CMD whole: an entrypoint ending in `run` made the container
#   `pilotd run -c FILE run` (exit 2). tests/it/kubernetes/deployment.rs parses the argv of
#   this target and of each manifest with pilotd's own CLI.
# - A real user, uid/gid 65532 (the Deployment's runAsUser) with a passwd entry and a home:
#   the condor tools look the caller up (a uid without an entry cannot authenticate).
# - The system CA bundle (ca-certificates) for SSL to the collector and schedds, and
#   /etc/grid-security/certificates for a site's IGTF/OSG CA directory (mounted).
# - Client security settings: the image's defaults are in 50-pilotd-client.conf; a site's own
#   come from the ConfigMap, mounted as /etc/condor/config.d/90-site.conf (read last).
FROM docker.io/htcondor/base:${HTCONDOR_TAG} AS provisioner
COPY --from=rust-build /sbin/tini-static /usr/bin/tini
COPY --from=pilotd-build /out/pilotd /usr/local/bin/pilotd
COPY deploy/kubernetes/condor-client.conf /etc/condor/config.d/50-pilotd-client.conf
RUN dnf install -y ca-certificates && dnf clean all \
 && groupadd -g 65532 pilotd \
 && useradd -u 65532 -g 65532 -d /var/lib/pilotd -M -s /sbin/nologin -c "pilotd provisioner" pilotd \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/pilotd \
 && install -d -m 0755 /etc/grid-security/certificates
USER 65532:65532
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/pilotd"]
CMD ["-c", "/etc/pilotd/pilotd.toml", "run"]
