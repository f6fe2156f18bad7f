"""GCL's collectives on the emulator: copies between the virtual graphs of several IPUs
plus popops reductions.

:class:`Shards` holds one virtual graph per IPU: ``broadcast`` (to_all: a copy from
IPU 0 to every other IPU), ``reduce_onto_first`` (copies of the other IPUs' partials to
IPU 0, added there in shard order) and ``all_reduce``, GCL's ring (:func:`ring_all_reduce`;
popops ``Collectives.cpp``, CLOCKWISE_RING), which also all-reduces the replicas'
gradients of an emulated pipeline. Each IPU's tensor is cut into R fragments (popops'
``splitIntoFragments``: sizes differ by at most one element). In each of R−1
reduce-scatter steps every IPU copies one fragment to its clockwise neighbour (the ring
of popops' ``createRing``: 0, 2, 4, …, 3, 1) and the neighbours combine what they got
into their own fragment (one in-place popops map); R−1 all-gather steps send the reduced
fragments round. A step's copies are ONE ``Copy`` program, so they run side by side on
the per-IPU clocks (one external sync of the ring's IPUs). The sums are added in the
ring's order, not NumPy's: equal to float32 rounding (rtol 1e-4); MAX exactly. (kit
convention: popops (and GCL after it) has four ring methods (clockwise, anticlockwise,
a bidirectional pair, meet-in-the-middle) and, left on ``auto``, takes the clockwise
ring for 2 IPUs and one of the last two by bytes per IPU for more; the emulator, like
``cost.ring_cycles``, always runs the clockwise ring.)

The emulated ring and :func:`ipukit.cost.ring_cycles` (what the NumPy path charges) take
the same 2(R−1) steps, each moving one R-th of the tensor over one IPU-Link per IPU, so
their link terms agree. (kit convention: the cost model charges a step one hop of sync
(``ring_step_cycles``, 40 cycles on ipu2) and nothing else; the emulator charges what its
supersteps cost: the external sync of all the ring's IPUs (``global_sync_cycles``: 40
cycles for 2 or 3 IPUs, 80 for 4), the on-IPU exchange of each fragment to and from its
tiles (4 bytes a cycle a tile) and, in the R−1 reduce-scatter steps, the adds' compute
set.) Cycles of one float32 all-reduce (ipu2, 16 tiles an IPU, mapped linearly; the
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
"""

from __future__ import annotations

from ...poplibs import popops, poputil
from ...poplibs.expr import _1, _2
from ...program import Copy, Sequence
from ...tensor import Tensor, concat


def like(vg, t: Tensor, name: str) -> Tensor:
    out = vg.add_variable(t.dtype, t.shape, name)
    poputil._map_elements(vg, out, poputil.tile_of_elements(vg, t))
    return out


class Shards:
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
            here = like(vg0, parts[0], f"{name}/from ipu{s}")
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
