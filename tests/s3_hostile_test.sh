#!/usr/bin/env bash
# The tools against S3 answers Swift cannot give, from
# tests/util/hostile_s3.py on loopback (its bucket picks the behaviour):
# existing objects and --force, keys with dot segments, listings that are
# big, endless or point outside the prefix, Complete answers that fail
# late or are lost, part ETags that need escaping, a server that dies
# mid-upload, and outputs (shard sets, exports) to S3.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
command -v python3 >/dev/null || { echo "python3 missing" >&2; exit 77; }
LOG=$T/requests.log
: > "$LOG"
python3 tests/util/hostile_s3.py "$LOG" "$T/port" 2>"$T/server.err" &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || { echo "hostile S3 server did not start" >&2; exit 77; }
URL=http://127.0.0.1:$(cat "$T/port")
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE
export AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s AWS_DEFAULT_REGION=us-east-1 AWS_ENDPOINT_URL=$URL
# Fetch an object straight from the server (no signing, no libtzr).
get() { python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1]).read())' "$URL/$1"; }
# Hang guard only: every case here ends in seconds when it works.
G="timeout 120"

"$BUILD/tzr-bench" --make-sample "$T/m.safetensors" --size-mib 16 --layers 2
$TZ -q "$T/m.safetensors" -o "$T/m.tensors"

# ---- keys are opaque: dot segments signed and sent as they are ----------
$G $TZ -q "$T/m.safetensors" -o 's3://plain/d/../x.tensors' --part-size 5 2> "$T/dot.err"
check s3_dotdot_key_written sh -c "grep -qF 'POST /plain/d/../x.tensors?uploads' '$LOG' && ! grep -q ' /plain/x.tensors' '$LOG'"
get plain/d/../x.tensors > "$T/dot.tensors" 2>/dev/null
check s3_dotdot_key_bytes cmp "$T/dot.tensors" "$T/m.tensors"
$G $DT 's3://plain/d/../x.tensors' --verify > "$T/dotv.out" 2>&1
check s3_dotdot_key_read test $? = 0
# ---- a listing's keys outside the prefix are not followed ---------------
: > "$LOG"
$G $DT s3://outside/dir/ --list > "$T/out.list" 2> "$T/out.err"
check s3_list_outside_prefix_ignored sh -c "grep -q tensor_a '$T/out.list' && ! grep -q 'tensor_outside\|tensor_dotdot' '$T/out.list' &&
    ! grep -q 'zzzzzz\|/outside/\.\./ab' '$LOG'"
# ---- answers over 1 MiB are read whole ----------------------------------
$G $DT s3://biglist/dir/ --list > "$T/big.list" 2> "$T/big.err"
check s3_list_page_over_1mib sh -c "grep -q tensor_a '$T/big.list' && grep -q tensor_b '$T/big.list'"
$G $DT s3://hugelist/dir/ --list > /dev/null 2> "$T/huge.err"
check s3_answer_over_bound_refused sh -c "test $? = 1 && grep -q 'over 64 MiB' '$T/huge.err'"
$G $TZ -q "$T/m.safetensors" -o s3://latecomplete/x.tensors --part-size 5 2> "$T/late.err"
check s3_complete_late_error_fails sh -c "test $? = 1 && grep -q InternalError '$T/late.err'"
# ---- a listing that never ends ------------------------------------------
timeout 60 $DT s3://sametoken/dir/ --list > /dev/null 2> "$T/same.err"
check s3_list_repeated_token_fails sh -c "test $? = 1 && grep -q 'continuation token' '$T/same.err'"
# ---- part ETags go into the Complete XML escaped ------------------------
$G $TZ -q "$T/m.safetensors" -o s3://amp/x.tensors --part-size 5 2> "$T/amp.err"
check s3_complete_etag_escaped_exit_0 test $? = 0
get amp/x.tensors > "$T/amp.tensors" 2>/dev/null
check s3_complete_etag_escaped_bytes cmp "$T/amp.tensors" "$T/m.tensors"
# ---- an existing output is replaced only with --force -------------------
: > "$LOG"
$G $TZ -q "$T/m.safetensors" -o s3://plain/exists.tensors 2> "$T/ex.err"
check s3_existing_refused sh -c "test $? = 1 && grep -q 'exists; give --force' '$T/ex.err'"
check s3_existing_untouched sh -c "test \"\$(python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' $URL/plain/exists.tensors)\" = keep &&
    ! grep -q '^\(PUT\|POST\) /plain/exists' '$LOG'"
$G $TZ -q "$T/m.safetensors" -o s3://plain/exists.tensors --force 2> "$T/exf.err"
get plain/exists.tensors > "$T/exf.tensors" 2>/dev/null
check s3_existing_force_replaces cmp "$T/exf.tensors" "$T/m.tensors"
$G $DT "$T/m.tensors" -o s3://plain/exists.tensors 2> "$T/exd.err"
check s3_existing_refused_detensorize sh -c "test $? = 1 && grep -q 'exists; give --force' '$T/exd.err'"
# A local path is a URL only for the schemes the library knows.
mkdir "$T/x:" && echo keep > "$T/x:/keep.tensors"
(cd "$T" && $G "$OLDPWD/$TZ" -q m.safetensors -o 'x://keep.tensors') 2> "$T/lx.err"
check local_scheme_like_path_refused sh -c "test $? = 1 && grep -q 'exists; give --force' '$T/lx.err' && test \"\$(cat '$T/x:/keep.tensors')\" = keep"
# ---- a Complete carried out whose answer was lost -----------------------
$G $TZ -q "$T/m.safetensors" -o s3://dropcomplete/x.tensors --part-size 5 2> "$T/dc.err"
check s3_complete_lost_answer_succeeds sh -c "test $? = 0 && ! grep -q 'nothing was written' '$T/dc.err'"
get dropcomplete/x.tensors > "$T/dc.tensors" 2>/dev/null
check s3_complete_lost_answer_bytes cmp "$T/dc.tensors" "$T/m.tensors"
$G $TZ -q "$T/m.safetensors" -o s3://dropfail/old.tensors --force --part-size 5 2> "$T/df.err"
check s3_complete_lost_not_ours_fails sh -c "test $? = 1 && grep -q 'nothing was written' '$T/df.err' &&
    test \"\$(python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' $URL/dropfail/old.tensors)\" = 'old object'"
# ---- a server that dies mid-upload: the upload left behind is named -----
: > "$LOG"
$G $TZ -q "$T/m.safetensors" -o s3://crash/x.tensors --part-size 5 2> "$T/crash.err"
rc=$?
uid=$(sed -n 's/^PUT .*uploadId=\([a-z0-9]*\).*/\1/p' "$LOG" | head -1)
check s3_crash_orphan_upload_named sh -c "test $rc = 1 && test -n '$uid' && grep -q \"abort-multipart-upload --bucket crash --key x.tensors --upload-id $uid\" '$T/crash.err'"
# ---- outputs to S3: exports work, shard sets are refused up front -------
: > "$LOG"
$G $TZ -q "$T/m.safetensors" -o s3://plain/sh.tensors --shards 2 2> "$T/sh.err"
check s3_shards_refused_up_front sh -c "test $? = 2 && grep -q 'shards writes local files only' '$T/sh.err' && ! test -s '$LOG'"
$DT "$T/m.tensors" -q -o "$T/local.safetensors"
$G $DT "$T/m.tensors" -q -o s3://plain/e.safetensors 2> "$T/e.err"
check s3_export_safetensors_exit_0 test $? = 0
get plain/e.safetensors > "$T/e.safetensors" 2>/dev/null
check s3_export_safetensors_bytes cmp "$T/e.safetensors" "$T/local.safetensors"
$TZ -q "$T/m.safetensors" -o "$T/s.tensors" --shards 2
$G $DT "$T/s.tzr-index.json" -q -o s3://plain/s.safetensors 2> "$T/se.err"
get plain/s.safetensors > "$T/s.safetensors" 2>/dev/null
check s3_export_from_shards_bytes cmp "$T/s.safetensors" "$T/local.safetensors"
"$BUILD/tzr-bench" --make-sample "$T/big.safetensors" --size-mib 48 --layers 2 # over one 16 MiB part
: > "$LOG"
$G $DT "$T/big.safetensors" -q -o s3://latecomplete/e.safetensors 2> "$T/le.err"
check s3_export_failure_leaves_nothing sh -c "test $? = 1 && grep -q '^DELETE /latecomplete/e.safetensors?uploadId=' '$LOG' &&
    ! python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1])' $URL/latecomplete/e.safetensors 2>/dev/null"
# The same for a .tensors export (the writer's output): the bytes of a
# local export, and a failed Complete aborts the upload, no object left.
$DT "$T/m.tensors" -q -o "$T/local-e.tensors"
$G $DT "$T/m.tensors" -q -o s3://plain/e.tensors 2> "$T/et.err"
check s3_export_tensors_exit_0 test $? = 0
get plain/e.tensors > "$T/e.tensors" 2>/dev/null
check s3_export_tensors_bytes cmp "$T/e.tensors" "$T/local-e.tensors"
$TZ -q "$T/big.safetensors" -o "$T/big.tensors"
: > "$LOG"
$G $DT "$T/big.tensors" -q -o s3://latecomplete/e.tensors 2> "$T/let.err"
check s3_export_tensors_failure_leaves_nothing sh -c "test $? = 1 && grep -q '^DELETE /latecomplete/e.tensors?uploadId=' '$LOG' &&
    ! python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1])' $URL/latecomplete/e.tensors 2>/dev/null"
