"""tensorizer's stream_io over libtzr: open_stream(path_or_uri, mode, ...).

Local paths open as Python files (parent folders made for writing), as in
tensorizer. http(s):// and s3:// URLs open as TzrStream objects over the
library's own transports: reads are concurrent ranged GETs, writes an S3
multipart upload that runs while the bytes are written (tensorizer spools
the whole object into a temporary file and uploads it at close). Credentials,
endpoint and TLS settings travel with each stream to the library call that
uses them: no process-wide environment is changed, so two streams with two
sets of credentials work side by side. Given to TensorDeserializer or
TensorSerializer, a TzrStream is read or written by the library directly.
"""
import configparser
import ctypes
import io
import os

from . import _lib
from ._io import Opened
from ._lib import check, lib

default_s3_read_endpoint = "accel-object.ord1.coreweave.com"
default_s3_write_endpoint = "object.ord1.coreweave.com"
_s3_default_config_paths = (os.path.expanduser("~/.s3cfg"),)

__all__ = ["open_stream", "CAInfo", "TzrStream", "CURLStreamFile", "default_s3_read_endpoint",
           "default_s3_write_endpoint"]


class CAInfo:
    """TLS certificate handling (tensorizer's): a CA bundle file or folder,
    or allow_untrusted=True to skip verification."""

    def __init__(self, *, cacert=None, capath=None, allow_untrusted=False):
        given = [x for x in (cacert, capath) if x is not None]
        if allow_untrusted and given:
            raise ValueError("allow_untrusted cannot be combined with cacert or capath")
        if len(given) > 1:
            raise ValueError("give cacert or capath, not both")
        for p in given:
            if not os.path.exists(p):
                raise FileNotFoundError("certificate path does not exist: %s" % p)
        self.cacert = cacert
        self.capath = capath
        self.allow_untrusted = allow_untrusted


def _s3cfg(config_path):
    """(access_key, secret_key, host_base, use_https) from the first readable
    s3cmd config file, tensorizer's rule; Nones when there is none."""
    if config_path is not None and not os.path.exists(config_path):
        raise FileNotFoundError("Explicitly specified s3_config_path does not exist: %s" % (config_path,))
    paths = (config_path,) if config_path is not None else _s3_default_config_paths
    cfg = configparser.ConfigParser()
    for p in paths:
        if cfg.read((p,)):
            break
    else:
        return None, None, None, None
    if "default" not in cfg:
        raise ValueError("No default section in %s" % (p,))
    d = cfg["default"]
    https = {"True": True, "False": False}.get(d.get("use_https"))
    return d.get("access_key"), d.get("secret_key"), d.get("host_base"), https


def _endpoint(endpoint, allow_http, force_http):
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        return ("http://" if force_http else "https://") + endpoint
    scheme = scheme.lower()
    if scheme == "https":
        return "http://" + rest if force_http else endpoint
    if scheme == "http" and (force_http or allow_http):
        return endpoint
    raise ValueError("Non-HTTPS endpoint URLs are not allowed.")


def s3_settings(writing, access_key=None, secret_key=None, endpoint=None, config_path=None,
                force_http=None, region=None, certificate_handling=None):
    """The library's HTTP settings for an s3:// stream, resolved as
    tensorizer resolves them: the arguments; for a missing key, s3cmd's
    config file (its host_base and use_https too); "" for both keys means
    an anonymous request; then the endpoint from AWS_ENDPOINT_URL_S3 /
    AWS_ENDPOINT_URL, else CoreWeave's default. Keys still missing are
    left to the library's AWS chain (environment, ~/.aws files)."""
    if None in (access_key, secret_key):
        try:
            ak, sk, host, https = _s3cfg(config_path)
        except ValueError:
            ak = sk = host = https = None
        if access_key is None:
            access_key = ak
        if secret_key is None:
            secret_key = sk
        endpoint = endpoint or host
        if force_http is None and https is not None:
            force_http = not https
    allow_http = False
    if not endpoint:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
        allow_http = endpoint is not None
    if not endpoint:
        endpoint = default_s3_write_endpoint if writing else default_s3_read_endpoint
    s = {"endpoint": _endpoint(endpoint, allow_http, bool(force_http))}
    if access_key == "" and secret_key == "":
        s["anonymous"] = 1
    else:
        if access_key:
            s["access_key"] = access_key
        if secret_key:
            s["secret_key"] = secret_key
    if region:
        s["region"] = region
    s.update(_tls(certificate_handling))
    return s


def _tls(ca):
    if ca is None:
        return {}
    if not isinstance(ca, CAInfo):
        raise TypeError("certificate_handling must be None or a CAInfo, not %s" % type(ca).__name__)
    if ca.allow_untrusted:
        return {"insecure": 1}
    if ca.cacert:
        return {"ca_bundle": os.fsdecode(ca.cacert)}
    if ca.capath:
        raise ValueError("CAInfo(capath=...): libtzr takes a CA bundle file (cacert=...), not a folder")
    return {}


def http_options(settings, keep):
    """A tzr_http_options from a settings dict; `keep` holds its strings."""
    opt = _lib.http_options()
    for k, v in settings.items():
        if isinstance(v, str):
            v = v.encode()
            keep.append(v)
        setattr(opt, k, v)
    return opt


class TzrStream(io.RawIOBase):
    """An http(s):// or s3:// object as a binary file. Reading: seekable,
    each read a ranged GET (large ones split and fetched concurrently).
    Writing (s3:// only): sequential; the object appears at close() (a
    multipart upload, or one PUT for small ones), or never when the stream
    is closed after an exception in a `with` block."""

    def __init__(self, url, mode, settings):
        super().__init__()
        self.name = url
        self.mode = mode
        self._url = url
        self._settings = settings
        self._pos = 0
        self._handle = None
        self._keep = []
        self._given = False  # handed to a serializer, which owns the upload now
        opt = http_options(settings, self._keep)
        h = ctypes.c_void_p()
        if self.writable():
            check(lib.tzr_output_open_s3(ctypes.byref(h), _lib.path_arg(url), ctypes.byref(opt), 0))
            self._out = ctypes.cast(h, ctypes.POINTER(_lib.Output)).contents
        else:
            check(lib.tzr_source_open_url(ctypes.byref(h), _lib.path_arg(url), ctypes.byref(opt)))
            self._src = ctypes.cast(h, ctypes.POINTER(_lib.Source)).contents
        self._handle = h

    # -- io.RawIOBase
    def readable(self):
        return "r" in self.mode

    def writable(self):
        return "w" in self.mode or "a" in self.mode

    def seekable(self):
        return self.readable()

    def _live(self):
        if self.closed or self._handle is None:
            raise ValueError("I/O operation on closed stream %s" % self._url)
        return self._handle

    @property
    def size(self):
        self._live()
        return self._src.size if self.readable() else self._pos

    def tell(self):
        self._live()
        return self._pos

    def seek(self, pos, whence=io.SEEK_SET):
        self._live()
        if not self.seekable():
            raise io.UnsupportedOperation("an upload stream cannot seek")
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._src.size}[whence]
        if base + pos < 0:
            raise ValueError("negative seek position %d" % (base + pos))
        self._pos = base + pos
        return self._pos

    def readinto(self, b):
        h = self._live()
        if not self.readable():
            raise io.UnsupportedOperation("not readable")
        view = memoryview(b).cast("B")
        n = max(0, min(len(view), self._src.size - self._pos))
        if n:
            buf = (ctypes.c_char * n).from_buffer(view)
            check(self._src.read_at(h, ctypes.addressof(buf), n, self._pos))
        self._pos += n
        return n

    def readall(self):
        self._live()
        out = bytearray(max(0, self._src.size - self._pos))
        n = self.readinto(out)
        return bytes(out[:n])

    def write(self, b):
        h = self._live()
        if not self.writable():
            raise io.UnsupportedOperation("not writable")
        if self._given:
            raise ValueError("stream %s was handed to a serializer" % self._url)
        view = memoryview(b).cast("B")
        n = len(view)
        if n:  # the output copies what it is given into its part buffer
            buf = (ctypes.c_char * n).from_buffer_copy(view)
            check(self._out.pwrite_at(h, ctypes.addressof(buf), n, self._pos))
        self._pos += n
        return n

    def close(self):
        if self.closed:
            return
        try:
            self._finish(ok=True)
        finally:
            super().close()

    def __exit__(self, exc_type, *rest):
        if exc_type is not None and self.writable():
            self._finish(ok=False)  # an exception: nothing appears
        self.close()

    def __del__(self):
        try:
            self._finish(ok=False)
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass

    def _finish(self, ok):
        h, self._handle = self._handle, None
        if h is None:
            return
        if not self.readable():
            out = self._out
            if self._given:
                return  # the serializer's writer owns (and frees) it
            rc = out.finish(h) if ok else 0
            err = _lib.error(rc, self._url) if rc else None
            if not ok or rc:
                out.abort(h)
            out.destroy(h)
            if err is not None:
                raise err
        else:
            lib.tzr_source_free(h)

    # -- what the serializers take
    def _open_source(self):
        """A fresh source over the same object and settings (the stream's own
        position and source stay the stream's)."""
        self._live()
        if not self.readable():
            raise ValueError("%s was opened for writing (mode %r), not reading" % (self._url, self.mode))
        keep = []
        opt = http_options(self._settings, keep)
        h = ctypes.c_void_p()
        check(lib.tzr_source_open_url(ctypes.byref(h), _lib.path_arg(self._url), ctypes.byref(opt)))
        return Opened(h, self._url, keep)

    def _take_output(self):
        """The upload itself, for a writer that now owns it."""
        h = self._live()
        if not self.writable():
            raise ValueError("%s was opened for reading (mode %r), not writing" % (self._url, self.mode))
        if self._pos or self._given:
            raise ValueError("%s: a checkpoint must be written from byte 0 of a fresh upload stream" % self._url)
        self._given = True
        return Opened(h, self._url, [self])


CURLStreamFile = TzrStream  # the name tensorizer's callers check with isinstance


def open_stream(path_uri, mode="rb", s3_access_key_id=None, s3_secret_access_key=None, s3_endpoint=None,
                s3_config_path=None, buffer_size=None, force_http=None, *, begin=None, end=None,
                s3_region_name=None, s3_signature_version=None, certificate_handling=None):
    """Open a file path, http(s):// URL or s3:// URI (tensorizer's arguments
    and defaults; buffer_size and s3_signature_version are accepted and have
    no effect: the library sizes its own reads and always signs SigV4)."""
    local_only = hasattr(path_uri, "__fspath__")
    if isinstance(path_uri, int):
        return open(path_uri, mode, closefd=False)
    path_uri = os.fspath(path_uri)
    if isinstance(path_uri, bytes):
        path_uri = os.fsdecode(path_uri)
    scheme, sep, _ = path_uri.partition("://")
    scheme = scheme.lower() if sep and not local_only else None
    normalized = "".join(sorted(mode))
    if scheme in ("http", "https", "s3"):
        if begin is not None or end is not None:
            raise ValueError("begin/end ranges of URL streams are not supported by tzr; seek() instead")
    if scheme in ("http", "https"):
        if normalized != "br":
            raise ValueError('Only the mode "rb" is valid when opening http(s):// streams.')
        return TzrStream(path_uri, "rb", _tls(certificate_handling))
    if scheme == "s3":
        if normalized not in ("br", "bw", "+bw"):
            raise ValueError('Only the modes "rb", "wb" and "wb+" are valid when opening s3:// streams'
                             ' with tzr (an upload cannot be appended to).')
        writing = "w" in mode
        settings = s3_settings(writing, s3_access_key_id, s3_secret_access_key, s3_endpoint, s3_config_path,
                               force_http, s3_region_name, certificate_handling)
        return TzrStream(path_uri, "wb" if writing else "rb", settings)
    if scheme == "redis":
        raise NotImplementedError("redis:// streams are not supported by tzr")
    if "b" not in normalized:
        raise ValueError('Only binary modes ("rb", "wb", "wb+", etc.) are valid when opening local file streams.')
    if any(c in normalized for c in "wax"):
        d = os.path.dirname(path_uri)
        if d:
            os.makedirs(d, exist_ok=True)
    f = open(path_uri, mode, buffering=buffer_size if buffer_size is not None else io.DEFAULT_BUFFER_SIZE)
    if begin:
        f.seek(begin)
    return f
