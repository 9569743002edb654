"""make bench-python: the C host load (one tzr_load into library memory,
called through ctypes) against tzr.TensorDeserializer(..., device="cpu")
full materialization, same file, warm cache, each in its own process so
peak RSS is its own. Usage: bench_load.py BUILD [FILE] [--mib N] [--reps N]"""
import argparse
import ctypes
import os
import resource
import subprocess
import sys
import time


def rss_now():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(kind, path, reps):
    import tzr
    from tzr import _lib
    lib = _lib.lib
    base = rss_now()
    best = None
    for _ in range(reps):
        t0 = time.perf_counter()
        if kind == "c":
            lib.tzr_sink_host_new.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
            r, s = ctypes.c_void_p(), ctypes.c_void_p()
            _lib.check(lib.tzr_reader_open(ctypes.byref(r), path.encode(), None))
            _lib.check(lib.tzr_sink_host_new(ctypes.byref(s), None, None))
            opt = _lib.load_options()
            _lib.check(lib.tzr_load(r, s, ctypes.byref(opt), None))
            dt = time.perf_counter() - t0
            lib.tzr_sink_free(s)
            lib.tzr_reader_free(r)
        else:
            d = tzr.TensorDeserializer(path, device="cpu")
            dt = time.perf_counter() - t0
            del d
        best = dt if best is None else min(best, dt)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("%f %d %d" % (best, peak, base))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("file", nargs="?")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.file, a.reps)
    path = a.file or os.path.join(a.build, "bench-python-%dm.tensors" % a.mib)
    if not os.path.exists(path):
        import torch
        import tzr
        n = max(1, a.mib // 16)
        with tzr.TensorSerializer(path) as s:  # 16 MiB tensors plus small ones, like a model
            for i in range(n):
                s.write_tensor(0, "layer%d.weight" % i, tzr.TensorType.PARAM, torch.randn(2048, 2048))
                s.write_tensor(0, "layer%d.bias" % i, tzr.TensorType.PARAM, torch.randn(2048))
    size = os.path.getsize(path)
    with open(path, "rb") as f:  # warm the page cache
        while f.read(64 << 20):
            pass
    env = dict(os.environ, TZR_LIBRARY=os.path.realpath(os.path.join(a.build, "libtzr.so")))
    rows = []
    for kind, label in (("c", "C host load (tzr_load)"), ("py", "tzr.TensorDeserializer cpu")):
        out = subprocess.run([sys.executable, __file__, a.build, path, "--child", kind, "--reps", str(a.reps)],
                             env=env, capture_output=True, text=True, check=True).stdout.split()
        rows.append((label, float(out[0]), int(out[1]), int(out[2])))
    print("file %s: %.1f MiB, best of %d, warm cache" % (path, size / 2**20, a.reps))
    print("%-30s %9s %8s %12s %14s" % ("load", "seconds", "GB/s", "peak RSS MiB", "over import MiB"))
    for label, sec, peak, base in rows:
        print("%-30s %9.3f %8.2f %12.0f %14.0f" % (label, sec, size / sec / 1e9, peak / 2**20, (peak - base) / 2**20))
    c, p = rows[0][1], rows[1][1]
    print("python / C time: %.2fx (goal <= 1.15x); python RSS over import: %.0f MiB for %.0f MiB of tensors"
          % (p / c, (rows[1][2] - rows[1][3]) / 2**20, size / 2**20))


if __name__ == "__main__":
    main()
