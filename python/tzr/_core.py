"""The reader handle and the one-call loads over a destination table.

A load allocates nothing per tensor in C and runs no Python per tensor: the
caller hands a table of destination pointers (host or CUDA) and a selection
mask, and tzr_load runs once; ctypes releases the GIL for the call.
"""
import ctypes
import json
from collections import abc
import threading
from ctypes import byref, c_uint64, c_void_p

from . import _io, _lib
from ._lib import check, lib


class Entry:
    """What the index says about one tensor."""
    __slots__ = ("index", "raw_name", "name", "structured", "type", "dtype_bytes", "shape", "nbytes",
                 "meta", "module_idx")

    def __init__(self, index, info):
        self.index = index
        self.raw_name = ctypes.string_at(info.name, info.name_len)
        self.structured = bool(info.structured)
        if self.structured:
            self.name = tuple(json.loads(self.raw_name[1:].decode("utf-8")))
        else:
            self.name = self.raw_name.decode("utf-8", "surrogateescape")
        self.type = info.type
        self.dtype_bytes = ctypes.string_at(info.dtype_str, info.dtype_len)
        self.shape = tuple(info.shape[i] for i in range(info.ndim))
        self.nbytes = info.nbytes
        self.meta = bool(info.meta)
        self.module_idx = info.module_idx  # -1 until its header was read


def _gather(starts, lens):
    """The byte ranges [starts[i], +lens[i]) copied out in a few reads:
    (bytes, int64 array of each range's offset in them), or None. Ranges
    that follow one another with gaps under a page are read as one span (every byte
    between two mapped addresses less than a page apart lies on one of
    their pages, so it is mapped too); a larger gap or a step back starts
    a new span. Empty ranges read nothing (their address may be past the
    end of its memory)."""
    import numpy as np
    offs = np.zeros(len(starts), dtype=np.int64)
    used = np.flatnonzero(lens > 0)
    if not len(used):
        return b"", offs
    st, ends = starts[used], starts[used] + lens[used]
    gaps = st[1:] - ends[:-1]
    cut = (np.flatnonzero((gaps < 0) | (gaps >= 4096)) + 1).tolist()
    if len(cut) > len(used) // 16 + 8:  # scattered: not worth it
        return None
    bounds = [0] + cut + [len(used)]
    blobs, base = [], 0
    for b0, b1 in zip(bounds, bounds[1:]):
        lo = int(st[b0])
        blobs.append(ctypes.string_at(lo, int(ends[b1 - 1]) - lo))
        offs[used[b0:b1]] = st[b0:b1] - lo + base
        base += len(blobs[-1])
    return b"".join(blobs), offs


class Entries(abc.Sequence):
    """The index as columns, one per Entry field (in index order);
    entries[i] makes tensor i's Entry. A 100k-tensor load reads the columns
    and never makes the 100k Entry objects (about 0.2 s of Python).

    A column may be handed in as a numpy array (a copy, never a view of
    the reader's memory): it becomes a list the first time it is read as
    an attribute, and array(name) gives it as an array without that step
    (a load reads nbytes, meta and structured that way)."""

    def __init__(self, names, structured, types, dtype_bytes, shapes, nbytes, meta, module_idx, raw_name,
                 dtype_set=None):
        self._arrays = {}
        for k, v in (("names", names), ("structured", structured), ("types", types),
                     ("dtype_bytes", dtype_bytes), ("shapes", shapes), ("nbytes", nbytes), ("meta", meta),
                     ("module_idx", module_idx)):
            if isinstance(v, list):
                setattr(self, k, v)  # str, tuple (a structured name or a shape), bytes, int or bool items
            else:
                self._arrays[k] = v
        self._raw_name = raw_name       # i -> the name's bytes as stored
        # The distinct dtype strings (a checkpoint has a few).
        self.dtype_set = set(dtype_bytes) if dtype_set is None else dtype_set

    def __getattr__(self, name):
        # Only for attributes not set yet: a column still held as an array.
        arrays = self.__dict__.get("_arrays")
        if arrays is None or name not in arrays:
            raise AttributeError(name)
        v = arrays[name].tolist()
        setattr(self, name, v)
        return v

    def array(self, name):
        """A numeric or bool column as a numpy array (do not modify it)."""
        a = self._arrays.get(name)
        if a is None:
            import numpy as np
            a = self._arrays[name] = np.asarray(getattr(self, name), dtype=bool if name in ("structured", "meta")
                                                else np.int64)
        return a

    @classmethod
    def of(cls, entries):
        """Columns from a list of Entry objects (the per-entry road)."""
        e = entries
        return cls([x.name for x in e], [x.structured for x in e], [x.type for x in e], [x.dtype_bytes for x in e],
                   [x.shape for x in e], [x.nbytes for x in e], [x.meta for x in e], [x.module_idx for x in e],
                   lambda i: e[i].raw_name)

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self.names)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("tensor index out of range")
        e = Entry.__new__(Entry)
        e.index = i
        e.raw_name = self._raw_name(i)
        e.name = self.names[i]
        e.structured = self.structured[i]
        e.type = self.types[i]
        e.dtype_bytes = self.dtype_bytes[i]
        e.shape = self.shapes[i]
        e.nbytes = self.nbytes[i]
        e.meta = self.meta[i]
        e.module_idx = self.module_idx[i]
        return e

    def __iter__(self):
        return map(self.__getitem__, range(len(self.names)))


def _split_names(blob, offs, lens):
    """The names at blob[offs[i]:offs[i] + lens[i]] as str (UTF-8,
    surrogateescape; latin-1 gives the same for ASCII), made by one decode
    and one split: the names are copied out with a NUL after each (numpy),
    so no Python runs per name. None when a name holds a NUL byte itself
    (the caller then slices name by name). Decoding the joined bytes gives
    what decoding each name would: a NUL is ASCII, so it ends an invalid
    sequence as the end of a name would."""
    import numpy as np
    n = len(lens)
    src = np.frombuffer(blob, dtype=np.uint8)
    if not len(src):
        return [""] * n
    ends = np.cumsum(lens + 1)          # one past each name's NUL, in the output
    idx = np.repeat(offs - (ends - lens - 1), lens + 1)
    idx += np.arange(int(ends[-1]), dtype=np.int64)
    np.minimum(idx, len(src) - 1, out=idx)  # the last NUL's source may be past the end
    out = src[idx]
    out[ends - 1] = 0
    joined = out[:-1].tobytes()
    if joined.count(0) != n - 1:
        return None
    if (out >= 0x80).any():
        return joined.decode("utf-8", "surrogateescape").split("\0")
    return joined.decode("latin-1").split("\0")


def _bulk_entries(h, n):
    """The index as Entries columns, read in bulk: per-field ctypes access
    costs about 2 us a tensor, most of a 100k-tensor load's Python time.
    The infos are read as one numpy array when tzr_reader_tensor hands out
    evenly spaced entries (checked), names and shapes in a few copies (see
    _gather); None (the caller then reads entry by entry) otherwise or
    without numpy."""
    if n < 2:
        return None
    try:
        import numpy as np
    except ImportError:
        return None
    info = _lib.TensorInfo

    def addr(i):
        return ctypes.addressof(lib.tzr_reader_tensor(h, i).contents)

    p0 = addr(0)
    stride = addr(1) - p0
    if stride < ctypes.sizeof(info) or any(addr(i) != p0 + i * stride for i in (n // 2, n - 1)):
        return None
    fields = ("name", "name_len", "structured", "type", "module_idx", "dtype_str", "dtype_len", "ndim", "shape",
              "nbytes", "meta")
    fmt = ["<i4" if getattr(info, f).size == 4 else "<i8" for f in fields]
    dt = np.dtype({"names": fields, "formats": fmt, "offsets": [getattr(info, f).offset for f in fields],
                   "itemsize": stride})
    a = np.frombuffer((ctypes.c_char * (n * stride)).from_address(p0), dtype=dt, count=n)
    names = _gather(a["name"], a["name_len"])
    ndim = a["ndim"].astype(np.int64)
    dims = _gather(a["shape"], ndim * 8)
    if names is None or dims is None or (dims[1] % 8).any():
        return None
    blob, no = names
    name_len = a["name_len"].astype(np.int64)
    structured = a["structured"] != 0   # a copy, as every column kept below
    plain = _split_names(blob, no, name_len)
    if plain is None:
        # A name holds a NUL byte: one slice each. The blob decodes once
        # as latin-1 (one char per byte, so byte offsets stay character
        # offsets); names with other bytes decode on their own.
        text = blob.decode("latin-1")
        hi = np.flatnonzero(np.frombuffer(blob, dtype=np.uint8) >= 0x80)  # where the non-ASCII bytes are
        wide = np.searchsorted(hi, no) != np.searchsorted(hi, no + name_len)
        plain = [blob[o:o + ln].decode("utf-8", "surrogateescape") if w else text[o:o + ln]
                 for o, ln, w in zip(no.tolist(), name_len.tolist(), wide.tolist())]
    if structured.any():
        plain = [tuple(json.loads(blob[o + 1:o + ln].decode("utf-8"))) if st else nm
                 for nm, st, o, ln in zip(plain, structured.tolist(), no.tolist(), name_len.tolist())]
    shape_off = dims[1] // 8
    flat = np.frombuffer(dims[0], dtype="<u8")
    nd0 = int(ndim[0])
    if (ndim == nd0).all() and (shape_off == np.arange(n, dtype=np.int64) * nd0).all() and len(flat) == n * nd0:
        # One rank, shapes packed in order: the tuples in one pass.
        shapes = list(zip(*[iter(flat.tolist())] * nd0)) if nd0 else [()] * n
    else:
        fl = flat.tolist()
        shapes = [tuple(fl[so:so + nd]) for so, nd in zip(shape_off.tolist(), ndim.tolist())]
    dstr, dlen = a["dtype_str"], a["dtype_len"]
    ptrs, first, inv = np.unique(dstr, return_index=True, return_inverse=True)
    if (dlen == dlen[first][inv]).all():  # one length per string pointer (as the reader makes them)
        kinds = [ctypes.string_at(int(p), int(dlen[f])) for p, f in zip(ptrs.tolist(), first.tolist())]
        dtype_bytes = [kinds[0]] * n if len(kinds) == 1 else [kinds[k] for k in inv.tolist()]
        kinds = set(kinds)
    else:
        dtype_bytes = [ctypes.string_at(p, ln) for p, ln in zip(dstr.tolist(), dlen.tolist())]
        kinds = None
    return Entries(plain, structured, a["type"].astype(np.int64), dtype_bytes, shapes, a["nbytes"].astype(np.int64),
                   a["meta"] != 0, a["module_idx"].astype(np.int64),
                   lambda i: blob[int(no[i]):int(no[i] + name_len[i])], kinds)


def crypt_fill(crypt, params, keep):
    """Fill a tzr_crypt_params from Encryption/DecryptionParams; `keep`
    holds the buffers alive as long as the struct is used."""
    if params is None:
        return
    pw = getattr(params, "_password", None)
    # A password goes to the library as a password (the file then records
    # the salt and limits); EncryptionParams.key would derive it here.
    key = getattr(params, "_key", None) if pw is not None else getattr(params, "key", None)
    if pw is None and key is not None:
        buf = ctypes.create_string_buffer(bytes(key), len(key))
        keep.append(buf)
        crypt.key = ctypes.cast(buf, c_void_p)
    elif pw is not None:
        buf = ctypes.create_string_buffer(pw, len(pw))
        keep.append(buf)
        crypt.password = ctypes.cast(buf, c_void_p)
        crypt.password_len = len(pw)
        crypt.opslimit = getattr(params, "opslimit", 0) or 0
        crypt.memlimit = getattr(params, "memlimit", 0) or 0
        salt = getattr(params, "salt", None)
        if salt is not None:
            sb = ctypes.create_string_buffer(bytes(salt), len(salt))
            keep.append(sb)
            crypt.salt = ctypes.cast(sb, c_void_p)


class Reader:
    """An open tzr_reader and its index, over a path, a URI, a descriptor
    number or a binary file object (see _io)."""

    def __init__(self, file_obj, decryption=None, verify=False):
        self.path = file_obj
        keep = []
        opt = _lib.reader_options(verify=1 if verify else 0)
        crypt_fill(opt.crypt, decryption, keep)
        h = c_void_p()
        self._opened = None
        if _io.is_path(file_obj):
            check(lib.tzr_reader_open(byref(h), _path_bytes(file_obj), byref(opt)))
        else:
            if isinstance(file_obj, int) and not isinstance(file_obj, bool):
                self._opened = _io._fd_source(file_obj, "descriptor %d" % file_obj)
            else:
                self._opened = _io.open_source(file_obj)
            rc = lib.tzr_reader_open_source(byref(h), self._opened.handle, byref(opt))  # owns it now
            if rc:
                self._opened.done()
                _io.check_caught(self._opened, rc)
        self._h = h
        self._lock = threading.Lock()
        n = lib.tzr_reader_count(h)
        self.entries = _bulk_entries(h, n) or Entries.of([Entry(i, lib.tzr_reader_tensor(h, i).contents)
                                                          for i in range(n)])
        self.data_version = lib.tzr_reader_data_version(h)

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("the deserializer is closed")
        return self._h

    def close(self):
        if getattr(self, "_h", None) is not None:
            lib.tzr_reader_free(self._h)  # frees the source too
            self._h = None
        if getattr(self, "_opened", None) is not None:
            self._opened.done()

    __del__ = close

    def module_idx(self, i):
        """Module index from tensor i's header (u16 at byte 8 of the record,
        plaintext in encrypted files too) when no load has read it yet."""
        info = lib.tzr_reader_tensor(self.handle, i).contents
        if info.module_idx >= 0:
            return info.module_idx
        src = ctypes.cast(lib.tzr_reader_source(self.handle), ctypes.POINTER(_lib.Source)).contents
        buf = ctypes.create_string_buffer(2)
        self._check(src.read_at(lib.tzr_reader_source(self.handle), buf, 2, info.header_offset + 8))
        return int.from_bytes(buf.raw, "little")

    def matches(self, i, t):
        """Whether the contiguous host tensor t holds exactly tensor i's
        bytes as the file stores them (read, decrypted and hash-checked)."""
        n = int(self.entries[i].nbytes)
        if t.numel() * t.element_size() != n:
            return False
        buf = ctypes.create_string_buffer(max(n, 1))
        rc = lib.tzr_reader_read(self.handle, i, buf, n)
        if rc in (_lib.TZR_EHASH, _lib.TZR_ECRYPT):
            return False
        self._check(rc)
        return n == 0 or ctypes.string_at(t.data_ptr(), n) == buf.raw[:n]

    def _check(self, rc):
        _io.check_caught(self._opened, rc)

    def load(self, dests, device=None, verify=None, progress=None):
        """Load tensors {index: (pointer, nbytes)} in one tzr_load.
        device: None for host memory, or a CUDA device number (pointers are
        device pointers there)."""
        pl = list(dests.values())
        return self.load_lists(list(dests), [p for p, _ in pl], [n for _, n in pl], device, verify, progress)

    def load_lists(self, indices, pointers, lengths, device=None, verify=None, progress=None):
        """load() over lists of indices, pointers and sizes."""
        try:
            return load_lists(self.handle, len(self.entries), indices, pointers, lengths, device, verify, progress)
        except _lib.TzrError as err:
            if self._opened is not None and self._opened.errors:
                self._opened.raise_caught(err)
            raise


def load_table(reader_handle, count, dests, device=None, verify=None, progress=None):
    if not dests:
        return None
    pl = list(dests.values())
    return load_lists(reader_handle, count, list(dests), [p for p, _ in pl], [n for _, n in pl], device, verify,
                      progress)


def load_lists(reader_handle, count, indices, pointers, lengths, device=None, verify=None, progress=None):
    """load_table over three sequences (index, pointer, bytes): lists, or
    numpy arrays for pointers and lengths, and indices may be a range. The
    C tables are filled in a few numpy steps (no Python per tensor), and a
    whole-file load in order needs no selection mask."""
    if not len(indices):
        return None
    try:
        import numpy as np
    except ImportError:
        np = None
    mask = None
    if np is None:  # the per-tensor road
        ptrs = (c_void_p * count)()
        lens = (c_uint64 * count)()
        mask = (ctypes.c_ubyte * count)()
        for i, p, n in zip(indices, pointers, lengths):
            ptrs[i] = p or None
            lens[i] = n
            mask[i] = 1
    else:
        p_in = np.asarray(pointers, dtype=np.uint64)
        n_in = np.asarray(lengths, dtype=np.uint64)
        if len(p_in) != len(indices) or len(n_in) != len(indices):
            raise ValueError("load_lists: %d indices, %d pointers, %d lengths" % (len(indices), len(p_in),
                                                                                 len(n_in)))
        if isinstance(indices, range):
            whole = indices == range(count)
        else:
            idx = np.asarray(indices, dtype=np.int64)
            whole = len(idx) == count and bool((idx == np.arange(count)).all())
        if whole:
            p_arr, n_arr = np.ascontiguousarray(p_in), np.ascontiguousarray(n_in)
        else:
            if isinstance(indices, range):
                idx = np.arange(indices.start, indices.stop, indices.step, dtype=np.int64)
            if len(idx) and (idx.min() < 0 or idx.max() >= count):
                raise IndexError("load_lists: a tensor index is out of range (%d tensors)" % count)
            p_arr = np.zeros(count, dtype=np.uint64)
            n_arr = np.zeros(count, dtype=np.uint64)
            m_arr = np.zeros(count, dtype=np.uint8)
            p_arr[idx] = p_in
            n_arr[idx] = n_in
            m_arr[idx] = 1
            mask = m_arr.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        ptrs = p_arr.ctypes.data_as(ctypes.POINTER(c_void_p))   # the arrays outlive the sink (locals)
        lens = n_arr.ctypes.data_as(ctypes.POINTER(c_uint64))
    sink = c_void_p()
    if device is None:
        check(lib.tzr_sink_host_table_new(byref(sink), ptrs, lens, count))
    else:
        check(lib.tzr_sink_cuda_table_new(byref(sink), _lib.int_arg("device", device, 0, _lib.INT_MAX), ptrs,
                                           lens, count))
    opt = _lib.load_options() if mask is None else _lib.load_options(filter=_lib.FILTER_MASK,
                                                                     filter_ctx=ctypes.cast(mask, c_void_p))
    if verify is not None:
        opt.verify = 1 if verify else 0
        opt.verify_level = 1 if verify == "crc32" else 0  # TZR_VERIFY_CRC32, else _FULL
    cb = progress_callback(progress)
    if cb is not None:
        opt.progress = cb
    stats = _lib.LoadStats()
    try:
        rc = lib.tzr_load(reader_handle, sink, byref(opt), byref(stats))
        err = _lib.error(rc) if rc else None
    finally:
        lib.tzr_sink_free(sink)
    if err is not None:
        raise err
    return stats


def progress_callback(progress):
    """A C progress callback for `progress` (a callable(done, total), True
    for a bar, None for none); keep it alive for the load."""
    if progress is True:
        progress = _bar
    if progress is None:
        return None
    # Called from pipeline threads per chunk, never per tensor.
    return _lib.PROGRESS_FN(lambda ctx, done, total: progress(done, total))


def _bar(done, total):
    import sys
    width = 40
    fill = width * done // total if total else width
    sys.stderr.write("\r[%s%s] %5.1f%% of %.1f MiB" % ("#" * fill, " " * (width - fill),
                                                      100.0 * done / total if total else 100.0, total / 2**20))
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _path_bytes(p):
    return _lib.path_arg(p)
