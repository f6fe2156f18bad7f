"""ipukit.grading.lesson06: the checks of lesson 06 (the host and the IPU)."""

import doctest
import json
import math
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.grading import feedback, lesson06, plain
from ipukit.grading.make_exercises import exercise_notebook
from ipukit.host import loops
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    graded_points,
    judged_checks_hold,
    kit_notebook,
    notebook_namespace,
)

ROOT = Path(__file__).resolve().parent.parent
NAME = "06_host_and_ipu.ipynb"
CHECKS = {"06.1": ("check_stream_copy_cycles", "stream_copy_cycles"),
          "06.2": ("check_steps_per_call", "steps_per_call"),
          "06.3": ("check_infeed_loop", "build_loop"),
          "06.4": ("check_running_max", "build_running_max"),
          "06.5": ("check_sgd", "build_sgd"),
          "06.6": ("check_collatz", "build_collatz")}


def failure(exercise: str, answer) -> str:
    r = getattr(lesson06, CHECKS[exercise][0])(answer)
    assert r.status == "failed" and r.points == 0
    return r.message


def test_registered_with_points_and_doctest():
    assert {i: feedback.EXERCISES[i].points for i in CHECKS} == {
        "06.1": 2, "06.2": 2, "06.3": 3, "06.4": 3, "06.5": 3, "06.6": 3}
    assert doctest.testmod(lesson06).failed == 0


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_score_zero(folder, status):
    rows = grade_exercises(lesson06, "06", NAME, CHECKS, folder, status)
    assert sum(r.max_points for r in rows) == 16


@pytest.fixture(scope="module")
def solved():
    return notebook_namespace("solutions", NAME)


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("06", NAME)


def test_a_check_shows_its_result(capsys):
    env = notebook_namespace("exercises", NAME)
    lesson06.check_steps_per_call(env["steps_per_call"])
    assert "Exercise 06.2" in capsys.readouterr().out


def test_exercises_notebook_is_generated_from_the_solutions():
    solution = nbformat.read(kit_notebook("solutions", NAME), as_version=4)
    exercise = nbformat.read(kit_notebook("exercises", NAME), as_version=4)
    assert [(c.cell_type, c.source) for c in exercise.cells] == [
        (c.cell_type, c.source) for c in exercise_notebook(solution).cells]
    assert not any("BEGIN SOLUTION" in c.source for c in exercise.cells)


# -- 06.1 -----------------------------------------------------------------------------------
def reference_stream_cycles(target, tile_bytes):
    tiles = -(-int(np.max(tile_bytes)) // target.exchange_bytes_per_cycle)
    return target.sync_cycles + max(tiles, math.ceil(int(np.sum(tile_bytes))
                                                     / target.host_link_bytes_per_cycle))


def test_stream_copy_cases_exercise_both_limits():
    tile_limited = link_limited = 0
    for case in lesson06._stream_cases(np.random.default_rng(0)):
        target = lesson06._target(case["version"], case["tiles"])
        b = case["tile_bytes"]
        assert reference_stream_cycles(target, b) == case["_cycles"]
        link = math.ceil(int(b.sum()) / target.host_link_bytes_per_cycle)
        tile_limited += -(-int(b.max()) // 4) > link
        link_limited += link > -(-int(b.max()) // 4)
    assert tile_limited and link_limited


def test_stream_copy_wrong_answers_get_specific_feedback():
    def tiles_only(target, tile_bytes):
        return target.sync_cycles + -(-int(np.max(tile_bytes)) // 4)

    msg = failure("06.1", tiles_only)
    assert "busiest tile's time alone" in msg and "host link" in msg
    assert msg.splitlines()[-1].startswith("hint 1 of 3: Two things carry the bytes")
    msg = failure("06.1", lambda t, b: reference_stream_cycles(t, b) - t.sync_cycles)
    assert "forget the sync (20 cycles)" in msg and "hint 2 of 3: A stream copy is one" in msg
    assert "expected a number" in failure("06.1", lambda t, b: "many")
    msg = failure("06.1", lambda t, b: 1 / 0)
    assert msg.startswith("a StreamCopy host -> IPU of 1,024 B on 4 tiles of 'ipu2' (at most "
                          "1,024 B on one tile): your code raised ZeroDivisionError")


@settings(max_examples=20, deadline=None)
@given(floats=st.lists(st.integers(0, 3000), min_size=1, max_size=12).filter(any),
       version=st.sampled_from(["ipu1", "ipu2", "bow"]), to_device=st.booleans())
def test_stream_copy_formula_matches_the_compiler(floats, version, to_device):
    target, step = lesson06._stream_step(version, len(floats), np.array(floats), to_device)
    b = step.tile_bytes_in if to_device else step.tile_bytes_out
    assert b.tolist() == [4 * f for f in floats]
    assert reference_stream_cycles(target, b) == step.cycles


# -- 06.2 -----------------------------------------------------------------------------------
def closed_form(target, step_cycles, efficiency):
    H = target.host_sync_cycles
    return max(1, math.ceil(efficiency * H / ((1 - efficiency) * step_cycles)))


def test_steps_per_call_brute_force_also_passes():
    def brute(target, B, e):
        n = 1
        while n * B / (target.host_sync_cycles + n * B) < e:
            n += 1
        return n

    assert lesson06.check_steps_per_call(brute).passed


def test_steps_per_call_reference_values():
    # ipu2, H = 13,300 cycles. One step streams 64 floats into tile 0 (20 + 256 / 4) and
    # runs one vertex reading them (20 + 6 x (10 + 64)): B = 84 + 464 = 548 cycles.
    assert lesson06._device_share("ipu2", 64, 1)[1] == 548
    share, _, host_sync = lesson06._device_share("ipu2", 64, 25)
    assert host_sync == 13_300
    assert share == 25 * 548 / (13_300 + 25 * 548) and share >= 0.5
    assert lesson06._device_share("ipu2", 64, 24)[0] < 0.5  # 13,152 < 13,300
    target = ipu.IPUModel("ipu2").create_device().target
    assert closed_form(target, 548, 0.5) == 25


def test_steps_per_call_wrong_answers_get_specific_feedback():
    msg = failure("06.2", lambda t, b, e: closed_form(t, b, e) - 1)
    assert "N is too small" in msg and "measured in the Trace" in msg
    msg = failure("06.2", lambda t, b, e: closed_form(t, b, e) + 1)
    assert "already keeps the device working" in msg and "the smallest such N" in msg
    msg = failure("06.2", lambda t, b, e: math.floor(e * t.host_sync_cycles / ((1 - e) * b)))
    assert "too small" in msg or "at least 1 step" in msg
    # efficiency 0: any N will do, and the smallest is 1 (not max(0, ...) = 0)
    msg = failure("06.2", lambda t, b, e: max(0, closed_form(t, b, e) if e else 0))
    assert "efficiency 0.0: expected at least 1 step per Engine.run, got 0" in msg
    # a huge N is answered from the measured H and B, never run (10**8 steps: ~20 min)
    msg = failure("06.2", lambda t, b, e: 10**8)
    assert "N = 25 already keeps the device working 50.74%" in msg
    assert "you said 100,000,000" in msg


# -- 06.3 -----------------------------------------------------------------------------------
def test_infeed_loop_wrong_answers_get_specific_feedback():
    env = notebook_namespace("solutions", NAME)
    batch_mean = env["BatchMean"]

    def make(total=False, host_loop=False, no_outfeed=False):
        """The solution, with one mistake."""
        def build(graph, infeed, outfeed, iterations):
            mean = graph.add_variable(ipu.FLOAT, [1], "mean")
            graph.set_tile_mapping(mean, 0)

            def body(mean, images):
                cs = graph.add_compute_set("batch mean")
                x = images.flatten()
                graph.add_vertex(cs, batch_mean, {"x": x[:-1] if total else x,
                                                  "out": mean[0]}, tile=0)
                if no_outfeed:
                    return ipu.Execute(cs)
                return [ipu.Execute(cs), outfeed.enqueue(mean)]

            return loops.repeat(1 if host_loop else iterations, body, [mean], infeed)

        return build

    assert "expected the on-device loop ipu.Repeat(3, ...)" in failure(
        "06.3", make(host_loop=True))
    msg = failure("06.3", make(total=True))
    assert "batch means the outfeed returned after run 1[0]: expected" in msg
    assert msg.startswith("iterations=3, batches of 4 images: ")
    msg = failure("06.3", make(no_outfeed=True))
    assert "iterations=3, batches of 4 images: your loop sends nothing to the host" in msg


def test_infeed_loop_the_learners_codelet_is_checked_apart(solved):
    class HalfMean(ipu.Vertex):  # the notebook's BatchMean, off by a factor of 2
        x = ipu.Input(ipu.Vector(ipu.FLOAT))
        out = ipu.Output(ipu.FLOAT)

        def compute(self):
            self.out[...] = self.x.mean(axis=-1) / 2

    kept, solved["BatchMean"] = solved["BatchMean"], HalfMean  # build_loop's global
    try:
        msg = failure("06.3", solved["build_loop"])
    finally:
        solved["BatchMean"] = kept
    assert msg.startswith("iterations=3, batches of 4 images: your codelet HalfMean on x = ")
    assert "(the mean of x)" in msg


# -- 06.4 -----------------------------------------------------------------------------------
class PixelMax(ipu.Vertex):
    images = ipu.Input(ipu.Vector(ipu.FLOAT))
    best = ipu.InOut(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.best[...] = np.maximum(self.best, self.images.max(axis=-1, keepdims=True))


def running_max(init=-np.inf, wrong_axis=False):
    """A solution to 06.4, with one mistake."""
    def build(graph, infeed, outfeed, iterations):
        best = graph.add_variable(ipu.FLOAT, [4, 4], "best")
        graph.set_tile_mapping(best, 0)
        if init is not None:
            graph.set_initial_value(best, np.full((4, 4), init, np.float32))

        def body(best, images):
            cs = graph.add_compute_set("running max")
            pixels = images.reshape([images.shape[0], 16])
            pixels = pixels if wrong_axis else pixels.transpose()
            for p in range(16):
                graph.add_vertex(cs, PixelMax, {"images": pixels[p % pixels.shape[0]],
                                                "best": best.flatten()[p:p + 1]}, tile=0)
            return [ipu.Execute(cs), outfeed.enqueue(best)]

        return loops.repeat(iterations, body, [best], infeed)

    return build


def test_running_max_solution_and_mistakes():
    assert lesson06.check_running_max(running_max()).passed
    assert "where does the maximum start?" in failure("06.4", running_max(init=None))
    msg = failure("06.4", running_max(wrong_axis=True))
    assert "the running maximum after call 1" in msg
    assert "expected the on-device loop" in failure("06.4", lambda g, i, o, n: None)


# -- 06.5 -----------------------------------------------------------------------------------
def sgd(mean=True, update_first=False, no_two=False):
    """The solution to 06.5, with one mistake."""
    from ipukit.poplibs import expr, poplin, popops, poputil

    def build(graph, infeed, outfeed, iterations, lr, d):
        w = graph.add_variable(ipu.FLOAT, [d, 1], "w")
        poputil.map_tensor_linearly(graph, w)
        graph.set_initial_value(w, np.zeros((d, 1), np.float32))
        a, b = expr._1, expr._2

        def body(w, x, y):
            prog = ipu.Sequence()
            n = x.shape[0]

            def error():
                return popops.map(graph, a - b, [poplin.mat_mul(graph, x, w, prog),
                                                 y.reshape([n, 1])], prog)

            err = error()
            if update_first:
                grad = poplin.mat_mul(graph, x.transpose(), err, prog)
                popops.scaled_add_to(graph, w, grad, -2.0 * lr / n, prog)
                err = error()
            total = popops.reduce(graph, popops.map(graph, a * a, [err], prog), [0, 1],
                                  popops.Operation.ADD, prog)
            loss = popops.map(graph, a * (1.0 / n), [total], prog) if mean else total
            if not update_first:
                grad = poplin.mat_mul(graph, x.transpose(), err, prog)
                popops.scaled_add_to(graph, w, grad, (-1.0 if no_two else -2.0) * lr / n,
                                     prog)
            prog.add(outfeed.enqueue(loss))
            return prog

        return loops.repeat(iterations, body, [w], infeed), w

    return build


def test_sgd_solution_and_mistakes():
    assert lesson06.check_sgd(sgd()).passed
    assert "your losses are 8 x too big" in failure("06.5", sgd(mean=False))
    assert "the losses outfed by call 1[0]" in failure("06.5", sgd(update_first=True))
    assert "the losses outfed by call 1[1]: expected" in failure("06.5", sgd(no_two=True))
    assert "return a pair" in failure("06.5", lambda *args: None)


# -- modes and the grader -------------------------------------------------------------------
def test_raise_mode_raises_after_showing(capsys):
    feedback.set_mode("raise")
    with pytest.raises(AssertionError, match="06.4"):
        lesson06.check_running_max(lambda *args: None)
    assert "WRONG · Exercise 06.4" in capsys.readouterr().out


def test_grader_cli_scores_the_solutions_in_a_fresh_process():
    solution = str(kit_notebook("solutions", NAME))
    out = subprocess.run([sys.executable, "-m", "ipukit.grade", solution, "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    report = json.loads(out.stdout)
    assert (report["lesson"], report["score"], report["max_score"]) == ("06", 16, 16)
    assert [(e["id"], e["status"]) for e in report["exercises"]] == [
        (ex, "passed") for ex in CHECKS]
    assert report["errors"] == []


# -- 06.6 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n, steps", [(1, 0), (2, 1), (6, 8), (7, 16), (27, 111), (97, 118)])
def test_collatz_reference(n, steps):  # OEIS A006577: 0, 1, 7, 2, 5, 8, 16, 3, 19, ...
    assert lesson06.collatz_steps(n) == steps


def collatz(solved, do_while=False, swapped=False, no_reset=False, order=(0, 1, 2),
            stuck=False):
    """The solution to 06.6, with one mistake."""
    IsOdd, Halve, TriplePlusOne, Count, NotOne = (  # noqa: N806 - the notebook's codelets
        solved[k] for k in ("IsOdd", "Halve", "TriplePlusOne", "Count", "NotOne"))

    def build(graph, start, steps_out):
        n = graph.add_variable(ipu.UNSIGNED_INT, [], "n")
        steps = graph.add_variable(ipu.UNSIGNED_INT, [], "steps")
        odd = graph.add_variable(ipu.BOOL, [], "odd")
        go = graph.add_variable(ipu.BOOL, [], "go")
        zero = graph.add_constant(ipu.UNSIGNED_INT, [], 0, "zero")
        for t in (n, steps, odd, go, zero):
            graph.set_tile_mapping(t, 0)

        def execute(codelet, fields):
            cs = graph.add_compute_set(codelet.__name__)
            graph.add_vertex(cs, codelet, fields, tile=0)
            return ipu.Execute(cs)

        init = ipu.Sequence(ipu.Copy(start, n)) if no_reset else ipu.Sequence(
            ipu.Copy(start, n), ipu.Copy(zero, steps))
        branches = [execute(TriplePlusOne, {"n": n}), execute(Halve, {"n": n})]
        body = ipu.Sequence(execute(IsOdd, {"n": n, "odd": odd}),
                            ipu.If(odd, *(branches[::-1] if swapped else branches)),
                            execute(Count, {"steps": steps}))
        cond = execute(NotOne, {"n": n, "go": go})
        run = ipu.RepeatWhileTrue(cond, go, execute(Count, {"steps": steps}) if stuck
                                  else body)
        if do_while:  # the body once before the first test
            run = ipu.Sequence(body, ipu.RepeatWhileTrue(cond, go, body))
        programs = [init, run, ipu.Copy(steps, steps_out)]
        return [programs[i] for i in order]

    return build


def test_collatz_solution_and_mistakes(solved):
    assert lesson06.check_collatz(collatz(solved)).passed
    msg = failure("06.6", collatz(solved, do_while=True))
    assert msg.startswith("start n = 1: engine.run(0), run(1), run(2) gave 3 steps, expected 0")
    assert "runs cond first, and the body only while the predicate is true" in msg
    msg = failure("06.6", collatz(solved, no_reset=True))  # 0 + 1 steps for n = 2, then:
    assert "start n = 27 (loaded after [1, 2]): engine.run(0), run(1), run(2) gave 112 steps, "\
        "expected 111 (27, 82, 41, 124, 62, 31, 94, 47, 142, ..., 1)" in msg
    assert "adds the previous start's 1 steps: program 0 must set the counter to 0" in msg
    msg = failure("06.6", collatz(solved, order=(0, 2, 1)))  # run(1) reads, run(2) loops
    assert "start n = 2 (loaded after [1]): engine.run(0), run(1), run(2) gave 0 steps" in msg
    msg = failure("06.6", collatz(solved, swapped=True))  # 2 -> 7 -> 3 -> 1
    assert msg.startswith("start n = 2 (loaded after [1]): engine.run(0), run(1), run(2) "
                          "gave 3 steps, expected 1 (2, 1)")
    msg = failure("06.6", collatz(solved, stuck=True))  # a body that leaves n as it is
    assert msg.startswith("start n = 2 (loaded after [1]): your graph fails when run: "
                          "ProgramError: RepeatWhileTrue ran")
    assert "is still true" in msg
    msg = failure("06.6", lambda graph, start, steps_out: [])
    assert "return the list of three programs [init, run, read], got []" in msg


def test_collatz_second_run_of_the_loop_must_not_count(solved):
    """A program 1 that leaves n at 2 after its loop: the first count is right, running
    program 1 again takes one more step."""
    def build(graph, start, steps_out):
        init, run, read = solved["build_collatz"](graph, start, steps_out)
        two = graph.add_constant(ipu.UNSIGNED_INT, [], 2, "two")
        graph.set_tile_mapping(two, 0)
        n = init.programs[0].dst  # the solution's Copy(start, n)
        return [init, ipu.Sequence(run, ipu.Copy(two, n)), read]

    msg = failure("06.6", build)
    assert msg.startswith("start n = 1: running program 1 again once n is 1, then program "
                          "2, gave 1 steps, expected still 0")


def test_collatz_codelets_are_checked_by_name(solved):
    class NotOne(ipu.Vertex):  # a condition that stops one step early
        n = ipu.Input(ipu.UNSIGNED_INT)
        go = ipu.Output(ipu.BOOL)

        def compute(self):
            self.go[...] = self.n > 2

    class Step(ipu.Vertex):  # not one of the exercise's codelets
        n = ipu.InOut(ipu.UNSIGNED_INT)

        def compute(self):
            self.n[...] = self.n

    def with_codelet(cls, name):
        def build(graph, start, steps_out):
            kept = solved[name]
            solved[name] = cls
            try:
                return solved["build_collatz"](graph, start, steps_out)
            finally:
                solved[name] = kept
        return build

    assert "your codelet NotOne on n = 2: expected go = 1, got 0" in failure(
        "06.6", with_codelet(NotOne, "NotOne"))
    msg = failure("06.6", with_codelet(Step, "Halve"))
    assert "codelet 'Step' is not one of the exercise's (IsOdd, Halve, TriplePlusOne, " in msg


# -- the kernel sends graphs, never the numbers they computed (issue 26 point 1) -----------
RIGHT = """\
import numpy as np
from ipukit.grading import feedback, lesson06, plain
def right(ex_id, c):  # what the old trials sent, worked out from the case's data if it has any
    if ex_id == '06.3':
        n, data = c['iterations'], c.get('images', np.zeros((2 * c['iterations'], 1)))
        means = np.asarray(data, np.float64).reshape(2, n, -1).mean(axis=2)
        last = c.get('mode') == 'LAST'  # the outfeed's mode, where the case had one
        return {'runs': [{'dequeued': (r + 1) * n, 'enqueued': (r + 1) * n,
                          'out': means[r, -1:] if last else means[r]} for r in range(2)],
                'num_runs': 2}
    if ex_id == '06.4':
        data = np.asarray(c.get('images', np.zeros((3, 4, 4))), np.float64)
        k = len(data) // 3
        return [data[:(r + 1) * k].max(axis=0) for r in range(3)]
    if ex_id == '06.5':
        n, b = c['iterations'], c['batch']
        x = np.asarray(c.get('x', np.zeros((2 * n * b, c['features']))))
        y = np.asarray(c.get('y', np.zeros(2 * n * b)))
        w, calls = np.zeros(c['features']), []
        for k in range(2):
            part = slice(k * n * b, (k + 1) * n * b)
            losses, w = lesson06.sgd_reference(x[part], y[part], n, b, c['lr'], w)
            calls.append({'losses': losses, 'w': w})
        return calls
    steps = [lesson06.collatz_steps(s) for s in c.get('starts', [1])]
    return [[s, s] for s in steps]
"""
FORGED = RIGHT + """\
real = feedback.run_trials
def forged(ex, cases, answers):
    if ex.id in ('06.3', '06.4', '06.5', '06.6'):
        return [{'ok': plain.encode(right(ex.id, c))} for c in cases]
    return real(ex, cases, answers)
feedback.run_trials = forged
"""


def test_numbers_without_a_graph_score_nothing(solved):
    """06.3-06.6: the judge's data (images, (x, y), start values) never reach the kernel,
    and what the kernel sends is a graph the judge runs: numbers alone score nothing."""
    for ex_id in ("06.3", "06.4", "06.5", "06.6"):
        ex = feedback.EXERCISES[ex_id]
        cases = feedback.notebook_cases(ex)
        private = {k for c in cases for k in c if k.startswith("_")}
        assert private and not private & {k for c in cases for k in feedback.public(c)}
        outputs = feedback.run_trials(ex, cases, (solved[ex.answers[0]],))
        assert feedback.judge(ex, outputs, cases) is None  # the honest graph passes
        # the old trials' right numbers, even worked out from the judge's own data
        shown = [{k.lstrip("_"): v for k, v in c.items()} for c in cases]
        namespace = {}
        exec(RIGHT, namespace)
        forged = [{"ok": plain.encode(namespace["right"](ex_id, c))} for c in shown]
        with pytest.raises(feedback.Wrong, match="the trial gave no 'codelets'|your graph "
                           "cannot be rebuilt: GraphDataError"):
            feedback.judge(ex, forged, cases)


def test_forged_outputs_score_nothing_through_the_grader(tmp_path):
    """Through ``python -m ipukit.grade``: a cell that replaces the kernel's trials with
    the old trials' numbers (they scored 12/12 when the data were the kernel's) scores
    nothing on 06.3-06.6; the honest solutions notebook scores 16/16
    (test_grader_cli_scores_the_solutions_in_a_fresh_process)."""
    points = graded_points("solutions", NAME, FORGED, tmp_path / "06_forged.ipynb")
    assert points == {"06.1": 2, "06.2": 2, "06.3": 0, "06.4": 0, "06.5": 0, "06.6": 0}
