"""Lesson 04's checks (issues 16, 26, 31): judged checks; the solution scores full marks,
the untouched exercise zero, and plausible mistakes in the learner's programs and mappings
lose the points, with a message naming the case."""

import numpy as np
import pytest

import ipukit as ipu
from ipukit.grading import feedback, lesson04
from ipukit.poplibs import poputil
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    judged_checks_hold,
    solution_trials,
    to_judge,
)

NOTEBOOK = "04_compute_sets_races_exchange.ipynb"
CALLS = {"04.1": ("check_reduction_cycles", "reduction_cycles"),
         "04.2": ("check_smoothing", "build_smoothing"),
         "04.3": ("check_automaton", "build_automaton"),
         "04.4": ("check_mapping", "map_near_readers")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_score_zero(folder, status):
    rows = grade_exercises(lesson04, "04", NOTEBOOK, CALLS, folder, status)
    assert sum(r.max_points for r in rows) == 10
    for r in rows:
        assert r.star == (status == feedback.PASSED and bool(r.cost))


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("04", NOTEBOOK)


def test_a_cost_without_the_combine_sync_names_the_case_then_the_supersteps():
    def no_second_sync(tiles, n, strategy):
        sync = ipu.IPUModel().create_device().target.sync_cycles
        if strategy == "gather":
            return sync + (tiles - 1) * n + 6 * (10 + tiles * n + 1)
        return sync + 6 * (10 + n + 1) + (tiles - 1) + 6 * (10 + tiles + 1)

    sync = ipu.IPUModel().create_device().target.sync_cycles
    want = 2 * sync + 6 * (10 + 256 + 1) + 3 + 6 * (10 + 4 + 1)  # local sums, then combine
    feedback.reset()
    r = lesson04.check_reduction_cycles(no_second_sync, show=False)
    assert r.status == "failed" and r.message.startswith(
        f"strategy 'local', 4 tiles x 256 floats: expected {want} cycles, got {want - sync}"
        "\nhint 1")
    r = lesson04.check_reduction_cycles(no_second_sync, show=False)
    assert "the supersteps: 'local sums' (" in r.message


def smoothing_with(cls, repeat=True):
    """The reference smoothing with codelet ``cls`` (``repeat``: else once, whatever the
    count)."""
    def build(graph, v, iterations):
        n = v.shape[0]
        new = graph.add_variable(ipu.FLOAT, [n - 2], "new")
        cs = graph.add_compute_set("smooth")
        for i in range(1, n - 1):
            graph.set_tile_mapping(new[i - 1], i)
            graph.add_vertex(cs, cls, {"x": v[i - 1:i + 2], "out": new[i - 1]}, tile=i)
        step = ipu.Sequence(ipu.Execute(cs), ipu.Copy(new, v[1:-1]))
        return ipu.Repeat(iterations, step) if repeat else step

    return build


def test_smoothing_once_whatever_the_count_fails():
    r = lesson04.check_smoothing(smoothing_with(Mean3, repeat=False), show=False)
    assert r.status == "failed" and "v after 3 iterations (n=8, start [0, 9, 0, 3, 6, 0, " \
        "12, 3])" in r.message


class Mean3(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.mean(axis=-1)


def test_the_automaton_cases_show_an_extra_or_missing_generation():
    for case in lesson04.check_automaton.exercise.cases(np.random.default_rng(7)):
        k, start = case["generations"], case["_start"]
        here = lesson04.automaton(start, k)
        assert not np.array_equal(here, lesson04.automaton(start, k - 1))
        assert not np.array_equal(here, lesson04.automaton(start, k + 1))


def test_the_automaton_reference_is_rule_90():
    # rule 90 from a single 1 on a ring of 7: Sierpinski's triangle, row by row
    start = np.zeros(7, np.float32)
    start[3] = 1
    assert lesson04.automaton(start, 1).tolist() == [0, 0, 1, 0, 1, 0, 0]
    assert lesson04.automaton(start, 2).tolist() == [0, 1, 0, 0, 0, 1, 0]
    assert lesson04.automaton(start, 3).tolist() == [1, 0, 1, 0, 1, 0, 1]


class Xor(ipu.Vertex):
    left = ipu.Input(ipu.FLOAT)
    right = ipu.Input(ipu.FLOAT)
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = np.abs(self.left - self.right)


def one_step(graph, src, dst, name="step"):
    n = src.shape[0]
    cs = graph.add_compute_set(name)
    for i in range(n):
        graph.add_vertex(cs, Xor, {"left": src[(i - 1) % n], "right": src[(i + 1) % n],
                                   "out": dst[i]}, tile=i)
    return ipu.Execute(cs)


def second_buffer(graph, cells):
    other = graph.add_variable(ipu.FLOAT, [cells.shape[0]], "other")
    for i in range(cells.shape[0]):
        graph.set_tile_mapping(other[i], i)
    return other


def test_writing_in_place_is_a_race_reported_without_the_fix():
    r = lesson04.check_automaton(
        lambda g, cells, k: ipu.Repeat(k, one_step(g, cells, cells)), show=False)
    assert r.status == "failed" and "has a data race" in r.message
    assert "Fix" not in r.message and "separate tensors" not in r.message


def test_copying_every_generation_passes_without_the_star():
    def with_copies(g, cells, k):
        other = second_buffer(g, cells)
        return ipu.Repeat(k, ipu.Sequence(one_step(g, cells, other), ipu.Copy(other, cells)))

    r = lesson04.check_automaton(with_copies, show=False)
    assert r.passed and not r.star


def test_ping_pong_that_forgets_an_odd_count_is_named():
    def even_only(g, cells, k):
        other = second_buffer(g, cells)
        return ipu.Repeat(k // 2, ipu.Sequence(one_step(g, cells, other, "a"),
                                               one_step(g, other, cells, "b")))

    r = lesson04.check_automaton(even_only, show=False)
    assert r.status == "failed" and "cells holds generation 0, not 1" in r.message


def test_an_odd_count_test_that_is_not_odd_is_named():
    def mod3(g, cells, k):  # `generations % 3` for `% 2`: wrong for 3 and 4
        other = second_buffer(g, cells)
        a, b = one_step(g, cells, other, "a"), one_step(g, other, cells, "b")
        prog = ipu.Sequence(ipu.Repeat(k // 2, ipu.Sequence(a, b)))
        if k % 3:
            prog.add(one_step(g, cells, other, "c"))
            prog.add(ipu.Copy(other, cells))
        return prog

    r = lesson04.check_automaton(mod3, show=False)
    assert r.status == "failed" and "cells holds generation 5, not 4" in r.message


def test_a_wrong_neighbour_fails():
    def off_by_one(g, cells, k):
        n = cells.shape[0]
        other = second_buffer(g, cells)
        cs = g.add_compute_set("step")
        for i in range(n):
            g.add_vertex(cs, Xor, {"left": cells[i], "right": cells[(i + 1) % n],
                                   "out": other[i]}, tile=i)
        return ipu.Repeat(k, ipu.Sequence(ipu.Execute(cs), ipu.Copy(other, cells)))

    assert lesson04.check_automaton(off_by_one, show=False).status == "failed"


@pytest.mark.parametrize("mapping", [
    lambda g, x, reads: g.set_tile_mapping(x, 0),
    lambda g, x, reads: poputil.map_tensor_linearly(g, x, grain_size=1),
    lambda g, x, reads: [g.set_tile_mapping(x[i], i % g.target.num_tiles)
                         for i in range(x.shape[0])]])
def test_mappings_that_ignore_the_readers_fail_with_a_picture(mapping):
    r = lesson04.check_mapping(mapping, show=False)
    assert r.status == "failed" and "mapping each element near its readers takes" in \
        r.message
    assert r.picture["text"].startswith("your mapping:")


def test_an_unmapped_element_is_named():
    r = lesson04.check_mapping(lambda g, x, reads: g.set_tile_mapping(x[1:], 0), show=False)
    assert r.status == "failed" and "element 0 of x is not mapped" in r.message


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(lesson04).failed == 0


# -- 04.2 and 04.3 are judged on the graph (issue 26 point 1) ---------------------------------

def test_04_2_right_numbers_without_a_graph_score_nothing():
    ex, cases, sent = solution_trials("04.2", NOTEBOOK)
    assert all("v" not in feedback.public(c) and "_v" in c for c in cases)
    assert {v["codelet"] for v in sent[0]["graph"]["vertices"]} == {
        "ipukit.grading.lesson04._Mean3"}
    assert feedback.judge(ex, to_judge(sent), cases) is None
    right = [{"graph": {}, "codelets": {}, "v": lesson04.smoothing(c["_v"], c["iterations"])}
             for c in cases]
    with pytest.raises(feedback.Wrong, match="n=6, 1 iteration: your graph cannot be "
                       "rebuilt: GraphDataError"):
        feedback.judge(ex, to_judge(right), cases)
    once = [dict(s, graph=dict(s["graph"], programs=[s["graph"]["programs"][0]["Repeat"][1]]))
            for s in sent]  # the Repeat dropped by hand: one iteration whatever the count
    with pytest.raises(feedback.Wrong, match=r"v after 3 iterations \(n=8, start "):
        feedback.judge(ex, to_judge(once), cases)


def test_04_2_the_learners_codelet_is_checked_apart():
    class Sum3(Mean3):
        def compute(self):
            self.out[...] = self.x.sum(axis=-1)

    r = lesson04.check_smoothing(smoothing_with(Sum3), show=False)
    assert r.status == "failed" and r.message.startswith(
        "n=6, 1 iteration: your codelet Sum3 on x = [")
    assert "(the mean of x)" in r.message


def test_04_3_the_judge_runs_the_graph_from_its_own_start_and_counts_its_cycles():
    ex, cases, sent = solution_trials("04.3", NOTEBOOK)
    assert all("start" not in feedback.public(c) and "_start" in c for c in cases)
    assert [list(s["codelets"]) for s in sent] == [["Xor"]] * len(cases)
    assert feedback.judge(ex, to_judge(sent), cases).star  # the judge's own cycles
    right = [{"graph": {}, "codelets": {}, "cycles": 0,
              "cells": lesson04.automaton(c["_start"], c["generations"])} for c in cases]
    with pytest.raises(feedback.Wrong, match="5 cells, 1 generation: your graph cannot be "
                       "rebuilt"):
        feedback.judge(ex, to_judge(right), cases)
    no_copy = [dict(s, graph=dict(s["graph"], programs=[{"Sequence": s["graph"]["programs"][0][
        "Sequence"][:-1]}])) for s in sent]  # odd counts leave the result in the other buffer
    with pytest.raises(feedback.Wrong, match="5 cells, 1 generation: cells holds generation "
                       "0, not 1"):
        feedback.judge(ex, to_judge(no_copy), cases)


def test_04_3_the_learners_codelet_is_checked_on_every_pair_of_cells():
    class Plus(Xor):
        def compute(self):
            self.out[...] = np.abs(self.left + self.right)

    def build(g, cells, k):
        other = second_buffer(g, cells)
        return ipu.Repeat(k, ipu.Sequence(ipu.Execute(_step(g, cells, other, Plus)),
                                          ipu.Copy(other, cells)))

    r = lesson04.check_automaton(build, show=False)
    assert r.status == "failed" and "your codelet Plus on left = 1, right = 1: " \
        "expected out 0 (|left - right|), got 2" in r.message


def _step(graph, src, dst, cls):
    n = src.shape[0]
    cs = graph.add_compute_set("step")
    for i in range(n):
        graph.add_vertex(cs, cls, {"left": src[(i - 1) % n], "right": src[(i + 1) % n],
                                   "out": dst[i]}, tile=i)
    return cs
