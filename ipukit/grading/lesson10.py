"""The ``check_*`` functions of lesson 10: replication, cross-replica reduction, RTS.

The ring all-reduce is checked by what crosses each simulated IPU-Link (a ``send``
callback that records every message); the other references are measured with the
pipeline runner: the collectives of a run's timeline spans, the optimiser state of
its ``MemoryRecord``s, the calls of a ``DataLoader`` and the losses a call returns.

>>> from ipukit.grading import lesson10
>>> r = lesson10.check_update_collectives(lambda g, w, replicas, rts: [])
... # doctest: +ELLIPSIS
WRONG · Exercise 10.2 · what crosses the IPU-Links per weight update: 0/2 points
   ...
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu
from ipukit.parallel import DataLoader, nn, optim, pipeline
from ipukit.parallel.replication import static_bytes

from .feedback import Wrong, as_int, exercise, run

COLLECTIVES = ("allreduce", "reducescatter", "allgather")


def small_stages(widths=(6, 9, 5, 4)):
    """Dense layers (ReLU between them), one stage per layer; odd sizes, so that RTS shards
    of ``ceil(size / R)`` elements do not divide evenly."""
    pairs = list(zip(widths, widths[1:]))
    return [[nn.Dense(a, b, rng=k)] + ([nn.ReLU()] if k < len(pairs) - 1 else [])
            for k, (a, b) in enumerate(pairs)]


def replicated(replicas, rts=False, optimizer=None, g=4, di=1, widths=(6, 9, 5, 4),
               **options):
    """A pipeline of :func:`small_stages` replicated ``replicas`` times (S·R IPUs): Grouped
    where ``g`` allows it (a multiple of 2S), else Sequential (any ``g``)."""
    n = len(widths) - 1
    options.setdefault("offload_optimizer_state", False)  # on chip (TF's None offloads)
    target = ipu.IPUModel("ipu2", num_ipus=n * replicas, tiles_per_ipu=4).create_device().target
    return pipeline(small_stages(widths), None, g, "grouped" if g % (2 * n) == 0 else
                    "sequential", device_iterations=di, replication_factor=replicas,
                    optimizer=optimizer or optim.Adam(), loss=nn.SoftmaxCrossEntropy(),
                    replicated_optimizer_state_sharding=rts, target=target, **options)


def run_once(p, mb=2, seed=0):
    """One call of ``p`` on random data with micro-batches of ``mb``."""
    n = p.samples_per_run * mb
    rng = np.random.default_rng(seed)
    classes = p.stages[-1].params["weight"].shape[1]
    return p.run(rng.normal(size=(n, _width_in(p))).astype(np.float32),
                 rng.integers(0, classes, n))


def _width_in(p) -> int:
    """The number of input features of the first stage."""
    return next(iter(p.stages[0].params.values())).shape[0]


# -- 10.1 ---------------------------------------------------------------------------------


class Ring:
    """R replicas in a ring of IPU-Links: ``send(src, dst, values)`` moves a copy of
    ``values`` from replica ``src`` to its neighbour ``dst == (src + 1) % R`` and counts the
    elements each replica sends."""

    def __init__(self, replicas: int):
        self.replicas = replicas
        self.sent: list[list[int]] = [[] for _ in range(replicas)]

    def send(self, src, dst, values):
        r = self.replicas
        for name, v in (("src", src), ("dst", dst)):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 0 <= v < r:
                raise Wrong(f"send({name}={v!r}): replicas are numbered 0 to {r - 1}")
        if dst != (src + 1) % r:
            raise Wrong(f"replica {src} sent to replica {dst}, but in a ring each replica "
                        f"has a link only to the next one: (src + 1) % R = {(src + 1) % r}")
        values = np.array(values, copy=True)  # what arrives is a copy
        self.sent[src].append(int(values.size))
        return values


@exercise("10.1", "a ring all-reduce", points=3,
          hint="Cut every gradient into R chunks (np.split). Reduce-scatter: in step s "
               "(0..R-2) replica r sends its chunk (r - s) % R to r + 1, which adds it to its "
               "own; then replica r holds the full sum of chunk (r + 1) % R. All-gather: in "
               "step s replica r sends chunk (r + 1 - s) % R on, and the receiver overwrites "
               "its copy. Send what every replica sends in a step before anyone adds.")
def check_ring_allreduce(ring_allreduce):
    """Exercise 10.1: ``ring_allreduce(grads, send)`` → R arrays, each the sum of the R
    gradients, moving data only with ``send(src, dst, values)`` to the ring neighbour."""

    def body():
        rng = np.random.default_rng(10)
        for r, n in [(2, 6), (3, 12), (4, 8), (8, 64), (1, 5)]:
            grads = [rng.normal(size=n) for _ in range(r)]
            ring = Ring(r)
            what = f"ring_allreduce with R={r} replicas of {n} gradient elements"
            out = ring_allreduce([g.copy() for g in grads], ring.send)
            try:
                out = [np.asarray(a, dtype=float) for a in out]
            except (TypeError, ValueError):
                raise Wrong(f"{what}: expected a list of {r} arrays, got {out!r}") from None
            if len(out) != r or any(a.shape != (n,) for a in out):
                raise Wrong(f"{what}: expected {r} arrays of shape ({n},), got "
                            f"{[a.shape for a in out]}")
            total = np.sum(grads, axis=0)
            chunk, steps = n // r, 2 * (r - 1)
            for q, a in enumerate(out):
                if not np.allclose(a, total, rtol=1e-12, atol=1e-12):
                    bad = int(np.flatnonzero(~np.isclose(a, total, rtol=1e-12,
                                                         atol=1e-12))[0])
                    tip = (". Each replica sent only R-1 chunks: that is the reduce-scatter; "
                           "the all-gather (R-1 more steps) brings every replica the other "
                           "reduced chunks" if ring.sent[q] == [chunk] * (r - 1) else "")
                    raise Wrong(f"{what}: replica {q}'s element {bad} is {a[bad]:.6f}, the "
                                f"sum over the replicas is {total[bad]:.6f}{tip}")
            for q, sizes in enumerate(ring.sent):
                if sizes != [chunk] * steps:
                    raise Wrong(
                        f"{what}: replica {q} sent {len(sizes)} message(s) of {sizes} "
                        f"elements; a ring all-reduce sends 2(R-1) = {steps} chunks of n/R = "
                        f"{chunk} elements ({steps * chunk} in all, 2(R-1)/R of the "
                        "gradient)" + _ring_diagnosis(sizes, n, chunk, steps))

    return run("10.1", body)


def _ring_diagnosis(sizes, n, chunk, steps) -> str:
    if sizes and set(sizes) == {n}:
        return ". You sent whole gradients: send one chunk per step."
    if sum(sizes) < steps * chunk:
        return (". Only what send() returns crosses a link; a replica must not read the "
                "other replicas' gradients directly.")
    return ""


# -- 10.2 ---------------------------------------------------------------------------------


def _collectives(result, ipu_id) -> list[tuple[str, int]]:
    """(kind, bytes) of the first weight update's collectives on ``ipu_id``: what comes
    before its optimiser step and, with RTS, the all-gather right after it."""
    recs = [r for r in result.timeline if r.ipu == ipu_id and r.stage == -1
            and r.kind in COLLECTIVES + ("optimizer",)]
    out = []
    for i, r in enumerate(recs):
        if r.kind == "optimizer":
            after = recs[i + 1:i + 2]
            return out + [(a.kind, a.bytes) for a in after if a.kind == "allgather"]
        out.append((r.kind, r.bytes))
    return out


@exercise("10.2", "what crosses the IPU-Links per weight update", points=2,
          hint="One replica: nothing. Without RTS a ring all-reduce sends 2(R-1)/R of the "
               "gradient bytes. With RTS a reduce-scatter sends (R-1)/R of the gradient "
               "bytes, the optimiser updates 1/R, and an all-gather sends (R-1)/R of the "
               "weight bytes. Round up (math.ceil).")
def check_update_collectives(update_collectives):
    """Exercise 10.2: ``update_collectives(gradient_bytes, weight_bytes, replicas, rts)`` →
    ``[(kind, bytes), ...]`` that one IPU sends over its links per weight update."""

    def body():
        for replicas, rts, acc in [(1, False, None), (2, False, None), (3, False, "float16"),
                                   (4, True, None), (3, True, "float16"), (5, False, None)]:
            p = replicated(replicas, rts, gradient_accumulation_dtype=acc)
            result = run_once(p)
            for q in range(len(p.stages)):
                w, g, _ = static_bytes(p, [p.stages[q]])
                want = _collectives(result, q)
                what = (f"update_collectives(gradient_bytes={g}, weight_bytes={w}, "
                        f"replicas={replicas}, rts={rts})")
                got = update_collectives(g, w, replicas, rts)
                try:
                    got = [(str(k), as_int(b, what)) for k, b in got]
                except (TypeError, ValueError):
                    raise Wrong(f"{what}: expected a list of (kind, bytes) pairs, got "
                                f"{got!r}") from None
                if got != want:
                    raise Wrong(f"{what}: IPU {q}'s timeline has {want}, you said {got}"
                                + _collective_diagnosis(got, want, g, replicas))

    return run("10.2", body)


def _collective_diagnosis(got, want, g, r) -> str:
    if [k for k, _ in got] != [k for k, _ in want]:
        return (". The kinds are 'allreduce' (no RTS) or 'reducescatter' then 'allgather' "
                "(RTS), none with one replica.")
    for (kind, b), (_, b_want) in zip(got, want):
        if b == b_want:
            continue
        if kind == "allreduce" and b in (-(-(r - 1) * g // r), g):
            return (". A ring all-reduce is a reduce-scatter and an all-gather: each sends "
                    "(R-1)/R of the bytes, 2(R-1)/R in all.")
        if kind == "allgather" and b == -(-(r - 1) * g // r):
            return ". The all-gather moves the updated weights, not the gradients."
        if abs(b - b_want) <= 1:
            return ". Round up to whole bytes (math.ceil)."
    return ""


# -- 10.3 ---------------------------------------------------------------------------------

_OPTIMIZERS = {"SGD": (lambda: optim.SGD(0.1), 0),
               "Momentum": (lambda: optim.Momentum(0.1), 1), "Adam": (lambda: optim.Adam(), 2)}


@exercise("10.3", "optimiser state per IPU with RTS", points=2,
          hint="optimizer_slots copies of every weight. With RTS each replica keeps the "
               "shard of ceil(size / R) elements of every tensor (rounded up per tensor, as "
               "Graphcore pads RTS tensors): sum slots * ceil(size / R) * itemsize.")
def check_optimizer_state(optimizer_state):
    """Exercise 10.3: ``optimizer_state(tensor_sizes, itemsize, optimizer_slots, replicas,
    rts)`` → bytes of optimiser state on one IPU holding tensors of those sizes."""

    def body():
        for name, replicas, rts in [("Adam", 2, False), ("Adam", 4, True),
                                    ("Momentum", 3, True), ("SGD", 2, True),
                                    ("Adam", 1, True)]:
            make, slots = _OPTIMIZERS[name]
            p = replicated(replicas, rts, optimizer=make())
            result = run_once(p)
            for q, stage in enumerate(p.stages):
                sizes = [int(v.size) for v in stage.params.values()]
                want = max(m.optimizer for m in result.memory if m.ipu == q)
                what = (f"optimizer_state({sizes}, itemsize=4, optimizer_slots={slots} "
                        f"({name}), replicas={replicas}, rts={rts})")
                got = as_int(optimizer_state(list(sizes), 4, slots, replicas, rts), what)
                if got != want:
                    raise Wrong(f"{what}: IPU {q}'s MemoryRecords say {want:,} bytes, you "
                                f"said {got:,}" + _state_diagnosis(got, sizes, slots,
                                                                   replicas, rts))

    return run("10.3", body)


def _state_diagnosis(got, sizes, slots, r, rts) -> str:
    full = slots * 4 * sum(sizes)
    if rts and r > 1 and got == full:
        return ". With RTS each replica keeps only its shard (1/R) of the state."
    if not rts and r > 1 and got < full:
        return ". Without RTS every replica keeps all of the state."
    if rts and got in (full // r, -(-full // r)):
        return (". Each tensor is sharded on its own: round ceil(size / R) per tensor, not "
                "once for the total.")
    return ""


# -- 10.4 ---------------------------------------------------------------------------------


@exercise("10.4", "calls per epoch and losses per call", points=2,
          hint="One call takes batch_size x gradient_accumulation x device_iterations x "
               "replicas samples; the DataLoader drops what is left. Per replica ALL returns "
               "every micro-batch's loss of every iteration, EVERY_N those of every N-th "
               "iteration, FINAL and SUM one; every replica returns its own.")
def check_call_arithmetic(call_arithmetic):
    """Exercise 10.4: ``call_arithmetic(dataset_size, batch_size, gradient_accumulation,
    device_iterations, replicas, output_mode, period)`` → ``(calls per epoch, losses
    returned per call)``, as a ``DataLoader`` (drop_last=True) and ``run`` give them."""

    def body():
        for size, mb, g, di, r, mode, period in [
                (1000, 4, 6, 3, 2, "all", 1), (1000, 4, 6, 4, 2, "every_n", 2),
                (997, 2, 3, 5, 3, "final", 1), (500, 3, 6, 2, 1, "sum", 1),
                (2000, 5, 3, 6, 4, "every_n", 3), (300, 1, 6, 1, 4, "all", 1)]:
            p = replicated(r, g=g, di=di, output_mode=mode, output_return_period=period)
            rng = np.random.default_rng(size)
            loader = DataLoader(p, rng.normal(size=(size, _width_in(p))).astype(np.float32),
                                rng.integers(0, 4, size), batch_size=mb)
            x, y = next(iter(loader))
            want = (len(loader), int(p.run(x, y).outputs.size))
            what = (f"call_arithmetic({size}, batch_size={mb}, gradient_accumulation={g}, "
                    f"device_iterations={di}, replicas={r}, output_mode={mode!r}, "
                    f"period={period})")
            got = call_arithmetic(size, mb, g, di, r, mode, period)
            try:
                calls, losses = got
            except (TypeError, ValueError):
                raise Wrong(f"{what}: expected a pair (calls, losses), got {got!r}") from None
            calls, losses = as_int(calls, what), as_int(losses, what)
            if calls != want[0]:
                tip = (". Each replica takes its own micro-batches: count the replicas too."
                       if calls == size // (mb * g * di) else "")
                raise Wrong(f"{what}: the DataLoader makes {want[0]} calls of "
                            f"{loader.combined_batch_size} samples, you said {calls}{tip}")
            if losses != want[1]:
                tip = (". Every replica returns its own losses."
                       if losses * r == want[1] and r > 1 else "")
                raise Wrong(f"{what}: a call returns {want[1]} losses, you said {losses}{tip}")

    return run("10.4", body)
