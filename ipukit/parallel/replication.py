"""Data parallelism in the pipeline runner: one host call, many samples, many replicas.

What PopTorch's options and TensorFlow-for-IPU's pipeline arguments decide about a call
of a training model (``Pipeline.run``), and what each costs:

* **Batch arithmetic.** One call takes ``combined_batch_size`` = micro-batch size ×
  gradient accumulation × device iterations × replicas samples (``poptorch.DataLoader``'s
  ``combinedBatchSize``). :class:`DataLoader` cuts a dataset into such calls; a dataset that
  does not divide fails with PopTorch's words unless ``drop_last=True``.
* **Device iterations** (``deviceIterations``, TensorFlow's ``repeat_count``): the weight
  update runs once per iteration, the host synchronises once per call. :func:`call_cost`
  adds the host sync (``target.host_sync_cycles``) and the input/output bytes over PCIe to
  the device cycles, so ``samples_per_second`` shows why many iterations per call pay.
* **Output modes** (``poptorch.OutputMode``, PopART's ``AnchorReturnType``): how many
  losses one call returns; see :func:`select_outputs` and :func:`outputs_per_call`.
* **Replication** (``replicationFactor``): R copies of a model of S IPUs need R·S IPUs.
  Each replica trains on its own micro-batches; the accumulated gradients are summed or
  averaged across replicas (``replica_reduction`` SUM or MEAN) by a ring all-reduce over
  IPU-Links: each replica sends 2(R−1)/R of its gradient bytes, once per weight update, so
  more gradient accumulation means fewer all-reduces per sample.
* **Replicated tensor sharding** (``replicated_optimizer_state_sharding=True``,
  PopTorch's ``useReplicatedTensorSharding``): each replica keeps 1/R of the optimiser
  state (rounded up per tensor, as Graphcore pads RTS tensors) and updates 1/R of every
  weight; the all-reduce becomes a reduce-scatter ((R−1)/R of the gradient bytes) and an
  all-gather of the updated weights ((R−1)/R of the weight bytes). The same bytes cross
  the links, the optimiser's memory and compute per IPU fall by R, the weights do not
  change by one bit.
* **Accumulation dtype** (TensorFlow's ``gradient_accumulation_dtype``): accumulators in
  the variable's dtype (None), in one dtype for all, or per variable from a callable
  ``fn(var) -> dtype`` (``var`` a :class:`Variable`: ``.name``, ``.dtype``, ``.shape``).
  As TensorFlow's, the optimiser receives the sums in the accumulator dtype ("a cast is
  needed at some point", ``pipelining_ops.pipeline``); the kit's optimisers cast them to
  the variable's dtype (kit convention: :meth:`~ipukit.parallel.optim.Optimizer.step`). float16
  accumulators lose small gradients that float32 ones keep.

>>> import numpy as np
>>> from ipukit.parallel import nn, optim, pipeline
>>> stages = [[nn.Dense(4, 8, rng=1), nn.ReLU()], [nn.Dense(8, 3, rng=2)]]
>>> p = pipeline(stages, [0, 1], gradient_accumulation_count=4, device_iterations=3,
...              replication_factor=2, optimizer=optim.Adam(), loss=nn.SoftmaxCrossEntropy(),
...              replicated_optimizer_state_sharding=True, output_mode="final")
>>> p.target.num_ipus, combined_batch_size(5, 4, 3, 2)    # 2 replicas x 2 IPUs
(4, 120)
>>> rng = np.random.default_rng(0)
>>> r = p.run(rng.normal(size=(120, 4)), rng.integers(0, 3, 120))
>>> r.losses.shape, r.outputs.shape            # one loss per micro-batch; FINAL: 1 per replica
((3, 2, 4), (2,))
>>> [rec.kind for rec in r.timeline if rec.ipu == 0][-3:]
['reducescatter', 'optimizer', 'allgather']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from .. import cost as cost_model
from ..errors import PipelineConfigError
from .nn import is_count

REPLICA_REDUCTIONS = ("SUM", "MEAN")
#: Bytes of one label (int32) and of one returned loss (float32) on the host link.
LABEL_BYTES = OUTPUT_BYTES = 4


class OutputMode(Enum):
    """``poptorch.OutputMode``: which losses a call returns (per replica).

    ALL: every micro-batch's; FINAL: the last micro-batch's (PopTorch's default for
    training); EVERY_N: every micro-batch of every N-th device iteration
    (``outputReturnPeriod``); SUM: the sum over the call.
    """

    ALL = "all"
    FINAL = "final"
    EVERY_N = "every_n"
    SUM = "sum"


# -- batch arithmetic ------------------------------------------------------------------


def combined_batch_size(batch_size: int, gradient_accumulation: int = 1,
                        device_iterations: int = 1, replication_factor: int = 1) -> int:
    """Samples per call: batch × gradient accumulation × device iterations × replicas."""
    return batch_size * gradient_accumulation * device_iterations * replication_factor


def _factors(o, batch_size=None) -> str:
    head = f"batch_size {batch_size} × " if batch_size is not None else ""
    return (f"{head}gradient_accumulation {o.gradient_accumulation} × device_iterations "
            f"{o.repeat_count} × replication_factor {o.replication_factor}")


def check_samples(o, num_samples: int, num_labels: int) -> int:
    """The micro-batch size of a call of ``num_samples`` under options ``o`` (a
    ``PipelineOptions``); PipelineConfigError if none fits."""
    n = combined_batch_size(1, o.gradient_accumulation, o.repeat_count, o.replication_factor)
    if num_samples == 0 or num_samples % n or num_labels != num_samples:
        raise PipelineConfigError(
            f"got {num_samples} samples and {num_labels} labels; a call takes a multiple of "
            f"{_factors(o)} = {n} samples (the multiple is the micro-batch size), with one "
            "label per sample"
        )
    return num_samples // n


class DataLoader:
    """``poptorch.DataLoader(options, dataset, batch_size, shuffle, drop_last)`` for a model.

    Iterating yields ``(x, labels)`` of ``combined_batch_size`` samples, one call of
    ``model.run`` each. ``batch_size`` is the micro-batch size. ``model`` is a Pipeline
    (its ``options`` are read) or a ``PipelineOptions``.

    >>> from ipukit.parallel import nn, optim, pipeline
    >>> p = pipeline([[nn.Dense(2, 2)], [nn.Dense(2, 2)]], None, 4, device_iterations=2,
    ...              optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
    >>> loader = DataLoader(p, np.zeros((100, 2)), np.zeros(100, int), batch_size=3)
    >>> loader.combined_batch_size, len(loader)       # 3 x 4 x 2 x 1; 4 calls, 4 left over
    (24, 4)
    """

    def __init__(self, model, x, labels, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = True, seed: int = 0):
        if not is_count(batch_size):
            raise PipelineConfigError(f"batch_size must be a positive integer, got "
                                      f"{batch_size!r}")
        if len(x) != len(labels):
            raise PipelineConfigError(f"the dataset has {len(x)} samples but {len(labels)} "
                                      "labels; give one label per sample")
        self.model, self.x, self.labels = model, x, labels
        self.options = o = getattr(model, "options", model)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.rng = np.random.default_rng(seed)
        n = self.combined_batch_size
        if not drop_last and len(x) % n:
            raise PipelineConfigError(
                f"The number of elements in the dataset ({len(x)}) is not divisible by the "
                f"number of elements processed per step ({n} = {_factors(o, batch_size)})"
                " and drop_last=False. Switch to drop_last=True."
            )
        if len(x) < n:
            raise PipelineConfigError(
                f"the dataset has {len(x)} elements but one step processes {n} "
                f"({_factors(o, batch_size)}); use a smaller batch_size, "
                "gradient_accumulation, device_iterations or replication_factor"
            )

    @property
    def combined_batch_size(self) -> int:
        """``poptorch.DataLoader.combinedBatchSize``: samples one call consumes."""
        o = self.options
        return combined_batch_size(self.batch_size, o.gradient_accumulation, o.repeat_count,
                                   o.replication_factor)

    def __len__(self) -> int:
        return len(self.x) // self.combined_batch_size

    def __iter__(self):
        n = self.combined_batch_size
        order = self.rng.permutation(len(self.x)) if self.shuffle else np.arange(len(self.x))
        for i in range(len(self)):
            idx = order[i * n:(i + 1) * n]
            yield self.x[idx], self.labels[idx]


# -- output modes ----------------------------------------------------------------------


def check_output_mode(mode, period: int, device_iterations: int) -> OutputMode:
    """``mode`` as an OutputMode (names accepted); EVERY_N's period must divide the calls."""
    if isinstance(mode, str):
        names = {m.value: m for m in OutputMode} | {"everyn": OutputMode.EVERY_N}
        mode = names.get(mode.lower().replace("-", "_"), mode)
    if not isinstance(mode, OutputMode):
        raise PipelineConfigError(
            f"output_mode {mode!r} is not one of {', '.join(m.name for m in OutputMode)}"
        )
    if mode is OutputMode.EVERY_N:
        if not is_count(period):
            raise PipelineConfigError(f"output_return_period must be a positive integer, "
                                      f"got {period!r}")
        if period > device_iterations or device_iterations % period:
            raise PipelineConfigError(
                f"Return period must be a factor of the number of batches per step: "
                f"output_return_period {period} does not divide device_iterations "
                f"{device_iterations}"
            )
    return mode


def outputs_per_call(mode: OutputMode, device_iterations: int, gradient_accumulation: int,
                     replication_factor: int, period: int = 1) -> int:
    """How many losses a call returns (PopART's ``numOutFetchesPerRepl`` × replicas)."""
    per_replica = {OutputMode.ALL: device_iterations * gradient_accumulation,
                   OutputMode.EVERY_N: device_iterations // period * gradient_accumulation,
                   OutputMode.FINAL: 1, OutputMode.SUM: 1}[mode]
    return per_replica * replication_factor


def select_outputs(losses: np.ndarray, mode: OutputMode, period: int = 1) -> np.ndarray:
    """What a call returns from its losses ``(device_iterations, replicas, micro-batches)``.

    ALL: all of them; EVERY_N: iterations N-1, 2N-1, … ``(iterations // N, replicas,
    micro-batches)``; FINAL: ``(replicas,)`` of the last micro-batch; SUM: ``(replicas,)``.
    """
    if mode is OutputMode.ALL:
        return losses.copy()
    if mode is OutputMode.EVERY_N:
        return losses[period - 1::period].copy()
    if mode is OutputMode.FINAL:
        return losses[-1, :, -1].copy()
    return losses.sum(axis=(0, 2))


# -- replication -----------------------------------------------------------------------


def check_replication(target, ipus_per_replica: int, replication_factor: int,
                      replica_reduction: str) -> str:
    """R·S IPUs must exist; the cross-replica reduction is SUM or MEAN. Returns it."""
    need = ipus_per_replica * replication_factor
    if need > target.num_ipus:
        raise PipelineConfigError(
            f"replication_factor {replication_factor} × {ipus_per_replica} IPU(s) per replica "
            f"needs {need} IPUs but the target has {target.num_ipus}: a replicated model needs "
            "replication_factor × (IPUs of one replica) IPUs. Use a target with "
            f"num_ipus={need}, or a smaller replication_factor."
        )
    reduction = str(replica_reduction).upper()
    if reduction not in REPLICA_REDUCTIONS:
        raise PipelineConfigError(f"replica_reduction {replica_reduction!r} is not one of "
                                  f"{', '.join(REPLICA_REDUCTIONS)}")
    return reduction


@dataclass(frozen=True)
class Variable:
    """What a ``gradient_accumulation_dtype`` callable is given, as TensorFlow gives it the
    ``tf.Variable``: ``name`` (its key in ``Pipeline.params``, e.g. ``"0.0.bias"``),
    ``dtype``, ``shape`` and ``value`` (the array itself)."""

    name: str
    value: object

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.value.dtype)

    @property
    def shape(self) -> tuple:
        return tuple(self.value.shape)


def accumulation_dtypes(stages, setting) -> list[dict]:
    """Per stage, ``{parameter name: accumulator dtype}`` for ``gradient_accumulation_dtype``.

    None: the variable's dtype; a dtype: that; a callable: ``fn(var)`` with ``var`` a
    :class:`Variable` (``pipelining_ops.pipeline``: "A callable that takes the variable and
    returns a DType"), its answer None meaning the variable's dtype.
    """
    out = []
    for s in stages:
        dtypes = {}
        for name, value in s.params.items():
            dt = setting
            if callable(setting) and not isinstance(setting, type):
                dt = setting(Variable(f"{s.index}.{name}", value))
            if dt is None:
                dt = value.dtype
            try:
                dtypes[name] = np.dtype(dt)
                if dtypes[name].kind != "f":
                    raise TypeError
            except TypeError:
                raise PipelineConfigError(
                    f"gradient_accumulation_dtype gave {dt!r} for {s.index}.{name}; use a "
                    "floating-point dtype such as 'float32', or None for the variable's dtype"
                ) from None
        out.append(dtypes)
    return out


def shard_bounds(size: int, num_shards: int) -> list[tuple[int, int]]:
    """RTS shards of a flattened tensor: ``ceil(size / R)`` elements each, the last shorter."""
    step = math.ceil(size / num_shards)
    return [(min(r * step, size), min((r + 1) * step, size)) for r in range(num_shards)]


def apply_update(stages, grads: list[list[dict]], optimizer, options) -> None:
    """Reduce the replicas' accumulated gradients and run ``optimizer`` on them.

    ``grads[replica][stage]`` maps parameter names to accumulators; ``options`` (a
    ``PipelineOptions``) gives the replica reduction and RTS. The optimiser gets the sums
    in the accumulator dtype, as TensorFlow's ``apply_gradients`` does. With RTS the
    optimiser sees replica r's shard of every weight (state keys ``"<key>/rts<r>"``).
    """
    update, params = {}, {}
    for k, stage in enumerate(stages):
        for name in grads[0][k]:
            total = grads[0][k][name]
            if len(grads) > 1:
                total = total.copy()
                for g in grads[1:]:
                    total += g[k][name]
                if options.replica_reduction == "MEAN":
                    total *= 1.0 / len(grads)
            update[f"{k}.{name}"] = total
        params.update({f"{stage.index}.{n}": v for n, v in stage.params.items()})
    r_count = options.replication_factor
    if not (options.replicated_optimizer_state_sharding and r_count > 1):
        optimizer.step(params, update)
        return
    for key, value in params.items():
        flat, g = value.reshape(-1), update[key].reshape(-1)
        shards = {f"{key}/rts{r}": (lo, hi)
                  for r, (lo, hi) in enumerate(shard_bounds(value.size, r_count)) if hi > lo}
        optimizer.step({s: flat[lo:hi] for s, (lo, hi) in shards.items()},
                       {s: g[lo:hi] for s, (lo, hi) in shards.items()})
        value[...] = flat.reshape(value.shape)  # a no-op when reshape gave a view


def optimizer_share(stages, optimizer, shards: int = 1) -> tuple[int, int]:
    """(state bytes, FLOPs) of ``optimizer`` for ``stages`` on one replica: with RTS over
    ``shards`` replicas the share of one shard, ``ceil(size / R)`` elements per tensor."""
    state = flops = 0
    for s in stages:
        for name, value in s.params.items():
            one, size = {name: value}, max(int(value.size), 1)
            shard = -(-size // shards)  # ceil, in integers
            state += -(-optimizer.state_bytes(one) * shard // size)
            flops += -(-optimizer.flops(one) * shard // size)
    return state, flops


def static_bytes(stages, dtypes, optimizer_state: int = 0) -> tuple[int, int, int]:
    """(weights, gradient accumulators, optimiser state) bytes of ``stages`` on one IPU;
    ``dtypes[stage index]`` are the accumulators' dtypes (:func:`accumulation_dtypes`)."""
    w = g = 0
    for s in stages:
        for name, value in s.params.items():
            w += int(value.nbytes)
            g += int(value.size) * dtypes[s.index][name].itemsize
    return w, g, optimizer_state


def weight_update_steps(weight_bytes: int, gradient_bytes: int, optimizer_flops: float,
                        offloaded: Sequence[tuple[int, int]], replicas: int, rts: bool,
                        cost) -> list[tuple[str, float, int]]:
    """``(kind, cycles, bytes)`` of one IPU's weight update, in order (``cost``: a
    :class:`~ipukit.cost.CostModel`).

    Replicated: ``allreduce`` (ring: 2(R−1)/R of the gradient bytes sent), or with RTS
    ``reducescatter`` then ``allgather`` ((R−1)/R of the gradient, then weight, bytes),
    each costing its ring steps' latency plus its bytes over a link (``cost.ring``).
    ``optimizer``: its FLOPs plus each remote buffer of offloaded state, ``offloaded``'s
    ``(bytes, cycles of one copy)`` (:func:`ipukit.cost.remote_cycles`), copied in from
    Streaming Memory and back out.
    """
    update = ("optimizer", cost.compute(optimizer_flops) + 2 * sum(c for _, c in offloaded),
              sum(b for b, _ in offloaded))
    if replicas == 1:
        return [update]

    def collective(kind, nbytes):
        return (kind, cost.ring(kind, nbytes, replicas),
                cost_model.ring_bytes(kind, nbytes, replicas))

    if not rts:
        return [collective("allreduce", gradient_bytes), update]
    return [collective("reducescatter", gradient_bytes), update,
            collective("allgather", weight_bytes)]


# -- the cost of one call --------------------------------------------------------------


@dataclass(frozen=True)
class CallCost:
    """Simulated cycles of one call (``model(x)``, one ``Engine.run``) and its throughput."""

    samples: int
    host_sync: float
    host_io: float
    device: float
    clock_hz: float

    @property
    def cycles(self) -> float:
        return self.host_sync + self.host_io + self.device

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds


def call_cost(p, sample_shape, micro_batch_size: int, dtype="float32") -> CallCost:
    """One call: host sync + inputs, labels and outputs over PCIe + device iterations.

    Replicas stream their own data in parallel, so the host-link time is one replica's:
    ``DI × G × mb`` samples and labels in, ``outputs_per_call / R`` float32 losses out.
    """
    o, cost = p.options, p.cost
    per_replica = o.repeat_count * o.gradient_accumulation * micro_batch_size
    sample_bytes = math.prod(sample_shape) * np.dtype(dtype).itemsize
    out = outputs_per_call(o.output_mode, o.repeat_count, o.gradient_accumulation, 1,
                           o.output_return_period)
    io = cost.host(per_replica * (sample_bytes + LABEL_BYTES)) + cost.host(out * OUTPUT_BYTES)
    device = o.repeat_count * p.cycles_per_run(sample_shape, micro_batch_size, dtype)
    return CallCost(per_replica * o.replication_factor, float(p.target.host_sync_cycles),
                    float(io), float(device), p.target.clock_hz)


__all__ = ["CallCost", "DataLoader", "OutputMode", "REPLICA_REDUCTIONS", "Variable",
           "accumulation_dtypes", "apply_update", "call_cost", "check_output_mode",
           "check_replication", "check_samples", "combined_batch_size", "optimizer_share",
           "outputs_per_call",
           "select_outputs", "shard_bounds", "static_bytes", "weight_update_steps"]
