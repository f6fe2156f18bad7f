"""The pipeline runner: real training of a model split into stages on several IPUs.

A :class:`Pipeline` is stages, a device mapping, one frozen :class:`PipelineOptions`, an
optimiser and a loss. Two front ends build it: TensorFlow-for-IPU's ``pipeline``
(:mod:`.frontend_tf`) and PopTorch's ``training_model`` with blocks and strategies
(:mod:`.frontend_poptorch`); :mod:`.pipelining` gathers all three.

A stage may be concurrent, a list of functions (layers or lists of layers) on a list of
IPUs (``device_mapping=[0, [1, 2], 2, 3]``): the members run side by side, each gets the
same input, their outputs are concatenated; the timeline holds each IPU's compute and the
stage's collectives (``"broadcast"``, ``"reduce"``, ``"allreduce"``, with their ``bytes``
and ``label``). See :mod:`.concurrent`.

``Pipeline.run(x, labels)`` executes, for each of ``repeat_count`` pipeline runs, the
forward and backward of every micro-batch in the schedule's order: activations go to the
next stage (an IPU-Link copy when it is on another IPU), each stage stashes what its
backward needs in a FIFO of the schedule's depth (plus its output buffer) and restores it
in order, or with ``recomputation`` stashes only its input and recomputes the forward
(an ``"R"`` op) right before the backward. The schedules after Graphcore's run several
stages on one IPU (placed as the schedule places them) and, split, each backward as a B
op (the input gradient, ``Layer.backward_input``) and a later W op (the weight
gradients, ``Layer.backward_weight``). Gradients are accumulated per stage with the
reduction method, summed or averaged over replicas, and the optimiser is applied once per
run (replicas, RTS, accumulation dtype and output modes: :mod:`.replication`).

The result has the per-micro-batch losses and two plain records:

* ``timeline``: a :class:`~ipukit.timeline.Timeline` of :class:`~ipukit.timeline.Span`
  ``(ipu, kind, start, duration, stage, microbatch, bytes, label)``, times in cycles of
  the target's clock (the one record of time, as ``Trace.timeline()``; iterating it gives
  its spans). ``kind`` is ``"F"``, ``"B"``, ``"W"`` (the weight gradients of a split
  backward), ``"R"`` (compute: FLOPs ÷ the IPU's FLOPs per cycle), ``"link"`` (an activation or
  gradient sent over IPU-Links after the op, ``bytes`` ÷ link bandwidth), ``"sync"`` (the
  end of a lock-step step), ``"allreduce"`` (gradients reduced across replicas, ring
  all-reduce; with RTS ``"reducescatter"`` and ``"allgather"``), ``"optimizer"`` (the
  weight update, plus copying offloaded state in from Streaming Memory and back out, each
  remote buffer's copy timed by ``cost.remote_cycles`` as on the emulator (kit
  convention)). ``stage`` and ``microbatch`` are -1
  where they do not apply. Replicas run the same timeline on their
  own IPUs; the spans are replica 0's. ``timeline.measures()`` gives the bubble and each
  IPU's idle time by cause.
* ``memory``: a tuple of :class:`MemoryRecord` ``(time, ipu, weights, stash, gradients,
  optimizer)`` in bytes, one after every op on that IPU. Offloaded optimiser state (in
  Streaming Memory) is in ``host_bytes``. A peak over the IPU's memory raises
  :class:`OutOfMemoryError` naming the IPU and what filled it, before the weights are
  updated.

>>> import numpy as np
>>> from ipukit.parallel import nn, optim, pipeline
>>> rng = np.random.default_rng(0)
>>> stages = [[nn.Dense(4, 8, rng=1), nn.ReLU()], [nn.Dense(8, 3, rng=2)]]
>>> p = pipeline(stages, [0, 1], gradient_accumulation_count=4, optimizer=optim.SGD(0.1),
...              loss=nn.SoftmaxCrossEntropy())
>>> r = p.run(rng.normal(size=(4 * 5, 4)).astype("float32"), rng.integers(0, 3, 20))
>>> r.losses.shape, sorted({rec.kind for rec in r.timeline})
((1, 1, 4), ['B', 'F', 'link', 'optimizer', 'sync'])
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from dataclasses import dataclass

import numpy as np

from .. import backend
from ..cost import CostModel, remote_cycles
from ..errors import IpuError, OutOfMemoryError, PipelineConfigError
from ..target import IPUModel, Target
from ..timeline import Span, Timeline
from . import checks, concurrent, nn, replication
from . import schedule_orders as orders_of
from .nn import is_count
from .schedule import BEYOND_GRAPHCORE, Schedule, schedule, simulate

REDUCTIONS = ("SUM", "MEAN", "RUNNING_MEAN")


@dataclass(frozen=True)
class PipelineOptions:
    """Every setting of a training pipeline, checked once (the front ends translate
    TensorFlow's and PopTorch's argument names into these).

    >>> PipelineOptions(8, schedule="interleaved", reduction="mean").reduction
    'MEAN'
    >>> PipelineOptions(8, repeat_count=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ipukit.errors.PipelineConfigError: repeat_count must be a positive integer, got 0
    """

    gradient_accumulation: int
    schedule: str = "grouped"
    reduction: str = "SUM"  # over micro-batches: SUM, MEAN or RUNNING_MEAN
    recomputation: bool = False
    offload_optimizer_state: bool = False
    replication_factor: int = 1
    repeat_count: int = 1  # device iterations: weight updates per call
    replica_reduction: str = "MEAN"  # over replicas: SUM or MEAN
    replicated_optimizer_state_sharding: bool = False
    gradient_accumulation_dtype: object = None
    output_mode: object = "all"
    output_return_period: int = 1
    recomputation_mode: object = None  # a schedule.RecomputationMode (None: Auto)
    training: bool = True  # False: an inference pipeline, forward stages only
    emulate: bool = False  # Poplar programs on the emulator (the emulated package)

    def __post_init__(self):
        reduction = str(self.reduction).upper()
        if reduction not in REDUCTIONS:
            raise PipelineConfigError(
                f"reduction_method {reduction!r} is not one of {', '.join(REDUCTIONS)}"
            )
        for name in ("replication_factor", "repeat_count"):
            if not is_count(getattr(self, name)):
                raise PipelineConfigError(
                    f"{name} must be a positive integer, got {getattr(self, name)!r}")
        replica = str(self.replica_reduction).upper()
        if replica not in replication.REPLICA_REDUCTIONS:
            raise PipelineConfigError(
                f"replica_reduction {self.replica_reduction!r} is not one of "
                f"{', '.join(replication.REPLICA_REDUCTIONS)}")
        mode = replication.check_output_mode(self.output_mode or "all",
                                             self.output_return_period, self.repeat_count)
        for name, value in (("schedule", str(self.schedule).lower()), ("reduction", reduction),
                            ("replication_factor", int(self.replication_factor)),
                            ("repeat_count", int(self.repeat_count)),
                            ("replica_reduction", replica), ("output_mode", mode)):
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class MemoryRecord:
    """Bytes in use on one IPU at ``time`` (cycles), by category."""

    time: float
    ipu: int
    weights: int
    stash: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.weights + self.stash + self.gradients + self.optimizer


@dataclass(frozen=True)
class RunResult:
    """What ``Pipeline.run`` returns: losses ``(repeat, replica, microbatch)`` and records.

    ``outputs`` are the losses the call returns under the pipeline's ``output_mode``
    (:func:`replication.select_outputs`).
    """

    losses: np.ndarray
    timeline: Timeline
    memory: tuple[MemoryRecord, ...]
    cycles: float
    host_bytes: int
    clock_hz: float
    outputs: np.ndarray | None = None

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz

    def peak_memory(self) -> dict[int, int]:
        """Peak bytes per IPU."""
        peak: dict[int, int] = {}
        for r in self.memory:
            peak[r.ipu] = max(peak.get(r.ipu, 0), r.total)
        return peak


def _nbytes(obj) -> int:
    """Bytes of every array in a nested cache."""
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    return int(getattr(obj, "nbytes", 0))


class Fifo:
    """A stage's stash: its output buffer plus a FIFO of ``depth`` (``PipelineFIFOInserter``).

    Micro-batches leave in the order they came; holding more than ``depth + 1`` means the
    schedule is wrong.
    """

    def __init__(self, stage: int, depth: int):
        self.stage, self.depth = stage, depth
        self.items: deque = deque()
        self.nbytes = 0

    def push(self, microbatch: int, value) -> None:
        if len(self.items) > self.depth:
            raise PipelineConfigError(
                f"stage {self.stage}'s FIFO (depth {self.depth}) overflowed at micro-batch "
                f"{microbatch}: the schedule runs too many forwards before their backwards"
            )
        size = _nbytes(value)
        self.items.append((microbatch, value, size))
        self.nbytes += size

    def pop(self, microbatch: int):
        m, value, size = self.items.popleft()
        if m != microbatch:
            raise PipelineConfigError(
                f"stage {self.stage}'s FIFO holds micro-batch {m} first, but the backward "
                f"of micro-batch {microbatch} ran: FIFOs restore in order"
            )
        self.nbytes -= size
        return value


class PipelineStage:
    """Layers run as one pipeline stage on ``ipus``: one IPU, or several for a concurrent
    stage (one member per IPU, a :class:`~ipukit.parallel.concurrent.Concurrent`)."""

    def __init__(self, index: int, layers, ipus: tuple[int, ...], target: Target | None = None):
        self.index = index
        self.ipus = tuple(ipus)
        if len(self.ipus) > 1:
            self.net = concurrent.Concurrent(layers, self.ipus, target, index)
            return
        self.net = concurrent.as_layer(layers, index)

    def on(self, ipu: int):
        """What of this stage lives on ``ipu`` (``.index``, ``.params``)."""
        if len(self.ipus) == 1:
            return self
        return concurrent.StagePart(self.index, self.net.params_on(ipu))

    @property
    def params(self) -> dict:
        return self.net.params

    @property
    def param_bytes(self) -> int:
        return sum(int(p.nbytes) for p in self.params.values())

    def __repr__(self):
        return f"PipelineStage({self.index}, {self.net!r}, ipus={self.ipus})"


class Pipeline:
    """Stages, a schedule and an optimiser; ``run`` trains, ``predict`` infers.

    Built by :func:`pipeline` (TensorFlow) or :func:`training_model` (PopTorch). This
    class runs NumPy arithmetic; ``emulate=True`` builds its subclass
    :class:`~ipukit.parallel.emulated.EmulatedPipeline`, which runs Poplar programs.
    """

    #: Whether this class runs ``PipelineOptions(emulate=True)`` (the emulator's subclass).
    emulates = False

    def __init__(self, stages, device_mapping, options: PipelineOptions, optimizer, loss,
                 target: Target | None = None):
        if options.training and (optimizer is None or loss is None):
            raise PipelineConfigError(
                "a training pipeline needs an optimizer and a loss (the last stage's "
                "outputs are its logits): pass optimizer=... and loss=..., or neither for "
                "an inference pipeline"
            )
        if options.training:
            checks.optimizer_and_loss(optimizer, loss)
        self.options = o = options
        if o.emulate != self.emulates:
            which = "ipukit.parallel.emulated.EmulatedPipeline" if o.emulate else "Pipeline"
            raise PipelineConfigError(
                f"PipelineOptions(emulate={o.emulate}) runs in {which}, not "
                f"{type(self).__name__}: build it with pipeline(..., emulate={o.emulate}) or "
                f"training_model(..., emulate={o.emulate}), which choose the class")
        stage_ipus = _check_mapping(device_mapping, stages)  # a tuple of IPUs per stage
        mapping = [max(q) for q in stage_ipus]  # each stage's highest IPU
        if target is None:
            target = IPUModel("ipu2", num_ipus=(max(mapping) + 1) * o.replication_factor
                              ).create_device().target
        if max(mapping) >= target.num_ipus:
            raise PipelineConfigError(
                f"device_mapping {list(device_mapping)} uses IPU {max(mapping)} but the "
                f"target has {target.num_ipus} IPU(s); use a target with more IPUs"
            )
        self.schedule: Schedule = _schedule_for(o, stage_ipus)
        # TF's check flattens the mapping as given: _ALL_DEVICES (-1) is one more device
        given = range(len(stages)) if device_mapping is None else device_mapping
        used = [q for d in given
                for q in (d if isinstance(d, (list, tuple, np.ndarray)) else [d])]
        if o.schedule == "interleaved" and o.training and len(set(used)) < len(used):
            raise PipelineConfigError(
                "The interleaved schedule does not support two stages on the same IPU "
                f"(device_mapping {list(device_mapping)}); use the grouped schedule"
            )
        self.stages = [PipelineStage(i, s, q, target)
                       for i, (s, q) in enumerate(zip(stages, stage_ipus))]
        if loss is not None:
            concurrent.check_loss(self.stages, loss)
        self.optimizer, self.loss, self.target = optimizer, loss, target
        self.cost = CostModel.from_target(target)
        # data parallelism and host calls (replication.py)
        replication.check_replication(target, max(mapping) + 1, o.replication_factor,
                                      o.replica_reduction)
        self.accumulation_dtypes = replication.accumulation_dtypes(
            self.stages, o.gradient_accumulation_dtype)

    # The options, read where the runner and replication.py need them.
    reduction = property(lambda self: self.options.reduction)
    recomputation = property(lambda self: self.options.recomputation)
    offload = property(lambda self: self.options.offload_optimizer_state)
    replication_factor = property(lambda self: self.options.replication_factor)
    repeat_count = property(lambda self: self.options.repeat_count)
    replica_reduction = property(lambda self: self.options.replica_reduction)
    replicated_optimizer_state_sharding = property(
        lambda self: self.options.replicated_optimizer_state_sharding)
    output_mode = property(lambda self: self.options.output_mode)
    output_return_period = property(lambda self: self.options.output_return_period)

    @property
    def gradient_accumulation(self) -> int:
        return self.schedule.gradient_accumulation

    @property
    def ipus(self) -> list[int]:
        return sorted({q for s in self.stages for q in s.ipus})

    @property
    def params(self) -> dict:
        """All weights, keyed ``"<stage>.<layer>.<name>"`` (live arrays)."""
        return {f"{s.index}.{k}": v for s in self.stages for k, v in s.params.items()}

    @property
    def samples_per_run(self) -> int:
        return self.repeat_count * self.replication_factor * self.gradient_accumulation

    @property
    def device_iterations(self) -> int:
        """PopTorch's name for ``repeat_count``: weight updates per call."""
        return self.repeat_count

    # ---------------------------------------------------------------------------------

    def predict(self, x, batch_size: int = 1000) -> np.ndarray:
        """Logits of ``x`` (host arrays in, NumPy out): every stage's forward in turn."""
        batch_size = checks.batch_size(batch_size)
        x = checks.features(x)
        self._shapes((min(batch_size, len(x)),) + x.shape[1:])  # a mismatch names the stage
        out = []
        for i in range(0, len(x), batch_size):
            h = backend.asarray(x[i:i + batch_size])
            for s in self.stages:
                h = concurrent.join(s.net.forward(h)[0])
            out.append(backend.to_numpy(h))
        return np.concatenate(out)

    def compile(self, x, labels=None) -> None:  # noqa: A003 - PopTorch's name
        """``PoplarExecutor.compile(*inputs)`` (PopTorch): make the model ready for inputs
        like ``x`` (and ``labels``) without running it, so the next ``run`` only runs.

        With ``emulate=True`` this builds the stages' Poplar programs, compiles them
        (``Engine``) and loads them on the emulated device, once per micro-batch shape (a
        second call for the same shape does nothing). With ``emulate=False`` there is
        nothing to compile: it checks the inputs and the stages' shapes, as ``run`` does
        first, and builds nothing. (kit convention: TensorFlow compiles on the first call of
        the pipeline's function; pipelines from :func:`pipeline` take this call too.)

        >>> from ipukit.parallel import nn, optim, training_model, Block
        >>> import numpy as np
        >>> m = training_model([Block("A", nn.Dense(4, 8, rng=1), ipu_id=0),
        ...                     Block("B", nn.Dense(8, 3, rng=2), ipu_id=1)],
        ...                    nn.SoftmaxCrossEntropy(), optim.SGD(0.1),
        ...                    gradient_accumulation=4, emulate=True)
        >>> x, y = np.ones((8, 4), np.float32), np.arange(8) % 3
        >>> m.compile(x, y)  # builds, compiles and loads the programs: nothing runs yet
        >>> m.run(x, y).losses.shape  # runs them: (runs, replicas, micro-batches)
        (1, 1, 4)
        """
        self._inputs(x, labels)

    def _inputs(self, x, labels):
        """``run``'s and ``compile``'s checks, made first: ``x`` and ``labels`` as arrays
        (a training pipeline needs labels), the micro-batch size they give, and the stages'
        shapes for it (a mismatch names the stage, before any arithmetic)."""
        if labels is None and not self.options.training:
            x = checks.features(x)
        else:
            x, labels = checks.samples(x, labels)
        mb = replication.check_samples(self.options, len(x),
                                       len(x if labels is None else labels))
        shapes = self._shapes((mb,) + tuple(np.shape(x)[1:]))
        if labels is not None and self.loss is not None:  # every label, before any step
            nn.check_labels(labels, (len(labels), shapes[-1][-1]))
        return x, labels, mb

    def run(self, x, labels=None) -> RunResult:
        """Train on ``x``: ``repeat_count`` runs × replicas × micro-batches, in that order.

        ``len(x)`` must be a multiple of ``samples_per_run`` (the micro-batch size is what
        is left). Returns the losses and the timeline and memory records. An inference
        pipeline (``training=False``) runs the forward stages only and returns the last
        stage's outputs in ``outputs``, shaped ``(repeat, replica, microbatch, batch, ...)``
        (and the losses when it has a loss and ``labels``).
        """
        x, labels, mb = self._inputs(x, labels)
        if not self.options.training:
            return self._infer(x, labels, mb)
        shape = (self.repeat_count, self.replication_factor, self.gradient_accumulation, mb)
        xs = np.asarray(x).reshape(shape + tuple(np.shape(x)[1:]))
        ys = np.asarray(labels).reshape(shape)
        losses = np.zeros(shape[:3])
        dtype = np.result_type(xs.dtype, *(p.dtype for p in self.params.values()))
        timeline: list[Span] = []
        memory: list[MemoryRecord] = []
        now = 0.0
        for r in range(self.repeat_count):
            grads, stash = [], None
            for rep in range(self.replication_factor):
                g, losses[r, rep], stash = self._pipeline_run(xs[r, rep], ys[r, rep])
                grads.append(g)
            _, end, finish = self._op_times(xs.shape[4:], mb, dtype, now, timeline)
            self._record_memory(end, stash, now, memory)
            self._check_memory(memory)
            replication.apply_update(self.stages, grads, self.optimizer, self.options)
            now = self._update_times(finish, timeline)
        host = self._optimizer_bytes() if self.offload else 0
        outputs = replication.select_outputs(losses, self.output_mode, self.output_return_period)
        spans = Timeline(timeline, memory, self.target.clock_hz)
        return RunResult(losses, spans, tuple(memory), now, host, self.target.clock_hz, outputs)

    def _infer(self, x, labels, mb: int) -> RunResult:
        """Forward stages only, in the schedule's order (TF's inference pipeline, PopTorch's
        ``inferenceModel``): no stash, no gradients, no weight update."""
        shape = (self.repeat_count, self.replication_factor, self.gradient_accumulation, mb)
        xs = np.asarray(x).reshape(shape + tuple(np.shape(x)[1:]))
        ys = None if labels is None else np.asarray(labels).reshape(shape)
        score = self.loss is not None and ys is not None
        losses = np.zeros(shape[:3] if score else shape[:2] + (0,))
        dtype = np.result_type(xs.dtype, *(p.dtype for p in self.params.values()))
        timeline: list[Span] = []
        outputs, now = [], 0.0
        last = len(self.stages) - 1
        for r in range(self.repeat_count):
            for rep in range(self.replication_factor):
                acts, outs = {}, [None] * self.gradient_accumulation
                for op in self.schedule.ops:
                    k, m = op.stage, op.microbatch
                    inp = backend.asarray(xs[r, rep, m]) if k == 0 else acts.pop((k, m))
                    y, _ = self.stages[k].net.forward(inp)
                    if k < last:
                        acts[(k + 1, m)] = concurrent.join(y)
                        continue
                    if score:
                        losses[r, rep, m] = float(self.loss.forward(
                            y, backend.asarray(ys[r, rep, m]))[0])
                    outs[m] = backend.to_numpy(concurrent.join(y))
                outputs.append(np.stack(outs))
            *_, now = self._op_times(xs.shape[4:], mb, dtype, now, timeline)
        out = np.stack(outputs).reshape(shape[:3] + outputs[0].shape[1:])
        spans = Timeline(timeline, (), self.target.clock_hz)
        return RunResult(losses, spans, (), now, 0, self.target.clock_hz, out)

    def cycles_per_run(self, sample_shape, micro_batch_size: int, dtype="float32") -> float:
        """Simulated cycles of one pipeline run (ops, syncs, all-reduce, weight update).

        The cost model needs only shapes, so this runs no arithmetic: it times a strategy
        without training with it.
        """
        timeline: list[Span] = []
        *_, finish = self._op_times(tuple(sample_shape), micro_batch_size, np.dtype(dtype),
                                    0.0, timeline)
        return self._update_times(finish, timeline) if self.options.training else finish

    # ---------------------------------------------------------------------------------

    def _pipeline_run(self, xs, ys):
        """Execute the schedule's ops on one replica's micro-batches with real arithmetic.

        Returns the reduced gradients per stage, the losses and, per op, the bytes its
        stage has stashed after it.
        """
        sched, last = self.schedule, len(self.stages) - 1
        fifos = [Fifo(k, d) for k, d in enumerate(sched.fifo_depths)]
        acc = [dict() for _ in self.stages]
        seen = [0] * len(self.stages)
        acts, grads, restored = {}, {}, {}
        waiting = {}  # (stage, micro-batch) -> what its W needs, from its B (split schedules)
        losses = np.zeros(len(xs))
        stash = []
        for op in sched.ops:
            k, m = op.stage, op.microbatch
            net = self.stages[k].net
            if op.phase in ("F", "R"):
                if op.phase == "R":
                    inp = fifos[k].pop(m)
                else:
                    inp = backend.asarray(xs[m]) if k == 0 else acts.pop((k, m))
                y, cache = net.forward(inp)
                if k == last:
                    loss, lcache = self.loss.forward(y, backend.asarray(ys[m]))
                    losses[m] = float(loss)
                    cache = (cache, lcache)
                elif op.phase == "F":
                    acts[(k + 1, m)] = concurrent.join(y)
                if op.phase == "R":
                    restored[(k, m)] = cache
                else:
                    fifos[k].push(m, inp if self.recomputation else cache)
            elif op.phase == "B":
                cache = restored.pop((k, m)) if self.recomputation else fifos[k].pop(m)
                if k == last:
                    cache, lcache = cache
                    dy = self.loss.backward(lcache)
                else:
                    dy = grads.pop((k, m))
                if sched.split:  # the input gradient now, the weights' at its W
                    dx, waiting[(k, m)] = net.backward_input(dy, cache)
                else:
                    net.zero_grad()
                    dx = net.backward(dy, cache)
                    self._accumulate(acc[k], net.grads, seen[k], self.accumulation_dtypes[k])
                    seen[k] += 1
                if k > 0:
                    grads[(k - 1, m)] = dx
            else:  # W: the weight gradients of micro-batch m
                net.zero_grad()
                net.backward_weight(waiting.pop((k, m)))
                self._accumulate(acc[k], net.grads, seen[k], self.accumulation_dtypes[k])
                seen[k] += 1
            held = fifos[k].nbytes + sum(_nbytes(c) for (j, _), c in restored.items() if j == k)
            held += sum(_nbytes(c) for (j, _), c in waiting.items() if j == k)
            stash.append(held)
        if self.reduction == "MEAN":
            for a in acc:
                for v in a.values():
                    v *= 1.0 / sched.gradient_accumulation
        return acc, losses, stash

    def _accumulate(self, acc, g, n, dtypes):
        """Add gradients ``g`` into accumulators of ``dtypes`` (gradient_accumulation_dtype)."""
        for key, v in g.items():
            if key not in acc:
                acc[key] = v.astype(dtypes[key])  # a copy
            elif self.reduction == "RUNNING_MEAN":
                acc[key] *= n / (n + 1)
                acc[key] += v * (1 / (n + 1))
            else:
                acc[key] += v

    def _op_times(self, sample_shape, mb, dtype, now, timeline):
        """Cost every op from shapes, time the schedule, append F/B/R, link and sync records."""
        sched, cm = self.schedule, self.cost
        shapes, flops, sent, programs = self._shapes((mb,) + tuple(sample_shape)), [], [], {}
        for s, shape, out in zip(self.stages, shapes, shapes[1:]):
            if isinstance(s.net, concurrent.Concurrent):  # members and their collectives
                loss = self.loss if s is self.stages[-1] else None
                programs[s.index] = s.net.program(shape, dtype, loss)
            f, b = s.net.flops(shape)
            w = s.net.weight_flops(shape) if sched.split else 0  # W's part of the backward
            flops.append({"F": f, "R": f, "B": b - w, "W": w})
            sent.append(math.prod(out) * np.dtype(dtype).itemsize)  # F's out = B's in
        lf, lb = self.loss.flops(shapes[-1]) if self.loss is not None else (0, 0)
        flops[-1].update(F=flops[-1]["F"] + lf, R=flops[-1]["R"] + lf, B=flops[-1]["B"] + lb)
        ipus = [self.stages[o.stage].ipus for o in sched.ops]
        dur, nbytes = [], []
        for o in sched.ops:
            k = o.stage
            prog = programs[k][o.phase] if k in programs else None
            dur.append(prog.duration if prog else cm.compute(flops[k][o.phase]))
            nbytes.append(self._sends(o, prog, sent, programs))
        send = [cm.link(max(b)) for b in nbytes]
        sync = cm.sync_cycles if sched.lockstep else 0.0
        start, end = simulate(sched, dur, ipus, send, sync)
        start, end = start + now, end + now
        step_end: dict[int, float] = {}
        for i, o in enumerate(sched.ops):
            if o.stage in programs:  # concurrent: each IPU's compute, then the collectives
                timeline.extend(Span(r.ipu, r.kind, float(start[i] + r.start),
                                     float(r.duration), o.stage, o.microbatch, r.bytes, r.label)
                                for r in programs[o.stage][o.phase].timeline)
            for q, b in zip(ipus[i], nbytes[i]):
                if o.stage not in programs:
                    timeline.append(Span(q, o.phase, float(start[i]), float(dur[i]), o.stage,
                                         o.microbatch, label=f"{o.phase}{o.microbatch}"))
                if b:
                    timeline.append(Span(q, "link", float(end[i]), float(cm.link(b)),
                                         o.stage, o.microbatch, b))
            step_end[o.step] = max(step_end.get(o.step, now), float(end[i] + send[i]))
        if sched.lockstep:
            for t in step_end.values():
                timeline.extend(Span(q, "sync", t, sync) for q in self.ipus)
        return start, end, max(step_end.values()) + sync

    def _sends(self, o, prog, sent, programs) -> list[int]:
        """Bytes each IPU of op ``o``'s stage sends to other IPUs after it: F, its output
        to the next stage's first IPU (a concurrent stage's members their own shards); B,
        its input gradient back, from its (first) IPU, to the stage before, whose
        concurrent members get the gradient of their own output shard each."""
        k, stages = o.stage, self.stages
        to = k + 1 if o.phase == "F" else k - 1
        if o.phase not in ("F", "B") or not 0 <= to < len(stages):
            return [0] * len(stages[k].ipus)
        if o.phase == "F":  # each member's output (or the stage's) to the next stage
            each = prog.sends if prog else [sent[k]]
            return [b if q != stages[to].ipus[0] else 0 for q, b in zip(stages[k].ipus, each)]
        parts = programs[to]["F"].sends if to in programs else [sent[to]]  # per receiver
        first = stages[k].ipus[0]  # where the stage's input gradient is (reduced)
        out = sum(b for q, b in zip(stages[to].ipus, parts) if q != first)
        return [out] + [0] * (len(stages[k].ipus) - 1)

    def _shapes(self, shape) -> list[tuple]:
        """The input shape, then each stage's output shape; a mismatch names the stage."""
        shapes = [tuple(shape)]
        for s in self.stages:
            try:
                shapes.append(tuple(s.net.out_shape(shapes[-1])))
            except IpuError as e:
                source = f"stage {s.index - 1}'s outputs" if s.index else "the samples"
                raise PipelineConfigError(
                    f"stage {s.index}, fed {source} of shape {shapes[-1]}: {e}. Make each "
                    "stage take what the stage before it (or the data) gives"
                ) from None
        return shapes

    def _record_memory(self, end, stash, now, memory):
        """Memory on every IPU at the start and after each op (stash from the real run)."""
        base = {q: self._static_bytes(q) for q in self.ipus}
        held = {k: 0 for k in range(len(self.stages))}
        for q, (w, g, o) in base.items():
            memory.append(MemoryRecord(now, q, w, 0, g, o))
        ops = self.schedule.ops
        for i in np.argsort(end, kind="stable"):
            held[ops[i].stage] = stash[i]
            for q in self.stages[ops[i].stage].ipus:
                on = sum(held[s.index] // len(s.ipus) for s in self.stages if q in s.ipus)
                w, g, o = base[q]
                memory.append(MemoryRecord(float(end[i]), q, w, on, g, o))

    def _static_bytes(self, ipu):
        """(weights, gradient accumulators, optimiser state) bytes on ``ipu``."""
        return self.static_bytes([s.on(ipu) for s in self.stages if ipu in s.ipus])

    def static_bytes(self, stages) -> tuple[int, int, int]:
        """(weights, gradient accumulators, optimiser state) bytes of ``stages`` (or the
        parts of stages) on one IPU; offloaded optimiser state is not on the IPU."""
        state = 0 if self.offload else self._optimizer_share(stages)[0]
        return replication.static_bytes(stages, self.accumulation_dtypes, state)

    def weight_update_steps(self, stages) -> list[tuple[str, float, int]]:
        """``(kind, cycles, bytes)`` of the weight update of ``stages`` on one IPU
        (:func:`replication.weight_update_steps`)."""
        o = self.options
        w, g, _ = self.static_bytes(stages)
        flops = self._optimizer_share(stages)[1]
        return replication.weight_update_steps(
            w, g, flops, self.remote_buffers(stages), o.replication_factor,
            o.replicated_optimizer_state_sharding, self.cost)

    def remote_buffers(self, stages) -> list[tuple[int, int]]:
        """``(bytes, cycles of one copy)`` of each remote buffer of offloaded optimiser
        state of ``stages`` on one IPU: one per stage and optimiser slot (Adam's m and v),
        as the emulator builds them, each copy costed by :func:`ipukit.cost.remote_cycles`
        (Streaming Memory's link); none when the state is on chip."""
        slots = self.optimizer.slots if self.offload else 0
        sizes = [self._optimizer_share([s])[0] // max(slots, 1) for s in stages] * slots
        return [(b, remote_cycles(b, self.target)) for b in sizes if b]

    def _optimizer_share(self, stages):
        o = self.options
        shards = o.replication_factor if o.replicated_optimizer_state_sharding else 1
        return replication.optimizer_share(stages, self.optimizer, shards)

    def _optimizer_bytes(self) -> int:
        return sum(self.optimizer.state_bytes(s.params) for s in self.stages)

    def _check_memory(self, memory):
        limit = self.target.bytes_per_ipu
        worst = max(memory, key=lambda r: r.total)
        if worst.total > limit:
            raise OutOfMemoryError(
                f"Out of memory on IPU {worst.ipu}: it needs {worst.total:,} bytes at cycle "
                f"{worst.time:,.0f} but has {limit:,} ({self.target.tiles_per_ipu} tiles x "
                f"{self.target.bytes_per_tile:,} bytes): weights {worst.weights:,}, stashed "
                f"activations {worst.stash:,}, gradient accumulators {worst.gradients:,}, "
                f"optimiser state {worst.optimizer:,}.{self._offload_text(memory)} Use "
                f"recomputation=True, {'' if self.offload else 'offload_optimizer_state=True, '}"
                "a smaller micro-batch or more IPUs."
            )

    def _offload_text(self, memory) -> str:
        """Where the optimiser state is offloaded, what Streaming Memory holds; where it is
        on chip and every IPU would fit without it, that offloading it is the fix."""
        if self.offload:
            return (f" The optimiser state is offloaded: {self._optimizer_bytes():,} bytes in "
                    "Streaming Memory (remote buffers), off the IPU.")
        if all(r.total - r.optimizer <= self.target.bytes_per_ipu for r in memory):
            return (" Offloading the optimiser state to Streaming Memory (remote buffers: "
                    "offload_optimizer_state=True, TensorFlow's "
                    "offload_weight_update_variables, PopTorch's useOnChipStorage(False)) "
                    "makes every IPU fit.")
        return ""

    def _update_times(self, now, timeline) -> float:
        """Append the collectives across replicas and the weight update; return their end."""
        done = now
        for q in self.ipus:
            t = now
            on = [s.on(q) for s in self.stages if q in s.ipus]
            for kind, cycles, nbytes in self.weight_update_steps(on):
                timeline.append(Span(q, kind, t, cycles, bytes=nbytes))
                t += cycles
            done = max(done, t)
        return done


def _schedule_for(o: PipelineOptions, stage_ipus: list[tuple[int, ...]]) -> Schedule:
    """The schedule of ``o`` for stages on ``stage_ipus``. The schedules after Graphcore's
    run the same number of stages (chunks) on each of p IPUs, placed as the kind places
    them (:meth:`Schedule.ipu_of`), and the device mapping must be that placement."""
    n, kind, g = len(stage_ipus), o.schedule, o.gradient_accumulation
    common = dict(training=o.training, recomputation=o.recomputation,
                  recomputation_mode=o.recomputation_mode)
    if kind not in BEYOND_GRAPHCORE:
        return schedule(kind, n, g, **common)
    given = [list(q) if len(q) > 1 else q[0] for q in stage_ipus]
    if any(len(q) > 1 for q in stage_ipus):
        raise PipelineConfigError(
            f"pipeline_schedule {kind!r} with a concurrent stage (device_mapping {given}): "
            "the runner runs the schedules after Graphcore's with one IPU per stage; map "
            "each stage to one IPU, or use '1f1b', 'gpipe' or Graphcore's schedules")
    if kind in orders_of.V_SHAPED:
        v, rule = 2, "two stages on each IPU in a V: IPU r holds stages r and 2p-1-r"
    elif kind == "interleaved_1f1b":
        v, rule = n // (max(given) + 1), ("several stages (chunks) on each of p IPUs: chunk "
                                          "c of IPU r is stage c*p + r")
    else:
        v, rule = 1, "one stage on each IPU: stage k on IPU k"
    p = max(1, n // max(v, 1))
    placement = [orders_of.stage_ipu(kind, p, k) for k in range(n)]
    example = [orders_of.stage_ipu(kind, 2, k) for k in range(2 if kind == "zb_h1" else 4)]
    fits = n == p * v and (v >= 2 or kind == "zb_h1")  # whole chunks on every IPU
    if not fits or given != placement:
        fix = (f"use device_mapping={placement}" if fits else
               f"e.g. {len(example)} stages on 2 IPUs: device_mapping={example}")
        raise PipelineConfigError(
            f"pipeline_schedule {kind!r} runs {rule}, but device_mapping is {given} for {n} "
            f"stages: {fix}")
    return schedule(kind, p, g, virtual_stages=v, **common)


#: TensorFlow's ``pipelining_ops._ALL_DEVICES``: a stage mapped to every IPU.
ALL_DEVICES = -1


def _all_devices(stage_layers, ipus: tuple[int, ...]) -> tuple[int, ...]:
    """The IPUs of a stage mapped to ``_ALL_DEVICES`` on a pipeline of ``ipus``.

    (kit convention: a stage given as one list per IPU (``[[f0], [f1]]``) is a concurrent
    stage over the pipeline's IPUs, member s on IPU s (how the concurrent-pipelines example
    shards inside its ``_ALL_DEVICES`` stage); any other stage computes on the lowest IPU.)
    """
    members = list(stage_layers) if isinstance(stage_layers, (list, tuple)) else []
    if len(members) == len(ipus) > 1 and all(isinstance(m, (list, tuple)) for m in members):
        return ipus
    return ipus[:1]


def _check_mapping(device_mapping, stages) -> list[tuple[int, ...]]:
    """The IPUs of each stage: ``k`` -> ``(k,)``; a list (a concurrent stage) -> a tuple;
    ``_ALL_DEVICES`` (-1) -> see :func:`_all_devices`."""
    n = len(stages)
    if device_mapping is None:
        return [(k,) for k in range(n)]
    if isinstance(device_mapping, (str, numbers.Number)) or not hasattr(device_mapping,
                                                                         "__iter__"):
        raise PipelineConfigError(
            f"device_mapping must be a list of one IPU (or list of IPUs) per stage, got "
            f"{device_mapping!r}. {ORDER_HINT}"
        )
    mapping = list(device_mapping)
    if len(mapping) != n:
        raise PipelineConfigError(
            f"Each stage must be mapped to an IPU: device_mapping has {len(mapping)} "
            f"entries for {n} computational stages"
        )
    out = []
    named = [d for q in mapping if not isinstance(q, numbers.Number) or q != ALL_DEVICES
             for d in (q if isinstance(q, (list, tuple, np.ndarray)) else [q])]
    pipeline_ipus = tuple(range(max([int(d) for d in named if is_count(d, 0)] + [0]) + 1))
    for i, q in enumerate(mapping):
        if isinstance(q, numbers.Integral) and not isinstance(q, bool) and q == ALL_DEVICES:
            out.append(_all_devices(stages[i], pipeline_ipus))
            continue
        many = isinstance(q, (list, tuple, np.ndarray))
        ipus = tuple(q) if many else (q,)
        if not all(is_count(d, 0) for d in ipus):
            raise PipelineConfigError(
                f"device_mapping[{i}] must be an IPU index, _ALL_DEVICES (-1) or, for a "
                f"concurrent stage, a list of IPU indices, got {q!r}"
            )
        ipus = tuple(int(d) for d in ipus)
        if many and (len(ipus) < 2 or len(set(ipus)) < len(ipus)):
            raise PipelineConfigError(
                f"device_mapping[{i}] = {list(ipus)}: concurrent stages need a list of 2 or "
                "more different IPUs, one per function; map a single function to one IPU"
            )
        out.append(ipus)
    return out


#: What a mis-ordered call to :func:`pipeline` is told.
ORDER_HINT = ("ipukit's pipeline() takes device_mapping second, TensorFlow's takes "
              "gradient_accumulation_count second: pass gradient_accumulation_count=... "
              "(and device_mapping=...) by keyword")
