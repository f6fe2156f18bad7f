"""Lesson 08's checks: solutions score full marks, untouched exercises score zero, the
judged path (cases and verdict in the judge, plain data in between) agrees, and wrong
answers get feedback that names what is wrong."""

import itertools

import numpy as np
import pytest

from ipukit.grading import lesson08
from ipukit.parallel import schedule
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    judged,
    judged_checks_hold,
    notebook_namespace,
)

NOTEBOOK = "08_pipelining_schedules.ipynb"
CHECKS = {"08.1": ("check_simulator", "simulate"),
          "08.2": ("check_grouped_ops", "grouped_ops"),
          "08.3": ("check_one_f_one_b", "one_f_one_b"),
          "08.4": ("check_deadlock", "find_deadlock"),
          "08.5": ("check_tf_pipeline", "make_pipeline_functions")}


@pytest.fixture(scope="module")
def solution():
    return notebook_namespace("solutions", NOTEBOOK)


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    grade_exercises(lesson08, "08", NOTEBOOK, CHECKS, folder, status)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("check, answer", CHECKS.values())
def test_the_judged_path_passes_the_solutions_on_fresh_cases(solution, check, answer, seed):
    r = judged(getattr(lesson08, check), solution[answer], seed=seed)
    assert r.passed, r.text()


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("08", NOTEBOOK)


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(lesson08)
    assert result.failed == 0 and result.attempted > 0


# -- 08.1 ---------------------------------------------------------------------------------


def test_reference_simulator_matches_schedule_timing_and_golden_cases():
    # GPipe p=4, m=8, t_F=1, t_B=2: 33 time units (pipeline-theory.md §1.8); 1F1B the same
    for kind in ("gpipe", "1f1b"):
        s = schedule(kind, 4, 8)
        end, stuck = lesson08.reference_run(lesson08.orders_of(s), [1] * 4, [2] * 4)
        assert not stuck and max(end.values()) == 33
        assert lesson08.reference_stash(lesson08.orders_of(s), end) == list(
            s.peak_activations())
    s = schedule("1f1b", 3, 5)
    t_f, t_b = [4, 1, 1], [1, 1, 6]
    end, _ = lesson08.reference_run(lesson08.orders_of(s), t_f, t_b)
    assert max(end.values()) == s.makespan(t_f, t_b)


def _naive_sim(orders, t_f, t_b):  # ignores the dependencies between stages
    span = max(sum((t_f if ph == "F" else t_b)[q] for ph, _ in o) for q, o in enumerate(orders))
    return span, [sum(ph == "F" for ph, _ in o) for o in orders]


def test_simulator_feedback(solution):
    r = lesson08.check_simulator(_naive_sim, show=False)
    assert "the busiest IPU's work alone" in r.message and "simulate(orders" in r.message
    r = lesson08.check_simulator(lambda orders, f, b: 3, show=False)
    assert "return (makespan, peak_stash)" in r.message

    def nan_span(orders, t_f, t_b):  # nan compares false with everything
        return float("nan"), solution["simulate"](orders, t_f, t_b)[1]

    r = lesson08.check_simulator(nan_span, show=False)
    assert r.status == "failed" and "you said nan" in r.message

    def peak_before_refill(orders, t_f, t_b):  # B releases two: misses a peak after a B
        span, stash = solution["simulate"](orders, t_f, t_b)
        end, _ = lesson08.reference_run(orders, t_f, t_b)
        peaks = []
        for q, order in enumerate(orders):
            held = peak = 0
            for _, d in sorted((end[(q, ph, m)], 1 if ph == "F" else -2) for ph, m in order):
                held += d
                peak = max(peak, held)
            peaks.append(peak if any(ph == "B" for ph, _ in order) else 0)
        return span, peaks

    r = lesson08.check_simulator(peak_before_refill, show=False)
    assert "IPU 0 holds at most 3 micro-batches at once, you said 2" in r.message


# -- 08.2 ---------------------------------------------------------------------------------


def test_lockstep_rule_is_tensorflows_grouped_for_one_stage_per_ipu():
    for n, g in [(2, 4), (3, 6), (4, 8), (5, 20)]:
        want = {(o.step, o.ipu, o.phase, o.stage, o.microbatch)
                for o in schedule("grouped", n, g).ops}
        assert lesson08.grouped_reference(list(range(n)), g) == want


def test_grouped_reference_of_the_concurrent_stages_figure():
    # TF's concurrent-pipeline-stages figure: A@0, B@1, [C0..C3]@[0..3], D@3; one
    # micro-batch runs A at k, B at k+1, all four Cs at k+2 and D at k+3
    ops = lesson08.grouped_reference([0, 1, [0, 1, 2, 3], 3], 8)
    forward0 = sorted((s, q, k) for s, q, ph, k, m in ops if ph == "F" and m == 0)
    assert forward0 == [(0, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 2), (2, 2, 2), (2, 3, 2),
                        (3, 3, 3)]


def _by_ipus(mapping, g):  # counts IPUs, not stages, in the backward steps
    ipus = len({q for e in mapping for q in (e if isinstance(e, list) else [e])})
    ops = []
    for k, e in enumerate(mapping):
        for q in e if isinstance(e, list) else [e]:
            ops += [(m + k, q, "F", k, m) for m in range(g)]
            ops += [(m + 2 * ipus - 1 - k, q, "B", k, m) for m in range(g)]
    return ops


def test_grouped_feedback():
    def library(mapping, g):  # one call of schedule("grouped"): stage k on IPU k
        return [(o.step, o.ipu, o.phase, o.stage, o.microbatch)
                for o in schedule("grouped", len(mapping), g).ops]

    r = lesson08.check_grouped_ops(library, show=False)
    assert r.status == "failed"
    assert "grouped_ops([0, 0, 1], 6): you run F0 of stage 1 on IPU 1; stage 1 runs on " \
           "IPU 0 (device_mapping[1])" in r.message
    r = lesson08.check_grouped_ops(_by_ipus, show=False)
    assert "Grouped runs it at step 3. You counted the IPUs (2)" in r.message
    text = r.picture["text"]
    assert text.startswith("yours (* differs from Grouped):") and "\nGrouped:" in text
    assert "B0s2*" in text and "background:#ffd7d5" in r.picture["html"]  # the cell marked

    def poptorch_rule(mapping, g):
        n = len(mapping)
        return [(s, q, ph, k, m) for s, q, ph, k, m in lesson08.grouped_reference(mapping, g)
                if ph == "F"] + [(m + 2 * n - 2 - k, q, "B", k, m) for _, q, ph, k, m in
                                 lesson08.grouped_reference(mapping, g) if ph == "B"]

    r = lesson08.check_grouped_ops(poptorch_rule, show=False)
    assert "as PopTorch (PopART) does" in r.message
    r = lesson08.check_grouped_ops(lambda mapping, g: [(0, 0, "F", 0, 0)] * 2, show=False)
    assert "twice" in r.message
    r = lesson08.check_grouped_ops(lambda mapping, g: [(0, 0, "F")], show=False)
    assert "(step, ipu, phase, stage, microbatch)" in r.message

    def forgets_concurrent(mapping, g):
        first = [e[0] if isinstance(e, list) else e for e in mapping]
        return [o for o in lesson08.grouped_reference(first, g)]

    r = lesson08.check_grouped_ops(forgets_concurrent, show=False)
    assert "grouped_ops([0, [1, 2], 2, 3], 8)" in r.message and "is missing" in r.message


# -- 08.3 ---------------------------------------------------------------------------------


def _brute_force_warmups(n, g, caps):
    """Every warm-up vector: the feasible ones (run to the end, within the limits)."""
    feasible = []
    for warm in itertools.product(*[range(1, min(n - k, g) + 1) for k in range(n)]):
        orders = lesson08._pattern(g, list(warm))
        end, stuck = lesson08.reference_run(orders, [1] * n, [2] * n)
        if not stuck and all(p <= c for p, c in zip(lesson08.reference_stash(orders, end),
                                                    caps)):
            feasible.append(list(warm))
    return feasible


@pytest.mark.parametrize("n, g, caps", [(4, 8, [2, 4, 4, 4]), (4, 8, [4, 1, 4, 4]),
                                        (4, 6, [3, 3, 3, 3]), (3, 5, [1, 3, 3]),
                                        (4, 3, [4, 4, 4, 4]), (5, 7, [5, 2, 4, 1, 1])])
def test_capped_warmups_are_the_largest_that_run_found_by_brute_force(n, g, caps):
    feasible = _brute_force_warmups(n, g, caps)
    best = lesson08.capped_warmups(n, g, caps)
    assert best in feasible
    assert all(all(a <= b for a, b in zip(w, best)) for w in feasible)  # it dominates


def test_capped_reference_without_binding_limits_is_1f1b():
    for n, g in [(4, 8), (3, 7), (4, 2), (1, 3)]:
        assert lesson08.capped_reference(n, g, [g] * n) == lesson08.orders_of(
            schedule("1f1b", n, g))


def _naive_caps(n, g, caps):  # each stage's own limit, not the one before it: deadlocks
    warm = [min(n - k, g, caps[k]) for k in range(n)]
    return lesson08._pattern(g, warm)


def test_one_f_one_b_feedback():
    r = lesson08.check_one_f_one_b(
        lambda n, g, caps: lesson08.orders_of(schedule("1f1b", n, g)), show=False)
    assert r.status == "failed"  # the library's 1F1B ignores the limits
    assert "max_in_flight=[2, 4, 4, 4]" in r.message
    assert "IPU 0 holds 4 micro-batches at once; its limit is 2" in r.message
    r = lesson08.check_one_f_one_b(lambda n, g, caps: [[("F",)]] * n, show=False)
    assert "(phase, microbatch)" in r.message

    def too_short(n, g, caps):  # one warm-up forward fewer: slower, but runs
        warm = lesson08.capped_warmups(n, g, caps)
        return lesson08._pattern(g, [max(1, w - 1) for w in warm])

    r = lesson08.check_one_f_one_b(too_short, show=False)
    assert "Your orders take" in r.message and "the limited 1F1B" in r.message


def test_a_deadlock_is_drawn_on_the_references_axis_for_every_ipu():
    r = lesson08.check_one_f_one_b(_naive_caps, show=False)
    assert "one_f_one_b(4, 8, max_in_flight=[2, 4, 4, 4])" in r.message
    assert ("Your orders deadlock: IPU 0 stops at B0, waiting for B0 of stage 1 (IPU 1); "
            "IPU 1 stops at F2, waiting for F2 of stage 0 (IPU 0)") in r.message
    yours, theirs = r.picture["text"].split("limited 1F1B:")
    rows = [line for line in yours.splitlines() if "|" in line]
    assert [line.split("|")[0].strip() for line in rows] == ["IPU0", "IPU1", "IPU2", "IPU3"]
    assert all("X" in line for line in rows)  # every IPU stops somewhere
    axis_yours = yours.strip().splitlines()[-1].split()
    axis_theirs = theirs.strip().splitlines()[-1].split()
    assert axis_yours == axis_theirs == ["0", "69"]  # the reference's time axis
    assert r.picture["html"].count("&#x2716;") == 4  # a stop mark on every IPU


# -- 08.4 ---------------------------------------------------------------------------------


def test_deadlock_feedback():
    r = lesson08.check_deadlock(lambda orders: [], show=False)
    assert "the IPUs stop at" in r.message
    r = lesson08.check_deadlock(lambda orders: [(0, "F", 0)], show=False)
    assert "these orders run to the end: return []" in r.message
    r = lesson08.check_deadlock(lambda orders: 7, show=False)
    assert "return a list of (ipu, phase, microbatch)" in r.message


# -- 08.5 ---------------------------------------------------------------------------------


def _functions(stage1_returns_labels=True, fixed_lr=None, wrap=True):
    from ipukit.grading.lesson08 import GradientDescentOptimizer, OptimizerFunctionOutput

    def make(w1, w2):
        def stage1(lr, images, labels):
            act = np.maximum(images.reshape(len(images), -1) @ w1, 0)
            return (lr, act, labels) if stage1_returns_labels else (lr, act)

        def stage2(lr, act, labels):
            logits = act @ w2
            top = logits.max(axis=1, keepdims=True)
            lp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
            return lr, -lp[np.arange(len(labels)), labels].mean()

        def optimizer_function(lr, loss):
            opt = GradientDescentOptimizer(fixed_lr or lr)
            return OptimizerFunctionOutput(opt, loss) if wrap else loss

        return [stage1, stage2], optimizer_function

    return make


def test_tf_pipeline_feedback():
    assert lesson08.check_tf_pipeline(_functions(), show=False).passed
    r = lesson08.check_tf_pipeline(_functions(stage1_returns_labels=False), show=False)
    assert "stage 1 was called with the outputs of stage 0 (2 values)" in r.message
    r = lesson08.check_tf_pipeline(_functions(fixed_lr=0.1), show=False)
    assert "learning rate is 0.1; use the learning rate the pipeline was given" in r.message
    r = lesson08.check_tf_pipeline(_functions(wrap=False), show=False)
    assert "return OptimizerFunctionOutput(optimizer, loss)" in r.message


def test_tf_pipeline_driver_puts_inputs_before_the_infeed():
    seen = []
    lesson08.run_tf_pipeline([lambda *a: seen.append(a) or a, lambda *a: a],
                             lambda *a: a, ["lr"], [("images", "labels")])
    assert seen == [("lr", "images", "labels")]
