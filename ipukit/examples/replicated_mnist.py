"""Replicated, pipelined MNIST: what replicas, device iterations and RTS cost, side by side.

PopTorch's pipelining-tutorial network (the blocks B1-B4 of ``pipelined_mnist``, one IPU
each) replicated ``--replicas`` times, so 4 × R IPUs. It trains for ``--epochs`` with the
chosen settings (``poptorch.DataLoader`` arithmetic: one call takes batch size × gradient
accumulation × device iterations × replicas images), prints the held-out accuracy, then
one table of simulated throughput for several settings: one replica or R, one device
iteration per call or many, replicated tensor sharding (RTS) of AdamW's state, more
gradient accumulation. Read it as: device iterations amortise the host sync of each call,
replicas multiply the samples per second but pay an all-reduce per weight update, more
gradient accumulation makes that all-reduce rarer, RTS cuts the optimiser state per IPU.

    python -m ipukit.examples.replicated_mnist --replicas 2 --device-iterations 10
"""

from __future__ import annotations

import sys
import time

from ..data import load_mnist
from ..parallel import DataLoader, PipelinedExecution, call_cost, nn, optim, training_model
from ..target import IPUModel
from ._cli import Parser, non_negative_int, positive_int, run
from .pipelined_mnist import blocks, prepare

SAMPLE_SHAPE = (1, 28, 28)


def build(replicas: int, device_iterations: int, gradient_accumulation: int, rts: bool,
          lr: float = 0.001, seed: int = 0, emulate: bool = False):
    """The tutorial's 4-IPU pipeline replicated ``replicas`` times (4 × R IPUs); with
    ``emulate`` its calls run on the emulator."""
    return training_model(
        blocks(seed), nn.SoftmaxCrossEntropy(), optim.AdamW(lr=lr),
        strategy=PipelinedExecution("B1", "B2", "B3", "B4"),
        gradient_accumulation=gradient_accumulation, device_iterations=device_iterations,
        replication_factor=replicas, replicated_tensor_sharding=rts, emulate=emulate,
        target=IPUModel("ipu2", num_ipus=4 * replicas).create_device().target,
    )


def row(model, batch_size: int) -> dict:
    """Simulated figures of one call of ``model`` with micro-batches of ``batch_size``."""
    cost = call_cost(model, SAMPLE_SHAPE, batch_size)
    collective, state = 0.0, 0
    for q in model.ipus:
        on = [s for s in model.stages if q in s.ipus]
        steps = model.weight_update_steps(on)
        collective = max(collective, sum(c for kind, c, _ in steps if kind != "optimizer"))
        state = max(state, model.static_bytes(on)[2])
    return {"replicas": model.replication_factor, "ipus": model.target.num_ipus,
            "di": model.device_iterations, "ga": model.gradient_accumulation,
            "rts": model.replicated_optimizer_state_sharding, "samples": cost.samples,
            "sync": cost.host_sync / cost.cycles,
            "allreduce": model.device_iterations * collective / cost.cycles,
            "state": state, "throughput": cost.samples_per_second}


def settings(args) -> list[tuple[int, int, int, bool]]:
    """(replicas, device iterations, gradient accumulation, RTS) rows of the table."""
    r, di, ga = args.replicas, args.device_iterations, args.gradient_accumulation
    rows = [(1, 1, ga, False), (1, di, ga, False), (r, 1, ga, False), (r, di, ga, False),
            (r, di, ga, True), (r, di, 2 * ga, False)]
    return list(dict.fromkeys(rows))  # without repeats (e.g. --replicas 1)


def table(args) -> str:
    """One line per setting: samples per call, where the time goes, throughput."""
    head = (f"{'replicas':>8} {'IPUs':>4} {'dev.iter':>8} {'grad.acc':>8} {'RTS':>3} "
            f"{'samples/call':>12} {'host sync':>9} {'all-reduce':>10} "
            f"{'opt. state/IPU':>14} {'samples/s':>10}")
    lines = [f"Simulated throughput (ipu2, 4 IPUs per replica, micro-batch "
             f"{args.batch_size}, AdamW):", head]
    for setting in settings(args):
        f = row(build(*setting), args.batch_size)
        lines.append(
            f"{f['replicas']:>8} {f['ipus']:>4} {f['di']:>8} {f['ga']:>8} "
            f"{'yes' if f['rts'] else 'no':>3} {f['samples']:>12,} {f['sync']:>9.1%} "
            f"{f['allreduce']:>10.1%} {f['state'] / 1024:>10,.0f} KiB {f['throughput']:>10,.0f}"
        )
    return "\n".join(lines)


def train(args, out=None):
    """Train with the command line's settings; return (model, held-out accuracy)."""
    out = out or sys.stdout
    data = load_mnist()
    model = build(args.replicas, args.device_iterations, args.gradient_accumulation,
                  args.rts, args.lr, args.seed)
    loader = DataLoader(model, prepare(data.train_images), data.train_labels,
                        batch_size=args.batch_size, shuffle=True, seed=args.seed)
    print(f"Training on {len(loader) * loader.combined_batch_size} of "
          f"{len(data.train_images)} {data.source} MNIST images: {len(loader)} calls of "
          f"{loader.combined_batch_size} ({args.batch_size} x {args.gradient_accumulation} "
          f"x {args.device_iterations} x {args.replicas} replicas) on "
          f"{model.target.num_ipus} IPUs", file=out)
    for epoch in range(args.epochs):
        losses = [float(model.run(x, y).outputs.mean()) for x, y in loader]
        print(f"Epoch {epoch + 1}, final loss of the last call: {losses[-1]:.4f}", file=out)
    logits = model.predict(prepare(data.test_images))
    return model, float((logits.argmax(axis=1) == data.test_labels).mean())


def main(argv=None) -> int:
    parser = Parser(prog="python -m ipukit.examples.replicated_mnist",
                    description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=positive_int, default=2)
    parser.add_argument("--device-iterations", type=positive_int, default=10)
    parser.add_argument("--gradient-accumulation", type=positive_int, default=10)
    parser.add_argument("--batch-size", type=positive_int, default=8, help="micro-batch size")
    parser.add_argument("--rts", action="store_true",
                        help="replicated tensor sharding of AdamW's state")
    parser.add_argument("--epochs", type=non_negative_int, default=1, help="0: only the table")
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--seed", type=int, default=0)
    return run(_main, argv, parser)


def _main(args) -> int:
    t0 = time.perf_counter()
    if args.epochs:
        _, accuracy = train(args)
        print(f"Accuracy on the held-out images: {100 * accuracy:.2f}%")
    print(table(args))
    print(f"Wall-clock time: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
