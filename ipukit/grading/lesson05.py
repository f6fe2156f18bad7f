"""The ``check_*`` functions of lesson 05: PopLibs and profiling.

The references are measured, not recomputed from the learner's formula: 05.1 compiles a
real ``popops.add`` and reads each tile's compute cycles from the step; 05.2 uses
Graphcore's integer cost function of tut6 (``estimateCycles`` in ``tut6.cpp``, whose
10000×1000 numbers are in Graphcore's tests: split 7 on Mk2, total 3996); 05.3 measures
the learner's reduction against ``popops.reduce``'s cycles; 05.4 reads
the Trace of programs built from PopLibs ops.

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

from .feedback import Cost, Wrong, as_int, as_ints, exercise, first_mismatch, library_error


def _target(tiles: int | None = None, version: str = "ipu2"):
    return ipu.IPUModel(version, tiles_per_ipu=tiles).create_device().target


# -- 05.1 ---------------------------------------------------------------------------------


def _compiled_add(elements_per_tile):
    """``popops.add(a, b)`` with both operands holding ``elements_per_tile[t]`` on tile t:
    the graph and its compiled compute step."""
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
    """Elements written by each worker on ``tile``: popops.add's one vertex there is a
    MultiVertex whose workers take ``split_regions(e, 2, 6)`` pieces."""
    return [e - b for fields in g.vertex_fields(tile)
            for b, e in poputil.split_regions(fields["out"], 2, 6)]


def _add_cases():
    yield [13, 0, 1, 2]
    yield [100, 7, 12, 6]
    yield [1, 2, 3, 4, 5]
    yield [0, 0, 0, 64]
    rng = np.random.default_rng(51)
    yield [int(c) for c in rng.integers(0, 200, 6)]


@exercise("05.1", "the compute cycles of popops.add", points=2, hints=(
    "popops.add puts one vertex on a tile (a MultiVertex): how do the tile's workers "
    "share its elements?",
    "popops cuts a tile's elements into at most 6 pieces of whole grains (2 floats): "
    "poputil.split_regions gives them. Each piece goes to its own worker, which reads two "
    "elements and writes one per element of its piece.",
    "For e elements: pieces = poputil.split_regions(e, 2, 6); a piece of s elements "
    "costs 10 + 3*s; the tile takes 6 x the largest piece's cost (0 for no pieces)."))
def check_add_cycles(add_compute_cycles):
    """Exercise 05.1: ``add_compute_cycles(elements_per_tile)`` → the compute cycles of
    every tile in the compute set of ``popops.add(a, b)``."""

    for counts in _add_cases():
        g, step = _compiled_add(counts)
        what = f"add_compute_cycles({counts})"
        got = as_ints(add_compute_cycles(list(counts)), len(counts), what)
        for tile, (want, mine) in enumerate(zip(step.tile_compute_cycles.tolist(), got)):
            if want != mine:
                sizes = _vertex_sizes(g, tile)
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


def _split_cases():
    mk2, mk1, small = _target(), _target(version="ipu1"), _target(4)
    yield mk2, 10000, 1000, 7  # Graphcore's tests: 3696 + 143 + 49 + 108 = 3996
    yield mk1, 10000, 1000, 5  # the old README: 4410 + 200 + 45 + 96 = 4751
    yield mk2, 10000, 1000, 999  # the worst split, 53807
    yield mk2, 40, 50, 5
    yield mk2, 1000, 100, 8
    yield mk1, 1000, 100, 3
    yield small, 30, 17, 4
    yield small, 7, 100, 33


def _tname(target) -> str:
    return f"{target.version} ({target.num_tiles} tiles)"


@exercise("05.2", "tut6's integer cost of a split", points=2, hints=(
    "The C++ works in unsigned integers: which of your divisions round, and which way?",
    "ceil_div(a, b) = (a + b - 1) // b wherever the formula says ⌈a/b⌉, and // for every "
    "other division, exactly in the order the formula gives (integer division does not "
    "commute with multiplication).",
    "maxV = max(ceil(R*split/T), 1); compute = ceil(maxV/W)*W*(5 + (ceil(C/split) + 1)//2); "
    "exchange = ceil(maxV/R)*ceil(C/split)*4//X; maxR = max(ceil(R/T), 1): reduce exchange "
    "= maxR*split*4//X, reduce compute = ceil(maxR/W)*W*(5 + (split+1)//2)."))
def check_split_cost(split_cost):
    """Exercise 05.2: ``split_cost(target, rows, cols, split)`` → dict with the four parts
    of Graphcore's estimate: compute, exchange, reduce_exchange, reduce_compute."""

    for target, rows, cols, split in _split_cases():
        what = f"split_cost({_tname(target)}, rows={rows}, cols={cols}, split={split})"
        got = split_cost(target, rows, cols, split)
        if not isinstance(got, dict) or set(COST_KEYS) - set(got):
            raise Wrong(f"{what}: return a dict with the keys {list(COST_KEYS)}, got "
                        f"{got!r}")
        want = split_costs(target, rows, cols, split)
        for key in COST_KEYS:
            value = got[key]
            if isinstance(value, float | np.floating) and value != int(value):
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


@exercise("05.3", "a row sum built like popops.reduce", points=3, budget="cycles", hints=(
    "A row of x may be spread over several tiles. Sum what each tile holds where it "
    "lives first; only then bring the few partial results together.",
    "Two compute sets, as popops.reduce builds them: partial sums of each (row, tile) "
    "piece on its tile, into a partials tensor mapped there; then one vertex per row "
    "adds that row's partials. A row that lives on one tile needs no second stage.",
    "Walk graph.get_tile_mapping(x) (flat runs per tile), cut each run at row boundaries "
    "(row = flat index // cols), add a vertex per piece; map out[row] to the tile of its "
    "first piece; return out after adding Execute(first) and Execute(second) to prog."))
def check_reduce_rows(reduce_rows):
    """Exercise 05.3: ``reduce_rows(graph, x, prog)`` adds to ``prog`` what computes
    out = x.sum(axis=1) for a 2-D ``x`` mapped linearly over the tiles, and returns
    ``out``. Budget: the cycles of ``popops.reduce(graph, x, [1], ADD, prog)``."""
    rng = np.random.default_rng(503)
    used = budget = 0
    for rows, cols, tiles in [(6, 100, 4), (3, 50, 8), (10, 7, 5), (1, 64, 4), (7, 13, 6)]:
        what = f"x of shape [{rows}, {cols}] on {tiles} tiles"
        xv = rng.normal(size=(rows, cols)).astype(np.float32)
        dev, g, x = _reduce_graph(rows, cols, tiles)
        prog = ipu.Sequence()
        out = reduce_rows(g, x, prog)
        if not isinstance(out, ipu.Tensor) or tuple(out.shape) != (rows,):
            raise Wrong(f"{what}: return the tensor of the {rows} row sums, got {out!r}")
        g.create_host_read("out", out)
        try:
            eng = ipu.Engine(g, prog)
        except ipu.IpuError as exc:
            raise Wrong(library_error(f"{what}: your graph does not compile", exc)) from None
        eng.load(dev)
        eng.write_tensor("x", xv)
        eng.run()
        got, want = eng.read_tensor("out"), xv.sum(axis=1)
        columns = xv.sum(axis=0)
        if rows > 1 and cols >= rows and np.allclose(got, columns[:rows], rtol=1e-4,
                                                      atol=1e-4):
            raise Wrong(f"{what}: out holds column sums; sum each row (axis 1)")
        first_mismatch(want, got, f"{what}: out", rtol=1e-4, atol=1e-4)
        used += _device_cycles(eng)
        dev2, g2, x2 = _reduce_graph(rows, cols, tiles)
        prog2 = ipu.Sequence()
        popops.reduce(g2, x2, [1], popops.Operation.ADD, prog2, "reference")
        ref = ipu.Engine(g2, prog2)
        ref.load(dev2)
        ref.run()
        budget += _device_cycles(ref)
    return Cost(used, budget, "cycle")


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


def _repeat_trace():
    """A big compute set once, and a small one 40 times: executions count."""
    target = _target(4)
    g = ipu.Graph(target)
    big = g.add_variable(ipu.FLOAT, [2048], "big")
    small = g.add_variable(ipu.FLOAT, [48], "small")
    poputil.map_tensor_linearly(g, big)
    g.set_tile_mapping(small, 2)
    prog, loop = ipu.Sequence(), ipu.Sequence()
    popops.exp(g, big, prog, "exp big")
    popops.map(g, _1 * 0.5, [small], loop, "halve small", inplace=True)
    prog.add(ipu.Repeat(40, loop))
    return _run(g, prog, target)


def _gather_trace():
    """a + b with b all on tile 0: the exchange dominates, tile 0 sends the most."""
    target = _target(8)
    g = ipu.Graph(target)
    a = g.add_variable(ipu.FLOAT, [1024], "a")
    b = g.add_variable(ipu.FLOAT, [1024], "b")
    poputil.map_tensor_linearly(g, a)
    g.set_tile_mapping(b, 0)
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
    "step.tile_exchange_cycles(trace.target) or of step.tile_compute_cycles."))
def check_bottleneck(bottleneck):
    """Exercise 05.4: ``bottleneck(trace)`` → ``{"compute_set": name, "phase": "exchange"
    or "compute", "tile": the tile that sets that phase}``: the compute set that takes the
    most cycles over the whole run."""

    for what, make in PROFILES.items():
        trace = make()
        ref = bottleneck_reference(trace)
        got = bottleneck(trace)
        if not isinstance(got, dict) or {"compute_set", "phase", "tile"} - set(got):
            raise Wrong(f"return a dict with the keys 'compute_set', 'phase' and 'tile', "
                        f"got {got!r}")
        _check_bottleneck(trace, ref, got, f"profile of {what}")


def _check_bottleneck(trace, ref, got, what):
    name = got["compute_set"]
    if name not in ref["phases"]:
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
    if got["phase"] not in ref["phases"][name]:
        raise Wrong(f"{what}: {name!r} spends {step.exchange_cycles:,} cycles in exchange and "
                    f"{step.compute_cycles:,} in compute (sync {step.sync_cycles}), so its "
                    f"phase is {' or '.join(sorted(ref['phases'][name]))}, not "
                    f"{got['phase']!r}")
    phase = got["phase"]
    tiles = ref["tiles"][name, phase]
    tile = as_int(got["tile"], f"{what}: tile")
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


@exercise("05.5", "a log-softmax op from popops ops", points=3, budget="cycles", hints=(
    "Try a row like [1000, 1001, 1002]: does your op still give finite numbers?",
    "log_softmax(x) = x - c - log(sum(exp(x - c))) for any constant c per row; the row "
    "maximum keeps every exponent ≤ 0. Reductions run along dims [1]; their [rows] "
    "results reshape to [rows, 1] to broadcast against x in popops.map.",
    "m = popops.reduce(graph, x, [1], MAX, prog).reshape([rows, 1]); e = popops.map(exp(x "
    "- m)); s = popops.reduce(e, [1], ADD).reshape([rows, 1]); return popops.map(x - m - "
    "log(s)) (or look at popops.Operation.LOG_ADD)."))
def check_log_softmax(log_softmax):
    """Exercise 05.5: ``log_softmax(graph, x, prog)`` adds popops ops to ``prog`` and
    returns the tensor log_softmax(x) along each row of the 2-D ``x``. Budget: the cycles
    of four popops ops (max, exp, sum, subtract and log)."""
    rng = np.random.default_rng(505)
    used = budget = 0
    cases = [(4, 30, 4, rng.normal(size=(4, 30))),
             (3, 17, 8, 1000 + 3 * rng.normal(size=(3, 17))),
             (5, 8, 5, rng.normal(scale=40, size=(5, 8)))]
    for rows, cols, tiles, data in cases:
        xv = data.astype(np.float32)
        what = f"x of shape [{rows}, {cols}] (values up to {float(np.abs(xv).max()):.0f})"
        cycles = []
        for mine in (True, False):
            dev, g, x = _reduce_graph(rows, cols, tiles)
            prog = ipu.Sequence()
            out = log_softmax(g, x, prog) if mine else _log_softmax_reference_prog(g, x, prog)
            if not isinstance(out, ipu.Tensor) or tuple(out.shape) != (rows, cols):
                raise Wrong(f"{what}: return a tensor of shape [{rows}, {cols}], got {out!r}")
            g.create_host_read("out", out)
            try:
                eng = ipu.Engine(g, prog)
            except ipu.IpuError as exc:
                raise Wrong(library_error(f"{what}: your program does not compile", exc)) \
                    from None
            eng.load(dev)
            eng.write_tensor("x", xv)
            with np.errstate(all="ignore"):
                eng.run()
            cycles.append(_device_cycles(eng))
            if mine:
                got = eng.read_tensor("out")
                z = xv.astype(np.float64) - xv.max(axis=1, keepdims=True)
                want = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
                if not np.isfinite(got).all():
                    raise Wrong(f"{what}: your output holds inf or nan "
                                f"({int((~np.isfinite(got)).sum())} elements)")
                if np.allclose(got, np.exp(want), rtol=1e-3, atol=1e-5):
                    raise Wrong(f"{what}: that is softmax; take its logarithm")
                first_mismatch(want, got, f"{what}: out", rtol=1e-4, atol=1e-4)
        used, budget = used + cycles[0], budget + cycles[1]
    return Cost(used, budget, "cycle")
