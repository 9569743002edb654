#!/usr/bin/env bash
# tensorize --compress and detensorize on compressed files: the listing shows
# stored sizes and codecs, -o OUT.tensors writes an uncompressed copy
# byte-identical to a plain tensorize of the same input, --verify passes.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
command -v python3 >/dev/null || { echo "python3 missing" >&2; exit 77; }
python3 tests/util/make_safetensors.py "$T/a.safetensors" 1
$TZ -q "$T/a.safetensors" -o "$T/plain.tensors"
check compress_writes $TZ -q "$T/a.safetensors" -o "$T/z.tensors" --compress zstd:5
check compress_flag_bit1 python3 -c "import sys; b=open('$T/z.tensors','rb').read(); sys.exit(0 if b[9]==2 and b[5]==4 else 1)"
check compress_frame_directory python3 -c "import sys; b=open('$T/z.tensors','rb').read(); i=b.find(b'TZRZDIR1'); sys.exit(0 if 73 < i < 73 + int.from_bytes(b[65:73], 'little') else 1)"
check compress_bad_arg_is_usage bash -c "$TZ -q '$T/a.safetensors' -o '$T/x.tensors' --compress lz4; test \$? = 2"
check compress_verify $DT "$T/z.tensors" --verify
check compress_list_columns bash -c "$DT '$T/z.tensors' --list | grep -q 'stored codec'"
check compress_list_json bash -c "$DT '$T/z.tensors' --list --json | python3 -c 'import json,sys; a=json.load(sys.stdin); sys.exit(0 if a and all(\"stored_length\" in t and t[\"compression\"] in (\"zstd\",\"none\") for t in a) else 1)'"
$DT -q "$T/z.tensors" -o "$T/copy.tensors" >/dev/null 2>&1 || $DT "$T/z.tensors" -o "$T/copy.tensors" >/dev/null 2>&1
check compress_uncompressed_copy_identical cmp "$T/copy.tensors" "$T/plain.tensors"
