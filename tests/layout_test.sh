#!/usr/bin/env bash
# The source layout keeps its layers apart: the format layer (src/format/)
# is pure byte work, so it includes only its own and the core headers and
# the C library, never threads, I/O, crypto, CUDA, MPI or HTTP; and every
# library source lives in a layer folder (none loose in src/).
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
allowed='^#include (<(stddef|stdint|stdlib|string|limits|stdio|inttypes|stdbool)\.h>|"(format|cursor|internal|tzr)\.h")$'
bad=$(grep -h '^#include' src/format/*.[ch] | grep -Ev "$allowed")
check layout_format_pure test -z "$bad"
[ -z "$bad" ] || echo "  format layer includes: $bad" >&2
check layout_core_no_threads sh -c "! grep -l 'pthread\\|curl\\|mpi\\.h\\|cuda' src/core/*.[ch] | grep ."
check layout_no_loose_sources sh -c "! ls src/*.c src/*.h 2>/dev/null | grep ."
check layout_every_folder_has_sources sh -c 'for d in src/*/; do ls "$d"*.c >/dev/null 2>&1 || exit 1; done'
# The GPU layer owns run-time loading: one dlopen, in src/gpu/gpu_dl.c, and
# comm/ reaches the device through src/gpu/, never through a sink's header.
# Library threads start through one door (signals blocked: src/util/thread.c).
check layout_one_thread_door sh -c '[ "$(grep -l "pthread_create(" src/*/*.c)" = src/util/thread.c ]'
check layout_one_dlopen_loader sh -c '[ "$(grep -l "dlopen(" src/*/*.c)" = src/gpu/gpu_dl.c ]'
check layout_comm_no_sink_headers sh -c "! grep -hE '^#include \"[^\"]*cuda[^\"]*\"' src/comm/*.[ch] | grep . &&
  for h in \$(grep -ho '^#include \"[^\"]*\"' src/comm/*.[ch] | cut -d'\"' -f2); do [ ! -e src/sinks/\$h ] || exit 1; done"

# No include cycles between layer folders. Every folder is on -I, so an
# #include "x.h" names no folder: each is resolved here to the folder that
# holds x.h, and a public header to the layer that implements it (a layer
# calling net/ through tzr_http.h depends on net/ as surely as one that
# includes http_internal.h). The folder graph must sort (tsort finds no
# loop).
layer_edges() {
    declare -A home=([tzr_http.h]=net [tzr_shard.h]=shard [tzr_comm.h]=comm [tzr_safetensors.h]=safetensors
        [tzr_load.h]=load)
    local f d h t
    for f in src/*/*.h; do home[$(basename "$f")]=$(basename "$(dirname "$f")"); done
    for f in src/*/*.[ch]; do
        d=$(basename "$(dirname "$f")")
        for h in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
            t=${home[$h]:-}
            [ -n "$t" ] && [ "$t" != "$d" ] && echo "$d $t"
        done
    done | sort -u
}
edges=$(layer_edges)
loop=$(printf '%s\n' "$edges" | tsort 2>&1 >/dev/null)
check layout_no_include_cycles test -z "$loop"
[ -z "$loop" ] || echo "  include cycle between layers: $(echo $loop)" >&2
# The scheme table sits above the layers it dispatches to, and they never
# include it back.
check layout_scheme_above_io_net sh -c "! grep -l '\"scheme.h\"' src/io/*.[ch] src/net/*.[ch] | grep ."
# URL dispatch lives in the scheme table (tzr_path_kind for the tools):
# no other layer above net/ and no tool tests a scheme prefix itself, and
# the tools hand their network flags to the library per call, never by
# setenv.
check layout_no_prefix_checks sh -c "! grep -nE 'str(n)?(case)?cmp\\([^;]*\"(s3|https?)://\"' src/file/*.c src/shard/*.c src/load/*.c src/comm/*.c tools/*.c tools/common/*.c | grep ."
check layout_tools_no_setenv sh -c "! grep -n 'setenv(' tools/*.c tools/common/*.c | grep ."
