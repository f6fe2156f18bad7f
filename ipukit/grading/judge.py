"""The judge: lesson checks whose verdict the learner's notebook cannot reach.

``python -m ipukit.grade`` imports the kit and every lesson's checks before any kernel
starts and takes each exercise (its answers' names, cases, trial and verdict) from the
:data:`~ipukit.grading.feedback.EXERCISES` registry: never from a notebook. For each
exercise of the graded lesson it draws the cases with a seed of its own
(:func:`case_rng`), writes their public part (:func:`~ipukit.grading.feedback.public`)
to a file for the kernel, and adds to the learner's notebook one cell
(:meth:`Plan.cell`) that runs the exercise's ``trial`` there on the learner's functions
(looked up by the names in ``answers=``) and sends what it returned, encoded
(:mod:`ipukit.grading.plain`), as one display message of MIME type :data:`CHANNEL`. The
judge reads that message only from that cell's own outputs, decodes it as plain data
(never pickle, never eval) and gives the verdict itself (:meth:`Plan.result`). A cell, a
hook or a patch in the kernel can change only the data a trial sends back, never the
cases' private part, the verdict or the score.

>>> from ipukit.grading import lesson01
>>> [p.ex.id for p in plans("01", seed=1)]
['01.1', '01.2', '01.3', '01.4']
>>> "_cycles" in plans("01", seed=1)[2].cases[0]  # private: stays here
True
"""

from __future__ import annotations

import json
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np

from . import feedback, plain
from .feedback import FAILED, Exercise, Result

#: MIME type of the message a judge's cell sends its trial's outputs in.
CHANNEL = "application/vnd.ipukit.trial+json"
#: Lessons with checks: every ``ipukit.grading.lessonNN`` module (13 was left out when it
#: was numbered by hand).
LESSONS = tuple(sorted(m.name[-2:] for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                       if re.fullmatch(r"lesson\d\d", m.name)))


def load_all() -> None:
    """Import every lesson's checks (into :data:`~ipukit.grading.feedback.EXERCISES`)."""
    for lesson in LESSONS:
        feedback.load_lesson(lesson)


def case_rng(seed: int, ex: Exercise) -> np.random.Generator:
    """The generator ``ex``'s cases are drawn from in a grade with ``seed``."""
    return np.random.default_rng([seed, *(int(p) for p in ex.id.split("."))])


_JUDGED = '''\
def _ipukit_trial():
    import json
    from IPython import get_ipython
    from IPython.display import publish_display_data
    from ipukit.grading import feedback, plain
    names = {names!r}
    ns = get_ipython().user_ns
    sent = {{"missing": [n for n in names if n not in ns]}}
    if not sent["missing"]:
        feedback.load_lesson({lesson!r})
        with open({path!r}, encoding="utf-8") as f:
            cases = plain.decode(json.load(f))
        sent = {{"outputs": feedback.run_trials(feedback.EXERCISES[{id!r}], cases,
                                                tuple(ns[n] for n in names))}}
    publish_display_data({{{mime!r}: sent}})
_ipukit_trial()
del _ipukit_trial'''


@dataclass
class Plan:
    """One exercise's part of a grade: its cases, the cell that runs its trial in the
    kernel, and the verdict on what that cell sent."""

    ex: Exercise
    cases: list[dict]

    def cell(self, folder: Path):
        """The cell added to the notebook; the public cases go to a file in ``folder``."""
        path = Path(folder) / f"cases-{self.ex.id}.json"
        path.write_text(json.dumps(plain.encode([feedback.public(c) for c in self.cases])),
                        encoding="utf-8")
        return nbformat.v4.new_code_cell(_JUDGED.format(
            names=self.ex.answers, lesson=self.ex.lesson, id=self.ex.id, mime=CHANNEL,
            path=str(path)))

    def result(self, cell, ran: bool = True) -> Result:
        """The verdict on what ``cell`` sent (the judge's side)."""
        ex = self.ex
        if not ran:
            return _failed(ex, "the check did not run: the notebook's total time limit was "
                               "reached")
        error = first_error(cell)
        if error is not None:  # raised, timed out or killed the kernel: never scores
            return _failed(ex, f"the check stopped: {error}")
        sent = [o["data"][CHANNEL] for o in cell.get("outputs", [])
                if o.get("output_type") == "display_data" and isinstance(o.get("data"), dict)
                and CHANNEL in o["data"]]
        if len(sent) != 1 or not isinstance(sent[0], dict) or len(sent[0]) != 1:
            return _failed(ex, "the check's results did not come back" if not sent else
                           "the check's results came back more than once" if len(sent) > 1
                           else "the check's results cannot be read")
        (kind, value), = sent[0].items()
        if kind == "missing" and isinstance(value, list) and value:
            names = feedback.clipped(", ".join(map(str, value)), 200)
            return _failed(ex, f"the notebook defines no {names} (the check calls it by this "
                               "name)")
        if kind == "outputs":
            return feedback.result_of(ex, self.cases, value)
        return _failed(ex, "the check's results cannot be read")


def _failed(ex: Exercise, message: str) -> Result:
    return Result(ex.id, ex.title, FAILED, 0, ex.points, message)


def plans(lesson: str, seed: int) -> list[Plan]:
    """One :class:`Plan` per exercise of ``lesson``, its cases drawn from ``seed``; a
    ValueError names the exercises without a judged check (no ``trial``)."""
    exercises = feedback.lesson_exercises(lesson)
    unjudged = [ex.id for ex in exercises if ex.trial is None]
    if unjudged:
        raise ValueError(f"exercise {', '.join(unjudged)} has no judged check (cases, trial "
                         "and verdict): the grader cannot judge it")
    return [Plan(ex, feedback.draw_cases(ex, case_rng(seed, ex))) for ex in exercises]


def first_error(cell) -> str | None:
    """``"Name: value"`` of the first error output of ``cell``, or None."""
    err = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
    return None if err is None else f"{err.get('ename')}: {err.get('evalue')}"
