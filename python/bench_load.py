"""make bench-python: Python loads of one ~1 GiB checkpoint, warm cache,
against the raw-read floor (`tzr-bench --cases raw`) measured in the same run.

Rows: the C host load (tzr_load into library memory, through ctypes);
tzr.TensorDeserializer(device="cpu") from a path, from open(), from
tzr.stream_io.open_stream, from an io.BytesIO of the file (memory: correct,
not a disk row); the same load into one shared allocation (what tzr did
before each tensor got its own storage: the cost of per-tensor storages);
and, with --tensorizer DIR (a folder holding tensorizer's package, for the
measurement only), tensorizer's own TensorDeserializer. Each row runs in a
fresh process: "first" is that process's first load, "best" the best of
--reps loads in the same process. Each row's tensors are hashed after its
last load (not timed) and compared with tensorizer's (or the path load's).
Usage: bench_load.py BUILD [FILE] [--mib N] [--reps N] [--rounds N] [--tensorizer DIR]"""
import argparse
import ctypes
import io
import json
import os
import resource
import subprocess
import sys
import time


def rss_now():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one_allocation(path):
    """tzr's load as it was: every tensor carved from one allocation whose
    2 MiB-aligned middle is advised MADV_HUGEPAGE."""
    import torch
    from tzr import _core
    from tzr.serialization import _HUGE, _MADV_HUGEPAGE, _libc
    r = _core.Reader(path)
    total = sum((int(e.nbytes) + 63) // 64 * 64 for e in r.entries)
    big = torch.empty(total + _HUGE, dtype=torch.uint8)
    start = (-big.data_ptr()) % _HUGE
    _libc.madvise(ctypes.c_void_p(big.data_ptr() + start), total // _HUGE * _HUGE, _MADV_HUGEPAGE)
    dests, out, off = {}, {}, start
    for e in r.entries:
        dests[e.index] = (big.data_ptr() + off, e.nbytes)
        out[e.index] = big[off:off + int(e.nbytes)]
        off += (int(e.nbytes) + 63) // 64 * 64
    r.load(dests)
    r.close()
    return out


def load_once(kind, path):
    if kind == "c":
        from tzr import _lib
        lib = _lib.lib
        lib.tzr_sink_host_new.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
        r, s = ctypes.c_void_p(), ctypes.c_void_p()
        _lib.check(lib.tzr_reader_open(ctypes.byref(r), path.encode(), None))
        _lib.check(lib.tzr_sink_host_new(ctypes.byref(s), None, None))
        opt = _lib.load_options()
        _lib.check(lib.tzr_load(r, s, ctypes.byref(opt), None))
        return lambda: (lib.tzr_sink_free(s), lib.tzr_reader_free(r))
    if kind == "one_allocation":
        return one_allocation(path)
    if kind == "tensorizer":
        import tensorizer
        return tensorizer.TensorDeserializer(path, device="cpu")
    import tzr
    from tzr import stream_io
    if kind == "path":
        src = path
    elif kind == "open":
        src = open(path, "rb")
    elif kind == "open_stream":
        src = stream_io.open_stream(path, "rb")
    return tzr.TensorDeserializer(src, device="cpu")


def digest(d):
    """SHA-256 over every tensor's name and bytes, in name order (outside the
    timed part): each tzr row must give tensorizer's own bytes back."""
    import hashlib
    if callable(d):
        return None
    items = d.items() if hasattr(d, "items") else ()
    h = hashlib.sha256()
    for name, t in sorted(((str(k), v) for k, v in items), key=lambda kv: kv[0]):
        t = t.detach().contiguous()
        h.update(name.encode())
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()


def child(kind, path, reps):
    base = rss_now()
    times = []
    sha = None
    for i in range(reps):
        if kind == "bytesio":  # the file into memory (once: no 1 GiB churn per rep) is not the load's time
            import tzr
            if i == 0:
                data = open(path, "rb").read()
            buf = io.BytesIO(data)  # shares data's bytes
            t0 = time.perf_counter()
            d = tzr.TensorDeserializer(buf, device="cpu")
        else:
            t0 = time.perf_counter()
            d = load_once(kind, path)
        times.append(time.perf_counter() - t0)
        if i == reps - 1 and kind != "one_allocation":
            sha = digest(d)
        if callable(d):
            d()
        del d
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"first": times[0], "best": min(times), "all": times, "peak": peak, "base": base,
                      "sha": sha}))


def floor(build, path, reps):
    out = subprocess.run([os.path.join(build, "tzr-bench"), "--file", path, "--cases", "raw", "--small", "0",
                          "--json", "--repeat", str(reps)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        row = json.loads(line)
        if row.get("ok") and row["case"].startswith("raw read"):
            return row["seconds"]
    raise SystemExit("tzr-bench gave no raw-read floor:\n" + out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("file", nargs="?")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="fresh processes per row, interleaved")
    ap.add_argument("--tensorizer", help="folder with tensorizer's package (measurement only)")
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
    raw = floor(a.build, path, a.reps)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TZR_LIBRARY=os.path.realpath(os.path.join(a.build, "libtzr.so")),
               PYTHONPATH=here)
    kinds = [("c", "C host load (tzr_load)"), ("path", "tzr, path"), ("open", "tzr, open()"),
             ("open_stream", "tzr, stream_io.open_stream"), ("bytesio", "tzr, io.BytesIO (memory)"),
             ("one_allocation", "tzr, one shared allocation")]
    if a.tensorizer:
        kinds.append(("tensorizer", "tensorizer 2.11.1, path"))
    best = {}
    # Rounds interleave the rows (each a fresh process per round), so that
    # a burst of load from elsewhere on a shared machine hits one round of
    # every row rather than every round of one; each row keeps its best.
    for _ in range(a.rounds):
        for kind, label in kinds:
            e = dict(env)
            if kind == "tensorizer":
                e["PYTHONPATH"] = a.tensorizer + os.pathsep + here
            r = subprocess.run([sys.executable, __file__, a.build, path, "--child", kind, "--reps", str(a.reps)],
                               env=e, capture_output=True, text=True)
            if r.returncode:
                print("%s: failed: %s" % (label, r.stderr.strip().splitlines()[-1:]), file=sys.stderr)
                continue
            m = json.loads(r.stdout)
            old = best.get(kind)
            if old is not None:
                m["first"], m["best"] = min(m["first"], old["first"]), min(m["best"], old["best"])
                m["sha"] = m["sha"] if m["sha"] == old["sha"] else "differs between rounds"
            best[kind] = m
    rows = [(kind, label, best[kind]) for kind, label in kinds if kind in best]
    print("file %s: %.1f MiB, warm cache; raw read (tzr-bench, best of %d): %.3f s, %.2f GB/s"
          % (path, size / 2**20, a.reps, raw, size / raw / 1e9))
    print("%d round(s) of a fresh process per row, %d loads each; first: best first load of a fresh process, "
          "best: best load of any" % (a.rounds, a.reps))
    print("%-30s %8s %8s %8s %8s %10s" % ("load (fresh process each)", "first s", "best s", "GB/s", "floor/x",
                                          "RSS+ MiB"))
    for kind, label, m in rows:
        print("%-30s %8.3f %8.3f %8.2f %8.2f %10.0f" % (label, m["first"], m["best"], size / m["best"] / 1e9,
                                                       raw / m["best"], (m["peak"] - m["base"]) / 2**20))
    shas = {k: m["sha"] for k, _, m in rows if m.get("sha")}
    ref = shas.get("tensorizer", shas.get("path"))
    print("bytes equal to %s's on every row: %s" % ("tensorizer" if "tensorizer" in shas else "the path load",
          ", ".join("%s %s" % (k, "yes" if v == ref else "NO") for k, v in shas.items())))
    by = {k: m for k, _, m in rows}
    if "path" in by and "one_allocation" in by:
        print("per-tensor storages vs one allocation: %+.1f%% (best), %+.1f%% (first)"
              % (100 * (by["path"]["best"] / by["one_allocation"]["best"] - 1),
                 100 * (by["path"]["first"] / by["one_allocation"]["first"] - 1)))


if __name__ == "__main__":
    main()
