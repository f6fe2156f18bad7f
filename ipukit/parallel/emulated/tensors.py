"""The tile variables of an emulated pipeline: joined variables, buffers, slots.

A stage's weights (and its accumulators of each type) are one variable, each weight a
view of it (:func:`joined`), so PopART's merged weight update (``mergeVarUpdate``) works on
one region; a stash FIFO or an inbox is a variable of ``slots`` copies of a tensor, each
mapped like it (:func:`buffer`), and :class:`Slots` says which micro-batch uses which slot.
:func:`leaves` counts the steps a program compiles to, which tells which trace events an
op made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import type_name
from ...graph import Graph
from ...poplibs import poputil
from ...program import Copy, Execute, Program, Sequence
from ...tensor import FLOAT, RegionList, Tensor, concat, single_run

# Poplar's programs (Copy, Execute, stream copies) each compile to one step; our op
# programs hold nothing else, so counting them tells which trace events an op made.
_LEAVES = (Copy, Execute)


def leaves(prog: Program) -> int:
    if isinstance(prog, Sequence):
        return sum(leaves(p) for p in prog.programs)
    return 1 if isinstance(prog, _LEAVES) else 0


def flat(ts) -> Tensor:
    """Tensors of one type as one flat view: ``poplar::concat`` of the flattened tensors
    (PopART's mergeVarUpdate joins the weights and gradients it updates at once so).
    Views of one variable that follow each other are joined as one region of it; runs of
    consecutive addresses each, as a :class:`~ipukit.tensor.RegionList` (a pipeline cycle's
    sends: no address array kept); an explicit address array otherwise."""
    ts = [t.flatten() for t in ts]
    if len(ts) == 1:
        return ts[0]
    runs, root = [single_run(t) for t in ts], root_of(ts[0])
    if all(r and root_of(t) is root for r, t in zip(runs, ts)) and all(
            a[0] + a[1] == b[0] for a, b in zip(runs, runs[1:])):
        start = runs[0][0] - root.offset
        return root.flatten().slice(start, start + sum(r[1] for r in runs))
    if all(runs):
        return RegionList(ts[0].graph, ts[0].dtype, [(b, (n,), (1,)) for b, n in runs],
                          f"concat({', '.join(t.name for t in ts)})")
    return concat(ts)


def root_of(t: Tensor) -> Tensor:
    """The variable ``t`` is a view of."""
    while t._parent is not None:
        t = t._parent
    return t


def by_type(rows) -> dict:
    """``rows`` (tuples of tensors) grouped by their tensors' types, in order."""
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault(tuple(t.dtype for t in row), []).append(row)
    return groups


def of_type(dtype) -> str:
    """How a compute set's name tells a type other than float: " (half)"."""
    return "" if dtype == FLOAT else f" ({type_name(dtype)})"


@dataclass
class Joined:
    """Tensors of one type as views of ONE variable, in a row: ``all`` the variable,
    ``views`` name -> view (shaped like its value), ``bounds`` name -> its slice."""

    all: Tensor
    views: dict
    bounds: dict


def joined(vg: Graph, dtype, shapes: dict, name: str, mapped: bool = True) -> Joined:
    """One variable holding tensors of ``shapes`` (name -> shape) in a row (mapped
    linearly unless not ``mapped``), and each one's view."""
    sizes = [math.prod(v) for v in shapes.values()]
    t = vg.add_variable(dtype, [sum(sizes)], name)
    if mapped and sum(sizes):
        poputil.map_tensor_linearly(vg, t)
    ends = np.cumsum(sizes).tolist()
    bounds = {n: slice(e - s, e) for n, s, e in zip(shapes, sizes, ends)}
    return Joined(t, {n: t.slice(b.start, b.stop).reshape(list(v))
                      for (n, v), b in zip(shapes.items(), bounds.values())}, bounds)


def map_like(vg: Graph, dst: Tensor, src: Tensor) -> None:
    """Map ``dst``'s elements to the tiles of ``src``'s (same number of elements)."""
    poputil._map_copies(vg, dst, src, 1)


def buffer(vg: Graph, like: Tensor, slots: int, name: str) -> Tensor:
    """``slots`` tile variables shaped and mapped like ``like`` (a FIFO or an inbox)."""
    t = vg.add_variable(like.dtype, (max(slots, 1),) + tuple(like.shape), name)
    poputil._map_copies(vg, t, like, max(slots, 1))  # every slot mapped as ``like``
    return t


def linear(vg: Graph, dtype, shape, name: str) -> Tensor:
    t = vg.add_variable(dtype, shape, name)
    poputil.map_tensor_linearly(vg, t)
    return t


class Slots:
    """Which slot of a buffer each micro-batch uses: the lowest free one, in op order."""

    def __init__(self):
        self.held: dict[int, int] = {}
        self.size = 0

    def put(self, m: int) -> int:
        free = sorted(set(range(self.size + 1)) - set(self.held.values()))[0]
        self.held[m] = free
        self.size = max(self.size, free + 1)
        return free

    def take(self, m: int) -> int:
        return self.held.pop(m)
