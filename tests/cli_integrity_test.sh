#!/usr/bin/env bash
# The tools at their edges (issue 15): no rewrite launders a corrupt input
# into fresh hashes, exports keep safetensors metadata, every bad option
# value is a usage error, and a filter that matches nothing fails.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
command -v python3 >/dev/null || { echo "python3 missing" >&2; exit 77; }
BENCH=$BUILD/tzr-bench
# Safe settings first, so that a value wrongly accepted runs a tiny benchmark
# in $T instead of writing 1 GiB under /tmp.
B="--dir $T --size-mib 16 --small 0 --repeat 1 --cases raw"

python3 tests/util/make_safetensors.py "$T/a.safetensors" 1
$TZ -q "$T/a.safetensors" -o "$T/a.tensors"
$TZ -q "$T/a.safetensors" -o "$T/z.tensors" --compress zstd

# flip FILE NAME: xor one byte in the middle of tensor NAME's data (its
# offset found by walking the index, as formats/tensorizer.md lays it out).
flip() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
p, want = sys.argv[1], sys.argv[2].encode()
raw = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", raw[57:65])[0]; pos = 73
for _ in range(n):
    nl = struct.unpack("<H", raw[pos:pos + 2])[0]; name = bytes(raw[pos + 2:pos + 2 + nl]); pos += 2 + nl + 1
    dl = raw[pos]; pos += 1 + dl; nd = raw[pos]; pos += 1 + 4 * nd
    h, d, ln = struct.unpack("<QQQ", raw[pos:pos + 24]); pos += 24
    if name == want:
        raw[d + ln // 2] ^= 0x10
        open(p, "wb").write(raw)
        sys.exit(0)
sys.exit("no tensor " + sys.argv[2])
PY
}
cp "$T/a.tensors" "$T/bad.tensors"
flip "$T/bad.tensors" embed.weight
cp "$T/z.tensors" "$T/zbad.tensors"
flip "$T/zbad.tensors" embed.weight
check flipped_file_fails_verify sh -c "! $DT $T/bad.tensors --verify >/dev/null 2>&1"

# refused NAME RC-WANTED TARGET CMD...: the command exits RC-WANTED and
# TARGET is left as it was (absent, or the bytes of $T/sentinel).
refused() {
    local name=$1 want=$2 target=$3; shift 3
    "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    if [ "$rc" != "$want" ]; then fail "$name" "exit $rc, want $want: $(head -c 300 "$T/$name.err" | tr '\n' ' ')"
    elif [ -e "$target" ] && ! cmp -s "$target" "$T/sentinel"; then fail "$name" "$target was written"
    else pass "$name"; fi
}
# names_bad NAME: the error names the file, the tensor and a byte offset.
names_bad() {
    check "$1_message" sh -c "grep -q 'bad.tensors' $T/$1.err && grep -q 'embed.weight' $T/$1.err && grep -q 'offset [0-9]' $T/$1.err"
}
printf 'old contents\n' > "$T/sentinel"

# ---- no laundering: every rewrite checks the input's hashes first ----
refused tensorize_refuses_corrupt 1 "$T/o1.tensors" $TZ -q "$T/bad.tensors" -o "$T/o1.tensors"
names_bad tensorize_refuses_corrupt
cp "$T/sentinel" "$T/o2.tensors"
refused tensorize_corrupt_keeps_target 1 "$T/o2.tensors" $TZ -q "$T/bad.tensors" -o "$T/o2.tensors"
refused tensorize_compress_refuses_corrupt 1 "$T/o3.tensors" $TZ -q "$T/bad.tensors" -o "$T/o3.tensors" --compress zstd:3
names_bad tensorize_compress_refuses_corrupt
refused tensorize_compressed_input_corrupt 1 "$T/o4.tensors" $TZ -q "$T/zbad.tensors" -o "$T/o4.tensors"
mkdir "$T/sh"
refused tensorize_shards_refuse_corrupt 1 "$T/sh/s.tzr-index.json" $TZ -q "$T/bad.tensors" -o "$T/sh/s.tensors" --shards 2
names_bad tensorize_shards_refuse_corrupt
check tensorize_shards_corrupt_leave_nothing sh -c "test -z \"\$(ls -A $T/sh)\""
check tensorize_clean_input_still_rewrites sh -c "$TZ -q $T/a.tensors -o $T/re.tensors && cmp $T/re.tensors $T/a.tensors"

refused export_safetensors_refuses_corrupt 1 "$T/o5.safetensors" $DT -q "$T/bad.tensors" -o "$T/o5.safetensors"
names_bad export_safetensors_refuses_corrupt
refused export_tensors_refuses_corrupt 1 "$T/o6.tensors" $DT -q "$T/bad.tensors" -o "$T/o6.tensors"
names_bad export_tensors_refuses_corrupt
cp "$T/sentinel" "$T/o7.safetensors"
refused export_corrupt_keeps_target 1 "$T/o7.safetensors" $DT -q "$T/bad.tensors" -o "$T/o7.safetensors"
refused export_compressed_corrupt 1 "$T/o8.safetensors" $DT -q "$T/zbad.tensors" -o "$T/o8.safetensors"
check export_no_verify_safetensors $DT -q "$T/bad.tensors" -o "$T/nv.safetensors" --no-verify
check export_no_verify_tensors $DT -q "$T/bad.tensors" -o "$T/nv.tensors" --no-verify
$DT -q "$T/a.tensors" -o "$T/good.safetensors"
check export_no_verify_copies_bytes_as_read python3 - "$T/good.safetensors" "$T/nv.safetensors" <<'PY'
import json, struct, sys
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
assert [k for k in a if a[k] != b[k]] == ["embed.weight"], [k for k in a if a[k] != b[k]]
PY
check no_verify_documented sh -c "$DT --help | grep -q -- --no-verify && grep -q -- --no-verify docs/cli.md"
$DT "$T/a.tensors" --verify --no-verify >/dev/null 2>&1
check no_verify_with_verify_is_usage test $? = 2
check no_temp_files_left sh -c "! ls -A $T $T/sh | grep -q -e '\.tmp' -e tzr-joined"

# ---- metadata: exports carry {"format":"pt"}; listing has a readable dtype ----
# header_meta FILE: print the safetensors __metadata__ as JSON.
header_meta() {
    python3 -c 'import json,struct,sys; r=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",r[:8])[0]
print(json.dumps(json.loads(r[8:8+n]).get("__metadata__")))' "$1"
}
$DT -q "$T/a.tensors" -o "$T/back.safetensors"
check export_metadata_format_pt test "$(header_meta "$T/back.safetensors")" = '{"format": "pt"}'
$TZ -q "$T/a.safetensors" -o "$T/m.tensors" --shards 2
$DT -q "$T/m.tzr-index.json" -o "$T/mback.safetensors"
check manifest_export_metadata_format_pt test "$(header_meta "$T/mback.safetensors")" = '{"format": "pt"}'
# A manifest export reads through the shards' hashes too; --no-verify skips them.
mkdir "$T/mb" && $TZ -q "$T/a.safetensors" -o "$T/mb/m.tensors" --shards 2 --split-dim "embed.weight=0"
flip "$T/mb/m-rank-00001-of-00002.tensors" embed.weight
refused manifest_export_refuses_corrupt 1 "$T/mb/o.safetensors" $DT -q "$T/mb/m.tzr-index.json" -o "$T/mb/o.safetensors"
check manifest_export_no_verify $DT -q "$T/mb/m.tzr-index.json" -o "$T/mb/o.safetensors" --no-verify
$DT "$T/a.tensors" --list --json > "$T/a.json"
check list_json_dtype_name python3 - "$T/a.json" <<'PY'
import json, sys
got = {t["name"]: t for t in json.load(open(sys.argv[1]))}
e = got["embed.weight"]
assert e["dtype_name"] == "bf16" and e["dtype"] == "<V2\u0000torch.bfloat16", e
assert got["scalar"]["dtype_name"] == "f32" and got["scalar"]["dtype"] == "<f4", got["scalar"]
assert got["model.layers.13.f8_e4m3"]["dtype_name"] == "f8_e4m3fn", got["model.layers.13.f8_e4m3"]
PY
$DT "$T/m.tzr-index.json" --list --json > "$T/m.json"
check manifest_list_json_dtype_name python3 -c "
import json; t={x['name']: x for x in json.load(open('$T/m.json'))}; assert t['embed.weight']['dtype_name']=='bf16', t['embed.weight']"

# ---- options: a bad value is a usage error naming the option and value ----
# usage NAME OPTION VALUE CMD...: exit 2, message names OPTION and VALUE,
# nothing written at $T/u.out*.
usage() {
    local name=$1 opt=$2 val=$3; shift 3
    rm -rf "$T"/u.out*
    "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    if [ "$rc" != 2 ]; then fail "$name" "exit $rc, want 2: $(head -c 200 "$T/$name.err" | tr '\n' ' ')"
    elif ! grep -qF -e "$opt" "$T/$name.err" || ! grep -qF -e "$val" "$T/$name.err"; then
        fail "$name" "message does not name $opt and '$val': $(head -c 200 "$T/$name.err" | tr '\n' ' ')"
    elif ls "$T"/u.out* >/dev/null 2>&1; then fail "$name" "an output was written"
    else pass "$name"; fi
}
A=$T/a.safetensors
usage tz_shards_abc --shards abc $TZ -q "$A" -o "$T/u.out.tensors" --shards abc
usage tz_shards_0 --shards 0 $TZ -q "$A" -o "$T/u.out.tensors" --shards 0
usage tz_shards_2x --shards 2x $TZ -q "$A" -o "$T/u.out.tensors" --shards 2x
usage tz_shards_huge --shards 100000 $TZ -q "$A" -o "$T/u.out.tensors" --shards 100000
usage tz_index_abc --index-bytes abc $TZ -q "$A" -o "$T/u.out.tensors" --index-bytes abc
usage tz_index_negative --index-bytes -1 $TZ -q "$A" -o "$T/u.out.tensors" --index-bytes -1
usage tz_index_huge --index-bytes 99999999999 $TZ -q "$A" -o "$T/u.out.tensors" --index-bytes 99999999999
usage tz_compress_99 --compress zstd:99 $TZ -q "$A" -o "$T/u.out.tensors" --compress zstd:99
usage tz_compress_1x --compress zstd:1x $TZ -q "$A" -o "$T/u.out.tensors" --compress zstd:1x
usage tz_compress_empty --compress zstd: $TZ -q "$A" -o "$T/u.out.tensors" --compress zstd:
usage tz_compress_zstdx --compress zstdx $TZ -q "$A" -o "$T/u.out.tensors" --compress zstdx
usage tz_split_missing_dim --split-dim 'embed.weight=2' $TZ -q "$A" -o "$T/u.out.tensors" --shards 2 --split-dim 'embed.weight=2'
check tz_split_missing_dim_names_tensor grep -q "embed.weight.*2 dim" "$T/tz_split_missing_dim.err"
usage tz_split_scalar_dim0 --split-dim 'scal*=0' $TZ -q "$A" -o "$T/u.out.tensors" --shards 2 --split-dim 'scal*=0'
usage tz_split_syntax --split-dim 'embed*' $TZ -q "$A" -o "$T/u.out.tensors" --shards 2 --split-dim 'embed*'
usage tz_split_bad_value --split-dim '*=x' $TZ -q "$A" -o "$T/u.out.tensors" --shards 2 --split-dim '*=x'
check tz_split_good_rule_works $TZ -q "$A" -o "$T/g.tensors" --shards 2 --split-dim 'embed.weight=1'
usage dt_threads_abc --threads abc $DT -q "$T/a.tensors" -o "$T/u.out.safetensors" --threads abc
usage dt_threads_0 --threads 0 $DT -q "$T/a.tensors" -o "$T/u.out.safetensors" --threads 0
usage dt_threads_neg --threads -3 $DT -q "$T/a.tensors" --verify --threads -3
usage dt_chunk_abc --chunk-mib abc $DT -q "$T/a.tensors" -o "$T/u.out.safetensors" --chunk-mib abc
usage dt_chunk_0 --chunk-mib 0 $DT -q "$T/a.tensors" --verify --chunk-mib 0
usage dt_chunk_8x --chunk-mib 8x $DT -q "$T/a.tensors" --verify --chunk-mib 8x
usage dt_ring_abc --ring-mib abc $DT -q "$T/a.tensors" --verify --ring-mib abc
usage dt_ring_huge --ring-mib 99999999999999 $DT -q "$T/a.tensors" --verify --ring-mib 99999999999999
usage bench_size_abc --size-mib abc $BENCH $B --size-mib abc
usage bench_layers_abc --layers abc $BENCH $B --layers abc
usage bench_small_abc --small abc $BENCH $B --small abc
usage bench_threads_abc --threads abc $BENCH $B --threads abc
usage bench_chunk_abc --chunk-mib abc $BENCH $B --chunk-mib abc
usage bench_ring_abc --ring-mib abc $BENCH $B --ring-mib abc
usage bench_repeat_abc --repeat abc $BENCH $B --repeat abc
usage bench_repeat_0 --repeat 0 $BENCH $B --repeat 0
usage bench_floor_abc --floor-gbps abc $BENCH $B --floor-gbps abc
usage bench_inflight_list --inflight 8,x $BENCH $B --source http://127.0.0.1:9/x --inflight 8,x
usage bench_range_list --range-mib 8,0 $BENCH $B --source http://127.0.0.1:9/x --range-mib 8,0
usage bench_cases_unknown --cases bogus $BENCH $B --file "$T/a.tensors" --cases bogus
usage bench_z_level --level 99 $BENCH --compress --dir "$T" --size-mib 1 --repeat 1 --level 99
usage bench_z_size --size-mib abc $BENCH --compress --dir "$T" --size-mib 1 --repeat 1 --size-mib abc
usage bench_z_rate --rate-mbps abc $BENCH --compress --dir "$T" --size-mib 1 --repeat 1 --rate-mbps abc
usage bench_z_threads --threads x $BENCH --compress --dir "$T" --size-mib 1 --repeat 1 --threads x
usage bench_z_repeat --repeat x $BENCH --compress --dir "$T" --size-mib 1 --repeat 1 --repeat x
usage bench_ranks_tensors --tensors abc $BENCH --ranks --size 1M --file "$T/r.tensors" --tensors abc
usage bench_ranks_size --size 12Q $BENCH --ranks --size 1M --file "$T/r.tensors" --size 12Q
usage bench_ranks_reps --reps 0 $BENCH --ranks --size 1M --file "$T/r.tensors" --reps 0
usage bench_ranks_chunk --chunk x $BENCH --ranks --size 1M --file "$T/r.tensors" --chunk x

# ---- a filter that matches no tensor fails and writes nothing ----
nomatch() {
    local name=$1 target=$2; shift 2
    "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    if [ "$rc" != 1 ]; then fail "$name" "exit $rc, want 1"
    elif ! grep -q "no tensor matches 'nothing\*'" "$T/$name.err"; then fail "$name" "message: $(head -c 200 "$T/$name.err")"
    elif [ -n "$target" ] && [ -e "$target" ]; then fail "$name" "$target was written"
    else pass "$name"; fi
}
nomatch filter_none_export_safetensors "$T/n1.safetensors" $DT -q "$T/a.tensors" -f 'nothing*' -o "$T/n1.safetensors"
nomatch filter_none_export_tensors "$T/n2.tensors" $DT -q "$T/a.tensors" -f 'nothing*' -o "$T/n2.tensors"
nomatch filter_none_verify "" $DT -q "$T/a.tensors" -f 'nothing*' --verify
nomatch filter_none_list "" $DT "$T/a.tensors" -f 'nothing*' --list --json
nomatch filter_none_manifest_export "$T/n3.safetensors" $DT -q "$T/m.tzr-index.json" -f 'nothing*' -o "$T/n3.safetensors"
nomatch filter_none_manifest_list "" $DT "$T/m.tzr-index.json" -f 'nothing*'
check filter_some_match_still_works sh -c "$DT -q $T/a.tensors -f 'nothing*' -f 'embed*' -o $T/n4.safetensors && test -f $T/n4.safetensors"
exit 0
