"""PopTorch's front end of the pipeline runner: blocks, stages, strategies, trainingModel.

:class:`Block` names a group of layers, :class:`Stage` groups blocks on one IPU,
:class:`PipelinedExecution` (PopART's pipeline, schedule ``"poptorch"``) or
:class:`ShardedExecution` (one IPU busy at a time, schedule ``"sequential"``) is the
strategy, and :func:`training_model` wraps it all (reduction MEAN, as PopTorch), turning
PopTorch's option names into one :class:`~ipukit.parallel.runner.PipelineOptions`.

>>> from ipukit.parallel import nn, optim
>>> m = training_model([Block("A", nn.Dense(4, 8, rng=1), ipu_id=0),
...                     Block("B", nn.Dense(8, 3, rng=2), ipu_id=1)],
...                    nn.SoftmaxCrossEntropy(), optim.SGD(0.1), gradient_accumulation=3)
>>> m.options.schedule, m.options.reduction, [s.ipus for s in m.stages]
('poptorch', 'MEAN', [(0,), (1,)])
"""

from __future__ import annotations

from ..errors import PipelineConfigError
from ..target import Target
from . import nn
from .emulated import build
from .runner import Pipeline, PipelineOptions


class Block:
    """Layers under one name (``poptorch.Block("B1")``), optionally pinned to an IPU.

    ``ipu_id`` plays ``poptorch.BeginBlock(layer, ipu_id=...)``: without an explicit
    strategy, consecutive blocks on the same IPU become one stage (``AutoStage.SameAsIpu``).
    """

    def __init__(self, name: str, *layers: nn.Layer, ipu_id: int | None = None):
        self.name, self.layers, self.ipu_id = name, list(layers), ipu_id

    def __repr__(self):
        return f"Block({self.name!r}, {', '.join(map(repr, self.layers))}, ipu_id={self.ipu_id})"


class Stage:
    """Blocks run as one pipeline stage (``poptorch.Stage("B1", "B2").ipu(0)``)."""

    def __init__(self, *block_names: str):
        self.blocks = list(block_names)
        self.ipu_id: int | None = None

    def ipu(self, ipu_id: int) -> Stage:
        self.ipu_id = ipu_id
        return self


class PipelinedExecution:
    """PopTorch's default strategy: stages pipelined as PopART does (schedule "poptorch").

    ``PipelinedExecution("B1", "B2", "B3", "B4")`` puts one block per stage, stage k on
    IPU k; pass :class:`Stage` objects to group blocks or choose IPUs.
    """

    schedule_kind = "poptorch"

    def __init__(self, *stages):
        self.stages = [Stage(s) if isinstance(s, str) else s for s in stages]

    def resolve(self, blocks: list[Block]):
        """(list of layer lists, device mapping) for ``blocks``."""
        by_name = {b.name: b for b in blocks}
        layers, mapping = [], []
        for i, st in enumerate(self.stages):
            missing = [n for n in st.blocks if n not in by_name]
            if missing:
                raise PipelineConfigError(
                    f"stage {i} names block(s) {missing} but the model's blocks are "
                    f"{list(by_name)}"
                )
            layers.append([lay for n in st.blocks for lay in by_name[n].layers])
            mapping.append(i if st.ipu_id is None else st.ipu_id)
        used = [n for st in self.stages for n in st.blocks]
        if sorted(used) != sorted(by_name):
            raise PipelineConfigError(
                f"every block must be in exactly one stage: blocks {list(by_name)}, "
                f"stages use {used}"
            )
        return layers, mapping


class ShardedExecution(PipelinedExecution):
    """Each stage on its IPU, one IPU busy at a time (schedule "sequential"); for debugging."""

    schedule_kind = "sequential"


def _blocks(value) -> list:
    """A list of Blocks (``poptorch`` models are lists of ``Block``s here)."""
    items = [value] if isinstance(value, Block) else value
    try:
        items = list(items)
    except TypeError:
        items = [value]
    bad = [b for b in items if not isinstance(b, Block)]
    if isinstance(value, Block) or bad or not items:
        raise PipelineConfigError(
            f"training_model needs a list of Blocks, e.g. [Block('B1', ...), Block('B2', ...)]"
            f", got {value!r}"[:400]
        )
    return items


def _auto_stages(blocks: list[Block]) -> PipelinedExecution:
    """``AutoStage.SameAsIpu``: consecutive blocks on one IPU form a stage; ids ascend."""
    stages: list[Stage] = []
    for b in blocks:
        ipu = 0 if b.ipu_id is None else b.ipu_id
        if stages and stages[-1].ipu_id == ipu:
            stages[-1].blocks.append(b.name)
        elif stages and ipu < stages[-1].ipu_id:
            raise PipelineConfigError(
                f"block {b.name!r} is on IPU {ipu} after a block on IPU {stages[-1].ipu_id}: "
                "with AutoStage.SameAsIpu stage ids must ascend; pass an explicit strategy"
            )
        else:
            stages.append(Stage(b.name).ipu(ipu))
    return PipelinedExecution(*stages)


def training_model(blocks, loss, optimizer, strategy: PipelinedExecution | None = None,
                   gradient_accumulation: int = 1, device_iterations: int = 1,
                   replication_factor: int = 1, reduction: str = "MEAN",
                   recomputation: bool = False, offload_optimizer_state: bool = False,
                   target: Target | None = None,
                   replicated_tensor_sharding: bool = False, output_mode="final",
                   output_return_period: int = 1, emulate: bool = False,
                   pipeline_schedule: str | None = None) -> Pipeline:
    """``poptorch.trainingModel``: ``blocks`` split into stages by ``strategy``.

    ``options.Training.gradientAccumulation``, ``options.deviceIterations`` and
    ``options.replicationFactor`` are keyword arguments; gradients are averaged (PopTorch's
    ``ReductionType.Mean``) over micro-batches and replicas, or summed with ``"SUM"``.
    ``run(x, labels)`` takes micro-batch size × gradient_accumulation × device_iterations ×
    replication_factor samples and returns ``outputs`` by ``options.outputMode`` (FINAL by
    default, as for PopTorch's training models). ``replicated_tensor_sharding`` plays
    ``TensorLocationSettings().useReplicatedTensorSharding(True)`` for the optimiser state.
    ``emulate=True`` runs the stages as Poplar programs on the emulator (:mod:`.emulated`).
    ``pipeline_schedule`` runs a :class:`PipelinedExecution` with another schedule of
    :func:`~ipukit.parallel.schedule` (``"1f1b"``, ``"zb_h1"``, ...; the blocks' IPUs
    must be where it places its stages). (kit convention: PopTorch pipelines with PopART's
    schedule only; the kit lets its models run the others, to compare them.)
    """
    blocks = _blocks(blocks)
    strategy = strategy or _auto_stages(blocks)
    layers, mapping = strategy.resolve(blocks)
    kind = strategy.schedule_kind
    if pipeline_schedule is not None:
        if isinstance(strategy, ShardedExecution):
            raise PipelineConfigError(
                f"pipeline_schedule={pipeline_schedule!r} with ShardedExecution, which runs "
                "one stage at a time: pass a PipelinedExecution (or no strategy) to pipeline "
                "the stages with another schedule")
        kind = pipeline_schedule
    options = PipelineOptions(
        gradient_accumulation=gradient_accumulation, schedule=kind,
        reduction=reduction, recomputation=recomputation,
        offload_optimizer_state=offload_optimizer_state,
        replication_factor=replication_factor, repeat_count=device_iterations,
        replica_reduction="SUM" if str(reduction).upper() == "SUM" else "MEAN",
        replicated_optimizer_state_sharding=replicated_tensor_sharding,
        output_mode=output_mode, output_return_period=output_return_period,
        emulate=emulate)
    return build(layers, mapping, options, optimizer, loss, target)


def inference_model(blocks, strategy: PipelinedExecution | None = None,
                    device_iterations: int = 1, replication_factor: int = 1,
                    target: Target | None = None, loss=None,
                    emulate: bool = False) -> Pipeline:
    """``poptorch.inferenceModel``: the forward stages of ``blocks``, pipelined.

    No backward stages, no optimiser: PopART pipelines the N forward stages, so
    ``device_iterations`` (``options.deviceIterations``) must be at least N, PopTorch's
    error otherwise (``Compiler.cpp``); each call takes micro-batch size ×
    device_iterations × replication_factor samples and ``run(x).outputs`` holds the last
    stage's outputs per micro-batch. ``loss`` (optional) also scores ``run(x, labels)``.
    (kit convention: the device iterations are the pipeline's micro-batches, one pipeline
    run per call, as PopART runs them.) ``emulate=True`` runs the forward stages as Poplar
    programs on the emulator (:mod:`.emulated`).
    """
    blocks = _blocks(blocks)
    strategy = strategy or _auto_stages(blocks)
    layers, mapping = strategy.resolve(blocks)
    options = PipelineOptions(
        gradient_accumulation=device_iterations, schedule=strategy.schedule_kind,
        replication_factor=replication_factor, training=False, emulate=emulate)
    return build(layers, mapping, options, None, loss, target)
