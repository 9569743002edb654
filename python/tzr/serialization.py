"""TensorSerializer / TensorDeserializer with tensorizer's names and meanings,
over libtzr. See README ("Python") for what differs from tensorizer."""
import ctypes
import enum
import json
from collections import abc
from ctypes import byref, c_uint64, c_void_p

import numpy as np

from . import _dtypes, _lib
from ._core import Reader, crypt_fill
from ._dtypes import torch
from ._lib import check, lib
from .crypt import DecryptionParams, EncryptionParams  # noqa: F401 (re-exported)


class TensorType(enum.IntEnum):
    PARAM = 0
    BUFFER = 1
    STATE_DICT = 2


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
    if device.type != "cpu":
        raise ValueError("device %s: only cpu and cuda are supported" % device)
    return device, None


def _empty(entry, device):
    shape = tuple(int(d) for d in entry.shape)
    if torch is None:
        return np.empty(shape, dtype=_dtypes.to_numpy(entry.dtype_bytes))
    return torch.empty(shape, dtype=_dtypes.to_torch(entry.dtype_bytes), device=device)


_HUGE = 2 << 20
_MADV_HUGEPAGE = 14
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [c_void_p, ctypes.c_size_t, ctypes.c_int]


def _carve(entries):
    """Host tensors for entries, carved from one allocation whose huge-page
    aligned middle is advised MADV_HUGEPAGE: fresh 4 KiB pages cost a fault
    each, the C library's own arena does the same. The tensors share that
    storage (freed once all of them are)."""
    offs, total = [], 0
    for e in entries:
        offs.append(total)
        total += (int(e.nbytes) + 63) // 64 * 64
    pad = _HUGE if total >= _HUGE else 64
    if torch is None:
        big = np.empty(total + pad, dtype=np.uint8)
        base = big.ctypes.data
    else:
        big = torch.empty(total + pad, dtype=torch.uint8)
        base = big.data_ptr()
    start = (-base) % pad
    if pad == _HUGE:
        lo = base + start
        _libc.madvise(c_void_p(lo), (total // _HUGE) * _HUGE or _HUGE, _MADV_HUGEPAGE)
    out = {}
    for e, off in zip(entries, offs):
        shape = tuple(int(d) for d in e.shape)
        piece = big[start + off:start + off + int(e.nbytes)]
        if torch is None:
            out[e.index] = piece.view(_dtypes.to_numpy(e.dtype_bytes)).reshape(shape)
        else:
            out[e.index] = piece.view(_dtypes.to_torch(e.dtype_bytes)).reshape(shape)
    return out


def _ptr(t):
    if torch is not None and isinstance(t, torch.Tensor):
        return t.data_ptr()
    return t.ctypes.data


# ------------------------------------------------------------------ reading
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
    """Read a `.tensors` file (path, http(s):// or s3:// as libtzr opens them)
    into torch tensors (numpy arrays without torch).

    Without lazy_load every selected tensor is allocated first, then one
    library load fills them all (GIL released, no Python per tensor)."""

    def __init__(self, file_obj, device=None, filter_func=None, dtype=None, *, lazy_load=False,
                 plaid_mode=None, plaid_mode_buffers=None, num_readers=None, verify_hash=False,
                 encryption=None, progress=None):
        if not isinstance(file_obj, (str, bytes)) and not hasattr(file_obj, "__fspath__"):
            raise TypeError("tzr.TensorDeserializer takes a path or URI, not %s" % type(file_obj).__name__)
        self._device, self._cuda = _resolve_device(device)
        self._dtype = dtype
        self._verify = bool(verify_hash)
        self._progress = progress
        self._reader = Reader(file_obj, encryption, verify_hash)
        self._entries = [e for e in self._reader.entries
                         if filter_func is None or filter_func(e.name)]
        self._by_name = {e.name: e for e in self._entries}
        self._loaded = {}
        self._root = {}
        for e in self._entries:
            path = e.name if isinstance(e.name, tuple) else (e.name,)
            node = self._root
            for c in path[:-1]:
                node = node.setdefault(c, {})
                if not isinstance(node, dict):
                    raise _lib.FormatError(_lib.TZR_EFORMAT, "tensor path %r conflicts with another" % (path,))
            node[path[-1]] = e.index
        self.total_tensor_bytes = sum(e.nbytes for e in self._entries)
        self._index = {e.index: e for e in self._entries}
        if not lazy_load:
            # The reader stays open (an fd and the index) until close():
            # read_tensors() may still need module indices from headers.
            try:
                self._load_missing(self._entries)
            except BaseException:
                self._reader.close()
                raise

    # -- loading
    def _load_missing(self, entries):
        todo = [e for e in entries if e.index not in self._loaded]
        if not todo:
            return
        if self._cuda is None:
            fresh = _carve(todo)
        else:
            fresh = {e.index: _empty(e, self._device) for e in todo}
        dests = {i: (_ptr(t), self._index[i].nbytes) for i, t in fresh.items()}
        self._reader.load(dests, self._cuda, self._verify, self._progress)
        for i, t in fresh.items():
            self._loaded[i] = self._cast(t)

    def _cast(self, t):
        if self._dtype is not None and torch is not None and t.dtype != torch.bool and t.dtype != self._dtype:
            return t.to(self._device, self._dtype)
        return t

    def _get(self, index):
        if index not in self._loaded:
            self._load_missing([self._index[index]])
        return self._loaded[index]

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
            return self._get(self._by_name[key].index)
        raise KeyError(key)

    def __iter__(self):
        return iter(self._root)

    def __len__(self):
        return len(self._root)

    def items(self):
        self._load_missing(self._entries)  # one load for what is left
        return super().items()

    def values(self):
        self._load_missing(self._entries)
        return super().values()

    def tree(self, prefix=None, *, default=None, filter_func=None):
        """Nested dicts and lists rebuilt from structured names."""
        ents = [e for e in self._entries if filter_func is None or filter_func(e.name)]
        self._load_missing(ents)
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
        self._load_missing(ents)
        for e in ents:
            yield self._module_idx(e), e.type, e.name, self._loaded[e.index]

    def _module_idx(self, e):
        if e.module_idx < 0:
            e.module_idx = self._reader.module_idx(e.index)
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
            if (e.index in self._loaded or cur is None or not isinstance(cur, torch.Tensor) or cur.is_meta
                    or not cur.is_contiguous() or cur.dtype != _dtypes.to_torch(e.dtype_bytes)
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
        verify = self._verify if verify_hash is None else verify_hash
        for dev, dests in groups.items():
            self._reader.load(dests, dev, verify, self._progress)
        rest = [e for e, _, _, _ in plan if e.index not in direct and e.index not in superseded]
        self._load_missing(rest)
        count = 0
        for e, sub, attr, cur in plan:
            count += 1
            if e.index in direct or e.index in superseded:
                continue
            if isinstance(cur, torch.Tensor) and cur.is_meta and e.meta:
                continue  # stays meta, as written
            new = self._loaded[e.index]
            if (isinstance(cur, torch.Tensor) and not cur.is_meta and tuple(cur.shape) == e.shape
                    and cur.dtype == new.dtype):
                with torch.no_grad():
                    cur.copy_(new)
            elif e.type == TensorType.PARAM:
                sub.register_parameter(attr, torch.nn.Parameter(new, requires_grad=new.is_floating_point()
                                                                or new.is_complex()))
            else:
                sub.register_buffer(attr, new, persistent=attr not in getattr(sub, "_non_persistent_buffers_set", ()))
        self.close()
        return count

    def close(self):
        self._reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------ writing
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
        if not isinstance(file_obj, (str, bytes)) and not hasattr(file_obj, "__fspath__"):
            raise TypeError("tzr.TensorSerializer takes a path or URI, not %s" % type(file_obj).__name__)
        self._keep = []
        self._borrowed = []  # tensors the writer's threads read until close()
        opt = _lib.writer_options()
        crypt_fill(opt.crypt, encryption, self._keep)
        h = c_void_p()
        import os
        check(lib.tzr_writer_open(byref(h), os.fsencode(file_obj), byref(opt)))
        self._h = h
        self.total_tensor_bytes = 0

    def _handle(self):
        if self._h is None:
            raise ValueError("the serializer is closed")
        return self._h

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
            t = np.ascontiguousarray(tensor)
            dts = _dtypes.from_numpy(t.dtype)
            ptr, nbytes, shape = t.ctypes.data, t.nbytes, t.shape
        dims = (c_uint64 * max(1, len(shape)))(*shape)
        nb = ctypes.create_string_buffer(raw, len(raw))
        db = ctypes.create_string_buffer(dts, len(dts))
        d = _lib.TensorDesc(name=ctypes.cast(nb, c_void_p), name_len=len(raw), type=int(tensor_type),
                            module_idx=int(idx), dtype_str=ctypes.cast(db, c_void_p), dtype_len=len(dts),
                            dtype=0, ndim=len(shape), shape=dims, meta=1 if meta else 0)
        if borrow and nbytes:
            check(lib.tzr_writer_add_borrowed(h, byref(d), ptr))
            self._borrowed.append(t)
        else:
            check(lib.tzr_writer_add(h, byref(d), None if meta or nbytes == 0 else ptr))
        if not meta:
            self.total_tensor_bytes += nbytes

    def write_module(self, m, remove_tensors=False, *, include_non_persistent_buffers=True):
        for idx, (mname, sub) in enumerate(m.named_modules()):
            for pname, p in sub.named_parameters(recurse=False):
                self.write_tensor(idx, "%s.%s" % (mname, pname), TensorType.PARAM, p)
            skip = () if include_non_persistent_buffers else getattr(sub, "_non_persistent_buffers_set", ())
            for bname, b in sub.named_buffers(recurse=False):
                if bname not in skip:
                    self.write_tensor(idx, "%s.%s" % (mname, bname), TensorType.BUFFER, b)

    def write_state_dict(self, state_dict):
        for path, t in _flatten(state_dict):
            self.write_tensor(0, path, TensorType.STATE_DICT, t)

    def close(self):
        if getattr(self, "_h", None) is not None:
            h, self._h = self._h, None
            rc = lib.tzr_writer_close(h)  # the workers are done with every borrowed tensor
            self._borrowed = []
            check(rc)

    def abort(self):
        if getattr(self, "_h", None) is not None:
            h, self._h = self._h, None
            lib.tzr_writer_abort(h)
            self._borrowed = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self):
        self.abort()
