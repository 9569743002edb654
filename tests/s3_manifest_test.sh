#!/usr/bin/env bash
# A shard manifest on S3: the manifest and its shards uploaded to Swift's
# s3api on loopback (tests/util/swift.sh), then detensorize takes
# s3://BUCKET/KEY.tzr-index.json where it takes a local manifest. And
# tensorize -o s3:// (several writer threads, small parts, many in flight)
# uploads exactly the bytes it writes locally. Hugging Face checkpoints
# and vLLM rank sets in a bucket load as they do from a directory: the
# prefix (its index, or without one the listing), the index, a single
# safetensors file, the %03d pattern; tensorize converts them from S3 to
# exactly the bytes of the local conversion. Oracle for safetensors
# outputs: tests/util/st_same.py, which parses safetensors itself.
# exit 77 (every case SKIP) when Swift or the aws CLI is missing.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
cases="s3_manifest_verify s3_manifest_export_same s3_tensorize_upload_same
s3_hf_prefix_export_same s3_hf_index_export_same s3_hf_prefix_lists_shards s3_hf_listing_without_index
s3_hf_tensorize_bytes_as_local s3_safetensors_tensorize_bytes_as_local s3_safetensors_list_sha256_as_local
s3_hf_missing_prefix_message s3_vllm_ranks_verify s3_vllm_ranks_export_same"
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

# ---- Hugging Face checkpoints and vLLM rank sets in the bucket ----------
same() { python3 tests/util/st_same.py "$1" "$2"; }
python3 tests/util/make_hf.py "$T/m.safetensors" "$T/hf" 3
mkdir "$T/noidx" && cp "$T"/hf/*.safetensors "$T/noidx/"
mkdir "$T/vl" && $TZ -q "$T/m.safetensors" --shards 2 --names vllm -o "$T/vl/model-rank-%03d.tensors"
timeout 120 aws s3 cp --quiet --recursive "$T/hf" s3://tzr/hf/ &&
    timeout 120 aws s3 cp --quiet --recursive "$T/noidx" s3://tzr/noidx/ &&
    timeout 120 aws s3 cp --quiet "$T/noidx/model-00001-of-00003.safetensors" s3://tzr/noidx/sub/extra.safetensors &&
    timeout 120 aws s3 cp --quiet "$T/noidx/model-00001-of-00003.safetensors" s3://tzr/noidx/.partial.safetensors &&
    timeout 120 aws s3 cp --quiet "$T/m.safetensors" s3://tzr/one/m.safetensors &&
    timeout 120 aws s3 cp --quiet --recursive "$T/vl" s3://tzr/vl/ || {
    for c in s3_hf_prefix_export_same s3_hf_index_export_same s3_hf_prefix_lists_shards s3_hf_listing_without_index \
        s3_hf_tensorize_bytes_as_local s3_safetensors_tensorize_bytes_as_local s3_safetensors_list_sha256_as_local \
        s3_hf_missing_prefix_message s3_vllm_ranks_verify s3_vllm_ranks_export_same; do
        fail "$c" "aws s3 cp of the checkpoints failed"
    done
    exit 1
}
timeout 120 $DT s3://tzr/hf/ -q -o "$T/hfp.safetensors" 2> "$T/hfp.err"
check s3_hf_prefix_export_same same "$T/hfp.safetensors" "$T/m.safetensors"
timeout 120 $DT s3://tzr/hf/model.safetensors.index.json -q -o "$T/hfi.safetensors" 2> "$T/hfi.err"
check s3_hf_index_export_same same "$T/hfi.safetensors" "$T/m.safetensors"
timeout 120 $DT --list s3://tzr/hf/ > "$T/hfl.out" 2>&1
check s3_hf_prefix_lists_shards grep -q '3 shards' "$T/hfl.out"
# No index: the three files directly under the prefix (not sub/extra or
# the hidden .partial, copies of the first file: taken, their tensors
# would be duplicates).
timeout 120 $DT s3://tzr/noidx/ -q -o "$T/nx.safetensors" 2> "$T/nx.err"
check s3_hf_listing_without_index same "$T/nx.safetensors" "$T/m.safetensors"
$TZ -q "$T/hf" -o "$T/hf-local.tensors"
timeout 120 $TZ -q s3://tzr/hf/ -o "$T/hf-s3.tensors" 2> "$T/ht.err"
check s3_hf_tensorize_bytes_as_local cmp "$T/hf-s3.tensors" "$T/hf-local.tensors"
timeout 120 $TZ -q s3://tzr/one/m.safetensors -o "$T/one-s3.tensors" 2> "$T/ot.err"
check s3_safetensors_tensorize_bytes_as_local cmp "$T/one-s3.tensors" "$T/plain.tensors"
$DT --list --sha256 "$T/m.safetensors" > "$T/sl.out" 2>&1
timeout 120 $DT --list --sha256 s3://tzr/one/m.safetensors > "$T/ss.out" 2>&1
check s3_safetensors_list_sha256_as_local bash -c "grep -q '[0-9a-f]\{64\}' '$T/sl.out' &&
    diff <(grep -o '[0-9a-f]\{64\}.*' '$T/sl.out') <(grep -o '[0-9a-f]\{64\}.*' '$T/ss.out')"
timeout 120 $DT --list s3://tzr/nothing-here/ > /dev/null 2> "$T/miss.err"; rc=$?
check s3_hf_missing_prefix_message sh -c "test $rc = 1 && grep -q 'no model.safetensors.index.json and no .safetensors objects under this prefix' '$T/miss.err'"
timeout 120 $DT --verify "s3://tzr/vl/model-rank-%03d.tensors" > "$T/vv.out" 2>&1
check s3_vllm_ranks_verify test $? = 0
timeout 120 $DT "s3://tzr/vl/model-rank-%03d.tensors" -q -o "$T/vl.safetensors" 2> "$T/vl.err"
check s3_vllm_ranks_export_same same "$T/vl.safetensors" "$T/m.safetensors"
exit 0
