"""tzr from Python as tensorizer's callers use it: file objects of every
kind both ways, tzr.stream_io (local, and s3:// against the Swift that
tests/python_streams_test.sh starts: TZR_TEST_S3 = "endpoint bucket"),
tensorizer's results (parameters, storages, keys), utils, torch_compat and
the `tensorizer` compatibility package. The oracle is tensorizer's own
golden files (tests/golden-torch): their manifest's hashes and their bytes.
One `PASS name` / `FAIL name: why` / `SKIP name: why` line per case."""
import errno
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

import tzr
from cases import Skip, case, finish, raw
from tzr import stream_io, torch_compat, utils

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GTORCH = os.path.join(ROOT, "tests", "golden-torch")
MANIFEST = json.load(open(os.path.join(GTORCH, "manifest.json")))
TWT = os.path.join(GTORCH, "twt_v1.tensors")
TWT_BYTES = open(TWT, "rb").read()
TMP = tempfile.mkdtemp(prefix="tzr-streams-")


def tmp(name):
    return os.path.join(TMP, name)


def expect_twt(d):
    """d (a deserializer of twt_v1) holds exactly what the manifest lists."""
    ents = MANIFEST["twt_v1.tensors"]["tensors"]
    got = {name: (idx, ty, t) for idx, ty, name, t in d.read_tensors()}
    assert len(got) == len(ents), (len(got), len(ents))
    for e in ents:
        idx, ty, t = got[e["path"]]
        assert (idx, ty) == (e["module_idx"], e["type"]), e["path"]
        assert list(t.shape) == e["shape"], (e["path"], t.shape)
        assert hashlib.sha256(raw(t)).hexdigest() == e["data_sha256"], e["path"]


def write_twt(target, **kw):
    """Rewrite twt_v1's tensors through a serializer on target (tensorizer's
    bytes are the oracle: the result must equal the golden file)."""
    src = tzr.TensorDeserializer(TWT, device="cpu")
    ser = tzr.TensorSerializer(target, **kw)
    for idx, ty, name, t in src.read_tensors():
        ser.write_tensor(idx, name, ty, t)
    ser.close()
    src.close()


class Keep(io.BytesIO):
    """A BytesIO whose bytes outlive close() (the serializer closes it, as
    tensorizer's does)."""

    def close(self):
        self.kept = self.getvalue()
        super().close()


class Seekable:
    """A file-like object with no descriptor and no readinto: read/write,
    seek and tell only."""

    def __init__(self, data=b"", fail_at=None, short=False):
        self.buf = bytearray(data)
        self.pos = 0
        self.closed = False
        self.fail_at = fail_at
        self.short = short

    def readable(self):
        return True

    def writable(self):
        return True

    def seekable(self):
        return True

    def seek(self, pos, whence=0):
        self.pos = pos if whence == 0 else (self.pos + pos if whence == 1 else len(self.buf) + pos)
        return self.pos

    def tell(self):
        return self.pos

    def read(self, n=-1):
        if self.fail_at is not None and self.pos + max(n, 0) > self.fail_at:
            raise OSError("the medium went away at byte %d" % self.fail_at)
        n = len(self.buf) - self.pos if n < 0 else n
        if self.short:
            n = min(n, 1000)
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += len(b)
        return b

    def write(self, b):
        b = bytes(b)
        if self.fail_at is not None and self.pos + len(b) > self.fail_at:
            raise OSError("no space left past byte %d" % self.fail_at)
        end = self.pos + len(b)
        if end > len(self.buf):
            self.buf.extend(b"\0" * (end - len(self.buf)))
        self.buf[self.pos:end] = b
        self.pos = end
        return len(b)

    def truncate(self, n):
        del self.buf[n:]

    def close(self):
        self.closed = True


class Stream(io.RawIOBase):
    """A non-seekable object (no descriptor) that reads or takes bytes in
    small pieces and fails with EIO/ENOSPC past fail_at."""

    def __init__(self, data=b"", fail_at=None):
        self.data, self.pos, self.fail_at, self.out = data, 0, fail_at, bytearray()

    def readable(self):
        return True

    def writable(self):
        return True

    def readinto(self, b):
        if self.fail_at is not None and self.pos >= self.fail_at:
            raise OSError(errno.EIO, "Input/output error")
        n = min(len(b), 4093, len(self.data) - self.pos)
        b[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n

    def write(self, b):
        if self.fail_at is not None and len(self.out) >= self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = min(len(b), 4093)  # a raw object may take part of what it is given
        self.out += b[:n]
        return n


def pipe_reader(data):
    """The read end of a pipe another thread fills with data."""
    r, w = os.pipe()

    def feed():
        with os.fdopen(w, "wb") as f:
            f.write(data)
    threading.Thread(target=feed, daemon=True).start()
    return os.fdopen(r, "rb")


# ------------------------------------------------------------------ reading
@case
def read_file_objects_of_every_kind():
    kinds = {
        "open_rb": lambda: open(TWT, "rb"),
        "open_unbuffered": lambda: open(TWT, "rb", buffering=0),
        "bytesio": lambda: io.BytesIO(TWT_BYTES),
        "buffered_bytesio": lambda: io.BufferedReader(io.BytesIO(TWT_BYTES)),
        "no_descriptor": lambda: Seekable(TWT_BYTES),
        "short_reads": lambda: Seekable(TWT_BYTES, short=True),
        "pipe": lambda: pipe_reader(TWT_BYTES),
    }
    for kind, make in kinds.items():
        for lazy in (False, True):
            f = make()
            d = tzr.TensorDeserializer(f, device="cpu", lazy_load=lazy)
            try:
                expect_twt(d)
            except AssertionError as e:
                raise AssertionError("%s lazy=%s: %s" % (kind, lazy, e))
            d.close()
            assert f.closed, "%s: tensorizer closes the file object at close()" % kind


@case
def read_descriptor_number_and_stream_closed_early():
    fd = os.open(TWT, os.O_RDONLY)
    try:
        expect_twt(tzr.TensorDeserializer(fd, device="cpu"))
        os.fstat(fd)  # a number is the caller's: left open
    finally:
        os.close(fd)
    # An eager load is done with the file: it is closed at once, and the
    # tensors stay readable after the caller's object is gone.
    f = open(TWT, "rb")
    d = tzr.TensorDeserializer(f, device="cpu")
    assert f.closed
    expect_twt(d)


@case
def read_refuses_text_closed_and_writeonly():
    cases = [(open(TWT, "r"), "text"), (open(tmp("w.bin"), "wb"), "not readable")]
    closed = open(TWT, "rb")
    closed.close()
    cases.append((closed, "closed"))
    for f, why in cases:
        try:
            tzr.TensorDeserializer(f, device="cpu")
        except ValueError as e:
            assert why in str(e), (why, e)
        else:
            raise AssertionError("accepted a %s file" % why)


@case
def read_truncated_and_failing_objects():
    cut = TWT_BYTES[:len(TWT_BYTES) - 100]
    for obj in (io.BytesIO(cut), Seekable(cut), pipe_reader(cut)):
        try:
            tzr.TensorDeserializer(obj, device="cpu")
        except tzr.TzrError as e:
            assert "byte" in str(e) or "offset" in str(e), e
        else:
            raise AssertionError("a truncated %s loaded" % type(obj).__name__)
    # An object that raises mid-read: the library's error, caused by it.
    try:
        tzr.TensorDeserializer(Seekable(TWT_BYTES, fail_at=len(TWT_BYTES) - 50), device="cpu")
    except tzr.TzrError as e:
        assert isinstance(e.__cause__, OSError) and "went away" in str(e), (e, e.__cause__)
    else:
        raise AssertionError("a failing object loaded")
    # The same from a non-seekable object (copied in order first), eager or
    # lazy, and an object whose read() gives text: a TzrIOError (an OSError)
    # naming the object and the byte, caused by the object's own error.
    for lazy in (False, True):
        try:
            tzr.TensorDeserializer(Stream(TWT_BYTES, fail_at=len(TWT_BYTES) // 2), device="cpu", lazy_load=lazy)
        except tzr.TzrIOError as e:
            assert isinstance(e.__cause__, OSError) and "<Stream>: reading failed at byte" in str(e), (e, e.__cause__)
        else:
            raise AssertionError("a failing non-seekable object loaded (lazy=%s)" % lazy)
    text = Seekable(TWT_BYTES)
    text.read = lambda n=-1: "|TZR|"
    try:
        tzr.TensorDeserializer(text, device="cpu")
    except tzr.TzrIOError as e:
        assert isinstance(e.__cause__, TypeError) and "at byte 0" in str(e), (e, e.__cause__)
    else:
        raise AssertionError("read() giving str was taken")


@case
def tensorizer_results_parameters_and_own_storages():
    d = tzr.TensorDeserializer(os.path.join(GTORCH, "tmod_v2.tensors"), device="cpu")
    for name, t in d.items():
        assert isinstance(t, torch.nn.Parameter), name
        assert t.requires_grad == (t.is_floating_point() or t.is_complex()), name
        nbytes = t.numel() * t.element_size()
        assert t.storage().nbytes() == nbytes, (name, t.storage().nbytes(), nbytes)
    small = min(d.values(), key=lambda t: t.numel())
    buf = io.BytesIO()
    torch.save(small.detach(), buf)
    assert len(buf.getvalue()) < 4096, len(buf.getvalue())


@case
def dtype_device_and_kwargs_as_tensorizer():
    d = tzr.TensorDeserializer(TWT, device=torch.device("cpu"), dtype=torch.float16, num_readers=4,
                               plaid_mode=True, verify_hash=True)
    for _, _, name, t in d.read_tensors():
        assert t.dtype in (torch.float16, torch.bool), (name, t.dtype)
    # A device other than cpu/cuda: loaded into host memory, then moved there.
    d = tzr.TensorDeserializer(TWT, device="meta")
    assert all(t.is_meta for t in d.values())
    for bad, err in (({"num_readers": "bar"}, TypeError), ({"num_readers": 0}, ValueError),
                     ({"encryption": "key"}, TypeError)):
        try:
            tzr.TensorDeserializer(TWT, device="cpu", **bad)
        except err:
            pass
        else:
            raise AssertionError("accepted %r" % (bad,))


@case
def verify_module_against_file():
    d = tzr.TensorDeserializer(TWT, device="cpu")
    m = torch.nn.Module()
    for _, _, name, t in d.read_tensors():
        mod = m
        *path, attr = name.split(".")
        for p in path:
            if not hasattr(mod, p):
                mod.add_module(p, torch.nn.Module())
            mod = getattr(mod, p)
        mod.register_buffer(attr, t.detach().clone())
    ok, results = d.verify_module(m)
    assert ok and len(results) == len(MANIFEST["twt_v1.tensors"]["tensors"]), results
    first = results[0][0]
    with torch.no_grad():
        m.get_buffer(first).view(-1)[0] += 1
    ok, results = d.verify_module(m)
    assert not ok and dict(results)[first] is False and sum(not r for _, r in results) == 1, results


@case
def replaced_tensor_hash_records_are_honoured():
    # Code written for tensorizer may replace serialization.TensorHash (the
    # record each stored hash is read into); a record that no longer equals
    # the data's hash fails a verified load, eager, lazy and in place.
    from unittest import mock
    from tzr import serialization
    own = serialization.TensorHash

    def zeroed(*a, **k):
        r = own(*a, **k)
        r.hash = bytes(len(r.hash))
        return r

    class Same(own):
        pass
    with mock.patch.object(serialization, "TensorHash", zeroed):
        for verify in (True, "crc32"):
            try:
                tzr.TensorDeserializer(TWT, device="cpu", verify_hash=verify)
            except tzr.HashMismatchError as e:
                assert "expected record" in str(e) and "byte" in str(e), e
            else:
                raise AssertionError("a zeroed record passed (verify_hash=%r)" % verify)
        lazy = tzr.TensorDeserializer(TWT, device="cpu", lazy_load=True, verify_hash=True)
        name = next(iter(lazy))
        try:
            lazy[name]
        except tzr.HashMismatchError:
            pass
        else:
            raise AssertionError("a lazy lookup passed a zeroed record")
        expect_twt(tzr.TensorDeserializer(TWT, device="cpu"))  # no verification asked: no records
    with mock.patch.object(serialization, "TensorHash", Same):
        expect_twt(tzr.TensorDeserializer(TWT, device="cpu", verify_hash=True))
    assert serialization.TensorHash is own


# ------------------------------------------------------------------ writing
@case
def write_file_objects_of_every_kind():
    for mode in ("wb", "wb+", "r+b"):
        p = tmp("w_%s.tensors" % mode.replace("+", "p"))
        open(p, "wb").close()
        f = open(p, mode)
        write_twt(f)
        assert f.closed and open(p, "rb").read() == TWT_BYTES, mode
    f = tempfile.NamedTemporaryFile(dir=TMP, delete=False)
    write_twt(f)
    assert open(f.name, "rb").read() == TWT_BYTES
    k = Keep()
    write_twt(k)
    assert k.kept == TWT_BYTES
    s = Seekable()
    write_twt(s)
    assert bytes(s.buf) == TWT_BYTES
    r, w = os.pipe()
    got = []
    t = threading.Thread(target=lambda: got.append(os.fdopen(r, "rb").read()))
    t.start()
    write_twt(os.fdopen(w, "wb"))
    t.join(60)
    assert got and got[0] == TWT_BYTES, len(got[0]) if got else None
    fd = os.open(tmp("w_fd.tensors"), os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    write_twt(fd)
    os.close(fd)
    assert open(tmp("w_fd.tensors"), "rb").read() == TWT_BYTES


@case
def write_refuses_text_readonly_append_and_offsets():
    p = tmp("refuse.tensors")
    open(p, "wb").close()
    closed = open(p, "wb")
    closed.close()
    for f, why in ((open(p, "w"), "text"), (open(p, "rb"), "not writable"), (open(p, "ab"), "append"),
                   (closed, "closed")):
        try:
            tzr.TensorSerializer(f)
        except ValueError as e:
            assert why in str(e), (why, e)
        else:
            raise AssertionError("accepted a %s file" % why)
    f = open(p, "wb+")
    f.write(b"x" * 10)
    try:
        tzr.TensorSerializer(f)
    except ValueError as e:
        assert "byte 10" in str(e), e
    else:
        raise AssertionError("wrote from the middle of a file")


def _write_failing(target):
    src = tzr.TensorDeserializer(TWT, device="cpu")
    try:
        write_twt(target)
    except tzr.TzrError as e:
        return e
    finally:
        src.close()
    raise AssertionError("a failing write succeeded")


@case
def write_failures_leave_nothing_that_reads():
    # A file object that runs out of room midway: an error caused by its own,
    # and the object cut back to what it held (empty).
    s = Seekable(fail_at=len(TWT_BYTES) // 2)
    e = _write_failing(s)
    assert isinstance(e.__cause__, OSError) and "no space" in str(e), (e, e.__cause__)
    assert len(s.buf) == 0, len(s.buf)
    # A real file whose disk fills (RLIMIT_FSIZE in a child): EFBIG on the
    # descriptor, the file truncated back to empty.
    p = tmp("full.tensors")
    code = ("import resource, signal, sys, tzr\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (%d, %d))\n"
            "src = tzr.TensorDeserializer(%r, device='cpu')\n"
            "f = open(%r, 'wb+')\n"
            "ser = tzr.TensorSerializer(f)\n"
            "try:\n"
            "    for idx, ty, name, t in src.read_tensors(): ser.write_tensor(idx, name, ty, t)\n"
            "    ser.close()\n"
            "except tzr.TzrError as e:\n"
            "    print(type(e).__name__, e); sys.exit(3)\n") % (len(TWT_BYTES) // 2, len(TWT_BYTES) // 2, TWT, p)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr[-500:])
    assert "TzrIOError" in r.stdout and "write" in r.stdout, r.stdout
    assert os.path.getsize(p) == 0, os.path.getsize(p)
    # A device that is always full (/dev/full: seekable, no regular file).
    e = _write_failing(open("/dev/full", "wb"))
    assert isinstance(e, tzr.TzrIOError) and e.__cause__.errno == errno.ENOSPC, (e, e.__cause__)
    assert "/dev/full: writing" in str(e) and "at byte" in str(e), e
    # A non-seekable object filling up while the finished checkpoint is
    # copied to it: the error names it and the byte reached; what it took is
    # a cut checkpoint, which fails to load rather than reading as valid.
    st = Stream(fail_at=len(TWT_BYTES) - 4096)
    e = _write_failing(st)
    assert isinstance(e, tzr.TzrIOError) and e.__cause__.errno == errno.ENOSPC, (e, e.__cause__)
    assert "<Stream>: writing failed at byte %d" % len(st.out) in str(e), e
    assert bytes(st.out) == TWT_BYTES[:len(st.out)], "pieces lost or reordered"
    whole = Stream()
    write_twt(whole)
    assert bytes(whole.out) == TWT_BYTES, "a raw object taking part of each write lost bytes"
    try:
        tzr.TensorDeserializer(io.BytesIO(bytes(st.out)), device="cpu")
    except tzr.TzrError:
        pass
    else:
        raise AssertionError("the cut copy loaded as a checkpoint")
    # An object whose write() takes nothing: an error, not a spin (in a
    # child, so that a regression times out instead of hanging the suite).
    code = ("import io, sys, torch, tzr\n"
            "class Stuck(io.RawIOBase):\n"
            "    def writable(self): return True\n"
            "    def seekable(self): return True\n"
            "    def seek(self, pos, whence=0): return 0\n"
            "    def tell(self): return 0\n"
            "    def write(self, b): return 0\n"
            "s = tzr.TensorSerializer(Stuck())\n"
            "try:\n"
            "    s.write_tensor(0, 'w', tzr.TensorType.PARAM, torch.ones(4)); s.close()\n"
            "except tzr.TzrIOError as e:\n"
            "    print(e); sys.exit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "took no bytes" in r.stdout, (r.returncode, r.stdout, r.stderr[-500:])


@case
def encryption_key_from_string():
    e = tzr.EncryptionParams.from_string("correct horse", opslimit=1, memlimit=8192)
    key = e.key
    assert isinstance(key, bytes) and len(key) == 32 and e.key == key
    p = tmp("pw.tensors")
    write_twt(p, encryption=e)
    # The derived key opens the file, as the password does; another does not.
    expect_twt(tzr.TensorDeserializer(p, device="cpu", encryption=tzr.DecryptionParams.from_key(key)))
    expect_twt(tzr.TensorDeserializer(p, device="cpu", encryption=tzr.DecryptionParams.from_string("correct horse")))
    try:
        tzr.TensorDeserializer(p, device="cpu", encryption=tzr.DecryptionParams.from_key(bytes(32)))
    except tzr.CryptographyError:
        pass
    else:
        raise AssertionError("a wrong key decrypted")
    for bad in ("", b""):
        try:
            tzr.EncryptionParams.from_string(bad)
        except ValueError:
            pass
        else:
            raise AssertionError("an empty password was taken")


# ------------------------------------------------------------------ stream_io
@case
def open_stream_local_paths():
    p = tmp("a/b/c/model.tensors")
    with stream_io.open_stream(p, "wb+") as f:  # parent folders made, as tensorizer does
        write_twt(f)
    with stream_io.open_stream(p, "rb") as f:
        expect_twt(tzr.TensorDeserializer(f, device="cpu"))
    import pathlib
    with stream_io.open_stream(pathlib.Path(tmp("x/key.bin")), "wb+") as f:
        f.write(b"k" * 32)
    assert open(tmp("x/key.bin"), "rb").read() == b"k" * 32
    for mode in ("foo", "r", "w"):
        try:
            stream_io.open_stream(tmp("m.bin"), mode)
        except ValueError:
            pass
        else:
            raise AssertionError("mode %r accepted" % mode)
    for uri, mode in (("http://127.0.0.1:1/x", "wb"), ("s3://b/k", "ab")):
        try:
            stream_io.open_stream(uri, mode)
        except ValueError:
            pass
        else:
            raise AssertionError("%s %s accepted" % (uri, mode))


@case
def s3_settings_follow_tensorizer_rules():
    cfg = tmp("s3cfg")
    with open(cfg, "w") as f:
        f.write("[default]\naccess_key = AK\nsecret_key = SK\nhost_base = 127.0.0.1:9\nuse_https = False\n")
    s = stream_io.s3_settings(False, config_path=cfg)
    assert s == {"endpoint": "http://127.0.0.1:9", "access_key": "AK", "secret_key": "SK"}, s
    s = stream_io.s3_settings(True, "A", "B", config_path=cfg)
    assert s["endpoint"] == "https://object.ord1.coreweave.com" and s["access_key"] == "A", s
    s = stream_io.s3_settings(False, "", "", "https://e.example")
    assert s == {"endpoint": "https://e.example", "anonymous": 1}, s
    try:
        stream_io.s3_settings(False, None, None, "http://plain.example", config_path=tmp("absent"))
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("a missing explicit config was ignored")
    try:
        stream_io.s3_settings(False, "a", "b", "http://plain.example")
    except ValueError:
        pass
    else:
        raise AssertionError("a plain-http endpoint was taken without force_http")
    assert stream_io.s3_settings(False, "a", "b", "http://plain.example", force_http=True)["endpoint"] == \
        "http://plain.example"


def s3():
    v = os.environ.get("TZR_TEST_S3")
    if not v:
        raise Skip("no S3 server (tests/python_streams_test.sh starts Swift)")
    endpoint, bucket = v.split()
    return endpoint, bucket


# Swift listens on plain http: tensorizer's rule wants force_http for that.
CREDS = {"s3_access_key_id": "test:tester", "s3_secret_access_key": "testing", "force_http": True}


@case
def s3_streams_both_ways():
    endpoint, bucket = s3()
    uri = "s3://%s/streams/twt.tensors" % bucket
    with stream_io.open_stream(uri, "wb+", s3_endpoint=endpoint, **CREDS) as f:
        assert isinstance(f, stream_io.TzrStream)
        write_twt(f)
        f.close()  # twice, as vLLM does
    with stream_io.open_stream(uri, "rb", s3_endpoint=endpoint, **CREDS) as f:
        assert f.read(5) == b"|TZR|" and f.tell() == 5
        f.seek(0)
        assert f.read() == TWT_BYTES
    with stream_io.open_stream(uri, "rb", s3_endpoint=endpoint, **CREDS) as f:
        d = tzr.TensorDeserializer(f, device="cpu")
        expect_twt(d)
        assert f.closed
    # Small objects as vLLM writes its key and config files.
    key = "s3://%s/streams/dir/key.bin" % bucket
    with stream_io.open_stream(key, "wb+", s3_endpoint=endpoint, **CREDS) as f:
        f.write(b"0123456789" * 4)
    with stream_io.open_stream(key, "rb", s3_endpoint=endpoint, **CREDS) as f:
        assert f.read() == b"0123456789" * 4
    # An exception inside the with block: nothing appears.
    gone = "s3://%s/streams/never.bin" % bucket
    try:
        with stream_io.open_stream(gone, "wb", s3_endpoint=endpoint, **CREDS) as f:
            f.write(b"partial")
            raise KeyError("stop")
    except KeyError:
        pass
    try:
        stream_io.open_stream(gone, "rb", s3_endpoint=endpoint, **CREDS)
    except tzr.TzrFileNotFoundError:
        pass
    else:
        raise AssertionError("an aborted upload appeared")


@case
def s3_settings_are_per_call():
    # Two streams with two credential sets in one process, no environment:
    # the wrong secret fails, the right one works, before and after.
    endpoint, bucket = s3()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        assert k not in os.environ, k
    uri = "s3://%s/streams/twt.tensors" % bucket
    good = stream_io.open_stream(uri, "rb", s3_endpoint=endpoint, **CREDS)
    try:
        stream_io.open_stream(uri, "rb", s3_endpoint=endpoint, s3_access_key_id="test:tester",
                              s3_secret_access_key="wrong", force_http=True)
    except tzr.TzrIOError as e:
        assert "403" in str(e) or "Signature" in str(e), e
    else:
        raise AssertionError("a wrong secret was accepted")
    expect_twt(tzr.TensorDeserializer(good, device="cpu"))
    cfg = tmp("s3cfg_swift")
    host = endpoint.split("://", 1)[1]
    with open(cfg, "w") as f:
        f.write("[default]\naccess_key = test:tester\nsecret_key = testing\nhost_base = %s\nuse_https = False\n"
                % host)
    with stream_io.open_stream(uri, "rb", s3_config_path=cfg) as f:
        expect_twt(tzr.TensorDeserializer(f, device="cpu", lazy_load=True))


# ------------------------------------------------------------------ utils
@case
def utils_as_tensorizer_prints_them():
    cb = utils.convert_bytes
    want = {0: "0.0 bytes", 999: "999.0 bytes", 1000: "1.0 KB", 1500: "1.5 KB", 2.976e9: "3.0 GB",
            1e18: "1000.0 PB"}
    for n, s in want.items():
        assert cb(n) == s, (n, cb(n), s)
    assert cb(1536, decimal=False) == "1.5 KiB", cb(1536, decimal=False)
    m = utils.get_mem_usage()
    assert re.fullmatch(r"CPU: \(maxrss: [\d,]+MiB F: [\d,]+MiB\)", m), m
    # Records in bytes, as tensorizer's (callers size work by .free).
    cpu = utils.CPUMemoryUsage.now()
    kib = int(open("/proc/meminfo").read().split("MemTotal:")[1].split()[0])
    assert 0 < cpu.free <= kib << 10 and cpu.maxrss >= 1 << 20, (cpu.free, cpu.maxrss, kib)
    assert str(cpu) == "CPU: (maxrss: {:,}MiB F: {:,}MiB)".format(cpu.maxrss >> 20, cpu.free >> 20)


@case
def no_init_or_tensor_builds_on_meta():
    real_empty = torch.empty
    with utils.no_init_or_tensor():
        lin = torch.nn.Linear(300, 200)
        emb = torch.nn.Embedding(10, 4)
    assert lin.weight.is_meta and emb.weight.is_meta
    assert torch.empty is real_empty and not torch.nn.Linear(2, 2).weight.is_meta
    m = utils.no_init_or_tensor(lambda: torch.nn.LayerNorm(8))
    assert m.weight.is_meta
    try:
        utils.no_init_or_tensor(3)
    except TypeError:
        pass
    else:
        raise AssertionError("a non-callable was taken")


# ------------------------------------------------------------------ torch_compat
@case
def torch_compat_round_trip():
    x = torch.arange(20, dtype=torch.float32)
    m = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.BatchNorm1d(3))
    obj = {"model": m, "view": x[4:9], "whole": x, "ints": torch.tensor([7, -8], dtype=torch.int64),
           "empty": torch.zeros(0), "nested": [x[::2], {"half": torch.ones(3, dtype=torch.float16)}]}
    p = tmp("obj.pt")
    with torch_compat.tensorizer_saving():
        torch.save(obj, p)
    assert torch.save is torch_compat._orig_save, "torch.save left patched"
    # The tensor bytes live in the sidecar, tensorizer's own format.
    assert os.path.getsize(p) < 8192 and os.path.exists(p + ".tensors"), os.path.getsize(p)
    side = tzr.TensorDeserializer(p + ".tensors", device="cpu")
    assert any(raw(t) == raw(x) for t in side.values())
    side.close()
    # Without the context the pickle cannot be read alone.
    try:
        torch.load(p)
    except Exception:  # noqa: BLE001 (torch says so in its own words)
        pass
    else:
        raise AssertionError("plain torch.load read a sidecar pickle")
    with torch_compat.tensorizer_loading(device="cpu"):
        o = torch.load(p)
    assert torch.load is torch_compat._orig_load
    assert torch.equal(o["view"], x[4:9]) and torch.equal(o["whole"], x) and torch.equal(o["nested"][0], x[::2])
    assert o["view"].data_ptr() == o["whole"].data_ptr() + 16, "views share their storage again"
    assert o["ints"].tolist() == [7, -8] and o["nested"][1]["half"].dtype == torch.float16
    assert torch.equal(o["model"][0].weight, m[0].weight) and torch.equal(o["model"][1].running_var, m[1].running_var)
    # A callable names the sidecar; a BytesIO without one is plain torch.
    where = tmp("elsewhere.tensors")
    with torch_compat.tensorizer_saving(lambda f: where):
        torch.save({"x": x}, tmp("named.pt"))
    assert os.path.exists(where) and not os.path.exists(tmp("named.pt.tensors"))
    with torch_compat.tensorizer_loading(lambda f: where, device="cpu"):
        assert torch.equal(torch.load(tmp("named.pt"))["x"], x)
    buf = io.BytesIO()
    with torch_compat.tensorizer_saving():
        torch.save({"x": x}, buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf)["x"], x)


@case
def torch_compat_subclassed_pickler():
    # torch 2's torch.save subclasses the pickle module's Pickler and defines
    # persistent_id there (torch 1.13 assigns it on the instance, which the
    # case above covers); storages must still go to the sidecar first, and
    # everything else to torch's hook. The same for persistent_load.
    seen = []

    class Torch2Pickler(torch_compat._PICKLE.Pickler):
        def persistent_id(self, obj):
            seen.append(type(obj).__name__)
            return ("theirs", 7) if obj == "marked" else None

    x = torch.arange(6, dtype=torch.float32)
    side = tmp("subclassed.tensors")
    buf = io.BytesIO()
    token = torch_compat._sidecar.set(side)
    try:
        Torch2Pickler(buf, protocol=2).dump({"s": x.storage(), "m": "marked"})
    finally:
        torch_compat._sidecar.reset(token)
    assert "str" in seen and not any("Storage" in n for n in seen), seen
    d = tzr.TensorDeserializer(side, device="cpu")
    assert [raw(t) for t in d.values()] == [raw(x)]
    d.close()
    loaded = []

    class Torch2Unpickler(torch_compat._PICKLE.Unpickler):
        def persistent_load(self, pid):
            loaded.append(pid)
            return "marked"

    buf.seek(0)
    token = torch_compat._sidecar.set(side)
    try:
        o = Torch2Unpickler(buf).load()
    finally:
        torch_compat._sidecar.reset(token)
    assert loaded == [("theirs", 7)] and o["m"] == "marked", loaded
    assert torch.equal(torch.tensor([], dtype=torch.float32).set_(o["s"]), x)


@case
def torch_compat_only_this_thread():
    # Another thread's torch.save during a saving context is plain torch.
    x = torch.ones(4)
    done = threading.Event()
    go = threading.Event()
    other = tmp("other.pt")

    def elsewhere():
        go.wait(30)
        torch.save({"x": x}, other)
        done.set()
    t = threading.Thread(target=elsewhere)
    t.start()
    with torch_compat.tensorizer_saving():
        go.set()
        done.wait(30)
        torch.save({"x": x}, tmp("mine.pt"))
    t.join(30)
    assert not os.path.exists(other + ".tensors") and os.path.exists(tmp("mine.pt.tensors"))
    assert torch.equal(torch.load(other)["x"], x)


# ------------------------------------------------------------------ the compatibility package
# vLLM's tensorizer loader, in the calls it makes (read for this test from
# vllm/model_executor/model_loader/tensorizer.py; none of its code is here):
# its eight imports at once; a key file written and read back through
# open_stream; per-rank files named by a %03d template, saved with
# open_stream("wb+") + TensorSerializer + write_module (a meta marker
# parameter included), the stream closed by the serializer and again by
# the with block; artifact files written into folders that do not exist
# yet; `with open_stream(uri): pass` as its download check; a lazy `in`
# for the marker; a state-dict iterator over items(); and the load itself:
# a model built on meta, load_into_module with a dtype cast inside a with
# block, total_tensor_bytes read after the block closed it, close() again.
VLLM_FLOW = r"""
import json, os, sys, torch
import tzr.compat; tzr.compat.enable()
from tensorizer import DecryptionParams, EncryptionParams, TensorDeserializer, TensorSerializer
from tensorizer.stream_io import open_stream
from tensorizer.utils import convert_bytes, get_mem_usage, no_init_or_tensor
import tensorizer, tensorizer.serialization
assert tensorizer.__tzr__ and tensorizer.serialization.TensorSerializer is TensorSerializer
base, kw = sys.argv[1].rstrip("/"), json.loads(sys.argv[2])
at = lambda *parts: "/".join((base,) + parts)
torch.manual_seed(0)
def build(device=None):
    return torch.nn.Sequential(torch.nn.Embedding(50, 16, device=device), torch.nn.Linear(16, 16, device=device),
                               torch.nn.LayerNorm(16, device=device))
def mark(m):
    m.register_parameter("vllm_tensorized_marker",
                         torch.nn.Parameter(torch.tensor((1,), device="meta"), requires_grad=False))
    return m
keyfile = at("keys", "model.key")
key = EncryptionParams.random()
with open_stream(keyfile, mode="wb+", **kw) as s:
    s.write(key.key)
template = at("model", "rank-%03d.tensors")
ranks = [mark(build()) for _ in range(2)]
for rank, m in enumerate(ranks):
    with open_stream(template % rank, mode="wb+", **kw) as stream:
        ser = TensorSerializer(stream, encryption=key)
        ser.write_module(m)
        ser.close()
    with open_stream(at("model", "config.json"), mode="wb+", **kw) as s:
        s.write(json.dumps({"rank": rank}).encode())
with open_stream(at("model", "config.json"), **kw) as s:
    assert json.loads(s.read().decode()) == {"rank": 1}
with open_stream(template % 1, **kw):
    pass
with open_stream(keyfile, **kw) as s:
    dec = DecryptionParams.from_key(s.read())
lazy = TensorDeserializer(open_stream(template % 1, **kw), encryption=dec, verify_hash=None, num_readers=None,
                          lazy_load=True)
assert ".vllm_tensorized_marker" in lazy and "vllm_tensorized_marker" not in lazy
assert ".0.weight" not in lazy and "0.weight" in lazy and lazy._nloaded == 0  # lookups load nothing
lazy.close()
stream = open_stream(template % 0, **kw)
with TensorDeserializer(stream, verify_hash=None, encryption=dec, num_readers=None, device="cpu") as state:
    got = dict(state.items())
want = dict(ranks[0].state_dict())
# write_module names a root parameter ".name" (tensorizer's naming)
assert set(got) == {"." + n if n == "vllm_tensorized_marker" else n for n in want}, (set(got), set(want))
for n, t in want.items():
    if not t.is_meta:
        assert torch.equal(got[n], t), n
for rank, m in enumerate(ranks):
    with no_init_or_tensor():
        model = mark(build())
    assert model[1].weight.is_meta
    before = get_mem_usage()
    with open_stream(template % rank, mode="rb", **kw) as stream, \
            TensorDeserializer(stream, dtype=torch.float16, device="cpu", encryption=dec, num_readers=None,
                               verify_hash=True) as d:
        d.load_into_module(model)
    total = d.total_tensor_bytes
    d.close()
    assert total == sum(t.numel() * t.element_size() for t in m.state_dict().values() if not t.is_meta), total
    assert not any(t.is_meta for t in model.state_dict().values())
    assert model[1].weight.dtype == torch.float16 and torch.equal(model[1].weight, m[1].weight.half())
    assert isinstance(model[1].weight, torch.nn.Parameter) and model[1].weight.requires_grad
    del model.vllm_tensorized_marker
lora = {"a.lora_A.weight": torch.randn(4, 16), "a.lora_B.weight": torch.randn(16, 4)}
with open_stream(at("lora", "adapter_config.json"), mode="wb+", **kw) as f:
    f.write(json.dumps({"r": 4}).encode("utf-8"))
with open_stream(at("lora", "adapter_model.tensors"), mode="wb+", **kw) as f:
    ser = TensorSerializer(f)
    ser.write_state_dict(lora)
    ser.close()
back = TensorDeserializer(open_stream(at("lora", "adapter_model.tensors"), **kw), device="cpu")
assert set(back) == set(lora) and all(torch.equal(back[k], v) for k, v in lora.items())
print(convert_bytes(total), convert_bytes(total / 0.5))
"""


def run_vllm_flow(base, **stream_kwargs):
    r = subprocess.run([sys.executable, "-c", VLLM_FLOW, base, json.dumps(stream_kwargs)], capture_output=True,
                       text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path[:1] + [os.environ.get("PYTHONPATH", "")])))
    assert r.returncode == 0, r.stderr[-1500:]
    assert re.fullmatch(r"[\d.]+ KB [\d.]+ KB\n", r.stdout), r.stdout


@case
def compat_package_runs_vllm_loader_local():
    run_vllm_flow(tmp("vllm"))
    for d in ("keys", "model", "lora"):  # folders made as the files were opened
        assert os.path.isdir(tmp(os.path.join("vllm", d))), d
    assert sorted(os.listdir(tmp("vllm/model"))) == ["config.json", "rank-000.tensors", "rank-001.tensors"]


@case
def compat_package_runs_vllm_loader_s3():
    endpoint, bucket = s3()
    run_vllm_flow("s3://%s/vllm" % bucket, s3_endpoint=endpoint, **CREDS)


@case
def compat_package_is_opt_in():
    r = subprocess.run([sys.executable, "-c", "import tzr, tensorizer"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", "")))
    assert r.returncode != 0 and "No module named 'tensorizer'" in r.stderr, (r.returncode, r.stderr[-300:])
    import tzr.compat
    r = subprocess.run([sys.executable, "-c", "import tensorizer, sys; print(tensorizer.__tzr__)"],
                       capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=tzr.compat.PATH + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert r.stdout.strip() == "True", r.stderr[-300:]


# ------------------------------------------------------------------ arguments (issue 21, defect 11)
@case
def arguments_checked_before_c():
    p = tmp("zero_d.tensors")
    with tzr.TensorSerializer(p) as s:
        s.write_tensor(0, "scalar", tzr.TensorType.STATE_DICT, np.array(3.0))
        s.write_tensor(0, "fortran", tzr.TensorType.STATE_DICT, np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    d = tzr.TensorDeserializer(p, device="cpu")
    assert tuple(d["scalar"].shape) == () and float(d["scalar"]) == 3.0, d["scalar"].shape
    assert d["fortran"].tolist() == [[0, 1, 2], [3, 4, 5]]
    d.close()
    bad = [
        (ValueError, lambda: tzr.TensorDeserializer(tmp("a\0b.tensors"), device="cpu")),
        (ValueError, lambda: tzr.TensorSerializer(tmp("a\0b.tensors"))),
        (ValueError, lambda: tzr.load_rank(tmp("m\0.json"), 0, 1)),
        (ValueError, lambda: tzr.load_rank(tmp("m.json"), 2**32 + 1, 2**32 + 2)),
        (ValueError, lambda: tzr.load_rank(tmp("m.json"), 2, 2)),
        (ValueError, lambda: tzr.load_rank(tmp("m.json"), -1, 2)),
        (TypeError, lambda: tzr.load_rank(tmp("m.json"), 0.5, 2)),
        (ValueError, lambda: tzr.ShardWriter(tmp("sw"), 0, 2**31)),
        (ValueError, lambda: stream_io.open_stream("s3://b/k\0x", "rb", "", "", "https://e.example")),
    ]
    for err, call in bad:
        try:
            call()
        except err:
            pass
        else:
            raise AssertionError("accepted: %s" % call.__code__.co_consts)
    with tzr.TensorSerializer(tmp("idx.tensors")) as s:
        for idx in (65536, -1, 2**32):
            try:
                s.write_tensor(idx, "t", tzr.TensorType.PARAM, torch.zeros(1))
            except ValueError:
                pass
            else:
                raise AssertionError("module index %d accepted" % idx)
        s.write_tensor(65535, "t", tzr.TensorType.PARAM, torch.zeros(1))
    assert next(tzr.TensorDeserializer(tmp("idx.tensors"), device="cpu").read_tensors())[0] == 65535


@case
def sigterm_leaves_no_temporary():
    # A writer killed by SIGTERM mid-write: its temporary file is removed,
    # and the target never appears (issue 21, defect 13).
    out = tmp("killed/model.tensors")
    os.makedirs(os.path.dirname(out))
    code = ("import sys, time, torch, tzr\n"
            "s = tzr.TensorSerializer(sys.argv[1])\n"
            "s.write_tensor(0, 'w', tzr.TensorType.PARAM, torch.ones(1 << 20))\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code, out], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        assert any(n.endswith(".tmp") for n in os.listdir(os.path.dirname(out))), "no temporary while writing"
        p.terminate()
        rc = p.wait(60)
    finally:
        p.kill()
    assert rc == -15, rc
    assert os.listdir(os.path.dirname(out)) == [], os.listdir(os.path.dirname(out))


shutil.rmtree(TMP, ignore_errors=True)
finish()
