"""What each IPU runs, in order, in the schedules after Graphcore's (torch, Megatron, DeepSeek).

Graphcore's schedules are lock-step; these are asynchronous like GPipe and 1F1B: each IPU
runs its own list of ops, one after another, and an op starts when its IPU is free and its
inputs are ready. :func:`orders` gives those lists, ``orders[q]`` being IPU q's ops as
``(phase, stage, microbatch)``; :func:`ipukit.parallel.schedule` times them. ``stage`` is
the model (virtual) stage. Phase ``"B"`` is the backward for the stage's input and, in
the split schedules (ZB-H1, ZB-V, DualPipeV), ``"W"`` the backward for its weights.

* ``interleaved_1f1b`` (Megatron's interleaved 1F1B, torch's ``ScheduleInterleaved1F1B``):
  IPU r holds v chunks, chunk c being model stage c*p + r. Its k-th forward runs chunk
  ``(k mod pv) // p`` on micro-batch ``(k // pv)*p + k mod p``; after a warm-up of
  ``2(p-1-r) + (v-1)p`` forwards (at most mv) it runs one forward, one backward; the k-th
  backward runs chunk ``v-1-`` that of the k-th forward (Megatron ``schedules.py``,
  ``get_pp_rank_microbatches`` and ``get_schedule_table``, micro-batch groups of p, as
  torch's ``_get_warmup_ops``; older Megatron ran every forward first when m == p: at
  p = m = 4, v = 2 the same makespan, 16.5, with 4 micro-batches on every IPU).
* ``zb_h1`` (the zero-bubble paper's ZB-H1, torch's ``ScheduleInterleavedZeroBubble`` with
  one stage per IPU): 1F1B's order with every backward split; IPU r leaves the W of its
  first r backwards for later, so W ops fill the cool-down bubble. (sail-sg's
  ``zb-h1-quick-start`` patch of Megatron runs a variant that keeps IPU 0's backwards
  whole, for tensor parallelism; the kit runs the paper's.)
* ``zb_v`` (ZB-V, torch's ``ScheduleZBVZeroBubble``, sail-sg's ``handcrafted_zb_v.py``): two
  chunks per IPU in a V, IPU r holding stages r and 2p-1-r.
* ``dualpipev`` (DeepSeek's DualPipeV, torch's ``ScheduleDualPipeV``): the V placement, the
  eight steps of ``dualpipev.py``; a full backward is a B then its W, run as one unit
  (:func:`units`). (kit convention: an overlapped forward-and-backward pair is one unit
  running its F, then its B and W, one after another: the IPU has no second stream to
  overlap them on.)

>>> orders("zb_h1", 2, 3)[1]  # IPU 1 puts off the W of its first backward
[('F', 1, 0), ('B', 1, 0), ('F', 1, 1), ('B', 1, 1), ('W', 1, 0), ('F', 1, 2), \
('B', 1, 2), ('W', 1, 1), ('W', 1, 2)]
>>> orders("zb_v", 1, 2)[0]
[('F', 0, 0), ('F', 1, 0), ('B', 1, 0), ('W', 1, 0), ('F', 0, 1), ('B', 0, 0), \
('W', 0, 0), ('F', 1, 1), ('B', 1, 1), ('W', 1, 1), ('B', 0, 1), ('W', 0, 1)]
"""

from __future__ import annotations

from collections import defaultdict, deque

Order = list  # of (phase, stage, microbatch)


def orders(kind: str, p: int, m: int, v: int = 1) -> list[Order]:
    """Each IPU's ops in execution order for ``kind`` with p IPUs, m micro-batches and v
    chunks per IPU (arguments already checked by :func:`ipukit.parallel.schedule`)."""
    return [[op for unit in ipu for op in unit] for ipu in units(kind, p, m, v)]


def units(kind: str, p: int, m: int, v: int = 1) -> list[list[tuple]]:
    """:func:`orders` cut into units: tuples of ops that run as one call, starting when
    the inputs of all have arrived and sending their outputs when the last ends. Only
    DualPipeV has units of several ops: its full backwards (B, W) and its overlapped
    forward-and-backward pairs (F, B, W)."""
    if kind == "dualpipev":
        return [_dualpipev(p, m, v, r) for r in range(p)]
    return [[(op,) for op in _ORDERS[kind](p, m, v, r)] for r in range(p)]


def stage_ipu(kind: str, p: int, stage: int) -> int:
    """The IPU that holds model stage ``stage``: cyclic (c*p + r) or a V (r and 2p-1-r)."""
    if kind in V_SHAPED:
        return stage if stage < p else 2 * p - 1 - stage
    return stage % p


def _interleaved_1f1b(p, m, v, r):
    total = m * v
    warmup = min(2 * (p - 1 - r) + (v - 1) * p, total)

    def chunk(k):  # the chunk of the k-th forward (Megatron's model_chunk_id_table)
        return (k % (p * v)) // p

    def forward(k):
        return ("F", chunk(k) * p + r, (k // (p * v)) * p + k % p)

    done = defaultdict(int)  # backwards run per chunk: they go in forward order

    def backward(k):
        c = v - 1 - chunk(k)
        done[c] += 1
        return ("B", c * p + r, done[c] - 1)

    out = [forward(k) for k in range(warmup)]
    for k in range(total - warmup):
        out += [forward(k + warmup), backward(k)]
    return out + [backward(k) for k in range(total - warmup, total)]


def _zb_h1(p, m, v, r):
    # torch's _get_1f1b_rank_ops with enable_zero_bubble and one stage per IPU: p-1-r
    # forwards, then F and B; each B from the r-th on is followed by the oldest W.
    warmup = min(p - 1 - r, m)
    out = [("F", r, i) for i in range(warmup)]
    for i in range(m):
        if i + warmup < m:
            out.append(("F", r, i + warmup))
        out.append(("B", r, i))
        if i >= r:
            out.append(("W", r, i - r))
    return out + [("W", r, i) for i in range(max(0, m - r), m)]


def _zb_v(p, m, v, r):
    # sail-sg's handcrafted_zb_v.py (torch's ScheduleZBVZeroBubble): the micro-batch count
    # is padded to 2p-1 and the padding ops dropped at the end.
    n = max(2 * p - 1, m)
    s0, s1 = r, 2 * p - 1 - r
    count = defaultdict(int)  # ops run per (phase, stage): the next micro-batch
    out = []

    def add(*ops):
        for phase, stage in ops:
            out.append((phase, stage, count[phase, stage]))
            count[phase, stage] += 1

    for _ in range(2 * (p - r) - 1):  # warm-up
        add(("F", s0))
    for _ in range(r):
        add(("F", s1), ("F", s0))
    for _ in range(p - r):
        add(("F", s1), ("B", s1), ("W", s1))
    while count["F", s1] < count["F", s0] or count["F", s0] < n:  # steady
        if count["F", s0] < n:
            add(("F", s0))
        add(("B", s0), ("W", s0), ("F", s1), ("B", s1), ("W", s1))
    for _ in range(r):  # cool-down
        add(("B", s0), ("B", s1))
    for _ in range(p - r):
        add(("B", s0), ("W", s0))
    for s in (s1, s0):
        while count["W", s] < count["B", s]:
            add(("W", s))
    return [op for op in out if op[2] < m]


def _dualpipev(p, m, v, r):
    # deepseek-ai/DualPipe dualpipev.py, DualPipeV.step: steps 1 to 8. Each call below is
    # one unit: one compute call of the step, whose sends go when it ends.
    s0, s1 = r, 2 * p - 1 - r
    count = defaultdict(int)
    pending: deque = deque()  # B ops whose W waits (WeightGradStore's FIFO)
    out = []

    def forward(stage):
        count["F", stage] += 1
        return (("F", stage, count["F", stage] - 1),)

    def backward(stage, zero_bubble=False):
        mb = count["B", stage]
        count["B", stage] += 1
        if zero_bubble:
            pending.append(("W", stage, mb))
            return (("B", stage, mb),)
        return ("B", stage, mb), ("W", stage, mb)  # a full backward: B, then its W

    def weight():
        if pending:
            out.append((pending.popleft(),))

    def pair(f, b):  # _forward_backward_chunk: an overlapped forward and full backward
        out.append(forward(f) + backward(b))

    for _ in range(2 * (p - r - 1)):  # 1: nF0
        out.append(forward(s0))
    for _ in range(r + 1):  # 2: nF0F1
        out += [forward(s0), forward(s1)]
    for _ in range(p - r - 1):  # 3: nB1W1F1 (zero bubble)
        out.append(backward(s1, True))
        weight()
        out.append(forward(s1))
    for i in range(m - 2 * p + r + 1):  # 4: nF0B1F1B0
        if i == 0 and r == p - 1:  # "We don't overlap these two chunks"
            out += [forward(s0), backward(s1)]
        else:
            pair(s0, s1)
        pair(s1, s0)
    for _ in range(p - r - 1):  # 5: nB1F1B0
        out.append(backward(s1))
        pair(s1, s0)
    zero_bubble = False
    for i in range(r + 1):  # 6: nB1B0, the second half zero bubble
        if i == (r + 1) // 2 and r % 2 == 1:
            zero_bubble = True
        out.append(backward(s1, zero_bubble))
        if i == (r + 1) // 2 and r % 2 == 0:
            zero_bubble = True
        out.append(backward(s0, zero_bubble))
    for _ in range(p - r - 1):  # 7: nWB0 (zero bubble)
        weight()
        out.append(backward(s0, True))
    while pending:  # 8: nW
        weight()
    return out


_ORDERS = {
    "interleaved_1f1b": _interleaved_1f1b,
    "zb_h1": _zb_h1,
    "zb_v": _zb_v,
}
#: The schedules whose IPUs hold two chunks in a V (IPU r: stages r and 2p-1-r).
V_SHAPED = ("zb_v", "dualpipev")
