"""The ``check_*`` functions of lesson 09: gradient accumulation, recomputation, offloading.

Every reference is measured with the pipeline runner: the peak bytes of each IPU and the
peak stash of each stage from a run's ``MemoryRecord``s, and whether a micro-batch size
fits from whether the run raises ``OutOfMemoryError``.

>>> from ipukit.grading import lesson09
>>> r = lesson09.check_recomputed_stash(lambda in_flight, input_bytes, activation_bytes: 0)
... # doctest: +ELLIPSIS
WRONG · Exercise 09.2 · the stash with recomputation: 0/2 points
   ...
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu
from ipukit.parallel import nn, optim, pipeline, schedule

from .common import optimisers, teaching_target
from .feedback import Wrong, as_int, as_ints, exercise


def ffn_stages(widths, hidden: int, classes: int):
    """One stage per entry of ``widths[:-1]``: Dense(w, hidden), ReLU, Dense(hidden, w'),
    ReLU; the last stage ends in Dense(widths[-1], classes), a classifier head."""
    stages = []
    for k, (a, b) in enumerate(zip(widths, widths[1:])):
        stages.append([nn.Dense(a, hidden, rng=2 * k), nn.ReLU(),
                       nn.Dense(hidden, b, rng=2 * k + 1), nn.ReLU()])
    stages[-1].append(nn.Dense(widths[-1], classes, rng=99))
    return stages


def train(widths, hidden, classes, kind, g, mb, tiles=64, seed=0, **options):
    """Build a pipeline of :func:`ffn_stages` on one IPU per stage and run it once.

    The optimiser state stays on chip unless ``offload_optimizer_state=True`` (TF's own
    default, None, would offload it)."""
    options.setdefault("offload_optimizer_state", False)
    target = teaching_target(len(widths) - 1, tiles)
    p = pipeline(ffn_stages(widths, hidden, classes), None, g, kind,
                 optimizer=options.pop("optimizer", None) or optim.AdamW(),
                 loss=nn.SoftmaxCrossEntropy(), target=target, **options)
    rng = np.random.default_rng(seed)
    return p, p.run(rng.normal(size=(g * mb, widths[0])).astype(np.float32),
                    rng.integers(0, classes, g * mb))


def peak_stash(result) -> list[int]:
    """The most bytes each IPU had stashed at once in a run."""
    ipus = sorted({m.ipu for m in result.memory})
    return [max(m.stash for m in result.memory if m.ipu == q) for q in ipus]


# -- 09.1 ---------------------------------------------------------------------------------

@exercise("09.1", "the peak memory of each IPU", points=3,
          hints=(
              'What does an IPU hold that never goes away, and what comes and goes?',
              'Weights, gradient accumulators and optimiser state (if on chip) stay; the stash '
              'peaks when the schedule holds the most micro-batches on that stage.',
              'IPU k holds its weights, as many bytes of gradient accumulators, optimizer_slots '
              'copies of optimiser state (none on the IPU when offloaded) and, at the peak, '
              'schedule(kind, N, g).peak_activations()[k] micro-batches of stash_bytes[k] each.',))
def check_peak_bytes(peak_bytes):
    """Exercise 09.1: ``peak_bytes(kind, gradient_accumulation, weight_bytes, stash_bytes,
    optimizer_slots, offload)`` → the peak bytes of each IPU (stage k on IPU k)."""

    widths, hidden, mb = [24, 16, 20, 12], 40, 5
    n = len(widths) - 1
    _, one = train(widths, hidden, 6, "sequential", 1, mb, optimizer=optim.SGD(0.1))
    stash = peak_stash(one)  # one micro-batch in flight
    for kind, g, opt, offload in [("grouped", 6, "AdamW", False),
                                  ("interleaved", 6, "Momentum", False),
                                  ("gpipe", 5, "SGD", False), ("1f1b", 7, "AdamW", True),
                                  ("poptorch", 5, "Momentum", True)]:
        make, slots = optimisers()[opt]
        p, r = train(widths, hidden, 6, kind, g, mb, optimizer=make(),
                     offload_optimizer_state=offload)
        weights = [s.param_bytes for s in p.stages]
        expected = [r.peak_memory()[q] for q in range(n)]
        what = (f"peak_bytes({kind!r}, gradient_accumulation={g}, weight_bytes={weights}, "
                f"stash_bytes={stash}, optimizer_slots={slots}, offload={offload})")
        got = as_ints(peak_bytes(kind, g, list(weights), list(stash), slots, offload), n,
                      what)
        for q in range(n):
            if got[q] != expected[q]:
                raise Wrong(f"{what}: IPU {q}'s peak in the run is {expected[q]:,} bytes, "
                            f"you said {got[q]:,}" + _peak_diagnosis(
                                kind, n, g, weights[q], stash[q], slots, offload, q,
                                got[q], expected[q]))


def _peak_diagnosis(kind, n, g, w, stash, slots, offload, q, got, want) -> str:
    in_flight = schedule(kind, n, g).peak_activations()[q]
    static = w * (2 + (0 if offload else slots))
    if got == w * (2 + slots) + in_flight * stash and offload:
        return ". Offloaded optimiser state lives in host memory, not on the IPU."
    if got == static + stash:
        return (f". Stage {q} holds {in_flight} micro-batches at once in this schedule, "
                "not one.")
    if got - static == (in_flight - 1) * stash or got - static == (in_flight + 1) * stash:
        return f". Stage {q} holds {in_flight} micro-batches at its peak."
    if got == w * (1 + (0 if offload else slots)) + in_flight * stash:
        return ". Add the gradient accumulators (one per weight)."
    return ""


# -- 09.2 ---------------------------------------------------------------------------------


@exercise("09.2", "the stash with recomputation", points=2,
          hints=(
              "With recomputation, what is still stashed between a stage's forward and its "
              'backward?',
              "Only inputs stay; right before a backward one micro-batch's activations come "
              'back for a moment.',
              'With recomputation a stage stashes only its input for each micro-batch in '
              'flight. Right before a backward it pops that input and recomputes the forward, '
              "so for a moment it holds the other in_flight - 1 inputs plus one micro-batch's "
              'full activations. The peak is the larger of the two states.',))
def check_recomputed_stash(recomputed_stash):
    """Exercise 09.2: ``recomputed_stash(in_flight, input_bytes, activation_bytes)`` → the
    peak bytes a stage stashes with ``recomputation=True``."""

    widths, hidden, mb = [32, 8, 48, 16], 64, 4
    _, one = train(widths, hidden, 5, "sequential", 1, mb)
    act = peak_stash(one)
    inputs = [mb * w * 4 for w in widths[:-1]]  # float32 input of each stage
    for kind, g in [("grouped", 6), ("interleaved", 3), ("gpipe", 4), ("1f1b", 5)]:
        _, r = train(widths, hidden, 5, kind, g, mb, recomputation=True)
        measured = peak_stash(r)
        in_flight = schedule(kind, len(act), g).peak_activations()
        for k, want in enumerate(measured):
            what = (f"stage {k} of a {kind} pipeline (gradient_accumulation={g}): "
                    f"recomputed_stash(in_flight={in_flight[k]}, input_bytes={inputs[k]}, "
                    f"activation_bytes={act[k]})")
            got = as_int(recomputed_stash(in_flight[k], inputs[k], act[k]), what)
            if got != want:
                raise Wrong(f"{what}: the run's peak stash is {want:,} bytes, you said "
                            f"{got:,}" + _recompute_diagnosis(in_flight[k], inputs[k],
                                                              act[k], got))


def _recompute_diagnosis(p, inp, act, got) -> str:
    if got == p * act:
        return ". That is the stash without recomputation."
    if got == p * inp:
        return (". Right before each backward the stage recomputes one micro-batch's "
                "activations: count them too.")
    if got == p * inp + act:
        return ". The recomputed micro-batch's input has already left the FIFO."
    return ""


# -- 09.3 ---------------------------------------------------------------------------------


def _fits(make_pipeline, sample_shape, mb) -> bool:
    p = make_pipeline()
    n = p.samples_per_run * mb
    try:
        p.run(np.zeros((n, *sample_shape), np.float32), np.zeros(n, dtype=np.int64))
    except ipu.OutOfMemoryError:
        return False
    return True


def _factories():
    """(description, factory, sample shape, classes) of pipelines on small IPUs."""
    target = teaching_target(2, tiles=1)

    def make(**options):
        options.setdefault("offload_optimizer_state", False)  # TF's None would offload
        return lambda: pipeline(ffn_stages([64, 64, 32], 256, 10), None, 4, "grouped",
                                optimizer=optim.AdamW(), loss=nn.SoftmaxCrossEntropy(),
                                target=target, **options)

    yield "grouped, AdamW", make(), (64,), 10
    yield "grouped, AdamW, recomputation", make(recomputation=True), (64,), 10
    yield "grouped, AdamW, offloaded optimiser state", make(offload_optimizer_state=True), \
        (64,), 10


@exercise("09.3", "the largest micro-batch that fits", points=2,
          hints=(
              'You may run the pipeline as often as you like: let it tell you what fits.',
              'Catch ipu.OutOfMemoryError; memory only grows with the micro-batch size, so a '
              'search works.',
              'fits(mb) = try make_pipeline().run(x, y) with p.samples_per_run * mb samples '
              '(np.zeros works) and catch ipu.OutOfMemoryError. A bigger micro-batch never '
              'needs less memory, so search: double mb until it does not fit, then bisect.',))
def check_largest_micro_batch(largest_micro_batch):
    """Exercise 09.3: ``largest_micro_batch(make_pipeline, sample_shape, num_classes)`` → the
    largest micro-batch size whose run does not raise ``OutOfMemoryError``."""

    for name, make, shape, classes in _factories():
        what = f"largest_micro_batch for a pipeline ({name})"
        got = as_int(largest_micro_batch(make, shape, classes), what)
        if got < 1 or not _fits(make, shape, got):
            raise Wrong(f"{what}: you said {got}, but a run with micro-batches of {got} "
                        "raises OutOfMemoryError" if got >= 1 else
                        f"{what}: you said {got}; a micro-batch has at least one sample")
        if _fits(make, shape, got + 1):
            raise Wrong(f"{what}: you said {got}, but micro-batches of {got + 1} fit too")


# -- 09.4 ---------------------------------------------------------------------------------


class _Grad:
    """``grad(w, x, y)``: the gradient of the mean squared error of a linear model on one
    micro-batch, counting its calls (each micro-batch's forward and backward, once)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, w, x, y):
        self.calls += 1
        w, x, y = np.asarray(w, np.float64), np.asarray(x, np.float64), np.asarray(y)
        return 2 * x.T @ (x @ w - y) / len(x)


def _full_batch_step(w, x, y, lr):
    """One SGD step on the mean loss of the whole batch (the reference)."""
    return w - lr * 2 * x.T @ (x @ w - y) / len(x)


@exercise("09.4", "gradient accumulation", points=2,
          hints=(
              'How many times should the weights change in one step?',
              "Gradient accumulation adds the micro-batches' gradients and updates once; the "
              'loss is a mean over the whole batch.',
              'Call grad once per micro-batch and add the results into one accumulator (as the '
              "pipeline's gradient accumulators do). After the last micro-batch divide by the "
              'number of micro-batches (the loss is a mean) and make ONE weight update: w - lr '
              '* accumulated.',))
def check_accumulation(accumulate_step):
    """Exercise 09.4: ``accumulate_step(w, micro_batches, grad, lr)`` → the weights after one
    update with the gradients of all micro-batches accumulated (= one full-batch step)."""

    rng = np.random.default_rng(94)
    for g, mb, d in [(4, 3, 2), (1, 5, 3), (6, 2, 4), (8, 4, 1)]:
        w = rng.normal(size=d)
        x, y = rng.normal(size=(g * mb, d)), rng.normal(size=g * mb)
        batches = [(x[i * mb:(i + 1) * mb], y[i * mb:(i + 1) * mb]) for i in range(g)]
        grad = _Grad()
        what = f"{g} micro-batches of {mb} samples, lr=0.1"
        got = np.asarray(accumulate_step(w.copy(), list(batches), grad, 0.1), np.float64)
        want = _full_batch_step(w, x, y, 0.1)
        if grad.calls != g:
            raise Wrong(f"{what}: call grad once per micro-batch ({g} calls), you made "
                        f"{grad.calls}")
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-12):
            raise Wrong(f"{what}: expected the weights {np.round(want, 6).tolist()} (one "
                        f"step on the whole batch), got {np.round(got, 6).tolist()}"
                        + _accumulation_diagnosis(w, batches, got, g))


def _accumulation_diagnosis(w, batches, got, g) -> str:
    total = sum(_Grad()(w, x, y) for x, y in batches)
    if got.shape == w.shape and np.allclose(got, w - 0.1 * total):
        return (". You added the micro-batches' gradients but did not divide by their "
                f"number ({g}): the loss is the mean over the batch")
    seq = w.copy()
    for x, y in batches:
        seq = _full_batch_step(seq, x, y, 0.1)
    if got.shape == w.shape and np.allclose(got, seq):
        return (". You updated the weights after every micro-batch; accumulation makes one "
                "update after all of them")
    return ""


# -- 09.5 ---------------------------------------------------------------------------------

MODES = ("RecomputeThenBackpropagate", "RecomputeAndBackpropagateInterleaved")


def checkpointed_peak(act_bytes, input_bytes, in_flight, mode, checkpoints) -> int:
    """A stage's peak stash with recomputation checkpoints (kit convention): each of the
    ``in_flight`` micro-batches stashes its input and the checkpointed activations; the
    backward recomputes the others, all at once (RecomputeThenBackpropagate) or one run
    between checkpoints at a time (RecomputeAndBackpropagateInterleaved)."""
    kept = set(checkpoints)
    stash = input_bytes + sum(act_bytes[i] for i in kept)
    runs, run_bytes = [], 0
    for i, b in enumerate(act_bytes):
        if i in kept:
            runs.append(run_bytes)
            run_bytes = 0
        else:
            run_bytes += b
    runs.append(run_bytes)
    extra = sum(runs) if mode == MODES[0] else max(runs)
    return in_flight * stash + extra


def best_checkpoint_peak(act_bytes, input_bytes, in_flight, mode) -> int:
    """The smallest :func:`checkpointed_peak` over every set of checkpoints."""
    n = len(act_bytes)
    return min(checkpointed_peak(act_bytes, input_bytes, in_flight, mode,
                                 [i for i in range(n) if mask >> i & 1])
               for mask in range(1 << n))


def _checkpoint_cases():
    yield [4, 4, 4, 4, 4, 4, 4, 4, 4], 2, 1, MODES[1]  # one micro-batch: about sqrt(n) cuts
    yield [4, 4, 4, 4, 4, 4, 4, 4, 4], 2, 1, MODES[0]  # recompute all first: none help
    yield [4, 4, 4, 4, 4, 4, 4, 4, 4], 2, 6, MODES[1]  # many in flight: stash is dear
    yield [1, 30, 1, 30, 1, 30], 1, 2, MODES[1]  # cut at the small activations
    rng = np.random.default_rng(95)
    for _ in range(5):
        n = int(rng.integers(3, 10))
        yield ([int(b) for b in rng.integers(1, 50, n)], int(rng.integers(1, 20)),
               int(rng.integers(1, 5)), MODES[int(rng.integers(2))])


@exercise("09.5", "recomputation checkpoints", points=3,
          hints=("A checkpoint costs stash in every micro-batch in flight, and saves "
                 "recomputed memory only in the micro-batch being backpropagated.",
                 "Write the peak for one set of checkpoints first; with at most 9 layers "
                 "there are at most 512 sets: try them all.",
                 "peak = in_flight * (input_bytes + checkpointed bytes) + the recomputed "
                 "bytes held at once: all non-checkpointed activations "
                 "(RecomputeThenBackpropagate), or the largest run of them between two "
                 "checkpoints (RecomputeAndBackpropagateInterleaved)."))
def check_checkpoints(choose_checkpoints):
    """Exercise 09.5: ``choose_checkpoints(act_bytes, input_bytes, in_flight, mode)`` → the
    layers whose outputs to checkpoint so that the stage's peak stash is smallest."""
    for acts, inp, in_flight, mode in _checkpoint_cases():
        what = (f"choose_checkpoints(act_bytes={acts}, input_bytes={inp}, "
                f"in_flight={in_flight}, mode={mode!r})")
        got = choose_checkpoints(list(acts), inp, in_flight, mode)
        try:
            got = sorted({as_int(i, what) for i in got})
        except TypeError:
            raise Wrong(f"{what}: return a list of layer indices, got {got!r}") from None
        if any(not 0 <= i < len(acts) for i in got):
            raise Wrong(f"{what}: layers are numbered 0 to {len(acts) - 1}, got {got}")
        peak = checkpointed_peak(acts, inp, in_flight, mode, got)
        best = best_checkpoint_peak(acts, inp, in_flight, mode)
        if peak > best:
            none = checkpointed_peak(acts, inp, in_flight, mode, [])
            raise Wrong(f"{what}: with checkpoints {got} the stage's peak stash is {peak} "
                        f"bytes (without any: {none}); the best set gives {best}"
                        + (". In RecomputeThenBackpropagate every recomputed activation is "
                           "live at once, so a checkpoint only adds stash"
                           if mode == MODES[0] and got else
                           f". A checkpoint is stashed once per micro-batch in flight "
                           f"({in_flight} here): these cost more than they save"
                           if peak > none else ""))
