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

from ..errors import PipelineConfigError, PipelineConfigTypeError
from ..target import Target
from .emulated import build
from .nn import is_count
from .runner import ALL_DEVICES, ORDER_HINT, Pipeline, PipelineOptions, _check_mapping

#: TensorFlow's name for a stage on every IPU (``pipelining_ops._ALL_DEVICES``).
_ALL_DEVICES = ALL_DEVICES


def pipeline(computational_stages, device_mapping=None, gradient_accumulation_count=None,
             pipeline_schedule: str | None = None, repeat_count: int = 1,
             device_iterations: int | None = None, reduction_method: str = "SUM",
             recomputation: bool = False, offload_optimizer_state: bool | None = None,
             replication_factor: int | None = None, optimizer=None, loss=None,
             target: Target | None = None, replica_reduction: str = "MEAN",
             replicated_optimizer_state_sharding: bool = False,
             gradient_accumulation_dtype=None, output_mode=None,
             output_return_period: int = 1, recomputation_mode=None,
             emulate: bool = False) -> Pipeline:
    """``tensorflow.python.ipu.pipelining_ops.pipeline`` with layers instead of functions.

    Each computational stage is a list of layers; the last stage's output are logits for
    ``loss``. Unlike TensorFlow's, the second argument is ``device_mapping`` (default:
    stage k on IPU k); pass ``gradient_accumulation_count`` by keyword to be safe. The
    schedule defaults to Grouped (TensorFlow's ``None``). ``device_iterations`` is
    PopTorch's name for ``repeat_count``. Reduction defaults to SUM, as in TensorFlow.
    Replicas, RTS, accumulation dtype and output modes: see :mod:`.replication`; every
    loss is returned (``output_mode`` ALL) unless told otherwise. ``emulate=True`` runs
    the stages as Poplar programs on the emulator (:mod:`.emulated`).

    As TensorFlow's:

    * ``device_mapping`` is a list or a tuple (a TypeError otherwise); an entry may be
      ``_ALL_DEVICES`` (-1), as the concurrent-pipelines example uses it
      (``[0, _ALL_DEVICES, 1]``; see ``runner._all_devices`` for what the kit does with it);
    * ``recomputation_mode`` (a :class:`~.schedule.RecomputationMode`, default Auto) is
      checked against the schedule (``pipeline_util.cc``);
    * ``offload_optimizer_state`` is ``offload_weight_update_variables``: its default
      ``None`` offloads the optimiser state to Streaming Memory in a training pipeline
      (TF: "automatically", which offloads when remote buffers exist; (kit convention:
      they always do)). PopTorch's ``training_model`` keeps it on chip;
    * ``replicated_optimizer_state_sharding=True`` shards only offloaded state: with
      ``offload_optimizer_state=False`` it is an error (``pipelining_test.py``
      ``testRTSButNoOffloading``: "optimizer state must be offloaded"). PopTorch shards
      on-chip state too (``training_model(..., replicated_tensor_sharding=True)``);
    * the replica count follows from the IPUs and the shards: ``replication_factor=None``
      with a ``target`` is ``target.num_ipus // (IPUs of one replica)``, which must divide
      evenly ("you must specify a multiple of the number of shards"); 1 without a target;
    * no ``optimizer`` (and no ``loss``): an inference pipeline, forward stages only
      (``run(x).outputs`` holds the last stage's outputs).
    """
    stages = list(computational_stages)
    if len(stages) < 2:
        raise PipelineConfigError(
            f"Pipeline requires at least two computational stages, got {len(stages)}"
        )
    if gradient_accumulation_count is None:
        hint = f" {ORDER_HINT}" if isinstance(device_mapping, numbers.Number) else ""
        raise PipelineConfigError(f"gradient_accumulation_count is required.{hint}")
    if device_mapping is not None and not isinstance(device_mapping, (list, tuple)):
        hint = f" {ORDER_HINT}" if isinstance(device_mapping, numbers.Number) else ""
        raise PipelineConfigTypeError(  # pipelining_ops.py, word for word, then the fix
            "device_mapping argument needs to be a list or a tuple. Got "
            f"{type(device_mapping).__name__} {device_mapping!r}: pass one IPU (or a list "
            f"of IPUs, or _ALL_DEVICES) per computational stage, e.g. [0, 1].{hint}")
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
    training = optimizer is not None or loss is not None
    if offload_optimizer_state is None:  # TF's offload_weight_update_variables=None
        offload_optimizer_state = training
    if replicated_optimizer_state_sharding and training and not offload_optimizer_state:
        raise PipelineConfigError(
            "replicated_optimizer_state_sharding=True with offload_optimizer_state=False: "
            "the optimizer state must be offloaded to be sharded across replicas "
            "(TensorFlow partitions only offloaded variables). Leave offload_optimizer_state "
            "at None (TensorFlow's default: offloaded) or set it to True; PopTorch's "
            "training_model(..., replicated_tensor_sharding=True) shards on-chip state.")
    if replication_factor is None:
        replication_factor = _replicas(stages, device_mapping, target)
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
        recomputation_mode=recomputation_mode, training=training, emulate=emulate)
    return build(stages, device_mapping, options, optimizer, loss, target)


def _replicas(stages, device_mapping, target) -> int:
    """TensorFlow's replica count: the IPUs selected ÷ the IPUs of one replica (shards)."""
    shards = max(max(ipus) for ipus in _check_mapping(device_mapping, stages)) + 1
    if target is None or shards > target.num_ipus:  # too few IPUs: the runner says so
        return 1
    if target.num_ipus % shards:
        raise PipelineConfigError(
            f"The target has {target.num_ipus} IPUs but the pipeline uses {shards} shards: "
            "when specifying the number of IPUs in the system, you must specify a multiple "
            "of the number of shards used by the graph (TensorFlow replicates the graph "
            f"num_ipus / shards times). Use {shards * max(1, target.num_ipus // shards)} or "
            f"{shards * (target.num_ipus // shards + 1)} IPUs, or pass replication_factor.")
    return target.num_ipus // shards
