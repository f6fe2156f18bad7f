"""The checks of lesson 01: the IPU and bulk-synchronous parallelism."""

from __future__ import annotations

import numpy as np

import ipukit as ipu

from .common import SumVertex
from .common import as_count as _as_int
from .common import device as _device
from .feedback import Wrong, exercise


class _Busy(ipu.Vertex):
    """A vertex that only costs cycles (set with ``graph.set_perf_estimate``)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))

    def compute(self):
        pass


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



# -- lesson 01: the IPU and BSP ----------------------------------------------------------

@exercise("01.1", "In-Processor Memory of one IPU", points=1,
          hint="Every tile has its own SRAM: multiply the tiles of ONE IPU "
               "(target.tiles_per_ipu) by the bytes of one tile (target.bytes_per_tile).")
def check_ipu_memory(ipu_memory_bytes):
    """Exercise 01.1: ``ipu_memory_bytes(target)`` → bytes of SRAM on one IPU."""

    cases = [("ipu1", 1, None), ("ipu2", 1, None), ("bow", 1, None), ("ipu2", 2, 4)]
    for version, num_ipus, tiles in cases:
        t = ipu.IPUModel(version, num_ipus=num_ipus, tiles_per_ipu=tiles).create_device()
        t = t.target
        expected = t.tiles_per_ipu * t.bytes_per_tile
        what = (f"IPUModel('{version}', num_ipus={num_ipus}"
                f"{'' if tiles is None else f', tiles_per_ipu={tiles}'})")
        got = _as_int(ipu_memory_bytes(t), what)
        if got != expected:
            raise Wrong(f"{what} ({t.tiles_per_ipu} tiles of {t.bytes_per_tile:,} B per "
                        f"IPU): expected {expected:,} bytes, got {got:,}")


@exercise("01.2", "six workers on a tile", points=2,
          hint="Vertex i goes to worker i % 6 (in the order given). Each worker issues one "
               "instruction every 6 cycles, so the tile is busy 6 x (the heaviest worker's "
               "total).")
def check_tile_compute_cycles(tile_compute_cycles):
    """Exercise 01.2: ``tile_compute_cycles(vertex_cycles)`` for the vertices of one tile."""

    rng = np.random.default_rng(12)
    cases = [[], [100], [10] * 6, [10] * 7, [5, 50, 5, 5, 5, 5, 40],
             rng.integers(1, 300, 17).tolist()]
    for cycles in cases:
        expected = _measured_compute(cycles)
        got = _as_int(tile_compute_cycles(list(cycles)), f"vertex cycles {cycles}")
        if got != expected:
            raise Wrong(f"a tile with vertices of cycles {cycles}: the "
                        f"emulator's compute phase takes {expected} cycles, you said {got}")


def _measured_compute(cycles) -> int:
    """Compile one tile with these vertex estimates; return its compute cycles."""
    dev = _device(1)
    g = ipu.Graph(dev.target)
    x = g.add_variable(ipu.FLOAT, [1], "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("cs")
    for c in cycles:
        g.set_perf_estimate(g.add_vertex(cs, _Busy, {"x": x}, tile=0), int(c))
    step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
    return int(step.tile_compute_cycles[0])


@exercise("01.3", "the cost of one BSP superstep", points=2,
          hint="cycles = sync + exchange + compute. Exchange lasts as long as the busiest "
               "tile: ceil(max(bytes in, bytes out) / exchange_bytes_per_cycle), max over "
               "tiles. Compute lasts as long as the slowest tile.")
def check_superstep_cycles(superstep_cycles):
    """Exercise 01.3: ``superstep_cycles(sync, bytes_in, bytes_out, compute, bpc=4)``."""

    for target, steps in [_random_steps(1), _random_steps(2), _scatter_steps()]:
        for s in steps:
            got = _as_int(superstep_cycles(
                s.sync_cycles, s.tile_bytes_in.copy(), s.tile_bytes_out.copy(),
                s.tile_compute_cycles.copy(), target.exchange_bytes_per_cycle),
                f"step '{s.name}'")
            if got != s.cycles:
                raise Wrong(f"step '{s.name}' (bytes in per tile {s.tile_bytes_in.tolist()},"
                            f" out {s.tile_bytes_out.tolist()}, compute "
                            f"{s.tile_compute_cycles.tolist()}): expected {s.cycles} "
                            f"cycles, got {got}")
