#!/usr/bin/env bash
# make install PREFIX=... gives headers, both libraries, the tools and a
# pkg-config file that a program can build and run against.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
P="$T/prefix"
make -s BUILD="$BUILD" install PREFIX="$P" > "$T/install.log" 2>&1
check install_succeeds test $? = 0
check install_layout sh -c "test -f $P/include/tzr.h && test -f $P/lib/libtzr.a && test -L $P/lib/libtzr.so && test -f $P/lib/libtzr.so.0 && test -x $P/bin/tensorize && test -x $P/bin/detensorize"
check pkgconfig_prefix grep -q "^prefix=$P\$" "$P/lib/pkgconfig/libtzr.pc"
cat > "$T/use.c" <<'C'
#include <stdio.h>
#include <tzr.h>
int main(int argc, char **argv) {
    tzr_reader *r;
    if (tzr_reader_open(&r, argv[1], NULL)) { fprintf(stderr, "%s\n", tzr_last_error()); return 1; }
    printf("%zu %s\n", tzr_reader_count(r), tzr_reader_tensor(r, 0)->name);
    tzr_reader_free(r);
    return tzr_version_number() == TZR_VERSION_NUMBER ? 0 : 1;
}
C
# Sanitizer builds (make asan/ubsan/tsan) need the same runtime in the program.
san=
nm -D "$P/lib/libtzr.so.0" | grep -q __asan_init && san="-fsanitize=address,undefined"
[ -z "$san" ] && nm -D "$P/lib/libtzr.so.0" | grep -q __tsan_init && san="-fsanitize=thread"
[ -z "$san" ] && nm -D "$P/lib/libtzr.so.0" | grep -q __ubsan_handle && san="-fsanitize=undefined"
cc=cc
[ -n "$san" ] && cc=clang
$cc $san "$T/use.c" $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags --libs libtzr) -Wl,-rpath,"$P/lib" -o "$T/use" 2> "$T/cc.log"
check builds_against_pkgconfig test -x "$T/use"
check runs_against_shared_lib sh -c "'$T/use' tests/golden/plain_v1.tensors | grep -q '^6 layer.weight$'"
check soname sh -c "readelf -d '$P/lib/libtzr.so.0' | grep -q 'SONAME.*libtzr.so.0'"
# src/libtzr.map hides everything else, sanitizer builds included (a case
# that ran only without sanitizers was silently absent from those runs).
check only_tzr_symbols_exported sh -c "! nm -D --defined-only '$P/lib/libtzr.so.0' | awk '\$2 != \"A\" {print \$3}' | grep -v '^tzr_'"
# The Python package lands where Debian's python3 looks and loads the
# installed libtzr.so.0 (not the build tree's).
PY="$P/lib/python3/dist-packages"
check python_package_installed test -f "$PY/tzr/__init__.py"
if [ -n "$san" ]; then
    echo "SKIP python_uses_installed_lib: a sanitizer-built library cannot load into python3"
elif ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    echo "FAIL python_uses_installed_lib: python3-numpy is missing (scripts/deps.sh test installs it)"
else
    check python_uses_installed_lib env -u TZR_LIBRARY PYTHONPATH="$PY" /usr/bin/python3 -c "
import os, tzr, tzr._lib as L
assert os.path.realpath(L.lib._name) == os.path.realpath('$P/lib/libtzr.so.0'), L.lib._name
d = tzr.TensorDeserializer('tests/golden/plain_v1.tensors', device='cpu')
assert len(d) == 6
"
    # The compatibility package ships too, off until asked for.
    check python_compat_opt_in env -u TZR_LIBRARY PYTHONPATH="$PY" /usr/bin/python3 -c "
import subprocess, sys, tzr.compat
where = subprocess.run([sys.executable, '-m', 'tzr.compat'], capture_output=True, text=True).stdout.strip()
assert where == tzr.compat.PATH and where.startswith('$PY'), where
try:
    import tensorizer
    assert not getattr(tensorizer, '__tzr__', False), 'on without being asked'
except ImportError:
    pass
tzr.compat.enable()
import tensorizer, tensorizer.stream_io, tensorizer.utils, tensorizer.torch_compat
assert tensorizer.__tzr__ and tensorizer.TensorDeserializer is tzr.TensorDeserializer
"
fi
# pip install ./python (Debian's pip and setuptools, offline) into a scratch
# prefix: the build's libtzr.so.0 goes inside the package, so it loads from
# any folder with no LD_LIBRARY_PATH.
if [ -n "$san" ]; then
    echo "SKIP pip_install: a sanitizer-built library cannot load into python3"
elif ! /usr/bin/python3 -m pip --version >/dev/null 2>&1; then
    echo "FAIL pip_install: Debian's python3-pip is missing (scripts/deps.sh test installs it)"
else
    rm -rf "$T/pysrc" && cp -r python "$T/pysrc" && rm -rf "$T/pysrc/build" "$T/pysrc"/*.egg-info
    TZR_LIBRARY=$(realpath "$BUILD/libtzr.so.0") /usr/bin/python3 -m pip install -q --no-build-isolation \
        --no-deps --no-index --prefix "$T/pip" "$T/pysrc" > "$T/pip.log" 2>&1
    check pip_install_succeeds test $? = 0
    site=$(find "$T/pip" -name __init__.py -path '*/tzr/__init__.py' | head -1)
    site=${site%/tzr/__init__.py}
    check pip_package_loads_bundled_lib sh -c "cd / && env -u TZR_LIBRARY PYTHONPATH='$site' /usr/bin/python3 -c \"
import os, tzr, tzr._lib as L
assert L.lib._name == os.path.join(os.path.dirname(tzr.__file__), 'libtzr.so.0'), L.lib._name
d = tzr.TensorDeserializer('$PWD/tests/golden/plain_v1.tensors', device='cpu')
assert len(d) == 6
\""
fi
exit 0
