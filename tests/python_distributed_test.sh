#!/usr/bin/env bash
# tests/python/test_distributed.py: tzr.distributed (broadcast, allgather,
# independent loads, save, failures on one rank) and its launcher, with
# torch.distributed's gloo backend on CPU, 2 and 3 processes on loopback.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
lib=$(realpath "$BUILD/libtzr.so" 2>/dev/null) || { echo "FAIL python_distributed_setup: $BUILD/libtzr.so missing"; exit 1; }
if nm -D "$lib" | grep -q '__asan_init\|__tsan_init\|__ubsan_handle'; then
    echo "python: sanitizer build of libtzr, not loadable into python3" >&2
    exit 77
fi
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || { echo "python: torch or numpy missing" >&2; exit 77; }
TZR_LIBRARY=$lib BUILD=$BUILD PYTHONPATH=python exec timeout 600 /usr/bin/python3 tests/python/test_distributed.py
