"""How the emulator's costs grow with tensor size (issue 17: full-chip scale).

For n = 10^3 … 10^8 float elements of one tensor mapped linearly over the 1,472 tiles of an
ipu2, one vertex per tile scales its slice in place and sums it
(``x *= 2; out = x.sum()``, run 3 times). Prints build, compile, load and run times (run =
median of 3 ``Engine.run`` calls), the memory allocated by build and compile (metadata) and
the peak memory that Python and NumPy allocated in all, divided by the tensor's bytes
(tracemalloc, in a second pass: it slows Python). Graph metadata grows with regions, not
elements, so the ratio falls towards the cost of the data itself (the tile memory, the
codelet's temporaries and, where vertices' fields are small and irregular, an int32 gather
index).

Run: ``.venv/bin/python benchmarks/bench_scale.py [--sizes 1000 … 100000000]``
(``IPUKIT_BACKEND=cupy`` runs the tensor data on a GPU; device memory is not in the ratio).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

import ipukit as ipu
from ipukit import backend
from ipukit.poplibs import poputil


class ScaleSum(ipu.Vertex):
    x = ipu.InOut(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.x[...] *= 2
        self.out[...] = self.x.sum(axis=-1)


def build(n: int, target):
    g = ipu.Graph(target)
    x = g.add_variable(ipu.FLOAT, [n], "x")
    poputil.map_tensor_linearly(g, x)
    mapping = g.get_tile_mapping(x)
    used = [(tile, b, e) for tile, runs in enumerate(mapping) for b, e in runs]
    out = g.add_variable(ipu.FLOAT, [len(used)], "out")
    cs = g.add_compute_set("scaleSum")
    for i, (tile, b, e) in enumerate(used):
        g.set_tile_mapping(out[i], tile)
        g.add_vertex(cs, ScaleSum, {"x": x.slice(b, e), "out": out[i]}, tile=tile)
    g.create_host_write("x", x)
    g.create_host_read("out", out)
    return g, ipu.Execute(cs)


def measure(n: int, dev, traced: bool) -> dict:
    """Times (untraced), or the peak bytes allocated (traced: tracemalloc slows Python)."""
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    g, prog = build(n, dev.target)
    t1 = time.perf_counter()
    exe = ipu.compile_graph(g, [prog])
    t2 = time.perf_counter()
    metadata = tracemalloc.get_traced_memory()[1] if traced else 0
    eng = ipu.Engine(exe)
    eng.load(dev)
    backend.synchronize()
    t3 = time.perf_counter()
    eng.write_tensor("x", np.ones(n, np.float32))
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        eng.run()
        backend.synchronize()
        runs.append(time.perf_counter() - t)
    out = eng.read_tensor("out")
    peak = tracemalloc.get_traced_memory()[1] if traced else 0
    tracemalloc.stop()
    assert out.sum() == 8.0 * n, "each element is doubled three times: 8 n in all"
    return {"build": t1 - t0, "compile": t2 - t1, "load": t3 - t2,
            "run": statistics.median(runs), "metadata": metadata, "peak": peak}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+",
                    default=[10**3, 10**4, 10**5, 10**6, 10**7, 10**8])
    args = ap.parse_args(argv)
    dev = ipu.IPUModel("ipu2").create_device()
    print(f"backend: {backend.name()}; one float tensor mapped linearly over "
          f"{dev.target.num_tiles} tiles, one vertex per tile")
    print(f"{'elements':>12} {'tensor MB':>9} {'build s':>8} {'compile s':>9} {'load s':>7} "
          f"{'run ms':>9} {'metadata MB':>11} {'peak / tensor':>13}")
    for n in args.sizes:
        r = measure(n, dev, traced=False)
        r.update({k: v for k, v in measure(n, dev, traced=True).items()
                  if k in ("metadata", "peak")})
        nbytes = 4 * n
        print(f"{n:>12,} {nbytes / 1e6:>9.3f} {r['build']:>8.3f} {r['compile']:>9.3f} "
              f"{r['load']:>7.3f} {r['run'] * 1e3:>9.3f} {r['metadata'] / 1e6:>11.2f} "
              f"{r['peak'] / nbytes:>13.2f}", flush=True)


if __name__ == "__main__":
    main()
