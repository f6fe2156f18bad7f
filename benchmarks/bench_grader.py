"""Grader overhead on a solved lesson, medians over ``--repeat`` alternating rounds.

* ``--before PYTHON``: the whole command, ``python -m ipukit.grade solutions/NN_*.ipynb
  --json``, with another checkout's interpreter (e.g. main's ``.venv/bin/python``; it runs
  in that checkout) and with this one, alternating: the wall time a user sees.
* In this process: the notebook run alone in a fresh kernel (what nbval does) and through
  :func:`ipukit.grade.grade`, alternating; and the judge's own parts, timed one by one:
  importing every other lesson's checks (in a fresh process), drawing the cases, reading
  the kit's files twice (snapshot and digest), the verdicts on what the trial cells sent,
  the scratch copy, and starting Python through the Landlock launcher.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_grader.py --repeat 5 \\
        --lesson 01 [--before ../main/.venv/bin/python]
"""

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from ipukit.grade import KIT, grade
from ipukit.grading import judge, sandbox
from ipukit.grading.execute import run_notebook

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, *args, **kw) -> float:
    t0 = time.perf_counter()
    fn(*args, **kw)
    return time.perf_counter() - t0


def command(python: str, path: Path) -> float:
    """Seconds of ``python -m ipukit.grade path --json`` (run in the interpreter's
    checkout), checking that it gave full marks."""
    root = Path(os.path.abspath(python)).parents[2] if ".venv" in python else ROOT
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-m", "ipukit.grade", str(path.resolve()), "--json"],
                          capture_output=True, text=True, cwd=root, timeout=600)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    assert '"score": ' in proc.stdout
    return elapsed


def judge_parts(path: Path, lesson: str) -> dict:
    """Seconds of each thing the judge does besides running the notebook."""
    judge.load_all()
    parts = {}
    t0 = time.perf_counter()
    plans = judge.plans(lesson, seed=1)
    parts["draw the cases"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sandbox.KitSnapshot(KIT).changes()
    parts["kit snapshot + digest"] = time.perf_counter() - t0
    nb = nbformat.read(path, as_version=4)
    n = len(nb.cells)
    with tempfile.TemporaryDirectory() as tmp:
        nb.cells += [p.cell(Path(tmp)) for p in plans]
        run_notebook(nb, cwd=path.parent, timeout=120,
                     judge_cells={n + k: judge.CHANNEL for k in range(len(plans))})
        t0 = time.perf_counter()
        rows = [p.result(nb.cells[n + k]) for k, p in enumerate(plans)]
        parts["verdicts"] = time.perf_counter() - t0
        assert all(r.passed for r in rows), rows
        parts["scratch copy"] = timed(sandbox.make_scratch, path.parent,
                                      Path(tmp) / "copy", 200_000_000, time.monotonic() + 60)
    code = ("import time\nfrom ipukit.grading import feedback, judge\n"
            f"feedback.load_lesson({lesson!r})\nt0 = time.perf_counter()\njudge.load_all()\n"
            "print(time.perf_counter() - t0)")
    parts["import the other lessons"] = float(subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    launcher = sandbox.launcher(sys.executable, [ROOT], 10**9,
                                landlock=sandbox.landlock_abi() > 0)
    plain = [sys.executable, "-c", "pass"]
    parts["Landlock launcher"] = (timed(subprocess.run, [*launcher, *plain], check=True)
                                  - timed(subprocess.run, plain, check=True))
    return parts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--lesson", default="01")
    p.add_argument("--before", help="another checkout's Python (e.g. main's .venv)")
    args = p.parse_args()
    path = next((ROOT / "solutions").glob(f"{args.lesson}_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    rounds: dict[str, list] = {}
    for _ in range(args.repeat):
        if args.before:
            rounds.setdefault("before: command", []).append(command(args.before, path))
            rounds.setdefault("after: command", []).append(command(sys.executable, path))
        rounds.setdefault("run alone", []).append(timed(
            run_notebook, nbformat.from_dict(nb), cwd=path.parent, timeout=120))
        with contextlib.redirect_stdout(io.StringIO()):
            t0 = time.perf_counter()
            report = grade(path, timeout=120)
            rounds.setdefault("graded", []).append(time.perf_counter() - t0)
        assert report["score"] == report["max_score"] > 0, report
        for name, seconds in judge_parts(path, args.lesson).items():
            rounds.setdefault(name, []).append(seconds)
    print(f"solutions/{path.name}, medians of {args.repeat} ({report['sandbox']}):")
    for name, values in rounds.items():
        print(f"  {name:<24} {statistics.median(values):7.3f} s")


if __name__ == "__main__":
    main()
