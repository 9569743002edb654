"""Broadcasting a list of tensors from one rank through staging buckets.

The schedule is computed identically on every rank from the sizes alone:
small tensors (under DIRECT_MIN, or 1/8 of a smaller bucket) are packed
into buckets of `bucket` bytes and copied out on arrival (one collective
for many norms and biases); the others go straight from the source's
memory into each rank's own tensor (no staging copy on either side), in
pieces of at most a bucket, read by the source in groups of up to a
bucket. `nbuckets` staging slots bound the staging memory; the bytes in
flight are bounded by nbuckets buckets, so the source reads the next
group while the previous ones are on the wire, and nobody waits on a
handle before it has to."""
import collections

import torch

ALIGN = 64
# Tensors from 1 MiB on go straight between the ranks' own tensors: above
# that a collective's fixed cost is small next to its bytes, and copying
# them through a bucket (in and out, on every rank) would cost more.
DIRECT_MIN = 1 << 20


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
    direct = min(DIRECT_MIN, max(1, bucket // 8))
    steps, cur, used, grp, grp_bytes = [], [], 0, None, 0
    for i in indices:
        n = sizes[i]
        if n > 0 and (n > bucket or n >= direct):
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


def run(group, src, steps, dest, slots, bucket, fill=None, agree=False, unpack_src=False):
    """Broadcast `steps` from group rank src. dest[i]: tensor i's flat
    bytes on this rank (the source's are sent, the others' filled).
    fill(step, slot), given on the source, produces a step's bytes (into
    the slot for a bucket, into dest for st.group's tensors). With agree
    (a read can fail), every rank agrees on the source's status once per
    window of bytes (the in-flight bound) and after the last step: a
    failed read is not retried, its step and the rest of the window go
    out unfilled (peers stay matched), and the next agreement ends every
    rank with its error, so at most a window more is sent after a failure.
    The agreement runs on the group's status group, so it does not queue
    behind the broadcasts. Without agree a fill's error is raised at once.
    unpack_src: the source copies each bucket out into its own dest too.
    At most len(slots) buckets' bytes are in flight."""
    unpack = group.rank != src or unpack_src
    limit = max(1, len(slots)) * bucket
    pending = collections.deque()  # (work, step, slot or None), oldest first
    free = list(range(len(slots)))
    busy = 0
    err, unagreed = None, 0  # the source's first failure; bytes filled since the last agreement

    def retire():
        nonlocal busy
        work, st, s = pending.popleft()
        work.wait()
        busy -= st.nbytes
        if s is not None:
            if unpack:
                for i, off in st.items:
                    n = dest[i].numel()
                    if n:
                        dest[i].copy_(slots[s][off:off + n])
            free.append(s)

    def settle():
        nonlocal unagreed
        unagreed = 0
        group.agree(err, "tzr.distributed.load")

    try:
        for st in steps:
            packed = st.piece is None
            if agree and st.fills and unagreed >= limit:
                settle()
            while pending and ((packed and not free) or busy + st.nbytes > limit):
                retire()
            s = free.pop() if packed else None
            if st.fills:
                if fill is not None and err is None:
                    try:
                        fill(st, slots[s] if packed else None)
                    except Exception as e:  # noqa: BLE001 - every rank must learn of it
                        if not agree:
                            raise
                        err = e
                unagreed += st.nbytes if packed else sum(dest[i].numel() for i in st.group)
            if st.nbytes == 0:
                if s is not None:
                    free.append(s)
                continue
            if packed:
                view = slots[s][:st.nbytes]
            else:
                i, start = st.piece
                view = dest[i][start:start + st.nbytes]
            pending.append((group.broadcast(view, src, async_op=True), st, s))
            busy += st.nbytes
        if agree:
            settle()
        while pending:
            retire()
    except BaseException:
        # Broadcasts already posted are matched on every rank: let them end
        # (bounded by the group's timeout) before the slots go, quietly.
        for work, _, _ in pending:
            try:
                work.wait()
            except Exception:  # noqa: BLE001 - the first error is the one to raise
                pass
        raise
