"""ctypes declarations of the parts of libtzr the package uses.

The structs mirror include/tzr.h, tzr_load.h and tzr_shard.h field by field;
every option struct carries its own size, so a library built from a newer
header still reads them right.
"""
import ctypes
import os
from ctypes import (POINTER, Structure, c_char_p, c_double, c_int, c_size_t, c_uint8, c_uint16,
                    c_uint32, c_uint64, c_void_p)

__all__ = ["lib", "check", "TzrError"]

# ------------------------------------------------------------------ errors
TZR_EINVAL, TZR_ENOMEM, TZR_EIO, TZR_EFORMAT, TZR_EVERSION, TZR_EHASH, TZR_ECRYPT = -1, -2, -3, -4, -5, -6, -7
TZR_ENOTFOUND, TZR_ELIMIT, TZR_EDUP, TZR_ETRUNC, TZR_ENODEV, TZR_ECANCELED = -8, -9, -10, -11, -12, -13
TZR_ENOTSUP, TZR_ENET, TZR_EHTTP, TZR_ECHANGED, TZR_ECOMM, TZR_EDEVICE = -14, -15, -16, -17, -18, -19


class TzrError(Exception):
    """A libtzr failure: `code` (a TZR_E* value) and the library's message,
    which names the file, tensor and byte offset where there is one."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class HashMismatchError(TzrError):
    """Stored CRC32/SHA-256 does not match the data (tensorizer's name)."""


class CryptographyError(TzrError):
    """Wrong or missing key/password, or failed authentication."""


class FormatError(TzrError, ValueError):
    """Malformed, truncated or unsupported file."""


class TzrIOError(TzrError, OSError):
    """The operating system, network or server refused."""

    def __init__(self, code, message):
        TzrError.__init__(self, code, message)


class TzrFileNotFoundError(TzrIOError, FileNotFoundError):
    """The file or object does not exist."""


class DeviceError(TzrError, RuntimeError):
    """No CUDA runtime/device, or a CUDA call failed."""


_CLASSES = {
    TZR_EHASH: HashMismatchError, TZR_ECRYPT: CryptographyError, TZR_EFORMAT: FormatError,
    TZR_ETRUNC: FormatError, TZR_EVERSION: FormatError, TZR_EIO: TzrIOError, TZR_ENET: TzrIOError,
    TZR_EHTTP: TzrIOError, TZR_ECHANGED: TzrIOError, TZR_ENODEV: DeviceError, TZR_EDEVICE: DeviceError,
    TZR_ENOTFOUND: TzrFileNotFoundError,
}


# ------------------------------------------------------------------ structs
class TensorInfo(Structure):
    _fields_ = [
        ("name", c_void_p), ("name_len", c_size_t), ("structured", c_int), ("type", c_int),
        ("module_idx", c_int), ("dtype_str", c_void_p), ("dtype_len", c_size_t), ("dtype", c_int),
        ("itemsize", c_uint32), ("opaque", c_int), ("ndim", c_uint32), ("shape", POINTER(c_uint64)),
        ("numel", c_uint64), ("nbytes", c_uint64), ("header_offset", c_uint64), ("data_offset", c_uint64),
        ("data_length", c_uint64), ("meta", c_int), ("encrypted", c_int), ("stored_length", c_uint64),
        ("uncompressed_length", c_uint64), ("compression", c_int), ("byte_planes", c_uint32),
        ("frame_size", c_uint64), ("frames", c_uint64),
    ]


# Callback tables (include/tzr.h): sources and outputs made in Python for
# file objects that have no descriptor.
IO_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_uint64)
STATUS_FN = ctypes.CFUNCTYPE(c_int, c_void_p)
VOID_FN = ctypes.CFUNCTYPE(None, c_void_p)


class _Sized(Structure):
    """A struct whose first layout ends with struct_size (include/tzr.h):
    made with its own size, so later library fields see what it holds."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.struct_size = ctypes.sizeof(self)


class Source(_Sized):
    _fields_ = [("read_at", IO_FN), ("destroy", VOID_FN), ("size", c_uint64), ("name", c_char_p),
                ("preferred_chunk", c_size_t), ("preferred_inflight", c_int), ("is_cached", c_void_p),
                ("set_direct", c_void_p), ("direct_align", c_size_t), ("readv_at", c_void_p),
                ("ctx", c_void_p), ("pack_reads", c_int), ("struct_size", c_size_t)]


class Output(_Sized):
    _fields_ = [("pwrite_at", IO_FN), ("finish", STATUS_FN), ("abort", VOID_FN), ("destroy", VOID_FN),
                ("name", c_char_p), ("ctx", c_void_p), ("struct_size", c_size_t)]


class HttpOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("access_key", c_char_p), ("secret_key", c_char_p),
                ("session_token", c_char_p), ("region", c_char_p), ("endpoint", c_char_p),
                ("anonymous", c_int), ("ca_bundle", c_char_p), ("insecure", c_int),
                ("range_bytes", c_size_t), ("max_inflight", c_int), ("total_timeout_s", c_double),
                ("max_retries", c_int), ("stall_timeout_s", c_double), ("connect_timeout_s", c_double)]


class CryptParams(Structure):
    _fields_ = [("key", c_void_p), ("password", c_void_p), ("password_len", c_size_t),
                ("opslimit", c_uint64), ("memlimit", c_uint64), ("salt", c_void_p)]


class ReaderOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("crypt", CryptParams), ("verify", c_int),
                ("read_headers", c_int), ("max_tensors", c_uint64), ("max_index_bytes", c_uint64)]


class WriterOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("crypt", CryptParams), ("metadata_size", c_uint64),
                ("compression", c_int), ("compression_level", c_int), ("frame_size", c_uint64),
                ("byte_planes", c_int), ("threads", c_int)]


class TensorDesc(_Sized):
    _fields_ = [("name", c_void_p), ("name_len", c_size_t), ("type", c_int), ("module_idx", c_uint16),
                ("dtype_str", c_void_p), ("dtype_len", c_size_t), ("dtype", c_int), ("ndim", c_uint32),
                ("shape", POINTER(c_uint64)), ("meta", c_int), ("struct_size", c_size_t)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)


class LoadOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("ring_bytes", c_size_t), ("chunk_bytes", c_size_t),
                ("threads", c_int), ("verify", c_int), ("direct_io", c_int),
                ("filter", c_void_p), ("filter_ctx", c_void_p),
                ("on_tensor", c_void_p), ("on_tensor_ctx", c_void_p),
                ("progress", PROGRESS_FN), ("progress_ctx", c_void_p),
                ("cancel", c_void_p), ("on_tensor_error", c_void_p), ("on_tensor_error_ctx", c_void_p),
                ("select", c_void_p), ("select_ctx", c_void_p), ("verify_level", c_int)]


class LoadStats(_Sized):
    _fields_ = [("tensors", c_uint64), ("bytes", c_uint64), ("bytes_read", c_uint64), ("reads", c_uint64),
                ("staging_bytes", c_size_t), ("seconds", c_double), ("error_tensor", c_size_t),
                ("struct_size", c_size_t)]


class ShardWriterOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("metadata_size", c_uint64), ("no_hash", c_int)]


class ShardTensorDesc(Structure):
    _fields_ = [("name", c_void_p), ("name_len", c_size_t), ("dtype_str", c_void_p), ("dtype_len", c_size_t),
                ("dtype", c_int), ("ndim", c_uint32), ("shape", POINTER(c_uint64)), ("dim", c_int),
                ("offset", c_uint64), ("length", c_uint64), ("sha256", c_void_p)]


class ShardOpenOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("verify", c_int), ("crypt", CryptParams), ("rank_rules", c_char_p)]


class ShardTensor(Structure):
    _fields_ = [("name", c_void_p), ("name_len", c_size_t), ("dtype_str", c_void_p), ("dtype_len", c_size_t),
                ("dtype", c_int), ("itemsize", c_uint32), ("ndim", c_uint32), ("shape", POINTER(c_uint64)),
                ("nbytes", c_uint64), ("dim", c_int), ("has_sha256", c_int), ("sha256", c_uint8 * 32)]


class ShardPiece(Structure):
    _fields_ = [("tensor", c_size_t), ("name", c_void_p), ("name_len", c_size_t), ("dtype", c_int),
                ("dim", c_int), ("offset", c_uint64), ("length", c_uint64), ("ndim", c_uint32),
                ("shape", POINTER(c_uint64)), ("data", c_void_p), ("nbytes", c_uint64)]


class ShardResult(Structure):
    _fields_ = [("count", c_size_t), ("pieces", POINTER(ShardPiece)), ("bytes", c_uint64),
                ("bytes_read", c_uint64), ("arena", c_void_p)]


def _init(struct, **fields):
    s = struct()
    s.struct_size = ctypes.sizeof(struct)
    for k, v in fields.items():
        setattr(s, k, v)
    return s


def reader_options(**kw):
    return _init(ReaderOptions, **kw)


def writer_options(**kw):
    return _init(WriterOptions, **kw)


def http_options(**kw):
    return _init(HttpOptions, **kw)


def load_options(**kw):
    kw.setdefault("verify", -1)  # -1: what the reader was opened with
    return _init(LoadOptions, **kw)


# ------------------------------------------------------------------ loading the library
def _candidates():
    env = os.environ.get("TZR_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        os.path.join(here, "libtzr.so.0"),                      # bundled by `pip install ./python`
        os.path.join(here, "..", "..", "build", "libtzr.so"),   # python/tzr in a built tree
        os.path.join(here, "..", "..", "..", "libtzr.so.0"),    # PREFIX/lib/python3/dist-packages/tzr
        "libtzr.so.0",                                          # the system loader's search path
    ]


def _load():
    tried = []
    for c in _candidates():
        if os.sep in c and not os.path.exists(c):
            tried.append(c + " (missing)")
            continue
        try:
            return ctypes.CDLL(os.path.normpath(c) if os.sep in c else c)
        except OSError as e:
            tried.append("%s (%s)" % (c, e))
    raise ImportError("tzr: cannot load libtzr; build it with `make` or set TZR_LIBRARY. Tried: " +
                      "; ".join(tried))


lib = _load()

_P = c_void_p
_PP = POINTER(c_void_p)
_SIGS = {
    "tzr_version_string": (c_char_p, []),
    "tzr_strerror": (c_char_p, [c_int]),
    "tzr_last_error": (c_char_p, []),
    "tzr_reader_open": (c_int, [_PP, c_char_p, POINTER(ReaderOptions)]),
    "tzr_reader_open_source": (c_int, [_PP, _P, POINTER(ReaderOptions)]),
    "tzr_reader_free": (None, [_P]),
    "tzr_reader_format": (c_int, [_P]),
    "tzr_source_open_fd": (c_int, [_PP, c_int, c_char_p, c_uint32]),
    "tzr_source_open_memory": (c_int, [_PP, _P, c_size_t, c_char_p]),
    "tzr_source_open_url": (c_int, [_PP, c_char_p, POINTER(HttpOptions)]),
    "tzr_source_free": (None, [_P]),
    "tzr_output_open_fd": (c_int, [_PP, c_int, c_char_p]),
    "tzr_output_open_s3": (c_int, [_PP, c_char_p, POINTER(HttpOptions), c_size_t]),
    "tzr_writer_open_output": (c_int, [_PP, _P, POINTER(WriterOptions)]),
    "tzr_set_error": (c_int, [c_int, c_char_p, c_char_p]),
    "tzr_output_remove_temporaries": (c_int, []),
    "tzr_key_derive": (c_int, [c_char_p, c_char_p, c_size_t, c_char_p, c_uint64, c_uint64]),
    "tzr_reader_count": (c_size_t, [_P]),
    "tzr_reader_data_version": (c_uint32, [_P]),
    "tzr_reader_encrypted": (c_int, [_P]),
    "tzr_reader_compressed": (c_int, [_P]),
    "tzr_reader_tensor": (POINTER(TensorInfo), [_P, c_size_t]),
    "tzr_reader_source": (c_void_p, [_P]),
    "tzr_reader_read": (c_int, [_P, c_size_t, _P, c_size_t]),
    "tzr_reader_verify": (c_int, [_P, c_size_t]),
    "tzr_writer_open": (c_int, [_PP, c_char_p, POINTER(WriterOptions)]),
    "tzr_writer_add": (c_int, [_P, POINTER(TensorDesc), _P]),
    "tzr_writer_add_borrowed": (c_int, [_P, POINTER(TensorDesc), _P]),
    "tzr_writer_close": (c_int, [_P]),
    "tzr_writer_reserve": (c_int, [_P, c_uint64, c_uint64, c_uint64, c_uint64, c_uint64]),
    "tzr_writer_abort": (None, [_P]),
    "tzr_sink_free": (None, [_P]),
    "tzr_sink_host_table_new": (c_int, [_PP, _PP, POINTER(c_uint64), c_size_t]),
    "tzr_sink_cuda_table_new": (c_int, [_PP, c_int, _PP, POINTER(c_uint64), c_size_t]),
    "tzr_load": (c_int, [_P, _P, POINTER(LoadOptions), POINTER(LoadStats)]),
    "tzr_shard_writer_open": (c_int, [_PP, c_char_p, c_int, c_int, POINTER(ShardWriterOptions)]),
    "tzr_shard_writer_reserve": (c_int, [_P, c_uint64, c_uint64, c_uint64, c_uint64, c_uint64]),
    "tzr_shard_writer_add": (c_int, [_P, POINTER(ShardTensorDesc), _P]),
    "tzr_shard_writer_close": (c_int, [_P]),
    "tzr_shard_writer_abort": (None, [_P]),
    "tzr_shard_manifest_build": (c_int, [c_char_p, c_int]),
    "tzr_shard_open": (c_int, [_PP, c_char_p, POINTER(ShardOpenOptions)]),
    "tzr_shard_close": (None, [_P]),
    "tzr_shard_count": (c_size_t, [_P]),
    "tzr_shard_tensor_at": (POINTER(ShardTensor), [_P, c_size_t]),
    "tzr_shard_load_rank": (c_int, [_P, c_int, c_int, c_char_p, POINTER(POINTER(ShardResult))]),
    "tzr_shard_result_free": (None, [POINTER(ShardResult)]),
    "tzr_shard_target": (c_int, [_P, c_size_t, c_int, c_int, c_char_p, POINTER(c_int), POINTER(c_uint64),
                                 POINTER(c_uint64)]),
    "tzr_shard_load_rank_into": (c_int, [_P, c_int, c_int, c_char_p, _P, POINTER(LoadOptions),
                                         POINTER(LoadStats)]),
}
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

# The mask filter is passed to tzr_load as a plain C function pointer.
FILTER_MASK = ctypes.cast(lib.tzr_filter_mask, c_void_p).value


def path_arg(p):
    """A path or URL as the C string the library takes: a NUL inside would
    silently cut it, so it is refused."""
    b = os.fsencode(p)
    if b"\0" in b:
        raise ValueError("path %r holds a NUL byte" % (p,))
    return b


def int_arg(name, v, lo, hi):
    """An integer argument checked against the C type it becomes (ctypes
    would wrap 2**32 + 1 to 1 silently)."""
    import operator
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError("%s must be an integer, not %s" % (name, type(v).__name__)) from None
    if not lo <= i <= hi:
        raise ValueError("%s %d is out of range [%d, %d]" % (name, i, lo, hi))
    return i


INT_MAX = 2**31 - 1


def error(code, context=None):
    """The exception for a failed call, with this thread's library message."""
    msg = (lib.tzr_last_error() or b"").decode("utf-8", "replace") or lib.tzr_strerror(code).decode()
    if context and context not in msg:
        msg = "%s: %s" % (context, msg)
    cls = _CLASSES.get(code, TzrError)
    if cls is TzrIOError and ("No such file" in msg or "HTTP 404" in msg or " 404" in msg):
        cls = TzrFileNotFoundError
    return cls(code, msg)


def check(rc, context=None):
    if rc != 0:
        raise error(rc, context)
    return rc


def version():
    return lib.tzr_version_string().decode()
