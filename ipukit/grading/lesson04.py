"""The checks of lesson 04: compute sets, races and exchange.

04.2-04.4 are programs: a race-free smoothing, double buffering with a cycle budget, and
a tile mapping with an exchange budget. Every check is judged: the judge draws the cases
and works out the expected values (NumPy) and cycles or bytes (the emulator's compiler,
in the judge's process); the trial runs the learner's code and hands back plain data: a
number, a tile for every element, or (04.2, 04.3) the graph and program the learner built
(:mod:`ipukit.graph_data`, the learner's codelet named as the kit's and its outputs checked
apart), which the judge rebuilds and runs on data the kernel never sees.

>>> from ipukit.grading import lesson04
>>> r = lesson04.check_mapping(lambda graph, x, reads: graph.set_tile_mapping(x, 0),
...                            show=False)
>>> print(r.text().splitlines()[0])
WRONG · Exercise 04.4 · a mapping near the readers: 0/2 points
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu

from .common import (
    SumVertex,
    codelet_run,
    element_tiles,
    judged_run,
    no_compile,
    output_array,
    output_field,
    program,
    rebuilt_engine,
    sent_graph,
    stand_ins,
)
from .common import as_count as _as_int
from .common import device as _device
from .feedback import (
    Cost,
    Wrong,
    clipped,
    exercise,
    first_mismatch,
    plural,
    previous_failures,
    side_by_side,
    tile_grid,
    without_fix,
)

# -- 04.1: the cost of a reduction -----------------------------------------------------------


def _reduction_cases(rng) -> list[dict]:
    """Both strategies on several sizes (one element per tile among them); the cycles
    and the supersteps that give them are worked out here, in the judge."""
    sizes = [(4, 256), (2, 10), (8, 100), (3, 1), (5, 7),
             (int(rng.integers(2, 12)), int(rng.integers(1, 300)))]
    found = []
    for tiles, n in sizes:
        for strategy in ("gather", "local"):
            steps = _reduction_steps(tiles, n, strategy)
            parts = " + ".join(f"'{s.name}' ({s.sync_cycles} sync, {s.exchange_cycles} "
                               f"exchange, {s.compute_cycles} compute)" for s in steps)
            found.append({"tiles": tiles, "n": n, "strategy": strategy,
                          "_cycles": sum(int(s.cycles) for s in steps), "_parts": parts})
    return found


def _reduction_trial(case, reduction_cycles):
    what = f"strategy '{case['strategy']}', {case['tiles']} tiles x {case['n']} floats"
    return _as_int(reduction_cycles(case["tiles"], case["n"], case["strategy"]), what)


@exercise("04.1", "predict the cost of a reduction", points=2, hints=(
    "Count the supersteps of each strategy first, then the three phases of each.",
    "A superstep costs sync + exchange + compute. The exchange lasts ceil(bytes / 4) on "
    "the busiest tile (here the receiver); a vertex costs 10 cycles plus one per element "
    "it reads or writes, and a tile running one vertex is busy 6 x its cycles.",
    "gather: one superstep; tile 0 receives (tiles - 1) * n floats and one vertex reads "
    "tiles * n elements and writes 1. local: local sums of n elements with no exchange, "
    "then a combine that receives tiles - 1 partials and sums tiles elements."),
    answers=("reduction_cycles",), cases=_reduction_cases, trial=_reduction_trial)
def check_reduction_cycles(cases, outputs):
    """Exercise 04.1: ``reduction_cycles(tiles, n, strategy)`` for "gather" or "local"."""
    for case, got in zip(cases, outputs):
        what = f"strategy '{case['strategy']}', {case['tiles']} tiles x {case['n']} floats"
        if got != case["_cycles"]:
            raise Wrong(f"{what}: expected {case['_cycles']} cycles, got {got}" + (
                f"\nthe supersteps: {case['_parts']}" if previous_failures("04.1") else ""))


def _reduction_steps(tiles: int, n: int, strategy: str):
    """Compile lesson 04's sum of tiles x n floats (n per tile); return its supersteps."""
    g = ipu.Graph(_device(tiles).target)
    x = g.add_variable(ipu.FLOAT, [tiles, n], "x")
    partial = g.add_variable(ipu.FLOAT, [tiles], "partial")
    total = g.add_variable(ipu.FLOAT, [1], "total")
    g.set_tile_mapping(total, 0)
    for t in range(tiles):
        g.set_tile_mapping(x[t], t)
        g.set_tile_mapping(partial[t], t)
    if strategy == "gather":
        cs = g.add_compute_set("sum all on tile 0")
        g.add_vertex(cs, SumVertex, {"x": x.flatten(), "out": total}, tile=0)
        prog = ipu.Execute(cs)
    else:
        local, combine = g.add_compute_set("local sums"), g.add_compute_set("combine")
        for t in range(tiles):
            g.add_vertex(local, SumVertex, {"x": x[t], "out": partial[t:t + 1]}, tile=t)
        g.add_vertex(combine, SumVertex, {"x": partial, "out": total}, tile=0)
        prog = ipu.Sequence(ipu.Execute(local), ipu.Execute(combine))
    return [s for s in ipu.compile_graph(g, [prog]).steps if s.kind != "host"]


class _Mean3(ipu.Vertex):
    """out = the mean of x: the lesson's codelet as the judge runs it in place of the
    learner's (whose compute is checked on its own, in the kernel)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.mean(axis=-1)


def _smoothing_cases(rng) -> list[dict]:
    """One interior element, one and several iterations, random lengths and data (private
    to the judge: the kernel only builds the graph); ``pieces``: three values for the
    learner's codelet alone."""
    fixed = [(6, 1, [0, 9, 0, 3, 6, 0]), (8, 3, [0, 9, 0, 3, 6, 0, 12, 3]), (3, 2, [3, 0, 6])]
    found = [{"n": n, "iterations": k, "_v": np.array(v, np.float32)} for n, k, v in fixed]
    for _ in range(2):
        n = int(rng.integers(4, 11))
        found.append({"n": n, "iterations": int(rng.integers(2, 6)),
                      "_v": rng.integers(0, 20, n).astype(np.float32)})
    for case in found:
        case["pieces"] = [rng.normal(size=3).astype(np.float32) for _ in range(2)]
    return found


def _smoothing_what(case) -> str:
    return f"n={case['n']}, {plural(case['iterations'], 'iteration')}"


def _sent_with_codelets(g, prog, what, reference, fields, inputs, outputs) -> dict:
    """The learner's graph and program (compiled here first, so that a race is named at
    once), the learner's codelets sent as the kit's ``reference``, and what each of them
    computes on each of ``inputs`` (the learner's kernel)."""
    _compile(g, prog, f"{what}: your graph")
    mine = stand_ins(g, reference, what, fields)
    return {"graph": sent_graph(g, prog, what, mine),
            "codelets": {cls.__name__: [codelet_run(cls, piece, outputs)["out"]
                                        for piece in inputs] for cls in mine}}


def _smoothing_trial(case, build_smoothing):
    """The learner's graph and program as plain data, the learner's codelet named as the
    kit's :class:`_Mean3`, and what it computes on ``pieces``."""
    _, g, v = _automaton_graph(case["n"], "v")
    prog = program(build_smoothing(g, v, case["iterations"]), "build_smoothing")
    return _sent_with_codelets(g, prog, _smoothing_what(case), _Mean3,
                               "x (Input(Vector(float32))) and out (Output(float32))",
                               [{"x": p} for p in case["pieces"]], {"out": []})


def _codelets_right(got, inputs, want, what: str, asked: str) -> None:
    """Wrong unless each learner codelet's outputs on ``inputs`` are ``want``."""
    codelets = output_field(got, "codelets", what)
    for name, outs in (codelets.items() if isinstance(codelets, dict) else ()):
        outs = output_array(outs, [len(want)], f"{what}: your codelet")
        for piece, mine, right in zip(inputs, outs, want):
            if not np.isclose(mine, right, rtol=1e-5, atol=1e-6):
                shown = ", ".join(f"{k} = {np.array2string(v, precision=3)}" if np.ndim(v)
                                  else f"{k} = {float(v):g}" for k, v in piece.items())
                raise Wrong(f"{what}: your codelet {clipped(str(name), 80)} on {shown}: "
                            f"expected out {right:.4g} ({asked}), got {mine:.4g}")


def _judged_cells(case, got, name: str, start, what: str):
    """The judge rebuilds the graph the kernel sent (``name`` kept as the exercise maps
    it), writes its own ``start`` there, runs it: the engine and what ``name`` holds."""
    _, base, _ = _automaton_graph(case["n"], name)
    kept = ((name, "host_writes"), (name, "host_reads"))
    eng = rebuilt_engine(output_field(got, "graph", what), base, what, kept)
    with judged_run(what):
        eng.write_tensor(name, start)
        eng.run()
    return eng, eng.read_tensor(name)


def smoothing(v, iterations: int) -> np.ndarray:
    """NumPy reference: the interior of ``v`` replaced by 3-point means, ``iterations``
    times (Jacobi: every new value from the old ones)."""
    v = np.asarray(v, np.float64).copy()
    for _ in range(iterations):
        v[1:-1] = (v[:-2] + v[1:-1] + v[2:]) / 3
    return v


@exercise("04.2", "smoothing without a race", points=3, hints=(
    "Vertices of one compute set run in parallel: can a vertex write an element that its "
    "neighbour reads in the same compute set?",
    "Write the new values somewhere else first (a second tensor mapped like v), then bring "
    "them back in a later step; repeat the whole thing `iterations` times.",
    "One compute set writes mean(v[i-1:i+2]) into new[i]; then ipu.Copy(new[1:-1], "
    "v[1:-1]); wrap both in ipu.Repeat(iterations, ipu.Sequence(...))."),
    answers=("build_smoothing",), cases=_smoothing_cases, trial=_smoothing_trial)
def check_smoothing(cases, outputs):
    """Exercise 04.2: ``build_smoothing(graph, v, iterations)`` → program (Jacobi smoothing).
    The kernel sends the graph and program (:mod:`ipukit.graph_data`; the learner's codelet
    named as the kit's :class:`_Mean3`) and what that codelet computes on ``pieces``; the
    judge checks those, rebuilds the graph and runs it on its own v."""
    for case, got in zip(cases, outputs):
        k, n, what = case["iterations"], case["n"], _smoothing_what(case)
        _codelets_right(got, [{"x": p} for p in case["pieces"]],
                        [p.mean(dtype=np.float64) for p in case["pieces"]], what,
                        "the mean of x")
        _, v = _judged_cells(case, got, "v", case["_v"], what)
        first_mismatch(smoothing(case["_v"], k), v,
                       f"v after {plural(k, 'iteration')} (n={n}, start "
                       f"{case['_v'].astype(int).tolist()})")


def _compile(g, prog, what):
    try:
        return ipu.Engine(g, prog)
    except ipu.ComputeSetRaceError as exc:
        raise Wrong(f"{what} has a data race, so ipukit refuses it, as Poplar's graph "
                    "compiler does (poplar::graph_cycle_error when the Engine is built): "
                    f"{without_fix(str(exc))}") from None
    except ipu.IpuError as exc:
        raise Wrong(no_compile(what, exc)) from None


# -- 04.3: double buffering ------------------------------------------------------------------

def automaton(cells, generations: int):
    """NumPy reference: new[i] = |cells[i - 1] - cells[i + 1]| on a ring (rule 90)."""
    x = np.asarray(cells, np.float32)
    for _ in range(generations):
        x = np.abs(np.roll(x, 1) - np.roll(x, -1))
    return x


class _Xor(ipu.Vertex):
    """out = |left - right|: the lesson's codelet as the judge runs it in place of the
    learner's (whose compute is checked on its own, in the kernel)."""

    left = ipu.Input(ipu.FLOAT)
    right = ipu.Input(ipu.FLOAT)
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = np.abs(self.left - self.right)


def _reference_automaton(g, cells, generations):
    """Ping-pong between cells and a second buffer; one Copy only for odd generations."""
    n = cells.shape[0]
    other = g.add_variable(ipu.FLOAT, [n], "other")
    for i in range(n):
        g.set_tile_mapping(other[i], i)
    sets = []
    for src, dst in ((cells, other), (other, cells)):
        cs = g.add_compute_set(f"{src.name} -> {dst.name}")
        for i in range(n):
            g.add_vertex(cs, _Xor, {"left": src[(i - 1) % n], "right": src[(i + 1) % n],
                                    "out": dst[i]}, tile=i)
        sets.append(cs)
    prog = ipu.Sequence(ipu.Repeat(generations // 2, ipu.Sequence(
        ipu.Execute(sets[0]), ipu.Execute(sets[1]))))
    if generations % 2:
        prog.add(ipu.Execute(sets[0]))
        prog.add(ipu.Copy(other, cells))
    return prog


def _automaton_graph(n, name="cells"):
    """A ring of ``n`` cells, one per tile, readable and writable from the host."""
    dev = _device(n)
    g = ipu.Graph(dev.target)
    cells = g.add_variable(ipu.FLOAT, [n], name)
    for i in range(n):
        g.set_tile_mapping(cells[i], i)
    g.create_host_write(name, cells)
    g.create_host_read(name, cells)
    return dev, g, cells


def _executed_cycles(eng) -> int:
    return sum(s.cycles for s in eng.trace.executed_steps() if s.kind != "host")


def _automaton_cases(rng) -> list[dict]:
    """Odd and even generation counts (3: odd and a multiple of 3) on rings that do not
    die out, then a drawn ring and count; each start is drawn until the generations just
    before and after the one asked for differ from it, so being one generation off always
    shows. The budget (the reference's cycles) is worked out here, in the judge."""
    found = []
    drawn = (int(rng.choice([7, 9, 11, 13])), int(rng.integers(2, 7)))  # odd rings: alive
    for n, generations in [(5, 1), (9, 4), (11, 7), (10, 3), (13, 2), drawn]:
        while True:
            start = rng.integers(0, 2, n).astype(np.float32)
            near = [automaton(start, k).tolist() for k in range(generations + 2)]
            if all(near[generations] != near[k] for k in range(generations + 2)
                   if k != generations):
                break
        dev, g, cells = _automaton_graph(n)
        ref = ipu.Engine(g, _reference_automaton(g, cells, generations))
        ref.load(dev)
        ref.write_tensor("cells", start)
        ref.run()
        found.append({"n": n, "generations": generations, "_start": start,
                      "_budget": _executed_cycles(ref)})
    return found


#: The inputs the learner's 04.3 codelet is checked on: every pair of 0/1 cells.
_XOR_PAIRS = [{"left": np.float32(a), "right": np.float32(b)} for a in (0, 1) for b in (0, 1)]


def _automaton_what(case) -> str:
    return f"{plural(case['n'], 'cell')}, {plural(case['generations'], 'generation')}"


def _automaton_trial(case, build_automaton):
    """The learner's graph and program as plain data, the learner's codelet named as the
    kit's :class:`_Xor`, and what it computes on every pair of 0/1 cells."""
    what = _automaton_what(case)
    _, g, cells = _automaton_graph(case["n"])
    prog = program(build_automaton(g, cells, case["generations"]),
                   f"{what}: build_automaton")
    return _sent_with_codelets(g, prog, what, _Xor, "left and right "
                               "(Input(float32)) and out (Output(float32))", _XOR_PAIRS,
                               {"out": []})


@exercise("04.3", "double buffering: an automaton on a ring", points=3, budget="cycles",
          hints=(
              "Every cell's next value needs its neighbours' current values: where do you "
              "write the new generation while the old one is still being read?",
              "Double buffering: two tensors, and two compute sets, one reading A and "
              "writing B, the other reading B and writing A. Alternating them needs no "
              "copy; only an odd number of generations leaves the result in the wrong "
              "buffer.",
              "Add a second tensor mapped like cells; compute sets A->B and B->A of one "
              "vertex per cell (left = src[(i-1) % n], right = src[(i+1) % n]); "
              "ipu.Repeat(generations // 2, Sequence(A->B, B->A)), then for an odd count "
              "one more A->B and an ipu.Copy back."),
          answers=("build_automaton",), cases=_automaton_cases, trial=_automaton_trial)
def check_automaton(cases, outputs):
    """Exercise 04.3: ``build_automaton(graph, cells, generations)`` → a program after
    which ``cells`` holds the given generation of new[i] = |x[i-1] - x[i+1]| (a ring,
    cell i on tile i). The kernel sends the graph and program (the learner's codelet named
    as the kit's :class:`_Xor`) and what that codelet computes on every pair of 0/1 cells;
    the judge checks those, rebuilds the graph and runs it from its own start. Budget (the
    star, from the judge's run): double buffering without per-generation copies."""
    used = budget = 0
    for case, got in zip(cases, outputs):
        generations, start, what = case["generations"], case["_start"], _automaton_what(case)
        _codelets_right(got, _XOR_PAIRS, [abs(p["left"] - p["right"]) for p in _XOR_PAIRS],
                        what, "|left - right|")
        eng, cells = _judged_cells(case, got, "cells", start, what)
        want = automaton(start, generations)
        if not np.array_equal(cells, want):
            shown = f"(start {start.astype(int).tolist()})"
            for k in range(generations + 2):
                if cells.shape == want.shape and np.array_equal(cells, automaton(start, k)):
                    raise Wrong(f"{what}: cells holds generation {k}, not {generations} "
                                + shown)
            first_mismatch(want, cells, f"{what}: cells {shown}")
        used += _executed_cycles(eng)
        budget += case["_budget"]
    return Cost(used, budget, "cycle")


# -- 04.4: a mapping near the readers ----------------------------------------------------

def _reads_case(rng, tiles: int, n: int, per_vertex: int = 5):
    """Vertices on every tile read mostly one scattered group of elements, a few others."""
    home = rng.permutation(np.arange(n) % tiles)  # element -> the tile that reads it most
    reads = []
    for t in range(tiles):
        mine = np.flatnonzero(home == t)
        for _ in range(2):
            pick = rng.choice(mine, min(per_vertex, mine.size), replace=False).tolist()
            pick.append(int(rng.integers(n)))  # one read from anywhere
            reads.append([t, sorted(set(pick))])
    return reads


def _exchange(owner, reads, tiles):
    """Compile vertices reading ``reads`` of an x mapped as ``owner``; the compute step
    (its exchange cycles and bytes). Runs in the judge."""
    g = ipu.Graph(_device(tiles).target)
    x = g.add_variable(ipu.FLOAT, [len(owner)], "x")
    for i, t in enumerate(owner):
        g.set_tile_mapping(x[i], int(t))
    out = g.add_variable(ipu.FLOAT, [len(reads)], "out")
    cs = g.add_compute_set("read")
    for k, (tile, idx) in enumerate(reads):
        g.set_tile_mapping(out[k], tile)
        g.add_vertex(cs, SumVertex, {"x": ipu.concat([x[i:i + 1] for i in idx]),
                                     "out": out[k:k + 1]}, tile=tile)
    return next(s for s in ipu.compile_graph(g, [ipu.Execute(cs)]).steps
                if s.kind == "compute")


def reference_mapping(n: int, tiles: int, reads) -> list[int]:
    """Each element on the tile that reads it most (ties: the lowest tile; unread: 0)."""
    count = np.zeros((n, tiles), int)
    for tile, idx in reads:
        for i in idx:
            count[i, tile] += 1
    return np.argmax(count, axis=1).tolist()


def _mapping_cases(rng) -> list[dict]:
    sizes = [(4, 24), (6, 40), (3, 30), (int(rng.integers(2, 7)), int(rng.integers(20, 50)))]
    return [{"tiles": tiles, "n": n, "reads": _reads_case(rng, tiles, n)}
            for tiles, n in sizes]


def _mapping_trial(case, map_near_readers):
    g = ipu.Graph(_device(case["tiles"]).target)
    x = g.add_variable(ipu.FLOAT, [case["n"]], "x")
    map_near_readers(g, x, [(t, list(idx)) for t, idx in case["reads"]])
    return element_tiles(g, x)


@exercise("04.4", "a mapping near the readers", points=2, budget="bytes", hints=(
    "Data moves between tiles only when a vertex reads an element that lives on another "
    "tile. Look at who reads each element.",
    "The exchange phase lasts as long as the busiest tile's traffic; map every element "
    "where most of its readers are, and the fewest bytes cross.",
    "Count, for every element, how many vertices on each tile read it (reads is a list of "
    "(tile, element indices)); graph.set_tile_mapping(x[i], the tile with the most)."),
    answers=("map_near_readers",), cases=_mapping_cases, trial=_mapping_trial)
def check_mapping(cases, outputs):
    """Exercise 04.4: ``map_near_readers(graph, x, reads)`` maps every element of ``x``
    so that vertices reading ``reads`` = [(tile, [element indices]), ...] exchange little.
    Passes within 25% of mapping each element to its most frequent reader's tile; ★
    within that budget (bytes moved). The judge compiles both mappings itself, so the
    cycles and bytes count for points."""
    used = budget = 0
    for case, owner in zip(cases, outputs):
        tiles, n, reads = case["tiles"], case["n"], case["reads"]
        what = f"{n} elements read by {plural(len(reads), 'vertex')} on " \
               f"{plural(tiles, 'tile')}"
        owner = np.asarray(owner).reshape(-1)
        if owner.size != n or ((owner < 0) | (owner >= tiles)).any():
            bad = int(np.argmax((owner < 0) | (owner >= tiles))) if owner.size == n else 0
            raise Wrong(f"{what}: element {bad} of x is not mapped "
                        f"({int((owner < 0).sum())} of {n} unmapped)")
        step = _exchange(owner, reads, tiles)
        best = reference_mapping(n, tiles, reads)
        ref = _exchange(best, reads, tiles)
        mine, theirs = int(step.tile_bytes_in.sum()), int(ref.tile_bytes_in.sum())
        used, budget = used + mine, budget + theirs
        if step.exchange_cycles > 1.25 * ref.exchange_cycles:
            raise Wrong(f"{what}: your mapping moves {plural(mine, 'byte')} and its "
                        f"exchange phase takes {step.exchange_cycles} cycles; mapping each "
                        f"element near its readers takes {ref.exchange_cycles} "
                        f"({plural(theirs, 'byte')}). The picture shows each element's tile.",
                        picture=side_by_side(tile_grid(owner), tile_grid(best),
                                             ("your mapping", "near the readers")))
    return Cost(used, budget, "byte")
