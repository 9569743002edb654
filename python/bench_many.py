"""Python loads of a many-small-tensors checkpoint (mixture-of-experts
shape: 100k tensors of 4 KiB by default), warm cache, each row measured in
the same run:

  raw      tzr-bench --cases raw: parallel preads of the whole file (floor)
  C host   tzr-bench --cases host: the library's own load into host memory
  torch    torch's cost of making the result: torch.empty of every tensor's
           shape and dtype, each wrapped as nn.Parameter (no file access);
           again with Python's cyclic collector paused (tzr pauses it while
           it builds its tables); the lower one is the floor
  tzr      tzr.TensorDeserializer(path, device="cpu")
  tensorizer  tensorizer.TensorDeserializer(path, device="cpu"), with
           --tensorizer DIR (a folder holding tensorizer's package, put on
           sys.path for that row only)

and the issue-23 target: tzr <= 1.25 x (torch + C host). The Python rows
run each in a fresh process; "best" is the best of --reps loads in that
process, "first" its first load. The file is written by tzr's
TensorSerializer.write_state_dict (index sized to fit, no option needed).
Measured, never asserted: the machine may be shared.
Usage: bench_many.py BUILD [--n N] [--kib K] [--reps N] [--tensorizer DIR]
       [--file F] [--keep]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def write_file(path, n, kib):
    import torch
    from tzr import TensorSerializer
    g = torch.Generator().manual_seed(7)
    pool = torch.randn(kib * 512 + 4096, generator=g).to(torch.bfloat16)  # tensor i: a window of it
    with TensorSerializer(path) as s:
        s.write_state_dict({"layers.%d.experts.%d.w" % (i // 256, i % 256): pool[i % 4096:i % 4096 + kib * 512]
                            for i in range(n)})


def child(kind, path, reps, tensorizer_dir):
    """One row in this (fresh) process: prints a JSON line."""
    import torch
    times = []
    if kind in ("torch", "torch-nogc"):
        from tzr import _core
        from tzr.serialization import _torch_dtype
        r = _core.Reader(path)
        specs = [(e.shape, _torch_dtype(e.dtype_bytes)) for e in r.entries]
        r.close()
        grad = [dt.is_floating_point or dt.is_complex for _, dt in specs]
        import gc
        if kind == "torch-nogc":
            gc.disable()
        for _ in range(reps):
            t0 = time.perf_counter()
            out = [torch.nn.Parameter(torch.empty(s, dtype=dt), requires_grad=g) for (s, dt), g in zip(specs, grad)]
            times.append(time.perf_counter() - t0)
            del out
    else:
        if kind == "tensorizer":
            sys.path.insert(0, tensorizer_dir)
            from tensorizer import TensorDeserializer
        else:
            from tzr import TensorDeserializer
        n = None
        for _ in range(reps):
            t0 = time.perf_counter()
            d = TensorDeserializer(path, device="cpu")
            n = len(d)
            times.append(time.perf_counter() - t0)
            d.close()
            del d
        assert n is not None
    print(json.dumps({"first": times[0], "best": min(times)}))


def run_child(kind, path, reps, build, tensorizer_dir):
    env = dict(os.environ, PYTHONPATH=HERE, TZR_LIBRARY=os.path.realpath(os.path.join(build, "libtzr.so")))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, "--file", path,
                          "--reps", str(reps), "--tensorizer", tensorizer_dir or "", build],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "exit %d" % out.returncode}
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_c(build, path, reps):
    out = subprocess.run([os.path.join(build, "tzr-bench"), "--file", path, "--cases", "raw,host", "--small", "0",
                          "--repeat", str(reps), "--json"], capture_output=True, text=True)
    rows = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            rows["raw" if j["case"].startswith("raw") else "host"] = j["seconds"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--kib", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tensorizer", default="")
    ap.add_argument("--file")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.file, a.reps, a.tensorizer)
    path = a.file
    made = None
    if not path:
        made = tempfile.mkdtemp(prefix="bench-many-")
        path = os.path.join(made, "many.tensors")
        env = dict(os.environ, PYTHONPATH=HERE, TZR_LIBRARY=os.path.realpath(os.path.join(a.build, "libtzr.so")))
        code = "import sys; sys.path.insert(0, %r); import bench_many; bench_many.write_file(%r, %d, %d)" % (
            HERE, path, a.n, a.kib)
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
    try:
        c = bench_c(a.build, path, a.reps)
        rows = [("torch floor (empty + Parameter)", run_child("torch", path, a.reps, a.build, None)),
                ("tzr.TensorDeserializer", run_child("tzr", path, a.reps, a.build, None)),
                ("torch floor, collector paused", run_child("torch-nogc", path, a.reps, a.build, None))]
        if a.tensorizer:
            rows.append(("tensorizer.TensorDeserializer", run_child("tensorizer", path, a.reps, a.build,
                                                                   a.tensorizer)))
        size = os.path.getsize(path)
        print("file: %s (%.0f MiB), %d CPUs, best of %d" % (path, size / 2**20, os.cpu_count(), a.reps))
        print()
        print("| row                              | first s | best s |")
        print("|----------------------------------|---------|--------|")
        print("| raw read (tzr-bench, floor)      |       - | %6.3f |" % c.get("raw", float("nan")))
        print("| C host load (tzr-bench host)     |       - | %6.3f |" % c.get("host", float("nan")))
        for name, r in rows:
            if "error" in r:
                print("| %-32s | failed: %s |" % (name, r["error"]))
            else:
                print("| %-32s | %7.3f | %6.3f |" % (name, r["first"], r["best"]))
        tzr_row = rows[1][1]
        floors = [r["best"] for _, r in (rows[0], rows[2]) if "best" in r]
        if floors and "best" in tzr_row and "host" in c:
            # The lower of the two torch floors: the stricter target.
            floor = min(floors) + c["host"]
            print()
            print("tzr / (torch floor + C host) = %.3f / %.3f = %.2f (target <= 1.25)" % (
                tzr_row["best"], floor, tzr_row["best"] / floor))
            if len(rows) > 3 and "best" in rows[3][1]:
                print("tensorizer / tzr = %.2f" % (rows[3][1]["best"] / tzr_row["best"]))
    finally:
        if made and not a.keep:
            os.unlink(path)
            os.rmdir(made)


if __name__ == "__main__":
    sys.exit(main())
