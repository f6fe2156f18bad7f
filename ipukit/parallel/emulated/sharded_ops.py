""":mod:`ipukit.parallel.sharded`'s ops on the emulator: ``CollectiveLog(..., emulate=True)``.

Each call of a sharded op (and of its ``backward``) builds one Poplar graph with a virtual
graph per IPU of the log (``graph.create_virtual_graph``), writes the shards it is given
to their IPUs, runs, and reads the results back: the same values as the NumPy path. The
work on each shard is PopLibs-style ops (``poplin.mat_mul``, popops maps and reductions)
and the vertices of :mod:`.sharded` (masked lookup, scatter-add, take_last, the fused
cross-entropy backward), built by that module's builders; the collectives are the
inter-IPU ``Copy`` programs plus popops reductions of :mod:`.collectives`.

The log keeps every call's ``ipu.Trace`` (``log.traces``, the latest as ``log.trace``:
``BSPView(log.trace)`` works); its ``records`` hold one span per collective and IPU whose
duration is the cycles of that collective's copies and reductions in the trace, and
``log.timeline()`` adds each IPU's compute, exchange and sync from the traces, the calls
laid end to end on ``log.now``. (kit convention: a backward is its own call, so the
tensors it reads (the forward's inputs or outputs) are written to the IPUs again; on an
IPU they would stay in tile memory.) The emulator runs float32 and 32-bit integers.

>>> import numpy as np
>>> from ipukit.parallel import sharded
>>> log = sharded.CollectiveLog(2, emulate=True)
>>> logits = sharded.shard(np.array([[1.0, 2.0, 3.0, 4.0]], np.float32), 2, axis=1)
>>> labels = sharded.to_all(np.array([2]), log)[0]
>>> ce, backward = sharded.log_softmax_cross_entropy(logits, labels, log)
>>> print(np.round(ce, 6))
[1.44019]
>>> [r.kind for r in log.records if r.ipu == 0]
['broadcast', 'all_reduce_max', 'all_reduce_add', 'reduce_add']
>>> len(log.traces), log.trace.target.num_ipus
(2, 2)
"""

from __future__ import annotations

import numpy as np

from ...backend import to_numpy
from ...engine import Engine
from ...errors import IpuError
from ...graph import Graph
from ...poplibs import poplin, popops, poputil
from ...poplibs.expr import Exp, _1, _2, _3
from ...program import Sequence
from ...target import Device
from ...tensor import FLOAT, INT, Tensor
from ...timeline import Span
from ..collectives import _check_parts
from . import sharded as es
from .collectives import Shards
from .tensors import leaves


class LoggedShards(Shards):
    """:class:`~.emulated_sharded._Shards` noting, per collective, its kind, label, bytes
    each shard sends and which of the program's steps it is (to time it from the trace)."""

    def __init__(self, vgs, prog):
        super().__init__(vgs, prog)
        self.notes: list[tuple[str, str, list[int], int, int]] = []
        self._depth = 0

    def _noted(self, kind, label, sent, build):
        first, self._depth = leaves(self.prog), self._depth + 1
        try:
            out = build()
        finally:
            self._depth -= 1
        if not self._depth:
            self.notes.append((kind, label, sent, first, leaves(self.prog)))
        return out

    def broadcast(self, t, name):
        n, count = _nbytes(t), len(self.vgs)
        sent = [n * (count - 1)] + [0] * (count - 1)
        return self._noted("broadcast", name, sent, lambda: super(LoggedShards, self)
                           .broadcast(t, name))

    def reduce_onto_first(self, parts, name, op=None):
        sent = [0] + [_nbytes(parts[0])] * (len(parts) - 1)
        return self._noted("reduce_add", name, sent, lambda: super(LoggedShards, self)
                           .reduce_onto_first(parts, name, op))

    def all_reduce(self, parts, name, op=None):
        t = parts[0]
        sent = es.ring_bytes_sent(t.num_elements(), t.dtype.itemsize, len(parts))  # GCL's ring
        kind = "all_reduce_add" if op is None else "all_reduce_max"
        return self._noted(kind, name, sent, lambda: super(LoggedShards, self)
                           .all_reduce(parts, name, op))


def _nbytes(t: Tensor) -> int:
    return t.num_elements() * t.dtype.itemsize


def _device_dtype(a, what: str):
    a = to_numpy(a)
    if a.dtype == np.float32:
        return FLOAT
    if a.dtype.kind in "iu" and (a.size == 0 or (a.min() >= -2**31 and a.max() < 2**31)):
        return INT
    raise IpuError(f"{what} is {a.dtype}: CollectiveLog(emulate=True) runs float32 (Poplar's "
                   "FLOAT) and 32-bit integers; cast with .astype(np.float32), or use "
                   "emulate=False")


class _Call:
    """One emulated call: a graph with one virtual graph per shard, inputs written to
    their IPUs, outputs read back, the trace handed to the log."""

    def __init__(self, log):
        self.log = log
        self.graph = Graph(log.target)
        tpi = log.target.tiles_per_ipu
        self.prog = Sequence()
        self.sh = LoggedShards([self.graph.create_virtual_graph(q * tpi, (q + 1) * tpi)
                                for q in log.ipus], self.prog)
        self.vgs = self.sh.vgs
        self._writes: list[tuple[str, np.ndarray]] = []
        self._reads: list[tuple[str, np.dtype]] = []

    def put(self, arrays: list, name: str, by_columns: bool = False) -> list[Tensor]:
        """``arrays[s]`` written to shard s's IPU (``len(arrays)`` may be 1: shard 0)."""
        out = []
        for s, a in enumerate(arrays):
            vg, dtype = self.vgs[s], _device_dtype(a, name)
            t = vg.add_variable(dtype, list(np.shape(a)), f"{name} {s}")
            if by_columns:
                es._by_columns(vg, t)
            else:
                poputil.map_tensor_linearly(vg, t)
            handle = f"in/{name} {s}"
            self.graph.create_host_write(handle, t)
            self._writes.append((handle, to_numpy(a).astype(dtype)))
            out.append(t)
        return out

    def local_offsets(self, idx_parts, size: int, name: str, what: str) -> list[Tensor]:
        """The index shards put on their IPUs, as offsets into each shard's rows."""
        return es.local_offsets(self.sh, self.put(idx_parts, f"{name} {what}"), size,
                                f"{name} local {what}")

    def get(self, tensors: list[Tensor], like) -> list:
        """Handles to read ``tensors`` back after the run, as ``like``'s dtype."""
        handles = []
        for t in tensors:
            handle = f"out/{len(self._reads)}"
            self.graph.create_host_read(handle, t)
            self._reads.append((handle, to_numpy(like).dtype))
            handles.append(handle)
        return handles

    def run(self) -> dict:
        """Compile, write, run; the outputs by handle. Records the collectives and trace."""
        log, eng = self.log, Engine(self.graph, self.prog)
        eng.load(Device(log.target))
        for handle, a in self._writes:
            eng.write_tensor(handle, a)
        trace = eng.trace
        start = len(trace)
        eng.run()
        origin = float(trace._starts[start])
        first = start + 1  # after the host sync of this run
        for kind, label, sent, lo, hi in self.sh.notes:
            times = [(float(trace._starts[e]),
                      float(trace._starts[e] + trace.steps[trace._step_ids[e]].cycles))
                     for e in range(first + lo, first + hi)]
            t0 = min(a for a, _ in times) if times else origin
            t1 = max(b for _, b in times) if times else origin
            for ipu, nbytes in zip(log.ipus, sent):
                log.records.append(Span(ipu, kind, log.now + t0 - origin, t1 - t0,
                                        bytes=nbytes, label=label))
        log._emulated_spans.extend(
            Span(sp.ipu, sp.kind, log.now + sp.start - origin, sp.duration, bytes=sp.bytes,
                 label=sp.label) for sp in trace.timeline().spans if sp.start >= origin)
        log.now += float(trace.total_cycles) - origin
        log.traces.append(trace)
        return {h: eng.read_tensor(h).astype(dtype, copy=False) for h, dtype in self._reads}


def _one(call: _Call, tensors: list[Tensor], like) -> list:
    handles = call.get(tensors, like)
    out = call.run()
    return [out[h] for h in handles]


def _check_float(arrays, what: str) -> None:
    for a in arrays:
        if to_numpy(a).dtype != np.float32:
            raise IpuError(f"{what} is {to_numpy(a).dtype}: CollectiveLog(emulate=True) runs "
                           "float32 (Poplar's FLOAT); cast with .astype(np.float32), or use "
                           "emulate=False")


def to_all(x, log, name):
    """:func:`.sharded.to_all`: a copy from IPU ``log.ipus[0]`` to every other IPU."""
    x = to_numpy(x)
    call = _Call(log)
    parts = _one(call, call.sh.broadcast(call.put([x], name)[0], name), x)

    def backward(grads: list):
        _check_parts(grads, log, f"{name} gradient", parts[0].ndim)
        _check_float(grads, f"{name} gradient")
        c = _Call(log)
        total = c.sh.reduce_onto_first(c.put(grads, f"{name} grad"), f"{name} grad")
        return _one(c, [total], grads[0])[0]

    return parts, backward


def matmul(x_parts, w_parts, log, name):
    """:func:`.sharded.matmul`: ``poplin.mat_mul`` on each shard, no collective."""
    _check_float(list(x_parts) + list(w_parts), f"{name} input or weights")
    call = _Call(log)
    xs, ws = call.put(x_parts, f"{name} input"), call.put(w_parts, f"{name} weights")
    y = _one(call, [poplin.mat_mul(vg, x, w, call.prog, f"{name} {s}")
                    for s, (vg, x, w) in enumerate(zip(call.vgs, xs, ws))], x_parts[0])

    def backward(dy_parts: list):
        _check_float(dy_parts, f"{name} gradient")
        c = _Call(log)
        xs, ws = c.put(x_parts, f"{name} input"), c.put(w_parts, f"{name} weights")
        gs = c.put(dy_parts, f"{name} grad")
        dx = [poplin.mat_mul(vg, g, w.transpose(), c.prog, f"{name} grad x {s}")
              for s, (vg, g, w) in enumerate(zip(c.vgs, gs, ws))]
        dw = [poplin.mat_mul(vg, x.transpose(), g, c.prog, f"{name} grad w {s}")
              for s, (vg, x, g) in enumerate(zip(c.vgs, xs, gs))]
        out = _one(c, dx + dw, dy_parts[0])
        return out[:len(dx)], out[len(dx):]

    return y, backward


def embedding(w_parts, idx_parts, log, name):
    """:func:`.sharded.embedding`: masked lookups (``LookupColumns``) added onto IPU 0;
    backward: the gradient broadcast and scatter-added (``UpdateAddColumns``)."""
    _check_float(w_parts, f"{name} weights")
    size = w_parts[0].shape[0]
    call = _Call(log)
    ws = call.put(w_parts, f"{name} weights", by_columns=True)
    offs = call.local_offsets(idx_parts, size, name, "indices")
    out = _one(call, [call.sh.reduce_onto_first(es.lookup(call.sh, ws, offs, name), name)],
               w_parts[0])[0]

    def backward(grad):
        _check_float([grad], f"{name} gradient")
        c = _Call(log)
        offs = c.local_offsets(idx_parts, size, name, "indices")
        gs = c.sh.broadcast(c.put([grad], f"{name} grad")[0], f"{name} grad")
        return _one(c, es.scatter_add(c.sh, gs, offs, size, f"{name} grad"), w_parts[0])

    return out, backward


def log_softmax(x_parts, log, name):
    """:func:`.sharded.log_softmax`: :func:`.emulated_sharded.log_softmax` (all-reduce MAX
    then ADD); backward: the row sums of ``dy`` all-reduced, ``dy - softmax * sum``."""
    _check_float(x_parts, f"{name} input")
    call = _Call(log)
    out = _one(call, es.log_softmax(call.sh, call.put(x_parts, f"{name} input"), name),
               x_parts[0])

    def backward(dy_parts: list):
        _check_float(dy_parts, f"{name} gradient")
        c = _Call(log)
        gs, outs = c.put(dy_parts, f"{name} grad"), c.put(out, f"{name} output")
        sums = c.sh.all_reduce([popops.reduce(vg, g, [1], popops.Operation.ADD, c.prog,
                                              f"{name} grad sum {s}")
                                for s, (vg, g) in enumerate(zip(c.vgs, gs))], f"{name} grad")
        n = dy_parts[0].shape[0]
        dx = [popops.map(vg, _1 - Exp(_2) * _3, [g, o, t.reshape([n, 1])], c.prog,
                         f"{name} grad {s}")
              for s, (vg, g, o, t) in enumerate(zip(c.vgs, gs, outs, sums))]
        return _one(c, dx, dy_parts[0])

    return out, backward


def take_last(x_parts, idx_parts, log, name):
    """:func:`.sharded.take_last`: ``PickColumn`` of the negated input on each shard, the
    partials added onto IPU 0; backward: ``SubtractAtColumn`` of ``-g`` into zeros."""
    _check_float(x_parts, f"{name} input")
    size = x_parts[0].shape[1]
    call = _Call(log)
    xs = call.put(x_parts, f"{name} input")
    offs = call.local_offsets(idx_parts, size, name, "indices")
    neg = [popops.map(vg, _1 * -1.0, [x], call.prog, f"{name} negate {s}")
           for s, (vg, x) in enumerate(zip(call.vgs, xs))]
    picked = call.sh.reduce_onto_first(es.pick_columns(call.sh, neg, offs, name), name)
    out = _one(call, [picked], x_parts[0])[0]

    def backward(grad):
        _check_float([grad], f"{name} gradient")
        c = _Call(log)
        offs = c.local_offsets(idx_parts, size, name, "indices")
        g0 = popops.map(c.vgs[0], _1 * -1.0, c.put([grad], f"{name} grad"), c.prog,
                        f"{name} grad negate")
        gs = c.sh.broadcast(g0, f"{name} grad")
        dx = []
        for s, vg in enumerate(c.vgs):
            d = vg.add_variable(FLOAT, list(x_parts[0].shape), f"{name} grad {s}")
            poputil.map_tensor_linearly(vg, d)
            popops.zero(vg, d, c.prog, f"{name} grad zero {s}")
            dx.append(d)
        es.subtract_at_columns(c.sh, dx, offs, gs, name)
        return _one(c, dx, x_parts[0])

    return out, backward


def log_softmax_cross_entropy(logits_parts, label_parts, log, name):
    """:func:`.sharded.log_softmax_cross_entropy`: :func:`.emulated_sharded.cross_entropy`
    with the partial losses added onto IPU 0; backward: ``g`` broadcast and
    :func:`.emulated_sharded.cross_entropy_grad` (the tied embedding's builders)."""
    _check_float(logits_parts, f"{name} logits")
    size = logits_parts[0].shape[1]
    call = _Call(log)
    offs = call.local_offsets(label_parts, size, name, "labels")
    logp, ce_parts = es.cross_entropy(call.sh, call.put(logits_parts, f"{name} logits"),
                                      offs, name)
    ce = call.sh.reduce_onto_first(ce_parts, name)
    out = _one(call, [ce] + logp, logits_parts[0])
    ce, logp_values = out[0], out[1:]

    def backward(grad):
        _check_float([grad], f"{name} gradient")
        c = _Call(log)
        offs = c.local_offsets(label_parts, size, name, "labels")
        gs = c.sh.broadcast(c.put([grad], f"{name} grad")[0], f"{name} grad")
        lp = c.put(logp_values, f"{name} log-probabilities")
        return _one(c, es.cross_entropy_grad(c.sh, lp, offs, gs, name), logits_parts[0])

    return ce, backward


__all__ = ["embedding", "log_softmax", "log_softmax_cross_entropy", "matmul", "take_last",
           "to_all"]
