"""PopTorch's pipelining tutorial on MNIST: blocks B1-B4 on 4 IPUs, trained with AdamW.

Port of ``graphcore/examples: tutorials/tutorials/pytorch/pipelining``. The network is the
tutorial's: B1 = Conv(1->10, 5) + MaxPool(2) + ReLU, B2 = Conv(10->20, 5) + MaxPool(2) +
ReLU, B3 = Flatten + Linear(320->256) + ReLU, B4 = Linear(256->10) with the loss (the
tutorial's dropout is left out). ``--strategy pipelined`` runs PopTorch's
``PipelinedExecution("B1", "B2", "B3", "B4")``; ``sharded`` runs ``ShardedExecution``.
Both give the same weights; only the simulated time differs. Each call ("step") takes
batch size × gradient accumulation × device iterations images and makes one weight
update per device iteration. The tutorial's batch size is 40 on 60,000 images (150
updates per epoch); on the bundled 8,000 the default here is 8 (100 updates per epoch).

    python -m ipukit.examples.pipelined_mnist --strategy pipelined
"""

from __future__ import annotations

import sys
import time

import numpy as np

from ..data import load_mnist
from ..parallel import (
    Block,
    PipelinedExecution,
    ShardedExecution,
    nn,
    optim,
    training_model,
)
from ..target import IPUModel
from ._cli import Parser, positive_int, run

#: MNIST's mean and standard deviation (``transforms.Normalize((0.1307,), (0.3081,))``).
MEAN, STD = 0.1307, 0.3081
STRATEGIES = {"pipelined": PipelinedExecution, "sharded": ShardedExecution}


def blocks(seed: int = 0, dtype: str = "float32") -> list[Block]:
    """The tutorial's network as four blocks, pinned to IPUs 0-3."""
    rng = np.random.default_rng(seed)
    return [
        Block("B1", nn.Conv2D(1, 10, 5, rng=rng, dtype=dtype), nn.MaxPool2D(), nn.ReLU(),
              ipu_id=0),
        Block("B2", nn.Conv2D(10, 20, 5, rng=rng, dtype=dtype), nn.MaxPool2D(), nn.ReLU(),
              ipu_id=1),
        Block("B3", nn.Flatten(), nn.Dense(320, 256, rng=rng, dtype=dtype), nn.ReLU(),
              ipu_id=2),
        Block("B4", nn.Dense(256, 10, rng=rng, dtype=dtype), ipu_id=3),
    ]


def build(strategy: str, args, dtype: str = "float32"):
    """A PopTorch-style training model for ``strategy`` with the command line's settings."""
    return training_model(
        blocks(args.seed, dtype),
        nn.SoftmaxCrossEntropy(),
        optim.AdamW(lr=args.lr),
        strategy=STRATEGIES[strategy]("B1", "B2", "B3", "B4"),
        gradient_accumulation=args.gradient_accumulation,
        device_iterations=args.device_iterations,
        offload_optimizer_state=args.offload_optimiser,
        target=IPUModel("ipu2", num_ipus=4).create_device().target,
    )


def prepare(images: np.ndarray) -> np.ndarray:
    """(n, 28, 28) in [0, 1] -> normalised (n, 1, 28, 28)."""
    return ((images - MEAN) / STD)[:, None].astype(np.float32)


def progress(done: int, total: int, loss: float, width: int = 30) -> str:
    filled = width * done // total
    return f"\r{done}/{total} [{'=' * filled}{'.' * (width - filled)}] loss {loss:.4f}"


def train(args, out=None):
    """Train for ``args.epochs``; return (model, held-out accuracy, held-out images)."""
    out = out or sys.stdout
    data = load_mnist()
    x, y = prepare(data.train_images), data.train_labels
    model = build(args.strategy, args)
    per_step = model.samples_per_run * args.batch_size
    steps = len(x) // per_step
    if steps == 0:
        raise SystemExit(f"one step takes {per_step} images but there are only {len(x)}")
    print(f"Training on {steps * per_step} of {len(x)} {data.source} MNIST images, "
          f"{per_step} per step, strategy {args.strategy}", file=out)
    rng = np.random.default_rng(args.seed)
    for epoch in range(args.epochs):
        order = rng.permutation(len(x))
        print(f"Epoch {epoch + 1}/{args.epochs}", file=out)
        for s in range(steps):
            idx = order[s * per_step:(s + 1) * per_step]
            result = model.run(x[idx], y[idx])
            print(progress(s + 1, steps, float(result.losses[-1].mean())), end="", file=out,
                  flush=True)
        print(file=out)
    logits = model.predict(prepare(data.test_images))
    accuracy = float((logits.argmax(axis=1) == data.test_labels).mean())
    return model, accuracy, len(data.test_labels)


def main(argv=None) -> int:
    parser = Parser(prog="python -m ipukit.examples.pipelined_mnist",
                    description=__doc__.split("\n")[0])
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="pipelined")
    parser.add_argument("--offload-optimiser", action="store_true",
                        help="keep AdamW's state in host memory")
    parser.add_argument("--gradient-accumulation", type=positive_int, default=10)
    parser.add_argument("--device-iterations", type=positive_int, default=10)
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument("--epochs", type=positive_int, default=1)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=0)
    return run(_main, argv, parser)


def _main(args) -> int:
    t0 = time.perf_counter()
    # Both strategies are built first, so settings one rejects fail before any training.
    others = {name: build(name, args) for name in STRATEGIES if name != args.strategy}
    model, accuracy, n_test = train(args)
    print(f"Accuracy on {n_test} held-out images: {100 * accuracy:.2f}%")
    shape = (1, 28, 28)
    for name in sorted(STRATEGIES):
        m = others.get(name, model)
        cycles = m.cycles_per_run(shape, args.batch_size) * args.device_iterations
        us = m.target.cycles_to_us(cycles)
        print(f"Simulated time per step ({name}): {cycles:,.0f} cycles = {us:,.1f} us")
    print(f"Wall-clock time: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
