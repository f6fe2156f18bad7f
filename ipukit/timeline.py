"""One record of time: :class:`Span` and :class:`Timeline`, "who did what, when".

The emulator (``Trace.timeline()``), a schedule (``Schedule.timeline()``), the pipeline
runner (``RunResult.timeline``) and the sharded collectives all produce a Timeline; the
widgets and :mod:`ipukit.report` read it. Times are cycles of the target's clock (unit
times for a schedule). :meth:`Timeline.measures` gives the bubble three ways, the
utilisation, and each IPU's idle time attributed to its cause (:mod:`ipukit.timeline_measures`).

>>> tl = Timeline([Span(0, "F", 0, 2), Span(0, "link", 2, 1, bytes=64),
...                Span(1, "F", 3, 2), Span(1, "sync", 5, 1), Span(0, "sync", 5, 1)])
>>> m = tl.measures()
>>> m["makespan"], m["ideal_time"], round(m["total"], 3), round(m["utilisation"], 3)
(6.0, 2.0, 0.667, 0.333)
>>> m["idle"][1]                        # IPU 1 waited 3 cycles for IPU 0's activation
{'dependency': 3.0, 'sync': 1.0}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import timeline_measures


@dataclass(frozen=True)
class Span:
    """One thing one IPU did from ``start`` for ``duration``: ``kind`` is "compute",
    "exchange", "sync", "host" (the emulator), "F"/"B"/"W"/"R" (a pipeline op), "link" (an
    IPU-Link copy), a collective ("allreduce", "reducescatter", "allgather",
    "broadcast", "reduce") or "optimizer"; ``stage``/``microbatch`` are -1 where they do
    not apply, ``bytes`` what it moved, ``label`` what it was (a compute set, a tensor)."""

    ipu: int
    kind: str
    start: float
    duration: float
    stage: int = -1
    microbatch: int = -1
    bytes: int = 0
    label: str = ""

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True, eq=False)
class MemorySample:
    """Bytes in use on ``ipu`` at ``time``, by category (e.g. weights, stash)."""

    time: float
    ipu: int
    bytes: dict

    @property
    def total(self) -> int:
        return sum(self.bytes.values())


@dataclass(frozen=True, eq=False)
class Timeline:
    """Spans (and memory samples) of one run; iterate it for its spans."""

    spans: tuple[Span, ...]
    memory: tuple[MemorySample, ...] = ()
    clock_hz: float = 1.0
    num_ipus: int = field(default=0)

    def __post_init__(self):
        object.__setattr__(self, "spans", tuple(self.spans))
        object.__setattr__(self, "memory", tuple(self.memory))
        if not self.num_ipus:
            ipus = [s.ipu for s in self.spans] + [m.ipu for m in self.memory]
            object.__setattr__(self, "num_ipus", max(ipus, default=-1) + 1)

    def __iter__(self):
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def makespan(self) -> float:
        return max((s.end for s in self.spans), default=0.0)

    def measures(self) -> dict:
        """Bubble, utilisation and idle time of the run.

        ``makespan``: end of the last span (time starts at 0). ``ideal_time``: the busiest
        IPU's work (spans of kinds :data:`~ipukit.timeline_measures.WORK`). ``total``:
        bubble ÷ makespan (GPipe);
        ``ideal``: bubble ÷ ideal time (Megatron); ``span``: the zero-bubble paper's rate
        on the longest per-IPU span from its first to its last work. ``utilisation``: all
        IPUs' work ÷ (IPUs × makespan). ``busy``: work per IPU. ``idle``: per IPU, the time
        it did no work, by cause: a ``link`` transfer, ``exchange``, ``sync``, ``host``,
        a ``collective``, the ``optimizer``, or ``dependency`` (none of its own spans:
        it waited for another IPU).
        """
        return timeline_measures.measures(self)
