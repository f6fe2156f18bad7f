"""Lesson 05's checks: the solutions score full marks, the untouched exercises score zero
("not solved yet", no crash), wrong answers get feedback that says what is wrong, and the
references agree with Graphcore's published tut6 numbers."""

import contextlib
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.grading import feedback, lesson05
from ipukit.poplibs import poputil
from ipukit.tutorials import tut6
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    judged_checks_hold,
    notebook_namespace,
    solution_trials,
    to_judge,
)

NOTEBOOK = "05_poplibs_profiling.ipynb"
CHECKS = {"05.1": ("check_add_cycles", "add_compute_cycles"),
          "05.2": ("check_split_cost", "split_cost"),
          "05.3": ("check_reduce_rows", "reduce_rows"),
          "05.4": ("check_bottleneck", "bottleneck"),
          "05.5": ("check_log_softmax", "log_softmax"),
          "05.6": ("check_reuse_order", "reuse_order")}
MK2 = ipu.IPUModel("ipu2").create_device().target
MK1 = ipu.IPUModel("ipu1").create_device().target


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    rows = grade_exercises(lesson05, "05", NOTEBOOK, CHECKS, folder, status)
    assert sum(r.max_points for r in rows) == 15


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("05", NOTEBOOK)


# -- references against Graphcore's numbers ------------------------------------------------

def test_split_costs_reproduce_graphcores_tut6_numbers():
    # tut6 tests and README: Mk2 10000x1000 -> split 7, 3996 = 3696 + 143 + 49 + 108
    assert lesson05.split_costs(MK2, 10000, 1000, 7) == {
        "compute": 3696, "exchange": 143, "reduce_exchange": 49, "reduce_compute": 108}
    # old Mk1 README: split 5, 4751 = 4410 + 200 + 45 + 96
    assert lesson05.split_costs(MK1, 10000, 1000, 5) == {
        "compute": 4410, "exchange": 200, "reduce_exchange": 45, "reduce_compute": 96}
    worst = {t.version: max(sum(lesson05.split_costs(t, 10000, 1000, s).values())
                            for s in range(1, 1000)) for t in (MK2, MK1)}
    assert worst == {"ipu2": 53807, "ipu1": 64373}  # "Worst cost seen" in the tests
    assert lesson05.best_split(MK2, 10000, 1000) == 7
    assert lesson05.best_split(MK1, 10000, 1000) == 5
    assert lesson05.best_split(MK2, 1000, 100) == 8 and lesson05.best_split(MK1, 1000, 100) == 7
    assert lesson05.best_split(MK2, 40, 50) == 5  # first of the tied 5..10 (strict <)


@settings(max_examples=60, deadline=None)
@given(tiles=st.sampled_from([1, 4, 16, 1216, 1472]), rows=st.integers(1, 5000),
       cols=st.integers(2, 400), data=st.data())
def test_split_costs_match_tut6_estimate(tiles, rows, cols, data):
    split = data.draw(st.integers(1, cols - 1))
    target = ipu.IPUModel(tiles_per_ipu=tiles).create_device().target
    parts = lesson05.split_costs(target, rows, cols, split)
    assert parts == tut6.estimate_parts(target, rows, cols, split)
    assert sum(parts.values()) == tut6.estimate_cycles(target, rows, cols, split)


def test_best_split_matches_tut6_choice():
    for target, rows, cols in lesson05._best_cases():
        with contextlib.redirect_stdout(io.StringIO()):
            want = tut6.calc_optimal_col_axis_split(target, rows, cols)
        assert lesson05.best_split(target, rows, cols) == want


def test_add_reference_is_the_compiled_graph():
    # 13 elements = 7 grains over 6 workers: pieces 2,2,2,2,2,3 -> 6 x (10 + 3*3) = 114
    g, step = lesson05._compiled_add([13, 0, 1, 2])
    assert step.tile_compute_cycles.tolist() == [114, 0, 6 * (10 + 3), 6 * (10 + 6)]
    assert lesson05._vertex_sizes(g, 0) == [2, 2, 2, 2, 2, 3]
    assert [b - a for a, b in poputil.split_regions(13, 2, 6)] == [2, 2, 2, 2, 2, 3]


# -- feedback -------------------------------------------------------------------------------

def _pieces(e):
    return [b - a for a, b in poputil.split_regions(e, 2, 6)]


def test_add_cycles_feedback():
    r = lesson05.check_add_cycles(lambda counts: [10 + 3 * max(_pieces(e), default=0)
                                                  for e in counts])
    assert r.status == feedback.FAILED
    assert "tile 0 holds 13 elements" in r.message and "6 x its heaviest worker" in r.message
    r = lesson05.check_add_cycles(lambda counts: [6 * (10 + 3 * e) if e else 0
                                                  for e in counts])
    assert "one worker doing the whole tile" in r.message and "hint 2 of 3:" in r.message
    r = lesson05.check_add_cycles(lambda counts: [6 * (10 + 2 * max(_pieces(e), default=0))
                                                  for e in counts])
    assert "written too" in r.message
    r = lesson05.check_add_cycles(lambda counts: [0])
    assert "expected 4 numbers" in r.message


def test_split_cost_feedback():
    def float_division(target, rows, cols, split):
        parts = lesson05.split_costs(target, rows, cols, split)
        return {**parts, "exchange": max(rows * split / target.num_tiles, 1) / rows * cols
                / split}

    r = lesson05.check_split_cost(float_division)
    assert "exchange = " in r.message and "unsigned integer arithmetic" in r.message

    def no_reduce_compute(target, rows, cols, split):
        return {**lesson05.split_costs(target, rows, cols, split), "reduce_compute": 0}

    r = lesson05.check_split_cost(no_reduce_compute)
    assert "rows=10000, cols=1000, split=7): reduce_compute cost should be 108, you said 0" \
        in r.message
    r = lesson05.check_split_cost(lambda target, rows, cols, split: 3996)
    assert "return a dict with the keys" in r.message


class RowSum(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum(axis=-1)


def per_row(cls, whole_rows=False):
    """A build that runs ``cls`` on each row of x, all on tile 0, into out[row] (a number,
    or with ``whole_rows`` a row of x's shape)."""
    def build(graph, x, prog):
        out = graph.add_variable(ipu.FLOAT, list(x.shape) if whole_rows else [x.shape[0]],
                                 "out")
        cs = graph.add_compute_set("rows")
        for r in range(x.shape[0]):
            graph.set_tile_mapping(out[r], 0)
            graph.add_vertex(cs, cls, {"x": x[r], "out": out[r]}, tile=0)
        prog.add(ipu.Execute(cs))
        return out

    return build


one_vertex_per_row = per_row(RowSum)  # correct, but every row gathered on one tile


def test_reduce_rows_solution_gets_the_star_and_a_gather_does_not():

    ns = notebook_namespace("solutions", NOTEBOOK)
    r = lesson05.check_reduce_rows(ns["reduce_rows"])
    assert r.passed and r.star
    r = lesson05.check_reduce_rows(one_vertex_per_row)
    assert r.passed and not r.star and "match it for a ★" in r.cost


def test_reduce_rows_mistakes_lose_the_points():
    def columns(graph, x, prog):  # sums over the wrong axis
        out = graph.add_variable(ipu.FLOAT, [x.shape[0]], "out")
        cs = graph.add_compute_set("cols")
        xt = x.transpose()
        for r in range(x.shape[0]):
            graph.set_tile_mapping(out[r], 0)
            graph.add_vertex(cs, RowSum, {"x": xt[r], "out": out[r]}, tile=0)
        prog.add(ipu.Execute(cs))
        return out

    assert "out holds column sums" in lesson05.check_reduce_rows(columns).message

    def drops_last_column(graph, x, prog):
        out = graph.add_variable(ipu.FLOAT, [x.shape[0]], "out")
        cs = graph.add_compute_set("rows")
        for r in range(x.shape[0]):
            graph.set_tile_mapping(out[r], 0)
            graph.add_vertex(cs, RowSum, {"x": x[r, :-1], "out": out[r]}, tile=0)
        prog.add(ipu.Execute(cs))
        return out

    r = lesson05.check_reduce_rows(drops_last_column)
    assert r.status == "failed" and "out[0]: expected" in r.message
    r = lesson05.check_reduce_rows(lambda graph, x, prog: None)
    assert "x of shape [6, 100] on 4 tiles: return a tensor of shape [6], got None" in r.message


@pytest.fixture(scope="module")
def profiles():
    return {what: make() for what, make in lesson05.PROFILES.items()}


def _answer(trace, name, phase=None, tile=None):
    step = next(s for s in trace.steps if s.name == name)
    if phase is None:
        phase = "exchange" if step.exchange_cycles > step.compute_cycles else "compute"
    per_tile = (step.tile_exchange_cycles(trace.target) if phase == "exchange"
                else step.tile_compute_cycles)
    return {"compute_set": name, "phase": phase,
            "tile": int(np.argmax(per_tile)) if tile is None else tile}


def test_bottleneck_reference(profiles):
    tops = {what: lesson05.bottleneck_reference(t)["phases"] for what, t in profiles.items()}
    assert tops["a big map once and a small one 40 times"] == {"halve small": {"compute"}}
    assert tops["a + b with b on tile 0, then a reduce"] == {"a + b": {"exchange"}}
    gather = lesson05.bottleneck_reference(profiles["a + b with b on tile 0, then a reduce"])
    assert gather["tiles"]["a + b", "exchange"] == {0}  # tile 0 sends b to every tile


def test_bottleneck_feedback(profiles):
    r = lesson05.check_bottleneck(lambda trace: _answer(trace, trace.steps[0].name, "exchange",
                                                        0))
    assert "'host sync (Engine.run)' is a host step, not a compute set" in r.message

    def once_each(trace):  # ignores how often a step ran
        step = max((s for s in trace.steps if s.kind == "compute"), key=lambda s: s.cycles)
        return _answer(trace, step.name)

    r = lesson05.check_bottleneck(once_each)
    halve = next(s for s in profiles["a big map once and a small one 40 times"].steps
                 if s.name == "halve small")
    assert "profile of a big map once and a small one 40 times: the costliest compute set " \
           f"is 'halve small' (40 execution(s), {40 * halve.cycles:,} cycles in all), you " \
           "named 'exp big'" in r.message
    assert "count every execution" in r.message

    def other_phase(trace):  # the right compute set, the shorter of its phases
        right = _solution(trace)
        return _answer(trace, right["compute_set"],
                       {"exchange": "compute", "compute": "exchange"}[right["phase"]])

    first = profiles["a matmul, ReLU and softmax"]
    step = next(s for s in first.steps if s.name == _solution(first)["compute_set"])
    r = lesson05.check_bottleneck(other_phase)
    assert f"profile of a matmul, ReLU and softmax: '{step.name}' spends " \
           f"{step.exchange_cycles:,} cycles in exchange and {step.compute_cycles:,} in " \
           "compute" in r.message
    r = lesson05.check_bottleneck(lambda trace: (
        _answer(trace, "a + b", tile=3) if "a + b" in [s.name for s in trace.steps]
        else _solution(trace)))
    assert "tile 0 has the longest exchange" in r.message and "tile 3 has" in r.message
    r = lesson05.check_bottleneck(lambda trace: ("xW/MatMul", "exchange", 0))
    assert "return a dict with the keys" in r.message


def test_bottleneck_random_profiles_catch_fixed_answers():
    # the loop's count decides which compute set is costliest; b sits on a random tile
    cases = lesson05._profile_cases(np.random.default_rng(5))
    assert [c["maker"] for c in cases] == ["mlp", "repeat", "gather", "streams", "repeat",
                                           "gather"]
    tile = cases[-1]["params"]["tile"]
    assert tile != 0
    gather = lesson05._profile(cases[-1])
    assert lesson05.bottleneck_reference(gather)["tiles"]["a + b", "exchange"] == {tile}
    ex = feedback.EXERCISES["05.4"]

    def tile_zero(trace):  # a gather always from tile 0
        return {**_solution(trace), "tile": 0} if "a + b" in [s.name for s in trace.steps] \
            else _solution(trace)

    outputs = feedback.run_trials(ex, cases, (tile_zero,))
    with pytest.raises(feedback.Wrong, match=f"with b on tile {tile}, then a reduce: in 'a \\+ "
                       f"b' tile {tile} has the longest exchange"):
        feedback.judge(ex, outputs, cases)


def _solution(trace):
    runs = trace.executions()
    step = max((s for s in trace.steps if s.kind == "compute"),
               key=lambda s: runs[s.index] * s.cycles)
    return _answer(trace, step.name)


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(lesson05)
    assert result.failed == 0 and result.attempted > 0


def test_log_softmax_mistakes_lose_the_points():
    from ipukit.poplibs import expr, popops

    a, b = expr._1, expr._2

    def log_add(graph, x, prog):  # popops' own stable log-sum-exp: fewer ops, the star
        lse = popops.reduce(graph, x, [1], popops.Operation.LOG_ADD, prog)
        return popops.map(graph, a - b, [x, lse.reshape([x.shape[0], 1])], prog)

    r = lesson05.check_log_softmax(log_add)
    assert r.passed and r.star

    def unstable(graph, x, prog):
        s = popops.reduce(graph, popops.map(graph, expr.Exp(a), [x], prog), [1],
                          popops.Operation.ADD, prog)
        return popops.map(graph, a - expr.Log(b), [x, s.reshape([x.shape[0], 1])], prog)

    assert "holds inf or nan" in lesson05.check_log_softmax(unstable).message

    def softmax(graph, x, prog):
        lse = popops.reduce(graph, x, [1], popops.Operation.LOG_ADD, prog)
        return popops.map(graph, expr.Exp(a - b), [x, lse.reshape([x.shape[0], 1])], prog)

    assert "that is softmax" in lesson05.check_log_softmax(softmax).message

    def wrong_axis(graph, x, prog):
        lse = popops.reduce(graph, x, [0], popops.Operation.LOG_ADD, prog)
        return popops.map(graph, a - b, [x, lse.reshape([1, x.shape[1]])], prog)

    r = lesson05.check_log_softmax(wrong_axis)
    assert r.status == "failed" and "out[0, 0]: expected" in r.message


def _shifted_log_softmax(shift):
    """log_softmax with x shifted by ``shift(graph, x, prog)`` (a [rows, 1] or [1, 1] tensor)
    instead of each row's maximum."""
    from ipukit.poplibs import expr, popops

    a, b, c = expr._1, expr._2, expr._3

    def build(graph, x, prog):
        m = shift(graph, x, prog)
        e = popops.map(graph, expr.Exp(a - b), [x, m], prog)
        s = popops.reduce(graph, e, [1], popops.Operation.ADD, prog).reshape([x.shape[0], 1])
        return popops.map(graph, a - b - expr.Log(c), [x, m, s], prog)

    return build


def test_log_softmax_shifts_that_overflow_lose_the_points():
    from ipukit.poplibs import expr, popops

    def global_max(graph, x, prog):  # one maximum for the whole tensor (no axis)
        return popops.reduce(graph, x, [0, 1], popops.Operation.MAX, prog).reshape([1, 1])

    r = lesson05.check_log_softmax(_shifted_log_softmax(global_max))
    assert r.status == "failed" and "holds inf or nan" in r.message
    assert "x of shape [4, 12]" in r.message  # the tensor whose rows differ in scale

    def row_mean(graph, x, prog):  # a shift by the mean: [0, 200] overflows exp
        total = popops.reduce(graph, x, [1], popops.Operation.ADD, prog)
        return popops.map(graph, expr._1 * (1.0 / x.shape[1]), [total], prog).reshape(
            [x.shape[0], 1])

    r = lesson05.check_log_softmax(_shifted_log_softmax(row_mean))
    assert r.status == "failed" and "holds inf or nan" in r.message
    ex = feedback.EXERCISES["05.5"]
    pair = [c for c in feedback.notebook_cases(ex) if c["cols"] == 2]  # rows like [0, 200]
    outputs = feedback.run_trials(ex, pair, (_shifted_log_softmax(row_mean),))
    with pytest.raises(feedback.Wrong, match=r"x of shape \[3, 2\] .* first in row 0: "
                       r"x\[0\] = \[  0. 200.\]"):
        feedback.judge(ex, outputs, pair)

    def row_max(graph, x, prog):  # the solution, written the same way: passes
        return popops.reduce(graph, x, [1], popops.Operation.MAX, prog).reshape(
            [x.shape[0], 1])

    assert lesson05.check_log_softmax(_shifted_log_softmax(row_max)).passed


def test_split_cost_without_the_floor_of_one_vertex_fails_on_one_row():
    def no_floor(target, rows, cols, split):  # maxV = ceil(R*split/T), no max(…, 1)
        parts = lesson05.split_costs(target, rows, cols, split)
        max_v = -(-rows * split // target.num_tiles)
        return {**parts, "exchange": -(-max_v // rows) * -(-cols // split) * 4
                // target.exchange_bytes_per_cycle}

    assert lesson05.check_split_cost(no_floor).passed  # max(…, 1) never bites: ceil >= 1

    def floor_two(target, rows, cols, split):  # max(…, 2): wrong once R*split <= T
        parts = lesson05.split_costs(target, rows, cols, split)
        max_v = max(-(-rows * split // target.num_tiles), 2)
        return {**parts, "exchange": -(-max_v // rows) * -(-cols // split) * 4
                // target.exchange_bytes_per_cycle}

    r = lesson05.check_split_cost(floor_two)
    assert "split_cost(ipu2 (4 tiles), rows=1, cols=100, split=3): exchange cost should be 34" \
        in r.message


def test_an_error_in_the_learners_code_names_the_case():
    reduce_rows = notebook_namespace("solutions", NOTEBOOK)["reduce_rows"]

    def crashes(graph, x, prog):
        if x.shape[0] == 10:
            raise KeyError("row 10")
        return reduce_rows(graph, x, prog)

    r = lesson05.check_reduce_rows(crashes)
    assert r.message.startswith("reduce_rows: x of shape [10, 7] on 5 tiles: your code raised "
                                "KeyError: 'row 10'")


# -- 05.6: memory reuse ---------------------------------------------------------------------


def _names(ops):
    return [op["name"] for op in ops]


def test_reuse_memory_reads_the_peak_from_the_liveness():
    """Two temporaries of 100 floats on one tile: 800 B live together in the listed order,
    400 B when each is reduced before the next is made (hand-computed: 4 B a float)."""
    ops = [{"name": "t", "op": "exp", "input": "x"}, {"name": "u", "op": "square", "input": "x"},
           {"name": "sum_t", "op": "sum", "input": "t"}, {"name": "sum_u", "op": "sum",
                                                           "input": "u"}]
    listed = lesson05.reuse_memory(ops, _names(ops), 100, 1)
    reused = lesson05.reuse_memory(ops, ["t", "sum_t", "u", "sum_u"], 100, 1)
    assert lesson05.tile_peak(listed) == 800 and lesson05.tile_peak(reused) == 400
    assert reused.liveness.ranges("t/out") == [(0, 1)]
    assert reused.liveness.ranges("u/out") == [(2, 3)]
    # the reductions' results are read by the host: always live, in "variables"
    assert listed.categories["variables"][0] == reused.categories["variables"][0] == 400 + 8


def test_reuse_cases_are_plain_and_a_better_order_exists():
    for case in lesson05._reuse_cases(np.random.default_rng(3)):
        assert case["_best"] < case["_listed"]
        assert all(set(op) == {"name", "op", "input"} for op in case["ops"])


def _reductions_last(ops):
    order = []

    def emit(name):
        order.append(name)
        for op in sorted((op for op in ops if op["input"] == name),
                         key=lambda op: op["op"] in ("sum", "max")):
            emit(op["name"])
    for op in ops:
        if op["input"] == "x":
            emit(op["name"])
    return order


def _per_reduction(ops):
    """Depth first from each reduction in the listed order: chains end up interleaved
    when a chain's reductions are listed apart."""
    by_name = {op["name"]: op for op in ops}
    order = []

    def need(name):
        if name != "x" and name not in order:
            need(by_name[name]["input"])
            order.append(name)
    for op in ops:
        if op["op"] in ("sum", "max"):
            need(op["name"])
    return order


@pytest.mark.parametrize("answer, says", [
    (_names, "peaks at 800 B"),  # the listed order
    (lambda ops: _names(ops)[::-1], "runs before"),
    (lambda ops: _names(ops)[:-1], "appears 0 times"),
    (lambda ops: _names(ops) + _names(ops)[:1], "appears 2 times"),
    (lambda ops: _names(ops) + ["y"], "'y' is not one of the ops"),
    (lambda ops: "t00 sum_t00", "return a list"),
    (_reductions_last, "an order exists that needs only 128 B"),
    (_per_reduction, "an order exists that needs only"),
])
def test_reuse_order_mistakes_lose_the_points(answer, says):
    r = lesson05.check_reuse_order(answer, show=False)
    assert r.status == feedback.FAILED and says in r.message, r.message
    assert "reuse_order on" in r.message  # names the case


def test_reuse_order_feedback_names_the_temporaries_live_together():
    r = lesson05.check_reuse_order(_names, show=False)
    assert "holds t00/out, t10/out live together" in r.message


# -- 05.3 and 05.5 are judged on the graph (issue 26 point 1) ----------------------------------

def test_05_3_right_sums_without_a_graph_score_nothing_and_x_stays_with_the_judge():
    ex, cases, sent = solution_trials("05.3", NOTEBOOK)
    assert all("x" not in feedback.public(c) and "_x" in c for c in cases)
    assert feedback.judge(ex, to_judge(sent), cases).star  # the judge's own run, its cycles
    right = [{"out": c["_x"].sum(axis=1), "cycles": 0, "graph": {},
              "codelets": {}} for c in cases]  # even knowing x
    with pytest.raises(feedback.Wrong, match=r"x of shape \[6, 100\] on 4 tiles: your graph "
                       "cannot be rebuilt: GraphDataError"):
        feedback.judge(ex, to_judge(right), cases)


def test_05_3_the_learners_codelet_runs_as_the_kits_and_is_checked_apart():
    ex, cases, sent = solution_trials("05.3", NOTEBOOK)
    assert {v["codelet"] for v in sent[0]["graph"]["vertices"]} == {
        "ipukit.grading.lesson05._PartialSum"}
    assert list(sent[0]["codelets"]) == ["PartialSum"]

    class Mean(RowSum):
        def compute(self):
            self.out[...] = self.x.mean(axis=-1)

    r = lesson05.check_reduce_rows(per_row(Mean))  # right wiring, the codelet averages
    assert r.status == "failed" and "your codelet Mean on x = [" in r.message

    class Wide(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.Vector(ipu.FLOAT))

        def compute(self):
            self.out[...] = self.x.sum(axis=-1, keepdims=True)

    def wide(graph, x, prog):
        out = graph.add_variable(ipu.FLOAT, [x.shape[0]], "out")
        graph.set_tile_mapping(out, 0)
        cs = graph.add_compute_set("rows")
        for r in range(x.shape[0]):
            graph.add_vertex(cs, Wide, {"x": x[r], "out": out[r:r + 1]}, tile=0)
        prog.add(ipu.Execute(cs))
        return out

    r = lesson05.check_reduce_rows(wide)
    assert r.status == "failed" and "codelet 'Wide' has fields" in r.message
    assert "the exercise's has x (Input(Vector(float32))) and out" in r.message


def test_05_3_a_hand_written_graph_is_run_by_the_judge_and_wrong_graphs_are_named():
    ex, cases, sent = solution_trials("05.3", NOTEBOOK)
    swapped = []  # the two compute sets run the other way round: partials not yet summed
    for s in sent:
        g = s["graph"]
        progs = g["programs"][0]["Sequence"]
        swapped.append(dict(s, graph=dict(g, programs=[{"Sequence": progs[::-1]}])))
    with pytest.raises(feedback.Wrong, match=r"x of shape \[6, 100\] on 4 tiles: out\[1\]: "
                       "expected"):
        feedback.judge(ex, to_judge(swapped), cases)
    moved = []  # x all on tile 0: a different exercise
    for s, c in zip(sent, cases):
        pools = {"float32": [dict(v, mapping=np.array([[0, 0, c["rows"] * c["cols"]]]))
                             if v["name"] == "x" else v for v in s["graph"]["pools"]["float32"]]}
        moved.append(dict(s, graph=dict(s["graph"], pools=pools)))
    with pytest.raises(feedback.Wrong, match="does not keep the exercise's tensor x"):
        feedback.judge(ex, to_judge(moved), cases)
    unread = [dict(s, graph=dict(s["graph"], host_reads={})) for s in sent]
    with pytest.raises(feedback.Wrong, match="your graph has no host read 'out'"):
        feedback.judge(ex, to_judge(unread), cases)


def test_05_5_popops_ops_travel_and_numbers_without_a_graph_score_nothing():
    ex, cases, sent = solution_trials("05.5", NOTEBOOK)
    assert all("x" not in feedback.public(c) for c in cases)
    kinds = {next(iter(v["codelet"])) for v in sent[0]["vertices"]}
    assert kinds == {"popops.map", "popops.reduce"}
    assert feedback.judge(ex, to_judge(sent), cases).star
    z = [c["_x"] - c["_x"].max(axis=1, keepdims=True) for c in cases]
    right = [{"out": v - np.log(np.exp(v).sum(axis=1, keepdims=True)), "cycles": 0}
             for v in z]
    with pytest.raises(feedback.Wrong, match="your graph cannot be rebuilt: GraphDataError"):
        feedback.judge(ex, to_judge(right), cases)
    exp_only = []  # the last op's expression edited by hand to exp(x - m): softmax, unscaled
    for g in sent:
        vertices = [dict(v, codelet={"popops.map": [
            ["EXPONENT", ["SUBTRACT", ["ARG", 1], ["ARG", 2]]], *v["codelet"]["popops.map"][1:]]})
            if v["cs"] == len(g["compute_sets"]) - 1 else v for v in g["vertices"]]
        exp_only.append(dict(g, vertices=vertices))
    with pytest.raises(feedback.Wrong, match=r"log_softmax: x of shape \[4, 30\] \(row maxima "
                       r".*\): out\[0, 0\]: expected"):
        feedback.judge(ex, to_judge(exp_only), cases)


def test_05_5_a_codelet_of_the_learners_own_is_refused_by_name():
    class LogSoftmax(ipu.Vertex):
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.Vector(ipu.FLOAT))

        def compute(self):
            z = self.x - self.x.max()
            self.out[...] = z - np.log(np.exp(z).sum())

    r = lesson05.check_log_softmax(per_row(LogSoftmax, whole_rows=True))
    assert r.status == "failed" and "runs codelet 'LogSoftmax', which is not one of the " \
        "kit's" in r.message


def test_popops_reduce_does_not_score_the_row_sum():
    """05.3 asks for a reduction built from your codelet: popops.reduce itself (which
    earned 3/3 and the star) scores nothing."""
    from ipukit.poplibs import popops

    r = lesson05.check_reduce_rows(lambda graph, x, prog: popops.reduce(
        graph, x, [1], popops.Operation.ADD, prog, "sum"), show=False)
    assert r.status == feedback.FAILED
    assert "your graph computes with" in r.message and "your codelet alone" in r.message
