#!/usr/bin/env bash
# Checkpoints as they come: safetensors files read through the same reader
# and pipeline as .tensors files, Hugging Face directories and their
# model.safetensors.index.json as one set (weight map checked against the
# files), and a clear message for files that are neither. The oracle is
# tests/util/st_same.py, which parses safetensors itself.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
"$BUILD/tzr-bench" --make-sample "$T/m.safetensors" --size-mib 16 --layers 2 >/dev/null
python3 tests/util/make_hf.py "$T/m.safetensors" "$T/hf" 3
same() { python3 tests/util/st_same.py "$1" "$2"; }

$DT --list "$T/m.safetensors" > "$T/l.out" 2>&1
check safetensors_lists sh -c "grep -q 'safetensors, ' '$T/l.out' && grep -q 'model.embed_tokens.weight' '$T/l.out'"
$DT "$T/m.safetensors" -q -o "$T/a.safetensors"
check safetensors_export_same same "$T/a.safetensors" "$T/m.safetensors"
$DT --verify "$T/m.safetensors" 2> "$T/v.err"; rc=$?
check safetensors_verify_says_no_hashes sh -c "test $rc = 1 && grep -q 'stores no hashes, so nothing was verified' '$T/v.err'"

$DT "$T/hf" -q -o "$T/dir.safetensors"
check hf_directory_export_same same "$T/dir.safetensors" "$T/m.safetensors"
$DT "$T/hf/model.safetensors.index.json" -q -o "$T/idx.safetensors"
check hf_index_export_same same "$T/idx.safetensors" "$T/m.safetensors"
$DT --list "$T/hf" > "$T/hl.out"
check hf_directory_lists sh -c "grep -q '3 shards' '$T/hl.out'"
$TZ -q "$T/hf" -o "$T/hf.tensors" && $DT "$T/hf.tensors" -q -o "$T/back.safetensors"
check hf_tensorize_round_trip same "$T/back.safetensors" "$T/m.safetensors"
$TZ -q "$T/m.safetensors" -o "$T/m.tensors"
check hf_tensorize_bytes_as_single_file cmp "$T/hf.tensors" "$T/m.tensors"
$DT "$T"/hf/model-0000[123]-of-00003.safetensors -q -o "$T/list.safetensors"
check hf_file_list_export_same same "$T/list.safetensors" "$T/m.safetensors"
$DT --list "$T/hf/model-00001-of-00003.safetensors" "$T/hf/model-00001-of-00003.safetensors" > /dev/null 2> "$T/dup.err"; rc=$?
check hf_file_list_duplicate_tensor sh -c "test $rc = 1 && grep -q \"tensor 'model.embed_tokens.weight' is in both\" '$T/dup.err'"
mkdir "$T/noidx" && cp "$T"/hf/*.safetensors "$T/noidx/"
$DT "$T/noidx" -q -o "$T/noidx.safetensors"
check hf_directory_without_index same "$T/noidx.safetensors" "$T/m.safetensors"

# The weight map against the files: each disagreement names tensor and files.
edit_index() { # DIR PYTHON-EXPR-ON-wm
    cp -r "$T/hf" "$1"
    python3 - "$1/model.safetensors.index.json" "$2" <<'PY'
import json, sys
p, expr = sys.argv[1], sys.argv[2]
j = json.load(open(p)); wm = j["weight_map"]; exec(expr); json.dump(j, open(p, "w"))
PY
}
edit_index "$T/e1" 'wm["not.a.tensor"] = "model-00001-of-00003.safetensors"'
$DT --list "$T/e1" > /dev/null 2> "$T/e1.err"; rc=$?
check hf_index_lists_missing_tensor sh -c "test $rc = 1 && grep -q \"lists tensor 'not.a.tensor' in model-00001-of-00003.safetensors\" '$T/e1.err'"
edit_index "$T/e2" 'wm["model.embed_tokens.weight"] = "model-00002-of-00003.safetensors"'
$DT --list "$T/e2" > /dev/null 2> "$T/e2.err"; rc=$?
check hf_index_wrong_file sh -c "test $rc = 1 && grep -q \"'model.embed_tokens.weight' is in .*model-00001-of-00003.safetensors but the index maps it to model-00002-of-00003.safetensors\" '$T/e2.err'"
edit_index "$T/e3" 'del wm["model.embed_tokens.weight"]'
$TZ -q "$T/e3" -o "$T/e3.tensors" 2> "$T/e3.err"; rc=$?
check hf_index_unlisted_tensor sh -c "test $rc = 1 && grep -q \"'model.embed_tokens.weight' is in .* but the index does not list it\" '$T/e3.err' && test ! -e '$T/e3.tensors'"

# What a file is, from its bytes.
: > "$T/empty.tensors"
printf 'PK\003\004rest' > "$T/model.pt"
printf '\200\002}q\000.' > "$T/legacy.bin"
printf '{"weight_map": {}}' > "$T/x.tensors"
$DT --list "$T/empty.tensors" 2> "$T/s1"; r1=$?
$DT --list "$T/model.pt" 2> "$T/s2"; r2=$?
$DT --list "$T/legacy.bin" 2> "$T/s3"; r3=$?
$DT --list "$T/x.tensors" 2> "$T/s4"; r4=$?
check sniff_empty sh -c "test $r1 = 1 && grep -q 'empty file' '$T/s1'"
check sniff_zip sh -c "test $r2 = 1 && grep -q 'zip archive (a torch.save checkpoint?)' '$T/s2'"
check sniff_pickle sh -c "test $r3 = 1 && grep -q 'Python pickle' '$T/s3'"
check sniff_json sh -c "test $r4 = 1 && grep -q 'this is a JSON file' '$T/s4'"
cp "$T/m.safetensors" "$T/renamed.tensors"
$DT --list "$T/renamed.tensors" > "$T/s5" 2>&1
check sniff_by_bytes_not_extension grep -q 'safetensors, ' "$T/s5"
exit 0
