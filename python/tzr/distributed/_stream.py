"""Broadcasting a list of tensors from one rank through staging buckets.

The schedule is computed identically on every rank from the sizes alone:
small tensors (under 1/8 of a bucket) are packed into buckets of `bucket`
bytes and copied out on arrival; the others go straight from the source's
memory into each rank's own tensor (no staging copy on either side), in
pieces of at most a bucket, read by the source in groups of up to a
bucket. A ring of `nbuckets` slots bounds both the staging memory and the
broadcasts in flight: step j reuses slot j % nbuckets after waiting for
the broadcast that used it last, so the source reads step j+1 while step j
is on the wire."""
import torch

ALIGN = 64


class Step:
    __slots__ = ("items", "nbytes", "piece", "group")

    def __init__(self, items, nbytes, piece=None, group=None):
        self.items = items    # [(index, offset in bucket)] of a packed bucket
        self.nbytes = nbytes  # bytes on the wire
        self.piece = piece    # (index, start) of a direct tensor's piece
        self.group = group    # the direct tensors the source reads before this step

    @property
    def fills(self):
        """Whether the source must read before this step (so ranks agree
        on its status first)."""
        return self.items is not None or self.group is not None


def plan(indices, sizes, bucket):
    steps, cur, used, grp, grp_bytes = [], [], 0, None, 0
    for i in indices:
        n = sizes[i]
        if n > 0 and (n > bucket or n >= bucket // 8):
            if cur:
                steps.append(Step(cur, used))
                cur, used = [], 0
            pieces = [Step(None, min(bucket, n - s), (i, s)) for s in range(0, n, bucket)]
            if grp is not None and grp_bytes + n <= bucket:
                grp.group.append(i)
                grp_bytes += n
            else:
                grp, grp_bytes = pieces[0], n
                grp.group = [i]
            steps.extend(pieces)
            continue
        grp = None
        off = (used + ALIGN - 1) // ALIGN * ALIGN
        if cur and off + n > bucket:
            steps.append(Step(cur, used))
            cur, off = [], 0
        cur.append((i, off))
        used = off + n
    if cur:
        steps.append(Step(cur, used))
    return steps


def slot_bytes(steps):
    """The staging slot size a schedule needs (its fullest bucket)."""
    return max([st.nbytes for st in steps if st.piece is None] or [0])


def flat(t):
    """t's bytes as a 1-d uint8 tensor (t is contiguous, its own storage)."""
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def run(group, src, steps, dest, slots, fill=None, agree=False, unpack_src=False):
    """Broadcast `steps` from group rank src. dest[i]: tensor i's flat
    bytes on this rank (the source's are sent, the others' filled).
    fill(step, slot), given on the source, produces a step's bytes (into
    the slot for a bucket, into dest for st.group's tensors); with agree, every
    rank agrees on its status before the step goes out (a read can fail).
    unpack_src: the source copies each bucket out into its own dest too."""
    me = group.rank == src
    k = len(slots)
    pending = [None] * k  # (work, step) per slot
    try:
        for j, st in enumerate(steps):
            s = j % k
            _finish(pending[s], slots[s], dest, me and not unpack_src)
            pending[s] = None
            if st.fills:
                err = None
                if me and fill is not None:
                    try:
                        fill(st, slots[s])
                    except Exception as e:  # noqa: BLE001 - every rank must learn of it
                        err = e
                if agree:
                    group.agree(err, "tzr.distributed.load")
                elif err is not None:
                    raise err
            if st.nbytes == 0:
                continue
            if st.piece is None:
                view = slots[s][:st.nbytes]
            else:
                i, start = st.piece
                view = dest[i][start:start + st.nbytes]
            pending[s] = (group.broadcast(view, src, async_op=True), st)
    except BaseException:
        # Broadcasts already posted are matched on every rank: let them end
        # (bounded by the group's timeout) before the slots go, quietly.
        for p in pending:
            try:
                if p is not None:
                    p[0].wait()
            except Exception:  # noqa: BLE001 - the first error is the one to raise
                pass
        raise
    for s in range(k):
        _finish(pending[s], slots[s], dest, me and not unpack_src)


def _finish(p, slot, dest, skip_unpack):
    if p is None:
        return
    work, st = p
    work.wait()
    if st.piece is None and not skip_unpack:
        for i, off in st.items:
            n = dest[i].numel()
            if n:
                dest[i].copy_(slot[off:off + n])
