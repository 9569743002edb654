#!/usr/bin/env bash
# A shard manifest on S3: the manifest and its shards uploaded to Swift's
# s3api on loopback (tests/util/swift.sh), then detensorize takes
# s3://BUCKET/KEY.tzr-index.json where it takes a local manifest. And
# tensorize -o s3:// (several writer threads, small parts, many in flight)
# uploads exactly the bytes it writes locally.
# exit 77 (every case SKIP) when Swift or the aws CLI is missing.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
cases="s3_manifest_verify s3_manifest_export_same s3_tensorize_upload_same"
skip_all() {
    for c in $cases; do echo "SKIP $c: $1"; done
    exit 77
}
command -v aws >/dev/null || skip_all "aws CLI missing (uploads the shards)"
[ -x "$BUILD/tests/test_s3_http" ] || skip_all "$BUILD/tests/test_s3_http not built"
trap 'timeout 30 bash tests/util/swift.sh stop "$T/swift"; rm -rf "$T"' EXIT
endpoint=$(timeout 120 bash tests/util/swift.sh start "$T/swift" 2>"$T/swift.err")
[ -n "$endpoint" ] || skip_all "Swift did not start: $(tr '\n' ' ' <"$T/swift.err" | cut -c1-200)"
timeout 60 "$BUILD/tests/test_s3_http" --mkbucket "$endpoint" tzr || skip_all "cannot create bucket"
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE
export AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1 \
    AWS_ENDPOINT_URL=$endpoint

mkdir -p "$T/ck"
"$BUILD/tzr-bench" --make-sample "$T/m.safetensors" --size-mib 16 --layers 2
$TZ -q "$T/m.safetensors" -o "$T/ck/s.tensors" --shards 2
$DT "$T/ck/s.tzr-index.json" -q -o "$T/local.safetensors"
timeout 120 aws s3 cp --quiet --recursive "$T/ck" s3://tzr/ck/ || skip_all "aws s3 cp failed"

timeout 120 $DT s3://tzr/ck/s.tzr-index.json --verify > "$T/v.out" 2>&1
check s3_manifest_verify test $? = 0
timeout 120 $DT s3://tzr/ck/s.tzr-index.json -q -o "$T/s3.safetensors" 2> "$T/e.err"
check s3_manifest_export_same cmp "$T/s3.safetensors" "$T/local.safetensors"

$TZ -q "$T/m.safetensors" -o "$T/plain.tensors"
timeout 120 $TZ -q "$T/m.safetensors" -o s3://tzr/up/m.tensors --part-size 5 --uploads 8 2> "$T/up.err" &&
    timeout 120 aws s3 cp --quiet s3://tzr/up/m.tensors "$T/up.tensors"
check s3_tensorize_upload_same cmp "$T/up.tensors" "$T/plain.tensors"
exit 0
