"""The ``check_*`` functions of lesson 11: concurrent stages and the sharded tied embedding.

Values are checked against dense float64 NumPy written here; what crosses between IPUs
and what it costs against :class:`ipukit.parallel.sharded.CollectiveLog`, the cost model
every sharded op and concurrent stage uses (its formulas are tested in
``tests/test_sharded.py``).

>>> from ipukit.grading import lesson11
>>> r = lesson11.check_collective_cycles(lambda kind, nbytes, num_shards, target: 0)
... # doctest: +ELLIPSIS
WRONG · Exercise 11.3 · what a collective costs: 0/2 points
   ...
"""

from __future__ import annotations

import math

import numpy as np

from ipukit import backend
from ipukit.parallel import sharded
from ipukit.target import IPUModel

from .feedback import Wrong, as_int, exercise, run


def dense_log_softmax(x):
    """Row-wise log-softmax of the whole [B, V] array, in float64 (the reference)."""
    x = np.asarray(x, dtype=np.float64)
    top = x.max(axis=1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=1, keepdims=True))


def _parts(got, num_shards: int, shape, what: str) -> list[np.ndarray]:
    """The learner's per-shard result as float64 NumPy arrays of ``shape``, or Wrong."""
    if not isinstance(got, (list, tuple)) or len(got) != num_shards:
        n = len(got) if isinstance(got, (list, tuple)) else type(got).__name__
        raise Wrong(f"{what}: return a list of {num_shards} arrays, one per shard (IPU), "
                    f"got {n}")
    out = []
    for s, p in enumerate(got):
        p = np.asarray(backend.to_numpy(p), dtype=np.float64)
        if p.shape != tuple(shape):
            raise Wrong(f"{what}: shard {s}'s array has shape {p.shape}, expected "
                        f"{tuple(shape)} (its own {shape[1]} columns of the vocabulary)")
        if not np.all(np.isfinite(p)):
            raise Wrong(f"{what}: shard {s} holds inf or nan. exp() of a large logit "
                        "overflows: subtract the row maximum (all shards' maximum) first")
        out.append(p)
    return out


def _first_difference(got, want, what: str, size: int) -> str:
    for s, (g, w) in enumerate(zip(got, want)):
        bad = np.argwhere(~np.isclose(g, w, rtol=1e-7, atol=1e-9))
        if len(bad):
            b, c = bad[0]
            return (f"{what}: shard {s}, row {b}, column {c} (class {s * size + c}): expected "
                    f"{w[b, c]:.7f}, got {g[b, c]:.7f}")
    return ""


# -- 11.1 ---------------------------------------------------------------------------------


def _softmax_cases():
    rng = np.random.default_rng(111)
    yield np.array([[1.0, 2.0, 3.0, 4.0]]), 2  # golden case 9
    yield rng.normal(size=(5, 12)), 3
    yield rng.normal(size=(3, 8)) * 40 + 1000.0, 4  # exp(1000) overflows: shift by the max
    yield rng.normal(size=(4, 6)) * 3, 2


@exercise("11.1", "a log-softmax that never gathers the vocabulary", points=3,
          hint="Each shard computes its rows' max; log.all_reduce(maxima, 'max', ...) gives "
               "every shard the global max m. Then each shard sums exp(x_s - m) over its own "
               "columns; log.all_reduce(sums, 'add', ...) gives D. The answer on shard s is "
               "x_s - m - log(D): only B numbers per all-reduce cross the IPU-Links.")
def check_sharded_log_softmax(sharded_log_softmax):
    """Exercise 11.1: ``sharded_log_softmax(x_parts, log)`` → the log-softmax of each shard's
    columns, using only ``log.all_reduce`` to combine the shards."""

    def body():
        for x, s_count in _softmax_cases():
            b, v = x.shape
            size = v // s_count
            what = f"logits {list(x.shape)} over {s_count} shards"
            log = sharded.CollectiveLog(s_count)
            parts = sharded.shard(x.copy(), s_count, axis=1)
            got = _parts(sharded_log_softmax(parts, log), s_count, (b, size), what)
            want = np.split(dense_log_softmax(x), s_count, axis=1)
            wrong = _first_difference(got, want, what, size)
            if wrong:
                local = [dense_log_softmax(p) for p in np.split(x, s_count, axis=1)]
                if all(np.allclose(g, w) for g, w in zip(got, local)):
                    wrong += (". Each shard normalised over its own columns only: the "
                              "denominator sums exp over all shards (all-reduce ADD)")
                raise Wrong(wrong)
            _check_traffic(log, b, x.dtype.itemsize, what)

    return run("11.1", body)


def _check_traffic(log: sharded.CollectiveLog, rows: int, itemsize: int, what: str) -> None:
    """Only all-reduces of one number per row; MAX and ADD both present."""
    mine = [r for r in log.records if r.ipu == log.ipus[0]]
    if not mine:
        raise Wrong(f"{what}: right values, but no collective ran. Shard s lives on IPU s "
                    "and sees only parts[s]: combine the shards with log.all_reduce")
    ring = math.ceil(2 * (log.num_shards - 1) * rows * itemsize / log.num_shards)
    for r in log.records:
        if r.bytes > ring:
            raise Wrong(f"{what}: '{r.label}' ({r.kind}) sends {r.bytes:,} bytes from IPU "
                        f"{r.ipu}; an all-reduce of one number per row sends {ring:,}. Reduce "
                        "each row to one number (its max, its sum of exp) before combining")
    kinds = [r.kind for r in mine]
    for needed in ("all_reduce_max", "all_reduce_add"):
        if needed not in kinds:
            raise Wrong(f"{what}: your collectives were {kinds}; the sharded softmax needs an "
                        f"{needed.replace('_', ' ').replace('all reduce', 'all-reduce')} "
                        "(log.all_reduce(parts, 'max' or 'add', label))")


# -- 11.2 ---------------------------------------------------------------------------------


def _ce_cases():
    rng = np.random.default_rng(112)
    yield np.array([[1.0, 2.0, 3.0, 4.0]]), np.array([2]), np.ones(1), 2  # golden case 9
    yield rng.normal(size=(6, 12)), np.array([0, 11, 3, 4, 7, 8]), rng.uniform(0.1, 1, 6), 3
    yield rng.normal(size=(5, 8)), np.array([1, 2, 5, 6, 7]), np.full(5, 0.2), 4
    yield rng.normal(size=(4, 6)), np.array([5, 0, 2, 3]), rng.uniform(0.5, 2, 4), 2


@exercise("11.2", "the fused cross-entropy backward, on the shard owning the label", points=3,
          hint="dlogits = g[b] * (softmax - onehot(label)). Every shard has exp(log_probs) "
               "for its columns; only the shard with s*size <= label[b] < (s+1)*size "
               "subtracts g[b], at its local column label[b] - s*size.")
def check_ce_backward(ce_backward):
    """Exercise 11.2: ``ce_backward(log_prob_parts, labels, g)`` → dlogits per shard."""

    def body():
        for x, labels, g, s_count in _ce_cases():
            b, v = x.shape
            size = v // s_count
            what = f"logits {list(x.shape)} over {s_count} shards, labels {labels.tolist()}"
            soft = np.exp(dense_log_softmax(x))
            onehot = np.zeros_like(soft)
            onehot[np.arange(b), labels] = 1.0
            want = np.split(g[:, None] * (soft - onehot), s_count, axis=1)
            log_probs = np.split(dense_log_softmax(x), s_count, axis=1)
            got = _parts(ce_backward([p.copy() for p in log_probs], labels.astype(np.int32),
                                     g.copy()), s_count, (b, size), what)
            wrong = _first_difference(got, want, what, size)
            if wrong:
                raise Wrong(wrong + _ce_diagnosis(got, soft, labels, g, s_count, size))

    return run("11.2", body)


def _ce_diagnosis(got, soft, labels, g, s_count, size) -> str:
    full = np.concatenate(got, axis=1)
    rows = np.arange(len(labels))
    if np.allclose(full, g[:, None] * soft):
        return ". You left out the one-hot: subtract g[b] at the label's column"
    if np.allclose(full, soft - np.eye(soft.shape[1])[labels]):
        return ". Scale by the incoming gradient g[b]"
    for s in range(s_count):
        for b in rows:
            owner = labels[b] // size
            c = labels[b] % size
            if s != owner and np.isclose(got[s][b, c], g[b] * soft[b, s * size + c] - g[b]):
                return (f". Shard {s} subtracted g at its column {c} for label {labels[b]}, "
                        f"which lives on shard {owner}: only the shard owning the label "
                        "subtracts (mask: 0 <= label - s*size < size)")
    return ""


# -- 11.3 ---------------------------------------------------------------------------------

KINDS = ("broadcast", "reduce_add", "all_reduce")


def measured_cycles(kind: str, nbytes: int, num_shards: int, target) -> int:
    """The cycles CollectiveLog charges for one ``kind`` of ``nbytes`` (per shard)."""
    log = sharded.CollectiveLog(num_shards, target)
    x = np.zeros(nbytes, dtype=np.uint8)
    if kind == "broadcast":
        log.broadcast(x, "x")
    elif kind == "reduce_add":
        log.reduce_add([x] * num_shards, "x")
    else:
        log.all_reduce([x] * num_shards, "add", "x")
    return log.records[0].duration


def _cycle_cases():
    rng = np.random.default_rng(113)
    yield "all_reduce", 28, 2, "ipu2"  # the tied embedding's cross-entropy max
    yield "broadcast", 786_432, 4, "ipu2"  # the embedded tokens [256, 768] of the large case
    yield "reduce_add", 786_432, 4, "ipu2"
    for kind in KINDS:
        for version in ("ipu1", "bow"):
            yield kind, int(rng.integers(1, 200_000)), int(rng.choice([2, 3, 4, 8, 16])), version


@exercise("11.3", "what a collective costs", points=2,
          hint="cycles = target.global_sync_cycles + ceil(busiest / "
               "target.ipu_link_bytes_per_cycle). Busiest IPU: a broadcast's root sends "
               "nbytes to each of the S-1 others; a reduce's root receives S-1 copies; a "
               "ring all-reduce sends ceil(2(S-1)/S * nbytes) from every IPU.")
def check_collective_cycles(collective_cycles):
    """Exercise 11.3: ``collective_cycles(kind, nbytes, num_shards, target)`` → cycles of one
    broadcast, reduce_add or all_reduce of an ``nbytes`` tensor over ``num_shards`` IPUs."""

    def body():
        for kind, nbytes, s_count, version in _cycle_cases():
            target = IPUModel(version, num_ipus=s_count).create_device().target
            want = measured_cycles(kind, nbytes, s_count, target)
            what = (f"{kind} of {nbytes:,} bytes over {s_count} {version} IPUs (global sync "
                    f"{target.global_sync_cycles} cycles, {target.ipu_link_bytes_per_cycle:.2f}"
                    " link bytes per cycle)")
            got = as_int(collective_cycles(kind, nbytes, s_count, target), what)
            if got != want:
                raise Wrong(f"{what}: it costs {want:,} cycles, you said {got:,}"
                            + _cycles_diagnosis(kind, nbytes, s_count, target, got))

    return run("11.3", body)


def _cycles_diagnosis(kind, nbytes, s_count, target, got) -> str:
    def cost(busiest, sync=True):
        return (target.global_sync_cycles if sync else 0) + math.ceil(
            busiest / target.ipu_link_bytes_per_cycle)

    busiest = (math.ceil(2 * (s_count - 1) * nbytes / s_count) if kind == "all_reduce"
               else nbytes * (s_count - 1))
    if got == cost(busiest, sync=False):
        return ". Every collective also pays one global sync (target.global_sync_cycles)"
    if got == cost(nbytes):
        return (". That is one copy of the tensor; the busiest IPU moves more: "
                + ("the ring sends 2(S-1)/S of it from every IPU" if kind == "all_reduce"
                   else "the root sends or receives one copy per other IPU (S-1)"))
    return ""
