"""One-token mistakes in the solutions: does every check notice them?

    python tools/mutants.py 03              # every mutant of lesson 03, a summary
    python tools/mutants.py 03 --survivors  # ... and each mutant that kept full marks
    python tools/mutants.py --all           # all lessons (what tests/test_mutants.py runs)
    python tools/mutants.py 03 --every 5    # every fifth mutant (a quick look)

A mutant changes one token inside a ``# BEGIN SOLUTION`` / ``# END SOLUTION`` region of
``solutions/NN_*.ipynb`` (never in a comment or string): an integer off by one, an
arithmetic operator swapped (``+ -``, ``* /``, ``// %``), a comparison swapped (``< <=``,
``> >=``, ``== !=``) or ``axis=-1`` read as ``axis=0``. The notebook's code cells run once
in this process (the solution must pass every check); then for each mutant its cell runs
mutated, the first check cell after it runs, and its cell runs again as written. A mutant
is *killed* when the check scores less than full marks, or raises, or uses more than
``SLOWER`` times the CPU time that cell and check used unmutated (a loop that never ends;
``--timeout`` sets a fixed limit). Issue 31 asks that at least 92 % of mutants are killed
in every lesson (``tests/test_mutants.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import keyword
import os
import re
import signal
import sys
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^\s*# BEGIN SOLUTION\b")
END = re.compile(r"^\s*# END SOLUTION\b")
#: A mutant may use this many times the CPU time its cell and check used unmutated...
SLOWER = 5
#: ... and at least this many CPU seconds: a loop that never ends is stopped there. CPU
#: time, not the clock's, so that a busy machine does not stop a mutant early.
MIN_TIMEOUT = 0.25
#: A mutant that waits (uses no CPU) is stopped after this many times its CPU limit.
WALL = 20
SWAPS = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "%", "%": "//", "<": "<=",
         "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}


@dataclass(frozen=True)
class Mutant:
    """One token of one solution cell, changed."""

    cell: int
    line: int  # 1-based, in the cell
    col: int
    old: str
    new: str
    source: str  # the whole mutated cell

    def describe(self) -> str:
        text = self.source.splitlines()[self.line - 1].strip()
        return f"cell {self.cell} line {self.line}: {self.old!r} -> {self.new!r}: {text}"


def solution_lines(source: str) -> set[int]:
    """1-based numbers of the lines inside solution regions (markers excluded)."""
    inside, found = False, set()
    for no, line in enumerate(source.splitlines(), 1):
        if BEGIN.match(line):
            inside = True
        elif END.match(line):
            inside = False
        elif inside:
            found.add(no)
    return found


def _replace(source: str, line: int, col: int, old: str, new: str) -> str:
    lines = source.splitlines(keepends=True)
    text = lines[line - 1]
    lines[line - 1] = text[:col] + new + text[col + len(old):]
    return "".join(lines)


def _binary(tokens, k: int) -> bool:
    """Whether the operator at ``tokens[k]`` has an operand on its left (not ``-x``,
    ``*args``)."""
    prev = tokens[k - 1] if k else None
    if prev is None:
        return False
    if prev.type == tokenize.NAME:
        return prev.string in ("True", "False", "None") or not keyword.iskeyword(prev.string)
    if prev.type in (tokenize.NUMBER, tokenize.STRING):
        return True
    return prev.type == tokenize.OP and prev.string in ")]}"


def mutants_of(cell: int, source: str) -> list[Mutant]:
    """Every one-token mutant of the solution regions of one cell's ``source``."""
    region = solution_lines(source)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    found = []
    for k, tok in enumerate(tokens):
        line, col = tok.start
        if line not in region:
            continue
        changes = []
        if tok.type == tokenize.NUMBER and re.fullmatch(r"\d+", tok.string):
            value = int(tok.string)
            changes = [str(value + 1)] + ([str(value - 1)] if value > 0 else [])
        elif tok.type == tokenize.OP and tok.string in SWAPS and _binary(tokens, k):
            changes = [SWAPS[tok.string]]
        elif (tok.type == tokenize.NAME and tok.string == "axis" and k + 3 < len(tokens)
              and tokens[k + 1].string == "=" and tokens[k + 2].string == "-"
              and tokens[k + 3].string == "1"):
            end = tokens[k + 3].end[1]
            old = source.splitlines()[line - 1][col:end]
            found.append(Mutant(cell, line, col, old, "axis=0",
                                _replace(source, line, col, old, "axis=0")))
            continue
        for new in changes:
            mutated = _replace(source, line, col, tok.string, new)
            try:
                compile(mutated, "<mutant>", "exec")
            except SyntaxError:
                continue
            found.append(Mutant(cell, line, col, tok.string, new, mutated))
    return found


def notebook_of(lesson: str) -> Path:
    paths = sorted((ROOT / "solutions").glob(f"{lesson}_*.ipynb"))
    if not paths:
        raise SystemExit(f"mutants.py: no solutions/{lesson}_*.ipynb")
    return paths[0]


@dataclass
class Outcome:
    """What the mutants of one lesson did: each run, those that kept full marks, and those
    stopped after their time limit (counted as caught: the learner's cell never ends)."""

    lesson: str
    mutants: list
    survivors: list
    timed_out: list
    seconds: float

    @property
    def killed(self) -> float:
        return 1 - len(self.survivors) / len(self.mutants) if self.mutants else 1.0


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _run_cell(source: str, ns: dict, timeout: float) -> float:
    """Run one cell's ``source`` in ``ns`` (output swallowed), stopped after ``timeout``
    CPU seconds (or ``WALL`` times that on the clock); the CPU seconds it took."""
    start = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, timeout)
    signal.setitimer(signal.ITIMER_REAL, WALL * timeout)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(source, "<cell>", "exec"), ns)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
    return time.process_time() - start


def _failed(feedback) -> list[str]:
    return [i for i, r in feedback.results().items() if r.points < r.max_points]


def run_lesson(lesson: str, every: int = 1, timeout: float | None = None) -> Outcome:
    """Run every ``every``-th mutant of lesson ``lesson``. Each may use ``timeout`` CPU
    seconds, by default ``SLOWER`` times what its cell and check used unmutated (at least
    ``MIN_TIMEOUT``)."""
    import matplotlib

    matplotlib.use("Agg")
    import nbformat

    from ipukit.grading import feedback

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    start = time.perf_counter()
    nb = nbformat.read(notebook_of(lesson), as_version=4)
    code = {i: c.source for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    checks = [i for i, src in code.items() if re.search(rf"\blesson{lesson}\.check_\w+\(", src)]
    ns: dict = {"__name__": "__main__"}
    took: dict[int, float] = {}
    previous = {sig: signal.signal(sig, _alarm) for sig in (signal.SIGALRM, signal.SIGPROF)}
    with contextlib.chdir(ROOT / "solutions"):
        try:
            feedback.reset()
            for i, src in code.items():
                if not src.lstrip().startswith(("%", "!")):
                    took[i] = _run_cell(src, ns, 300)
            if _failed(feedback):
                raise SystemExit(f"mutants.py: solutions/{notebook_of(lesson).name} does not "
                                 f"pass exercise(s) {_failed(feedback)} unmutated")
            mutants = [m for i, src in code.items() for m in mutants_of(i, src)][::every]
            survivors, timed_out = [], []
            for m in mutants:
                after = [i for i in checks if i > m.cell][:1]
                limit = timeout or max(MIN_TIMEOUT, SLOWER * sum(
                    took.get(i, 0.0) for i in [m.cell, *after]))
                feedback.reset()
                killed = stopped = False
                try:
                    _run_cell(m.source, ns, limit)
                    for i in after:
                        _run_cell(code[i], ns, limit)
                    killed = bool(_failed(feedback)) or not feedback.results()
                except _Timeout:
                    killed = stopped = True
                except BaseException as exc:  # noqa: BLE001 - a mutant may raise anything
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    killed = True
                finally:
                    _run_cell(code[m.cell], ns, 300)
                # a check may catch the timeout as the learner's code raising
                if stopped or any("_Timeout" in r.message for r in feedback.results().values()):
                    timed_out.append(m)
                if not killed:
                    survivors.append(m)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            feedback.reset()
    return Outcome(lesson, mutants, survivors, timed_out, time.perf_counter() - start)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/mutants.py", description=__doc__.split("\n")[0])
    p.add_argument("lessons", nargs="*", help="lesson numbers, e.g. 03 11")
    p.add_argument("--all", action="store_true", help="every lesson with solutions")
    p.add_argument("--every", type=int, default=1, help="run every N-th mutant (default 1)")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"CPU seconds per mutant (default {SLOWER}x the unmutated cell and "
                        f"check, at least {MIN_TIMEOUT:g})")
    p.add_argument("--survivors", action="store_true", help="list the mutants not caught")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    lessons = args.lessons or []
    if args.all:
        lessons = sorted(q.name[:2] for q in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    if not lessons:
        p.error("name a lesson (e.g. 03) or use --all")
    report = {}
    for lesson in lessons:
        out = run_lesson(lesson, args.every, args.timeout)
        report[lesson] = {"mutants": len(out.mutants), "survived": len(out.survivors),
                          "killed": round(out.killed, 4), "timed_out": len(out.timed_out),
                          "seconds": round(out.seconds, 1),
                          "survivors": [m.describe() for m in out.survivors]}
        if not args.json:
            print(f"lesson {lesson}: {len(out.mutants)} mutants, {len(out.survivors)} kept "
                  f"full marks: {out.killed:.1%} killed ({len(out.timed_out)} stopped at their "
                  f"time limit; {out.seconds:.1f} s)", flush=True)
            if args.survivors:
                for m in out.survivors:
                    print("   " + m.describe())
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
