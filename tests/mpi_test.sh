#!/usr/bin/env bash
# Multi-rank loading under mpirun (tests/mpi/mpi_load.c): every mode gives
# every rank the bytes the generator says (np 2, 3, 4), failures on one
# rank make every rank return an error in bounded time, and a killed rank
# makes mpirun exit non-zero in bounded time. SKIP (exit 77) without
# mpirun or an MPI-enabled build. The device modes run on the fake CUDA
# runtime and the fake NCCL (tests/fake_cuda), with the real sink and
# comm code.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP mpi: mpirun not found"; exit 77
fi
prog=$BUILD/mpi/mpi_load
if ! make -s BUILD="$BUILD" "$prog" >&2; then
    if ! pkg-config --exists ompi-c; then echo "SKIP mpi: no MPI development files (pkg-config ompi-c)"; exit 77; fi
    echo "FAIL mpi_build: cannot build $prog"; exit 1
fi
tmp=$(mktemp -d /tmp/tzr-mpi-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
if ! "$prog" setup "$tmp" >&2; then echo "FAIL mpi_setup: see stderr"; exit 1; fi
status=0
for np in 2 3 4; do
    out=$(timeout 120 "${MPIRUN[@]}" -np $np "$prog" check "$tmp" 2>"$tmp/err"); rc=$?
    echo "$out"
    if grep -q '^SKIP' <<<"$out"; then exit 77; fi
    if [ $rc != 0 ] && ! grep -q '^FAIL' <<<"$out"; then
        echo "FAIL mpi_check_np$np: exit status $rc"; cat "$tmp/err" >&2
    fi
    [ $rc = 0 ] || { status=1; cat "$tmp/err" >&2; }
done
fake_rt=$(realpath "$BUILD/tests/libfakecudart.so" 2>/dev/null)
fake_nccl=$(realpath "$BUILD/tests/libfakenccl.so" 2>/dev/null)
if ! make -s BUILD="$BUILD" "$BUILD/tests/libfakenccl.so" >&2 || [ ! -f "$fake_nccl" ]; then
    echo "FAIL mpi_device_build: cannot build the fake NCCL"; status=1
else
    for np in 2 3; do
        out=$(TZR_CUDART=$fake_rt TZR_NCCL=$fake_nccl timeout 180 "${MPIRUN[@]}" -x TZR_CUDART -x TZR_NCCL \
              -np $np "$prog" device "$tmp" 2>"$tmp/err"); rc=$?
        echo "$out"
        if [ $rc != 0 ] && ! grep -q '^FAIL' <<<"$out"; then echo "FAIL mpi_device_np$np: exit status $rc"; fi
        [ $rc = 0 ] || { status=1; tail -20 "$tmp/err" >&2; }
    done
fi
for np in 2 3; do
    start=$(date +%s)
    out=$(timeout 120 "${MPIRUN[@]}" -np $np "$prog" fail "$tmp" 2>"$tmp/err"); rc=$?
    echo "$out"
    took=$(( $(date +%s) - start ))
    if [ $rc != 0 ] && ! grep -q '^FAIL' <<<"$out"; then echo "FAIL mpi_fail_np$np: exit status $rc"; fi
    if [ $took -gt 60 ]; then echo "FAIL mpi_fail_bounded_np$np: took ${took}s"; else echo "PASS mpi_fail_bounded_np$np"; fi
    [ $rc = 0 ] || { status=1; cat "$tmp/err" >&2; }
done
# A rank killed mid-job: mpirun must bring the job down, non-zero, in time.
start=$(date +%s)
timeout 90 "${MPIRUN[@]}" -np 3 "$prog" kill "$tmp" >"$tmp/out" 2>"$tmp/err"; rc=$?
took=$(( $(date +%s) - start ))
if [ $rc != 0 ] && [ $rc != 124 ] && [ $took -le 60 ]; then
    echo "PASS mpi_killed_rank_aborts"
else
    echo "FAIL mpi_killed_rank_aborts: exit status $rc after ${took}s"; status=1; tail -5 "$tmp/err" >&2
fi
exit $status
