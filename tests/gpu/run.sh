#!/usr/bin/env bash
# GPU checks, for a machine with an NVIDIA GPU: the CUDA sink against the
# real runtime (byte-for-byte round trip through device memory) and the
# device benchmark next to pinned cudaMemcpy measured in the same run;
# tzr.distributed's cases onto CUDA tensors (tests/gpu/distributed_test.py).
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
"$BUILD/tests/gpu_load" "${TMPDIR:-/tmp}"
rc=$?
[ "$rc" = 0 ] || exit "$rc"
# tzr.distributed onto CUDA tensors (gloo through pinned buckets; NCCL with a
# GPU a rank); 77 (torch without CUDA, as under the fake runtime): skipped.
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "--- tzr.distributed on CUDA tensors"
    BUILD=$BUILD TZR_LIBRARY=$(realpath "$BUILD/libtzr.so") PYTHONPATH=python \
        timeout 900 /usr/bin/python3 tests/gpu/distributed_test.py
    rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
fi
echo "--- device benchmark (warm page cache; floor: pinned cudaMemcpy H2D in the same run)"
"$BUILD/tzr-bench" --size-mib "${GPU_BENCH_MIB:-4096}" --layers 32 --small 0 --repeat 3 --cuda \
    --cases raw,host,host-crc32,null,cuda,cuda-crc32,cuda-verify,sha,crc32 ${GPU_BENCH_JSON:+--json}
