"""Model parallelism: schedule construction at scale, and the pipeline runner's overhead.

    .venv/bin/python benchmarks/bench_parallel.py

1. ``schedule(kind, 64, 1024)`` (131,072 ops) and its ``bubble()`` for every kind.
2. One pipeline run of PopTorch's MNIST network (4 stages, gradient accumulation 10,
   micro-batch 8, AdamW) through ``Pipeline.run`` (schedule order, FIFOs, costs, timeline,
   memory record) against the same arithmetic without scheduling: each micro-batch's
   forward and backward through the same layers, gradients summed, AdamW once.
3. The same pipeline on the emulator (``emulate=True``) against the NumPy runner: lesson
   08's MNIST classifier (Dense 784-256-256-256-10, 4 IPUs of 16 tiles, G=8, micro-batch
   32): ``compile(x, labels)`` (building, compiling and loading the Poplar programs, as
   PopTorch's ``PoplarExecutor.compile``), the first run after it and later runs; the
   first call of a new model is compile + first run.
4. ``build``: that first call alone, split into ``Engine`` (compile and load) and the rest
   (``bench_parallel.py build`` runs only this part).
Medians of repeated runs, measured side by side in one process.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import ipukit as ipu
from ipukit import backend
from ipukit.data import load_mnist
from ipukit.examples import pipelined_mnist
from ipukit.parallel import KINDS, nn, optim, schedule


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        backend.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_schedules(n=64, g=1024, repeats=5):
    print(f"schedule({n} stages, {g} micro-batches): {2 * n * g:,} ops; medians of {repeats}")
    print(f"{'kind':<12} {'build s':>8} {'bubble() s':>11}")
    for kind in KINDS:
        build = median_time(lambda kind=kind: schedule(kind, n, g), repeats)
        s = schedule(kind, n, g)
        bub = median_time(s.bubble, repeats)
        print(f"{kind:<12} {build:8.3f} {bub:11.3f}")


def plain_step(stages, loss, opt, x, y, g):
    """Gradient accumulation without a schedule: the same layers, in micro-batch order."""
    nets = [s.net for s in stages]
    acc = [dict() for _ in nets]
    for m in range(g):
        h, caches = backend.asarray(x[m]), []
        for net in nets:
            h, c = net.forward(h)
            caches.append(c)
        _, lc = loss.forward(h, backend.asarray(y[m]))
        d = loss.backward(lc)
        for k in reversed(range(len(nets))):
            nets[k].zero_grad()
            d = nets[k].backward(d, caches[k])
            for key, v in nets[k].grads.items():
                if key in acc[k]:
                    acc[k][key] += v
                else:
                    acc[k][key] = v.copy()
    grads = {f"{k}.{key}": v * (1.0 / g) for k, a in enumerate(acc) for key, v in a.items()}
    opt.step({f"{k}.{key}": p for k, n in enumerate(nets) for key, p in n.params.items()},
             grads)


def bench_runner(repeats=15):
    class Args:
        strategy, offload_optimiser, gradient_accumulation = "pipelined", False, 10
        device_iterations, batch_size, lr, seed = 1, 8, 0.001, 0

    d = load_mnist()
    x = pipelined_mnist.prepare(d.train_images[:80])
    y = d.train_labels[:80]
    xs, ys = x.reshape(10, 8, 1, 28, 28), y.reshape(10, 8)
    print(f"\nOne pipeline run, MNIST network, 4 stages, G=10, micro-batch 8; medians of "
          f"{repeats}")
    print(f"{'strategy':<10} {'runner ms':>10} {'plain ms':>9} {'ratio':>6}")
    for strategy in ("pipelined", "sharded"):
        Args.strategy = strategy
        model = pipelined_mnist.build(strategy, Args)
        ref = pipelined_mnist.build(strategy, Args)
        runs, plains = [], []
        for _ in range(repeats):  # alternate, so both see the same machine load
            runs.append(median_time(lambda model=model: model.run(x, y), 1))
            plains.append(median_time(lambda ref=ref: plain_step(
                ref.stages, nn.SoftmaxCrossEntropy(), ref.optimizer, xs, ys, 10), 1))
        run, plain = statistics.median(runs), statistics.median(plains)
        print(f"{strategy:<10} {1e3 * run:10.1f} {1e3 * plain:9.1f} {run / plain:6.2f}")
    assert isinstance(model.optimizer, optim.AdamW)


def lesson08_model(strategy, emulate):
    from ipukit.parallel.pipelining import (
        Block,
        PipelinedExecution,
        ShardedExecution,
        training_model,
    )

    blocks = [Block("L0", nn.Dense(784, 256, rng=0), nn.ReLU()),
              Block("L1", nn.Dense(256, 256, rng=1), nn.ReLU()),
              Block("L2", nn.Dense(256, 256, rng=2), nn.ReLU()),
              Block("L3", nn.Dense(256, 10, rng=3))]
    target = ipu.IPUModel("ipu2", num_ipus=4, tiles_per_ipu=16).create_device().target
    cls = PipelinedExecution if strategy == "pipelined" else ShardedExecution
    return training_model(blocks, nn.SoftmaxCrossEntropy(), optim.SGD(0.5),
                          cls("L0", "L1", "L2", "L3"), gradient_accumulation=8,
                          target=target, emulate=emulate)


def bench_emulated(repeats=3, calls=5):
    """Per new model, as PopTorch splits it: ``compile(x, labels)`` (build, compile and load
    the Poplar programs, ``PoplarExecutor.compile``), the first run after it, later runs."""
    d = load_mnist()
    x = (d.train_images[:256].reshape(256, 784) / 255).astype(np.float32)
    y = d.train_labels[:256]
    print(f"\nLesson 08's MNIST pipeline on the emulator vs the NumPy runner (4 IPUs x 16 "
          f"tiles, G=8, micro-batch 32); medians of {repeats}")
    print(f"{'strategy':<10} {'numpy ms':>9} {'compile ms':>11} {'1st run ms':>11} "
          f"{'later ms':>9} {'first call/numpy':>17} {'later/numpy':>12}")
    for strategy in ("pipelined", "sharded"):
        comps, firsts, laters, plains = [], [], [], []
        for _ in range(repeats):
            ref, emu = lesson08_model(strategy, False), lesson08_model(strategy, True)
            plains.append(median_time(lambda ref=ref: ref.run(x, y), calls))
            comps.append(median_time(lambda emu=emu: emu.compile(x, y), 1))
            firsts.append(median_time(lambda emu=emu: emu.run(x, y), 1))
            laters.append(median_time(lambda emu=emu: emu.run(x, y), calls))
        plain, comp, first, later = (statistics.median(v)
                                     for v in (plains, comps, firsts, laters))
        print(f"{strategy:<10} {1e3 * plain:9.1f} {1e3 * comp:11.1f} {1e3 * first:11.1f} "
              f"{1e3 * later:9.1f} {(comp + first) / plain:17.1f} {later / plain:12.1f}")


def bench_build(repeats=5):
    """The first call alone, split: ``Engine`` (compile and load) and the rest (building the
    stages from PopLibs ops, and one run)."""
    from ipukit.parallel.emulated import pipeline as emulated  # noqa: PLC0415

    d = load_mnist()
    x = (d.train_images[:256].reshape(256, 784) / 255).astype(np.float32)
    y = d.train_labels[:256]
    engine = emulated.Engine
    spent = []

    class Timed(engine):
        def __init__(self, *args, **kwargs):
            t = time.perf_counter()
            super().__init__(*args, **kwargs)
            spent.append(time.perf_counter() - t)

    emulated.Engine = Timed
    try:
        firsts = [median_time(lambda: lesson08_model("pipelined", True).run(x, y), 1)
                  for _ in range(repeats)]
    finally:
        emulated.Engine = engine
    first, eng = statistics.median(firsts), statistics.median(spent)
    print(f"\nLesson 08's pipeline, first call of a new model; medians of {repeats}")
    print(f"first {1e3 * first:.0f} ms: Engine (compile + load) {1e3 * eng:.0f} ms, "
          f"build + run {1e3 * (first - eng):.0f} ms")


if __name__ == "__main__":
    import sys

    print(f"backend: {backend.name()}, numpy {np.__version__}")
    if sys.argv[1:] == ["build"]:
        bench_build()
    else:
        bench_schedules()
        bench_runner()
        bench_emulated()
        bench_build()
