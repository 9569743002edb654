"""The opt-in `tensorizer` compatibility package (tzr/compat/tensorizer).

Turn it on for a program with either
    PYTHONPATH="$(python3 -m tzr.compat)${PYTHONPATH:+:$PYTHONPATH}" python3 prog.py
or, before anything imports tensorizer,
    import tzr.compat; tzr.compat.enable()
It is never on by default, so an installed tensorizer stays what
`import tensorizer` gives everywhere else; unset PYTHONPATH (or skip
enable()) to turn it off.
"""
import os
import sys

PATH = os.path.dirname(os.path.abspath(__file__))


def enable():
    """Make `import tensorizer` give tzr's compatibility package in this process."""
    loaded = sys.modules.get("tensorizer")
    if loaded is not None and not getattr(loaded, "__tzr__", False):
        raise RuntimeError("tensorizer %s is already imported; enable() must run first"
                           % getattr(loaded, "__version__", "?"))
    if PATH not in sys.path:
        sys.path.insert(0, PATH)
