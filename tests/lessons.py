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
    ``name``: ``NN_topic_solutions.ipynb`` or ``NN_topic_exercises.ipynb``."""
    return ROOT / folder / lesson_name(name).replace(".ipynb", f"_{folder}.ipynb")


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


def judged_checks_hold(lesson: str, notebook: str, seeds=(1, 2, 3)) -> None:
    """Every judged exercise of ``lesson`` keeps the contract (CHECK_CONTRACT.md): its check
    cell passes exactly the names in ``answers``; for fresh seeds its cases are plain data,
    the solution's trial returns plain data on each and passes the judge; and the solution's
    outputs on the notebook's cases do not pass on fresh ones (every check draws random
    parts, which a replay cannot know)."""
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
        fresh, replay_failed = False, False
        for seed in seeds:
            cases = feedback.draw_cases(ex, np.random.default_rng(seed))
            assert all(plain.decode(plain.encode(c)).keys() == c.keys() for c in cases)
            outputs = feedback.run_trials(ex, cases, answers)
            assert [list(o) for o in outputs] == [["ok"]] * len(cases), (ex.id, seed, outputs)
            assert feedback.judge(ex, outputs, cases) is None or ex.budget, (ex.id, seed)
            if plain.encode(cases) != plain.encode(feedback.notebook_cases(ex)):
                fresh = True
                try:
                    feedback.judge(ex, replayed, cases)
                except feedback.Wrong:
                    replay_failed = True
        # fresh random cases (every check draws some), and replaying the notebook's outputs
        # fails on at least one seed
        assert fresh, f"{ex.id}: its cases are the same for every seed (a replay passes)"
        assert replay_failed, f"{ex.id}: a replay passes every fresh seed"


def to_judge(values) -> list:
    """Trial outputs as they reach the judge (plain data through JSON)."""
    import json

    return json.loads(json.dumps([{"ok": plain.encode(v)} for v in values]))


def solution_trials(ex_id: str, notebook: str):
    """The exercise, its notebook cases and what the solution's trial sends for each."""
    ex = feedback.EXERCISES[ex_id]
    ns = notebook_namespace("solutions", notebook)
    cases = feedback.notebook_cases(ex)
    return ex, cases, [ex.trial(feedback.public(c), *(ns[n] for n in ex.answers))
                       for c in cases]


def graded_points(folder: str, name: str, cell: str, path: Path) -> dict:
    """Exercise id -> points that ``python -m ipukit.grade --json`` gives the kit's
    ``folder/name`` notebook with ``cell`` added after its imports (written to ``path``)."""
    import json
    import subprocess
    import sys

    nb = nbformat.read(kit_notebook(folder, name), as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell(cell))
    nbformat.write(nb, path)
    out = subprocess.run([sys.executable, "-m", "ipukit.grade", str(path), "--json"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    return {e["id"]: e["points"] for e in json.loads(out.stdout)["exercises"]}
