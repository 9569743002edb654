#!/usr/bin/env bash
# The Python package (python/tzr) against this build's libtzr.so, with
# Debian's python3, torch and numpy (scripts/deps.sh test installs them).
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
lib=$(realpath "$BUILD/libtzr.so" 2>/dev/null) || { echo "FAIL python_setup: $BUILD/libtzr.so missing"; exit 1; }
# A sanitizer runtime cannot be loaded into python3 after the fact.
if nm -D "$lib" | grep -q '__asan_init\|__tsan_init\|__ubsan_handle'; then
    echo "python: sanitizer build of libtzr, not loadable into python3" >&2
    exit 77
fi
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || { echo "python: torch or numpy missing" >&2; exit 77; }
TZR_LIBRARY=$lib BUILD=$BUILD PYTHONPATH=python exec /usr/bin/python3 tests/python/test_tzr.py
