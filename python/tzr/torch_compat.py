"""torch.save / torch.load with tensor data in a `.tensors` file beside the
pickle (tensorizer's torch_compat, over libtzr, on torch 1.13 and later).

    with tensorizer_saving():
        torch.save(model, "model.pt")      # model.pt + model.pt.tensors
    with tensorizer_loading(device="cpu"):
        model = torch.load("model.pt")

Inside tensorizer_saving, every storage with data that torch.save meets is
kept out of the pickle: the pickle holds a reference to it (the same
("TensorizerPickler", 0, "storage", index, dtype) ids tensorizer writes, so
either library reads the other's files), and the storages are written as
one TensorSerializer.write_state_dict of byte tensors. tensorizer_loading
reads them back with one TensorDeserializer load, each storage its own.
Only calls made in the context (this thread, this task) are changed.

file_obj: where the tensors go: a path, URI or file object, or a callable
given torch's `f` that returns one (or None: plain torch for that call);
default: torch's file name + ".tensors" (an io.BytesIO has no name: plain
torch, with a warning). save_func(file_obj, tensors, kwargs) and
load_func(file_obj, kwargs) -> tensors replace the default writer and
reader; other keyword arguments go to TensorSerializer / TensorDeserializer.
"""
import contextlib
import contextvars
import inspect
import io
import logging
import os
import pickle
import threading
import types
import typing

import torch
import torch.serialization

from .serialization import TensorDeserializer, TensorSerializer

__all__ = ("tensorizer_saving", "tensorizer_loading")

log = logging.getLogger(__name__)

_PID = "TensorizerPickler"
_saving = contextvars.ContextVar("tzr_torch_saving", default=None)
_loading = contextvars.ContextVar("tzr_torch_loading", default=None)
_sidecar = contextvars.ContextVar("tzr_torch_sidecar", default=None)  # the call's .tensors target


# ------------------------------------------------------------------ storages, across torch versions
def _untyped(storage):
    if isinstance(storage, torch.UntypedStorage):
        return storage
    inner = getattr(storage, "_untyped_storage", None)  # torch >= 2.0
    return inner if inner is not None else storage._storage  # torch 1.13


def _typed(untyped, dtype):
    try:
        return torch.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)
    except TypeError:  # torch 1.13 has no _internal
        return torch.TypedStorage(wrap_storage=untyped, dtype=dtype)


def _storage_of(tensor):
    if hasattr(tensor, "untyped_storage"):
        return tensor.untyped_storage()
    return _untyped(tensor.storage())


def _bytes_view(untyped):
    """A uint8 tensor over all of a storage's bytes (what the sidecar holds)."""
    t = torch.empty(0, dtype=torch.uint8, device=untyped.device)
    return t.set_(_typed(untyped, torch.uint8))


# ------------------------------------------------------------------ pickling
_NOT_OURS = object()  # what a hook's own part returns for another's object


def _wrap_subclass_hook(cls, name, ours):
    """torch 2 subclasses the pickle module's (Un)Pickler and defines the
    hook as a method (torch 1.13 assigns it on the instance): replace it
    there with one that asks ours(self, arg) first."""
    theirs = cls.__dict__.get(name)
    if callable(theirs):
        def hook(self, arg):
            mine = ours(self, arg)
            return theirs(self, arg) if mine is _NOT_OURS else mine
        setattr(cls, name, hook)


class _Pickler(pickle.Pickler):
    """torch.save's pickler with storages sent to the sidecar. torch 1.13
    sets `persistent_id` on the instance, torch 2 defines it in a subclass;
    either way it is wrapped so storages are ours first (nothing is defined
    on this class, so an assignment sets the C pickler's own slot)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _wrap_subclass_hook(cls, "persistent_id", _Pickler._tzr_first)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tzr_target = _sidecar.get()
        self._tzr_tensors = []
        self._tzr_index = {}

    def __setattr__(self, name, value):
        if name == "persistent_id" and callable(value):
            value = self._tzr_wrap(value)
        super().__setattr__(name, value)

    def _tzr_wrap(self, theirs):
        def persistent_id(obj):
            mine = self._tzr_first(obj)
            return theirs(obj) if mine is _NOT_OURS else mine
        return persistent_id

    def _tzr_first(self, obj):
        mine = self._tzr_id(obj)
        return _NOT_OURS if mine is None else mine

    def _tzr_id(self, obj):
        if self._tzr_target is None or not torch.is_storage(obj):
            return None
        u = _untyped(obj)
        if u.device.type == "meta" or u.data_ptr() == 0:
            return None  # no bytes to move: torch keeps it
        key = (u.data_ptr(), str(u.device), u.nbytes())
        idx = self._tzr_index.get(key)
        if idx is None:
            idx = self._tzr_index[key] = len(self._tzr_tensors)
            self._tzr_tensors.append(_bytes_view(u))
        return (_PID, 0, "storage", idx, getattr(obj, "dtype", None))

    def dump(self, obj):
        super().dump(obj)
        tensors, self._tzr_tensors, self._tzr_index = self._tzr_tensors, [], {}
        if not tensors:
            return
        conf = _saving.get()
        kwargs = dict(conf["kwargs"]) if conf else {}
        save_func = conf["save_func"] if conf else None
        if save_func is not None:
            save_func(self._tzr_target, tensors, kwargs)
            return
        ser = TensorSerializer(self._tzr_target, **kwargs)
        try:
            ser.write_state_dict(tensors)
        except BaseException:
            ser.abort()
            raise
        ser.close()


class _Unpickler(pickle.Unpickler):
    """torch.load's unpickler with the sidecar's storages: torch's own
    persistent_load, set on the instance or defined in a subclass, is
    wrapped the same way."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _wrap_subclass_hook(cls, "persistent_load", _Unpickler._tzr_first)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tzr_source = _sidecar.get()
        self._tzr_tensors = None

    def __setattr__(self, name, value):
        if name == "persistent_load" and callable(value):
            value = self._tzr_wrap(value)
        super().__setattr__(name, value)

    def _tzr_wrap(self, theirs):
        def persistent_load(pid):
            mine = self._tzr_first(pid)
            return theirs(pid) if mine is _NOT_OURS else mine
        return persistent_load

    def _tzr_first(self, pid):
        if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == _PID:
            return self._tzr_storage(pid)
        return _NOT_OURS

    def _tzr_storage(self, pid):
        if pid[1] != 0:
            raise pickle.UnpicklingError("unsupported TensorizerPickler data version %r" % (pid[1],))
        if pid[2] != "storage" or len(pid) != 5:
            raise pickle.UnpicklingError("unsupported TensorizerPickler object %r" % (pid[2],))
        if self._tzr_source is None:
            raise pickle.UnpicklingError("this pickle keeps its tensors in a .tensors file, and torch.load "
                                         "was given no file name to find it by (pass file_obj=)")
        if self._tzr_tensors is None:
            self._tzr_tensors = self._tzr_load()
        idx, dtype = pid[3], pid[4]
        if not isinstance(idx, int) or not 0 <= idx < len(self._tzr_tensors):
            raise pickle.UnpicklingError("storage %r: the .tensors file holds %d storages"
                                         % (idx, len(self._tzr_tensors)))
        return _typed(_storage_of(self._tzr_tensors[idx]), dtype or torch.uint8)

    def _tzr_load(self):
        conf = _loading.get()
        kwargs = dict(conf["kwargs"]) if conf else {}
        load_func = conf["load_func"] if conf else None
        if load_func is not None:
            return list(load_func(self._tzr_source, kwargs))
        with TensorDeserializer(self._tzr_source, **kwargs) as d:
            tree = d.tree()
        return tree if isinstance(tree, list) else [tree[k] for k in sorted(tree)]

    def load(self):
        try:
            return super().load()
        finally:
            self._tzr_tensors = None


_PICKLE = types.ModuleType("tzr_pickle")
_PICKLE.__getattr__ = lambda name: getattr(pickle, name)
_PICKLE.Pickler = _Pickler
_PICKLE.Unpickler = _Unpickler


# ------------------------------------------------------------------ the torch.save / torch.load wrappers
def _target(f, file_obj):
    if callable(file_obj):
        return file_obj(f)
    if file_obj is not None:
        return file_obj
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        return os.fsdecode(f) + ".tensors"
    name = getattr(f, "name", None)
    if isinstance(name, (str, bytes)) and not isinstance(f, io.BytesIO):
        return os.fsdecode(name) + ".tensors"
    log.warning("cannot tell where %s's .tensors file goes; plain torch serialization "
                "(pass file_obj= to choose)", type(f).__name__)
    return None


def _own_pickle(pickle_module):
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("tensorizer-based torch serialization cannot use a pickle_module other than pickle")


_orig_save = torch.save
_orig_load = torch.load
_FileLike = typing.Union[str, os.PathLike, typing.IO[bytes]]  # what torch.save/load take as f
# torch.load's own default for pickle_module (None from torch 1.13 on):
# the wrapper keeps torch's signature.
_LOAD_WRAPPER_DEFAULT_MODULE = inspect.signature(_orig_load).parameters["pickle_module"].default


def _save(obj, f, pickle_module=pickle, *args, **kwargs):
    conf = _saving.get()
    if conf is None:
        return _orig_save(obj, f, pickle_module, *args, **kwargs)
    _own_pickle(pickle_module)
    token = _sidecar.set(_target(f, conf["file_obj"]))
    try:
        return _orig_save(obj, f, _PICKLE, *args, **kwargs)
    finally:
        _sidecar.reset(token)


def _load(f, map_location=None, pickle_module=_LOAD_WRAPPER_DEFAULT_MODULE, *args, **kwargs):
    conf = _loading.get()
    if conf is None:
        return _orig_load(f, map_location, pickle_module, *args, **kwargs)
    _own_pickle(pickle_module)
    if conf["suppress_weights_only"] and kwargs.get("weights_only") is not False:
        kwargs["weights_only"] = False
    if kwargs.get("weights_only"):
        # What torch says of a weights-only load with a pickle module of its
        # own (torch 1.13 spells it with typos).
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    token = _sidecar.set(_target(f, conf["file_obj"]))
    try:
        return _orig_load(f, map_location, _PICKLE, *args, **kwargs)
    finally:
        _sidecar.reset(token)


_patch_lock = threading.Lock()
_patch_users = {"save": 0, "load": 0}


@contextlib.contextmanager
def _patched(kind, var, conf):
    """torch.save/torch.load replaced while any context of this kind is open
    anywhere; the wrapper acts only where `var` is set (this context)."""
    token = var.set(conf)
    with _patch_lock:
        _patch_users[kind] += 1
        if _patch_users[kind] == 1:
            setattr(torch, kind, _save if kind == "save" else _load)
            if kind == "load":
                # torch 1.13's load ignores its pickle_module argument (it
                # always takes its module's `pickle`), so that name is ours
                # while loading contexts are open; without our ids in a file
                # our unpickler is plain pickle's.
                torch.serialization.pickle = _PICKLE
    try:
        yield
    finally:
        with _patch_lock:
            _patch_users[kind] -= 1
            if _patch_users[kind] == 0:
                setattr(torch, kind, _orig_save if kind == "save" else _orig_load)
                if kind == "load":
                    torch.serialization.pickle = pickle
        var.reset(token)


def tensorizer_saving(file_obj=None, *, save_func=None, **kwargs):
    """torch.save within this context keeps tensor data in a .tensors file."""
    return _patched("save", _saving, {"file_obj": file_obj, "save_func": save_func, "kwargs": kwargs})


def tensorizer_loading(file_obj=None, *, load_func=None, suppress_weights_only=False, **kwargs):
    """torch.load within this context takes tensor data from the .tensors
    file that tensorizer_saving wrote."""
    return _patched("load", _loading, {"file_obj": file_obj, "load_func": load_func,
                                       "suppress_weights_only": suppress_weights_only, "kwargs": kwargs})
