"""The median time of one steady-state ``Engine.run`` of bench_emulator's graph.

Run it with ``PYTHONPATH`` pointing at two trees, alternately, to compare them (how the
vertex-axis check's cost was measured, issue 12):

    .venv/bin/python benchmarks/bench_run_overhead.py 1000 5000   # n vertices, runs
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import ipukit as ipu
from benchmarks.bench_emulator import build


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    n, runs = int(argv[0]), int(argv[1])
    dev = ipu.IPUModel("ipu2").create_device()
    g, prog = build(n, dev.target)
    eng = ipu.Engine(ipu.compile_graph(g, [prog]))
    eng.load(dev)
    eng.write_tensor("x", np.ones((n, 16), np.float32))
    eng.run(0)  # the first run, with the vertex-axis check
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        eng.run(0)
        times.append(time.perf_counter() - t0)
    print(f"n={n:,}: median run {statistics.median(times) * 1e6:,.1f} us over {runs:,} runs")


if __name__ == "__main__":
    main()
