"""Shared by the lesson-check tests: run a lesson notebook's code and grade its exercises."""

from pathlib import Path

import nbformat
import pytest

from ipukit.grading import feedback
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


def judged(check, *answers, seed: int = 0):
    """Run a judged check as the grader does: the cases drawn in the judge from a fresh
    ``seed``, each case and each trial output through JSON (plain data only), the verdict
    in the judge. Returns the Result (not shown)."""
    import json

    import numpy as np

    from ipukit.grading import plain

    ex = check.exercise

    def through_json(value):
        return plain.decode(json.loads(json.dumps(plain.encode(value))))

    cases = feedback.draw_cases(ex, np.random.default_rng(seed))
    outputs = feedback.run_trials(ex, [through_json(feedback.public(c)) for c in cases],
                                  answers)
    outputs = json.loads(json.dumps(outputs))
    return feedback._run(ex, lambda: feedback.judge(ex, outputs, cases), show=False)


def assert_plain_trials(check, answer) -> None:
    """``check``'s cases and its trial's outputs on ``answer`` (a right one) are plain data,
    every case gives an output, and the check names ``answer``'s function in ``answers``."""
    import numpy as np

    from ipukit.grading import plain

    ex = check.exercise
    assert ex.answers == (answer.__name__,)
    cases = feedback.draw_cases(ex, np.random.default_rng(5))  # plain.encode of each
    outputs = feedback.run_trials(ex, cases, (answer,))
    assert len(outputs) == len(cases) and all(set(o) == {"ok"} for o in outputs)
    plain.encode([feedback.public(c) for c in cases])
