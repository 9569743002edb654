# Sourced by the Python test scripts whose cases reach S3: a scratch $tmp
# (removed at exit, Swift stopped), no AWS settings or home files of the
# machine, and Swift with s3api on 127.0.0.1 holding bucket $1; then
# TZR_TEST_S3="ENDPOINT BUCKET" for the cases. Swift that cannot start
# leaves TZR_TEST_S3 unset, and those cases SKIP. $2 names the caller.
python_swift_start() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/tzr-$2.XXXXXX") || exit 2
    trap 'timeout 30 bash tests/util/swift.sh stop "$tmp/swift"; rm -rf "$tmp"' EXIT
    unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL \
        AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE
    export HOME=$tmp  # no ~/.s3cfg or ~/.aws of the machine's reaches a case
    local endpoint
    endpoint=$(timeout 120 bash tests/util/swift.sh start "$tmp/swift" 2>"$tmp/swift.err")
    if [ -n "$endpoint" ] && timeout 60 "$BUILD/tests/test_s3_http" --mkbucket "$endpoint" "$1" >/dev/null 2>&1; then
        export TZR_TEST_S3="$endpoint $1"
    else
        echo "$2: Swift did not start: $(tr '\n' ' ' <"$tmp/swift.err" | cut -c1-200)" >&2
    fi
}
