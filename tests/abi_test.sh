#!/usr/bin/env bash
# The shared library's ABI: only tzr_* symbols leave libtzr.so, exactly
# those src/libtzr.map lists, each under its release's node, and a program linked against the .so
# that passes an older, shorter options struct still works while an
# unknown struct_size is refused; the callback tables, tensor descriptions
# and load stats of the first layout (before struct_size) still work.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
SO=$BUILD/libtzr.so.0
bdir=$(cd "$BUILD" 2>/dev/null && pwd)
[ -f "$SO" ] || { fail abi_setup "$SO not built"; exit 1; }
nm -D --defined-only "$SO" > "$T/syms" 2>&1
check abi_symbols_listed test -s "$T/syms"
# Type A is the version node itself (LIBTZR_0).
check abi_only_tzr_symbols sh -c "! awk '\$2 != \"A\" && \$3 !~ /^tzr_/ {print \$3}' '$T/syms' | grep ."
check abi_version_node sh -c "objdump -T '$SO' | grep -q 'LIBTZR_0 *tzr_reader_open\$'"
# src/libtzr.map lists every exported symbol under the node of the release
# that added it: a symbol exported but not listed, listed but gone (a
# removal breaks the programs linked against it), or under another node
# than the map's, fails here.
awk '/^[A-Z][A-Z0-9_.]* *\{/ {node=$1} /^ *tzr_[a-z0-9_]*;/ {gsub(/[ ;]/, ""); print $0 " " node}' src/libtzr.map |
    sort > "$T/map.list"
awk '$2 != "A" {split($3, v, "@@"); print v[1] " " v[2]}' "$T/syms" | sort > "$T/so.list"
check abi_map_lists_symbols test -s "$T/map.list"
check abi_exports_match_map diff "$T/map.list" "$T/so.list"
cat > "$T/older.c" <<'C'
/* A caller of the first tzr_writer_options (it ended before compression). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tzr.h>
int main(int argc, char **argv) {
    size_t first = offsetof(tzr_writer_options, compression);
    tzr_writer_options *o = malloc(sizeof *o);
    memset(o, 0xff, sizeof *o); /* bytes past struct_size must not be read */
    memset(o, 0, first);
    o->struct_size = first;
    tzr_writer *w;
    if (tzr_writer_open(&w, argv[1], o)) { fprintf(stderr, "open: %s\n", tzr_last_error()); return 1; }
    float x[3] = {1, 2, 3};
    uint64_t sh[1] = {3};
    tzr_tensor_desc d = {"x", 1, TZR_PARAM, 0, NULL, 0, TZR_DTYPE_F32, 1, sh, 0};
    if (tzr_writer_add(w, &d, x) || tzr_writer_close(w)) { fprintf(stderr, "%s\n", tzr_last_error()); return 1; }
    tzr_reader *r;
    if (tzr_reader_open(&r, argv[1], NULL)) { fprintf(stderr, "read: %s\n", tzr_last_error()); return 1; }
    int ok = tzr_reader_count(r) == 1 && !tzr_reader_compressed(r);
    tzr_reader_free(r);
    o->struct_size = 3; /* no version had 3 bytes */
    if (tzr_writer_open(&w, argv[1], o) != TZR_EINVAL || !strstr(tzr_last_error(), "tzr_writer_options")) {
        fprintf(stderr, "struct_size 3 not refused: %s\n", tzr_last_error());
        return 1;
    }
    free(o);
    return ok ? 0 : 1;
}
C
san= cc=cc
nm -D "$SO" | grep -q __asan_init && san="-fsanitize=address,undefined"
[ -z "$san" ] && nm -D "$SO" | grep -q __tsan_init && san="-fsanitize=thread"
[ -z "$san" ] && nm -D "$SO" | grep -q __ubsan_handle && san="-fsanitize=undefined"
[ -n "$san" ] && cc=clang
$cc $san -Iinclude "$T/older.c" -L"$BUILD" -ltzr -Wl,-rpath,"$bdir" -o "$T/older" 2> "$T/cc.log"
check abi_builds_against_so test -x "$T/older"
check abi_older_struct_via_so "$T/older" "$T/older.tensors"
check abi_uses_the_so sh -c "ldd '$T/older' | grep -q 'libtzr.so.0 => $bdir/'"
# Every extensible struct at its first layout's size, against the .so.
$cc $san -Iinclude tests/abi/old_layouts.c -L"$BUILD" -ltzr -Wl,-rpath,"$bdir" -o "$T/old_layouts" 2> "$T/cc2.log"
check abi_old_layouts_build test -x "$T/old_layouts"
check abi_old_layouts_via_so "$T/old_layouts"
exit 0
