"""Lesson 01's checks (issue 16): the solution scores full marks, the untouched exercise
zero, and plausible mistakes in the learner's graphs and placements lose the points."""

import re

import numpy as np
import pytest

import ipukit as ipu
from ipukit.grading import feedback, lesson01
from tests.lessons import SOLVED_AND_UNTOUCHED, grade_exercises

NOTEBOOK = "01_ipu_and_bsp.ipynb"
CALLS = {"01.1": ("check_scale_superstep", "build_scale"),
         "01.2": ("check_placement", "place_vertices"),
         "01.3": ("check_superstep_cycles", "superstep_cycles"),
         "01.4": ("check_ring_difference", "build_ring_difference")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_score_zero(folder, status):
    rows = grade_exercises(lesson01, "01", NOTEBOOK, CALLS, folder, status)
    assert sum(r.max_points for r in rows) == 9
    for r in rows:  # every budgeted exercise of the solutions earns its star
        assert r.star == (status == feedback.PASSED and bool(r.cost))


def scale_pieces(short=False, overlap=False):
    def build(graph, x, y):
        cs = graph.add_compute_set("scale")
        for tile, runs in enumerate(graph.get_tile_mapping(x)):
            for begin, end in runs:
                stop = end - 1 if short else end
                if overlap:
                    graph.add_vertex(cs, lesson01.Scale, {"x": x[begin:end],
                                                          "out": y[begin:end]}, tile=tile)
                if stop > begin:
                    graph.add_vertex(cs, lesson01.Scale, {"x": x[begin:stop],
                                                          "out": y[begin:stop]}, tile=tile)
        return ipu.Execute(cs)

    return build


def test_a_piece_one_element_short_leaves_y_wrong():
    r = lesson01.check_scale_superstep(scale_pieces(short=True), show=False)
    assert r.status == "failed" and "y[3]: expected" in r.message


def test_two_vertices_writing_one_element_is_a_race_named_without_the_fix():
    r = lesson01.check_scale_superstep(scale_pieces(overlap=True), show=False)
    assert r.status == "failed" and "does not compile: ComputeSetRaceError" in r.message


def test_one_vertex_per_tile_passes_without_the_star():
    r = lesson01.check_scale_superstep(scale_pieces(), show=False)
    assert r.passed and not r.star and "match it for a ★" in r.cost


@pytest.mark.parametrize("place, shown", [
    (lambda c, t: [i % t for i in range(len(c))], "(cycles [300, 10, 10, 10"),
    (lambda c, t: [i * t // len(c) for i in range(len(c))], "(cycles [500, 500"),
    (lambda c, t: [0] * len(c), "(cycles [300, 10")])
def test_naive_placements_fail_with_a_picture_of_the_tiles(place, shown):
    r = lesson01.check_placement(place, show=False)
    assert r.status == "failed" and shown in r.message
    assert "greedy placement takes" in r.message
    assert "your tiles' compute cycles" in r.picture["text"] and "<table" in r.picture["html"]


def test_a_placement_that_ignores_the_workers_passes_without_the_star():
    def by_sum(cycles, num_tiles):  # balances the sums, not 6 x the heaviest worker
        load, owner = [0] * num_tiles, [0] * len(cycles)
        for i in sorted(range(len(cycles)), key=lambda i: -cycles[i]):
            t = int(np.argmin(load))
            owner[i], load[t] = t, load[t] + cycles[i]
        return owner

    r = lesson01.check_placement(by_sum, show=False)
    assert r.passed and not r.star


def test_a_tile_that_does_not_exist_is_named():
    r = lesson01.check_placement(lambda c, t: [t] * len(c), show=False)
    assert r.status == "failed" and "tile numbers in 0..3" in r.message


class Diff(ipu.Vertex):
    left = ipu.Input(ipu.Vector(ipu.FLOAT))
    right = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.right - self.left


def ring(left, right):
    def build(graph, x, out):
        tiles = x.shape[0]
        cs = graph.add_compute_set("difference")
        for t in range(tiles):
            graph.add_vertex(cs, Diff, {"left": x[left(t, tiles)], "right": x[right(t, tiles)],
                                        "out": out[t]}, tile=t)
        return ipu.Execute(cs)

    return build


class NegatedDiff(Diff):
    def compute(self):
        self.out[...] = self.left - self.right


def test_01_4_the_learners_codelet_is_checked_apart_and_named():
    def build(graph, x, out):
        tiles = x.shape[0]
        cs = graph.add_compute_set("difference")
        for t in range(tiles):  # wired the wrong way round, and the codelet too
            graph.add_vertex(cs, NegatedDiff, {"left": x[(t + 1) % tiles],
                                               "right": x[(t - 1) % tiles], "out": out[t]},
                             tile=t)
        return ipu.Execute(cs)

    r = lesson01.check_ring_difference(build, show=False)
    assert r.status == "failed"
    assert "your codelet NegatedDiff: out is the negative of what was asked" in r.message


def test_01_4_the_kernel_sends_the_graph_and_the_codelets_rows_only():
    ex, cases, graphs = solution_graphs("01.4")
    assert all("x" not in feedback.public(c) for c in cases)
    assert all(set(g) == {"graph", "codelets"} and list(g["codelets"]) == ["Difference"]
               for g in graphs)
    assert {v["codelet"] for v in graphs[0]["graph"]["vertices"]} == {
        "ipukit.grading.lesson01._Difference"}
    feedback.judge(ex, sent(graphs), cases)
    forged = [{"graph": {}, "codelets": {}} for _ in cases]
    with pytest.raises(feedback.Wrong, match="cannot be rebuilt"):
        feedback.judge(ex, sent(forged), cases)


def test_the_ring_solution_and_its_mistakes():
    assert lesson01.check_ring_difference(
        ring(lambda t, n: (t - 1) % n, lambda t, n: (t + 1) % n), show=False).passed
    swapped = lesson01.check_ring_difference(
        ring(lambda t, n: (t + 1) % n, lambda t, n: (t - 1) % n), show=False)
    assert "the negative of what was asked" in swapped.message
    clamped = lesson01.check_ring_difference(  # no wrap-around at the ends
        ring(lambda t, n: max(t - 1, 0), lambda t, n: min(t + 1, n - 1)), show=False)
    assert clamped.status == "failed" and "out[0, 0]: expected" in clamped.message
    off_by_one = lesson01.check_ring_difference(
        ring(lambda t, n: (t - 1) % n, lambda t, n: t), show=False)
    assert off_by_one.status == "failed"


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(lesson01).failed == 0


# -- the judged contract (issue 26): plain data both ways, points only from the judge --------

import json  # noqa: E402

from ipukit.grading import plain  # noqa: E402
from tests.lessons import notebook_namespace  # noqa: E402

EXERCISES = {ex_id: getattr(lesson01, check).exercise for ex_id, (check, _) in CALLS.items()}


def sent(values):
    """Trial outputs as they reach the judge."""
    return json.loads(json.dumps([{"ok": plain.encode(v)} for v in values]))


@pytest.mark.parametrize("ex_id", CALLS)
def test_cases_and_trials_are_plain_data(ex_id):
    ex = EXERCISES[ex_id]
    ns = notebook_namespace("solutions", NOTEBOOK)
    cases = feedback.draw_cases(ex, np.random.default_rng(5))  # plain.encode'd each case
    assert len(cases) >= 4 and ex.answers == (CALLS[ex_id][1],)
    outputs = feedback.run_trials(ex, [feedback.public(c) for c in cases],
                                  tuple(ns[n] for n in ex.answers))
    assert [list(o) for o in outputs] == [["ok"]] * len(cases)
    cost = feedback.judge(ex, json.loads(json.dumps(outputs)), cases)  # over the wire
    assert (cost is not None and cost.star) == (ex_id in ("01.1", "01.2"))


def solution_graphs(ex_id):
    """What the solution's trial sends for each notebook case of ``ex_id``."""
    ex = EXERCISES[ex_id]
    ns = notebook_namespace("solutions", NOTEBOOK)
    cases = feedback.notebook_cases(ex)
    return ex, cases, [ex.trial(feedback.public(c), ns[ex.answers[0]]) for c in cases]


def test_01_1_numbers_without_a_graph_score_nothing():
    """Issue 26 point 1: the kernel sends its graph, not y; x stays with the judge."""
    ex, cases, _ = solution_graphs("01.1")
    assert all("x" not in feedback.public(c) for c in cases)
    right = [{"y": 2 * c["_x"], "cycles": 0} for c in cases]  # even knowing x
    with pytest.raises(feedback.Wrong, match="your graph cannot be rebuilt: GraphDataError"):
        feedback.judge(ex, sent(right), cases)


def test_01_1_a_hand_written_graph_is_run_by_the_judge_on_its_own_x(capfd):
    ex, cases, graphs = solution_graphs("01.1")
    cost = feedback.judge(ex, sent(graphs), cases)  # the star: the judge's own run
    assert cost.star and cost.used == sum(c["_budget"] for c in cases)
    copied = [dict(g, programs=[{"Copy": [{"tensor": g["host_writes"]["x"]},
                                          {"tensor": g["host_reads"]["y"]}, None]}])
              for g in graphs]  # y = x, written by hand
    with pytest.raises(feedback.Wrong, match=r"\[4, 4, 4, 4\] elements on tiles 0-3: y\[0\]: "
                       "expected"):
        feedback.judge(ex, sent(copied), cases)
    moved = [dict(g, pools={"float32": [dict(v, mapping=np.array([[0, 0, len(c["_x"])]]))
                                        for v in g["pools"]["float32"]]})
             for g, c in zip(graphs, cases)]  # x and y all on tile 0: no exchange to plan
    with pytest.raises(feedback.Wrong, match="does not keep the exercise's tensor x"):
        feedback.judge(ex, sent(moved), cases)
    printing = [dict(g, programs=[{"Sequence": [{"PrintTensor": [
        "\x1b[2J", g["host_writes"]["x"], {}]}, g["programs"][0]]}]) for g in graphs]
    assert feedback.judge(ex, sent(printing), cases).star  # a program that prints: fine,
    assert capfd.readouterr() == ("", "")  # but not on the judge's stdout or stderr
    looping = [dict(g, programs=[{"Repeat": [10**9, g["programs"][0]]}]) for g in graphs]
    with pytest.raises(feedback.Wrong, match="steps"):
        feedback.judge(ex, sent(looping), cases)


def test_01_1_a_codelet_not_of_the_kit_is_refused_by_name():
    class Twice(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.Vector(ipu.FLOAT))

        def compute(self):
            self.out[...] = 2 * self.x

    def build(graph, x, y):
        cs = graph.add_compute_set("scale")
        graph.add_vertex(cs, Twice, {"x": x, "out": y}, tile=0)
        return ipu.Execute(cs)

    r = lesson01.check_scale_superstep(build, show=False)
    assert r.status == "failed" and "runs codelet 'Twice', which is not one of the kit's" \
        in r.message


def test_01_2_cycles_are_worked_out_by_the_judge_from_the_placement():
    ex = EXERCISES["01.2"]
    cases = feedback.notebook_cases(ex)
    greedy = [lesson01.reference_placement(c["cycles"], c["num_tiles"]) for c in cases]
    assert feedback.judge(ex, sent(greedy), cases).star
    crowded = [[0] * len(c["cycles"]) for c in cases]  # everything on tile 0
    with pytest.raises(feedback.Wrong, match="48 vertices on 4 tiles .*: your compute phase"):
        feedback.judge(ex, sent(crowded), cases)
    with pytest.raises(feedback.Wrong, match="the tile of a vertex: expected a whole number"):
        feedback.judge(ex, sent([[0.5] * len(c["cycles"]) for c in cases]), cases)


@pytest.mark.parametrize("build, message", [
    (lambda graph, x, y: None, "return a program, got None"),
    (scale_pieces(short=True), r"x and y with \[4, 4, 4, 4\] elements on tiles 0-3: y\[3\]"),
])
def test_01_1_wrong_answers_name_the_case(build, message):
    r = lesson01.check_scale_superstep(build, show=False)
    assert r.status == "failed" and re.search(message, r.message), r.message


def test_01_4_a_drawn_ring_catches_an_answer_right_on_three_tiles_only():
    def three(graph, x, out):  # right for T = 3 only: left and right swapped by T - 2
        tiles = x.shape[0]
        cs = graph.add_compute_set("difference")
        for t in range(tiles):
            graph.add_vertex(cs, Diff, {"left": x[(t - 1) % tiles],
                                        "right": x[(t + 1 - 3 + tiles) % tiles],
                                        "out": out[t]}, tile=t)
        return ipu.Execute(cs)

    r = lesson01.check_ring_difference(three, show=False)
    assert r.status == "failed" and r.message.startswith("4 tiles, rows of 3: out")


def _popops_scale(graph, x, y):  # popops places the vertices: no Scale vertex of yours
    from ipukit.poplibs import popops

    prog = ipu.Sequence()
    prog.add(ipu.Copy(popops.add(graph, x, x, prog, "2x"), y))
    return prog


def _popops_ring(graph, x, out):  # popops.sub on the neighbours' rows: no codelet written
    from ipukit.poplibs import popops

    t, prog = x.shape[0], ipu.Sequence()
    right = ipu.concat([x[(i + 1) % t:(i + 1) % t + 1] for i in range(t)])
    left = ipu.concat([x[(i - 1) % t:(i - 1) % t + 1] for i in range(t)])
    prog.add(ipu.Copy(popops.sub(graph, right, left, prog, "d"), out))
    return prog


def test_popops_does_not_score_the_graph_exercises():
    """The right values from popops' ops score nothing: 01.1 asks for Scale vertices placed
    by you, 01.4 for your codelet (issue 26: kit code must not have the exercise's point)."""
    r = lesson01.check_scale_superstep(_popops_scale, show=False)
    assert r.status == feedback.FAILED
    assert "your graph computes with" in r.message and "Scale codelet alone" in r.message
    r = lesson01.check_ring_difference(_popops_ring, show=False)
    assert r.status == feedback.FAILED
    assert "build it from your difference codelet alone" in r.message
