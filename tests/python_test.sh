#!/usr/bin/env bash
# The Python package (python/tzr) against this build's libtzr.so, with
# Debian's python3, torch and numpy (scripts/deps.sh test installs them).
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
. tests/util/python_lib.sh
TZR_LIBRARY=$lib BUILD=$BUILD PYTHONPATH=python exec /usr/bin/python3 tests/python/test_tzr.py
