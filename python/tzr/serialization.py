"""TensorSerializer / TensorDeserializer with tensorizer's names and meanings,
over libtzr. See docs/python.md for what differs from tensorizer."""
import collections
import contextlib
import ctypes
import dataclasses
import enum
import functools
import gc
import json
from collections import abc
from typing import Callable, List, Optional, Tuple, Union
from ctypes import byref, c_uint64, c_void_p

import numpy as np

from . import _dtypes, _lib
from . import _io
from ._core import Reader, crypt_fill
from ._dtypes import torch
from ._lib import CryptographyError, HashMismatchError, check, lib  # noqa: F401 (tensorizer's names)
from .crypt import DecryptionParams, EncryptionParams  # noqa: F401 (re-exported)


__all__ = ["TensorSerializer", "TensorDeserializer", "TensorType", "CryptographyError", "EncryptionParams",
           "DecryptionParams", "FilterFuncType", "HashMismatchError", "HashType", "TensorHash", "TensorEntry"]

FilterFuncType = Callable[[Union[str, Tuple]], bool]


class TensorType(enum.IntEnum):
    PARAM = 0
    BUFFER = 1
    STATE_DICT = 2


# Data versions (the format's, formats/tensorizer.md): the lowest that holds
# what a file needs is written.
NON_OPAQUE_TENSORIZER_VERSION = 1
OPAQUE_TENSORIZER_VERSION = 2
ENCRYPTION_TENSORIZER_VERSION = 3
META_TENSOR_TENSORIZER_VERSION = 4
TENSORIZER_VERSION = 4
TENSORIZER_MAGIC = b"|TZR|"

_FileHeader = collections.namedtuple("_FileHeader", "version_number feature_flags tensor_size tensor_count")


class _FileFeatureFlags(enum.IntFlag):
    """The file header's feature flags (data version 4 on)."""
    encrypted = 1
    compressed = 2  # libtzr's zstd extension


def _resolve_cuda_device():
    """The current CUDA device, with its index (what device="cuda" means)."""
    return torch.device("cuda", torch.cuda.current_device())


class HashType(enum.IntEnum):
    CRC32 = 0
    SHA256 = 1


@dataclasses.dataclass(order=True)
class TensorHash:
    """A stored hash of one tensor (tensorizer's record of the same name)."""
    type: HashType
    hash: bytes


_OWN_TENSOR_HASH = TensorHash


def _stored_hashes(reader, index):
    """[(HashType, value)] from tensor index's header hash section
    (formats/tensorizer.md 4.1, 4.2); [] for files without headers."""
    h = reader.handle
    if reader.data_version == 0:  # safetensors: no tensor headers, no hashes
        return []
    info = lib.tzr_reader_tensor(h, index).contents
    srcp = lib.tzr_reader_source(h)
    src = ctypes.cast(srcp, ctypes.POINTER(_lib.Source)).contents
    buf = ctypes.create_string_buffer(8)
    reader._check(src.read_at(srcp, buf, 8, info.header_offset))
    size = int.from_bytes(buf.raw, "little")
    if not 8 < size <= 1 << 20:
        raise _lib.FormatError(_lib.TZR_EFORMAT, "tensor %r: header at byte %d claims %d bytes"
                               % (info.name, info.header_offset, size))
    buf = ctypes.create_string_buffer(size)
    reader._check(src.read_at(srcp, buf, size, info.header_offset))
    b = buf.raw
    try:
        at = 13 + int.from_bytes(b[11:13], "little")       # past module index, type, name
        at += 1 + b[at]                                    # dtype
        at += 1 + 4 * b[at]                                # dims
        end = at + 2 + int.from_bytes(b[at:at + 2], "little")
        count, at, out = b[at + 2], at + 3, []
        for _ in range(count):
            typ, n = b[at], b[at + 1]
            out.append((HashType(typ), b[at + 2:at + 2 + n]))
            at += 2 + n
        if at > end or end > size:
            raise IndexError
    except (IndexError, ValueError):
        raise _lib.FormatError(_lib.TZR_EFORMAT, "tensor %r: hash section of the header at byte %d is malformed"
                               % (info.name, info.header_offset)) from None
    return out


def _check_hash_records(reader, indices, verify):
    """tensorizer turns each stored hash into a serialization.TensorHash
    record and compares the record with the hash it computes; libtzr does
    both in C. Code that replaces TensorHash (a subclass, a wrapper, a mock)
    has its records honoured here, after a verified load: the library has
    just found the data's hash equal to the stored value, so a record that
    differs from that value is a mismatch. The original class costs nothing."""
    make = TensorHash  # this module's attribute now, patched or not
    if make is _OWN_TENSOR_HASH or not verify:
        return
    for i in indices:
        for typ, value in _stored_hashes(reader, i):
            if verify == "crc32" and typ != HashType.CRC32:
                continue  # not computed at this level
            record = make(type=typ, hash=value)
            if bytes(record.hash) != value:
                at = lib.tzr_reader_tensor(reader.handle, i).contents.header_offset
                raise HashMismatchError(_lib.TZR_EHASH, "tensor %r (header at byte %d): the data's %s is %s, the "
                                        "expected record (serialization.TensorHash) says %s" % (
                                            reader.entries.names[i], at, typ.name, value.hex(),
                                            bytes(record.hash).hex()))


@dataclasses.dataclass
class TensorEntry:
    """What the index says of one tensor (tensorizer's record of the same
    name; hashes come from its header, so they are None until it is read)."""
    name: Union[str, Tuple]
    type: TensorType
    dtype: str
    shape: Tuple[int, ...]
    offset: int
    data_offset: int
    data_length: int
    hashes: Optional[List[TensorHash]] = None
    header_hashes: Optional[dict] = None

    @property
    def deserialized_length(self):
        return self.data_length if self.data_length > 0 else int(np.prod(self.shape)) * _dtypes.to_numpy(self.dtype.encode()).itemsize


def _verify_arg(v):
    """verify_hash: True or "full" (CRC32 and SHA-256, tensorizer's
    meaning), "crc32" (CRC32 only), False/None (no check)."""
    if isinstance(v, str):
        if v not in ("full", "crc32"):
            raise ValueError('verify_hash: True, False, "full" or "crc32", not %r' % v)
        return True if v == "full" else v
    return bool(v)


# ------------------------------------------------------------------ names
def encode_name(path):
    """Stored name bytes: a lone string stays plain, any other path is
    0x1E + compact JSON (tensorizer's encoding, §4.1)."""
    if isinstance(path, str):
        return path.encode("utf-8")
    path = list(path)
    if len(path) == 1 and isinstance(path[0], str):
        return path[0].encode("utf-8")
    for c in path:
        if not isinstance(c, (str, int)) or isinstance(c, bool) or (isinstance(c, int) and c < 0):
            raise TypeError("a tensor path holds strings and non-negative integers, not %r" % (c,))
    return b"\x1e" + json.dumps(path, indent=None, ensure_ascii=True, separators=(",", ":")).encode()


def _flatten(obj, prefix=()):
    if isinstance(obj, abc.Mapping):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        yield prefix, obj
        return
    for k, v in items:
        yield from _flatten(v, prefix + (k,))


# ------------------------------------------------------------------ device
def _resolve_device(device):
    """(torch.device or "cpu", CUDA index or None)."""
    if torch is None:
        if device not in (None, "cpu"):
            raise ValueError("without torch only device='cpu' is possible")
        return "cpu", None
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(device, int):
        device = torch.device("cuda", device)
    device = torch.device(device)
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return torch.device("cuda", idx), idx
    # Any other device (xpu, mps, ...): loaded into host memory, then moved,
    # as tensorizer does.
    return device, None


def _empty(shape, dtype_bytes, device):
    shape = tuple(int(d) for d in shape)
    if torch is None:
        return np.empty(shape, dtype=_dtypes.to_numpy(dtype_bytes))
    return torch.empty(shape, dtype=_torch_dtype(dtype_bytes), device=device)


_TORCH_DTYPES = {}


def _torch_dtype(dtype_bytes):
    """to_torch, once per dtype string (a checkpoint repeats a few)."""
    dt = _TORCH_DTYPES.get(dtype_bytes)
    if dt is None:
        dt = _TORCH_DTYPES[dtype_bytes] = _dtypes.to_torch(dtype_bytes)
    return dt


# Dtypes whose parameters require grad (floating and complex), as
# t.is_floating_point() or t.is_complex() would say.
_GRAD_DTYPES = frozenset() if torch is None else frozenset(
    d for d in vars(torch).values() if isinstance(d, torch.dtype) and (d.is_floating_point or d.is_complex))


# nn.Parameter(t, g) for a plain tensor t is, in torch 1.13 and 2.x,
# Tensor._make_subclass(Parameter, t, g); calling it directly saves
# Parameter.__new__'s Python frame (about 0.4 us a tensor).
_MAKE_PARAM = None if torch is None else getattr(torch.Tensor, "_make_subclass", None)


def _class_swap_works():
    """Whether a new tensor made with requires_grad can become an
    nn.Parameter by assigning its class (Python allows it between
    torch.Tensor and Parameter: same instance layout). The result is what
    Parameter(t, requires_grad) gives: a leaf of its own storage, with no
    grad_fn, that trains, copies and pickles as a Parameter; torch's
    constructor makes a second tensor object over the same storage for
    it, which costs about 1 us a tensor (as much as torch.empty). Checked
    once per process; False falls back to that constructor."""
    if torch is None:
        return False
    try:
        t = torch.empty(2, requires_grad=True)
        t.__class__ = torch.nn.Parameter
        return (type(t) is torch.nn.Parameter and t.is_leaf and t.requires_grad and t.grad_fn is None
                and isinstance(t, torch.Tensor))
    except (TypeError, RuntimeError):
        return False


_SWAP = None  # _class_swap_works(), once

def index_sums(items):
    """What tzr_writer_reserve / tzr_shard_writer_reserve take for these
    (name, tensor) pairs: their count and the sums of their encoded name
    lengths, dtype-string lengths, dimension counts and data bytes (a meta
    tensor has none). Raises what an unsupported tensor raises."""
    names = dtypes = dims = nbytes = 0
    for name, t in items:
        if torch is not None and isinstance(t, torch.Tensor):
            dts, nd = _dtypes.from_torch(t.dtype), t.dim()
            nbytes += 0 if t.is_meta else t.numel() * t.element_size()
        else:
            a = np.asarray(t)
            dts, nd = _dtypes.from_numpy(a.dtype), a.ndim
            nbytes += a.nbytes
        names += len(encode_name(name))
        dtypes += len(dts)
        dims += nd
    return len(items), names, dtypes, dims, nbytes


_HUGE = 2 << 20
_MADV_HUGEPAGE = 14
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [c_void_p, ctypes.c_size_t, ctypes.c_int]


def _new_tensors(todo, cols, grad=False, device=None):
    """A tensor of its own for each index in todo (each its own storage, as
    tensorizer returns them: one tensor kept alive keeps only its bytes),
    on the host or on device (a CUDA torch.device), from the index
    columns; todo is a range (then it covers every tensor, in order) or a
    list. grad: floating and complex ones are made with requires_grad (they
    become Parameters). On the host, the whole 2 MiB pages inside large
    ones are advised MADV_HUGEPAGE first: the load then takes one page
    fault per 2 MiB, not per 4 KiB."""
    shapes, dts = cols.shapes, cols.dtype_bytes
    whole = isinstance(todo, range)
    if torch is None:
        return [_empty(shapes[i], dts[i], "cpu") for i in todo]
    empty = torch.empty
    if device is not None:
        empty = functools.partial(torch.empty, device=device)
    kinds = cols.dtype_set if whole else {dts[i] for i in todo}
    sh = shapes if whole else [shapes[i] for i in todo]
    if len(kinds) == 1:  # one dtype (the usual checkpoint): no lookup per tensor
        dt = _torch_dtype(next(iter(kinds)))
        if grad and dt in _GRAD_DTYPES:
            out = [empty(s, dtype=dt, requires_grad=True) for s in sh]
        else:
            out = [empty(s, dtype=dt) for s in sh]
    else:
        spec = {k: (_torch_dtype(k), grad and _torch_dtype(k) in _GRAD_DTYPES) for k in kinds}
        out = [empty(s, dtype=spec[d][0], requires_grad=spec[d][1])
               for s, d in zip(sh, dts if whole else [dts[i] for i in todo])]
    if device is not None:
        return out
    nb = cols.array("nbytes")
    big = np.flatnonzero(nb >= 2 * _HUGE) if whole else [k for k, i in enumerate(todo) if nb[i] >= 2 * _HUGE]
    for k in big:
        t = out[int(k)]
        p, n = _ptr(t), int(nb[todo[int(k)]])
        lo = (p + _HUGE - 1) // _HUGE * _HUGE
        _libc.madvise(c_void_p(lo), (p + n - lo) // _HUGE * _HUGE, _MADV_HUGEPAGE)
    return out


def _ptr(t):
    if torch is not None and isinstance(t, torch.Tensor):
        return t.data_ptr()
    return t.ctypes.data


# ------------------------------------------------------------------ reading
@contextlib.contextmanager
def _collector_paused():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Node(abc.Mapping):
    """A read-only view of one level of structured names."""

    def __init__(self, owner, children):
        self._owner = owner
        self._children = children

    def __getitem__(self, key):
        v = self._children[key]
        return self._owner._get(v) if isinstance(v, int) else _Node(self._owner, v)

    def __iter__(self):
        return iter(self._children)

    def __len__(self):
        return len(self._children)

    def tree(self):
        return self._owner._tree(self._children)


class TensorDeserializer(abc.Mapping):
    """Read a `.tensors` (or safetensors) checkpoint into torch tensors
    (numpy arrays without torch), from a path, an http(s):// or s3:// URI,
    a descriptor number or any binary file object (see tzr._io for the road
    each takes). Like tensorizer, each tensor comes back as an
    nn.Parameter with its own storage (requires_grad for floating and
    complex dtypes), and the file object is closed once the deserializer is
    done with it (after an eager load, at load_into_module or close()).

    Without lazy_load every selected tensor is allocated first, then one
    library load fills them all (GIL released, no Python per tensor)."""

    def __init__(self, file_obj, device=None, filter_func=None, dtype=None, *, lazy_load=False,
                 plaid_mode=None, plaid_mode_buffers=None, num_readers=None, verify_hash=False,
                 encryption=None, progress=None):
        # Python's cyclic collector runs every few hundred new objects and
        # walks all older ones now and then: making 100k entries, tensors and
        # Parameters with it on took up to twice the time (none of them form
        # cycles). Back on when done; it then collects as usual.
        with _collector_paused():
            self._init(file_obj, device, filter_func, dtype, lazy_load, verify_hash, encryption, progress,
                       num_readers)

    def _init(self, file_obj, device, filter_func, dtype, lazy_load, verify_hash, encryption, progress,
              num_readers):
        if encryption is not None and not isinstance(encryption, DecryptionParams):
            raise TypeError("encryption parameter: expected DecryptionParams instance or None, %s found"
                            % type(encryption).__name__)
        if num_readers is not None:
            if not isinstance(num_readers, int) or isinstance(num_readers, bool):
                raise TypeError("num_readers: expected int or None, got %s" % type(num_readers).__name__)
            if num_readers < 1:
                raise ValueError("num_readers must be positive")
        self._device, self._cuda = _resolve_device(device)
        self._dtype = dtype
        self._verify = _verify_arg(verify_hash)
        self._progress = progress
        self._file = None if _io.is_path(file_obj) or isinstance(file_obj, int) else file_obj
        try:
            self._reader = Reader(file_obj, encryption, verify_hash)
        except BaseException:
            self._close_file()
            raise
        # The tables below come from the index columns (cols), one step
        # each: no Entry object per tensor (see _core.Entries).
        cols = self._cols = self._reader.entries
        names = cols.names
        if not names:
            self._reader.close()
            self._close_file()
            raise ValueError("Tensor index in the file is empty")
        # The selected tensors' indices, in file order.
        self._sel = (range(len(names)) if filter_func is None else
                     [i for i, nm in enumerate(names) if filter_func(nm)])
        self._ents = None
        sel_names = names if filter_func is None else [names[i] for i in self._sel]
        self._by_name = dict(zip(sel_names, self._sel))  # name -> index
        self._loaded = [None] * len(names)  # index -> its tensor, once loaded
        self._nloaded = 0
        st = cols.array("structured")
        if not (st.any() if filter_func is None else any(st[i] for i in self._sel)):
            self._root = self._by_name  # plain names: one level, no conflicts
        else:
            self._root = {}
            for name, i in self._by_name.items():
                path = name if isinstance(name, tuple) else (name,)
                node = self._root
                for c in path[:-1]:
                    node = node.setdefault(c, {})
                    if not isinstance(node, dict):
                        raise _lib.FormatError(_lib.TZR_EFORMAT, "tensor path %r conflicts with another" % (path,))
                node[path[-1]] = i
        nb = cols.array("nbytes")
        self.total_file_bytes = int(nb.sum())
        self.total_tensor_bytes = (self.total_file_bytes if filter_func is None else
                                   int(nb[np.asarray(self._sel, dtype=np.int64)].sum()))
        if not lazy_load:
            # The reader stays open (a descriptor and the index) until
            # close(): read_tensors() may still need module indices from
            # headers. The caller's file object is done with, as in tensorizer.
            try:
                self._load_missing(self._sel)
            except BaseException:
                self._reader.close()
                self._close_file()
                raise
            self._close_file()
            # As tensorizer counts it after an eager load: bytes stored in
            # the file (a meta tensor has none).
            meta = cols.array("meta")
            if meta.any():
                self.total_tensor_bytes -= int(sum(nb[i] for i in self._sel if meta[i]))

    @property
    def _entries(self):
        """The selected tensors' Entry objects, made on first use (the
        methods that walk them are not a load's hot path)."""
        if self._ents is None:
            cols = self._cols
            self._ents = [cols[i] for i in self._sel]
        return self._ents

    def _close_file(self):
        f, self._file = getattr(self, "_file", None), None
        if f is not None:
            f.close()

    @property
    def _file_header(self):
        """The prologue as tensorizer's records it (tensor_size: the file's size)."""
        h = self._reader.handle
        size = ctypes.cast(lib.tzr_reader_source(h), ctypes.POINTER(_lib.Source)).contents.size
        return _FileHeader(self._reader.data_version, self._file_flags, size, len(self._reader.entries))

    @property
    def _file_flags(self):
        h = self._reader.handle
        return _FileFeatureFlags((_FileFeatureFlags.encrypted if lib.tzr_reader_encrypted(h) else 0) |
                                 (_FileFeatureFlags.compressed if lib.tzr_reader_compressed(h) else 0))

    # -- loading
    def _load_missing(self, indices):
        """Load the tensors of these indices that are not loaded yet, in
        one library load."""
        loaded = self._loaded
        todo = [i for i in indices if loaded[i] is None] if self._nloaded else indices
        if not len(todo):
            return
        cols = self._cols
        count = len(cols)
        if not isinstance(todo, range) and len(todo) == count and todo == list(range(count)):
            todo = range(count)
        whole = isinstance(todo, range) and todo == range(count)
        if not whole and isinstance(todo, range):
            todo = list(todo)
        # No cast and no move: the tensors, made where they belong, become
        # nn.Parameters as they are (what _cast does then, without its
        # per-tensor checks).
        direct = torch is not None and self._dtype is None and (self._device.type == "cpu" or self._cuda is not None)
        global _SWAP
        if direct and _SWAP is None:
            _SWAP = _class_swap_works()
        tensors = _new_tensors(todo, cols, direct and _SWAP, None if self._cuda is None else self._device)
        ptr = _ptr if torch is None else torch.Tensor.data_ptr
        nb = cols.array("nbytes")
        self._reader.load_lists(todo, np.fromiter(map(ptr, tensors), dtype=np.uint64, count=len(tensors)),
                                nb if whole else nb[np.asarray(todo, dtype=np.int64)], self._cuda, self._verify,
                                self._progress)
        _check_hash_records(self._reader, todo, self._verify)
        if direct:
            if _SWAP:
                # Made with requires_grad where their dtype trains (see
                # _class_swap_works).
                P = torch.nn.Parameter
                for t in tensors:
                    t.__class__ = P
                out = tensors
            else:
                grad, P = _GRAD_DTYPES, torch.nn.Parameter
                mk = _MAKE_PARAM or (lambda cls, t, g: P(t, requires_grad=g))
                out = [mk(P, t, t.dtype in grad) for t in tensors]
        else:
            out = [self._cast(t) for t in tensors]
        if whole:
            self._loaded = out  # nothing was loaded before: whole starts from an empty table
        else:
            for i, t in zip(todo, out):
                loaded[i] = t
        self._nloaded += len(todo)

    def _cast(self, t):
        """The dtype cast asked for, then tensorizer's nn.Parameter."""
        if torch is None:
            return t
        if self._dtype is not None and t.dtype != torch.bool and t.dtype != self._dtype:
            t = t.to(self._device, self._dtype)
        elif t.device != self._device:
            t = t.to(self._device)
        return torch.nn.Parameter(t, requires_grad=t.is_floating_point() or t.is_complex())

    def _get(self, index):
        t = self._loaded[index]
        if t is None:
            self._load_missing([index])
            t = self._loaded[index]
        return t

    def _tree(self, children):
        out = {k: (self._get(v) if isinstance(v, int) else self._tree(v)) for k, v in children.items()}
        if out and all(isinstance(k, int) for k in out):
            return [out[k] for k in sorted(out)]
        return out

    # -- Mapping
    def __getitem__(self, key):
        if key in self._root:
            v = self._root[key]
            return self._get(v) if isinstance(v, int) else _Node(self, v)
        if isinstance(key, tuple) and key in self._by_name:
            return self._get(self._by_name[key])
        raise KeyError(key)

    def __contains__(self, key):
        """Without loading anything (vLLM asks this of lazy deserializers)."""
        return key in self._root or (isinstance(key, tuple) and key in self._by_name)

    def __iter__(self):
        return iter(self._root)

    def __len__(self):
        return len(self._root)

    def items(self):
        self._load_missing(self._sel)  # one load for what is left
        return super().items()

    def values(self):
        self._load_missing(self._sel)
        return super().values()

    def tree(self, prefix=None, *, default=None, filter_func=None):
        """Nested dicts and lists rebuilt from structured names."""
        ents = [e for e in self._entries if filter_func is None or filter_func(e.name)]
        self._load_missing([e.index for e in ents])
        node = self._root
        for c in (prefix or ()):
            if not isinstance(node, dict) or c not in node:
                if default is not None:
                    return default
                raise KeyError(prefix)
            node = node[c]
        if isinstance(node, int):
            return self._get(node)
        wanted = {e.index for e in ents}

        def prune(n):
            r = {}
            for k, v in n.items():
                if isinstance(v, int):
                    if v in wanted:
                        r[k] = v
                else:
                    sub = prune(v)
                    if sub:
                        r[k] = sub
            return r
        return self._tree(prune(node))

    def read_tensors(self, filter_func=None, num_tensors=-1, verify_hash=None):
        """Yield (module_idx, tensor_type, name, tensor) in file order."""
        ents = [e for e in self._entries if filter_func is None or filter_func(e.name)]
        if num_tensors >= 0:
            ents = ents[:num_tensors]
        self._load_missing([e.index for e in ents])
        for e in ents:
            yield self._module_idx(e), e.type, e.name, self._loaded[e.index]

    def _module_idx(self, e):
        if e.module_idx < 0:
            e.module_idx = self._reader.module_idx(e.index)  # kept: _entries are made once
        return e.module_idx

    def load_into_module(self, m, filter_func=None, verify_hash=None):
        """Fill m's parameters and buffers named in the file, in place where
        they are contiguous with the file's dtype and shape; tensors not yet
        loaded land straight in the module's memory (one library load).
        Returns the number of tensors placed."""
        if torch is None:
            raise RuntimeError("load_into_module needs torch")
        modules = dict(m.named_modules())
        plan = []  # (entry, submodule, attr, existing tensor or None)
        for e in self._entries:
            if filter_func is not None and not filter_func(e.name):
                continue
            if e.type == TensorType.STATE_DICT or e.structured:
                raise NotImplementedError("load_into_module: %r is not a parameter or buffer" % (e.name,))
            prefix, _, attr = e.name.rpartition(".")
            sub = modules.get(prefix)
            if sub is None:
                raise KeyError("load_into_module: the module has no submodule %r (for %r)" % (prefix, e.name))
            plan.append((e, sub, attr, getattr(sub, attr, None)))
        direct = {}  # index -> (ptr, nbytes, cuda index)
        seen = {}
        superseded = set()
        for e, sub, attr, cur in plan:
            if (self._loaded[e.index] is not None or cur is None or not isinstance(cur, torch.Tensor)
                    or cur.is_meta or not cur.is_contiguous() or cur.dtype != _dtypes.to_torch(e.dtype_bytes)
                    or tuple(cur.shape) != e.shape or cur.device.type not in ("cpu", "cuda")):
                continue
            p = cur.data_ptr()
            if p in seen:  # tied: the last one in the file wins, as sequential copies would
                del direct[seen[p]]
                superseded.add(seen[p])
            seen[p] = e.index
            direct[e.index] = (p, e.nbytes, cur.device.index if cur.device.type == "cuda" else None)
        groups = {}
        for i, (p, n, dev) in direct.items():
            groups.setdefault(dev, {})[i] = (p, n)
        verify = self._verify if verify_hash is None else _verify_arg(verify_hash)
        for dev, dests in groups.items():
            self._reader.load(dests, dev, verify, self._progress)
            _check_hash_records(self._reader, list(dests), verify)
        rest = [e.index for e, _, _, _ in plan if e.index not in direct and e.index not in superseded]
        self._load_missing(rest)
        count = 0
        for e, sub, attr, cur in plan:
            count += 1
            if e.index in direct or e.index in superseded:
                continue
            new = self._loaded[e.index]  # meta tensors of the file come back zero-filled, as in tensorizer
            if (isinstance(cur, torch.Tensor) and not cur.is_meta and tuple(cur.shape) == e.shape
                    and cur.dtype == new.dtype and cur.device == new.device):
                with torch.no_grad():
                    cur.copy_(new)
            elif e.type == TensorType.PARAM:
                sub.register_parameter(attr, new)
            else:
                sub.register_buffer(attr, new, persistent=attr not in getattr(sub, "_non_persistent_buffers_set", ()))
        self._close_file()
        return count

    def verify_module(self, m):
        """Compare m's parameters and buffers with the file's stored hashes
        (tensorizer's verify_module): (all passed, [(name, passed), ...]).
        Names in the file that m lacks, and the other way round for
        m's state_dict, fail."""
        if torch is None:
            raise RuntimeError("verify_module needs torch")
        mine = dict(m.state_dict())
        mine.update(m.named_buffers())
        results = []
        for e in self._entries:
            name = ".".join(str(c) for c in e.name) if isinstance(e.name, tuple) else e.name
            t = mine.get(name)
            if t is None or tuple(t.shape) != e.shape or _dtypes.from_torch(t.dtype) != e.dtype_bytes:
                results.append((name, False))
                continue
            results.append((name, self._reader.matches(e.index, t.detach().cpu().contiguous())))
        absent = set(mine) - {n for n, _ in results}
        results.extend((n, False) for n in sorted(absent) if n not in self._by_name)
        return all(ok for _, ok in results), results

    def close(self):
        if getattr(self, "_reader", None) is not None:
            self._reader.close()
        self._close_file()

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------ writing
def _remove_temporaries_on_termination():
    """SIGTERM and SIGHUP, where nobody else handles them, first remove the
    temporary files of the writers still open (their targets stay as they
    were), then end the process as they would have. Python runs the handler
    in the main thread between bytecodes (a close in progress finishes
    first). Other handlers are left alone; SIGINT is KeyboardInterrupt,
    which a `with` block's abort already cleans up."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _terminated)


def _terminated(sig, frame):
    import os
    import signal
    lib.tzr_output_remove_temporaries()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


class TensorSerializer:
    """Write a `.tensors` file byte for byte as tensorizer 2.11 does (local
    path or s3://; atomic: nothing appears at the target before close()).

    Tensors already contiguous in host memory are hashed and written by the
    library's worker threads straight from their memory, several at once,
    while Python goes on to the next: like tensorizer's own writer, they
    must not change until close(). Others (on a GPU, non-contiguous) are
    copied once and written before write_tensor returns."""

    def __init__(self, file_obj, compress_tensors=False, *, encryption=None, limit_cpu_concurrency=None):
        if compress_tensors:
            raise NotImplementedError("compress_tensors: tensorizer writes no compression either")
        if encryption is not None and not isinstance(encryption, EncryptionParams):
            raise TypeError("encryption parameter: expected EncryptionParams instance or None, %s found"
                            % type(encryption).__name__)
        if limit_cpu_concurrency is not None:
            if not isinstance(limit_cpu_concurrency, int) or isinstance(limit_cpu_concurrency, bool):
                raise TypeError("limit_cpu_concurrency parameter: expected int or None, %s found"
                                % type(limit_cpu_concurrency).__name__)
            if limit_cpu_concurrency < 1:
                raise ValueError("limit_cpu_concurrency parameter: must be positive (or None for unbound), "
                                 "got %d" % limit_cpu_concurrency)
        self._h = None
        self._keep = []
        self._borrowed = []  # tensors the writer's threads read until close()
        self._file = None    # a caller's file object, closed at close() as tensorizer does
        self._opened = None
        opt = _lib.writer_options(threads=limit_cpu_concurrency or 0)
        crypt_fill(opt.crypt, encryption, self._keep)
        h = c_void_p()
        if _io.is_path(file_obj):
            _remove_temporaries_on_termination()
            check(lib.tzr_writer_open(byref(h), _lib.path_arg(file_obj), byref(opt)))
        else:
            if isinstance(file_obj, int) and not isinstance(file_obj, bool):
                self._opened = _io._fd_output(file_obj, "descriptor %d" % file_obj)
            else:
                self._opened = _io.open_output(file_obj)
                self._file = file_obj
            rc = lib.tzr_writer_open_output(byref(h), self._opened.handle, byref(opt))  # owns it now
            if rc:
                self._opened.done()
                _io.check_caught(self._opened, rc)
        self._h = h
        self._written = 0  # tensors written: the index is sized before the first
        self.total_tensor_bytes = 0

    def _handle(self):
        if self._h is None:
            raise ValueError("the serializer is closed")
        return self._h

    def _check(self, rc):
        _io.check_caught(self._opened, rc)

    def write_tensor(self, idx, name, tensor_type, tensor):
        h = self._handle()
        raw = encode_name(name)
        meta = False
        if torch is not None and isinstance(tensor, torch.Tensor):
            t = tensor.detach()
            meta = t.is_meta
            dts = _dtypes.from_torch(t.dtype)
            borrow = not meta and t.device.type == "cpu" and t.is_contiguous() and not t.is_conj() and not t.is_neg()
            if not meta:
                if t.device.type != "cpu":
                    t = t.cpu()
                t = t.resolve_conj().resolve_neg().contiguous()
                ptr, nbytes = t.data_ptr(), t.numel() * t.element_size()
            shape = tuple(t.shape)
        else:
            borrow = isinstance(tensor, np.ndarray) and tensor.flags.c_contiguous
            t = _dtypes.c_order(tensor)
            dts = _dtypes.from_numpy(t.dtype)
            ptr, nbytes, shape = t.ctypes.data, t.nbytes, t.shape
        dims = (c_uint64 * max(1, len(shape)))(*shape)
        nb = ctypes.create_string_buffer(raw, len(raw))
        db = ctypes.create_string_buffer(dts, len(dts))
        d = _lib.TensorDesc(name=ctypes.cast(nb, c_void_p), name_len=len(raw),
                            type=_lib.int_arg("tensor_type", tensor_type, 0, 2),
                            module_idx=_lib.int_arg("module_idx", idx, 0, 65535), dtype_str=ctypes.cast(db, c_void_p), dtype_len=len(dts),
                            dtype=0, ndim=len(shape), shape=dims, meta=1 if meta else 0)
        try:
            if borrow and nbytes:
                self._check(lib.tzr_writer_add_borrowed(h, byref(d), ptr))
                self._borrowed.append(t)
            else:
                self._check(lib.tzr_writer_add(h, byref(d), None if meta or nbytes == 0 else ptr))
        except _lib.TzrError as e:
            if "index full" in e.message:  # one at a time, the writer cannot know what comes
                e.message += "; write_state_dict and write_module size the index for all their tensors"
                e.args = (e.message,)
            raise
        self._written += 1
        if not meta:
            self.total_tensor_bytes += nbytes

    def _reserve(self, items):
        """Size the index for these (name, tensor) pairs before the first
        write (tzr_writer_reserve): tensorizer's 256 KiB when it suffices,
        else exactly their entries. Later writes keep the reservation."""
        if self._written or not items:
            return
        try:
            sums = index_sums(items)
        except (TypeError, ValueError, NotImplementedError):
            return  # write_tensor raises it for the tensor at fault
        self._check(lib.tzr_writer_reserve(self._handle(), *sums))

    def write_module(self, m, remove_tensors=False, *, include_non_persistent_buffers=True):
        items = []
        for idx, (mname, sub) in enumerate(m.named_modules()):
            for pname, p in sub.named_parameters(recurse=False):
                items.append((idx, "%s.%s" % (mname, pname), TensorType.PARAM, p))
            skip = () if include_non_persistent_buffers else getattr(sub, "_non_persistent_buffers_set", ())
            for bname, b in sub.named_buffers(recurse=False):
                if bname not in skip:
                    items.append((idx, "%s.%s" % (mname, bname), TensorType.BUFFER, b))
        self._reserve([(name, t) for _, name, _, t in items])
        for idx, name, kind, t in items:
            self.write_tensor(idx, name, kind, t)

    def write_state_dict(self, state_dict):
        items = list(_flatten(state_dict))
        self._reserve(items)
        for path, t in items:
            self.write_tensor(0, path, TensorType.STATE_DICT, t)

    def close(self):
        """Finish the checkpoint (it appears atomically at a path or URI;
        a file object is written in place) and close the file object."""
        if getattr(self, "_h", None) is None:
            return
        h, self._h = self._h, None
        rc = lib.tzr_writer_close(h)  # the workers are done with every borrowed tensor
        self._borrowed = []
        op, self._opened = self._opened, None
        try:
            _io.check_caught(op, rc)
            if op is not None and op.after is not None:
                op.after()
        finally:
            if op is not None:
                op.done()
            self._close_file()

    def abort(self):
        """Discard what was written (nothing appears at a path or URI; a file
        object is cut back to its length before) and close the file object."""
        if getattr(self, "_h", None) is not None:
            h, self._h = self._h, None
            lib.tzr_writer_abort(h)
            self._borrowed = []
            if self._opened is not None:
                self._opened.done()
                self._opened = None
            self._close_file()

    def _close_file(self):
        f, self._file = getattr(self, "_file", None), None
        if f is not None:
            try:
                f.close()
            except Exception:  # noqa: BLE001 (a closed or broken object: the outcome is already known)
                pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self):
        self.abort()
