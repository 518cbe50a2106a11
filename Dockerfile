# Two images from one workspace:
#
#   docker build --target worker      -t pilotd/worker .       # HTCondor EP + pilot entrypoint
#   docker build --target provisioner -t pilotd/provisioner .  # pilotd for Kubernetes mode
#
# Build args (docs/site.md, "The worker image", has the commands):
#   WORKER_BASE       the worker's HTCondor image (default docker.io/htcondor/execute:lts-el9;
#                     any image with condor_master and condor_config_val: a site's own EL9
#                     image, or Debian's `condor` package)
#   PROVISIONER_BASE  the provisioner's, with the HTCondor client tools (default
#                     docker.io/htcondor/base:lts-el9)
#   RUST_IMAGE        where the binaries are built (default docker.io/library/rust:1.95-alpine)
#   BINARIES          unset (the default): pilot, pilotd and tini are built from this source in
#                     RUST_IMAGE, for musl and linked statically, so they run on any base
#                     whatever glibc it carries. `context`: they are taken from the build
#                     context's dist/ (dist/pilot, dist/pilotd, dist/tini, each built for the
#                     base's libc), and no Rust image is needed (tests/pool/up.sh builds so).
#
# The classic builder (DOCKER_BUILDKIT=0) builds this file as well as BuildKit does: it builds
# every stage up to the target, so no stage may need an image that the chosen build does not.
# That is why the build stages start from `${BINARIES:-${RUST_IMAGE}}` (with
# BINARIES=context, from the `context` stage, which already holds them) rather than from an
# unused Rust stage, and why nothing here needs BuildKit (no RUN --mount, no syntax line).

ARG WORKER_BASE=docker.io/htcondor/execute:lts-el9
ARG PROVISIONER_BASE=docker.io/htcondor/base:lts-el9
ARG RUST_IMAGE=docker.io/library/rust:1.95-alpine
ARG BINARIES

# BINARIES=context: the prebuilt binaries in /out. It starts from the worker's base for its
# shell (the build step below runs, and does nothing, in it). Cargo.lock is there only so the
# COPY has a source when dist/ is absent (a build from source under the classic builder).
FROM ${WORKER_BASE} AS context
COPY Cargo.lock dis[t] /out/

# The binaries, in /out: built here, unless the stage already holds them (BINARIES=context).
# One stage per binary, so BuildKit builds only what the target needs.
FROM ${BINARIES:-${RUST_IMAGE}} AS rust-build
WORKDIR /src
# Only what cargo needs: the build context's target/ and .git are never read (.dockerignore).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY pilot ./pilot
COPY crates ./crates
# musl-dev: libc headers and crt objects for ring's C and assembly parts.
RUN if [ ! -x /out/tini ]; then \
        apk add --no-cache musl-dev tini-static && install -D -m 0755 /sbin/tini-static /out/tini; \
    fi

FROM rust-build AS pilot-build
RUN if [ ! -x /out/pilot ]; then \
        cargo build --release --locked -p pilot \
        && install -D -m 0755 target/release/pilot /out/pilot && rm -rf target; \
    fi

FROM rust-build AS pilotd-build
RUN if [ ! -x /out/pilotd ]; then \
        cargo build --release --locked -p pilotd --bin pilotd --features kubernetes \
        && install -D -m 0755 target/release/pilotd /out/pilotd && rm -rf target; \
    fi

# The worker: the base's HTCondor execute node (condor_master in /usr/sbin, condor_config_val
# in /usr/bin), started by the pilot instead of the base's own start script. tini is PID 1
# because condor_master cannot run as PID 1 and someone must reap what escapes the pilot.
# It works with pilotd's defaults: read-only root, every capability dropped,
# no-new-privileges, [worker] user = 65532:65532, the worker's scratch mounted at /pilot.
# condor runs unprivileged as that user from the scratch mount: PILOT_LOCAL_DIR makes the pilot
# write a top-level config that includes the image's own and puts LOG, SPOOL, LOCK, RUN and
# EXECUTE below /pilot; the fetched pool files and the token go there too. The image itself
# stays read-only to the worker. docs/site.md, "The pilot's environment", lists every variable.
FROM ${WORKER_BASE} AS worker
COPY --from=rust-build /out/tini /usr/bin/tini
COPY --from=pilot-build /out/pilot /usr/local/bin/pilot
# A passwd entry for the uid pilotd runs workers as: condor names its daemons after the user,
# and jobs expect a name and a home.
RUN groupadd -g 65532 pilot \
 && useradd -u 65532 -g 65532 -d /pilot -M -s /usr/sbin/nologin -c "pilotd worker" pilot
ENV PILOT_LOCAL_DIR=/pilot/condor \
    PILOT_CONDOR_CONFIG_DIR=/pilot/condor/config.d \
    PILOT_TOKEN_DIR=/pilot/condor/tokens.d \
    PILOT_SCRATCH=/pilot/execute
USER 65532:65532
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/pilot"]
# The base image's CMD (/start.sh) would become the pilot's arguments: clear it.
CMD []

# The provisioner: pilotd in Kubernetes mode. It queries schedds with the HTCondor
# command-line tools (condor_q, condor_status), so it starts from an HTCondor image.
# - The entrypoint is pilotd itself and the subcommand is the CMD, so a Deployment's `args`
#   (`-c FILE run`) replace the CMD whole: an entrypoint ending in `run` made the container
#   `pilotd run -c FILE run` (exit 2). tests/it/kubernetes/deployment.rs parses the argv of
#   the built image and of each manifest with pilotd's own CLI.
# - A real user, uid/gid 65532 (the Deployment's runAsUser) with a passwd entry and a home:
#   the condor tools look the caller up (a uid without an entry cannot authenticate).
# - The system CA bundle (ca-certificates: installed with dnf on EL, apt on Debian, when the
#   base lacks it) for SSL to the collector and schedds, at EL's path, which the client config
#   names (on Debian a link to its bundle), and /etc/grid-security/certificates for a site's
#   IGTF/OSG CA directory (mounted).
# - Client security settings: the image's defaults are in 50-pilotd-client.conf; a site's own
#   come from the ConfigMap, mounted as /etc/condor/config.d/90-site.conf (read last).
FROM ${PROVISIONER_BASE} AS provisioner
COPY --from=rust-build /out/tini /usr/bin/tini
COPY --from=pilotd-build /out/pilotd /usr/local/bin/pilotd
COPY deploy/kubernetes/condor-client.conf /etc/condor/config.d/50-pilotd-client.conf
RUN if command -v dnf >/dev/null; then \
        dnf install -y ca-certificates && dnf clean all; \
    elif [ ! -s /etc/ssl/certs/ca-certificates.crt ]; then \
        apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
 && if [ ! -e /etc/pki/tls/certs/ca-bundle.crt ]; then \
        mkdir -p /etc/pki/tls/certs && ln -s /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; \
    fi \
 && groupadd -g 65532 pilotd \
 && useradd -u 65532 -g 65532 -d /var/lib/pilotd -M -s /usr/sbin/nologin -c "pilotd provisioner" pilotd \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/pilotd \
 && install -d -m 0755 /etc/grid-security/certificates
USER 65532:65532
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/pilotd"]
CMD ["-c", "/etc/pilotd/pilotd.toml", "run"]
