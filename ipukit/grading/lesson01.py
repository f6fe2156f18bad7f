"""The checks of lesson 01: the IPU and bulk-synchronous parallelism.

Three of the four exercises are programs: a superstep's graph (01.1, with a cycle
budget), a placement of vertices on tiles (01.2, with a budget) and a two-neighbour
stencil over a ring of tiles (01.4); 01.3 is a formula. Every check is judged
(:func:`~ipukit.grading.feedback.exercise`): fixed edge cases and drawn ones, the
learner's code run on them in the kernel, the verdict from NumPy references and the
emulator's compiler. The graph exercises (01.1, 01.4) send the graph and program the
learner built as plain data (:mod:`ipukit.graph_data`): the judge rebuilds them with the
kit's codelets and runs them on inputs the kernel never sees, so their results and 01.1's
cycles (its star) are the judge's own. 01.2's placement is plain data, so its cycles are
worked out by the judge.

>>> from ipukit.grading import lesson01
>>> r = lesson01.check_placement(lambda cycles, num_tiles: [0] * len(cycles), show=False)
>>> print(r.text().splitlines()[0])
WRONG · Exercise 01.2 · place vertices on tiles: 0/2 points
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu

from .common import BusyVertex as _Busy
from .common import SumVertex
from .common import as_count as _as_int
from .common import codelet_run as _codelet_run
from .common import device as _device
from .common import device_cycles as _device_cycles
from .common import judged_run as _judged
from .common import only_codelet as _only_codelet
from .common import rebuilt_engine as _rebuilt
from .common import sent_graph as _sent_graph
from .common import stand_ins as _stand_ins
from .feedback import (
    Cost,
    Wrong,
    as_int,
    clipped,
    exercise,
    first_mismatch,
    plural,
    side_by_side,
    timeline,
)


def _random_steps(seed: int, tiles: int = 4):
    """Compiled steps with uneven compute and exchange: copies and a compute set."""
    rng = np.random.default_rng(seed)
    dev = _device(tiles)
    g = ipu.Graph(dev.target)
    n = 4 * tiles
    a = g.add_variable(ipu.FLOAT, [n], "a")
    b = g.add_variable(ipu.FLOAT, [n], "b")
    for i in range(n):
        g.set_tile_mapping(a[i], int(rng.integers(tiles)))
        g.set_tile_mapping(b[i], int(rng.integers(tiles)))
    cs = g.add_compute_set("work")
    # vertices with unique outputs (no races) on random tiles, uneven estimates
    for k in range(n):
        lo = int(rng.integers(n - 3))
        v = g.add_vertex(cs, SumVertex, {"x": a[lo:lo + 3], "out": b[k:k + 1]},
                         tile=int(rng.integers(tiles)))
        g.set_perf_estimate(v, int(rng.integers(5, 200)))
    progs = [ipu.Sequence(ipu.Copy(a, b), ipu.Execute(cs),
                          ipu.Copy(b[: n // 2], a[n // 2:]))]
    exe = ipu.compile_graph(g, progs)
    return dev.target, [s for s in exe.steps if s.kind != "host"]


def _scatter_steps(tiles: int = 4):
    """12 halves on tile 0 copied 3 per tile: tile 0 sends 18 bytes, the others get 6."""
    dev = _device(tiles)
    g = ipu.Graph(dev.target)
    src = g.add_variable(ipu.HALF, [3 * tiles], "src")
    dst = g.add_variable(ipu.HALF, [3 * tiles], "dst")
    g.set_tile_mapping(src, 0)
    for t in range(tiles):
        g.set_tile_mapping(dst[3 * t:3 * t + 3], t)
    exe = ipu.compile_graph(g, [ipu.Copy(src, dst)])
    return dev.target, [s for s in exe.steps if s.kind != "host"]


def _fetch_and_send_back_steps(tiles: int = 4):
    """A vertex on tile 1 sums 5 floats of tile 2 (exchange in: tile 2 sends 20 bytes, tile
    1 receives them) and writes its result to tile 3 (exchange out, after compute: 4 bytes
    from tile 1 to tile 3): the busiest tile of each exchange phase differs."""
    dev = _device(tiles)
    g = ipu.Graph(dev.target)
    x, out = g.add_variable(ipu.FLOAT, [5], "x"), g.add_variable(ipu.FLOAT, [1], "out")
    g.set_tile_mapping(x, 2)
    g.set_tile_mapping(out, 3)
    cs = g.add_compute_set("fetch and send back")
    g.set_perf_estimate(g.add_vertex(cs, SumVertex, {"x": x, "out": out}, tile=1), 30)
    exe = ipu.compile_graph(g, [ipu.Execute(cs)])
    return dev.target, [s for s in exe.steps if s.kind != "host"]


# -- lesson 01: the IPU and BSP ----------------------------------------------------------

class Scale(ipu.Vertex):
    """out = 2 * x (the lesson's codelet; exercises 01.1 uses it)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = 2 * self.x


# -- 01.1: one superstep, written by you ------------------------------------------------------

#: Elements per tile of x and y (fixed cases): even; a tile with none and one with one;
#: runs longer than a tile's 6 workers.
_SCALE_COUNTS = ([4, 4, 4, 4], [10, 1, 0, 7], [13, 6, 2, 25])


def _mapped_pair(counts):
    dev = _device(len(counts))
    g = ipu.Graph(dev.target)
    n = sum(counts)
    x, y = (g.add_variable(ipu.FLOAT, [n], k) for k in ("x", "y"))
    begin = 0
    for tile, c in enumerate(counts):
        for t in (x, y):
            if c:
                g.set_tile_mapping(t[begin:begin + c], tile)
        begin += c
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    return dev, g, x, y


def _reference_scale(g, x, y):
    """One vertex per worker: each tile's run cut into at most 6 pieces."""
    cs = g.add_compute_set("reference scale")
    for tile, runs in enumerate(g.get_tile_mapping(x)):
        for begin, end in runs:
            for piece in np.array_split(np.arange(begin, end), min(6, end - begin)):
                s = slice(int(piece[0]), int(piece[-1]) + 1)
                g.add_vertex(cs, Scale, {"x": x[s], "out": y[s]}, tile=tile)
    return ipu.Execute(cs)


def _scale_what(counts) -> str:
    return f"x and y with {list(counts)} elements on tiles 0-{len(counts) - 1}"


def _scale_cases(rng) -> list[dict]:
    """The fixed mappings and one drawn one; private to the judge: x and ``_budget``, the
    reference's cycles."""
    drawn = rng.integers(0, 20, int(rng.integers(2, 6))).tolist()
    drawn[int(rng.integers(len(drawn)))] += 1  # never an empty tensor
    found = []
    for counts in [*_SCALE_COUNTS, drawn]:
        _, g, x, y = _mapped_pair(counts)
        found.append({"counts": [int(c) for c in counts],
                      "_x": rng.normal(size=sum(counts)).astype(np.float32),
                      "_budget": _device_cycles(ipu.Engine(g, _reference_scale(g, x, y)))})
    return found


def _judged_run(sent, base, what: str, x, read: str, codelet, yours: str):
    """The graph the kernel described, rebuilt by the judge and run on its ``x``: its
    engine and what ``read`` holds (x and ``read`` kept as ``base`` has them; every vertex
    a ``codelet`` one, ``yours`` in words)."""
    eng = _rebuilt(sent, base, what, (("x", "host_writes"), (read, "host_reads")),
                   check=_only_codelet(codelet, what, yours))
    with _judged(what):
        eng.write_tensor("x", x)
        eng.run()
    return eng, eng.read_tensor(read)


def _scale_trial(case, build_scale):
    """The learner's graph and program on one mapping (the learner's kernel)."""
    _, g, x, y = _mapped_pair(case["counts"])
    return _sent_graph(g, build_scale(g, x, y), _scale_what(case["counts"]))


@exercise("01.1", "one superstep: y = 2x on every tile", points=2, budget="cycles", hints=(
    "Every element of y must be written by exactly one Scale vertex; which tile should "
    "run the vertex that reads x[i]?",
    "A vertex on the tile that holds its data needs no exchange. A tile has 6 workers: up "
    "to 6 vertices on a tile cost no more than one, so cut each tile's elements in pieces.",
    "graph.get_tile_mapping(x) gives each tile's (begin, end) runs; cut each run into at "
    "most 6 pieces (np.array_split) and add one Scale vertex per piece on that tile, all "
    "in one compute set; return ipu.Execute(compute_set)."),
    answers=("build_scale",), cases=_scale_cases, trial=_scale_trial)
def check_scale_superstep(cases, outputs):
    """Exercise 01.1: ``build_scale(graph, x, y)`` → a program with y = 2 x, for x and y
    mapped alike (unevenly) over the tiles. The kernel sends the graph and program it built
    (:mod:`ipukit.graph_data`); the judge rebuilds them with the kit's codelets, runs them on
    its own x and compares y (points); the star: the cycles of that run within one vertex
    per worker and no exchange."""
    used = budget = 0
    for case, sent in zip(cases, outputs):
        what = _scale_what(case["counts"])
        _, base, _, _ = _mapped_pair(case["counts"])
        eng, y = _judged_run(sent, base, what, case["_x"], "y", Scale,
                             "the lesson's Scale codelet")
        first_mismatch(2 * case["_x"], y, f"{what}: y")
        used += _device_cycles(eng)
        budget += case["_budget"]
    return Cost(used, budget, "cycle")


# -- 01.2: place vertices on tiles ------------------------------------------------------------

def tile_cost(cycles, workers: int = 6) -> int:
    """Compute cycles of one tile running vertices of these cycles, in this order: vertex
    i goes to worker i % 6; the tile is busy 6 x its heaviest worker."""
    return workers * max((sum(cycles[w::workers]) for w in range(workers)), default=0)


def reference_placement(cycles, num_tiles: int) -> list[int]:
    """Greedy: heaviest vertex first, onto the tile it makes the least busy."""
    tiles: list[list[int]] = [[] for _ in range(num_tiles)]
    for i in sorted(range(len(cycles)), key=lambda i: -cycles[i]):
        best = min(range(num_tiles), key=lambda t: (tile_cost(
            [cycles[j] for j in sorted(tiles[t] + [i])]), t))
        tiles[best].append(i)
    owner = [0] * len(cycles)
    for t, vs in enumerate(tiles):
        for v in vs:
            owner[v] = t
    return owner


def _placement_cases(rng) -> list[dict]:
    """Two fixed placements that defeat naive answers, two drawn ones."""
    fixed = [([300, 10, 10, 10] * 12, 4),  # a round robin puts every 300 on tile 0
             ([500] * 10 + [20] * 38, 4)]  # contiguous chunks put the heavy ones together
    drawn = [(rng.integers(5, 400, 60).tolist(), 3),
             ((rng.pareto(1.5, 80) * 50 + 5).astype(int).tolist(), 5)]
    return [{"cycles": [int(c) for c in cycles], "num_tiles": num_tiles,
             "_greedy": _measure(cycles, reference_placement(cycles, num_tiles), num_tiles)}
            for cycles, num_tiles in fixed + drawn]


def _measure(cycles, owner, num_tiles):
    dev = _device(num_tiles)
    g = ipu.Graph(dev.target)
    x = g.add_variable(ipu.FLOAT, [1], "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("placed")
    for c, t in zip(cycles, owner):
        g.set_perf_estimate(g.add_vertex(cs, _Busy, {"x": x}, tile=int(t)), int(c))
    step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
    return step.tile_compute_cycles.tolist()


def _placement_what(cycles, num_tiles) -> str:
    return f"{plural(len(cycles), 'vertex')} on {plural(num_tiles, 'tile')}"


def _owners(owner, cycles, num_tiles) -> list[int]:
    """``owner`` as a list of one tile number per vertex, or Wrong."""
    n, what = len(cycles), _placement_what(cycles, num_tiles)
    if not isinstance(owner, list | tuple | np.ndarray) or len(owner) != n:
        raise Wrong(f"{what}: return a list of {n} tile numbers, got {owner!r}")
    owner = [as_int(t, f"{what}: the tile of a vertex") for t in owner]
    if not all(0 <= t < num_tiles for t in owner):
        raise Wrong(f"{what}: return {n} tile numbers in 0..{num_tiles - 1}, got {owner!r}")
    return owner


def _placement_trial(case, place_vertices):
    """The learner's placement of one case (the learner's kernel): a tile per vertex."""
    cycles, num_tiles = case["cycles"], case["num_tiles"]
    return _owners(place_vertices(list(cycles), num_tiles), cycles, num_tiles)


@exercise("01.2", "place vertices on tiles", points=2, budget="cycles", hints=(
    "The compute phase lasts as long as the busiest tile. Where should the heaviest "
    "vertices go?",
    "A tile runs its vertices on 6 workers (vertex k of a tile on worker k % 6) and is "
    "busy 6 x its heaviest worker. Placing the heaviest vertices first, each on the tile "
    "where it hurts least, is a classic greedy (longest processing time first).",
    "Sort the vertices by cycles, heaviest first; for each, try every tile, compute that "
    "tile's cost with the vertex added (6 x max over workers of sum(cycles[w::6]), the "
    "tile's vertices in index order) and keep the cheapest tile."),
    answers=("place_vertices",), cases=_placement_cases, trial=_placement_trial)
def check_placement(cases, outputs):
    """Exercise 01.2: ``place_vertices(vertex_cycles, num_tiles)`` → the tile of each
    vertex. Passes within 25% of a greedy reference's compute phase; ★ within it. The
    placement is plain data: the compiler works out its cycles here, for points."""
    used = budget = 0
    for case, owner in zip(cases, outputs):
        cycles, num_tiles, ref = case["cycles"], case["num_tiles"], case["_greedy"]
        mine = _measure(cycles, _owners(owner, cycles, num_tiles), num_tiles)
        used, budget = used + max(mine), budget + max(ref)
        if max(mine) > 1.25 * max(ref):
            bars = [(f"tile {t}", 0, c, "") for t, c in enumerate(mine)]
            ref_bars = [(f"tile {t}", 0, c, "") for t, c in enumerate(ref)]
            shown = f"{cycles[:8]}"[:-1] + (", ...]" if len(cycles) > 8 else "]")
            raise Wrong(f"{_placement_what(cycles, num_tiles)} (cycles {shown}): your compute "
                        f"phase takes {max(mine):,} cycles (tile {int(np.argmax(mine))} is "
                        f"the busiest); a greedy placement takes {max(ref):,}. Get within "
                        "25% of it.",
                        picture=side_by_side(timeline(bars), timeline(ref_bars),
                                             ("your tiles' compute cycles", "greedy")))
    return Cost(used, budget, "cycle")


def _superstep_cases(rng) -> list[dict]:
    """Every compiled step of two random graphs, of a scatter from tile 0 and of a vertex
    that fetches its input and sends its result back (the judge's side: each case keeps the
    cycles the compiler gives it, private to the judge)."""
    found = []
    for target, steps in [_random_steps(int(rng.integers(2**31))),
                          _random_steps(int(rng.integers(2**31))), _scatter_steps(),
                          _fetch_and_send_back_steps()]:
        for s in steps:
            (b_in, b_out), (r_in, r_out) = (s.phase_bytes(p) for p in ("exchange",
                                                                      "exchange out"))
            found.append({"sync": int(s.sync_cycles), "bytes_in": b_in.copy(),
                          "bytes_out": b_out.copy(), "compute": s.tile_compute_cycles.copy(),
                          "result_bytes_in": r_in.copy(), "result_bytes_out": r_out.copy(),
                          "bpc": int(target.exchange_bytes_per_cycle),
                          "_name": s.name, "_cycles": int(s.cycles)})
    return found


def _superstep_trial(case, superstep_cycles):
    """The learner's ``superstep_cycles`` on one step (runs in the learner's kernel)."""
    return _as_int(superstep_cycles(case["sync"], case["bytes_in"], case["bytes_out"],
                                    case["compute"], case["result_bytes_in"],
                                    case["result_bytes_out"], case["bpc"]), "superstep_cycles")


@exercise("01.3", "the cost of one BSP superstep", points=2, hints=(
    "A superstep's phases follow one another (sync, exchange in, compute, exchange out), "
    "and every tile waits for the slowest tile in each phase.",
    "An exchange: a tile sends and receives at once, bytes_per_cycle in each direction, so "
    "its exchange lasts as long as its larger direction, rounded up to whole cycles; the "
    "phase lasts as long as the busiest tile. The two exchanges are separate phases, each "
    "with its own busiest tile. Compute: the slowest tile.",
    "sync + ceil(max over tiles of max(bytes in, bytes out) / bytes_per_cycle) + max over "
    "tiles of compute + the same ceil(...) over the result bytes in and out."),
    answers=("superstep_cycles",), cases=_superstep_cases, trial=_superstep_trial)
def check_superstep_cycles(cases, outputs):
    """Exercise 01.3: ``superstep_cycles(sync, bytes_in, bytes_out, compute,
    result_bytes_in, result_bytes_out, bpc=4)``."""
    for case, got in zip(cases, outputs):
        if not isinstance(got, int) or got != case["_cycles"]:
            results = ""
            if case["result_bytes_in"].any():
                results = (f", results in {case['result_bytes_in'].tolist()}, out "
                           f"{case['result_bytes_out'].tolist()}")
            raise Wrong(f"step '{case['_name']}' (bytes in per tile "
                        f"{case['bytes_in'].tolist()}, out {case['bytes_out'].tolist()}, "
                        f"compute {case['compute'].tolist()}{results}): expected "
                        f"{case['_cycles']} cycles, got {got}")


# -- 01.4: a stencil over a ring of tiles ---------------------------------------------------

class _Difference(ipu.Vertex):
    """out = right - left: the codelet exercise 01.4 asks for, as the judge runs it in
    place of the learner's (whose compute is checked on its own, in the kernel)."""

    left = ipu.Input(ipu.Vector(ipu.FLOAT))
    right = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.right - self.left


def _ring_cases(rng) -> list[dict]:
    """Rings of 3-5 tiles (fixed) and a drawn one, rows of 1-4 values; ``left`` and
    ``right``: rows for the learner's codelet alone; x: private to the judge."""
    shapes = [(3, 1), (4, 3), (5, 2), (int(rng.integers(3, 8)), int(rng.integers(1, 5)))]
    return [{"tiles": t, "k": k, "left": rng.normal(size=k).astype(np.float32),
             "right": rng.normal(size=k).astype(np.float32),
             "_x": rng.normal(size=(t, k)).astype(np.float32)} for t, k in shapes]


def _ring_what(case) -> str:
    return f"{plural(case['tiles'], 'tile')}, rows of {case['k']}"


def _ring_graph(tiles: int, k: int):
    """x and out of ``tiles`` rows of ``k``, row t on tile t, with their host handles."""
    g = ipu.Graph(_device(tiles).target)
    x, out = (g.add_variable(ipu.FLOAT, [tiles, k], nm) for nm in ("x", "out"))
    for t in range(tiles):
        g.set_tile_mapping(x[t], t)
        g.set_tile_mapping(out[t], t)
    g.create_host_write("x", x)
    g.create_host_read("out", out)
    return g, x, out


def _ring_trial(case, build_ring_difference):
    """The learner's graph and program on one ring, with the learner's codelet sent as the
    kit's :class:`_Difference`; and what that codelet computes on ``left`` and ``right``
    (the learner's kernel)."""
    what = _ring_what(case)
    g, x, out = _ring_graph(case["tiles"], case["k"])
    prog = build_ring_difference(g, x, out)
    mine = _stand_ins(g, _Difference, what, "left and right (Input(Vector(float32))) and out "
                      "(Output(Vector(float32)))")
    sides = {"left": case["left"], "right": case["right"]}
    return {"graph": _sent_graph(g, prog, what, mine),
            "codelets": {cls.__name__: _codelet_run(cls, sides, {"out": [case["k"]]})["out"]
                         for cls in mine}}


@exercise("01.4", "a central difference over a ring of tiles", points=3, hints=(
    "Row t of out needs rows t - 1 and t + 1 of x: the neighbouring tiles' data. Who "
    "wraps around at the ends?",
    "Write a codelet with two inputs and one output, and one vertex per tile in one "
    "compute set; connecting a vertex to another tile's row makes the exchange bring it "
    "before the compute phase. On a ring, tile T - 1's right neighbour is tile 0.",
    "For t in range(T): add a vertex on tile t with right = x[(t + 1) % T], left = "
    "x[(t - 1) % T], out = out[t], whose compute is out = right - left."),
    answers=("build_ring_difference",), cases=_ring_cases, trial=_ring_trial)
def check_ring_difference(cases, outputs):
    """Exercise 01.4: ``build_ring_difference(graph, x, out)`` → a program with
    out[t] = x[t + 1] - x[t - 1] (rows, indices modulo T), row t of x and out on tile t.
    The kernel sends the graph and program it built, the learner's codelet in it named as
    the kit's :class:`_Difference`, and what that codelet computes on the case's ``left``
    and ``right``; the judge checks the codelet's rows, then rebuilds the graph, runs it on
    its own x and compares out."""
    for case, sent in zip(cases, outputs):
        what = _ring_what(case)
        want = case["right"] - case["left"]
        for name, got in sent["codelets"].items():
            name = clipped(name, 80)
            _not_negated(want, got, f"{what}: your codelet {name}: out", "out = right - left")
            first_mismatch(want, got, f"{what}: your codelet {name} on left "
                           f"{np.array2string(case['left'], precision=3)} and right "
                           f"{np.array2string(case['right'], precision=3)}: out")
        base, _, _ = _ring_graph(case["tiles"], case["k"])
        x = case["_x"]
        got = _judged_run(sent["graph"], base, what, x, "out", _Difference,
                          "your difference codelet")[1]
        want = np.roll(x, -1, axis=0) - np.roll(x, 1, axis=0)
        _not_negated(want, got, f"{what}: out", "out[t] = x[t + 1] - x[t - 1] (right "
                     "neighbour minus left)")
        first_mismatch(want, got, f"{what}: out")


def _not_negated(want, got, name: str, asked: str) -> None:
    """Wrong if ``got`` is exactly ``-want`` (a subtraction the wrong way round)."""
    got = np.asarray(got)
    if (got.shape == want.shape and got.dtype.kind == "f" and not np.allclose(want, 0)
            and np.allclose(got, -want, atol=1e-6)):
        raise Wrong(f"{name} is the negative of what was asked: {asked}")
