"""Graphcore's concurrent-pipeline MNIST: a classifier and its loss sharded over IPUs.

Port of ``run_sharded_mnist.py`` (graphcore/examples v2.5.0,
``code_examples/tensorflow/concurrent_pipeline``). An MLP stage on IPU 0 (Flatten, then
Dense + ReLU per hidden size) feeds either

* ``--pipeline-mode basic``: a classifier stage (Dense to 10 classes) on IPU 1 and a loss
  stage (softmax cross-entropy) on IPU 2, ``device_mapping=[0, 1, 2]``. The original maps
  them ``[0, ALL, 1]`` on 2 IPUs; here every stage has its own IPU, so the Interleaved
  schedule accepts it too; or
* ``--pipeline-mode concurrent``: one concurrent stage on IPUs 1..S (``--shards``, 2),
  ``device_mapping=[0, [1, 2]]``: IPU s holds 10/S classes of the classifier, and the
  softmax cross-entropy runs sharded (all-reduce MAX and ADD of one number per image), so
  the logits are never gathered.

Both modes start from the same weights: Keras's defaults (Glorot-uniform kernels, zero
biases), seeded, with the classifier's kernel from ``default_rng(101)`` as in the
original's basic mode. They train with SGD on the gradients summed over the micro-batches
(TensorFlow's default reduction), so their losses agree to float32 rounding. Each step (one
call: batch size × gradient accumulation × repeat count images, in order, cycling through
the data as the original's ``dataset.repeat()``) prints ``Epoch E, Mean loss: L``, E being
the epochs done before it. The original's settings are ``--hidden-sizes 2560 1280
--gradient-accumulation-count 84 --repeat-count 100 --epochs 30``; the defaults here
(hidden sizes 256 and 128, 12 micro-batches of 8 per update, 10 updates per step) train
one epoch of the bundled 8,000 images in seconds, from a loss of about 2 to about 0.4.

    python -m ipukit.examples.sharded_mnist --pipeline-mode concurrent
    python -m ipukit.examples.sharded_mnist --pipeline-mode basic --emulate

``--emulate`` runs the pipeline's stages as Poplar programs on the emulator
(``pipeline(..., emulate=True)``, IPUs of ``--tiles-per-ipu`` tiles, 16 by default), in
both modes: the concurrent stage's members on their own IPUs and its sharded
cross-entropy's all-reduces as inter-IPU copies and reductions.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from .. import backend
from ..data import load_mnist
from ..parallel import nn, optim, pipeline
from ..parallel.concurrent import ShardedSoftmaxCrossEntropy, split_dense
from ..target import IPUModel
from ._cli import Parser, check_fits, positive_float, positive_int, run

MODES = ("basic", "concurrent")
SCHEDULES = ("Grouped", "Interleaved", "Sequential")
CLASSES = 10


def dense(fan_in: int, fan_out: int, rng: np.random.Generator) -> nn.Dense:
    """``tf.keras.layers.Dense``'s initialisation: Glorot-uniform kernel, zero bias."""
    layer = nn.Dense(fan_in, fan_out)
    limit = math.sqrt(6 / (fan_in + fan_out))
    kernel = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
    layer.params = {"weight": backend.asarray(kernel),
                    "bias": backend.get_xp().zeros(fan_out, dtype=np.float32)}
    return layer


def model(hidden_sizes, seed: int = 0):
    """(the MLP stage's layers, the classifier): the same weights for a given seed."""
    rng = np.random.default_rng(seed)
    widths = [28 * 28, *hidden_sizes]
    mlp: list[nn.Layer] = [nn.Flatten()]
    for fan_in, fan_out in zip(widths, widths[1:]):
        mlp += [dense(fan_in, fan_out, rng), nn.ReLU()]
    return mlp, dense(widths[-1], CLASSES, np.random.default_rng(101))


#: The model's settings and their defaults (the command line's too).
DEFAULTS = {"hidden_sizes": [256, 128], "seed": 0, "shards": 2,
            "gradient_accumulation_count": 12, "pipeline_schedule": "Grouped",
            "repeat_count": 10, "learning_rate": 0.01}


def build(mode: str, args=None, **settings):
    """The pipeline of ``mode`` with the command line's settings ``args``, or with keyword
    ``settings`` (:data:`DEFAULTS` for the rest), e.g. ``build("basic", seed=1)``."""
    s = {k: getattr(args, k, v) for k, v in DEFAULTS.items()} | settings
    mlp, classifier = model(s["hidden_sizes"], s["seed"])
    if mode == "basic":
        stages, mapping, loss = [mlp, [classifier], []], [0, 1, 2], nn.SoftmaxCrossEntropy()
    else:
        shards = list(range(1, s["shards"] + 1))
        stages, mapping = [mlp, split_dense(classifier, s["shards"])], [0, shards]
        loss = ShardedSoftmaxCrossEntropy()
    emulate = s.get("emulate", getattr(args, "emulate", False))
    target = None
    if emulate:
        ipus = max(max(m) if isinstance(m, list) else m for m in mapping) + 1
        tiles = s.get("tiles_per_ipu", getattr(args, "tiles_per_ipu", 16))
        target = IPUModel("ipu2", num_ipus=ipus, tiles_per_ipu=tiles).create_device().target
    return pipeline(stages, mapping, gradient_accumulation_count=s["gradient_accumulation_count"],
                    pipeline_schedule=s["pipeline_schedule"].lower(),
                    repeat_count=s["repeat_count"], optimizer=optim.SGD(s["learning_rate"]),
                    loss=loss, target=target, emulate=emulate)


def train(mode: str, args, images, labels, out=None):
    """Train ``mode`` for ``args.epochs``, printing a line per step.

    Returns (the pipeline, the mean loss of each step, the last step's RunResult).
    """
    out = out or sys.stdout
    p = build(mode, args)
    micro_batches = p.samples_per_run  # per step
    available = len(images) // args.batch_size  # drop_remainder=True
    if available == 0:
        raise SystemExit(f"--batch-size {args.batch_size} is more than the "
                         f"{len(images)} images")
    per_step = micro_batches * args.batch_size
    steps = max(1, (int(args.epochs * len(images)) - 1) // per_step + 1)
    means, result = [], None
    for step in range(steps):
        batch = np.arange(step * micro_batches, (step + 1) * micro_batches) % available
        idx = (batch[:, None] * args.batch_size + np.arange(args.batch_size)).ravel()
        result = p.run(images[idx], labels[idx])
        means.append(float(result.losses.mean()))
        print(f"Epoch {per_step * step / len(images):.1f}, Mean loss: {means[-1]:.3f}",
              file=out, flush=True)
    return p, means, result


def report(p, result, out=None) -> None:
    """Simulated time of the last step, its inter-IPU traffic and the memory per IPU."""
    out = out or sys.stdout
    target = p.target
    print(f"Simulated time of one step on {len(p.ipus)} {target.version} IPUs: "
          f"{result.cycles:,.0f} cycles = {target.cycles_to_us(result.cycles):,.1f} us",
          file=out)
    for kind in ("link", "broadcast", "allreduce", "reduce"):
        recs = [r for r in result.timeline if r.kind == kind]
        if not recs:
            continue
        count = max(sum(r.ipu == q for r in recs) for q in p.ipus)
        busiest = max(sum(r.duration for r in recs if r.ipu == q) for q in p.ipus)
        print(f"  {kind:<9} {count:>5} per IPU, {sum(r.bytes for r in recs):>11,} bytes "
              f"sent, {busiest:>11,.0f} cycles on the busiest IPU", file=out)
    peak = result.peak_memory()
    print("Peak memory per IPU (bytes): "
          + ", ".join(f"IPU {q}: {peak[q]:,}" for q in sorted(peak)), file=out)


def check_sizes(args) -> None:
    """Say what the MLP stage would need on IPU 0 before allocating it (issue 12)."""
    widths = [28 * 28, *args.hidden_sizes]
    params = sum(a * b + b for a, b in zip(widths, widths[1:]))
    mb = args.batch_size * args.gradient_accumulation_count
    acts = 2 * mb * sum(args.hidden_sizes)  # stashed activations of the micro-batches
    check_fits(f"the MLP stage (hidden sizes {args.hidden_sizes}, {params:,} parameters)",
               IPUModel("ipu2").create_device().target, 4 * (2 * params + acts),
               4 * (3 * params + acts))


def _main(args) -> int:
    check_sizes(args)
    data = load_mnist()
    print(f"{args.pipeline_mode} pipeline, schedule {args.pipeline_schedule}, "
          f"{len(data.train_images)} {data.source} MNIST images", flush=True)
    p, _, result = train(args.pipeline_mode, args, data.train_images, data.train_labels)
    report(p, result)
    return 0


def parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m ipukit.examples.sharded_mnist",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--pipeline-mode", choices=MODES, required=True)
    ap.add_argument("--epochs", type=positive_float, default=1.0, help="(the original: 30)")
    ap.add_argument("--batch-size", type=positive_int, default=8, help="micro-batch size")
    d = DEFAULTS
    ap.add_argument("--gradient-accumulation-count", type=positive_int,
                    default=d["gradient_accumulation_count"],
                    help="micro-batches per weight update (the original: 84)")
    ap.add_argument("--repeat-count", type=positive_int, default=d["repeat_count"],
                    help="weight updates per step (the original: 100)")
    ap.add_argument("--learning-rate", type=float, default=d["learning_rate"])
    ap.add_argument("--pipeline-schedule", choices=SCHEDULES, default=d["pipeline_schedule"],
                    type=str.capitalize, help="any case, as pipeline() takes it")
    ap.add_argument("--hidden-sizes", type=positive_int, nargs="+", default=d["hidden_sizes"],
                    help="the MLP's layers (the original: 2560 1280)")
    ap.add_argument("--shards", type=positive_int, default=d["shards"],
                    help="IPUs the concurrent stage splits the 10 classes over")
    ap.add_argument("--seed", type=int, default=d["seed"])
    ap.add_argument("--emulate", action="store_true",
                    help="run the stages as Poplar programs on the IPU emulator")
    ap.add_argument("--tiles-per-ipu", type=positive_int, default=16,
                    help="tiles of each emulated IPU (with --emulate)")
    return ap


def main(argv=None) -> int:
    return run(_main, argv, parser())


if __name__ == "__main__":
    sys.exit(main())
