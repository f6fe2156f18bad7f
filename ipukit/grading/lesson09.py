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

from .feedback import Wrong, as_int, as_ints, exercise, run
from .lesson07 import OPTIMISERS, teaching_target


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
          hint="IPU k holds its weights, as many bytes of gradient accumulators, "
               "optimizer_slots copies of optimiser state (none on the IPU when offloaded) "
               "and, at the peak, schedule(kind, N, g).peak_activations()[k] micro-batches "
               "of stash_bytes[k] each.")
def check_peak_bytes(peak_bytes):
    """Exercise 09.1: ``peak_bytes(kind, gradient_accumulation, weight_bytes, stash_bytes,
    optimizer_slots, offload)`` → the peak bytes of each IPU (stage k on IPU k)."""

    def body():
        widths, hidden, mb = [24, 16, 20, 12], 40, 5
        n = len(widths) - 1
        _, one = train(widths, hidden, 6, "sequential", 1, mb, optimizer=optim.SGD(0.1))
        stash = peak_stash(one)  # one micro-batch in flight
        for kind, g, opt, offload in [("grouped", 6, "AdamW", False),
                                      ("interleaved", 6, "Momentum", False),
                                      ("gpipe", 5, "SGD", False), ("1f1b", 7, "AdamW", True),
                                      ("poptorch", 5, "Momentum", True)]:
            make, slots = OPTIMISERS[opt]
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

    return run("09.1", body)


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
          hint="With recomputation a stage stashes only its input for each micro-batch in "
               "flight. Right before a backward it pops that input and recomputes the "
               "forward, so for a moment it holds the other in_flight - 1 inputs plus one "
               "micro-batch's full activations. The peak is the larger of the two states.")
def check_recomputed_stash(recomputed_stash):
    """Exercise 09.2: ``recomputed_stash(in_flight, input_bytes, activation_bytes)`` → the
    peak bytes a stage stashes with ``recomputation=True``."""

    def body():
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

    return run("09.2", body)


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
          hint="fits(mb) = try make_pipeline().run(x, y) with p.samples_per_run * mb samples "
               "(np.zeros works) and catch ipu.OutOfMemoryError. A bigger micro-batch never "
               "needs less memory, so search: double mb until it does not fit, then bisect.")
def check_largest_micro_batch(largest_micro_batch):
    """Exercise 09.3: ``largest_micro_batch(make_pipeline, sample_shape, num_classes)`` → the
    largest micro-batch size whose run does not raise ``OutOfMemoryError``."""

    def body():
        for name, make, shape, classes in _factories():
            what = f"largest_micro_batch for a pipeline ({name})"
            got = as_int(largest_micro_batch(make, shape, classes), what)
            if got < 1 or not _fits(make, shape, got):
                raise Wrong(f"{what}: you said {got}, but a run with micro-batches of {got} "
                            "raises OutOfMemoryError" if got >= 1 else
                            f"{what}: you said {got}; a micro-batch has at least one sample")
            if _fits(make, shape, got + 1):
                raise Wrong(f"{what}: you said {got}, but micro-batches of {got + 1} fit too")

    return run("09.3", body)
