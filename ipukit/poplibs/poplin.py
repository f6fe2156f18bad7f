"""poplin: matrix multiplication split over tiles (``poplin::matMul``).

``mat_mul(graph, a, b, prog)`` computes ``a @ b`` (M×K · K×N) with a plan in the spirit
of Poplar's: the output is cut into ``tiles_m × tiles_n`` blocks and the inner dimension
into ``tiles_k`` pieces, one (block, piece) per tile. Each tile multiplies its pieces of
``a`` and ``b`` (fetched by exchange) into a block of partial sums; when ``tiles_k > 1``
a second compute set adds the partials up on the tiles of the (linearly mapped) output.
So a learner sees the compute sets, the exchange of the operands and of the partials,
and the memory of the partials in the profile. ``mat_mul_with_output``
(``poplin::matMulWithOutput``) writes the product into a tensor mapped already (the tiles
that computed a block send it there). ``mat_mul_grouped``
(``poplin::matMulGrouped``) does G such products, ``C[g] = A[g] @ B[g]``, in one compute set.

>>> import sys, numpy as np, ipukit as ipu
>>> from ipukit.poplibs import poplin, poputil
>>> dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
>>> g = ipu.Graph(dev.target)
>>> a = g.add_constant(ipu.FLOAT, [2, 3], np.arange(6), "a")
>>> b = g.add_constant(ipu.FLOAT, [3, 2], np.ones((3, 2)), "b")
>>> poputil.map_tensor_linearly(g, a); poputil.map_tensor_linearly(g, b)
>>> prog = ipu.Sequence()
>>> c = poplin.mat_mul(g, a, b, prog, "c")
>>> _ = prog.add(ipu.PrintTensor("c", c))
>>> eng = ipu.Engine(g, prog); eng.load(dev); eng.set_print_tensor_stream(sys.stdout)
>>> eng.run()
c: [
  [ 3.000000  3.000000]
  [12.000000 12.000000]
]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from ..errors import GraphConnectionError, IpuError
from ..program import Execute, Sequence
from ..tensor import INT, TYPE_NAMES, Tensor, single_run
from ..vertex import Input, Output, State, Vector, Vertex
from . import popops, poputil

#: Cycles to start a matmul vertex and set up its loops (approximate).
VERTEX_OVERHEAD = 16


class MatMulPartial(Vertex):
    """``a`` (rows × k) times ``b`` (k × cols) into ``out`` (rows × cols); ``k`` is State.

    Like Poplar's convolution vertices it is a *supervisor* vertex: one per tile, its
    block shared by the tile's 6 workers. The AMP unit does 16 fp32 multiply-accumulates
    per tile cycle, so the tile needs MACs / 16 cycles plus overhead; the estimate is
    that divided by 6, because the cost model charges a tile 6 x its busiest worker.
    """

    a = Input(Vector(np.float32))
    b = Input(Vector(np.float32))
    out = Output(Vector(np.float32))
    k = State(INT)
    strided_fields = True  # the Engine may hand a, b and out as strided (n, ...) views

    @poputil.vertex_separable
    def compute(self):
        n, kk = self.a.shape[0], int(self.k[0])
        a = self.a.reshape(n, -1, kk)
        b = self.b.reshape(n, kk, -1)
        o, size = self.out, self.out.itemsize
        if o.shape == (n, a.shape[1], b.shape[2]) and o.strides[2] == size and (
                o.strides[1] % size == 0 and o.strides[1] >= o.shape[2] * size):
            self.xp.matmul(a, b, out=o)  # rows BLAS can write: no temporary (the same bits)
        else:
            o[...] = self.xp.matmul(a, b).reshape(o.shape)


class MatMulPartialHalf(MatMulPartial):
    """:class:`MatMulPartial` for ``half`` (fp16) operands."""

    a = Input(Vector(np.float16))
    b = Input(Vector(np.float16))
    out = Output(Vector(np.float16))


@dataclass(frozen=True)
class Plan:
    """How a matmul is split: blocks of ``m × n`` outputs, ``k`` pieces of the inner dim."""

    tiles_m: int
    tiles_n: int
    tiles_k: int
    cycles: int  # the plan's estimated cost (compute + exchange + reduction)


def _ceil(a, b):
    return -(-a // b)


def macs_per_cycle(target) -> int:
    """fp32 multiply-accumulates per tile per cycle (half the FLOPs)."""
    return max(1, target.flops_per_cycle // target.tiles_per_ipu // 2)


def plan(target, m: int, k: int, n: int) -> Plan:
    """Choose the split with the lowest estimated cycles (compute, exchange, reduction)."""
    return _plan(target.num_tiles, target.num_worker_contexts, macs_per_cycle(target),
                 target.exchange_bytes_per_cycle, m, k, n)


@functools.lru_cache(maxsize=1024)
def _plan(tiles: int, workers: int, macs: int, xbytes: int, m: int, k: int, n: int) -> Plan:
    """:func:`plan` of a target with ``tiles``, ``workers``, ``macs`` per tile cycle and
    ``xbytes`` of exchange per cycle (a model builds the same products again and again)."""
    best = None
    for tk in range(1, min(k, tiles) + 1):
        if tk > 1 and (tiles // tk) * tk != tiles and tk & (tk - 1):
            continue  # powers of two, or divisors of the tile count, keep the search short
        for tm in range(1, min(m, tiles // tk) + 1):
            tn = min(n, tiles // (tk * tm))
            bm, bn, bk = _ceil(m, tm), _ceil(n, tn), _ceil(k, tk)
            cost = VERTEX_OVERHEAD + _ceil(bm * bn * bk, macs) + (bm * bk + bk * bn) * 4 // xbytes
            if tk > 1:  # partials out, summed on the output's tiles
                per_tile = _ceil(m * n, tiles)
                cost += bm * bn * 4 // xbytes + per_tile * tk * 4 // xbytes
                cost += workers * (10 + _ceil(per_tile, workers) * (tk + 1))
            if best is None or cost < best.cycles:
                best = Plan(tm, tn, tk, cost)
    return best


def mat_mul(graph, a: Tensor, b: Tensor, prog: Sequence, debug_name: str = "") -> Tensor:
    """``poplin::matMul(graph, a, b, prog)``: a new (M, N) tensor ``a @ b``."""
    name = debug_name or "matMul"
    _check_operands(graph, a, b, prog, name)
    out = graph.add_variable(a.dtype, [a.shape[0], b.shape[1]], name)
    _mat_mul(graph, a, b, out, prog, name, mapped=False)
    return out


def mat_mul_with_output(graph, a: Tensor, b: Tensor, out: Tensor, prog: Sequence,
                        debug_name: str = "") -> None:
    """``poplin::matMulWithOutput(graph, A, B, out, prog)``: ``a @ b`` written into ``out``
    (M, N), mapped already (a gradient written where its weight is, for one update of a
    region: each block's vertex writes its block to ``out``'s tiles)."""
    name = debug_name or "matMulWithOutput"
    _check_operands(graph, a, b, prog, name)
    want = (a.shape[0], b.shape[1])
    poputil.check_tensor(out, name, "output")
    if out.shape != want:
        raise IpuError(f"{name}: output {poputil.about(out)} does not match the shape {want} of "
                       f"'{a.name}' {a.shape} times '{b.name}' {b.shape}")
    if out.dtype != a.dtype:
        raise GraphConnectionError(
            f"{name}: output '{out.name}' is {TYPE_NAMES[out.dtype]} but '{a.name}' and "
            f"'{b.name}' are {TYPE_NAMES[a.dtype]}; the output must be of their type")
    poputil.check_mapped(graph, out, name, "output", tiles=False)
    poputil.check_parallel_writeable(out, name, "output")
    _mat_mul(graph, a, b, out, prog, name, mapped=True)


def _check_operands(graph, a, b, prog, name) -> None:
    """matMul's checks: two mapped 2-D float (or half) operands that can be multiplied."""
    for role, t in (("A", a), ("B", b)):
        if not isinstance(t, Tensor) or t.rank != 2:
            raise IpuError(f"{name}: operand {role} must be a 2-D tensor, got "
                           f"{t.shape if isinstance(t, Tensor) else t!r}")
    if a.shape[1] != b.shape[0]:
        raise IpuError(
            f"{name}: cannot multiply '{a.name}' {a.shape} by '{b.name}' {b.shape}: the "
            f"columns of A ({a.shape[1]}) must equal the rows of B ({b.shape[0]})"
        )
    if a.dtype != b.dtype or a.dtype.kind != "f":
        raise GraphConnectionError(
            f"{name}: '{a.name}' is {TYPE_NAMES[a.dtype]} and '{b.name}' is "
            f"{TYPE_NAMES[b.dtype]}; mat_mul needs two float or two half tensors"
        )
    if not isinstance(prog, Sequence):
        raise IpuError(f"{name}: prog must be an ipu.Sequence to append to, got {prog!r}")
    poputil.check_mapped(graph, a, name, f"operand A '{a.name}'", tiles=False)
    poputil.check_mapped(graph, b, name, f"operand B '{b.name}'", tiles=False)


def _mat_mul(graph, a, b, out, prog, name, mapped: bool) -> None:
    """``a @ b`` into ``out``: mapped by the plan's blocks, unless already ``mapped``."""
    (m, k), n = a.shape, b.shape[1]
    if m * n == 0:
        return  # an empty product: nothing to compute
    if k == 0:  # a sum of no products: zeros, as in NumPy
        if not mapped:
            poputil.map_tensor_linearly(graph, out)
        popops.zero(graph, out, prog, name + "/Zero")
        return
    p = plan(graph.target, m, k, n)
    partials = out.reshape([1, m, n]) if p.tiles_k == 1 else \
        graph.add_variable(a.dtype, [p.tiles_k, m, n], name + "/partials")
    if p.tiles_k > 1 and not mapped:  # (mapped first: the mappings come in address order)
        poputil.map_tensor_linearly(graph, out)
    cs = graph.add_compute_set(name + "/MatMul")
    _add_blocks(graph, cs, a, b, partials, p, 0, mapped and p.tiles_k == 1)
    prog.add(Execute(cs))
    if p.tiles_k > 1:
        popops.reduce_with_output(graph, partials, out, [0], popops.Operation.ADD, prog,
                                  name + "/Reduce")


@poputil.paused_gc
def _add_blocks(graph, cs, a, b, partials, p: Plan, first_tile: int,
                mapped: bool = False) -> None:
    """The MatMulPartial vertices of one product ``a @ b`` into ``partials`` (tiles_k, M,
    N), on tiles ``first_tile``, ``first_tile + 1``, ... (one per block and piece).

    Each block of partials is mapped to its vertex's tile (unless ``mapped`` already); the
    first vertex is added (and checked) as any, the rest (the same fields and types) in
    one go."""
    (m, k), n = a.shape, b.shape[1]
    cls = MatMulPartial if a.dtype == np.float32 else MatMulPartialHalf
    workers, macs = graph.target.num_worker_contexts, macs_per_cycle(graph.target)
    conns, tiles, ks, perf = [], [], [], []
    outs = [partials[kk] for kk in range(p.tiles_k)]  # (each piece's (M, N) plane)
    for i in range(p.tiles_m):
        m0, m1 = i * m // p.tiles_m, (i + 1) * m // p.tiles_m
        for j in range(p.tiles_n):
            n0, n1 = j * n // p.tiles_n, (j + 1) * n // p.tiles_n
            for kk in range(p.tiles_k):
                k0, k1 = kk * k // p.tiles_k, (kk + 1) * k // p.tiles_k
                conns.append({"a": _block(a, m0, m1, k0, k1),  # 2-D views (the fields
                              "b": _block(b, k0, k1, n0, n1),  # flatten them): no address
                              "out": _block(outs[kk], m0, m1, n0, n1)})  # array each
                tiles.append(first_tile + len(tiles))
                ks.append(k1 - k0)
                cycles = VERTEX_OVERHEAD + _ceil((m1 - m0) * (n1 - n0) * (k1 - k0), macs)
                perf.append(_ceil(cycles, workers))
    if tiles[-1] >= graph.target.num_tiles or not single_run(partials):
        for conn, tile, kk, cycles in zip(conns, tiles, ks, perf):  # each one checked
            _add_block(graph, cs, cls, conn, tile, kk, cycles, mapped)
        return
    if not mapped:
        _map_blocks(graph, partials, p, first_tile)
    _add_block(graph, cs, cls, conns[0], tiles[0], ks[0], perf[0], mapped=True)
    dtype = cls.fields["k"].dtype
    poputil.add_vertices_alike(graph, cs, cls, conns[1:], tiles[1:], perf[1:],
                               [{"k": np.asarray(kk, dtype)} for kk in ks[1:]])


def _add_block(graph, cs, cls, conn, tile, k, cycles, mapped: bool = False) -> None:
    """One MatMulPartial vertex, its output block mapped to its tile (unless ``mapped``
    already), all checked."""
    if not mapped:
        graph.set_tile_mapping(conn["out"], tile)
    v = graph.add_vertex(cs, cls, conn, tile=tile)
    graph.set_initial_value(v["k"], k)
    graph.set_perf_estimate(v, cycles)


def _map_blocks(graph, partials, p: Plan, first_tile: int) -> None:
    """``set_tile_mapping`` of every block of ``partials`` (a variable) to its vertex's
    tile, in one call: a run of addresses per row of each block."""
    tk, m, n = partials.shape
    row_block = np.repeat(np.arange(p.tiles_m), np.diff(np.arange(p.tiles_m + 1) * m // p.tiles_m))
    n0 = np.arange(p.tiles_n + 1) * n // p.tiles_n
    kk, row, j = np.ix_(np.arange(tk), np.arange(m), np.arange(p.tiles_n))
    begins = partials.offset + (kk * m + row) * n + n0[j]
    tiles = first_tile + (row_block[row] * p.tiles_n + j) * tk + kk
    lengths = np.broadcast_to(np.diff(n0)[j], begins.shape)
    graph.root.pools[partials.dtype].map(begins.reshape(-1), lengths.reshape(-1),
                                         tiles.reshape(-1) + graph._offset)


def _block(t: Tensor, r0: int, r1: int, c0: int, c1: int) -> Tensor:
    """``t.slice([r0, c0], [r1, c1])`` of a 2-D tensor; a region's block is made directly
    (the same view, without NumPy's indexing rules: a matmul makes hundreds)."""
    if t._idx is not None or r0 == r1 or c0 == c1:  # (NumPy puts an empty view at 0)
        return t.slice([r0, c0], [r1, c1])
    s0, s1 = t.strides
    return Tensor(t.graph, t.dtype, (t.offset + r0 * s0 + c0 * s1, (r1 - r0, c1 - c0),
                                     t.strides), (slice(r0, r1), slice(c0, c1)), t)


def mat_mul_grouped(graph, a: Tensor, b: Tensor, prog: Sequence, debug_name: str = "",
                    output_type=None) -> Tensor:
    """``poplin::matMulGrouped(graph, A, B, prog, outputType)``: ``C[g] = A[g] @ B[g]`` for
    A (G, M, K) and B (G, K, N), a new (G, M, N) tensor.

    All groups run in one compute set: each group is planned for its share of the tiles
    (``num_tiles // G``, at least one) and its blocks go on its own tiles.
    """
    name = debug_name or "matMulGrouped"
    for role, t in (("A", a), ("B", b)):
        if not isinstance(t, Tensor) or t.rank != 3:
            raise IpuError(f"{name}: operand {role} must be a 3-D (groups, rows, columns) "
                           f"tensor, got {t.shape if isinstance(t, Tensor) else t!r}")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise IpuError(
            f"{name}: cannot multiply '{a.name}' {a.shape} by '{b.name}' {b.shape}: both "
            f"need the same number of groups and A's columns ({a.shape[2]}) must equal B's "
            f"rows ({b.shape[1]})"
        )
    if a.dtype != b.dtype or a.dtype.kind != "f" or (
            output_type is not None and np.dtype(output_type) != a.dtype):
        raise GraphConnectionError(
            f"{name}: '{a.name}' is {TYPE_NAMES[a.dtype]} and '{b.name}' is "
            f"{TYPE_NAMES[b.dtype]}; mat_mul_grouped needs two float or two half tensors "
            "(and an output_type of the same type)"
        )
    if not isinstance(prog, Sequence):
        raise IpuError(f"{name}: prog must be an ipu.Sequence to append to, got {prog!r}")
    poputil.check_mapped(graph, a, name, f"operand A '{a.name}'", tiles=False)
    poputil.check_mapped(graph, b, name, f"operand B '{b.name}'", tiles=False)
    groups, m, k = a.shape
    n = b.shape[2]
    out = graph.add_variable(a.dtype, [groups, m, n], name)
    if groups * m * n == 0:
        return out
    if k == 0:
        poputil.map_tensor_linearly(graph, out)
        popops.zero(graph, out, prog, name + "/Zero")
        return out
    tiles = graph.target.num_tiles
    share = max(1, tiles // groups)
    p = plan(replace(graph.target, num_ipus=1, tiles_per_ipu=share), m, k, n)
    partials = out.reshape([groups, 1, m, n]) if p.tiles_k == 1 else \
        graph.add_variable(a.dtype, [groups, p.tiles_k, m, n], name + "/partials")
    cs = graph.add_compute_set(name + "/MatMul")
    for g in range(groups):
        _add_blocks(graph, cs, a[g], b[g], partials[g], p, (g * share) % tiles)
    prog.add(Execute(cs))
    if p.tiles_k > 1:
        poputil.map_tensor_linearly(graph, out)
        popops.reduce_with_output(graph, partials, out, [1], popops.Operation.ADD, prog,
                                  name + "/Reduce")
    return out
