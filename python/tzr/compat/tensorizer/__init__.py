"""tensorizer's import names over tzr (libtzr), for code written for tensorizer.

Opt-in: put python/compat first on sys.path (docs/python.md): `import
tensorizer` then gives tzr's classes, so tensorizer's callers (vLLM's
loader, its examples and tests) run on libtzr unchanged. Every module here
is the tzr module itself, so patching `tensorizer.serialization.X` patches
what `tensorizer.X` is. `tensorizer.__tzr__` tells the two apart.
"""
from tzr import serialization, stream_io, torch_compat, utils
from tzr.serialization import *  # noqa: F401,F403
from tzr.serialization import __all__ as _names

from ._version import __version__

__tzr__ = True
__all__ = [*_names, "stream_io", "torch_compat", "utils"]
