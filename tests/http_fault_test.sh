#!/usr/bin/env bash
# The tools over HTTP: a shard manifest served from a URL (its shards
# resolved next to it), --timeout against a server that never answers, and
# tensorize -o s3:// against a multipart target whose part uploads fail
# (refused: aborted, nothing completed) or fail once (retried: the object
# is the local file's bytes).
# The origin is tests/util/faulty_http.py on loopback.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
command -v python3 >/dev/null || { echo "python3 missing" >&2; exit 77; }

W=$T/www
mkdir -p "$W"
python3 tests/util/faulty_http.py "$W" "$T/port" 2>"$T/server.err" &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || { echo "fault server did not start" >&2; exit 77; }
URL=http://127.0.0.1:$(cat "$T/port")

"$BUILD/tzr-bench" --make-sample "$T/m.safetensors" --size-mib 16 --layers 2
$TZ -q "$T/m.safetensors" -o "$W/m.tensors"
$TZ -q "$T/m.safetensors" -o "$W/s.tensors" --shards 2
$DT "$W/s.tzr-index.json" -q -o "$T/local.safetensors"

# A manifest goes wherever a file does: here a URL, shards found beside it.
$DT "$URL/ok/s.tzr-index.json" --list > "$T/list.out" 2> "$T/list.err"
check manifest_url_list grep -q "tensors" "$T/list.out"
$DT "$URL/ok/s.tzr-index.json" --verify > "$T/verify.out" 2>&1
check manifest_url_verify_exit_0 test $? = 0
check manifest_url_shards_fetched grep -q "GET /ok/s-rank-00001-of-00002.tensors" "$W/requests.log"
$DT "$URL/ok/s.tzr-index.json" -q -o "$T/url.safetensors" 2> "$T/export.err"
check manifest_url_export_same cmp "$T/url.safetensors" "$T/local.safetensors"
rm "$W/s-rank-00001-of-00002.tensors"
$DT "$URL/ok/s.tzr-index.json" --list > /dev/null 2> "$T/missing.err"
check manifest_url_missing_shard_exit_1 test $? = 1
check manifest_url_missing_shard_named grep -q "/ok/s-rank-00001-of-00002.tensors' is missing" "$T/missing.err"

# --timeout: a server that accepts and never answers fails after 3 tries
# of SECONDS each, not after every retry of the 300 s budget.
: > "$W/requests.log"
$DT "$URL/silent/m.tensors" --list --timeout 1 > /dev/null 2> "$T/silent.err"
check detensorize_timeout_exit_1 test $? = 1
check detensorize_timeout_message grep -q "no answer" "$T/silent.err"
check detensorize_timeout_three_tries test "$(grep -c 'HEAD /silent/m.tensors' "$W/requests.log")" = 3
$TZ -q "$URL/silent/m.tensors" -o "$T/x.tensors" --timeout 1 2> "$T/tz.err"
check tensorize_timeout_exit_1 test $? = 1
check tensorize_timeout_message grep -q "no answer" "$T/tz.err"
check tensorize_timeout_no_output test ! -e "$T/x.tensors"
# A server that answers at 1 byte/s fails within a few --timeout windows
# (each transfer held to 1 KiB/s), and the attempts it names are the GETs
# that were made (timeout 200 only guards against a hang: the budget is 300 s).
: > "$W/requests.log"
timeout 200 $DT "$URL/trickle/m.tensors" --list --timeout 2 > /dev/null 2> "$T/trickle.err"
check trickle_read_fails test $? = 1
n=$(sed -n 's/.* \([0-9][0-9]*\) attempts.*/\1/p' "$T/trickle.err" | head -1)
check trickle_attempts_counted sh -c "test -n '$n' && test '$n' -gt 1 && test '$n' = \$(grep -c '^GET /trickle/' '$W/requests.log')"
$DT "$URL/ok/m.tensors" --list --timeout abc > /dev/null 2>&1
check timeout_not_a_number_is_usage test $? = 2
$TZ -q "$W/m.tensors" -o "$T/y.tensors" --timeout 0 2>/dev/null
check timeout_zero_is_usage test $? = 2
$DT "$URL/ok/m.tensors" --verify --timeout 5 > /dev/null 2>&1
check timeout_healthy_server_ok test $? = 0
# ---- a part upload that fails, and one that fails once -------------------
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE
export AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s AWS_DEFAULT_REGION=us-east-1 AWS_ENDPOINT_URL=$URL
$TZ -q "$T/m.safetensors" -o "$T/plain.tensors"
: > "$W/requests.log"
$TZ -q "$T/m.safetensors" -o s3://partfail/x.tensors --part-size 5 2> "$T/pf.err"; rc=$?
check s3_part_refused_fails sh -c "test $rc = 1 && grep -q 'AccessDenied' '$T/pf.err' && grep -q 'nothing was written to s3://partfail/x.tensors' '$T/pf.err'"
check s3_part_refused_aborted sh -c "grep -q '^DELETE /partfail/x.tensors?uploadId=u1 ' '$W/requests.log' &&
    ! grep -q '^POST /partfail/x.tensors?uploadId=' '$W/requests.log'"
: > "$W/requests.log"
$TZ -q "$T/m.safetensors" -o s3://partretry/y.tensors --part-size 5 2> "$T/pr.err"
check s3_part_retried_completes cmp "$W/y.tensors" "$T/plain.tensors"
parts=$(grep -c '^PUT /partretry/y.tensors?partNumber=' "$W/requests.log")
check s3_part_retried_each sh -c "test $parts -ge 4 && test \$(( $parts % 2 )) = 0"

# A rank set where a missing key answers 403 (S3 without s3:ListBucket):
# the rank after the 403 is probed, so a set of 2 ranks still opens, and a
# hole (rank 2 of 0, 1, 3) is an error naming the missing rank.
$TZ -q "$T/m.safetensors" --shards 2 --names vllm -o "$W/r-%03d.tensors"
$DT "$URL/deny/r-%03d.tensors" --verify > "$T/rd.out" 2>&1; rc=$?
check rank_set_403_ends_set sh -c "test $rc = 0 && grep -q 'shard 1' '$T/rd.out'"
$TZ -q "$T/m.safetensors" --shards 4 --names vllm -o "$W/h-%03d.tensors"
rm "$W/h-002.tensors"
$DT "$URL/deny/h-%03d.tensors" --list > /dev/null 2> "$T/hd.err"; rc=$?
check rank_set_403_hole_named sh -c "test $rc = 1 && grep -q \"rank 2's file (.*h-002.tensors) is not readable (HTTP 403.*rank 3's (.*h-003.tensors) exists\" '$T/hd.err'"
$DT "$URL/ok/h-%03d.tensors" --list > /dev/null 2> "$T/ho.err"; rc=$?
check rank_set_404_hole_named sh -c "test $rc = 1 && grep -q \"rank 2's file (.*h-002.tensors) is missing, but rank 3's\" '$T/ho.err'"
exit 0
