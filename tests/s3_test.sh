#!/usr/bin/env bash
# S3 cases against a real S3 server on 127.0.0.1: OpenStack Swift with the
# s3api middleware (tests/util/swift.sh), driven by the C helper
# $BUILD/tests/test_s3_http --s3 ENDPOINT. Prints PASS/FAIL/SKIP lines;
# exit 77 when Swift cannot start (every case then prints SKIP).
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
bin=$BUILD/tests/test_s3_http
cases="s3_multipart_roundtrip s3_concurrent_writers s3_goldens_roundtrip s3_wrong_secret s3_missing s3_clock_skew
s3_replaced_during_load s3_abort_leaves_nothing s3_env_chain s3_anonymous_denied s3_two_accounts"
skip_all() {
    for c in $cases; do echo "SKIP $c: $1"; done
    exit 77
}
# Not built is a broken build, not a missing service: fail.
[ -x "$bin" ] || { echo "FAIL s3_setup: $bin not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tzr-s3.XXXXXX") || skip_all "no temp dir"
trap 'timeout 30 bash tests/util/swift.sh stop "$tmp/swift"; rm -rf "$tmp"' EXIT
endpoint=$(timeout 120 bash tests/util/swift.sh start "$tmp/swift" 2>"$tmp/swift.err")
if [ -z "$endpoint" ]; then
    skip_all "Swift did not start: $(tr '\n' ' ' <"$tmp/swift.err" | cut -c1-200)"
fi
timeout 60 "$bin" --mkbucket "$endpoint" tzr || skip_all "cannot create bucket on Swift s3api"
# The second account's bucket (s3_two_accounts): a failure here is a failure.
timeout 60 "$bin" --mkbucket "$endpoint" tzr2 test2:tester2 testing2 || { echo "FAIL s3_two_accounts: no bucket"; exit 1; }
# Keep the environment from leaking real credentials/endpoints into cases.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL \
    AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE
timeout 600 "$bin" --s3 "$endpoint"
