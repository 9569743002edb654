#!/usr/bin/env bash
# tests/python/test_streams.py (file objects, stream_io, utils, torch_compat,
# the tensorizer compatibility package) against this build's libtzr.so, its
# s3:// cases against a real S3 server on 127.0.0.1 (Swift with s3api,
# tests/util/swift.sh). Swift that cannot start makes those cases SKIP.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
. tests/util/python_lib.sh
. tests/util/python_swift.sh
python_swift_start tzrpy python_streams
TZR_LIBRARY=$lib PYTHONPATH=python timeout 900 /usr/bin/python3 tests/python/test_streams.py
