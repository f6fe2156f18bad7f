"""A training pipeline as plain data, and back (kit convention: the form in which a
learner's kernel hands a :class:`~.runner.Pipeline` to the grader's judge, which rebuilds
it and trains it on its own data; the counterpart of :mod:`ipukit.graph_data` for graphs).

:func:`to_plain` describes what a pipeline built by ``pipeline(...)`` or
``training_model(...)`` holds, as numbers, strings, lists, dicts and NumPy arrays:

* ``"stages"``: per stage its ``ipus`` and its ``members`` (one per IPU; a stage on one
  IPU has one), each member a list of layers ``{"class": "ipukit.parallel.nn.Dense",
  "settings": {...}, "params": {name: array}}`` (a ``Sequential`` is its layers);
  ``settings`` are the constructor's arguments the layer keeps (``in_features``, ...);
* ``"options"``: the :class:`~.runner.PipelineOptions` (schedule, gradient accumulation,
  reduction, ...);
* ``"optimizer"`` and ``"loss"``: their kit class and the optimiser's settings (``lr``,
  ``momentum``, ...).

Only classes of the kit travel, by name: :func:`from_plain` resolves them among the
classes of ``ipukit`` modules imported in the process that rebuilds (never a class the data
names elsewhere), builds every layer and the optimiser with their own constructors (so
their checks apply), then puts the described weights in, and refuses malformed or
oversized data with a :class:`PipelineDataError` naming what is wrong. The rebuilt pipeline
is the NumPy runner's (a description of an ``emulate=True`` pipeline is refused).

>>> from ipukit.parallel import nn, optim, pipeline
>>> p = pipeline([[nn.Flatten(), nn.Dense(4, 3)], [nn.Dense(3, 2)]], [0, 1], 4,
...              optimizer=optim.SGD(0.1), loss=nn.SoftmaxCrossEntropy())
>>> data = to_plain(p)
>>> [layer["class"] for layer in data["stages"][0]["members"][0]]
['ipukit.parallel.nn.Flatten', 'ipukit.parallel.nn.Dense']
>>> q = from_plain(data)
>>> q.stages[1].ipus, q.optimizer.lr, q.gradient_accumulation
((1,), 0.1, 4)
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import numbers

import numpy as np

from ipukit import backend
from ipukit.errors import IpuError
from ipukit.graph_data import codelet_name, kit_classes

from . import concurrent, nn, optim
from .replication import OutputMode
from .runner import Pipeline, PipelineOptions
from .schedule import RecomputationMode

#: The format's name and version, the first key of every description.
FORMAT = "ipukit.pipeline/1"
#: Most weight elements all layers may hold together, most stages, members, layers or
#: IPUs, and the largest count an option or a layer's setting may give (kit convention:
#: far above any exercise's pipeline; data past them is refused before it is built).
MAX_ELEMENTS = 1 << 22
MAX_ITEMS = 256
MAX_COUNT = 1 << 16
#: The kit's losses (a loss is a class with ``forward`` and ``backward``, not a layer).
LOSSES = (nn.SoftmaxCrossEntropy, concurrent.ShardedSoftmaxCrossEntropy)
#: The options' settings that are enums, described as ``{"enum": class, "name": member}``.
ENUMS = {e.__name__: e for e in (OutputMode, RecomputationMode)}


class PipelineDataError(IpuError):
    """A pipeline description that cannot be rebuilt (malformed, oversized, or naming what
    the kit does not have), or a pipeline that cannot be described (a layer, optimiser or
    loss not of the kit)."""


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise PipelineDataError(message)


def _kit_name(obj, kind: str) -> str:
    name = codelet_name(type(obj))
    _need(name is not None, f"{type(obj).__name__} is not a {kind} of the kit: a pipeline "
          f"the judge rebuilds holds only ipukit.parallel's {kind}s")
    return name


def _settings(obj, cls: type) -> dict:
    """The constructor's arguments that ``obj`` keeps under the same names."""
    names = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    return {n: getattr(obj, n) for n in names if hasattr(obj, n)}


# -- to plain data ---------------------------------------------------------------------------
def to_plain(p: Pipeline) -> dict:
    """``p`` as plain data (see the module's docstring), its weights copied as they are."""
    _need(isinstance(p, Pipeline), f"{type(p).__name__} is not a Pipeline")
    options = {}
    for f in dataclasses.fields(PipelineOptions):
        value = getattr(p.options, f.name)
        if isinstance(value, enum.Enum):
            value = {"enum": type(value).__name__, "name": value.name}
        elif not (value is None or isinstance(value, (bool, numbers.Number, str))):
            value = {"unsupported": str(value)}
        options[f.name] = value
    stages = []
    for stage in p.stages:
        net = stage.net
        members = net.members if isinstance(net, concurrent.Concurrent) else [net]
        stages.append({"ipus": list(stage.ipus), "members": [_layers(m) for m in members]})
    loss = None if p.loss is None else _kit_name(p.loss, "loss")
    opt = None
    if p.optimizer is not None:
        cls = type(p.optimizer)
        opt = {"class": _kit_name(p.optimizer, "optimiser"),
               "settings": _settings(p.optimizer, cls)}
    return {"format": FORMAT, "stages": stages, "options": options, "optimizer": opt,
            "loss": loss}


def _layers(layer) -> list[dict]:
    if type(layer) is nn.Sequential:
        return [d for sub in layer.layers for d in _layers(sub)]
    name = _kit_name(layer, "layer")
    settings = _settings(layer, type(layer))
    if "dtype" in inspect.signature(type(layer).__init__).parameters and layer.params:
        settings["dtype"] = str(next(iter(layer.params.values())).dtype)
    return [{"class": name, "settings": settings,
             "params": {k: backend.to_numpy(v).copy() for k, v in layer.params.items()}}]


# -- back ------------------------------------------------------------------------------------
def from_plain(data) -> Pipeline:
    """The pipeline ``data`` describes, rebuilt with the kit's own classes (NumPy runner)."""
    _need(isinstance(data, dict) and data.get("format") == FORMAT,
          f"not a pipeline description (its 'format' must be {FORMAT!r})")
    options = _options(data.get("options"))
    stages, mapping = [], []
    budget = [MAX_ELEMENTS]
    raw = _list(data.get("stages"), "stages")
    for i, stage in enumerate(raw):
        _need(isinstance(stage, dict), f"stage {i} is not a dict")
        ipus = [_int(q, f"stage {i}'s IPU", 0, MAX_ITEMS) for q in _list(stage.get("ipus"),
                                                                         f"stage {i}'s ipus")]
        members = [[_layer(d, f"stage {i}, member {m}, layer {k}", budget)
                    for k, d in enumerate(_list(member, f"stage {i}'s member {m}"))]
                   for m, member in enumerate(_list(stage.get("members"),
                                                    f"stage {i}'s members"))]
        _need(len(ipus) >= 1 and len(members) == len(ipus),
              f"stage {i} has {len(members)} member(s) on {len(ipus)} IPU(s): one per IPU")
        stages.append(members[0] if len(ipus) == 1 else members)
        mapping.append(ipus[0] if len(ipus) == 1 else ipus)
    steps = (options.gradient_accumulation or 1) * options.repeat_count * max(len(stages), 1)
    _need(steps <= MAX_COUNT, f"{len(stages)} stages running {options.gradient_accumulation} "
          f"micro-batches {options.repeat_count} time(s) make a schedule of about {steps} "
          f"steps, more than the {MAX_COUNT} a rebuilt pipeline may run")
    return Pipeline(stages, mapping, options, _optimizer(data.get("optimizer")),
                    _loss(data.get("loss")))


def _list(x, what: str) -> list:
    _need(isinstance(x, list) and len(x) <= MAX_ITEMS,
          f"{what} must be a list of at most {MAX_ITEMS} items")
    return x


def _int(x, what: str, lo: int, hi: int) -> int:
    _need(isinstance(x, numbers.Integral) and not isinstance(x, bool) and lo <= x <= hi,
          f"{what} must be an integer in {lo}..{hi}, got {x!r}")
    return int(x)


def _options(raw) -> PipelineOptions:
    _need(isinstance(raw, dict), "options must be a dict of PipelineOptions' fields")
    names = {f.name for f in dataclasses.fields(PipelineOptions)}
    unknown = sorted(set(raw) - names)
    _need(not unknown, f"options {unknown} are not PipelineOptions fields")
    raw = dict(raw)
    for k, v in raw.items():
        if isinstance(v, dict) and v.get("enum") in ENUMS:
            members = ENUMS[v["enum"]].__members__
            _need(v.get("name") in members, f"option {k}: {v.get('name')!r} is not one of "
                  f"{v['enum']}'s ({', '.join(members)})")
            v = raw[k] = members[v["name"]]
            continue
        _need(v is None or isinstance(v, (bool, numbers.Number, str)),
              f"option {k}={v!r} cannot be rebuilt: the judge rebuilds pipelines whose "
              "options are numbers, strings or booleans (kit convention)")
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            _int(v, f"option {k}", 0, MAX_COUNT)
    _need(not raw.get("emulate"), "the judge rebuilds the NumPy runner's pipelines (kit "
          "convention): build it without emulate=True")
    return PipelineOptions(**raw)


def _layer(d, what: str, budget: list) -> nn.Layer:
    _need(isinstance(d, dict), f"{what} is not a dict")
    cls = kit_classes(nn.Layer).get(d.get("class"))
    _need(cls is not None and cls not in (nn.Layer, nn.Sequential, concurrent.Concurrent),
          f"{what}: {d.get('class')!r} is not a layer of ipukit.parallel.nn")
    settings = d.get("settings")
    _need(isinstance(settings, dict), f"{what}: its settings must be a dict")
    counts = []
    for k, v in settings.items():
        _need(isinstance(v, (numbers.Number, str)) and not isinstance(v, bool),
              f"{what}: setting {k}={v!r} is not a number or a string")
        if isinstance(v, numbers.Integral):
            counts.append(_int(v, f"{what}: setting {k}", 0, MAX_COUNT))
    # a layer's weights grow as the product of its sizes, a kernel's side counting twice
    size = math.prod(counts) * (max(counts) if len(counts) > 2 else 1)
    _need(size <= budget[0], f"{what}: settings {settings} make a layer of about {size} "
          f"elements, more than the {MAX_ELEMENTS} a description may hold")
    params = d.get("params")
    _need(isinstance(params, dict), f"{what}: its params must be a dict")
    try:
        layer = cls(**settings)
    except TypeError as exc:
        raise PipelineDataError(f"{what}: {cls.__name__}({settings}) failed: {exc}") from None
    _need(sorted(params) == sorted(layer.params),
          f"{what}: {cls.__name__} holds weights {sorted(layer.params)}, the description "
          f"{sorted(params)}")
    for k, v in params.items():
        have = layer.params[k]
        v = np.asarray(v)
        _need(v.shape == have.shape and np.issubdtype(v.dtype, np.number),
              f"{what}: weight {k!r} has shape {v.shape}, {cls.__name__}{settings} holds "
              f"{have.shape}")
        budget[0] -= v.size
        _need(budget[0] >= 0, f"the weights hold more than {MAX_ELEMENTS} elements")
        layer.params[k] = backend.get_xp().asarray(v.astype(have.dtype))
    return layer


def _optimizer(d):
    if d is None:
        return None
    _need(isinstance(d, dict), "optimizer must be a dict")
    cls = kit_classes(optim.Optimizer).get(d.get("class"))
    _need(cls is not None and cls is not optim.Optimizer,
          f"optimizer {d.get('class')!r} is not one of ipukit.parallel.optim's")
    settings = d.get("settings")
    _need(isinstance(settings, dict) and all(
        isinstance(v, numbers.Real) or (isinstance(v, (list, tuple)) and len(v) <= 2 and all(
            isinstance(e, numbers.Real) for e in v)) for v in settings.values()),
        f"{cls.__name__}'s settings must be numbers (or a pair, Adam's betas)")
    try:
        return cls(**{k: v if isinstance(v, numbers.Real) else tuple(v)
                      for k, v in settings.items()})
    except TypeError as exc:
        raise PipelineDataError(f"{cls.__name__}({settings}) failed: {exc}") from None


def _loss(name):
    if name is None:
        return None
    found = {codelet_name(cls): cls for cls in LOSSES}
    _need(name in found, f"loss {name!r} is not one of the kit's ({', '.join(found)})")
    return found[name]()
