"""The host and the IPU, measured side by side in one run (ipukit.host).

1. Loops: one accumulation step (64 floats streamed in over 16 tiles, summed, the total
   streamed out) run N times from Python (N ``Engine.run`` calls) and once as
   ``loops.repeat(N, ...)`` (one call): the emulator's own wall time per step (medians)
   and the simulated cycles of both, whose ratio is N (H + B) / (H + N B).
2. Datasets: ``benchmark_dataset`` on the bundled MNIST split in batches of 32, read two
   ways (NumPy slices; a per-sample Python generator that normalises each image), against
   the emulated IPU's rate of consuming those batches (stream copy + a sum on every tile).

Run: ``.venv/bin/python benchmarks/bench_host.py [--steps 1000] [--repeats 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ipukit as ipu
from ipukit import host
from ipukit.data import load_mnist


class AddSum(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    total = ipu.InOut(ipu.FLOAT)

    def compute(self):
        self.total[...] += self.x.sum(axis=-1)


def accumulate_engine(data, iterations, tiles, version="ipu2"):
    """An engine whose program 0 runs ``iterations`` accumulation steps over ``data``'s
    rows (each row spread over the tiles, one AddSum per tile), outfeeding the totals."""
    dev = ipu.IPUModel(version, tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    infeed = host.InfeedQueue(data, repeat=True)
    outfeed = host.OutfeedQueue(host.OutfeedMode.LAST)
    x = infeed.bind(g).flatten()
    chunk = -(-x.num_elements() // tiles)
    parts = range(0, x.num_elements(), chunk)
    totals = g.add_variable(ipu.FLOAT, [len(parts)], "totals")

    def body(totals, x):
        cs = g.add_compute_set("accumulate")
        for i, begin in enumerate(parts):
            g.set_tile_mapping(totals[i], i)
            g.add_vertex(cs, AddSum, {"x": x.flatten()[begin:begin + chunk],
                                      "total": totals[i]}, tile=i)
        return [ipu.Execute(cs), outfeed.enqueue(totals)]

    eng = ipu.Engine(g, host.loops.repeat(iterations, body, totals, infeed))
    eng.load(dev)
    infeed.connect(eng)
    outfeed.connect(eng)
    return eng


def loops_section(steps, repeats):
    data = np.random.default_rng(0).random((steps, 64), dtype=np.float32)
    device = accumulate_engine(data, steps, 16)
    python = accumulate_engine(data, 1, 16)

    def host_loop():
        for _ in range(steps):
            python.run()

    times = {"host loop": [], "device loop": []}
    for _ in range(repeats):  # alternate, so both share the machine's load
        for name, fn in (("host loop", host_loop), ("device loop", device.run)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    wall = {k: statistics.median(v) for k, v in times.items()}
    sim = {"host loop": python.trace.total_cycles / python.trace.num_runs * steps,
           "device loop": device.trace.total_cycles / device.trace.num_runs}
    clock = device.target.clock_hz
    print(f"Loops: {steps} steps of 64 floats over 16 tiles (ipu2), medians of {repeats}")
    print(f"  {'':<12}{'emulator us/step':>18}{'simulated cycles':>18}{'simulated us':>14}")
    for k in wall:
        print(f"  {k:<12}{wall[k] / steps * 1e6:>18.1f}{sim[k]:>18,.0f}"
              f"{sim[k] / clock * 1e6:>14.1f}")
    print(f"  host/device: emulator {wall['host loop'] / wall['device loop']:.2f}x, "
          f"simulated {sim['host loop'] / sim['device loop']:.2f}x")


def dataset_section(repeats):
    images = load_mnist().train_images.reshape(-1, 784)  # float32 in [0, 1]
    batch, n = 32, images.shape[0] // 32
    steps = 64  # one Engine.run of 64 batches: the host sync is amortised
    eng = accumulate_engine(images[:batch * steps].reshape(steps, batch * 784), steps, 1472)
    eng.run()
    ipu_rate = host.simulated_throughput(eng.trace, steps)
    target = eng.trace.target  # the ipu2 preset: the IPUModel's 6 B/cycle host link
    link = target.host_link_bytes_per_cycle * target.clock_hz

    def per_sample():
        for row in images:
            yield (row - row.mean()) / (row.std() + 1e-6)

    pipelines = {
        "NumPy slices": lambda: host.InfeedQueue(images, batch_size=batch,
                                                 drop_remainder=True),
        "Python per sample": lambda: host.InfeedQueue(per_sample(), batch_size=batch,
                                                      drop_remainder=True),
    }
    print(f"\nDatasets: MNIST ({images.shape[0]} images), batches of {batch} "
          f"({batch * 784 * 4:,} B); emulated ipu2 (1472 tiles) consumes "
          f"{ipu_rate:,.0f} batches/s; its host link carries "
          f"{link / (batch * 784 * 4):,.0f}")
    print(f"  {'pipeline':<20}{'batches/s':>12}{'GB/s':>8}   bottleneck")
    for name, make in pipelines.items():
        rates = [host.benchmark_dataset(make(), 1, n, ipu_elements_per_second=ipu_rate,
                                        target=target, print_stats=False)
                 for _ in range(repeats)]
        r = sorted(rates, key=lambda r: r.elements_per_second)[len(rates) // 2]
        print(f"  {name:<20}{r.elements_per_second:>12,.0f}"
              f"{r.bytes_per_second / 1e9:>8.2f}   {r.bottleneck}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    loops_section(args.steps, args.repeats)
    dataset_section(args.repeats)


if __name__ == "__main__":
    main()
