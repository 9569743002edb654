"""tzr's Python loads onto a real CUDA device (run by tests/gpu/run.sh):
TensorDeserializer(device="cuda") of the golden files, checked against
their manifests' bytes (the oracle, not a CPU load by the same code); every
dtype tzr writes; load_into_module onto a CUDA module; verify levels; a
dtype cast; lazy loads; an encrypted file. Then, with --bench-mib N, one
LLM-shaped file of N MiB loaded onto the GPU next to torch's own pinned
host-to-device copy of the same bytes, measured in the same run.
One `PASS name` / `FAIL name: why` line per case; exit 77 without CUDA.
With --bench-small N, N tensors of 4 KiB onto the GPU next to torch's cost
of making N CUDA tensors; --bench-only skips the checks.
    PYTHONPATH=python TZR_LIBRARY=build/libtzr.so python3 tests/gpu/python_cuda.py [--bench-mib N] [--bench-small N]"""
import hashlib
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    print("python_cuda: torch sees no CUDA device", file=sys.stderr)
    sys.exit(77)

import json

import tzr
from cases import case, finish, raw

TMP = tempfile.mkdtemp(prefix="tzr-gpu-py-")


def on_host(t):
    torch.cuda.synchronize()
    return t.detach().to("cpu")


def check_golden(folder):
    man = json.load(open(os.path.join(folder, "manifest.json")))
    for name, ent in sorted(man.items()):
        crypt = None
        if "key_hex" in ent:
            crypt = tzr.DecryptionParams.from_key(bytes.fromhex(ent["key_hex"]))
        elif "password" in ent:
            crypt = tzr.DecryptionParams.from_string(ent["password"])

        def fn(name=name, ent=ent, crypt=crypt):
            for verify in (False, True, "crc32"):
                with tzr.TensorDeserializer(os.path.join(folder, name), device="cuda", encryption=crypt,
                                            verify_hash=verify) as d:
                    got = {e[2]: e[3] for e in d.read_tensors()}
                assert len(got) == len(ent["tensors"]), (len(got), len(ent["tensors"]))
                for t in ent["tensors"]:
                    p = tuple(t["path"]) if isinstance(t["path"], list) else t["path"]
                    x = got[p]
                    assert x.device.type == "cuda", (p, x.device)
                    assert list(x.shape) == t["shape"], (p, list(x.shape))
                    b = raw(on_host(x))
                    if "data_sha256" in t:
                        assert hashlib.sha256(b).hexdigest() == t["data_sha256"], "bytes of %r" % (p,)
                    elif t.get("data_hex") is not None:
                        assert b.hex() == t["data_hex"], "bytes of %r" % (p,)
        fn.__name__ = "cuda_golden_%s" % name.split(".")[0]
        case(fn)


def all_dtypes_sd():
    g = torch.Generator().manual_seed(7)
    sd = {}
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
               torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64):
        base = torch.randn(37, 5, generator=g) * 50
        if dt == torch.bool:
            t = base > 0
        elif dt == torch.complex64:
            t = torch.complex(base, -base)
        else:
            t = base.to(dt)
        sd["w_" + str(dt).split(".")[1]] = t
    sd["scalar"] = torch.tensor(3.5)
    sd["empty"] = torch.empty(0, 4)
    sd["strided"] = torch.arange(64.).reshape(8, 8).t()  # non-contiguous source
    sd["big"] = torch.randn(1 << 22, generator=g)  # 16 MiB: several chunks
    return sd


SD = all_dtypes_sd()
SD_PATH = os.path.join(TMP, "sd.tensors")
with tzr.TensorSerializer(SD_PATH) as s:
    s.write_state_dict(SD)


def same(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape)
    assert raw(on_host(got)) == raw(want), "bytes of " + what


@case
def cuda_every_dtype():
    for dev in ("cuda", "cuda:0", torch.device("cuda", 0), 0):
        with tzr.TensorDeserializer(SD_PATH, device=dev) as d:
            assert set(d.keys()) == set(SD), sorted(d.keys())
            for k, want in SD.items():
                got = d[k]
                assert got.device == torch.device("cuda", 0), (k, got.device)
                same(got, want, k)
                assert got.requires_grad == (got.is_floating_point() or got.is_complex()), k


@case
def cuda_verify_levels_and_lazy():
    for verify in (True, "crc32"):
        with tzr.TensorDeserializer(SD_PATH, device="cuda", verify_hash=verify, lazy_load=True) as d:
            same(d["big"], SD["big"], "big")
            same(d["w_bfloat16"], SD["w_bfloat16"], "w_bfloat16")


@case
def cuda_dtype_cast():
    with tzr.TensorDeserializer(SD_PATH, device="cuda", dtype=torch.float16) as d:
        got = d["w_float32"]
        assert got.device.type == "cuda" and got.dtype == torch.float16, (got.device, got.dtype)
        assert torch.equal(on_host(got), SD["w_float32"].to(torch.float16))
        for k, want in SD.items():  # every tensor but bool is cast, as tensorizer does
            same(d[k], want if want.dtype == torch.bool else want.to(torch.float16), k)


@case
def cuda_load_into_module():
    torch.manual_seed(3)
    src = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8))
    path = os.path.join(TMP, "mod.tensors")
    with tzr.TensorSerializer(path) as s:
        s.write_module(src)
    dst = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)).cuda()
    with tzr.TensorDeserializer(path, device="cuda") as d:
        d.load_into_module(dst)
    for (k, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        assert b.device.type == "cuda", k
        same(b, a, k)


@case
def cuda_encrypted():
    enc = tzr.EncryptionParams.random()
    path = os.path.join(TMP, "enc.tensors")
    with tzr.TensorSerializer(path, encryption=enc) as s:
        s.write_state_dict(SD)
    with tzr.TensorDeserializer(path, device="cuda", encryption=tzr.DecryptionParams.from_key(enc.key),
                                verify_hash=True) as d:
        for k, want in SD.items():
            same(d[k], want, k)


def timed(fn, reps=3, release=False):
    """Best of reps wall times of fn() with the device synchronized around
    it; release: hand torch's cached device memory back after each."""
    best = None
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        keep = fn()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
        del keep
        if release:
            torch.cuda.empty_cache()
    return best


def load_values(path, **kw):
    with tzr.TensorDeserializer(path, **kw) as d:
        return list(d.values())


def bench(mib):
    """One LLM-shaped file (bf16, 32 layers of 7 tensors) onto the GPU."""
    path = os.path.join(TMP, "bench.tensors")
    per_layer = (mib << 20) // 32
    shapes = [(4, 1), (4, 1), (4, 1), (4, 1), (8, 3), (8, 3), (8, 3)]  # q k v o gate up down, in units
    unit = per_layer // 80 // 4096 * 4096  # a layer is 40 units of 2-byte elements
    sd = {}
    for layer in range(32):
        for j, (w, _) in enumerate(shapes):
            sd["layers.%d.w%d" % (layer, j)] = torch.full((w * unit // 4096, 4096), float(layer + j),
                                                          dtype=torch.bfloat16)
    total = sum(t.numel() * t.element_size() for t in sd.values())
    with tzr.TensorSerializer(path) as s:
        s.write_state_dict(sd)
    del sd
    with open(path, "rb") as f:  # into the page cache
        while f.read(64 << 20):
            pass
    rows = []

    pinned = torch.empty(total, dtype=torch.uint8).pin_memory()
    floor = timed(lambda: pinned.to("cuda", non_blocking=True), release=True)
    pageable = torch.empty(total, dtype=torch.uint8)
    pageable.fill_(1)
    rows.append(("torch pinned H2D copy (floor)", floor))
    rows.append(("torch pageable H2D copy", timed(lambda: pageable.to("cuda"), release=True)))
    del pinned, pageable

    rows.append(("tzr TensorDeserializer cuda", timed(lambda: load_values(path, device="cuda"), release=True)))
    rows.append(("tzr cuda, verify crc32", timed(lambda: load_values(path, device="cuda", verify_hash="crc32"), release=True)))
    rows.append(("tzr cuda, verify full (sha256)", timed(lambda: load_values(path, device="cuda", verify_hash=True), 1, release=True)))
    rows.append(("tzr cpu, then .to(cuda)",
                 timed(lambda: [t.to("cuda") for t in load_values(path, device="cpu")], release=True)))
    print("--- Python onto the GPU: %.2f GiB file, warm page cache, best of 3 (sha256 once)" % (total / 2**30))
    print("%-34s %9s %9s %8s" % ("row", "s", "GB/s", "x floor"))
    for name, dt in rows:
        print("%-34s %9.3f %9.2f %8.2f" % (name, dt, total / dt / 1e9, floor / dt))


def bench_small(n):
    """n tensors of 4 KiB (a mixture-of-experts shape) onto the GPU, next to
    torch's own cost of making n CUDA tensors, in the same run."""
    path = os.path.join(TMP, "small.tensors")
    with tzr.TensorSerializer(path) as s:
        s.write_state_dict({"e.%d" % i: torch.full((1024,), float(i % 251)) for i in range(n)})

    rows = [("torch.empty x %d on cuda (floor)" % n,
             timed(lambda: [torch.empty(1024, device="cuda") for _ in range(n)])),
            ("tzr TensorDeserializer cuda", timed(lambda: load_values(path, device="cuda"))),
            ("tzr TensorDeserializer cpu", timed(lambda: load_values(path, device="cpu")))]
    print("--- Python, %d x 4 KiB onto the GPU, warm page cache, best of 3" % n)
    for name, dt in rows:
        print("%-38s %9.3f s" % (name, dt))


if __name__ == "__main__":
    try:
        if "--bench-only" not in sys.argv:
            check_golden(os.path.join(ROOT, "tests", "golden"))
            check_golden(os.path.join(ROOT, "tests", "golden-torch"))
        if "--bench-mib" in sys.argv:
            bench(int(sys.argv[sys.argv.index("--bench-mib") + 1]))
        if "--bench-small" in sys.argv:
            bench_small(int(sys.argv[sys.argv.index("--bench-small") + 1]))
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    finish()
