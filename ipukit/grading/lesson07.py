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

from ipukit.parallel import Block, ShardedExecution, Stage, nn, optim, training_model

from .common import teaching_target
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


# -- 07.1 ---------------------------------------------------------------------------------

# The IPU-Links of an IPU-POD as a ladder (kit convention): IPUs 2j and 2j+1 form a rung,
# and IPU i is linked to IPU i + 2 along the rails.


def ladder_links(num_ipus: int) -> set[tuple[int, int]]:
    """The IPU-Links of ``num_ipus`` IPUs in a ladder, as sorted pairs (kit convention)."""
    links = {(a, a + 1) for a in range(0, num_ipus - 1, 2)}
    return links | {(a, a + 2) for a in range(num_ipus - 2)}


def _linked(a: int, b: int, num_ipus: int) -> bool:
    return (min(a, b), max(a, b)) in ladder_links(num_ipus)


@exercise("07.1", "the selection order of IPUs", points=2,
          hints=(
              'Draw the ladder of 8 IPUs and walk along it with a pencil.',
              "SNAKE must step from each shard's IPU to one it has a link to; HOOF must also "
              'end on an IPU linked to the first one.',
              'Draw the ladder for 8 IPUs (rungs 0-1, 2-3, 4-5, 6-7; rails 0-2-4-6 and '
              '1-3-5-7). SNAKE climbs the ladder crossing every rung in turn; HOOF goes up one '
              'rail and comes down the other, so that it ends next to where it began.',))
def check_selection_order(select_ipus):
    """Exercise 07.1: ``select_ipus(order, num_shards)`` → the physical IPU of each shard
    for TensorFlow's ``SelectionOrder`` ``"zigzag"``, ``"snake"`` or ``"hoof"``."""

    for n in (2, 4, 6, 8, 16):
        for order in ("zigzag", "snake", "hoof"):
            what = f"select_ipus({order!r}, {n})"
            got = as_ints(select_ipus(order, n), n, what)
            if sorted(got) != list(range(n)):
                raise Wrong(f"{what}: got {got}; give every shard its own IPU, each of "
                            f"IPUs 0 to {n - 1} once")
            if order == "zigzag":
                if got != list(range(n)):
                    raise Wrong(f"{what}: got {got}; ZIGZAG follows the natural order "
                                "of the IPUs")
                continue
            pairs = list(zip(got, got[1:])) + ([(got[-1], got[0])] if order == "hoof"
                                                else [])
            for s, (a, b) in enumerate(pairs):
                if not _linked(a, b, n):
                    which = ("the last shard and the first" if s == n - 1 else
                             f"shards {s} and {s + 1}")
                    raise Wrong(f"{what}: got {got}: {which} are on IPUs {a} and {b}, "
                                "which have no IPU-Link between them (links: "
                                f"{sorted(ladder_links(n))})")


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


def _time_cases():
    yield [10, 10, 10, 10], [1, 1, 1, 1], 2, 2  # even
    yield [50, 10, 10, 10, 10, 10], [5, 1, 1, 1, 1, 1], 2, 6  # the time-best split fits
    yield [50, 10, 10, 10, 10, 10], [1, 1, 1, 1, 1, 6], 2, 7  # the time-best split is too full
    yield [5, 5, 40, 5, 5, 40], [30, 30, 1, 1, 1, 1], 3, 40
    yield [10, 10, 10], [30, 30, 30], 2, 50  # nothing fits: None
    rng = np.random.default_rng(74)
    for _ in range(6):
        n = int(rng.integers(4, 9))
        cycles = [int(c) for c in rng.integers(1, 100, n)]
        nbytes = [int(b) for b in rng.integers(1, 50, n)]
        q = int(rng.integers(2, min(n, 4) + 1))
        cap = int(max(nbytes) + rng.integers(0, sum(nbytes) // q + 1))
        yield cycles, nbytes, q, cap


@exercise("07.4", "balance time under a memory cap", points=3,
          hints=(
              'Memory decides which splits are allowed; time decides which of those is best.',
              "The pipeline's pace is its slowest stage: minimise the largest per-IPU sum of "
              'cycles over the splits that fit.',
              'The pipeline runs at the pace of its slowest stage, so minimise the largest per- '
              'IPU sum of cycles, but only among the splits whose every IPU holds at most '
              'bytes_per_ipu. Enumerate the cut positions as in 07.2 and skip the splits that '
              'do not fit; return None when none fits.',))
def check_time_split(split_stages):
    """Exercise 07.4: ``split_stages(layer_cycles, layer_bytes, num_ipus, bytes_per_ipu)``
    → IPU of each layer: the slowest stage as fast as possible, every IPU within its memory;
    ``None`` when no split fits."""

    for cycles, nbytes, q, cap in _time_cases():
        what = (f"split_stages(layer_cycles={cycles}, layer_bytes={nbytes}, "
                f"num_ipus={q}, bytes_per_ipu={cap})")
        best, _ = best_time_split(cycles, nbytes, q, cap)
        got = split_stages(list(cycles), list(nbytes), q, cap)
        if best is None:
            if got is not None:
                raise Wrong(f"{what}: no split fits in {cap} bytes per IPU, so return "
                            f"None; got {got!r}")
            continue
        if got is None:
            raise Wrong(f"{what}: you said no split fits, but one does")
        mapping = as_ints(got, len(cycles), what)
        if mapping[0] != 0 or any(b - a not in (0, 1) for a, b in zip(mapping,
                                                                      mapping[1:])):
            raise Wrong(f"{what}: got {mapping}; stages are consecutive layers in "
                        "ascending IPU order, none skipped")
        if mapping[-1] != q - 1:
            raise Wrong(f"{what}: got {mapping}, which uses {mapping[-1] + 1} of the "
                        f"{q} IPUs; use them all")
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
          hints=(
              'Only splits into consecutive groups are allowed, and there are few of them: you '
              'can afford to look at every one.',
              'A split is a choice of num_ipus - 1 cut positions between layers; its cost is '
              'its fullest group.',
              'Try every set of cut positions (itertools.combinations of the positions 1..n-1) '
              'and keep the split whose fullest group holds the fewest bytes.',))
def check_balance(balance):
    """Exercise 07.2: ``balance(layer_bytes, num_ipus)`` → IPU of each layer."""

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
          hints=(
              'In ShardedExecution only one IPU works at a time.',
              'Count the steps of one micro-batch: each is an op, perhaps an IPU-Link copy, and '
              'a sync; then think about g micro-batches.',
              'ShardedExecution runs one stage at a time: for every micro-batch, F_0 .. F_N-1 '
              "then B_N-1 .. B_0, in 2N - 1 steps (the last stage's F and B share one step, as "
              "TensorFlow's PipelineStageMerger makes them one stage). Each step is its op(s), "
              'plus the IPU-Link copy of its result when there is one, plus a sync. Nothing '
              'overlaps.',))
def check_sharded_cycles(sharded_cycles):
    """Exercise 07.3: ``sharded_cycles(fwd, bwd, link_fwd, link_bwd, sync, g)`` → cycles
    from the start of a ``ShardedExecution`` run to the start of its weight update."""

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
