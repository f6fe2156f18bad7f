"""What a :class:`~ipukit.timeline.Timeline` says about a run: the bubble three ways, the
utilisation, and each IPU's idle time attributed to its cause (waiting on a dependency, a
link transfer, a sync, the optimizer), which no pipeline tool reports and which users of
pipeline schedulers ask most. ``Timeline.measures()`` calls :func:`measures`; the widgets,
:mod:`ipukit.report` and ``Schedule.bubble()`` read it.

>>> from ipukit.timeline import Span, Timeline
>>> tl = Timeline([Span(0, "F", 0, 2), Span(0, "sync", 2, 1), Span(1, "F", 2, 1)])
>>> m = measures(tl)
>>> m["makespan"], m["busy"], m["idle"]
(3.0, {0: 2.0, 1: 1.0}, {0: {'sync': 1.0}, 1: {'dependency': 2.0}})
"""

from __future__ import annotations

import numpy as np

#: Span kinds that are work (compute); everything else is time around it.
WORK = ("compute", "F", "B", "R", "W")
#: Which cause an idle moment is charged to when spans of several kinds cover it (first
#: wins); an IPU covered by none of its own spans is waiting on a dependency.
CAUSES = {"link": "link", "exchange": "exchange", "sync": "sync", "host": "host",
          "remote": "Streaming Memory",
          "allreduce": "collective", "reducescatter": "collective",
          "allgather": "collective", "broadcast": "collective", "reduce": "collective",
          "optimizer": "optimizer"}


def measures(timeline) -> dict:
    """Bubble, utilisation and idle time of the run (:meth:`Timeline.measures` says what
    each entry is)."""
    n, total = timeline.num_ipus, timeline.makespan
    per_ipu = [_ipu_time([s for s in timeline.spans if s.ipu == q], total) for q in range(n)]
    busy = {q: work for q, (work, _, _) in enumerate(per_ipu)}
    ideal = max(busy.values(), default=0.0)
    span = max((spread for _, spread, _ in per_ipu), default=0.0)
    return {
        "makespan": float(total),
        "ideal_time": ideal,
        "total": (total - ideal) / total if total else 0.0,
        "ideal": (total - ideal) / ideal if ideal else 0.0,
        "span": (span - ideal) / span if span else 0.0,
        "utilisation": sum(busy.values()) / (n * total) if n and total else 0.0,
        "busy": busy,
        "idle": {q: idle for q, (_, _, idle) in enumerate(per_ipu)},
    }


def _ipu_time(spans, total) -> tuple[float, float, dict]:
    """One IPU's work time over [0, total], the time from its first to its last work, and
    the rest split by what covered it."""
    edges = np.unique([0.0, float(total)] + [t for s in spans for t in (s.start, s.end)])
    edges = edges[(edges >= 0) & (edges <= total)]
    causes = [*CAUSES.values(), "dependency"]  # by rank; uncovered: a dependency
    rank = np.full(max(len(edges) - 1, 0), len(causes) - 1)
    for s in spans:
        if s.kind in WORK or s.kind in CAUSES:
            lo, hi = np.searchsorted(edges, [s.start, s.end])
            r = -1 if s.kind in WORK else causes.index(CAUSES[s.kind])
            rank[lo:hi] = np.minimum(rank[lo:hi], r)
    widths, idle = np.diff(edges), {}
    for r, w in zip(rank, widths):
        if r >= 0 and w > 0:
            idle[causes[r]] = idle.get(causes[r], 0.0) + float(w)
    work = [s for s in spans if s.kind in WORK]
    spread = max(s.end for s in work) - min(s.start for s in work) if work else 0.0
    return float(widths[rank < 0].sum()), float(spread), idle
