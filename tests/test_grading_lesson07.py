"""Lesson 07's checks: the solutions score full marks, the untouched exercises score zero
("not solved yet", no crash), and wrong answers get feedback that says what is wrong."""

import itertools

import numpy as np
import pytest

from ipukit.grading import feedback, lesson07
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    judged_checks_hold,
)

NOTEBOOK = "07_sharding.ipynb"
CHECKS = {"07.1": ("check_selection_order", "select_ipus"),
          "07.2": ("check_balance", "balance"),
          "07.3": ("check_sharded_cycles", "sharded_cycles"),
          "07.4": ("check_time_split", "split_stages")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    rows = grade_exercises(lesson07, "07", NOTEBOOK, CHECKS, folder, status)
    assert sum(r.max_points for r in rows) == 10


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("07", NOTEBOOK)


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


def test_selection_on_16_ipus_is_tensorflows_documented_order():
    # SelectionOrder's docstring (graphcore/tensorflow, tensorflow/python/ipu/config.py)
    assert lesson07.TF_SELECTION_16["snake"][:8] == [0, 1, 3, 2, 4, 5, 7, 6]
    assert lesson07.TF_SELECTION_16["hoof"][7:9] == [14, 15]
    for order in ("snake", "hoof"):
        got = lesson07.TF_SELECTION_16[order]
        pairs = list(zip(got, got[1:])) + ([(got[-1], got[0])] if order == "hoof" else [])
        assert all(p in lesson07.ladder_links(16) or p[::-1] in lesson07.ladder_links(16)
                   for p in pairs)

    def snake_from_ipu_1(order, n):  # a snake too, but not TensorFlow's: it starts at IPU 1
        if order != "snake":
            return _solution_selection(order, n)
        return [a for j in range(0, n, 2) for a in ((j + 1, j) if j % 4 == 0 else (j, j + 1))]

    r = lesson07.check_selection_order(snake_from_ipu_1)
    assert "select_ipus('snake', 16): got [1, 0, 2, 3, 5, 4" in r.message
    assert "which has the links, but TensorFlow documents SNAKE on 16 IPUs as [0, 1, 3, 2" \
        in r.message


def _solution_selection(order, n):
    if order == "zigzag":
        return list(range(n))
    if order == "snake":
        return [a for j in range(0, n, 2) for a in ((j, j + 1) if j % 4 == 0 else (j + 1, j))]
    return list(range(0, n, 2)) + list(range(n - 1, 0, -2))


def _with_empty_groups(layer_bytes, num_ipus):
    """07.2 with cut positions from 0 (an empty first group allowed): the first best split
    found may leave IPU 0 empty."""
    n, best = len(layer_bytes), None
    for cuts in itertools.combinations(range(0, n), num_ipus - 1):
        edges = (0, *cuts, n)
        fullest = max(sum(layer_bytes[a:b]) for a, b in zip(edges, edges[1:]))
        if best is None or fullest < best[0]:
            best = (fullest, edges)
    return [q for q, (a, b) in enumerate(zip(best[1], best[1][1:])) for _ in range(a, b)]


def test_an_empty_ipu_fails_on_a_dominant_layer():
    r = lesson07.check_balance(_with_empty_groups)
    assert r.status == "failed"
    assert "layer_bytes=[50, 1, 1, 1], num_ipus=3: got [1, 2, 2, 2]; the layers form a chain" \
        in r.message

    def time_with_empty_groups(cycles, nbytes, q, cap):  # 07.4's solution, cuts from 0
        n, best = len(cycles), None
        for cuts in itertools.combinations(range(0, n), q - 1):
            edges = list(zip((0, *cuts), (*cuts, n)))
            if max(sum(nbytes[a:b]) for a, b in edges) > cap:
                continue
            slowest = max(sum(cycles[a:b]) for a, b in edges)
            if best is None or slowest < best[0]:
                best = (slowest, [k for k, (a, b) in enumerate(edges) for _ in range(a, b)])
        return None if best is None else best[1]

    r = lesson07.check_time_split(time_with_empty_groups)
    assert r.status == "failed"
    assert "split_stages(layer_cycles=[100, 1, 1, 1], layer_bytes=[1, 1, 1, 1], num_ipus=3, " \
        "bytes_per_ipu=10): got [1, 2, 2, 2]; stages are consecutive layers" in r.message


def test_sharded_cycles_cases_include_one_stage_and_random_models():
    cases = lesson07._sharded_cases(np.random.default_rng(3))
    assert [len(c["fwd"]) for c in cases][:4] == [4, 3, 5, 1]
    one = cases[3]  # one stage: its F and B share the one step of each micro-batch
    assert one["_expected"] == one["g"] * (one["fwd"][0] + one["bwd"][0] + one["sync"])
    r = lesson07.check_sharded_cycles(lambda f, b, lf, lb, s, g: 1 / 0)
    assert r.message.startswith("4 stage(s), gradient_accumulation=2: fwd=[50208.0, ")
    assert "your code raised ZeroDivisionError" in r.message
