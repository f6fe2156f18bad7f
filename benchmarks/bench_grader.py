"""Grader overhead: ``python -m ipukit.grade`` on a solved lesson versus running the same
notebook alone in a fresh kernel (what nbval does). The difference is what grading adds:
the scratch copy of the folder, the kit's checks run again after the learner's cells, the
scoreboard. Runs alternate; medians over ``--repeat`` runs.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grader.py [--repeat 5] [--lesson 01]
"""

import argparse
import statistics
import time
from pathlib import Path

import nbformat

from ipukit.grade import grade
from ipukit.grading.execute import execute

ROOT = Path(__file__).resolve().parents[1]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--lesson", default="01")
    args = p.parse_args()
    path = next((ROOT / "solutions").glob(f"{args.lesson}_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    alone, graded = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        execute(nbformat.from_dict(nb), cwd=path.parent, timeout=120)
        alone.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        report = grade(path, timeout=120)
        graded.append(time.perf_counter() - t0)
        assert report["score"] == report["max_score"] > 0, report
    a, g = statistics.median(alone), statistics.median(graded)
    print(f"solutions/{path.name}: run alone {a:.2f} s, graded {g:.2f} s, "
          f"grading adds {g - a:+.2f} s (medians of {args.repeat})")


if __name__ == "__main__":
    main()
