#!/usr/bin/env bash
# vLLM-style rank sets: tensorize --shards N --names vllm writes per-rank
# files named by OUT's %03d field (cut as vLLM's tensor-parallel layers
# are: column-parallel along dim 0, o_proj/down_proj along dim 1, norms
# replicated), and a set of such files with no manifest opens as one
# sharded checkpoint from the pattern alone. Oracle: tests/util/st_same.py.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
"$BUILD/tzr-bench" --make-sample "$T/m.safetensors" --size-mib 16 --layers 2 >/dev/null
same() { python3 tests/util/st_same.py "$1" "$2"; }

$TZ -q "$T/m.safetensors" --shards 2 --names vllm -o "$T/model-rank-%03d.tensors"; rc=$?
check vllm_names_files sh -c "test $rc = 0 && test -f '$T/model-rank-000.tensors' && test -f '$T/model-rank-001.tensors' &&
    test -f '$T/model-rank.tzr-index.json' && test ! -e '$T/model-rank-002.tensors'"
$DT --list "$T/model-rank-000.tensors" > "$T/r0.out"
check vllm_cut_like_tensor_parallel sh -c "grep -q 'self_attn.o_proj.weight .*\\[64, 32\\]' '$T/r0.out' &&
    grep -q 'self_attn.q_proj.weight .*\\[32, 64\\]' '$T/r0.out' && grep -q 'input_layernorm.weight .*\\[64\\]' '$T/r0.out'"
rm "$T/model-rank.tzr-index.json"   # the pattern alone must do
$DT "$T/model-rank-%03d.tensors" -q -o "$T/back.safetensors"
check vllm_rank_set_export_same same "$T/back.safetensors" "$T/m.safetensors"
$DT --list "$T/model-rank-%03d.tensors" > "$T/l.out"
check vllm_rank_set_lists sh -c "grep -q '2 shards' '$T/l.out' && grep -q 'o_proj.weight .* dim 1' '$T/l.out'"
$DT --verify "$T/model-rank-%03d.tensors" > /dev/null 2>&1
check vllm_rank_set_verifies test $? = 0

# A large tensor no vLLM rule names (an MoE expert block) is replicated, so
# the set read back from its pattern alone holds it whole, not rank 0's half.
mkdir "$T/moe"
python3 - "$T/moe/in.safetensors" <<'PY'
import json, random, struct, sys
rnd = random.Random(7)
tensors = [("model.layers.0.mlp.experts.w13_weight", [512, 1024]), ("model.norm.weight", [64])]
header, blobs, off = {}, [], 0
for name, shape in tensors:
    n = 4 * shape[0] * (shape[1] if len(shape) > 1 else 1)
    blobs.append(bytes(rnd.getrandbits(8) for _ in range(n)))
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}
    off += n
h = json.dumps(header).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
$TZ -q "$T/moe/in.safetensors" --shards 2 --names vllm -o "$T/moe/r-%03d.tensors"
rm -f "$T/moe/r.tzr-index.json"
$DT "$T/moe/r-%03d.tensors" -q -o "$T/moe/back.safetensors"
check vllm_unnamed_large_tensor_replicated same "$T/moe/back.safetensors" "$T/moe/in.safetensors"

# Rank files that disagree: one clear error naming the tensor and the file.
mkdir "$T/bad" "$T/bad2"
$TZ -q "$T/m.safetensors" -o "$T/bad/r-000.tensors"
$DT "$T/bad/r-000.tensors" -q -o "$T/part.safetensors" -f 'model.layers.*'
$TZ -q "$T/part.safetensors" -o "$T/bad/r-001.tensors"
$DT --list "$T/bad/r-%03d.tensors" > /dev/null 2> "$T/e"; rc=$?
check vllm_rank_set_missing_tensor sh -c "test $rc = 1 && grep -q \"tensor 'model.embed_tokens.weight' is in rank 0's file but not in rank 1's (.*r-001.tensors)\" '$T/e'"
"$BUILD/tzr-bench" --make-sample "$T/one.safetensors" --size-mib 16 --layers 1 >/dev/null
cp "$T/bad/r-000.tensors" "$T/bad2/r-000.tensors"
$TZ -q "$T/one.safetensors" -o "$T/bad2/r-001.tensors"
$DT --list "$T/bad2/r-%03d.tensors" > /dev/null 2> "$T/e4"; rc=$?
check vllm_rank_set_extent_mismatch sh -c "test $rc = 1 && grep -q \"tensor 'model.embed_tokens.weight': rank 1 has extent 128 in dim 1, rank 0 64 (.*r-001.tensors; not the cut dim)\" '$T/e4'"
$DT --list "$T/bad/none-%03d.tensors" > /dev/null 2> "$T/e2"; rc=$?
check vllm_rank_set_none sh -c "test $rc = 1 && grep -q \"no rank file: rank 0's\" '$T/e2'"
$TZ -q "$T/m.safetensors" --names vllm -o "$T/x-%03d.tensors" 2> "$T/e3"; rc=$?
check vllm_names_needs_shards sh -c "test $rc = 2 && grep -q 'goes with --shards' '$T/e3'"
# Files cut otherwise than vLLM cuts them: the rules go with the pattern.
mkdir "$T/cut"
rules='*.mlp.*=1,*=replicate'
$TZ -q "$T/m.safetensors" --shards 2 --names vllm --split-dim "$rules" -o "$T/cut/c-%03d.tensors"
rm -f "$T/cut/c.tzr-index.json"
# (Read with vLLM's rules these files give other global shapes: a file
# alone cannot say whether a tensor was cut or replicated.)
$DT --list "$T/cut/c-%03d.tensors" --split-dim "$rules" > "$T/l5.out" 2>&1
check vllm_rank_set_split_dim_lists sh -c "grep -q 'q_proj.weight .*\[64, 64\] .*replicated' '$T/l5.out' &&
    grep -q 'mlp.gate_proj.weight .*\[128, 64\] .*dim 1' '$T/l5.out'"
$DT "$T/cut/c-%03d.tensors" --split-dim "$rules" -q -o "$T/cut.safetensors"
check vllm_rank_set_split_dim_export_same same "$T/cut.safetensors" "$T/m.safetensors"
$DT "$T/m.safetensors" --split-dim "$rules" --list > /dev/null 2> "$T/e6"; rc=$?
check vllm_split_dim_needs_pattern sh -c "test $rc = 2 && grep -q 'goes with per-rank files' '$T/e6'"
# A missing middle rank is an error naming it, not a smaller model: the
# next ranks are probed (rank 3 after a missing 2), and the directory is
# scanned for the pattern (rank 9 after a missing 2..8).
mkdir "$T/hole" "$T/hole2"
$TZ -q "$T/m.safetensors" --shards 4 --names vllm -o "$T/hole/h-%03d.tensors"
rm "$T/hole/h-002.tensors" "$T/hole/h.tzr-index.json"
$DT "$T/hole/h-%03d.tensors" -q -o "$T/hole.safetensors" 2> "$T/eh"; rc=$?
check vllm_rank_hole_probed sh -c "test $rc = 1 && test ! -e '$T/hole.safetensors' &&
    grep -q \"rank 2's file (.*h-002.tensors) is missing, but rank 3's (.*h-003.tensors) exists\" '$T/eh'"
$TZ -q "$T/m.safetensors" --shards 10 --names vllm -o "$T/hole2/h-%03d.tensors"
for k in 2 3 4 5 6 7 8; do rm "$T/hole2/h-00$k.tensors"; done
$DT --list "$T/hole2/h-%03d.tensors" > /dev/null 2> "$T/eh2"; rc=$?
check vllm_rank_hole_scanned sh -c "test $rc = 1 && grep -q \"rank 2's file .* is missing, but rank 9's (.*h-009.tensors) exists\" '$T/eh2'"
# Only names the pattern gives count: h-0010 is not rank 10 of h-%03d.
mkdir "$T/stray"
$TZ -q "$T/m.safetensors" --shards 2 --names vllm -o "$T/stray/h-%03d.tensors"
touch "$T/stray/h-0010.tensors"
$DT --list "$T/stray/h-%03d.tensors" > "$T/ls.out" 2>&1
check vllm_rank_scan_exact_names grep -q '2 shards' "$T/ls.out"

# Wide rank fields are formatted exactly (no cut number, no invalid spec):
# two ranks, two files; a width past a file name's 255 bytes is a usage error.
mkdir "$T/wide"
$TZ -q "$T/m.safetensors" --shards 2 --names vllm -o "$T/wide/w-%0100d.tensors"; rc=$?
z99=$(printf '%099d' 0)
check vllm_wide_field_two_files sh -c "test $rc = 0 && test -f '$T/wide/w-${z99}0.tensors' &&
    test -f '$T/wide/w-${z99}1.tensors' && test \$(ls '$T/wide' | wc -l) = 4"
$DT --list "$T/wide/w-%0100d.tensors" > "$T/lw.out" 2>&1
check vllm_wide_field_opens grep -q '2 shards' "$T/lw.out"
$TZ -q "$T/m.safetensors" --shards 2 --names vllm -o "$T/wide/v-%0300d.tensors" 2> "$T/ew"; rc=$?
check vllm_too_wide_field_usage sh -c "test $rc = 2 && grep -q \"rank field '%0300d' is wider than 255 digits\" '$T/ew' &&
    test \$(ls '$T/wide' | wc -l) = 4"
exit 0
