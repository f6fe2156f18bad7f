"""The ``check_*`` functions of lesson 07: sharding a model over IPUs.

Every check is judged (:func:`ipukit.grading.feedback.exercise`): the judge draws the
cases and works out the expected answers with the kit's own code; the learner's kernel
only runs the learner's functions on them. References: TensorFlow's documented
``SelectionOrder`` and the IPU-Links of a ladder; the best split of layers over IPUs by
trying every split; the time of a ``ShardedExecution`` run from its timeline spans.

>>> from ipukit.grading import lesson07
>>> r = lesson07.check_balance(lambda layer_bytes, num_ipus: [0] * len(layer_bytes))
... # doctest: +ELLIPSIS
WRONG · Exercise 07.2 · balance layers over IPUs: 0/2 points
   ...
"""

from __future__ import annotations

import itertools

import numpy as np

from ipukit.parallel import Block, ShardedExecution, Stage, nn, optim, training_model

from .common import naming, teaching_target
from .feedback import Wrong, as_int, as_ints, exercise, side_by_side, tile_grid


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


def _call(what, fn, *args):
    """``fn(*args)`` in the trial, an error naming the case."""
    with naming(what):
        return fn(*args)


# -- 07.1 ---------------------------------------------------------------------------------

# The IPU-Links of an IPU-POD as a ladder (kit convention): IPUs 2j and 2j+1 form a rung,
# and IPU i is linked to IPU i + 2 along the rails.


def ladder_links(num_ipus: int) -> set[tuple[int, int]]:
    """The IPU-Links of ``num_ipus`` IPUs in a ladder, as sorted pairs (kit convention)."""
    links = {(a, a + 1) for a in range(0, num_ipus - 1, 2)}
    return links | {(a, a + 2) for a in range(num_ipus - 2)}


def _linked(a: int, b: int, num_ipus: int) -> bool:
    return (min(a, b), max(a, b)) in ladder_links(num_ipus)


#: TensorFlow's documented selection of 16 IPUs (``SelectionOrder``'s docstring,
#: tensorflow/python/ipu/config.py in graphcore/tensorflow).
TF_SELECTION_16 = {"zigzag": list(range(16)),
                   "snake": [0, 1, 3, 2, 4, 5, 7, 6, 8, 9, 11, 10, 12, 13, 15, 14],
                   "hoof": [0, 2, 4, 6, 8, 10, 12, 14, 15, 13, 11, 9, 7, 5, 3, 1]}


def _selection_cases(rng) -> list[dict]:
    """Every order on 2 to 16 IPUs (16: TensorFlow's documented example), and a random
    even count up to 32."""
    counts = [2, 4, 6, 8, 16, 2 * int(rng.integers(5, 17))]
    return [{"order": order, "num_shards": n} for n in counts
            for order in ("zigzag", "snake", "hoof")]


def _selection_what(case) -> str:
    return f"select_ipus({case['order']!r}, {case['num_shards']})"


def _selection_trial(case, select_ipus):
    what = _selection_what(case)
    return as_ints(_call(what, select_ipus, case["order"], case["num_shards"]),
                   case["num_shards"], what)


@exercise("07.1", "the selection order of IPUs", points=2,
          hints=(
              'Draw the ladder of 8 IPUs and walk along it with a pencil.',
              "SNAKE must step from each shard's IPU to one it has a link to; HOOF must also "
              "end on an IPU linked to the first one. Both start at IPU 0, as TensorFlow's "
              "documented orders do.",
              'Draw the ladder for 8 IPUs (rungs 0-1, 2-3, 4-5, 6-7; rails 0-2-4-6 and '
              '1-3-5-7). SNAKE climbs the ladder crossing every rung in turn (0 1 3 2 4 5 7 '
              '6); HOOF goes up one rail and comes down the other (0 2 4 6 7 5 3 1), so that '
              'it ends next to where it began.',),
          answers=("select_ipus",), cases=_selection_cases, trial=_selection_trial)
def check_selection_order(cases, outputs):
    """Exercise 07.1: ``select_ipus(order, num_shards)`` → the physical IPU of each shard
    for TensorFlow's ``SelectionOrder`` ``"zigzag"``, ``"snake"`` or ``"hoof"``."""
    for case, got in zip(cases, outputs):
        order, n, what = case["order"], case["num_shards"], _selection_what(case)
        got = as_ints(got, n, what)
        if sorted(got) != list(range(n)):
            raise Wrong(f"{what}: got {got}; give every shard its own IPU, each of "
                        f"IPUs 0 to {n - 1} once")
        if order == "zigzag":
            if got != list(range(n)):
                raise Wrong(f"{what}: got {got}; ZIGZAG follows the natural order "
                            "of the IPUs")
            continue
        pairs = list(zip(got, got[1:])) + ([(got[-1], got[0])] if order == "hoof" else [])
        for s, (a, b) in enumerate(pairs):
            if not _linked(a, b, n):
                which = ("the last shard and the first" if s == n - 1 else
                         f"shards {s} and {s + 1}")
                raise Wrong(f"{what}: got {got}: {which} are on IPUs {a} and {b}, "
                            "which have no IPU-Link between them (links: "
                            f"{sorted(ladder_links(n))})")
        if n == 16 and got != TF_SELECTION_16[order]:
            raise Wrong(f"{what}: got {got}, which has the links, but TensorFlow documents "
                        f"{order.upper()} on 16 IPUs as {TF_SELECTION_16[order]}")


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


def _chain_order(mapping, num_ipus: int, what: str, why: str) -> None:
    """Wrong unless ``mapping`` puts consecutive layers on IPUs 0, 1, ... num_ipus - 1."""
    if mapping[0] != 0 or any(b - a not in (0, 1) for a, b in zip(mapping, mapping[1:])):
        raise Wrong(f"{what}: got {mapping}; {why}")
    if mapping[-1] != num_ipus - 1:
        raise Wrong(f"{what}: got {mapping}, which uses {mapping[-1] + 1} of the "
                    f"{num_ipus} IPUs; use them all")


def _balance_cases(rng) -> list[dict]:
    """Lesson 07's MNIST model, equal layers, heavy ends, a first layer heavier than all
    the rest (an embedding), as many IPUs as layers; then random ones."""
    found = [([803_840, 263_168, 263_168, 10_280], 2),  # lesson 07's MNIST model (SGD)
             ([5, 5, 5, 5, 5, 5], 3), ([1, 9, 1, 1, 1, 1, 1, 9], 3), ([50, 1, 1, 1], 3),
             ([4, 7, 2], 3)]
    for _ in range(3):
        n = int(rng.integers(4, 10))
        found.append(([int(b) for b in rng.integers(1, 1000, n)],
                      int(rng.integers(2, min(n, 5) + 1))))
    return [{"layer_bytes": b, "num_ipus": q} for b, q in found]


def _balance_what(case) -> str:
    return f"layer_bytes={case['layer_bytes']}, num_ipus={case['num_ipus']}"


def _balance_trial(case, balance):
    what = _balance_what(case)
    return as_ints(_call(what, balance, list(case["layer_bytes"]), case["num_ipus"]),
                   len(case["layer_bytes"]), what)


@exercise("07.2", "balance layers over IPUs", points=2,
          hints=(
              'Only splits into consecutive groups are allowed, and there are few of them: you '
              'can afford to look at every one.',
              'A split is a choice of num_ipus - 1 cut positions between layers; its cost is '
              'its fullest group. Every IPU gets at least one layer.',
              'Try every set of cut positions (itertools.combinations of the positions 1..n-1) '
              'and keep the split whose fullest group holds the fewest bytes.',),
          answers=("balance",), cases=_balance_cases, trial=_balance_trial)
def check_balance(cases, outputs):
    """Exercise 07.2: ``balance(layer_bytes, num_ipus)`` → IPU of each layer."""
    for case, mapping in zip(cases, outputs):
        layer_bytes, num_ipus, what = case["layer_bytes"], case["num_ipus"], _balance_what(case)
        mapping = as_ints(mapping, len(layer_bytes), what)
        _chain_order(mapping, num_ipus, what, "the layers form a chain, so IPU 0 takes the "
                     "first layers, IPU 1 the next ones, and so on (ascending, no IPU "
                     "skipped: PopTorch stage ids must ascend)")
        load = np.bincount(mapping, weights=layer_bytes, minlength=num_ipus).astype(int)
        best = best_split(layer_bytes, num_ipus)
        if load.max() > best:
            raise Wrong(f"{what}: with {mapping} IPU {int(load.argmax())} holds "
                        f"{int(load.max()):,} bytes (per IPU: {load.tolist()}), but a "
                        f"split exists whose fullest IPU holds only {best:,}")


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


def _sharded_cases(rng) -> list[dict]:
    """Sharded MLPs of 1 to 5 stages run by the pipeline runner (the judge's side): the
    inputs the learner gets and the cycle at which the run's weight update starts."""
    found = [([784, 256, 256, 256, 10], 2, 16), ([20, 64, 32, 5], 3, 8),
             ([100, 300, 50, 200, 80, 10], 4, 4), ([30, 5], 2, 4)]
    stages = int(rng.integers(2, 6))
    found.append(([int(w) for w in rng.integers(4, 200, stages + 1)], int(rng.integers(1, 6)),
                  int(rng.integers(1, 9))))
    cases = []
    for widths, g, mb in found:
        n = len(widths) - 1
        r = _train_once(_sharded(widths, list(range(n)), optim.SGD(0.1), n, g=g),
                        widths[0], widths[-1], mb)
        fwd, bwd, lf, lb, sync = _timing_inputs(r, n)
        cases.append({"fwd": fwd, "bwd": bwd, "link_fwd": lf, "link_bwd": lb, "sync": sync,
                      "g": g, "_expected": min(rec.start for rec in r.timeline
                                               if rec.kind == "optimizer")})
    return cases


def _sharded_what(case) -> str:
    return (f"{len(case['fwd'])} stage(s), gradient_accumulation={case['g']}: "
            f"fwd={case['fwd']}, bwd={case['bwd']}, link_fwd={case['link_fwd']}, "
            f"link_bwd={case['link_bwd']}, sync={case['sync']}")


def _sharded_trial(case, sharded_cycles):
    what = _sharded_what(case)
    return as_int(_call(what, sharded_cycles, *(list(case[k]) for k in (
        "fwd", "bwd", "link_fwd", "link_bwd")), case["sync"], case["g"]), what)


@exercise("07.3", "the time of a sharded run", points=3,
          hints=(
              'In ShardedExecution only one IPU works at a time.',
              'Count the steps of one micro-batch: each is an op, perhaps an IPU-Link copy, and '
              'a sync; then think about g micro-batches.',
              'ShardedExecution runs one stage at a time: for every micro-batch, F_0 .. F_N-1 '
              "then B_N-1 .. B_0, in 2N - 1 steps (the last stage's F and B share one step, as "
              "TensorFlow's PipelineStageMerger makes them one stage). Each step is its op(s), "
              'plus the IPU-Link copy of its result when there is one, plus a sync. Nothing '
              'overlaps.',),
          answers=("sharded_cycles",), cases=_sharded_cases, trial=_sharded_trial)
def check_sharded_cycles(cases, outputs):
    """Exercise 07.3: ``sharded_cycles(fwd, bwd, link_fwd, link_bwd, sync, g)`` → cycles
    from the start of a ``ShardedExecution`` run to the start of its weight update."""
    for case, got in zip(cases, outputs):
        what, expected = _sharded_what(case), case["_expected"]
        got = as_int(got, what)
        if got != expected:
            raise Wrong(f"{what}: the run's weight update starts at cycle {int(expected):,}, "
                        f"you said {got:,}" + _sharded_diagnosis(
                            case["fwd"], case["bwd"], case["link_fwd"], case["link_bwd"],
                            case["sync"], case["g"], got))


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
    if got == compute + sum(lf) + sum(lb) + (2 * n - 1) * sync and g > 1:
        return f". That is one micro-batch; the run has {g}."
    if got < g * compute:
        return (". That is less than the compute alone: in ShardedExecution only one IPU "
                "works at a time, so nothing overlaps.")
    return ""


# -- 07.4 ---------------------------------------------------------------------------------


def best_time_split(layer_cycles, layer_bytes, num_ipus: int, bytes_per_ipu: int):
    """(slowest stage's cycles, split) of the best contiguous split under the memory cap,
    or (None, None) when no split fits; tries them all."""
    n = len(layer_cycles)
    best = (None, None)
    for cuts in itertools.combinations(range(1, n), num_ipus - 1):
        edges = (0, *cuts, n)
        if max(sum(layer_bytes[a:b]) for a, b in zip(edges, edges[1:])) > bytes_per_ipu:
            continue
        slowest = max(sum(layer_cycles[a:b]) for a, b in zip(edges, edges[1:]))
        if best[0] is None or slowest < best[0]:
            best = (slowest, [q for q, (a, b) in enumerate(zip(edges, edges[1:]))
                              for _ in range(a, b)])
    return best


def _time_cases(rng) -> list[dict]:
    """Even layers; the fastest split fits, or does not; nothing fits (None); a first
    layer slower than all the rest; a cap that only one split meets; then random ones."""
    found = [([10, 10, 10, 10], [1, 1, 1, 1], 2, 2),  # even
             ([50, 10, 10, 10, 10, 10], [5, 1, 1, 1, 1, 1], 2, 6),  # the fastest fits
             ([50, 10, 10, 10, 10, 10], [1, 1, 1, 1, 1, 6], 2, 7),  # the fastest is too full
             ([5, 5, 40, 5, 5, 40], [30, 30, 1, 1, 1, 1], 3, 40),
             ([10, 10, 10], [30, 30, 30], 2, 50),  # nothing fits: None
             ([100, 1, 1, 1], [1, 1, 1, 1], 3, 10),  # one layer sets the pace
             ([3, 3, 3, 3], [2, 2, 2, 2], 2, 4)]  # only the even split fits
    for _ in range(4):
        n = int(rng.integers(4, 9))
        nbytes = [int(b) for b in rng.integers(1, 50, n)]
        q = int(rng.integers(2, min(n, 4) + 1))
        found.append(([int(c) for c in rng.integers(1, 100, n)], nbytes, q,
                      int(max(nbytes) + rng.integers(0, sum(nbytes) // q + 1))))
    return [{"layer_cycles": c, "layer_bytes": b, "num_ipus": q, "bytes_per_ipu": cap}
            for c, b, q, cap in found]


def _time_what(case) -> str:
    return (f"split_stages(layer_cycles={case['layer_cycles']}, "
            f"layer_bytes={case['layer_bytes']}, num_ipus={case['num_ipus']}, "
            f"bytes_per_ipu={case['bytes_per_ipu']})")


def _time_trial(case, split_stages):
    what = _time_what(case)
    got = _call(what, split_stages, list(case["layer_cycles"]), list(case["layer_bytes"]),
                case["num_ipus"], case["bytes_per_ipu"])
    return None if got is None else as_ints(got, len(case["layer_cycles"]), what)


@exercise("07.4", "balance time under a memory cap", points=3,
          hints=(
              'Memory decides which splits are allowed; time decides which of those is best.',
              "The pipeline's pace is its slowest stage: minimise the largest per-IPU sum of "
              'cycles over the splits that fit.',
              'The pipeline runs at the pace of its slowest stage, so minimise the largest per- '
              'IPU sum of cycles, but only among the splits whose every IPU holds at most '
              'bytes_per_ipu. Enumerate the cut positions as in 07.2 and skip the splits that '
              'do not fit; return None when none fits.',),
          answers=("split_stages",), cases=_time_cases, trial=_time_trial)
def check_time_split(cases, outputs):
    """Exercise 07.4: ``split_stages(layer_cycles, layer_bytes, num_ipus, bytes_per_ipu)``
    → IPU of each layer: the slowest stage as fast as possible, every IPU within its memory;
    ``None`` when no split fits."""
    for case, got in zip(cases, outputs):
        cycles, nbytes = case["layer_cycles"], case["layer_bytes"]
        q, cap, what = case["num_ipus"], case["bytes_per_ipu"], _time_what(case)
        best, _ = best_time_split(cycles, nbytes, q, cap)
        if best is None:
            if got is not None:
                raise Wrong(f"{what}: no split fits in {cap} bytes per IPU, so return "
                            f"None; got {got!r}")
            continue
        if got is None:
            raise Wrong(f"{what}: you said no split fits, but one does")
        mapping = as_ints(got, len(cycles), what)
        _chain_order(mapping, q, what, "stages are consecutive layers in ascending IPU "
                     "order, none skipped")
        load = np.bincount(mapping, weights=nbytes, minlength=q).astype(int)
        if load.max() > cap:
            free, _ = best_time_split(cycles, nbytes, q, 10 ** 12)
            tip = (" That split is the fastest if memory did not matter." if
                   np.bincount(mapping, weights=cycles).max() == free else "")
            raise Wrong(f"{what}: with {mapping} IPU {int(load.argmax())} holds "
                        f"{int(load.max())} bytes, more than {cap}.{tip}")
        time = np.bincount(mapping, weights=cycles, minlength=q).astype(int)
        if time.max() > best:
            pic = side_by_side(tile_grid(mapping, "IPU"),
                               tile_grid(best_time_split(cycles, nbytes, q, cap)[1], "IPU"),
                               ("your IPU of each layer", "a fastest split that fits"))
            raise Wrong(f"{what}: with {mapping} the slowest stage takes "
                        f"{int(time.max())} cycles (per IPU: {time.tolist()}), but a "
                        f"split that fits has a slowest stage of only {best}", picture=pic)
