"""The ``check_*`` functions of lesson 10: replication, cross-replica reduction, RTS.

Every check is judged: the cases and the verdict run in the judge, only the learner's
function runs in the notebook's kernel. The ring all-reduce is checked by what crosses
each simulated IPU-Link (a ``send`` callback that records every message, which the judge
reads step by step); the collectives of 10.2 are measured in the judge with the pipeline
runner (a run's timeline spans); ZeRO-1 against dense momentum SGD, the function run as
one replica whose collectives return what the judge worked out for the others; the
emulated ring of 10.4 is sent as the learner's graph and program
(:mod:`ipukit.graph_data`), which the judge rebuilds, runs on its own gradients and
follows to count the bytes on every link; the device cycles of that run earn the star.

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

from .common import (
    MAX_STEPS,
    device,
    judged_run,
    learner_codelets,
    loaded_engine,
    naming,
    rebuilt,
    sent_graph,
    teaching_target,
)
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
    # TensorFlow shards only offloaded optimiser state (``replicated_optimizer_state_sharding``
    # without offloading raises: its testRTSButNoOffloading); without RTS the state stays
    # on chip here (TF's None would offload it)
    options.setdefault("offload_optimizer_state", bool(rts))
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
    ``values`` from replica ``src`` to its neighbour ``dst == (src + 1) % R``, counts the
    elements each replica sends and keeps every message (``log``: (src, values))."""

    def __init__(self, replicas: int):
        self.replicas = replicas
        self.sent: list[list[int]] = [[] for _ in range(replicas)]
        self.log: list[tuple[int, np.ndarray]] = []

    def send(self, src, dst, values):
        r = self.replicas
        for name, v in (("src", src), ("dst", dst)):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 0 <= v < r:
                raise Wrong(f"send({name}={v!r}): replicas are numbered 0 to {r - 1}")
        if dst != (src + 1) % r:
            raise Wrong(f"replica {src} sent to replica {dst}, but in a ring each replica "
                        f"has a link only to the next one: (src + 1) % R = {(src + 1) % r}")
        values = np.array(values, dtype=float, copy=True)  # what arrives is a copy
        self.sent[src].append(int(values.size))
        self.log.append((int(src), values.reshape(-1).copy()))
        return values


def _ring_cases(rng) -> list[dict]:
    """Rings of 2 to 8 replicas, chunks of one element and of several, and one replica."""
    return [{"replicas": r, "grads": [rng.normal(size=n) for _ in range(r)]}
            for r, n in [(2, 6), (3, 12), (4, 8), (5, 5), (8, 64), (3, 3), (1, 5)]]


def _ring_what(case) -> str:
    return (f"ring_allreduce with R={case['replicas']} replicas of "
            f"{len(case['grads'][0])} gradient elements")


def _ring_trial(case, ring_allreduce):
    """The learner's all-reduce on one case (the kernel): what every replica ends with and
    every message, in the order sent."""
    r, what = case["replicas"], _ring_what(case)
    ring = Ring(r)
    out = ring_allreduce([np.array(g, dtype=float) for g in case["grads"]], ring.send)
    try:
        out = [np.asarray(a, dtype=float) for a in out]
    except (TypeError, ValueError):
        raise Wrong(f"{what}: expected a list of {r} arrays, got {str(out)[:80]}") from None
    return {"out": out, "log": [[src, values] for src, values in ring.log]}


def _identify(values, grads, c: int):
    """``(chunk, replicas)`` when ``values`` is the sum over ``replicas`` of one chunk of
    ``c`` elements of their gradients, else None."""
    r = len(grads)
    if values.size != c:
        return None
    for k in range(r):
        parts = np.array([g[k * c:(k + 1) * c] for g in grads])
        for mask in range(1, 1 << r):
            who = [j for j in range(r) if mask >> j & 1]
            if np.allclose(values, parts[who].sum(axis=0), rtol=1e-9, atol=1e-12):
                return k, who
    return None


def _ring_trace(grads, log) -> str:
    """The first message that a ring all-reduce (a reduce-scatter of R-1 steps, then an
    all-gather of R-1 steps) would not send, said in words; "" when none is wrong."""
    r = len(grads)
    c = len(grads[0]) // r
    by = [[v for src, v in log if src == q] for q in range(r)]
    held: list = [None] * r  # the chunk each replica received in the step before
    for s in range(2 * (r - 1)):
        phase, t = ("reduce-scatter", s) if s < r - 1 else ("all-gather", s - r + 1)
        now = []
        for q in range(r):
            if s >= len(by[q]):
                return (f"replica {q} sent {len(by[q])} messages: the {phase} needs its step "
                        f"{t}, step {s + 1} of the {2 * (r - 1)} a ring all-reduce takes")
            ring = sorted((q - j) % r for j in range(s + 1)) if s < r - 1 else list(range(r))
            values, where = by[q][s], f"in step {t} of the {phase}, replica {q}"
            right = [k for k in (range(r) if held[q] is None else [held[q]])
                     if values.size == c and np.allclose(
                         values, sum(grads[j][k * c:(k + 1) * c] for j in ring),
                         rtol=1e-9, atol=1e-12)]
            if right:
                now.append(right[0])
                continue
            found = _identify(values, grads, c)
            if found is None:
                return (f"{where} sent values that are no sum of the replicas' chunk of "
                        f"{c} elements (n/R): a chunk is n/R consecutive elements, added up, "
                        "never scaled")
            k, who = found
            if held[q] is not None and k != held[q]:
                added = " with its own part added" if s < r - 1 else ""
                return (f"{where} sent chunk {k}; it should pass on chunk {held[q]}, the one "
                        f"it received in the step before{added}")
            return (f"{where} sent chunk {k} summed over replicas {who}; it should hold the "
                    f"sum over replicas {ring}"
                    + (" (every replica: the all-gather passes on finished sums)"
                       if s >= r - 1 else ""))
        held = [now[(q - 1) % r] for q in range(r)]
    return ""


@exercise("10.1", "a ring all-reduce", points=3,
          hints=(
              'Each replica may send only to its neighbour, and only a chunk at a time.',
              'An all-reduce is a reduce-scatter (each replica ends with one fully summed '
              'chunk) followed by an all-gather (the summed chunks go round the ring).',
              'Cut every gradient into R chunks (np.split). Reduce-scatter: in step s (0..R-2) '
              'replica r sends its chunk (r - s) % R to r + 1, which adds it to its own; then '
              'replica r holds the full sum of chunk (r + 1) % R. All-gather: in step s replica '
              'r sends chunk (r + 1 - s) % R on, and the receiver overwrites its copy. Send '
              'what every replica sends in a step before anyone adds.',),
          answers=("ring_allreduce",), cases=_ring_cases, trial=_ring_trial)
def check_ring_allreduce(cases, outputs):
    """Exercise 10.1: ``ring_allreduce(grads, send)`` → R arrays, each the sum of the R
    gradients, moving data only with ``send(src, dst, values)`` to the ring neighbour."""
    for case, got in zip(cases, outputs):
        grads, r, what = case["grads"], case["replicas"], _ring_what(case)
        n, out = len(grads[0]), got["out"]
        if len(out) != r or any(a.shape != (n,) for a in out):
            raise Wrong(f"{what}: expected {r} arrays of shape ({n},), got "
                        f"{[a.shape for a in out]}")
        total = np.sum(grads, axis=0)
        chunk, steps = n // r, 2 * (r - 1)
        sizes = [[int(v.size) for src, v in got["log"] if src == q] for q in range(r)]
        trace = _ring_trace(grads, got["log"])
        for q, a in enumerate(out):
            bad = np.flatnonzero(~np.isclose(a, total, rtol=1e-12, atol=1e-12))
            if bad.size:
                e = int(bad[0])
                raise Wrong(f"{what}: replica {q}'s element {e} (chunk {e // chunk}) is "
                            f"{a[e]:.6f}, the sum over the replicas is {total[e]:.6f}"
                            + _wrong_sum(trace, sizes[q], chunk, r))
        for q, sent in enumerate(sizes):
            if sent != [chunk] * steps:
                raise Wrong(
                    f"{what}: replica {q} sent {len(sent)} message(s) of {sent} "
                    f"elements; a ring all-reduce sends 2(R-1) = {steps} chunks of n/R = "
                    f"{chunk} elements ({steps * chunk} in all, 2(R-1)/R of the "
                    "gradient)" + _ring_diagnosis(sent, n, chunk, steps))
        if trace:  # right sums and sizes, but the messages carry no ring's partial sums
            raise Wrong(f"{what}: every replica ends with the sum, but the messages are not "
                        f"a ring all-reduce's: {trace}. Each replica may learn the others' "
                        "gradients only from what send() returns")


def _wrong_sum(trace: str, sent, chunk: int, r: int) -> str:
    if sent == [chunk] * (r - 1):
        return (". Each replica sent only R-1 chunks: that is the reduce-scatter; the "
                "all-gather (R-1 more steps) brings every replica the other reduced chunks")
    if trace:
        return f". {trace[0].upper()}{trace[1:]}"
    if len(sent) == 2 * (r - 1):
        return (". Every message was right: the mistake is in what a replica keeps. In the "
                "reduce-scatter it adds what arrives to its own chunk; in the all-gather it "
                "overwrites its copy with what arrives")
    return ""


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


def _collective_cases(rng) -> list[dict]:
    """Every IPU of replicated pipelines (one to five replicas, RTS and float16 gradient
    accumulators), then a drawn one (replicas, RTS, accumulators and layer widths), run in
    the judge: the collectives of its first weight update."""
    runs = [(replicas, rts, acc, (6, 9, 5, 4)) for replicas, rts, acc in [
        (1, False, None), (2, False, None), (3, False, "float16"), (4, True, None),
        (3, True, "float16"), (5, False, None)]]
    runs.append((int(rng.integers(2, 6)), bool(rng.integers(2)),
                 [None, "float16"][int(rng.integers(2))],
                 tuple(int(w) for w in rng.integers(3, 12, 4))))
    found = []
    for replicas, rts, acc, widths in runs:
        p = replicated(replicas, rts, gradient_accumulation_dtype=acc, widths=widths)
        result = run_once(p)
        for q in range(len(p.stages)):
            w, g, _ = p.static_bytes([p.stages[q]])
            found.append({"gradient_bytes": g, "weight_bytes": w, "replicas": replicas,
                          "rts": rts, "_ipu": q, "_want": _collectives(result, q)})
    return found


def _collective_what(case) -> str:
    return (f"update_collectives(gradient_bytes={case['gradient_bytes']}, weight_bytes="
            f"{case['weight_bytes']}, replicas={case['replicas']}, rts={case['rts']})")


def _collective_trial(case, update_collectives):
    what = _collective_what(case)
    got = update_collectives(case["gradient_bytes"], case["weight_bytes"], case["replicas"],
                             case["rts"])
    try:
        return [[str(k), as_int(b, what)] for k, b in got]
    except (TypeError, ValueError):
        raise Wrong(f"{what}: expected a list of (kind, bytes) pairs, got {got!r}") from None


@exercise("10.2", "what crosses the IPU-Links per weight update", points=2,
          hints=(
              'Without replicas nothing crosses; with them, the gradients must be combined.',
              'Without RTS: one all-reduce of the gradients. With RTS the all-reduce splits '
              'into a reduce-scatter of the gradients and, after the update, an all-gather of '
              'the weights.',
              'One replica: nothing. Without RTS a ring all-reduce sends 2(R-1)/R of the '
              'gradient bytes. With RTS a reduce-scatter sends (R-1)/R of the gradient bytes, '
              'the optimiser updates 1/R, and an all-gather sends (R-1)/R of the weight bytes. '
              'Round up (math.ceil).',),
          answers=("update_collectives",), cases=_collective_cases, trial=_collective_trial)
def check_update_collectives(cases, outputs):
    """Exercise 10.2: ``update_collectives(gradient_bytes, weight_bytes, replicas, rts)`` →
    ``[(kind, bytes), ...]`` that one IPU sends over its links per weight update."""
    for case, got in zip(cases, outputs):
        want, got = case["_want"], [tuple(x) for x in got]
        if got != want:
            raise Wrong(f"{_collective_what(case)}: IPU {case['_ipu']}'s timeline has {want}, "
                        f"you said {got}" + _collective_diagnosis(got, want,
                                                                  case["gradient_bytes"],
                                                                  case["replicas"]))


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
    """The collectives as one replica of R sees them (``gcl``), the other replicas played
    by the check: what they contribute was worked out by the judge (kit convention: the
    learner's function runs as one replica, as a replicated Poplar program runs the same
    code on every replica, and only what the collectives return holds the others' data).

    ``replica`` (r) and ``replicas`` (R); ``reduce_scatter(part)``: the SUM over the
    replicas of chunk r of their arrays (each cut into R equal chunks);
    ``all_gather(chunk)``: every replica's chunk, concatenated in replica order.

    >>> c = Comms(2, 1, [10.0], [[1.0]])
    >>> c.reduce_scatter([1.0, 2.0]).tolist(), c.all_gather([5.0]).tolist()
    ([12.0], [1.0, 5.0])
    """

    def __init__(self, replicas: int, replica: int, peer_sum, peer_chunks):
        self.replicas, self.replica = replicas, replica
        self._peer_sum = np.asarray(peer_sum, np.float64)  # the others' chunk r, summed
        self._peer_chunks = [np.asarray(c, np.float64) for c in peer_chunks]

    def _array(self, x, kind: str, size: int) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (size,):
            raise Wrong(f"comms.{kind} on replica {self.replica}: pass this replica's array "
                        f"of {size} elements, got shape {x.shape}")
        return x

    def reduce_scatter(self, part) -> np.ndarray:
        r, shard = self.replicas, self._peer_sum.size
        part = self._array(part, "reduce_scatter", r * shard)
        return part[self.replica * shard:(self.replica + 1) * shard] + self._peer_sum

    def all_gather(self, chunk) -> np.ndarray:
        chunk = self._array(chunk, "all_gather", self._peer_sum.size)
        chunks = list(self._peer_chunks)
        chunks.insert(self.replica, chunk)
        return np.concatenate(chunks)


def _dense_momentum(w, grads_per_step, lr, mu):
    """Dense reference: momentum SGD on the mean of the replicas' gradients, the weights
    and velocity after each step."""
    v, found = np.zeros_like(w), []
    for grads in grads_per_step:
        v = mu * v + np.mean(grads, axis=0)
        w = w - lr * v
        found.append((w, v))
    return found


def _zero_cases(rng) -> list[dict]:
    """Replicas 2 to 8, shards of one to four weights, several steps (momentum builds up);
    the function plays the first, the last and a random replica. The other replicas'
    gradients stay in the judge (``_grads``): the kernel gets only what the collectives
    give the learner's replica (``peer_sums``, ``peer_chunks``)."""
    found = []
    for r, n, steps in [(2, 6, 3), (4, 8, 2), (3, 12, 4), (8, 16, 2), (5, 5, 3)]:
        w0, grads = rng.normal(size=n), rng.normal(size=(steps, r, n))
        dense = _dense_momentum(w0, grads, 0.1, 0.9)
        for q in sorted({0, r - 1, int(rng.integers(r))}):
            chunk = slice(q * n // r, (q + 1) * n // r)
            found.append({
                "replicas": r, "replica": q, "lr": 0.1, "mu": 0.9, "w0": w0,
                "grads": grads[:, q], "_grads": grads,
                "peer_sums": np.delete(grads[:, :, chunk], q, axis=1).sum(axis=1),
                "peer_chunks": [np.delete(np.split(w, r), q, axis=0) for w, _ in dense]})
    return found


def _zero_what(case) -> str:
    return (f"replica {case['replica']} of {case['replicas']}, {len(case['w0'])} weights, "
            f"{len(case['grads'])} steps of lr={case['lr']}, mu={case['mu']}")


def _zero_trial(case, zero1_step):
    """The learner's steps as one replica (the kernel): the weights and the velocity
    shard each step returned."""
    r, n, what = case["replicas"], len(case["w0"]), _zero_what(case)
    weights, velocity = np.array(case["w0"], dtype=float), np.zeros(n // r)
    found = []
    for k, grad in enumerate(case["grads"]):
        comms = Comms(r, case["replica"], case["peer_sums"][k], case["peer_chunks"][k])
        got = zero1_step(weights.copy(), np.array(grad, dtype=float), velocity.copy(),
                         case["lr"], case["mu"], comms)
        try:
            weights, velocity = got
            weights = np.asarray(weights, np.float64)
            velocity = np.asarray(velocity, np.float64)
        except (TypeError, ValueError):
            raise Wrong(f"{what}: return (weights, velocity), this replica's two arrays; "
                        f"got {str(got)[:80]}") from None
        found.append({"weights": weights, "velocity": velocity})
        if weights.shape != (n,) or velocity.shape != (n // r,):
            break  # the verdict says what is wrong with these arrays
    return found


@exercise("10.3", "ZeRO-1: shard the optimiser state", points=3,
          hints=(
              'Each replica updates only the part of the weights whose optimiser state it '
              'keeps.',
              'The gradient all-reduce splits in two: reduce-scatter before the update, all- '
              "gather after it. The replicas' gradients are averaged.",
              'comms.reduce_scatter(grad) gives your replica (comms.replica) the summed chunk '
              'of the gradient (divide by comms.replicas for the mean). Update only that '
              'chunk: its velocity shard v = mu * v + g, your weight chunk w_r - lr * v. Then '
              'comms.all_gather(the updated chunk) gives the new weights.',),
          answers=("zero1_step",), cases=_zero_cases, trial=_zero_trial)
def check_zero1(cases, outputs):
    """Exercise 10.3: ``zero1_step(weights, grad, velocity, lr, mu, comms)`` → ``(weights,
    velocity)`` of one replica: momentum SGD where replica r keeps only shard r of the
    velocity. The other replicas' data reach it only through ``comms``' collectives."""
    for case, steps in zip(cases, outputs):
        r, q, w0, what = case["replicas"], case["replica"], case["w0"], _zero_what(case)
        n, shard = len(w0), len(w0) // r
        dense = _dense_momentum(w0, case["_grads"], case["lr"], case["mu"])
        for k, (step, (want_w, want_v)) in enumerate(zip(steps, dense)):
            weights, velocity = step["weights"], step["velocity"]
            if velocity.shape != (shard,):
                raise Wrong(f"{what}: each replica keeps only its shard of the velocity, "
                            f"{shard} elements; after step {k} yours has shape "
                            f"{velocity.shape}")
            if weights.shape != (n,) or not np.allclose(weights, want_w):
                raise Wrong(f"{what}: after step {k} the weights are "
                            f"{np.round(weights, 5).tolist()}, dense momentum SGD gives "
                            f"{np.round(want_w, 5).tolist()}"
                            + _zero_diagnosis(case, weights, k))
            if not np.allclose(velocity, want_v[q * shard:(q + 1) * shard]):
                raise Wrong(f"{what}: after step {k} the velocity shard is "
                            f"{np.round(velocity, 5).tolist()}, expected chunk {q} of "
                            "the dense velocity, "
                            f"{np.round(want_v[q * shard:(q + 1) * shard], 5).tolist()}")


def _zero_diagnosis(case, got, k) -> str:
    w0, r, lr = case["w0"], case["replicas"], case["lr"]
    shard, q = len(w0) // r, case["replica"]
    mine = slice(q * shard, (q + 1) * shard)
    summed = w0 - lr * np.sum(case["_grads"][0], axis=0)
    if k == 0 and got.shape == w0.shape and np.allclose(got[mine], summed[mine]):
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


def program_as_plain(graph, prog, codelet, what: str) -> list[dict]:
    """``prog`` as the steps :func:`run_plain` follows (the judge makes them from the graph
    it rebuilt): one entry per Copy (the FLOAT addresses and tiles it reads and writes) and
    per Execute (each ``codelet`` vertex's tile and the addresses and tiles of its ``acc``
    and ``x``), Sequences and Repeats unrolled (at most ``MAX_STEPS`` steps)."""
    def view(t):
        if not isinstance(t, ipu.Tensor) or t.dtype != np.dtype(np.float32):
            raise Wrong(f"{what}: the check follows FLOAT tensors only; got {t!r}")
        tiles = np.full(t.num_elements(), -1, np.int64)
        for tile, runs in enumerate(graph.get_tile_mapping(t, throw_on_incomplete=False)):
            for b, e in runs:
                tiles[b:e] = tile
        return {"addresses": np.asarray(t.idx, np.int64).reshape(-1), "tiles": tiles}

    steps: list[dict] = []
    visits = [0]

    def walk(p):
        visits[0] += 1
        if visits[0] > 10 * MAX_STEPS or len(steps) > MAX_STEPS:
            raise Wrong(f"{what}: your program takes more than {MAX_STEPS:,} steps; a ring "
                        "all-reduce needs 3(R-1)")
        if isinstance(p, ipu.Sequence):
            for child in p.programs:
                walk(child)
        elif isinstance(p, ipu.Repeat):
            for _ in range(p.count):
                walk(p.body)
        elif isinstance(p, ipu.Copy):
            steps.append({"copy": [view(p.src), view(p.dst)]})
        elif isinstance(p, ipu.Execute):
            vertices = [v for v, cs in enumerate(graph.v_cs) if cs == p.cs.id]
            for v in vertices:
                if graph.v_cls[v] is not codelet:
                    raise Wrong(f"{what}: compute set '{p.cs.name}' has a "
                                f"{graph.v_cls[v].__name__} vertex; use the add_into codelet "
                                "you were given")
            steps.append({"execute": [{"tile": int(graph.v_tile[v]),
                                       "acc": view(graph.v_conn[v]["acc"]),
                                       "x": view(graph.v_conn[v]["x"])} for v in vertices]})
        else:
            raise Wrong(f"{what}: the check follows programs made of Sequence, Repeat, Copy "
                        f"and Execute; got {type(p).__name__}")

    walk(prog)
    return steps


def run_plain(steps, memory: np.ndarray, tiles_per_ipu: int, num_ipus: int):
    """Run :func:`program_as_plain`'s steps on ``memory`` (FLOAT storage, changed in
    place) and count the bytes each IPU sends to each IPU: a Copy moves each element from
    its source's tile to its destination's; a vertex fetches the elements of ``acc`` and
    ``x`` held on other tiles (once per tile) and sends ``acc`` back (as the compiler's
    exchange does). Returns the ``num_ipus`` x ``num_ipus`` matrix of bytes."""
    sent = np.zeros((num_ipus, num_ipus), np.int64)

    def count(src_tiles, dst_tiles):
        a, b = np.asarray(src_tiles) // tiles_per_ipu, np.asarray(dst_tiles) // tiles_per_ipu
        np.add.at(sent, (a[a != b], b[a != b]), 4)

    for step in steps:
        if "copy" in step:
            src, dst = step["copy"]
            memory[dst["addresses"]] = memory[src["addresses"]]
            count(src["tiles"], dst["tiles"])
            continue
        fetched: set = set()
        new = []
        for v in step["execute"]:
            acc, x = v["acc"], v["x"]
            new.append((acc["addresses"], memory[acc["addresses"]] + memory[x["addresses"]]))
            for field, back in ((acc, True), (x, False)):
                for address, tile in zip(field["addresses"].tolist(), field["tiles"].tolist()):
                    if tile != v["tile"] and (v["tile"], address) not in fetched:
                        fetched.add((v["tile"], address))
                        count([tile], [v["tile"]])
                    if back and tile != v["tile"]:
                        count([v["tile"]], [tile])
        for addresses, values in new:  # every vertex reads before any writes (BSP)
            memory[addresses] = values
    return sent


def _emulated_cases(rng) -> list[dict]:
    """One to four IPUs, then a drawn ring; the gradients' values are the judge's."""
    r = int(rng.integers(2, 5))
    return [{"replicas": r, "n": n, "_values": [rng.normal(size=n).astype(np.float32)
                                                for _ in range(r)]}
            for r, n in [(1, 3), (2, 4), (3, 6), (4, 8), (r, r * int(rng.integers(1, 4)))]]


def _emulated_what(case) -> str:
    return f"ring_program on {case['replicas']} IPUs with gradients of {case['n']} floats"


def _emulated_trial(case, ring_program):
    """The learner's graph and program as plain data (the kernel): the judge rebuilds,
    runs and measures them on its own gradients."""
    r, what = case["replicas"], _emulated_what(case)
    _, graph, grads = ring_graph(r, case["n"])
    with naming(what):
        prog = ring_program(graph, grads, AddInto)
    if not isinstance(prog, ipu.Program):
        raise Wrong(f"{what}: return a Program (e.g. ipu.Sequence(...)), got "
                    f"{type(prog).__name__}")
    mine = learner_codelets(graph)
    if mine:
        raise Wrong(f"{what}: your graph has a {mine[0].__name__} vertex; use the add_into "
                    "codelet you were given")
    return sent_graph(graph, prog, what)


def _judged_ring(case, sent, what: str):
    """The judge rebuilds the learner's graph, runs it on its own gradients and follows its
    copies and vertices: (what each g holds after the run, and after following the copies
    and vertices, the bytes IPU a sent IPU b, the device cycles)."""
    r, n, values = case["replicas"], case["n"], case["_values"]
    _, base, _ = ring_graph(r, n)
    kept = [(f"g{q}", kind) for q in range(r) for kind in ("host_writes", "host_reads")]
    g, progs = rebuilt(sent, base, what, kept)
    steps = program_as_plain(g, progs[0], AddInto, what)
    eng = loaded_engine(g, progs[0], what)
    with judged_run(what):
        for q in range(r):
            eng.write_tensor(f"g{q}", np.asarray(values[q], np.float32))
        eng.run()
        found = [eng.read_tensor(f"g{q}") for q in range(r)]
    memory = np.zeros(g.pools[np.dtype(np.float32)].size)
    places = [np.asarray(g.host_writes[f"g{q}"].idx).reshape(-1) for q in range(r)]
    for q in range(r):
        memory[places[q]] = values[q]
    sent_bytes = run_plain(steps, memory, g.target.tiles_per_ipu, r)
    return found, [memory[p] for p in places], sent_bytes, device_cycles(eng.executable)


@exercise("10.4", "a ring all-reduce on the emulator", points=3, budget="cycles",
          hints=(
              'Start from your 10.1: the same steps, but as Copy programs and compute sets.',
              'A received chunk needs a buffer on the receiving IPU before it can be added; the '
              'all-gather can copy straight into place.',
              'Give each IPU a receive buffer of n/R floats. Reduce-scatter, R-1 times: Copy '
              "chunk (q - s) % R of IPU q's gradient into the buffer of IPU q+1, then one "
              'compute set with an AddInto vertex per IPU (acc = its own chunk, x = the '
              'buffer). All-gather, R-1 times: Copy chunk (q + 1 - s) % R of IPU q straight '
              'into the same chunk of IPU q+1.',),
          answers=("ring_program",), cases=_emulated_cases, trial=_emulated_trial)
def check_emulated_ring(cases, outputs):
    """Exercise 10.4: ``ring_program(graph, grads, add_into)`` → a Program after which every
    IPU's gradient holds the sum, moving only chunks to the ring neighbour. The kernel sends
    the graph and program (:mod:`ipukit.graph_data`); the judge rebuilds them, runs them on
    its own gradients, counts the bytes on every link and measures the device cycles (the
    star)."""
    used = budget = 0
    for case, sent in zip(cases, outputs):
        r, n, what = case["replicas"], case["n"], _emulated_what(case)
        found, followed, sent_bytes, cycles = _judged_ring(case, sent, what)
        total = np.sum(case["_values"], axis=0, dtype=np.float64)
        for q in range(r):
            first_mismatch(total, found[q], f"{what}: IPU {q}'s g{q}", rtol=1e-5, atol=1e-5)
        for q in range(r):
            if not np.allclose(followed[q], total, rtol=1e-5, atol=1e-5):
                raise Wrong(f"{what}: the engine's g{q} is right, but your program's copies "
                            "and vertices, followed by the check, leave it "
                            f"{np.round(followed[q], 4).tolist()}: the check cannot follow it")
        ring = 2 * (r - 1) * (n // r) * 4
        for a in range(r):
            for b in range(r):
                if sent_bytes[a, b] and b != (a + 1) % r:
                    raise Wrong(f"{what}: IPU {a} sent {sent_bytes[a, b]} bytes to IPU {b}; "
                                f"in a ring IPU {a} sends only to IPU {(a + 1) % r}")
            if sent_bytes[a].sum() != ring:
                raise Wrong(f"{what}: right sums, but IPU {a} sent "
                            f"{int(sent_bytes[a].sum())} bytes over IPU-Links; a ring "
                            f"all-reduce sends 2(R-1) chunks of n/R floats: {ring} bytes")
        _, ref_graph, ref_grads = ring_graph(r, n)
        used += cycles
        budget += device_cycles(ipu.compile_graph(
            ref_graph, [reference_ring(ref_graph, ref_grads, AddInto)]))
    return Cost(used, budget, "cycle")
