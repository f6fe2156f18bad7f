"""The checks of lesson 03: vertices and codelets.

Every exercise is a program: codelets (``ipu.Vertex`` subclasses) and, in 03.1 and 03.3,
the graph that uses them. Every check is judged. The learner's codelets run in the
kernel on the judge's random rows, one vertex per row, in both of the emulator's modes
(all vertices of a class as one array operation, and one vertex at a time), so a sum
over the wrong axis, an overflow or a half that rounds wrong shows. The graphs (the
learner's in 03.1 and 03.3, the exercise's graph of 03.2's codelet) travel as plain data
(:mod:`ipukit.graph_data`), each learner codelet named as the kit's codelet with the
same fields: the judge rebuilds them, looks at their vertices (03.1: the pieces of a and
b each reads), runs them on inputs the kernel never sees and compares with NumPy; 03.3's
star comes from the cycles of that run.

>>> from ipukit.grading import lesson03
>>> class Nothing(ipu.Vertex):
...     x = ipu.Input(ipu.Vector(ipu.FLOAT))
>>> r = lesson03.check_softmax(Nothing, show=False)
>>> print(r.text().splitlines()[1])
   Nothing.out should be ipu.Output(ipu.Vector(ipu.FLOAT)), got None
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu
from ipukit.poplibs import poputil
from ipukit.tensor import TYPE_NAMES

from .common import (
    AddVertex,
    elements_of,
    judged_run,
    only_codelet,
    output_array,
    output_field,
    program,
    rebuilt_engine,
    sent_graph,
)
from .common import device as _device
from .common import device_cycles as _device_cycles
from .common import engine as _engine
from .feedback import Cost, Wrong, exercise, first_mismatch, plural, side_by_side, tile_grid

_MODES = {False: "all vertices of a class in one array operation",
          True: "one vertex at a time"}


def _check_codelet_class(cls, fields: dict, dtype=ipu.FLOAT, exact: bool = False):
    """``fields``: name -> (kind, vector) of a field of type ``dtype``, e.g.
    ("input", True); ``exact``: no other field (a codelet the judge replaces by the kit's
    with these fields)."""
    if not (isinstance(cls, type) and issubclass(cls, ipu.Vertex)):
        raise Wrong(f"expected a subclass of ipu.Vertex, got {cls!r}")
    for name, (kind, vector) in fields.items():
        got = cls.fields.get(name)
        if got is None or (got.kind, got.vector, got.dtype) != (kind, vector, dtype):
            of = f"ipu.{TYPE_NAMES[dtype].upper()}"
            want = f"ipu.{'InOut' if kind == 'inout' else kind.capitalize()}(" + (
                f"ipu.Vector({of}))" if vector else f"{of})")
            raise Wrong(f"{cls.__name__}.{name} should be {want}, got {got!r}")
    extra = [name for name in cls.fields if name not in fields]
    if exact and extra:
        raise Wrong(f"{cls.__name__} has fields the exercise does not ask for: "
                    f"{', '.join(extra)}"[:300])


def _run(eng, mode: str, what: str = "") -> None:
    """``eng.run()``; the emulator's vertex-axis check (a codelet whose vertices see each
    other's data) is a wrong answer, said with the mode it ran in (after ``what``, the
    case, if given)."""
    try:
        with np.errstate(all="ignore"):
            eng.run()
    except ipu.CodeletError as exc:
        if exc.__cause__ is not None:  # compute itself raised: not solved, or a bug
            raise
        said = str(exc).split(": compute mixes vertices")[0]  # the fix it names is the answer
        raise Wrong(f"{what}{': ' if what else ''}run {mode}: {said}: your compute mixes the "
                    "vertices' data") from None


def _vertices_of(g, cls) -> list[int]:
    return [v for v, c in enumerate(g.v_cls) if c is cls]


def _run_vertices(cls, inputs: dict, outputs: dict, dtype=ipu.FLOAT, what: str = "") -> dict:
    """One ``cls`` vertex per row v of the ``inputs`` (field -> array, one row per vertex),
    on tile v % 4, each field connected to row v of a tensor of its own; ``outputs``: field
    -> the shape of one vertex's. What each output holds after a run one vertex at a time,
    then after a run of all at once (the learner's kernel: a codelet checked apart);
    ``what``: the case, for a message."""
    rows = len(next(iter(inputs.values())))
    found = {name: [] for name in outputs}
    for per_vertex in (True, False):
        dev = _device(4)
        g = ipu.Graph(dev.target)
        cs = g.add_compute_set(cls.__name__)
        tensors = {name: g.add_variable(dtype, list(np.shape(x)), name)
                   for name, x in inputs.items()}
        tensors.update({name: g.add_variable(dtype, [rows, *shape], name)
                        for name, shape in outputs.items()})
        for v in range(rows):
            for t in tensors.values():
                g.set_tile_mapping(t[v], v % 4)
            g.add_vertex(cs, cls, {name: t[v] for name, t in tensors.items()}, tile=v % 4)
        for name in inputs:
            g.create_host_write(name, tensors[name])
        for name in outputs:
            g.create_host_read(name, tensors[name])
        eng = _engine(g, ipu.Execute(cs), "your codelet", per_vertex)
        eng.load(dev)
        for name, x in inputs.items():
            eng.write_tensor(name, x)
        _run(eng, _MODES[per_vertex], what)
        for name in outputs:
            found[name].append(eng.read_tensor(name))
    return found


def _codelet_right(got, name: str, want, what: str, on: str) -> None:
    """Wrong unless the learner's codelet ``name`` wrote ``want`` (one row per vertex) in
    both of the trial's runs (:func:`_run_vertices`); ``on``: its inputs, in words."""
    runs = output_field(got, name, what)
    if not isinstance(runs, list) or len(runs) != 2:
        raise Wrong(f"{what}: the trial gave no runs of your {name}")
    for per_vertex, out in zip((True, False), runs):
        mode = _MODES[per_vertex]
        out = output_array(out, want.shape, f"{what}: your {name} (run {mode})")
        first_mismatch(want, out, f"{what}: your {name} on {on} (one vertex per row, run "
                       f"{mode}): out", rtol=1e-4, atol=1e-5)


def _rows(rng, vertices: int, size: int) -> np.ndarray:
    return rng.normal(size=(vertices, size)).astype(np.float32)


# -- 03.1: tut6's split of a dot product: partial dot products, then a reduce -------------

class _PartialDot(ipu.Vertex):
    """out = the dot product of a and b: the codelet exercise 03.1 asks for, as the judge
    runs it in place of the learner's (whose compute is checked on its own, in the
    kernel)."""

    a = ipu.Input(ipu.Vector(ipu.FLOAT))
    b = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = (self.a * self.b).sum(axis=-1)


class _ReduceSum(ipu.Vertex):
    """out = the sum of the partials: 03.1's second codelet, as the judge runs it."""

    partials = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.partials.sum(axis=-1)


def _dot_cases(rng) -> list[dict]:
    """Pieces that divide n and that do not, one element per piece, more pieces than
    tiles; then a random size. a and b stay with the judge; ``dot_a``, ``dot_b`` and
    ``partials``: rows for the learner's two codelets alone (one vertex per row)."""
    sizes = [(12, 4, 4), (10, 3, 5), (7, 4, 7), (101, 8, 6), (9, 2, 4),
             (int(rng.integers(20, 60)), int(rng.integers(2, 6)), int(rng.integers(2, 9)))]
    found = []
    for n, t, p in sizes:
        k = int(rng.integers(2, 9))
        found.append({"n": n, "tiles": t, "pieces": p, "dot_a": _rows(rng, 5, k),
                      "dot_b": _rows(rng, 5, k), "partials": _rows(rng, 3, p),
                      "_a": rng.normal(size=n).astype(np.float32),
                      "_b": rng.normal(size=n).astype(np.float32)})
    return found


def _dot_what(case) -> str:
    return (f"a · b with n={case['n']} on {plural(case['tiles'], 'tile')}, "
            f"pieces={case['pieces']}")


def _dot_graph(n: int, tiles: int):
    """a and b (n floats mapped linearly) and out (one float on tile 0), with their host
    handles."""
    g = ipu.Graph(_device(tiles).target)
    a = g.add_variable(ipu.FLOAT, [n], "a")
    b = g.add_variable(ipu.FLOAT, [n], "b")
    out = g.add_variable(ipu.FLOAT, [1], "out")
    for t in (a, b):
        poputil.map_tensor_linearly(g, t)
        g.create_host_write(t.name, t)
    g.set_tile_mapping(out, 0)
    g.create_host_read("out", out)
    return g, a, b, out


def _dot_trial(case, PartialDot, ReduceSum, build_dot):  # noqa: N803 - classes
    """The learner's graph and program as plain data, PartialDot and ReduceSum sent as the
    kit's :class:`_PartialDot` and :class:`_ReduceSum`; and what the two codelets compute
    on the case's rows."""
    _check_codelet_class(PartialDot, {"a": ("input", True), "b": ("input", True),
                                      "out": ("output", False)}, exact=True)
    _check_codelet_class(ReduceSum, {"partials": ("input", True), "out": ("output", False)},
                         exact=True)
    g, a, b, out = _dot_graph(case["n"], case["tiles"])
    prog = program(build_dot(g, a, b, out, case["pieces"]), "build_dot")
    what = _dot_what(case)
    split = _run_vertices(PartialDot, {"a": case["dot_a"], "b": case["dot_b"]}, {"out": ()},
                          what=f"{what}: your PartialDot on rows of a and b")
    reduce = _run_vertices(ReduceSum, {"partials": case["partials"]}, {"out": ()},
                           what=f"{what}: your ReduceSum on rows of partials")
    return {"graph": sent_graph(g, prog, what, {PartialDot: _PartialDot,
                                                ReduceSum: _ReduceSum}),
            "PartialDot": split["out"], "ReduceSum": reduce["out"]}


def _dot_structure(g, case, what: str) -> None:
    """Wrong unless the rebuilt graph ``g`` has ``pieces`` PartialDot vertices whose pieces
    cover a and b exactly once, and one ReduceSum vertex."""
    split, reduce = _vertices_of(g, _PartialDot), _vertices_of(g, _ReduceSum)
    if len(split) != case["pieces"] or len(reduce) != 1:
        raise Wrong(f"{what}: expected {_partial_dots(case['pieces'])} and 1 ReduceSum "
                    f"vertex, the graph has {len(split)} and {len(reduce)}")
    for name in ("a", "b"):
        t = g.host_writes[name]
        _check_pieces([elements_of(g.v_conn[v][name], t) if name in g.v_conn[v]
                       else np.zeros(0, np.int64) for v in split], name, case["n"], what)


@exercise("03.1", "a dot product from a split and a reduce vertex", points=3, hints=(
    "Two compute sets: in the first, each PartialDot vertex multiplies its piece of a by "
    "the same piece of b and sums; in the second, one ReduceSum vertex adds the partials.",
    "compute() sees every vertex of a class at once: a and b have shape (vertices, piece), "
    "so reduce over the last axis. The partials need a tensor of their own (one element per "
    "piece, mapped where its vertex runs), and the pieces must cover a exactly once.",
    "Cut range(n) into `pieces` runs (e.g. np.linspace(0, n, pieces + 1)); vertex p gets "
    "a[lo:hi], b[lo:hi] and out=partial[p], on tile p * tiles // pieces with partial[p] "
    "(tut6's placement); then ReduceSum gets partial and out; return "
    "ipu.Sequence(ipu.Execute(first), ipu.Execute(second))."),
    answers=("PartialDot", "ReduceSum", "build_dot"), cases=_dot_cases, trial=_dot_trial)
def check_dot_product(cases, outputs):
    """Exercise 03.1: codelets ``PartialDot`` (a, b → out) and ``ReduceSum`` (partials →
    out) and ``build_dot(graph, a, b, out, pieces)`` → a program with out = a · b. The
    kernel sends the graph and program (:mod:`ipukit.graph_data`; the codelets named as the
    kit's :class:`_PartialDot` and :class:`_ReduceSum`) and what the two codelets compute
    on the case's rows in both modes; the judge checks those, rebuilds the graph (its
    vertices, their pieces of a and b, its compute sets) and runs it on its own a and b."""
    for case, got in zip(cases, outputs):
        what = _dot_what(case)
        _codelet_right(got, "PartialDot", (case["dot_a"].astype(np.float64) * case["dot_b"])
                       .sum(axis=-1), what, "rows of a and b")
        _codelet_right(got, "ReduceSum", case["partials"].astype(np.float64).sum(axis=-1),
                       what, "rows of partials")
        base = _dot_graph(case["n"], case["tiles"])[0]
        eng = rebuilt_engine(output_field(got, "graph", what), base, what, (
            ("a", "host_writes"), ("b", "host_writes"), ("out", "host_reads")),
            check=lambda g, case=case, what=what: _dot_structure(g, case, what))
        with judged_run(what):
            eng.write_tensor("a", case["_a"])
            eng.write_tensor("b", case["_b"])
            eng.run()
            value = float(eng.read_tensor("out")[0])
        want = float(np.dot(case["_a"].astype(np.float64), case["_b"]))
        if not np.isclose(value, want, rtol=1e-4, atol=1e-4):
            raise Wrong(f"{what}: expected out = {want:.6g}, got {value:.6g}")
        compute_sets = sum(s.kind == "compute" for s in eng.executable.steps)
        if compute_sets != 2:
            raise Wrong(f"{what}: expected 2 compute sets (split, then reduce), your program "
                        f"runs {plural(compute_sets, 'compute set')}")


def _check_pieces(pieces, name: str, n: int, what: str) -> None:
    """Every PartialDot vertex reads a non-empty piece of ``name``; together they read
    each element exactly once."""
    for p, piece in enumerate(pieces):
        piece = np.asarray(piece).reshape(-1)
        if piece.size == 0:
            raise Wrong(f"{what}: PartialDot vertex {p} reads no element of {name}: give "
                        "every vertex a piece")
        if (piece < 0).any():
            raise Wrong(f"{what}: PartialDot vertex {p}'s field {name} is connected to data "
                        f"that is not part of the tensor {name}")
    every = np.concatenate([np.asarray(p, np.intp).reshape(-1) for p in pieces])
    seen = np.bincount(every, minlength=n)[:n]  # (intp: bincount's index type on wasm32)
    bad = np.flatnonzero(seen != 1)
    if bad.size:
        i = int(bad[0])
        raise Wrong(f"{what}: {name}[{i}] is read by {_partial_dots(int(seen[i]))}; the "
                    f"pieces must cover {name} exactly once")


def _partial_dots(k: int) -> str:
    return f"{k} PartialDot {'vertex' if k == 1 else 'vertices'}"


# -- 03.2: a stateful codelet --------------------------------------------------------------

class _RunningMean(ipu.Vertex):
    """The codelet exercise 03.2 asks for, as the judge runs it in place of the learner's
    (whose compute is checked on its own, in the kernel): total += x, count += 1,
    mean = total / count."""

    x = ipu.Input(ipu.FLOAT)
    total = ipu.InOut(ipu.FLOAT)
    count = ipu.State(ipu.FLOAT)
    mean = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.total[...] = self.total + self.x
        self.count[...] = self.count + 1
        self.mean[...] = self.total / self.count


def _mean_cases(rng) -> list[dict]:
    """``x``: the runs (one row each, one value per vertex) the learner's codelet makes in
    the kernel; ``_x``: other runs, private to the judge, of the graph the kernel sends."""
    return [{"x": rng.normal(size=(runs, n)).astype(np.float32),
             "_x": rng.normal(size=(runs + 1, n)).astype(np.float32)} for n, runs in
            [(5, 4), (int(rng.integers(2, 9)), 3)]]


def _mean_graph(cls, n: int):
    """``n`` vertices of ``cls`` in one compute set, vertex v on tile v % 4 with its
    elements of x, total and mean (host handles: x and total written, total and mean
    read): the device, the graph and the compute set."""
    dev = _device(4)
    g = ipu.Graph(dev.target)
    cs = g.add_compute_set("running mean")
    tensors = {k: g.add_variable(ipu.FLOAT, [n], k) for k in ("x", "total", "mean")}
    for t in tensors.values():
        for v in range(n):
            g.set_tile_mapping(t[v], v % 4)
    for v in range(n):
        g.add_vertex(cs, cls, {k: t[v] for k, t in tensors.items()}, tile=v % 4)
    g.create_host_write("x", tensors["x"])
    g.create_host_write("total", tensors["total"])
    for k in ("total", "mean"):
        g.create_host_read(k, tensors[k])
    return dev, g, cs


def _mean_runs(eng, xs, mode: str) -> dict:
    """``total`` and ``mean`` after each run of ``eng`` (in ``mode``) on a row of ``xs``
    (total set to zero first): shape (runs, vertices) each."""
    runs, n = xs.shape
    found = {k: np.zeros((runs, n), np.float32) for k in ("total", "mean")}
    eng.write_tensor("total", np.zeros(n, np.float32))
    for r in range(runs):
        eng.write_tensor("x", xs[r])
        _run(eng, mode)
        for k in found:
            found[k][r] = eng.read_tensor(k)
    return found


def _mean_trial(case, running_mean_codelet):
    """The exercise's graph of the learner's codelet as plain data (sent as the kit's
    :class:`_RunningMean`), and what that codelet computes on the case's runs: ``total``
    and ``mean`` after every run, in both modes: shape (2, runs, vertices)."""
    RunningMean = running_mean_codelet if isinstance(running_mean_codelet, type) else \
        running_mean_codelet()  # noqa: N806 - a class
    _check_codelet_class(RunningMean, {"x": ("input", False), "total": ("inout", False),
                                       "mean": ("output", False), "count": ("state", False)},
                         exact=True)
    xs = case["x"]
    found = {"total": [], "mean": []}
    for per_vertex in (False, True):
        dev, g, cs = _mean_graph(RunningMean, xs.shape[1])
        eng = _engine(g, ipu.Execute(cs), "your codelet", per_vertex)
        eng.load(dev)
        runs = _mean_runs(eng, xs, _MODES[per_vertex])
        for k in found:
            found[k].append(runs[k])
    found["graph"] = sent_graph(g, ipu.Execute(cs), "your codelet's graph",
                                {RunningMean: _RunningMean})
    return found


@exercise("03.2", "a running mean with InOut and State", points=2, hints=(
    "The vertex must remember two things between runs: the host must read one of them "
    "(a tensor), the other is private to the vertex.",
    "InOut fields are read and written in place in a tensor (the host can read them); State "
    "fields live in the vertex itself and persist between runs. Update both before "
    "computing the mean.",
    "total is ipu.InOut(ipu.FLOAT), count is ipu.State(ipu.FLOAT): add x to total, 1 to "
    "count, then mean = total / count."),
    answers=("running_mean_codelet",), cases=_mean_cases, trial=_mean_trial)
def check_running_mean(cases, outputs):
    """Exercise 03.2: ``running_mean_codelet()`` → a codelet ``RunningMean``: after each
    run, ``total`` holds the sum and ``mean`` the mean of every ``x`` the vertex has seen;
    ``count`` is its State. (The learner chooses the field kinds, so the class comes
    from a function; a class is accepted too.) The kernel sends what the codelet computes
    on the case's runs in both modes, and the exercise's graph of it (the codelet named as
    the kit's :class:`_RunningMean`), which the judge rebuilds and runs on its own x."""
    for case, got in zip(cases, outputs):
        xs = case["x"]
        runs, n = xs.shape
        mine = {k: output_array(output_field(got, k, "your codelet"), (2, runs, n),
                                f"your codelet's {k}") for k in ("total", "mean")}
        for m, per_vertex in enumerate((False, True)):
            for r in range(runs):
                seen = xs[:r + 1].astype(np.float64)
                for k, want in (("total", seen.sum(axis=0)), ("mean", seen.mean(axis=0))):
                    first_mismatch(want, mine[k][m, r], f"{k} after run {r + 1} of "
                                   f"{plural(n, 'vertex')} (run {_MODES[per_vertex]})",
                                   rtol=1e-4, atol=1e-5)
        what = f"the graph of {plural(n, 'vertex')}, run by the judge"
        _, base, _ = _mean_graph(_RunningMean, n)
        kept = (("x", "host_writes"), ("total", "host_writes"), ("total", "host_reads"),
                ("mean", "host_reads"))
        eng = rebuilt_engine(output_field(got, "graph", what), base, what, kept)
        with judged_run(what):
            found = _mean_runs(eng, case["_x"], _MODES[False])
        seen = case["_x"].astype(np.float64)
        first_mismatch(seen.cumsum(axis=0), found["total"], f"{what}: total after each run",
                       rtol=1e-4, atol=1e-5)
        first_mismatch(seen.cumsum(axis=0) / np.arange(1, len(seen) + 1)[:, None],
                       found["mean"], f"{what}: mean after each run", rtol=1e-4, atol=1e-5)


# -- 03.3: an op built from your codelet ---------------------------------------------------

def _tile_runs(g, t):
    """(tile, begin, end) of every contiguous run of ``t``'s mapping."""
    return [(tile, b, e) for tile, m in enumerate(g.get_tile_mapping(t)) for b, e in m]


def _reference_add(g, a, b, out):
    """popops.add's placement: each tile's run cut in grains of 2 over its 6 workers."""
    cs = g.add_compute_set("reference add")
    for tile, begin, end in _tile_runs(g, a):
        for lo, hi in poputil.split_regions(end - begin, 2, 6):
            s = slice(begin + lo, begin + hi)
            g.add_vertex(cs, AddVertex, {"x": a[s], "y": b[s], "out": out[s]}, tile=tile)
    return cs


def _add_graph(counts):
    """a, b and out mapped alike, ``counts[t]`` elements on tile t."""
    ends = np.cumsum(counts).tolist()
    dev = _device(len(counts))
    g = ipu.Graph(dev.target)
    a, b, out = (g.add_variable(ipu.FLOAT, [ends[-1]], k) for k in ("a", "b", "out"))
    mapping = [[(e - c, e)] if c else [] for c, e in zip(counts, ends)]
    for t in (a, b, out):
        poputil.set_tile_mapping(g, t, mapping)
    g.create_host_write("a", a)
    g.create_host_write("b", b)
    g.create_host_read("out", out)
    return dev, g, a, b, out


def _add_cases(rng) -> list[dict]:
    """Uneven tiles, empty tiles, odd counts; then random. a and b, and the budget
    (popops' placement), are worked out here and stay in the judge; ``x`` and ``y``: rows
    for the learner's codelet alone (one vertex per row)."""
    found = []
    for counts in ([13, 0, 1, 2], [30, 7, 12, 6], [5, 3, 0, 11, 1],
                   [int(c) for c in rng.integers(0, 60, 5)]):
        counts[0] = max(counts[0], 1)  # never an empty tensor
        _, g, a, b, out = _add_graph(counts)
        budget = _device_cycles(ipu.Engine(g, ipu.Execute(_reference_add(g, a, b, out))))
        a_v, b_v = rng.normal(size=(2, sum(counts))).astype(np.float32)
        k = int(rng.integers(1, 8))
        found.append({"counts": counts, "x": _rows(rng, 5, k), "y": _rows(rng, 5, k),
                      "_a": a_v, "_b": b_v, "_budget": budget})
    return found


def _add_what(case) -> str:
    return f"a + b with {case['counts']} elements per tile"


def _add_trial(case, Add, vector_add):  # noqa: N803
    """The learner's graph and program as plain data (Add sent as the kit's
    :class:`~ipukit.grading.common.AddVertex`), and what Add computes on the case's
    rows."""
    _check_codelet_class(Add, {"x": ("input", True), "y": ("input", True),
                               "out": ("output", True)}, exact=True)
    _, g, a, b, out = _add_graph(case["counts"])
    prog = program(vector_add(g, a, b, out), "vector_add")
    return {"graph": sent_graph(g, prog, _add_what(case), {Add: AddVertex}),
            "Add": _run_vertices(Add, {"x": case["x"], "y": case["y"]},
                                 {"out": case["x"].shape[1:]},
                                 what=f"{_add_what(case)}: your Add on rows of x and y")["out"]}


@exercise("03.3", "a vector add built from your codelet", points=3, budget="cycles", hints=(
    "Put the work where the data is: a vertex on tile t should read only elements that "
    "live on tile t, so nothing is exchanged.",
    "graph.get_tile_mapping(a) lists each tile's (begin, end) runs. A tile has 6 workers: "
    "one vertex per worker (up to 6 per tile) makes the compute phase 6 times shorter "
    "than one vertex for the whole tile.",
    "For every tile and every (begin, end) run on it, cut the run into at most 6 pieces "
    "(poputil.split_regions(end - begin, 2, 6) gives them) and add one Add vertex per piece "
    "on that tile, in one compute set."),
    answers=("Add", "vector_add"), cases=_add_cases, trial=_add_trial)
def check_vector_add(cases, outputs):
    """Exercise 03.3: codelet ``Add`` (x, y → out) and ``vector_add(graph, a, b, out)`` →
    a program with out = a + b, where a, b and out are mapped alike. The kernel sends the
    graph and program (:mod:`ipukit.graph_data`; Add named as the kit's ``AddVertex``) and
    what Add computes on the case's rows in both modes; the judge checks those, rebuilds
    the graph and runs it on its own a and b (points). Budget: the cycles of popops'
    placement (each tile's run in grains of 2 over its 6 workers); the star: the cycles of
    the judge's run within it."""
    used = budget = 0
    for case, got in zip(cases, outputs):
        counts, want, what = case["counts"], case["_a"] + case["_b"], _add_what(case)
        _codelet_right(got, "Add", case["x"].astype(np.float64) + case["y"], what,
                       "rows of x and y")
        _, base, _, _, _ = _add_graph(counts)
        eng = rebuilt_engine(output_field(got, "graph", what), base, what, (
            ("a", "host_writes"), ("b", "host_writes"), ("out", "host_reads")),
            check=only_codelet(AddVertex, what, "your Add codelet"))
        with judged_run(what):
            eng.write_tensor("a", case["_a"])
            eng.write_tensor("b", case["_b"])
            eng.run()
            out = eng.read_tensor("out").reshape(-1)
        bad = ~np.isclose(out, want, rtol=1e-5, atol=1e-6)
        if bad.any():
            owner = np.repeat(np.arange(len(counts)), counts)
            raise Wrong(f"{what}: {int(bad.sum())} of {plural(bad.size, 'element')} "
                        f"of out are wrong, the first at element "
                        f"{int(np.argmax(bad))} (tile {owner[np.argmax(bad)]}); "
                        "the picture shows the tile of each wrong element",
                        picture=side_by_side(tile_grid(np.where(bad, owner, -1)),
                                             tile_grid(np.full(bad.size, -1)),
                                             ("wrong elements", "none expected")))
        used += _device_cycles(eng)
        budget += case["_budget"]
    return Cost(used, budget, "cycle")  # the judge's own run


# -- 03.4 and 03.5: one vertex per row ------------------------------------------------------

def _run_rows(cls, x: np.ndarray, dtype, per_row: bool) -> list:
    """Run one ``cls`` vertex per row of ``x`` (:func:`_run_vertices`), out connected to
    its row (``per_row``) or to one element; returns out after a run one vertex at a time
    and after a run of all at once."""
    return _run_vertices(cls, {"x": x}, {"out": x.shape[1:] if per_row else ()},
                         dtype)["out"]


def _not_finite(x, got, mode: str) -> None:
    """Wrong naming the first vertex that wrote a value that is not finite, if any."""
    bad = ~np.isfinite(np.asarray(got, np.float64))
    if bad.any():
        v = int(np.argwhere(bad)[0][0])
        raise Wrong(f"run {mode}: vertex {v} wrote {got[v]} for the row "
                    f"{np.array2string(x[v], precision=4)}: not finite")


# -- 03.4: a numerically stable softmax codelet -------------------------------------------

def _softmax_cases(rng) -> list[dict]:
    """Rows of one scale; then, in one compute set, rows of very different scales (a
    shift by the maximum of all rows underflows the small ones) and rows like [0, 200]
    (a shift by the mean overflows)."""
    mixed = np.stack([rng.normal(size=6), 1000 + rng.normal(size=6),
                      -700 + 3 * rng.normal(size=6), 40 * rng.normal(size=6)])
    rows = [rng.normal(size=(4, 6)), 1000 + 5 * rng.normal(size=(3, 5)),
            np.array([[-80.0, 0.0, 80.0]] * 2), mixed,
            np.array([[0.0, 200.0], [200.0, 0.0], [-1.0, 1.0], [0.0, 0.0]]),
            rng.normal(scale=30, size=(5, 7))]
    return [{"x": x.astype(np.float32)} for x in rows]


def _softmax_trial(case, Softmax):  # noqa: N803
    """out in both modes (one vertex at a time first)."""
    _check_codelet_class(Softmax, {"x": ("input", True), "out": ("output", True)})
    return _run_rows(Softmax, case["x"], ipu.FLOAT, True)


@exercise("03.4", "a softmax codelet that does not overflow", points=2, hints=(
    "Try your codelet on a row like [1000, 1001]: what is exp(1000) in float32?",
    "softmax(x) = softmax(x - c) for any constant c; with c = the row's maximum every "
    "exponent is ≤ 0. compute() sees (vertices, row) at once: every reduction needs "
    "axis=-1 and keepdims=True.",
    "m = self.x.max(axis=-1, keepdims=True); e = np.exp(self.x - m); "
    "self.out[...] = e / e.sum(axis=-1, keepdims=True)."),
    answers=("Softmax",), cases=_softmax_cases, trial=_softmax_trial)
def check_softmax(cases, outputs):
    """Exercise 03.4: ``Softmax``: Vector input x, Vector output out = softmax(x) of each
    vertex's row, correct for large inputs too, and for rows of different scales side
    by side."""
    for case, got in zip(cases, outputs):
        x = case["x"]
        z = x.astype(np.float64) - x.max(axis=1, keepdims=True)
        want = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        scales = ", ".join(f"{s:.0f}" for s in np.abs(x).max(axis=1))
        for per_vertex, out in zip((True, False), got):
            mode = _MODES[per_vertex]
            _not_finite(x, out, mode)
            first_mismatch(want, out, f"out (run {mode}, rows of scale {scales})",
                           rtol=1e-4, atol=1e-6)


# -- 03.5: half precision ------------------------------------------------------------------

def _rms_cases(rng) -> list[dict]:
    """Rows whose squares overflow half (|x| > 256), whose sum of squares does (64 values
    near 40), whose squares underflow it (|x| near 1e-4), all scales in one compute set;
    then random scales. Values are halves."""
    sign = rng.choice([-1.0, 1.0], size=(4, 64))
    rows = [rng.normal(size=(3, 8)),
            sign[:2, :6] * rng.uniform(300, 2000, size=(2, 6)),
            sign[2:] * (40 + rng.uniform(-2, 2, size=(2, 64))),
            sign[:3, :5] * rng.uniform([[1e-4], [1e-3], [1e-4]], [[4e-4], [3e-3], [3e-3]],
                                       size=(3, 5)),
            np.stack([1e-3 * rng.normal(size=7), 500 * rng.normal(size=7),
                      rng.normal(size=7)]),
            rng.normal(size=(4, 9)) * 10.0 ** rng.uniform(-3, 2.5, size=(4, 1))]
    return [{"x": x.astype(np.float16)} for x in rows]


def _rms_trial(case, RmsHalf):  # noqa: N803
    """out (halves) in both modes (one vertex at a time first)."""
    _check_codelet_class(RmsHalf, {"x": ("input", True), "out": ("output", False)},
                         ipu.HALF)
    return _run_rows(RmsHalf, case["x"], ipu.HALF, False)


@exercise("03.5", "a root mean square in half precision", points=2, hints=(
    "Try a row of 300s: what is 300 * 300 in half precision? And 0.0001 * 0.0001?",
    "A half holds at most 65504, and nothing below about 6e-8 but zero: squares of halves "
    "overflow and underflow where the root mean square itself is a fine half. Do the "
    "arithmetic in float32 and write only the result as a half (the output rounds it).",
    "x = self.x.astype(np.float32); self.out[...] = np.sqrt((x * x).mean(axis=-1))."),
    answers=("RmsHalf",), cases=_rms_cases, trial=_rms_trial)
def check_rms_half(cases, outputs):
    """Exercise 03.5: ``RmsHalf``: Vector(HALF) input x, HALF output out = sqrt(mean(x²))
    of each vertex's row rounded to the nearest half, for rows of every scale a half can
    hold. The exact value may be off by float32 rounding (2^-16 of it) before it is
    rounded to half: float32 arithmetic passes, half arithmetic does not."""
    for case, got in zip(cases, outputs):
        x = case["x"]
        exact = np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1))
        lo = (exact * (1 - 2.0**-16)).astype(np.float16)
        hi = (exact * (1 + 2.0**-16)).astype(np.float16)
        for per_vertex, out in zip((True, False), got):
            mode = _MODES[per_vertex]
            out = np.asarray(out)
            if out.shape != exact.shape:
                raise Wrong(f"run {mode}: expected {exact.size} halves, one per vertex, got "
                            f"shape {out.shape}")
            _not_finite(x, out, mode)
            bad = (out < lo) | (out > hi)
            if bad.any():
                v = int(np.argmax(bad))
                raise Wrong(f"run {mode}: vertex {v} wrote {float(out[v]):.6g} for the row "
                            f"{np.array2string(x[v].astype(np.float64), precision=4)}; "
                            f"expected {float(exact[v].astype(np.float16)):.6g} (the exact "
                            f"{exact[v]:.6g} rounded to half)")
