#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU: the CUDA sink against the
# real runtime (byte-for-byte round trip through device memory) and the
# device benchmark next to pinned cudaMemcpy measured in the same run;
# tzr's Python loads onto CUDA tensors (tests/gpu/python_cuda.py) and
# tzr.distributed's cases (tests/gpu/distributed_test.py).
# Without a GPU it exits 77 (skipped).
# Usage: tests/gpu/run.sh [BUILD_DIR]   (binaries from `make`, or carried)
# TZR_CUDART=path/to/libfakecudart.so runs it against the fake runtime.
set -u
cd "$(dirname "$0")/../.." || exit 2
BUILD=${1:-${BUILD:-build}}
if [ -z "${TZR_CUDART:-}" ] && [ ! -e /dev/nvidiactl ] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "no NVIDIA GPU on this machine" >&2
    exit 77
fi
if [ ! -x "$BUILD/tests/gpu_load" ]; then
    make -s BUILD="$BUILD" "$BUILD/tests/gpu_load" || exit 1
fi
nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current,memory.total --format=csv 2>/dev/null
# Every part runs even after one fails (a device is lent briefly); the
# exit status is the first failure's.
worst=0
part() { # part CMD...: runs it; 77 is a skip
    "$@"
    local rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || { echo "FAIL part: $* (exit $rc)"; [ "$worst" != 0 ] || worst=$rc; }
}
part "$BUILD/tests/gpu_load" "${TMPDIR:-/tmp}"
echo "--- device benchmark (warm page cache; floor: pinned cudaMemcpy H2D in the same run)"
part "$BUILD/tzr-bench" --size-mib "${GPU_BENCH_MIB:-4096}" --layers 32 --small 0 --repeat 3 --cuda \
    --cases raw,host,host-crc32,null,cuda,cuda-crc32,cuda-verify,sha,crc32 ${GPU_BENCH_JSON:+--json}
# Python onto CUDA tensors: the first python3 on PATH with torch and numpy
# (a GPU machine's own), else Debian's. 77 (torch without CUDA, as under
# the fake runtime): skipped.
PY=${PYTHON:-}
for p in python3 /usr/bin/python3; do
    [ -z "$PY" ] && "$p" -c 'import torch, numpy' 2>/dev/null && PY=$p
done
if [ -n "$PY" ]; then
    export BUILD TZR_LIBRARY=$(realpath "$BUILD/libtzr.so") PYTHONPATH=python
    echo "--- tzr's Python onto CUDA tensors ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
    part timeout "${GPU_PART_TIMEOUT:-900}" "$PY" tests/gpu/python_cuda.py --bench-mib "${GPU_BENCH_MIB:-4096}" \
        --bench-small "${GPU_BENCH_SMALL:-100000}"
    echo "--- tzr.distributed on CUDA tensors"
    part timeout "${GPU_PART_TIMEOUT:-900}" "$PY" tests/gpu/distributed_test.py
fi
exit "$worst"
