"""Model parallelism: layers with backward, schedules, the pipeline runner, sharded ops.

``schedule(kind, num_stages, gradient_accumulation)`` gives a pipeline schedule as data
(Graphcore's, GPipe, 1F1B, and interleaved 1F1B, ZB-H1, ZB-V and DualPipeV);
``pipeline(...)`` (TensorFlow-for-IPU) and ``training_model(...)`` with ``Block``,
``Stage``, ``PipelinedExecution`` and ``ShardedExecution`` (PopTorch) train a model split
over IPUs with real arithmetic, or with ``emulate=True`` as Poplar programs on the
emulator; ``nn`` and ``optim`` are the layers and optimisers.

The folder is one-way layers, each importing only from those before it:

1. the model: :mod:`.nn` (layers with backward), :mod:`.optim` (optimisers);
2. schedules: :mod:`.schedule` (Graphcore's, GPipe and 1F1B, timed; ``schedule()``) and
   :mod:`.schedule_orders` (what each IPU runs in the schedules after Graphcore's);
3. the NumPy runner: :mod:`.checks`, :mod:`.replication`, :mod:`.collectives` (GCL's
   collectives and the sharded ops' arithmetic), :mod:`.concurrent` (concurrent stages),
   :mod:`.runner` (:class:`Pipeline`), :mod:`.pipeline_data` (a pipeline as plain data);
4. the emulated runner, the package :mod:`.emulated` (stage building, the optimizer step,
   collectives, results; the sharded ops on the emulator);
5. the front ends: :mod:`.sharded` (the concurrent-pipelines example's sharded ops),
   :mod:`.frontend_tf` (TensorFlow's ``pipeline``), :mod:`.frontend_poptorch` (PopTorch),
   :mod:`.keras` and :mod:`.pipelining` (the runner and its front ends in one place).

``tests/test_imports.py`` fails on an import circle or an import against these layers.
"""

from . import concurrent, nn, optim, replication
from .emulated import sharded as emulated_sharded  # noqa: F401 - its name before the package
from .pipelining import (
    _ALL_DEVICES,
    Block,
    CostModel,
    MemoryRecord,
    Pipeline,
    PipelinedExecution,
    PipelineOptions,
    RunResult,
    ShardedExecution,
    Stage,
    inference_model,
    pipeline,
    training_model,
)
from .replication import DataLoader, OutputMode, call_cost, combined_batch_size
from .schedule import ALL_KINDS, KINDS, Op, RecomputationMode, Schedule, schedule

__all__ = [
    "ALL_KINDS",
    "KINDS",
    "Block",
    "CostModel",
    "DataLoader",
    "MemoryRecord",
    "Op",
    "OutputMode",
    "Pipeline",
    "PipelineOptions",
    "PipelinedExecution",
    "RecomputationMode",
    "RunResult",
    "Schedule",
    "ShardedExecution",
    "Stage",
    "call_cost",
    "combined_batch_size",
    "_ALL_DEVICES",
    "concurrent",
    "inference_model",
    "nn",
    "optim",
    "pipeline",
    "replication",
    "schedule",
    "training_model",
]
