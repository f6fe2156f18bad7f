"""Shared by the lesson-check tests: run a lesson notebook's code and grade its exercises."""

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from ipukit.grading import feedback, plain
from ipukit.grading.make_exercises import edited_exercise, lesson_name

ROOT = Path(__file__).resolve().parents[1]

#: (folder, expected status): solutions pass, untouched exercises are "not solved yet".
SOLVED_AND_UNTOUCHED = pytest.mark.parametrize(
    "folder,status", [("solutions", feedback.PASSED), ("exercises", feedback.NOT_SOLVED)])


def kit_notebook(folder: str, name: str) -> Path:
    """The notebook in ``folder`` ("solutions" or "exercises") of the lesson notebook
    ``name``: ``NN_topic_solutions.ipynb`` or ``NN_topic_exercises.ipynb`` (named before
    the rename: ``NN_topic.ipynb``)."""
    renamed = ROOT / folder / lesson_name(name).replace(".ipynb", f"_{folder}.ipynb")
    return renamed if renamed.exists() else ROOT / folder / name


def notebook_namespace(folder: str, name: str) -> dict:
    """Run a notebook's code cells except its checks (``nbval-check-output``) in a dict."""
    path = kit_notebook(folder, name)
    if folder == "exercises" and edited_exercise(path):
        pytest.skip(f"{path} was edited since it was generated (a learner's work)")
    nb = nbformat.read(path, as_version=4)
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


def assert_judged(lesson: str, notebook: str, seeds=(0, 1, 2)) -> None:
    """Every exercise of ``lesson`` is a judged check (issue 26): the names in its
    ``answers`` are those its check cell passes; with fresh seeds its cases are plain
    data, and the solution's trials give plain data (JSON over the channel) that the
    verdict accepts."""
    import json
    import re

    import numpy as np

    from ipukit.grading import plain

    nb = nbformat.read(kit_notebook("solutions", notebook), as_version=4)
    calls = {m.group(1): tuple(a.strip() for a in m.group(2).split(","))
             for cell in nb.cells if cell.cell_type == "code"
             for m in re.finditer(rf"lesson{lesson}\.(check_\w+)\(([^)]*)\)", cell.source)}
    ns = notebook_namespace("solutions", notebook)
    exercises = feedback.lesson_exercises(lesson)
    assert exercises and len(calls) == len(exercises)
    for ex in exercises:
        assert ex.trial is not None and ex.cases is not None, ex.id
        assert calls[ex.check] == ex.answers, ex.id
        for seed in seeds:
            cases = feedback.draw_cases(ex, np.random.default_rng(seed))
            assert cases and all(isinstance(plain.encode(c), dict) for c in cases)
            outputs = feedback.run_trials(ex, cases, tuple(ns[a] for a in ex.answers))
            assert [next(iter(o)) for o in outputs] == ["ok"] * len(cases), (ex.id, outputs)
            outputs = json.loads(json.dumps(outputs))
            feedback.judge(ex, outputs, cases)  # raises Wrong if the solution failed


def judged_solution_passes(ex_id: str, answers: tuple, seeds=(0, 1, 2)) -> None:
    """Exercise ``ex_id``'s judged check as the grader runs it, on fresh seeds: its cases
    are plain data (no kit objects), the trial of the solution's ``answers`` returns plain
    data on every case, and the verdict passes."""
    from ipukit.grading import plain

    ex = feedback.EXERCISES[ex_id]
    assert ex.trial is not None and ex.answers, f"{ex_id} is not a judged check"
    for seed in seeds:
        cases = feedback.draw_cases(ex, np.random.default_rng(seed))
        assert [plain.decode(plain.encode(c)).keys() for c in cases] == [c.keys() for c in cases]
        outputs = feedback.run_trials(ex, cases, answers)
        assert [next(iter(o)) for o in outputs] == ["ok"] * len(cases), outputs[-1]
        result = feedback.judge(ex, outputs, cases)
        assert result is None or isinstance(result, feedback.Cost)


def judged_solutions_test(notebook: str, checks: dict):
    """A test, one per exercise of ``checks`` ``{id: (check, answer name)}``, that runs
    :func:`judged_solution_passes` on the solutions notebook's answers."""
    solved: dict = {}

    @pytest.mark.parametrize("ex_id", list(checks))
    def test_judged_on_fresh_seeds_the_solution_passes(ex_id):
        if not solved:
            solved.update(notebook_namespace("solutions", notebook))
        judged_solution_passes(ex_id, (solved[checks[ex_id][1]],))

    return test_judged_on_fresh_seeds_the_solution_passes


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


def judged_checks_hold(lesson: str, notebook: str, seeds=(1, 2, 3)) -> None:
    """Every judged exercise of ``lesson`` keeps the contract (CHECK_CONTRACT.md): its check
    cell passes exactly the names in ``answers``; for fresh seeds its cases are plain data,
    the solution's trial returns plain data on each and passes the judge; and the solution's
    outputs on the notebook's cases do not pass on fresh ones (a replay cannot know the
    random parts)."""
    cells = nbformat.read(kit_notebook("solutions", notebook), as_version=4).cells
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
