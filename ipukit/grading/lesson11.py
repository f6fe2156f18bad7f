"""The ``check_*`` functions of lesson 11: concurrent stages and the sharded tied embedding.

Values are checked against dense float64 NumPy written here; what crosses between IPUs
and what it costs against :class:`ipukit.parallel.sharded.CollectiveLog`, the cost model
every sharded op and concurrent stage uses (its formulas, :mod:`ipukit.cost`'s, are tested
in ``tests/test_sharded.py`` and ``tests/test_cost.py``).

>>> from ipukit.grading import lesson11
>>> r = lesson11.check_collective_cycles(lambda kind, nbytes, num_shards, target: 0)
... # doctest: +ELLIPSIS
WRONG · Exercise 11.3 · what a collective costs: 0/2 points
   ...
"""

from __future__ import annotations

import math

import numpy as np

from ipukit import backend, cost
from ipukit.parallel import sharded
from ipukit.target import IPUModel

from .feedback import Wrong, as_int, exercise


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
          hints=(
              "A shard can compute its rows' max and sums, but not the whole row's.",
              'log_softmax(x) = x - max - log(sum exp(x - max)); both the max and the sum are '
              'one number per row, which an all-reduce can combine.',
              "Each shard computes its rows' max; log.all_reduce(maxima, 'max', ...) gives "
              'every shard the global max m. Then each shard sums exp(x_s - m) over its own '
              "columns; log.all_reduce(sums, 'add', ...) gives D. The answer on shard s is x_s "
              '- m - log(D): only B numbers per all-reduce cross the IPU-Links.',))
def check_sharded_log_softmax(sharded_log_softmax):
    """Exercise 11.1: ``sharded_log_softmax(x_parts, log)`` → the log-softmax of each shard's
    columns, using only ``log.all_reduce`` to combine the shards."""

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
          hints=(
              'Write the gradient of the cross-entropy for one row first, densely.',
              'dlogits = g * (softmax - onehot); every shard has its softmax columns, but each '
              "row's one-hot 1 lives on only one shard.",
              'dlogits = g[b] * (softmax - onehot(label)). Every shard has exp(log_probs) for '
              'its columns; only the shard with s*size <= label[b] < (s+1)*size subtracts g[b], '
              'at its local column label[b] - s*size.',))
def check_ce_backward(ce_backward):
    """Exercise 11.2: ``ce_backward(log_prob_parts, labels, g)`` → dlogits per shard."""

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
          hints=(
              'Who is the busiest IPU in a broadcast or a reduce? How many steps does a '
              'ring all-reduce take?',
              "A broadcast or a reduce costs one global sync plus the busiest IPU's bytes "
              'over one IPU-Link. A ring all-reduce costs 2(S-1) steps of a fixed latency '
              '(cost.ring_step_cycles(target)) plus the bytes each IPU sends.',
              'Broadcast and reduce: target.global_sync_cycles + ceil(busiest / '
              "target.ipu_link_bytes_per_cycle); a broadcast's root sends nbytes to each of "
              "the S-1 others, a reduce's root receives S-1 copies. All-reduce: 2(S-1) * "
              'cost.ring_step_cycles(target) + ceil(ceil(2(S-1)/S * nbytes) / '
              'target.ipu_link_bytes_per_cycle).',))
def check_collective_cycles(collective_cycles):
    """Exercise 11.3: ``collective_cycles(kind, nbytes, num_shards, target)`` → cycles of one
    broadcast, reduce_add or all_reduce of an ``nbytes`` tensor over ``num_shards`` IPUs."""

    for kind, nbytes, s_count, version in _cycle_cases():
        target = IPUModel(version, num_ipus=s_count).create_device().target
        want = measured_cycles(kind, nbytes, s_count, target)
        what = (f"{kind} of {nbytes:,} bytes over {s_count} {version} IPUs (global sync "
                f"{target.global_sync_cycles} cycles, ring step "
                f"{cost.ring_step_cycles(target)} cycles, "
                f"{target.ipu_link_bytes_per_cycle:.2f} link bytes per cycle)")
        got = as_int(collective_cycles(kind, nbytes, s_count, target), what)
        if got != want:
            raise Wrong(f"{what}: it costs {want:,} cycles, you said {got:,}"
                        + _cycles_diagnosis(kind, nbytes, s_count, target, got))


def _cycles_diagnosis(kind, nbytes, s_count, target, got) -> str:
    def link(busiest):
        return math.ceil(busiest / target.ipu_link_bytes_per_cycle)

    sync, step = target.global_sync_cycles, cost.ring_step_cycles(target)
    if kind == "all_reduce":
        ring = math.ceil(2 * (s_count - 1) * nbytes / s_count)
        if got == link(ring):
            return (f". You left out the latency: a ring takes 2(S-1) = {2 * (s_count - 1)}"
                    f" steps of {step} cycles each, whatever they carry")
        if got == sync + link(ring):
            return (". A ring all-reduce pays no single global sync but 2(S-1) steps of "
                    "cost.ring_step_cycles(target) cycles, each a neighbour exchange and a "
                    "sync")
        if got == (s_count - 1) * step + link(ring):
            return (". An all-reduce is a reduce-scatter then an all-gather: 2(S-1) steps, "
                    "not S-1")
        if got == 2 * (s_count - 1) * step:
            return ". Add the bandwidth term: ceil(2(S-1)/S * nbytes) bytes over one IPU-Link"
        if got == 2 * (s_count - 1) * step + link(nbytes):
            return ". That is one copy of the tensor; the ring sends 2(S-1)/S of it"
        return ""
    busiest = nbytes * (s_count - 1)
    if got == link(busiest):
        return ". Every broadcast or reduce also pays one global sync (target.global_sync_cycles)"
    if got == sync + link(nbytes):
        return (". That is one copy of the tensor; the busiest IPU moves more: the root "
                "sends or receives one copy per other IPU (S-1)")
    return ""


# -- 11.4 ---------------------------------------------------------------------------------


def _embedding_cases():
    rng = np.random.default_rng(114)
    yield rng.normal(size=(8, 3)), np.array([0, 7, 3, 4]), 2
    yield rng.normal(size=(12, 4)), np.array([11, 0, 5, 5, 2, 9, 0]), 3
    yield rng.normal(size=(16, 2)), rng.integers(0, 16, 20), 4
    yield rng.normal(size=(6, 5)), np.array([1, 1, 1]), 2  # all on shard 0


@exercise("11.4", "the vocab-parallel embedding lookup", points=3,
          hints=(
              'Which shard can answer for id v?',
              'Shard s answers for its own ids with their rows and for the others with zeros; '
              "adding the shards' answers gives every row exactly once.",
              'Shard s owns rows s*size .. (s+1)*size - 1. Each shard looks up only the ids it '
              'owns (local id = id - s*size; the others masked, their rows zero), then '
              "log.all_reduce(partials, 'add', label) sums the partial lookups: each row comes "
              'from exactly one shard.',))
def check_embedding_lookup(embedding_lookup):
    """Exercise 11.4: ``embedding_lookup(table_parts, ids, log)`` → the rows ``table[ids]``
    on every shard, the table sharded by rows (Megatron's ``VocabParallelEmbedding``)."""

    for table, ids, s_count in _embedding_cases():
        size = table.shape[0] // s_count
        what = (f"a table {list(table.shape)} over {s_count} shards, ids "
                f"{ids.tolist()}")
        log = sharded.CollectiveLog(s_count)
        parts = [p.copy() for p in np.split(table, s_count)]
        got = _parts(embedding_lookup(parts, ids.astype(np.int32).copy(), log), s_count,
                     (len(ids), table.shape[1]), what)
        want = table[ids]
        for s, g in enumerate(got):
            bad = np.argwhere(~np.isclose(g, want))
            if len(bad):
                n = int(bad[0][0])
                owner = int(ids[n]) // size
                raise Wrong(f"{what}: on shard {s}, row {n} (id {ids[n]}, owned by shard "
                            f"{owner}) is {np.round(g[n], 5).tolist()}, expected "
                            f"{np.round(want[n], 5).tolist()}"
                            + _lookup_diagnosis(g[n], want[n], table, ids[n], size,
                                                s_count))
        kinds = [r.kind for r in log.records if r.ipu == log.ipus[0]]
        if kinds != ["all_reduce_add"]:
            raise Wrong(f"{what}: right rows, but the collectives were {kinds}; one "
                        "all-reduce ADD of the partial lookups is all it takes")


def _lookup_diagnosis(got, want, table, idx, size, s_count) -> str:
    wrong = [table[(s * size + (idx - s * size) % size)] for s in range(s_count)]
    if np.allclose(got, np.sum([table[s * size + idx % size] for s in range(s_count)],
                               axis=0)) or np.allclose(got, np.sum(wrong, axis=0)):
        return (". Every shard added a row for this id: mask the ids a shard does not own "
                "(0 <= id - s*size < size) and give them zero rows")
    if np.allclose(got, 0):
        return ". No shard contributed this row: check the owner's local index id - s*size"
    return ""


# -- 11.5 ---------------------------------------------------------------------------------


@exercise("11.5", "the embedding gradient: a scatter-add per shard", points=3,
          hints=(
              'The gradient of a lookup goes back to the rows that were looked up.',
              'Each shard scatters dy into its own rows; repeated ids must add up.',
              'dtable[v] = the sum of dy[n] over all n with ids[n] == v. On shard s: start from '
              'zeros [size, C] and add dy[n] at row ids[n] - s*size for the ids it owns. An id '
              'can appear several times: np.add.at adds them all (dw[idx] += dy keeps only '
              'one).',))
def check_embedding_grad(embedding_grad):
    """Exercise 11.5: ``embedding_grad(ids, dy, num_rows, num_shards)`` → each shard's
    [num_rows / num_shards, C] gradient of the table (``multiUpdateAdd``)."""

    for table, ids, s_count in _embedding_cases():
        rng = np.random.default_rng(len(ids))
        v, c = table.shape
        size = v // s_count
        dy = rng.normal(size=(len(ids), c))
        what = f"{v} rows over {s_count} shards, ids {ids.tolist()}"
        got = _parts(embedding_grad(ids.astype(np.int32).copy(), dy.copy(), v, s_count),
                     s_count, (size, c), what)
        dense = np.zeros((v, c))
        np.add.at(dense, ids, dy)
        want = np.split(dense, s_count)
        for s, (g, w) in enumerate(zip(got, want)):
            bad = np.argwhere(~np.isclose(g, w))
            if len(bad):
                row = int(bad[0][0])
                vocab = s * size + row
                uses = np.flatnonzero(ids == vocab).tolist()
                tip = (f". Id {vocab} appears {len(uses)} times (positions {uses}): add "
                       "every one (np.add.at), not only the last" if len(uses) > 1 and
                       np.allclose(g[row], dy[uses[-1]]) else "")
                raise Wrong(f"{what}: shard {s}, local row {row} (id {vocab}): expected "
                            f"{np.round(w[row], 5).tolist()}, got "
                            f"{np.round(g[row], 5).tolist()}{tip}")
