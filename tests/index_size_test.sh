#!/usr/bin/env bash
# Indexes that size themselves: 100k tensors written by tensorize (from a
# safetensors file) and by Python's write_state_dict, with no
# --index-bytes, read back byte for byte by the test's own parser; small
# files keep tensorizer's 256 KiB; incremental writers past it fail
# saying how to raise it.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
command -v python3 >/dev/null || { echo "python3 missing" >&2; exit 77; }
N=100000
python3 tests/util/make_many.py $N "$T/m.safetensors" "$T/m.raw"

check tensorize_100k_no_index_bytes $TZ -q "$T/m.safetensors" -o "$T/m.tensors"
check tensorize_100k_reads_back python3 tests/util/many_check.py "$T/m.tensors" "$T/m.raw" $N
check tensorize_100k_verifies $DT -q "$T/m.tensors" --verify

# An --index-bytes too small still fails, and says what to raise.
$TZ -q "$T/m.safetensors" -o "$T/small.tensors" --index-bytes 262144 2>"$T/full.err"
rc=$?
check tensorize_index_full_says_index_bytes \
    test "$rc" = 1 -a -n "$(grep 'index full' "$T/full.err")" -a -n "$(grep -- '--index-bytes' "$T/full.err")"

# A file that fits keeps tensorizer's 256 KiB (and bytes: cli_test).
python3 tests/util/make_many.py 1000 "$T/k.safetensors" "$T/k.raw"
$TZ -q "$T/k.safetensors" -o "$T/k.tensors"
check tensorize_1k_keeps_256k python3 tests/util/many_check.py "$T/k.tensors" "$T/k.raw" 1000

. tests/util/python_usable.sh
if ! why=$(python_blocker numpy); then
    skip python_write_state_dict_100k "$why"
    exit 0
fi
py() { TZR_LIBRARY=$(realpath "$BUILD/libtzr.so") PYTHONPATH=python /usr/bin/python3 "$@"; }
check python_write_state_dict_100k py - "$T/m.raw" "$T/p.tensors" <<'PY'
import sys
import numpy as np
from tzr import TensorSerializer
a = np.frombuffer(open(sys.argv[1], "rb").read(), dtype=np.float32).reshape(-1, 4)
with TensorSerializer(sys.argv[2]) as s:
    s.write_state_dict({"experts.%d.w" % i: a[i] for i in range(len(a))})
PY
check python_100k_reads_back python3 tests/util/many_check.py "$T/p.tensors" "$T/m.raw" $N
check python_100k_same_bytes_as_tensorize cmp "$T/p.tensors" "$T/m.tensors"

# write_tensor one at a time cannot know what comes: 256 KiB, then "index full".
check python_write_tensor_index_full py - "$T/inc.tensors" <<'PY'
import sys
import numpy as np
import tzr
from tzr import TensorSerializer
s = TensorSerializer(sys.argv[1])
try:
    for i in range(10000):
        s.write_tensor(0, "experts.%d.w" % i, 2, np.zeros(4, np.float32))
    raise SystemExit("10000 tensors fit a 256 KiB index")
except tzr.TzrError as e:
    assert "index full" in str(e) and "write_state_dict" in str(e), str(e)
    assert 4000 < i < 6000, i
s.abort()
PY
