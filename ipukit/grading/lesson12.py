"""The ``check_*`` functions of lesson 12: MNIST with basic and concurrent pipelines.

The references are real runs of Graphcore's concurrent-pipeline MNIST port
(:mod:`ipukit.examples.sharded_mnist`): the basic pipeline's losses and weights for 12.1,
the bytes in a run's timeline for 12.2; a dense float64 classifier trained next to the
learner's sharded one for 12.3; every shard count tried, with the collectives costed by
``CollectiveLog``, for 12.4.

>>> from ipukit.grading import lesson12
>>> r = lesson12.check_shard_count(lambda first, classifier, collectives, max_ipus: 1)
... # doctest: +ELLIPSIS
WRONG · Exercise 12.4 · how many IPUs for the concurrent stage: 0/2 points
   ...
"""

from __future__ import annotations

import copy
import functools
import math

import numpy as np

from ipukit.examples import sharded_mnist
from ipukit.parallel import Pipeline, optim, sharded
from ipukit.parallel.concurrent import Concurrent
from ipukit.target import IPUModel

from .feedback import Wrong, as_int, exercise

#: What crosses between IPUs: IPU-Link copies between stages and a stage's collectives.
TRAFFIC = ("link", "broadcast", "reduce", "allreduce")


def _data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0, 1, (n, 28, 28)).astype(np.float32),
            rng.integers(0, sharded_mnist.CLASSES, n))


# -- 12.1 ---------------------------------------------------------------------------------


@exercise("12.1", "the concurrent pipeline", points=3,
          hints=(
              'Lesson 11 showed how a stage becomes concurrent.',
              'A concurrent stage is a list of members in the stage list and a list of IPUs in '
              'device_mapping; the members come from splitting the classifier you were given.',
              'pipeline([mlp, split_dense(classifier, shards)], [0, list(range(1, shards + '
              "1))], gradient_accumulation, 'grouped', optimizer=optimizer, "
              'loss=ShardedSoftmaxCrossEntropy()): the second stage is a list of members, its '
              'device_mapping entry a list of IPUs.',))
def check_concurrent_pipeline(concurrent_pipeline):
    """Exercise 12.1: ``concurrent_pipeline(mlp, classifier, shards, gradient_accumulation,
    optimizer)`` → a Pipeline whose classifier and loss run sharded, training as the basic
    pipeline does."""

    for hidden, shards, seed in [([16], 2, 1), ([24, 12], 5, 2)]:
        g = 12  # a count both accept: basic has 3 stages, concurrent 2 (Grouped)
        what = f"hidden sizes {hidden}, {shards} shards, gradient accumulation {g}"
        mlp, classifier = sharded_mnist.model(hidden, seed)
        basic = sharded_mnist.build("basic", hidden_sizes=hidden, seed=seed,
                                    gradient_accumulation_count=g, repeat_count=1)
        p = concurrent_pipeline(copy.deepcopy(mlp), copy.deepcopy(classifier), shards, g,
                                optim.SGD(0.01))
        _check_structure(p, shards, hidden[-1], what)
        x, y = _data(2 * g * 8, seed)  # two weight updates of 12 micro-batches of 8
        steps = [slice(0, g * 8), slice(g * 8, 2 * g * 8)]
        want = np.concatenate([basic.run(x[s], y[s]).losses.ravel() for s in steps])
        got = np.concatenate([p.run(x[s], y[s]).losses.ravel() for s in steps])
        if not np.allclose(got, want, rtol=1e-4, atol=1e-6):
            i = int(np.argmax(~np.isclose(got, want, rtol=1e-4, atol=1e-6)))
            raise Wrong(f"{what}: the loss of micro-batch {i} is {got[i]:.6f}, the basic "
                        f"pipeline's is {want[i]:.6f}. Both must start from the same "
                        "weights: build the members from the given classifier "
                        "(split_dense), not new layers")
        halves = np.concatenate([m.params["weight"] for m in p.stages[-1].net.members], 1)
        if not np.allclose(halves, basic.stages[1].net.params["weight"], rtol=1e-4,
                           atol=1e-6):
            raise Wrong(f"{what}: same losses, but after training the members' weights "
                        "differ from the basic classifier's: pass the optimizer you "
                        "were given")


def _check_structure(p, shards: int, hidden: int, what: str) -> None:
    if not isinstance(p, Pipeline):
        raise Wrong(f"{what}: return the Pipeline that parallel.pipeline(...) builds, got "
                    f"{type(p).__name__}")
    last = p.stages[-1]
    if not isinstance(last.net, Concurrent):
        raise Wrong(f"{what}: the last stage runs on IPU(s) {list(last.ipus)} only. A "
                    "concurrent stage is a list of members (split_dense(classifier, shards)) "
                    "with a list of IPUs in its device_mapping entry")
    if len(last.ipus) != shards:
        raise Wrong(f"{what}: the classifier stage runs on {len(last.ipus)} IPUs "
                    f"{list(last.ipus)}; split it over {shards}")
    cols = sharded_mnist.CLASSES // shards
    for s, m in enumerate(last.net.members):
        shape = tuple(m.params.get("weight", np.zeros(0)).shape)
        if shape != (hidden, cols):
            raise Wrong(f"{what}: member {s} holds a weight of shape {shape}; each holds "
                        f"{cols} of the {sharded_mnist.CLASSES} classes, ({hidden}, {cols}): "
                        "split the classifier by output columns")


# -- 12.2 ---------------------------------------------------------------------------------


def measured_bytes(mode: str, micro_batch: int, hidden: int, shards: int = 2) -> int:
    """Bytes all IPUs send over IPU-Links for micro-batch 0 of a sharded_mnist run."""
    p = sharded_mnist.build(mode, hidden_sizes=[8, hidden], shards=shards, repeat_count=1)
    x, y = _data(p.samples_per_run * micro_batch, micro_batch)
    r = p.run(x, y)
    return sum(rec.bytes for rec in r.timeline if rec.kind in TRAFFIC and rec.microbatch == 0)


@exercise("12.2", "bytes over IPU-Links per micro-batch", points=3,
          hints=(
              'List every tensor that crosses between IPUs, forward and backward.',
              "Basic: two activations and their gradients. Concurrent: also the stage's "
              'collectives (broadcasts, reduces and ring all-reduces of one number per image).',
              'basic: the activations [mb, hidden] go to IPU 1 and their gradient comes back; '
              'the logits [mb, 10] go to IPU 2 and their gradient comes back. Concurrent: add '
              'the broadcast of the stage input and the reduce of its gradient ((S-1) copies '
              "each), the labels (int32) and the loss's two broadcasts/reduces ((S-1) x mb x 4 "
              'each), and two ring all-reduces in which each of the S IPUs sends ceil(2(S-1)/S '
              'x mb x 4) bytes.',))
def check_link_bytes(link_bytes):
    """Exercise 12.2: ``link_bytes(mode, micro_batch, hidden, shards)`` → bytes all IPUs
    send between IPUs for one micro-batch's forward and backward."""

    for mode, mb, hidden, shards in [("basic", 8, 64, 2), ("concurrent", 8, 64, 2),
                                     ("basic", 4, 30, 5), ("concurrent", 3, 20, 5),
                                     ("concurrent", 16, 128, 2)]:
        what = f"link_bytes({mode!r}, micro_batch={mb}, hidden={hidden}, shards={shards})"
        want = measured_bytes(mode, mb, hidden, shards)
        got = as_int(link_bytes(mode, mb, hidden, shards), what)
        if got != want:
            raise Wrong(f"{what}: a run's timeline records {want:,} bytes sent between "
                        f"IPUs for micro-batch 0, you said {got:,}"
                        + _bytes_diagnosis(mode, mb, hidden, shards, got, want))


def _bytes_diagnosis(mode, mb, hidden, shards, got, want) -> str:
    act, small = mb * hidden * 4, mb * 4
    if mode == "basic":
        if got * 2 == want:
            return ". Count the backward too: every gradient goes back the way its input came"
        return ""
    if got == want - 2 * (shards - 1) * act:
        return (". The stage's input is broadcast to the other members' IPUs and their "
                "input gradients are reduced back: (S-1) copies of [mb, hidden] each way")
    ring = -(-2 * (shards - 1) * small // shards)
    if got == want - 2 * shards * ring + 2 * ring:
        return ". Every one of the S IPUs sends its share in a ring all-reduce, not only one"
    return ""


# -- 12.3 ---------------------------------------------------------------------------------


def _dense_step(w, x, labels, lr):
    """Dense float64 reference: one SGD step of softmax cross-entropy (mean over rows)."""
    logits = x @ w
    top = logits.max(axis=1, keepdims=True)
    lp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = -lp[rows, labels].mean()
    d = np.exp(lp)
    d[rows, labels] -= 1
    return w - lr * x.T @ (d / len(labels)), loss


@exercise("12.3", "a concurrent classifier from your lesson-11 ops", points=3,
          hints=(
              'Write the dense step first, then ask which parts need other shards.',
              "Logits and weight gradients are local to a shard; the softmax needs the row's "
              "max and sum (your 11.1), the loss needs the label's shard.",
              'Forward: logits_s = x @ w_s on every shard; log-probabilities with your '
              'sharded_log_softmax; the loss of row b is -log_prob at its label, which only the '
              'owning shard has: pick it there (0 elsewhere) and all-reduce ADD. Backward with '
              'your ce_backward and g = 1/B per row; dw_s = x.T @ dlogits_s; w_s - lr * dw_s.',))
def check_classifier_step(classifier_step):
    """Exercise 12.3: ``classifier_step(w_parts, x, labels, lr, log)`` → ``(new w_parts,
    mean loss)``: one SGD step of a classifier sharded by classes, trained as the dense
    one is."""

    rng = np.random.default_rng(123)
    for b, h, v, s_count in [(4, 3, 4, 2), (6, 5, 12, 3), (8, 4, 10, 5)]:
        w = rng.normal(size=(h, v))
        what = f"x [{b}, {h}], classes {v} over {s_count} shards, lr=0.5"
        parts = [p.copy() for p in np.split(w, s_count, axis=1)]
        for step in range(3):
            x = rng.normal(size=(b, h))
            labels = rng.integers(0, v, b)
            log = sharded.CollectiveLog(s_count)
            got = classifier_step([p.copy() for p in parts], x.copy(),
                                  labels.astype(np.int32), 0.5, log)
            try:
                new_parts, loss = got
                new_parts = [np.asarray(p, np.float64) for p in new_parts]
                loss = float(loss)
            except (TypeError, ValueError):
                raise Wrong(f"{what}: return (new w_parts, mean loss), got "
                            f"{str(got)[:80]}") from None
            w, want_loss = _dense_step(w, x, labels, 0.5)
            if not np.isclose(loss, want_loss, rtol=1e-7):
                raise Wrong(f"{what}: step {step}'s mean loss is {want_loss:.6f}, you "
                            f"said {loss:.6f}")
            want = np.split(w, s_count, axis=1)
            if len(new_parts) != s_count or any(
                    p.shape != q.shape for p, q in zip(new_parts, want)):
                raise Wrong(f"{what}: return {s_count} weight shards of shape "
                            f"{want[0].shape}, got {[p.shape for p in new_parts]}")
            for s, (p, q) in enumerate(zip(new_parts, want)):
                if not np.allclose(p, q, rtol=1e-7, atol=1e-9):
                    raise Wrong(f"{what}: after step {step} shard {s}'s weights differ "
                                "from the dense classifier's (max difference "
                                f"{np.abs(p - q).max():.3g})"
                                + (". Divide the gradient by the batch size: the loss "
                                   "is a mean" if np.allclose(
                                       parts[s] - p, b * (parts[s] - q)) else ""))
            _check_small_collectives(log, b, what)
            parts = new_parts


def _check_small_collectives(log, rows: int, what: str) -> None:
    limit = math.ceil(2 * (log.num_shards - 1) * rows * 8 / log.num_shards)
    for r in log.records:
        if r.bytes > limit:
            raise Wrong(f"{what}: right weights, but '{r.label}' ({r.kind}) sends "
                        f"{r.bytes:,} bytes from IPU {r.ipu}; only one number per row "
                        "needs to cross (a max, a sum, a loss): never gather the logits")


# -- 12.4 ---------------------------------------------------------------------------------


def stage_collectives(micro_batch: int, hidden: int):
    """``cycles(S)``: what a concurrent classifier stage of S members pays in collectives
    per micro-batch (lesson 11's list, costed by ``CollectiveLog``); 0 for one IPU."""

    def cycles(s_count: int) -> int:
        if s_count == 1:
            return 0
        target = IPUModel("ipu2", num_ipus=s_count).create_device().target
        act, row = micro_batch * hidden * 4, micro_batch * 4
        log = sharded.CollectiveLog(s_count, target)
        x, y = np.zeros(act, np.uint8), np.zeros(row, np.uint8)
        log.broadcast(x, "stage input")
        log.broadcast(y, "labels")
        log.all_reduce([y] * s_count, "max", "row max")
        log.all_reduce([y] * s_count, "add", "row sum")
        log.reduce_add([y] * s_count, "losses")
        log.broadcast(y, "loss gradient")
        log.reduce_add([x] * s_count, "input gradient")
        return int(log.cycles())

    return cycles


def _pace(first_cycles, classifier_cycles, collective_cycles, s_count):
    return max(first_cycles, classifier_cycles / s_count + collective_cycles(s_count))


def best_shard_count(first_cycles, classifier_cycles, collective_cycles, max_ipus):
    """The reference: try every S; the slowest stage decides; ties go to fewer IPUs."""
    options = [(max(first_cycles, classifier_cycles / s + collective_cycles(s)), s)
               for s in range(1, max_ipus)]
    return min(options)[1]


@exercise("12.4", "how many IPUs for the concurrent stage", points=2,
          hints=(
              'More IPUs make the classifier faster but its collectives slower.',
              "The pipeline's pace is max(first stage, classifier / S + collectives(S)): "
              'evaluate it for every S.',
              'IPU 0 runs the first stage; the classifier may use S = 1 .. max_ipus - 1 IPUs. '
              'With S members its stage takes classifier_cycles / S + collective_cycles(S). A '
              'pipeline goes at the pace of its slowest stage: pick the S whose slowest stage '
              'is fastest, the fewest IPUs on a tie.',))
def check_shard_count(shard_count):
    """Exercise 12.4: ``shard_count(first_cycles, classifier_cycles, collective_cycles,
    max_ipus)`` → the number of IPUs to give the concurrent classifier stage."""

    cases = [(40_000, 200_000, 8, 64, 8), (200_000, 150_000, 8, 64, 8),
             (10_000, 400_000, 16, 256, 16), (1_000, 60_000, 4, 512, 8),
             (50_000, 120_000, 8, 64, 3)]
    for first, classifier, mb, hidden, max_ipus in cases:
        coll = stage_collectives(mb, hidden)
        want = best_shard_count(first, classifier, coll, max_ipus)
        what = (f"shard_count(first_cycles={first:,}, classifier_cycles={classifier:,}, "
                f"collective_cycles for micro-batches of {mb} x {hidden}, "
                f"max_ipus={max_ipus})")
        got = as_int(shard_count(first, classifier, coll, max_ipus), what)
        if not 1 <= got < max_ipus:
            raise Wrong(f"{what}: you said {got}; IPU 0 runs the first stage, so the "
                        f"classifier can have 1 to {max_ipus - 1} IPUs")
        if got != want:
            pace = functools.partial(_pace, first, classifier, coll)
            raise Wrong(f"{what}: with {got} IPU(s) the slowest stage takes "
                        f"{pace(got):,.0f} cycles; with {want} it takes {pace(want):,.0f}"
                        + (". On a tie, take fewer IPUs" if pace(got) == pace(want) else
                           ". Collectives cost more with more members: count them"
                           if got == max_ipus - 1 else ""))
