# Sourced by the Python test scripts: sets lib to this build's libtzr.so,
# or ends the script: FAIL when it is not built, skipped (77) when it is a
# sanitizer build (whose runtime cannot load into python3 after the fact)
# or torch/numpy are missing.
lib=$(realpath "$BUILD/libtzr.so" 2>/dev/null) || { echo "FAIL python_setup: $BUILD/libtzr.so missing"; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/python_usable.sh"
why=$(python_blocker torch numpy) || { echo "python: $why" >&2; exit 77; }
