"""Lesson 07's checks: the solutions score full marks, the untouched exercises score zero
("not solved yet", no crash), and wrong answers get feedback that says what is wrong."""

import pytest

from ipukit.grading import feedback, lesson07
from tests.lessons import SOLVED_AND_UNTOUCHED, grade_exercises

NOTEBOOK = "07_sharding.ipynb"
CHECKS = {"07.1": ("check_static_bytes", "static_bytes_per_ipu"),
          "07.2": ("check_balance", "balance"),
          "07.3": ("check_sharded_cycles", "sharded_cycles")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    rows = grade_exercises(lesson07, "07", NOTEBOOK, CHECKS, folder, status)
    assert sum(r.max_points for r in rows) >= 7


def test_static_bytes_feedback():
    r = lesson07.check_static_bytes(lambda p, m, n, s: [4 * sum(
        x for x, q in zip(p, m) if q == i) for i in range(n)])
    assert r.status == feedback.FAILED and "That is the weights alone" in r.message
    r = lesson07.check_static_bytes(lambda p, m, n, s: [8 * sum(
        x for x, q in zip(p, m) if q == i) for i in range(n)])
    assert "left out the optimiser state" in r.message and "hint:" in r.message
    r = lesson07.check_static_bytes(lambda p, m, n, s: [0] * (n + 1))
    assert "expected 2 numbers" in r.message
    r = lesson07.check_static_bytes(lambda p, m, n, s: 1 / 0)
    assert "ZeroDivisionError" in r.message


def test_balance_feedback():
    r = lesson07.check_balance(lambda b, n: [0] * len(b))
    assert "uses 1 of the 2 IPUs" in r.message
    r = lesson07.check_balance(lambda b, n: [0, 0, 1, 1])  # L0 and L1 together
    assert "IPU 0 holds 1,067,008 bytes" in r.message and "only 803,840" in r.message
    r = lesson07.check_balance(lambda b, n: [1, 0, 0, 0])
    assert "ascending" in r.message


@pytest.mark.parametrize("layer_bytes,n,best", [([5, 5, 5, 5, 5, 5], 3, 10),
                                                ([1, 9, 1, 1, 1, 1, 1, 9], 3, 10),
                                                ([7, 1, 1, 1], 2, 7), ([3, 3], 2, 3)])
def test_best_split_by_hand(layer_bytes, n, best):
    assert lesson07.best_split(layer_bytes, n) == best


def test_sharded_cycles_feedback():
    r = lesson07.check_sharded_cycles(lambda f, b, lf, lb, s, g: g * (sum(f) + sum(b)))
    assert "That is the compute alone" in r.message
    r = lesson07.check_sharded_cycles(
        lambda f, b, lf, lb, s, g: g * (sum(f) + sum(b) + sum(lf) + sum(lb)))
    assert "also ends with a sync" in r.message
    r = lesson07.check_sharded_cycles(
        lambda f, b, lf, lb, s, g: sum(f) + sum(b) + sum(lf) + sum(lb) + (2 * len(f) - 1) * s)
    assert "That is one micro-batch" in r.message
    # 2N syncs: the merged last stage (TF's PipelineStageMerger) is one step, not two
    r = lesson07.check_sharded_cycles(
        lambda f, b, lf, lb, s, g: g * (sum(f) + sum(b) + sum(lf) + sum(lb) + 2 * len(f) * s))
    assert "share one step" in r.message
    r = lesson07.check_sharded_cycles(lambda f, b, lf, lb, s, g: g * max(f + b))
    assert "only one IPU works at a time" in r.message


def test_docstring_example_runs():
    import doctest

    result = doctest.testmod(lesson07)
    assert result.failed == 0 and result.attempted > 0
