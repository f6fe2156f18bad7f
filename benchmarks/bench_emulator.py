"""Emulator speed, measured side by side in one run (issue: the emulator core).

For n vertices of a 16-element sum codelet spread over the 1472 tiles of an ipu2:
* emulator vs plain NumPy doing the same math (``x.reshape(n, 16).sum(-1)``),
* batched vs per-vertex debug mode,
* build + compile time of the graph,
* the first run (which also runs the first and last vertex alone: the vertex-axis check)
  against a steady-state run,
* on CuPy (``IPUKIT_BACKEND=cupy``) also against raw CuPy doing the same math on the GPU,
  and NumPy stays NumPy on the host (so the GPU speed-up is visible).

Run: ``.venv/bin/python benchmarks/bench_emulator.py [--sizes 1000 10000 100000 1000000]``
(``IPUKIT_BACKEND=cupy`` to measure CuPy on a GPU). Prints medians and ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ipukit as ipu
from ipukit import backend

K = 16


class SumVertex(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum(axis=-1)


def build(n: int, target):
    """n vertices, vertex i sums x[16 i : 16 i + 16] on tile i * T // n (data local)."""
    g = ipu.Graph(target)
    x = g.add_variable(ipu.FLOAT, [n, K], "x")
    out = g.add_variable(ipu.FLOAT, [n], "out")
    cs = g.add_compute_set("sum")
    T = target.num_tiles
    for i in range(n):
        tile = i * T // n
        g.set_tile_mapping(x[i], tile)
        g.set_tile_mapping(out[i], tile)
        g.add_vertex(cs, SumVertex, {"x": x[i], "out": out[i]}, tile=tile)
    g.create_host_write("x", x)
    g.create_host_read("out", out)
    return g, ipu.Execute(cs)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        backend.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--per-vertex-max", type=int, default=10_000,
                    help="largest n timed in per-vertex mode (it is slow by design)")
    args = ap.parse_args(argv)
    dev = ipu.IPUModel("ipu2").create_device()
    xp = backend.get_xp()
    print(f"backend: {backend.name()}; 16-element sum codelet over {dev.target.num_tiles} tiles")
    gpu = xp is not np
    print(f"{'n':>9} {'build s':>8} {'compile s':>9} {'first ms':>9} {'emulator ms':>12} "
          f"{'numpy ms':>9} {'emu/np':>7} {'per-vertex ms':>13} {'batched x':>9}"
          + (f" {'raw cupy ms':>11} {'emu/raw':>7}" if gpu else ""))
    rng = np.random.default_rng(0)
    for n in args.sizes:
        t0 = time.perf_counter()
        g, prog = build(n, dev.target)
        t1 = time.perf_counter()
        exe = ipu.compile_graph(g, [prog])
        t2 = time.perf_counter()
        eng = ipu.Engine(exe)
        eng.load(dev)
        data = rng.standard_normal((n, K)).astype(np.float32)
        eng.write_tensor("x", data)
        t3 = time.perf_counter()
        eng.run(0)  # the first run (with the vertex-axis check) doubles as the warm-up
        backend.synchronize()
        first = time.perf_counter() - t3
        emu = median_time(lambda eng=eng: eng.run(0), args.repeats)
        out_np = np.empty(n, np.float32)
        ref = median_time(lambda x=data, o=out_np: x.reshape(-1, K).sum(axis=-1, out=o),
                          args.repeats)
        raw_text = ""
        if gpu:  # the same math in raw CuPy, on the same GPU
            x_dev, out_dev = xp.asarray(data), xp.empty(n, np.float32)
            raw = median_time(lambda x=x_dev, o=out_dev: x.reshape(-1, K).sum(axis=-1, out=o),
                              args.repeats)
            raw_text = f" {raw * 1e3:>11.3f} {emu / raw:>7.2f}"
        assert np.allclose(eng.read_tensor("out"), data.sum(-1), rtol=1e-5, atol=1e-4)
        pv_text, ratio_text = "-", "-"
        if n <= args.per_vertex_max:
            slow = ipu.Engine(exe, per_vertex=True)
            slow.load(dev)
            slow.write_tensor("x", data)
            pv = median_time(lambda slow=slow: slow.run(0), max(1, args.repeats // 3))
            assert np.array_equal(slow.read_tensor("out"), eng.read_tensor("out"))
            pv_text, ratio_text = f"{pv * 1e3:.1f}", f"{pv / emu:.0f}"
        print(f"{n:>9,} {t1 - t0:>8.2f} {t2 - t1:>9.2f} {first * 1e3:>9.3f} "
              f"{emu * 1e3:>12.3f} {ref * 1e3:>9.3f} "
              f"{emu / ref:>7.2f} {pv_text:>13} {ratio_text:>9}{raw_text}", flush=True)


if __name__ == "__main__":
    main()
