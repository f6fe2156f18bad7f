"""Embedding lookups: ``popops::multiSlice`` and ``popops::multiUpdateAdd``.

A table (V rows × E) is spread over tiles by whole rows
(:func:`create_sliceable_tensor`). ``multi_slice`` sends the N indices to every tile that
owns rows; each tile looks up only the rows it owns (zeros elsewhere) into its own
partial result, and an ADD reduce combines the partials, so exactly one tile
contributes each row. ``multi_update_add`` is the gradient: every owning tile receives
the N update rows and adds ``scale *`` the ones whose index it owns into its own rows
(repeated indices add up). No tile ever holds the whole table.

>>> import sys, numpy as np, ipukit as ipu
>>> from ipukit.poplibs import multislice, poputil
>>> dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
>>> g = ipu.Graph(dev.target)
>>> table = multislice.create_sliceable_tensor(g, ipu.FLOAT, [8, 2], [0], [1], "table")
>>> g.set_initial_value(table, np.arange(16).reshape(8, 2))
>>> idx = g.add_constant(ipu.UNSIGNED_INT, [3, 1], [[5], [0], [5]], "idx")
>>> g.set_tile_mapping(idx, 0)
>>> prog = ipu.Sequence()
>>> rows = multislice.multi_slice(g, table, idx, [0], [1], prog, "lookup")
>>> _ = prog.add(ipu.PrintTensor("rows", rows.reshape([3, 2])))
>>> eng = ipu.Engine(g, prog); eng.load(dev); eng.set_print_tensor_stream(sys.stdout)
>>> eng.run()
rows: [
  [10.000000 11.000000]
  [ 0.000000  1.000000]
  [10.000000 11.000000]
]
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphConnectionError, IpuError
from ..program import Execute, Sequence
from ..tensor import FLOAT, INT, UNSIGNED_INT, Tensor
from ..vertex import InOut, Input, Output, State, Vector, Vertex
from . import popops, poputil


class MultiSlice(Vertex):
    """Copy the owned rows that ``offsets`` name into ``out``; other rows get zeros."""

    offsets = Input(Vector(UNSIGNED_INT))
    base = Input(Vector(FLOAT))  # the rows this tile owns, row after row
    out = Output(Vector(FLOAT))  # N rows
    rows = State(Vector(INT))  # the table row number of each owned row

    def compute(self):
        n, r = self.rows.shape
        hit = self.offsets[:, :, None].astype(np.int64) == self.rows[:, None, :]
        base = self.base.reshape(n, r, -1)
        self.out[...] = self.xp.matmul(hit.astype(base.dtype), base).reshape(n, -1)


class MultiUpdateAdd(Vertex):
    """``base[row] += scale * sub[i]`` for every i whose offset is an owned row."""

    offsets = Input(Vector(UNSIGNED_INT))
    sub = Input(Vector(FLOAT))  # N rows
    scale = Input(FLOAT)
    base = InOut(Vector(FLOAT))
    rows = State(Vector(INT))

    def compute(self):
        n, r = self.rows.shape
        hit = self.offsets[:, :, None].astype(np.int64) == self.rows[:, None, :]
        sub = self.sub.reshape(n, hit.shape[1], -1)
        update = self.xp.matmul(hit.transpose(0, 2, 1).astype(sub.dtype), sub)
        self.base[...] += (self.scale[:, None] * update.reshape(n, -1)).astype(self.base.dtype)


def create_sliceable_tensor(graph, dtype, shape, dims, sizes, name: str = "") -> Tensor:
    """``popops::createSliceableTensor``: a (V, E) table mapped by whole rows over the tiles."""
    _check_dims(dims, sizes, name or "createSliceableTensor")
    t = graph.add_variable(dtype, shape, name)
    if len(t.shape) != 2:
        raise IpuError(f"createSliceableTensor '{name}': the table must be 2-D (rows, "
                       f"columns), got {t.shape}")
    v, e = t.shape
    poputil.set_tile_mapping(graph, t, [
        [(b * e, end * e)] if end > b else []
        for b, end in ((r0, r1) for r0, r1 in _row_blocks(v, graph.target.num_tiles))])
    return t


def _row_blocks(v, tiles):
    """Rows [b, e) of each tile: whole rows, as even as possible."""
    per = -(-v // tiles)
    return [(min(v, i * per), min(v, (i + 1) * per)) for i in range(tiles)]


def _check_dims(dims, sizes, name):
    if list(dims) != [0] or list(sizes) != [1]:
        raise IpuError(f"{name}: only dims=[0], sizes=[1] (whole rows) are supported, got "
                       f"dims={list(dims)}, sizes={list(sizes)}")


def _owners(graph, t: Tensor, name: str):
    """For each tile holding rows of ``t``: (tile, row numbers). Rows must not be split."""
    if not isinstance(t, Tensor) or t.rank != 2:
        raise IpuError(f"{name}: the table must be a 2-D tensor, got {t!r}")
    tiles = poputil.check_mapped(graph, t, name, "table").reshape(t.shape)
    split = np.flatnonzero((tiles != tiles[:, :1]).any(axis=1))
    if split.size:
        raise IpuError(
            f"{name}: row {int(split[0])} of table '{t.name}' is split over several tiles; "
            "map whole rows to tiles (popops create_sliceable_tensor does)"
        )
    row_tile = tiles[:, 0]
    return [(int(tile), np.flatnonzero(row_tile == tile)) for tile in np.unique(row_tile)]


def _check_offsets(graph, offsets, name):
    if not isinstance(offsets, Tensor) or offsets.dtype != UNSIGNED_INT:
        raise GraphConnectionError(f"{name}: offsets must be an UNSIGNED_INT tensor of shape "
                                   f"(N, 1), got {offsets!r}")
    poputil.check_mapped(graph, offsets, name, "offsets", tiles=False)
    return offsets.flatten()


def multi_slice(graph, t: Tensor, offsets: Tensor, dims, sizes, prog: Sequence,
                debug_name: str = "") -> Tensor:
    """``popops::multiSlice(graph, t, offsets, dims, sizes, prog)``: rows ``t[offsets]``.

    Returns an (N, 1, E) tensor, as Poplar does for ``dims={0}, sizes={1}``.
    """
    name = debug_name or "multiSlice"
    _check_dims(dims, sizes, name)
    if t.dtype != FLOAT:
        raise GraphConnectionError(f"{name}: table '{t.name}' must be float")
    owners = _owners(graph, t, name)
    idx = _check_offsets(graph, offsets, name)
    n, e = idx.num_elements(), t.shape[1]
    partials = graph.add_variable(FLOAT, [len(owners), n, e], name + "/partials")
    cs = graph.add_compute_set(name)
    for i, (tile, rows) in enumerate(owners):
        graph.set_tile_mapping(partials[i], tile)
        v = graph.add_vertex(cs, MultiSlice, {
            "offsets": idx, "base": poputil.take(t, (rows[:, None] * e + np.arange(e))),
            "out": partials[i].flatten()}, tile=tile)
        graph.set_initial_value(v["rows"], rows.astype(np.int32))
    prog.add(Execute(cs))
    if len(owners) == 1:
        return partials[0].reshape([n, 1, e])
    return popops.reduce(graph, partials, [0], popops.Operation.ADD, prog,
                         name + "/combine").reshape([n, 1, e])


def multi_update_add(graph, t: Tensor, s: Tensor, offsets: Tensor, scale, dims, sizes,
                     prog: Sequence, debug_name: str = "") -> None:
    """``popops::multiUpdateAdd(graph, t, s, offsets, scale, dims, sizes, prog)``:
    ``t[offsets[i]] += scale * s[i]`` (s is (N, 1, E) or (N, E); scale a one-element
    FLOAT tensor or a number)."""
    name = debug_name or "multiUpdateAdd"
    _check_dims(dims, sizes, name)
    owners = _owners(graph, t, name)
    idx = _check_offsets(graph, offsets, name)
    n, e = idx.num_elements(), t.shape[1]
    poputil.check_mapped(graph, s, name, "updates", tiles=False)
    if s.num_elements() != n * e or s.dtype != FLOAT or t.dtype != FLOAT:
        raise IpuError(f"{name}: updates '{s.name}' {s.shape} must be float with {n} rows of "
                       f"{e} (one per offset in '{offsets.name}') for table '{t.name}' {t.shape}")
    if not isinstance(scale, Tensor):
        value = float(scale)
        scale = graph.add_constant(FLOAT, [1], value, f"{name}/scale")
        graph.set_tile_mapping(scale, owners[0][0])
    poputil.check_mapped(graph, scale, name, "scale", tiles=False)
    s, scale = (popops.copy_if_aliased(graph, x, t, prog, name) for x in (s, scale))
    cs = graph.add_compute_set(name)
    for tile, rows in owners:
        v = graph.add_vertex(cs, MultiUpdateAdd, {
            "offsets": idx, "sub": s.flatten(), "scale": scale.reshape(()),
            "base": poputil.take(t, (rows[:, None] * e + np.arange(e)))}, tile=tile)
        graph.set_initial_value(v["rows"], rows.astype(np.int32))
    prog.add(Execute(cs))
