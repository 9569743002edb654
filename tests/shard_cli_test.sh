#!/usr/bin/env bash
# Sharded checkpoints through the tools: tensorize --shards, and detensorize
# taking a manifest wherever it takes a file.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
command -v python3 >/dev/null || { echo "python3 missing" >&2; exit 77; }

"$BUILD/tzr-bench" --make-sample "$T/m.safetensors" --size-mib 24 --layers 2
$TZ -q "$T/m.safetensors" -o "$T/m.tensors"
$TZ -q "$T/m.safetensors" -o "$T/s.tensors" --shards 3 --split-dim '*embed*=1,*norm*=replicate'
check shards_written sh -c "ls $T/s-rank-0000[0-2]-of-00003.tensors && test -f $T/s.tzr-index.json && ! ls $T | grep -q -e tzr-joined -e tzr-part"
check each_shard_is_plain_tensors sh -c "for f in $T/s-rank-*.tensors; do $DT \$f --verify >/dev/null || exit 1; done"

$DT "$T/s.tzr-index.json" --list --json > "$T/s.json"
$DT "$T/m.tensors" --list --json > "$T/m.json"
check manifest_list_matches_source python3 - "$T/s.json" "$T/m.json" <<'PY'
import json, sys
s, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert [(t["name"], t["dtype"], t["shape"]) for t in s] == [(t["name"], t["dtype"], t["shape"]) for t in m]
split = {t["name"]: t["split_dim"] for t in s}
assert split["model.embed_tokens.weight"] == 1, split["model.embed_tokens.weight"]
assert split["model.norm.weight"] is None
PY
check manifest_verify $DT "$T/s.tzr-index.json" --verify
# Version 2: the header digests beside the manifest, 32 bytes a slice; a
# second run to the same prefix is refused (the digests file too) unless
# --force.
check manifest_v2_hashes_file python3 - "$T/s.tzr-index.json" "$T/s.tzr-hashes" <<'PY'
import json, os, sys
m = json.load(open(sys.argv[1]))
assert m["version"] == 2 and m["header_hashes"] == "s.tzr-hashes", (m["version"], m.get("header_hashes"))
held = [0] * m["shard_count"]
for t in m["tensors"]:
    if "split" in t:
        held = [h + 1 for h in held]
    else:
        for s in t.get("slices", []):
            held[s["shard"]] += 1
        for k in t.get("replicated", []):
            held[k] += 1
    assert "header_sha256" not in t, t["name"]
at = 0
for s in m["shards"]:
    h = s["header_hashes"]
    assert h["offset"] == at and h["count"] == held[s["index"]], (s, held)
    at += 32 * h["count"]
assert os.path.getsize(sys.argv[2]) == at, (os.path.getsize(sys.argv[2]), at)
PY
mv "$T/s.tzr-index.json" "$T/s.keep.json"
$TZ -q "$T/m.safetensors" -o "$T/s.tensors" --shards 3 2> "$T/again.err"; rc=$?
check shards_again_refused_digests_file sh -c "test $rc = 1 && grep -q 's.tzr-hashes exists; give --force' '$T/again.err'"
mv "$T/s.keep.json" "$T/s.tzr-index.json"
# The manifest's layout (formats/shards.md): one tensor entry a line.
check manifest_one_tensor_a_line python3 - "$T/s.tzr-index.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
tensors = json.loads(text)["tensors"]
lines = [l for l in text.splitlines() if l.startswith('  {"name":')]
assert len(tensors) > 3 and len(lines) == len(tensors), (len(lines), len(tensors))
assert [json.loads(l.rstrip(","))["name"] for l in lines] == [t["name"] for t in tensors]
PY
$DT "$T/s.tzr-index.json" -q -o "$T/back.safetensors"
$TZ -q "$T/back.safetensors" -o "$T/back.tensors"
check manifest_export_reassembles cmp "$T/back.tensors" "$T/m.tensors"

# Encrypted and compressed shard sets: written straight from the inputs,
# read back with the key; the same tensors as the plain set.
head -c 32 /dev/urandom > "$T/key"
$TZ -q "$T/m.safetensors" -o "$T/e.tensors" --shards 2 --key-file "$T/key"
check enc_shards_verify_with_key $DT "$T/e.tzr-index.json" --verify --key-file "$T/key"
check enc_shards_are_encrypted sh -c "! $DT $T/e-rank-00000-of-00002.tensors --verify >/dev/null 2>&1"
$DT "$T/e.tzr-index.json" -q --key-file "$T/key" -o "$T/e.safetensors"
$TZ -q "$T/e.safetensors" -o "$T/e_back.tensors"
check enc_shards_export_reassembles cmp "$T/e_back.tensors" "$T/m.tensors"
$DT "$T/e.tzr-index.json" --verify > /dev/null 2> "$T/e_nokey.err"
check enc_shards_without_key_fail test $? = 1
check enc_shards_without_key_says_so grep -q 'key or password' "$T/e_nokey.err"
$TZ -q "$T/m.safetensors" -o "$T/z.tensors" --shards 2 --compress zstd
check zstd_shards_verify $DT "$T/z.tzr-index.json" --verify
$DT "$T/z.tzr-index.json" -q -o "$T/z.safetensors"
$TZ -q "$T/z.safetensors" -o "$T/z_back.tensors"
check zstd_shards_export_reassembles cmp "$T/z_back.tensors" "$T/m.tensors"
check no_joined_copy_left sh -c "! ls -a $T | grep -q -e tzr-joined -e '\.tmp\$'"

# A flipped byte in one shard: verify names it and exits 1.
python3 - "$T/s-rank-00001-of-00003.tensors" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) - 100] ^= 1; open(p, "wb").write(b)
PY
$DT "$T/s.tzr-index.json" --verify > "$T/v.out" 2>&1
check manifest_verify_bad_exit_1 test $? = 1
check manifest_verify_bad_names_shard grep -q "BAD .*" "$T/v.out"
rm "$T/s-rank-00002-of-00003.tensors"
$DT "$T/s.tzr-index.json" --list 2> "$T/e.out"
check manifest_missing_shard_exit_1 test $? = 1
check manifest_missing_shard_message grep -q "s-rank-00002-of-00003.tensors" "$T/e.out"
$TZ -q "$T/m.safetensors" -o "$T/x.tensors" --split-dim '*=0' 2>/dev/null
check split_dim_without_shards_is_usage test $? = 2
# A shard swapped for another valid one (both hash clean, same size):
# --verify compares each header with the manifest's header_sha256, as
# every load does, and names the shard.
mkdir "$T/sw"
$TZ -q "$T/m.safetensors" --shards 2 -o "$T/sw/ck.tensors"
cp "$T/sw/ck-rank-00001-of-00002.tensors" "$T/sw/ck-rank-00000-of-00002.tensors"
$DT "$T/sw/ck.tzr-index.json" --verify > "$T/sw.out" 2> "$T/sw.err"; rc=$?
check manifest_verify_swapped_shard sh -c "test $rc = 1 && grep -q 'shard 0: tensor .*header sha256 differs from the manifest' '$T/sw.err' &&
    ! grep -q 'OK .*(shard 0)' '$T/sw.out'"
# tzr-bench --file MANIFEST: the set's rows, each run through (timings are
# not checked; both loads deliver every tensor byte of the checkpoint).
mkdir "$T/bn"
$TZ -q "$T/m.safetensors" --shards 2 -o "$T/bn/b.tensors"
"$BUILD/tzr-bench" --file "$T/bn/b.tzr-index.json" --repeat 1 --json > "$T/bn.out" 2>&1
check bench_manifest_rows python3 - "$T/bn.out" "$T/m.json" "$T/bn/b.tzr-index.json" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 8 and all(r["ok"] for r in rows), rows
tensors = json.load(open(sys.argv[2]))
want = sum(t["data_length"] for t in tensors)
loads = [r for r in rows if ("host" in r["case"] or "null" in r["case"]) and r not in rows[-2:]]
assert len(loads) == 4 and all(r["bytes"] == loads[0]["bytes"] > 0 for r in loads), loads
assert loads[0]["bytes"] == want, (want, loads[0]["bytes"])
# rank 0 of 2 (the last two rows): its slice of each split tensor, every replicated one
size = {t["name"]: t["data_length"] for t in tensors}
rank0 = 0
for e in json.load(open(sys.argv[3]))["tensors"]:
    if "replicated" in e:
        rank0 += size[e["name"]]
    elif "split" in e:  # even over the 2 shards: shard 0 holds the first ceil(n/2)
        n = e["shape"][e["split"]]
        rank0 += size[e["name"]] // n * ((n + 1) // 2)
    else:
        s0 = [s for s in e["slices"] if s["shard"] == 0][0]
        rank0 += size[e["name"]] // e["shape"][s0["dim"]] * s0["length"]
assert rows[-2]["case"] == "set open + rank 0 of 2 -> host", rows[-2]
assert rows[-2]["bytes"] == rows[-1]["bytes"] == rank0 < want, (rank0, want, rows[-2:])
PY
exit 0
