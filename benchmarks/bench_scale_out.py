"""How the emulator's time and memory grow with IPUs, tiles and vertices (issue 29, point 5).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_scale_out.py [--quick]

Three sweeps, each phase in CPU seconds (``time.process_time``: the machine is shared) and
the traced peak (``tracemalloc``: what Python and NumPy allocate, the same on every run):

* IPUs: the emulated tied embedding (``parallel.emulated_sharded``) with a shard of the
  same size on every IPU (500 rows of C=192, L=64 tokens, 64 tiles per IPU): 2, 4, 8, 16
  IPUs (weak scaling: the model grows with the IPUs, as a Pod's would);
* tiles: the same model on 4 IPUs (V=2000) with 16, 64, 256 and 1024 tiles per IPU;
* vertices: ``bench_emulator``'s n sum vertices of 16 elements on one ipu2 (1,472 tiles).

Each line ends with the exponent of a least-squares fit of log(measure) on log(size):
1 is linear growth.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_emulator  # noqa: E402

import ipukit as ipu  # noqa: E402
from ipukit import engine as engine_module  # noqa: E402
from ipukit.examples.sharded_embedding import make_data  # noqa: E402
from ipukit.parallel import emulated_sharded  # noqa: E402


def phases(fn) -> dict:
    """CPU seconds of build (up to the Engine), compile (the Engine), run, and the traced
    peak in MiB, of ``fn()`` that builds an Engine and runs it."""
    spent, init = {}, engine_module.Engine.__init__
    run = engine_module.Engine.run

    def timed_init(self, *args, **kwargs):
        spent["build"] = time.process_time() - spent["start"]
        t = time.process_time()
        init(self, *args, **kwargs)
        spent["compile"] = time.process_time() - t

    def timed_run(self, *args, **kwargs):
        t = time.process_time()
        out = run(self, *args, **kwargs)
        spent["run"] = spent.get("run", 0) + time.process_time() - t
        return out

    engine_module.Engine.__init__, engine_module.Engine.run = timed_init, timed_run
    emulated_sharded.Engine = engine_module.Engine
    gc.collect()
    tracemalloc.start()
    try:
        spent["start"] = time.process_time()
        fn()
        spent["peak MiB"] = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
        engine_module.Engine.__init__, engine_module.Engine.run = init, run
        emulated_sharded.Engine = engine_module.Engine
    del spent["start"]
    return spent


def embedding(ipus: int, rows: int, tiles: int):
    features, indices = make_data(rows * ipus, 192, 64)
    return lambda: emulated_sharded.tied_embedding(features, indices, ipus, tiles_per_ipu=tiles)


def vertices(n: int):
    def fn():
        device = ipu.IPUModel("ipu2").create_device()
        g, prog = bench_emulator.build(n, device.target)
        eng = ipu.Engine(g, prog)
        eng.load(device)
        eng.run()
    return fn


def sweep(title: str, label: str, sizes: list, make) -> None:
    print(f"\n{title}")
    keys = ("build", "compile", "run", "peak MiB")
    print(f"{label:>10} " + " ".join(f"{k:>10}" for k in keys))
    rows = [phases(make(s)) for s in sizes]
    for s, r in zip(sizes, rows):
        print(f"{s:>10,} " + " ".join(f"{r[k]:10.3f}" for k in keys))
    x = np.log(np.array(sizes, float))
    fits = [np.polyfit(x, np.log([max(r[k], 1e-6) for r in rows]), 1)[0] for k in keys]
    print(f"{'exponent':>10} " + " ".join(f"{f:10.2f}" for f in fits))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the three smallest sizes")
    args = parser.parse_args(argv)
    cut = 3 if args.quick else None
    sweep("IPUs: the emulated tied embedding, 500 rows x 192 per IPU, 64 tiles per IPU",
          "IPUs", [2, 4, 8, 16][:cut], lambda s: embedding(s, 500, 64))
    sweep("tiles per IPU: the same model on 4 IPUs (V=2000, C=192, L=64)",
          "tiles/IPU", [16, 64, 256, 1024][:cut], lambda s: embedding(4, 500, s))
    sweep("vertices: n 16-element sums on one ipu2 (bench_emulator's graph)",
          "vertices", [10_000, 30_000, 100_000, 300_000][:cut], vertices)
    return 0


if __name__ == "__main__":
    sys.exit(main())
