"""The checks of lesson 04: compute sets, races and exchange.

04.2-04.4 are programs: a race-free smoothing, double buffering with a cycle budget, and
a tile mapping with an exchange budget. Values are checked against NumPy on seeded
random cases; cycles and bytes are measured by the emulator's compiler.

>>> from ipukit.grading import lesson04
>>> r = lesson04.check_mapping(lambda graph, x, reads: graph.set_tile_mapping(x, 0),
...                            show=False)
>>> print(r.text().splitlines()[0])
WRONG · Exercise 04.4 · a mapping near the readers: 0/2 points
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu

from .common import SumVertex, no_compile
from .common import as_count as _as_int
from .common import device as _device
from .feedback import (
    Cost,
    Wrong,
    exercise,
    first_mismatch,
    plural,
    previous_failures,
    side_by_side,
    tile_grid,
    without_fix,
)

# -- lesson 04: compute sets, races, exchange ---------------------------------------------

@exercise("04.1", "predict the cost of a reduction", points=2, hints=(
    "Count the supersteps of each strategy first, then the three phases of each.",
    "A superstep costs sync + exchange + compute. The exchange lasts ceil(bytes / 4) on "
    "the busiest tile (here the receiver); a vertex costs 10 cycles plus one per element "
    "it reads or writes, and a tile running one vertex is busy 6 x its cycles.",
    "gather: one superstep; tile 0 receives (tiles - 1) * n floats and one vertex reads "
    "tiles * n elements and writes 1. local: local sums of n elements with no exchange, "
    "then a combine that receives tiles - 1 partials and sums tiles elements."))
def check_reduction_cycles(reduction_cycles):
    """Exercise 04.1: ``reduction_cycles(tiles, n, strategy)`` for "gather" or "local"."""

    for tiles, n in [(4, 256), (2, 10), (8, 100), (3, 1)]:
        for strategy in ("gather", "local"):
            steps = _reduction_steps(tiles, n, strategy)
            expected = sum(s.cycles for s in steps)
            what = f"strategy '{strategy}', {tiles} tiles x {n} floats"
            got = _as_int(reduction_cycles(tiles, n, strategy), what)
            if got != expected:
                parts = " + ".join(f"'{s.name}' ({s.sync_cycles} sync, {s.exchange_cycles} "
                                   f"exchange, {s.compute_cycles} compute)" for s in steps)
                raise Wrong(f"{what}: expected {expected} cycles, got {got}" + (
                    f"\nthe supersteps: {parts}" if previous_failures("04.1") else ""))


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


@exercise("04.2", "smoothing without a race", points=3, hints=(
    "Vertices of one compute set run in parallel: can a vertex write an element that its "
    "neighbour reads in the same compute set?",
    "Write the new values somewhere else first (a second tensor mapped like v), then bring "
    "them back in a later step; repeat the whole thing `iterations` times.",
    "One compute set writes mean(v[i-1:i+2]) into new[i]; then ipu.Copy(new[1:-1], "
    "v[1:-1]); wrap both in ipu.Repeat(iterations, ipu.Sequence(...))."))
def check_smoothing(build_smoothing):
    """Exercise 04.2: ``build_smoothing(graph, v, iterations)`` → program (Jacobi smoothing)."""

    for n, iterations in [(6, 1), (8, 3)]:
        dev, g, v = _automaton_graph(n, "v")
        eng = _compile(g, build_smoothing(g, v, iterations), "your graph")
        data = np.array([0, 9, 0, 3, 6, 0, 12, 3][:n], np.float32)
        eng.load(dev)
        eng.write_tensor("v", data)
        eng.run()
        expected = data.copy()
        for _ in range(iterations):
            expected[1:-1] = (expected[:-2] + expected[1:-1] + expected[2:]) / 3
        first_mismatch(expected, eng.read_tensor("v"),
                        f"v after {iterations} iteration(s) (n={n})")


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
              "one more A->B and an ipu.Copy back."))
def check_automaton(build_automaton):
    """Exercise 04.3: ``build_automaton(graph, cells, generations)`` → a program after
    which ``cells`` holds the given generation of new[i] = |x[i-1] - x[i+1]| (a ring,
    cell i on tile i). Budget: double buffering without per-generation copies."""
    rng = np.random.default_rng(403)
    used = budget = 0
    for n, generations in [(5, 1), (8, 4), (6, 7)]:
        what = f"{plural(n, 'cell')}, {plural(generations, 'generation')}"
        dev, g, cells = _automaton_graph(n)
        prog = build_automaton(g, cells, generations)
        if not isinstance(prog, ipu.Program):
            raise Wrong(f"{what}: build_automaton must return a program, got {prog!r}")
        eng = _compile(g, prog, f"{what}: your program")
        start = rng.integers(0, 2, n).astype(np.float32)
        start[0] = 1  # never all zero
        eng.load(dev)
        eng.write_tensor("cells", start)
        eng.run()
        got = eng.read_tensor("cells")
        want = automaton(start, generations)
        if not np.array_equal(got, want):
            for k in range(generations + 1):
                if np.array_equal(got, automaton(start, k)) and k != generations:
                    raise Wrong(f"{what}: cells holds generation {k}, not {generations} "
                                f"(start {start.astype(int).tolist()})")
            first_mismatch(want, got, f"{what}: cells (start {start.astype(int).tolist()})")
        used += sum(s.cycles for s in eng.trace.executed_steps() if s.kind != "host")
        dev2, g2, cells2 = _automaton_graph(n)
        ref = ipu.Engine(g2, _reference_automaton(g2, cells2, generations))
        ref.load(dev2)
        ref.write_tensor("cells", start)
        ref.run()
        budget += sum(s.cycles for s in ref.trace.executed_steps() if s.kind != "host")
    return Cost(used, budget, "cycle")


# -- 04.4: a mapping near the readers ----------------------------------------------------

def _reads_case(seed: int, tiles: int, n: int, per_vertex: int = 5):
    """Vertices on every tile read mostly one scattered group of elements, a few others."""
    rng = np.random.default_rng(seed)
    home = rng.permutation(np.arange(n) % tiles)  # element -> the tile that reads it most
    reads = []
    for t in range(tiles):
        mine = np.flatnonzero(home == t)
        for _ in range(2):
            pick = rng.choice(mine, min(per_vertex, mine.size), replace=False).tolist()
            pick.append(int(rng.integers(n)))  # one read from anywhere
            reads.append((t, sorted(set(pick))))
    return reads


def _exchange(g, x, reads, n, tiles):
    """Compile vertices reading ``reads`` of ``x``; the exchange step and its bytes."""
    out = g.add_variable(ipu.FLOAT, [len(reads)], "out")
    cs = g.add_compute_set("read")
    for k, (tile, idx) in enumerate(reads):
        g.set_tile_mapping(out[k], tile)
        g.add_vertex(cs, SumVertex, {"x": ipu.concat([x[i:i + 1] for i in idx]),
                                     "out": out[k:k + 1]}, tile=tile)
    step = next(s for s in ipu.compile_graph(g, [ipu.Execute(cs)]).steps if s.kind == "compute")
    return step


def reference_mapping(n: int, tiles: int, reads) -> list[int]:
    """Each element on the tile that reads it most (ties: the lowest tile; unread: 0)."""
    count = np.zeros((n, tiles), int)
    for tile, idx in reads:
        for i in idx:
            count[i, tile] += 1
    return np.argmax(count, axis=1).tolist()


@exercise("04.4", "a mapping near the readers", points=2, budget="bytes", hints=(
    "Data moves between tiles only when a vertex reads an element that lives on another "
    "tile. Look at who reads each element.",
    "The exchange phase lasts as long as the busiest tile's traffic; map every element "
    "where most of its readers are, and the fewest bytes cross.",
    "Count, for every element, how many vertices on each tile read it (reads is a list of "
    "(tile, element indices)); graph.set_tile_mapping(x[i], the tile with the most)."))
def check_mapping(map_near_readers):
    """Exercise 04.4: ``map_near_readers(graph, x, reads)`` maps every element of ``x``
    so that vertices reading ``reads`` = [(tile, [element indices]), ...] exchange little.
    Passes within 25% of mapping each element to its most frequent reader's tile; ★
    within that budget (bytes moved)."""
    used = budget = 0
    for seed, tiles, n in [(1, 4, 24), (2, 6, 40), (3, 3, 30)]:
        reads = _reads_case(seed, tiles, n)
        what = f"{n} elements read by {plural(len(reads), 'vertex')} on " \
               f"{plural(tiles, 'tile')}"
        g = ipu.Graph(_device(tiles).target)
        x = g.add_variable(ipu.FLOAT, [n], "x")
        map_near_readers(g, x, [(t, list(idx)) for t, idx in reads])
        mapping = g.get_tile_mapping(x, throw_on_incomplete=False)
        owner = np.full(n, -1)
        for t, runs in enumerate(mapping):
            for b, e in runs:
                owner[b:e] = t
        if (owner < 0).any():
            raise Wrong(f"{what}: element {int(np.argmax(owner < 0))} of x is not mapped "
                        f"({int((owner < 0).sum())} of {n} unmapped)")
        step = _exchange(g, x, reads, n, tiles)
        g2 = ipu.Graph(_device(tiles).target)
        x2 = g2.add_variable(ipu.FLOAT, [n], "x")
        best = reference_mapping(n, tiles, reads)
        for i, t in enumerate(best):
            g2.set_tile_mapping(x2[i], t)
        ref = _exchange(g2, x2, reads, n, tiles)
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
