"""PopTorch's pipelined MNIST, timed: throughput across accumulation, device iterations, replicas.

The PopTorch pipelining tutorial (``graphcore/examples``
``tutorials/tutorials/pytorch/pipelining``) trains its MNIST network as four blocks on four
IPUs (``PipelinedExecution("B1", "B2", "B3", "B4")``, AdamW) and sets "how gradient
accumulation and device iteration hyperparameters impact performance"; the efficient
data-loading tutorial (``tutorials/tutorials/pytorch/efficient_data_loading``) measures
throughput as images per call ÷ seconds, with replicas. This study times one call of that
model (``model(x, labels)``) for each setting and reports its throughput:

* each call's cycles come from the emulator (``training_model(..., emulate=True)``,
  :func:`emulated`): one ``Engine.run`` per call (its host sync), each micro-batch's
  images and labels streamed in over the host link and its loss out, PopART's pipeline
  cycles (each stage's compute, then the cycle's inter-IPU copies as one exchange:
  ``popprograms.cpp``, ``addPipelineCycle``), the all-reduce across replicas and AdamW's
  update as Poplar programs; the trace's cycles converted to seconds at the target's clock
  (``ipu2``: 1.33 GHz). The emulator's cycles do not depend on the data, so ONE call is
  emulated per micro-batch size and replica count (accumulation ``BASE`` = 8, two device
  iterations) and every setting is read from its trace (:func:`measure_emulated`; each
  rule checked against directly emulated calls in ``tests/test_pipelining_throughput.py``):
  the default sweep takes about 15 s of CPU;
* the **plateau** is what no amount of accumulation or device iterations can beat: one
  micro-batch per steady-state pipeline cycle (``t_step``), times the replicas;
* ``--cost-model`` takes the figures from the kit's cost model instead
  (:func:`~ipukit.parallel.call_cost`, every rate from :mod:`ipukit.cost`, no Poplar
  program): the same parts, each op's FLOPs and bytes costed, lock-step with a sync per
  cycle (:func:`measure`); its plateau adds a micro-batch's images over the host link.

(kit convention: ``--full`` emulates up to ``EMULATED_MAX_REPLICAS`` replicas, each
replica's IPUs built anew; the default sweep stops at 2 replicas.)

Read it as the tutorials do: more gradient accumulation fills the pipeline (its ramp-up and
ramp-down, the bubble, are paid once per run), so the throughput rises towards the plateau
and then stops helping; device iterations amortise the host sync of each call; replicas
multiply the images per call but pay an all-reduce per weight update.

    python -m ipukit.examples.pipelining_throughput [--full] [--cost-model] [--plot PNG]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import numpy as np

from ..parallel import call_cost
from ..parallel.replication import LABEL_BYTES
from ._cli import Parser, positive_int, run
from .replicated_mnist import SAMPLE_SHAPE, build

#: Settings swept (small: fast enough for the test suite; ``--full``: the whole study).
SWEEPS = {
    "small": {"ga": (7, 14, 28, 56), "di": (1, 10, 100), "replicas": (1, 2)},
    "full": {"ga": (7, 10, 14, 20, 28, 40, 56, 80, 112, 160, 224, 320, 448),
             "di": (1, 2, 5, 10, 20, 50, 100, 200, 500), "replicas": (1, 2, 4, 8, 16)},
}
#: The pipeline's stages (PopART: 2N - 1 for N = 4 IPUs); accumulation must reach them.
PIPELINE_STAGES = 7
#: The accumulation of the emulated call every setting is read from (one steady-state
#: cycle past the pipeline's fill).
BASE = PIPELINE_STAGES + 1
#: The largest accumulation ``--gradient-accumulation`` takes (kit convention).
MAX_ACCUMULATION = 10_000
#: The most replicas the emulated study builds (kit convention: 16 IPUs, about 2.2 GB).
EMULATED_MAX_REPLICAS = 4


def measure(batch_size: int, ga: int, di: int, replicas: int) -> dict:
    """One call of the tutorial's model with these settings: its cycles, by part, and its
    throughput (images per second at the target's clock)."""
    model = build(replicas, di, ga, rts=False)
    cost = call_cost(model, SAMPLE_SHAPE, batch_size)
    run_cycles = model.cycles_per_run(SAMPLE_SHAPE, batch_size)
    update = 0.0
    for q in model.ipus:
        steps = model.weight_update_steps([s for s in model.stages if q in s.ipus])
        update = max(update, sum(c for kind, c, _ in steps if kind != "optimizer"))
    return {"replicas": replicas, "ipus": model.target.num_ipus, "di": di, "ga": ga,
            "batch_size": batch_size, "samples": cost.samples, "cycles": cost.cycles,
            "host": cost.host_sync + cost.host_io, "allreduce": di * update,
            "run": run_cycles, "seconds": cost.seconds,
            "throughput": cost.samples_per_second, "plateau": plateau(model, batch_size),
            "no_sync": cost.samples * cost.clock_hz / (cost.cycles - cost.host_sync),
            "source": "cost model"}


def plateau(model, batch_size: int) -> float:
    """Images per second with no bubble and no per-call cost: each replica finishes one
    micro-batch per steady-state step and streams its images and labels in meanwhile."""
    shape, mb = SAMPLE_SHAPE, batch_size
    g = model.gradient_accumulation
    longer = build(model.replication_factor, 1, g + 1, rts=False)
    same = build(model.replication_factor, 1, g, rts=False)
    t_step = longer.cycles_per_run(shape, mb) - same.cycles_per_run(shape, mb)
    per_sample = SAMPLE_SHAPE[0] * SAMPLE_SHAPE[1] * SAMPLE_SHAPE[2] * 4 + LABEL_BYTES
    io = mb * per_sample / model.target.host_link_bytes_per_cycle
    return model.replication_factor * mb * model.target.clock_hz / (t_step + io)


@functools.cache
def emulated(batch_size: int, replicas: int = 1) -> dict:
    """ONE emulated call of the tutorial's model (zeros: the cycles do not depend on the
    data) per micro-batch size and replica count, at accumulation ``BASE`` with two device
    iterations, read from its trace: the host sync (``host``); the cycles of a call of one
    iteration (``one``: its events are the first iteration's; the emulator times each
    from the ones before) and of two (``two``); ``t_step``, one steady-state pipeline
    cycle: from the end of the copies of cycle P - 1 to the end of those of cycle P (each
    joins every IPU of a replica; cycle P - 1 is the one where the last stage, B0, runs
    its first micro-batch, which copies its gradients instead of adding them); per
    iteration, the cycles of the stream copies and of the all-reduce (the ``gradients/``
    steps: its ring's copies and adds), each on the IPU that spends the most on them."""
    g = BASE
    model = build(replicas, 2, g, rts=False, emulate=True)
    n = replicas * 2 * g * batch_size
    result = model.run(np.zeros((n,) + SAMPLE_SHAPE, np.float32), np.zeros(n, np.int64))
    trace = result.trace
    assert trace.num_runs == 1  # a fresh model: the trace is this call's
    starts = np.asarray(trace._starts, np.float64)
    ends = starts + np.array([trace.steps[i].cycles for i in trace._step_ids])
    first = max(o.end for o in result.op_steps if o.run == 0)  # the first iteration's end
    copy_end = {o.step: ends[o.first:o.end].max() for o in result.op_steps
                if o.phase == "copy" and o.run == 0}
    per_ipu: dict = {"host": {}, "stream": {}, "allreduce": {0: 0.0}}
    for st in trace.executed_steps():
        kind = "allreduce" if st.name.startswith(("gradients/", "Copy gradients/")) \
            else st.kind
        for q in st.ipus if kind in per_ipu else ():
            per_ipu[kind][q] = per_ipu[kind].get(q, 0.0) + st.cycles
    most = {k: max(v.values()) for k, v in per_ipu.items()}
    return {"one": float(ends[:first].max() - starts[0]), "two": result.cycles,
            "t_step": float(copy_end[g - 1] - copy_end[g - 2]), "clock_hz": result.clock_hz,
            "ipus": model.target.num_ipus, "host": most["host"],
            "stream": most["stream"] / 2, "allreduce": most["allreduce"] / 2}


def measure_emulated(batch_size: int, ga: int, di: int, replicas: int) -> dict:
    """One call of the tutorial's model with these settings, from the emulated call of
    :func:`emulated` (the default): its cycles, by part, and its throughput (images per
    second at the target's clock). Each micro-batch more than ``BASE`` adds one
    steady-state cycle (``t_step``) to each iteration (``PIPELINE_STAGES`` has one less);
    the first iteration costs what the call of one did, each later one what the second
    added (the next iteration starts on some IPUs while the last ones finish the update);
    the streams grow with the images. Each rule is checked against directly emulated
    calls in ``tests/test_pipelining_throughput.py``."""
    build(replicas, di, ga, rts=False)  # what PopTorch refuses, refused in its words
    e = emulated(batch_size, replicas)
    more = (ga - BASE) * e["t_step"]  # (one cycle less at PIPELINE_STAGES)
    cycles = e["one"] + more + (di - 1) * (e["two"] - e["one"] + more)
    samples = replicas * batch_size * ga * di
    clock = e["clock_hz"]
    return {"replicas": replicas, "ipus": e["ipus"], "di": di, "ga": ga,
            "batch_size": batch_size, "samples": samples, "cycles": cycles,
            "host": e["host"] + di * e["stream"] * ga / BASE, "sync": e["host"],
            "allreduce": di * e["allreduce"], "run": e["two"] - e["one"] + more,
            "seconds": cycles / clock, "throughput": samples * clock / cycles,
            "plateau": replicas * batch_size * clock / emulated(batch_size, 1)["t_step"],
            "no_sync": samples * clock / (cycles - e["host"]), "source": "emulated"}


def study(batch_size: int, ga: int, di: int, sweep: dict, measure=measure_emulated
          ) -> dict[str, list[dict]]:
    """The three sweeps: accumulation (``di`` fixed, one replica), device iterations
    (``ga`` fixed, one replica), replicas (``ga`` and ``di`` fixed); each row from the
    emulator, or with ``measure=measure`` from the cost model."""
    return {"ga": [measure(batch_size, g, di, 1) for g in sweep["ga"]],
            "di": [measure(batch_size, ga, d, 1) for d in sweep["di"]],
            "replicas": [measure(batch_size, ga, di, r) for r in sweep["replicas"]]}


def table(rows: dict[str, list[dict]]) -> str:
    """The study as text: one block per sweep."""
    head = (f"{'replicas':>8} {'IPUs':>4} {'dev.iter':>8} {'grad.acc':>8} "
            f"{'images/call':>11} {'us/call':>9} {'host':>6} {'all-reduce':>10} "
            f"{'images/s':>9} {'of plateau':>10}")
    titles = {"ga": "more gradient accumulation (one replica)",
              "di": "more device iterations (one replica)",
              "replicas": "more replicas"}
    lines = []
    for key, title in titles.items():
        lines += [f"-- {title}", head]
        for r in rows[key]:
            lines.append(
                f"{r['replicas']:>8} {r['ipus']:>4} {r['di']:>8} {r['ga']:>8} "
                f"{r['samples']:>11,} {r['seconds'] * 1e6:>9,.1f} "
                f"{r['host'] / r['cycles']:>6.1%} {r['allreduce'] / r['cycles']:>10.1%} "
                f"{r['throughput']:>9,.0f} {r['throughput'] / r['plateau']:>10.1%}")
    return "\n".join(lines)


def summary(rows: dict[str, list[dict]]) -> str:
    """What the sweeps say, in three lines."""
    ga, di, rep = rows["ga"], rows["di"], rows["replicas"]
    enough = next((r for r in ga if r["throughput"] >= 0.9 * r["plateau"]), None)
    at = (f"reaches 90 % of the plateau at {enough['ga']}" if enough else
          f"stays below 90 % of the plateau up to {ga[-1]['ga']}")
    return "\n".join([
        f"Gradient accumulation {ga[0]['ga']} -> {ga[-1]['ga']}: "
        f"{ga[0]['throughput']:,.0f} -> {ga[-1]['throughput']:,.0f} images/s; it {at} "
        f"(plateau {ga[-1]['plateau']:,.0f} images/s).",
        f"Device iterations {di[0]['di']} -> {di[-1]['di']}: host share "
        f"{di[0]['host'] / di[0]['cycles']:.1%} -> {di[-1]['host'] / di[-1]['cycles']:.1%}, "
        f"{di[-1]['throughput'] / di[0]['throughput']:.2f}x the images/s.",
        f"Replicas {rep[0]['replicas']} -> {rep[-1]['replicas']}: "
        f"{rep[-1]['throughput'] / rep[0]['throughput']:.2f}x the images/s on "
        f"{rep[-1]['ipus'] // rep[0]['ipus']}x the IPUs."])


def plot(rows: dict[str, list[dict]], path: str) -> None:
    """The three panels of :func:`figure`, saved as a PNG."""
    import matplotlib  # noqa: PLC0415 - only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig = figure(rows)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(rows: dict[str, list[dict]]):
    """Three panels: images/s against accumulation, device iterations and replicas, with
    the plateau and each sweep's limit."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - only the plot needs it
    from matplotlib.ticker import FuncFormatter  # noqa: PLC0415

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, label in zip(axes, ("ga", "di", "replicas"),
                              ("gradient accumulation", "device iterations", "replicas")):
        xs = [r[key] for r in rows[key]]
        ax.plot(xs, [r["throughput"] for r in rows[key]], "o-", label="images/s")
        ax.plot(xs, [r["plateau"] for r in rows[key]], "--", color="grey",
                label="plateau: no bubble, no per-call cost")
        ax.set(xscale="log", xlabel=label, ylabel="thousand images per second", ylim=(0, None))
        ax.set_xticks(xs, [str(x) for x in xs], minor=False)
        ax.minorticks_off()
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1e3:,.0f}"))
        ax.grid(alpha=0.3)
    axes[1].plot([r["di"] for r in rows["di"]], [r["no_sync"] for r in rows["di"]], ":",
                 color="C1", label="no host sync (infinitely many device iterations)")
    one = rows["replicas"][0]["throughput"]
    axes[2].plot([r["replicas"] for r in rows["replicas"]],
                 [r["replicas"] * one for r in rows["replicas"]], ":", color="C2",
                 label="replicas x one replica")
    for ax in axes:
        ax.legend(loc="lower right", fontsize=7)
    first = rows["ga"][0]
    axes[0].set_title(f"device iterations {first['di']}, 1 replica")
    axes[1].set_title(f"gradient accumulation {rows['di'][0]['ga']}, 1 replica")
    axes[2].set_title(f"accumulation {rows['replicas'][0]['ga']}, "
                      f"device iterations {rows['replicas'][0]['di']}")
    fig.suptitle(f"PopTorch's pipelined MNIST on 4 IPUs per replica (ipu2, micro-batch "
                 f"{first['batch_size']}, AdamW): throughput, {first['source']}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def accumulation(text: str) -> int:
    """An argparse type: a gradient accumulation the study can time (kit convention: up to
    ``MAX_ACCUMULATION``; every op of the schedule is costed)."""
    value = positive_int(text)
    if value > MAX_ACCUMULATION:
        raise argparse.ArgumentTypeError(
            f"{value:,} micro-batches: the study costs every op of the schedule, up to "
            f"{MAX_ACCUMULATION:,}")
    return value


def main(argv=None) -> int:
    parser = Parser(prog="python -m ipukit.examples.pipelining_throughput",
                    description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=positive_int, default=40,
                        help="micro-batch size (the tutorial's 40)")
    parser.add_argument("--gradient-accumulation", type=accumulation, default=10,
                        help="accumulation while device iterations and replicas vary (10)")
    parser.add_argument("--device-iterations", type=positive_int, default=10,
                        help="device iterations while accumulation and replicas vary (10)")
    parser.add_argument("--full", action="store_true", help="the whole sweep")
    parser.add_argument("--cost-model", action="store_true",
                        help="time each setting with the cost model (call_cost), not the "
                             "emulator")
    parser.add_argument("--plot", metavar="PATH", help="save the three panels as a PNG")
    return run(_main, argv, parser)


def _main(args) -> int:
    t0 = time.perf_counter()
    # the settings refused in PopTorch's words before any call is emulated or costed
    build(1, args.device_iterations, args.gradient_accumulation, rts=False)
    sweep = SWEEPS["full" if args.full else "small"]
    if not args.cost_model:
        sweep = {**sweep, "replicas": [r for r in sweep["replicas"]
                                       if r <= EMULATED_MAX_REPLICAS]}
    rows = study(args.batch_size, args.gradient_accumulation, args.device_iterations, sweep,
                 measure if args.cost_model else measure_emulated)
    source = "Simulated (cost model)" if args.cost_model else "Emulated"
    print(f"{source} throughput of PopTorch's pipelined MNIST (4 IPUs per replica, ipu2, "
          f"micro-batch {args.batch_size}, AdamW):")
    print(table(rows))
    print(summary(rows))
    if args.plot:
        plot(rows, args.plot)
        print(f"Plot saved to {args.plot}")
    print(f"Wall-clock time: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
