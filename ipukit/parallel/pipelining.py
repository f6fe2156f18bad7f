"""Pipelined training: the runner and its TensorFlow and PopTorch front ends, in one place.

* :mod:`.runner`: :class:`Pipeline` (stages, schedule, optimiser; ``run`` trains with real
  arithmetic, ``predict`` infers), :class:`PipelineOptions` (every setting, frozen,
  checked once), :class:`RunResult` and its records.
* :mod:`.frontend_tf`: TensorFlow-for-IPU's ``pipelining_ops.pipeline`` as :func:`pipeline`.
* :mod:`.frontend_poptorch`: PopTorch's :class:`Block`, :class:`Stage`,
  :class:`PipelinedExecution`, :class:`ShardedExecution`, ``trainingModel`` as
  :func:`training_model` and ``inferenceModel`` as :func:`inference_model`.

>>> from ipukit.parallel import nn, optim
>>> p = pipeline([[nn.Dense(4, 8, rng=1)], [nn.Dense(8, 3, rng=2)]],
...              gradient_accumulation_count=4, optimizer=optim.SGD(0.1),
...              loss=nn.SoftmaxCrossEntropy())
>>> type(p).__name__, p.options.gradient_accumulation
('Pipeline', 4)
"""

from ..cost import CostModel
from ..timeline import Span, Timeline
from .frontend_poptorch import (
    Block,
    PipelinedExecution,
    ShardedExecution,
    Stage,
    inference_model,
    training_model,
)
from .frontend_tf import _ALL_DEVICES, pipeline
from .runner import (
    ORDER_HINT,
    REDUCTIONS,
    Fifo,
    MemoryRecord,
    Pipeline,
    PipelineOptions,
    PipelineStage,
    RunResult,
)

__all__ = ["ORDER_HINT", "REDUCTIONS", "Block", "CostModel", "Fifo", "MemoryRecord",
           "Pipeline", "PipelineOptions", "PipelineStage", "PipelinedExecution", "RunResult",
           "ShardedExecution", "Span", "Stage", "Timeline", "_ALL_DEVICES", "inference_model",
           "pipeline", "training_model"]
