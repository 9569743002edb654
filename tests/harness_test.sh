#!/usr/bin/env bash
# The test harness itself (tests/util/check.c): a case that checked
# nothing FAILs with "no checks", a helper's check_fail fails its case,
# CHECK/CHECK_RC/CHECKF count, a skip stays a skip.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
cat > "$T/h.c" <<'C'
#include "check.h"
static void empty(void) {}
static void helper_gave_up(void) { check_fail("open x: no such file"); }
static void one_check(void) { CHECK(1); }
static void one_rc(void) { CHECK_RC(TZR_EINVAL, TZR_EINVAL); }
static void one_checkf(void) { CHECKF(2 > 1, "never printed"); }
static void skipped(void) { check_skip("not here"); }
int main(void) {
    CHECK(1 == 2); /* setup code outside any case */
    RUN(empty); RUN(helper_gave_up); RUN(one_check); RUN(one_rc); RUN(one_checkf); RUN(skipped);
    return check_done();
}
C
# link the way the library was built (a sanitized libtzr needs its runtime)
san=
syms=$(nm -D "$BUILD/libtzr.so.0" 2>/dev/null)
if grep -q __asan_init <<<"$syms"; then san="-fsanitize=address,undefined"
elif grep -q __tsan_init <<<"$syms"; then san="-fsanitize=thread"
elif grep -q __ubsan_handle <<<"$syms"; then san="-fsanitize=undefined"
fi
cc=cc; [ -n "$san" ] && cc=clang
bdir=$(cd "$BUILD" 2>/dev/null && pwd)
$cc $san -std=c11 -D_GNU_SOURCE -Iinclude -Itests/util "$T/h.c" tests/util/check.c -L"$bdir" -ltzr \
    -Wl,-rpath,"$bdir" -o "$T/h" 2> "$T/cc.log"
check harness_builds test -x "$T/h"
"$T/h" > "$T/out" 2> "$T/err"; rc=$?
check harness_exit_1_on_failures test "$rc" = 1
check harness_no_checks_fails grep -qx 'FAIL empty: no checks (the case returned before checking anything)' "$T/out"
check harness_check_fail_fails grep -qx 'FAIL helper_gave_up' "$T/out"
check harness_counts_checks sh -c "grep -qx 'PASS one_check' '$T/out' && grep -qx 'PASS one_rc' '$T/out' && grep -qx 'PASS one_checkf' '$T/out'"
check harness_setup_check_fails grep -qx 'FAIL setup: a check failed before case empty (see stderr)' "$T/out"
check harness_skip_is_skip grep -qx 'SKIP skipped: not here' "$T/out"
exit 0
