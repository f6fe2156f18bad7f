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
from ipukit.parallel import nn, optim, pipeline

from .common import device, teaching_target
from .feedback import Cost, Wrong, as_int, exercise, first_mismatch

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
    target = teaching_target(n * replicas)
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
          hints=(
              'Each replica may send only to its neighbour, and only a chunk at a time.',
              'An all-reduce is a reduce-scatter (each replica ends with one fully summed '
              'chunk) followed by an all-gather (the summed chunks go round the ring).',
              'Cut every gradient into R chunks (np.split). Reduce-scatter: in step s (0..R-2) '
              'replica r sends its chunk (r - s) % R to r + 1, which adds it to its own; then '
              'replica r holds the full sum of chunk (r + 1) % R. All-gather: in step s replica '
              'r sends chunk (r + 1 - s) % R on, and the receiver overwrites its copy. Send '
              'what every replica sends in a step before anyone adds.',))
def check_ring_allreduce(ring_allreduce):
    """Exercise 10.1: ``ring_allreduce(grads, send)`` → R arrays, each the sum of the R
    gradients, moving data only with ``send(src, dst, values)`` to the ring neighbour."""

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
          hints=(
              'Without replicas nothing crosses; with them, the gradients must be combined.',
              'Without RTS: one all-reduce of the gradients. With RTS the all-reduce splits '
              'into a reduce-scatter of the gradients and, after the update, an all-gather of '
              'the weights.',
              'One replica: nothing. Without RTS a ring all-reduce sends 2(R-1)/R of the '
              'gradient bytes. With RTS a reduce-scatter sends (R-1)/R of the gradient bytes, '
              'the optimiser updates 1/R, and an all-gather sends (R-1)/R of the weight bytes. '
              'Round up (math.ceil).',))
def check_update_collectives(update_collectives):
    """Exercise 10.2: ``update_collectives(gradient_bytes, weight_bytes, replicas, rts)`` →
    ``[(kind, bytes), ...]`` that one IPU sends over its links per weight update."""

    for replicas, rts, acc in [(1, False, None), (2, False, None), (3, False, "float16"),
                               (4, True, None), (3, True, "float16"), (5, False, None)]:
        p = replicated(replicas, rts, gradient_accumulation_dtype=acc)
        result = run_once(p)
        for q in range(len(p.stages)):
            w, g, _ = p.static_bytes([p.stages[q]])
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


class Comms:
    """The collectives of R replicas (``gcl``), counting the elements each replica sends.

    ``reduce_scatter(parts)``: replica r gets the SUM of chunk r of every replica's array
    (each cut into R equal chunks); ``all_gather(chunks)``: every replica gets all R chunks
    concatenated; ``all_reduce(parts)``: every replica gets the sum. Ring costs: (R-1)/R of
    the array per replica for the first two, 2(R-1)/R for an all-reduce.
    """

    def __init__(self, replicas: int):
        self.replicas = replicas
        self.calls: list[tuple[str, int]] = []  # (kind, elements each replica sends)

    def _arrays(self, parts, kind):
        if not isinstance(parts, (list, tuple)) or len(parts) != self.replicas:
            raise Wrong(f"{kind}: pass a list of {self.replicas} arrays, one per replica")
        return [np.asarray(p, dtype=np.float64) for p in parts]

    def reduce_scatter(self, parts):
        parts = self._arrays(parts, "reduce_scatter")
        r = self.replicas
        if parts[0].size % r:
            raise Wrong(f"reduce_scatter: {parts[0].size} elements do not split into {r} "
                        "equal chunks")
        self.calls.append(("reduce_scatter", (r - 1) * parts[0].size // r))
        return [c.copy() for c in np.split(np.sum(parts, axis=0), r)]

    def all_gather(self, chunks):
        chunks = self._arrays(chunks, "all_gather")
        self.calls.append(("all_gather", (self.replicas - 1) * chunks[0].size))
        full = np.concatenate(chunks)
        return [full.copy() for _ in chunks]

    def all_reduce(self, parts):
        parts = self._arrays(parts, "all_reduce")
        r = self.replicas
        self.calls.append(("all_reduce", 2 * (r - 1) * parts[0].size // r))
        total = np.sum(parts, axis=0)
        return [total.copy() for _ in parts]


def _dense_momentum(w, grads_per_step, lr, mu):
    """Dense reference: momentum SGD on the mean of the replicas' gradients."""
    v = np.zeros_like(w)
    for grads in grads_per_step:
        v = mu * v + np.mean(grads, axis=0)
        w = w - lr * v
    return w, v


@exercise("10.3", "ZeRO-1: shard the optimiser state", points=3,
          hints=(
              'Each replica updates only the part of the weights whose optimiser state it '
              'keeps.',
              'The gradient all-reduce splits in two: reduce-scatter before the update, all- '
              "gather after it. The replicas' gradients are averaged.",
              'comms.reduce_scatter(grads) gives replica r the summed chunk r of the gradient '
              '(divide by R for the mean). Update only that chunk: its velocity shard v = mu * '
              'v + g, its weight chunk w_r - lr * v. Then comms.all_gather(the updated chunks) '
              'gives every replica the new weights.',))
def check_zero1(zero1_step):
    """Exercise 10.3: ``zero1_step(weights, grads, velocity, lr, mu, comms)`` → ``(weights,
    velocity)``: momentum SGD where replica r keeps only shard r of the velocity."""

    rng = np.random.default_rng(103)
    for r, n, steps in [(2, 6, 3), (4, 8, 2), (3, 12, 4), (8, 16, 2)]:
        w0 = rng.normal(size=n)
        grads_per_step = [[rng.normal(size=n) for _ in range(r)] for _ in range(steps)]
        weights = [w0.copy() for _ in range(r)]
        velocity = [np.zeros(n // r) for _ in range(r)]
        what = f"{r} replicas, {n} weights, {steps} steps of lr=0.1, mu=0.9"
        for k, grads in enumerate(grads_per_step):
            comms = Comms(r)
            got = zero1_step([w.copy() for w in weights], [g.copy() for g in grads],
                             velocity, 0.1, 0.9, comms)
            try:
                weights, velocity = got
                weights = [np.asarray(w, np.float64) for w in weights]
                velocity = [np.asarray(v, np.float64) for v in velocity]
            except (TypeError, ValueError):
                raise Wrong(f"{what}: return (weights, velocity), two lists of "
                            f"{r} arrays; got {str(got)[:80]}") from None
            kinds = [c for c, _ in comms.calls]
            if kinds != ["reduce_scatter", "all_gather"]:
                raise Wrong(f"{what}: step {k} ran the collectives {kinds}; ZeRO-1 runs "
                            "one reduce_scatter of the gradients, then one all_gather "
                            "of the updated weights")
            if len(velocity) != r or any(v.shape != (n // r,) for v in velocity):
                raise Wrong(f"{what}: each replica keeps only its shard of the velocity: "
                            f"{r} arrays of {n // r}, got "
                            f"{[v.shape for v in velocity]}")
            want_w, want_v = _dense_momentum(w0, grads_per_step[:k + 1], 0.1, 0.9)
            for q in range(r):
                if weights[q].shape != (n,) or not np.allclose(weights[q], want_w):
                    raise Wrong(f"{what}: after step {k} replica {q}'s weights are "
                                f"{np.round(weights[q], 5).tolist()}, dense momentum "
                                f"SGD gives {np.round(want_w, 5).tolist()}"
                                + _zero_diagnosis(weights[q], w0, grads_per_step, k, r))
                shard = want_v[q * (n // r):(q + 1) * (n // r)]
                if not np.allclose(velocity[q], shard):
                    raise Wrong(f"{what}: after step {k} replica {q}'s velocity shard is "
                                f"{np.round(velocity[q], 5).tolist()}, expected chunk "
                                f"{q} of the dense velocity, {np.round(shard, 5).tolist()}")


def _zero_diagnosis(got, w0, grads_per_step, k, r) -> str:
    if k == 0 and got.shape == w0.shape and np.allclose(
            got, w0 - 0.1 * np.sum(grads_per_step[0], axis=0)):
        return f". That steps with the SUM of the replicas' gradients: divide by R = {r}"
    return ""


# -- 10.4 ---------------------------------------------------------------------------------


class AddInto(ipu.Vertex):
    """``acc += x`` in place (an InOut codelet)."""

    acc = ipu.InOut(ipu.Vector(ipu.FLOAT))
    x = ipu.Input(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.acc[...] = self.acc + self.x


def ring_graph(replicas: int, n: int, tiles_per_ipu: int = 2):
    """A graph on ``replicas`` IPUs with gradient ``g{r}`` [n] on IPU r's first tile."""
    dev = device(tiles_per_ipu, replicas)
    g = ipu.Graph(dev.target)
    grads = []
    for r in range(replicas):
        v = g.add_variable(ipu.FLOAT, [n], f"g{r}")
        g.set_tile_mapping(v, r * tiles_per_ipu)
        g.create_host_write(f"g{r}", v)
        g.create_host_read(f"g{r}", v)
        grads.append(v)
    return dev, g, grads


def reference_ring(graph, grads, add_into):
    """The budget's program: each ring step is ONE Copy moving every IPU's chunk at once
    (views joined with ``ipu.concat``: one exchange), then one compute set."""
    r, n = len(grads), grads[0].shape[0]
    c, tiles = n // r, graph.target.tiles_per_ipu

    def chunk(q, k):
        return grads[q][k * c:(k + 1) * c]

    recv = []
    for q in range(r):
        buf = graph.add_variable(ipu.FLOAT, [c], f"ref_recv{q}")
        graph.set_tile_mapping(buf, q * tiles)
        recv.append(buf)
    steps = []
    for s in range(r - 1):
        cs = graph.add_compute_set(f"ref_reduce{s}")
        steps.append(ipu.Copy(ipu.concat([chunk(q, (q - s) % r) for q in range(r)]),
                              ipu.concat([recv[(q + 1) % r] for q in range(r)])))
        for q in range(r):
            d = (q + 1) % r
            graph.add_vertex(cs, add_into, {"acc": chunk(d, (q - s) % r), "x": recv[d]},
                             tile=d * tiles)
        steps.append(ipu.Execute(cs))
    for s in range(r - 1):
        steps.append(ipu.Copy(ipu.concat([chunk(q, (q + 1 - s) % r) for q in range(r)]),
                              ipu.concat([chunk((q + 1) % r, (q + 1 - s) % r)
                                          for q in range(r)])))
    return ipu.Sequence(*steps)


def device_cycles(exe) -> int:
    """Cycles of a compiled program's steps on the device (the host sync left out)."""
    return int(sum(s.cycles for s in exe.steps if s.kind != "host"))


@exercise("10.4", "a ring all-reduce on the emulator", points=3, budget="cycles",
          hints=(
              'Start from your 10.1: the same steps, but as Copy programs and compute sets.',
              'A received chunk needs a buffer on the receiving IPU before it can be added; the '
              'all-gather can copy straight into place.',
              'Give each IPU a receive buffer of n/R floats. Reduce-scatter, R-1 times: Copy '
              "chunk (q - s) % R of IPU q's gradient into the buffer of IPU q+1, then one "
              'compute set with an AddInto vertex per IPU (acc = its own chunk, x = the '
              'buffer). All-gather, R-1 times: Copy chunk (q + 1 - s) % R of IPU q straight '
              'into the same chunk of IPU q+1.',))
def check_emulated_ring(ring_program):
    """Exercise 10.4: ``ring_program(graph, grads, add_into)`` → a Program after which every
    IPU's gradient holds the sum, moving only chunks to the ring neighbour."""

    rng = np.random.default_rng(104)
    for r, n in [(2, 4), (3, 6), (4, 8)]:
        dev, graph, grads = ring_graph(r, n)
        what = f"ring_program on {r} IPUs with gradients of {n} floats"
        prog = ring_program(graph, grads, AddInto)
        if not isinstance(prog, ipu.Program):
            raise Wrong(f"{what}: return a Program (e.g. ipu.Sequence(...)), got "
                        f"{type(prog).__name__}")
        exe = ipu.compile_graph(graph, [prog])
        tiles = dev.target.tiles_per_ipu
        sent = np.zeros((r, r), dtype=np.int64)
        for step in exe.steps:
            for src, dst, nbytes in step.transfers.tolist():
                a, b = src // tiles, dst // tiles
                if a != b:
                    sent[a, b] += nbytes
        vals = [rng.normal(size=n).astype(np.float32) for _ in range(r)]
        eng = ipu.Engine(graph, prog)
        eng.load(dev)
        for q in range(r):
            eng.write_tensor(f"g{q}", vals[q])
        eng.run()
        total = np.sum(vals, axis=0)
        for q in range(r):
            first_mismatch(total, eng.read_tensor(f"g{q}"), f"{what}: IPU {q}'s g{q}",
                           rtol=1e-5, atol=1e-5)
        ring = 2 * (r - 1) * (n // r) * 4
        for a in range(r):
            for b in range(r):
                if sent[a, b] and b != (a + 1) % r:
                    raise Wrong(f"{what}: IPU {a} sent {sent[a, b]} bytes to IPU {b}; in "
                                f"a ring IPU {a} sends only to IPU {(a + 1) % r}")
            if sent[a].sum() != ring:
                raise Wrong(f"{what}: right sums, but IPU {a} sent {int(sent[a].sum())} "
                            f"bytes over IPU-Links; a ring all-reduce sends 2(R-1) "
                            f"chunks of n/R floats: {ring} bytes")
    _, ref_graph, ref_grads = ring_graph(r, n)
    budget = device_cycles(ipu.compile_graph(ref_graph, [reference_ring(ref_graph, ref_grads,
                                                                        AddInto)]))
    return Cost(device_cycles(exe), budget, "cycle")
