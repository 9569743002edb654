"""tzr.distributed.load: one checkpoint onto every rank of a process group.

broadcast    rank 0 reads through the library (tensors under 1 MiB into
             staging buckets, larger ones into its own tensors) and
             broadcasts what it read while it reads the next bucket's
             worth; the others only receive (larger tensors straight into
             their memory, the small ones copied out of a bucket). Storage
             read once; the wire carries the bytes N-1 times (a tree or
             ring, as the backend does it).
allgather    each rank reads about 1/N of the bytes (tensors partitioned
             by size), then every owner broadcasts its part the same way.
independent  every rank reads everything itself (the baseline; N reads).
tensor_parallel=True (independent only): each rank gets its own slice, as
             tzr.load_rank(source, rank, world) gives it (.tzr_slice).

Every mode returns {name: tensor} on every rank, each tensor allocated
once on `device`; beyond them a rank holds at most `buckets` staging
buckets of `bucket_mib` MiB."""
import torch

from .. import _dtypes
from ..serialization import _HUGE, _MADV_HUGEPAGE, _libc, _resolve_device
from ..shard import ShardState
from . import _stream
from ._group import Group, describe, rebuild
from ._set import Source

MODES = ("broadcast", "independent", "allgather")
WHAT = "tzr.distributed.load"


def load(source, device="cpu", mode="broadcast", group=None, encryption=None, verify=False,
         bucket_mib=64, buckets=3, tensor_parallel=False, rank_rules=None, into=None):
    """{name: tensor} of `source` (anything tzr opens) on every rank of
    `group` (default: the job's group). Any rank's failure raises the same
    exception type on every rank, its message naming that rank. into:
    {name: tensor} to fill in place where shape, dtype and device match."""
    if mode not in MODES:
        raise ValueError("mode %r: expected one of %s" % (mode, ", ".join(MODES)))
    if not bucket_mib > 0 or int(buckets) < 1:
        raise ValueError("bucket_mib must be positive and buckets at least 1")
    if tensor_parallel and mode != "independent":
        raise ValueError("tensor_parallel=True loads each rank's own slice: mode='independent' only")
    g = Group(group)
    dev, _ = _resolve_device(device)
    opts = dict(encryption=encryption, verify=verify, rank_rules=rank_rules)
    bucket = max(_stream.ALIGN, int(bucket_mib * 2**20))
    if mode == "independent" or g.size == 1:  # one rank: nothing to send, a plain load
        rank, nranks = (g.rank, g.size) if tensor_parallel else (0, 1)
        return _independent(g, source, opts, dev, rank, nranks, into)
    if mode == "broadcast":
        return _broadcast(g, source, opts, dev, bucket, int(buckets), into)
    return _allgather(g, source, opts, dev, bucket, int(buckets), into)


def load_into_module(module, source, strict=True, **kw):
    """load() into module's own parameters and buffers (filled in place
    where they match), then module.load_state_dict for the rest; returns
    load_state_dict's result."""
    own = dict(module.state_dict(keep_vars=True))
    sd = load(source, into=own, **kw)
    flat = {(".".join(map(str, k)) if isinstance(k, tuple) else k): v for k, v in sd.items()}
    with torch.no_grad():
        return module.load_state_dict(flat, strict=strict)


# ------------------------------------------------------------------ modes
def _independent(g, source, opts, dev, rank, nranks, into):
    out, err = ShardState(), None
    try:
        with Source(source, **opts) as src:
            dests = {}
            for m in src.tensors:
                dim, off, shape, nbytes = src.target(m.index, rank, nranks)
                t = _alloc(m.name, m.dtype, shape, nbytes, dev, into)
                out[m.name] = t
                out.tzr_slice[m.name] = (dim, off)
                dests[m.index] = (t.data_ptr(), nbytes)
            src.load(dests, _cuda(dev), rank, nranks)
    except Exception as e:  # noqa: BLE001 - every rank must learn of it
        err = e
    g.agree(err, WHAT)
    return out


def _broadcast(g, source, opts, dev, bucket, nbuckets, into):
    src = None
    try:
        if g.rank == 0:
            try:
                src = Source(source, **opts)
                said = ("ok", src.tensors)
            except Exception as e:  # noqa: BLE001
                said = ("err", describe(e))
        else:
            said = None
        # One collective says both what to expect and whether rank 0 could open it.
        said = g.share(said)
        if said[0] == "err":
            raise rebuild(WHAT, [said[1]] + [None] * (g.size - 1))
        meta = said[1]
        steps = _stream.plan([m.index for m in meta], [m.nbytes for m in meta], bucket)
        out, dest, slots = _setup(g, meta, dev, _stream.slot_bytes(steps), nbuckets, into)

        def fill(st, slot):
            if st.piece is None:
                base = slot.data_ptr()
                src.load({i: (base + off, meta[i].nbytes) for i, off in st.items}, _cuda(slot.device))
            else:
                src.load({i: (dest[i].data_ptr(), meta[i].nbytes) for i in st.group}, _cuda(dev))

        _stream.run(g, 0, steps, dest, slots, bucket, fill if g.rank == 0 else None, agree=True, unpack_src=True)
        return out
    finally:
        if src is not None:
            src.close()


def _allgather(g, source, opts, dev, bucket, nbuckets, into):
    err, meta, out = None, None, None
    try:
        with Source(source, **opts) as src:
            meta = src.tensors
            sizes = [m.nbytes for m in meta]
            owner = partition(sizes, g.size)
            plans = [_stream.plan([i for i in range(len(meta)) if owner[i] == r], sizes, bucket)
                     for r in range(g.size)]
            out, dest, slots = _setup(g, meta, dev, max(_stream.slot_bytes(p) for p in plans), nbuckets, into,
                                      agree=False)
            src.load({m.index: (dest[m.index].data_ptr(), m.nbytes) for m in meta if owner[m.index] == g.rank},
                     _cuda(dev))
    except Exception as e:  # noqa: BLE001
        err = e
    g.agree(err, WHAT)

    def pack(st, slot):
        for i, off in st.items or ():
            slot[off:off + sizes[i]].copy_(dest[i])

    for r in range(g.size):
        _stream.run(g, r, plans[r], dest, slots, bucket, pack if g.rank == r else None)
    return out


def partition(sizes, n):
    """Owner rank of each tensor: largest first onto the least-loaded rank,
    so each reads about 1/n of the bytes (the same answer on every rank)."""
    load, owner = [0] * n, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(n), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += sizes[i]
    return owner


# ------------------------------------------------------------------ memory
def _setup(g, meta, dev, slot_bytes, nbuckets, into, agree=True):
    """Every tensor once on dev, and the staging slots (on the device the
    backend moves: CUDA for NCCL, else host, pinned when dev is CUDA); with
    agree, ranks agree that allocation worked before any broadcast."""
    err, out, dest, slots = None, ShardState(), {}, []
    try:
        for m in meta:
            t = _alloc(m.name, m.dtype, m.shape, m.nbytes, dev, into)
            out[m.name] = t
            out.tzr_slice[m.name] = (None, 0)
            dest[m.index] = _stream.flat(t)
        comm = g.comm_device
        pin = comm.type == "cpu" and dev.type == "cuda"
        slots = [torch.empty(slot_bytes, dtype=torch.uint8, device=comm, pin_memory=pin) for _ in range(nbuckets)]
    except Exception as e:  # noqa: BLE001
        err = e
    if agree:
        g.agree(err, WHAT)
    elif err is not None:
        raise err
    return out, dest, slots


def _alloc(name, dtype, shape, nbytes, dev, into):
    """A tensor of its own (or into[name] when it fits exactly and is
    contiguous); large host ones advised huge pages as TensorDeserializer does."""
    want = _dtypes.to_torch(dtype)
    t = into.get(name) if into else None
    if t is not None:
        t = t.data if isinstance(t, torch.nn.Parameter) else t
        if tuple(t.shape) == tuple(shape) and t.dtype == want and t.device == dev and t.is_contiguous():
            return t
    t = torch.empty(tuple(shape), dtype=want, device=dev)
    if dev.type == "cpu" and nbytes >= 2 * _HUGE:
        p = t.data_ptr()
        lo = (p + _HUGE - 1) // _HUGE * _HUGE
        _libc.madvise(lo, (p + nbytes - lo) // _HUGE * _HUGE, _MADV_HUGEPAGE)
    return t


def _cuda(dev):
    return dev.index if dev.type == "cuda" else None
