"""Per-rank checkpoints over tzr_shard_* (include/tzr_shard.h).

Each rank writes its slices with ShardWriter; once every rank is done (a
torch.distributed barrier is enough), one rank calls build_manifest; any
rank count later reloads with load_rank: the destination tensors are
allocated first (on the target device), then one C call
(tzr_shard_load_rank_into) pipelines every shard file's needed byte ranges
straight into their memory, with no Python per tensor and no copy."""
import ctypes
import json
import os
from ctypes import byref, c_uint64, c_void_p

import numpy as np

from . import _dtypes, _lib
from ._dtypes import torch
from ._lib import check, lib
from .serialization import _resolve_device, encode_name, index_sums

REPLICATED = -1


def _decode(raw):
    if raw[:1] == b"\x1e":
        return tuple(json.loads(raw[1:].decode()))
    return raw.decode("utf-8", "surrogateescape")


class ShardWriter:
    """Shard `rank` of `nranks` under `prefix` (files prefix-rank-0000r-of-0000n.tensors)."""

    def __init__(self, prefix, rank, nranks):
        self._h = None
        h = c_void_p()
        opt = _lib.ShardWriterOptions(struct_size=ctypes.sizeof(_lib.ShardWriterOptions))
        nranks = _lib.int_arg("nranks", nranks, 1, _lib.INT_MAX)
        rank = _lib.int_arg("rank", rank, 0, nranks - 1)
        check(lib.tzr_shard_writer_open(byref(h), _lib.path_arg(prefix), rank, nranks, byref(opt)))
        self._h = h

    def reserve(self, items):
        """Size the shard's index for the (name, tensor) pairs about to be
        added, before the first (tzr_shard_writer_reserve): without it a
        shard keeps tensorizer's 256 KiB, about 4,500 small tensors."""
        check(lib.tzr_shard_writer_reserve(self._h, *index_sums(items)))

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
            t = _dtypes.c_order(tensor)
            dts, ptr, local = _dtypes.from_numpy(t.dtype), t.ctypes.data, t.shape
        shape = tuple(global_shape) if global_shape is not None else local
        raw = encode_name(name)
        nb = ctypes.create_string_buffer(raw, len(raw))
        db = ctypes.create_string_buffer(dts, len(dts))
        dims = (c_uint64 * max(1, len(shape)))(*shape)
        d = _lib.ShardTensorDesc(name=ctypes.cast(nb, c_void_p), name_len=len(raw),
                                 dtype_str=ctypes.cast(db, c_void_p), dtype_len=len(dts), dtype=0,
                                 ndim=len(shape), shape=dims, dim=REPLICATED if dim is None else _lib.int_arg("dim", dim, 0, 63),
                                 offset=_lib.int_arg("offset", offset, 0, 2**64 - 1), length=int(local[dim]) if dim is not None else 0)
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
    check(lib.tzr_shard_manifest_build(_lib.path_arg(prefix), _lib.int_arg("nshards", nshards, 1, _lib.INT_MAX)))
    return os.fspath(prefix) + ".tzr-index.json"


def load_rank(manifest, rank, nranks, device="cpu", rules=None, verify=True, progress=None):
    """{name: tensor} of what rank `rank` of `nranks` holds (reshards from
    however many shards were written). Each value is the local slice; its
    placement is in `.tzr_slice` of the returned dict: {name: (dim, offset)}."""
    from ._core import progress_callback
    dev, cuda = _resolve_device(device)
    opt = _lib.ShardOpenOptions(struct_size=ctypes.sizeof(_lib.ShardOpenOptions), verify=1 if verify else 0)
    s = c_void_p()
    nranks = _lib.int_arg("nranks", nranks, 1, _lib.INT_MAX)
    rank = _lib.int_arg("rank", rank, 0, nranks - 1)
    check(lib.tzr_shard_open(byref(s), _lib.path_arg(manifest), byref(opt)))
    rules_b = rules.encode() if rules else None
    try:
        n = lib.tzr_shard_count(s)
        out = ShardState()
        ptrs = (c_void_p * max(1, n))()
        lens = (c_uint64 * max(1, n))()
        for i in range(n):
            g = lib.tzr_shard_tensor_at(s, i).contents
            dim, off, length = ctypes.c_int(), c_uint64(), c_uint64()
            check(lib.tzr_shard_target(s, i, int(rank), int(nranks), rules_b, byref(dim), byref(off), byref(length)))
            shape = [g.shape[k] for k in range(g.ndim)]
            if dim.value != REPLICATED:
                shape[dim.value] = length.value
            dts = ctypes.string_at(g.dtype_str, g.dtype_len)
            if torch is None:
                t = np.empty(tuple(shape), dtype=_dtypes.to_numpy(dts))
                ptr = t.ctypes.data
            else:
                t = torch.empty(tuple(shape), dtype=_dtypes.to_torch(dts), device=dev)
                ptr = t.data_ptr()
            name = _decode(ctypes.string_at(g.name, g.name_len))
            out[name] = t
            out.tzr_slice[name] = (None if dim.value == REPLICATED else dim.value, off.value)
            ptrs[i] = ptr or None
            lens[i] = int(g.itemsize) * int(np.prod(shape, dtype=np.uint64)) if shape else int(g.itemsize)
        sink = c_void_p()
        if cuda is None:
            check(lib.tzr_sink_host_table_new(byref(sink), ptrs, lens, n))
        else:
            check(lib.tzr_sink_cuda_table_new(byref(sink), _lib.int_arg("device", cuda, 0, _lib.INT_MAX), ptrs, lens, n))
        lo = _lib.load_options()
        cb = progress_callback(progress)
        if cb is not None:
            lo.progress = cb
        try:
            rc = lib.tzr_shard_load_rank_into(s, int(rank), int(nranks), rules_b, sink, byref(lo), None)
            err = _lib.error(rc) if rc else None
        finally:
            lib.tzr_sink_free(sink)
        if err is not None:
            raise err
    finally:
        lib.tzr_shard_close(s)
    return out


class ShardState(dict):
    def __init__(self):
        super().__init__()
        self.tzr_slice = {}
