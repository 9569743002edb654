"""Tests of the Python package tzr: one `PASS name` / `FAIL name: why` line
per case (tests/run.sh counts them). Run from the repository root:
    PYTHONPATH=python /usr/bin/python3 tests/python/test_tzr.py
Exit 77 with no lines when torch or numpy is missing."""
import ctypes
import gc
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

import tzr
from cases import case, finish, raw
from tzr import _core

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
GOLDEN = os.path.join(ROOT, "tests", "golden")
GTORCH = os.path.join(ROOT, "tests", "golden-torch")
TMP = tempfile.mkdtemp(prefix="tzr-py-")


def manifest(folder):
    return json.load(open(os.path.join(folder, "manifest.json")))


def crypt_of(ent):
    if "key_hex" in ent:
        return tzr.DecryptionParams.from_key(bytes.fromhex(ent["key_hex"]))
    if "password" in ent:
        return tzr.DecryptionParams.from_string(ent["password"])
    return None


def path_of(t):
    p = t["path"]
    return tuple(p) if isinstance(p, list) else p


def check_file(folder, name, ent, **kw):
    with tzr.TensorDeserializer(os.path.join(folder, name), device="cpu", encryption=crypt_of(ent),
                                lazy_load=True, **kw) as d:
        got = {e[2]: (e[0], e[1], e[3]) for e in d.read_tensors()}
        assert len(got) == len(ent["tensors"]), "%d tensors, want %d" % (len(got), len(ent["tensors"]))
        for t in ent["tensors"]:
            idx, ty, x = got[path_of(t)]
            assert list(x.shape) == t["shape"], (t["path"], list(x.shape))
            assert (idx, ty) == (t["module_idx"], t["type"]), (t["path"], idx, ty)
            b = raw(x)
            if "data_sha256" in t:
                assert hashlib.sha256(b).hexdigest() == t["data_sha256"], "bytes of %r" % (t["path"],)
            elif t.get("data_hex") is not None:
                assert b.hex() == t["data_hex"], "bytes of %r" % (t["path"],)
            if t.get("meta"):
                assert not any(b), "meta tensor %r not zeros" % (t["path"],)


def golden_cases():
    for folder, tag in ((GOLDEN, "golden"), (GTORCH, "torch")):
        for name, ent in sorted(manifest(folder).items()):
            def fn(folder=folder, name=name, ent=ent):
                check_file(folder, name, ent)
                check_file(folder, name, ent, verify_hash=True)
            fn.__name__ = "load_%s_%s" % (tag, name.split(".")[0])
            case(fn)


# ------------------------------------------------------------------ modules of how_made.py
class Shared(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.scale = torch.nn.Parameter(torch.randn(8))


class Net(torch.nn.Module):
    def __init__(s, meta=False):
        super().__init__()
        s.emb = torch.nn.Embedding(64, 32)
        s.enc = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        s.head = torch.nn.Linear(32, 64, bias=False)
        s.head.weight = s.emb.weight
        s.sh = Shared()
        s.sh2 = s.sh
        s.register_buffer("steps", torch.zeros(5, dtype=torch.int64))
        s.register_buffer("mask", torch.zeros(2, 2, dtype=torch.bool))
        s.register_buffer("phase", torch.zeros(3, 2, dtype=torch.complex64))
        s.register_buffer("count", torch.tensor(0, dtype=torch.int32))
        s.register_buffer("tmp", torch.zeros(2, 3), persistent=False)
        s.w16 = torch.nn.Parameter(torch.randn(4, 3).half())
        s.wbf = torch.nn.Parameter(torch.randn(16, 8).bfloat16())
        s.wT = torch.nn.Parameter(torch.randn(6, 5).t())
        s.norm = torch.nn.LayerNorm(32)
        s.bn = torch.nn.BatchNorm1d(8)
        if meta:
            s.lazy = torch.nn.Linear(16, 24, device="meta")
            s.register_buffer("mbuf", torch.empty(5, 2, dtype=torch.float16, device="meta"))


def same_bytes(a, b):
    x, y = open(a, "rb").read(), open(b, "rb").read()
    if x != y:
        i = next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), min(len(x), len(y)))
        raise AssertionError("%s differs from %s at byte %d (sizes %d, %d)" % (a, b, i, len(x), len(y)))


def roundtrip_module(name, meta):
    m = Net(meta=meta)
    before = m.wT.data_ptr(), m.emb.weight.data_ptr()
    with tzr.TensorDeserializer(os.path.join(GTORCH, name), device="cpu", lazy_load=True) as d:
        n = d.load_into_module(m)
    assert n == len(manifest(GTORCH)[name]["tensors"])
    assert (m.wT.data_ptr(), m.emb.weight.data_ptr()) == before, "parameters were replaced, not filled"
    assert m.head.weight is m.emb.weight and not m.wT.is_contiguous()
    if meta:
        # Meta tensors of the file come back zero-filled, as tensorizer
        # materializes them; put the module's meta ones back to write it again.
        for t, shape in ((m.lazy.weight, (24, 16)), (m.lazy.bias, (24,)), (m.mbuf, (5, 2))):
            assert not t.is_meta and tuple(t.shape) == shape and not t.any(), t
        m.lazy = torch.nn.Linear(16, 24, device="meta")
        m.register_buffer("mbuf", torch.empty(5, 2, dtype=torch.float16, device="meta"))
    out = os.path.join(TMP, "rt_" + name)
    with tzr.TensorSerializer(out) as s:
        s.write_module(m)
    same_bytes(out, os.path.join(GTORCH, name))
    return m


@case
def roundtrip_module_tmod():
    roundtrip_module("tmod_v2.tensors", False)


@case
def roundtrip_module_tmeta():
    roundtrip_module("tmeta_v4.tensors", True)


@case
def roundtrip_module_eager_load():
    # Default (not lazy): tensors are loaded first, then copied in place.
    m = Net()
    d = tzr.TensorDeserializer(os.path.join(GTORCH, "tmod_v2.tensors"), device="cpu")
    d.load_into_module(m)
    out = os.path.join(TMP, "rt_eager.tensors")
    with tzr.TensorSerializer(out) as s:
        s.write_module(m)
    same_bytes(out, os.path.join(GTORCH, "tmod_v2.tensors"))


@case
def roundtrip_views():
    # Rebuild how_made.py's views (non-contiguous, stride 0, conj, grad) from
    # the loaded values and check the writer makes them contiguous the same way.
    d = tzr.TensorDeserializer(os.path.join(GTORCH, "tviews_v2.tensors"), device="cpu")
    v = dict(d)
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    v["t"], v["slice"], v["step"], v["col"] = base.t(), base[1:5, 2:7], base[::2, ::3], base[:, 3]
    v["alias_a"], v["alias_b"] = base[0], base[0:1].reshape(8)
    v["expand"] = v["expand"][:, :1].expand(3, 4)
    v["strided"] = torch.arange(20, dtype=torch.int64).as_strided((3, 3), (5, 2), 1)
    v["chlast"] = v["chlast"].contiguous().to(memory_format=torch.channels_last)
    v["permute"] = v["permute"].permute(2, 1, 3, 0).contiguous().permute(3, 1, 0, 2)
    v["c64_conjview"] = v["c64_conjview"].conj().resolve_conj().conj()
    assert v["c64_conjview"].is_conj()
    v["i32"] = torch.arange(12, dtype=torch.int32).reshape(3, 4).t()
    for k in ("f64", "f16T", "bf16T", "bT"):
        v[k] = v[k].t().contiguous().t()
    v["grad"] = v["grad"].clone().requires_grad_(True)
    assert not v["permute"].is_contiguous() and not v["f16T"].is_contiguous()
    out = os.path.join(TMP, "rt_views.tensors")
    with tzr.TensorSerializer(out) as s:
        s.write_state_dict(v)
    same_bytes(out, os.path.join(GTORCH, "tviews_v2.tensors"))


def roundtrip_tree(name):
    d = tzr.TensorDeserializer(os.path.join(GTORCH, name), device="cpu")
    out = os.path.join(TMP, "rt_" + name)
    with tzr.TensorSerializer(out) as s:
        s.write_state_dict(d.tree())
    same_bytes(out, os.path.join(GTORCH, name))


@case
def roundtrip_nested():
    roundtrip_tree("tnested_v2.tensors")


@case
def roundtrip_list():
    roundtrip_tree("tlist_v1.tensors")


@case
def roundtrip_write_tensor():
    d = tzr.TensorDeserializer(os.path.join(GTORCH, "twt_v1.tensors"), device="cpu")
    out = os.path.join(TMP, "rt_twt.tensors")
    with tzr.TensorSerializer(out) as s:
        for idx, ty, name, t in d.read_tensors():
            s.write_tensor(idx, name, tzr.TensorType(ty), t)
    same_bytes(out, os.path.join(GTORCH, "twt_v1.tensors"))


@case
def roundtrip_numpy_arrays():
    # numpy arrays are accepted by write_tensor, with the same bytes.
    d = tzr.TensorDeserializer(os.path.join(GTORCH, "twt_v1.tensors"), device="cpu")
    out = os.path.join(TMP, "rt_twt_np.tensors")
    with tzr.TensorSerializer(out) as s:
        for idx, ty, name, t in d.read_tensors():
            s.write_tensor(idx, name, ty, t.detach().numpy())
    same_bytes(out, os.path.join(GTORCH, "twt_v1.tensors"))


def detensorize(*args):
    return subprocess.run([os.path.join(BUILD, "detensorize")] + list(args), capture_output=True, text=True)


@case
def encrypted_write_key_read_by_tools():
    enc = tzr.EncryptionParams.random()
    m = roundtrip_module("tmod_v2.tensors", False)
    out = os.path.join(TMP, "enc_key.tensors")
    with tzr.TensorSerializer(out, encryption=enc) as s:
        s.write_module(m)
    kf = os.path.join(TMP, "key")
    open(kf, "wb").write(enc.key)
    r = detensorize(out, "--verify", "--key-file", kf, "-q")
    assert r.returncode == 0, r.stderr
    bad = os.path.join(TMP, "badkey")
    open(bad, "wb").write(bytes(32))
    assert detensorize(out, "--verify", "--key-file", bad, "-q").returncode == 1
    d = tzr.TensorDeserializer(out, device="cpu", encryption=tzr.DecryptionParams.from_key(enc.key))
    assert raw(d[".wT"]) == raw(m.wT)


@case
def encrypted_write_password_read_by_tools():
    enc = tzr.EncryptionParams.from_string("pässword", opslimit=tzr.EncryptionParams.OpsLimit.MIN,
                                           memlimit=tzr.EncryptionParams.MemLimit.MIN)
    out = os.path.join(TMP, "enc_pw.tensors")
    sd = {"a": torch.randn(100, 7), "n": {"b": torch.arange(5)}}
    with tzr.TensorSerializer(out, encryption=enc) as s:
        s.write_state_dict(sd)
    pf = os.path.join(TMP, "pw")
    open(pf, "w").write("pässword\n")
    r = detensorize(out, "--verify", "--password-file", pf, "-q")
    assert r.returncode == 0, r.stderr
    d = tzr.TensorDeserializer(out, device="cpu", encryption=tzr.DecryptionParams.from_string("pässword"))
    assert torch.equal(d["a"], sd["a"]) and torch.equal(d["n"]["b"], sd["n"]["b"])


@case
def wrong_key():
    ent = manifest(GTORCH)["tmod_key_v3.tensors"]
    p = os.path.join(GTORCH, "tmod_key_v3.tensors")
    for dec in (tzr.DecryptionParams.from_key(bytes(32)), None):
        try:
            tzr.TensorDeserializer(p, device="cpu", encryption=dec)
        except tzr.CryptographyError as e:
            assert e.code == -7 and e.message
        else:
            raise AssertionError("no CryptographyError with %r" % (dec,))
    assert ent["key_hex"]


@case
def filter_func_selects():
    p = os.path.join(GTORCH, "tmod_v2.tensors")
    d = tzr.TensorDeserializer(p, device="cpu", filter_func=lambda n: n.startswith("enc."))
    assert d.keys() and all(k.startswith("enc.") for k in d.keys())
    assert len(d) == sum(1 for t in manifest(GTORCH)["tmod_v2.tensors"]["tensors"] if t["path"].startswith("enc."))
    assert ".w16" not in d
    # structured names reach filter_func as tuples
    d = tzr.TensorDeserializer(os.path.join(GTORCH, "tnested_v2.tensors"), device="cpu",
                               filter_func=lambda n: isinstance(n, tuple) and n[0] == "model")
    assert list(d.keys()) == ["model"] and len(d.tree()["model"]["layers"]) == 2


def corrupt_copy(src, name, tensor_path):
    """A copy of src with one data byte of tensor_path flipped."""
    out = os.path.join(TMP, name)
    shutil.copy(src, out)
    with tzr.TensorDeserializer(src, device="cpu", lazy_load=True) as d:
        index = d._by_name[tensor_path]
    import tzr._lib as L
    h = ctypes.c_void_p()
    L.check(L.lib.tzr_reader_open(ctypes.byref(h), src.encode(), None))
    off = L.lib.tzr_reader_tensor(h, index).contents.data_offset
    L.lib.tzr_reader_free(h)
    with open(out, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xFF]))
    return out


@case
def lazy_load_and_hash_mismatch():
    bad = corrupt_copy(os.path.join(GTORCH, "tmod_v2.tensors"), "bad.tensors", "enc.linear1.weight")
    try:
        tzr.TensorDeserializer(bad, device="cpu", verify_hash=True)
        raise AssertionError("eager load of a corrupt file passed")
    except tzr.HashMismatchError as e:
        assert "enc.linear1.weight" in e.message, e.message
    # lazy: only the bad tensor fails, when it is asked for
    d = tzr.TensorDeserializer(bad, device="cpu", verify_hash=True, lazy_load=True)
    assert d["emb.weight"].shape == (64, 32)
    try:
        d["enc.linear1.weight"]
        raise AssertionError("lazy read of a corrupt tensor passed")
    except tzr.HashMismatchError:
        pass
    d.close()


@case
def truncated_file():
    src = open(os.path.join(GTORCH, "tmod_v2.tensors"), "rb").read()
    for cut in (100, len(src) - 1000):
        p = os.path.join(TMP, "trunc.tensors")
        open(p, "wb").write(src[:cut])
        try:
            tzr.TensorDeserializer(p, device="cpu")
            raise AssertionError("truncated at %d loaded" % cut)
        except tzr.FormatError as e:
            assert e.message


@case
def missing_file():
    try:
        tzr.TensorDeserializer(os.path.join(TMP, "nope.tensors"), device="cpu")
        raise AssertionError("no error")
    except FileNotFoundError as e:
        assert isinstance(e, tzr.TzrError) and "nope.tensors" in str(e)


@case
def dtype_cast():
    d = tzr.TensorDeserializer(os.path.join(GTORCH, "tmod_v2.tensors"), device="cpu", dtype=torch.float16)
    assert d["emb.weight"].dtype == torch.float16 and d[".mask"].dtype == torch.bool


def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@case
def no_leak_open_close():
    p = os.path.join(TMP, "leak.tensors")
    with tzr.TensorSerializer(p) as s:
        s.write_state_dict({"a%d" % i: torch.randn(64, 1024) for i in range(16)})  # 4 MiB
    def cycle():
        with tzr.TensorDeserializer(p, device="cpu") as d:
            assert len(d) == 16
    for _ in range(10):
        cycle()
    gc.collect()
    before = rss()
    for _ in range(50):
        cycle()
    gc.collect()
    grown = rss() - before
    assert grown < 16 << 20, "RSS grew %d bytes over 50 cycles" % grown


@case
def numpy_without_torch():
    code = ("import tzr, hashlib, json, sys\n"
            "from tzr import _dtypes\n"
            "assert _dtypes.torch is None\n"
            "m = json.load(open('tests/golden-torch/manifest.json'))['tviews_v2.tensors']\n"
            "d = tzr.TensorDeserializer('tests/golden-torch/tviews_v2.tensors', device='cpu')\n"
            "for t in m['tensors']:\n"
            "    a = d[t['path']]\n"
            "    assert type(a).__name__ == 'ndarray' and list(a.shape) == t['shape']\n"
            "    assert hashlib.sha256(a.tobytes()).hexdigest() == t['data_sha256'], t['path']\n")
    env = dict(os.environ, TZR_NO_TORCH="1", PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-500:]


@case
def errors_carry_library_message():
    bad = corrupt_copy(os.path.join(GTORCH, "tviews_v2.tensors"), "bad2.tensors", "c128")
    try:
        tzr.TensorDeserializer(bad, device="cpu", verify_hash=True)
        raise AssertionError("no error")
    except tzr.HashMismatchError as e:
        assert "c128" in e.message and "offset" in e.message.lower(), e.message


@case
def cuda_table_on_fake_runtime():
    # The device path below the torch layer: fake cudaMalloc'd buffers
    # (host memory inside the fake) filled through the CUDA table sink.
    fake = os.path.realpath(os.path.join(BUILD, "tests", "libfakecudart.so"))
    os.environ["TZR_CUDART"] = fake
    cu = ctypes.CDLL(fake)
    ent = manifest(GTORCH)["tmod_v2.tensors"]
    r = _core.Reader(os.path.join(GTORCH, "tmod_v2.tensors"))
    bufs = {}
    for e in r.entries:
        p = ctypes.c_void_p()
        assert cu.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(max(1, e.nbytes))) == 0
        bufs[e.index] = (p.value, e.nbytes)
    r.load(bufs, device=0, verify=True)
    want = {path_of(t): t["data_sha256"] for t in ent["tensors"]}
    for e in r.entries:
        p, n = bufs[e.index]
        assert hashlib.sha256(ctypes.string_at(p, n)).hexdigest() == want[e.name], e.name
        cu.cudaFree(ctypes.c_void_p(p))
    r.close()


@case
def progress_callback():
    seen = []
    tzr.TensorDeserializer(os.path.join(GTORCH, "tsd_pw_v3.tensors"), device="cpu",
                           encryption=tzr.DecryptionParams.from_string("correct horse battery ✓"),
                           progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] > 1 << 20, seen[-3:]


@case
def shards_write_and_reshard():
    # 3 ranks each write their rows of w (split dim 0) and a replicated b;
    # reloaded on 2 ranks, the slices tile the original exactly.
    w = torch.randn(10, 6)
    b = torch.arange(4, dtype=torch.int64)
    prefix = os.path.join(TMP, "sh", "model")
    os.makedirs(os.path.dirname(prefix))
    for rank in range(3):
        off = [0, 4, 7][rank]
        n = [4, 3, 3][rank]
        with tzr.ShardWriter(prefix, rank, 3) as s:
            s.add("w", w[off:off + n], global_shape=w.shape, dim=0, offset=off)
            s.add("b", b)
    man = tzr.build_manifest(prefix, 3)
    parts = []
    for rank in range(2):
        st = tzr.load_rank(man, rank, 2, device="cpu")
        assert torch.equal(st["b"], b)
        dim, off = st.tzr_slice["w"]
        assert dim == 0 and off == 5 * rank, (dim, off)
        parts.append(st["w"])
    assert torch.equal(torch.cat(parts), w)
    assert torch.equal(tzr.load_rank(man, 0, 1)["w"], w)


@case
def load_into_module_tied_last_wins():
    # A file whose two tied names hold different bytes: in-place filling
    # keeps the tie, and the later tensor's bytes win, as in-order copies do.
    class Tied(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.a = torch.nn.Linear(3, 2, bias=False)
            s.b = torch.nn.Linear(3, 2, bias=False)
            s.b.weight = s.a.weight
    p = os.path.join(TMP, "tied.tensors")
    with tzr.TensorSerializer(p) as s:
        s.write_tensor(1, "a.weight", tzr.TensorType.PARAM, torch.zeros(2, 3))
        s.write_tensor(2, "b.weight", tzr.TensorType.PARAM, torch.ones(2, 3))
    for lazy in (True, False):
        m = Tied()
        tzr.TensorDeserializer(p, device="cpu", lazy_load=lazy).load_into_module(m)
        assert m.a.weight is m.b.weight and torch.equal(m.a.weight, torch.ones(2, 3)), lazy


ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64", torch.float16: "F16"}


def write_safetensors(path, tensors):
    """A safetensors file written here byte by byte (the format's spec), so
    the library's reading of it is checked against an independent writer."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = raw(t)
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


LLM = {
    "model.embed_tokens.weight": torch.randn(16, 8).to(torch.bfloat16),
    "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8),
    "model.layers.0.self_attn.o_proj.weight": torch.randn(8, 8),
    "model.layers.0.mlp.down_proj.weight": torch.randn(8, 12).to(torch.float16),
    "model.norm.weight": torch.randn(8),
    "step": torch.tensor(7, dtype=torch.int64),
}


@case
def safetensors_through_deserializer():
    p = os.path.join(TMP, "llm.safetensors")
    write_safetensors(p, LLM)
    for lazy in (False, True):
        d = tzr.TensorDeserializer(p, device="cpu", lazy_load=lazy)
        assert sorted(d) == sorted(LLM), sorted(d)
        for k, t in LLM.items():
            assert d[k].dtype == t.dtype and d[k].shape == t.shape and raw(d[k]) == raw(t), k
        d.close()
    try:
        tzr.TensorDeserializer(p, device="cpu", verify_hash=True)
        raise AssertionError("verify_hash on a safetensors file did not fail")
    except tzr.TzrError as e:
        assert "no hashes" in str(e), str(e)


@case
def hf_directory_load_rank():
    # Two files and their index, as Hugging Face writes them: one set.
    d = os.path.join(TMP, "hf")
    os.makedirs(d)
    names = sorted(LLM)
    parts = [names[:3], names[3:]]
    wm = {}
    for k, part in enumerate(parts):
        f = "model-%05d-of-00002.safetensors" % (k + 1)
        write_safetensors(os.path.join(d, f), {n: LLM[n] for n in part})
        wm.update({n: f for n in part})
    json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    for where in (d, os.path.join(d, "model.safetensors.index.json")):
        st = tzr.load_rank(where, 0, 1, verify=False)
        assert sorted(st) == names, sorted(st)
        for n in names:
            assert raw(st[n]) == raw(LLM[n]) and st[n].shape == LLM[n].shape, n


@case
def vllm_rank_set_load_rank():
    # tensorize writes vLLM's per-rank files; the pattern alone opens them:
    # whole on one rank, cut as vLLM cuts them on two (o_proj/down_proj
    # along dim 1, q_proj and embeddings along dim 0, norms replicated).
    src = os.path.join(TMP, "vl.safetensors")
    write_safetensors(src, LLM)
    pattern = os.path.join(TMP, "vl", "model-rank-%03d.tensors")
    os.makedirs(os.path.dirname(pattern))
    r = subprocess.run([os.path.join(BUILD, "tensorize"), "-q", src, "--shards", "2", "--names", "vllm",
                        "-o", pattern], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    whole = tzr.load_rank(pattern, 0, 1)
    for n, t in LLM.items():
        assert raw(whole[n]) == raw(t) and whole[n].shape == t.shape, n
    half = [tzr.load_rank(pattern, k, 2) for k in range(2)]
    want = {"model.layers.0.self_attn.o_proj.weight": 1, "model.layers.0.mlp.down_proj.weight": 1,
            "model.layers.0.self_attn.q_proj.weight": 0, "model.embed_tokens.weight": 0, "model.norm.weight": None}
    for n, dim in want.items():
        assert half[1].tzr_slice[n][0] == dim, (n, half[1].tzr_slice[n])
        joined = half[0][n] if dim is None else torch.cat([half[0][n], half[1][n]], dim)
        assert raw(joined) == raw(LLM[n]), n


@case
def names_shapes_dtypes_from_bulk_index():
    # The index is read in bulk as columns (Reader.entries makes an Entry
    # when indexed): names with non-ASCII bytes next to ASCII ones, mixed
    # ranks (one with a zero-size dim) and dtypes must come back as written.
    sd = {"a.w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "\u00e9t\u00e9.b": torch.tensor([1, 2], dtype=torch.int64),
          "\u65e5\u672c.x": torch.ones(2, 2, 2, dtype=torch.bfloat16), "plain": torch.zeros(0, 4, dtype=torch.float16),
          "s": torch.tensor(7, dtype=torch.int32)}
    path = os.path.join(TMP, "bulk_names.tensors")
    with tzr.TensorSerializer(path) as w:
        w.write_state_dict(sd)
    r = _core.Reader(path)
    assert len(r.entries) == 5 and [e.name for e in r.entries] == list(sd)
    assert r.entries[-1].name == "s" and r.entries[1].raw_name == "\u00e9t\u00e9.b".encode()
    assert [e.shape for e in r.entries] == [(2, 3), (2,), (2, 2, 2), (0, 4), ()]
    assert [e.index for e in r.entries[1:3]] == [1, 2]
    r.close()
    d = tzr.TensorDeserializer(path, device="cpu")
    assert list(d) == list(sd)
    for n, t in sd.items():
        got = d[n]
        assert type(got) is torch.nn.Parameter and got.dtype == t.dtype and got.shape == t.shape, n
        assert got.requires_grad == t.is_floating_point() and torch.equal(got.detach(), t), n
    d.close()
    d = tzr.TensorDeserializer(path, device="cpu", filter_func=lambda n: not n.isascii())
    assert list(d) == ["\u00e9t\u00e9.b", "\u65e5\u672c.x"] and d.total_tensor_bytes == 16 + 16
    assert torch.equal(d["\u65e5\u672c.x"].detach(), sd["\u65e5\u672c.x"])
    d.close()


def check_results(d, want):
    """Every tensor of d as tensorizer returns it: an nn.Parameter leaf
    with its own storage (no two share or overlap), requires_grad exactly
    for floating and complex dtypes, holding the bytes written."""
    spans = []
    for name, t in d.items():
        w = want[name]
        assert type(t) is torch.nn.Parameter and t.is_leaf and t.grad_fn is None, name
        assert t.requires_grad == (w.is_floating_point() or w.is_complex()), (name, t.requires_grad)
        assert t.dtype == w.dtype and t.shape == w.shape and raw(t) == raw(w), name
        st = t.storage()
        assert st.size() == t.numel() and st.data_ptr() == t.data_ptr(), (name, st.size(), t.numel())
        if t.numel():
            spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), name))
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        assert a1 <= b0, "%r and %r overlap" % (an, bn)
    assert len(spans) == sum(1 for w in want.values() if w.numel())


@case
def results_own_storage_and_grad():
    # 300 tensors of six dtypes (the bulk index road), loaded whole, lazily
    # one by one then the rest, and with the Parameters made by torch's
    # constructor instead of a class change (the fallback).
    from tzr import serialization
    kinds = [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.uint8]
    g = torch.Generator().manual_seed(3)
    want = {}
    for i in range(300):
        dt = kinds[i % len(kinds)]
        shape = (i % 4, 3) if i % 7 else ()
        want["m.%d.%s" % (i, str(dt)[6:])] = (torch.randn(shape, generator=g) * 50).to(dt)
    path = os.path.join(TMP, "own_storage.tensors")
    with tzr.TensorSerializer(path) as w:
        w.write_state_dict(want)
    with tzr.TensorDeserializer(path, device="cpu") as d:
        check_results(d, want)
        p = d["m.0.float32"]
        (p * 2).sum().backward()
        assert torch.equal(p.grad, torch.full_like(p, 2.0)) and d["m.1.bfloat16"].grad is None
        with torch.no_grad():
            p.add_(1)
        assert not torch.equal(d["m.6.float32"].detach(), p.detach())
    with tzr.TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        for n in ("m.5.uint8", "m.1.bfloat16", "m.296.int64"):
            assert raw(d[n]) == raw(want[n]) and type(d[n]) is torch.nn.Parameter, n
        check_results(d, want)
    old = serialization._SWAP
    try:
        serialization._SWAP = False
        with tzr.TensorDeserializer(path, device="cpu") as d:
            check_results(d, want)
    finally:
        serialization._SWAP = old
    with tzr.TensorDeserializer(path, device="cpu", filter_func=lambda n: n.endswith("float32")) as d:
        sub = {n: t for n, t in want.items() if n.endswith("float32")}
        assert sorted(d) == sorted(sub) and d.total_tensor_bytes == sum(t.numel() * 4 for t in sub.values())
        check_results(d, sub)


@case
def names_split_in_one_pass():
    # _core._split_names against decoding each name on its own: ASCII,
    # UTF-8, bytes that are not UTF-8, empty names, names right next to one
    # another, and a NUL inside a name (None: the caller slices instead).
    import random
    rnd = random.Random(5)
    pieces = [b"a.w", "\u00e9t\u00e9".encode(), b"\xe6\x97", b"", b"\xff\xfe.x", "\u65e5".encode() + b"\x80", b"z"]
    for trial in range(50):
        names = [rnd.choice(pieces) + rnd.choice(pieces) for _ in range(rnd.randrange(1, 40))]
        blob, offs = b"", []
        for nm in names:
            blob += bytes(rnd.randrange(256) for _ in range(rnd.choice((0, 1, 5))))
            offs.append(len(blob))
            blob += nm
        got = _core._split_names(blob, np.array(offs, dtype=np.int64), np.array([len(x) for x in names], np.int64))
        assert got == [x.decode("utf-8", "surrogateescape") for x in names], (trial, names, got)
    assert _core._split_names(b"ab\0cd", np.array([0, 3]), np.array([3, 2])) is None


golden_cases()
shutil.rmtree(TMP, ignore_errors=True)
finish()
