"""The ``check_*`` functions of lesson 09: gradient accumulation, recomputation, offloading.

Every check is judged: the cases (and what the runs they need measure) and the verdict
run in the judge, only the learner's function runs in the notebook's kernel. The
references are measured with the pipeline runner in the judge: the peak bytes of each IPU
and the peak stash of each stage from a run's ``MemoryRecord``s, and whether a
micro-batch size fits from whether the run raises ``OutOfMemoryError``; 09.4 against a
full-batch step, 09.5 against every set of checkpoints, 09.6 against a NumPy Momentum
update and the program's remote-buffer copies as executed: the kernel sends 09.6's graph
and program as plain data (:mod:`ipukit.graph_data`), the judge runs them on its own
weights, state and gradients.

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
from ipukit.poplibs import poputil

from .common import (
    device,
    judged_run,
    optimisers,
    rebuilt_engine,
    sent_graph,
    teaching_target,
)
from .feedback import Wrong, as_int, as_ints, exercise, plural


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

#: (schedule, gradient accumulation, optimiser, offloaded state) of 09.1's pipelines.
_PEAK_RUNS = [("grouped", 6, "AdamW", False), ("interleaved", 6, "Momentum", False),
              ("gpipe", 5, "SGD", False), ("1f1b", 7, "AdamW", True),
              ("poptorch", 5, "Momentum", True)]


def _peak_cases(rng) -> list[dict]:
    """Five pipelines of one model, measured in the judge: five schedules, three
    optimisers, state on chip and offloaded; the micro-batch and hidden width drawn."""
    widths, hidden, mb = [24, 16, 20, 12], int(rng.choice([32, 40, 48])), int(rng.integers(3, 7))
    _, one = train(widths, hidden, 6, "sequential", 1, mb, optimizer=optim.SGD(0.1))
    stash = peak_stash(one)  # one micro-batch in flight
    found = []
    for kind, g, opt, offload in _PEAK_RUNS:
        make, slots = optimisers()[opt]
        p, r = train(widths, hidden, 6, kind, g, mb, optimizer=make(),
                     offload_optimizer_state=offload)
        found.append({"kind": kind, "gradient_accumulation": g,
                      "weight_bytes": [s.param_bytes for s in p.stages], "stash_bytes": stash,
                      "optimizer_slots": slots, "offload": offload,
                      "_expected": [r.peak_memory()[q] for q in range(len(p.stages))]})
    return found


def _peak_what(case) -> str:
    return (f"peak_bytes({case['kind']!r}, gradient_accumulation="
            f"{case['gradient_accumulation']}, weight_bytes={list(case['weight_bytes'])}, "
            f"stash_bytes={list(case['stash_bytes'])}, optimizer_slots="
            f"{case['optimizer_slots']}, offload={case['offload']})")


def _peak_trial(case, peak_bytes):
    got = peak_bytes(case["kind"], case["gradient_accumulation"], list(case["weight_bytes"]),
                     list(case["stash_bytes"]), case["optimizer_slots"], case["offload"])
    return as_ints(got, len(case["weight_bytes"]), _peak_what(case))


@exercise("09.1", "the peak memory of each IPU", points=3,
          hints=(
              'What does an IPU hold that never goes away, and what comes and goes?',
              'Weights, gradient accumulators and optimiser state (if on chip) stay; the stash '
              'peaks when the schedule holds the most micro-batches on that stage.',
              'IPU k holds its weights, as many bytes of gradient accumulators, optimizer_slots '
              'copies of optimiser state (none on the IPU when offloaded) and, at the peak, '
              'schedule(kind, N, g).peak_activations()[k] micro-batches of stash_bytes[k] each.',),
          answers=("peak_bytes",), cases=_peak_cases, trial=_peak_trial)
def check_peak_bytes(cases, outputs):
    """Exercise 09.1: ``peak_bytes(kind, gradient_accumulation, weight_bytes, stash_bytes,
    optimizer_slots, offload)`` → the peak bytes of each IPU (stage k on IPU k)."""
    for case, got in zip(cases, outputs):
        expected, n = case["_expected"], len(case["weight_bytes"])
        for q in range(n):
            if got[q] != expected[q]:
                raise Wrong(f"{_peak_what(case)}: IPU {q}'s peak in the run is "
                            f"{expected[q]:,} bytes, you said {got[q]:,}" + _peak_diagnosis(
                                case["kind"], n, case["gradient_accumulation"],
                                case["weight_bytes"][q], case["stash_bytes"][q],
                                case["optimizer_slots"], case["offload"], q, got[q]))


def _peak_diagnosis(kind, n, g, w, stash, slots, offload, q, got) -> str:
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


def cnn_stages(classes: int = 3):
    """A CNN cut after its convolution: stage 0 is Conv2D(1, 4, 3) and ReLU; stage 1
    starts with MaxPool2D, which stashes the int64 index of each maximum (2 bytes per
    float32 input element), then Flatten and Dense(36, classes): its stash per micro-batch
    is smaller than its input."""
    return [[nn.Conv2D(1, 4, 3, rng=1), nn.ReLU()],
            [nn.MaxPool2D(), nn.Flatten(), nn.Dense(4 * 3 * 3, classes, rng=2)]]


def _run_cnn(kind, g, mb, recomputation):
    p = pipeline(cnn_stages(), None, g, kind, optimizer=optim.SGD(0.1),
                 loss=nn.SoftmaxCrossEntropy(), target=teaching_target(2, 64),
                 recomputation=recomputation, offload_optimizer_state=False)
    rng = np.random.default_rng(0)
    return p.run(rng.normal(size=(g * mb, 1, 8, 8)).astype(np.float32),
                 rng.integers(0, 3, g * mb))


def _recompute_cases(rng) -> list[dict]:
    """Every stage of an MLP pipeline in four schedules and of a CNN in Grouped, measured
    in the judge with ``recomputation=True``."""
    widths, hidden, mb = [32, 8, 48, 16], int(rng.choice([48, 64])), int(rng.integers(3, 6))
    _, one = train(widths, hidden, 5, "sequential", 1, mb)
    act = peak_stash(one)
    inputs = [mb * w * 4 for w in widths[:-1]]  # float32 input of each stage
    found = []
    for kind, g in [("grouped", 6), ("interleaved", 3), ("gpipe", 4), ("1f1b", 5)]:
        _, r = train(widths, hidden, 5, kind, g, mb, recomputation=True)
        in_flight = schedule(kind, len(act), g).peak_activations()
        found += [{"in_flight": in_flight[k], "input_bytes": inputs[k],
                   "activation_bytes": act[k], "_want": want, "_where": f"stage {k} of a "
                   f"{kind} pipeline (gradient_accumulation={g})"}
                  for k, want in enumerate(peak_stash(r))]
    act = peak_stash(_run_cnn("sequential", 1, mb, False))
    in_flight = schedule("grouped", 2, 4).peak_activations()
    found += [{"in_flight": in_flight[k], "input_bytes": mb * size * 4,
               "activation_bytes": act[k], "_want": want,
               "_where": f"stage {k} of a CNN in a grouped pipeline (gradient_accumulation=4)"}
              for k, (size, want) in enumerate(zip((64, 144),
                                                   peak_stash(_run_cnn("grouped", 4, mb, True))))]
    return found


def _recompute_what(case) -> str:
    return (f"recomputed_stash(in_flight={case['in_flight']}, input_bytes="
            f"{case['input_bytes']}, activation_bytes={case['activation_bytes']})")


def _recompute_trial(case, recomputed_stash):
    return as_int(recomputed_stash(case["in_flight"], case["input_bytes"],
                                   case["activation_bytes"]), _recompute_what(case))


@exercise("09.2", "the stash with recomputation", points=2,
          hints=(
              "With recomputation, what is still stashed between a stage's forward and its "
              'backward?',
              "Only inputs stay; right before a backward one micro-batch's activations come "
              'back for a moment.',
              'With recomputation a stage stashes only its input for each micro-batch in '
              'flight. Right before a backward it pops that input and recomputes the forward, '
              "so for a moment it holds the other in_flight - 1 inputs plus one micro-batch's "
              'full activations. The peak is the larger of the two states.',),
          answers=("recomputed_stash",), cases=_recompute_cases, trial=_recompute_trial)
def check_recomputed_stash(cases, outputs):
    """Exercise 09.2: ``recomputed_stash(in_flight, input_bytes, activation_bytes)`` → the
    peak bytes a stage stashes with ``recomputation=True``."""
    for case, got in zip(cases, outputs):
        if got != case["_want"]:
            p, inp, act = case["in_flight"], case["input_bytes"], case["activation_bytes"]
            raise Wrong(f"{case['_where']}: {_recompute_what(case)}: the run's peak stash is "
                        f"{case['_want']:,} bytes, you said {got:,}"
                        + _recompute_diagnosis(p, inp, act, got))


def _recompute_diagnosis(p, inp, act, got) -> str:
    if act < inp and got == (p - 1) * inp + act:
        return (". Here a micro-batch's activations are smaller than its input (the "
                "max-pool stashes an index, not its input): the stash can peak before the "
                "backward.")
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


def _make(hidden: int = 256, **options):
    """A factory of a Grouped AdamW pipeline of :func:`ffn_stages` (hidden width
    ``hidden``) on two one-tile IPUs."""
    target = teaching_target(2, tiles=1)
    options.setdefault("offload_optimizer_state", False)  # TF's None would offload
    return lambda: pipeline(ffn_stages([64, 64, 32], hidden, 10), None, 4, "grouped",
                            optimizer=optim.AdamW(), loss=nn.SoftmaxCrossEntropy(),
                            target=target, **options)


def _factories() -> dict:
    """name -> (factory, sample shape, classes) of pipelines on small IPUs."""
    return {"grouped, AdamW": (_make(), (64,), 10),
            "grouped, AdamW, recomputation": (_make(recomputation=True), (64,), 10),
            "grouped, AdamW, offloaded optimiser state":
                (_make(offload_optimizer_state=True), (64,), 10),
            "grouped, AdamW, hidden width 512: weights and state alone overflow":
                (_make(hidden=512), (64,), 10)}


def _micro_batch_cases(rng) -> list[dict]:
    """The pipelines by name (the trial builds them in the kernel, the verdict runs its
    own): plain, with recomputation, with offloaded state, one too big for any
    micro-batch (the answer 0), and one of a drawn hidden width (with or without
    recomputation), so that answers from another seed do not replay."""
    hidden, recompute = int(rng.integers(96, 300)), bool(rng.integers(2))
    return [{"pipeline": name} for name in _factories()] + [
        {"pipeline": f"grouped, AdamW, hidden width {hidden}"
                     + (", recomputation" if recompute else ""),
         "hidden": hidden, "recomputation": recompute}]


def _micro_batch_pipeline(case):
    """(factory, sample shape, classes) of a 09.3 case."""
    if "hidden" in case:
        return _make(case["hidden"], recomputation=case["recomputation"]), (64,), 10
    return _factories()[case["pipeline"]]


def _micro_batch_trial(case, largest_micro_batch):
    make, shape, classes = _micro_batch_pipeline(case)
    return as_int(largest_micro_batch(make, shape, classes),
                  f"largest_micro_batch for a pipeline ({case['pipeline']})")


@exercise("09.3", "the largest micro-batch that fits", points=2,
          hints=(
              'You may run the pipeline as often as you like: let it tell you what fits.',
              'Catch ipu.OutOfMemoryError; memory only grows with the micro-batch size, so a '
              'search works.',
              'fits(mb) = try make_pipeline().run(x, y) with p.samples_per_run * mb samples '
              '(np.zeros works) and catch ipu.OutOfMemoryError. A bigger micro-batch never '
              'needs less memory, so search: double mb until it does not fit, then bisect '
              '(and answer 0 when 1 does not fit).',),
          answers=("largest_micro_batch",), cases=_micro_batch_cases, trial=_micro_batch_trial)
def check_largest_micro_batch(cases, outputs):
    """Exercise 09.3: ``largest_micro_batch(make_pipeline, sample_shape, num_classes)`` → the
    largest micro-batch size whose run does not raise ``OutOfMemoryError`` (0 when even
    one sample does not fit)."""
    # A search that doubles from 2 or by 3 (one-token mutants of the solution) finds the
    # same answer: bisection follows any start and factor; the check cannot tell them apart.
    for case, got in zip(cases, outputs):
        make, shape, _ = _micro_batch_pipeline(case)
        what = f"largest_micro_batch for a pipeline ({case['pipeline']})"
        if got < 0:
            raise Wrong(f"{what}: you said {got}; a micro-batch size is 0 or more")
        if got and not _fits(make, shape, got):
            raise Wrong(f"{what}: you said {got}, but a run with micro-batches of {got} "
                        "raises OutOfMemoryError")
        if _fits(make, shape, got + 1):
            raise Wrong(f"{what}: you said {got}, but micro-batches of {got + 1} fit too")


# -- 09.4 ---------------------------------------------------------------------------------


class _Grad:
    """``grad(w, x, y)``: the gradient of the mean loss of one micro-batch of the check's
    model, a linear model with a squared error weighted per sample by ``sample_weights``
    (the judge's draw, which only ``grad`` holds: the gradient cannot be worked out from
    ``x`` and ``y``); counts its calls (each micro-batch's forward and backward, once)."""

    def __init__(self, case):
        self.calls = 0
        x, s = np.asarray(case["x"], np.float64), np.asarray(case["sample_weights"])
        mb = len(x) // case["micro_batches"]
        self.batches = [(x[i:i + mb], s[i:i + mb]) for i in range(0, len(x), mb)]

    def __call__(self, w, x, y):
        self.calls += 1
        w, x, y = np.asarray(w, np.float64), np.asarray(x, np.float64), np.asarray(y)
        for bx, s in self.batches:
            if x.shape == bx.shape and np.array_equal(x, bx):
                return 2 * x.T @ (s * (x @ w - y)) / len(x)
        raise Wrong(f"grad(w, x, y) takes one micro-batch (x, y) as given, got x of shape "
                    f"{x.shape}; the micro-batches' x have shape {self.batches[0][0].shape}")


def _full_batch_step(case, w=None, part=slice(None)):
    """One SGD step from ``w`` (the case's) on the mean loss of the samples ``part``
    (the whole batch: the reference)."""
    w = np.asarray(case["w"] if w is None else w, np.float64)
    x, y = np.asarray(case["x"])[part], np.asarray(case["y"])[part]
    s = np.asarray(case["sample_weights"])[part]
    return w - case["lr"] * 2 * x.T @ (s * (x @ w - y)) / len(x)


def _accumulation_cases(rng) -> list[dict]:
    """Weights and a batch cut into g micro-batches of mb samples: several, one, many
    small ones and one feature; each sample's weight in the loss is drawn too."""
    return [{"w": rng.normal(size=d), "x": rng.normal(size=(g * mb, d)),
             "y": rng.normal(size=g * mb), "sample_weights": rng.uniform(0.2, 3, g * mb),
             "micro_batches": g, "lr": 0.1}
            for g, mb, d in [(4, 3, 2), (1, 5, 3), (6, 2, 4), (8, 4, 1)]]


def _batches(case):
    g, x, y = case["micro_batches"], np.asarray(case["x"]), np.asarray(case["y"])
    mb = len(x) // g
    return [(x[i * mb:(i + 1) * mb], y[i * mb:(i + 1) * mb]) for i in range(g)]


def _accumulation_trial(case, accumulate_step):
    grad = _Grad(case)
    got = accumulate_step(np.array(case["w"]), _batches(case), grad, case["lr"])
    return {"w": np.asarray(got, np.float64), "calls": grad.calls}


@exercise("09.4", "gradient accumulation", points=2,
          hints=(
              'How many times should the weights change in one step?',
              "Gradient accumulation adds the micro-batches' gradients and updates once; the "
              'loss is a mean over the whole batch.',
              'Call grad once per micro-batch and add the results into one accumulator (as the '
              "pipeline's gradient accumulators do). After the last micro-batch divide by the "
              'number of micro-batches (the loss is a mean) and make ONE weight update: w - lr '
              '* accumulated.',),
          answers=("accumulate_step",), cases=_accumulation_cases, trial=_accumulation_trial)
def check_accumulation(cases, outputs):
    """Exercise 09.4: ``accumulate_step(w, micro_batches, grad, lr)`` → the weights after one
    update with the gradients of all micro-batches accumulated (= one full-batch step)."""
    for case, out in zip(cases, outputs):
        g, lr = case["micro_batches"], case["lr"]
        what = f"{g} micro-batches of {len(case['x']) // g} samples, lr={lr}"
        got, want = np.asarray(out["w"], np.float64), _full_batch_step(case)
        if out["calls"] != g:  # the kernel's count can only cost points; the weights prove
            raise Wrong(f"{what}: call grad once per micro-batch ({g} calls), you made "
                        f"{out['calls']}")
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-12):
            raise Wrong(f"{what}: expected the weights {np.round(want, 6).tolist()} (one "
                        f"step on the whole batch), got {np.round(got, 6).tolist()}"
                        + _accumulation_diagnosis(case, got))


def _accumulation_diagnosis(case, got) -> str:
    w, g = np.asarray(case["w"], np.float64), case["micro_batches"]
    mb = len(case["x"]) // g
    parts = [slice(i * mb, (i + 1) * mb) for i in range(g)]
    total = sum(w - _full_batch_step(case, part=p) for p in parts)  # lr * sum of gradients
    if got.shape == w.shape and np.allclose(got, w - total):
        return (". You added the micro-batches' gradients but did not divide by their "
                f"number ({g}): the loss is the mean over the batch")
    seq = w
    for p in parts:
        seq = _full_batch_step(case, seq, p)
    if got.shape == w.shape and np.allclose(got, seq):
        return (". You updated the weights after every micro-batch; accumulation makes one "
                "update after all of them")
    return ""


# -- 09.5 ---------------------------------------------------------------------------------

MODES = ("RecomputeThenBackpropagate", "RecomputeAndBackpropagateInterleaved")


def checkpointed_peak(act_bytes, input_bytes, in_flight, mode, checkpoints) -> int:
    """A stage's peak stash with recomputation checkpoints (kit convention: the
    liveness model). In ``RecomputeThenBackpropagate`` checkpoints have no effect (TensorFlow's
    ``recomputation_checkpoint`` docstring): each of the ``in_flight`` micro-batches
    stashes its input and the backward recomputes every activation at once. In
    ``RecomputeAndBackpropagateInterleaved`` each micro-batch also stashes the
    checkpointed activations and the backward recomputes one run between checkpoints at
    a time."""
    if mode == MODES[0]:
        return in_flight * input_bytes + sum(act_bytes)
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
    return in_flight * stash + max(runs)


def best_checkpoints(act_bytes, input_bytes, in_flight, mode) -> tuple[int, int]:
    """``(smallest peak, fewest checkpoints that give it)`` over every set of checkpoints."""
    n = len(act_bytes)
    return min((checkpointed_peak(act_bytes, input_bytes, in_flight, mode, kept), len(kept))
               for kept in ([i for i in range(n) if mask >> i & 1] for mask in range(1 << n)))


def _checkpoint_cases(rng) -> list[dict]:
    """Even layers with one and with many micro-batches in flight, small activations to cut
    at, both modes, and random stages (small sizes: many ties)."""
    found = [([4] * 9, 2, 1, MODES[1]),  # one micro-batch: about sqrt(n) cuts
             ([4] * 9, 2, 1, MODES[0]),  # checkpoints do nothing here
             ([4] * 9, 2, 6, MODES[1]),  # many in flight: stash is dear
             ([1, 30, 1, 30, 1, 30], 1, 2, MODES[1])]  # cut at the small activations
    for _ in range(8):
        n = int(rng.integers(3, 10))
        found.append(([int(b) for b in rng.integers(1, 50, n)], int(rng.integers(1, 20)),
                      int(rng.integers(1, 5)), MODES[int(rng.integers(2))]))
    return [{"act_bytes": a, "input_bytes": i, "in_flight": p, "mode": m}
            for a, i, p, m in found]


def _checkpoint_what(case) -> str:
    return (f"choose_checkpoints(act_bytes={list(case['act_bytes'])}, input_bytes="
            f"{case['input_bytes']}, in_flight={case['in_flight']}, mode={case['mode']!r})")


def _checkpoint_trial(case, choose_checkpoints):
    what = _checkpoint_what(case)
    got = choose_checkpoints(list(case["act_bytes"]), case["input_bytes"], case["in_flight"],
                             case["mode"])
    try:
        return sorted({as_int(i, what) for i in got})
    except TypeError:
        raise Wrong(f"{what}: return a list of layer indices, got {got!r}") from None


@exercise("09.5", "recomputation checkpoints", points=3,
          hints=("A checkpoint costs stash in every micro-batch in flight and saves "
                 "recomputed memory only in the micro-batch being backpropagated, and only in "
                 "one of the two modes.",
                 "Checkpoints have no effect in RecomputeThenBackpropagate. For the "
                 "interleaved mode write the peak of one set of checkpoints first; with at "
                 "most 9 layers there are at most 512 sets: try them all.",
                 "RecomputeThenBackpropagate: []. RecomputeAndBackpropagateInterleaved: "
                 "peak = in_flight * (input_bytes + checkpointed bytes) + the largest run of "
                 "layers between two checkpoints; keep the set with the smallest (peak, number "
                 "of checkpoints)."),
          answers=("choose_checkpoints",), cases=_checkpoint_cases, trial=_checkpoint_trial)
def check_checkpoints(cases, outputs):
    """Exercise 09.5: ``choose_checkpoints(act_bytes, input_bytes, in_flight, mode)`` → the
    fewest layers whose outputs to checkpoint for the stage's smallest peak stash."""
    for case, got in zip(cases, outputs):
        acts, inp, in_flight, mode = (case[k] for k in ("act_bytes", "input_bytes",
                                                        "in_flight", "mode"))
        what = _checkpoint_what(case)
        if any(not 0 <= i < len(acts) for i in got):
            raise Wrong(f"{what}: layers are numbered 0 to {len(acts) - 1}, got {got}")
        peak = checkpointed_peak(acts, inp, in_flight, mode, got)
        best, fewest = best_checkpoints(acts, inp, in_flight, mode)
        if mode == MODES[0] and got:
            raise Wrong(f"{what}: checkpoints {got} have no effect in "
                        "RecomputeThenBackpropagate (it recomputes every activation before "
                        "it backpropagates): return []")
        if peak > best:
            none = checkpointed_peak(acts, inp, in_flight, mode, [])
            raise Wrong(f"{what}: with checkpoints {got} the stage's peak stash is {peak} "
                        f"bytes (without any: {none}); the best set gives {best}"
                        + (f". A checkpoint is stashed once per micro-batch in flight "
                           f"({in_flight} here): these cost more than they save"
                           if peak > none else ""))
        if len(got) > fewest:
            raise Wrong(f"{what}: checkpoints {got} give the smallest peak, {peak} bytes, but "
                        f"{plural(fewest, 'checkpoint')} can give it too: keep as few as "
                        "you can")


# -- 09.6 ---------------------------------------------------------------------------------

STATE_BUFFER = "optimizer/momentum"


def _offload_cases(rng) -> list[dict]:
    """Momentum updates of a few weights on a few tiles, two runs each (the state must
    survive between them in Streaming Memory): uneven sizes, a non-zero starting state, and
    momentum 0 and 1 at the edges."""
    found = [(7, 3, 0.1, 0.9), (1, 1, 0.5, 0.0), (12, 4, 0.05, 1.0), (5, 2, 1.0, 0.5)]
    for _ in range(4):
        found.append((int(rng.integers(2, 40)), int(rng.integers(1, 5)),
                      float(rng.choice([0.01, 0.1, 0.3])), float(rng.choice([0.5, 0.9, 0.99]))))
    cases = []
    for n, tiles, lr, momentum in found:
        draw = np.random.default_rng(rng.integers(2**31))
        cases.append({"n": n, "tiles": tiles, "lr": lr, "momentum": momentum,
                      "_weights": draw.normal(size=n).astype(np.float32),
                      "_state": draw.normal(size=n).astype(np.float32),
                      "_grads": draw.normal(size=(2, n)).astype(np.float32)})
    return cases


def _offload_what(case) -> str:
    return (f"{case['n']} weights on {case['tiles']} tiles, lr={case['lr']}, "
            f"momentum={case['momentum']}")


def _offload_graph(case):
    """Weights and gradients mapped linearly over the case's tiles, with their host
    handles, and the remote buffer of the state: the graph the learner's function gets."""
    g = ipu.Graph(device(case["tiles"]).target)
    n = case["n"]
    w, grads = g.add_variable(ipu.FLOAT, [n], "weights"), g.add_variable(ipu.FLOAT, [n], "grads")
    for t in (w, grads):
        poputil.map_tensor_linearly(g, t)
    g.create_host_write("weights", w)
    g.create_host_read("weights", w)
    g.create_host_write("grads", grads)
    buf = g.add_remote_buffer(STATE_BUFFER, ipu.FLOAT, n)
    return g, w, grads, buf


def _offload_trial(case, offloaded_update):
    """The learner's update as plain data (the learner's kernel): the judge runs it."""
    g, w, grads, buf = _offload_graph(case)
    prog = offloaded_update(g, w, grads, buf, case["lr"], case["momentum"])
    if not isinstance(prog, ipu.Program):
        raise Wrong(f"{_offload_what(case)}: return the program (an ipu.Sequence), got "
                    f"{type(prog).__name__}")
    return sent_graph(g, prog, _offload_what(case))


def _offload_run(case, sent) -> dict:
    """The judge's run of the program the kernel sent (weights, gradients and the remote
    buffer kept as the exercise has them), twice, on its own weights, state and gradients:
    the weights, the state read back from Streaming Memory and each run's executed steps
    (kind, name, bytes)."""
    what = _offload_what(case)
    kept = (("weights", "host_writes"), ("weights", "host_reads"), ("grads", "host_writes"),
            (STATE_BUFFER, "remote_buffers"))
    eng = rebuilt_engine(sent, _offload_graph(case)[0], what, kept)
    runs = []
    with judged_run(what):
        eng.write_tensor("weights", case["_weights"])
        eng.copy_to_remote_buffer(case["_state"], STATE_BUFFER, 0)
        for grad in case["_grads"]:
            eng.write_tensor("grads", grad)
            first = len(eng.trace) + 1  # after this call's host sync
            eng.run()
            runs.append([[s.kind, s.name, int(s.remote_bytes)]
                         for s in eng.trace.executed_steps()[first:]])
        state = eng.copy_from_remote_buffer(STATE_BUFFER, np.zeros(case["n"], np.float32), 0)
        return {"weights": eng.read_tensor("weights"), "state": state, "runs": runs}


def momentum_reference(case) -> tuple[np.ndarray, np.ndarray]:
    """The weights and momentum after the case's updates, in float32 (NumPy)."""
    w, state = case["_weights"].astype(np.float32), case["_state"].astype(np.float32)
    m, lr = np.float32(case["momentum"]), np.float32(case["lr"])
    for grad in case["_grads"]:
        state = m * state + grad.astype(np.float32)
        w = w - lr * state
    return w, state


@exercise("09.6", "offloaded optimiser state", points=3,
          hints=("The state is not on the tiles: bring it to them, update, and put it back.",
                 "A remote buffer is copied like a stream: Copy(buffer, tensor) brings it in, "
                 "Copy(tensor, buffer) takes it back. The tensor is a tile variable of your "
                 "own, mapped like the weights; the update itself is two popops.map calls.",
                 "Sequence: Copy(state_buffer, state); state = momentum * state + grads "
                 "(in place); weights = weights - lr * state (in place); Copy(state, "
                 "state_buffer)."),
          answers=("offloaded_update",), cases=_offload_cases, trial=_offload_trial)
def check_offloaded_update(cases, outputs):
    """Exercise 09.6: ``offloaded_update(graph, weights, grads, state_buffer, lr, momentum)``
    → the program of one Momentum update whose state lives in the remote buffer
    ``state_buffer``: copied in, updated, used and copied back. The kernel sends the graph
    and program (:mod:`ipukit.graph_data`); the judge rebuilds them and runs them twice on
    weights, state and gradients the kernel never sees."""
    for case, sent in zip(cases, outputs):
        what = _offload_what(case)
        out = _offload_run(case, sent)
        for r, steps in enumerate(out["runs"]):
            remote = [(name, nbytes) for kind, name, nbytes in steps if kind == "remote"]
            ins = [x for x in remote if x[0].endswith(f" <- {STATE_BUFFER}")]
            outs = [x for x in remote if x[0].endswith(f" -> {STATE_BUFFER}")]
            if len(ins) != 1:
                raise Wrong(f"{what}, run {r + 1}: copy the state in from the remote buffer "
                            f"once per update (Copy(state_buffer, tensor)); your program "
                            f"copied it in {plural(len(ins), 'time')}")
            if len(outs) != 1:
                raise Wrong(f"{what}, run {r + 1}: copy the updated state back to the remote "
                            f"buffer once per update (Copy(tensor, state_buffer)); your "
                            f"program copied it back {plural(len(outs), 'time')}")
            if remote.index(outs[0]) < remote.index(ins[0]):
                raise Wrong(f"{what}, run {r + 1}: your program copies the state back before "
                            "it copies it in: in first, then update, then out")
            if ins[0][1] != 4 * case["n"] or outs[0][1] != 4 * case["n"]:
                raise Wrong(f"{what}: copy the whole state, {4 * case['n']} bytes, each way; "
                            f"your copies moved {ins[0][1]} and {outs[0][1]} bytes")
        want_w, want_state = momentum_reference(case)
        for name, got, want in (("state in Streaming Memory", out["state"], want_state),
                                ("weights", out["weights"], want_w)):
            got = np.asarray(got)
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                raise Wrong(f"{what}: after two updates expected the {name} "
                            f"{np.round(want.astype(float), 4).tolist()}, got "
                            f"{np.round(got.astype(float), 4).tolist()}"
                            + _offload_diagnosis(case, out, name))


def _offload_diagnosis(case, out, name) -> str:
    """Name a common mistake where the values show it: the weights updated with the
    momentum before it was updated."""
    m, lr = np.float32(case["momentum"]), np.float32(case["lr"])
    w, state = case["_weights"].astype(np.float32), case["_state"].astype(np.float32)
    for grad in case["_grads"]:
        w, state = w - lr * state, m * state + grad
    if name == "weights" and np.allclose(out["weights"], w, rtol=1e-5, atol=1e-6):
        return (". You updated the weights with the momentum before updating the momentum: "
                "update the state first")
    return ""
