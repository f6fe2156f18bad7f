"""Grader overhead on a solved lesson: ``python -m ipukit.grade`` versus running the same
notebook alone in a fresh kernel (what nbval does), medians over ``--repeat`` alternating
runs. Kernel start-up varies by a second on a loaded machine, so the two parts grading
adds are also timed on their own: the extra checking pass (the kit's check cells, each
with ``ipukit.grading`` imported afresh, and their signed reports, timed inside the
kernel) and the scratch copy of the notebook's folder.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grader.py [--repeat 5] [--lesson 01]
"""

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import nbformat

from ipukit.grade import _NOT_COPIED, grade, grader_cells, kit_checks
from ipukit.grading.execute import run_notebook

ROOT = Path(__file__).resolve().parents[1]


def extra_pass(nb, lesson: str, cwd) -> float:
    """Seconds the grader's appended cells take in the kernel, after the learner's cells."""
    nb = nbformat.from_dict(nb)
    cells = grader_cells(lesson, kit_checks(lesson), b"k" * 64)
    new = nbformat.v4.new_code_cell
    nb.cells += [new("import time as _t\n_t0 = _t.perf_counter()"), *cells,
                 new("print(_t.perf_counter() - _t0)")]
    run_notebook(nb, cwd=cwd, timeout=120, total_timeout=600)
    assert not any(o.output_type == "error" for c in nb.cells for o in c.get("outputs", []))
    return float(nb.cells[-1].outputs[0].text)


def scratch_copy(folder: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        shutil.copytree(folder, Path(tmp) / folder.name, symlinks=True, ignore=_NOT_COPIED)
        return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--lesson", default="01")
    args = p.parse_args()
    path = next((ROOT / "solutions").glob(f"{args.lesson}_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    alone, graded, checks, copy = [], [], [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        run_notebook(nbformat.from_dict(nb), cwd=path.parent, timeout=120)
        alone.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        report = grade(path, timeout=120)
        graded.append(time.perf_counter() - t0)
        assert report["score"] == report["max_score"] > 0, report
        checks.append(extra_pass(nb, args.lesson, path.parent))
        copy.append(scratch_copy(path.parent))
    a, g = statistics.median(alone), statistics.median(graded)
    print(f"solutions/{path.name} (medians of {args.repeat}):\n"
          f"  run alone {a:.2f} s, graded {g:.2f} s, difference {g - a:+.2f} s\n"
          f"  the extra checking pass {statistics.median(checks):.3f} s, "
          f"the scratch copy of {path.parent.name}/ {statistics.median(copy):.3f} s")


if __name__ == "__main__":
    main()
