"""The ``check_*`` functions of lesson 12: MNIST with basic and concurrent pipelines.

Every reference is a real run of Graphcore's concurrent-pipeline MNIST port
(:mod:`ipukit.examples.sharded_mnist`): the basic pipeline's losses and weights for 12.1,
the bytes in a run's timeline for 12.2, the gradient accumulation counts that
``sharded_mnist.build`` accepts for 12.3.

>>> from ipukit.grading import lesson12
>>> r = lesson12.check_common_count(lambda schedule, at_least: at_least)
... # doctest: +ELLIPSIS
WRONG · Exercise 12.3 · a gradient accumulation count both pipelines accept: 0/2 points
   ...
"""

from __future__ import annotations

import copy

import numpy as np

from ipukit.errors import PipelineConfigError
from ipukit.examples import sharded_mnist
from ipukit.parallel import Pipeline, optim
from ipukit.parallel.concurrent import Concurrent

from .feedback import Wrong, as_int, exercise, run

#: What crosses between IPUs: IPU-Link copies between stages and a stage's collectives.
TRAFFIC = ("link", "broadcast", "reduce", "allreduce")


def settings(*argv: str):
    """sharded_mnist's command line with small hidden layers (fast runs)."""
    return sharded_mnist.parser().parse_args(["--pipeline-mode", "basic", *argv])


def _data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0, 1, (n, 28, 28)).astype(np.float32),
            rng.integers(0, sharded_mnist.CLASSES, n))


# -- 12.1 ---------------------------------------------------------------------------------


@exercise("12.1", "the concurrent pipeline", points=3,
          hint="pipeline([mlp, split_dense(classifier, shards)], [0, list(range(1, shards + "
               "1))], gradient_accumulation, 'grouped', optimizer=optimizer, "
               "loss=ShardedSoftmaxCrossEntropy()): the second stage is a list of members, "
               "its device_mapping entry a list of IPUs.")
def check_concurrent_pipeline(concurrent_pipeline):
    """Exercise 12.1: ``concurrent_pipeline(mlp, classifier, shards, gradient_accumulation,
    optimizer)`` → a Pipeline whose classifier and loss run sharded, training as the basic
    pipeline does."""

    def body():
        for hidden, shards, seed in [([16], 2, 1), ([24, 12], 5, 2)]:
            g = 12  # a count both accept: basic has 3 stages, concurrent 2 (Grouped)
            what = f"hidden sizes {hidden}, {shards} shards, gradient accumulation {g}"
            mlp, classifier = sharded_mnist.model(hidden, seed)
            basic = sharded_mnist.build("basic", settings(
                "--hidden-sizes", *map(str, hidden), "--seed", str(seed),
                "--gradient-accumulation-count", str(g), "--repeat-count", "1"))
            p = concurrent_pipeline(copy.deepcopy(mlp), copy.deepcopy(classifier), shards, g,
                                    optim.SGD(0.01))
            _check_structure(p, shards, hidden[-1], what)
            x, y = _data(2 * g * 8, seed)  # two weight updates of 12 micro-batches of 8
            steps = [slice(0, g * 8), slice(g * 8, 2 * g * 8)]
            want = np.concatenate([basic.run(x[s], y[s]).losses.ravel() for s in steps])
            got = np.concatenate([p.run(x[s], y[s]).losses.ravel() for s in steps])
            if not np.allclose(got, want, rtol=1e-4, atol=1e-6):
                i = int(np.argmax(~np.isclose(got, want, rtol=1e-4, atol=1e-6)))
                raise Wrong(f"{what}: the loss of micro-batch {i} is {got[i]:.6f}, the basic "
                            f"pipeline's is {want[i]:.6f}. Both must start from the same "
                            "weights: build the members from the given classifier "
                            "(split_dense), not new layers")
            halves = np.concatenate([m.params["weight"] for m in p.stages[-1].net.members], 1)
            if not np.allclose(halves, basic.stages[1].net.params["weight"], rtol=1e-4,
                               atol=1e-6):
                raise Wrong(f"{what}: same losses, but after training the members' weights "
                            "differ from the basic classifier's: pass the optimizer you "
                            "were given")

    return run("12.1", body)


def _check_structure(p, shards: int, hidden: int, what: str) -> None:
    if not isinstance(p, Pipeline):
        raise Wrong(f"{what}: return the Pipeline that parallel.pipeline(...) builds, got "
                    f"{type(p).__name__}")
    last = p.stages[-1]
    if not isinstance(last.net, Concurrent):
        raise Wrong(f"{what}: the last stage runs on IPU(s) {list(last.ipus)} only. A "
                    "concurrent stage is a list of members (split_dense(classifier, shards)) "
                    "with a list of IPUs in its device_mapping entry")
    if len(last.ipus) != shards:
        raise Wrong(f"{what}: the classifier stage runs on {len(last.ipus)} IPUs "
                    f"{list(last.ipus)}; split it over {shards}")
    cols = sharded_mnist.CLASSES // shards
    for s, m in enumerate(last.net.members):
        shape = tuple(m.params.get("weight", np.zeros(0)).shape)
        if shape != (hidden, cols):
            raise Wrong(f"{what}: member {s} holds a weight of shape {shape}; each holds "
                        f"{cols} of the {sharded_mnist.CLASSES} classes, ({hidden}, {cols}): "
                        "split the classifier by output columns")


# -- 12.2 ---------------------------------------------------------------------------------


def measured_bytes(mode: str, micro_batch: int, hidden: int, shards: int = 2) -> int:
    """Bytes all IPUs send over IPU-Links for micro-batch 0 of a sharded_mnist run."""
    p = sharded_mnist.build(mode, settings(
        "--hidden-sizes", "8", str(hidden), "--batch-size", str(micro_batch),
        "--shards", str(shards), "--repeat-count", "1"))
    x, y = _data(p.samples_per_run * micro_batch, micro_batch)
    r = p.run(x, y)
    return sum(rec.bytes for rec in r.timeline if rec.kind in TRAFFIC and rec.microbatch == 0)


@exercise("12.2", "bytes over IPU-Links per micro-batch", points=3,
          hint="basic: the activations [mb, hidden] go to IPU 1 and their gradient comes "
               "back; the logits [mb, 10] go to IPU 2 and their gradient comes back. "
               "Concurrent: add the broadcast of the stage input and the reduce of its "
               "gradient ((S-1) copies each), the labels (int32) and the loss's two "
               "broadcasts/reduces ((S-1) x mb x 4 each), and two ring all-reduces in which "
               "each of the S IPUs sends ceil(2(S-1)/S x mb x 4) bytes.")
def check_link_bytes(link_bytes):
    """Exercise 12.2: ``link_bytes(mode, micro_batch, hidden, shards)`` → bytes all IPUs
    send between IPUs for one micro-batch's forward and backward."""

    def body():
        for mode, mb, hidden, shards in [("basic", 8, 64, 2), ("concurrent", 8, 64, 2),
                                         ("basic", 4, 30, 5), ("concurrent", 3, 20, 5),
                                         ("concurrent", 16, 128, 2)]:
            what = f"link_bytes({mode!r}, micro_batch={mb}, hidden={hidden}, shards={shards})"
            want = measured_bytes(mode, mb, hidden, shards)
            got = as_int(link_bytes(mode, mb, hidden, shards), what)
            if got != want:
                raise Wrong(f"{what}: a run's timeline records {want:,} bytes sent between "
                            f"IPUs for micro-batch 0, you said {got:,}"
                            + _bytes_diagnosis(mode, mb, hidden, shards, got, want))

    return run("12.2", body)


def _bytes_diagnosis(mode, mb, hidden, shards, got, want) -> str:
    act, small = mb * hidden * 4, mb * 4
    if mode == "basic":
        if got * 2 == want:
            return ". Count the backward too: every gradient goes back the way its input came"
        return ""
    if got == want - 2 * (shards - 1) * act:
        return (". The stage's input is broadcast to the other members' IPUs and their "
                "input gradients are reduced back: (S-1) copies of [mb, hidden] each way")
    ring = -(-2 * (shards - 1) * small // shards)
    if got == want - 2 * shards * ring + 2 * ring:
        return ". Every one of the S IPUs sends its share in a ring all-reduce, not only one"
    return ""


# -- 12.3 ---------------------------------------------------------------------------------


def accepts(schedule: str, count: int) -> dict[str, str]:
    """The error each mode's pipeline raises for ``count`` ("" when it is accepted)."""
    out = {}
    for mode in sharded_mnist.MODES:
        try:
            sharded_mnist.build(mode, settings(
                "--hidden-sizes", "2", "--pipeline-schedule", schedule,
                "--gradient-accumulation-count", str(count)))
            out[mode] = ""
        except PipelineConfigError as exc:
            out[mode] = str(exc)
    return out


@exercise("12.3", "a gradient accumulation count both pipelines accept", points=2,
          hint="Training with N stages, Grouped needs a multiple of 2N and Interleaved a "
               "multiple of N; Sequential takes any count. Basic mode has 3 stages, "
               "concurrent 2: the count must suit both, so take the least common multiple.")
def check_common_count(common_count):
    """Exercise 12.3: ``common_count(schedule, at_least)`` → the smallest gradient
    accumulation count >= ``at_least`` that both sharded_mnist pipelines accept."""

    def body():
        for schedule, at_least in [("Grouped", 1), ("Grouped", 84), ("Grouped", 85),
                                   ("Interleaved", 7), ("Interleaved", 1),
                                   ("Sequential", 5)]:
            what = f"common_count({schedule!r}, at_least={at_least})"
            got = as_int(common_count(schedule, at_least), what)
            if got < at_least:
                raise Wrong(f"{what}: you said {got}, which is below {at_least}")
            errors = accepts(schedule, got)
            for mode, error in errors.items():
                if error:
                    raise Wrong(f"{what}: you said {got}, but the {mode} pipeline "
                                f"({3 if mode == 'basic' else 2} stages) raises "
                                f"PipelineConfigError: {error}")
            smaller = next((c for c in range(at_least, min(got, at_least + 12))
                            if not any(accepts(schedule, c).values())), None)
            if smaller is not None:
                raise Wrong(f"{what}: you said {got}, but {smaller} is accepted by both "
                            "and is smaller")

    return run("12.3", body)
