"""tensorizer dtype strings <-> torch / numpy dtypes (format notes §4.2)."""
import os

import numpy as np

torch = None
if not os.environ.get("TZR_NO_TORCH"):
    try:
        import torch
    except ImportError:  # the same calls then give numpy arrays
        torch = None

# numpy dtype strings tensorizer writes for the types numpy knows.
_NUMPY = ["<f2", "<f4", "<f8", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|b1", "<c8", "<c16"]

if torch is not None:
    _TORCH_BY_STR = {
        "<f2": torch.float16, "<f4": torch.float32, "<f8": torch.float64, "|i1": torch.int8,
        "<i2": torch.int16, "<i4": torch.int32, "<i8": torch.int64, "|u1": torch.uint8, "|b1": torch.bool,
        "<c8": torch.complex64, "<c16": torch.complex128,
    }
    _STR_BY_TORCH = {v: k for k, v in _TORCH_BY_STR.items()}


def split(dtype_bytes):
    """(numpy part, torch part or None) of a stored dtype string."""
    s = dtype_bytes.decode("utf-8")
    if "\0" in s:
        a, b = s.split("\0", 1)
        return a, b
    return s, None


def to_torch(dtype_bytes):
    """torch dtype for a stored dtype string, or raise TypeError."""
    np_part, torch_part = split(dtype_bytes)
    if torch_part is not None:
        name = torch_part[len("torch."):] if torch_part.startswith("torch.") else None
        dt = getattr(torch, name, None) if name else None
        if not isinstance(dt, torch.dtype):
            raise TypeError("dtype %r: this torch (%s) has no such type" % (torch_part, torch.__version__))
        return dt
    dt = _TORCH_BY_STR.get(np_part)
    if dt is None:
        raise TypeError("dtype %r has no torch equivalent in torch %s" % (np_part, torch.__version__))
    return dt


def to_numpy(dtype_bytes):
    """numpy dtype for a stored dtype string; opaque types (bf16, fp8...) come
    as unsigned integers of their width, holding the raw bits."""
    np_part, torch_part = split(dtype_bytes)
    if torch_part is not None:
        return np.dtype("<u%d" % int(np_part[2:])) if np_part[2:] != "1" else np.dtype("|u1")
    return np.dtype(np_part)


def from_torch(dt):
    """The dtype string tensorizer writes for a torch dtype (bytes)."""
    s = _STR_BY_TORCH.get(dt)
    if s is not None:
        return s.encode()
    if dt in (torch.qint8, torch.quint8, torch.qint32, torch.quint4x2) or "quint" in str(dt):
        raise NotImplementedError("quantized dtype %s cannot be serialized" % dt)
    width = torch.empty((), dtype=dt).element_size()
    order = "|" if width == 1 else "<"
    return ("%sV%d\0%s" % (order, width, str(dt))).encode()


def from_numpy(dt):
    dt = np.dtype(dt)
    s = dt.str
    if s not in _NUMPY:
        raise TypeError("numpy dtype %s cannot be serialized" % dt)
    return s.encode()


def c_order(a):
    """a as a C-contiguous numpy array of its own shape (np.ascontiguousarray
    would make a 0-d array 1-d)."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else a.copy(order="C")
