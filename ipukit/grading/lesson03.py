"""The checks of lesson 03: vertices and codelets.

Every exercise is a program: codelets (``ipu.Vertex`` subclasses) and the graph that
uses them. The checks run them on seeded random cases, in both of the emulator's modes
(all vertices of a class as one array operation, and one vertex at a time), against
NumPy references, so a sum over the wrong axis, a missing piece or an overflow shows.

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

from .common import device as _device
from .common import engine as _engine
from .feedback import Cost, Wrong, exercise, first_mismatch, plural, side_by_side, tile_grid


def _check_codelet_class(cls, fields: dict):
    """``fields``: name -> (kind, vector) of a FLOAT field, e.g. ("input", True)."""
    if not (isinstance(cls, type) and issubclass(cls, ipu.Vertex)):
        raise Wrong(f"expected a subclass of ipu.Vertex, got {cls!r}")
    for name, (kind, vector) in fields.items():
        got = cls.fields.get(name)
        if got is None or (got.kind, got.vector, got.dtype) != (kind, vector, ipu.FLOAT):
            want = f"ipu.{'InOut' if kind == 'inout' else kind.capitalize()}(" + (
                "ipu.Vector(ipu.FLOAT))" if vector else "ipu.FLOAT)")
            raise Wrong(f"{cls.__name__}.{name} should be {want}, got {got!r}")


def _mode(per_vertex: bool, batched: str = "all vertices at once") -> str:
    return "one vertex at a time" if per_vertex else batched


def _run(eng, mode: str) -> None:
    """``eng.run()``; the emulator's vertex-axis check (a codelet whose vertices see each
    other's data) is a wrong answer, said with the mode it ran in."""
    try:
        eng.run()
    except ipu.CodeletError as exc:
        if exc.__cause__ is not None:  # compute itself raised: not solved, or a bug
            raise
        said = str(exc).split(": compute mixes vertices")[0]  # the fix it names is the answer
        raise Wrong(f"run {mode}: {said}: your compute mixes the vertices' data") from None


def _vertices_of(g, cls) -> list[int]:
    return [v for v, c in enumerate(g.v_cls) if c is cls]


# -- 03.1: tut5's dot product, a split vertex and a reduce vertex -------------------------

def _dot_cases():
    rng = np.random.default_rng(301)
    yield 12, 4, 4, rng
    yield 10, 3, 5, rng
    yield 7, 4, 7, rng
    yield 101, 8, 6, rng


@exercise("03.1", "a dot product from a split and a reduce vertex", points=3, hints=(
    "Two compute sets: in the first, each PartialDot vertex multiplies its piece of a by "
    "the same piece of b and sums; in the second, one ReduceSum vertex adds the partials.",
    "compute() sees every vertex of a class at once: a and b have shape (vertices, piece), "
    "so reduce over the last axis. The partials need a tensor of their own (one element per "
    "piece, mapped where its vertex runs), and the pieces must cover a exactly once.",
    "Cut range(n) into `pieces` runs (e.g. np.linspace(0, n, pieces + 1)); vertex p gets "
    "a[lo:hi], b[lo:hi] and out=partial[p]; then ReduceSum gets partial and out; return "
    "ipu.Sequence(ipu.Execute(first), ipu.Execute(second))."))
def check_dot_product(PartialDot, ReduceSum, build_dot):  # noqa: N803 - classes
    """Exercise 03.1: codelets ``PartialDot`` (a, b → out) and ``ReduceSum`` (partials →
    out) and ``build_dot(graph, a, b, out, pieces)`` → a program with out = a · b."""
    _check_codelet_class(PartialDot, {"a": ("input", True), "b": ("input", True),
                                      "out": ("output", False)})
    _check_codelet_class(ReduceSum, {"partials": ("input", True), "out": ("output", False)})
    for n, tiles, pieces, rng in _dot_cases():
        what = f"a · b with n={n} on {plural(tiles, 'tile')}, pieces={pieces}"
        dev = _device(tiles)
        g = ipu.Graph(dev.target)
        a = g.add_variable(ipu.FLOAT, [n], "a")
        b = g.add_variable(ipu.FLOAT, [n], "b")
        out = g.add_variable(ipu.FLOAT, [1], "out")
        for t in (a, b):
            poputil.map_tensor_linearly(g, t)
        g.set_tile_mapping(out, 0)
        prog = build_dot(g, a, b, out, pieces)
        if not isinstance(prog, ipu.Program):
            raise Wrong(f"{what}: build_dot must return a program, got {prog!r}")
        split, red = len(_vertices_of(g, PartialDot)), len(_vertices_of(g, ReduceSum))
        if split != pieces or red != 1:
            raise Wrong(f"{what}: expected {plural(pieces, 'PartialDot vertex')} and 1 "
                        f"ReduceSum vertex, the graph has {split} and {red}")
        for name in ("a", "b"):
            g.create_host_write(name, a if name == "a" else b)
        g.create_host_read("out", out)
        av, bv = rng.normal(size=(2, n)).astype(np.float32)
        for per_vertex in (False, True):
            eng = _engine(g, prog, f"{what}: your graph", per_vertex)
            eng.load(dev)
            eng.write_tensor("a", av)
            eng.write_tensor("b", bv)
            mode = _mode(per_vertex, "all vertices of a class in one array operation")
            _run(eng, mode)
            got = float(eng.read_tensor("out")[0])
            want = float(np.dot(av.astype(np.float64), bv))
            if not np.isclose(got, want, rtol=1e-4, atol=1e-4):
                raise Wrong(f"{what}, run {mode}: expected out = {want:.6g}, got {got:.6g}")
        supersteps = [s for s in eng.executable.steps if s.kind == "compute"]
        if len(supersteps) != 2:
            raise Wrong(f"{what}: expected 2 compute sets (split, then reduce), your program "
                        f"runs {plural(len(supersteps), 'compute set')}")


# -- 03.2: a stateful codelet --------------------------------------------------------------

@exercise("03.2", "a running mean with InOut and State", points=2, hints=(
    "The vertex must remember two things between runs: the host must read one of them "
    "(a tensor), the other is private to the vertex.",
    "InOut fields are read and written in place in a tensor (the host can read them); State "
    "fields live in the vertex itself and persist between runs. Update both before "
    "computing the mean.",
    "total is ipu.InOut(ipu.FLOAT), count is ipu.State(ipu.FLOAT): add x to total, 1 to "
    "count, then mean = total / count."))
def check_running_mean(running_mean_codelet):
    """Exercise 03.2: ``running_mean_codelet()`` → a codelet ``RunningMean``: after each
    run, ``total`` holds the sum and ``mean`` the mean of every ``x`` the vertex has seen;
    ``count`` is its State. (The learner chooses the field kinds, so the class comes
    from a function; a class is accepted too.)"""
    RunningMean = running_mean_codelet if isinstance(running_mean_codelet, type) else \
        running_mean_codelet()  # noqa: N806 - a class
    _check_codelet_class(RunningMean, {"x": ("input", False), "total": ("inout", False),
                                       "mean": ("output", False), "count": ("state", False)})
    rng = np.random.default_rng(302)
    n, runs = 5, 4
    xs = rng.normal(size=(runs, n)).astype(np.float32)
    for per_vertex in (False, True):
        dev = _device(4)
        g = ipu.Graph(dev.target)
        cs = g.add_compute_set("running mean")
        tensors = {k: g.add_variable(ipu.FLOAT, [n], k) for k in ("x", "total", "mean")}
        for t in tensors.values():
            for v in range(n):
                g.set_tile_mapping(t[v], v % 4)
        for v in range(n):
            g.add_vertex(cs, RunningMean, {k: t[v] for k, t in tensors.items()}, tile=v % 4)
        g.create_host_write("x", tensors["x"])
        for k in ("total", "mean"):
            g.create_host_read(k, tensors[k])
        g.create_host_write("total", tensors["total"])
        eng = _engine(g, ipu.Execute(cs), "your codelet", per_vertex)
        eng.load(dev)
        eng.write_tensor("total", np.zeros(n, np.float32))
        for r in range(runs):
            eng.write_tensor("x", xs[r])
            _run(eng, _mode(per_vertex))
            seen = xs[:r + 1]
            first_mismatch(seen.sum(axis=0), eng.read_tensor("total"),
                           f"total after run {r + 1}", rtol=1e-4, atol=1e-5)
            first_mismatch(seen.mean(axis=0), eng.read_tensor("mean"),
                           f"mean after run {r + 1}", rtol=1e-4, atol=1e-5)


# -- 03.3: an op built from your codelet ---------------------------------------------------

def _add_cases():
    rng = np.random.default_rng(303)
    yield [13, 0, 1, 2]
    yield [30, 7, 12, 6]
    yield [int(c) for c in rng.integers(0, 60, 5)]


def _tile_runs(g, t):
    """(tile, begin, end) of every contiguous run of ``t``'s mapping."""
    return [(tile, b, e) for tile, m in enumerate(g.get_tile_mapping(t)) for b, e in m]


@exercise("03.3", "a vector add built from your codelet", points=3, budget="cycles", hints=(
    "Put the work where the data is: a vertex on tile t should read only elements that "
    "live on tile t, so nothing is exchanged.",
    "graph.get_tile_mapping(a) lists each tile's (begin, end) runs. A tile has 6 workers: "
    "one vertex per worker (up to 6 per tile) makes the compute phase 6 times shorter "
    "than one vertex for the whole tile.",
    "For every tile and every (begin, end) run on it, cut the run into at most 6 pieces "
    "(poputil.split_regions(end - begin, 2, 6) gives them) and add one Add vertex per piece "
    "on that tile, in one compute set."))
def check_vector_add(Add, vector_add):  # noqa: N803
    """Exercise 03.3: codelet ``Add`` (x, y → out) and ``vector_add(graph, a, b, out)`` →
    a program with out = a + b, where a, b and out are mapped alike. Budget: the cycles of
    popops' placement (each tile's run in grains of 2 over its 6 workers)."""
    _check_codelet_class(Add, {"x": ("input", True), "y": ("input", True),
                               "out": ("output", True)})
    rng = np.random.default_rng(3031)
    used = budget = 0
    for counts in _add_cases():
        what = f"a + b with {counts} elements per tile"
        ends = np.cumsum(counts).tolist()
        mapping = [[(e - c, e)] if c else [] for c, e in zip(counts, ends)]
        cycles = []
        for mine in (True, False):
            dev = _device(len(counts))
            g = ipu.Graph(dev.target)
            a, b, out = (g.add_variable(ipu.FLOAT, [ends[-1]], k) for k in ("a", "b", "out"))
            for t in (a, b, out):
                poputil.set_tile_mapping(g, t, mapping)
            if mine:
                prog = vector_add(g, a, b, out)
                if not isinstance(prog, ipu.Program):
                    raise Wrong(f"{what}: vector_add must return a program, got {prog!r}")
            else:
                prog = ipu.Execute(_reference_add(g, a, b, out))
            g.create_host_write("a", a)
            g.create_host_write("b", b)
            g.create_host_read("out", out)
            eng = _engine(g, prog, f"{what}: your graph")
            if mine:
                av, bv = rng.normal(size=(2, ends[-1])).astype(np.float32)
                eng.load(dev)
                eng.write_tensor("a", av)
                eng.write_tensor("b", bv)
                _run(eng, _mode(False))
                got = eng.read_tensor("out")
                if not np.allclose(got, av + bv, rtol=1e-5, atol=1e-6):
                    bad = ~np.isclose(got, av + bv, rtol=1e-5, atol=1e-6)
                    owner = np.repeat(np.arange(len(counts)), counts)
                    raise Wrong(f"{what}: {int(bad.sum())} of {plural(bad.size, 'element')} "
                                f"of out are wrong, the first at element "
                                f"{int(np.argmax(bad))} (tile {owner[np.argmax(bad)]}); "
                                "the picture shows the tile of each wrong element",
                                picture=side_by_side(tile_grid(np.where(bad, owner, -1)),
                                                     tile_grid(np.full(bad.size, -1)),
                                                     ("wrong elements", "none expected")))
            cycles.append(sum(s.cycles for s in eng.executable.steps if s.kind != "host"))
        used += cycles[0]
        budget += cycles[1]
    return Cost(used, budget, "cycle")


class _RefAdd(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    y = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.x + self.y


def _reference_add(g, a, b, out):
    """popops.add's placement: each tile's run cut in grains of 2 over its 6 workers."""
    cs = g.add_compute_set("reference add")
    for tile, begin, end in _tile_runs(g, a):
        for lo, hi in poputil.split_regions(end - begin, 2, 6):
            s = slice(begin + lo, begin + hi)
            g.add_vertex(cs, _RefAdd, {"x": a[s], "y": b[s], "out": out[s]}, tile=tile)
    return cs


# -- 03.4: a numerically stable softmax codelet -------------------------------------------

@exercise("03.4", "a softmax codelet that does not overflow", points=2, hints=(
    "Try your codelet on a row like [1000, 1001]: what is exp(1000) in float32?",
    "softmax(x) = softmax(x - c) for any constant c; with c = the row's maximum every "
    "exponent is ≤ 0. compute() sees (vertices, row) at once: every reduction needs "
    "axis=-1 and keepdims=True.",
    "m = self.x.max(axis=-1, keepdims=True); e = np.exp(self.x - m); "
    "self.out[...] = e / e.sum(axis=-1, keepdims=True)."))
def check_softmax(Softmax):  # noqa: N803
    """Exercise 03.4: ``Softmax``: Vector input x, Vector output out = softmax(x) of each
    vertex's row, correct for large inputs too."""
    _check_codelet_class(Softmax, {"x": ("input", True), "out": ("output", True)})
    rng = np.random.default_rng(304)
    rows = [rng.normal(size=(4, 6)), 1000 + 5 * rng.normal(size=(3, 5)),
            np.array([[-80.0, 0.0, 80.0]] * 2), rng.normal(scale=30, size=(5, 7))]
    for x in rows:
        x = x.astype(np.float32)
        z = x.astype(np.float64) - x.max(axis=1, keepdims=True)
        want = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        for per_vertex in (True, False):
            dev = _device(4)
            g = ipu.Graph(dev.target)
            cs = g.add_compute_set("softmax")
            xt = g.add_variable(ipu.FLOAT, list(x.shape), "x")
            ot = g.add_variable(ipu.FLOAT, list(x.shape), "out")
            for v in range(x.shape[0]):
                g.set_tile_mapping(xt[v], v % 4)
                g.set_tile_mapping(ot[v], v % 4)
                g.add_vertex(cs, Softmax, {"x": xt[v], "out": ot[v]}, tile=v % 4)
            g.create_host_write("x", xt)
            g.create_host_read("out", ot)
            eng = _engine(g, ipu.Execute(cs), "your codelet", per_vertex)
            eng.load(dev)
            eng.write_tensor("x", x)
            with np.errstate(all="ignore"):
                _run(eng, _mode(per_vertex))
            got = eng.read_tensor("out")
            mode = _mode(per_vertex)
            if not np.isfinite(got).all():
                v = int(np.argwhere(~np.isfinite(got))[0][0])
                raise Wrong(f"run {mode}: vertex {v} wrote {got[v]} for the row "
                            f"{np.array2string(x[v], precision=1)}: not finite")
            first_mismatch(want, got, f"out (run {mode}, rows of scale "
                                      f"{float(np.abs(x).max()):.0f})", rtol=1e-4, atol=1e-6)
