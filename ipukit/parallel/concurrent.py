"""Concurrent pipeline stages: the members of one stage side by side on several IPUs.

In TensorFlow-for-IPU an element of ``computational_stages`` may be a list of functions,
with the matching ``device_mapping`` element a list of IPUs: ``device_mapping=[0, [1, 2],
2, 3]``. Every member receives the stage's inputs and the outputs are concatenated.
Graphcore's "Sharding pipeline stages using concurrent pipelines" example uses this to
split a classifier and its softmax cross-entropy over IPUs (``run_sharded_mnist.py``).

Here the runner turns such a stage into a :class:`Concurrent` layer whose members are
layers (or lists of layers), member s on IPU ``ipus[s]``:

* forward: the input is copied to every member's IPU (:func:`sharded.to_all`, a
  broadcast); each member computes; the outputs stay where they were computed, as
  :class:`Shards` (joined along the last axis by :func:`join` when the next stage needs
  them, a dense array);
* backward: the output gradient is split by member (or arrives sharded from
  :class:`ShardedSoftmaxCrossEntropy`), each member runs its backward and the members'
  input gradients are summed back onto the first IPU (``to_all``'s gradient, a reduce).

:class:`ShardedSoftmaxCrossEntropy` is the loss of a concurrent last stage: it runs
:func:`sharded.log_softmax_cross_entropy` on the members' logits, so the classes are never
gathered on one IPU. :func:`split_dense` cuts a ``Dense`` layer into column shards that
compute exactly what it computes. Every collective and every member's compute is timed on
the stage's :class:`StageLog`; :meth:`Concurrent.program` gives the runner one
micro-batch's records, which it places in its timeline, one record per IPU.

>>> import numpy as np
>>> from ipukit.parallel import nn, optim, pipeline
>>> classifier = nn.Dense(8, 4, rng=2)
>>> p = pipeline([[nn.Dense(4, 8, rng=1), nn.ReLU()], split_dense(classifier, 2)],
...              [0, [1, 2]], gradient_accumulation_count=4, optimizer=optim.SGD(0.1),
...              loss=ShardedSoftmaxCrossEntropy())
>>> rng = np.random.default_rng(0)
>>> r = p.run(rng.normal(size=(8, 4)).astype("float32"), rng.integers(0, 4, 8))
>>> f = [rec for rec in r.timeline if rec.kind == "F" and rec.stage == 1]
>>> [(rec.ipu, rec.label, rec.start) for rec in f[:3]]  # the two members side by side
[(1, 'members', 95.0), (2, 'members', 95.0), (1, 'cross-entropy', 137.0)]
>>> sorted({rec.kind for rec in r.timeline})
['B', 'F', 'allreduce', 'broadcast', 'link', 'optimizer', 'reduce', 'sync']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from .. import backend, cost
from ..errors import PipelineConfigError
from ..target import Target
from ..timeline import Span, Timeline
from . import collectives, nn


@dataclass(frozen=True)
class Program:
    """One phase of one micro-batch on a concurrent stage: ``duration`` cycles, its
    ``timeline`` (compute as kind F/B/R, collectives as broadcast/reduce/allreduce) with
    times relative to the op's start, and the bytes each IPU sends to a neighbouring
    stage on other IPUs: forward, its member's output; backward, the summed input
    gradient, from the first IPU."""

    duration: int
    timeline: Timeline
    sends: tuple[int, ...] = ()  # bytes each IPU sends on when the next op is elsewhere


class StageLog(collectives.CollectiveLog):
    """A :class:`~ipukit.parallel.sharded.CollectiveLog` that also times compute.

    :meth:`compute` advances the clock by the slowest shard's compute, so collectives
    and compute follow each other as they run; :meth:`take` hands over the records.
    """

    def __init__(self, ipus, target: Target | None = None):
        super().__init__(len(ipus), target, ipus)
        self.compute_records: list[Span] = []

    def compute(self, flops, phase: str, label: str) -> None:
        """Shard s computes ``flops[s]`` FLOPs at the same time as the others."""
        cycles = [cost.flops_cycles(f, self.target) for f in flops]
        self.compute_records += [Span(q, phase, self.now, c, label=label)
                                 for q, c in zip(self.ipus, cycles)]
        self.now += max(cycles)

    def take(self) -> Program:
        """The spans so far, in time order, as a Program; then reset."""
        moved = [replace(r, kind=collectives.TIMELINE_KINDS[r.kind]) for r in self.records]
        spans = sorted(self.compute_records + moved, key=lambda r: (r.start, r.ipu))
        program = Program(self.now, Timeline(spans, clock_hz=self.target.clock_hz))
        self.records, self.compute_records, self.now = [], [], 0
        return program


class Shards(list):
    """A tensor split over IPUs: ``self[s]`` lives on IPU ``log.ipus[s]``."""

    def __init__(self, parts, log: StageLog):
        super().__init__(parts)
        self.log = log


def join(y):
    """The members' outputs concatenated along the last axis (dense arrays pass through)."""
    return backend.get_xp().concatenate(y, axis=-1) if isinstance(y, Shards) else y


class StagePart(NamedTuple):
    """What of stage ``index`` lives on one IPU: its parameters there."""

    index: int
    params: dict


class Concurrent(nn.Layer):
    """One pipeline stage run by ``members`` side by side, member s on IPU ``ipus[s]``.

    TensorFlow's concurrent stage (``ipu_shard(d)`` per function). Parameters are named
    ``"<member>.<name>"``.
    """

    def __init__(self, members, ipus, target: Target | None = None, index: int = 0):
        # no Layer.__init__: parameters live in the members
        ipus = tuple(ipus)
        if not isinstance(members, (list, tuple)) or len(members) != len(ipus):
            got = len(members) if isinstance(members, (list, tuple)) else 1
            raise PipelineConfigError(
                f"stage {index} is mapped to IPUs {list(ipus)} but has {got} function(s): "
                "concurrent stages take a list with one function (layer or list of layers) "
                "per IPU"
            )
        self.members = [as_layer(m, index) for m in members]
        self.ipus = ipus
        self.log = StageLog(ipus, target)
        self._programs: dict = {}

    @property
    def params(self) -> dict:
        return {f"{s}.{k}": v for s, m in enumerate(self.members) for k, v in m.params.items()}

    @property
    def grads(self) -> dict:
        return {f"{s}.{k}": v for s, m in enumerate(self.members) for k, v in m.grads.items()}

    def params_on(self, ipu: int) -> dict:
        """The parameters of the member on ``ipu``."""
        s = self.ipus.index(ipu)
        return {f"{s}.{k}": v for k, v in self.members[s].params.items()}

    def zero_grad(self) -> None:
        for m in self.members:
            m.zero_grad()

    def forward(self, x):
        """``to_all(x)``, then every member on its copy; returns Shards (the log restarts)."""
        self.log.take()
        x_parts, to_all_backward = collectives.to_all(x, self.log, "stage input")
        self.log.compute([m.flops(x.shape)[0] for m in self.members], "F", "members")
        outs, caches = zip(*(m.forward(xs) for m, xs in zip(self.members, x_parts)))
        return Shards(outs, self.log), (list(caches), to_all_backward, x.shape)

    def backward(self, dy, cache):
        """Members' backwards on their slices of ``dy``; their input gradients summed."""
        caches, to_all_backward, shape = cache
        if not isinstance(dy, (list, tuple)):
            widths = [m.out_shape(shape)[-1] for m in self.members]
            dy = backend.get_xp().split(dy, np.cumsum(widths)[:-1].tolist(), axis=-1)
        self.log.compute([m.flops(shape)[1] for m in self.members], "B", "members")
        partials = [m.backward(g, c) for m, g, c in zip(self.members, dy, caches)]
        return to_all_backward(partials)

    def out_shape(self, shape):
        shapes = [tuple(m.out_shape(shape)) for m in self.members]
        if len({s[:-1] for s in shapes}) != 1:
            raise PipelineConfigError(
                f"the members of a concurrent stage give outputs {shapes}: they are "
                "concatenated along the last axis, so all other dimensions must agree"
            )
        return shapes[0][:-1] + (sum(s[-1] for s in shapes),)

    def flops(self, shape):
        f = [m.flops(shape) for m in self.members]
        return sum(a for a, _ in f), sum(b for _, b in f)

    def program(self, shape, dtype, loss=None) -> dict[str, Program]:
        """The F, R and B programs of one micro-batch of input ``shape`` (``loss`` on the
        last stage), from a run on zeros: collectives and their bytes depend only on
        shapes. Cached per shape."""
        key = (tuple(shape), np.dtype(dtype).str, loss is not None)
        if key not in self._programs:
            xp = backend.get_xp()
            y, cache = self.forward(xp.zeros(shape, dtype=dtype))
            if loss is not None:
                _, lcache = loss.forward(y, xp.zeros(shape[0], dtype=xp.int32))
            fwd = self.log.take()
            self.backward(loss.backward(lcache) if loss is not None
                          else [xp.zeros_like(p) for p in y], cache)
            self.zero_grad()
            bwd = self.log.take()
            item = np.dtype(dtype).itemsize
            out = [math.prod(p.shape) * item for p in y]
            back = [math.prod(shape) * item] + [0] * (len(out) - 1)
            fwd = replace(fwd, sends=tuple(out))
            recompute = [replace(r, kind="R") if r.kind == "F" else r for r in fwd.timeline]
            self._programs[key] = {"F": fwd, "R": replace(fwd, timeline=Timeline(
                                       recompute, clock_hz=fwd.timeline.clock_hz)),
                                   "B": replace(bwd, sends=tuple(back))}
        return self._programs[key]

    def __repr__(self):
        return f"Concurrent({self.members!r}, ipus={list(self.ipus)})"


def as_layer(member, index: int) -> nn.Layer:
    """A layer, or a list of layers as one :class:`nn.Sequential`, for stage ``index``."""
    layers = list(member) if isinstance(member, (list, tuple)) else [member]
    bad = [m for m in layers if not isinstance(m, nn.Layer)]
    if bad:
        raise PipelineConfigError(
            f"stage {index}: a stage (or a concurrent stage's member) is a layer or a list "
            f"of layers from ipukit.parallel.nn, got {bad[0]!r}"
        )
    return layers[0] if len(layers) == 1 else nn.Sequential(*layers)


def split_dense(dense: nn.Dense, num_shards: int) -> list[nn.Dense]:
    """``dense`` cut by output columns into ``num_shards`` members (``sharded.matmul``
    with the bias sharded alike): member s holds columns ``s*M/S .. (s+1)*M/S``."""
    cols = collectives.check_even(dense.out_features, num_shards,
                                  f"{dense!r}'s output columns")
    members = []
    for s in range(num_shards):
        part = slice(s * cols, (s + 1) * cols)
        m = nn.Dense(dense.in_features, cols, dtype=dense.params["weight"].dtype)
        m.params = {"weight": dense.params["weight"][:, part].copy(),
                    "bias": dense.params["bias"][part].copy()}
        members.append(m)
    return members


class ShardedSoftmaxCrossEntropy:
    """Mean softmax cross-entropy of a concurrent last stage's logits, never gathered.

    ``nn.SoftmaxCrossEntropy`` for :class:`Shards`: the labels go to every IPU (int32,
    as on the IPU), then ``sharded.log_softmax_cross_entropy`` (all-reduce MAX and ADD of
    per-row numbers only) and the mean, as Graphcore's sharded classifier-and-loss stage.
    Its arithmetic is timed before its forward collectives and after its backward's
    broadcast.
    """

    takes_shards = True

    def forward(self, logits: Shards, labels):
        if not isinstance(logits, Shards):
            raise PipelineConfigError(
                "ShardedSoftmaxCrossEntropy needs sharded logits: make the last stage a "
                "concurrent stage (a list of functions on a list of IPUs), or use "
                "nn.SoftmaxCrossEntropy"
            )
        xp, log = backend.get_xp(), logits.log
        label_parts, _ = collectives.to_all(xp.asarray(labels).astype(xp.int32), log, "labels")
        log.compute([self.flops(p.shape)[0] for p in logits], "F", "cross-entropy")
        ce, backward = collectives.log_softmax_cross_entropy(list(logits), label_parts, log)
        return ce.mean(), (backward, list(logits), log)  # the logits' bytes: the stash

    def backward(self, cache, scale=1.0):
        backward, logits, log = cache
        n = logits[0].shape[0]
        dlogits = backward(backend.get_xp().full(n, scale / n, dtype=logits[0].dtype))
        log.compute([self.flops(p.shape)[1] for p in logits], "B", "cross-entropy")
        return dlogits

    def flops(self, shape):
        n = math.prod(shape)
        return 5 * n, 2 * n


def check_loss(stages, loss) -> None:
    """A concurrent last stage needs a loss that takes Shards, and only it does."""
    concurrent_last = isinstance(stages[-1].net, Concurrent)
    if concurrent_last != bool(getattr(loss, "takes_shards", False)):
        raise PipelineConfigError(
            f"the last stage is {'' if concurrent_last else 'not '}a concurrent stage but "
            f"the loss is {type(loss).__name__}: a concurrent last stage keeps its outputs "
            "sharded, so use ShardedSoftmaxCrossEntropy there (and only there)"
        )


__all__ = [
    "Concurrent",
    "Program",
    "Shards",
    "ShardedSoftmaxCrossEntropy",
    "StageLog",
    "StagePart",
    "as_layer",
    "check_loss",
    "join",
    "split_dense",
]
