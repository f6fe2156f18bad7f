"""What a run did: frozen step and memory records and the Trace (its profile summary is
in :mod:`ipukit.profile_summary`).

``compile`` turns every Execute, Copy and stream copy into a :class:`Step` with its BSP
cost (sync + exchange + compute + exchange of remote outputs, per tile); the Engine appends
one event per executed step to its :class:`Trace`. Widgets and reports read a Trace, never
an Engine. This is what ``poplar::Engine::printProfileSummary`` and PopVision show.

>>> import ipukit as ipu
>>> t = ipu.IPUModel(tiles_per_ipu=2).create_device().target
>>> g = ipu.Graph(t)
>>> v = g.add_variable(ipu.FLOAT, [2], "v")
>>> g.set_tile_mapping(v, 0)
>>> eng = ipu.Engine(g, ipu.Copy(v[0], v[1]))
>>> eng.load(ipu.Device(t)); eng.run()
>>> [s.name for s in eng.trace.executed_steps()]
['host sync (Engine.run)', 'Copy v[0] -> v[1]']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import cost, profile_summary
from .target import Target
from .timeline import MemorySample, Span, Timeline


@dataclass(frozen=True, eq=False)
class Step:
    """One BSP superstep of the compiled program, with its cost on every tile.

    ``kind`` is "compute" (Execute), "copy" (on-device Copy), "stream" (host copy),
    "remote" (a copy to or from a remote buffer in Streaming Memory, ``remote_bytes`` each
    way) or "host" (the host synchronisation of an ``Engine.run`` call). Its phases
    (:data:`PHASES`) follow each other: sync, exchange (in), compute and, for a compute set
    with outputs on other tiles, "exchange out" (Graphcore: "Exchange inputs, Compute,
    Exchange outputs").
    ``exchange_cycles``, ``tile_bytes_in``/``out``, ``transfers`` and ``inter_ipu_bytes``
    count both exchange phases; ``exchange_out_cycles``, ``tile_result_bytes_in``/``out``
    (None: no remote outputs), ``result_transfers`` and ``result_inter_ipu_bytes`` the
    exchange out's part. Per-tile
    arrays have ``num_tiles`` entries. ``ipus`` are the IPUs whose tiles take part.
    """

    index: int
    name: str
    kind: str
    sync_cycles: int
    exchange_cycles: int
    compute_cycles: int
    tile_compute_cycles: np.ndarray
    tile_bytes_in: np.ndarray
    tile_bytes_out: np.ndarray
    vertex_cycles: int = 0  # sum of vertex estimates: compute excluding idle threads
    vertex_types: dict = field(default_factory=dict)  # class name -> (instances, cycles)
    transfers: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    inter_ipu_bytes: int = 0
    host_bytes: int = 0
    remote_bytes: int = 0  # bytes to or from Streaming Memory (a "remote" step)
    ipus: tuple = (0,)  # the IPUs it involves: it waits for, syncs and advances only them
    tile_vertices: np.ndarray | None = None  # vertices per tile (compute steps), else None
    exchange_out_cycles: int = 0
    tile_result_bytes_in: np.ndarray | None = None
    tile_result_bytes_out: np.ndarray | None = None
    result_transfers: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    result_inter_ipu_bytes: int = 0

    @property
    def cycles(self) -> int:
        return self.sync_cycles + self.exchange_cycles + self.compute_cycles

    def phase_cycles(self, phase: str) -> int:
        """The length of ``phase`` (one of :data:`PHASES`)."""
        if phase == "exchange":
            return self.exchange_cycles - self.exchange_out_cycles
        return getattr(self, f"{phase.replace(' ', '_')}_cycles")

    def phase_bytes(self, phase: str) -> tuple[np.ndarray, np.ndarray]:
        """Bytes each tile receives and sends in exchange ``phase`` ("exchange" before
        compute, "exchange out" after it)."""
        if self.tile_result_bytes_in is None:
            zero = np.zeros_like(self.tile_bytes_in)
            return (zero, zero) if phase == "exchange out" else (self.tile_bytes_in,
                                                                 self.tile_bytes_out)
        out = self.tile_result_bytes_in, self.tile_result_bytes_out
        if phase == "exchange out":
            return out
        return self.tile_bytes_in - out[0], self.tile_bytes_out - out[1]

    def phase_transfers(self, phase: str) -> np.ndarray:
        """The (source tile, destination tile, bytes) rows of exchange ``phase``."""
        k = len(self.transfers) - len(self.result_transfers)
        return self.result_transfers if phase == "exchange out" else self.transfers[:k]

    def tile_exchange_cycles(self, target: Target, phase: str | None = None) -> np.ndarray:
        """Cycles each tile spends sending or receiving (the busier direction) in exchange
        ``phase``, or in both (``None``)."""
        if phase is None:
            return sum(self.tile_exchange_cycles(target, p) for p in ("exchange", "exchange out"))
        return cost.exchange_cycles(np.maximum(*self.phase_bytes(phase)), target)


#: A superstep's phases, in order (a step without remote outputs has no "exchange out").
PHASES = ("sync", "exchange", "compute", "exchange out")


class TileMemory:
    """Bytes per tile by category; ``always_live`` categories stay for the whole run, the
    others ("not-always-live variables", "exchange buffers") are each tile's at its peak,
    and ``liveness`` (an :class:`ipukit.liveness.Liveness`) says what is live where.
    ``categories`` may be a function giving both, called when one is first read (compile
    defers the liveness analysis where no tile can overflow: :mod:`ipukit.compile`);
    ``remote`` is Streaming Memory: each remote buffer's bytes (not in ``total``)."""

    always_live = ("variables", "constants", "vertex state", "vertex code")

    def __init__(self, categories, bytes_per_tile: int, liveness=None, remote=None):
        self._analyse = categories
        if not callable(categories):  # (given: what _found would give)
            self._found = (categories, liveness)
        self.bytes_per_tile = bytes_per_tile
        self.remote = remote or {}

    @cached_property
    def _found(self) -> tuple:
        found = self._analyse()
        self._analyse = None  # (what the analysis held is freed)
        return found

    @property
    def categories(self) -> dict[str, np.ndarray]:
        return self._found[0]

    @property
    def liveness(self):
        return self._found[1]

    @property
    def streaming_memory(self) -> int:
        """Bytes of all remote buffers in Streaming Memory (off the IPU)."""
        return sum(self.remote.values())

    @property
    def total(self) -> np.ndarray:
        return sum(self.categories.values())

    def over_full(self) -> list[tuple[int, int]]:
        """Tiles holding more than ``bytes_per_tile`` as (tile, bytes), fullest first: an
        out-of-memory graph the IPUModel runs anyway (``debug.allowOutOfMemory``)."""
        return self.worst(int((self.total > self.bytes_per_tile).sum()))

    def worst(self, k: int = 5, category: str | None = None) -> list[tuple[int, int]]:
        """The ``k`` fullest tiles (in ``category``, else in all) as (tile, bytes)."""
        used = self.total if category is None else self.categories[category]
        order = np.argsort(-used, kind="stable")[:k]
        return [(int(t), int(used[t])) for t in order]


@dataclass(frozen=True)
class Event:
    """One executed step: which step, when it started (cycles), in which Engine.run call."""

    step: int
    start: int
    run: int


class Trace:
    """Everything an Engine executed since ``load``: events over the compiled steps."""

    def __init__(self, target: Target, steps: tuple[Step, ...], memory: TileMemory):
        self.target = target
        self.steps = steps
        self.memory = memory
        self._step_ids = []  # per event: its step,
        self._starts = []  # its start
        self._runs = []  # and its run
        self.clocks = [0] * target.num_ipus  # each IPU's own clock, in cycles
        self.total_cycles = 0
        self.num_runs = 0

    def record(self, step: int) -> None:
        """IPU-level task parallelism: a step starts when the IPUs it involves are free
        and advances only their clocks (one IPU: steps simply follow each other)."""
        s = self.steps[step]
        clocks = self.clocks
        start = max(map(clocks.__getitem__, s.ipus))
        end = start + s.cycles
        for q in s.ipus:
            clocks[q] = end
        self._step_ids.append(step)
        self._starts.append(start)
        self._runs.append(self.num_runs - 1)
        self.total_cycles = max(self.total_cycles, end)

    def __len__(self) -> int:
        return len(self._step_ids)

    @property
    def events(self) -> list[Event]:
        return [Event(s, t, r) for s, t, r in zip(self._step_ids, self._starts, self._runs)]

    def timeline(self) -> Timeline:
        """The run as the one record of time: per executed step and IPU it involves, a
        ``sync`` (``host`` for the host sync of an ``Engine.run`` call), an ``exchange``
        (``host`` for a stream copy's PCIe transfer), a ``compute`` and, where a compute
        set has remote outputs, a second ``exchange`` span (``remote`` for a copy to or from
        Streaming Memory), labelled with the step's name;
        memory: each IPU's bytes by category (they do not change)."""
        spans = []
        phases = {}
        for i, t in zip(self._step_ids, self._starts):
            s = self.steps[i]
            if i not in phases:
                phases[i] = Trace._phases(s)
            for q in s.ipus:
                at = t
                for kind, cycles, nbytes in phases[i]:
                    if cycles:
                        spans.append(Span(q, kind, at, cycles, bytes=nbytes, label=s.name))
                    at += cycles
        per_ipu = self.target.tiles_per_ipu
        memory = [MemorySample(0, q, {k: int(v[q * per_ipu:(q + 1) * per_ipu].sum())
                                      for k, v in self.memory.categories.items()})
                  for q in range(self.target.num_ipus)]
        return Timeline(spans, memory, self.target.clock_hz, self.target.num_ipus)

    @staticmethod
    def _phases(s: Step) -> tuple:
        """(span kind, cycles, bytes between IPUs) of each of step ``s``'s phases."""
        out = s.result_inter_ipu_bytes
        move = {"stream": "host", "remote": "remote"}.get(s.kind, "exchange")
        return (("host" if s.kind == "host" else "sync", s.sync_cycles, 0),
                (move, s.phase_cycles("exchange"),
                 s.inter_ipu_bytes - out if move == "exchange" else 0),
                ("compute", s.compute_cycles, 0), ("exchange", s.exchange_out_cycles, out))

    def executed_steps(self) -> list[Step]:
        return [self.steps[i] for i in self._step_ids]

    def executions(self) -> np.ndarray:
        """How many times each compiled step ran."""
        return np.bincount(np.asarray(self._step_ids, np.intp), minlength=len(self.steps))

    def summary(self) -> dict:
        """The profile's numbers as a dict (what ``print_profile_summary`` prints)."""
        return profile_summary.summary(self)

    def step_table(self) -> list[dict]:
        """One row per compiled step that ran: executions and cycles (PopVision's table)."""
        return profile_summary.step_table(self)

    def print_profile_summary(self, file=None) -> None:
        """Print the target, memory and execution summary (``printProfileSummary``)."""
        profile_summary.print_profile_summary(self, file)
