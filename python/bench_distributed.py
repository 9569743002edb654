"""The weight-loading benchmark of a torch.distributed job (a tool, not a test):
every rank reading the checkpoint itself against rank 0 reading it and
broadcasting, through tzr.distributed and through a plain loader.

    python3 -m tzr.distributed.launch -n 4 python/bench_distributed.py \\
        --model-path DIR [--subfolder transformer] --warmup 1 --repeats 3 [--device cpu|cuda] [--no-broadcast]

--model-path: a Hugging Face directory (with --subfolder, a folder in it),
a .tensors or safetensors file, or a manifest. --device cpu (the default):
gloo, tensors in host memory; --no-broadcast keeps to the independent read
(the seed's CPU mode). --device cuda: NCCL, each rank's tensors on its own
GPU (LOCAL_RANK), rank 0 broadcasting (the seed's GPU mode).

Rows (each a barrier, the load on every rank, a barrier; the slowest rank's
time, best of --repeats after --warmup; GB/s is the checkpoint's bytes over
it; peak RSS the largest rank's VmHWM during that row):
  tzr independent      every rank tzr.distributed.load(mode="independent")
  tzr broadcast-sync   rank 0 reads a bucket, broadcasts it, then reads on (buckets=1)
  tzr broadcast        the same with --buckets in flight (reading overlaps the wire)
  tzr allgather        each rank reads 1/N, the owners broadcast
  plain independent    every rank reads the safetensors files with a plain
                       Python loader (header, then readinto each tensor);
                       the baseline where no peer library is installed
  plain broadcast      rank 0 loads that way, then one torch.distributed.broadcast per tensor
  floor                the larger of rank 0 alone loading through tzr (the
                       same load as tzr independent, one reader) and a
                       bare broadcast of the same bytes in the same buckets
                       (--buckets slots made and touched before the timing)
  bcast into new       (not in the floor) the same bare broadcast, but every
                       receiving rank allocates each tensor as tzr does and
                       receives straight into it: what any broadcast load
                       pays beyond the wire (first touch of new memory)
"CPU s" is the CPU time (user + system, all threads) of all ranks together
in the row's best repeat: on a host with fewer cores than busy threads the
time of a row is about that over the cores it gets.
Then the seed's table: procs, independent s and GB/s, broadcast s and GB/s,
speedup (independent over broadcast), per loader."""
import argparse
import gc
import resource
import glob
import json
import os
import struct
import time

import torch
import torch.distributed as dist

import tzr
import tzr.distributed as tzd


def peak_rss_reset():
    # Writing 5 to clear_refs resets VmHWM (Linux 4.0+).
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def all_max(x, dev):
    t = torch.tensor([x], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def cpu_s():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def all_sum(x, dev):
    t = torch.tensor([x], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def timed(fn, warmup, repeats, dev):
    """Best (over repeats) of the slowest rank's time, the largest peak RSS,
    and all ranks' CPU seconds in the best repeat."""
    best, rss, cpu = float("inf"), 0.0, 0.0
    for k in range(warmup + repeats):
        gc.collect()
        peak_rss_reset()
        dist.barrier()
        c0, t0 = cpu_s(), time.perf_counter()
        out = fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dt = all_max(time.perf_counter() - t0, dev)
        c = all_sum(cpu_s() - c0, dev)
        r = all_max(peak_rss_mib(), dev)
        del out
        if k >= warmup:
            if dt < best:
                best, cpu = dt, c
            rss = max(rss, r)
    return best, rss, cpu


def bare_broadcast(slots, nbytes, bucket):
    """The wire alone: nbytes from rank 0 in bucket-sized async broadcasts
    through `slots` (made and touched once, outside the timing: new memory
    costs its page faults, which "bcast into new" shows), at most
    len(slots) in flight."""
    nb = len(slots)
    pending = [None] * nb
    for j, start in enumerate(range(0, nbytes, bucket)):
        s = j % nb
        if pending[s] is not None:
            pending[s].wait()
        pending[s] = dist.broadcast(slots[s][:min(bucket, nbytes - start)], 0, async_op=True)
    for w in pending:
        if w is not None:
            w.wait()


def bcast_into_new(sizes, bucket, nbuckets, dev):
    """The bare broadcast again, rank 0 sending from one buffer of the
    largest tensor, every other rank allocating each tensor as tzr.distributed
    does (huge pages advised for large host ones) and receiving into it in
    bucket pieces, at most nbuckets buckets in flight."""
    from tzr.distributed.load import _alloc
    rank = dist.get_rank()
    src = torch.ones(max(sizes), dtype=torch.uint8, device=dev) if rank == 0 else None
    out, pending, busy = [], [], 0
    for n in sizes:
        t = src[:n] if rank == 0 else _alloc("", b"|u1", (n,), n, dev, None)
        out.append(t)
        for s in range(0, n, bucket):
            k = min(bucket, n - s)
            while pending and busy + k > nbuckets * bucket:
                w, m = pending.pop(0)
                w.wait()
                busy -= m
            pending.append((dist.broadcast(t[s:s + k], 0, async_op=True), k))
            busy += k
    for w, _ in pending:
        w.wait()
    return out


# ------------------------------------------------------------------ plain loader
ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
             "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
             "BOOL": torch.bool}


def safetensors_files(path):
    """The safetensors files of path (a file, a directory, or its index), or None."""
    if os.path.isdir(path):
        idx = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(idx):
            path = idx
        else:
            return sorted(glob.glob(os.path.join(path, "*.safetensors"))) or None
    if path.endswith(".index.json"):
        names = sorted(set(json.load(open(path))["weight_map"].values()))
        return [os.path.join(os.path.dirname(path), n) for n in names]
    with open(path, "rb") as f:
        head = f.read(9)
    return [path] if len(head) == 9 and head[8:9] == b"{" else None


def plain_load(files, dev):
    """{name: tensor} read as a plain safetensors-format loader does: the
    JSON header, then each tensor read into its own CPU tensor (moved to dev)."""
    out = {}
    for path in files:
        with open(path, "rb", buffering=0) as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
            head.pop("__metadata__", None)
            for name, e in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"][0]):
                t = torch.empty(e["shape"], dtype=ST_DTYPES[e["dtype"]])
                lo, hi = e["data_offsets"]
                if hi > lo:
                    f.seek(8 + n + lo)
                    view = memoryview(t.reshape(-1).view(torch.uint8).numpy())
                    got = 0
                    while got < hi - lo:
                        k = f.readinto(view[got:])
                        if not k:
                            raise EOFError("%s: %s cut short" % (path, name))
                        got += k
                out[name] = t if dev.type == "cpu" else t.to(dev)
    return out


def plain_broadcast(files, dev):
    """Rank 0 loads plainly; one broadcast per tensor (the usual recipe)."""
    rank = dist.get_rank()
    sd = plain_load(files, dev) if rank == 0 else None
    box = [[(k, tuple(t.shape), t.dtype) for k, t in sd.items()] if rank == 0 else None]
    dist.broadcast_object_list(box, 0)
    if rank != 0:
        sd = {k: torch.empty(shape, dtype=dt, device=dev) for k, shape, dt in box[0]}
    for t in sd.values():
        if t.numel():  # as bytes: gloo in torch 1.13 has no bfloat16
            dist.broadcast(t.reshape(-1).view(torch.uint8), 0)
    return sd


def plain_ok(files):
    if not files:
        return False
    for path in files:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
        if any(e["dtype"] not in ST_DTYPES for k, e in head.items() if k != "__metadata__"):
            return False
    return True


# ------------------------------------------------------------------ main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-path", required=True,
                    help="a Hugging Face directory, a .tensors or safetensors file, a manifest")
    ap.add_argument("--subfolder", default=None, help="a folder of --model-path (as transformer/)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--no-broadcast", action="store_true", help="independent reads only (the seed's CPU mode)")
    ap.add_argument("--modes", default="independent,broadcast-sync,broadcast,allgather",
                    help="tzr rows to run (comma-separated)")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain loader's rows")
    ap.add_argument("--bucket-mib", type=float, default=64)
    ap.add_argument("--buckets", type=int, default=3)
    ap.add_argument("--header", action="store_true", help="print the column names first")
    a = ap.parse_args()
    path = os.path.join(a.model_path, a.subfolder) if a.subfolder else a.model_path
    if a.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dev = torch.device("cuda", torch.cuda.current_device())
        dist.init_process_group("nccl")
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    n, rank = dist.get_world_size(), dist.get_rank()
    modes = [m for m in a.modes.split(",") if m]
    if a.no_broadcast:
        modes = [m for m in modes if m == "independent"]
    sizes = [t.numel() * t.element_size() for t in tzr.load_rank(path, 0, 1, verify=False).values()]
    nbytes = sum(sizes)
    files = None if a.no_plain else safetensors_files(path)
    rows = {}
    for m in modes:
        kw = dict(mode=m.replace("-sync", ""), device=dev, bucket_mib=a.bucket_mib,
                  buckets=1 if m.endswith("-sync") else a.buckets)
        rows["tzr " + m] = timed(lambda: tzd.load(path, **kw), a.warmup, a.repeats, dev)
    if plain_ok(files):
        rows["plain independent"] = timed(lambda: plain_load(files, dev), a.warmup, a.repeats, dev)
        if not a.no_broadcast:
            rows["plain broadcast"] = timed(lambda: plain_broadcast(files, dev), a.warmup, a.repeats, dev)
    bucket = int(a.bucket_mib * 2**20)
    alone = dist.new_group([0])  # rank 0's own group: tzd.load there is a plain load
    single, _, single_cpu = timed(lambda: tzd.load(path, mode="independent", device=dev, group=alone) if rank == 0 else None,
                      a.warmup, a.repeats, dev)
    slots = [torch.ones(min(bucket, max(1, nbytes)), dtype=torch.uint8, device=dev) for _ in range(a.buckets)] \
        if n > 1 and not a.no_broadcast else []
    wire = timed(lambda: bare_broadcast(slots, nbytes, bucket), a.warmup, a.repeats, dev) \
        if slots else (0.0, 0.0, 0.0)
    del slots
    if n > 1 and not a.no_broadcast:
        rows["bcast into new"] = timed(lambda: bcast_into_new([k for k in sizes if k], bucket, a.buckets, dev),
                                       a.warmup, a.repeats, dev)
    if rank == 0:
        print_rows(a, path, n, nbytes, rows, (single, single_cpu), wire, dev)
    dist.destroy_process_group()


def print_rows(a, path, n, nbytes, rows, single, wire, dev):
    if a.header:
        print("model %s: %.1f MiB, %s, best of %d after %d warm-up, bucket %g MiB x %d" % (
            path, nbytes / 2**20, "gloo, host memory" if dev.type == "cpu" else "nccl, GPU memory", a.repeats,
            a.warmup, a.bucket_mib, a.buckets))
        print("%-5s %-22s %8s %7s %10s %14s %7s" % ("procs", "row", "seconds", "GB/s", "x floor", "peak RSS MiB",
                                                     "CPU s"))
    floor = max(single[0], wire[0])
    for m, (sec, rss, cpu) in rows.items():
        print("%-5d %-22s %8.3f %7.2f %9.2fx %14.0f %7.2f" % (n, m, sec, nbytes / sec / 1e9, sec / floor, rss, cpu))
    print("%-5d %-22s %8.3f %7.2f %10s   (rank 0 alone %.3f s / %.2f CPU s, bare broadcast %.3f s / %.2f CPU s)" % (
        n, "floor", floor, nbytes / floor / 1e9, "", single[0], single[1], wire[0], wire[2]))
    print("seed table (%s):" % ("GPUs" if dev.type == "cuda" else "procs"))
    print("  %-6s %-6s %10s %7s %10s %7s %8s" % ("loader", "procs", "indep. s", "GB/s", "bcast s", "GB/s",
                                                  "speedup"))
    for loader, bname in (("tzr", "tzr broadcast"), ("plain", "plain broadcast")):
        ind = rows.get(loader + " independent")
        bc = rows.get(bname)
        if ind is None:
            continue
        cols = "%10.3f %7.2f" % (ind[0], nbytes / ind[0] / 1e9)
        cols += " %10.3f %7.2f %7.2fx" % (bc[0], nbytes / bc[0] / 1e9, ind[0] / bc[0]) if bc else \
            " %10s %7s %8s" % ("-", "-", "-")
        print("  %-6s %-6d %s" % (loader, n, cols))


if __name__ == "__main__":
    main()
