"""Keras on the IPU (TensorFlow 2): ``IPUStrategy``, pipelined ``Sequential`` and ``Model``.

The third front end of the pipeline runner, beside TensorFlow's ``pipeline``
(:mod:`.frontend_tf`) and PopTorch's ``training_model`` (:mod:`.frontend_poptorch`). It
follows the TF-IPU guide's "Keras with IPUs" (``keras_tf2.rst``) and Graphcore's Keras
extensions (``tensorflow/python/ipu/keras/extensions/``; ``graphcore/keras``
``keras/ipu/extensions/``), with the kit's layers (:mod:`.nn`) and optimisers (:mod:`.optim`):

* the model is created inside ``with IPUStrategy().scope():``;
* a ``Sequential`` model is pipelined by ``set_pipeline_stage_assignment([0, 0, 1, 1])``
  (one stage per layer), a functional ``Model`` by calling its layers inside
  ``with PipelineStage(k):`` scopes (or with ``get/set_pipeline_stage_assignment``);
* ``set_pipelining_options(gradient_accumulation_steps_per_replica=..., device_mapping=...,
  **pipelining_kwargs)`` (``pipeline_schedule``, ``recomputation_mode``,
  ``offload_weight_update_variables``, ``replicated_optimizer_state_sharding``,
  ``gradient_accumulation_dtype``) and, for a model that is not pipelined,
  ``set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=...)``;
* ``compile(optimizer, loss, steps_per_execution=N)`` and ``fit(x, y, batch_size, epochs)``
  (a :class:`History` with the loss per epoch), ``evaluate`` and ``predict``.

As Graphcore's Keras builds ``pipelining_ops.pipeline`` with ``gradient_accumulation_count``
= the accumulation steps and ``repeat_count`` = ``steps_per_execution`` ÷ them, ``fit`` builds
the kit's :func:`~.frontend_tf.pipeline`, so TensorFlow's defaults (Grouped schedule, SUM
reduction, offloaded optimiser state) and errors apply. A model that is not pipelined runs
on one IPU, one stage, accumulating as ``GradientAccumulationOptimizerV2`` does.
``compile(..., emulate=True)`` runs the stages as Poplar programs on the emulator.

>>> import numpy as np
>>> from ipukit.parallel import keras, nn, optim
>>> with keras.IPUStrategy().scope():
...     model = keras.Sequential([nn.Dense(4, 8, rng=1), nn.ReLU(), nn.Dense(8, 3, rng=2)])
...     model.set_pipeline_stage_assignment([0, 0, 1])
...     model.set_pipelining_options(gradient_accumulation_steps_per_replica=4)
...     model.compile(optim.SGD(0.1), nn.SoftmaxCrossEntropy(), steps_per_execution=8)
...     rng = np.random.default_rng(0)
...     x, y = rng.normal(size=(64, 4)).astype("float32"), rng.integers(0, 3, 64)
...     history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
>>> len(history.history["loss"]), model.pipeline.schedule.kind, model.pipeline.repeat_count
(2, 'grouped', 2)
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings

import numpy as np

from .. import backend
from ..errors import PipelineConfigError
from ..target import IPUModel, Target
from . import checks, nn
from .emulated import build
from .frontend_tf import pipeline as tf_pipeline
from .nn import is_count
from .runner import Pipeline, PipelineOptions

_STRATEGIES: list = []  # the IPUStrategy scopes entered, innermost last
_STAGE: list = []  # the PipelineStage scope entered (at most one)

#: ``pipelining_kwargs`` that go to ``pipelining_ops.pipeline`` and their names there.
_PIPELINE_KWARGS = {"pipeline_schedule": "pipeline_schedule",
                    "recomputation_mode": "recomputation_mode",
                    "offload_weight_update_variables": "offload_optimizer_state",
                    "replicated_optimizer_state_sharding": "replicated_optimizer_state_sharding",
                    "gradient_accumulation_dtype": "gradient_accumulation_dtype"}
_EXPLICIT = {"gradient_accumulation_count": "gradient_accumulation_steps_per_replica",
             "device_mapping": "device_mapping", "accumulate_outfeed": "accumulate_outfeed"}
_AUTOMATIC = ("computational_stages", "repeat_count", "inputs", "infeed_queue",
              "outfeed_queue", "optimizer_function")
_INCOMPATIBLE = ("outfeed_loss", "outfeed_mask", "batch_serialization_iterations")


class IPUStrategy:
    """``ipu.ipu_strategy.IPUStrategy``: Keras models created in its ``scope()`` run on IPUs.

    The strategy also stands for the configured system, TensorFlow's ``IPUConfig`` (kit
    convention): ``target`` is the system's IPUs (``auto_select_ipus``; default: as many as
    the model's shards, rounded up to a power of two, so no replication) and
    ``allow_recompute`` is ``IPUConfig.allow_recompute``. The replication factor is the
    IPUs ÷ the model's shards rounded up to a power of two, as Graphcore's Keras computes it.
    """

    def __init__(self, target: Target | None = None, allow_recompute: bool = False):
        if target is not None and not isinstance(target, Target):
            raise PipelineConfigError(
                f"IPUStrategy(target=...) takes a Target, e.g. ipu.IPUModel('ipu2', "
                f"num_ipus=8).create_device().target, got {target!r}")
        self.target, self.allow_recompute = target, bool(allow_recompute)

    @contextlib.contextmanager
    def scope(self):
        """``with strategy.scope():`` models created inside run on this strategy's IPUs."""
        _STRATEGIES.append(self)
        try:
            yield self
        finally:
            _STRATEGIES.remove(self)

    def replication_factor(self, shards: int) -> int:
        """Replicas of a model of ``shards`` IPUs (``_get_replication_factor``)."""
        rounded = 2 ** math.ceil(math.log2(shards))
        if self.target is None:
            return 1
        if shards > self.target.num_ipus:
            raise PipelineConfigError(
                f"Current device has {self.target.num_ipus} IPUs attached, however the "
                f"current model requires a multiple of {rounded} IPUs. Use a target with "
                f"{rounded}, {2 * rounded}, ... IPUs, or assign fewer pipeline stages.")
        if self.target.num_ipus < rounded:  # TF divides to 0 replicas here
            raise PipelineConfigError(
                f"The model uses {shards} IPUs, which Keras rounds up to {rounded} per "
                f"replica, but the target has {self.target.num_ipus}: use a target with a "
                f"multiple of {rounded} IPUs.")
        return self.target.num_ipus // rounded

    def target_for(self, shards: int) -> Target:
        """The target a model of ``shards`` IPUs runs on."""
        if self.target is not None:
            return self.target
        ipus = 2 ** math.ceil(math.log2(shards))
        return IPUModel("ipu2", num_ipus=ipus).create_device().target


class PipelineStage:
    """``ipu.keras.PipelineStage(stage)``: layer calls inside ``with PipelineStage(k):`` are
    assigned to pipeline stage k (functional models; call-time assignment)."""

    def __init__(self, stage: int):
        self.stage = stage

    def __enter__(self):
        if not is_count(self.stage, 0):
            raise PipelineConfigError(f"{self.stage!r} is not a valid pipeline stage.")
        if not _STRATEGIES:
            raise PipelineConfigError(
                "PipelineStage may only be used from within an IPUStrategy context: "
                "write `with strategy.scope():` around the model.")
        if _STAGE:
            raise PipelineConfigError("Pipeline stages must not be nested.")
        _STAGE.append(int(self.stage))
        return self

    def __exit__(self, *exc):
        _STAGE.pop()


class KerasTensor:
    """A symbolic tensor of a functional model: an ``Input`` and the layer calls since."""

    def __init__(self, shape: tuple, calls: tuple = (), root: KerasTensor | None = None):
        self.shape, self.calls = tuple(shape), calls
        self.root = self if root is None else root  # the Input the calls started from

    def _call_layer(self, layer) -> KerasTensor:
        """What ``layer(tensor)`` does on a symbolic tensor: record the call and its
        pipeline stage, and check the layer takes this shape."""
        if any(layer is c[0] for c in self.calls):
            raise PipelineConfigError(
                f"{layer!r} is called twice: shared layers are not modelled (kit "
                "convention); create a second layer")
        try:
            shape = tuple(layer.out_shape((1,) + self.shape[1:]))
        except Exception as e:
            raise PipelineConfigError(f"{layer!r} called on a tensor of shape "
                                      f"{self.shape}: {e}") from None
        stage = _STAGE[-1] if _STAGE else None
        return KerasTensor((None,) + shape[1:], self.calls + ((layer, stage),), self.root)

    def __repr__(self):
        return f"KerasTensor(shape={self.shape})"


def Input(shape) -> KerasTensor:  # noqa: N802 - Keras's name
    """``tf.keras.Input(shape)``: the symbolic input of a functional model (no batch axis)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not all(is_count(d) for d in shape):
        raise PipelineConfigError(f"Input shape must be positive integers, got {shape!r}")
    return KerasTensor((None,) + shape)


class SequentialLayerPipelineStageAssignment:
    """Which pipeline stage a layer of a ``Sequential`` model runs in."""

    def __init__(self, layer, pipeline_stage: int | None = None):
        self.layer, self.pipeline_stage = layer, pipeline_stage

    def __str__(self):
        return f"Layer: {_name(self.layer)} is assigned to pipeline stage: {self.pipeline_stage}"


class FunctionalLayerPipelineStageAssignment(SequentialLayerPipelineStageAssignment):
    """Which pipeline stage a layer call (``node_index``) of a functional model runs in."""

    def __init__(self, layer, node_index: int = 0, pipeline_stage: int | None = None):
        super().__init__(layer, pipeline_stage)
        self.node_index = node_index


class History:
    """``tf.keras.callbacks.History``: ``history["loss"]`` holds one loss per epoch."""

    def __init__(self, model, epochs: int, steps: int):
        self.model, self.epoch, self.history = model, [], {"loss": []}
        self.params = {"epochs": epochs, "steps": steps}

    def __repr__(self):
        return f"History(epochs={len(self.epoch)}, loss={self.history['loss']})"


def _name(layer) -> str:
    """Keras's layer name: the class name in snake case (``Dense`` -> ``dense``), with the
    position in its model (kit convention: ``dense``, ``re_lu_1``, ...)."""
    return getattr(layer, "_keras_name", type(layer).__name__)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


class _Model:
    """What Sequential and functional models share: layers in order, a stage per layer,
    the options of Graphcore's Keras extensions, compile and fit."""

    def __init__(self, layers):
        if not _STRATEGIES:
            raise PipelineConfigError(
                "Create Keras models inside `with strategy.scope():` of an IPUStrategy (the "
                "TF-IPU guide: Keras model creation must be inside the strategy.scope of an "
                "IPUStrategy).")
        self.strategy = _STRATEGIES[-1]
        self._layers: list = []
        self._stages: list = []  # one stage per layer, or empty: not pipelined
        self._pipelining: dict = {}
        self._accumulation: dict = {}
        self._reduction = "SUM"  # GradientAccumulationReductionMethod.SUM
        self._compiled: dict | None = None
        self._pipelines: dict = {}
        self.pipeline: Pipeline | None = None  # the runner's pipeline of the last call
        self.last_result = None  # the RunResult of the last execution of fit
        self._rng = np.random.default_rng(0)  # fit's shuffling is seeded (kit convention)
        for layer in layers:
            self._add(layer)

    def _add(self, layer):
        if not isinstance(layer, nn.Layer):
            raise PipelineConfigError(f"a Keras model's layers are ipukit.parallel.nn layers "
                                      f"(nn.Dense, nn.ReLU, ...), got {layer!r}")
        if any(layer is other for other in self._layers):
            raise PipelineConfigError(f"{layer!r} is in the model twice: shared layers are "
                                      "not modelled (kit convention); create a second layer")
        base = _snake(type(layer).__name__)
        count = sum(1 for other in self._layers if _snake(type(other).__name__) == base)
        layer._keras_name = base if count == 0 else f"{base}_{count}"
        self._layers.append(layer)
        self._pipelines.clear()

    @property
    def layers(self) -> list:
        return list(self._layers)

    def get_weights(self) -> list:
        """Copies of every weight, layer by layer (Dense: kernel then bias)."""
        return [np.array(v) for layer in self._layers for v in layer.params.values()]

    # -- options ----------------------------------------------------------------------
    def set_pipelining_options(self, gradient_accumulation_steps_per_replica=None,
                               device_mapping=None, accumulate_outfeed=None,
                               gradient_accumulation_reduction_method="sum",
                               **pipelining_kwargs) -> None:
        """Options of a pipelined model; ``pipelining_kwargs`` go to
        ``pipelining_ops.pipeline`` (``pipeline_schedule``, ``recomputation_mode``,
        ``offload_weight_update_variables``, ``replicated_optimizer_state_sharding``,
        ``gradient_accumulation_dtype``)."""
        self._reduction = _reduction(gradient_accumulation_reduction_method)
        if gradient_accumulation_steps_per_replica is not None:
            self._pipelining["ga"] = _steps(gradient_accumulation_steps_per_replica)
        if device_mapping is not None:
            if not isinstance(device_mapping, list) or not all(
                    isinstance(d, int) and not isinstance(d, bool) for d in device_mapping):
                raise PipelineConfigError(
                    "Expected `device_mapping` to be a list of integers, got "
                    f"{device_mapping!r}: one IPU per pipeline stage, e.g. [0, 1].")
            self._pipelining["device_mapping"] = list(device_mapping)
        if accumulate_outfeed:
            raise PipelineConfigError(
                "accumulate_outfeed=True changes only what the outfeed returns, which the kit "
                "does not model; leave it at None")
        for key in pipelining_kwargs:
            if key in _EXPLICIT:
                raise PipelineConfigError(
                    f"Found `{key}` key in `pipelining_kwargs`. Set the `{_EXPLICIT[key]}` "
                    "argument to `set_pipelining_options` instead.")
            if key in _AUTOMATIC:
                raise PipelineConfigError(f"Found `{key}` key in `pipelining_kwargs`. This "
                                          "argument is automatically set by Keras.")
            if key in _INCOMPATIBLE:
                raise PipelineConfigError(f"Found `{key}` key in `pipelining_kwargs`. This "
                                          "argument is not compatible with Keras.")
            if key not in _PIPELINE_KWARGS:
                raise PipelineConfigError(
                    f"`{key}` is a pipelining option the kit does not model; it models "
                    f"{', '.join(_PIPELINE_KWARGS)}")
        self._pipelining["kwargs"] = dict(pipelining_kwargs)
        self._pipelines.clear()

    def set_gradient_accumulation_options(self, gradient_accumulation_steps_per_replica=None,
                                          gradient_accumulation_reduction_method="sum",
                                          **gradient_accumulation_optimizer_kwargs) -> None:
        """Gradient accumulation of a model that is not pipelined
        (``GradientAccumulationOptimizerV2``; its ``offload_weight_update_variables`` and
        ``dtype`` may be passed)."""
        self._reduction = _reduction(gradient_accumulation_reduction_method)
        if gradient_accumulation_steps_per_replica is not None:
            self._accumulation["ga"] = _steps(gradient_accumulation_steps_per_replica)
        kwargs = gradient_accumulation_optimizer_kwargs
        if "opt" in kwargs:
            raise PipelineConfigError(
                "Found `opt` key in `gradient_accumulation_optimizer_kwargs`. This is not "
                "supported as the optimizer which the model has been compiled with is "
                "automatically wrapped.")
        if "num_mini_batches" in kwargs:
            raise PipelineConfigError(
                "Found `num_mini_batches` key in `gradient_accumulation_optimizer_kwargs`. "
                "Set the `gradient_accumulation_steps_per_replica` argument to "
                "`set_gradient_accumulation_options` instead.")
        unknown = sorted(set(kwargs) - {"offload_weight_update_variables", "dtype"})
        if unknown:
            raise PipelineConfigError(
                f"`{unknown[0]}` is a GradientAccumulationOptimizerV2 option the kit does not "
                "model; it models offload_weight_update_variables and dtype")
        self._accumulation["kwargs"] = dict(kwargs)
        self._pipelines.clear()

    def compile(self, optimizer=None, loss=None, metrics=None, steps_per_execution=None,  # noqa: A003
                run_eagerly=None, emulate: bool = False) -> None:
        """``Model.compile``: ``steps_per_execution`` batches per replica run in one
        execution (default 1); ``emulate=True`` runs them on the emulator (kit)."""
        if run_eagerly:
            raise PipelineConfigError(
                "Keras models cannot run eagerly when using `IPUStrategy`. Set "
                "`run_eagerly=False` when calling `compile`.")
        if metrics:
            raise PipelineConfigError(f"metrics={metrics!r}: the kit's History holds the loss "
                                      "only (kit convention); leave metrics out")
        checks.optimizer_and_loss(optimizer, loss)
        spe = 1 if steps_per_execution is None else steps_per_execution
        if not is_count(spe):
            raise PipelineConfigError(
                f"steps_per_execution must be a positive integer, got {steps_per_execution!r}")
        self._compiled = {"optimizer": optimizer, "loss": loss, "spe": int(spe),
                          "emulate": bool(emulate)}
        self._pipelines.clear()

    # -- pipeline stages --------------------------------------------------------------
    def _is_pipelined(self) -> bool:
        return bool(self._stages)

    def get_pipeline_stage_assignment(self) -> list:
        """One assignment per layer, in execution order (its stage, or None)."""
        stages = self._stages or [None] * len(self._layers)
        return [self._Assignment(layer, pipeline_stage=s)
                for layer, s in zip(self._layers, stages)]

    def reset_pipeline_stage_assignment(self) -> None:
        """The model is no longer pipelined."""
        self._stages = []
        self._pipelines.clear()

    def print_pipeline_stage_assignment_summary(self, print_fn=print) -> None:
        """Each layer and its pipeline stage, one line each."""
        print_fn(f"{'Layer (type)':<30}{'Pipeline Stage':>15}")
        stages = self._stages or [None] * len(self._layers)
        for layer, s in zip(self._layers, stages):
            print_fn(f"{_name(layer) + ' (' + type(layer).__name__ + ')':<30}{s!s:>15}")

    def _stage_layers(self) -> list[list]:
        """The layers of each pipeline stage (one stage when not pipelined)."""
        if not self._is_pipelined():
            return [list(self._layers)]
        if len(self._stages) != len(self._layers):
            raise PipelineConfigError(
                "Adding a layer to a pipelined Sequential model has invalidated the pipeline "
                f"stage assignment ({len(self._stages)} stages for {len(self._layers)} "
                "layers). You need to call `set_pipeline_stage_assignment()` before "
                "executing again.")
        return [[lay for lay, s in zip(self._layers, self._stages) if s == k]
                for k in range(max(self._stages) + 1)]

    def _shards(self) -> int:
        """The IPUs of one replica (``_get_shard_count``)."""
        mapping = self._pipelining.get("device_mapping")
        if not self._is_pipelined():
            return 1
        return len(self._stage_layers()) if mapping is None else max(mapping) + 1

    # -- fit, evaluate, predict -------------------------------------------------------
    def _plan(self, x, batch_size, labels=None):
        """The data checks of Graphcore's ``IPUDataHandler``: (x, labels, batch size,
        replicas, steps per replica per epoch, steps per execution)."""
        if self._compiled is None:
            raise PipelineConfigError("You must compile your model before training/testing. "
                                      "Use `model.compile(optimizer, loss)`.")
        if labels is None:
            x = checks.features(x)
        else:
            x, labels = checks.samples(x, labels)
            if len(labels) != len(x):
                raise PipelineConfigError(f"x has {len(x)} samples but y has {len(labels)}: "
                                          "give one label per sample")
        if x.dtype == np.float64:  # IPUDataHandler autocasts float64 data to float32
            x = x.astype(np.float32)
        bs = 32 if batch_size is None else checks.batch_size(batch_size)
        if len(x) % bs:
            raise PipelineConfigError(
                "The provided set of data has a partial batch, which could result in data "
                f"being dropped. Either adjust the `batch_size` of your model (currently set "
                f"to {bs}) or pad your dataset to ensure there are no partial batches "
                f"({len(x)} samples).")
        replicas = self.strategy.replication_factor(self._shards())
        batches = len(x) // bs
        steps = batches // replicas
        to = " to this replica" if replicas > 1 else ""
        if batches % replicas:
            left = batches % replicas
            warnings.warn(f"Dataset of length {batches} is being evenly distributed between "
                          f"{replicas} replicas. The remaining {left} "
                          f"batch{'es' if left > 1 else ''} will be dropped.", stacklevel=3)
        if steps == 0:
            raise PipelineConfigError(
                f"The provided dataset contains {batches} items, but all {replicas} replicas "
                f"are requested to run 1 steps each. Make sure the dataset contains at least "
                f"{replicas} items.")
        spe = self._compiled["spe"]
        if spe > steps:
            warnings.warn(f"`steps_per_execution` has been set to {spe} but the dataset "
                          f"provided{to} only contains {steps} batches. Using {steps} as "
                          "`steps_per_execution`.", stacklevel=3)
            spe = steps
        if steps % spe:
            raise PipelineConfigError(
                f"`steps_per_execution` must be a divisor of the number of batches in the "
                f"dataset provided{to} ({steps} batches; steps_per_execution is {spe}).")
        return x, labels, bs, replicas, steps, spe

    def _accumulation_steps(self, spe: int) -> int:
        """``_verify_and_get_gradient_accumulation_steps_per_replica``."""
        mode = ""
        if self._is_pipelined():
            mode = "pipelined "
            ga = self._pipelining.get("ga")
            if ga is None:
                raise PipelineConfigError(
                    "The model which you are attempting to train is pipelined, however "
                    "`gradient_accumulation_steps_per_replica` has not been set through "
                    "`set_pipelining_options()`. You need to set this value as pipelined "
                    "models will perform gradient accumulation when training.")
        else:
            ga = self._accumulation.get("ga", 1)
        if spe % ga:
            raise PipelineConfigError(
                f"The {mode}model has been configured to use gradient accumulation for "
                f"training, however the current `steps_per_execution` value (set to {spe}) "
                f"is not divisible by `gradient_accumulation_steps_per_replica` ({ga}). You "
                "need to adjust either `steps_per_execution` or "
                "`gradient_accumulation_steps_per_replica` to make sure that "
                "`steps_per_execution` is divisible by "
                "`gradient_accumulation_steps_per_replica`.")
        return ga

    def _build(self, ga: int, repeats: int, replicas: int) -> Pipeline:
        """The runner's pipeline for executions of ``repeats`` × ``ga`` steps per replica,
        kept while the model's settings stay the same."""
        key = (ga, repeats, replicas)
        if key in self._pipelines:
            return self._pipelines[key]
        c, stages = self._compiled, self._stage_layers()
        if self._is_pipelined():
            kwargs = {_PIPELINE_KWARGS[k]: v
                      for k, v in self._pipelining.get("kwargs", {}).items()}
            p = tf_pipeline(stages, self._pipelining.get("device_mapping"),
                            gradient_accumulation_count=ga,
                            repeat_count=repeats, reduction_method=self._reduction,
                            recomputation=self.strategy.allow_recompute,
                            replication_factor=replicas, optimizer=c["optimizer"],
                            loss=c["loss"], target=self.strategy.target_for(self._shards()),
                            output_mode="all", emulate=c["emulate"], **kwargs)
        else:
            if self._pipelining:
                warnings.warn(
                    "set_pipelining_options() has no effect: the model has no pipeline "
                    "stage assignment, so it runs on one IPU (as in TensorFlow). Assign "
                    "stages with set_pipeline_stage_assignment() or PipelineStage scopes "
                    "(kit convention: TensorFlow says nothing).", stacklevel=4)
            kwargs = self._accumulation.get("kwargs", {})
            offload = kwargs.get("offload_weight_update_variables")
            options = PipelineOptions(
                ga, schedule="sequential", reduction=self._reduction,
                recomputation=self.strategy.allow_recompute,
                offload_optimizer_state=ga > 1 if offload is None else bool(offload),
                replication_factor=replicas, repeat_count=repeats,
                gradient_accumulation_dtype=kwargs.get("dtype"), emulate=c["emulate"])
            p = build(stages, None, options, c["optimizer"], c["loss"],
                      self.strategy.target_for(1))
        self._pipelines[key] = p
        return p

    def fit(self, x=None, y=None, batch_size=None, epochs: int = 1, verbose="auto",
            shuffle: bool = True) -> History:
        """``Model.fit``: ``epochs`` passes over ``(x, y)`` in batches of ``batch_size``
        (default 32). Each execution runs ``steps_per_execution`` batches per replica; the
        replicas take consecutive batches in turn, as the IPU infeed deals them. The loss
        of an epoch is the mean of the batch losses of the last replica (Keras's loss
        metric, which IPU replicas keep each for themselves; the last replica's is
        reported). ``shuffle`` reorders the samples before each epoch (kit convention:
        from a generator seeded when the model was made)."""
        if not is_count(epochs):
            raise PipelineConfigError(f"epochs must be a positive integer, got {epochs!r}")
        x, y, bs, replicas, steps, spe = self._plan(x, batch_size, y)
        ga = self._accumulation_steps(spe)
        p = self.pipeline = self._build(ga, spe // ga, replicas)
        history = History(self, epochs, steps)
        per_call = spe * replicas * bs
        for epoch in range(epochs):
            order = self._rng.permutation(len(x)) if shuffle else np.arange(len(x))
            losses = []
            for start in range(0, steps * replicas * bs, per_call):
                idx = order[start:start + per_call]
                xs, ys = _to_runner(x[idx], spe // ga, ga, replicas), _to_runner(
                    y[idx], spe // ga, ga, replicas)
                self.last_result = p.run(xs, ys)
                losses.append(np.swapaxes(self.last_result.losses, 1, 2).reshape(spe, replicas))
            loss = float(np.concatenate(losses)[:, -1].mean())
            history.epoch.append(epoch)
            history.history["loss"].append(loss)
            if verbose:
                print(f"Epoch {epoch + 1}/{epochs}: {steps}/{steps} steps, loss {loss:.4f}")
        return history

    def predict(self, x, batch_size=None) -> np.ndarray:
        """``Model.predict``: the last layer's outputs for every sample, in order (kit
        convention: the layers' forward on the host, the numbers the IPU would give)."""
        x, _, bs, *_ = self._plan(x, batch_size)
        out = []
        for i in range(0, len(x), bs):
            h = x[i:i + bs]
            for layer in self._layers:
                h = layer.forward(h)[0]
            out.append(backend.to_numpy(h))
        return np.concatenate(out)

    def evaluate(self, x=None, y=None, batch_size=None) -> float:
        """``Model.evaluate``: the mean batch loss (of the last replica's batches, as
        ``fit`` reports it)."""
        x, y, bs, replicas, steps, _spe = self._plan(x, batch_size, y)
        logits = self.predict(x[:steps * replicas * bs], bs)
        loss = self._compiled["loss"]
        batch = [float(loss.forward(logits[i:i + bs], y[i:i + bs])[0])
                 for i in range(0, steps * replicas * bs, bs)]
        return float(np.mean(np.reshape(batch, (steps, replicas))[:, -1]))


def _to_runner(a, repeats: int, ga: int, replicas: int) -> np.ndarray:
    """Batches in infeed order (step, replica) rearranged as the runner takes them:
    (repeat, replica, micro-batch), with step = repeat × ga + micro-batch."""
    a = a.reshape((repeats, ga, replicas, -1) + a.shape[1:])
    return np.swapaxes(a, 1, 2).reshape((-1,) + a.shape[4:])


def _assignment_list(a, count: int, what: str) -> list:
    """``a`` if it is a list of ``count`` assignments; else Graphcore's error, whose
    length message ends with ``what`` (``{}``: the count)."""
    if not isinstance(a, list):
        raise PipelineConfigError("`pipeline_stage_assignment` needs to be a list")
    if len(a) != count:
        raise PipelineConfigError(f"The size of the provided `pipeline_stage_assignment` "
                                  f"({len(a)}) does not match {what.format(count)}")
    return a


def _steps(value) -> int:
    if not is_count(value):
        raise PipelineConfigError(
            "Expected `gradient_accumulation_steps_per_replica` to be a positive integer, "
            f"but got {value!r} instead.")
    return int(value)


def _reduction(method) -> str:
    name = str(getattr(method, "name", method)).upper()
    if name not in ("SUM", "MEAN", "RUNNING_MEAN"):
        raise PipelineConfigError(
            f"gradient_accumulation_reduction_method {method!r} is not one of 'sum', 'mean', "
            "'running_mean' (GradientAccumulationReductionMethod)")
    return name


class Sequential(_Model):
    """``tf.keras.Sequential(layers)`` inside an ``IPUStrategy`` scope."""

    _Assignment = SequentialLayerPipelineStageAssignment

    def __init__(self, layers=None):
        super().__init__(list(layers or []))

    def add(self, layer) -> None:
        """Append a layer (a pipeline stage assignment must then be set again)."""
        self._add(layer)

    def set_pipeline_stage_assignment(self, pipeline_stage_assignment) -> None:
        """One pipeline stage per layer: ints or ``SequentialLayerPipelineStageAssignment``s.
        The first layer is in stage 0; each layer is in its predecessor's stage or the
        next one."""
        a = _assignment_list(
            pipeline_stage_assignment, len(self._layers),
            "the number of layers in the model (currently {}). Each layer in a Sequential "
            "model needs to be assigned to a pipeline stage.")
        if all(isinstance(s, int) and not isinstance(s, bool) for s in a):
            a = [SequentialLayerPipelineStageAssignment(lay, s)
                 for lay, s in zip(self._layers, a)]
        if not all(isinstance(s, SequentialLayerPipelineStageAssignment) for s in a):
            raise PipelineConfigError(
                "All elements of `pipeline_stage_assignment` need to be instances of either "
                "`int` or `SequentialLayerPipelineStageAssignment`.")
        prev = 0
        for i, s in enumerate(a):
            if s.pipeline_stage is None:
                raise PipelineConfigError(
                    f"Layer {_name(s.layer)} has not been assigned a pipeline stage.")
            if s.layer is not self._layers[i]:
                raise PipelineConfigError(
                    f"The provided assignment at index {i} `pipeline_stage_assignment` is "
                    f"for layer {_name(s.layer)}, but the layer in the Sequential model at "
                    f"index {i} is {_name(self._layers[i])}.")
            if i == 0 and s.pipeline_stage != 0:
                raise PipelineConfigError(
                    "The first layer in a pipelined sequential model needs to be assigned to "
                    f"the 0th pipeline stage, however it was assigned to {s.pipeline_stage}.")
            if i and s.pipeline_stage not in (prev, prev + 1):
                raise PipelineConfigError(
                    f"Layer {_name(s.layer)} has been assigned to pipeline stage "
                    f"{s.pipeline_stage}, however the previous layer in the Sequential model "
                    f"was assigned to pipeline stage {prev}. A layer in a Sequential model "
                    "can only be assigned to the same pipeline stage as the previous layer "
                    "or to the next pipeline stage.")
            prev = s.pipeline_stage
        self._stages = [int(s.pipeline_stage) for s in a]
        self._pipelines.clear()


class Model(_Model):
    """``tf.keras.Model(inputs, outputs)``, a functional model inside an ``IPUStrategy``
    scope. One input, one output, a chain of layer calls (kit convention: the kit's layers
    take one tensor each). Layer calls made inside ``PipelineStage`` scopes pipeline it."""

    _Assignment = FunctionalLayerPipelineStageAssignment

    def __init__(self, inputs, outputs):
        if not isinstance(inputs, KerasTensor) or not isinstance(outputs, KerasTensor):
            raise PipelineConfigError(
                "Model(inputs, outputs) takes one keras.Input and the tensor its layer calls "
                f"gave (kit convention: one input, one output), got {inputs!r}, {outputs!r}")
        if inputs.calls or outputs.root is not inputs or not outputs.calls:
            raise PipelineConfigError("Model(inputs, outputs): inputs must be a keras.Input "
                                      "and outputs the result of layer calls on it")
        super().__init__([layer for layer, _ in outputs.calls])
        self.input_shape = inputs.shape
        if any(s is not None for _, s in outputs.calls):  # PipelineStage scopes were used
            for layer, s in outputs.calls:
                if s is None:
                    raise PipelineConfigError(
                        "All layers of a pipelined model must have an associated pipeline "
                        f"stage. However, {_name(layer)} has not been assigned to one. "
                        "Pipeline stages can be assigned each time a layer is called (kit "
                        "convention: not when it is constructed): call it inside `with "
                        "PipelineStage(k):`.")
            self.set_pipeline_stage_assignment([
                FunctionalLayerPipelineStageAssignment(lay, 0, s) for lay, s in outputs.calls])

    def set_pipeline_stage_assignment(self, pipeline_stage_assignment) -> None:
        """One ``FunctionalLayerPipelineStageAssignment`` per layer call, in order (from
        ``get_pipeline_stage_assignment()``, with their ``pipeline_stage`` set)."""
        a = _assignment_list(
            pipeline_stage_assignment, len(self._layers),
            "the total number of invocations of layers in the model (currently {}). Each "
            "invocation of a layer in a model needs to be assigned to a pipeline stage "
            "(excluding input layers).")
        if not all(isinstance(s, FunctionalLayerPipelineStageAssignment) for s in a):
            raise PipelineConfigError(
                "All elements of `pipeline_stage_assignment` need to be instances of "
                "`FunctionalLayerPipelineStageAssignment`.")
        for s in a:
            if s.pipeline_stage is None:
                raise PipelineConfigError(f"Layer {_name(s.layer)} with node index "
                                          f"{s.node_index} has not been assigned a pipeline "
                                          "stage.")
        by_layer = {id(s.layer): int(s.pipeline_stage) for s in a}
        if len(by_layer) != len(a) or set(by_layer) != {id(lay) for lay in self._layers}:
            raise PipelineConfigError("Duplicate assignment: each layer invocation can only be "
                                      "assigned to a single pipeline stage.")
        stages = [by_layer[id(lay)] for lay in self._layers]
        found = sorted(set(stages))
        missing = sorted(set(range(found[-1] + 1)) - set(found))
        if missing:
            raise PipelineConfigError(
                "Pipeline stages in the graph need to be strictly increasing, found pipeline "
                f"stages {', '.join(map(str, found))}, however the following pipeline stages "
                f"are missing {', '.join(map(str, missing))}.")
        for i in range(1, len(stages)):
            if stages[i] < stages[i - 1]:
                raise PipelineConfigError(
                    f"Layer {_name(self._layers[i])} in pipeline stage {stages[i]} has a "
                    "dependency from a pipeline stage which has not yet executed. Layers can "
                    "only use outputs from current or previous pipeline stages.")
        self._stages = stages
        self._pipelines.clear()


__all__ = ["FunctionalLayerPipelineStageAssignment", "History", "IPUStrategy", "Input",
           "KerasTensor", "Model", "PipelineStage", "Sequential",
           "SequentialLayerPipelineStageAssignment"]
