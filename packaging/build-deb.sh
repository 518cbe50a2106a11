#!/usr/bin/env bash
# Builds the pilotd Debian package and prints the path of the .deb (last line of stdout).
#
#   packaging/build-deb.sh                      `volunteer` profile (size-optimized, LTO; what you install)
#   packaging/build-deb.sh --profile dev        unoptimized, fast: for tests/package.sh only
#   packaging/build-deb.sh -- --deb-version 0.1.0-2   anything after -- goes to `cargo deb`
#
# Idempotent: installs cargo-deb from crates.io if it is missing or too old, rebuilds only
# what changed, regenerates the man pages and completions every time. The generated files go
# to ./target/assets/ (a fixed path relative to the project, whatever CARGO_TARGET_DIR says,
# because the asset list in Cargo.toml names them there).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,11s/^# \{0,1\}//p' "$0"; }
die() { echo "build-deb: $*" >&2; exit 1; }

profile=volunteer
deb_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) [ $# -ge 2 ] || die "--profile needs a value (volunteer, release or dev)"; profile=$2; shift 2 ;;
    --profile=*) profile=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; deb_args+=("$@"); break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# cargo-deb 3.x: it has --profile (the test packages the dev build) and only warns about dev
# profiles, which it announces will become an error later; so the series is pinned.
cargo_deb_version=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q '^cargo-deb 3\.'; then
  echo "build-deb: installing cargo-deb $cargo_deb_version from crates.io (once; a few minutes)" >&2
  cargo install cargo-deb --locked --force --version "$cargo_deb_version" >&2
fi

# Cargo's output dir for this profile: `dev` lands in debug/, others under their own name.
target_dir=$(cargo metadata --format-version 1 --no-deps \
  | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target_dir" ] || die "cannot find cargo's target directory (cargo metadata failed?)"
case "$profile" in
  dev|debug) profile=dev; bin_dir=$target_dir/debug ;;
  *) bin_dir=$target_dir/$profile ;;
esac

# Donated machines run volunteer mode only: the package's pilotd is built without the
# `kubernetes` feature, so it neither links nor maps the Kubernetes client stack.
# The optimized builds link through packaging/link-idle-first, which places the code an idle
# daemon runs side by side, so less of the binary stays resident on the donor's machine. The
# dev build (the tests' package) links as cargo does, sharing the tests' build cache.
link=()
if [ "$profile" != dev ]; then
  triple=$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
  link=("CARGO_TARGET_${triple}_LINKER=$PWD/packaging/link-idle-first")
fi
echo "build-deb: building pilotd (volunteer mode only) and pilot ($profile profile)" >&2
env "${link[@]}" cargo build --quiet --profile "$profile" -p pilotd -p pilot --bins --no-default-features >&2
for b in pilotd pilot; do
  [ -x "$bin_dir/$b" ] || die "$bin_dir/$b was not built"
done

# Man pages and completions come from the binary being packaged, so they match its flags.
assets=target/assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin_dir/pilotd" manpages "$assets/man" >/dev/null
# Debian ships man pages gzipped; -n keeps the output byte-identical between builds.
gzip -9 -n -f "$assets"/man/*.1
"$bin_dir/pilotd" completions bash > "$assets/completions/pilotd.bash"
"$bin_dir/pilotd" completions zsh > "$assets/completions/_pilotd"
"$bin_dir/pilotd" completions fish > "$assets/completions/pilotd.fish"
[ -s "$assets/man/pilotd.1.gz" ] || die "pilotd.1 was not generated"
for f in pilotd.bash _pilotd pilotd.fish; do
  [ -s "$assets/completions/$f" ] || die "completion $f is empty"
done

# --no-build: cargo-deb would otherwise rebuild with its own profile overrides (debug info
# settings), which for release means a second full LTO build.
echo "build-deb: packaging" >&2
out=$(cargo deb -p pilotd --no-build --profile "$profile" "${deb_args[@]}")
deb=$(printf '%s\n' "$out" | tail -n 1)
[ -f "$deb" ] || die "cargo deb did not report a package file (got: $out)"
echo "$deb"
