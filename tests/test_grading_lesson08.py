"""Lesson 08's checks: solutions score full marks, untouched exercises score zero, and
wrong answers get feedback that names what is wrong."""


import numpy as np

from ipukit.grading import lesson08
from ipukit.parallel import schedule
from tests.lessons import SOLVED_AND_UNTOUCHED, grade_exercises

NOTEBOOK = "08_pipelining_schedules.ipynb"
CHECKS = {"08.1": ("check_simulator", "simulate"),
          "08.2": ("check_grouped_ops", "grouped_ops"),
          "08.3": ("check_one_f_one_b", "one_f_one_b"),
          "08.4": ("check_deadlock", "find_deadlock"),
          "08.5": ("check_tf_pipeline", "make_pipeline_functions")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    grade_exercises(lesson08, "08", NOTEBOOK, CHECKS, folder, status)




def test_grouped_ops_feedback():
    def off_by_one(n, g):
        return ([(m + k, k, "F", m) for m in range(g) for k in range(n)]
                + [(m + 2 * n - 2 - k, k, "B", m) for m in range(g) for k in range(n)])

    r = lesson08.check_grouped_ops(off_by_one)
    assert "you run B0 on IPU 1 at step 1 (it runs at step 2)" in r.message
    r = lesson08.check_grouped_ops(lambda n, g: [(m + k, k, "F", m) for m in range(g)
                                                 for k in range(n)])
    assert "is missing (8 of 16 ops missing)" in r.message and "hint " in r.message
    r = lesson08.check_grouped_ops(lambda n, g: [(0, 0, "F")])
    assert "(step, ipu, phase, microbatch)" in r.message



def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(lesson08)
    assert result.failed == 0 and result.attempted > 0


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


def test_simulator_feedback():
    r = lesson08.check_simulator(_naive_sim)
    assert "the busiest IPU's work alone" in r.message
    r = lesson08.check_simulator(lambda orders, f, b: 3)
    assert "return (makespan, peak_stash)" in r.message


def test_one_f_one_b_feedback():
    def reversed_warm_up(n, g):  # the last stage warms up longest: deadlocks
        out = []
        for k in range(n):
            w = min(k + 1, g)
            order = [("F", m) for m in range(w)]
            for m in range(w, g):
                order += [("B", m - w), ("F", m)]
            out.append(order + [("B", m) for m in range(g - w, g)])
        return out

    r = lesson08.check_one_f_one_b(reversed_warm_up)
    assert "Your order deadlocks" in r.message and "yours (t_F=1, t_B=2)" in r.text()

    def gpipe(n, g):
        return lesson08.orders_of(schedule("gpipe", n, g))

    r = lesson08.check_one_f_one_b(gpipe)
    assert "Your peak stash per IPU is [8, 8, 8, 8]; 1F1B's is [4, 3, 2, 1]" in r.message
    r = lesson08.check_one_f_one_b(lambda n, g: [[("F",)]] * n)
    assert "(phase, microbatch)" in r.message


def test_deadlock_feedback():
    r = lesson08.check_deadlock(lambda orders: [])
    assert "the IPUs stop at" in r.message
    r = lesson08.check_deadlock(lambda orders: [(0, "F", 0)])
    assert "these orders run to the end: return []" in r.message


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
    assert lesson08.check_tf_pipeline(_functions()).passed
    r = lesson08.check_tf_pipeline(_functions(stage1_returns_labels=False))
    assert "stage 1 was called with the outputs of stage 0 (2 values)" in r.message
    r = lesson08.check_tf_pipeline(_functions(fixed_lr=0.1))
    assert "learning rate is 0.1; use the learning rate the pipeline was given" in r.message
    r = lesson08.check_tf_pipeline(_functions(wrap=False))
    assert "return OptimizerFunctionOutput(optimizer, loss)" in r.message


def test_tf_pipeline_driver_puts_inputs_before_the_infeed():
    seen = []
    lesson08.run_tf_pipeline([lambda *a: seen.append(a) or a, lambda *a: a],
                             lambda *a: a, ["lr"], [("images", "labels")])
    assert seen == [("lr", "images", "labels")]
