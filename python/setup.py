"""Building the tzr wheel: the libtzr.so.0 of this tree's build (or
$TZR_LIBRARY) goes inside the package, so an installed tzr needs no
LD_LIBRARY_PATH. Without one the package still installs and loads a
libtzr.so.0 that `make install` put on the system loader's path."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("TZR_LIBRARY") or os.path.join(HERE, "..", os.environ.get("BUILD", "build"),
                                                            "libtzr.so.0")
        if os.path.exists(lib):
            shutil.copy(lib, os.path.join(self.build_lib, "tzr", "libtzr.so.0"))
        else:
            print("tzr: no %s to bundle; the installed package will look for libtzr.so.0 on the "
                  "system loader's path (make install)" % lib)


def version():
    """MAJOR.MINOR.PATCH from include/tzr.h, the version's one source."""
    parts = {}
    with open(os.path.join(HERE, "..", "include", "tzr.h")) as f:
        for line in f:
            words = line.split()
            if len(words) == 3 and words[0] == "#define" and words[1].startswith("TZR_VERSION_") \
                    and words[1][12:] in ("MAJOR", "MINOR", "PATCH"):
                parts[words[1][12:]] = words[2]
    return "%s.%s.%s" % (parts["MAJOR"], parts["MINOR"], parts["PATCH"])


setup(version=version(), cmdclass={"build_py": BuildWithLibrary})
