"""GCL's collectives between the IPUs of a stage, and the sharded ops' NumPy arithmetic.

A sharded tensor is a plain list of arrays, ``parts[s]`` living on shard s (IPU
``log.ipus[s]``). :class:`CollectiveLog` is the IPUs a sharded op runs on and the
collectives it ran (broadcast, reduce, all-reduce), which count bytes and cycles and
record them; the functions below are the arithmetic of :mod:`ipukit.parallel.sharded`'s
ops on those lists (the public ops check their arguments and run either these or, with
``CollectiveLog(emulate=True)``, :mod:`.emulated.sharded_ops`). A concurrent pipeline
stage (:mod:`.concurrent`) runs them directly. Every op returns its result and a
``backward`` closure (micrograd style); the only data that crosses between IPUs goes
through the log's collectives.
"""


from __future__ import annotations

import numbers
from dataclasses import replace

from .. import backend, cost
from ..errors import IpuError
from ..target import IPUModel, Target
from ..timeline import Span, Timeline
from .nn import is_count

#: The one record's span kind of each collective (``Span.kind``); the op is in the log's
#: ``records`` (``"all_reduce_max"``) and in the span's label.
TIMELINE_KINDS = {"broadcast": "broadcast", "reduce_add": "reduce",
                  "all_reduce_max": "allreduce", "all_reduce_add": "allreduce"}


class CollectiveLog:
    """The IPUs a sharded op runs on and the collectives it ran (GCL's cross-IPU ops).

    Shard s lives on IPU ``ipus[s]`` (default ``0..num_shards-1``). A broadcast or reduce
    costs one global sync plus its busiest IPU's bytes over one IPU-Link, an all-reduce
    GCL's ring: 2(S-1) steps of fixed latency plus its bytes (:mod:`ipukit.cost`); every
    participant gets a :class:`~ipukit.timeline.Span` in ``records`` (kind: the op, e.g.
    ``"all_reduce_max"``) starting at ``now``, which then moves on. :meth:`timeline`
    gives them as the one record of time. A caller (the pipeline runner) may set ``now``
    to place the next collective on its timeline.

    ``emulate=True``: the ops of :mod:`.sharded` given this log run on the emulator, one
    virtual graph per IPU, the collectives as inter-IPU copies and reductions
    (:mod:`.emulated.sharded_ops`): the same values, each call's ``ipu.Trace`` in
    ``traces`` (the latest: ``trace``), the records' cycles from the traces, and
    ``timeline()`` with each IPU's compute as well.
    """

    def __init__(self, num_shards: int, target: Target | None = None, ipus=None,
                 emulate: bool = False):
        if not is_count(num_shards, 2):
            raise IpuError(
                f"sharding needs at least 2 IPUs, got {num_shards!r} (createIpuShards "
                "throws with one IPU). Use 2 or more IPUs, or the dense op on one IPU."
            )
        num_shards = int(num_shards)
        self.ipus = list(range(num_shards)) if ipus is None else [int(i) for i in ipus]
        if len(self.ipus) != num_shards or len(set(self.ipus)) != num_shards:
            raise IpuError(
                f"ipus={self.ipus} must name {num_shards} different IPUs, one per shard"
            )
        if target is None:
            target = IPUModel(num_ipus=max(self.ipus) + 1).create_device().target
        bad = [i for i in self.ipus if not 0 <= i < target.num_ipus]
        if bad:
            raise IpuError(
                f"IPU(s) {bad} are out of range: the target has {target.num_ipus} IPU(s)"
            )
        self.num_shards, self.target = num_shards, target
        self.records: list[Span] = []
        self.now = 0
        self.emulate = bool(emulate)
        self.traces: list = []  # emulate=True: one ipu.Trace per call
        self._emulated_spans: list[Span] = []  # their compute, exchange and sync

    @property
    def trace(self):
        """The latest emulated call's ``ipu.Trace`` (``emulate=True``)."""
        if not self.traces:
            raise IpuError("this CollectiveLog has no trace: create it with emulate=True and "
                           "run a sharded op with it")
        return self.traces[-1]

    def _record(self, kind: str, label: str, sent: list[int], received: list[int],
                cycles: int | None = None) -> None:
        if cycles is None:  # not a ring: one sync, then the busiest IPU's bytes
            cycles = cost.collective_cycles(max(max(sent), max(received)), self.target)
        for ipu, nbytes in zip(self.ipus, sent):
            self.records.append(Span(ipu, kind, self.now, cycles, bytes=nbytes, label=label))
        self.now += cycles

    def broadcast(self, x, label: str, root: int = 0) -> list:
        """Copy ``x`` (on shard ``root``) to every shard; the root keeps ``x`` itself."""
        x = backend.get_xp().asarray(x)  # a host gradient goes to the device first
        n, s_count = x.nbytes, self.num_shards
        sent = [n * (s_count - 1) if s == root else 0 for s in range(s_count)]
        received = [0 if s == root else n for s in range(s_count)]
        self._record("broadcast", label, sent, received)
        return [x if s == root else x.copy() for s in range(s_count)]

    def reduce_add(self, parts: list, label: str, root: int = 0):
        """Sum the shards' ``parts`` onto shard ``root`` (popops reduce across IPUs)."""
        n, s_count = parts[0].nbytes, self.num_shards
        sent = [0 if s == root else n for s in range(s_count)]
        received = [n * (s_count - 1) if s == root else 0 for s in range(s_count)]
        self._record("reduce_add", label, sent, received)
        return _sum(parts)

    def all_reduce(self, parts: list, op: str, label: str) -> list:
        """Ring all-reduce (``gcl::allReduceWithinReplica``): every shard gets the result.

        Each shard sends (and receives) 2(S-1)/S of the tensor's bytes, in 2(S-1) ring
        steps (:func:`ipukit.cost.ring_cycles`).
        """
        xp = backend.get_xp()
        if op not in ("max", "add"):
            raise IpuError(f"all-reduce op {op!r} is not supported; use 'max' or 'add'")
        s_count = self.num_shards
        moved = [cost.ring_bytes("allreduce", parts[0].nbytes, s_count)] * s_count
        self._record(f"all_reduce_{op}", label, moved, moved,
                     cost.ring_cycles("allreduce", parts[0].nbytes, s_count, self.target))
        parts = [xp.asarray(p) for p in parts]  # host arrays too, on a device backend
        total = parts[0]
        for p in parts[1:]:
            total = xp.maximum(total, p) if op == "max" else total + p
        return [total.copy() for _ in parts]

    def bytes_sent(self) -> list[int]:
        """Bytes each shard sent over IPU-Links so far, in shard order."""
        return [sum(r.bytes for r in self.records if r.ipu == ipu) for ipu in self.ipus]

    def timeline(self) -> Timeline:
        """The collectives so far as a Timeline (kinds "broadcast", "reduce", "allreduce";
        the label names the op and what it moved); emulated, each IPU's compute,
        exchange and sync spans too."""
        return Timeline([replace(r, kind=TIMELINE_KINDS.get(r.kind, r.kind),
                                 label=f"{r.kind} {r.label}" if r.kind in TIMELINE_KINDS
                                 else r.label) for r in self.records]
                        + self._emulated_spans,
                        clock_hz=self.target.clock_hz, num_ipus=self.target.num_ipus)

    def cycles(self) -> int:
        """Cycles spent in collectives so far (they run one after another)."""
        return sum(r.duration for r in self.records if r.ipu == self.ipus[0])



def _sum(parts: list):
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def check_even(size: int, num_shards: int, name: str) -> int:
    """Rows/columns per shard; an uneven split raises (Graphcore's ``checkOkForSharding``)."""
    if num_shards < 1:
        raise IpuError(f"cannot shard {name} over {num_shards} IPUs: use 2 or more IPUs")
    if size % num_shards:
        raise IpuError(
            f"cannot shard {name} of size {size} over {num_shards} IPUs: {size} is not a "
            f"multiple of {num_shards} (checkOkForSharding needs an even split). Choose a "
            "size divisible by the number of IPUs, or another number of IPUs."
        )
    return size // num_shards


def shard(x, num_shards: int, axis: int, name: str = "tensor") -> list:
    """Lay ``x`` out over ``num_shards`` IPUs in equal slices along ``axis`` (host side)."""
    xp = backend.get_xp()
    x = xp.asarray(x)
    if not (isinstance(axis, numbers.Integral) and -x.ndim <= axis < x.ndim):
        raise IpuError(f"cannot shard {name}: axis {axis!r} of a {x.ndim}-D array of shape "
                       f"{list(x.shape)}; use an axis in {-x.ndim}..{x.ndim - 1}")
    check_even(x.shape[axis], num_shards, f"{name} {list(x.shape)} along dimension {axis}")
    return [xp.ascontiguousarray(p) for p in xp.split(x, num_shards, axis=axis)]


def unshard(parts: list, axis: int):
    """Host side only: what reading every shard back to the host and joining them gives."""
    xp = backend.get_xp()
    return xp.concatenate([xp.asarray(p) for p in parts], axis=axis)  # host parts too


def local_indices(indices, shard_index: int, size: int):
    """Indices into shard ``shard_index``'s ``size`` rows and the mask of those it owns.

    As on the IPU the subtraction is unsigned: an index below the shard's first row wraps
    to a huge number (0 - 2 = 4294967294) and fails the one test ``adjusted < size``.
    """
    xp = backend.get_xp()
    adjusted = xp.asarray(indices).astype(xp.uint32) - xp.uint32(shard_index * size)
    mask = adjusted < size
    return xp.where(mask, adjusted, 0), mask


def _check_parts(parts, log: CollectiveLog, name: str, ndim: int) -> None:
    if not isinstance(parts, (list, tuple)) or len(parts) != log.num_shards:
        got = len(parts) if isinstance(parts, (list, tuple)) else type(parts).__name__
        raise IpuError(
            f"{name}: expected a list of {log.num_shards} shards (one array per IPU), "
            f"got {got}"
        )
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) != 1 or len(next(iter(shapes))) != ndim:
        raise IpuError(
            f"{name}: every shard must have the same {ndim}-D shape, got "
            f"{[tuple(p.shape) for p in parts]}"
        )


def _check_indices(idx_parts, name: str, rows: int | None = None) -> None:
    """Indices are integers and, for a per-row lookup, one per row."""
    idx = idx_parts[0]
    if idx.dtype.kind not in "iu":
        raise IpuError(f"{name} must hold integer row/class numbers, got {idx.dtype}; "
                       "convert with .astype(np.int32)")
    if rows is not None and idx.shape[0] != rows:
        raise IpuError(f"{name}: got {idx.shape[0]} for {rows} row{'s' * (rows != 1)} of the "
                       "input; give one per row")


def _check_range(indices, limit: int, name: str) -> None:
    lo, hi = int(indices.min()), int(indices.max())
    if lo < 0 or hi >= limit:
        bad = lo if lo < 0 else hi
        raise IpuError(
            f"{name} holds {bad}, outside 0..{limit - 1} (the {limit} rows/classes over all "
            "shards)"
        )


def _matmul(a, b):
    """``a @ b``; half inputs accumulate in float partials, as poplin's default does."""
    xp = backend.get_xp()
    if a.dtype == xp.float16:
        return (a.astype(xp.float32) @ b.astype(xp.float32)).astype(xp.float16)
    return a @ b


def to_all(x, log: CollectiveLog, name: str = "to_all"):
    """:func:`.sharded.to_all`: a broadcast; backward, the gradients reduced onto shard 0."""
    parts = log.broadcast(backend.get_xp().asarray(x), name)

    def backward(grads: list):
        _check_parts(grads, log, f"{name} gradient", parts[0].ndim)
        return log.reduce_add(grads, f"{name} grad")

    return parts, backward


def matmul(x_parts: list, w_parts: list, log: CollectiveLog, name: str = "matmul"):
    """:func:`.sharded.matmul`: each shard's columns; backward local, dx left as partials."""
    y_parts = [_matmul(x, w) for x, w in zip(x_parts, w_parts)]

    def backward(dy_parts: list):
        dx_partials = [_matmul(g, w.T) for g, w in zip(dy_parts, w_parts)]
        dw_parts = [_matmul(x.T, g) for x, g in zip(x_parts, dy_parts)]
        return dx_partials, dw_parts

    return y_parts, backward


def embedding(w_parts: list, idx_parts: list, log: CollectiveLog, name: str = "embedding"):
    """:func:`.sharded.embedding`: masked lookups reduced onto shard 0; backward, the
    gradient broadcast and scatter-added where each shard owns the rows."""
    xp = backend.get_xp()
    size = w_parts[0].shape[0]
    local = [local_indices(idx, s, size) for s, idx in enumerate(idx_parts)]
    partials = [
        xp.where(mask[:, None], w[adj], 0).astype(w.dtype, copy=False)
        for w, (adj, mask) in zip(w_parts, local)
    ]
    out = log.reduce_add(partials, name)

    def backward(grad):
        g_parts = log.broadcast(grad, f"{name} grad")
        dw_parts = []
        for w, g, (adj, mask) in zip(w_parts, g_parts, local):
            dw = xp.zeros_like(w)
            xp.add.at(dw, adj[mask], g[mask])
            dw_parts.append(dw)
        return dw_parts

    return out, backward


def log_softmax(x_parts: list, log: CollectiveLog, name: str = "log_softmax"):
    """:func:`.sharded.log_softmax`: all-reduce MAX, then ADD of the partial sums."""
    xp = backend.get_xp()
    row_max = log.all_reduce([x.max(axis=1) for x in x_parts], "max", f"{name} max")
    shifted = [x - m[:, None] for x, m in zip(x_parts, row_max)]
    denom = log.all_reduce([xp.exp(t).sum(axis=1) for t in shifted], "add", f"{name} sum")
    out = [t - xp.log(d)[:, None] for t, d in zip(shifted, denom)]

    def backward(dy_parts: list):
        sums = log.all_reduce([g.sum(axis=1) for g in dy_parts], "add", f"{name} grad")
        return [g - xp.exp(o) * s[:, None] for g, o, s in zip(dy_parts, out, sums)]

    return out, backward


def take_last(x_parts: list, idx_parts: list, log: CollectiveLog, name: str = "take_last"):
    """:func:`.sharded.take_last`: the owning shard's column, partials reduced onto shard
    0; backward, ``g`` at the owning shard's column."""
    xp = backend.get_xp()
    size = x_parts[0].shape[1]
    rows = xp.arange(x_parts[0].shape[0])
    local = [local_indices(idx, s, size) for s, idx in enumerate(idx_parts)]
    partials = [
        xp.where(mask, x[rows, adj], 0).astype(x.dtype, copy=False)
        for x, (adj, mask) in zip(x_parts, local)
    ]
    out = log.reduce_add(partials, name)

    def backward(grad):
        g_parts = log.broadcast(grad, f"{name} grad")
        dx_parts = []
        for x, g, (adj, mask) in zip(x_parts, g_parts, local):
            dx = xp.zeros_like(x)
            dx[rows[mask], adj[mask]] = g[mask]
            dx_parts.append(dx)
        return dx_parts

    return out, backward


def log_softmax_cross_entropy(logits_parts: list, label_parts: list, log: CollectiveLog,
                              name: str = "cross_entropy"):
    """:func:`.sharded.log_softmax_cross_entropy`: :func:`log_softmax` then
    :func:`take_last`; the fused backward ``g * (softmax - onehot(label))``."""
    xp = backend.get_xp()
    log_probs, _ = log_softmax(logits_parts, log, name)
    nls = [-a for a in log_probs]
    ce, _ = take_last(nls, label_parts, log, name)
    size = logits_parts[0].shape[1]
    rows = xp.arange(logits_parts[0].shape[0])

    def backward(grad):
        g_parts = log.broadcast(grad, f"{name} grad")
        dx_parts = []
        for s, (n, g, lab) in enumerate(zip(nls, g_parts, label_parts)):
            dx = xp.exp(-n) * g[:, None]
            adj, mask = local_indices(lab, s, size)
            dx[rows[mask], adj[mask]] -= g[mask]
            dx_parts.append(dx)
        return dx_parts

    return ce, backward
