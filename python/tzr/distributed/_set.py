"""One opened checkpoint of any kind tzr reads, for the distributed loads.

tzr_shard_open takes every source the library knows as one set of global
tensors: a .tensors or safetensors file, a shard manifest, a Hugging Face
directory or index, a vLLM rank pattern, local or a URL. Loads go through
tzr_shard_load_rank_into with a selection mask, so a rank can read any
subset (its partition, or one staging bucket's worth) straight into memory
it owns, with the library's pipeline and checks."""
import ctypes
import os
from ctypes import byref, c_uint64, c_void_p

from .. import _lib
from .._core import crypt_fill
from .._lib import check, lib
from ..shard import REPLICATED, _decode


class Meta:
    """What every rank needs to know about one global tensor (picklable)."""
    __slots__ = ("index", "name", "dtype", "shape", "itemsize", "nbytes")

    def __init__(self, index, name, dtype, shape, itemsize, nbytes):
        self.index, self.name, self.dtype, self.shape = index, name, dtype, shape
        self.itemsize, self.nbytes = itemsize, nbytes

    def __getstate__(self):
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, s):
        for k, v in zip(self.__slots__, s):
            setattr(self, k, v)


class Source:
    def __init__(self, path, encryption=None, verify=False, rank_rules=None):
        self.path = os.fspath(path)
        self._keep = []
        opt = _lib.ShardOpenOptions(struct_size=ctypes.sizeof(_lib.ShardOpenOptions), verify=1 if verify else 0)
        crypt_fill(opt.crypt, encryption, self._keep)
        if rank_rules:
            self._keep.append(rank_rules.encode())
            opt.rank_rules = self._keep[-1]
        h = c_void_p()
        check(lib.tzr_shard_open(byref(h), _lib.path_arg(self.path), byref(opt)))
        self._h = h
        self.tensors = []
        for i in range(lib.tzr_shard_count(h)):
            g = lib.tzr_shard_tensor_at(h, i).contents
            self.tensors.append(Meta(i, _decode(ctypes.string_at(g.name, g.name_len)),
                                     ctypes.string_at(g.dtype_str, g.dtype_len),
                                     tuple(g.shape[k] for k in range(g.ndim)), int(g.itemsize), int(g.nbytes)))

    def target(self, i, rank, nranks):
        """(dim or None, offset, local shape, local bytes) of tensor i on rank/nranks."""
        dim, off, length = ctypes.c_int(), c_uint64(), c_uint64()
        check(lib.tzr_shard_target(self._h, i, rank, nranks, None, byref(dim), byref(off), byref(length)))
        m = self.tensors[i]
        shape = list(m.shape)
        if dim.value == REPLICATED:
            return None, 0, tuple(shape), m.nbytes
        shape[dim.value] = length.value
        return dim.value, off.value, tuple(shape), _prod(shape) * m.itemsize

    def load(self, dests, device=None, rank=0, nranks=1):
        """Fill {index: (pointer, nbytes)} (host pointers, or CUDA ones on
        device number `device`) with rank/nranks' part of those tensors."""
        if not dests:
            return
        n = len(self.tensors)
        ptrs, lens, mask = (c_void_p * n)(), (c_uint64 * n)(), (ctypes.c_ubyte * n)()
        for i, (p, nb) in dests.items():
            ptrs[i], lens[i], mask[i] = p or None, nb, 1
        sink = c_void_p()
        if device is None:
            check(lib.tzr_sink_host_table_new(byref(sink), ptrs, lens, n))
        else:
            check(lib.tzr_sink_cuda_table_new(byref(sink), device, ptrs, lens, n))
        opt = _lib.load_options(filter=_lib.FILTER_MASK, filter_ctx=ctypes.cast(mask, c_void_p))
        try:
            rc = lib.tzr_shard_load_rank_into(self._h, rank, nranks, None, sink, byref(opt), None)
            err = _lib.error(rc) if rc else None
        finally:
            lib.tzr_sink_free(sink)
        if err is not None:
            raise err

    def close(self):
        if getattr(self, "_h", None) is not None:
            lib.tzr_shard_close(self._h)
            self._h = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n
