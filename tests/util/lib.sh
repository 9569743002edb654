# Helpers for shell tests: one line per case, as tests/run.sh counts them.
BUILD=${BUILD:-build}
TZ=$BUILD/tensorize
DT=$BUILD/detensorize
export TZR_NO_PROGRESS=1
T=$(mktemp -d /tmp/tzr-sh-XXXXXX)
trap 'rm -rf "$T"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "SKIP $1: $2"; }
# check NAME CONDITION-COMMAND...: PASS if the command succeeds.
check() {
    local name=$1; shift
    if "$@" >"$T/check.out" 2>&1; then pass "$name"; else fail "$name" "$(head -c 300 "$T/check.out" | tr '\n' ' ')"; fi
}
