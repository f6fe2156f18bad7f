"""Lesson 03's checks (issues 16, 26, 31): judged checks; the solution scores full marks,
the untouched exercise zero, and plausible mistakes in the learner's codelets and graphs
lose the points, with a message naming the case."""

import numpy as np
import pytest

import ipukit as ipu
from ipukit.grading import lesson03
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    judged_checks_hold,
    notebook_namespace,
)

NOTEBOOK = "03_vertices_codelets.ipynb"
CALLS = {"03.1": ("check_dot_product", ("PartialDot", "ReduceSum", "build_dot")),
         "03.2": ("check_running_mean", ("running_mean_codelet",)),
         "03.3": ("check_vector_add", ("Add", "vector_add")),
         "03.4": ("check_softmax", ("Softmax",)),
         "03.5": ("check_rms_half", ("RmsHalf",))}


@pytest.fixture(scope="module")
def solved():
    return notebook_namespace("solutions", NOTEBOOK)


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_score_zero(folder, status):
    rows = grade_exercises(lesson03, "03", NOTEBOOK, CALLS, folder, status)
    assert sum(r.max_points for r in rows) == 12


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("03", NOTEBOOK)


def test_the_budget_star_goes_to_popops_placement(solved):
    r = lesson03.check_vector_add(solved["Add"], solved["vector_add"], show=False)
    assert r.star and "within the budget" in r.cost


class SumWithoutAxis(ipu.Vertex):  # right one vertex at a time, wrong all at once
    a = ipu.Input(ipu.Vector(ipu.FLOAT))
    b = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = (self.a * self.b).sum()


def test_a_partial_dot_without_axis_fails_in_array_mode(solved):
    r = lesson03.check_dot_product(SumWithoutAxis, solved["ReduceSum"], _dot_with(
        SumWithoutAxis, solved), show=False)
    assert r.status == "failed" and "all vertices of a class in one array operation" in \
        r.message


def _dot_with(partial_cls, solved, drop_tail=False, piece=lambda lo, hi, n: slice(lo, hi)):
    def build(graph, a, b, out, pieces):
        n, tiles = a.shape[0], graph.target.num_tiles
        partial = graph.add_variable(ipu.FLOAT, [pieces], "partial")
        size = n // pieces  # the tail is lost when pieces does not divide n
        bounds = [p * size for p in range(pieces)] + [size * pieces if drop_tail else n]
        split, reduce = graph.add_compute_set("split"), graph.add_compute_set("reduce")
        for p in range(pieces):
            graph.set_tile_mapping(partial[p], p % tiles)
            s = piece(bounds[p], bounds[p + 1], n)
            graph.add_vertex(split, partial_cls, {"a": a[s], "b": b[s], "out": partial[p]},
                             tile=p % tiles)
        graph.add_vertex(reduce, solved["ReduceSum"], {"partials": partial, "out": out[0]},
                         tile=0)
        return ipu.Sequence(ipu.Execute(split), ipu.Execute(reduce))

    return build


def test_pieces_that_miss_the_tail_fail(solved):
    assert lesson03.check_dot_product(solved["PartialDot"], solved["ReduceSum"], _dot_with(
        solved["PartialDot"], solved), show=False).passed
    r = lesson03.check_dot_product(solved["PartialDot"], solved["ReduceSum"], _dot_with(
        solved["PartialDot"], solved, drop_tail=True), show=False)
    assert r.status == "failed" and r.message.startswith(
        "a · b with n=101 on 8 tiles, pieces=6: a[96] is read by 0 PartialDot vertices; the "
        "pieces must cover a exactly once")


def test_pieces_that_are_empty_or_overlap_fail_naming_the_vertex(solved):
    # hi = bounds[p - 1]: vertex 0 reads all of a (the value is right), the others nothing
    def whole_then_empty(lo, hi, n):
        return slice(0, n) if lo == 0 else slice(lo, lo)

    r = lesson03.check_dot_product(solved["PartialDot"], solved["ReduceSum"], _dot_with(
        solved["PartialDot"], solved, piece=whole_then_empty), show=False)
    assert r.status == "failed" and r.message.startswith(
        "a · b with n=12 on 4 tiles, pieces=4: PartialDot vertex 1 reads no element of a")

    def one_more(lo, hi, n):  # each piece also reads the next piece's first element
        return slice(lo, min(hi + 1, n))

    r = lesson03.check_dot_product(solved["PartialDot"], solved["ReduceSum"], _dot_with(
        solved["PartialDot"], solved, piece=one_more), show=False)
    assert r.status == "failed" and \
        "a[3] is read by 2 PartialDot vertices; the pieces must cover a exactly once" in \
        r.message


def test_one_compute_set_is_not_a_split_and_reduce(solved):
    def one_set(graph, a, b, out, pieces):
        prog = solved["build_dot"](graph, a, b, out, pieces)
        return prog.programs[0] if hasattr(prog, "programs") else prog

    r = lesson03.check_dot_product(solved["PartialDot"], solved["ReduceSum"], one_set,
                                   show=False)
    assert r.status == "failed"


def test_state_must_be_state_and_the_mean_must_accumulate():
    class CountAsOutput(ipu.Vertex):
        x = ipu.Input(ipu.FLOAT)
        total = ipu.InOut(ipu.FLOAT)
        count = ipu.Output(ipu.FLOAT)
        mean = ipu.Output(ipu.FLOAT)

    r = lesson03.check_running_mean(lambda: CountAsOutput, show=False)
    assert "RunningMean" not in r.message and "count should be ipu.State(ipu.FLOAT)" in \
        r.message

    class MeanOfThisRun(ipu.Vertex):
        x = ipu.Input(ipu.FLOAT)
        total = ipu.InOut(ipu.FLOAT)
        count = ipu.State(ipu.FLOAT)
        mean = ipu.Output(ipu.FLOAT)

        def compute(self):
            self.total[...] = self.total + self.x
            self.count[...] = self.count + 1
            self.mean[...] = self.x  # forgets the history

    r = lesson03.check_running_mean(MeanOfThisRun, show=False)
    assert r.status == "failed" and r.message.startswith("mean after run 2")
    # the second failure of 03.2 in this test: the hint has moved on to the concept
    assert r.message.splitlines()[-1] == "hint 2 of 3: " + lesson03.check_running_mean \
        .exercise.hints[1]


def test_an_off_by_one_piece_is_drawn_on_the_tiles(solved):
    def short_pieces(graph, a, b, out):
        cs = graph.add_compute_set("add")
        for tile, runs in enumerate(graph.get_tile_mapping(a)):
            for begin, end in runs:
                s = slice(begin, max(begin, end - 1))  # one element short
                if s.stop > s.start:
                    graph.add_vertex(cs, solved["Add"], {"x": a[s], "y": b[s],
                                                         "out": out[s]}, tile=tile)
        return ipu.Execute(cs)

    r = lesson03.check_vector_add(solved["Add"], short_pieces, show=False)
    assert r.status == "failed" and "of out are wrong" in r.message
    assert r.picture and "<table" in r.picture["html"]


def test_a_graph_on_one_tile_passes_without_the_star(solved):
    def all_on_tile_0(graph, a, b, out):
        cs = graph.add_compute_set("add")
        graph.add_vertex(cs, solved["Add"], {"x": a, "y": b, "out": out}, tile=0)
        return ipu.Execute(cs)

    r = lesson03.check_vector_add(solved["Add"], all_on_tile_0, show=False)
    assert r.passed and not r.star and "match it for a ★" in r.cost


def test_a_naive_softmax_overflows():
    class Naive(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.Vector(ipu.FLOAT))

        def compute(self):
            e = np.exp(self.x)
            self.out[...] = e / e.sum(axis=-1, keepdims=True)

    r = lesson03.check_softmax(Naive, show=False)
    assert r.status == "failed" and "not finite" in r.message


def test_a_softmax_over_the_wrong_axis_fails():
    class WrongAxis(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.Vector(ipu.FLOAT))

        def compute(self):
            e = np.exp(self.x - self.x.max())
            self.out[...] = e / e.sum()

    r = lesson03.check_softmax(WrongAxis, show=False)
    assert r.status == "failed" and "all vertices of a class in one array operation" in \
        r.message


def softmax(shift):
    class Softmax(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.Vector(ipu.FLOAT))

        def compute(self):
            e = np.exp(self.x - shift(self.x))
            self.out[...] = e / e.sum(axis=-1, keepdims=True)

    return Softmax


def test_a_shift_by_the_maximum_of_all_rows_fails_on_mixed_scales():
    # right one vertex at a time, and on every case whose rows share one scale
    r = lesson03.check_softmax(softmax(lambda x: x.max()), show=False)
    assert r.status == "failed" and "all vertices of a class in one array operation" in \
        r.message and "[nan nan nan nan nan nan]" in r.message
    cases = lesson03.check_softmax.exercise.cases(np.random.default_rng(0))
    mixed = cases[3]["x"]
    assert np.ptp(mixed.max(axis=1)) > 500  # rows of very different scales, one compute set


def test_a_shift_by_the_mean_fails_on_a_row_like_0_200():
    r = lesson03.check_softmax(softmax(lambda x: x.mean(axis=-1, keepdims=True)),
                               show=False)
    assert r.status == "failed" and "for the row [  0. 200.]: not finite" in r.message
    assert lesson03.check_softmax(softmax(lambda x: x.max(axis=-1, keepdims=True)),
                                  show=False).passed


def rms(formula):
    class RmsHalf(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.HALF))
        out = ipu.Output(ipu.HALF)

        def compute(self):
            self.out[...] = formula(self.x)

    return RmsHalf


def test_the_half_rms_reference_is_exact_then_rounded_to_half():
    x = np.array([[300, 400], [1e-4, 1e-4], [3, 4]], np.float16)
    want = lesson03.check_rms_half.exercise.verdict  # the verdict on this one case
    good = [np.array([353.5, x[1, 0], 3.535], np.float16)] * 2
    assert want([{"x": x}], [good]) is None
    # sqrt(125000) = 353.55 lies between the halves 353.5 and 353.75
    with pytest.raises(lesson03.Wrong, match="vertex 0 wrote 353.75 for the row"):
        want([{"x": x}], [[np.array([353.75, x[1, 0], 3.535], np.float16)] * 2])
    # in half, 300 * 300 overflows and 0.0001 * 0.0001 rounds to zero
    with np.errstate(over="ignore"):
        assert ((x * x).mean(axis=1)).tolist()[:2] == [np.inf, 0.0]


@pytest.mark.parametrize("formula, shown", [
    # squares in half: 300 * 300 is past the largest half (65504)
    (lambda x: np.sqrt((x * x).mean(axis=-1)), "wrote inf for the row"),
    # a sum of squares in half
    (lambda x: np.sqrt((x.astype(np.float32) ** 2).sum(axis=-1).astype(np.float16)
                       / x.shape[-1]), "wrote inf for the row"),
    # squares of 0.0001 in half round to 0
    (lambda x: np.sqrt((np.abs(x) * np.abs(x)).astype(np.float32).mean(axis=-1)),
     "wrote inf for the row"),
    # a mean over every vertex's row
    (lambda x: np.sqrt((x.astype(np.float32) ** 2).mean()), "all vertices of a class"),
    (lambda x: np.sqrt((x.astype(np.float32) ** 2).mean(axis=-1)) / 2, "expected"),
])
def test_half_rms_mistakes_fail(formula, shown):
    r = lesson03.check_rms_half(rms(formula), show=False)
    assert r.status == "failed" and shown in r.message, r.message


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(lesson03).failed == 0
