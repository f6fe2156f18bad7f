"""Exercise checks: one shape for every check, readable feedback, hints that escalate.

A check is a function decorated with :func:`exercise`. Its body tests the learner's
answer against independent references and raises :class:`Wrong` (with what is wrong,
and optionally a :class:`Picture` of what the learner's code did next to what was
expected) or returns normally; the decorator runs it, records the :class:`Result`,
shows it and returns it. There is no ``run("NN.k", body)`` ceremony::

    @exercise("01.3", "the cost of one BSP superstep", points=2,
              hints=("a nudge", "the concept", "a near-answer"))
    def check_superstep_cycles(superstep_cycles):
        ...
        if got != expected:
            raise Wrong(f"... expected {expected} cycles, got {got}")

* **Hints escalate** with failed attempts of the same exercise: the first failure shows
  ``hints[0]`` (a nudge), the second ``hints[1]`` (the concept), the third and later
  ``hints[2]`` (a near-answer). Never the code itself.
* **Budgets** (GPU-Puzzles' star): a check may return :class:`Cost` ``(used, budget,
  unit)``; passing gives the points, and a cost within the budget (the reference
  solution's) adds a star (★) to the result. Stars do not change points.
* **Feedback** renders as coloured HTML (green passed, red wrong, amber not solved yet)
  with a plain-text fallback; neither relies on emoji.
* A check whose answer still raises ``NotImplementedError`` is "not solved yet" (0 points).

In grading mode (``set_mode("raise")`` or the environment variable
``IPUKIT_GRADING=raise``) a check that does not pass raises ``AssertionError`` after
showing its message. Each result is also displayed as ``application/vnd.ipukit.result+json``.

>>> @exercise("99.1", "a doubling function", points=1,
...           hints=("look at 3", "double means times two", "return 2 * x"))
... def check_double(double):
...     for x in (0, 3):
...         if double(x) != 2 * x:
...             raise Wrong(f"double({x}): expected {2 * x}, got {double(x)}")
>>> print(check_double(lambda x: x + 3, show=False).text())
WRONG · Exercise 99.1 · a doubling function: 0/1 point
   double(0): expected 0, got 3
   hint 1 of 3: look at 3
>>> print(check_double(lambda x: 2 * x, show=False).text())
PASSED · Exercise 99.1 · a doubling function: 1/1 point
>>> _ = EXERCISES.pop("99.1"); reset()
"""

from __future__ import annotations

import functools
import html
import os
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from . import plain

RESULT_MIME = "application/vnd.ipukit.result+json"
PASSED, FAILED, NOT_SOLVED = "passed", "failed", "not solved"
#: Plain-text labels (no emoji: readable in any terminal, screen reader or log).
LABELS = {PASSED: "PASSED", FAILED: "WRONG", NOT_SOLVED: "NOT SOLVED YET"}
#: Kept for the scoreboard's status column.
ICONS = LABELS
#: Colours of the HTML feedback: (border/heading, background).
COLOURS = {PASSED: ("#1a7f37", "#dafbe1"), FAILED: ("#cf222e", "#ffebe9"),
           NOT_SOLVED: ("#9a6700", "#fff8c5")}
STAR = "★"

_IRREGULAR = {"vertex": "vertices", "vertices": "vertices", "index": "indices",
              "matrix": "matrices", "copy": "copies", "entry": "entries", "is": "are",
              "was": "were", "superstep": "supersteps"}


def plural(n, word: str) -> str:
    """``"1 point"``, ``"2 points"``, ``"1 vertex"``, ``"3 vertices"`` (number and word).

    >>> plural(1, "point"), plural(2, "point"), plural(1, "vertex"), plural(0, "vertex")
    ('1 point', '2 points', '1 vertex', '0 vertices')
    """
    return f"{n:,} {word if n == 1 else _plural_word(word)}"


def _plural_word(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith(("s", "x", "sh", "ch")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


@dataclass(frozen=True)
class Picture:
    """A picture in feedback: HTML for the notebook and text for everywhere else."""

    html: str
    text: str = ""

    def _repr_html_(self):
        return self.html


class Wrong(Exception):
    """Raised by a check body: the learner's answer is wrong; the message says how.

    ``picture`` (a :class:`Picture`, e.g. :func:`side_by_side` of the learner's tile
    mapping and the expected one) is shown under the message.
    """

    def __init__(self, message: str = "", picture: Picture | None = None):
        super().__init__(message)
        self.picture = picture


@dataclass(frozen=True)
class Cost:
    """What a check body returns for a budget-graded exercise: the learner's cost, the
    reference solution's (the budget) and the unit ("cycles", "bytes", ...)."""

    used: int
    budget: int
    unit: str = "cycles"

    @property
    def star(self) -> bool:
        return self.used <= self.budget

    def text(self) -> str:
        if self.star:
            return (f"{STAR} {plural(self.used, self.unit)}, within the budget of "
                    f"{plural(self.budget, self.unit)}")
        return (f"{plural(self.used, self.unit)}; the reference takes "
                f"{plural(self.budget, self.unit)}: match it for a {STAR}")


@dataclass(frozen=True)
class Exercise:
    """One graded exercise: ``id`` "NN.k" (lesson NN), title, points, escalating hints
    (nudge, concept, near-answer) and the name of its check function."""

    id: str
    title: str
    points: int
    hints: tuple = ()
    check: str = ""
    budget: str = ""
    answers: tuple = ()
    cases: object = field(default=None, compare=False, repr=False)
    trial: object = field(default=None, compare=False, repr=False)
    verdict: object = field(default=None, compare=False, repr=False)

    @property
    def lesson(self) -> str:
        return self.id.split(".")[0]

    @property
    def hint(self) -> str:
        """The last (most specific) hint."""
        return self.hints[-1] if self.hints else ""

    def hint_after(self, failures: int) -> str:
        """The hint shown after ``failures`` failed attempts (1: the first), or ""."""
        if not self.hints or failures < 1:
            return ""
        if len(self.hints) == 1:  # a single hint: from the second failure on
            return self.hints[0] if failures >= 2 else ""
        k = min(failures, len(self.hints))
        return f"hint {k} of {len(self.hints)}: {self.hints[k - 1]}"


@dataclass(frozen=True)
class Result:
    """The outcome of one check. Shown when the check runs; re-displaying shows nothing."""

    id: str
    title: str
    status: str
    points: int
    max_points: int
    message: str = ""
    star: bool = False
    cost: str = ""
    picture: dict | None = field(default=None, compare=False)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def text(self) -> str:
        head = f"{LABELS[self.status]} · Exercise {self.id} · {self.title}: "
        score = f"{self.points}/{plural(self.max_points, 'point')}"
        if self.status == PASSED:
            return head + score + (f"\n   {self.cost}" if self.cost else "")
        if self.status == NOT_SOLVED:
            return head + f"not solved yet ({score}): {self.message}"
        lines = self.message.splitlines() or [""]
        if self.picture and self.picture.get("text"):
            lines += self.picture["text"].splitlines()
        return head + score + "\n" + "\n".join("   " + x for x in lines)

    def html(self) -> str:
        fg, bg = COLOURS[self.status]
        score = f"{self.points}/{plural(self.max_points, 'point')}"
        star = f" <span title='within the budget'>{STAR}</span>" if self.star else ""
        head = (f"<b style='color:{fg}'>{LABELS[self.status]}</b> · Exercise {self.id} · "
                f"{html.escape(self.title)}: <b>{score}</b>{star}")
        body = self.cost if self.status == PASSED else self.message
        if self.status == NOT_SOLVED:
            body = "not solved yet: " + self.message
        body_html = html.escape(body).replace("\n", "<br>")
        pic = (f"<div style='margin-top:6px'>{self.picture['html']}</div>"
               if self.picture and self.picture.get("html") else "")
        return (f"<div style='border-left:6px solid {fg};background:{bg};color:#1f2328;"
                f"padding:6px 10px;margin:4px 0;font-family:sans-serif;font-size:13px'>"
                f"{head}" + (f"<div style='font-family:monospace;white-space:pre-wrap;"
                             f"margin-top:4px'>{body_html}</div>" if body else "")
                + pic + "</div>")

    def _ipython_display_(self):  # already shown by the check itself
        pass


EXERCISES: dict[str, Exercise] = {}
_results: dict[str, Result] = {}
_failures: dict[str, int] = {}
_mode = os.environ.get("IPUKIT_GRADING", "feedback")


def exercise(id: str, title: str, points: int, hints=(), hint: str = "", budget: str = "",
             answers=(), cases=None, trial=None):
    """Register a check as exercise ``id`` and make calling it run the check.

    The decorated function receives the learner's answers; it raises :class:`Wrong` when
    an answer is wrong, returns None (or a :class:`Cost`, for a budget) when it passes.
    Calling it returns the :class:`Result` (shown unless ``show=False``). ``hints``: up to
    three, escalating (a nudge, the concept, a near-answer); ``hint``: one hint shown from
    the second failure on. ``budget``: the unit of a budget-graded exercise ("cycles").

    **Judged checks** (the shape every exercise uses, so that the grader can judge it in
    its own process): give ``answers`` (the names of the learner's functions or classes in
    the notebook, in the order the check cell passes them), ``cases`` and ``trial``; the
    decorated function is then the *verdict*:

    * ``cases(rng)`` (judge) draws the test cases from ``rng`` (a NumPy Generator: a fixed
      seed in the notebook, a fresh one per grading run) and returns a list of dicts of
      plain data (:mod:`ipukit.grading.plain`). Keys that start with ``_`` stay with the
      judge (expected values worked out while drawing): the trial never sees them.
    * ``trial(case, *answers)`` (the learner's kernel) runs the learner's code on one case
      and returns plain data (numbers, lists, arrays). It may raise :class:`Wrong` for an
      answer of the wrong kind: that can only fail the exercise.
    * ``verdict(cases, outputs)`` (judge) works out the expected results with the kit's own
      code, compares, and raises :class:`Wrong` or returns None / a :class:`Cost`. Points
      never depend on a figure that only the kernel measured (such a figure may only earn
      the star).

    In the notebook all three run at once in the kernel (instant feedback, no guarantee);
    ``python -m ipukit.grade`` runs ``cases`` and ``verdict`` in its own process and only
    ``trial`` in the learner's kernel.
    """
    hints = tuple(hints) or ((hint,) if hint else ())

    def register(fn):
        ex = Exercise(id, title, points, hints, fn.__name__, budget, tuple(answers),
                      cases, trial, fn if trial is not None else None)
        EXERCISES[id] = ex

        @functools.wraps(fn)
        def check(*answers, show: bool = True, **kw):
            if ex.trial is not None:
                return _run(ex, lambda: _in_notebook(ex, answers), show)
            return _run(ex, lambda: fn(*answers, **kw), show)

        check.exercise = ex
        return check

    return register


def load_lesson(lesson: str) -> bool:
    """Import ``ipukit.grading.lessonNN`` (where lesson NN's checks live), if there is one.
    Returns whether the lesson has registered exercises."""
    import importlib

    name = f"ipukit.grading.lesson{lesson}"
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:  # the module exists but something it imports does not
            raise
    return any(ex.lesson == lesson for ex in EXERCISES.values())


def set_mode(mode: str) -> None:
    """``"feedback"`` (default: show the result) or ``"raise"`` (also raise AssertionError)."""
    global _mode
    if mode not in ("feedback", "raise"):
        raise ValueError(f"grading mode must be 'feedback' or 'raise', got {mode!r}")
    _mode = mode


def results() -> dict[str, Result]:
    """The latest result of every exercise checked in this session, by id."""
    return dict(_results)


def previous_failures(id: str) -> int:
    """How often exercise ``id`` failed so far (checks may add detail after a failure)."""
    return _failures.get(id, 0)


def reset() -> None:
    """Forget results and failure counts (a fresh start)."""
    _results.clear()
    _failures.clear()


def _not_implemented(exc: BaseException | None) -> NotImplementedError | None:
    """The NotImplementedError behind ``exc`` (engines wrap codelet errors), if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, NotImplementedError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _outcome(body) -> tuple:
    """``(status, message, picture, cost)`` of running a check's ``body``."""
    try:
        out = body()
    except Wrong as exc:
        return FAILED, str(exc), exc.picture, None
    except Exception as exc:  # the learner's code raised: report it, never crash the cell
        todo = _not_implemented(exc)
        if todo is not None:
            return (NOT_SOLVED, str(todo) or "Replace the `raise NotImplementedError` with "
                    "your code.", None, None)
        return FAILED, f"your code raised {type(exc).__name__}: {exc}", None, None
    return PASSED, "", None, out if isinstance(out, Cost) else None


def _result(ex: Exercise, status: str, message: str, picture, cost) -> Result:
    return Result(ex.id, ex.title, status, ex.points if status == PASSED else 0, ex.points,
                  message, star=bool(cost and cost.star), cost=cost.text() if cost else "",
                  picture=asdict(picture) if picture else None)


def _run(ex: Exercise, body, show: bool) -> Result:
    status, message, picture, cost = _outcome(body)
    if status == FAILED:
        _failures[ex.id] = _failures.get(ex.id, 0) + 1
        hint = ex.hint_after(_failures[ex.id])
        if hint:
            message += ("\nhint: " if not hint.startswith("hint ") else "\n") + hint
    result = _result(ex, status, message, picture, cost)
    _results[ex.id] = result
    if show:
        _show(result)
    if _mode == "raise" and status != PASSED:
        raise AssertionError(result.text())
    return result


def _in_notebook(ex: Exercise, answers: tuple):
    """A judged check run all in the kernel: cases, trials and verdict."""
    cases = notebook_cases(ex)
    return judge(ex, run_trials(ex, cases, answers), cases)


def notebook_seed(ex: Exercise) -> int:
    """The fixed seed of ``ex``'s cases in the notebook (the same on every run)."""
    return zlib.crc32(ex.id.encode())


def notebook_cases(ex: Exercise) -> list[dict]:
    """``ex``'s cases as the notebook draws them (a fixed seed: reproducible feedback)."""
    return draw_cases(ex, np.random.default_rng(notebook_seed(ex)))


def draw_cases(ex: Exercise, rng) -> list[dict]:
    """``ex.cases(rng)`` as a list of dicts of plain data (the judge's side)."""
    found = [dict(c) for c in ex.cases(rng)]
    for case in found:
        plain.encode(case)  # an authoring mistake is caught here, in the kit's tests
    return found


def public(case: dict) -> dict:
    """What the trial sees of a case: every key but those that start with ``_``."""
    return {k: v for k, v in case.items() if not k.startswith("_")}


def run_trials(ex: Exercise, cases: list[dict], answers: tuple) -> list:
    """Run ``ex``'s trial on each case (the kernel's side), as encoded plain data: one
    ``{"ok": output}``, ``{"wrong": message}``, ``{"raised": "Type: message"}`` or
    ``{"not_solved": message}`` per case, stopping after the first that is not ok."""
    outputs = []
    for case in cases:
        try:
            outputs.append({"ok": plain.encode(ex.trial(public(case), *answers))})
        except Wrong as exc:
            outputs.append({"wrong": str(exc)})
        except plain.NotPlainData as exc:
            outputs.append({"wrong": f"your answer gave something the check cannot read: {exc}"})
        except Exception as exc:  # the learner's code raised
            todo = _not_implemented(exc)
            if todo is not None:
                outputs.append({"not_solved": str(todo)})
            else:
                outputs.append({"raised": f"{type(exc).__name__}: {exc}"})
        if "ok" not in outputs[-1]:
            break
    return outputs


def judge(ex: Exercise, outputs: list, cases: list[dict]):
    """The verdict on encoded ``outputs`` of ``cases`` (the judge's side): raises
    :class:`Wrong` (or NotImplementedError: not solved yet), or returns what the verdict
    returns (None or a :class:`Cost`). A trial that fails on case k is judged after the
    verdict on cases 1..k-1, so that the first failing case is the one reported.
    ``outputs`` is untrusted data: anything that is not what :func:`run_trials` sends, and
    any verdict that cannot read it, is a wrong answer, never a crash."""
    if not isinstance(outputs, list):
        raise Wrong("the trial gave no readable results")
    decoded = []
    for k, out in enumerate(outputs):
        if not isinstance(out, dict) or len(out) != 1:
            raise Wrong(f"case {k + 1}: the trial gave no readable result")
        kind, value = next(iter(out.items()))
        if kind == "ok":
            try:
                decoded.append(plain.decode(value))
            except (plain.NotPlainData, ValueError, TypeError, RecursionError) as exc:
                raise Wrong(f"case {k + 1}: the trial's result cannot be read: {exc}") from None
            continue
        if decoded:  # a wrong answer to an earlier case is the first failing case
            _verdict(ex, cases[:len(decoded)], decoded)
        if kind == "not_solved":
            raise NotImplementedError(clipped(value))
        if kind == "raised":
            raise Wrong(f"your code raised {clipped(value)}")
        raise Wrong(clipped(value))
    if len(decoded) != len(cases):
        raise Wrong(f"the trial gave {len(decoded)} results for {plural(len(cases), 'case')}")
    return _verdict(ex, cases, decoded)


def _verdict(ex: Exercise, cases: list[dict], decoded: list):
    try:
        return ex.verdict(cases, decoded)
    except (Wrong, NotImplementedError):
        raise
    except Exception as exc:  # what the kernel sent is untrusted: unreadable data only fails
        raise Wrong(f"the check could not read what your code gave: {type(exc).__name__}: "
                    f"{clipped(exc, 2000)}") from exc


def result_of(ex: Exercise, cases: list[dict], outputs) -> Result:
    """The judge's :class:`Result` of ``ex`` from the trial's encoded ``outputs`` on
    ``cases``: nothing is shown or recorded, and no hint is added (the judge has seen no
    earlier attempt)."""
    return _result(ex, *_outcome(lambda: judge(ex, outputs, cases)))


def clipped(value, limit: int = 4000) -> str:
    """``str(value)``, at most ``limit`` characters (messages from the kernel are data)."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + " ..."


def run(id: str, body, show: bool = True) -> Result:
    """Old shape, kept while checks move to :func:`exercise`: run ``body()`` as exercise
    ``id``'s check and return the Result."""
    return _run(EXERCISES[id], body, show)


def _show(result: Result) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        data = asdict(result)
        data.pop("picture")
        display({"text/plain": result.text(), "text/html": result.html(), RESULT_MIME: data},
                raw=True)
    else:
        print(result.text())


def format_scoreboard(rows: list[Result], title: str = "Scoreboard") -> str:
    """A plain-text table of results with the total (used in notebooks and by the CLI)."""
    width = max([len(r.title) for r in rows] + [8])
    lines = [title, f"  {'id':<6} {'exercise':<{width}}  {'status':<15} points"]
    for r in rows:
        star = f" {STAR}" if r.star else ""
        lines.append(f"  {r.id:<6} {r.title:<{width}}  {LABELS[r.status]:<15} "
                     f"{r.points}/{r.max_points}{star}")
    score = sum(r.points for r in rows)
    total = sum(r.max_points for r in rows)
    lines.append(f"  {'total':<6} {'':<{width}}  {'':<15} {score}/{total}")
    return "\n".join(lines)


def lesson_exercises(lesson: str) -> list[Exercise]:
    """The registered exercises of ``lesson``, in order (01.1, 01.2, …, 01.10)."""
    return sorted((e for e in EXERCISES.values() if e.lesson == lesson), key=_order)


def lesson_rows(lesson: str, found: dict[str, Result]) -> list[Result]:
    """One row per registered exercise of ``lesson``; unchecked ones count as not solved."""
    return [found.get(ex.id) or Result(ex.id, ex.title, NOT_SOLVED, 0, ex.points,
                                       "the check did not run")
            for ex in lesson_exercises(lesson)]


def scoreboard(lesson: str | None = None) -> None:
    """Print this session's scoreboard (all exercises of ``lesson`` if given)."""
    if lesson:
        load_lesson(lesson)
    rows = lesson_rows(lesson, _results) if lesson else [
        _results[i] for i in sorted(_results, key=lambda i: _order(EXERCISES[i]))]
    print(format_scoreboard(rows, f"Scoreboard, lesson {lesson}" if lesson else "Scoreboard"))


def _order(ex: Exercise) -> tuple:
    return tuple(int(p) for p in ex.id.split("."))


# -- pictures ------------------------------------------------------------------------------
_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac"]


def side_by_side(yours: Picture, expected: Picture, titles=("yours", "expected")) -> Picture:
    """Two pictures next to each other (HTML) or one under the other (text)."""
    cells = "".join(f"<td style='vertical-align:top;padding-right:16px'><b>{t}</b><br>{p.html}"
                    "</td>" for t, p in zip(titles, (yours, expected)))
    text = "\n".join(f"{t}:\n{p.text}" for t, p in zip(titles, (yours, expected)))
    return Picture(f"<table style='border:none'><tr>{cells}</tr></table>", text)


def tile_grid(owner, label: str = "tile") -> Picture:
    """Each element's tile (or any small integer, -1: none) as a coloured row of cells:
    a tile mapping at a glance. ``owner``: 1-D or 2-D array of ints."""
    a = np.atleast_2d(np.asarray(owner))
    rows_html, rows_text = [], []
    for row in a:
        tds = "".join(
            f"<td style='background:{'#eee' if v < 0 else _PALETTE[int(v) % len(_PALETTE)]};"
            f"color:#fff;width:18px;text-align:center;font-size:10px'>"
            f"{'' if v < 0 else int(v)}</td>" for v in row)
        rows_html.append(f"<tr>{tds}</tr>")
        rows_text.append(" ".join("." if v < 0 else str(int(v)) for v in row))
    return Picture(f"<table style='border-collapse:collapse' title='{label} of each element'>"
                   f"{''.join(rows_html)}</table>", "\n".join("   " + r for r in rows_text))


def timeline(bars, width: int = 60) -> Picture:
    """A Gantt chart: ``bars`` is a list of ``(row, start, end, label)``; rows top to
    bottom in order of first appearance. The learner's schedule next to the expected one
    (:func:`side_by_side`) shows where they differ."""
    bars = [(str(r), float(s), float(e), str(lb)) for r, s, e, lb in bars]
    rows = list(dict.fromkeys(b[0] for b in bars))
    end = max([b[2] for b in bars] + [1.0])
    scale = 400 / end
    html_rows, text_rows = [], []
    for row in rows:
        mine = [b for b in bars if b[0] == row]
        divs = "".join(
            f"<div title='{html.escape(lb)}: {s:g}-{e:g}' style='position:absolute;"
            f"left:{s * scale:.1f}px;width:{max(1.0, (e - s) * scale - 1):.1f}px;height:16px;"
            f"background:{_PALETTE[k % len(_PALETTE)]};color:#fff;font-size:10px;"
            f"overflow:hidden'>{html.escape(lb)}</div>"
            for k, (_, s, e, lb) in enumerate(mine))
        html_rows.append(f"<tr><td style='font-size:11px;padding-right:6px'>"
                         f"{html.escape(row)}</td><td><div style='position:relative;"
                         f"width:410px;height:18px;background:#f6f8fa'>{divs}</div></td></tr>")
        line = [" "] * width
        for _, s, e, lb in mine:
            a, b = int(s / end * width), max(int(s / end * width) + 1, int(e / end * width))
            for i in range(a, min(b, width)):
                line[i] = (lb or "#")[0]
        text_rows.append(f"   {row:>8} |{''.join(line)}|")
    return Picture(f"<table style='border:none'>{''.join(html_rows)}</table>",
                   "\n".join(text_rows) + f"\n   {'':>8}  0{'':>{width - 1 - len(f'{end:g}')}}"
                   f"{end:g}")


# -- reading answers ---------------------------------------------------------------------
def as_int(value, what: str, kind: str = "whole number") -> int:
    """``value`` as a whole number, or Wrong saying what was expected (a ``kind``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer | float | np.floating):
        raise Wrong(f"{what}: expected a number, got {type(value).__name__} {value!r}")
    finite = not isinstance(value, float | np.floating) or np.isfinite(value)
    if not finite or value != int(value):  # nan and inf are not whole numbers
        raise Wrong(f"{what}: expected a {kind}, got {value!r}")
    return int(value)


def as_ints(values, n: int, what: str) -> list[int]:
    """A list of ``n`` whole numbers, or Wrong."""
    try:
        values = list(values)
    except TypeError:
        raise Wrong(f"{what}: expected a list of {plural(n, 'number')}, got {values!r}") \
            from None
    if len(values) != n:
        raise Wrong(f"{what}: expected {plural(n, 'number')} (one per IPU or layer), got "
                    f"{len(values)}: {values!r}")
    return [as_int(v, what) for v in values]


def first_mismatch(expected, got, name, rtol=1e-5, atol=1e-6):
    """Raise Wrong naming the first element of ``got`` that differs from ``expected``."""
    expected, got = np.asarray(expected), _numbers(got, name)
    if got.shape != expected.shape:
        raise Wrong(f"{name}: expected shape {expected.shape}, got {got.shape}")
    bad = ~np.isclose(got, expected, rtol=rtol, atol=atol)
    if bad.any():
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        where = ", ".join(str(k) for k in i)
        raise Wrong(f"{name}[{where}]: expected {expected[i]:.6g}, got {got[i]:.6g} "
                    f"({int(bad.sum())} of {plural(bad.size, 'element')} wrong)\n"
                    f"expected {np.array2string(expected, precision=4)}\n"
                    f"got      {np.array2string(got, precision=4)}")


def _numbers(value, name: str) -> np.ndarray:
    """``value`` as an array of numbers or booleans, or Wrong saying what it is."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):  # a ragged list
        array = None
    if array is None or array.dtype.kind not in "biuf":
        raise Wrong(f"{name}: expected an array of numbers, got {type(value).__name__}")
    return array


def library_error(what: str, exc: Exception) -> str:
    """A library error as feedback: its kind and what went wrong, without the fix it
    suggests (Poplar-style messages often end with the answer: "Fix: ...", "use 16 or
    24"), so that feedback never hands out the solution."""
    return f"{what}: {type(exc).__name__}: {without_fix(str(exc))}"


def without_fix(text: str) -> str:
    """``text``'s first line, cut before any suggested fix."""
    first = text.split("\n")[0]
    for cut in (" Fix:", " fix:", "; use ", ", use ", " (use ", "; e.g. ", "; try ",
                " Vertices of one compute set"):
        if cut in first:
            first = first.split(cut)[0]
    return first.rstrip(" .;,") + "."
