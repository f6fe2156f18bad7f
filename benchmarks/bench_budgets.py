"""Issue 29's budgets, each against its measured value: which hold.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_budgets.py [--rounds 3]

1. Peak RSS of the two full-size commands (each in a fresh process; ``/usr/bin/time -v``
   gives the same "Maximum resident set size"): tut6 10000 x 10000 on model-ipu2 (<= 1,200
   MiB; its wall time is printed) and the emulated tied embedding at Graphcore's CI size
   (<= 900 MiB, printing ``Results match.``).
2. Speed, as ratios measured side by side (alternating rounds, medians): the emulated
   embedding's wall time against the same command without ``--emulate`` (<= 6x); lesson
   08's first call of a new emulated model (build, compile, first run) against the NumPy
   runner, pipelined and sharded (<= 7x, ``bench_parallel.bench_emulated``'s measure).
3. The reduced sizes ``tests/test_budgets.py`` guards in CI (tracemalloc peaks), against
   the budgets stated there.
Timings depend on the machine and its load; peak memory does not.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

MiB = 2**20
TUT6 = ["-m", "ipukit.tutorials.tut6", "10000", "10000", "--device", "model-ipu2"]
EMBEDDING = ["-m", "ipukit.examples.sharded_embedding", "--ipus", "4", "--vocab-size", "8000",
             "--feature-size", "768", "--sequence-length", "256"]
#: A child's peak RSS: its parent is this small process, whose only child it is.
_PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], "
         "capture_output=True, text=True); sys.stdout.write(r.stdout); "
         "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
         "sys.exit(r.returncode)")


def run(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of ``python args`` in a fresh process."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, *args],
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if r.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    peak = int(r.stdout.rsplit("PEAK_KIB", 1)[1]) / 1024
    return wall, peak, r.stdout


def lesson08_first_calls(rounds: int) -> dict:
    """Per strategy, each round's (first call of a new emulated model) / (NumPy runner)."""
    import bench_parallel as b  # noqa: PLC0415

    from ipukit.data import load_mnist  # noqa: PLC0415

    d = load_mnist()
    x = (d.train_images[:256].reshape(256, 784) / 255).astype(np.float32)
    y = d.train_labels[:256]
    ratios = {"pipelined": [], "sharded": []}
    for _ in range(rounds):
        for strategy, got in ratios.items():
            ref, emu = b.lesson08_model(strategy, False), b.lesson08_model(strategy, True)
            plain = b.median_time(lambda ref=ref: ref.run(x, y), 5)
            first = b.median_time(lambda emu=emu: (emu.compile(x, y), emu.run(x, y)), 1)
            got.append(first / plain)
    return ratios


def reduced_sizes() -> list[tuple[str, float, float]]:
    """(what, traced peak MiB, budget MiB) of the guards in tests/test_budgets.py."""
    import gc  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415

    from ipukit import compile as compile_module  # noqa: PLC0415
    from ipukit.examples.sharded_embedding import make_data  # noqa: PLC0415
    from ipukit.parallel import emulated_sharded  # noqa: PLC0415
    from tests import test_budgets as tb  # noqa: PLC0415

    _, tut6_peak = tb.peak_bytes(tb._tut6)
    with tb.contextlib.redirect_stdout(tb.io.StringIO()):
        _, graph, prog = tb.tut6.build(500, 1000, "ipu2")
    gc.collect()
    tracemalloc.start()
    compile_module.compile_graph(graph, [prog])
    now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    features, indices = make_data(2000, 192, 64)
    _, emb_peak = tb.peak_bytes(lambda: emulated_sharded.tied_embedding(features, indices, 4,
                                                                     tiles_per_ipu=16))
    return [("tut6 500x1000, traced peak", tut6_peak / MiB, tb.TUT6_PEAK / MiB),
            ("its compile, traced beyond what it keeps", (peak - now) / MiB,
             tb.TUT6_COMPILE_TRANSIENT / MiB),
            ("emulated embedding V=2000 C=192 L=64, traced peak", emb_peak / MiB,
             tb.EMBEDDING_PEAK / MiB)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (speed)")
    args = parser.parse_args(argv)
    rows = []  # (budget, measured, limit, unit, holds)
    wall, peak, _ = run(TUT6)
    rows.append(("tut6 10000x10000 model-ipu2: peak RSS", peak, 1200, "MiB"))
    print(f"tut6 10000x10000 on model-ipu2: {wall:.1f} s wall, {peak:,.0f} MiB peak RSS",
          flush=True)
    emulated, numpy_runs, peaks, match = [], [], [], True
    for _ in range(args.rounds):  # alternating: both see the same load
        w, p, out = run(EMBEDDING + ["--emulate"])
        emulated.append(w)
        peaks.append(p)
        match &= "Results match." in out
        numpy_runs.append(run(EMBEDDING)[0])
    ratio = statistics.median(e / n for e, n in zip(emulated, numpy_runs))
    rows.append(("emulated embedding (CI size): peak RSS", max(peaks), 900, "MiB"))
    rows.append(("emulated embedding / without --emulate: wall", ratio, 6, "x"))
    print(f"emulated embedding: {statistics.median(emulated):.1f} s against "
          f"{statistics.median(numpy_runs):.2f} s without --emulate (medians of "
          f"{args.rounds} alternating rounds), Results match: {match}", flush=True)
    for strategy, got in lesson08_first_calls(args.rounds).items():
        rows.append((f"lesson 08 first call / NumPy runner, {strategy}",
                     statistics.median(got), 7, "x"))
    rows += [(what, got, limit, "MiB (tracemalloc)") for what, got, limit in reduced_sizes()]
    print(f"\n{'budget':<58} {'measured':>10} {'limit':>8}  holds")
    held = 0
    for what, got, limit, unit in rows:
        ok = got <= limit
        held += ok
        print(f"{what:<58} {got:>10,.1f} {limit:>8,} {unit:<4} {'yes' if ok else 'NO'}")
    print(f"{held} of {len(rows)} budgets hold" + ("" if match else "; the emulated embedding "
                                                   "did not print Results match."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
