# Sourced by the benches that run the volunteer daemon idle (footprint.sh, idle-functions.sh):
# a real policy whose window never opens today, the default interval, an image never pulled.
#   idle_daemon_config DIR INSTANCE   writes DIR/pilotd.toml (and its policy, utmp, scratch)
#   volunteer_build                   builds target/volunteer/pilotd as the package does
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
