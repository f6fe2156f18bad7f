"""Sharded ops on the emulator: the vertices and builders of Graphcore's concurrent-pipeline
custom ops, and the sharded tied embedding (``sharded_embedding --emulate``).

The tied embedding computes what
:func:`ipukit.examples.sharded_embedding.sharded_tied_embedding` (Graphcore's
``sharded_embedding_tool.py``) does, built as Poplar programs on one virtual graph per IPU
(``graph.create_virtual_graph``). Shard s of the table W [V/S, C] lives on IPU s, spread
over its tiles by columns (every tile holds all V/S rows of a few features, as popops'
embedding plan does when the rows are few), so a lookup needs no partial results per
tile. The collectives of :mod:`ipukit.parallel.sharded` are those of :mod:`.collectives`
(to_all a broadcast, reduce_add copies onto IPU 0 and adds, all_reduce GCL's ring).

Look-ups of indices a shard does not own give zeros and their gradients are dropped on
that shard (the unsigned ``index - first row < rows`` test), so the V logits are never
gathered on one IPU. The same builders make a concurrent last stage's loss
(:mod:`.stages`) and ``parallel.sharded``'s ops with ``CollectiveLog(emulate=True)``
(:mod:`.sharded_ops`).

>>> from ipukit.examples.sharded_embedding import make_data
>>> features, indices = make_data(20, 3, 7)
>>> round(tied_embedding(features, indices, 2).loss, 5)
2.31536
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import backend
from ...engine import Engine
from ...errors import IpuError
from ...graph import Graph
from ...poplibs import poplin, popops, poputil
from ...poplibs.expr import Exp, Log, Max, _1, _2
from ...program import Execute, Sequence
from ...target import Device, IPUModel, Target
from ...tensor import FLOAT, INT, UNSIGNED_INT, Tensor
from ...trace import Trace
from ...vertex import InOut, Input, Output, State, Vector, Vertex
from .. import collectives as numpy_collectives
from .collectives import Shards, ring_all_reduce, ring_bytes_sent, ring_order


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



# -- the builders every emulated sharded op shares (the tied embedding, a concurrent last
# stage's loss, and parallel.sharded's ops with CollectiveLog(emulate=True)) ---------------
def local_offsets(sh: Shards, idx_parts: list[Tensor], size: int, name: str) -> list[Tensor]:
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


def lookup(sh: Shards, weights: list[Tensor], offsets: list[Tensor], name: str) -> list:
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


def scatter_add(sh: Shards, grads: list[Tensor], offsets: list[Tensor], size: int,
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


def log_softmax(sh: Shards, logits: list[Tensor], name: str) -> list[Tensor]:
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


def pick_columns(sh: Shards, rows: list[Tensor], offsets: list[Tensor], name: str) -> list:
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


def subtract_at_columns(sh: Shards, rows: list[Tensor], offsets: list[Tensor],
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


def cross_entropy(sh: Shards, logits: list[Tensor], offsets: list[Tensor], name: str):
    """The sharded softmax cross-entropy's forward: (log-probabilities per shard, the
    partial per-row losses per shard, to be added onto IPU 0). ``offsets``: the labels
    made local by :func:`local_offsets`."""
    logp = log_softmax(sh, logits, name)
    return logp, pick_columns(sh, logp, offsets, name)


def cross_entropy_grad(sh: Shards, logp: list[Tensor], offsets: list[Tensor],
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
    size = numpy_collectives.check_even(
        vocab, num_ipus, f"the embedding table {list(features.shape)} along dimension 0")
    numpy_collectives.CollectiveLog(num_ipus)  # the same checks (at least 2 IPUs)
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
    sh = Shards([g.create_virtual_graph(s * tpi, (s + 1) * tpi) for s in range(num_ipus)], prog)
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
    parts = numpy_collectives.shard(features, num_ipus, axis=0, name="the embedding table")
    for s, p in enumerate(parts):
        eng.write_tensor(f"w{s}", backend.to_numpy(p))
    eng.write_tensor("indices", indices.astype(np.int32))
    eng.run()
    return EmulatedShardedRun(
        float(eng.read_tensor("loss")[0]), [backend.to_numpy(p) for p in parts],
        [eng.read_tensor(f"logits{s}") for s in range(num_ipus)],
        [eng.read_tensor(f"grad{s}") for s in range(num_ipus)], eng.trace, g)


__all__ = ["EmulatedShardedRun", "cross_entropy", "cross_entropy_grad", "local_offsets",
           "log_softmax", "lookup", "pick_columns", "ring_all_reduce", "ring_bytes_sent",
           "ring_order", "scatter_add", "subtract_at_columns", "tied_embedding"]
