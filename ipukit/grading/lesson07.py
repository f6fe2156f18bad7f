"""The ``check_*`` functions of lesson 07: sharding a model over IPUs.

Every reference is measured with the pipeline runner (:mod:`ipukit.parallel`): the bytes
on each IPU from a run's ``MemoryRecord``s, the time of a ``ShardedExecution`` run from
its timeline spans; the best split of layers over IPUs by trying every split.

>>> from ipukit.grading import lesson07
>>> r = lesson07.check_balance(lambda layer_bytes, num_ipus: [0] * len(layer_bytes))
... # doctest: +ELLIPSIS
WRONG · Exercise 07.2 · balance layers over IPUs: 0/2 points
   ...
"""

from __future__ import annotations

import itertools

import numpy as np

import ipukit as ipu
from ipukit.parallel import Block, ShardedExecution, Stage, nn, optim, training_model

from .feedback import Wrong, as_int, as_ints, exercise, run


def teaching_target(num_ipus: int, tiles: int = 4):
    """``num_ipus`` Mk2 IPUs of ``tiles`` tiles each (4 tiles: 2.4 MiB per IPU)."""
    return ipu.IPUModel("ipu2", num_ipus=num_ipus, tiles_per_ipu=tiles).create_device().target


def _sharded(widths, mapping, optimizer, num_ipus, g=1, tiles=4):
    """A PopTorch-style sharded model: one Block per Dense layer, blocks on ``mapping``."""
    blocks = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers = [nn.Dense(a, b, rng=i)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
        blocks.append(Block(f"L{i}", *layers))
    stages = [Stage(*[f"L{i}" for i, q in enumerate(mapping) if q == ipu_id]).ipu(ipu_id)
              for ipu_id in sorted(set(mapping))]
    return training_model(blocks, nn.SoftmaxCrossEntropy(), optimizer,
                          ShardedExecution(*stages), gradient_accumulation=g,
                          target=teaching_target(num_ipus, tiles))


def _train_once(model, width_in, classes, mb, seed=0):
    rng = np.random.default_rng(seed)
    n = model.samples_per_run * mb
    return model.run(rng.normal(size=(n, width_in)).astype(np.float32),
                     rng.integers(0, classes, n))


# -- 07.1 ---------------------------------------------------------------------------------

#: name -> (a fresh optimiser, its slots: copies of the weights it keeps as state)
OPTIMISERS = {"SGD": (lambda: optim.SGD(0.1), 0), "Momentum": (lambda: optim.Momentum(0.1), 1),
              "AdamW": (lambda: optim.AdamW(), 2)}


def _static_cases():
    rng = np.random.default_rng(71)
    yield [20, 30, 10], [0, 1], "AdamW", 2
    yield [8, 16, 16, 16, 4], [0, 0, 1, 1], "SGD", 2
    for name in ("Momentum", "AdamW", "SGD"):
        layers = int(rng.integers(3, 6))
        widths = [int(w) for w in rng.integers(3, 40, layers + 1)]
        num_ipus = int(rng.integers(2, layers + 1))
        cuts = sorted(rng.choice(np.arange(1, layers), num_ipus - 1, replace=False))
        mapping = [int(np.searchsorted(cuts, i, side="right")) for i in range(layers)]
        yield widths, mapping, name, num_ipus


@exercise("07.1", "bytes on each IPU before the first micro-batch", points=2,
          hint="Per IPU, add up the parameters of its layers (Dense(a, b) has a*b + b), "
               "times 4 bytes (float32), times 1 (weights) + 1 (gradient accumulators) + "
               "optimizer_slots (SGD 0, Momentum 1, Adam/AdamW 2).")
def check_static_bytes(static_bytes_per_ipu):
    """Exercise 07.1: ``static_bytes_per_ipu(layer_params, device_mapping, num_ipus,
    optimizer_slots)`` → bytes of weights, gradient accumulators and optimiser state."""

    def body():
        for widths, mapping, name, num_ipus in _static_cases():
            make, slots = OPTIMISERS[name]
            model = _sharded(widths, mapping, make(), num_ipus)
            rec = _train_once(model, widths[0], widths[-1], 2).memory
            first = {m.ipu: m for m in rec}  # weights, gradients, state never change
            expected = [first[q].weights + first[q].gradients + first[q].optimizer
                        for q in range(num_ipus)]
            params = [a * b + b for a, b in zip(widths, widths[1:])]
            what = (f"layers with {params} parameters on IPUs {mapping}, {name} "
                    f"(optimizer_slots={slots})")
            got = as_ints(static_bytes_per_ipu(list(params), list(mapping), num_ipus, slots),
                          num_ipus, what)
            for q in range(num_ipus):
                if got[q] != expected[q]:
                    m = first[q]
                    raise Wrong(f"{what}: IPU {q} holds {expected[q]:,} bytes before the first "
                                f"micro-batch (weights {m.weights:,} + gradient accumulators "
                                f"{m.gradients:,} + optimiser state {m.optimizer:,}), you "
                                f"said {got[q]:,}" + _static_diagnosis(m, got[q]))

    return run("07.1", body)


def _static_diagnosis(m, got: int) -> str:
    if got == m.weights:
        return ". That is the weights alone."
    if got == m.weights + m.gradients and m.optimizer:
        return ". You left out the optimiser state."
    if got == m.weights + m.optimizer:
        return ". You left out the gradient accumulators (one per weight)."
    if got * 4 in (m.weights + m.gradients + m.optimizer, m.weights):
        return ". Count bytes, not parameters: float32 is 4 bytes."
    return ""


# -- 07.2 ---------------------------------------------------------------------------------


def best_split(layer_bytes, num_ipus: int) -> int:
    """The smallest possible fullest-IPU bytes over all contiguous splits (tries them all)."""
    n = len(layer_bytes)
    best = None
    for cuts in itertools.combinations(range(1, n), num_ipus - 1):
        edges = (0, *cuts, n)
        worst = max(sum(layer_bytes[a:b]) for a, b in zip(edges, edges[1:]))
        best = worst if best is None else min(best, worst)
    return best


def _balance_cases():
    yield [803_840, 263_168, 263_168, 10_280], 2  # lesson 07's MNIST model (weights, SGD)
    yield [5, 5, 5, 5, 5, 5], 3
    yield [1, 9, 1, 1, 1, 1, 1, 9], 3
    rng = np.random.default_rng(72)
    for _ in range(4):
        n = int(rng.integers(4, 10))
        yield [int(b) for b in rng.integers(1, 1000, n)], int(rng.integers(2, min(n, 5) + 1))


@exercise("07.2", "balance layers over IPUs", points=2,
          hint="Try every way to cut the list of layers into num_ipus consecutive groups "
               "(itertools.combinations(range(1, len(layer_bytes)), num_ipus - 1) gives the "
               "cut positions) and keep the one whose fullest group is smallest.")
def check_balance(balance):
    """Exercise 07.2: ``balance(layer_bytes, num_ipus)`` → IPU of each layer."""

    def body():
        for layer_bytes, num_ipus in _balance_cases():
            what = f"layer_bytes={layer_bytes}, num_ipus={num_ipus}"
            mapping = as_ints(balance(list(layer_bytes), num_ipus), len(layer_bytes), what)
            if mapping[0] != 0 or any(b - a not in (0, 1) for a, b in zip(mapping,
                                                                          mapping[1:])):
                raise Wrong(f"{what}: got {mapping}; the layers form a chain, so IPU 0 takes "
                            "the first layers, IPU 1 the next ones, and so on (ascending, "
                            "no IPU skipped: PopTorch stage ids must ascend)")
            if mapping[-1] != num_ipus - 1:
                raise Wrong(f"{what}: got {mapping}, which uses {mapping[-1] + 1} of the "
                            f"{num_ipus} IPUs; use them all")
            load = np.bincount(mapping, weights=layer_bytes, minlength=num_ipus).astype(int)
            best = best_split(layer_bytes, num_ipus)
            if load.max() > best:
                raise Wrong(f"{what}: with {mapping} IPU {int(load.argmax())} holds "
                            f"{int(load.max()):,} bytes (per IPU: {load.tolist()}), but a "
                            f"split exists whose fullest IPU holds only {best:,}")

    return run("07.2", body)


# -- 07.3 ---------------------------------------------------------------------------------


def _timing_inputs(r, n: int):
    """Per-stage F/B cycles, link cycles and sync cycles of one sharded run's records."""
    fwd, bwd = [0.0] * n, [0.0] * n
    link_fwd, link_bwd = [0.0] * n, [0.0] * n
    sync, prev = 0.0, None
    for rec in r.timeline:  # a link record follows the F or B whose result it carries
        if rec.kind in ("F", "B"):
            (fwd if rec.kind == "F" else bwd)[rec.stage] = rec.duration
        elif rec.kind == "link":
            (link_fwd if prev.kind == "F" else link_bwd)[rec.stage] = rec.duration
        elif rec.kind == "sync":
            sync = rec.duration
        prev = rec
    return fwd, bwd, link_fwd, link_bwd, sync


@exercise("07.3", "the time of a sharded run", points=3,
          hint="ShardedExecution runs one stage at a time: for every micro-batch, F_0 .. F_N-1 "
               "then B_N-1 .. B_0, in 2N - 1 steps (the last stage's F and B share one step, "
               "as TensorFlow's PipelineStageMerger makes them one stage). Each step is its "
               "op(s), plus the IPU-Link copy of its result when there is one, plus a sync. "
               "Nothing overlaps.")
def check_sharded_cycles(sharded_cycles):
    """Exercise 07.3: ``sharded_cycles(fwd, bwd, link_fwd, link_bwd, sync, g)`` → cycles
    from the start of a ``ShardedExecution`` run to the start of its weight update."""

    def body():
        for widths, g, mb in [([784, 256, 256, 256, 10], 2, 16), ([20, 64, 32, 5], 3, 8),
                              ([100, 300, 50, 200, 80, 10], 4, 4)]:
            n = len(widths) - 1
            model = _sharded(widths, list(range(n)), optim.SGD(0.1), n, g=g)
            r = _train_once(model, widths[0], widths[-1], mb)
            expected = min(rec.start for rec in r.timeline if rec.kind == "optimizer")
            fwd, bwd, lf, lb, sync = _timing_inputs(r, n)
            what = (f"{n} stages, gradient_accumulation={g}: fwd={fwd}, bwd={bwd}, "
                    f"link_fwd={lf}, link_bwd={lb}, sync={sync}")
            got = as_int(sharded_cycles(fwd, bwd, lf, lb, sync, g), what)
            if got != expected:
                raise Wrong(f"{what}: the run's weight update starts at cycle "
                            f"{int(expected):,}, you said {got:,}"
                            + _sharded_diagnosis(fwd, bwd, lf, lb, sync, g, got))

    return run("07.3", body)


def _sharded_diagnosis(fwd, bwd, lf, lb, sync, g, got) -> str:
    n = len(fwd)
    compute = sum(fwd) + sum(bwd)
    if got == g * compute:
        return ". That is the compute alone: add the IPU-Link copies and a sync per step."
    if got == g * (compute + sum(lf) + sum(lb)):
        return f". Every one of the {2 * n - 1} steps per micro-batch also ends with a sync."
    if got == g * (compute + sum(lf) + sum(lb) + 2 * n * sync):
        return (f". That counts {2 * n} steps per micro-batch; the last stage's forward and "
                f"backward share one step (one stage program), so there are {2 * n - 1}.")
    if got == g * (compute + (2 * n - 1) * sync):
        return ". Add the IPU-Link copies between stages (link_fwd and link_bwd)."
    if got == compute + sum(lf) + sum(lb) + (2 * n - 1) * sync:
        return f". That is one micro-batch; the run has {g}."
    if got < g * compute:
        return (". That is less than the compute alone: in ShardedExecution only one IPU "
                "works at a time, so nothing overlaps.")
    return ""
