# Sourced by test scripts with Python cases. python_blocker MODULES...
# prints why this build's libtzr.so cannot be tested from Debian's python3
# (a sanitizer build, whose runtime cannot load into python3 after the
# fact, or a module missing) and returns 1; prints nothing and returns 0
# when it can. One place for the check, so every script skips alike.
python_blocker() {
    if nm -D "$BUILD/libtzr.so" 2>/dev/null | grep -q '__asan_init\|__tsan_init\|__ubsan_handle'; then
        echo "sanitizer build of libtzr, not loadable into python3"
        return 1
    fi
    local m
    for m in "$@"; do
        /usr/bin/python3 -c "import $m" 2>/dev/null || { echo "python3 has no $m"; return 1; }
    done
    return 0
}
