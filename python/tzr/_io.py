"""File objects as libtzr sources and outputs.

What tensorizer accepts, tzr accepts: a path, a URI, a descriptor number or
any binary file object. Each becomes the fastest road the object allows:
  - tzr's own streams (tzr.stream_io.open_stream on a URL): the library's
    ranged-GET source or multipart upload, with the stream's own settings;
  - an object with a real descriptor of a regular file: the library reads
    or writes a duplicate of it with pread/pwrite, no Python per chunk;
  - io.BytesIO (reading): its buffer, in place;
  - any other seekable object: callbacks that seek and read or write in
    large pieces under a lock;
  - a non-seekable one (a pipe, a socket file): copied through an unnamed
    temporary file, in order (reading before the load, writing at close).
"""
import ctypes
import io
import os
import tempfile
import threading

from . import _lib
from ._lib import check, lib

_COPY_BYTES = 16 << 20


def is_path(obj):
    return isinstance(obj, (str, bytes)) or hasattr(obj, "__fspath__")


def describe(obj):
    name = getattr(obj, "name", None)
    if isinstance(name, (str, bytes)) and name:
        return os.fsdecode(name)
    return "<%s>" % type(obj).__name__


def _fileno(obj):
    """The object's descriptor when it names a regular file, else None."""
    try:
        fd = obj.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    if not isinstance(fd, int) or fd < 0:
        return None
    import stat
    try:
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None


def _seekable(obj):
    try:
        return bool(obj.seekable())
    except AttributeError:
        return hasattr(obj, "seek")
    except (OSError, ValueError):
        return False


def _closed(obj):
    return bool(getattr(obj, "closed", False))


def _check_start(obj, what):
    """tzr reads and writes a checkpoint from byte 0 of its file."""
    if not _seekable(obj):
        return
    try:
        pos = obj.tell()
    except (OSError, ValueError, AttributeError):
        return
    if pos:
        raise ValueError("%s: the file object is at byte %d; libtzr %s a checkpoint from byte 0 of its "
                         "file (seek(0) first)" % (describe(obj), pos, what))


def _fail(code, exc, obj, where=None):
    msg = "%s: %s%s: %s" % (describe(obj), where + ": " if where else "", type(exc).__name__, exc)
    return lib.tzr_set_error(code, b"%s", msg.encode("utf-8", "replace"))


class Opened:
    """A C source or output made for a file object, and what it needs kept
    alive until the library has freed it. `errors` holds the Python
    exceptions callbacks caught (raised again in place of the library's
    code); `after` runs once the library succeeded (a spooled write's copy)."""

    def __init__(self, handle, name, keep=(), after=None, release=None):
        self.handle = handle
        self.name = name
        self.keep = list(keep)
        self.errors = []
        self.after = after
        self.release = release

    def raise_caught(self, err):
        if self.errors:
            raise err from self.errors[0]
        raise err

    def done(self):
        if self.release is not None:
            rel, self.release = self.release, None
            rel()
        self.keep = []


def check_caught(opened, rc):
    """_lib.check, with the exception a callback of `opened` (or None) caught
    as the cause."""
    if rc:
        err = _lib.error(rc)
        if opened is not None:
            opened.raise_caught(err)
        raise err


# ------------------------------------------------------------------ reading
def _callback_source(obj, size):
    lock = threading.Lock()
    op = Opened(None, describe(obj))
    readinto = getattr(obj, "readinto", None)

    def read_at(_src, buf, n, off):
        try:
            with lock:
                obj.seek(off)
                view = memoryview((ctypes.c_char * n).from_address(buf)).cast("B")
                got = 0
                while got < n:
                    if readinto is not None:
                        k = readinto(view[got:])
                    else:
                        b = obj.read(n - got)
                        k = len(b)
                        view[got:got + k] = b
                    if not k:
                        return lib.tzr_set_error(_lib.TZR_ETRUNC, b"%s", (
                            "%s: ends at byte %d, %d more bytes expected" % (op.name, off + got, n - got)).encode())
                    got += k
            return 0
        except BaseException as e:  # noqa: B902 (the C caller cannot take an exception)
            op.errors.append(e)
            return _fail(_lib.TZR_EIO, e, obj, "reading %d bytes at byte %d" % (n, off))

    src = _lib.Source()
    src.read_at = _lib.IO_FN(read_at)
    src.destroy = _lib.VOID_FN(lambda _s: None)  # the memory is Python's
    src.size = size
    op.name_bytes = op.name.encode("utf-8", "replace")
    src.name = op.name_bytes
    src.preferred_chunk = _COPY_BYTES
    src.preferred_inflight = 1
    src.pack_reads = 1  # each read costs a Python call: fewer, larger ones
    op.handle = ctypes.cast(ctypes.pointer(src), ctypes.c_void_p)
    op.keep = [src, read_at]
    return op


def _copy(src, dst, what, obj):
    """Copy src to dst in large pieces, in order. A raw dst may take part of
    a piece (the rest is written again; taking nothing is a failure, never
    a spin). A failure is a TzrIOError naming obj and the byte reached,
    caused by the original."""
    done = 0
    try:
        while True:
            piece = src.read(_COPY_BYTES)
            if not piece:
                break
            view = memoryview(piece)
            while view:
                k = dst.write(view)
                k = len(view) if k is None and not isinstance(dst, io.RawIOBase) else k
                if not k:
                    raise OSError("write() took no bytes (returned %r)" % (k,))
                done += k
                view = view[k:]
        if hasattr(dst, "flush"):
            dst.flush()
    except Exception as e:  # noqa: BLE001 (wrapped, with the original as cause)
        raise _lib.TzrIOError(_lib.TZR_EIO, "%s: %s failed at byte %d: %s: %s"
                              % (describe(obj), what, done, type(e).__name__, e)) from e


def _spool_in(obj):
    """A non-seekable object copied into an unnamed temporary file, in order."""
    tmp = tempfile.TemporaryFile()
    try:
        _copy(obj, tmp, "reading", obj)
        return _fd_source(tmp.fileno(), describe(obj), keep=[tmp], release=tmp.close)
    except BaseException:
        tmp.close()
        raise


def _fd_source(fd, name, keep=(), release=None):
    h = ctypes.c_void_p()
    check(lib.tzr_source_open_fd(ctypes.byref(h), fd, name.encode("utf-8", "replace"), 0))
    return Opened(h, name, keep, release=release)


def open_source(obj):
    """An Opened C source for a binary file object opened for reading."""
    from . import stream_io
    if isinstance(obj, stream_io.TzrStream):
        return obj._open_source()
    if isinstance(obj, io.TextIOBase):
        raise ValueError("%s is open in text mode; a checkpoint needs a binary file (mode=\"rb\")" % describe(obj))
    if _closed(obj):
        raise ValueError("%s is closed" % describe(obj))
    try:
        readable = obj.readable()
    except AttributeError:
        readable = hasattr(obj, "read") or hasattr(obj, "readinto")
    if not readable:
        raise ValueError("%s is not readable: a checkpoint is read from a file opened with mode=\"rb\""
                         % describe(obj))
    _check_start(obj, "reads")
    fd = _fileno(obj)
    if fd is not None:
        return _fd_source(fd, describe(obj))
    if isinstance(obj, io.BytesIO):
        # getvalue() shares the bytes a BytesIO was made from (no copy) and
        # leaves the object free to close; the source keeps them alive.
        data = obj.getvalue()
        h = ctypes.c_void_p()
        check(lib.tzr_source_open_memory(ctypes.byref(h), ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p),
                                         len(data), describe(obj).encode()))
        return Opened(h, describe(obj), [data])
    if not _seekable(obj):
        return _spool_in(obj)
    end = obj.seek(0, io.SEEK_END)
    obj.seek(0)
    return _callback_source(obj, end)


# ------------------------------------------------------------------ writing
def _callback_output(obj):
    lock = threading.Lock()
    op = Opened(None, describe(obj))
    start_len = [None]

    def pwrite_at(_out, buf, n, off):
        try:
            with lock:
                obj.seek(off)
                view = memoryview((ctypes.c_char * n).from_address(buf)).cast("B")
                done = 0
                while done < n:
                    k = obj.write(view[done:])
                    if not k:  # None (non-blocking, full) or 0: it will not take more; never spin
                        raise OSError("write() took no bytes at byte %d (returned %r)" % (off + done, k))
                    done += k
            return 0
        except BaseException as e:  # noqa: B902
            op.errors.append(e)
            return _fail(_lib.TZR_EIO, e, obj, "writing %d bytes at byte %d" % (n, off))

    def finish(_out):
        try:
            if hasattr(obj, "flush"):
                obj.flush()
            return 0
        except BaseException as e:  # noqa: B902
            op.errors.append(e)
            return _fail(_lib.TZR_EIO, e, obj)

    def abort(_out):
        try:  # leave nothing that reads as a checkpoint
            obj.truncate(start_len[0] or 0)
        except BaseException:  # noqa: B902 (best effort: the write failed already)
            pass

    out = _lib.Output()
    out.pwrite_at = _lib.IO_FN(pwrite_at)
    out.finish = _lib.STATUS_FN(finish)
    out.abort = _lib.VOID_FN(abort)
    out.destroy = _lib.VOID_FN(lambda _o: None)
    op.name_bytes = op.name.encode("utf-8", "replace")
    out.name = op.name_bytes
    try:
        start_len[0] = obj.seek(0, io.SEEK_END)
        obj.seek(0)
    except (OSError, ValueError):
        start_len[0] = 0
    op.handle = ctypes.cast(ctypes.pointer(out), ctypes.c_void_p)
    op.keep = [out, pwrite_at, finish, abort]
    return op


def _fd_output(fd, name, keep=(), after=None, release=None):
    h = ctypes.c_void_p()
    check(lib.tzr_output_open_fd(ctypes.byref(h), fd, name.encode("utf-8", "replace")))
    return Opened(h, name, keep, after=after, release=release)


def _spool_out(obj):
    """A non-seekable target: the writer writes an unnamed temporary file,
    copied to obj in order once the checkpoint is complete."""
    tmp = tempfile.TemporaryFile()

    def copy():
        # Bytes already sent cannot be taken back from a pipe: the reader
        # at the other end meets a cut checkpoint, which fails to load.
        tmp.seek(0)
        _copy(tmp, obj, "writing", obj)
    try:
        return _fd_output(tmp.fileno(), describe(obj), [tmp], after=copy, release=tmp.close)
    except BaseException:
        tmp.close()
        raise


def open_output(obj):
    """An Opened C output for a binary file object opened for writing."""
    from . import stream_io
    if isinstance(obj, stream_io.TzrStream):
        return obj._take_output()
    if isinstance(obj, io.TextIOBase):
        raise ValueError("%s is open in text mode; a checkpoint needs a binary file (mode=\"wb+\")"
                         % describe(obj))
    if _closed(obj):
        raise ValueError("%s is closed" % describe(obj))
    try:
        writable = obj.writable()
    except AttributeError:
        writable = hasattr(obj, "write")
    if not writable:
        raise ValueError("%s is not writable: a checkpoint is written to a file opened with mode=\"wb+\""
                         % describe(obj))
    _check_start(obj, "writes")
    fd = _fileno(obj)
    if fd is not None:
        if hasattr(obj, "flush"):
            obj.flush()  # what Python buffered goes first; the library writes around it
        mode = getattr(obj, "mode", "")
        if isinstance(mode, str) and "a" in mode:
            raise ValueError("%s is open for appending (mode=%r): a checkpoint is written from byte 0"
                             % (describe(obj), mode))
        return _fd_output(fd, describe(obj))
    if not _seekable(obj):
        return _spool_out(obj)
    return _callback_output(obj)
