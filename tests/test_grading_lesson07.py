"""Lesson 07's checks: the solutions score full marks, the untouched exercises score zero
("not solved yet", no crash), and wrong answers get feedback that says what is wrong."""

import pytest

from ipukit.grading import feedback, lesson07
from tests.lessons import SOLVED_AND_UNTOUCHED, grade_exercises

NOTEBOOK = "07_sharding.ipynb"
CHECKS = {"07.1": ("check_selection_order", "select_ipus"),
          "07.2": ("check_balance", "balance"),
          "07.3": ("check_sharded_cycles", "sharded_cycles"),
          "07.4": ("check_time_split", "split_stages")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    rows = grade_exercises(lesson07, "07", NOTEBOOK, CHECKS, folder, status)
    assert sum(r.max_points for r in rows) >= 7



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


def test_ladder_has_rungs_and_rails():
    assert lesson07.ladder_links(4) == {(0, 1), (2, 3), (0, 2), (1, 3)}


def test_selection_order_feedback():
    r = lesson07.check_selection_order(lambda order, n: list(range(n)))
    assert r.status == feedback.FAILED
    assert "shards 1 and 2 are on IPUs 1 and 2, which have no IPU-Link" in r.message

    def snake_as_hoof(order, n):  # a correct snake is not a hoof: its ends are far apart
        if order == "zigzag":
            return list(range(n))
        return [a for j in range(0, n, 2) for a in ((j, j + 1) if j % 4 == 0 else (j + 1, j))]

    r = lesson07.check_selection_order(snake_as_hoof)
    assert "select_ipus('hoof', 6)" in r.message and "the last shard and the first" in r.message
    r = lesson07.check_selection_order(lambda order, n: [0] * n)
    assert "each of IPUs 0 to 1 once" in r.message


def _fastest_ignoring_memory(cycles, nbytes, q, cap):
    return lesson07.best_time_split(cycles, nbytes, q, 10 ** 12)[1]


def test_time_split_feedback():
    r = lesson07.check_time_split(_fastest_ignoring_memory)
    assert "more than 7" in r.message and "fastest if memory did not matter" in r.message

    def balance_bytes(cycles, nbytes, q, cap):  # 07.2's answer: the wrong objective
        return lesson07.best_time_split(nbytes, nbytes, q, cap)[1]

    r = lesson07.check_time_split(balance_bytes)
    assert "slowest stage takes" in r.message and r.picture is not None
    assert "a fastest split that fits" in r.text()
    r = lesson07.check_time_split(lambda c, b, q, cap: lesson07.best_time_split(
        c, b, q, cap)[1] or [0] * (len(c) - 1) + [1])
    assert "no split fits in 50 bytes per IPU, so return None" in r.message


def test_time_split_reference_on_a_hand_case():
    # 2 IPUs of 7 bytes: the fastest split [0 | 1 1 1 1 1] (50 cycles) puts 10 bytes on
    # IPU 1; of the splits that fit, [0 0 0 0 | 1 1] is fastest (80 cycles)
    cycles, nbytes = [50, 10, 10, 10, 10, 10], [1, 1, 1, 1, 1, 6]
    assert lesson07.best_time_split(cycles, nbytes, 2, 100) == (50, [0, 1, 1, 1, 1, 1])
    assert lesson07.best_time_split(cycles, nbytes, 2, 7) == (80, [0, 0, 0, 0, 1, 1])
    assert lesson07.best_time_split(cycles, nbytes, 2, 5) == (None, None)
