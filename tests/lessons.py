"""Shared by the lesson-check tests: run a lesson notebook's code and grade its exercises."""

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from ipukit.grading import feedback, plain
from ipukit.grading.make_exercises import edited_exercise

ROOT = Path(__file__).resolve().parents[1]

#: (folder, expected status): solutions pass, untouched exercises are "not solved yet".
SOLVED_AND_UNTOUCHED = pytest.mark.parametrize(
    "folder,status", [("solutions", feedback.PASSED), ("exercises", feedback.NOT_SOLVED)])


def notebook_namespace(folder: str, name: str) -> dict:
    """Run a notebook's code cells except its checks (``nbval-check-output``) in a dict."""
    if folder == "exercises" and edited_exercise(ROOT / folder / name):
        pytest.skip(f"exercises/{name} was edited since it was generated (a learner's work)")
    nb = nbformat.read(ROOT / folder / name, as_version=4)
    ns: dict = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "nbval-check-output" not in cell.metadata.get("tags", []):
            exec(compile(cell.source, f"{name}:{cell.id}", "exec"), ns)
    return ns


def grade_exercises(module, lesson: str, notebook: str, checks: dict, folder: str,
                    status: str) -> list:
    """Call each check ``{id: (check name, function name or names)}`` on the notebook's
    functions and assert its status and points, and that a budget's star goes with a pass;
    returns the lesson's scoreboard rows."""
    ns = notebook_namespace(folder, notebook)
    for ex_id, (check, fns) in checks.items():
        fns = (fns,) if isinstance(fns, str) else fns
        r = getattr(module, check)(*(ns[fn] for fn in fns), show=False)
        assert (r.id, r.status) == (ex_id, status), r.text()
        assert r.points == (r.max_points if status == feedback.PASSED else 0)
        assert not r.star or status == feedback.PASSED
    rows = feedback.lesson_rows(lesson, feedback.results())
    assert [r.id for r in rows] == list(checks)
    return rows


def judged_checks_hold(lesson: str, notebook: str, seeds=(1, 2, 3)) -> None:
    """Every judged exercise of ``lesson`` keeps the contract (CHECK_CONTRACT.md): its check
    cell passes exactly the names in ``answers``; for fresh seeds its cases are plain data,
    the solution's trial returns plain data on each and passes the judge; and the solution's
    outputs on the notebook's cases do not pass on fresh ones (a replay cannot know the
    random parts)."""
    cells = nbformat.read(ROOT / "solutions" / notebook, as_version=4).cells
    calls = dict(re.findall(rf"lesson{lesson}\.(check_\w+)\(([^)]*)\)",
                            "\n".join(c.source for c in cells if c.cell_type == "code")))
    ns = notebook_namespace("solutions", notebook)
    judged = [ex for ex in feedback.lesson_exercises(lesson) if ex.trial is not None]
    assert judged, f"lesson {lesson} has no judged exercise"
    for ex in judged:
        assert [a.strip() for a in calls[ex.check].split(",")] == list(ex.answers), ex.id
        answers = tuple(ns[name] for name in ex.answers)
        replayed = feedback.run_trials(ex, feedback.notebook_cases(ex), answers)
        for seed in seeds:
            cases = feedback.draw_cases(ex, np.random.default_rng(seed))
            assert all(plain.decode(plain.encode(c)).keys() == c.keys() for c in cases)
            outputs = feedback.run_trials(ex, cases, answers)
            assert [list(o) for o in outputs] == [["ok"]] * len(cases), (ex.id, seed, outputs)
            assert feedback.judge(ex, outputs, cases) is None or ex.budget, (ex.id, seed)
            with pytest.raises(feedback.Wrong):
                feedback.judge(ex, replayed, cases)
