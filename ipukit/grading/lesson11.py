"""The ``check_*`` functions of lesson 11: concurrent stages and the sharded tied embedding.

Every check is judged (:func:`ipukit.grading.feedback.exercise`): the cases are drawn and
the verdict is reached in the judge, against dense float64 NumPy written here. Where the
exercise combines shards (11.1, 11.4) the judge plays every shard but one: the kernel gets
that one shard's data (nan in place of the others') and a :class:`~.common.PeerLog`, whose
all-reduces add the other shards' contributions, worked out in the judge by the lesson's
algorithm. The trial returns the learner's arrays and what each all-reduce carried from
that shard; the judge checks both, so an answer that ignores the collectives cannot be
right (the other shards' data never reach the kernel).

Mutation pass (``tools/mutants.py 11``): the two one-token mistakes that keep full marks,
``log_prob_parts[1]`` or ``table_parts[1]`` for ``[0]`` when reading a shard's size, are
equivalent: every shard holds the same number of columns or rows (an even split).

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

from .common import PeerLog, check_sent, nan_parts
from .feedback import Wrong, as_int, exercise


def dense_log_softmax(x):
    """Row-wise log-softmax of the whole [B, V] array, in float64 (the reference)."""
    x = np.asarray(x, dtype=np.float64)
    top = x.max(axis=1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=1, keepdims=True))


def _arrays(got, num_shards: int, what: str) -> list[np.ndarray]:
    """The learner's per-shard result as float64 NumPy arrays (the trial's side), or
    Wrong for an answer of the wrong kind."""
    if not isinstance(got, (list, tuple)):
        raise Wrong(f"{what}: return a list of {num_shards} arrays, one per shard (IPU), "
                    f"got {type(got).__name__}")
    try:
        return [np.asarray(backend.to_numpy(p), dtype=np.float64) for p in got]
    except (TypeError, ValueError):
        raise Wrong(f"{what}: return a list of {num_shards} arrays of numbers, one per "
                    "shard (IPU)") from None


def _parts(got: list, num_shards: int, shape, what: str, holds: str) -> list[np.ndarray]:
    """The trial's arrays, one per shard, each of ``shape`` (the judge's side); ``holds``
    says what each shard's array holds."""
    if len(got) != num_shards:
        raise Wrong(f"{what}: return a list of {num_shards} arrays, one per shard (IPU), "
                    f"got {len(got)}")
    for s, p in enumerate(got):
        if p.shape != tuple(shape):
            raise Wrong(f"{what}: shard {s}'s array has shape {p.shape}, expected "
                        f"{tuple(shape)} ({holds})")
    return got


def _first_difference(got, want, what: str, size: int, first: int = 0) -> str:
    for s, (g, w) in enumerate(zip(got, want), first):
        bad = np.argwhere(~np.isclose(g, w, rtol=1e-7, atol=1e-9))
        if len(bad):
            b, c = bad[0]
            return (f"{what}: shard {s}, row {b}, column {c} (class {s * size + c}): expected "
                    f"{w[b, c]:.7f}, got {g[b, c]:.7f}")
    return ""


# -- 11.1 ---------------------------------------------------------------------------------


def _softmax_what(case) -> str:
    b, v = case["x_parts"][0].shape[0], sum(p.shape[1] for p in case["x_parts"])
    return f"logits [{b}, {v}] over {case['shards']} shards (checked: shard {case['shard']})"


def _softmax_case(x, s_count: int, rng) -> dict:
    """One case: the kernel gets shard k's logits (k drawn from ``rng``), nan for the other
    shards, and what those shards contribute to the all-reduces MAX and ADD by the
    lesson's algorithm (``peers``); the whole ``_x`` stays with the judge."""
    x = np.asarray(x, dtype=np.float64)
    parts, k = np.split(x, s_count, axis=1), int(rng.integers(s_count))
    top = x.max(axis=1)
    others = [p for s, p in enumerate(parts) if s != k]
    peers = [{"op": "max", "what": "each row's max", "value": np.max(
                 [p.max(axis=1) for p in others], axis=0)},
             {"op": "add", "what": "each row's sum of exp(x - the row's max over all "
                                   "shards)", "value": np.sum(
                 [np.exp(p - top[:, None]).sum(axis=1) for p in others], axis=0)}]
    return {"x_parts": nan_parts(parts, k), "shard": k, "shards": s_count, "peers": peers,
            "_x": x}


def _softmax_plan(case) -> list:
    """What the checked shard sends in each all-reduce, by the lesson's algorithm."""
    x, k = case["_x"], case["shard"]
    own = np.split(x, case["shards"], axis=1)[k]
    return [("max", "its rows' max", own.max(axis=1)),
            ("add", "its rows' sums of exp(x - the row's max over all shards)",
             np.exp(own - x.max(axis=1, keepdims=True)).sum(axis=1))]


def _softmax_cases(rng) -> list[dict]:
    """Fixed cases (the lesson's, logits near 1000 where exp overflows unshifted, rows of
    mixed scales whose maxima sit on different shards) and two random ones; in each, the
    kernel holds one shard's logits, drawn from ``rng``."""
    fixed = np.random.default_rng(111)
    found = [([[1.0, 2.0, 3.0, 4.0]], 2),  # golden case 9
             (fixed.normal(size=(3, 8)) * 40 + 1000.0, 4),
             ([[0.0, 0, 0, 0, 0, 900], [1, 2, 3, 4, 5, 6], [-300, 0, 300, 0, 0, 0],
               [5, -5, 0, 0, 0, 0]], 3)]
    for _ in range(2):
        s_count, size, rows = int(rng.integers(2, 5)), int(rng.integers(1, 5)), \
            int(rng.integers(1, 7))
        scale = float(rng.choice([1.0, 10.0, 100.0]))
        found.append((rng.normal(size=(rows, s_count * size)) * scale + rng.normal() * scale,
                      s_count))
    return [_softmax_case(x, s_count, rng) for x, s_count in found]


def _softmax_trial(case, sharded_log_softmax):
    s_count = case["shards"]
    log = PeerLog(s_count, case["shard"], case["peers"], _softmax_what(case))
    got = sharded_log_softmax([p.copy() for p in case["x_parts"]], log)
    return {"parts": _arrays(got, s_count, _softmax_what(case)), "collectives": log.calls}


@exercise("11.1", "a log-softmax that never gathers the vocabulary", points=3,
          hints=(
              "A shard can compute its rows' max and sums, but not the whole row's.",
              'log_softmax(x) = x - max - log(sum exp(x - max)); both the max and the sum are '
              'one number per row, which an all-reduce can combine.',
              "Each shard computes its rows' max; log.all_reduce(maxima, 'max', ...) gives "
              'every shard the global max m. Then each shard sums exp(x_s - m) over its own '
              "columns; log.all_reduce(sums, 'add', ...) gives D. The answer on shard s is x_s "
              '- m - log(D): only B numbers per all-reduce cross the IPU-Links.',),
          answers=("sharded_log_softmax",), cases=_softmax_cases, trial=_softmax_trial)
def check_sharded_log_softmax(cases, outputs):
    """Exercise 11.1: ``sharded_log_softmax(x_parts, log)`` → the log-softmax of each shard's
    columns, using only ``log.all_reduce`` to combine the shards. The kernel holds one
    shard's logits (the judge plays the others), so only all-reduces can give it the row's
    max and sum; that shard's result is compared with the whole row's log-softmax."""
    for case, out in zip(cases, outputs):
        x, s_count, k, what = case["_x"], case["shards"], case["shard"], _softmax_what(case)
        b, v = x.shape
        size = v // s_count
        got = _parts(out["parts"], s_count, (b, size), what,
                     f"its own {size} columns of the vocabulary")[k]
        check_sent(out["collectives"], _softmax_plan(case), k, what)
        if not np.all(np.isfinite(got)):
            raise Wrong(f"{what}: shard {k} holds inf or nan: it may use only its own logits "
                        "(the check keeps the other shards': nan in your kernel) and the "
                        "all-reduced max and sum")
        want = np.split(dense_log_softmax(x), s_count, axis=1)[k]
        wrong = _first_difference([got], [want], what, size, k)
        if wrong:
            if np.allclose(got, dense_log_softmax(np.split(x, s_count, axis=1)[k])):
                wrong += (". It is normalised over its own columns only: use the all-reduced "
                          "max and sum of all shards")
            raise Wrong(wrong)


# -- 11.2 ---------------------------------------------------------------------------------


def _ce_what(case) -> str:
    v = sum(p.shape[1] for p in case["log_probs"])
    return (f"logits [{len(case['labels'])}, {v}] over {len(case['log_probs'])} shards, "
            f"labels {case['labels'].tolist()}")


def _ce_case(x, labels, g, s_count) -> dict:
    return {"log_probs": np.split(dense_log_softmax(x), s_count, axis=1),
            "labels": np.asarray(labels, dtype=np.int32), "g": np.asarray(g, np.float64),
            "_x": np.asarray(x, np.float64)}


def _ce_cases(rng) -> list[dict]:
    """The lesson's case, labels on every shard's first and last columns, and a random
    case."""
    fixed = np.random.default_rng(112)
    found = [_ce_case([[1.0, 2.0, 3.0, 4.0]], [2], np.ones(1), 2),  # golden case 9
             _ce_case(fixed.normal(size=(6, 12)), [0, 11, 3, 4, 7, 8],
                      fixed.uniform(0.1, 1, 6), 3),
             _ce_case(fixed.normal(size=(5, 8)), [1, 2, 5, 6, 7], np.full(5, 0.2), 4),
             _ce_case(fixed.normal(size=(4, 6)), [5, 0, 2, 3], fixed.uniform(0.5, 2, 4), 2)]
    s_count, size, rows = int(rng.integers(2, 5)), int(rng.integers(1, 5)), \
        int(rng.integers(1, 8))
    found.append(_ce_case(rng.normal(size=(rows, s_count * size)) * 3,
                          rng.integers(0, s_count * size, rows), rng.uniform(0.1, 2, rows),
                          s_count))
    return found


def _ce_trial(case, ce_backward):
    got = ce_backward([p.copy() for p in case["log_probs"]], case["labels"].copy(),
                      case["g"].copy())
    return _arrays(got, len(case["log_probs"]), _ce_what(case))


@exercise("11.2", "the fused cross-entropy backward, on the shard owning the label", points=3,
          hints=(
              'Write the gradient of the cross-entropy for one row first, densely.',
              'dlogits = g * (softmax - onehot); every shard has its softmax columns, but each '
              "row's one-hot 1 lives on only one shard.",
              'dlogits = g[b] * (softmax - onehot(label)). Every shard has exp(log_probs) for '
              'its columns; only the shard with s*size <= label[b] < (s+1)*size subtracts g[b], '
              'at its local column label[b] - s*size.',),
          answers=("ce_backward",), cases=_ce_cases, trial=_ce_trial)
def check_ce_backward(cases, outputs):
    """Exercise 11.2: ``ce_backward(log_prob_parts, labels, g)`` → dlogits per shard."""
    for case, out in zip(cases, outputs):
        x, labels, g = case["_x"], case["labels"], case["g"]
        s_count = len(case["log_probs"])
        b, v = x.shape
        size = v // s_count
        what = _ce_what(case)
        soft = np.exp(dense_log_softmax(x))
        onehot = np.zeros_like(soft)
        onehot[np.arange(b), labels] = 1.0
        want = np.split(g[:, None] * (soft - onehot), s_count, axis=1)
        got = _parts(out, s_count, (b, size), what, f"its own {size} columns of the vocabulary")
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


def _target(case):
    return IPUModel(case["version"], num_ipus=case["shards"]).create_device().target


def _cycle_cases(rng) -> list[dict]:
    """The lesson's three collectives, then each kind on Mk1 and Bow IPUs, random sizes."""
    found = [{"kind": "all_reduce", "nbytes": 28, "shards": 2, "version": "ipu2"},
             {"kind": "broadcast", "nbytes": 786_432, "shards": 4, "version": "ipu2"},
             {"kind": "reduce_add", "nbytes": 786_432, "shards": 4, "version": "ipu2"}]
    for kind in KINDS:
        for version in ("ipu1", "bow"):
            found.append({"kind": kind, "nbytes": int(rng.integers(1, 200_000)),
                          "shards": int(rng.choice([2, 3, 4, 8, 16])), "version": version})
    return found


def _cycle_trial(case, collective_cycles):
    return collective_cycles(case["kind"], case["nbytes"], case["shards"], _target(case))


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
              'target.ipu_link_bytes_per_cycle).',),
          answers=("collective_cycles",), cases=_cycle_cases, trial=_cycle_trial)
def check_collective_cycles(cases, outputs):
    """Exercise 11.3: ``collective_cycles(kind, nbytes, num_shards, target)`` → cycles of one
    broadcast, reduce_add or all_reduce of an ``nbytes`` tensor over ``num_shards`` IPUs."""
    for case, out in zip(cases, outputs):
        kind, nbytes, s_count = case["kind"], case["nbytes"], case["shards"]
        target = _target(case)
        want = measured_cycles(kind, nbytes, s_count, target)
        what = (f"{kind} of {nbytes:,} bytes over {s_count} {case['version']} IPUs (global "
                f"sync {target.global_sync_cycles} cycles, ring step "
                f"{cost.ring_step_cycles(target)} cycles, "
                f"{target.ipu_link_bytes_per_cycle:.2f} link bytes per cycle)")
        got = as_int(out, what)
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


def _embedding_what(case) -> str:
    rows = sum(len(p) for p in case["table_parts"])
    return (f"a table [{rows}, {case['table_parts'][0].shape[1]}] over {case['shards']} "
            f"shards, ids {case['ids'].tolist()}")


def _embedding_cases(rng) -> list[dict]:
    """Tables sharded by rows: repeated ids, ids all on one shard, one row per shard, and
    a random table with an id on every shard. The public keys are what each exercise
    passes; ``_table`` stays with the judge."""
    fixed = np.random.default_rng(114)
    shapes = [((8, 3), [0, 7, 3, 4], 2), ((12, 4), [11, 0, 5, 5, 2, 9, 0], 3),
              ((16, 2), fixed.integers(0, 16, 20), 4),
              ((6, 5), [1, 1, 1], 2),  # all on shard 0
              ((4, 3), [3, 0, 3, 1, 2], 4)]  # one row per shard
    s_count, size = int(rng.integers(2, 5)), int(rng.integers(1, 5))
    v = s_count * size
    ids = np.concatenate([rng.integers(0, v, int(rng.integers(0, 8))),
                          np.arange(0, v, size) + rng.integers(0, size, s_count)])
    shapes.append(((v, int(rng.integers(1, 6))), rng.permutation(ids), s_count))
    found = []
    for k, (shape, ids, s_count) in enumerate(shapes):
        gen = rng if k == len(shapes) - 1 else fixed
        table = gen.normal(size=shape)
        found.append({"table_parts": np.split(table, s_count),
                      "ids": np.asarray(ids, dtype=np.int32), "shards": s_count,
                      "dy": gen.normal(size=(len(ids), shape[1])), "_table": table})
    return found


def _owned(table, ids, s_count, shard) -> np.ndarray:
    """The rows ``table[ids]`` that shard ``shard`` owns, zero for the others."""
    mine = np.asarray(ids) // (len(table) // s_count) == shard
    return np.where(mine[:, None], table[ids], 0.0)


def _lookup_cases(rng) -> list[dict]:
    """11.5's tables; the kernel holds one shard's rows (drawn from ``rng``), nan for the
    others, and their all-reduced partial lookups (``peers``)."""
    found = []
    for c in _embedding_cases(rng):
        table, s_count, k = c["_table"], c["shards"], int(rng.integers(c["shards"]))
        peers = table[c["ids"]] - _owned(table, c["ids"], s_count, k)
        found.append({"table_parts": nan_parts(c["table_parts"], k), "ids": c["ids"],
                      "shards": s_count, "shard": k, "_table": table,
                      "peers": [{"op": "add", "what": "their partial lookups (the rows of "
                                 "the ids they own, zero for the others)", "value": peers}]})
    return found


def _lookup_trial(case, embedding_lookup):
    log = PeerLog(case["shards"], case["shard"], case["peers"],
                  f"{_embedding_what(case)} (checked: shard {case['shard']})")
    got = embedding_lookup([p.copy() for p in case["table_parts"]], case["ids"].copy(), log)
    return {"rows": _arrays(got, case["shards"], _embedding_what(case)),
            "collectives": log.calls}


@exercise("11.4", "the vocab-parallel embedding lookup", points=3,
          hints=(
              'Which shard can answer for id v?',
              'Shard s answers for its own ids with their rows and for the others with zeros; '
              "adding the shards' answers gives every row exactly once.",
              'Shard s owns rows s*size .. (s+1)*size - 1. Each shard looks up only the ids it '
              'owns (local id = id - s*size; the others masked, their rows zero), then '
              "log.all_reduce(partials, 'add', label) sums the partial lookups: each row comes "
              'from exactly one shard.',),
          answers=("embedding_lookup",), cases=_lookup_cases, trial=_lookup_trial)
def check_embedding_lookup(cases, outputs):
    """Exercise 11.4: ``embedding_lookup(table_parts, ids, log)`` → the rows ``table[ids]``
    on every shard, the table sharded by rows (Megatron's ``VocabParallelEmbedding``). The
    kernel holds one shard's rows (the judge plays the others): that shard's partial
    lookup and its result are checked."""
    for case, out in zip(cases, outputs):
        table, ids, s_count, k = case["_table"], case["ids"], case["shards"], case["shard"]
        size = table.shape[0] // s_count
        what = f"{_embedding_what(case)} (checked: shard {k})"
        got = _parts(out["rows"], s_count, (len(ids), table.shape[1]), what,
                     "the looked-up rows, on every shard")[k]
        plan = [("add", "the rows of the ids it owns, zero for the others",
                 _owned(table, ids, s_count, k))]
        try:
            check_sent(out["collectives"], plan, k, what)
        except Wrong as exc:
            raise Wrong(str(exc) + _lookup_diagnosis(out["collectives"], ids, size, k)) from None
        want = table[ids]
        bad = np.argwhere(~np.isclose(got, want))
        if len(bad):
            n = int(bad[0][0])
            raise Wrong(f"{what}: on shard {k}, row {n} (id {ids[n]}, owned by shard "
                        f"{int(ids[n]) // size}) is {np.round(got[n], 5).tolist()}, expected "
                        f"{np.round(want[n], 5).tolist()}: return what the all-reduce gives")


def _lookup_diagnosis(calls, ids, size, shard) -> str:
    """Why shard ``shard``'s partial lookup (the one all-reduce it sent) is wrong."""
    if len(calls) != 1:
        return ""
    sent = np.asarray(calls[0]["sent"], dtype=np.float64).reshape(len(ids), -1)
    for n, idx in enumerate(ids):
        if idx // size != shard and not np.allclose(sent[n], 0):
            return (f". Shard {shard} added a row for id {idx}, which shard {idx // size} "
                    "owns: mask the ids a shard does not own (0 <= id - s*size < size) and "
                    "give them zero rows")
        if idx // size == shard and np.allclose(sent[n], 0):
            return (f". Shard {shard} gave no row for id {idx}, which it owns: its local "
                    "index is id - s*size")
    return ""


# -- 11.5 ---------------------------------------------------------------------------------


def _grad_cases(rng) -> list[dict]:
    return [{"ids": c["ids"], "dy": c["dy"], "num_rows": len(c["_table"]),
             "shards": c["shards"]} for c in _embedding_cases(rng)]


def _grad_what(case) -> str:
    return f"{case['num_rows']} rows over {case['shards']} shards, ids {case['ids'].tolist()}"


def _grad_trial(case, embedding_grad):
    got = embedding_grad(case["ids"].copy(), case["dy"].copy(), case["num_rows"],
                         case["shards"])
    return _arrays(got, case["shards"], _grad_what(case))


@exercise("11.5", "the embedding gradient: a scatter-add per shard", points=3,
          hints=(
              'The gradient of a lookup goes back to the rows that were looked up.',
              'Each shard scatters dy into its own rows; repeated ids must add up.',
              'dtable[v] = the sum of dy[n] over all n with ids[n] == v. On shard s: start from '
              'zeros [size, C] and add dy[n] at row ids[n] - s*size for the ids it owns. An id '
              'can appear several times: np.add.at adds them all (dw[idx] += dy keeps only '
              'one).',),
          answers=("embedding_grad",), cases=_grad_cases, trial=_grad_trial)
def check_embedding_grad(cases, outputs):
    """Exercise 11.5: ``embedding_grad(ids, dy, num_rows, num_shards)`` → each shard's
    [num_rows / num_shards, C] gradient of the table (``multiUpdateAdd``)."""
    for case, out in zip(cases, outputs):
        ids, dy, v, s_count = case["ids"], case["dy"], case["num_rows"], case["shards"]
        size, c = v // s_count, dy.shape[1]
        what = _grad_what(case)
        got = _parts(out, s_count, (size, c), what, f"the gradient of its own {size} rows")
        dense = np.zeros((v, c))
        np.add.at(dense, ids, dy)
        for s, (g, w) in enumerate(zip(got, np.split(dense, s_count))):
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
