"""The Python tests' harness: @case runs a function at once and prints one
`PASS name`, `FAIL name: why` or `SKIP name: why` line (tests/run.sh counts
them), the trace of a failure on stderr; finish() exits 1 if any failed."""
import ctypes
import sys
import traceback

failed = 0


class Skip(Exception):
    """Raised by a case that cannot run here; printed as SKIP, never a pass."""


def case(fn):
    global failed
    try:
        fn()
        print("PASS", fn.__name__)
    except Skip as e:
        print("SKIP %s: %s" % (fn.__name__, e))
    except Exception as e:  # one line per case, the trace on stderr
        failed += 1
        print("FAIL %s: %s: %s" % (fn.__name__, type(e).__name__, str(e).replace("\n", " ")[:300]))
        traceback.print_exc(file=sys.stderr)
    sys.stdout.flush()
    return fn


def raw(t):
    """A tensor's (or array's) bytes, in memory order of a contiguous copy."""
    if not hasattr(t, "detach"):
        import numpy as np
        return np.ascontiguousarray(t).tobytes()
    t = t.detach().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


def finish():
    sys.exit(1 if failed else 0)
