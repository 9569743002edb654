#!/usr/bin/env bash
# tests/gpu/run.sh itself, run against the fake CUDA runtime, so the GPU
# script and its test program are known to work before a GPU runs them.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
fake=$(realpath "$BUILD/tests/libfakecudart.so")
TZR_CUDART=$fake GPU_BENCH_MIB=64 bash tests/gpu/run.sh "$BUILD" > "$BUILD/gpu_fake.out" 2>&1
rc=$?
grep -E '^(PASS|FAIL) ' "$BUILD/gpu_fake.out" | sed 's/^\(PASS\|FAIL\) /\1 fake_runtime_/'
grep -q "libtzr -> cuda" "$BUILD/gpu_fake.out" && echo "PASS fake_runtime_benchmark_runs" || echo "FAIL fake_runtime_benchmark_runs: $(tail -3 "$BUILD/gpu_fake.out")"
[ "$rc" = 0 ] || { tail -20 "$BUILD/gpu_fake.out" >&2; exit 1; }
