"""The ``check_*`` functions of lesson 05: PopLibs and profiling.

Every check is judged (:func:`ipukit.grading.feedback.exercise`): the judge draws the
cases and works out the expected answers with the kit's own code; the learner's kernel
only runs the learner's functions on them. 05.1 compiles a real ``popops.add`` and reads
each tile's compute cycles from the step; 05.2 uses Graphcore's integer cost function of
tut6 (``estimateCycles`` in ``tut6.cpp``, whose 10000×1000 numbers are in Graphcore's
tests: split 7 on Mk2, total 3996); 05.3 and 05.5 send the graph and program the learner
built as plain data (:mod:`ipukit.graph_data`; 05.3's codelet named as the kit's, its own
sums checked apart): the judge rebuilds them, runs them on an x the kernel never sees and
compares with NumPy (points), the star from that run's cycles; 05.4 reads the
Trace of programs built from PopLibs ops; 05.6 builds the learner's order of ops (plain
data) with popops in the judge and reads its tile peak from the kit's liveness.

>>> from ipukit.grading import lesson05
>>> r = lesson05.check_split_cost(lambda target, rows, cols, split: {}, show=False)
>>> print(r.text().splitlines()[0])
WRONG · Exercise 05.2 · tut6's integer cost of a split: 0/2 points
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu
from ipukit.poplibs import poplin, popnn, popops, poputil
from ipukit.poplibs.expr import Exp, Log, _1, _2, _3

from .common import (
    codelet_run,
    judged_run,
    naming,
    only_codelet,
    output_array,
    output_field,
    rebuilt_engine,
    sent_graph,
    stand_ins,
)
from .feedback import (
    Cost,
    Wrong,
    as_int,
    as_ints,
    clipped,
    exercise,
    first_mismatch,
)


def _target(tiles: int | None = None, version: str = "ipu2"):
    return ipu.IPUModel(version, tiles_per_ipu=tiles).create_device().target


# -- 05.1 ---------------------------------------------------------------------------------


def _compiled_add(elements_per_tile):
    """``popops.add(a, b)`` with both operands holding ``elements_per_tile[t]`` on tile t
    (one contiguous run per tile): the graph and its compiled compute step."""
    target = _target(len(elements_per_tile))
    g = ipu.Graph(target)
    n = sum(elements_per_tile)
    ends = np.cumsum(elements_per_tile).tolist()
    mapping = [[(e - c, e)] if c else [] for c, e in zip(elements_per_tile, ends)]
    a, b = (g.add_variable(ipu.FLOAT, [n], name) for name in ("a", "b"))
    for t in (a, b):
        poputil.set_tile_mapping(g, t, mapping)
    prog = ipu.Sequence()
    popops.add(g, a, b, prog, "add")
    step = next(s for s in ipu.compile_graph(g, [prog]).steps if s.kind == "compute")
    return g, step


def _vertex_sizes(g, tile: int) -> list[int]:
    """Elements written by each worker on ``tile``: with one contiguous run per tile, the
    kit's popops.add puts one MultiVertex there whose workers take ``split_regions(e, 2,
    6)`` pieces (kit convention)."""
    return [e - b for fields in g.vertex_fields(tile)
            for b, e in poputil.split_regions(fields["out"], 2, 6)]


def _add_cases(rng) -> list[dict]:
    """Elements per tile: an odd count, empty tiles, fewer grains than workers, uneven
    pieces; then random ones (the judge compiles the real popops.add for each)."""
    found = [[13, 0, 1, 2], [100, 7, 12, 6], [1, 2, 3, 4, 5], [0, 0, 0, 64], [25, 24, 11, 2]]
    found.append([int(c) for c in rng.integers(0, 200, 6)])
    found.append([int(c) for c in rng.integers(1, 40, int(rng.integers(2, 9)))])
    cases = []
    for counts in found:
        g, step = _compiled_add(counts)
        cases.append({"elements_per_tile": counts,
                      "_cycles": [int(c) for c in step.tile_compute_cycles],
                      "_sizes": [_vertex_sizes(g, t) for t in range(len(counts))]})
    return cases


def _add_what(case) -> str:
    return f"add_compute_cycles({case['elements_per_tile']})"


def _add_trial(case, add_compute_cycles):
    counts, what = case["elements_per_tile"], _add_what(case)
    with naming(what):
        got = add_compute_cycles(list(counts))
    return as_ints(got, len(counts), what)


@exercise("05.1", "the compute cycles of popops.add", points=2, hints=(
    "Here every tile holds one contiguous run of a and b, and popops.add puts one vertex "
    "there (a MultiVertex): how do the tile's workers share its elements?",
    "The kit's popops cuts a tile's run into at most 6 pieces of whole grains (2 floats), "
    "one per worker: poputil.split_regions gives them. A worker's piece costs the default "
    "estimate (kit convention: 10 cycles plus one per element read or written), and the "
    "add reads two elements and writes one per element of its piece.",
    "For e elements: pieces = poputil.split_regions(e, 2, 6); a piece of s elements "
    "costs 10 + 3*s; the tile takes 6 x the largest piece's cost (0 for no pieces)."),
    answers=("add_compute_cycles",), cases=_add_cases, trial=_add_trial)
def check_add_cycles(cases, outputs):
    """Exercise 05.1: ``add_compute_cycles(elements_per_tile)`` → the compute cycles of
    every tile in the compute set of ``popops.add(a, b)``."""
    for case, got in zip(cases, outputs):
        counts, what = case["elements_per_tile"], _add_what(case)
        got = as_ints(got, len(counts), what)
        for tile, (want, mine) in enumerate(zip(case["_cycles"], got)):
            if want != mine:
                sizes = case["_sizes"][tile]
                raise Wrong(f"{what}: tile {tile} holds {counts[tile]} elements of a and b; "
                            f"popops.add's vertex there has {len(sizes)} workers writing "
                            f"{sizes} elements, so its compute phase takes {want} cycles; "
                            f"you said {mine}" + _add_diagnosis(counts[tile], sizes, mine))


def _add_diagnosis(e: int, sizes: list[int], got: int) -> str:
    big = max(sizes, default=0)
    if got == 10 + 3 * big:
        return ". That is the heaviest worker alone: a tile is busy 6 x its heaviest worker."
    if e and got == 6 * (10 + 3 * e):
        return (". That is one worker doing the whole tile: popops' vertex splits a tile's "
                "elements over its 6 workers.")
    if got == 6 * (10 + 2 * big):
        return ". Count the elements written too: each element is read twice and written once."
    return ""


# -- 05.2 and 05.3: tut6's cost function ----------------------------------------------------

COST_KEYS = ("compute", "exchange", "reduce_exchange", "reduce_compute")


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


def split_costs(target, rows: int, cols: int, split: int) -> dict:
    """Graphcore's ``estimateCycles`` of tut6, part by part (unsigned integer arithmetic)."""
    tiles, workers = target.num_tiles, target.num_worker_contexts
    xbytes = target.exchange_bytes_per_cycle
    max_vertices = max(_ceil(rows * split, tiles), 1)
    max_reduce = max(_ceil(rows, tiles), 1)
    return {
        "compute": _ceil(max_vertices, workers) * workers * (5 + (_ceil(cols, split) + 1) // 2),
        "exchange": _ceil(max_vertices, rows) * _ceil(cols, split) * 4 // xbytes,
        "reduce_exchange": max_reduce * split * 4 // xbytes,
        "reduce_compute": _ceil(max_reduce, workers) * workers * (5 + (split + 1) // 2),
    }


def _split_cases(rng) -> list[dict]:
    """Graphcore's published cases, the worst split, small targets (fewer vertices than
    workers, one row: a dot product), then random ones."""
    found = [("ipu2", None, 10000, 1000, 7),  # Graphcore's tests: 3696 + 143 + 49 + 108
             ("ipu1", None, 10000, 1000, 5),  # the old README: 4410 + 200 + 45 + 96
             ("ipu2", None, 10000, 1000, 999),  # the worst split, 53807
             ("ipu2", None, 40, 50, 5), ("ipu2", None, 1000, 100, 8),
             ("ipu1", None, 1000, 100, 3), ("ipu2", 4, 30, 17, 4), ("ipu2", 4, 7, 100, 33),
             ("ipu2", 4, 1, 100, 3)]
    for _ in range(2):
        cols = int(rng.integers(2, 400))
        found.append((str(rng.choice(["ipu1", "ipu2"])), int(rng.choice([4, 16, 64, 1216])),
                      int(rng.integers(1, 5000)), cols, int(rng.integers(1, cols))))
    return [{"version": v, "tiles": t, "rows": r, "cols": c, "split": s,
             "_want": split_costs(_target(t, v), r, c, s)} for v, t, r, c, s in found]


def _split_what(case) -> str:
    target = _target(case["tiles"], case["version"])
    return (f"split_cost({target.version} ({target.num_tiles} tiles), rows={case['rows']}, "
            f"cols={case['cols']}, split={case['split']})")


def _split_trial(case, split_cost):
    target, what = _target(case["tiles"], case["version"]), _split_what(case)
    with naming(what):
        got = split_cost(target, case["rows"], case["cols"], case["split"])
    if not isinstance(got, dict) or set(COST_KEYS) - set(got):
        raise Wrong(f"{what}: return a dict with the keys {list(COST_KEYS)}, "
                    f"got {got!r}")
    return {key: got[key] for key in COST_KEYS}


@exercise("05.2", "tut6's integer cost of a split", points=2, hints=(
    "The C++ works in unsigned integers: which of your divisions round, and which way?",
    "ceil_div(a, b) = (a + b - 1) // b wherever the formula says ⌈a/b⌉, and // for every "
    "other division, exactly in the order the formula gives (integer division does not "
    "commute with multiplication). Both max(…, 1) matter when there are fewer rows than "
    "tiles.",
    "maxV = max(ceil(R*split/T), 1); compute = ceil(maxV/W)*W*(5 + (ceil(C/split) + 1)//2); "
    "exchange = ceil(maxV/R)*ceil(C/split)*4//X; maxR = max(ceil(R/T), 1): reduce exchange "
    "= maxR*split*4//X, reduce compute = ceil(maxR/W)*W*(5 + (split+1)//2)."),
    answers=("split_cost",), cases=_split_cases, trial=_split_trial)
def check_split_cost(cases, outputs):
    """Exercise 05.2: ``split_cost(target, rows, cols, split)`` → dict with the four parts
    of Graphcore's estimate: compute, exchange, reduce_exchange, reduce_compute."""
    for case, got in zip(cases, outputs):
        what, want = _split_what(case), case["_want"]
        for key in COST_KEYS:
            value = output_field(got, key, what)
            if isinstance(value, float) and not value.is_integer():
                raise Wrong(f"{what}: {key} = {value!r} is not a whole number. Graphcore's "
                            "estimate uses unsigned integer arithmetic: round divisions "
                            "up with ceil_div or down with //, as the C++ does.")
            if as_int(value, f"{what}['{key}']") != want[key]:
                raise Wrong(f"{what}: {key} cost should be {want[key]}, you said "
                            f"{int(value)} (the other parts: "
                            f"{ {k: v for k, v in want.items() if k != key} })")


def best_split(target, rows: int, cols: int) -> int:
    """``calcOptimalColAxisSplit``: the first split in 1..cols-1 with the least cost."""
    costs = [sum(split_costs(target, rows, cols, s).values()) for s in range(1, cols)]
    return 1 + int(np.argmin(costs))  # argmin keeps the first minimum, like C++'s strict <


def _best_cases():
    mk2, mk1 = _target(), _target(version="ipu1")
    return [(mk2, 10000, 1000), (mk1, 10000, 1000), (mk2, 1000, 100), (mk1, 1000, 100),
            (mk2, 40, 50), (_target(4), 4, 300), (_target(16), 3, 90), (_target(64), 10, 1000)]


# -- 05.3: a PopLibs-style reduction built from vertices --------------------------------------

def _reduce_graph(rows, cols, tiles):
    dev = ipu.IPUModel("ipu2", tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    x = g.add_variable(ipu.FLOAT, [rows, cols], "x")
    poputil.map_tensor_linearly(g, x, min_elements_per_tile=1, grain_size=1)
    g.create_host_write("x", x)
    return dev, g, x


def _device_cycles(eng) -> int:
    return sum(s.cycles for s in eng.trace.executed_steps() if s.kind != "host")


def _sent_ops(case, build, shape, what, reference=None, fields: str = ""):
    """``build(graph, x, prog)`` on a graph with the case's x ([rows, cols] mapped linearly
    over its tiles; its values stay with the judge), the tensor it returns read back as
    "out": the graph and program as plain data (the trial's side), the learner's codelets
    sent as the kit's ``reference`` (with the exercise's ``fields``, in words), and the list
    of those codelets. Wrong for a result that is not a tensor of ``shape``."""
    _, g, x = _reduce_graph(case["rows"], case["cols"], case["tiles"])
    prog = ipu.Sequence()
    with naming(what):
        out = build(g, x, prog)
    if not isinstance(out, ipu.Tensor) or tuple(out.shape) != tuple(shape):
        raise Wrong(f"{what}: return a tensor of shape {list(shape)}, got {out!r}"[:300])
    g.create_host_read("out", out)
    mine = stand_ins(g, reference, what, fields) if reference is not None else {}
    return sent_graph(g, prog, what, mine), list(mine)


def _judged_ops(case, sent, shape, what, check=None):
    """The graph the kernel sent, rebuilt and run by the judge on its own x (x kept as the
    case maps it; ``check``: of the rebuilt graph): (out's values as float64, the run's
    device cycles)."""
    _, base, _ = _reduce_graph(case["rows"], case["cols"], case["tiles"])
    eng = rebuilt_engine(sent, base, what, (("x", "host_writes"),), ("out",), check)
    with judged_run(what):
        eng.write_tensor("x", case["_x"])
        eng.run()
        out = eng.read_tensor("out")
    return output_array(out, shape, f"{what}: out"), _device_cycles(eng)


def _reference_cycles(rows, cols, tiles, build) -> int:
    """The device cycles of the reference ``build(graph, x, prog)`` (the budget)."""
    dev, g, x = _reduce_graph(rows, cols, tiles)
    prog = ipu.Sequence()
    build(g, x, prog)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    return _device_cycles(eng)


def _popops_row_sums(g, x, prog):
    return popops.reduce(g, x, [1], popops.Operation.ADD, prog, "reference")


class _PartialSum(ipu.Vertex):
    """out = the sum of x: the codelet exercise 05.3 asks for, as the judge runs it in place
    of the learner's (whose compute is checked on its own, in the kernel)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum(axis=-1)


def _reduce_cases(rng) -> list[dict]:
    """Rows spread over tiles, rows within a tile, one row, uneven sizes; then a random
    shape. The budget: the cycles of popops.reduce on the same tensor. ``pieces``: inputs
    for the learner's codelet alone (one element, mixed signs, a long run); x is private
    to the judge."""
    shapes = [(6, 100, 4), (3, 50, 8), (10, 7, 5), (1, 64, 4), (7, 13, 6),
              (int(rng.integers(1, 12)), int(rng.integers(1, 80)), int(rng.integers(2, 9)))]
    return [{"rows": r, "cols": c, "tiles": t,
             "pieces": [rng.normal(size=n).astype(np.float32) for n in (1, 5, 37)],
             "_x": rng.normal(size=(r, c)).astype(np.float32),
             "_budget": _reference_cycles(r, c, t, _popops_row_sums)} for r, c, t in shapes]


def _reduce_what(case) -> str:
    return f"reduce_rows: x of shape [{case['rows']}, {case['cols']}] on {case['tiles']} tiles"


def _reduce_trial(case, reduce_rows):
    """The learner's graph and program (the learner's codelets sent as the kit's
    :class:`_PartialSum`), and what each of those codelets computes on ``pieces``."""
    sent, mine = _sent_ops(case, reduce_rows, [case["rows"]], _reduce_what(case), _PartialSum,
                           "x (Input(Vector(float32))) and out (Output(float32))")
    return {"graph": sent, "codelets": {cls.__name__: [codelet_run(
        cls, {"x": piece}, {"out": []})["out"] for piece in case["pieces"]] for cls in mine}}


@exercise("05.3", "a row sum built like popops.reduce", points=3, budget="cycles", hints=(
    "A row of x may be spread over several tiles. Sum what each tile holds where it "
    "lives first; only then bring the few partial results together.",
    "Work in stages, as PopLibs' reduce does: partial sums of each (row, tile) piece on its "
    "tile, into a partials tensor mapped there; then a vertex per row adds that row's "
    "partials. A row that lives on one tile needs no second stage.",
    "Walk graph.get_tile_mapping(x) (flat runs per tile), cut each run at row boundaries "
    "(row = flat index // cols), add a vertex per piece; map out[row] to the tile of its "
    "first piece; return out after adding Execute(first) and Execute(second) to prog."),
    answers=("reduce_rows",), cases=_reduce_cases, trial=_reduce_trial)
def check_reduce_rows(cases, outputs):
    """Exercise 05.3: ``reduce_rows(graph, x, prog)`` adds to ``prog`` what computes
    out = x.sum(axis=1) for a 2-D ``x`` mapped linearly over the tiles, and returns
    ``out``. The kernel sends the graph and program (the learner's codelet named as the
    kit's :class:`_PartialSum`) and what that codelet computes on the case's ``pieces``;
    the judge checks those sums, then rebuilds the graph, runs it on its own x and compares
    out (points); the star: that run's cycles within those of
    ``popops.reduce(graph, x, [1], ADD, prog)``."""
    used = budget = 0
    for case, got in zip(cases, outputs):
        what, xv = _reduce_what(case), np.asarray(case["_x"], np.float64)
        codelets = output_field(got, "codelets", what)
        for name, sums in (codelets.items() if isinstance(codelets, dict) else ()):
            name = clipped(str(name), 80)
            for piece, total in zip(case["pieces"], output_array(sums, [3], what)):
                if not np.isclose(total, piece.sum(dtype=np.float64), rtol=1e-5, atol=1e-5):
                    raise Wrong(f"{what}: your codelet {name} on x = "
                                f"{np.array2string(piece, precision=3)[:200]}: expected out "
                                f"{piece.sum():.4f}, got {total:.4f}")
        rows, cols = xv.shape
        out, cycles = _judged_ops(case, output_field(got, "graph", what), [rows], what,
                                  only_codelet(_PartialSum, what, "your codelet"))
        columns = xv.sum(axis=0)
        if rows > 1 and cols >= rows and np.allclose(out, columns[:rows], rtol=1e-4,
                                                      atol=1e-4):
            raise Wrong(f"{what}: out holds column sums; sum each row (axis 1)")
        first_mismatch(xv.sum(axis=1), out, f"{what}: out", rtol=1e-4, atol=1e-4)
        used += cycles
        budget += case["_budget"]
    return Cost(used, budget, "cycle")  # the judge's own run


# -- 05.4: read a profile ------------------------------------------------------------------


def _mlp_trace():
    """A small layer: x @ W, ReLU, softmax, on 16 tiles."""
    target = _target(16)
    g = ipu.Graph(target)
    x = g.add_variable(ipu.FLOAT, [32, 64], "x")
    w = g.add_variable(ipu.FLOAT, [64, 48], "W")
    for t in (x, w):
        poputil.map_tensor_linearly(g, t)
    prog = ipu.Sequence()
    h = popnn.non_linearity(g, popnn.NonLinearityType.RELU,
                            poplin.mat_mul(g, x, w, prog, "xW"), prog)
    popnn.non_linearity(g, popnn.NonLinearityType.SOFTMAX, h, prog)
    return _run(g, prog, target)


def _repeat_trace(big: int = 2048, repeats: int = 40):
    """A big compute set once, and a small one ``repeats`` times: executions count."""
    target = _target(4)
    g = ipu.Graph(target)
    large = g.add_variable(ipu.FLOAT, [big], "big")
    small = g.add_variable(ipu.FLOAT, [48], "small")
    poputil.map_tensor_linearly(g, large)
    g.set_tile_mapping(small, 2)
    prog, loop = ipu.Sequence(), ipu.Sequence()
    popops.exp(g, large, prog, "exp big")
    popops.map(g, _1 * 0.5, [small], loop, "halve small", inplace=True)
    prog.add(ipu.Repeat(repeats, loop))
    return _run(g, prog, target)


def _gather_trace(tile: int = 0):
    """a + b with b all on one tile: the exchange dominates, that tile sends the most."""
    target = _target(8)
    g = ipu.Graph(target)
    a = g.add_variable(ipu.FLOAT, [1024], "a")
    b = g.add_variable(ipu.FLOAT, [1024], "b")
    poputil.map_tensor_linearly(g, a)
    g.set_tile_mapping(b, tile)
    prog = ipu.Sequence()
    popops.add(g, a, b, prog, "a + b")
    popops.reduce(g, a, [0], popops.Operation.MAX, prog, "max a")
    return _run(g, prog, target)


def _streamed_trace():
    """Streams in and out around a small matmul: the host steps dwarf the compute sets."""
    target = _target(8)
    g = ipu.Graph(target)
    a = g.add_variable(ipu.FLOAT, [16, 40], "a")
    b = g.add_variable(ipu.FLOAT, [40, 8], "b")
    for t in (a, b):
        poputil.map_tensor_linearly(g, t)
    s_in = g.add_host_to_device_fifo("a", ipu.FLOAT, 16 * 40)
    s_out = g.add_device_to_host_fifo("c", ipu.FLOAT, 16 * 8)
    prog = ipu.Sequence(ipu.Copy(s_in, a))
    c = poplin.mat_mul(g, a, b, prog, "ab")
    popops.sigmoid(g, c, prog, "sigmoid")
    prog.add(ipu.Copy(c, s_out))
    eng = ipu.Engine(g, prog)
    eng.load(ipu.Device(target))
    eng.connect_stream("a", np.ones(16 * 40, np.float32))
    eng.connect_stream("c", np.zeros(16 * 8, np.float32))
    eng.run()
    return eng.trace


def _run(g, prog, target):
    eng = ipu.Engine(g, prog)
    eng.load(ipu.Device(target))
    eng.run()
    return eng.trace


PROFILES = {"a matmul, ReLU and softmax": _mlp_trace,
            "a big map once and a small one 40 times": _repeat_trace,
            "a + b with b on tile 0, then a reduce": _gather_trace,
            "streams around a matmul": _streamed_trace}
#: The profile builders a case names (with its parameters).
_MAKERS = {"mlp": _mlp_trace, "repeat": _repeat_trace, "gather": _gather_trace,
           "streams": _streamed_trace}


def _profile_cases(rng) -> list[dict]:
    """The four profiles of the lesson, then a loop whose count decides the answer and a
    gather from a random tile (the judge rebuilds each trace for its verdict)."""
    found = [{"maker": m, "params": {}, "what": w} for m, w in zip(_MAKERS, PROFILES)]
    big, repeats = int(rng.choice([1024, 2048, 4096])), int(rng.integers(2, 21))
    found.append({"maker": "repeat", "params": {"big": big, "repeats": repeats},
                  "what": f"a map of {big} elements once and a small one {repeats} times"})
    tile = int(rng.integers(1, 8))
    found.append({"maker": "gather", "params": {"tile": tile},
                  "what": f"a + b with b on tile {tile}, then a reduce"})
    return found


def _profile(case):
    return _MAKERS[case["maker"]](**case["params"])


def _bottleneck_trial(case, bottleneck):
    trace, what = _profile(case), f"profile of {case['what']}"
    with naming(what):
        got = bottleneck(trace)
    if not isinstance(got, dict) or {"compute_set", "phase", "tile"} - set(got):
        raise Wrong(f"{what}: return a dict with the keys 'compute_set', "
                    f"'phase' and 'tile', got {got!r}")
    return {key: got[key] for key in ("compute_set", "phase", "tile")}


def bottleneck_reference(trace) -> dict:
    """The acceptable answers for ``trace``: compute sets, phases and tiles (sets)."""
    runs = trace.executions()
    totals = {i: int(n) * s.cycles for i, (n, s) in enumerate(zip(runs, trace.steps))
              if n and s.kind == "compute"}
    top = max(totals.values())
    steps = [trace.steps[i] for i, c in totals.items() if c == top]
    phases, tiles = {}, {}
    for s in steps:
        per_tile = {"exchange": s.tile_exchange_cycles(trace.target),
                    "compute": s.tile_compute_cycles}
        most = max(s.exchange_cycles, s.compute_cycles)
        for phase in ("exchange", "compute"):
            if getattr(s, f"{phase}_cycles") == most:
                phases.setdefault(s.name, set()).add(phase)
                tiles[s.name, phase] = set(np.flatnonzero(per_tile[phase] ==
                                                          per_tile[phase].max()).tolist())
    return {"totals": totals, "top": top, "phases": phases, "tiles": tiles}


def _step_named(trace, name):
    return next((i for i, s in enumerate(trace.steps) if s.name == name), None)


@exercise("05.4", "find the bottleneck in a profile", points=3, hints=(
    "Which steps are compute sets, and how often did each run?",
    "A compute set's share of the run is how often it ran times its cycles "
    "(trace.executions()[step.index]); its phase is the longer of exchange and compute, "
    "and one tile sets that phase's length.",
    "Keep steps with kind == 'compute'; take the max of executions * cycles; compare "
    "exchange_cycles with compute_cycles; the tile is the argmax of "
    "step.tile_exchange_cycles(trace.target) or of step.tile_compute_cycles."),
    answers=("bottleneck",), cases=_profile_cases, trial=_bottleneck_trial)
def check_bottleneck(cases, outputs):
    """Exercise 05.4: ``bottleneck(trace)`` → ``{"compute_set": name, "phase": "exchange"
    or "compute", "tile": the tile that sets that phase}``: the compute set that takes the
    most cycles over the whole run."""
    for case, got in zip(cases, outputs):
        trace = _profile(case)
        _check_bottleneck(trace, bottleneck_reference(trace), got, f"profile of {case['what']}")


def _check_bottleneck(trace, ref, got, what):
    name = output_field(got, "compute_set", what)
    if not isinstance(name, str) or name not in ref["phases"]:
        best = next(iter(ref["phases"]))
        i = _step_named(trace, best)
        n = int(trace.executions()[i])
        said = _step_named(trace, name)
        why = ""
        if said is None:
            why = f" There is no step named {name!r}."
        elif trace.steps[said].kind != "compute":
            why = (f" {name!r} is a {trace.steps[said].kind} step, not a compute set.")
        elif trace.executions()[said] > 1 or n > 1:
            why = (f" {name!r} ran {int(trace.executions()[said])} time(s) for "
                   f"{ref['totals'].get(said, 0):,} cycles in all: count every execution.")
        raise Wrong(f"{what}: the costliest compute set is {best!r} ({n} execution(s), "
                    f"{ref['top']:,} cycles in all), you named {name!r}.{why}")
    step = trace.steps[_step_named(trace, name)]
    phase = output_field(got, "phase", what)
    if not isinstance(phase, str) or phase not in ref["phases"][name]:
        raise Wrong(f"{what}: {name!r} spends {step.exchange_cycles:,} cycles in exchange and "
                    f"{step.compute_cycles:,} in compute (sync {step.sync_cycles}), so its "
                    f"phase is {' or '.join(sorted(ref['phases'][name]))}, not {phase!r}")
    tiles = ref["tiles"][name, phase]
    tile = as_int(output_field(got, "tile", what), f"{what}: tile")
    per_tile = (step.tile_exchange_cycles(trace.target) if phase == "exchange"
                else step.tile_compute_cycles)
    if tile not in tiles:
        mine = int(per_tile[tile]) if 0 <= tile < len(per_tile) else "no such tile"
        raise Wrong(f"{what}: in {name!r} tile {min(tiles)} has the longest {phase} "
                    f"({int(per_tile.max()):,} cycles); tile {tile} has {mine}")


# -- 05.5: a PopLibs-style op from PopLibs ops ---------------------------------------------------

def _log_softmax_reference_prog(g, x, prog):
    """The budget: max, exp(x - max), sum, x - max - log(sum): four popops ops."""
    rows = x.shape[0]
    m = popops.reduce(g, x, [1], popops.Operation.MAX, prog, "max").reshape([rows, 1])
    e = popops.map(g, Exp(_1 - _2), [x, m], prog, "exp")
    s = popops.reduce(g, e, [1], popops.Operation.ADD, prog, "sum").reshape([rows, 1])
    return popops.map(g, _1 - _2 - Log(_3), [x, m, s], prog, "log softmax")


def _softmax_cases(rng) -> list[dict]:
    """Small and large values, rows of very different scales in one tensor (one shift for
    the whole tensor overflows), rows like [0, 200] (a shift by the mean overflows), then
    a random tensor of mixed row scales. The budget: the reference's four popops ops."""
    mixed = rng.normal(size=(4, 12)) * np.array([[1], [1], [5], [60]]) + np.array(
        [[0], [1000], [-800], [0]])
    scales = np.exp(rng.uniform(np.log(0.1), np.log(500), (5, 1)))
    found = [(4, rng.normal(size=(4, 30))), (8, 1000 + 3 * rng.normal(size=(3, 17))),
             (5, rng.normal(scale=40, size=(5, 8))), (4, mixed),
             (3, np.array([[0.0, 200.0], [200.0, 0.0], [-5.0, 5.0]])),
             (int(rng.integers(2, 9)), scales * rng.normal(size=(5, int(rng.integers(2, 40))))
              + rng.uniform(-300, 300, (5, 1)))]
    cases = []
    for tiles, data in found:
        rows, cols = data.shape
        cases.append({"rows": rows, "cols": cols, "tiles": tiles,
                      "_x": data.astype(np.float32),
                      "_budget": _reference_cycles(rows, cols, tiles,
                                                   _log_softmax_reference_prog)})
    return cases


def _softmax_what(case) -> str:
    """The case in words; in the judge, with its x's row maxima."""
    what = f"log_softmax: x of shape [{case['rows']}, {case['cols']}]"
    if "_x" not in case:  # the trial's side: x stays with the judge
        return what
    return f"{what} (row maxima {np.array2string(case['_x'].max(axis=1), precision=0)})"


def _softmax_trial(case, log_softmax):
    """The learner's graph and program (popops ops: the kit's codelets, sent as they are)."""
    return _sent_ops(case, log_softmax, [case["rows"], case["cols"]], _softmax_what(case))[0]


@exercise("05.5", "a log-softmax op from popops ops", points=3, budget="cycles", hints=(
    "Try a row like [1000, 1001, 1002], and one like [0, 200]: does your op still give "
    "finite numbers?",
    "log_softmax(x) = x - c - log(sum(exp(x - c))) for any constant c per row; the row "
    "maximum keeps every exponent ≤ 0 (one constant for the whole tensor does not, when "
    "rows differ in scale). Reductions run along dims [1]; their [rows] results reshape "
    "to [rows, 1] to broadcast against x in popops.map.",
    "m = popops.reduce(graph, x, [1], MAX, prog).reshape([rows, 1]); e = popops.map(exp(x "
    "- m)); s = popops.reduce(e, [1], ADD).reshape([rows, 1]); return popops.map(x - m - "
    "log(s)) (or look at popops.Operation.LOG_ADD)."),
    answers=("log_softmax",), cases=_softmax_cases, trial=_softmax_trial)
def check_log_softmax(cases, outputs):
    """Exercise 05.5: ``log_softmax(graph, x, prog)`` adds popops ops to ``prog`` and
    returns the tensor log_softmax(x) along each row of the 2-D ``x``. Budget: the cycles
    of four popops ops (max, exp, sum, subtract and log)."""
    used = budget = 0
    for case, got in zip(cases, outputs):
        what, xv = _softmax_what(case), np.asarray(case["_x"], np.float64)
        out, cycles = _judged_ops(case, got, xv.shape, what)
        z = xv - xv.max(axis=1, keepdims=True)
        want = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        if not np.isfinite(out).all():
            bad = ~np.isfinite(out)
            row = int(np.argwhere(bad)[0][0])
            raise Wrong(f"{what}: your output holds inf or nan ({int(bad.sum())} elements, "
                        f"first in row {row}: x[{row}] = "
                        f"{np.array2string(xv[row, :8], precision=1)[:-1]}"
                        f"{' ...]' if xv.shape[1] > 8 else ']'})")
        if np.allclose(out, np.exp(want), rtol=1e-3, atol=1e-5):
            raise Wrong(f"{what}: that is softmax; take its logarithm")
        first_mismatch(want, out, f"{what}: out", rtol=1e-4, atol=1e-4)
        used += cycles
        budget += case["_budget"]
    return Cost(used, budget, "cycle")  # the judge's own run


# -- 05.6: memory reuse, read from the liveness ------------------------------------------------

#: The element-wise ops and reductions a 05.6 case may list (popops names).
_MAPS = ("exp", "square", "neg", "abs")
_REDUCTIONS = {"sum": popops.Operation.ADD, "max": popops.Operation.MAX}


def reuse_memory(ops, order, n: int, tiles: int):
    """Build ``ops`` (05.6's plain dicts: name, op, input) in ``order`` with popops, on a
    ``tiles``-tile IPU where ``x`` holds ``n`` floats (host write) and every reduction's
    result is read by the host; returns the compiled graph's memory (its liveness)."""
    g = ipu.Graph(_target(tiles))
    x = g.add_variable(ipu.FLOAT, [n], "x")
    poputil.map_tensor_linearly(g, x, min_elements_per_tile=1)
    g.create_host_write("x", x)
    made = {"x": x}
    prog = ipu.Sequence()
    by_name = {op["name"]: op for op in ops}
    for name in order:
        op = by_name[name]
        if op["op"] in _REDUCTIONS:
            made[name] = popops.reduce(g, made[op["input"]], [0], _REDUCTIONS[op["op"]],
                                       prog, name)
            g.create_host_read(name, made[name])
        else:
            made[name] = getattr(popops, op["op"])(g, made[op["input"]], prog, name)
    return ipu.compile_graph(g, [prog]).memory


def tile_peak(memory) -> int:
    """The most bytes of not-always-live variables and exchange buffers on any one tile:
    what memory reuse can lower (the always-live bytes do not change with the order)."""
    cats = memory.categories
    return int((cats["not-always-live variables"] + cats["exchange buffers"]).max())


def _best_order(ops) -> list[str]:
    """Each chain from ``x`` in turn, each reduction right after the temporary it reads:
    no two chains' temporaries live at once, and a temporary's reductions finish before
    the next op of its chain (the least peak for chains)."""
    order = []

    def emit(name):
        order.append(name)
        readers = [op for op in ops if op["input"] == name]
        for op in sorted(readers, key=lambda op: op["op"] not in _REDUCTIONS):
            emit(op["name"])

    for op in ops:
        if op["input"] == "x":
            emit(op["name"])
    return order


def _reuse_case(chains, n, tiles, interleave) -> dict:
    """``chains``: per chain, per element-wise op, (op, reductions of its result). The
    listed order (a valid one, the naive one) makes every temporary first, then every
    reduction, each chain by chain or ``interleave``d across chains."""
    maps, reductions = [], []
    for c, chain in enumerate(chains):
        source = "x"
        for k, (op, reduce_ops) in enumerate(chain):
            name = f"t{c}{k}"
            maps.append((k, c, {"name": name, "op": op, "input": source}))
            for r, red in enumerate(reduce_ops):
                reductions.append((k, c, {"name": f"{red}{r + 1 if r else ''}_{name}",
                                          "op": red, "input": name}))
            source = name
    for listed in (maps, reductions):
        listed.sort(key=lambda m: m[:2] if interleave else m[1::-1])
    ops = [m[2] for m in maps + reductions]
    return {"ops": ops, "n": n, "tiles": tiles,
            "_best": tile_peak(reuse_memory(ops, _best_order(ops), n, tiles)),
            "_listed": tile_peak(reuse_memory(ops, [op["name"] for op in ops], n, tiles))}


def _reuse_cases(rng) -> list[dict]:
    """Two one-op chains (the lesson's example); a chain of two whose first temporary is
    also reduced (reduce it before the chain goes on: its partials are temporaries too, on
    4 tiles); temporaries listed across chains; chains of different lengths and sizes;
    then a random forest of chains."""
    found = [([[("exp", ["sum"])], [("square", ["sum"])]], 100, 1, False),
             ([[("exp", ["max"]), ("square", ["sum"])]], 64, 4, False),
             ([[("neg", ["max"])], [("abs", ["sum", "max"])], [("exp", ["sum"])]], 48, 2,
              True),
             ([[("exp", []), ("square", ["sum"])], [("abs", ["max"])],
               [("neg", ["sum"]), ("exp", ["max"]), ("abs", ["sum"])]], 40, 4, True)]
    chains = []
    for _ in range(int(rng.integers(2, 4))):
        length = int(rng.integers(1, 4))
        chain = [(str(rng.choice(_MAPS)),
                  [str(r) for r in rng.choice(list(_REDUCTIONS), int(rng.integers(0, 3)))])
                 for _ in range(length)]
        if not chain[-1][1]:
            chain[-1] = (chain[-1][0], ["sum"])
        chains.append(chain)
    found.append((chains, int(rng.integers(8, 200)), int(rng.choice([1, 2, 4])),
                  bool(rng.integers(0, 2))))
    return [_reuse_case(*f) for f in found]


def _reuse_what(case) -> str:
    listed = ", ".join(f"{op['name']} = {op['op']}({op['input']})" for op in case["ops"])
    return (f"reuse_order on {case['tiles']} tile(s), x of {case['n']} floats, the ops "
            f"listed as: {listed}")


def _names_in_order(got, what) -> list[str]:
    """``got`` as a list of names, or ``Wrong``."""
    if not isinstance(got, (list, tuple)) or not all(isinstance(n, str) for n in got):
        raise Wrong(f"{what}: return a list of the ops' names in the order to run them, "
                    f"got {str(got)[:80]!r}")
    return list(got)


def _reuse_trial(case, reuse_order):
    what = _reuse_what(case)
    with naming(what):
        got = reuse_order([dict(op) for op in case["ops"]])
    return _names_in_order(got, what)


def _reuse_order_error(ops, order) -> str | None:
    """Why ``order`` is not an order of ``ops`` (None: it is one)."""
    names = [op["name"] for op in ops]
    inputs = {op["name"]: op["input"] for op in ops}
    for name in order:
        if name not in inputs:
            return f"'{name}' is not one of the ops ({', '.join(names)})"
    for name in names:
        if order.count(name) != 1:
            return f"'{name}' appears {order.count(name)} times in your order (once, please)"
    done = {"x"}
    for name in order:
        if inputs[name] not in done:
            return f"'{name}' runs before '{inputs[name]}', the result it reads"
        done.add(name)
    return None


def _peak_story(memory) -> str:
    """Which temporaries the fullest tile holds at its peak, and at which op."""
    live = memory.liveness
    cats = memory.categories
    tile = int(np.argmax(cats["not-always-live variables"] + cats["exchange buffers"]))
    point = int(live.peak[tile])
    held = live.bytes_of(tile)
    names = sorted({live.names[v] for v, a, b in live.runs.tolist()
                    if a <= point <= b and held[v]})
    return (f"at op '{live.labels[point]}' tile {tile} holds {', '.join(names) or 'nothing'}"
            " live together")


@exercise("05.6", "reuse memory: temporaries that are never live together", points=2, hints=(
    "Look at report.liveness of the listed order: which temporaries are live at the peak, "
    "and could one of them die before the other is made?",
    "A temporary is live from the op that writes it to the last op that reads it. Run "
    "every reduction of a temporary right after it, and finish one chain from x before "
    "starting the next: then the chains' temporaries share one piece of memory.",
    "Start from each op that reads x; emit it, then (depth first) the reductions that "
    "read its result, then the element-wise op that reads it, and so on down the chain."),
    answers=("reuse_order",), cases=_reuse_cases, trial=_reuse_trial)
def check_reuse_order(cases, outputs):
    """Exercise 05.6: ``reuse_order(ops)`` → the ops' names in an order that runs each op
    after its input and gives the least tile peak of not-always-live memory. The judge
    builds that order with popops and reads the peak from the kit's liveness."""
    for case, got in zip(cases, outputs):
        what, ops = _reuse_what(case), case["ops"]
        got = _names_in_order(got, what)
        error = _reuse_order_error(ops, got)
        if error:
            raise Wrong(f"{what}: {error}")
        memory = reuse_memory(ops, got, case["n"], case["tiles"])
        peak = tile_peak(memory)
        if peak > case["_best"]:
            raise Wrong(f"{what}: your order {got} peaks at {peak:,} B of not-always-live "
                        f"memory on one tile ({_peak_story(memory)}); the listed order "
                        f"peaks at {case['_listed']:,} B, and an order exists that needs "
                        f"only {case['_best']:,} B")
