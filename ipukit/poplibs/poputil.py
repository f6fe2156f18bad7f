"""poputil: tile-mapping helpers (``poputil::mapTensorLinearly`` and friends).

``map_tensor_linearly`` spreads a tensor's elements over the tiles in order, in whole
"grains" (Poplar's grain size is the vector width: 2 floats on a 64-bit data path) and
with at least ``min_elements_per_tile`` elements (128 bytes by default) on every tile it
uses, exactly as poplibs' ``calcLinearTileMapping`` / ``splitRegions`` do.

>>> import ipukit as ipu
>>> from ipukit.poplibs import poputil
>>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
>>> v = g.add_variable(ipu.FLOAT, [10], "v")
>>> poputil.map_tensor_linearly(g, v, min_elements_per_tile=1, grain_size=2)
>>> g.get_tile_mapping(v)
[[(0, 2)], [(2, 6)], [(6, 10)], []]
"""

from __future__ import annotations

import functools
import gc
import math
import weakref

import numpy as np

from ..errors import IpuError, TileMappingError
from ..tensor import Tensor, address_span, firsts, runs, single_run, steps_past, unique


def paused_gc(build):
    """``build`` with Python's cyclic garbage collector paused while it runs (no Poplar
    counterpart: C++ has no such collector). PopLibs adds vertices in bulk, hundreds of
    thousands of Tensors and dicts for a lesson's pipeline; each 700 new objects otherwise
    start a collection, and as the graph grows, full ones that walk all of it (30 in
    lesson 10's throughput study: a fifth of its time). What it frees by reference counts it
    still frees; the next collection runs just after it.

    >>> import gc
    >>> from ipukit.poplibs import poputil
    >>> poputil.paused_gc(gc.isenabled)(), gc.isenabled()
    (False, True)
    """
    @functools.wraps(build)
    def paused(*args, **kwargs):
        if not gc.isenabled():  # (nested, or paused by the caller)
            return build(*args, **kwargs)
        gc.disable()
        try:
            return build(*args, **kwargs)
        finally:
            gc.enable()
    return paused


#: Up to this many tiles, :func:`_on_graph` works in plain Python.
FEW_TILES = 64
#: Bits the IPU's load/store path moves per cycle (sets the vector width).
DATA_PATH_BITS = 64
#: Poplar's default minimum bytes per tile in mapTensorLinearly.
MIN_BYTES_PER_TILE = 128
#: Most tile_of_elements answers kept per storage pool (a graph being built asks about its
#: latest tensors), and the most elements an answer kept may have (memory stays bounded).
KEEP_ANSWERS = 128
KEEP_ELEMENTS = 1 << 20
#: Per storage pool, tile_of_elements' answers by the elements asked about: (their index
#: array, a weak reference to the mapping last seen valid (the pool's step function, made
#: anew at each change: a strong one kept every old one alive, 550 MiB at Graphcore's CI
#: size of the emulated sharded embedding), the address span, its part of the mapping,
#: answer).
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def vector_width(dtype) -> int:
    """``Target::getVectorWidth``: elements per 64-bit vector (float 2, half 4)."""
    return max(1, DATA_PATH_BITS // 8 // np.dtype(dtype).itemsize)


def calc_linear_tile_mapping(graph, shape, min_elements_per_tile: int, grain_size: int):
    """``poputil::calcLinearTileMapping``: per tile, a list of (begin, end) flat intervals."""
    mapping: list[list[tuple[int, int]]] = [[] for _ in range(graph.target.num_tiles)]
    tiles, begins, ends = _linear_intervals(graph, shape, min_elements_per_tile, grain_size)
    for tile, begin, end in zip(tiles.tolist(), begins.tolist(), ends.tolist()):
        mapping[tile].append((begin, end))
    return mapping


def _linear_intervals(graph, shape, min_elements_per_tile: int, grain_size: int) -> tuple:
    """:func:`calc_linear_tile_mapping` as arrays: the tiles with elements, in order, and
    each one's interval ``[begin, end)`` of the flat elements."""
    n = int(math.prod(shape))
    if n == 0:
        return np.zeros((3, 0), np.intp)
    if grain_size < 1 or min_elements_per_tile < 0:
        raise IpuError(f"grain_size must be >= 1 and min_elements_per_tile >= 0, got "
                       f"{grain_size} and {min_elements_per_tile}")
    grains = -(-n // grain_size)
    per_tile = -(-grains // graph.target.num_tiles)
    if min_elements_per_tile:
        min_grains = -(-min_elements_per_tile // grain_size)
        most = max(1, grains // min_grains)
        per_tile = max(per_tile, -(-grains // most))
    used = -(-grains // per_tile)
    tiles = np.arange(used, dtype=np.intp)
    begins = tiles * grains // used * grain_size
    ends = np.minimum(n, (tiles + 1) * grains // used * grain_size)
    keep = ends > begins
    return tiles[keep], begins[keep], ends[keep]


def map_tensor_linearly(graph, t: Tensor, min_elements_per_tile: int | None = None,
                        grain_size: int | None = None) -> None:
    """``poputil::mapTensorLinearly``: map ``t``'s flat elements over the tiles in order.

    Defaults are Poplar's: the grain is the vector width and the minimum per tile is
    128 bytes.
    """
    grain_size, min_elements_per_tile = _linear_defaults(t, min_elements_per_tile, grain_size)
    run = single_run(t) if isinstance(t, Tensor) and t.graph is graph.root else None
    if run is None:  # a view (or another graph's tensor: set_tile_mapping says so)
        set_tile_mapping(graph, t, calc_linear_tile_mapping(graph, t.shape,
                                                            min_elements_per_tile, grain_size))
        return
    tile, b, e = _linear_intervals(graph, t.shape, min_elements_per_tile, grain_size)
    if tile.size:  # a variable: its intervals are runs of addresses, mapped in one call
        graph.root.pools[t.dtype].map(run[0] + b, e - b, tile + graph._offset)


def linear_tiles(graph, t: Tensor, min_elements_per_tile: int | None = None,
                 grain_size: int | None = None) -> np.ndarray:
    """The tile of every element of ``t`` (flat) that :func:`map_tensor_linearly` gives."""
    grain_size, min_elements_per_tile = _linear_defaults(t, min_elements_per_tile, grain_size)
    out = np.full(t.num_elements(), -1, np.intp)
    tiles, begins, ends = _linear_intervals(graph, t.shape, min_elements_per_tile, grain_size)
    for tile, b, e in zip(tiles.tolist(), begins.tolist(), ends.tolist()):
        out[b:e] = tile
    return out


def _linear_defaults(t, min_elements_per_tile, grain_size):
    if grain_size is None:
        grain_size = vector_width(t.dtype)
    if min_elements_per_tile is None:
        min_elements_per_tile = -(-MIN_BYTES_PER_TILE // t.dtype.itemsize)
    return grain_size, min_elements_per_tile


def set_tile_mapping(graph, t: Tensor, mapping) -> None:
    """``Graph::setTileMapping(t, mapping)``: per tile, intervals of ``t``'s flat elements."""
    flat = t.flatten()
    for tile, intervals in enumerate(mapping):
        for begin, end in intervals:
            graph.set_tile_mapping(flat[begin:end], tile)


def _map_elements(graph, t: Tensor, tiles: np.ndarray) -> None:
    """Map ``t``'s flat elements to ``tiles`` (tiles of ``graph``; a tile outside it, or a
    tensor of another graph, raises set_tile_mapping's error): what one
    ``set_tile_mapping`` per run of consecutive addresses on one tile does, in one call."""
    if tiles.size == 0:
        return
    run = single_run(t)  # one run of addresses (a variable): runs of one tile are runs
    flat = None if run else t.idx.reshape(-1)
    first = firsts(tiles) if run else firsts(flat - np.arange(tiles.size), tiles)
    at = tiles[first]  # the tile of each run (so of each of its elements)
    bad = at[(at < 0) | (at >= graph.target.num_tiles)]
    if bad.size or t.graph is not graph.root:  # set_tile_mapping says what is wrong
        graph.set_tile_mapping(t, int(bad[0]) if bad.size else 0)
    graph.root.pools[t.dtype].map(run[0] + first if run else flat[first],
                                  run_lengths(first, tiles.size), at + graph._offset)


def _map_copies(graph, t: Tensor, like: Tensor, copies: int) -> None:
    """Map variable ``t`` (``copies`` x ``like``'s elements) as ``copies`` copies of
    ``like``'s mapping, one after another: ``_map_elements(graph, t, np.tile(
    tile_of_elements(graph, like), copies))``, read from and written as runs of tiles
    (no tile per element) when ``like`` is one run of addresses mapped on ``graph``."""
    n, src, dst = like.num_elements(), single_run(like), single_run(t)
    if n and src and dst and like.graph is graph.root and t.graph is graph.root:
        cuts, tiles = graph.root.pools[like.dtype].steps(src[0], src[0] + n - 1)
        if _on_graph(graph, tiles):
            begins = np.concatenate(([0], cuts - src[0]))  # each piece of like, from its start
            lengths = run_lengths(begins, n)
            starts = dst[0] + n * np.arange(copies)[:, None] + begins
            graph.root.pools[t.dtype].map(starts.reshape(-1), np.tile(lengths, copies),
                                          np.tile(tiles, copies))
            return
    _map_elements(graph, t, np.tile(tile_of_elements(graph, like), copies))  # (its errors)


def run_lengths(begins: np.ndarray, end: int) -> np.ndarray:
    """``np.diff(begins, append=end)``: each run's length, from its begin to the next one's
    (the last one's to ``end``), at a fifth of np.diff's cost on a few runs.

    >>> run_lengths(np.array([0, 3, 4]), 9).tolist()
    [3, 1, 5]
    """
    return np.concatenate((begins[1:], [end])) - begins


def add_vertices_alike(graph, cs, cls, conns: list, tiles: list, perf=None, state=None):
    """Vertices of ``cls`` alike one just added (and checked) by ``graph.add_vertex``, on
    tiles of ``graph`` (a virtual graph's counted from its first): added in one go, with
    no check of their own (PopLibs adds many alike)."""
    graph.root._add_vertices(cs, cls, conns, [t + graph._offset for t in tiles], perf, state)


def tile_of_elements(graph, t: Tensor) -> np.ndarray:
    """The tile of every element of ``t`` (flat, -1 where unmapped), from its tile mapping.

    A view whose elements are scattered (a transpose, a broadcast, a gather) is asked
    about in address order, so the mapping is read as a few runs, not one per element.
    PopLibs ops ask about the same operands again and again while a graph is built, so
    the answer is kept (read-only: copy it to change it) and given again while the
    mapping of the addresses ``t`` spans is unchanged (mappings elsewhere, of new
    variables, leave it valid).
    """
    if (not isinstance(t, Tensor) or t.graph is not graph.root
            or not 0 < t.num_elements() <= KEEP_ELEMENTS):
        return _tile_of_elements(graph, t)  # (it raises, or there is nothing to keep)
    pool = graph.root.pools[t.dtype]
    pool._resolve()  # the mapping as a step function: new arrays after every change
    key = (graph._offset, graph.target.num_tiles, t.offset, t.shape, t.strides, id(t._idx))
    kept = _KEPT.setdefault(pool, {})
    old = kept.get(key)
    if old is not None and old[0] is t._idx and (old[1]() is pool._cut_tiles
                                                  or old[3] == pool.window(*old[2])):
        kept[key] = (old[0], weakref.ref(pool._cut_tiles), *old[2:])
        return old[4]
    span = address_span(t)
    answer = _tile_of_elements(graph, t)
    answer.flags.writeable = False
    kept[key] = (t._idx, weakref.ref(pool._cut_tiles), span, pool.window(*span), answer)
    if len(kept) > KEEP_ANSWERS:  # the oldest goes: memory stays bounded
        kept.pop(next(iter(kept)))
    return answer


def tile_runs(graph, t: Tensor) -> tuple | None:
    """Where each run of ``t``'s elements on one tile begins and that tile (``first =
    firsts(tiles)`` and ``tiles[first]`` of ``tiles = tile_of_elements(graph, t)``), read
    from the mapping's pieces, no tile per element, where ``t`` is one run of addresses
    all on ``graph``'s tiles; None otherwise.

    >>> import ipukit as ipu
    >>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
    >>> v = g.add_variable(ipu.FLOAT, [6], "v")
    >>> g.set_tile_mapping(v[:4], 1)
    >>> g.set_tile_mapping(v[4:], 3)
    >>> [x.tolist() for x in tile_runs(g, v)]
    [[0, 4], [1, 3]]
    """
    run = single_run(t)
    if not run or not run[1] or t.graph is not graph.root:
        return None
    cuts, tiles = graph.root.pools[t.dtype].steps(run[0], run[0] + run[1] - 1)
    if not _on_graph(graph, tiles):
        return None
    return np.concatenate(([0], cuts - run[0])), tiles - graph._offset


def _tile_of_elements(graph, t: Tensor) -> np.ndarray:
    n = t.num_elements()
    if n == 0:
        return np.full(0, -1, np.intp)
    if single_run(t):  # (a variable, or a slice of one)
        return _tiles(graph, t)
    if t._idx is None and t.strides is not None:
        shape, strides = np.array(t.shape, np.int64), np.array(t.strides, np.int64)
        if (strides >= 0).all() and not _is_contiguous(shape, strides):
            keep = (strides > 0) & (shape > 1)  # repeated (broadcast) dimensions drop out
            order = np.flatnonzero(keep)[np.argsort(-strides[keep], kind="stable")]
            inner = Tensor(t.graph, t.dtype, (t.offset, tuple(shape[order].tolist()),
                                              tuple(strides[order].tolist())), t.name)
            tiles = _tiles(graph, inner).reshape(shape[order])
            back = np.argsort(order)  # undo the sort, then repeat the dropped dimensions
            tiles = tiles.transpose(back).reshape(np.where(keep, shape, 1))
            return np.broadcast_to(tiles, tuple(shape)).reshape(-1).copy()
        return _tiles(graph, t)
    flat = t.idx.reshape(-1)
    if np.count_nonzero(np.diff(flat) != 1) < 64:
        return _tiles(graph, t)
    order = np.argsort(flat, kind="stable")  # ask in address order, each address once
    ordered = flat[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]
    where = np.empty(n, np.intp)
    where[order] = np.cumsum(first) - 1
    return _tiles(graph, Tensor(t.graph, t.dtype, ordered[first], t.name))[where]


def _is_contiguous(shape, strides) -> bool:
    step = 1
    for size, stride in zip(shape[::-1].tolist(), strides[::-1].tolist()):
        if size != 1 and stride != step:
            return False
        step *= size
    return True


def _tiles(graph, t: Tensor) -> np.ndarray:
    """The tile of every element of ``t`` (-1 unmapped), read from the graph's mapping as
    ``graph.get_tile_mapping`` reads it, without building its per-tile lists."""
    if t.graph is not graph.root:  # get_tile_mapping says whose it is
        graph.get_tile_mapping(t, throw_on_incomplete=False)
    pool, run = graph.root.pools[t.dtype], single_run(t)
    if run:  # one run of addresses: its pieces are the cuts inside it
        cuts, tiles = pool.steps(run[0], run[0] + run[1] - 1)
        start, end = np.concatenate(([run[0]], cuts)), np.concatenate((cuts, [sum(run)]))
    else:
        _, start, end, tiles = pool.pieces(*runs(t))
    lo, n = graph._offset, graph.target.num_tiles
    if lo or n != graph.root.target.num_tiles:  # a virtual graph: its own tile numbers
        if ((tiles >= 0) & ((tiles < lo) | (tiles >= lo + n))).any():
            graph.get_tile_mapping(t, throw_on_incomplete=False)  # raises, naming the tile
        tiles = np.where(tiles >= 0, tiles - lo, -1)
    return np.repeat(tiles, end - start)  # pieces come in the flat order of t's elements


def check_mapped(graph, t: Tensor, op: str, role: str, tiles: bool = True):
    """Raise a TileMappingError naming the operand unless every element has a tile.

    Returns the tile of every element (flat); with ``tiles=False`` only checks (None).
    """
    check_tensor(t, op, role)
    if t.graph is not graph.root:
        raise IpuError(f"{op}: {role} '{t.name}' belongs to another graph")
    if _span_mapped(graph, t):  # then no element needs looking at
        return tile_of_elements(graph, t) if tiles else None
    answer = tile_of_elements(graph, t)
    unmapped = np.flatnonzero(answer < 0)
    if unmapped.size:
        first = list(map(int, np.unravel_index(unmapped[0], t.shape)))
        raise TileMappingError(
            f"{op}: {role} '{t.name}' {t.shape} has {unmapped.size} unmapped elements "
            f"(first: {first}); map it first with graph.set_tile_mapping or "
            "poputil.map_tensor_linearly"
        )
    return answer


def about(t) -> str:
    """A tensor as errors name it, ``'w' (3, 4)``; anything else by its type (and shape)."""
    if isinstance(t, Tensor):
        return f"'{t.name}' {t.shape}"
    shape = getattr(t, "shape", None)
    return f"a {type(t).__name__}" + (f" of shape {shape}" if shape is not None else "")


def check_tensor(t, op: str, role: str) -> None:
    """Raise an IpuError naming the operand unless it is an ipu.Tensor."""
    if not isinstance(t, Tensor):
        raise IpuError(f"{op}: {role} must be a Tensor, got {about(t)}")


def check_parallel_writeable(t: Tensor, op: str, role: str) -> None:
    """Raise unless no two elements of ``t`` share an address: Poplar's
    ``Tensor::isParallelWriteable``, which an op's output must be (a broadcast view, or an
    index view naming an element twice, is not)."""
    if t._idx is None and steps_past(t.shape, t.strides):
        return
    flat = t.idx.reshape(-1)
    if unique(flat).size != flat.size:
        raise IpuError(f"{op}: {role} '{t.name}' {t.shape} is not parallel writeable: "
                       "some of its elements are one element (a broadcast or repeated "
                       "view); write into a tensor whose elements are distinct")


def _span_mapped(graph, t: Tensor) -> bool:
    """Whether every address from ``t``'s lowest to its highest is on a tile of ``graph``
    (then all of ``t``'s elements are: a check without a tile per element)."""
    if not t.num_elements():
        return False
    return _on_graph(graph, graph.root.pools[t.dtype].steps(*address_span(t))[1])


def _on_graph(graph, tiles: np.ndarray) -> bool:
    """Whether ``tiles`` (of the root graph; -1: unmapped) are all tiles of ``graph``. A
    few are looked at in plain Python (NumPy's min and max cost more at that size)."""
    lo = graph._offset
    hi = lo + graph.target.num_tiles
    if tiles.size > FEW_TILES:
        return bool(tiles.min() >= lo and tiles.max() < hi)
    few = tiles.tolist()
    return min(few) >= lo and max(few) < hi


def vertex_separable(compute):
    """Mark a kit codelet's ``compute`` as vertex-separable: each vertex's outputs depend on
    its own fields only, so the engine skips its first-run check (the first and last
    vertex run alone against their group, which catches a learner's ``x.sum()`` without
    ``axis=-1``) (kit convention: not Poplar's; only the kit's own PopLibs codelets carry
    it, and tests/test_poputil.py proves every one of them separable, running it batched
    and one vertex at a time (``Engine(per_vertex=True)``) on random data). A subclass
    that overrides ``compute`` (a learner's) is checked again; a marked ``compute`` calls
    no method a subclass could override, so a subclass that keeps it stays separable.
    Separable also assumes the vertices are connected as the kit's op connects them
    (e.g. ``MatMulPartial``'s ``k`` matching its fields)."""
    compute.vertex_separable = True
    return compute


def take(t: Tensor, positions, name: str = "") -> Tensor:
    """The elements of ``t`` (flat) at ``positions``: a view, as ``concat`` of slices would be."""
    positions = np.asarray(positions, np.intp)
    idx = t.idx.reshape(-1)[positions]
    return Tensor(t.graph, t.dtype, idx, name or f"{t.name}[...]")


def split_regions(n: int, grain_size: int, max_partitions: int) -> list[tuple[int, int]]:
    """``poputil::splitRegions`` for one region of ``n`` elements: at most
    ``max_partitions`` (begin, end) pieces of whole grains (how work goes to 6 workers)."""
    if n == 0:
        return []
    grains = -(-n // grain_size)
    parts = min(max_partitions, grains)
    return [(p * grains // parts * grain_size, min(n, (p + 1) * grains // parts * grain_size))
            for p in range(parts)]
