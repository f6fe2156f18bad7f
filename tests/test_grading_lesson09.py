"""Lesson 09's checks: solutions score full marks, untouched exercises score zero, and
wrong answers get feedback that names what is wrong."""


from ipukit.grading import lesson09
from ipukit.parallel import optim, schedule
from tests.lessons import SOLVED_AND_UNTOUCHED, grade_exercises

NOTEBOOK = "09_accumulation_recomputation_offloading.ipynb"
CHECKS = {"09.1": ("check_peak_bytes", "peak_bytes"),
          "09.2": ("check_recomputed_stash", "recomputed_stash"),
          "09.3": ("check_largest_micro_batch", "largest_micro_batch"),
          "09.4": ("check_accumulation", "accumulate_step"),
          "09.5": ("check_checkpoints", "choose_checkpoints")}


@SOLVED_AND_UNTOUCHED
def test_solutions_pass_and_untouched_exercises_are_not_solved(folder, status):
    grade_exercises(lesson09, "09", NOTEBOOK, CHECKS, folder, status)


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

    r = lesson09.check_peak_bytes(one_in_flight)
    assert "Stage 0 holds 5 micro-batches at once in this schedule, not one" in r.message

    def ignores_offload(kind, g, w, s, slots, off):
        p = schedule(kind, len(w), g).peak_activations()
        return [x * (2 + slots) + p[k] * s[k] for k, x in enumerate(w)]

    r = lesson09.check_peak_bytes(ignores_offload)
    assert "Offloaded optimiser state lives in host memory" in r.message
    assert "1f1b" in r.message and "hint " in r.message


def test_recomputed_stash_feedback():
    r = lesson09.check_recomputed_stash(lambda p, i, a: p * a)
    assert "That is the stash without recomputation" in r.message
    r = lesson09.check_recomputed_stash(lambda p, i, a: p * i)
    assert "recomputes one micro-batch's activations" in r.message
    r = lesson09.check_recomputed_stash(lambda p, i, a: p * i + a)
    assert "has already left the FIFO" in r.message


def test_largest_micro_batch_feedback():
    r = lesson09.check_largest_micro_batch(lambda make, shape, classes: 10)
    assert "micro-batches of 11 fit too" in r.message
    r = lesson09.check_largest_micro_batch(lambda make, shape, classes: 10_000)
    assert "raises OutOfMemoryError" in r.message
    r = lesson09.check_largest_micro_batch(lambda make, shape, classes: 0)
    assert "at least one sample" in r.message


def test_recomputation_and_offload_let_larger_micro_batches_fit():
    fits = {}
    for name, make, shape, _ in lesson09._factories():
        sizes = [mb for mb in (8, 16, 32, 64, 128) if lesson09._fits(make, shape, mb)]
        fits[name] = max(sizes)
    plain, recompute, offload = fits.values()
    assert plain < recompute and plain < offload


def test_docstring_example_runs():
    import doctest

    result = doctest.testmod(lesson09)
    assert result.failed == 0 and result.attempted > 0


def test_accumulation_feedback():
    def no_mean(w, batches, grad, lr):
        return w - lr * sum(grad(w, x, y) for x, y in batches)

    r = lesson09.check_accumulation(no_mean)
    assert "did not divide by their number" in r.message

    def step_each(w, batches, grad, lr):
        for x, y in batches:
            w = w - lr * grad(w, x, y)
        return w

    r = lesson09.check_accumulation(step_each)
    assert "updated the weights after every micro-batch" in r.message

    def twice(w, batches, grad, lr):
        acc = sum(grad(w, x, y) for x, y in batches) + 0 * grad(w, *batches[0])
        return w - lr * acc / len(batches)

    r = lesson09.check_accumulation(twice)
    assert "call grad once per micro-batch (4 calls), you made 5" in r.message


def test_checkpointed_peak_by_hand():
    # 9 layers of 4 bytes, input 2, one micro-batch: checkpoints after layers 2 and 5
    # stash 2 + 8 and leave runs of 8, 8, 12 bytes
    acts = [4] * 9
    interleaved, then = lesson09.MODES[1], lesson09.MODES[0]
    assert lesson09.checkpointed_peak(acts, 2, 1, interleaved, [2, 5]) == 10 + 12
    assert lesson09.checkpointed_peak(acts, 2, 1, then, [2, 5]) == 10 + 28
    assert lesson09.checkpointed_peak(acts, 2, 3, interleaved, []) == 6 + 36
    assert lesson09.best_checkpoint_peak(acts, 2, 1, interleaved) == 22


def test_checkpoints_feedback():
    r = lesson09.check_checkpoints(lambda acts, inp, k, mode: [])
    assert "with checkpoints [] the stage's peak stash is 38 bytes" in r.message

    def always_cut(acts, inp, k, mode):  # sqrt(n) cuts whatever the mode
        return [2, 5]

    r = lesson09.check_checkpoints(always_cut)
    assert "stashed once per micro-batch in flight (6 here)" in r.message

    def cut_unless_many(acts, inp, k, mode):  # right for Interleaved, one cut otherwise
        if mode == lesson09.MODES[0]:
            return [0]
        sets = [[i for i in range(len(acts)) if m >> i & 1] for m in range(1 << len(acts))]
        return min(sets, key=lambda c: lesson09.checkpointed_peak(acts, inp, k, mode, c))

    r = lesson09.check_checkpoints(cut_unless_many)
    assert "so a checkpoint only adds stash" in r.message
    r = lesson09.check_checkpoints(lambda acts, inp, k, mode: [99])
    assert "layers are numbered 0 to 8" in r.message
