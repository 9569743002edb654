#!/usr/bin/env bash
# Verify levels: detensorize --verify[=full|crc32] and Python's
# verify_hash=True / "crc32" on files with one stored CRC32 or one stored
# SHA-256 spoiled (the data untouched, so only that hash disagrees).
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
command -v python3 >/dev/null || { echo "python3 missing" >&2; exit 77; }
python3 tests/util/make_many.py 50 "$T/m.safetensors" "$T/m.raw"
$TZ -q "$T/m.safetensors" -o "$T/ok.tensors"
python3 tests/util/spoil_hash.py "$T/ok.tensors" "$T/crc.tensors" experts.7.w crc32
python3 tests/util/spoil_hash.py "$T/ok.tensors" "$T/sha.tensors" experts.7.w sha256

# verify NAME FILE LEVEL-ARG WANT-RC [GREP]: exit status, and the named tensor in the output.
verify() {
    local name=$1 file=$2 arg=$3 want=$4 pat=${5:-}
    $DT "$T/$file" $arg >"$T/$name.out" 2>&1
    local rc=$?
    if [ "$rc" != "$want" ]; then fail "$name" "exit $rc, want $want: $(head -c 300 "$T/$name.out")"
    elif [ -n "$pat" ] && ! grep -q -- "$pat" "$T/$name.out"; then fail "$name" "no '$pat' in: $(head -c 300 "$T/$name.out")"
    else pass "$name"; fi
}
verify verify_clean_full ok.tensors --verify 0
verify verify_clean_crc32 ok.tensors --verify=crc32 0
verify verify_bad_crc_fails_full crc.tensors --verify 1 "BAD experts.7.w:.*crc32"
verify verify_bad_crc_fails_full_named crc.tensors --verify=full 1 "BAD experts.7.w:.*crc32"
verify verify_bad_crc_fails_crc32 crc.tensors --verify=crc32 1 "BAD experts.7.w:.*crc32"
verify verify_bad_sha_passes_crc32 sha.tensors --verify=crc32 0 "SHA-256 not checked"
verify verify_bad_sha_fails_full sha.tensors --verify 1 "BAD experts.7.w:.*sha256"
verify verify_bogus_is_usage ok.tensors --verify=bogus 2 "full or crc32"

. tests/util/python_usable.sh
if ! why=$(python_blocker numpy); then
    skip python_verify_levels "$why"
    exit 0
fi
check python_verify_levels env TZR_LIBRARY="$(realpath "$BUILD/libtzr.so")" PYTHONPATH=python TZR_NO_TORCH=1 \
    /usr/bin/python3 - "$T" <<'PY'
import sys
from tzr import TensorDeserializer
from tzr.serialization import HashMismatchError
t = sys.argv[1]
raw = open(t + "/m.raw", "rb").read()
def load(f, v):
    d = TensorDeserializer(t + "/" + f, verify_hash=v)
    return b"".join(d["experts.%d.w" % i].tobytes() for i in range(50))
assert load("sha.tensors", "crc32") == raw
assert load("ok.tensors", True) == raw
for f, v in (("sha.tensors", True), ("sha.tensors", "full"), ("crc.tensors", "crc32"), ("crc.tensors", True)):
    try:
        load(f, v)
        raise SystemExit("%s loaded with verify_hash=%r" % (f, v))
    except HashMismatchError as e:
        assert "experts.7.w" in str(e), str(e)
try:
    TensorDeserializer(t + "/ok.tensors", verify_hash="bogus")
    raise SystemExit("verify_hash='bogus' accepted")
except ValueError:
    pass
PY
