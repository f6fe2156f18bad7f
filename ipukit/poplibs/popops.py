"""popops: element-wise operations, reductions, fill and cast (``popops::``).

Every op here is ordinary graph building: it adds a compute set of vertices through the
public API, appends ``Execute`` to the Sequence it is given and returns a new Tensor. So
its cost and memory show up in the profile like anything else.

* Element-wise ops (``add``, ``sub``, ``mul``, ``div``, ``neg``, ``abs``, ``exp``, ``log``,
  ``inv``, ``relu``, ...; ``add_in_place``, ``mul_in_place``, ...) and ``map`` of an
  expression built from ``_1``, ``_2``, ... (Poplar's ``popops::expr``). Operands broadcast
  as in NumPy. The output takes the tile mapping of the first operand of the output's
  shape, so work happens where the data is. As PopLibs chooses per tile
  (``ElementWise.cpp``): a tile that holds ONE contiguous region of the output gets one
  MultiVertex (``popops::BinaryOp1D<ADD,float>``, ``UnaryOp1D``, ``Cast1D``) whose
  elements its 6 workers share; a tile with several regions gets plain vertices
  (``BinaryOp2D``, ``UnaryOp2D``, ``Cast2D``), at most one per worker, each over a share
  of the tile's regions (:func:`map_vertex`). A number operand gives PopLibs'
  ``BroadcastScalar1D`` or ``BroadcastScalar2DData`` by the same rule (kit convention:
  PopLibs picks between those two by their cycle estimates), and a multi-op ``map`` its
  generated codelet. A broadcast tensor operand keeps ``BinaryOp1D``/``2D`` (kit
  convention: PopLibs may use its ``BroadcastVectorInner``/``Outer`` vertices there), and
  a MultiVertex takes a region of any size (kit convention: PopLibs falls back to 2D
  vertices past what a codelet's loop counts, ``validateRegionSizeForMultiVertex``).
* ``scaled_add_to`` (``a += scale * b`` in place), ``fill``, ``zero``, ``cast``. An
  operand that shares elements with the in-place output (``add_in_place(g, x, x, p)``) is
  copied to a temporary first, as PopLibs does, so ``x += x`` gives ``2x``.
* ``reduce`` / ``reduce_with_output`` with ADD, MUL, MAX or MIN over any dimensions: each
  tile first reduces what it holds (partials), then a second compute set combines the
  partials on the output's tile, so the exchange of partials is visible.

>>> import sys, numpy as np, ipukit as ipu
>>> from ipukit.poplibs import popops, poputil
>>> from ipukit.poplibs.expr import _1, Exp
>>> dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
>>> g = ipu.Graph(dev.target)
>>> a = g.add_constant(ipu.FLOAT, [2, 3], np.arange(6), "a")
>>> poputil.map_tensor_linearly(g, a, 1, 1)
>>> prog = ipu.Sequence()
>>> b = popops.map(g, Exp(_1 * 0) * _1 * 2, [a], prog)
>>> s = popops.reduce(g, b, [1], popops.Operation.ADD, prog)
>>> _ = prog.add(ipu.PrintTensor("s", s))
>>> eng = ipu.Engine(g, prog); eng.load(dev); eng.set_print_tensor_stream(sys.stdout)
>>> eng.run()
s: [ 6.000000 24.000000]
"""

from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

from ..errors import GraphConnectionError, IpuError, type_name
from ..program import Copy, Execute, Sequence
from ..tensor import (
    FLOAT,
    HALF,
    TYPE_NAMES,
    RegionList,
    Tensor,
    address_span,
    as_type,
    contiguous_strides,
    firsts,
    reshape_strides,
    single_run,
    unique,
)
from ..vertex import InOut, Input, MultiVertex, Output, Vector, Vertex
from . import poputil
from .expr import BINARY, UNARY, Expr, _1, _2, _3, lift

# -- vertices -----------------------------------------------------------------------------
_VERTEX_CACHE: dict[tuple, type] = {}


class RowsMultiVertex(MultiVertex):
    """A MultiVertex whose rows the tile's workers share, as PopLibs' ``BinaryOp1D``,
    ``UnaryOp1D`` and ``Cast1D`` share their elements: one vertex per tile.

    A row is one element (element-wise ops) or one output with its inputs (``Reduce``);
    the workers take ``poputil.split_regions(rows, grain, W)`` pieces of whole grains.
    The estimate is W x the heaviest piece's cost (10 cycles plus one per element read or
    written), PopLibs' ``numWorkers * workerCycles``: the cycles of one vertex per piece,
    one piece per worker (kit convention: the 10 + 1 per element). PopLibs' ``Reduce`` is
    a plain Vertex, one per worker's regions (kit convention: ipukit's single-width
    reduces are MultiVertexes too, with the same pieces and cycles).
    """

    #: Rows per grain: ``Target::getVectorWidth`` of the data (float 2) for element-wise.
    grain = 1

    @classmethod
    def cycle_estimate(cls, sizes: dict[str, int], workers: int = 6) -> int:
        names = [f for f, fld in cls.fields.items() if fld.kind != "state"]
        rows = builtins.min(sizes[f] for f in names) or 1  # a Reduce's outputs; elements
        share = builtins.max(e - b for b, e in poputil.split_regions(rows, cls.grain, workers))
        return workers * (10 + sum(sizes[f] // rows * share for f in names))


#: Binary ops that give the same result with their operands swapped (PopLibs'
#: ``isBinaryOpCommutative``, for the kit's ops).
COMMUTATIVE = ("ADD", "MULTIPLY", "MAXIMUM", "MINIMUM")


def vertex_name(expr: Expr, in_types, out_type, inplace: bool, multi: bool = True) -> str:
    """The name of the vertex that evaluates ``expr`` on a tile holding one contiguous
    region of the output (``multi``) or several, as PopLibs names them (``ElementWise.cpp``
    ``unaryOp``, ``binaryOpGeneral``, ``createVertexBinaryOpBroadcastScalar``; ``Cast.cpp``;
    ``Fill.cpp``): ``popops::BinaryOp1D<ADD,float>`` or ``BinaryOp2D``, ``UnaryOp1D`` or
    ``UnaryOp2D`` (``InPlace`` variants), ``BroadcastScalar1D`` or ``BroadcastScalar2DData``
    for an operand that is a number, ``Cast1D`` or ``Cast2D``, ``Fill`` or ``Fill2d``. A
    multi-op expression is PopLibs' generated codelet, ``popops::map::...`` with
    ``_MultiVertex`` for the one-region form (``ExpressionGenerator.cpp``), the
    expression's text standing for PopLibs' generated name (kit convention).

    >>> from ipukit.poplibs.expr import _1, _2
    >>> f = np.dtype("float32")
    >>> vertex_name(_1 + _2, [f, f], f, False), vertex_name(_1 * 2, [f], f, True, False)
    ('popops::BinaryOp1D<ADD,float>', 'popops::BroadcastScalar2DDataInPlace<MULTIPLY,float>')
    """
    t, place, d = type_name(out_type), "InPlace" if inplace else "", "1D" if multi else "2D"
    if expr.op == "CONST":
        return f"popops::Fill{'' if multi else '2d'}<{t}>"
    if expr.op == "ARG":
        return f"popops::Cast{d}<{type_name(in_types[0])},{t}>"
    args = [a.op for a in expr.args]
    if expr.op in UNARY and args == ["ARG"]:
        return f"popops::UnaryOp{d}{place}<{expr.op},{t}>"
    if expr.op in BINARY and set(args) <= {"ARG", "CONST"}:
        if args[1:] == ["CONST"] or (args[0] == "CONST" and expr.op in COMMUTATIVE
                                     and not inplace):
            return f"popops::BroadcastScalar{'1D' if multi else '2DData'}{place}<{expr.op},{t}>"
        return f"popops::BinaryOp{d}{place}<{expr.op},{t}>"
    return f"popops::map::{expr}{place}<{t}>" + ("_MultiVertex" if multi else "")


def map_vertex(expr: Expr, in_types, out_type, inplace: bool, multi: bool = True) -> type:
    """The codelet evaluating ``expr`` element-wise (one class per expression and types):
    with ``multi``, the one PopLibs puts on a tile that holds one contiguous region of the
    output (a :class:`RowsMultiVertex`, ``BinaryOp1D``), else the plain Vertex it puts,
    at most one per worker, on a tile with several regions (``BinaryOp2D``), whose estimate
    is the Vertex default, 10 cycles plus one per element read or written (kit convention:
    PopLibs' ``BinaryOp2D`` estimator adds a loop per region). PopLibs' fill
    vertices are always plain (``Fill`` for one region, ``Fill2d``); the kit names a
    tile's pieces ``Fill2d`` when the tile holds several regions (kit convention).
    See :func:`vertex_name`."""
    key = ("map", str(expr), tuple(in_types), out_type, inplace, multi)  # dtypes, not names
    if key in _VERTEX_CACHE:
        return _VERTEX_CACHE[key]
    name = vertex_name(expr, in_types, out_type, inplace, multi)
    ns = {"grain": poputil.vector_width(out_type)}
    for i, dt in enumerate(in_types, start=1):
        ns[f"in{i}"] = (InOut if inplace and i == 1 else Input)(Vector(dt))
    if not inplace:
        ns["out"] = Output(Vector(out_type))

    @poputil.vertex_separable
    def compute(self):
        args = [getattr(self, f"in{i}") for i in range(1, len(in_types) + 1)]
        result = expr.evaluate(self.xp, args)
        target = self.in1 if inplace else self.out
        target[...] = result

    ns["compute"] = compute
    ns["__doc__"] = f"Element-wise {expr} ({name})."
    ns["_recipe"] = {"popops.map": [_expr_plain(expr), [str(np.dtype(t)) for t in in_types],
                                    str(np.dtype(out_type)), bool(inplace), bool(multi)]}
    base = RowsMultiVertex if multi and expr.op != "CONST" else Vertex
    cls = type(name, (base,), ns)
    _VERTEX_CACHE[key] = cls
    return cls


REDUCE_OPS = {
    "ADD": lambda xp, a: _sum(a),
    "MUL": lambda xp, a: a.prod(axis=-1),
    "MAX": lambda xp, a: a.max(axis=-1),
    "MIN": lambda xp, a: a.min(axis=-1),
    "LOGICAL_AND": lambda xp, a: a.all(axis=-1),
    "LOGICAL_OR": lambda xp, a: a.any(axis=-1),
    "SQUARE_ADD": lambda xp, a: _sum(a * a),
    "LOG_ADD": lambda xp, a: _log_add(xp, a),
}
#: Operations whose combine step differs from the first one: partials of SQUARE_ADD are
#: already squared, so stage 2 (and ``update``) adds them.
COMBINE_OP = {"SQUARE_ADD": "ADD"}


def _sum(a):
    """``a.sum(axis=-1)``; many float32 rows of 2 to 7 as the adds that sum does (a left fold
    from +0.0), the same bits ~20x faster than NumPy's reduction of a short axis."""
    if not _short(a):
        return a.sum(axis=-1)
    r = a[..., 0] + a[..., 1]
    for i in range(2, a.shape[-1]):
        r += a[..., i]
    r += 0.0  # -0.0 + -0.0 sums to +0.0
    return r


def _short(a) -> bool:
    """Float32 rows of 2 to 7, at least 256 of them (fewer: ``sum`` is as fast)."""
    return a.dtype == np.float32 and 1 < a.shape[-1] < 8 and a.size >= 256 * a.shape[-1]


def _rows(xp, p, op, n, c):
    """Partials ``p`` as (n, c, k). A strided view (``strided_fields``) whose k axis is not
    contiguous is copied as the Engine would have, except for ADD's :func:`_short` rows
    (:func:`_sum` adds them alike whatever the strides)."""
    p = p.reshape(n, c, -1)
    fast = op == "ADD" and _short(p)
    return p if fast or p.strides[-1] == p.itemsize else xp.ascontiguousarray(p)


def _log_add(xp, a):
    """``log(sum(exp(a)))`` along the last axis, PopLibs' ``acc = a + log(1 + exp(b - a))``
    with the largest element first, so it never overflows."""
    m = a.max(axis=-1)
    with np.errstate(invalid="ignore"):  # all -inf: the sum of nothing, -inf as in PopLibs
        shift = xp.where(xp.isfinite(m), m, 0).astype(a.dtype)
    return (shift + xp.log(xp.exp(a - shift[..., None]).sum(axis=-1))).astype(a.dtype)


def reduce_vertex(op: str, in_type, out_type, update: bool, multi: bool = True) -> type:
    """``popops::Reduce<op>``: ``out[i] = op(in[i*k:(i+1)*k])`` with k = len(in)/len(out).

    ``multi``: a :class:`RowsMultiVertex` (one per tile, its workers share the outputs),
    else a plain Vertex (one per worker). PopLibs' ``Reduce`` is a plain ``Vertex`` (kit
    convention: ipukit uses the MultiVertex where a compute set has one vertex per tile, of
    one width k, which takes the cycles of one vertex per worker). Where a tile holds rows
    of several widths (several vertices), plain vertices share its workers round-robin.
    Half partials with a float output are added in float (PopLibs accumulates in float)."""
    key = ("reduce", op, np.dtype(in_type), np.dtype(out_type), update, multi)
    if key in _VERTEX_CACHE:
        return _VERTEX_CACHE[key]
    widen = np.dtype(in_type) == HALF and np.dtype(out_type) == FLOAT

    @poputil.vertex_separable
    def compute(self):
        n, c = len(self.out), self.out[0].size  # out may be a strided (n, ...) view
        p = _rows(self.xp, self.partials, op, n, c)
        r = REDUCE_OPS[op](self.xp, p.astype(FLOAT) if widen else p)
        if update:
            r = REDUCE_OPS[COMBINE_OP.get(op, op)](
                self.xp, self.xp.stack([self.out.reshape(n, c), r.astype(self.out.dtype)], -1))
        self.out[...] = r.reshape(self.out.shape)

    name = f"popops::Reduce{'Update' if update else ''}<{op},{type_name(in_type)}>"
    cls = type(name, (RowsMultiVertex if multi else Vertex,), {
        "strided_fields": True,  # partials may come as a strided (n, ...) view: see _rows
        "partials": Input(Vector(in_type)),
        "out": (InOut if update else Output)(Vector(out_type)),
        "compute": compute,
        "__doc__": f"Reduce groups of partials with {op} ({name}).",
        "_recipe": {"popops.reduce": [op, str(np.dtype(in_type)), str(np.dtype(out_type)),
                                      bool(update), bool(multi)]},
    })
    _VERTEX_CACHE[key] = cls
    return cls


def codelet_recipe(cls) -> dict | None:
    """The plain data from which :func:`map_vertex` or :func:`reduce_vertex` made the
    codelet ``cls`` (how :mod:`ipukit.graph_data` sends a generated codelet), else None.

    >>> codelet_recipe(reduce_vertex("ADD", FLOAT, FLOAT, False))
    {'popops.reduce': ['ADD', 'float32', 'float32', False, True]}
    """
    recipe = vars(cls).get("_recipe") if isinstance(cls, type) else None
    try:
        return recipe if recipe is not None and codelet_from_recipe(recipe) is cls else None
    except IpuError:  # e.g. a constant of a type a recipe does not carry (complex)
        return None


#: Most nodes, and most nested levels, of an expression a recipe may describe (kit
#: convention: far above any expression of the lessons).
MAX_EXPR_NODES = 1_000
MAX_EXPR_DEPTH = 64
_RECIPE_TYPES = ("float32", "float16", "int32", "uint32", "bool")
#: The NumPy number types a constant of an expression may have in a recipe.
_CONST_TYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                "uint16", "uint32", "uint64")


def codelet_from_recipe(recipe) -> type:
    """The codelet a :func:`codelet_recipe` describes (untrusted plain data: anything
    malformed is an IpuError naming it).

    >>> codelet_from_recipe({"popops.map": [["EXPONENT", ["ARG", 1]], ["float32"],
    ...                                     "float32", False, True]}).__name__
    'popops::UnaryOp1D<EXPONENT,float>'
    """
    def need(ok, what):
        if not ok:
            raise IpuError(f"a popops codelet recipe: expected {what}")

    need(isinstance(recipe, dict) and len(recipe) == 1, "one {kind: [...]}")
    (kind, args), = recipe.items()
    need(kind in ("popops.map", "popops.reduce") and isinstance(args, list)
         and len(args) == 5, "popops.map or popops.reduce with five arguments")
    flags = args[3:]
    need(all(isinstance(f, bool) for f in flags), "inplace/update and multi as True/False")
    if kind == "popops.reduce":
        op, in_type, out_type = args[:3]
        need(op in REDUCE_OPS, f"an operation of {', '.join(REDUCE_OPS)}")
        need(in_type in _RECIPE_TYPES and out_type in _RECIPE_TYPES, "element types")
        return reduce_vertex(op, np.dtype(in_type), np.dtype(out_type), *flags)
    tree, in_types, out_type = args[:3]
    need(isinstance(in_types, list) and 0 < len(in_types) <= 64
         and all(t in _RECIPE_TYPES for t in in_types + [out_type]), "element types")
    expr = _expr_from_plain(tree, len(in_types), [0], need, 0)
    return map_vertex(expr, [np.dtype(t) for t in in_types], np.dtype(out_type), *flags)


def _expr_plain(expr: Expr) -> list:
    """An expression tree as nested lists: ``["ARG", i]``, ``["CONST", value, type]``
    (type: "int", "float" or a NumPy type's name), ``[op, *args]``."""
    if expr.op == "ARG":
        return ["ARG", int(expr.args[0])]
    if expr.op == "CONST":
        value = expr.args[0]
        kind = {int: "int", float: "float"}.get(type(value), None)
        if kind is None:
            kind = str(np.asarray(value).dtype)
        return ["CONST", value.item() if hasattr(value, "item") else value, kind]
    return [expr.op, *(_expr_plain(a) for a in expr.args)]


def _expr_from_plain(tree, num_args: int, seen: list, need, depth: int) -> Expr:
    seen[0] += 1
    need(seen[0] <= MAX_EXPR_NODES and depth < MAX_EXPR_DEPTH, f"an expression of at most "
         f"{MAX_EXPR_NODES} nodes and {MAX_EXPR_DEPTH} levels")
    need(isinstance(tree, list) and tree and isinstance(tree[0], str), "an expression node")
    op, args = tree[0], tree[1:]
    if op == "ARG":
        need(len(args) == 1 and isinstance(args[0], int) and 1 <= args[0] <= num_args,
             f"a placeholder _1.._{num_args}")
        return Expr("ARG", args[0])
    if op == "CONST":
        kinds = {"int": int, "float": float, **{t: np.dtype(t).type for t in _CONST_TYPES}}
        need(len(args) == 2 and isinstance(args[0], numbers.Real)
             and not isinstance(args[0], bool) and args[1] in kinds, "a constant")
        return Expr("CONST", kinds[args[1]](args[0]))
    arity = 1 if op in UNARY else 2 if op in BINARY else 0
    need(arity and len(args) == arity, f"an operation of {', '.join([*UNARY, *BINARY])}")
    return Expr(op, *[_expr_from_plain(a, num_args, seen, need, depth + 1) for a in args])


# -- building blocks ----------------------------------------------------------------------
def _workers(graph) -> int:
    return graph.target.num_worker_contexts


@poputil.paused_gc
def add_per_tile_vertices(graph, cs, cls, fields: dict, tiles: np.ndarray,
                          grain: int = 1, cls_2d: type | None = None,
                          regions: np.ndarray | None = None,
                          first: np.ndarray | None = None, items: int | None = None) -> int:
    """Add vertices of ``cls`` to ``cs``: the rows of every field that belong to one tile
    go to ONE vertex there when ``cls`` is a :class:`ipukit.MultiVertex` (its workers
    share them), else they are split over the tile's workers (at most 6 vertices per
    tile, ``poputil.split_regions(rows, grain, 6)``).

    ``fields`` maps field name to a Tensor whose first dimension has one row per work item
    (its rows are flattened into the vertex's Vector); ``tiles`` gives each item's tile.
    ``grain`` (rows) cuts the pieces of plain vertices; a MultiVertex class has its own
    ``grain``. With ``cls_2d`` and ``regions`` (per tile, the contiguous regions of the
    output it holds: :func:`regions_per_tile`), a tile of one region gets ``cls`` and any
    other tile ``cls_2d``, as PopLibs' element-wise ops choose ``BinaryOp1D`` or
    ``BinaryOp2D`` (``ElementWise.cpp`` ``binaryOpGeneral``), plain vertices cut as PopLibs
    cuts them (:func:`_vertices_2d`); a share that starts or ends inside one of the tile's
    rows is connected as the few regions it is (a :class:`~ipukit.tensor.RegionList`,
    :func:`_cut_rows`), never as an address per element. ``first``: ``firsts(tiles)``
    where the caller has it (:func:`regions_and_runs`). With ``items`` (their number),
    ``tiles`` is the tile of each run of items from ``first`` (:func:`poputil.tile_runs`:
    no tile per item). Returns the number of vertices added.
    """
    n = len(tiles) if items is None else items
    if n == 0:
        return 0
    if first is None:  # each run of items on one tile: in order when the runs' tiles
        first = firsts(tiles)
    on = tiles[first] if items is None else tiles  # increase (linear mapping: no sort)
    in_order = bool((on[1:] > on[:-1]).all())
    if not in_order and items is not None:  # (then a tile per item after all)
        tiles = np.repeat(on, poputil.run_lengths(first, n))
    if in_order:  # each tile's items are one run: its first item and the next run's (a
        starts = first.tolist()  # bincount of every item: ~3 us per 1,000)
        ends = starts[1:] + [n]
    else:  # each tile's items, in tile order (a stable sort's groups)
        counts = np.bincount(tiles)
        on = np.flatnonzero(counts)
        ends = np.cumsum(counts[on]).tolist()
        starts = [0] + ends[:-1]
    on = on.tolist()
    order = None  # (the items by tile, for a field that is no run: sorted when asked for)
    runs_in = not in_order and any(single_run(t) for t in fields.values())
    tile_pieces = _tile_pieces(tiles) if runs_in else None
    kinds = [cls] * len(on) if cls_2d is None else [
        cls if r == 1 else cls_2d for r in regions[on].tolist()]
    lo, hi, at, kind, run_of = [], [], [], [], []  # each vertex's rows [lo, hi), tile,
    cut = {}  # (rows, class) -> the tile's pieces (tiles of as many rows are cut alike)
    for j, (s, e, tile, k) in enumerate(zip(starts, ends, on, kinds)):  # class, tile's run
        pieces = cut.get((e - s, k))
        if pieces is None:
            pieces = cut[e - s, k] = _pieces(e - s, k, grain, cls_2d is None, graph)
        for b, f in pieces:
            lo.append(s + b)
            hi.append(s + f)
            at.append(tile)
            kind.append(k)
            run_of.append(j)
    columns = []  # per field, each vertex's rows of it (in tile order, flattened)
    rows = None  # (each tile's and each vertex's first row and end, as arrays)
    for t in fields.values():
        run, g, dt, what = single_run(t), t.graph, t.dtype, t.name
        if run and in_order:  # one run of addresses in tile order: each vertex's is a region
            w = run[1] // n
            columns.append([Tensor(g, dt, (run[0] + a * w, ((b - a) * w,), (1,)), what)
                            for a, b in zip(lo, hi)])
            continue
        w = t.num_elements() // n
        # a field that is one run of storage: each tile's region from its runs of items
        # (None: a tile's addresses are no such region; then every address is looked at)
        blocks = _run_blocks(run[0], w, *tile_pieces) if run else None
        if not run and in_order and t._idx is None and w:  # a region (a matmul's partials)
            blocks = _row_blocks(t, n, w, starts, ends)
        idx = None
        if blocks is None:
            idx = (_iota(*run) if run else np.ascontiguousarray(t.idx)).reshape(n, -1)
            if not in_order:
                if order is None:
                    order = np.argsort(tiles, kind="stable")
                idx = np.take(idx, order, axis=0)  # (rows by fancy indexing: 8x the time)
            idx = idx.reshape(-1)
        if rows is None:
            rows = [np.array(x) for x in (starts, ends, lo, hi)]
        layouts = _vertex_layouts(idx, *(x * w for x in rows), run_of, blocks)
        columns.append([RegionList(g, dt, x, what) if type(x) is list else Tensor(g, dt, x, what)
                        for x in layouts])
    conns = [dict(zip(fields, c)) for c in zip(*columns)]
    for k in dict.fromkeys(kind):  # each class's vertices, in tile order
        mine = [i for i, c in enumerate(kind) if c is k]
        _add_alike(graph, cs, k, [conns[i] for i in mine], [at[i] for i in mine], fields)
    return len(conns)


def _pieces(n: int, cls, grain: int, plain: bool, graph) -> list:
    """The rows ``[begin, end)`` of each vertex on a tile of ``n`` rows: all of them for
    a MultiVertex, else split over the tile's workers (``plain``) or as PopLibs cuts 2D
    vertices (:func:`_vertices_2d`)."""
    if issubclass(cls, MultiVertex):
        return [(0, n)]
    parts = _workers(graph) if plain else _vertices_2d(n, grain, graph)
    return poputil.split_regions(n, grain, parts)


def _vertices_2d(n: int, grain: int, graph) -> int:
    """How many 2D vertices PopLibs' element-wise ops put on a tile of ``n`` elements:
    ``splitRegionsBetweenWorkers(target, regions, grain, 2 * grain)`` (poputil
    ``Util.cpp`` ``splitRegions``): at most one per worker, at least 2 grains each."""
    grains = -(-n // grain)
    most = -(-grains // _workers(graph))  # grains a vertex, one vertex per worker
    most = builtins.max(most, -(-grains // builtins.max(1, grains // 2)))  # >= 2 grains
    return -(-grains // most)


def _add_alike(graph, cs, cls, conns: list, on: list, fields) -> None:
    """Vertices of ``cls``: the first is added (and checked) as any; the rest take the
    same fields and types (Vector fields take any length) on tiles up to on[-1]: added in
    one go."""
    graph.add_vertex(cs, cls, conns[0], tile=on[0])
    if not (all(cls.fields[name].vector for name in fields)
            and on[-1] < graph.target.num_tiles):
        for conn, tile in zip(conns[1:], on[1:]):  # each one checked
            graph.add_vertex(cs, cls, conn, tile=tile)
    else:
        poputil.add_vertices_alike(graph, cs, cls, conns[1:], on[1:])


def _regions(idx: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list:
    """Each vertex's addresses ``idx[lo:hi]`` as a region ``(offset, (R, L), (S, s))`` where
    they are one (R runs of L addresses s apart, S between runs: a block of columns, a
    broadcast row), else as they are (an index view): the graph then keeps no address per
    element, and the compiler and the engine read the field through a view. Worked out for
    all vertices at once (NumPy calls per vertex cost ~20 ms of a lesson-08 build); a few
    addresses (``SMALL_REGIONS``) one vertex at a time in Python (:func:`_regions_small`),
    which costs less than the NumPy calls' overhead. ``lo`` and ``hi`` cut ``idx`` into
    consecutive pieces."""
    if not idx.size:
        return [idx[a:b] for a, b in zip(lo.tolist(), hi.tolist())]
    if idx.size <= SMALL_REGIONS:
        return _regions_small(idx, lo.tolist(), hi.tolist())
    out = _regions_alike(idx, lo, hi)
    if out is not None:
        return out
    n, first = hi - lo, np.minimum(lo, idx.size - 1)
    step = np.diff(idx, append=idx[-1:])  # step[j]: from address j to j + 1
    s = step[first] * (n > 1)  # each vertex's first step
    # the steps that are not its vertex's first step (breaks), but for each vertex's last
    # (into the next vertex): a region's are exactly its runs' ends, each the same jump
    bad = np.flatnonzero(step != np.repeat(s, n))
    v = np.searchsorted(hi, bad, "right")  # each break's vertex
    keep = bad != hi[np.minimum(v, n.size - 1)] - 1
    bad, v = bad[keep], v[keep]
    count = np.bincount(v, minlength=n.size)
    brk = hi  # each vertex's first break (where it has one)
    if bad.size:
        brk = bad[np.minimum(np.searchsorted(v, np.arange(n.size)), bad.size - 1)]
    run = np.where(count > 0, brk - lo + 1, n).clip(1)  # L, each vertex's
    gap = idx[np.minimum(lo + run, idx.size - 1)] - idx[first]  # S (the second run's start)
    jump = gap - (run - 1) * s  # the step from a run's end to the next run
    wrong = np.bincount(v, ((bad - lo[v] + 1) % run[v] != 0) | (step[bad] != jump[v]), n.size)
    ok = ((wrong == 0) & (count == n // run - 1) & (n % run == 0) & (s >= 0)
          & ((gap >= 0) | (n == run)) & (n > 0))
    out = []
    for a, b, k, r, d, e, good in zip(lo.tolist(), hi.tolist(), n.tolist(), run.tolist(),
                                      gap.tolist(), s.tolist(), ok.tolist()):
        if not good:
            out.append(idx[a:b])
        elif k > r:
            out.append((int(idx[a]), (k // r, r), (d, e)))
        else:
            out.append((int(idx[a]), (k,), (e if k > 1 else 1,)))
    return out


SMALL_REGIONS = 256  #: below this many addresses, :func:`_regions` works in Python


def _regions_alike(idx: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list | None:
    """:func:`_regions` of pieces of one size (e.g. each tile's) whose first break (a
    step other than their first) comes at one place in all: each piece's steps as a row,
    its breaks compared with the pattern of one region (no search for breaks); None when
    the pieces are not such."""
    n = int(hi[0] - lo[0])
    size = idx.size
    if n < 2 or n * lo.size != size or not (
            (lo == np.arange(0, size, n)).all() and (hi == lo + n).all()):
        return None
    step = np.empty(size, idx.dtype)  # each piece's steps, the last into the next piece
    np.subtract(idx[1:], idx[:-1], out=step[:-1])
    step[-1] = 0
    step = step.reshape(-1, n)
    s = step[:, 0]
    brk = step != s[:, None]
    brk[:, -1] = True  # (the step out of the piece: a break in every region)
    run = brk.argmax(axis=1) + 1  # L: to the first break (n where none)
    r = int(run[0])
    if n % r or not (run == r).all():
        return None
    x = idx.reshape(-1, n)
    ok = (brk == (np.arange(n) % r == r - 1)).all(axis=1) & (s >= 0)  # breaks at runs' ends
    gap = s  # S (where no second run: unused)
    if r < n:  # every break the same jump, the second run after the first
        jumps = step.reshape(-1, n // r, r)[:, :-1, r - 1]
        gap = x[:, r] - x[:, 0]
        ok &= (jumps == jumps[:, :1]).all(axis=1) & (gap >= 0)
    shape = (n // r, r) if r < n else (n,)
    out = []
    for v, (a, d, e, good) in enumerate(zip(x[:, 0].tolist(), gap.tolist(), s.tolist(),
                                            ok.tolist())):
        if not good:
            out.append(idx[v * n:(v + 1) * n])
        elif r < n:
            out.append((a, shape, (d, e)))
        else:
            out.append((a, shape, (e,)))
    return out


def _regions_small(idx: np.ndarray, lo: list, hi: list) -> list:
    """:func:`_regions` for a few addresses: each vertex's breaks (the steps that differ
    from its first, but for its last) looked at one by one."""
    at = idx.tolist()
    out = []
    for a, b in zip(lo, hi):
        n = b - a
        if n <= 0:
            out.append(idx[a:b])
            continue
        s = at[a + 1] - at[a] if n > 1 else 0
        breaks = [j for j in range(a, b - 1) if at[j + 1] - at[j] != s]
        if not breaks:  # one run of addresses s apart
            out.append((at[a], (n,), (s if n > 1 else 1,)) if s >= 0 else idx[a:b])
            continue
        run = breaks[0] - a + 1  # L: R runs of L addresses, S apart
        gap = at[a + run] - at[a]
        jump = gap - (run - 1) * s
        good = (len(breaks) == n // run - 1 and n % run == 0 and s >= 0 and gap >= 0
                and all((j - a + 1) % run == 0 and at[j + 1] - at[j] == jump
                        for j in breaks))
        out.append((at[a], (n // run, run), (gap, s)) if good else idx[a:b])
    return out


def _tile_pieces(tiles: np.ndarray) -> tuple:
    """The runs of items on one tile (pieces), grouped by tile in item order: each piece's
    first item and length, and each tile's number of pieces (tiles with items, in order)."""
    first = firsts(tiles)
    by_tile = np.argsort(tiles[first], kind="stable")
    length = poputil.run_lengths(first, tiles.size)[by_tile]
    count = np.bincount(tiles[first])
    return first[by_tile], length, count[count > 0]


def _run_blocks(start: int, w: int, begin, length, count):
    """Each tile's addresses, for a field that is one run of storage (``w`` elements an
    item from ``start``) and its items' pieces per tile (:func:`_tile_pieces`), as the
    region :func:`_regions` finds in them (R pieces of L items, S items apart), worked out
    from the pieces, not from an address per element; None if a tile's are no region."""
    p0 = np.cumsum(count) - count  # each tile's first piece
    tile = np.repeat(np.arange(count.size), count)  # each piece's tile
    gap = begin[np.minimum(p0 + 1, begin.size - 1)] - begin[p0]  # S (of tiles with R > 1)
    expect = begin[p0][tile] + (np.arange(begin.size) - p0[tile]) * gap[tile]
    if not ((length == length[p0][tile]) & (begin == expect)).all():
        return None
    out = []
    for b, n, r, s in zip((start + begin[p0] * w).tolist(), (length[p0] * w).tolist(),
                          count.tolist(), (gap * w).tolist()):
        if r == 1:
            out.append((b, (n,), (1,)))
        elif n == 1:
            out.append((b, (r,), (s,)))
        else:
            out.append((b, (r, n), (s, 1)))
    return out


def _row_blocks(t: Tensor, items: int, w: int, starts: list, ends: list):
    """Each tile's rows ``[starts, ends)`` of a region ``t`` seen as ``(items, w)`` as the
    region :func:`_regions` finds in their addresses, worked out from ``t``'s strides (no
    address per element); None where that view has no strides >= 0 (then its addresses
    are looked at)."""
    strides = reshape_strides(t.shape, t.strides, (items, w))
    if strides is None or builtins.min(strides) < 0:
        return None
    s0, s1 = strides
    out = []
    for a, b in zip(starts, ends):
        offset, n = t.offset + a * s0, (b - a) * w
        if n == 1:
            out.append((offset, (1,), (1,)))
        elif w == 1:  # one address a row: one run, a row apart
            out.append((offset, (n,), (s0,)))
        elif b - a == 1 or s0 == w * s1:  # one row, or rows that continue each other
            out.append((offset, (n,), (s1,)))
        else:
            out.append((offset, (b - a, w), (s0, s1)))
    return out


def _vertex_layouts(idx, starts, ends, lo, hi, run_of: list, blocks=None) -> list:
    """Each vertex's addresses ``idx[lo:hi]`` (within its tile's ``idx[starts:ends]``,
    ``run_of`` saying which) as one region, a list of regions (:func:`_cut_rows` of its
    tile's block) or, where its tile's addresses are no block, as :func:`_regions` finds
    them. Where every tile's addresses are a block (``blocks``, when known), vertices' own
    are not looked at."""
    blocks = _regions(idx, starts, ends) if blocks is None else blocks
    if lo.size == starts.size:  # one vertex a tile (a MultiVertex): its tile's block
        return blocks
    cuts = zip(run_of, (lo - starts[run_of]).tolist(), (hi - starts[run_of]).tolist())
    if all(type(x) is tuple for x in blocks):
        return [_cut_rows(blocks[j], a, b) for j, a, b in cuts]
    return [x if type(x) is tuple else _cut_rows(blocks[j], a, b) or x
            for x, (j, a, b) in zip(_regions(idx, lo, hi), cuts)]


def _cut_rows(block, a: int, b: int):
    """The elements ``[a, b)`` of a tile's ``block`` (a region ``(offset, (R, L), (S, s))``
    of R rows, or ``(offset, (k,), (s,))``): one region where they are one (part of a row,
    whole rows), else the list of regions they are (part of a row, whole rows, part of a
    row: PopLibs' ``splitRegions`` cuts a tile's regions by elements), so no vertex field
    holds an address per element; None where the block is no region."""
    if type(block) is not tuple:
        return None
    offset, shape, strides = block
    n, gap, step = shape[-1], strides[0], strides[-1]
    (r0, c0), (r1, c1) = divmod(a, n), divmod(b, n)
    if len(shape) == 1 or r0 == r1 or (r1 == r0 + 1 and not c1):  # within one row
        return (offset + r0 * gap + c0 * step, (b - a,), (step if b - a > 1 else 1,))
    if not (c0 or c1):  # whole rows
        return (offset + r0 * gap, (r1 - r0, n), (gap, step))
    parts = []
    if c0:  # the rest of a row
        parts.append((offset + r0 * gap + c0 * step, (n - c0,), (step if n - c0 > 1 else 1,)))
        r0 += 1
    if r1 > r0:  # whole rows
        parts.append((offset + r0 * gap, (r1 - r0, n), (gap, step)) if r1 - r0 > 1
                     else (offset + r0 * gap, (n,), (step if n > 1 else 1,)))
    if c1:  # the start of a row
        parts.append((offset + r1 * gap, (c1,), (step if c1 > 1 else 1,)))
    return parts


def regions_per_tile(graph, t: Tensor, tiles: np.ndarray) -> np.ndarray:
    """Per tile of ``graph``, how many contiguous regions of ``t``'s elements it holds
    (runs of consecutive addresses; ``tiles``: the tile of each of t's flat elements):
    the length of Poplar's ``getSortedContiguousRegions(t, mapping[tile])`` once PopLibs'
    ``reorderToSimplify`` has put t's elements in address order."""
    return regions_and_runs(graph, t, tiles)[0]


def regions_and_runs(graph, t: Tensor, tiles: np.ndarray) -> tuple:
    """:func:`regions_per_tile` and, where ``t`` is one run of addresses, where each run of
    its elements on one tile begins (``firsts(tiles)``, else None): what
    :func:`add_per_tile_vertices` takes as ``first``, worked out once."""
    n_tiles = graph.target.num_tiles
    if single_run(t):  # a variable or a slice of one: flat order is address order
        first = firsts(tiles)
        return np.bincount(tiles[first], minlength=n_tiles), first
    addresses = t.idx.reshape(-1)
    order = np.lexsort((addresses, tiles))
    tiles, addresses = tiles[order], addresses[order]
    return np.bincount(tiles[firsts(tiles, addresses - np.arange(tiles.size))],
                       minlength=n_tiles), None


_IOTA = [np.zeros(0, np.intp)]
KEEP_IOTA = 1 << 22  #: the most addresses kept (32 MiB); a larger storage makes its own


def _iota(start: int, n: int) -> np.ndarray:
    """``np.arange(start, start + n)`` as a read-only view of one kept array (grown as
    needed): the addresses of a run of storage, which vertices' fields hold, not made."""
    end = start + n
    if end > KEEP_IOTA:
        return np.arange(start, end, dtype=np.intp)
    if end > _IOTA[0].size:
        _IOTA[0] = np.arange(1 << (end - 1).bit_length(), dtype=np.intp)  # a power of 2
        _IOTA[0].flags.writeable = False
    return _IOTA[0][start:end]


def _name(debug_name, default):
    return debug_name or default


# -- element-wise -------------------------------------------------------------------------
def map(graph, expr, tensors, prog: Sequence, debug_name: str = "",  # noqa: A001
        out_type=None, inplace: bool = False) -> Tensor:
    """``popops::map(graph, expr, {a, b, ...}, prog)``: evaluate ``expr`` element-wise.

    ``_1`` is ``tensors[0]`` and so on. Shapes broadcast as in NumPy. ``inplace=True``
    writes the result into ``tensors[0]`` (``popops::mapInPlace``); an operand that shares
    elements with it is copied first (:func:`copy_if_aliased`).
    """
    expr = lift(expr)
    tensors = list(tensors)
    op = debug_name or f"map {expr}"
    if not isinstance(prog, Sequence):
        raise IpuError(f"{op}: prog must be an ipu.Sequence to append to, got {prog!r}")
    if expr.num_args() > len(tensors):
        raise IpuError(f"{op}: the expression uses _{expr.num_args()} but only "
                       f"{len(tensors)} tensors were given")
    if not tensors:
        raise IpuError(f"{op}: map needs at least one tensor")
    for i, t in enumerate(tensors):  # (the tiles of the output's operand are asked below)
        poputil.check_mapped(graph, t, op, f"operand {i + 1}", tiles=False)
    try:
        shape = np.broadcast_shapes(*(t.shape for t in tensors))
    except ValueError:
        desc = " and ".join(f"'{t.name}' {t.shape}" for t in tensors)
        raise IpuError(
            f"{op}: operands {desc} have incompatible shapes; element-wise ops need equal "
            "shapes (or shapes that broadcast as in NumPy). Reshape, slice or broadcast one."
        ) from None
    in_types = [t.dtype for t in tensors]
    numeric = [t for t in in_types if t.kind == "f"]
    out_type = as_type(out_type if out_type is not None else (numeric[0] if numeric
                                                              else in_types[0]))
    if len(set(in_types)) > 1:
        desc = ", ".join(f"'{t.name}' ({TYPE_NAMES[t.dtype]})" for t in tensors)
        raise GraphConnectionError(f"{op}: operands {desc} have different types; use "
                                   "popops.cast to convert one")
    if inplace:
        out = tensors[0]
        if tuple(out.shape) != tuple(shape):
            raise IpuError(f"{op}: in-place output '{out.name}' {out.shape} must have the "
                           f"broadcast shape {shape} of all operands")
        tensors[1:] = [copy_if_aliased(graph, t, out, prog, op) for t in tensors[1:]]
    else:
        out = graph.add_variable(out_type, shape, _name(debug_name, "map") + "/out")
        same = [i for i, t in enumerate(tensors) if tuple(t.shape) == tuple(shape)]
        if same:  # clone the mapping of the first operand with the output's shape
            poputil._map_copies(graph, out, tensors[same[0]], 1)
        else:
            poputil.map_tensor_linearly(graph, out)
    if out.num_elements() == 0:
        return out  # nothing to compute: no compute set
    cs = graph.add_compute_set(op)
    fields = {f"in{i + 1}": _flat_as(t, shape) for i, t in enumerate(tensors)}
    if not inplace:
        fields["out"] = out.flatten()
    pieces = poputil.tile_runs(graph, out)  # (a large variable: no tile per element)
    items = None
    if pieces is not None:
        first, out_tiles = pieces
        regions = np.bincount(out_tiles, minlength=graph.target.num_tiles)
        items = out.num_elements()
    else:
        out_tiles = poputil.tile_of_elements(graph, out)
        regions, first = regions_and_runs(graph, out, out_tiles)
    add_per_tile_vertices(graph, cs, map_vertex(expr, in_types, out_type, inplace), fields,
                          out_tiles, grain=poputil.vector_width(out_type),
                          cls_2d=map_vertex(expr, in_types, out_type, inplace, multi=False),
                          regions=regions, first=first, items=items)
    prog.add(Execute(cs))
    return out


def _flat_as(t: Tensor, shape) -> Tensor:
    """``t.broadcast(shape).flatten()``; a region of that shape already gives the same
    flat view (and name) without NumPy's broadcasting (map's operands usually are)."""
    if t._idx is not None or tuple(t.shape) != tuple(shape):
        return t.broadcast(shape).flatten()
    return t._view((t.offset, t.shape, t.strides), f".broadcast({list(shape)})").flatten()


def copy_if_aliased(graph, t: Tensor, out: Tensor, prog: Sequence, op: str,
                    tiles: np.ndarray | None = None) -> Tensor:
    """``t``, or a copy of it (mapped like ``t``, filled by a Copy appended to ``prog``)
    when ``t`` shares elements with ``out``, which a vertex writes in place: one vertex
    may not read what it or another vertex of its compute set writes. PopLibs' in-place
    ops clone an aliased operand the same way. ``tiles``: t's tiles, when known."""
    if t.dtype != out.dtype or _apart(t, out) or not _shares_elements(t.idx, out.idx):
        return t
    copy = graph.add_variable(t.dtype, t.shape, f"{op}/{t.name} copy")
    poputil._map_elements(graph, copy,
                          poputil.tile_of_elements(graph, t) if tiles is None else tiles)
    prog.add(Copy(t, copy))
    return copy


def _apart(a: Tensor, b: Tensor) -> bool:
    """Whether two regions (views without an address array) span disjoint addresses, or
    one is empty: then they share no element (known without their address arrays)."""
    if a._idx is not None or b._idx is not None:
        return False
    if not (a.num_elements() and b.num_elements()):
        return True
    (lo_a, hi_a), (lo_b, hi_b) = address_span(a), address_span(b)
    return hi_a < lo_b or hi_b < lo_a


def _shares_elements(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two address arrays have an address in common (linear time: a mask over
    the span where their ranges overlap, which is empty for distinct variables)."""
    if a.size == 0 or b.size == 0:
        return False
    lo, hi = np.maximum(a.min(), b.min()), np.minimum(a.max(), b.max())  # max is an op here
    if lo > hi:
        return False
    a, b = a[(a >= lo) & (a <= hi)], b[(b >= lo) & (b <= hi)]
    mask = np.zeros(hi - lo + 1, bool)
    mask[b - lo] = True
    return bool(mask[a - lo].any())


def _binary(op, name, inplace=False):
    def fn(graph, a: Tensor, b, prog: Sequence, debug_name: str = ""):
        expr, ins = (Expr(op, _1, _2), [a, b]) if isinstance(b, Tensor) else \
            (Expr(op, _1, lift(b)), [a])
        out = map(graph, expr, ins, prog, debug_name or name, inplace=inplace)
        return None if inplace else out  # (Poplar's xInPlace returns nothing)

    fn.__name__ = _snake(name)
    fn.__doc__ = (f"``popops::{name}(graph, a, b, prog)``: element-wise {op} of a tensor and "
                  "a tensor (or a number); " + (
                      "``a`` takes the result." if inplace else "returns a new tensor."))
    return fn


def _unary(op, name, inplace=False):
    def fn(graph, a: Tensor, prog: Sequence, debug_name: str = ""):
        out = map(graph, Expr(op, _1), [a], prog, debug_name or name, inplace=inplace)
        return None if inplace else out

    fn.__name__ = _snake(name)
    fn.__doc__ = f"``popops::{name}(graph, a, prog)``: element-wise {op}; " + (
        "``a`` takes the result." if inplace else "a new tensor.")
    return fn


def _snake(name: str) -> str:
    return name.replace("InPlace", "_in_place")


BINARY_OPS = (("ADD", "add"), ("SUBTRACT", "sub"), ("MULTIPLY", "mul"), ("DIVIDE", "div"),
              ("MAXIMUM", "max"), ("MINIMUM", "min"))
UNARY_OPS = (("NEGATE", "neg"), ("ABSOLUTE", "abs"), ("EXPONENT", "exp"),
             ("LOGARITHM", "log"), ("INVERSE", "inv"), ("SQRT", "sqrt"), ("SQUARE", "square"),
             ("TANH", "tanh"), ("SIGMOID", "sigmoid"), ("RELU", "relu"))
add, sub, mul, div, max, min = (  # noqa: A001 - Poplar's names
    _binary(op, name) for op, name in BINARY_OPS)
add_in_place, sub_in_place, mul_in_place, div_in_place, max_in_place, min_in_place = (
    _binary(op, name + "InPlace", inplace=True) for op, name in BINARY_OPS)
neg, abs, exp, log, inv, sqrt, square, tanh, sigmoid, relu = (  # noqa: A001
    _unary(op, name) for op, name in UNARY_OPS)
(neg_in_place, abs_in_place, exp_in_place, log_in_place, inv_in_place, sqrt_in_place,
 square_in_place, tanh_in_place, sigmoid_in_place, relu_in_place) = (
    _unary(op, name + "InPlace", inplace=True) for op, name in UNARY_OPS)


def scaled_add_to(graph, a: Tensor, b: Tensor, scale, prog: Sequence,
                  debug_name: str = "") -> None:
    """``popops::scaledAddTo(graph, a, b, scale, prog)``: ``a += scale * b`` in place.

    ``scale`` is a number or a one-element tensor.
    """
    if isinstance(scale, Tensor):
        if scale.num_elements() != 1:
            raise IpuError(f"scaledAddTo: scale '{scale.name}' must have one element, "
                           f"got shape {scale.shape}")
        ins = [a, b, scale.reshape([1] * a.rank)]
        expr = _1 + _3 * _2
    else:
        ins, expr = [a, b], _1 + float(scale) * _2
    map(graph, expr, ins, prog, debug_name or "scaledAddTo", inplace=True)


def fill(graph, t: Tensor, value, prog: Sequence, debug_name: str = "") -> None:
    """``popops::fill(graph, t, value, prog)``: set every element of ``t`` to ``value``."""
    map(graph, lift(value), [t], prog, debug_name or f"fill {value}", inplace=True)


def zero(graph, t: Tensor, prog: Sequence, debug_name: str = "") -> None:
    """``popops::zero(graph, t, prog)``: set every element of ``t`` to 0."""
    fill(graph, t, 0, prog, debug_name or "zero")


def cast(graph, t: Tensor, dtype, prog: Sequence, debug_name: str = "") -> Tensor:
    """``popops::cast(graph, t, type, prog)``: a new tensor of ``dtype`` with t's values."""
    return map(graph, _1, [t], prog, debug_name or f"cast to {type_name(as_type(dtype))}",
               out_type=as_type(dtype))


# -- reductions ---------------------------------------------------------------------------
class Operation:
    """``popops::Operation`` (``OperationDef.hpp``): how ``reduce`` combines elements.

    LOGICAL_AND and LOGICAL_OR take BOOL operands; SQUARE_ADD squares each element before
    adding; LOG_ADD is ``log(sum(exp(x)))`` (``acc = a + log(1 + exp(b - a))``).
    """

    ADD, MUL, MIN, MAX = "ADD", "MUL", "MIN", "MAX"
    LOGICAL_AND, LOGICAL_OR, SQUARE_ADD, LOG_ADD = (
        "LOGICAL_AND", "LOGICAL_OR", "SQUARE_ADD", "LOG_ADD")


def reduce(graph, t: Tensor, dims, op, prog: Sequence, debug_name: str = "",  # noqa: A001
           out_type=None) -> Tensor:
    """``popops::reduce(graph, in, dims, {op}, prog)``: reduce ``t`` over ``dims``.

    The result has t's shape without ``dims``; it is mapped where the data is when each
    output's inputs live on one tile, otherwise linearly.
    """
    name = _name(debug_name, f"reduce {op}")
    dims = _check_dims(t, dims, name)
    out_shape = tuple(s for d, s in enumerate(t.shape) if d not in dims)
    out = graph.add_variable(as_type(out_type) if out_type is not None else t.dtype,
                             out_shape, name + "/out")
    _reduce(graph, t, out, dims, op, prog, name, update=False, map_out=True)
    return out


def reduce_with_output(graph, t: Tensor, out: Tensor, dims, op, prog: Sequence,
                       debug_name: str = "", update: bool = False) -> None:
    """``popops::reduceWithOutput``: reduce into ``out``; with ``update=True``,
    ``out = op(out, reduce(t))`` (Poplar's ``ReduceParams(op, update=true)``)."""
    name = _name(debug_name, f"reduce {op}")
    dims = _check_dims(t, dims, name)
    want = tuple(s for d, s in enumerate(t.shape) if d not in dims)
    poputil.check_tensor(out, name, "output")
    if out.num_elements() != math.prod(want):
        raise IpuError(f"{name}: output {poputil.about(out)} does not match the reduced "
                       f"shape {want} of '{t.name}' {t.shape}")
    if out.dtype != t.dtype and {out.dtype, t.dtype} != {FLOAT, HALF}:
        raise GraphConnectionError(
            f"{name}: output '{out.name}' is {TYPE_NAMES[out.dtype]} but '{t.name}' is "
            f"{TYPE_NAMES[t.dtype]}; the output must be of the input's type (float and half "
            "may be mixed)")
    out_tiles = poputil.check_mapped(graph, out, name, "output")
    poputil.check_parallel_writeable(out, name, "output")
    _reduce(graph, t, out, dims, op, prog, name, update=update, map_out=False,
            out_tiles=out_tiles)


def _take(t: Tensor, positions: np.ndarray, name: str) -> Tensor:
    """``poputil.take(t, positions, name)``; where ``t`` is a flat region and the positions
    are consecutive (a second stage's partials and outputs, in tile order), that region of
    it (the same addresses, no address per element). (A first stage's are not in tile
    order: as address arrays, their tiles' regions cost less to find than from runs.)"""
    flat = positions.reshape(-1)
    if t._idx is None and t.rank == 1 and flat.size and (np.diff(flat) == 1).all():
        step = t.strides[0]
        strides = tuple(n * step for n in contiguous_strides(positions.shape))
        offset = t.offset + int(flat[0]) * step
        return Tensor(t.graph, t.dtype, (offset, positions.shape, strides), name)
    return poputil.take(t, positions, name)


def _check_dims(t, dims, name):
    if not isinstance(t, Tensor):
        raise IpuError(f"{name}: expected a Tensor to reduce, got {t!r}")
    dims = [dims] if isinstance(dims, numbers.Integral) else list(dims)
    for d in dims:
        if not (isinstance(d, numbers.Integral) and 0 <= d < t.rank):
            raise IpuError(
                f"{name}: cannot reduce tensor '{t.name}' of shape {t.shape} over dimension "
                f"{d!r}; it has dimensions 0..{t.rank - 1}"
            )
    if len(set(dims)) != len(dims):
        raise IpuError(f"{name}: dimension listed twice in {dims} for tensor '{t.name}'")
    return sorted(int(d) for d in dims)


def _tile_twice(tiles: np.ndarray) -> bool:
    """Whether a row of ``tiles`` (outputs x inputs) holds one tile twice: each column
    against those after it (up to 4 columns: NumPy sorts short rows slowly), else each row
    sorted (a bias gradient's 32 columns: ~10x faster than 31 comparisons)."""
    k = tiles.shape[1]
    if k > 4:
        tiles = np.sort(tiles, axis=1)
        return bool((tiles[:, 1:] == tiles[:, :-1]).any())
    return any(bool((tiles[:, i:i + 1] == tiles[:, i + 1:]).any()) for i in range(k - 1))


def _reduce(graph, t, out, dims, op, prog, name, update, map_out, out_tiles=None):
    op = str(op).upper().removeprefix("OPERATION.")
    if op not in REDUCE_OPS:
        raise IpuError(f"{name}: unknown reduce operation {op!r}; use "
                       f"{', '.join(REDUCE_OPS)} (popops.Operation)")
    if op.startswith("LOGICAL_") and (t.dtype != np.bool_ or out.dtype != np.bool_):
        raise GraphConnectionError(
            f"{name}: {op} only supports boolean operands, but '{t.name}' is "
            f"{TYPE_NAMES[t.dtype]} and '{out.name}' {TYPE_NAMES[out.dtype]}; cast to BOOL "
            "first (popops.cast)")
    tiles_in = poputil.check_mapped(graph, t, name, "input")
    t = copy_if_aliased(graph, t, out, prog, name, tiles_in)
    keep = [d for d in range(t.rank) if d not in dims]
    m = math.prod(t.shape[d] for d in keep)
    k = math.prod(t.shape[d] for d in dims)
    src = t.dim_shuffle(keep + dims).reshape([m, k])
    src_tiles = tiles_in.reshape(t.shape).transpose(keep + dims).reshape(m, k)
    out_flat = out.flatten()
    if m == 0:
        return  # an empty output: nothing to compute, no compute set
    if k == 0:
        raise IpuError(f"{name}: tensor '{t.name}' {t.shape} has no elements to reduce")
    one_tile = bool((src_tiles == src_tiles[:, :1]).all())  # each output's inputs: one tile
    if map_out and one_tile:
        out_tiles = src_tiles[:, 0]
        poputil._map_elements(graph, out_flat, out_tiles)  # each output where its row is
    elif map_out:
        poputil.map_tensor_linearly(graph, out_flat)
        out_tiles = poputil.linear_tiles(graph, out_flat)
    if one_tile or not _tile_twice(src_tiles):  # (or no tile has two inputs of an output)
        # One stage: each output's vertex (on the output's tile) reads all its inputs.
        cs = graph.add_compute_set(name)
        add_per_tile_vertices(graph, cs, reduce_vertex(op, t.dtype, out.dtype, update),
                              {"partials": src, "out": out_flat}, out_tiles)
        prog.add(Execute(cs))
        return
    key = np.arange(m)[:, None] * graph.target.num_tiles + src_tiles
    order = np.argsort(key, axis=None, kind="stable")
    sorted_key = key.reshape(-1)[order]
    cuts = np.flatnonzero(np.diff(sorted_key)) + 1
    starts = np.concatenate([[0], cuts]).astype(np.intp)
    counts = np.diff(np.concatenate([starts, [sorted_key.size]]))
    # Stage 1: every tile reduces the elements of each output row it holds to a partial.
    pair_tile = sorted_key[starts] % graph.target.num_tiles
    pair_row = sorted_key[starts] // graph.target.num_tiles
    acc = FLOAT if out.dtype == FLOAT else t.dtype  # half into float: float partials
    partials = graph.add_variable(acc, [len(starts)], name + "/partials")
    poputil._map_elements(graph, partials, pair_tile)
    cs1 = graph.add_compute_set(name + "/partials")
    widths = unique(counts).tolist()
    stage1 = reduce_vertex(op, t.dtype, acc, False, multi=len(widths) == 1)
    src_flat = src.flatten()
    by_tile = np.argsort(pair_tile, kind="stable")  # each width's pairs in tile order: the
    width = counts[by_tile]  # vertices' fields as add_per_tile_vertices would sort them
    for c in widths:
        sel = by_tile[width == c]
        positions = order[starts[sel][:, None] + np.arange(c)]
        add_per_tile_vertices(graph, cs1, stage1,
                              {"partials": poputil.take(src_flat, positions, t.name),
                               "out": poputil.take(partials, sel, partials.name)},
                              pair_tile[sel])
    prog.add(Execute(cs1))
    # Stage 2: each output's vertex combines its row's partials (exchanged to its tile).
    cs2 = graph.add_compute_set(name)
    row_counts = np.bincount(pair_row, minlength=m)
    row_first = np.concatenate([[0], np.cumsum(row_counts)[:-1]])
    widths = unique(row_counts).tolist()
    cls = reduce_vertex(COMBINE_OP.get(op, op), acc, out.dtype, update,
                        multi=len(widths) == 1)
    for c in widths:
        rows = np.flatnonzero(row_counts == c)
        positions = row_first[rows][:, None] + np.arange(c)
        add_per_tile_vertices(graph, cs2, cls,
                              {"partials": _take(partials, positions, partials.name),
                               "out": _take(out_flat, rows, out.name)},
                              out_tiles[rows])
    prog.add(Execute(cs2))
