"""tzr.distributed.save: every rank writes its own shard, rank 0 the manifest.

A tensor named in `slices` (default: the state dict's .tzr_slice, as
load_rank and tensor_parallel loads return it) is this rank's cut of a
global tensor along `dim` from `offset`; its global shape is put together
from every rank's cut. Every other tensor is taken as replicated (the same
on every rank, as after a data-parallel step) and written once, by one
rank (tensors partitioned by size), so the job writes each byte once.

The manifest appears only after every rank agreed its shard is complete:
a rank that fails, or dies, during save leaves no manifest (the other
ranks' shard files are removed too), and every rank raises."""
import os

import torch

from .. import shard
from ._group import Group
from .load import partition

WHAT = "tzr.distributed.save"


def save(state, prefix, group=None, slices=None):
    """Write `state` (a module or {name: tensor}) under `prefix` as one
    shard per rank plus prefix.tzr-index.json; returns the manifest path."""
    g = Group(group)
    sd = state.state_dict() if isinstance(state, torch.nn.Module) else state
    if slices is None:
        slices = getattr(sd, "tzr_slice", None) or {}
    mine = {}
    for name, t in sd.items():
        dim, off = slices.get(name, (None, 0))
        mine[name] = (dim, off, tuple(t.shape), t.numel() * t.element_size())
    every = [None] * g.size
    torch.distributed.all_gather_object(every, mine, group=g.group)
    glob = _global_shapes(every)
    names = [n for n, (dim, _, _, _) in every[0].items() if dim is None]
    owner = dict(zip(names, partition([every[0][n][3] for n in names], g.size)))
    err = None
    try:
        folder = os.path.dirname(os.fspath(prefix))
        if folder and "://" not in os.fspath(prefix):
            os.makedirs(folder, exist_ok=True)
        # What this rank writes: its slices, and the whole tensors it owns.
        todo = [(name, t) for name, t in sd.items()
                if mine[name][0] is not None or owner.get(name, g.rank) == g.rank]
        with shard.ShardWriter(prefix, g.rank, g.size) as w:
            w.reserve(todo)  # an MoE-sized state dict overflows the default index
            for name, t in todo:
                dim, off, _, _ = mine[name]
                if dim is None:
                    w.add(name, t)
                else:
                    w.add(name, t, glob[name], dim, off)
    except Exception as e:  # noqa: BLE001 - every rank must learn of it
        err = e
    try:
        g.agree(err, WHAT)
        err = None
        if g.rank == 0:
            try:
                shard.build_manifest(prefix, g.size)
            except Exception as e:  # noqa: BLE001
                err = e
        g.agree(err, WHAT)
    except BaseException:
        _remove(prefix, g.rank, g.size)
        raise
    return os.fspath(prefix) + ".tzr-index.json"


def _global_shapes(every):
    """{name: global shape} of the cut tensors: each rank's cut laid end to end."""
    out = {}
    for cuts in every:
        for name, (dim, off, shape, _) in cuts.items():
            if dim is None:
                continue
            g = list(out.get(name, shape))
            g[dim] = max(g[dim] if name in out else 0, off + shape[dim])
            out[name] = tuple(g)
    return out


def _remove(prefix, rank, size):
    """This rank's shard file and sidecar (a save that failed somewhere)."""
    base = "%s-rank-%05d-of-%05d" % (os.fspath(prefix), rank, size)
    for path in (base + ".tensors", base + ".tzr-part.json"):
        try:
            os.unlink(path)
        except OSError:
            pass
