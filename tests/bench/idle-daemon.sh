# Sourced by the benches that run the volunteer daemon idle (footprint.sh, idle-functions.sh):
# a real policy whose window never opens today, the default interval, an image never pulled.
#   idle_daemon_config DIR INSTANCE   writes DIR/pilotd.toml (and its policy, utmp, scratch)
#   volunteer_build                   builds target/volunteer/pilotd as the package does
#   idle_bus_start DIR                a desktop's system bus (below)
idle_daemon_config() {
    local dir=$1 instance=$2 day
    day=$(date -u -d tomorrow +%a | tr 'A-Z' 'a-z')
    mkdir -p "$dir/scratch" && : >"$dir/utmp"
    cat >"$dir/policy.toml" <<P
timezone = "UTC"
[schedule]
windows = [ { days = "$day", from = "03:00", to = "03:01" } ]
[share]
cpus = 1
memory = "1GiB"
disk = "1GiB"
workers = 1
P
    cat >"$dir/pilotd.toml" <<C
splay = "0s"
policy = "$dir/policy.toml"
state_dir = "$dir/state"
[host]
utmp = "$dir/utmp"
scratch = "$dir/scratch"
[docker]
instance = "$instance"
[worker]
image = "127.0.0.1:5000/pilotd-test/never-pulled:1"
allowed_images = ["127.0.0.1:5000/*"]
C
}

# The package's build of the daemon (packaging/build-deb.sh uses the same linker), so a bench
# measures what is installed.
volunteer_build() {
    local root triple
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    triple=$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
    (cd "$root" && env "CARGO_TARGET_${triple}_LINKER=$root/packaging/link-idle-first" \
        cargo build --profile volunteer -q --no-default-features --bin pilotd)
}

# A system bus with a real logind and NetworkManager, and a logged-in user, as on a desktop:
# the Debian 13 container of tests/systemd/image.sh, whose /run/dbus is DIR/dbus on the host,
# so a daemon on the host asks them. Sets idle_bus (the address for DBUS_SYSTEM_BUS_ADDRESS)
# and idle_bus_container (the caller removes it).
#   idle_bus_start DIR
idle_bus_start() {
    local dir=$1 root image s session=
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    image=$(sh "$root/tests/systemd/image.sh")
    idle_bus_container=pilotd-idle-bus-$$
    mkdir -p "$dir/dbus"
    docker run -d --name "$idle_bus_container" --hostname pilotd-idle-bus \
        --cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
        -v /sys/fs/cgroup:/sys/fs/cgroup:ro --tmpfs /run --tmpfs /run/lock -e container=docker \
        -v "$dir/dbus:/run/dbus" --entrypoint /lib/systemd/systemd "$image" >/dev/null
    for _ in $(seq 300); do
        s=$(docker exec "$idle_bus_container" systemctl is-system-running 2>/dev/null || true)
        [ "$s" = running ] || [ "$s" = degraded ] && break
        sleep 0.2
    done
    docker exec "$idle_bus_container" sh -c 'useradd -m -u 1000 alice &&
        install -d -m 700 /root/.ssh && ssh-keygen -q -t ed25519 -N "" -f /root/.ssh/id_alice &&
        install -d -m 700 -o alice -g alice /home/alice/.ssh &&
        install -m 600 -o alice -g alice /root/.ssh/id_alice.pub /home/alice/.ssh/authorized_keys' >/dev/null
    docker exec -d "$idle_bus_container" sh -c 'sleep infinity | exec ssh -tt -i /root/.ssh/id_alice \
        -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes \
        alice@127.0.0.1 "exec sleep infinity" >/root/ssh-alice.log 2>&1'
    for _ in $(seq 100); do
        session=$(docker exec "$idle_bus_container" loginctl list-sessions --no-legend | awk '$3 == "alice" { print $1; exit }' || true)
        [ -n "$session" ] && break
        sleep 0.1
    done
    [ -n "$session" ] || { echo "idle_bus_start: alice's ssh login made no logind session" >&2; return 1; }
    idle_bus="unix:path=$dir/dbus/system_bus_socket"
}
