"""Graded exercises: the checks of every lesson, the scoreboard and solution markers.

Lesson NN's checks live in ``ipukit.grading.lessonNN`` (``from ipukit.grading import
lesson01``). A learner writes a function, a codelet or a program and calls its check,
which answers at once: passed, what is wrong (expected vs got, the tile, vertex or step,
sometimes a picture of what the code did next to what was expected) with a hint that
gets more specific with each failed attempt, or not solved yet.

>>> from ipukit.grading import lesson01
>>> r = lesson01.check_superstep_cycles(lambda sync, *args: sync)  # doctest: +ELLIPSIS
WRONG · Exercise 01.3 · the cost of one BSP superstep: 0/2 points
   ...
>>> r.points, r.max_points
(0, 2)

``python -m ipukit.grade NOTEBOOK`` grades a whole notebook in a fresh kernel;
``python -m ipukit.grading.make_exercises`` regenerates ``exercises/`` from
``solutions/`` (``# BEGIN SOLUTION`` / ``# END SOLUTION`` regions become stubs).
How to write a check: :mod:`ipukit.grading.feedback`.
"""

from .feedback import (
    EXERCISES,
    Cost,
    Exercise,
    Picture,
    Result,
    Wrong,
    exercise,
    format_scoreboard,
    plural,
    reset,
    results,
    scoreboard,
    set_mode,
    side_by_side,
    tile_grid,
    timeline,
)
from .markers import SolutionMarkerError, strip_solutions

__all__ = [
    "EXERCISES", "Cost", "Exercise", "Picture", "Result", "SolutionMarkerError", "Wrong",
    "exercise", "format_scoreboard", "plural", "reset", "results", "scoreboard", "set_mode",
    "side_by_side", "strip_solutions", "tile_grid", "timeline",
]
