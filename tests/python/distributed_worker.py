"""One rank of tests/python/test_distributed.py: runs every case of one
world size in one process group and writes what each case gave this rank
to DIR/result-W-RANK.json ({case: ["ok"] | ["bad", why] | ["error", type,
message] | ["skip", why]}); the test compares the ranks. Usage: distributed_worker.py DIR
(under python3 -m tzr.distributed.launch), or DIR die (rank 1 dies in save)."""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

import tzr
import tzr.distributed as tzd

DIR = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
# tests/gpu/distributed_test.py runs the same cases onto CUDA tensors
# (over NCCL, or over gloo through pinned buckets); the default is gloo on CPU.
BACKEND = os.environ.get("TZR_TEST_BACKEND", "gloo")
DEVICE = os.environ.get("TZR_TEST_DEVICE", "cpu")
if DEVICE == "cuda":
    torch.cuda.set_device(rank % torch.cuda.device_count())
    DEVICE = "cuda:%d" % torch.cuda.current_device()
# Every collective ends within this, even if a peer never arrives.
dist.init_process_group(BACKEND, timeout=datetime.timedelta(seconds=40))
oracle = torch.load(os.path.join(DIR, "oracle.pt"))
key = bytes.fromhex(open(os.path.join(DIR, "key.hex")).read())
results = {}
BUCKET = 0.25  # MiB: the 1 MiB tensor goes in pieces, the small ones packed


def raw(t):
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


def same(sd, want, device):
    if sorted(sd) != sorted(want):
        return "names %s, expected %s" % (sorted(sd), sorted(want))
    for k, t in want.items():
        if sd[k].dtype != t.dtype or tuple(sd[k].shape) != tuple(t.shape) or not torch.equal(raw(sd[k]), raw(t)):
            return "tensor %s differs (%s %s)" % (k, sd[k].dtype, tuple(sd[k].shape))
        if device is not None and str(sd[k].device) != device:
            return "tensor %s on %s, expected %s" % (k, sd[k].device, device)
    return None


def run(name, fn, want=None, device=DEVICE):
    try:
        got = fn()
        why = same(got, want if want is not None else oracle, device)
        results[name] = ["ok"] if why is None else ["bad", why]
    except Exception as e:  # noqa: BLE001 - recorded, compared across ranks by the test
        results[name] = ["error", type(e).__name__, str(e)]


def load(*a, **kw):
    return tzd.load(*a, device=DEVICE, **kw)


def save_from(sd, prefix):
    """save() of a loaded state dict (on the GPU too): a host copy, its slices kept."""
    return tzd.save({k: t.cpu() for k, t in sd.items()}, prefix, slices=dict(sd.tzr_slice))


def p(*names):
    return os.path.join(DIR, *names)


def die_in_save():
    if rank == 1:
        calls = []

        def add(self, *a, **kw):
            calls.append(1)
            if len(calls) == 2:
                os._exit(9)  # killed mid-save: no status, no goodbye
            return real(self, *a, **kw)
        real = tzr.ShardWriter.add
        tzr.ShardWriter.add = add
    run("die_in_save", lambda: tzd.save(oracle, p("died", "model")), device=None)


def die_in_load():
    """Rank 1 dies (os._exit) after posting its second receive of a
    broadcast load: rank 0 must raise, not wait for it."""
    if rank == 1:
        calls = []

        def broadcast(self, *a, **kw):
            calls.append(1)
            if len(calls) == 2:
                os._exit(9)
            return real(self, *a, **kw)
        real = tzd._group.Group.broadcast
        tzd._group.Group.broadcast = broadcast
    run("die_in_load", lambda: load(p("single.tensors"), mode="broadcast", bucket_mib=BUCKET))


if sys.argv[2:] == ["die"]:
    die_in_save()
elif sys.argv[2:] == ["die_load"]:
    die_in_load()
else:
    sources = {"single": (p("single.tensors"), None), "manifest": (p("man", "model.tzr-index.json"), None),
               "hf": (p("hf"), None), "encrypted": (p("enc.tensors"), tzr.DecryptionParams.from_key(key)),
               "zstd": (p("zstd.tensors"), None), "rankset": (p("vllm", "model-rank-%03d.tensors"), None)}
    s3 = os.environ.get("TZR_TEST_S3", "").split()
    if s3:  # the test uploaded these to its Swift
        sources["s3_single"] = ("s3://%s/dist/single.tensors" % s3[1], None)
        sources["s3_rankset"] = ("s3://%s/dist/vllm/model-rank-%%03d.tensors" % s3[1], None)
    else:
        for mode in tzd.MODES:
            for sname in ("s3_single", "s3_rankset"):
                results["%s_%s" % (mode, sname)] = ["skip", "no S3 server (tests/python_distributed_test.sh starts Swift)"]
    for mode in tzd.MODES:
        for sname, (path, enc) in sources.items():
            run("%s_%s" % (mode, sname), lambda: load(path, mode=mode, encryption=enc, bucket_mib=BUCKET))
    # Tensor-parallel: each rank its own slice of the cut tensor.
    tp = lambda: load(p("man", "model.tzr-index.json"), mode="independent", tensor_parallel=True)  # noqa: E731
    n = oracle["b"].shape[0]
    lo, ln = rank * (n // world) + min(rank, n % world), n // world + (rank < n % world)
    run("tensor_parallel_manifest", tp, dict(oracle, b=oracle["b"][lo:lo + ln]))
    for mode in tzd.MODES:
        bad = 0 if mode == "broadcast" else world - 1  # the rank that reads the missing file
        run("missing_%s" % mode, lambda: load(p("single.tensors") if rank != bad else p("missing.tensors"),
                                              mode=mode, bucket_mib=BUCKET))
        run("short_%s" % mode, lambda: load(p("single.tensors") if rank != bad else p("short.tensors"),
                                            mode=mode, bucket_mib=BUCKET))
        run("corrupt_%s" % mode, lambda: load(p("corrupt.tensors"), mode=mode, verify=True, bucket_mib=BUCKET))
        run("wrong_key_%s" % mode, lambda: load(p("enc.tensors"), mode=mode, bucket_mib=BUCKET,
                                                encryption=tzr.DecryptionParams.from_key(b"\x01" * 32)))
    model = torch.nn.Module()
    for k, t in oracle.items():  # "layers.0.w": a buffer w of submodule layers.0
        *path, leaf = k.split(".")
        m = model
        for c in path:
            if not hasattr(m, c):
                m.add_module(c, torch.nn.Module())
            m = getattr(m, c)
        m.register_buffer(leaf, torch.zeros_like(t))
    run("load_into_module", lambda: (tzd.load_into_module(model, p("single.tensors"), bucket_mib=BUCKET,
                                                          device=DEVICE), model.state_dict())[1], device="cpu")
    # Round trip across world sizes: the 2-rank job saves, the 3-rank one
    # loads that, then saves its tensor-parallel slices for the test to read.
    if world == 2:
        run("save", lambda: (tzd.save(oracle, p("ckpt2", "model")),
                             tzr.load_rank(p("ckpt2", "model.tzr-index.json"), 0, 1))[1], device="cpu")
        # 10,000 small tensors, 5,000 a rank (~360 KB of index entries each),
        # overflow tensorizer's 256 KiB index: each rank's shard is sized for
        # what it writes (issue #23).
        many = {"model.layers.%05d.mlp.experts.weight" % i: torch.full((4,), i, dtype=torch.int32)
                for i in range(10000)}
        run("save_many_small", lambda: (tzd.save(many, p("many", "model")),
                                        tzr.load_rank(p("many", "model.tzr-index.json"), 0, 1))[1],
            want=many, device="cpu")
    else:
        run("load_saved_by_2", lambda: load(p("ckpt2", "model.tzr-index.json"), mode="broadcast", bucket_mib=BUCKET))
        run("save_tensor_parallel", lambda: (save_from(tp(), p("ckpt3", "model")), oracle)[1], device=None)
with open(p("result-%d-%d.json" % (world, rank)), "w") as f:
    json.dump(results, f)
dist.destroy_process_group()
