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
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tzr-pydist.XXXXXX") || exit 2
trap 'timeout 30 bash tests/util/swift.sh stop "$tmp/swift"; rm -rf "$tmp"' EXIT
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL \
    AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE
export HOME=$tmp  # no ~/.s3cfg or ~/.aws of the machine's reaches a case
endpoint=$(timeout 120 bash tests/util/swift.sh start "$tmp/swift" 2>"$tmp/swift.err")
if [ -n "$endpoint" ] && timeout 60 "$BUILD/tests/test_s3_http" --mkbucket "$endpoint" tzrdist >/dev/null 2>&1; then
    export TZR_TEST_S3="$endpoint tzrdist"
else
    echo "python_distributed: Swift did not start: $(tr '\n' ' ' <"$tmp/swift.err" | cut -c1-200)" >&2
fi
TZR_LIBRARY=$lib BUILD=$BUILD PYTHONPATH=python timeout 600 /usr/bin/python3 tests/python/test_distributed.py
