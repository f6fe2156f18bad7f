"""Small helpers shared by the lesson checks (public: no lesson imports another's
private helpers)."""

from __future__ import annotations

import functools
import math

import ipukit as ipu
from ipukit import backend, cost
from ipukit.parallel import sharded

from .feedback import Wrong, as_int, library_error


def device(tiles: int, num_ipus: int = 1):
    """A fresh Mk2 IPUModel device with ``tiles`` tiles per IPU."""
    return ipu.IPUModel("ipu2", num_ipus=num_ipus, tiles_per_ipu=tiles).create_device()


#: Answers to these checks are cycle or byte counts.
as_count = functools.partial(as_int, kind="whole number of cycles or bytes")


def no_compile(what: str, exc: Exception) -> str:
    """Feedback for a learner's graph that does not compile (what is wrong, not the fix)."""
    return library_error(f"{what} does not compile", exc)


class SumVertex(ipu.Vertex):
    """out = the sum of x (one value per vertex)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.x.sum(axis=-1, keepdims=True)


class AddVertex(ipu.Vertex):
    """out = x + y."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    y = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.x + self.y


def teaching_target(num_ipus: int, tiles: int = 4):
    """``num_ipus`` Mk2 IPUs of ``tiles`` tiles each (4 tiles: 2.4 MiB per IPU)."""
    return device(tiles, num_ipus).target


def engine(g, prog, what: str, per_vertex: bool = False):
    """The learner's graph compiled into an Engine, or a wrong answer saying why not."""
    try:
        return ipu.Engine(g, prog, per_vertex=per_vertex)
    except ipu.IpuError as exc:
        raise Wrong(no_compile(what, exc)) from None


def device_cycles(eng) -> int:
    """Cycles of every compiled step but the host synchronisation."""
    return sum(s.cycles for s in eng.executable.steps if s.kind != "host")


class BusyVertex(ipu.Vertex):
    """A vertex that only costs cycles: the default estimate (10 + its elements, a kit
    convention) or one set with ``set_perf_estimate``."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))

    def compute(self):
        pass


def optimisers() -> dict:
    """name -> (a fresh optimiser, its slots: copies of the weights it keeps as state)."""
    from ipukit.parallel import optim

    return {"SGD": (lambda: optim.SGD(0.1), 0), "Momentum": (lambda: optim.Momentum(0.1), 1),
            "AdamW": (lambda: optim.AdamW(), 2)}


class RecordingLog(sharded.CollectiveLog):
    """A :class:`~ipukit.parallel.sharded.CollectiveLog` (run in the learner's kernel) that
    also keeps, as plain data for the judge, what each collective carried: ``calls``, one
    ``{"kind", "label", "shape", "itemsize", "root"}`` per call, ``shape`` that of one
    shard's tensor (the root's, for a broadcast).

    >>> import numpy as np
    >>> log = RecordingLog(2)
    >>> _ = log.all_reduce([np.zeros(3), np.ones(3)], "max", "row max")
    >>> log.calls
    [{'kind': 'all_reduce_max', 'label': 'row max', 'shape': [3], 'itemsize': 8, 'root': 0}]
    >>> sent_bytes(log.calls[0], 2)  # each shard sends 2(S-1)/S of 24 bytes
    [24, 24]
    """

    def __init__(self, num_shards: int, target=None):
        super().__init__(num_shards, target)
        self.calls: list[dict] = []

    def _keep(self, kind: str, label, x, root: int = 0) -> None:
        a = backend.get_xp().asarray(x)
        self.calls.append({"kind": kind, "label": str(label)[:80], "shape": list(a.shape),
                           "itemsize": int(a.itemsize), "root": int(root)})

    def broadcast(self, x, label: str, root: int = 0) -> list:
        out = super().broadcast(x, label, root)
        self._keep("broadcast", label, x, root)
        return out

    def reduce_add(self, parts: list, label: str, root: int = 0):
        out = super().reduce_add(parts, label, root)
        self._keep("reduce_add", label, parts[0], root)
        return out

    def all_reduce(self, parts: list, op: str, label: str) -> list:
        out = super().all_reduce(parts, op, label)
        self._keep(f"all_reduce_{op}", label, parts[0])
        return out


def sent_bytes(call: dict, num_shards: int) -> list[int]:
    """Bytes each shard sends in one of :class:`RecordingLog`'s ``calls``, worked out in the
    judge by the rules of ``CollectiveLog``: a ring all-reduce sends 2(S-1)/S of the tensor
    from every shard, a broadcast's root one copy per other shard, a reduce one copy from
    every other shard."""
    n = math.prod(int(d) for d in call["shape"]) * int(call["itemsize"])
    root = int(call.get("root", 0))
    if str(call["kind"]).startswith("all_reduce"):
        return [cost.ring_bytes("allreduce", n, num_shards)] * num_shards
    if call["kind"] == "broadcast":
        return [n * (num_shards - 1) if s == root else 0 for s in range(num_shards)]
    return [0 if s == root else n for s in range(num_shards)]


def check_row_collectives(calls: list, num_shards: int, rows: int, itemsize: int, what: str,
                          result: str = "values") -> None:
    """Wrong unless every one of :class:`RecordingLog`'s ``calls`` carried at most one
    number (``itemsize`` bytes) per row and the sharded softmax's all-reduces MAX and ADD
    both ran: a vocabulary sharded by columns is never gathered. ``result``: what the
    learner got right ("values", "weights")."""
    ring = cost.ring_bytes("allreduce", rows * itemsize, num_shards)
    for call in calls:
        sent = sent_bytes(call, num_shards)
        if max(sent) > ring:
            raise Wrong(f"{what}: right {result}, but '{call['label']}' ({call['kind']}) "
                        f"sends {max(sent):,} bytes from IPU {sent.index(max(sent))}; an "
                        f"all-reduce of one number per row sends {ring:,}. Reduce each row "
                        "to one number (its max, its sum of exp, its loss) before combining: "
                        "never gather the logits")
    kinds = [c["kind"] for c in calls]
    if not kinds:
        raise Wrong(f"{what}: right {result}, but no collective ran. Shard s lives on IPU s "
                    "and sees only its own part: combine the shards with log.all_reduce")
    for needed in ("all_reduce_max", "all_reduce_add"):
        if needed not in kinds:
            raise Wrong(f"{what}: your collectives were {kinds}; the sharded softmax needs an "
                        f"all-reduce {needed.split('_')[-1]} (log.all_reduce(parts, 'max' or "
                        "'add', label))")
