"""Times tzr.distributed.load's modes in one job (a tool, not a test):

    python3 -m tzr.distributed.launch -n 4 python/bench_distributed.py \\
        --model-path build/sample.safetensors --warmup 1 --repeats 3 --modes independent,broadcast,allgather

Each mode: a barrier, the load on every rank, a barrier; its time is the
slowest rank's, best of --repeats after --warmup. GB/s is the checkpoint's
bytes over that time (what each rank ends up holding). Peak RSS is each
rank's VmHWM during that mode (reset before it), the largest rank shown.
The floor, measured in the same run: the larger of rank 0 alone loading
the checkpoint through the library and a bare torch.distributed.broadcast
of the same bytes in the same bucket sizes (no storage at all)."""
import argparse
import gc
import os
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


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def timed(fn, warmup, repeats):
    """Best (over repeats) of the slowest rank's time, and the largest peak RSS."""
    best, rss = float("inf"), 0.0
    for k in range(warmup + repeats):
        gc.collect()
        peak_rss_reset()
        dist.barrier()
        t0 = time.perf_counter()
        out = fn()
        dt = slowest(time.perf_counter() - t0)
        r = torch.tensor([peak_rss_mib()], dtype=torch.float64)
        dist.all_reduce(r, op=dist.ReduceOp.MAX)
        del out
        if k >= warmup:
            best, rss = min(best, dt), max(rss, float(r.item()))
    return best, rss


def bare_broadcast(nbytes, bucket, nbuckets):
    """The wire alone: nbytes from rank 0 in bucket-sized async broadcasts."""
    slots = [torch.empty(min(bucket, max(1, nbytes)), dtype=torch.uint8) for _ in range(nbuckets)]
    pending = [None] * nbuckets
    for j, start in enumerate(range(0, nbytes, bucket)):
        s = j % nbuckets
        if pending[s] is not None:
            pending[s].wait()
        pending[s] = dist.broadcast(slots[s][:min(bucket, nbytes - start)], 0, async_op=True)
    for w in pending:
        if w is not None:
            w.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-path", required=True, help="a .tensors or safetensors file, an HF directory, a manifest")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="independent,broadcast,allgather")
    ap.add_argument("--bucket-mib", type=float, default=64)
    ap.add_argument("--buckets", type=int, default=3)
    ap.add_argument("--header", action="store_true", help="print the column names first")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    n, rank = dist.get_world_size(), dist.get_rank()
    modes = [m for m in a.modes.split(",") if m]
    nbytes = sum(t.numel() * t.element_size() for t in tzr.load_rank(a.model_path, 0, 1).values())
    rows = {}
    for m in modes:
        rows[m] = timed(lambda: tzd.load(a.model_path, mode=m, bucket_mib=a.bucket_mib, buckets=a.buckets),
                        a.warmup, a.repeats)
    single, _ = timed(lambda: tzr.load_rank(a.model_path, 0, 1) if rank == 0 else None, a.warmup, a.repeats)
    bucket = int(a.bucket_mib * 2**20)
    wire, _ = timed(lambda: bare_broadcast(nbytes, bucket, a.buckets), a.warmup, a.repeats)
    if rank == 0:
        if a.header:
            print("file %s: %.1f MiB, best of %d after %d warm-up, bucket %g MiB x %d" % (
                a.model_path, nbytes / 2**20, a.repeats, a.warmup, a.bucket_mib, a.buckets))
            print("%-5s %-12s %8s %7s %8s %14s" % ("procs", "mode", "seconds", "GB/s", "speedup", "peak RSS MiB"))
        base = rows.get("independent", (None,))[0]
        for m, (sec, rss) in rows.items():
            sp = "%.2fx" % (base / sec) if base else "-"
            print("%-5d %-12s %8.3f %7.2f %8s %14.0f" % (n, m, sec, nbytes / sec / 1e9, sp, rss))
        floor = max(single, wire)
        print("%-5d %-12s %8.3f %7.2f %8s   (single-rank load %.3f s, bare broadcast %.3f s)" % (
            n, "floor", floor, nbytes / floor / 1e9, "", single, wire))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
