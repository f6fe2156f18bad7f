"""Lesson 09's checks: solutions score full marks, untouched exercises score zero, the
judged path (cases and verdict in the judge, plain data in between) agrees, and wrong
answers get feedback that names what is wrong."""

import numpy as np
import pytest

from ipukit.grading import feedback, lesson09, plain
from ipukit.parallel import optim, schedule
from tests.lessons import (
    SOLVED_AND_UNTOUCHED,
    grade_exercises,
    graded_points,
    judged,
    judged_checks_hold,
    notebook_namespace,
    solution_trials,
    to_judge,
)

NOTEBOOK = "09_accumulation_recomputation_offloading.ipynb"
CHECKS = {"09.1": ("check_peak_bytes", "peak_bytes"),
          "09.2": ("check_recomputed_stash", "recomputed_stash"),
          "09.3": ("check_largest_micro_batch", "largest_micro_batch"),
          "09.4": ("check_accumulation", "accumulate_step"),
          "09.5": ("check_checkpoints", "choose_checkpoints"),
          "09.6": ("check_offloaded_update", "offloaded_update")}


@pytest.fixture(scope="module")
def solution():
    return notebook_namespace("solutions", NOTEBOOK)


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    grade_exercises(lesson09, "09", NOTEBOOK, CHECKS, folder, status)


@pytest.mark.parametrize("check, answer", CHECKS.values())
def test_the_judged_path_passes_the_solutions_on_fresh_cases(solution, check, answer):
    r = judged(getattr(lesson09, check), solution[answer], seed=3)
    assert r.passed, r.text()


def test_every_check_is_judged_on_plain_data():
    judged_checks_hold("09", NOTEBOOK)


def test_stash_of_one_micro_batch_counted_by_hand():
    # Dense(a, 40) caches its float32 input, ReLU a bool mask, Dense(40, b) its input, ReLU
    # a mask; the head Dense(6, 3) its input, the loss its log-probabilities and int64 labels.
    mb = 5
    _, r = lesson09.train([8, 6, 6], 40, 3, "sequential", 1, mb, optimizer=optim.SGD(0.1))
    block = [mb * (a * 4 + 40 + 40 * 4 + 6) for a in (8, 6)]
    head = mb * (6 * 4 + 3 * 4 + 8)
    assert lesson09.peak_stash(r) == [block[0], block[1] + head]


def test_peak_bytes_feedback():
    def one_in_flight(kind, g, w, s, slots, off):
        return [x * (2 + slots) + y for x, y in zip(w, s)]

    r = lesson09.check_peak_bytes(one_in_flight, show=False)
    assert "Stage 0 holds 5 micro-batches at once in this schedule, not one" in r.message

    def ignores_offload(kind, g, w, s, slots, off):
        p = schedule(kind, len(w), g).peak_activations()
        return [x * (2 + slots) + p[k] * s[k] for k, x in enumerate(w)]

    r = lesson09.check_peak_bytes(ignores_offload, show=False)
    assert "Offloaded optimiser state lives in host memory" in r.message
    assert "1f1b" in r.message and "hint " in r.message


def test_recomputed_stash_feedback():
    r = lesson09.check_recomputed_stash(lambda p, i, a: p * a, show=False)
    assert "That is the stash without recomputation" in r.message
    r = lesson09.check_recomputed_stash(lambda p, i, a: p * i, show=False)
    assert "recomputes one micro-batch's activations" in r.message
    r = lesson09.check_recomputed_stash(lambda p, i, a: p * i + a, show=False)
    assert "has already left the FIFO" in r.message
    # right whenever a micro-batch's activations are at least its input (every MLP stage)
    r = lesson09.check_recomputed_stash(lambda p, i, a: (p - 1) * i + a, show=False)
    assert "stage 1 of a CNN" in r.message and "the max-pool stashes an index" in r.message


def test_a_max_pool_stage_stashes_less_than_its_input():
    # (mb, 4, 6, 6) float32 in: the max-pool's int64 indices (mb, 4, 3, 3), the pooled
    # floats, the loss's log-probabilities (mb, 3) and int64 labels
    mb = 3
    act = lesson09.peak_stash(lesson09._run_cnn("sequential", 1, mb, False))
    assert act[1] == mb * (36 * 8 + 36 * 4 + 3 * 4 + 8) < mb * 144 * 4


def test_largest_micro_batch_feedback():
    r = lesson09.check_largest_micro_batch(lambda make, shape, classes: 10, show=False)
    assert "micro-batches of 11 fit too" in r.message
    r = lesson09.check_largest_micro_batch(lambda make, shape, classes: 10_000, show=False)
    assert "raises OutOfMemoryError" in r.message
    r = lesson09.check_largest_micro_batch(lambda make, shape, classes: 0, show=False)
    assert "you said 0, but micro-batches of 1 fit too" in r.message
    r = lesson09.check_largest_micro_batch(lambda make, shape, classes: -1, show=False)
    assert "a micro-batch size is 0 or more" in r.message

    def at_least_one(make, shape, classes):  # starts its search at 1: never answers 0
        lo, hi = 1, 2
        while lesson09._fits(make, shape, hi):
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if lesson09._fits(make, shape, mid) else (lo, mid)
        return lo

    r = lesson09.check_largest_micro_batch(at_least_one, show=False)
    assert "(grouped, AdamW, hidden width 512: weights and state alone overflow): you said " \
           "1, but a run with micro-batches of 1 raises OutOfMemoryError" in r.message


def test_recomputation_and_offload_let_larger_micro_batches_fit():
    fits = {}
    for name, (make, shape, _) in lesson09._factories().items():
        fits[name] = max([0] + [mb for mb in (1, 8, 16, 32, 64, 128)
                                if lesson09._fits(make, shape, mb)])
    base, recompute, offload, overflow = fits.values()
    assert 0 < base < recompute and base < offload and overflow == 0


def test_docstring_example_runs():
    import doctest

    result = doctest.testmod(lesson09)
    assert result.failed == 0 and result.attempted > 0


def test_accumulation_feedback():
    def no_mean(w, batches, grad, lr):
        return w - lr * sum(grad(w, x, y) for x, y in batches)

    r = lesson09.check_accumulation(no_mean, show=False)
    assert "did not divide by their number" in r.message

    def step_each(w, batches, grad, lr):
        for x, y in batches:
            w = w - lr * grad(w, x, y)
        return w

    r = lesson09.check_accumulation(step_each, show=False)
    assert "updated the weights after every micro-batch" in r.message

    def twice(w, batches, grad, lr):
        acc = sum(grad(w, x, y) for x, y in batches) + 0 * grad(w, *batches[0])
        return w - lr * acc / len(batches)

    r = lesson09.check_accumulation(twice, show=False)
    assert "call grad once per micro-batch (4 calls), you made 5" in r.message


# -- 09.4: only grad knows the model, so the right weights prove the accumulation ----------
FORGED_ACCUMULATION = """\
import numpy as np
from ipukit.grading import feedback, plain
real = feedback.run_trials
def step(case):  # a full-batch step of the plain squared error, and grad's calls as claimed
    w, x, y = (np.asarray(case[k], np.float64) for k in ('w', 'x', 'y'))
    return {'w': w - case['lr'] * 2 * x.T @ (x @ w - y) / len(x),
            'calls': case['micro_batches']}
def forged(ex, cases, answers):
    if ex.id == '09.4':
        return [{'ok': plain.encode(step(c))} for c in cases]
    return real(ex, cases, answers)
feedback.run_trials = forged
"""


def test_weights_worked_out_without_grad_score_nothing():
    """A function that calls grad once per micro-batch for show but works the step out
    from x and y (what the record of calls let through) fails: only grad knows each
    sample's weight in the loss; so does the reviewer's forged record."""
    def for_show(w, batches, grad, lr):
        for x, y in batches:
            grad(w, x, y)
        x, y = np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])
        return w - lr * 2 * x.T @ (x @ w - y) / len(x)

    r = lesson09.check_accumulation(for_show, show=False)
    assert not r.passed and "(one step on the whole batch), got" in r.message

    def whole_batch(w, batches, grad, lr):  # one call on the whole batch: not a micro-batch
        x, y = np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])
        return w - lr * grad(w, x, y)

    r = lesson09.check_accumulation(whole_batch, show=False)
    assert "grad(w, x, y) takes one micro-batch (x, y) as given, got x of shape (12, 2)" \
        in r.message
    ex = feedback.EXERCISES["09.4"]
    cases = feedback.notebook_cases(ex)
    namespace = {}
    exec(FORGED_ACCUMULATION.rsplit("def forged", 1)[0], namespace)
    forged = [{"ok": plain.encode(namespace["step"](c))} for c in cases]
    with pytest.raises(feedback.Wrong, match="one step on the whole batch"):
        feedback.judge(ex, forged, cases)


def test_forged_accumulation_scores_nothing_through_the_grader(tmp_path):
    """Through ``python -m ipukit.grade``: the forged weights and record score 0 on 09.4,
    the rest of the solutions notebook keeps its points."""
    points = graded_points("solutions", NOTEBOOK, FORGED_ACCUMULATION, tmp_path / "09.ipynb")
    assert points["09.4"] == 0
    assert all(p > 0 for k, p in points.items() if k != "09.4")


def test_checkpointed_peak_by_hand():
    # 9 layers of 4 bytes, input 2, one micro-batch: checkpoints after layers 2 and 5
    # stash 2 + 8 and leave runs of 8, 8, 12 bytes
    acts = [4] * 9
    interleaved, then = lesson09.MODES[1], lesson09.MODES[0]
    assert lesson09.checkpointed_peak(acts, 2, 1, interleaved, [2, 5]) == 10 + 12
    # RecomputeThenBackpropagate ignores checkpoints: the input, then all 36 bytes at once
    assert lesson09.checkpointed_peak(acts, 2, 1, then, [2, 5]) == 2 + 36
    assert lesson09.checkpointed_peak(acts, 2, 3, interleaved, []) == 6 + 36
    # one checkpoint after layer 4 already gives 22: stash 2 + 4, runs of 16
    assert lesson09.checkpointed_peak(acts, 2, 1, interleaved, [4]) == 6 + 16
    assert lesson09.best_checkpoints(acts, 2, 1, interleaved) == (22, 1)
    assert lesson09.best_checkpoints(acts, 2, 1, then) == (38, 0)


def test_checkpoints_feedback():
    r = lesson09.check_checkpoints(lambda acts, inp, k, mode: [], show=False)
    assert "with checkpoints [] the stage's peak stash is 38 bytes" in r.message

    def always_cut(acts, inp, k, mode):  # sqrt(n) cuts whatever the mode
        return [2, 5]

    r = lesson09.check_checkpoints(always_cut, show=False)
    assert "give the smallest peak, 22 bytes, but 1 checkpoint can give it too" in r.message

    def cut_in_flight(acts, inp, k, mode):  # right with one micro-batch in flight only
        return [] if mode == lesson09.MODES[0] else [4] if k == 1 else [2, 5]

    r = lesson09.check_checkpoints(cut_in_flight, show=False)
    assert "stashed once per micro-batch in flight (6 here)" in r.message

    def cut_unless_many(acts, inp, k, mode):  # right for Interleaved, one cut otherwise
        if mode == lesson09.MODES[0]:
            return [0]
        sets = [[i for i in range(len(acts)) if m >> i & 1] for m in range(1 << len(acts))]
        return min(sets, key=lambda c: lesson09.checkpointed_peak(acts, inp, k, mode, c))

    r = lesson09.check_checkpoints(cut_unless_many, show=False)
    assert "checkpoints [0] have no effect in RecomputeThenBackpropagate" in r.message
    assert "return []" in r.message
    r = lesson09.check_checkpoints(lambda acts, inp, k, mode: [99], show=False)
    assert "layers are numbered 0 to 8" in r.message
    r = lesson09.check_checkpoints(lambda acts, inp, k, mode: 3, show=False)
    assert "return a list of layer indices" in r.message


def test_offloaded_update_feedback():
    """Wrong programs for 09.6 fail naming the case and the mistake (Graphcore's TF docs:
    offloaded state is "streamed onto the device and then streamed back to the remote
    memory after it has been updated")."""
    from ipukit import Copy, Sequence
    from ipukit.poplibs import expr, popops, poputil

    def update(graph, weights, grads, buf, lr, momentum, copy_in=True, copy_out=True,
               swapped=False):
        prog = Sequence()
        state = graph.add_variable(weights.dtype, weights.shape, "momentum")
        poputil.map_tensor_linearly(graph, state)
        if copy_in:
            prog.add(Copy(buf, state))
        steps = [lambda: popops.map(graph, momentum * expr._1 + expr._2, [state, grads],
                                    prog, "m", inplace=True),
                 lambda: popops.map(graph, expr._1 - lr * expr._2, [weights, state], prog,
                                    "w", inplace=True)]
        for step in reversed(steps) if swapped else steps:
            step()
        if copy_out:
            prog.add(Copy(state, buf))
        return prog

    r = lesson09.check_offloaded_update(lambda *a: update(*a, copy_out=False), show=False)
    assert "run 1: copy the updated state back" in r.message and "0 times" in r.message
    r = lesson09.check_offloaded_update(lambda *a: update(*a, copy_in=False), show=False)
    assert "copy the state in from the remote buffer once per update" in r.message
    r = lesson09.check_offloaded_update(lambda *a: update(*a, swapped=True), show=False)
    assert "7 weights on 3 tiles" in r.message and "update the state first" in r.message

    def out_then_in(graph, weights, grads, buf, lr, momentum):
        prog = update(graph, weights, grads, buf, lr, momentum, copy_in=False)
        state = prog.programs[-1].src
        prog.add(Copy(buf, state))
        return prog

    r = lesson09.check_offloaded_update(out_then_in, show=False)
    assert "copies the state back before it copies it in" in r.message


# -- 09.6 is judged on the graph (issue 26 point 1) ------------------------------------------

def test_09_6_right_numbers_without_a_graph_score_nothing():
    ex, cases, sent = solution_trials("09.6", NOTEBOOK)
    assert all(not {"weights", "state", "grads"} & set(feedback.public(c)) for c in cases)
    assert feedback.judge(ex, to_judge(sent), cases) is None
    right = []  # even knowing the judge's weights, state and gradients
    for c in cases:
        w, state = lesson09.momentum_reference(c)
        right.append({"weights": w, "state": state, "runs": [[["remote", "s <- " +
                      lesson09.STATE_BUFFER, 4 * c["n"]]]] * 2})
    with pytest.raises(feedback.Wrong, match="7 weights on 3 tiles, lr=0.1, momentum=0.9: "
                       "your graph cannot be rebuilt: GraphDataError"):
        feedback.judge(ex, to_judge(right), cases)


def test_09_6_hand_edited_graphs_are_run_by_the_judge_and_named():
    ex, cases, sent = solution_trials("09.6", NOTEBOOK)
    no_copy_back = [dict(g, programs=[{"Sequence": g["programs"][0]["Sequence"][:-1]}])
                    for g in sent]
    with pytest.raises(feedback.Wrong, match="run 1: copy the updated state back"):
        feedback.judge(ex, to_judge(no_copy_back), cases)
    bigger = [dict(g, remote_buffers=[[b[0], b[1], b[2] + 1, *b[3:]]
                                      for b in g["remote_buffers"]]) for g in sent]
    with pytest.raises(feedback.Wrong, match="does not keep the exercise's remote buffer "
                       "'optimizer/momentum'"):
        feedback.judge(ex, to_judge(bigger), cases)
    no_update = [dict(g, programs=[{"Sequence": [g["programs"][0]["Sequence"][0],
                                                  g["programs"][0]["Sequence"][-1]]}])
                 for g in sent]  # in and out, no update in between
    with pytest.raises(feedback.Wrong, match="after two updates expected the state in "
                       "Streaming Memory"):
        feedback.judge(ex, to_judge(no_update), cases)
