# Sourced by the Python test scripts: sets lib to this build's libtzr.so,
# or ends the script: FAIL when it is not built, skipped (77) when it is a
# sanitizer build (whose runtime cannot load into python3 after the fact)
# or torch/numpy are missing.
lib=$(realpath "$BUILD/libtzr.so" 2>/dev/null) || { echo "FAIL python_setup: $BUILD/libtzr.so missing"; exit 1; }
if nm -D "$lib" | grep -q '__asan_init\|__tsan_init\|__ubsan_handle'; then
    echo "python: sanitizer build of libtzr, not loadable into python3" >&2
    exit 77
fi
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || { echo "python: torch or numpy missing" >&2; exit 77; }
