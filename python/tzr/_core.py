"""The reader handle and the one-call loads over a destination table.

A load allocates nothing per tensor in C and runs no Python per tensor: the
caller hands a table of destination pointers (host or CUDA) and a selection
mask, and tzr_load runs once; ctypes releases the GIL for the call.
"""
import ctypes
import json
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
        self.entries = [Entry(i, lib.tzr_reader_tensor(h, i).contents) for i in range(n)]
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
        try:
            return load_table(self.handle, len(self.entries), dests, device, verify, progress)
        except _lib.TzrError as err:
            if self._opened is not None and self._opened.errors:
                self._opened.raise_caught(err)
            raise


def load_table(reader_handle, count, dests, device=None, verify=None, progress=None):
    if not dests:
        return None
    ptrs = (c_void_p * count)()
    lens = (c_uint64 * count)()
    mask = (ctypes.c_ubyte * count)()
    for i, (p, n) in dests.items():
        ptrs[i] = p or None
        lens[i] = n
        mask[i] = 1
    sink = c_void_p()
    if device is None:
        check(lib.tzr_sink_host_table_new(byref(sink), ptrs, lens, count))
    else:
        check(lib.tzr_sink_cuda_table_new(byref(sink), _lib.int_arg("device", device, 0, _lib.INT_MAX), ptrs,
                                           lens, count))
    opt = _lib.load_options(filter=_lib.FILTER_MASK, filter_ctx=ctypes.cast(mask, c_void_p))
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
