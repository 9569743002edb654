#!/usr/bin/env bash
# The GPU checks in tests/gpu/run.sh, reported as one case: skipped (77)
# on machines without an NVIDIA GPU, as in CI.
set -u
cd "$(dirname "$0")/.." || exit 2
out=$(bash tests/gpu/run.sh "${BUILD:-build}" 2>&1)
rc=$?
if [ "$rc" = 77 ]; then echo "SKIP gpu: $(echo "$out" | tail -1)"; exit 77; fi
echo "$out" | grep -E '^(PASS|FAIL|SKIP) '
echo "$out" >&2
[ "$rc" = 0 ] || exit 1
