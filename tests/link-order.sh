#!/bin/bash
# packaging/link-idle-first, the package build's linker, against the real LLD that rustc links
# with: the listed functions are placed first, in the list's order, whatever order the object
# file holds them in; a name the object lacks is skipped; a link whose list matches nothing,
# and a link by another linker, still succeed, unordered.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "link-order: FAIL: $*" >&2; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT

# Five functions, each in its own section as rustc emits them; main calls them all so none is
# dropped as unused.
cat >"$w/p.c" <<'C'
int one(int x) { return x + 1; }
int two(int x) { return x * 2; }
int three(int x) { return x - 3; }
int four(int x) { return x ^ 4; }
int five(int x) { return x | 5; }
int six(int x);
int main(int argc, char **argv) { (void)argv; return one(argc) + two(argc) + three(argc) + four(argc) + five(argc) + six(argc); }
C
cc -c -O1 -ffunction-sections -o "$w/p.o" "$w/p.c"
# A sixth in an archive, as a crate's C or assembly comes.
echo 'int six(int x) { return x + 6; }' >"$w/six.c"
cc -c -O1 -ffunction-sections -o "$w/six.o" "$w/six.c"
ar rcs "$w/libsix.a" "$w/six.o"
# LLD as rustc finds it: the toolchain's gcc-ld directory, -fuse-ld=lld.
gcc_ld=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/gcc-ld
[ -x "$gcc_ld/ld.lld" ] || fail "no ld.lld in $gcc_ld"
addresses() { # BINARY: the six functions in address order
    nm -n "$1" | awk '$3 ~ /^(one|two|three|four|five|six)$/ { print $3 }' | tr '\n' ' '
}

printf 'five\nsix\nthree\nnot_in_the_object\n' >"$w/list"
PILOTD_IDLE_FUNCTIONS=$w/list packaging/link-idle-first -B"$gcc_ld" -fuse-ld=lld -o "$w/ordered" "$w/p.o" "$w/libsix.a"
got=$(addresses "$w/ordered")
[ "$got" = "five six three one two four " ] || fail "listed functions not placed first, in order: got '$got'"

printf 'nothing_matches\n' >"$w/none"
PILOTD_IDLE_FUNCTIONS=$w/none packaging/link-idle-first -B"$gcc_ld" -fuse-ld=lld -o "$w/plain" "$w/p.o" "$w/libsix.a" 2>"$w/err"
grep -q 'linking as is' "$w/err" || fail "an unmatched list should be said: $(cat "$w/err")"
[ "$(addresses "$w/plain")" = "one two three four five six " ] || fail "unordered link moved functions: $(addresses "$w/plain")"

# Another linker (the system's ld): no LLD option is passed, and the link succeeds.
PILOTD_IDLE_FUNCTIONS=$w/list packaging/link-idle-first -o "$w/bfd" "$w/p.o" "$w/libsix.a" 2>/dev/null \
    || fail "a link without -fuse-ld=lld failed"
echo "link-order: ok (listed first, in order; unmatched and non-LLD links unordered)"
