"""Lesson 03's checks (issues 16, 26, 31): judged checks; the solution scores full marks,
the untouched exercise zero, and plausible mistakes in the learner's codelets and graphs
lose the points, with a message naming the case."""

import json
import subprocess
import sys

import nbformat
import numpy as np
import pytest

import ipukit as ipu
from ipukit.grading import feedback, lesson03
from ipukit.grading.make_exercises import edited_exercise
from tests.lessons import (
    ROOT,
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    judged_checks_hold,
    kit_notebook,
    notebook_namespace,
    solution_trials,
    to_judge,
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


def _dot_with(partial_cls, solved, drop_tail=False, piece=lambda lo, hi, n: slice(lo, hi),
              reduce_cls=None):
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
        graph.add_vertex(reduce, reduce_cls or solved["ReduceSum"], {"partials": partial,
                                                                     "out": out[0]}, tile=0)
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


# -- 03.1-03.3 are judged on the graph (issue 26 point 1) -------------------------------------

KIT = "ipukit.grading.lesson03."


def test_03_1_right_numbers_without_a_graph_score_nothing():
    ex, cases, sent = solution_trials("03.1", NOTEBOOK)
    assert all(not {"a", "b"} & set(feedback.public(c)) and "_a" in c for c in cases)
    assert {v["codelet"] for v in sent[0]["graph"]["vertices"]} == {
        KIT + "_PartialDot", KIT + "_ReduceSum"}
    assert feedback.judge(ex, to_judge(sent), cases) is None
    right = [dict(s, graph={}, out=[float(np.dot(c["_a"], c["_b"]))] * 2)
             for s, c in zip(sent, cases)]  # the codelets' rows right, even knowing a and b
    with pytest.raises(feedback.Wrong, match="a · b with n=12 on 4 tiles, pieces=4: your "
                       "graph cannot be rebuilt: GraphDataError"):
        feedback.judge(ex, to_judge(right), cases)
    swapped = []  # the reduce runs before the partial dots: a graph that does not compute it
    for s in sent:
        progs = s["graph"]["programs"][0]["Sequence"]
        swapped.append(dict(s, graph=dict(s["graph"], programs=[{"Sequence": progs[::-1]}])))
    with pytest.raises(feedback.Wrong, match="pieces=4: expected out = "):
        feedback.judge(ex, to_judge(swapped), cases)
    moved = []  # every vertex reads elements 0.. of a: the judge looks at the pieces itself
    for s in sent:
        vertices = [dict(v, fields=dict(v["fields"], a=dict(v["fields"]["a"], offset=0)))
                    if v["codelet"] == KIT + "_PartialDot" else v
                    for v in s["graph"]["vertices"]]
        moved.append(dict(s, graph=dict(s["graph"], vertices=vertices)))
    with pytest.raises(feedback.Wrong, match=r"pieces=4: a\[0\] is read by 4 PartialDot "
                       "vertices"):
        feedback.judge(ex, to_judge(moved), cases)


def test_03_1_each_codelet_is_checked_apart_on_its_own_rows(solved):
    class Product(SumWithoutAxis):
        def compute(self):
            self.out[...] = (self.a * self.b).prod(axis=-1)

    r = lesson03.check_dot_product(Product, solved["ReduceSum"], _dot_with(Product, solved),
                                   show=False)
    assert r.status == "failed" and r.message.startswith(
        "a · b with n=12 on 4 tiles, pieces=4: your PartialDot on rows of a and b (one vertex "
        "per row, run one vertex at a time): out[0]: expected")

    class Mean(ipu.Vertex):
        partials = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.FLOAT)

        def compute(self):
            self.out[...] = self.partials.mean(axis=-1)

    r = lesson03.check_dot_product(solved["PartialDot"], Mean, _dot_with(
        solved["PartialDot"], solved, reduce_cls=Mean), show=False)
    assert r.status == "failed" and "your ReduceSum on rows of partials" in r.message

    class Extra(SumWithoutAxis):
        c = ipu.Input(ipu.FLOAT)

    r = lesson03.check_dot_product(Extra, solved["ReduceSum"], solved["build_dot"],
                                   show=False)
    assert r.status == "failed" and "Extra has fields the exercise does not ask for: c" in \
        r.message


def test_03_1_a_codelet_of_the_learners_not_named_in_the_answer_is_refused(solved):
    class Other(solved["PartialDot"]):
        pass

    r = lesson03.check_dot_product(solved["PartialDot"], solved["ReduceSum"],
                                   _dot_with(Other, solved), show=False)
    assert r.status == "failed" and "runs codelet 'Other', which is not one of the kit's" in \
        r.message


def test_03_2_right_numbers_without_a_graph_score_nothing():
    ex, cases, sent = solution_trials("03.2", NOTEBOOK)
    assert all("_x" in c and "_x" not in feedback.public(c) for c in cases)
    assert {v["codelet"] for v in sent[0]["graph"]["vertices"]} == {KIT + "_RunningMean"}
    assert feedback.judge(ex, to_judge(sent), cases) is None
    right = [dict(s, graph={}) for s in sent]  # the codelet's numbers, no graph
    with pytest.raises(feedback.Wrong, match="the graph of 5 vertices, run by the judge: "
                       "your graph cannot be rebuilt"):
        feedback.judge(ex, to_judge(right), cases)
    idle = [dict(s, graph=dict(s["graph"], programs=[{"Sequence": []}])) for s in sent]
    with pytest.raises(feedback.Wrong, match=r"run by the judge: total after each run\[0, 0\]"):
        feedback.judge(ex, to_judge(idle), cases)
    stateless = []  # count sent as a tensor the host writes, not the vertex's State
    for s in sent:
        vertices = [dict(v, fields=dict(v["fields"], count=v["fields"]["x"]))
                    for v in s["graph"]["vertices"]]
        stateless.append(dict(s, graph=dict(s["graph"], vertices=vertices)))
    with pytest.raises(feedback.Wrong, match="your graph cannot be rebuilt"):
        feedback.judge(ex, to_judge(stateless), cases)


def test_03_3_right_sums_without_a_graph_score_nothing_and_the_star_is_the_judges():
    ex, cases, sent = solution_trials("03.3", NOTEBOOK)
    assert all(not {"a", "b"} & set(feedback.public(c)) and "_a" in c for c in cases)
    assert {v["codelet"] for v in sent[0]["graph"]["vertices"]} == {
        "ipukit.grading.common.AddVertex"}
    cost = feedback.judge(ex, to_judge(sent), cases)  # the judge's own run and cycles
    assert cost.star and cost.used == sum(c["_budget"] for c in cases)
    right = [dict(s, graph={}, out=c["_a"] + c["_b"], cycles=0) for s, c in zip(sent, cases)]
    with pytest.raises(feedback.Wrong, match=r"a \+ b with \[13, 0, 1, 2\] elements per tile: "
                       "your graph cannot be rebuilt"):
        feedback.judge(ex, to_judge(right), cases)
    copied = [dict(s, graph=dict(s["graph"], programs=[{"Copy": [
        {"tensor": s["graph"]["host_writes"]["a"]}, {"tensor": s["graph"]["host_reads"]["out"]},
        None]}])) for s in sent]  # out = a, written by hand
    with pytest.raises(feedback.Wrong, match="of out are wrong"):
        feedback.judge(ex, to_judge(copied), cases)


def test_03_3_the_learners_add_is_checked_apart(solved):
    class Sub(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        y = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.Vector(ipu.FLOAT))

        def compute(self):
            self.out[...] = self.x - self.y

    def build(graph, a, b, out):  # the solution's graph, with Sub
        cs = graph.add_compute_set("add")
        for tile, runs in enumerate(graph.get_tile_mapping(a)):
            for begin, end in runs:
                graph.add_vertex(cs, Sub, {"x": a[begin:end], "y": b[begin:end],
                                           "out": out[begin:end]}, tile=tile)
        return ipu.Execute(cs)

    r = lesson03.check_vector_add(Sub, build, show=False)
    assert r.status == "failed" and r.message.startswith(
        "a + b with [13, 0, 1, 2] elements per tile: your Add on rows of x and y (one vertex "
        "per row, run one vertex at a time): out[0, 0]: expected")


def _grade(path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "ipukit.grade", str(path), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


#: A cell that makes the kernel send, in place of what the learner's functions give, the
#: right numbers worked out from the public cases: the rows of the codelets, and where a
#: case still carried the graph's inputs (before issue 26), what the graph computes.
FORGED = """\
import numpy as np
from ipukit.grading import feedback, plain
real = feedback.run_trials
def forged_03(ex_id, c):
    if ex_id == '03.1':
        two = lambda v: [v, v]
        found = {'PartialDot': two((c['dot_a'] * c['dot_b']).sum(-1)),
                 'ReduceSum': two(c['partials'].sum(-1))} if 'dot_a' in c else {}
        if 'a' in c:
            cut = np.linspace(0, c['n'], c['pieces'] + 1).astype(int)
            pieces = [np.arange(lo, hi) for lo, hi in zip(cut[:-1], cut[1:])]
            found.update(split=c['pieces'], reduce=1, a=pieces, b=pieces, compute_sets=2,
                         out=two(float(np.dot(c['a'].astype(float), c['b']))))
        return found
    if ex_id == '03.2':
        runs = np.arange(1, len(c['x']) + 1)[:, None]
        total = np.cumsum(c['x'], axis=0)
        return {'total': np.stack([total] * 2), 'mean': np.stack([total / runs] * 2)}
    found = {'Add': [c['x'] + c['y']] * 2} if 'x' in c else {}
    if 'a' in c:
        found.update(out=c['a'] + c['b'], cycles=1)
    return found
def forged(ex, cases, answers):
    if ex.id in ('03.1', '03.2', '03.3'):
        return [{'ok': plain.encode(forged_03(ex.id, c))} for c in cases]
    return real(ex, cases, answers)
feedback.run_trials = forged"""


def test_numbers_worked_out_in_the_kernel_without_a_graph_score_nothing(tmp_path):
    """Issue 26 point 1 through ``python -m ipukit.grade``: an untouched exercises/03 whose
    kernel sends the right numbers for 03.1-03.3 with no graph scores nothing there (it
    scored 8 of 12 before they were judged on the graph)."""
    source = kit_notebook("exercises", NOTEBOOK)
    if edited_exercise(source):
        pytest.skip(f"{source} was edited since it was generated (a learner's work)")
    nb = nbformat.read(source, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(FORGED))
    nbformat.write(nb, tmp_path / "03_me.ipynb")
    report = _grade(tmp_path / "03_me.ipynb")
    assert report["score"] == 0, report["exercises"]
    assert {e["id"]: e["status"] for e in report["exercises"]} == {
        "03.1": "failed", "03.2": "failed", "03.3": "failed", "03.4": "not solved",
        "03.5": "not solved"}


def test_the_solutions_score_full_marks_through_the_grader():
    report = _grade(kit_notebook("solutions", NOTEBOOK))
    assert (report["lesson"], report["score"], report["max_score"]) == ("03", 12, 12)
    assert {e["id"]: (e["status"], e["star"]) for e in report["exercises"]} == {
        "03.1": ("passed", False), "03.2": ("passed", False), "03.3": ("passed", True),
        "03.4": ("passed", False), "03.5": ("passed", False)}
    assert report["errors"] == []


def test_popops_add_does_not_score_the_vector_add(solved):
    """03.3 asks for a graph of your Add: popops.add (with a right Add beside it) scores
    nothing; the solution still passes."""
    from ipukit.poplibs import popops

    def vector_add(graph, a, b, out):
        prog = ipu.Sequence()
        prog.add(ipu.Copy(popops.add(graph, a, b, prog, "add"), out))
        return prog

    r = lesson03.check_vector_add(solved["Add"], vector_add, show=False)
    assert r.status == feedback.FAILED
    assert "your graph computes with" in r.message and "your Add codelet alone" in r.message
    assert lesson03.check_vector_add(solved["Add"], solved["vector_add"], show=False).passed
