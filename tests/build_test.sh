#!/usr/bin/env bash
# The build itself: reading the Makefile installs nothing (only deps, test
# and demo run scripts/deps.sh, and never under -n); headers reach objects
# through compiler-generated dependencies (-MMD -MP), so touching one header
# rebuilds the objects that include it and no others; the version is
# written once (include/tzr.h) and the pkg-config file carries it.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
mk() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory BUILD="$BUILD" "$@"; }
log=$T/deps.log
: > "$log"
TZR_DEPS_LOG=$log mk -n clean > /dev/null 2>&1
TZR_DEPS_LOG=$log mk -n all > /dev/null 2>&1
TZR_DEPS_LOG=$log mk -n test demo > /dev/null 2>&1
TZR_DEPS_LOG=$log mk -n -p > /dev/null 2>&1
check build_no_deps_when_parsing_or_dry_run test ! -s "$log"
[ -s "$log" ] && echo "  deps.sh ran for: $(tr '\n' ' ' < "$log")" >&2

# -MMD -MP: the objects of the files that include codec.h, and only those.
check build_dependency_files_written test -f "$BUILD/obj/codec/codec_table.d"
mk -n -W src/codec/codec.h all > "$T/w.out" 2>&1
want_rebuilt=$(grep -l '#include "codec.h"' src/*/*.c | wc -l)
got_rebuilt=$(grep -cE -- '-c src/[a-z]+/[a-z_]+\.c ' "$T/w.out")
check build_header_rebuilds_its_includers test "$want_rebuilt" -gt 0 -a "$got_rebuilt" = "$want_rebuilt"
check build_header_leaves_others sh -c "! grep -q -- '-c src/net/sigv4.c ' '$T/w.out'"
[ "$got_rebuilt" = "$want_rebuilt" ] || echo "  codec.h: $got_rebuilt objects rebuilt, $want_rebuilt include it" >&2

# One version source.
major=$(sed -n 's/^#define TZR_VERSION_MAJOR \([0-9]*\).*/\1/p' include/tzr.h)
minor=$(sed -n 's/^#define TZR_VERSION_MINOR \([0-9]*\).*/\1/p' include/tzr.h)
patch=$(sed -n 's/^#define TZR_VERSION_PATCH \([0-9]*\).*/\1/p' include/tzr.h)
check build_pc_version_from_header grep -qx "Version: $major.$minor.$patch" "$BUILD/libtzr.pc"
check build_version_written_once sh -c "! grep -rn --include=Makefile --include='*.py' --include='*.sh' --include='*.toml' --include='*.c' -F '$major.$minor.$patch' Makefile python scripts src tools | grep ."
check build_soname_from_major test -f "$BUILD/libtzr.so.$major"
exit 0
