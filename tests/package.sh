#!/usr/bin/env bash
# Builds the Debian package (dev profile: same layout and scripts as the release package,
# minutes faster) and installs it into a throwaway root with the real dpkg, then checks what
# an administrator would: files in place, conffiles, maintainer scripts, `pilotd check` on the
# installed configuration, man pages render, bash completion loads and completes, the unit is
# enabled, the owner's edits survive an upgrade, and remove/purge keep and remove what
# README.md ("Uninstall") says. Every failed check exits non-zero with a message; nothing is
# skipped silently.
#
# Maintainer scripts run on the host with DPKG_ROOT set (--force-script-chrootless): the
# throwaway root has no shell to chroot into. The scripts and deb-systemd-helper honour
# DPKG_ROOT, so nothing outside the throwaway root is touched.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "tests/package.sh: FAIL: $*" >&2; exit 1; }
ok() { echo "  ok: $*"; }

# Tools this test needs, from Debian: dpkg (dpkg-deb), man-db (man -l, with groff-base),
# init-system-helpers (deb-systemd-helper, which the generated postinst calls).
need=()
command -v dpkg-deb >/dev/null || need+=(dpkg)
command -v man >/dev/null || need+=(man-db)
command -v deb-systemd-helper >/dev/null || need+=(init-system-helpers)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# A slim image may have man-db with its pages excluded; man -l reads our file directly.

work=$(mktemp -d "${TMPDIR:-/tmp}/pilotd-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

# Into the temp dir, not target/debian/: a dev-profile .deb must never be mistaken for the
# release one that README.md tells people to `apt install ./target/debian/pilotd_*.deb`.
deb=$(packaging/build-deb.sh --profile dev -- --fast --output "$work/" | tail -n 1)
[ -f "$deb" ] || fail "packaging/build-deb.sh did not produce a .deb (got '$deb')"
echo "package: $deb"

echo "== package metadata"
ctl=$work/control
dpkg-deb --control "$deb" "$ctl"
for f in postinst postrm prerm conffiles; do
  [ -f "$ctl/$f" ] || fail "control archive has no $f"
done
for conf in /etc/pilotd/pilotd.toml /etc/pilotd/policy.toml; do
  grep -qx "$conf" "$ctl/conffiles" || fail "$conf is not a conffile: $(cat "$ctl/conffiles")"
done
ok "conffiles: $(tr '\n' ' ' < "$ctl/conffiles")"
grep -q 'pilotd init' "$ctl/postinst" || fail "postinst does not tell the owner to run pilotd init"
grep -q 'deb-systemd-helper enable pilotd.service' "$ctl/postinst" \
  || fail "postinst does not enable pilotd.service"
if grep -q 'deb-systemd-invoke start' "$ctl/postinst"; then
  fail "postinst starts pilotd before the owner chose a policy"
fi
grep -q '^Recommends: .*docker' "$ctl/control" || fail "no Recommends on a Docker engine"
grep -q 'pilotd failsafe --remove' "$ctl/prerm" || fail "prerm does not remove the workers on removal"
ok "maintainer scripts: postinst enables (not starts) the unit and prints the init hint"

# dpkg keeps its database under the root; an empty one is a fresh system.
new_root() {
  rm -rf "$root"
  mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers" \
    "$root/var/log"
  touch "$root/var/lib/dpkg/status"
}
# --force-depends: the throwaway root has no libc6 package (the binaries run on the host's).
rdpkg() {
  dpkg --root="$root" --force-script-chrootless --force-depends --log=/dev/null "$@" </dev/null
}

echo "== install into a throwaway root"
new_root
out=$(rdpkg -i "$deb" 2>&1) || { echo "$out" >&2; fail "dpkg -i failed"; }
grep -q 'sudo pilotd init' <<<"$out" || { echo "$out" >&2; fail "no post-install message"; }
ok "installed; postinst said: $(grep -m1 'pilotd init' <<<"$out" | sed 's/^ *//')"
status=$(dpkg --root="$root" -s pilotd)
grep -q '^Status: install ok installed' <<<"$status" || fail "pilotd not configured: $status"

for f in usr/bin/pilotd usr/lib/pilotd/pilot; do
  [ -x "$root/$f" ] || fail "/$f missing or not executable"
done
for f in etc/pilotd/pilotd.toml etc/pilotd/policy.toml \
  usr/lib/systemd/system/pilotd.service \
  usr/share/pilotd/policies/default.toml usr/share/pilotd/policies/nights-and-weekends.toml \
  usr/share/pilotd/policies/dedicated-server.toml \
  usr/share/doc/pilotd/README.md usr/share/doc/pilotd/copyright \
  usr/share/man/man1/pilotd.1.gz usr/share/man/man1/pilotd-check.1.gz \
  usr/share/man/man1/pilotd-plan.1.gz usr/share/man/man1/pilotd-schedule.1.gz \
  usr/share/man/man1/pilotd-init.1.gz usr/share/man/man1/pilotd-run.1.gz \
  usr/share/bash-completion/completions/pilotd usr/share/zsh/vendor-completions/_pilotd \
  usr/share/fish/vendor_completions.d/pilotd.fish; do
  [ -s "$root/$f" ] || fail "/$f missing or empty"
done
# The documents by reader ship beside README.md at the path its links use (docs/X.md): every
# one in the repository, as it is, and nothing the installed README links to is missing.
doc=$root/usr/share/doc/pilotd
for f in docs/*.md docs/*.png; do
  cmp -s "$f" "$doc/$f" || fail "/usr/share/doc/pilotd/$f missing or not the repository's $f"
done
links=$(grep -o '](docs/[^)#]*' "$doc/README.md" | sed 's/^](//' | sort -u)
[ -n "$links" ] || fail "the installed README.md links to no docs/*.md"
for l in $links; do
  [ -s "$doc/$l" ] || fail "the installed README.md links to $l, which is not installed"
done
ok "docs: $(ls docs/*.md | wc -l) documents by reader installed beside README.md, its $(wc -w <<<"$links") links resolve"
cmp -s "$root/etc/pilotd/policy.toml" policies/default.toml \
  || fail "/etc/pilotd/policy.toml is not policies/default.toml"
grep -q '^mode = "volunteer"' "$root/etc/pilotd/pilotd.toml" || fail "pilotd.toml is not volunteer mode"
grep -q '^policy = "/etc/pilotd/policy.toml"' "$root/etc/pilotd/pilotd.toml" \
  || fail "pilotd.toml does not name /etc/pilotd/policy.toml"
[ -d "$root/var/lib/pilotd" ] || fail "state dir /var/lib/pilotd not created"
[ "$(stat -c %a "$root/var/lib/pilotd")" = 750 ] || fail "/var/lib/pilotd is not mode 0750"
[ -L "$root/etc/systemd/system/multi-user.target.wants/pilotd.service" ] \
  || fail "pilotd.service is not enabled (no multi-user.target.wants link)"
ok "files in place, state dir 0750, unit enabled"

echo "== the installed binaries and configuration"
check() {
  "$root/usr/bin/pilotd" -c "$root/etc/pilotd/pilotd.toml" --policy "$root/etc/pilotd/policy.toml" check
}
out=$(check 2>&1) || { echo "$out" >&2; fail "pilotd check fails on the installed configuration"; }
ok "pilotd check: $(head -n 1 <<<"$out")"
"$root/usr/lib/pilotd/pilot" --version >/dev/null || fail "/usr/lib/pilotd/pilot --version failed"
ok "pilot runs"
# The package is the volunteer build: kubernetes mode is refused, and says why.
printf 'mode = "kubernetes"\n[kubernetes]\nnamespace = "osg"\n' > "$work/kube.toml"
if out=$("$root/usr/bin/pilotd" -c "$work/kube.toml" check 2>&1); then
  fail "the packaged pilotd accepted kubernetes mode: $out"
fi
grep -q 'not in this build of pilotd' <<<"$out" || fail "kubernetes mode refused without saying why: $out"
ok "volunteer build: kubernetes mode is not in it"

echo "== man pages"
for page in "$root"/usr/share/man/man1/*.1.gz; do
  rendered=$(MANWIDTH=80 man -l "$page" 2>"$work/man.err") || fail "man -l $page failed: $(cat "$work/man.err")"
  [ ! -s "$work/man.err" ] || fail "man -l $page warned: $(cat "$work/man.err")"
  grep -q 'SYNOPSIS' <<<"$rendered" || fail "$page has no SYNOPSIS"
done
MANWIDTH=80 man -l "$root/usr/share/man/man1/pilotd.1.gz" 2>/dev/null | grep -q '/etc/pilotd/policy.toml' \
  || fail "pilotd.1 has no FILES section"
ok "$(ls "$root"/usr/share/man/man1/*.1.gz | wc -l) pages render without warnings"

echo "== completions"
comp=$root/usr/share/bash-completion/completions/pilotd
bash -c "source '$comp' && complete -p pilotd" >/dev/null || fail "bash completion does not load"
# Ask the completion function what a user pressing TAB after `pilotd sch` would get.
words=$(bash -c "source '$comp'
  COMP_WORDS=(pilotd sch); COMP_CWORD=1; COMP_LINE='pilotd sch'; COMP_POINT=\${#COMP_LINE}
  _pilotd pilotd sch pilotd; printf '%s\n' \"\${COMPREPLY[@]}\"")
grep -qx schedule <<<"$words" || fail "bash completion of 'pilotd sch' gave: $words"
ok "bash completion loads; 'pilotd sch<TAB>' completes to schedule"
if command -v zsh >/dev/null; then
  zsh -n "$root/usr/share/zsh/vendor-completions/_pilotd" || fail "_pilotd is not valid zsh"
  ok "zsh completion parses"
else
  echo "  note: zsh not installed here; _pilotd is only checked to be non-empty"
fi
if command -v fish >/dev/null; then
  fish -n "$root/usr/share/fish/vendor_completions.d/pilotd.fish" || fail "pilotd.fish is not valid fish"
  ok "fish completion parses"
else
  echo "  note: fish not installed here; pilotd.fish is only checked to be non-empty"
fi

echo "== upgrade keeps the owner's edits"
# A bumped version whose pilotd.toml changed upstream and whose policy.toml did not, built by
# repacking the same package (no second cargo build).
repack=$work/repack
dpkg-deb --raw-extract "$deb" "$repack"
sed -i 's/^Version: .*/&+upgrade1/' "$repack/DEBIAN/control"
echo '# changed upstream in the next version' >> "$repack/etc/pilotd/pilotd.toml"
deb2=$work/pilotd-upgrade.deb
dpkg-deb --root-owner-group -Zgzip --build "$repack" "$deb2" >/dev/null
marker='# edited by the owner (tests/package.sh)'
echo "$marker" >> "$root/etc/pilotd/policy.toml"
out=$(rdpkg -i "$deb2" 2>&1) || { echo "$out" >&2; fail "upgrade failed"; }
grep -qxF "$marker" "$root/etc/pilotd/policy.toml" || fail "upgrade lost the owner's policy edit"
grep -q 'changed upstream' "$root/etc/pilotd/pilotd.toml" \
  || fail "upgrade did not update the unedited pilotd.toml"
leftovers=$(find "$root/etc/pilotd" -name '*.dpkg-*')
[ -z "$leftovers" ] || fail "upgrade left $leftovers"
if grep -q 'sudo pilotd init' <<<"$out"; then fail "postinst repeated the first-install message on upgrade"; fi
grep -q "^Version: .*+upgrade1" <<<"$(dpkg --root="$root" -s pilotd)" || fail "upgrade not recorded"
out=$(check 2>&1) || { echo "$out" >&2; fail "pilotd check fails after the upgrade"; }
ok "edited policy kept, unedited pilotd.toml updated, no .dpkg-* files, check passes"

echo "== remove and purge"
touch "$root/var/lib/pilotd/history.json"   # state a running daemon would have left
out=$(rdpkg -r pilotd 2>&1) || { echo "$out" >&2; fail "dpkg -r failed"; }
[ ! -e "$root/usr/bin/pilotd" ] || fail "remove left /usr/bin/pilotd"
[ -f "$root/etc/pilotd/policy.toml" ] || fail "remove deleted the owner's policy"
[ -f "$root/var/lib/pilotd/history.json" ] || fail "remove deleted the state dir"
# prerm removes the host's workers on a real removal; under --root it must not touch the host.
if grep -q 'removing this machine' <<<"$out"; then fail "prerm acted on the host's engine under --root"; fi
ok "remove: binaries gone, /etc/pilotd and /var/lib/pilotd kept, host engine left alone"
# A scratch dir left by a worker prerm could not remove: purge keeps it (and only it), says so.
mkdir -p "$root/var/lib/pilotd/scratch/pilotd-default-1"
out=$(rdpkg -P pilotd 2>&1) || { echo "$out" >&2; fail "dpkg -P failed"; }
[ ! -e "$root/etc/pilotd/policy.toml" ] && [ ! -e "$root/etc/pilotd/pilotd.toml" ] \
  || fail "purge left the conffiles"
[ -d "$root/var/lib/pilotd/scratch/pilotd-default-1" ] || fail "purge deleted a worker's scratch dir"
[ ! -e "$root/var/lib/pilotd/history.json" ] || fail "purge left the history"
grep -q 'kept .*/var/lib/pilotd/scratch' <<<"$out" || fail "purge did not say it kept scratch: $out"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/pilotd.service" ] \
  || fail "purge left the unit enabled"
rm -r "$root/var/lib/pilotd/scratch"
rdpkg -i "$deb" >/dev/null 2>&1 || fail "reinstall failed"
touch "$root/var/lib/pilotd/history.json"
mkdir -p "$root/var/lib/pilotd/scratch"
rdpkg -r pilotd >/dev/null 2>&1 || fail "second remove failed"
out=$(rdpkg -P pilotd 2>&1) || { echo "$out" >&2; fail "second purge failed"; }
[ ! -e "$root/var/lib/pilotd" ] || fail "purge left /var/lib/pilotd: $(find "$root/var/lib/pilotd")"
grep -q 'removed /var/lib/pilotd' <<<"$out" || fail "purge did not say it removed the state dir: $out"
ok "purge: conffiles, unit links and state gone; a leftover worker scratch dir kept and named"

echo "package test: all checks passed"
