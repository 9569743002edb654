"""tensorizer's utils: memory reports, byte sizes, and building a model
without initialising (or allocating) its weights."""
import contextlib
import resource
import threading

from ._dtypes import torch

__all__ = ["convert_bytes", "get_mem_usage", "get_gpu_name", "get_device", "no_init_or_tensor",
           "MemoryUsage", "CPUMemoryUsage", "GPUMemoryUsage", "GlobalGPUMemoryUsage",
           "TorchGPUMemoryUsage"]


def convert_bytes(num, decimal=True):
    """'1.5 KB', '3.0 GB' (decimal units, tensorizer's format); 'KiB'... when
    decimal is False."""
    step = 1000 if decimal else 1024
    units = ("bytes", "KB", "MB", "GB", "TB", "PB") if decimal else ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
    for unit in units[:-1]:
        if num < step:
            break
        num /= step
    else:
        unit = units[-1]
    return "%3.1f %s" % (num, unit)


def _psutil():
    try:
        import psutil
        return psutil
    except ImportError:
        return None


# The records hold bytes, as tensorizer's do (its tests read
# CPUMemoryUsage.now().free to size a 4.8 GiB case); str() shows MiB.
class CPUMemoryUsage:
    __slots__ = ("maxrss", "free")

    def __init__(self, maxrss, free):
        self.maxrss, self.free = maxrss, free

    @classmethod
    def now(cls):
        maxrss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss +
                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) << 10
        ps = _psutil()
        if ps is not None:
            free = ps.virtual_memory().free
        else:
            with open("/proc/meminfo") as f:
                info = dict(line.split(":", 1) for line in f)
            free = int(info["MemFree"].split()[0]) << 10
        return cls(maxrss, free)

    def __str__(self):
        return "CPU: (maxrss: {:,}MiB F: {:,}MiB)".format(self.maxrss >> 20, self.free >> 20)


class GPUMemoryUsage:
    __slots__ = ("total", "free", "used")

    def __init__(self, total, free, used):
        self.total, self.free, self.used = total, free, used

    @classmethod
    def now(cls, device=None):
        if torch is None or not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info(device)
        return cls(total, free, total - free)

    def __str__(self):
        return "GPU: (U: {:,}MiB F: {:,}MiB T: {:,}MiB)".format(self.used >> 20, self.free >> 20, self.total >> 20)


GlobalGPUMemoryUsage = GPUMemoryUsage  # tensorizer's name


class TorchGPUMemoryUsage:
    __slots__ = ("reserved", "reserved_max", "used", "used_max")

    def __init__(self, reserved, reserved_max, used, used_max):
        self.reserved, self.reserved_max, self.used, self.used_max = reserved, reserved_max, used, used_max

    @classmethod
    def now(cls, device=None):
        if torch is None or not torch.cuda.is_available():
            return None
        st = torch.cuda.memory_stats(device)
        g = lambda k: st.get(k, 0)  # noqa: E731
        return cls(g("reserved_bytes.all.current"), g("reserved_bytes.all.peak"),
                   g("allocated_bytes.all.current"), g("allocated_bytes.all.peak"))

    def __str__(self):
        return "TORCH: (R: {:,}MiB/{:,}MiB, A: {:,}MiB/{:,}MiB)".format(
            self.reserved >> 20, self.reserved_max >> 20, self.used >> 20, self.used_max >> 20)


class MemoryUsage:
    __slots__ = ("cpu", "gpu", "torch")

    def __init__(self, cpu, gpu, torch_):
        self.cpu, self.gpu, self.torch = cpu, gpu, torch_

    @classmethod
    def now(cls):
        return cls(CPUMemoryUsage.now(), GPUMemoryUsage.now(), TorchGPUMemoryUsage.now())

    def __str__(self):
        return " ".join(str(x) for x in (self.cpu, self.gpu, self.torch) if x is not None)


def get_mem_usage():
    """'CPU: (maxrss: 2,345MiB F: 100,123MiB)', then the GPU's and torch's
    allocator's where CUDA is there (tensorizer's format)."""
    return str(MemoryUsage.now())


def get_gpu_name():
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "CPU"


def get_device():
    """cuda when CUDA is there, else cpu (the deserializers' default)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ------------------------------------------------------------------ no_init_or_tensor
_lock = threading.RLock()
_active = 0
_saved = {}


def _enter():
    global _active
    with _lock:
        if _active == 0:
            nn = torch.nn
            for cls in (nn.Linear, nn.Embedding, nn.LayerNorm):
                _saved[cls] = cls.__dict__.get("reset_parameters")
                cls.reset_parameters = lambda self, *a, **k: None
            real_empty = torch.empty
            _saved["empty"] = real_empty

            def empty_on_meta(*args, **kwargs):
                kwargs["device"] = "meta"
                return real_empty(*args, **kwargs)
            torch.empty = empty_on_meta
        _active += 1


def _exit():
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            torch.empty = _saved.pop("empty")
            for cls, fn in list(_saved.items()):
                if fn is None:
                    del cls.reset_parameters
                else:
                    cls.reset_parameters = fn
            _saved.clear()


@contextlib.contextmanager
def _no_init():
    _enter()
    try:
        yield
    finally:
        _exit()


def no_init_or_tensor(loading_code=None):
    """Build modules without running their initialisers or allocating their
    weights (they land on the meta device), as tensorizer's helper does:
    load_into_module then gives them their values. With a callable, run it
    so; with None, a context manager."""
    if torch is None:
        raise RuntimeError("no_init_or_tensor needs torch")
    if loading_code is None:
        return _no_init()
    if not callable(loading_code):
        raise TypeError("no_init_or_tensor takes a callable or None, not %s" % type(loading_code).__name__)
    with _no_init():
        return loading_code()
