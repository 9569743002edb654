"""Building the tzr wheel: the libtzr.so.0 of this tree's build (or
$TZR_LIBRARY) goes inside the package, so an installed tzr needs no
LD_LIBRARY_PATH. Without one the package still installs and loads a
libtzr.so.0 that `make install` put on the system loader's path."""
import ctypes
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def library():
    """The libtzr.so.0 to bundle: $TZR_LIBRARY, else this tree's build."""
    return os.environ.get("TZR_LIBRARY") or os.path.join(HERE, "..", os.environ.get("BUILD", "build"),
                                                         "libtzr.so.0")


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib = library()
        if os.path.exists(lib):
            shutil.copy(lib, os.path.join(self.build_lib, "tzr", "libtzr.so.0"))
        else:
            print("tzr: no %s to bundle; the installed package will look for libtzr.so.0 on the "
                  "system loader's path (make install)" % lib)


def version():
    """The version has one source, TZR_VERSION_* in include/tzr.h: the
    library that goes inside the package says it (tzr_version_string), else
    the header beside this folder, else a libtzr.so.0 on the loader's path."""
    lib = library()
    candidates = [lib] if os.path.exists(lib) else []
    header = os.path.join(HERE, "..", "include", "tzr.h")
    if not candidates and os.path.exists(header):
        parts = {}
        with open(header) as f:
            for line in f:
                words = line.split()
                if len(words) == 3 and words[0] == "#define" and words[1][:12] == "TZR_VERSION_":
                    parts[words[1][12:]] = words[2]
        return "%s.%s.%s" % (parts["MAJOR"], parts["MINOR"], parts["PATCH"])
    so = ctypes.CDLL(candidates[0] if candidates else "libtzr.so.0")
    so.tzr_version_string.restype = ctypes.c_char_p
    return so.tzr_version_string().decode()


setup(version=version(), cmdclass={"build_py": BuildWithLibrary})
