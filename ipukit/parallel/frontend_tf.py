"""TensorFlow-for-IPU's front end of the pipeline runner: ``pipelining_ops.pipeline``.

:func:`pipeline` takes TensorFlow's argument names (``computational_stages``,
``device_mapping``, ``gradient_accumulation_count``, ``pipeline_schedule``,
``repeat_count``, ``reduction_method``, ``recomputation``, ``offload_optimizer_state``,
``replication_factor``, ...), checks what only this API can get wrong and turns them into
one :class:`~ipukit.parallel.runner.PipelineOptions` for the runner. A new TensorFlow
option is one keyword here and one field there.

>>> from ipukit.parallel import nn, optim
>>> p = pipeline([[nn.Dense(4, 8, rng=1)], [nn.Dense(8, 3, rng=2)]],
...              gradient_accumulation_count=4, pipeline_schedule="Interleaved",
...              optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
>>> p.options.schedule, p.options.reduction, p.schedule.num_steps
('interleaved', 'SUM', 10)
"""

from __future__ import annotations

import numbers

from ..errors import PipelineConfigError
from ..target import Target
from .runner import ORDER_HINT, Pipeline, PipelineOptions
from .schedule import is_count


def pipeline(computational_stages, device_mapping=None, gradient_accumulation_count=None,
             pipeline_schedule: str | None = None, repeat_count: int = 1,
             device_iterations: int | None = None, reduction_method: str = "SUM",
             recomputation: bool = False, offload_optimizer_state: bool = False,
             replication_factor: int = 1, optimizer=None, loss=None,
             target: Target | None = None, replica_reduction: str = "MEAN",
             replicated_optimizer_state_sharding: bool = False,
             gradient_accumulation_dtype=None, output_mode=None,
             output_return_period: int = 1, emulate: bool = False) -> Pipeline:
    """``tensorflow.python.ipu.pipelining_ops.pipeline`` with layers instead of functions.

    Each computational stage is a list of layers; the last stage's output are logits for
    ``loss``. Unlike TensorFlow's, the second argument is ``device_mapping`` (default:
    stage k on IPU k); pass ``gradient_accumulation_count`` by keyword to be safe. The
    schedule defaults to Grouped (TensorFlow's ``None``). ``device_iterations`` is
    PopTorch's name for ``repeat_count``. Reduction defaults to SUM, as in TensorFlow.
    Replicas, RTS, accumulation dtype and output modes: see :mod:`.replication`; every
    loss is returned (``output_mode`` ALL) unless told otherwise. ``emulate=True`` runs
    the stages as Poplar programs on the emulator (:mod:`.emulated`).
    """
    stages = list(computational_stages)
    if len(stages) < 2:
        raise PipelineConfigError(
            f"Pipeline requires at least two computational stages, got {len(stages)}"
        )
    if gradient_accumulation_count is None:
        hint = f" {ORDER_HINT}" if isinstance(device_mapping, numbers.Number) else ""
        raise PipelineConfigError(f"gradient_accumulation_count is required.{hint}")
    if device_iterations is not None:
        if not is_count(device_iterations):
            raise PipelineConfigError(
                f"device_iterations must be a positive integer, got {device_iterations!r}")
        if repeat_count not in (1, device_iterations):
            raise PipelineConfigError(
                f"device_iterations {device_iterations} and repeat_count {repeat_count} "
                "name the same setting (weight updates per call): pass only one of them"
            )
        repeat_count = device_iterations
    options = PipelineOptions(
        gradient_accumulation=gradient_accumulation_count,
        schedule="grouped" if pipeline_schedule is None else pipeline_schedule,
        reduction=reduction_method, recomputation=recomputation,
        offload_optimizer_state=offload_optimizer_state,
        replication_factor=replication_factor, repeat_count=repeat_count,
        replica_reduction=replica_reduction,
        replicated_optimizer_state_sharding=replicated_optimizer_state_sharding,
        gradient_accumulation_dtype=gradient_accumulation_dtype,
        output_mode=output_mode, output_return_period=output_return_period,
        emulate=emulate)
    return Pipeline(stages, device_mapping, options, optimizer, loss, target)
