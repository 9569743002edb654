#!/usr/bin/env bash
# tests/python/test_distributed.py: tzr.distributed (broadcast, allgather,
# independent loads, save, failures on one rank) and its launcher, with
# torch.distributed's gloo backend on CPU, 2 and 3 processes on loopback;
# its s3:// sources against a real S3 server on 127.0.0.1 (Swift with
# s3api, tests/util/swift.sh). Swift that cannot start makes those SKIP.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
. tests/util/python_lib.sh
. tests/util/python_swift.sh
python_swift_start tzrdist python_distributed
TZR_LIBRARY=$lib BUILD=$BUILD PYTHONPATH=python timeout 600 /usr/bin/python3 tests/python/test_distributed.py
