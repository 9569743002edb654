#!/usr/bin/env bash
# tests/python/test_streams.py (file objects, stream_io, utils, torch_compat,
# the tensorizer compatibility package) against this build's libtzr.so, its
# s3:// cases against a real S3 server on 127.0.0.1 (Swift with s3api,
# tests/util/swift.sh). Swift that cannot start makes those cases SKIP.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
. tests/util/python_lib.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tzr-pys3.XXXXXX") || exit 2
trap 'timeout 30 bash tests/util/swift.sh stop "$tmp/swift"; rm -rf "$tmp"' EXIT
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL \
    AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE
export HOME=$tmp  # no ~/.s3cfg or ~/.aws of the machine's reaches a case
endpoint=$(timeout 120 bash tests/util/swift.sh start "$tmp/swift" 2>"$tmp/swift.err")
if [ -n "$endpoint" ] && timeout 60 "$BUILD/tests/test_s3_http" --mkbucket "$endpoint" tzrpy >/dev/null 2>&1; then
    export TZR_TEST_S3="$endpoint tzrpy"
else
    echo "python_streams: Swift did not start: $(tr '\n' ' ' <"$tmp/swift.err" | cut -c1-200)" >&2
fi
TZR_LIBRARY=$lib PYTHONPATH=python timeout 900 /usr/bin/python3 tests/python/test_streams.py
