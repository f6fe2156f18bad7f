"""The schedules after Graphcore: how long building and timing them takes (issue 27).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_schedule.py [--p 8 --m 64 --v 4]

Builds ``schedule(kind, p, m)`` (``virtual_stages=v`` for interleaved_1f1b) for every kind
after Graphcore, and 1F1B beside it, in alternating rounds; then times each one
(``makespan(1, 2, t_W=1)``). Medians of ``--repeats`` rounds, wall time and this process's
CPU time (less sensitive to other jobs); the target is a build under 50 ms at p = 8,
m = 64, v = 4.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ipukit.parallel import schedule
from ipukit.parallel.schedule import BEYOND_GRAPHCORE


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, default=8)
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--v", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args(argv)
    p, m = args.p, args.m
    kinds = ("1f1b",) + BEYOND_GRAPHCORE
    vs = {"interleaved_1f1b": args.v}
    build = {k: [] for k in kinds}
    cpu = {k: [] for k in kinds}
    timed = {k: [] for k in kinds}
    for _ in range(args.repeats):  # alternating rounds: every kind sees the same load
        for k in kinds:
            t, c = time.perf_counter(), time.process_time()
            s = schedule(k, p, m, virtual_stages=vs.get(k))
            build[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
            t = time.perf_counter()
            s.makespan(1, 2, t_W=1)
            timed[k].append(time.perf_counter() - t)
    print(f"p = {p}, m = {m}, v = {args.v} (interleaved_1f1b); medians of {args.repeats}")
    print(f"{'kind':<17} {'ops':>7} {'build ms':>9} {'CPU ms':>7} {'/ 1f1b':>7} "
          f"{'makespan() ms':>14}")
    base = statistics.median(build["1f1b"])
    for k in kinds:
        ops = len(schedule(k, p, m, virtual_stages=vs.get(k)).ops)
        b = statistics.median(build[k])
        print(f"{k:<17} {ops:>7,} {b * 1e3:9.2f} {statistics.median(cpu[k]) * 1e3:7.2f} "
              f"{b / base:7.1f} {statistics.median(timed[k]) * 1e3:14.2f}")


if __name__ == "__main__":
    main()
