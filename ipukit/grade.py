"""Grade a learner's notebook: ``python -m ipukit.grade NOTEBOOK.ipynb [--json]
[--timeout S] [--total-timeout S]``.

What is guaranteed:

* The learner's file and its folder are never modified: the notebook runs in a fresh
  kernel whose working directory is a scratch copy of the notebook's folder.
* Grading ends: every cell gets ``--timeout`` seconds (default 60) and the whole run,
  kernel restarts included, ``--total-timeout`` seconds (default 600); both must be
  positive numbers. The report lists the cells that did not run. A cell keeps at most
  1 MB of output.
* Scores come only from the kit's own checks: after the learner's cells the grader runs
  the check cells of the kit's ``exercises/NN_*.ipynb`` (NN: the notebook's lesson, from
  its metadata ``ipukit.lesson`` or its file name), each with ``ipukit.grading`` imported
  afresh, and each result comes back signed with a key made for this run that appears
  only in the grader's own cells. Results displayed by the learner's cells, check cells
  the learner edited or deleted, and patched check functions count for nothing; a check
  that raised or timed out scores 0. The maximum is the lesson's.

What is not: code that runs in the kernel can always cheat in the kernel (it runs before
the checks and can change what they see, e.g. the emulator they call, or watch the
grader's cells run), and absolute paths reach outside the scratch copy. For assessed
work, grade with hidden tests in a sandbox.

Prints a scoreboard, or with ``--json``
``{"score": 3, "max_score": 5, "exercises": [{"id": "01.1", "title": …, "status":
"passed" | "failed" | "not solved", "points": …, "max_points": …, "message": …}, …],
"errors": [{"cell": 7, "shown_as": "[5]", "error": …}], "not_run": [12, 13], "stopped":
…}``. Cells are numbered as JupyterLab shows them: ``cell`` counts every cell (markdown
too) from 1, top to bottom; ``shown_as`` is the code cell's prompt after Run All.
Exit status 0 when the notebook could be graded (whatever the score), 2 when not.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import re
import secrets
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from .errors import IpuError
from .grading.execute import (
    TOTAL_TIMEOUT,
    positive_seconds,
    run_notebook,
    seconds_arg,
)
from .grading.feedback import (
    EXERCISES,
    FAILED,
    NOT_SOLVED,
    PASSED,
    Result,
    format_scoreboard,
    lesson_exercises,
    load_lesson,
)

#: The kit's exercise notebooks: their check cells are the ones the grader runs.
EXERCISE_DIR = Path(__file__).resolve().parents[1] / "exercises"
SOLUTION_DIR = EXERCISE_DIR.parent / "solutions"
#: Where the kernel must import the grading code from.
KIT_GRADING = Path(__file__).resolve().parent / "grading"
#: MIME type of a signed result, displayed by the grader's report cells only.
SIGNED_MIME = "application/vnd.ipukit.signed-result+json"
_SKIPPED = shutil.ignore_patterns(".git", ".venv", ".ipynb_checkpoints", "__pycache__",
                                  "node_modules")


def _NOT_COPIED(folder, names):  # noqa: N802 - a copytree ignore function
    """Not copied into the scratch folder: caches, and the kit's own package (a notebook
    graded next to it must import the kit itself, not a copy)."""
    return set(_SKIPPED(folder, names)) | {
        n for n in names if (Path(folder) / n).resolve() == KIT_GRADING.parent}


class GradingError(IpuError):
    """The notebook cannot be graded (its lesson cannot be told, no kit checks for it)."""


def lesson_of(nb, path: Path) -> str | None:
    """The lesson number "NN": notebook metadata ``ipukit.lesson``, else the file name."""
    meta = str(nb.metadata.get("ipukit", {}).get("lesson", ""))
    if re.fullmatch(r"\d\d", meta):
        return meta
    m = re.match(r"(\d\d)_", path.name)
    return m.group(1) if m else None


def kit_checks(lesson: str) -> list[tuple[str, str | None]]:
    """``(exercise id, check cell source)`` of every exercise of ``lesson``, in order, from
    the kit's ``exercises/NN_*.ipynb`` (never from the notebook being graded). Where that
    notebook was edited since it was generated (a learner working in place), the cells are
    generated afresh from ``solutions/NN_*.ipynb``."""
    import nbformat

    from .grading.make_exercises import cells_hash, edited, exercise_notebook

    paths = sorted(EXERCISE_DIR.glob(f"{lesson}_*.ipynb"))
    if not paths or not load_lesson(lesson):
        raise GradingError(
            f"lesson {lesson} has no graded exercises in the kit (no {EXERCISE_DIR}/"
            f"{lesson}_*.ipynb with checks); name the notebook after its lesson, e.g. "
            "01_mine.ipynb, or set its metadata ipukit.lesson")
    nb = nbformat.read(paths[0], as_version=4)
    solution = SOLUTION_DIR / paths[0].name
    fresh = exercise_notebook(nbformat.read(solution, as_version=4)) if solution.is_file() \
        else None
    if fresh is not None and (edited(nb) or cells_hash(nb) != cells_hash(fresh)):
        nb = fresh
    elif edited(nb):
        raise GradingError(f"{paths[0]} was edited since it was generated and there is no "
                           f"{solution} to take the kit's checks from")
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    found = []
    for ex in lesson_exercises(lesson):
        source = next((s for s in cells if ex.check and re.search(rf"\b{ex.check}\(", s)),
                      None)
        found.append((ex.id, source))
    return found


# The grader's cells. CHECK runs one kit check with ipukit.grading imported afresh and
# keeps the Result; REPORT (which runs none of the learner's code) signs it with the key.
_CHECK = '''\
def _ipukit_check():
    import builtins, importlib, importlib.util, os, sys
    from IPython import get_ipython
    for name in [m for m in sys.modules if m.split(".")[:2] == ["ipukit", "grading"]]:
        del sys.modules[name]
    import ipukit.grading as grading
    from ipukit.grading import feedback
    where = os.path.realpath(os.path.dirname(grading.__file__))
    if where != {kit!r}:
        raise builtins.ImportError("the kernel imports ipukit.grading from " + where +
                                   ", not from the kit ({kit})")
    feedback.set_mode("feedback")
    feedback.reset()
    ns = builtins.dict(get_ipython().user_ns, grading=grading)
    if importlib.util.find_spec("ipukit.grading.lesson{lesson}"):
        ns["lesson{lesson}"] = importlib.import_module("ipukit.grading.lesson{lesson}")
    code = builtins.compile({source!r}, "<the kit's check of exercise {id}>", "exec")
    builtins.exec(code, ns)
    return feedback, feedback.results().get({id!r})
{var} = _ipukit_check()
del _ipukit_check'''

_REPORT = '''\
def _ipukit_report(feedback, r):
    import builtins, hashlib, hmac, json
    from IPython.display import publish_display_data
    ok = (builtins.type(r) is feedback.Result and r.id == {id!r}
          and builtins.type(r.status) is builtins.str
          and builtins.type(r.message) is builtins.str)
    payload = json.dumps({{"id": {id!r}, "status": r.status if ok else "",
                          "message": r.message[:4000] if ok else "",
                          "star": ok and r.star is True}})
    mac = hmac.new({key!r}, payload.encode(), hashlib.sha256).hexdigest()
    publish_display_data({{{mime!r}: {{"payload": payload, "mac": mac}}}})
_ipukit_report(*{var})
del _ipukit_report, {var}'''


def grader_cells(lesson: str, checks: list[tuple[str, str]], key: bytes) -> list:
    """Two cells per exercise: the kit's check (imported afresh), then its signed report."""
    import nbformat

    cells = []
    for ex_id, source in checks:
        var = "_ipukit_result_" + ex_id.replace(".", "_")
        fill = dict(kit=str(KIT_GRADING.resolve()), lesson=lesson, id=ex_id, var=var,
                    source=source or "", key=key, mime=SIGNED_MIME)
        cells += [nbformat.v4.new_code_cell(_CHECK.format(**fill)),
                  nbformat.v4.new_code_cell(_REPORT.format(**fill))]
    return cells


def signed_result(cell, ex_id: str, key: bytes) -> dict | None:
    """The payload of the report cell's output, if it carries this run's signature."""
    for out in cell.get("outputs", []):
        data = out.get("data", {}).get(SIGNED_MIME)
        if not isinstance(data, dict):
            continue
        payload, mac = str(data.get("payload", "")), str(data.get("mac", ""))
        want = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(want, mac):
            found = json.loads(payload)
            if found.get("id") == ex_id:
                return found
    return None


def _first_error(cell) -> str | None:
    err = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
    return None if err is None else f"{err.get('ename')}: {err.get('evalue')}"


def _score(ex_id: str, source, check, report, key: bytes, not_run: set, a: int) -> Result:
    ex = EXERCISES[ex_id]
    if not source:
        return Result(ex.id, ex.title, FAILED, 0, ex.points, "the kit has no check for it")
    if a in not_run:
        return Result(ex.id, ex.title, FAILED, 0, ex.points,
                      "the check did not run: the notebook's total time limit was reached")
    error = _first_error(check)
    if error is not None:  # raised, timed out or killed the kernel: never scores
        return Result(ex.id, ex.title, FAILED, 0, ex.points, f"the check stopped: {error}")
    found = signed_result(report, ex_id, key)
    status = found and found.get("status")
    if status not in (PASSED, FAILED, NOT_SOLVED):
        return Result(ex.id, ex.title, FAILED, 0, ex.points, "the check reported no result")
    return Result(ex.id, ex.title, status, ex.points if status == PASSED else 0, ex.points,
                  found.get("message", ""), star=status == PASSED and found.get("star") is True)


def grade(path: str | Path, timeout: float = 60, total_timeout: float = TOTAL_TIMEOUT) -> dict:
    """Run and grade the notebook at ``path``; returns the ``--json`` dictionary."""
    import nbformat

    timeout = positive_seconds(timeout, "--timeout")
    total_timeout = positive_seconds(total_timeout, "--total-timeout")
    path = Path(path)
    nb = nbformat.read(path, as_version=4)  # the file is not touched again
    lesson = lesson_of(nb, path)
    if lesson is None:
        raise GradingError(
            f"cannot tell which lesson {path.name} belongs to: name it after its lesson "
            "(e.g. 01_mine.ipynb) or set its notebook metadata ipukit.lesson to \"01\"")
    checks = kit_checks(lesson)
    key = secrets.token_hex(32).encode()
    n = len(nb.cells)
    nb.cells += grader_cells(lesson, checks, key)
    with tempfile.TemporaryDirectory(prefix="ipukit-grade-") as tmp:
        scratch = Path(tmp) / "scratch" / (path.resolve().parent.name or "notebook")
        shutil.copytree(path.resolve().parent, scratch, symlinks=True, ignore=_NOT_COPIED)
        run = run_notebook(nb, cwd=scratch, timeout=timeout, total_timeout=total_timeout,
                           env={"IPUKIT_GRADING": "feedback"})
    not_run = set(run.not_run)
    rows = [_score(ex_id, source, nb.cells[n + 2 * k], nb.cells[n + 2 * k + 1], key, not_run,
                   n + 2 * k) for k, (ex_id, source) in enumerate(checks)]
    errors = [{"cell": i + 1, "shown_as": _prompt(cell), "error": e}
              for i, cell in enumerate(nb.cells[:n]) if (e := _first_error(cell)) is not None]
    exercises = [asdict(r) for r in rows]
    for e in exercises:
        e.pop("picture", None)
    return {"notebook": str(path), "lesson": lesson,
            "score": sum(r.points for r in rows), "max_score": sum(r.max_points for r in rows),
            "exercises": exercises, "errors": errors,
            "not_run": sorted(i + 1 for i in not_run if i < n), "stopped": run.stopped}


def _prompt(cell) -> str:
    """The prompt JupyterLab shows left of a code cell after Run All: ``[5]``."""
    count = cell.get("execution_count")
    return f"[{count}]" if count else "[ ]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ipukit.grade",
                                description=__doc__.split("\n")[0])
    p.add_argument("notebook", type=Path)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--timeout", type=seconds_arg, default=60,
                   help="seconds per cell, a positive number (default 60)")
    p.add_argument("--total-timeout", type=seconds_arg, default=TOTAL_TIMEOUT,
                   help=f"seconds for the whole notebook (default {TOTAL_TIMEOUT:g})")
    args = p.parse_args(argv)
    if not args.notebook.is_file():
        print(f"ipukit.grade: no notebook at {args.notebook}", file=sys.stderr)
        return 2
    try:
        report = grade(args.notebook, timeout=args.timeout, total_timeout=args.total_timeout)
    except GradingError as exc:
        print(f"ipukit.grade: could not grade {args.notebook}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # unreadable notebook, kernel that will not start
        print(f"ipukit.grade: could not grade {args.notebook}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return 0
    rows = [Result(**r) for r in report["exercises"]]
    print(format_scoreboard(rows, f"Scoreboard for {args.notebook} (lesson {report['lesson']})"))
    for r in rows:
        if r.status != "passed" and r.message:
            print(f"\n{r.id} {r.title}: {r.message}")
    for e in report["errors"]:
        print(f"\ncell {e['cell']} {e['shown_as']} raised {e['error']}")
    if report["not_run"]:
        print(f"\ncells {', '.join(map(str, report['not_run']))} did not run: "
              f"{report['stopped']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
