"""Model parallelism: layers with backward, schedules, the pipeline runner, sharded ops.

``schedule(kind, num_stages, gradient_accumulation)`` gives a pipeline schedule as data
(Graphcore's, GPipe, 1F1B, and interleaved 1F1B, ZB-H1, ZB-V and DualPipeV);
``pipeline(...)`` (TensorFlow-for-IPU) and ``training_model(...)`` with ``Block``,
``Stage``, ``PipelinedExecution`` and ``ShardedExecution`` (PopTorch) train a model split
over IPUs with real arithmetic; ``nn`` and ``optim`` are the layers and optimisers.
"""

from . import concurrent, nn, optim, replication
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
