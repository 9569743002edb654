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
check layout_one_dlopen_loader sh -c '[ "$(grep -l "dlopen(" src/*/*.c)" = src/gpu/gpu_dl.c ]'
check layout_comm_no_sink_headers sh -c "! grep -hE '^#include \"[^\"]*cuda[^\"]*\"' src/comm/*.[ch] | grep . &&
  for h in \$(grep -ho '^#include \"[^\"]*\"' src/comm/*.[ch] | cut -d'\"' -f2); do [ ! -e src/sinks/\$h ] || exit 1; done"
