#!/usr/bin/env bash
# make demo: the main job on a built-in example. Writes an LLM-shaped
# safetensors checkpoint, converts it with tensorize (plain and encrypted),
# lists, verifies and exports it with detensorize, and times each step
# next to a raw read of the same file.
set -euo pipefail
BUILD=${1:-build}
D=$(mktemp -d /tmp/tzr-demo-XXXXXX)
trap 'rm -rf "$D"' EXIT
export TZR_NO_PROGRESS=${TZR_NO_PROGRESS:-}
step() { printf '\n== %s\n' "$*"; }
timed() {
    local t0 t1
    t0=$(date +%s%N)
    "$@"
    t1=$(date +%s%N)
    printf '   (%d.%02d s)\n' $(((t1 - t0) / 1000000000)) $(((t1 - t0) / 10000000 % 100))
}

step "1. write a 256 MiB LLM-shaped checkpoint: $D/model.safetensors"
timed "$BUILD/tzr-bench" --make-sample "$D/model.safetensors" --size-mib 256 --layers 8

step "2. tensorize model.safetensors -o model.tensors"
timed "$BUILD/tensorize" "$D/model.safetensors" -o "$D/model.tensors"

step "3. detensorize model.tensors --list (first rows)"
"$BUILD/detensorize" "$D/model.tensors" --list > "$D/list.txt"
head -8 "$D/list.txt"

step "4. detensorize model.tensors --verify"
timed "$BUILD/detensorize" "$D/model.tensors" --verify

step "5. detensorize model.tensors -o roundtrip.safetensors, then compare tensor bytes"
timed "$BUILD/detensorize" "$D/model.tensors" -o "$D/roundtrip.safetensors"
"$BUILD/detensorize" "$D/model.tensors" --list --json --sha256 > "$D/a.json"
"$BUILD/tensorize" -q "$D/roundtrip.safetensors" -o "$D/again.tensors"
"$BUILD/detensorize" "$D/again.tensors" --list --json --sha256 > "$D/b.json"
cmp -s "$D/a.json" "$D/b.json" && echo "   round trip: every tensor's SHA-256 matches"

step "6. encrypted: tensorize --key-file, verify with the key, and without it"
head -c 32 /dev/urandom > "$D/key"
timed "$BUILD/tensorize" -q "$D/model.safetensors" -o "$D/model.enc.tensors" --key-file "$D/key"
timed "$BUILD/detensorize" "$D/model.enc.tensors" --verify --key-file "$D/key"
"$BUILD/detensorize" "$D/model.enc.tensors" --verify > /dev/null 2> "$D/nokey.txt" || echo "   without the key: $(head -1 "$D/nokey.txt")"

step "7. load speed on this machine (warm page cache), next to a raw read"
"$BUILD/tzr-bench" --file "$D/model.tensors" --small 0 --repeat 3 --cases raw,host,host-verify,null,null-verify
