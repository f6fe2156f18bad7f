"""The sharded tied embedding on the emulator: ``sharded_embedding --emulate``.

The same computation as :func:`ipukit.examples.sharded_embedding.sharded_tied_embedding`
(Graphcore's ``sharded_embedding_tool.py``), built as Poplar programs on one virtual graph
per IPU (``graph.create_virtual_graph``). Shard s of the table W [V/S, C] lives on IPU s,
spread over its tiles by columns (every tile holds all V/S rows of a few features, as
popops' embedding plan does when the rows are few), so a lookup needs no partial results
per tile. The collectives of :mod:`.sharded` become inter-IPU ``Copy`` programs plus
popops reductions:

* ``to_all`` (broadcast): a copy from IPU 0 to every other IPU;
* ``reduce_add``: copies of the other IPUs' partials to IPU 0, added there in shard order;
* ``all_reduce`` (MAX, ADD): GCL's ring (:func:`ring_all_reduce`; popops
  ``Collectives.cpp``, CLOCKWISE_RING), also the replicas' gradient all-reduce of
  :mod:`.emulated`. Each IPU's tensor is cut into R fragments (popops'
  ``splitIntoFragments``: sizes differ by at most one element). In each of R−1
  reduce-scatter steps every IPU copies one fragment to its clockwise neighbour (the ring
  of popops' ``createRing``: 0, 2, 4, …, 3, 1) and the neighbours combine what they got
  into their own fragment (one in-place popops map); R−1 all-gather steps send the reduced
  fragments round. A step's copies are ONE ``Copy`` program, so they run side by side on
  the per-IPU clocks (one external sync of the ring's IPUs). The sums are added in the
  ring's order, not NumPy's: equal to float32 rounding (rtol 1e-4); MAX exactly. Kit
  convention: popops (and GCL after it) has four ring methods (clockwise, anticlockwise,
  a bidirectional pair, meet-in-the-middle) and, left on ``auto``, takes the clockwise
  ring for 2 IPUs and one of the last two by bytes per IPU for more; the emulator, like
  ``cost.ring_cycles``, always runs the clockwise ring.

The emulated ring and :func:`ipukit.cost.ring_cycles` (what the NumPy path charges) take
the same 2(R−1) steps, each moving one R-th of the tensor over one IPU-Link per IPU, so
their link terms agree. Kit convention: the cost model charges a step one hop of sync
(``ring_step_cycles``, 40 cycles on ipu2) and nothing else; the emulator charges what its
supersteps cost: the external sync of all the ring's IPUs (``global_sync_cycles``: 40
cycles for 2 or 3 IPUs, 80 for 4), the on-IPU exchange of each fragment to and from its
tiles (4 bytes a cycle a tile) and, in the R−1 reduce-scatter steps, the adds' compute
set. Cycles of one float32 all-reduce (ipu2, 16 tiles an IPU, mapped linearly; the
reduce onto IPU 0 and broadcast back this replaced in brackets)::

    R  bytes     emulated ring        cost.ring_cycles
    2  16           190     (196)          82
    2  4,000        824   (1,216)         472
    2  400,000   64,282 (103,400)      39,198
    4  16           768     (588)         243
    4  4,000      2,124   (3,648)         827
    4  400,000  134,412 (310,200)      58,917

The emulated ring thus takes 1.6 to 3.2 times what the NumPy path charges: more for small
tensors (the syncs and adds) and for 4 IPUs (each fragment on a quarter of the tiles).

Look-ups of indices a shard does not own give zeros and their gradients are dropped on
that shard (the unsigned ``index - first row < rows`` test), so the V logits are never
gathered on one IPU.

>>> from ipukit.examples.sharded_embedding import make_data
>>> features, indices = make_data(20, 3, 7)
>>> round(tied_embedding(features, indices, 2).loss, 5)
2.31536
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import backend
from ..engine import Engine
from ..errors import IpuError
from ..graph import Graph
from ..poplibs import poplin, popops, poputil
from ..poplibs.expr import Exp, Log, Max, _1, _2
from ..program import Copy, Execute, Sequence
from ..target import Device, IPUModel, Target
from ..tensor import FLOAT, INT, UNSIGNED_INT, Tensor, concat
from ..trace import Trace
from ..vertex import InOut, Input, Output, State, Vector, Vertex
from . import sharded


class LocalOffsets(Vertex):
    """``out = index - first`` as unsigned ints: indices below the shard wrap to huge
    numbers, so one test ``out < rows`` says whether the shard owns the row."""

    idx = Input(Vector(INT))
    out = Output(Vector(UNSIGNED_INT))
    first = State(INT)

    def compute(self):
        self.out[...] = (self.idx.astype(np.int64) - self.first[:, None]).astype(np.uint32)


class LookupColumns(Vertex):
    """``out[n] = base[offsets[n]]`` for owned rows, zeros for the others; ``base`` is the
    tile's block of columns of every row (``rows`` x k), ``out`` N x k."""

    offsets = Input(Vector(UNSIGNED_INT))
    base = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))
    rows = State(INT)

    def compute(self):
        xp, n, r = self.xp, self.base.shape[0], int(self.rows[0])
        base = self.base.reshape(n, r, -1)
        off = self.offsets.astype(np.int64)
        hit = off < r
        rows = xp.take_along_axis(base, xp.where(hit, off, 0)[:, :, None], axis=1)
        self.out[...] = (rows * hit[:, :, None]).reshape(n, -1)


class UpdateAddColumns(Vertex):
    """``base[offsets[n]] += sub[n]`` for the owned rows (repeated indices add up)."""

    offsets = Input(Vector(UNSIGNED_INT))
    sub = Input(Vector(FLOAT))
    base = InOut(Vector(FLOAT))
    rows = State(INT)

    def compute(self):
        xp, n, r = self.xp, self.base.shape[0], int(self.rows[0])
        base = self.base.reshape(n, r, -1)
        sub = self.sub.reshape(n, self.offsets.shape[1], -1)
        off = self.offsets.astype(np.int64)
        for i in range(n):
            hit = off[i] < r
            xp.add.at(base[i], off[i][hit], sub[i][hit])
        self.base[...] = base.reshape(n, -1)


class PickColumn(Vertex):
    """``out = -row[col]`` where the shard owns column ``col``, else 0 (``take_last`` of
    the negated log-probabilities)."""

    row = Input(Vector(FLOAT))
    col = Input(UNSIGNED_INT)
    out = Output(FLOAT)

    def compute(self):
        xp, k = self.xp, self.row.shape[1]
        col = self.col.astype(np.int64)
        hit = col < k
        picked = self.row[xp.arange(len(col)), xp.where(hit, col, 0)]
        self.out[...] = xp.where(hit, -picked, 0)


class SubtractAtColumn(Vertex):
    """``row[col] -= g`` where the shard owns column ``col`` (the fused cross-entropy
    backward: softmax minus one-hot, scaled by g)."""

    row = InOut(Vector(FLOAT))
    col = Input(UNSIGNED_INT)
    g = Input(FLOAT)

    def compute(self):
        xp, k = self.xp, self.row.shape[1]
        col = self.col.astype(np.int64)
        hit = xp.flatnonzero(col < k)
        self.row[hit, col[hit]] -= self.g[hit]


@dataclass
class EmulatedShardedRun:
    """What the emulated sharded stage leaves on the IPUs (one array per IPU per list),
    with the run's trace."""

    loss: float
    weights: list
    logits: list
    grad: list
    trace: Trace
    graph: Graph


def _by_columns(vg, t: Tensor) -> None:
    """Map a (rows, C) tensor so that each tile holds all rows of a block of columns."""
    for i, c0, c1 in _column_blocks(t.shape[1], vg):
        vg.set_tile_mapping(t.slice([0, c0], [t.shape[0], c1]), i)


def _column_blocks(channels: int, vg):
    """(tile, first column, end column) of each tile's block of ``channels`` columns."""
    tiles = min(channels, vg.target.num_tiles)
    for i in range(tiles):
        yield i, i * channels // tiles, (i + 1) * channels // tiles


def _like(vg, t: Tensor, name: str) -> Tensor:
    out = vg.add_variable(t.dtype, t.shape, name)
    poputil._map_elements(vg, out, poputil.tile_of_elements(vg, t))
    return out


class _Shards:
    """One virtual graph per IPU and the collectives between them as programs."""

    def __init__(self, vgs: list, prog: Sequence):
        self.vgs, self.prog = vgs, prog

    def broadcast(self, t: Tensor, name: str) -> list[Tensor]:
        """``t`` (on IPU 0) copied to every IPU: one tensor per shard."""
        out = [t]
        for s, vg in enumerate(self.vgs[1:], 1):
            c = vg.add_variable(t.dtype, t.shape, f"{name}@ipu{s}")
            poputil.map_tensor_linearly(vg, c)
            self.prog.add(Copy(t, c))
            out.append(c)
        return out

    def reduce_onto_first(self, parts: list[Tensor], name: str, op=None) -> Tensor:
        """``parts[0] op= parts[s]`` for s = 1.. (copied to IPU 0 first): the total, in
        place of ``parts[0]``. ``op`` is an expression of (_1 total, _2 part); ADD by
        default."""
        vg0 = self.vgs[0]
        for s, part in enumerate(parts[1:], 1):
            here = _like(vg0, parts[0], f"{name}/from ipu{s}")
            self.prog.add(Copy(part, here))
            popops.map(vg0, op if op is not None else _1 + _2, [parts[0], here], self.prog,
                       f"{name}/combine ipu{s}", inplace=True)
        return parts[0]

    def all_reduce(self, parts: list[Tensor], name: str, op=None) -> list[Tensor]:
        """``parts`` all-reduced in place by GCL's clockwise ring (:func:`ring_all_reduce`);
        ``op`` as for :meth:`reduce_onto_first`."""
        ring_all_reduce([[p] for p in parts], self.prog, name, op)
        return parts


# -- GCL's ring (popops Collectives.cpp, CLOCKWISE_RING) -----------------------------------
def ring_order(count: int) -> list[int]:
    """The ranks clockwise round the ring from rank 0, as popops' ``createRing`` lays them
    on the IPU-Link ladder: the even ranks up, the odd ones back down.

    >>> ring_order(4), ring_order(5)
    ([0, 2, 3, 1], [0, 2, 4, 3, 1])
    """
    return list(range(0, count, 2)) + list(range(1, count, 2))[::-1]


def fragment_bounds(size: int, count: int) -> list[tuple[int, int]]:
    """popops' ``splitIntoFragments``: fragment f of a flat tensor of ``size`` elements is
    ``[size * f // count, size * (f + 1) // count)`` (sizes differ by at most one).

    >>> fragment_bounds(10, 4)
    [(0, 2), (2, 5), (5, 7), (7, 10)]
    """
    return [(size * f // count, size * (f + 1) // count) for f in range(count)]


def _ring_moves(count: int, step: int, gather: bool):
    """(sender, receiver, fragment) of each copy of one ring step. The IPU at ring position
    p sends to position p + 1 and ends up owning fragment ``ring[p]`` (its own rank's, so
    that with RTS replica r reduces shard r): in reduce-scatter step s it sends fragment
    ``ring[p - s - 1]``, the one it reduced in the step before; in all-gather step s,
    fragment ``ring[p - s]``, its own first, then what it was just sent."""
    ring = ring_order(count)
    for p in range(count):
        yield ring[p], ring[(p + 1) % count], ring[(p - step - (0 if gather else 1)) % count]


def _fragments(parts: list[list[Tensor]], bounds) -> list[list[list[Tensor]]]:
    """``[rank][fragment]``: the non-empty flat slices of that fragment of rank's tensors."""
    count = len(parts)
    out = [[[] for _ in range(count)] for _ in parts]
    for r, tensors in enumerate(parts):
        for t in tensors:
            flat = t.flatten()
            for f, (lo, hi) in enumerate(bounds(flat.num_elements(), count)):
                if hi > lo:
                    out[r][f].append(flat[lo:hi])
    return out


def _named_concat(pieces: list[Tensor], name: str) -> Tensor:
    joined = concat(pieces)
    return Tensor(joined.graph, joined.dtype, joined.idx, name)


def _ring_step(frags, step: int, gather: bool):
    """One step's (sources, destinations) by dtype (one Copy each: one dtype a Copy)."""
    by_type: dict = {}
    for a, b, f in _ring_moves(len(frags), step, gather):
        for src, dst in zip(frags[a][f], frags[b][f]):
            srcs, dsts = by_type.setdefault(src.dtype, ([], []))
            srcs.append(src)
            dsts.append(dst)
    return by_type.values()


def ring_reduce_scatter(parts: list[list[Tensor]], prog: Sequence, name: str, op=None,
                        bounds=fragment_bounds, scale: float | None = None) -> None:
    """GCL's ring reduce-scatter (``reduceScatterCrossReplica``; popops' CLOCKWISE_RING):
    ``parts[r]`` are rank r's tensors (the same shapes on every rank), each cut into R
    fragments by ``bounds``. In each of the R−1 steps every rank copies one fragment to
    its clockwise neighbour in ONE ``Copy`` (so the steps' copies run side by side on the
    per-IPU clocks, each an external sync of the ring's IPUs), and the neighbours combine
    it into their own fragment in one in-place popops map (``op``: an expression of
    (_1 own, _2 received), ADD by default). Rank r ends with fragment r reduced, in
    place (then times ``scale``, if given: a MEAN); the other fragments are left partial.

    >>> import numpy as np, ipukit as ipu
    >>> from ipukit.poplibs import poputil
    >>> dev = ipu.IPUModel("ipu2", num_ipus=2, tiles_per_ipu=2).create_device()
    >>> g, prog = ipu.Graph(dev.target), ipu.Sequence()
    >>> parts = [[g.add_variable(ipu.FLOAT, [4], f"x{r}")] for r in range(2)]
    >>> for r, (t,) in enumerate(parts):  # rank r's tensor on IPU r
    ...     poputil.map_tensor_linearly(g.create_virtual_graph(2 * r, 2 * r + 2), t)
    ...     g.create_host_write(f"x{r}", t)
    ...     g.create_host_read(f"x{r}", t)
    >>> ring_reduce_scatter(parts, prog, "sum")
    >>> eng = ipu.Engine(g, [prog])
    >>> eng.load(dev)
    >>> for r in range(2):
    ...     eng.write_tensor(f"x{r}", np.arange(4) + 10 * r)  # [0, 1, 2, 3], [10, ..., 13]
    >>> eng.run(0)
    >>> [eng.read_tensor(f"x{r}").tolist() for r in range(2)]
    [[10.0, 12.0, 2.0, 3.0], [10.0, 11.0, 14.0, 16.0]]
    """
    frags = _fragments(parts, bounds)
    graph = parts[0][0].graph
    for step in range(len(parts) - 1):
        for srcs, own in _ring_step(frags, step, gather=False):
            step_name = f"{name}/ring reduce-scatter {step}"
            own = _named_concat(own, f"{step_name}/own")
            buf = graph.add_variable(own.dtype, [own.num_elements()], f"{step_name}/received")
            poputil._map_elements(graph, buf, poputil.tile_of_elements(graph, own))
            prog.add(Copy(_named_concat(srcs, f"{step_name}/sent"), buf))
            popops.map(graph, op if op is not None else _1 + _2, [own, buf], prog,
                       f"{step_name}/combine", inplace=True)
    if scale is not None:
        done: dict = {}
        for r in range(len(parts)):
            for t in frags[r][r]:
                done.setdefault(t.dtype, []).append(t)
        for pieces in done.values():
            popops.map(graph, _1 * scale, [_named_concat(pieces, f"{name}/reduced")], prog,
                       f"{name}/ring scale", inplace=True)


def ring_all_gather(parts: list[list[Tensor]], prog: Sequence, name: str,
                    bounds=fragment_bounds) -> None:
    """GCL's ring all-gather (``allGatherCrossReplica``): rank r's fragment r of its
    tensors copied round the ring into every other rank's, R−1 steps of one ``Copy``.

    >>> import numpy as np, ipukit as ipu
    >>> from ipukit.poplibs import poputil
    >>> dev = ipu.IPUModel("ipu2", num_ipus=2, tiles_per_ipu=2).create_device()
    >>> g, prog = ipu.Graph(dev.target), ipu.Sequence()
    >>> parts = [[g.add_variable(ipu.FLOAT, [4], f"x{r}")] for r in range(2)]
    >>> for r, (t,) in enumerate(parts):  # rank r's tensor on IPU r
    ...     poputil.map_tensor_linearly(g.create_virtual_graph(2 * r, 2 * r + 2), t)
    ...     g.create_host_write(f"x{r}", t)
    ...     g.create_host_read(f"x{r}", t)
    >>> ring_all_gather(parts, prog, "gather")
    >>> eng = ipu.Engine(g, [prog])
    >>> eng.load(dev)
    >>> for r in range(2):
    ...     eng.write_tensor(f"x{r}", np.arange(4) + 10 * r)  # [0, 1, 2, 3], [10, ..., 13]
    >>> eng.run(0)
    >>> [eng.read_tensor(f"x{r}").tolist() for r in range(2)]
    [[0.0, 1.0, 12.0, 13.0], [0.0, 1.0, 12.0, 13.0]]
    """
    frags = _fragments(parts, bounds)
    for step in range(len(parts) - 1):
        for srcs, dsts in _ring_step(frags, step, gather=True):
            step_name = f"{name}/ring all-gather {step}"
            prog.add(Copy(_named_concat(srcs, f"{step_name}/sent"),
                          _named_concat(dsts, f"{step_name}/received")))


def ring_all_reduce(parts: list[list[Tensor]], prog: Sequence, name: str, op=None,
                    scale: float | None = None) -> None:
    """GCL's ring all-reduce (``allReduceCrossReplica``, CLOCKWISE_RING), in place:
    :func:`ring_reduce_scatter` then :func:`ring_all_gather`, 2(R−1) steps of one
    ``Copy`` each (popops' fragments, :func:`fragment_bounds`).

    >>> import numpy as np, ipukit as ipu
    >>> from ipukit.poplibs import poputil
    >>> dev = ipu.IPUModel("ipu2", num_ipus=2, tiles_per_ipu=2).create_device()
    >>> g, prog = ipu.Graph(dev.target), ipu.Sequence()
    >>> parts = [[g.add_variable(ipu.FLOAT, [4], f"x{r}")] for r in range(2)]
    >>> for r, (t,) in enumerate(parts):  # rank r's tensor on IPU r
    ...     poputil.map_tensor_linearly(g.create_virtual_graph(2 * r, 2 * r + 2), t)
    ...     g.create_host_write(f"x{r}", t)
    ...     g.create_host_read(f"x{r}", t)
    >>> ring_all_reduce(parts, prog, "sum")
    >>> eng = ipu.Engine(g, [prog])
    >>> eng.load(dev)
    >>> for r in range(2):
    ...     eng.write_tensor(f"x{r}", np.arange(4) + 10 * r)  # [0, 1, 2, 3], [10, ..., 13]
    >>> eng.run(0)
    >>> [eng.read_tensor(f"x{r}").tolist() for r in range(2)]
    [[10.0, 12.0, 14.0, 16.0], [10.0, 12.0, 14.0, 16.0]]
    """
    ring_reduce_scatter(parts, prog, name, op, scale=scale)
    ring_all_gather(parts, prog, name)


def ring_bytes_sent(size: int, itemsize: int, count: int,
                    bounds=fragment_bounds) -> list[int]:
    """Bytes each rank sends in a ring all-reduce of ``size`` elements: every fragment
    twice (once reduced partly, once whole), except its own and its clockwise neighbour's,
    once each (2(R−1)/R of the tensor when R divides it).

    >>> ring_bytes_sent(10, 4, 4)  # fragments of 2, 3, 2, 3 floats; the ring 0, 2, 3, 1
    [64, 60, 60, 56]
    """
    lengths = [hi - lo for lo, hi in bounds(size, count)]
    sent = [0] * count
    for step in range(count - 1):
        for gather in (False, True):
            for a, _, f in _ring_moves(count, step, gather):
                sent[a] += lengths[f] * itemsize
    return sent



# -- the builders every emulated sharded op shares (the tied embedding, a concurrent last
# stage's loss, and parallel.sharded's ops with CollectiveLog(emulate=True)) ---------------
def local_offsets(sh: _Shards, idx_parts: list[Tensor], size: int, name: str) -> list[Tensor]:
    """Per shard s, ``idx - s * size`` as unsigned ints (``LocalOffsets``): an index the
    shard owns gives its row/column there, any other one a number >= ``size``."""
    out = []
    for s, (vg, idx) in enumerate(zip(sh.vgs, idx_parts)):
        off = vg.add_variable(UNSIGNED_INT, [idx.num_elements()], f"{name} {s}")
        vg.set_tile_mapping(off, 0)
        cs = vg.add_compute_set(f"{name} {s}")
        v = vg.add_vertex(cs, LocalOffsets, {"idx": idx.flatten(), "out": off}, tile=0)
        vg.set_initial_value(v["first"], s * size)
        sh.prog.add(Execute(cs))
        out.append(off)
    return out


def _by_column_blocks(vg, cs, cls, offsets: Tensor, base: Tensor, field: str, t: Tensor):
    """One ``cls`` vertex per column block of the [size, C] ``base`` and the [n, C] ``t``
    (connected to ``field``), each with the shard's row ``offsets``."""
    (size, channels), n = base.shape, t.shape[0]
    for i, c0, c1 in _column_blocks(channels, vg):
        v = vg.add_vertex(cs, cls, {"offsets": offsets,
                                    "base": base.slice([0, c0], [size, c1]),
                                    field: t.slice([0, c0], [n, c1])}, tile=i)
        vg.set_initial_value(v["rows"], size)


def lookup(sh: _Shards, weights: list[Tensor], offsets: list[Tensor], name: str) -> list:
    """The masked ``multiSlice`` of each shard: rows it owns, zeros for the others (one
    partial [N, C] per shard; ``weights`` mapped by columns)."""
    parts = []
    for s, (vg, w, off) in enumerate(zip(sh.vgs, weights, offsets)):
        part = vg.add_variable(FLOAT, [off.shape[0], w.shape[1]], f"{name}/partial {s}")
        _by_columns(vg, part)
        cs = vg.add_compute_set(f"{name}/lookup {s}")
        _by_column_blocks(vg, cs, LookupColumns, off, w, "out", part)
        sh.prog.add(Execute(cs))
        parts.append(part)
    return parts


def scatter_add(sh: _Shards, grads: list[Tensor], offsets: list[Tensor], size: int,
                name: str) -> list[Tensor]:
    """The lookup's backward (``multiUpdateAdd``): per shard a zeroed [size, C] gradient
    with ``grads[n]`` added at each owned row ``offsets[n]``."""
    out = []
    for s, (vg, gr, off) in enumerate(zip(sh.vgs, grads, offsets)):
        dw = vg.add_variable(FLOAT, [size, gr.shape[1]], f"{name} {s}")
        _by_columns(vg, dw)
        popops.zero(vg, dw, sh.prog, f"{name} zero {s}")
        cs = vg.add_compute_set(f"{name} scatter-add {s}")
        _by_column_blocks(vg, cs, UpdateAddColumns, off, dw, "sub", gr)
        sh.prog.add(Execute(cs))
        out.append(dw)
    return out


def log_softmax(sh: _Shards, logits: list[Tensor], name: str) -> list[Tensor]:
    """Log-softmax over a vocabulary sharded by columns: all-reduce MAX of the row maxima
    (``"<name> max"``), then all-reduce ADD of the partial sums (``"<name> sum"``)."""
    prog, n = sh.prog, logits[0].shape[0]
    row_max = sh.all_reduce([popops.reduce(vg, lg, [1], popops.Operation.MAX, prog,
                                           f"{name} max {s}")
                             for s, (vg, lg) in enumerate(zip(sh.vgs, logits))],
                            f"{name} max", Max(_1, _2))
    shifted = [popops.map(vg, _1 - _2, [lg, m.reshape([n, 1])], prog, f"{name} shifted {s}")
               for s, (vg, lg, m) in enumerate(zip(sh.vgs, logits, row_max))]
    denom = sh.all_reduce([popops.reduce(vg, popops.map(vg, Exp(_1), [t], prog,
                                                        f"{name} exp {s}"),
                                         [1], popops.Operation.ADD, prog, f"{name} sum {s}")
                           for s, (vg, t) in enumerate(zip(sh.vgs, shifted))], f"{name} sum")
    return [popops.map(vg, _1 - Log(_2), [t, d.reshape([n, 1])], prog,
                       f"{name} log_softmax {s}")
            for s, (vg, t, d) in enumerate(zip(sh.vgs, shifted, denom))]


def _row_tiles(vg, t: Tensor):
    """The tile holding the first element of each row of ``t``."""
    return poputil.tile_of_elements(vg, t).reshape(t.shape[0], -1)[:, 0]


def pick_columns(sh: _Shards, rows: list[Tensor], offsets: list[Tensor], name: str) -> list:
    """Per shard ``-rows[b, offsets[b]]`` where it owns that column, else 0 (``PickColumn``,
    the ``take_last`` of negated log-probabilities): one [B] partial per shard."""
    out = []
    for s, (vg, x, off) in enumerate(zip(sh.vgs, rows, offsets)):
        n = x.shape[0]
        part = vg.add_variable(FLOAT, [n], f"{name} partial {s}")
        tiles = _row_tiles(vg, x)
        cs = vg.add_compute_set(f"{name} take_last {s}")
        for b in range(n):
            vg.set_tile_mapping(part[b], int(tiles[b]))
            vg.add_vertex(cs, PickColumn, {"row": x[b], "col": off[b], "out": part[b]},
                          tile=int(tiles[b]))
        sh.prog.add(Execute(cs))
        out.append(part)
    return out


def subtract_at_columns(sh: _Shards, rows: list[Tensor], offsets: list[Tensor],
                        g_parts: list[Tensor], name: str) -> None:
    """Per shard ``rows[b, offsets[b]] -= g[b]`` where it owns that column
    (``SubtractAtColumn``: the one-hot of the fused cross-entropy backward)."""
    for s, (vg, x, off, g) in enumerate(zip(sh.vgs, rows, offsets, g_parts)):
        tiles = _row_tiles(vg, x)
        cs = vg.add_compute_set(f"{name} minus one-hot {s}")
        for b in range(x.shape[0]):
            vg.add_vertex(cs, SubtractAtColumn, {"row": x[b], "col": off[b], "g": g[b]},
                          tile=int(tiles[b]))
        sh.prog.add(Execute(cs))


def cross_entropy(sh: _Shards, logits: list[Tensor], offsets: list[Tensor], name: str):
    """The sharded softmax cross-entropy's forward: (log-probabilities per shard, the
    partial per-row losses per shard, to be added onto IPU 0). ``offsets``: the labels
    made local by :func:`local_offsets`."""
    logp = log_softmax(sh, logits, name)
    return logp, pick_columns(sh, logp, offsets, name)


def cross_entropy_grad(sh: _Shards, logp: list[Tensor], offsets: list[Tensor],
                       g_parts: list[Tensor], name: str) -> list[Tensor]:
    """Its fused backward: ``g * (softmax - onehot(label))`` on every shard, the one-hot
    subtracted only on the shard owning the label; ``g_parts``: g [B] on every shard."""
    n = logp[0].shape[0]
    d = [popops.map(vg, Exp(_1) * _2, [lp, g.reshape([n, 1])], sh.prog,
                    f"{name} softmax x grad {s}")
         for s, (vg, lp, g) in enumerate(zip(sh.vgs, logp, g_parts))]
    subtract_at_columns(sh, d, offsets, g_parts, name)
    return d


def tied_embedding(features, indices, num_ipus: int, target: Target | None = None,
                   tiles_per_ipu: int | None = None) -> EmulatedShardedRun:
    """Forward and backward of the tied embedding on ``num_ipus`` emulated IPUs."""
    features = np.asarray(features)
    if features.dtype != np.float32:
        raise IpuError(f"the emulated sharded embedding runs float32 tables, got "
                       f"{features.dtype}; drop --fp16 with --emulate")
    vocab, channels = features.shape
    size = sharded.check_even(vocab, num_ipus, f"the embedding table {list(features.shape)} "
                              "along dimension 0")
    sharded.CollectiveLog(num_ipus)  # the same checks (at least 2 IPUs)
    indices = backend.to_numpy(indices)
    if indices.min() < 0 or indices.max() >= vocab:
        bad = int(indices.min() if indices.min() < 0 else indices.max())
        raise IpuError(f"embedding indices holds {bad}, outside 0..{vocab - 1} (the {vocab} "
                       "rows/classes over all shards)")
    if target is None:
        target = IPUModel("ipu2", num_ipus=num_ipus,
                          tiles_per_ipu=tiles_per_ipu).create_device().target
    n = len(indices)
    g = Graph(target)
    prog = Sequence()
    tpi = target.tiles_per_ipu
    sh = _Shards([g.create_virtual_graph(s * tpi, (s + 1) * tpi) for s in range(num_ipus)], prog)
    vgs = sh.vgs
    weights = []
    for s, vg in enumerate(vgs):
        w = vg.add_variable(FLOAT, [size, channels], f"embedding shard {s}")
        _by_columns(vg, w)
        g.create_host_write(f"w{s}", w)
        weights.append(w)
    idx0 = vgs[0].add_variable(INT, [n], "indices")
    vgs[0].set_tile_mapping(idx0, 0)
    g.create_host_write("indices", idx0)
    idx = sh.broadcast(idx0, "indices")  # to_all
    local = local_offsets(sh, idx, size, "embedding/local indices")  # rows each shard owns
    x = sh.reduce_onto_first(lookup(sh, weights, local, "embedding"), "embedding")  # onto IPU 0
    xs = sh.broadcast(x, "embedded")  # to_all
    logits = [poplin.mat_mul(vg, xs[s], weights[s].transpose(), prog, f"projection {s}")
              for s, vg in enumerate(vgs)]
    logp, ce_parts = cross_entropy(sh, logits, local, "cross_entropy")
    ce = sh.reduce_onto_first(ce_parts, "cross_entropy")
    total = popops.reduce(vgs[0], ce, [0], popops.Operation.ADD, prog, "loss sum")
    loss = popops.map(vgs[0], _1 * (1.0 / n), [total.reshape([1])], prog, "mean loss")
    g.create_host_read("loss", loss)
    # backward: the mean's gradient broadcast, the fused cross-entropy backward per shard
    g0 = vgs[0].add_constant(FLOAT, [n], np.full(n, 1.0 / n, np.float32), "dloss/dce")
    poputil.map_tensor_linearly(vgs[0], g0)
    dlogits = cross_entropy_grad(sh, logp, local, sh.broadcast(g0, "cross_entropy grad"),
                                 "cross_entropy")
    dx_parts = [poplin.mat_mul(vg, dlogits[s], weights[s], prog, f"projection grad x {s}")
                for s, vg in enumerate(vgs)]
    dw_proj = [poplin.mat_mul(vg, dlogits[s].transpose(), xs[s], prog,
                              f"projection grad w {s}") for s, vg in enumerate(vgs)]
    dx = sh.reduce_onto_first(dx_parts, "embedded grad")  # to_all's backward
    dxs = sh.broadcast(dx, "embedding grad")  # the lookup's backward: scatter-add
    grads = scatter_add(sh, dxs, local, size, "embedding grad")
    for s, (vg, dw) in enumerate(zip(vgs, grads)):
        popops.add_in_place(vg, dw, dw_proj[s], prog, f"tied grad {s}")  # both uses of W
        g.create_host_read(f"grad{s}", dw)
        g.create_host_read(f"logits{s}", logits[s])
    eng = Engine(g, prog)
    eng.load(Device(target))
    parts = sharded.shard(features, num_ipus, axis=0, name="the embedding table")
    for s, p in enumerate(parts):
        eng.write_tensor(f"w{s}", backend.to_numpy(p))
    eng.write_tensor("indices", indices.astype(np.int32))
    eng.run()
    return EmulatedShardedRun(
        float(eng.read_tensor("loss")[0]), [backend.to_numpy(p) for p in parts],
        [eng.read_tensor(f"logits{s}") for s in range(num_ipus)],
        [eng.read_tensor(f"grad{s}") for s in range(num_ipus)], eng.trace, g)
