"""Per-rank checkpoints over tzr_shard_* (include/tzr_shard.h).

Each rank writes its slices with ShardWriter; once every rank is done (a
torch.distributed barrier is enough), one rank calls build_manifest; any
rank count later reloads with load_rank. Thin on purpose: the loads follow
whatever the C shard loader does (today it fills its own buffer, copied
here into torch tensors; moving it onto the pipeline's table sinks is the
C library's next step)."""
import ctypes
import json
import os
from ctypes import byref, c_uint64, c_void_p

import numpy as np

from . import _dtypes, _lib
from ._dtypes import torch
from ._lib import check, lib
from .serialization import _resolve_device, encode_name

REPLICATED = -1


def _decode(raw):
    if raw[:1] == b"\x1e":
        return tuple(json.loads(raw[1:].decode()))
    return raw.decode("utf-8", "surrogateescape")


class ShardWriter:
    """Shard `rank` of `nranks` under `prefix` (files prefix-rank-0000r-of-0000n.tensors)."""

    def __init__(self, prefix, rank, nranks):
        h = c_void_p()
        opt = _lib.ShardWriterOptions(struct_size=ctypes.sizeof(_lib.ShardWriterOptions))
        check(lib.tzr_shard_writer_open(byref(h), os.fsencode(prefix), int(rank), int(nranks), byref(opt)))
        self._h = h

    def add(self, name, tensor, global_shape=None, dim=None, offset=0):
        """Add this rank's slice `tensor` of the global tensor `name`: cut
        along `dim` starting at `offset` (dim None: the whole tensor,
        replicated on every rank)."""
        if self._h is None:
            raise ValueError("the shard writer is closed")
        if torch is not None and isinstance(tensor, torch.Tensor):
            t = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous()
            dts, ptr, local = _dtypes.from_torch(t.dtype), t.data_ptr(), tuple(t.shape)
        else:
            t = np.ascontiguousarray(tensor)
            dts, ptr, local = _dtypes.from_numpy(t.dtype), t.ctypes.data, t.shape
        shape = tuple(global_shape) if global_shape is not None else local
        raw = encode_name(name)
        nb = ctypes.create_string_buffer(raw, len(raw))
        db = ctypes.create_string_buffer(dts, len(dts))
        dims = (c_uint64 * max(1, len(shape)))(*shape)
        d = _lib.ShardTensorDesc(name=ctypes.cast(nb, c_void_p), name_len=len(raw),
                                 dtype_str=ctypes.cast(db, c_void_p), dtype_len=len(dts), dtype=0,
                                 ndim=len(shape), shape=dims, dim=REPLICATED if dim is None else int(dim),
                                 offset=int(offset), length=int(local[dim]) if dim is not None else 0)
        check(lib.tzr_shard_writer_add(self._h, byref(d), ptr or None))

    def close(self):
        if self._h is not None:
            h, self._h = self._h, None
            check(lib.tzr_shard_writer_close(h))

    def abort(self):
        if self._h is not None:
            h, self._h = self._h, None
            lib.tzr_shard_writer_abort(h)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close() if exc_type is None else self.abort()

    def __del__(self):
        self.abort()


def build_manifest(prefix, nshards):
    """Merge the shards' sidecars into prefix.tzr-index.json (checks the tiling)."""
    check(lib.tzr_shard_manifest_build(os.fsencode(prefix), int(nshards)))
    return os.fspath(prefix) + ".tzr-index.json"


def load_rank(manifest, rank, nranks, device="cpu", rules=None, verify=True):
    """{name: tensor} of what rank `rank` of `nranks` holds (reshards from
    however many shards were written). Each value is the local slice; its
    placement is in `.tzr_slice` of the returned dict: {name: (dim, offset)}."""
    dev, _ = _resolve_device(device)
    opt = _lib.ShardOpenOptions(struct_size=ctypes.sizeof(_lib.ShardOpenOptions), verify=1 if verify else 0)
    s = c_void_p()
    check(lib.tzr_shard_open(byref(s), os.fsencode(manifest), byref(opt)))
    res = ctypes.POINTER(_lib.ShardResult)()
    try:
        check(lib.tzr_shard_load_rank(s, int(rank), int(nranks), rules.encode() if rules else None, byref(res)))
        out = ShardState()
        try:
            r = res.contents
            for i in range(r.count):
                p = r.pieces[i]
                g = lib.tzr_shard_tensor_at(s, p.tensor).contents
                dts = ctypes.string_at(g.dtype_str, g.dtype_len)
                shape = tuple(p.shape[k] for k in range(p.ndim))
                name = _decode(ctypes.string_at(p.name, p.name_len))
                buf = ctypes.string_at(p.data, p.nbytes) if p.nbytes else b""
                a = np.frombuffer(bytearray(buf), dtype=np.uint8)
                if torch is None:
                    t = a.view(_dtypes.to_numpy(dts)).reshape(shape)
                else:
                    t = torch.from_numpy(a).view(_dtypes.to_torch(dts)).reshape(shape)
                    if dev != "cpu" and getattr(dev, "type", "cpu") != "cpu":
                        t = t.to(dev)
                out[name] = t
                out.tzr_slice[name] = (None if p.dim == REPLICATED else p.dim, p.offset)
        finally:
            lib.tzr_shard_result_free(res)
    finally:
        lib.tzr_shard_close(s)
    return out


class ShardState(dict):
    def __init__(self):
        super().__init__()
        self.tzr_slice = {}
