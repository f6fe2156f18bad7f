"""The checks of lesson 04: compute sets, races and exchange."""

from __future__ import annotations

import numpy as np

import ipukit as ipu

from .common import AddVertex, SumVertex, no_compile
from .common import as_count as _as_int
from .common import device as _device
from .feedback import Wrong, exercise, first_mismatch, previous_failures

# -- lesson 04: compute sets, races, exchange ---------------------------------------------

@exercise("04.1", "predict the cost of a reduction", points=2,
          hint="A superstep costs sync + exchange + compute. gather: tile 0 receives "
               "(tiles - 1) * n floats of 4 bytes, at 4 bytes per cycle, and one vertex "
               "reads tiles * n elements and writes 1 (6 x (10 + tiles * n + 1) cycles). "
               "local: two supersteps, local sums of n elements with no exchange, then a "
               "combine that receives tiles - 1 partials.")
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


@exercise("04.2", "smoothing without a race", points=3,
          hint="Vertices of one compute set run in parallel, so a vertex must not write an "
               "element its neighbours read. Write the new values into a second tensor "
               "(mapped like v) in one compute set, then ipu.Copy them back into v[1:-1]; "
               "wrap both in ipu.Repeat(iterations, ...).")
def check_smoothing(build_smoothing):
    """Exercise 04.2: ``build_smoothing(graph, v, iterations)`` → program (Jacobi smoothing)."""

    for n, iterations in [(6, 1), (8, 3)]:
        dev = _device(n)
        g = ipu.Graph(dev.target)
        v = g.add_variable(ipu.FLOAT, [n], "v")
        for i in range(n):
            g.set_tile_mapping(v[i], i)
        g.create_host_write("v", v)
        g.create_host_read("v", v)
        prog = build_smoothing(g, v, iterations)
        try:
            eng = ipu.Engine(g, prog)
        except ipu.ComputeSetRaceError as exc:
            raise Wrong("your graph has a data race, so ipukit refuses it, as Poplar "
                        f"verifies a compute set is free of races: {exc}") from None
        except ipu.IpuError as exc:
            raise Wrong(no_compile("your graph", exc)) from None
        data = np.array([0, 9, 0, 3, 6, 0, 12, 3][:n], np.float32)
        eng.load(dev)
        eng.write_tensor("v", data)
        eng.run()
        expected = data.copy()
        for _ in range(iterations):
            expected[1:-1] = (expected[:-2] + expected[1:-1] + expected[2:]) / 3
        first_mismatch(expected, eng.read_tensor("v"),
                        f"v after {iterations} iteration(s) (n={n})")


@exercise("04.3", "a mapping with no exchange", points=2,
          hint="Vertex i runs on tile i and uses x[i], y[i] and out[i]: map those rows to "
               "tile i (graph.set_tile_mapping(x[i], i), ...). Then nothing crosses tiles.")
def check_no_exchange(map_for_locality):
    """Exercise 04.3: ``map_for_locality(graph, x, y, out)`` so the add needs no exchange."""

    tiles, k = 4, 8
    dev = _device(tiles)
    g = ipu.Graph(dev.target)
    x, y, out = (g.add_variable(ipu.FLOAT, [tiles, k], nm) for nm in ("x", "y", "out"))
    map_for_locality(g, x, y, out)
    cs = g.add_compute_set("add")
    for i in range(tiles):
        g.add_vertex(cs, AddVertex, {"x": x[i], "y": y[i], "out": out[i]}, tile=i)
    for t in (x, y, out):
        g.create_host_write(t.name, t)
    g.create_host_read("out", out)
    try:
        eng = ipu.Engine(g, ipu.Execute(cs))
    except ipu.IpuError as exc:  # e.g. a row left unmapped
        raise Wrong(no_compile("the add with your mapping", exc)) from None
    step = next(s for s in eng.executable.steps if s.name == "add")
    if step.exchange_cycles:
        src, dst, nbytes = (int(v) for v in step.transfers[0])
        raise Wrong(f"step 'add' still exchanges: {step.exchange_cycles} exchange cycles, "
                    f"e.g. tile {src} sends {nbytes} bytes to tile {dst}. Vertex i runs "
                    f"on tile i.")
    rng = np.random.default_rng(43)
    xv, yv = rng.normal(size=(2, tiles, k)).astype(np.float32)
    eng.load(dev)
    eng.write_tensor("x", xv)
    eng.write_tensor("y", yv)
    eng.run()
    first_mismatch(xv + yv, eng.read_tensor("out"), "out")
