"""The process group a call runs over, and status agreement on it.

Every collective a call makes is preceded, wherever a rank may have
failed on its own (opening, reading, writing), by `agree`: a MAX
all_reduce of one flag. If any rank failed, every rank then gathers the
failures and raises the same exception type with the same message, naming
the failing rank; nobody is left waiting in a collective its peer will
never enter. A peer that died makes the collective itself fail (gloo sees
the closed connection, else the group's timeout), which bounds the wait.

The agreement runs on a second process group (gloo, the same ranks, made
once per data group): a backend runs one group's collectives in order, so
an agreement on the data group would wait for every broadcast posted
before it, and a reader could never be more than one read ahead of the
wire."""
import atexit

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from .. import _lib


class Group:
    def __init__(self, group=None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("tzr.distributed: torch.distributed is not initialised "
                               "(call torch.distributed.init_process_group first)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.backend = dist.get_backend(group)
        # NCCL moves only CUDA tensors; gloo (and MPI) host ones.
        if self.backend == "nccl":
            self.comm_device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.comm_device = torch.device("cpu")
        self.status_group, self.status_device = group, self.comm_device
        if self.size > 1:
            side = _status_group(group, self.size)
            if side is not None:
                self.status_group, self.status_device = side, torch.device("cpu")

    def global_rank(self, r):
        """The global rank of group rank r (collectives name sources globally)."""
        if self.group is None:
            return r
        return dist.distributed_c10d._get_global_rank(self.group, r)

    def broadcast(self, t, src, async_op=False):
        return dist.broadcast(t, self.global_rank(src), group=self.group, async_op=async_op)

    def barrier(self):
        self.agree(None)

    def agree(self, err, what="tzr.distributed"):
        """Raise on every rank if `err` (this rank's exception or None) is set on any."""
        flag = torch.tensor([0 if err is None else 1], dtype=torch.int32, device=self.status_device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.status_group)
        if int(flag.item()) == 0:
            return
        mine = None if err is None else describe(err)
        every = [None] * self.size
        dist.all_gather_object(every, mine, group=self.status_group)
        raise rebuild(what, every)

    def share(self, obj, src=0):
        """rank src's picklable obj on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=self.global_rank(src), group=self.group)
        return box[0]


# data group -> its status group: made once, as new_group is a collective
# of the whole job (every rank calls it, in the same order). Emptied at
# exit, so no group outlives the interpreter's own teardown here.
_STATUS = {}
atexit.register(_STATUS.clear)


def _status_group(group, size):
    """A gloo group of the same ranks for status agreement, or None where
    one cannot be made safely: a group smaller than the job (new_group
    needs every rank of the job, and only the group's ranks are here) or
    no gloo. It keeps the data group's timeout, so a peer that stops
    answering ends the agreement as it would end a broadcast."""
    if size != dist.get_world_size() or not dist.is_gloo_available():
        return None
    data = group if group is not None else c10d._get_default_group()
    for k in [k for k, v in _STATUS.items() if k not in c10d._pg_map or v not in c10d._pg_map]:  # destroyed since
        del _STATUS[k]
    side = _STATUS.get(data)
    if side is None:
        timeout = getattr(getattr(data, "options", None), "_timeout", None) or c10d.default_pg_timeout
        side = _STATUS[data] = dist.new_group(timeout=timeout, backend="gloo")
    return side


def describe(err):
    """A picklable (class, code, message) of an exception."""
    return (type(err), getattr(err, "code", None), getattr(err, "message", None) or str(err) or repr(err))


def rebuild(what, every):
    """The exception every rank raises: the first failing rank's type, its
    message prefixed with that rank (and naming the others that failed)."""
    failed = [r for r, d in enumerate(every) if d is not None]
    r = failed[0]
    cls, code, msg = every[r]
    text = "%s: rank %d of %d failed: %s" % (what, r, len(every), msg)
    if len(failed) > 1:
        text += " (also failed: rank %s)" % ", ".join(str(x) for x in failed[1:])
    try:
        if isinstance(cls, type) and issubclass(cls, _lib.TzrError):
            e = cls(code, text)
        else:
            e = cls(text)
    except Exception:
        e = RuntimeError(text)
    e.failed_ranks = failed
    return e
