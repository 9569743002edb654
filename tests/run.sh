#!/usr/bin/env bash
# Runs every test program and script, then prints the summary line
# "N passed, N failed, N skipped" counted over individual cases.
# A program that exits 77 with no case lines counts as one skipped case;
# a program that crashes or fails without printing FAIL counts as one failure,
# and so does one that exits 0 without printing any PASS/FAIL/SKIP line
# (it checked nothing we can count).
set -u
BUILD=${BUILD:-build}
export BUILD
export TZR_BUILD=$BUILD
cd "$(dirname "$0")/.." || exit 2
pass=0 fail=0 skip=0
log=$BUILD/test-logs
mkdir -p "$log"
run_one() {
    local name=$1; shift
    local out="$log/$name.out" rc
    timeout "${TZR_TEST_TIMEOUT:-900}" "$@" >"$out" 2>"$log/$name.err"
    rc=$?
    local p f s
    p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
    grep -E '^(FAIL|SKIP) ' "$out" | sed "s/^/  [$name] /"
    if [ "$rc" = 77 ] && [ $((p + f + s)) = 0 ]; then s=1; echo "  [$name] SKIP: $(tail -1 "$log/$name.err")"; fi
    if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ "$f" = 0 ]; then
        f=1; echo "  [$name] FAIL: exit status $rc"
    fi
    if [ "$rc" = 0 ] && [ $((p + f + s)) = 0 ]; then
        f=1; echo "  [$name] FAIL: exited 0 without printing a PASS/FAIL/SKIP line"
    fi
    if [ "$f" != 0 ]; then sed 's/^/    | /' "$log/$name.err" | tail -40; fi
    printf '%-28s %3d passed %3d failed %3d skipped\n' "$name" "$p" "$f" "$s"
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for t in "$BUILD"/fuzz/*_replay; do
    [ -x "$t" ] || continue
    n=$(basename "$t" _replay)
    run_one "$n" "$t" "fuzz/corpus/$n"
done
for t in tests/*_test.sh; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t" .sh)" bash "$t"
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
