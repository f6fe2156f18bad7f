"""PipelineTimeline: watch a pipeline schedule (or a real pipeline run) unfold in time.

One row per IPU; a box per forward (F, light), backward (B, full colour), weight gradient
(W, striped: the second half of a split backward) and recomputation (R, dotted) of one
stage on one micro-batch, coloured per micro-batch and labelled with the op, micro-batch
and stage where they fit (``F3 · stage 1``, ``F3 s1``, ``F3``, ``3``), as in the schedule
figures of Graphcore's and PopTorch's pipelining tutorials. Where an IPU holds several
stages (interleaved 1F1B's chunks, ZB-V's and DualPipeV's V) a box also names its chunk
(``F3c1``) and carries a grey band (light: chunk 0, dark: the last); the ops DualPipeV runs
as one unit are bracketed together. Play moves a play head that reveals the timeline; the
panel below shows the stashed activations of every IPU over time (one line per IPU, named
in its legend: the schedule's own count, :meth:`Schedule.timeline`'s memory), in sync with
the play head. A second timeline (``compare``) goes below the first. The
three bubble measures (bubble ÷ total time, ÷ ideal time, and the zero-bubble paper's
per-stage span) and the utilisation are printed with it and explained: bubble ÷ ideal
time above 100 % means the IPUs wait longer than the busiest one works (782.6 % of ideal:
the run takes 8.83× the busiest IPU's own work).

A bare :class:`~ipukit.parallel.schedule.Schedule` is drawn with unit durations (every
op one step, as the published diagrams; pass ``t_B=2`` for the literature's convention;
``t_W``, when a split schedule is shown, defaults to ``t_F``, :func:`ipukit.report.w_time`)
and gets controls for the schedule kind (every kind, its origin in the tooltip), the number
of stages, interleaved 1F1B's chunks, the gradient accumulation count, recomputation and a
second schedule to compare side by side. A schedule's :meth:`~Schedule.timeline` plays the
same, without the controls and the units. A pipeline run's
``RunResult`` (``Pipeline.run``) is drawn with its real durations in cycles, its IPU-Link
copies, syncs and weight update, and its stash in bytes.

>>> from ipukit.parallel.schedule import schedule
>>> from ipukit.widgets import PipelineTimeline
>>> view = PipelineTimeline(schedule("grouped", 2, 4))
>>> view.frame = 200  # half way: frame k of 401 is time 10 * k / 400
>>> view.time(), [(b.ipu, b.label) for b in view.under_play_head()]
(5.0, [(0, 'F3'), (1, 'F2')])
"""

from __future__ import annotations

import math
import numbers
import textwrap
from dataclasses import dataclass, field, replace
from functools import cached_property

import matplotlib
import numpy as np
import traitlets
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ..errors import IpuError
from ..parallel.schedule import ALL_KINDS, Schedule, schedule
from ..report import (
    NAME_CHARS,
    OP_STYLE,
    PHASE_COLOURS,
    chunk_band,
    chunk_colour,
    chunks,
    display_name,
    figure_text,
    op_labels,
    op_name,
    w_time,
)
from ..timeline import Span, Timeline
from ._player import LINK, SLOWEST, Widget, esc, mb_colour, new_figure, pack, tint

#: Spans that are work: a pipeline's F/B/R (and W), an emulated run's compute phases.
COMPUTE = ("F", "B", "R", "W", "compute")
#: Play-head positions: frame k is time makespan * k / (FRAMES - 1).
FRAMES = 401
MAX_LABELS = 600
#: No op is drawn narrower than this many pixels (in the browser too).
MIN_OP_PX = 2
#: Where each schedule kind comes from (the kind selector's tooltips).
ORIGINS = {
    "grouped": "TensorFlow for IPU: PipelineSchedule.Grouped",
    "interleaved": "TensorFlow for IPU: PipelineSchedule.Interleaved",
    "sequential": "TensorFlow for IPU: PipelineSchedule.Sequential (PopTorch: "
                  "ShardedExecution)",
    "poptorch": "PopTorch: PipelinedExecution (PopART's pipeline)",
    "gpipe": "torch.distributed.pipelining: ScheduleGPipe",
    "1f1b": "torch.distributed.pipelining: Schedule1F1B (PipeDream-Flush, Megatron)",
    "interleaved_1f1b": "torch.distributed.pipelining: ScheduleInterleaved1F1B (Megatron's "
                        "interleaved 1F1B, virtual stages)",
    "zb_h1": "torch.distributed.pipelining: ScheduleInterleavedZeroBubble with one stage "
             "per rank (ZB-H1)",
    "zb_v": "torch.distributed.pipelining: ScheduleZBVZeroBubble (ZB-V)",
    "dualpipev": "torch.distributed.pipelining: ScheduleDualPipeV (DeepSeek's DualPipeV)",
}


def label(span: Span, chunk: int = -1) -> str:
    """An op's short name: ``F3`` for an op on micro-batch 3 (``F3c1`` of chunk 1), else
    its label or kind."""
    if span.kind in COMPUTE and span.microbatch >= 0:
        return f"{span.kind}{span.microbatch}" + (f"c{chunk}" if chunk >= 0 else "")
    return span.label or span.kind


def _check_spans(boxes, title) -> None:
    """A clear error for anything in ``boxes`` that is not a Span of whole-number IPU,
    stage and micro-batch, finite times and bytes, and text kind and label."""
    fields = {"ipu": numbers.Integral, "stage": numbers.Integral,
              "microbatch": numbers.Integral, "start": numbers.Real,
              "duration": numbers.Real, "bytes": numbers.Real, "kind": str, "label": str}
    for i, b in enumerate(boxes):
        if not isinstance(b, Span):
            raise TypeError(f"{display_name(title, 80)!r}: entry {i} is a "
                            f"{type(b).__name__}, not an ipukit.timeline.Span")
        bad = [f"{name}={display_name(repr(getattr(b, name)), 40)}"
               for name, kind in fields.items()
               if not isinstance(getattr(b, name), kind) or isinstance(getattr(b, name), bool)
               or kind is numbers.Real and not math.isfinite(getattr(b, name))]
        if bad:
            raise ValueError(f"{display_name(title, 80)!r}: span {i} has {', '.join(bad)}; "
                             "a Span's ipu, stage and microbatch are whole numbers, its "
                             "start, duration and bytes finite numbers, its kind and label "
                             "text")


@dataclass(frozen=True, eq=False)
class Panel:
    """What one panel draws: a :class:`~ipukit.timeline.Timeline`'s spans per IPU and
    each IPU's stash over time."""

    title: str
    boxes: tuple[Span, ...]
    ipus: tuple[int, ...]
    stash: dict = field(default_factory=dict)  # ipu -> (times, values), a step function
    stash_unit: str = "micro-batches"
    time_unit: str = "steps"
    #: Box indices that run as one unit on their IPU (DualPipeV's, ``Schedule.fused``).
    units: tuple = ()
    #: What a stash count means beyond its unit (a chunk's share of a micro-batch).
    stash_note: str = ""

    def __post_init__(self):
        _check_spans(self.boxes, self.title)
        if not any(b.kind in COMPUTE for b in self.boxes):
            raise ValueError(f"{display_name(self.title, 80)!r}: this timeline has no "
                             "F/B/R or compute spans to draw")

    @property
    def compute(self) -> list[Span]:
        return [b for b in self.boxes if b.kind in COMPUTE]

    @property
    def makespan(self) -> float:
        return max(b.end for b in self.boxes)

    @cached_property
    def chunk(self) -> tuple[list[int], int]:
        """Each box's chunk (-1: none) and the most stages an IPU holds
        (:func:`ipukit.report.chunks`)."""
        return chunks(self.boxes)

    def name(self, i: int) -> str:
        """Box ``i``'s short name, its chunk included (``F3c1``)."""
        return label(self.boxes[i], self.chunk[0][i])

    def measures(self) -> dict:
        """Bubble ÷ total time, ÷ ideal time, per-stage span, and utilisation of the
        F/B/R spans, from :meth:`ipukit.timeline.Timeline.measures` (time from the
        first op's start)."""
        t0 = min(b.start for b in self.compute)
        row = {q: r for r, q in enumerate(self.ipus)}
        ops = [replace(b, ipu=row[b.ipu], start=b.start - t0) for b in self.compute]
        return Timeline(ops, num_ipus=len(self.ipus)).measures()

    def stash_at(self, t: float) -> dict[int, float]:
        """Every IPU's stash at time ``t`` (after the changes at ``t``)."""
        out = {}
        for q, (times, values) in self.stash.items():
            i = np.searchsorted(times, t, side="right") - 1
            out[q] = float(values[i]) if i >= 0 else 0.0
        return out


def from_schedule(s: Schedule, t_F=1.0, t_B=1.0, t_R=None, t_W=None) -> Panel:
    """A schedule timed with ``Schedule.timeline`` (``t_W`` as given: None is 0); the stash
    is its memory: the micro-batches each IPU holds, as ``Schedule.peak_activations``
    counts them (F stashes, B frees, or W where the backward is split; a chunk's
    micro-batch counts 1/v)."""
    tl = s.timeline(t_F, t_B, t_R, t_W)
    index = {(o.phase, o.stage, o.microbatch): i for i, o in enumerate(s.ops)}
    units = tuple(tuple(sorted(index[key] for key in keys)) for keys in s.fused)
    recompute = ", recomputation" if s.recomputation else ""
    v = s.virtual_stages
    size = (f"{s.num_stages} stages" if v == 1 else
            f"{s.num_stages} IPUs × {v} chunks ({s.num_model_stages} model stages)")
    title = (f"{s.kind}: {size}, gradient accumulation {s.gradient_accumulation}"
             f"{recompute}{_durations(s, t_F, t_B, t_W)}")
    return from_run(tl, title, units)


def _durations(s: Schedule, t_F, t_B, t_W) -> str:
    """The op times in a title where W takes time (an unsplit B takes t_B + t_W)."""
    if not (t_W and all(isinstance(t, numbers.Real) for t in (t_F, t_B, t_W))):
        return ""
    if s.split:
        return f"; t_F {t_F:g}, t_B {t_B:g}, t_W {t_W:g}"
    return f"; t_F {t_F:g}, B takes t_B + t_W = {t_B + t_W:g}"


def from_run(run, title: str = "pipeline run", units: tuple = ()) -> Panel:
    """A ``RunResult`` of ``Pipeline.run`` (or its ``timeline`` records), in cycles, or a
    :class:`~ipukit.timeline.Timeline` (a schedule's, on its unit clock, in steps).

    The stash is the memory records' ``stash`` (bytes of a run, micro-batches of a
    schedule's timeline) when there are any, else counted in micro-batches from the F, B
    and W records (:func:`_count_stash`).
    """
    boxes = tuple(getattr(run, "timeline", run))
    _check_spans(boxes, title)  # before they are sorted by IPU
    ipus = tuple(sorted({b.ipu for b in boxes}))
    unit_clock = isinstance(run, Timeline) and run.clock_hz == 1.0
    time_unit = "steps" if unit_clock else "cycles"
    memory = getattr(run, "memory", None)
    if not memory:
        return Panel(title, boxes, ipus, _count_stash(boxes, ipus), "micro-batches",
                     time_unit, units)
    stash = {}
    for q in ipus:  # in the records' order where times tie: the last is the latest
        recs = sorted(((m.time, m.stash if hasattr(m, "stash") else m.bytes.get("stash", 0))
                       for m in memory if m.ipu == q), key=lambda r: r[0])
        stash[q] = (np.array([t for t, _ in recs]), np.array([v for _, v in recs]))
    if not unit_clock:
        return Panel(title, boxes, ipus, stash, "bytes", time_unit, units)
    count = chunks(boxes)[1]
    note = (f"a chunk's micro-batch counts 1/{count} (kit convention: equal chunks)"
            if count > 1 else "")
    return Panel(title, boxes, ipus, stash, "micro-batches", time_unit, units, note)


def _count_stash(boxes, ipus) -> dict:
    """Micro-batches each IPU holds: +1 when an F ends, -1 when its B ends (its W, where
    there are W ops: the zero-bubble paper's model with M_W = M_B)."""
    change = {"F": 1, "W": -1} if any(b.kind == "W" for b in boxes) else {"F": 1, "B": -1}
    stash = {}
    for q in ipus:
        ev = sorted((b.end, change.get(b.kind, 0)) for b in boxes if b.ipu == q)
        stash[q] = (np.array([0.0] + [t for t, _ in ev]), np.cumsum([0] + [d for _, d in ev]))
    return stash


def _timeline(obj, t_F, t_B, t_R, t_W) -> Panel:
    if isinstance(obj, Panel):
        return obj
    if isinstance(obj, Schedule):
        return from_schedule(obj, t_F, t_B, t_R, t_W)
    if isinstance(obj, Timeline) and obj.clock_hz == 1.0:
        return from_run(obj, "timeline (unit times)")
    return from_run(obj)


class PipelineTimeline(Widget):
    """A schedule or run timeline, animated; ``compare`` puts a second one below it.

    ``frame`` is the play head's position: frame ``k`` of ``FRAMES`` is time
    ``makespan * k / (FRAMES - 1)`` (``time()``), and the whole run plays in ``duration``
    seconds (10 by default). With ``controls=True`` (the default for a Schedule) the kind,
    number of stages, gradient accumulation count, recomputation and the schedule to
    compare with can be changed in the browser (``settings``; a bad one sets ``error``).
    In the browser: wheel to zoom (labels appear when the ops are wide enough), drag to
    pan, hover an op for its IPU, stage, chunk, micro-batch, start, duration and bytes (and
    the unit it runs in), click it to read it as ``view.selected`` (and, with :meth:`link`,
    to show its supersteps). ``t_W`` (a W op's time) defaults to ``t_F`` when a schedule
    shown splits its backward (:func:`ipukit.report.w_time`), so every kind compares on the
    same work.
    """

    settings = traitlets.Dict().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)

    def __init__(self, schedule_or_run, compare=None, t_F=1.0, t_B=1.0, t_R=None,
                 controls: bool | None = None, t_W=None, **kwargs):
        self.durations = (t_F, t_B, t_R, t_W)
        self.sources = [schedule_or_run] + ([compare] if compare is not None else [])
        self.timelines = self._panels(self.sources)
        if len({tl.time_unit for tl in self.timelines}) > 1:
            raise ValueError("compare a schedule with a schedule and a run with a run: one "
                             "is timed in steps, the other in cycles")
        if controls is None:
            controls = isinstance(schedule_or_run, Schedule)
        if controls and not isinstance(schedule_or_run, Schedule):
            raise TypeError("controls need a Schedule; a run's timeline is fixed")
        self.has_controls = bool(controls)
        self._times = self._frame_times()
        super().__init__(**kwargs)
        if self.has_controls:
            self.settings = self._first_settings()
            self.observe(self._on_settings, names="settings")

    def _first_settings(self) -> dict:
        """The controls' settings of the schedules given (chunks: 2 unless an interleaved
        1F1B schedule holds more)."""
        s = self.sources[0]
        chunks = [x.virtual_stages for x in self.sources if x.kind == "interleaved_1f1b"]
        return {"kind": s.kind, "stages": s.num_stages, "ga": s.gradient_accumulation,
                "recompute": s.recomputation,
                "compare": self.sources[1].kind if len(self.sources) > 1 else "none",
                "chunks": (chunks or [2])[0]}

    # -- the model ---------------------------------------------------------------------------
    def _panels(self, sources) -> list[Panel]:
        t_F, t_B, t_R, t_W = self.durations
        t_W = w_time([s for s in sources if isinstance(s, Schedule)], t_F, t_W)
        return [_timeline(s, t_F, t_B, t_R, t_W) for s in sources]

    def _frame_times(self) -> np.ndarray:
        return np.linspace(0.0, max(tl.makespan for tl in self.timelines), FRAMES)

    def num_frames(self) -> int:
        return len(self._times)

    def static_frame(self) -> int:
        """The frame shown, else the last: the whole run revealed."""
        return self.frame or self.num_frames() - 1

    def time(self, k: int | None = None) -> float:
        """The play head's time at frame ``k`` (default: the frame shown)."""
        return float(self._times[self.frame if k is None else k])

    def under_play_head(self, k: int | None = None, which: int = 0) -> list[Span]:
        """The F/B/W/R boxes running at the play head (start <= t < end), by IPU."""
        return [self.timelines[which].boxes[i] for i in self._running(k, which)]

    def _running(self, k: int | None, which: int) -> list[int]:
        """Indices of the work boxes running at the play head, by IPU."""
        t = self.time(k)
        boxes = self.timelines[which].boxes
        return sorted((i for i, b in enumerate(boxes)
                       if b.kind in COMPUTE and b.start <= t < b.end),
                      key=lambda i: boxes[i].ipu)

    def revealed(self, k: int | None = None, which: int = 0) -> list[Span]:
        """Boxes the play head has reached (started before or at it)."""
        t = self.time(k)
        return [b for b in self.timelines[which].boxes if b.start <= t]

    def stash(self, k: int | None = None, which: int = 0) -> dict[int, float]:
        """Each IPU's stash at the play head (what the memory panel marks)."""
        return self.timelines[which].stash_at(self.time(k))

    def selected_box(self) -> Span | None:
        """The op clicked in the browser (``selected``), as a Span, else None."""
        sel = self.selected
        if sel.get("kind") != "span":
            return None
        return self.timelines[sel["panel"]].boxes[sel["index"]]

    def link(self, view) -> None:
        """Clicking an op moves ``view`` (a BSPView of the run's trace) to the superstep
        that runs at the op's start cycle (to its phase, for an emulated run's spans)."""
        def follow(_change):
            box = self.selected_box()
            if box is None:
                return
            starts = [e.start for e in view.events]
            e = max(int(np.searchsorted(starts, box.start, side="right")) - 1, 0)
            phase = box.kind if box.kind in ("sync", "exchange", "compute") else "sync"
            view.frame = view.frame_index(e, phase)
        self.observe(follow, names="selected")

    # -- the browser's data --------------------------------------------------------------------
    def payload(self) -> dict:
        """Every panel's spans as flat arrays (one entry per span) and stash curves."""
        kinds = sorted({b.kind for tl in self.timelines for b in tl.boxes})
        code = {k: i for i, k in enumerate(kinds)}
        panels, arrays, cols = [], {}, {k: [] for k in ("ipu", "kind", "stage", "microbatch",
                                                        "chunk", "unit", "start", "duration",
                                                        "bytes")}
        offset = 0
        for i, tl in enumerate(self.timelines):
            boxes = tl.boxes
            cols["ipu"] += [b.ipu for b in boxes]
            cols["kind"] += [code[b.kind] for b in boxes]
            cols["stage"] += [b.stage for b in boxes]
            cols["microbatch"] += [b.microbatch for b in boxes]
            cols["chunk"] += tl.chunk[0]
            unit = [-1] * len(boxes)
            for u, members in enumerate(tl.units):
                for j in members:
                    unit[j] = u
            cols["unit"] += unit
            cols["start"] += [b.start for b in boxes]
            cols["duration"] += [b.end - b.start for b in boxes]
            cols["bytes"] += [b.bytes for b in boxes]
            memory = []
            for q, (times, values) in sorted(tl.stash.items()):
                arrays[f"mem_t_{i}_{q}"] = pack(np.asarray(times, np.float64))
                arrays[f"mem_v_{i}_{q}"] = pack(np.asarray(values, np.float64))
                memory.append({"ipu": int(q)})
            panel = {"title": tl.title, "num_spans": len(boxes), "offset": offset,
                     "rows": [int(q) for q in tl.ipus],
                     "measures": {k: float(v) for k, v in tl.measures().items()
                                  if k in ("total", "ideal", "span", "utilisation")},
                     "stash_unit": tl.stash_unit, "stash_note": tl.stash_note,
                     "memory": memory, "chunks": tl.chunk[1]}
            if any(b.label for b in boxes):
                panel["labels"] = [b.label for b in boxes]
            panels.append(panel)
            offset += len(boxes)
        for k in ("ipu", "kind", "stage", "microbatch", "chunk", "unit"):
            arrays[k] = pack(np.asarray(cols[k], np.int64))
        for k in ("start", "duration", "bytes"):
            arrays[k] = {"dtype": "f8",
                         "data": np.asarray(cols[k], "<f8").tobytes()}
        controls = None
        if self.has_controls:
            controls = {"kinds": list(ALL_KINDS), "origins": [ORIGINS[k] for k in ALL_KINDS],
                        **(self.settings or self._first_settings())}
        meta = {"kind": "timeline", "kinds": kinds, "panels": panels,
                "makespan": float(self._times[-1]), "num_frames": self.num_frames(),
                "time_unit": self.timelines[0].time_unit, "controls": controls}
        return {"meta": meta, "arrays": arrays}

    def _on_settings(self, change) -> None:
        c = change["new"]
        kinds = [c["kind"]] + ([c["compare"]] if c.get("compare", "none") != "none" else [])
        try:
            counts = [int(c["stages"]), int(c["ga"]), int(c.get("chunks", 2))]
        except (KeyError, TypeError, ValueError):
            self.error = ("stages, gradient accumulation and chunks must be whole numbers, got "
                          + ", ".join(display_name(repr(c.get(key)), 40)
                                      for key in ("stages", "ga", "chunks")))
            return
        try:
            sources = [schedule(k, counts[0], counts[1], recomputation=bool(c["recompute"]),
                                virtual_stages=counts[2] if k == "interleaved_1f1b" else None)
                       for k in kinds]
        except IpuError as e:
            self.error = str(e)
            return
        self.error = ""
        self.sources = sources
        self.timelines = self._panels(sources)
        self._times = self._frame_times()
        self.fig = None
        self.playing = False
        self.frame = 0
        self._payload = self.clean_payload()

    # -- drawing -----------------------------------------------------------------------------
    def _build_figure(self):
        if self.fig is None:
            self.fig = new_figure(12, 4)
        fig, tls = self.fig, self.timelines
        fig.clf()
        # panels one above the other (as in the browser), each the figure's full width;
        # sizes in inches: a title line, a row of ops, the stash panel, the gaps
        rows = max(len(tl.ipus) for tl in tls)
        chars = int(12 * 0.8 * 72 / (0.55 * 9.5))  # a title line's characters
        titles = [_panel_title(tl, chars) for tl in tls]
        title = 0.1 + 0.17 * max(t.count("\n") + 1 for t in titles)
        ops, stash, gap = 0.42 * rows + 0.3, 1.3, 0.3
        head = 0.8  # the figure's title line and the legend's
        height = head + len(tls) * (title + ops + gap + stash + 0.45)
        fig.set_size_inches(12, height)
        outer = fig.add_gridspec(len(tls), 1, left=0.08, right=0.92,
                                 top=1 - (head + title) / height, bottom=0.45 / height,
                                 hspace=(title + 0.45) / (ops + gap + stash))
        xmax = max(tl.makespan for tl in tls)
        self.panels = []
        for i, tl in enumerate(tls):
            inner = outer[i].subgridspec(2, 1, height_ratios=[ops, stash],
                                         hspace=gap / ((ops + stash) / 2))
            ax = fig.add_subplot(inner[0])
            mem = fig.add_subplot(inner[1], sharex=ax)
            ax.set_title(titles[i], fontsize=9.5, loc="left")
            self.panels.append(self._draw_panel(tl, ax, mem, xmax))
        self.clock = fig.text(0.92, 1 - 0.3 / height, "", ha="right", va="center",
                              fontsize=12, family="monospace")
        fig.text(0.08, 1 - 0.3 / height, "Pipeline timeline", fontsize=13, weight="bold",
                 va="center")
        handles, labels = _legend(tls)
        if labels:  # pipeline ops (an emulated run's compute spans have no micro-batch)
            fig.text(0.08, 1 - 0.6 / height, "colour = micro-batch:", fontsize=8.5,
                     va="center")
            fig.legend(handles, labels, loc="center left", ncol=len(labels), frameon=False,
                       bbox_to_anchor=(0.19, 1 - 0.6 / height), fontsize=8.5,
                       handlelength=1.6, columnspacing=1.2,
                       handler_map={tuple: HandlerTuple(ndivide=None, pad=0)})

    def _draw_panel(self, tl: Panel, ax, mem, xmax):
        row = {q: r for r, q in enumerate(tl.ipus)}
        width_px = ax.get_position().width * self.fig.get_figwidth() * self.fig.dpi
        px = width_px / xmax
        thin = np.median([b.end - b.start for b in tl.compute]) * px < 6
        chunk, count = tl.chunk
        ends = [max(b.end, b.start + MIN_OP_PX / px) for b in tl.boxes]
        for hatch in dict.fromkeys(h for _, h in OP_STYLE.values()):  # one collection each
            verts, colours = [], []
            for b, end in zip(tl.boxes, ends):
                mix, pattern = OP_STYLE.get(b.kind, (0.45, None))
                if b.kind in COMPUTE and pattern == hatch:
                    y = row[b.ipu]
                    verts.append([(b.start, y - 0.42), (end, y - 0.42), (end, y + 0.42),
                                  (b.start, y + 0.42)])
                    colours.append(tint(mb_colour(b.microbatch), mix))
            if verts:
                ax.add_collection(PolyCollection(verts, facecolors=colours, hatch=hatch,
                                                 edgecolors="white",
                                                 linewidths=0 if thin else 0.8))
        banded = [i for i, c in enumerate(chunk) if c >= 0]
        if banded:  # the chunk of each op: a grey band along its bottom
            ax.add_collection(PolyCollection(
                [chunk_band(tl.boxes[i].start, ends[i], row[tl.boxes[i].ipu], 0.42)
                 for i in banded], facecolors=[chunk_colour(chunk[i], count) for i in banded],
                linewidths=0))
        if tl.units:  # the ops run as one unit: a bracket over them
            segments = []
            for members in tl.units:
                a, b = tl.boxes[members[0]].start, max(ends[j] for j in members)
                y = row[tl.boxes[members[0]].ipu] - 0.47
                segments.append([(a, y + 0.12), (a, y), (b, y), (b, y + 0.12)])
            ax.add_collection(LineCollection(segments, colors="#111111", linewidths=1.2))
        other = [b for b in tl.boxes if b.kind not in COMPUTE]
        if other:
            ends = [max(b.end, b.start + MIN_OP_PX / px) for b in other]
            verts = [[(b.start, row[b.ipu] + 0.3), (e, row[b.ipu] + 0.3),
                      (e, row[b.ipu] + 0.48), (b.start, row[b.ipu] + 0.48)]
                     for b, e in zip(other, ends)]
            colours = [thin_colour(b.kind) for b in other]
            ax.add_collection(PolyCollection(verts, facecolors=colours, linewidths=0))
        char_px = 0.62 * self.fig.dpi / 72  # a character's width per point of size, about
        if len(tl.compute) <= MAX_LABELS:
            for b, c in zip(tl.boxes, chunk):
                if b.kind not in COMPUTE:
                    continue
                w = (b.end - b.start) * px
                texts = op_labels(b, c) if b.microbatch >= 0 else [figure_text(label(b), 40)]
                fits = [(t, 7 if t.isdigit() else 8) for t in texts]
                fits = [(t, pt) for t, pt in fits if pt * char_px * len(t) + 3 <= w]
                if fits:
                    ax.text((b.start + b.end) / 2, row[b.ipu], fits[0][0], ha="center",
                            va="center", fontsize=fits[0][1], clip_on=True,
                            color="white" if b.kind == "B" else "#1a1a1a")
        ax.set_ylim(len(tl.ipus) - 0.5, -0.5)
        ax.set_xlim(0, xmax)
        ax.set_yticks(range(len(tl.ipus)), [f"IPU {q}" for q in tl.ipus], fontsize=9)
        ax.tick_params(axis="x", labelbottom=False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        curtains = []
        for a in (ax, mem):
            curtains.append(a.add_patch(Rectangle((0, 0), xmax * 2, 1, fc="white", alpha=0.82,
                                                  ec="none", zorder=5,
                                                  transform=a.get_xaxis_transform())))
        heads = [a.axvline(0, color=SLOWEST, lw=1.8, zorder=6) for a in (ax, mem)]
        n = len(tl.ipus)
        for i, q in enumerate(tl.ipus):
            times, values = tl.stash[q]
            scale = 1024 if tl.stash_unit == "bytes" else 1
            mem.step(np.append(times, xmax), np.append(values, values[-1]) / scale,
                     where="post", color=_ipu_colour(i, n), lw=1.6, label=f"IPU {q}")
        dots = mem.scatter(np.zeros(n), np.zeros(n), zorder=7, s=28, edgecolors="k",
                           c=[_ipu_colour(i, n) for i in range(n)])
        unit = "KiB" if tl.stash_unit == "bytes" else "micro-batches"
        mem.set_ylabel(f"stashed\n({unit})", fontsize=9)
        mem.set_xlabel(f"time ({tl.time_unit})", fontsize=9)
        mem.tick_params(labelsize=8)
        ax.tick_params(labelsize=8)
        mem.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
        if n <= 8:  # the stash lines' legend
            mem.legend(loc="upper left", bbox_to_anchor=(1.0, 1.05), fontsize=7.5,
                       frameon=False)
        else:
            mem.text(1.01, 1, f"IPU {tl.ipus[0]}: dark …\nIPU {tl.ipus[-1]}: light",
                     transform=mem.transAxes, va="top", fontsize=8)
        return {"curtains": curtains, "heads": heads, "dots": dots, "tl": tl,
                "scale": 1024 if tl.stash_unit == "bytes" else 1}

    def draw(self, k: int) -> None:
        if self.fig is None:
            self._build_figure()
        t = self.time(k)
        for i, p in enumerate(self.panels):
            for c in p["curtains"]:
                c.set_x(t)
            for h in p["heads"]:
                h.set_xdata([t, t])
            now = self.stash(k, i)
            p["dots"].set_offsets([(t, now[q] / p["scale"]) for q in p["tl"].ipus])
        unit = self.timelines[0].time_unit
        self.clock.set_text(f"t = {t:,.{0 if unit == 'cycles' else 1}f} {unit}")

    def caption(self, k: int | None = None) -> str:
        """The measures and what runs at the play head of frame ``k``, as HTML."""
        k = self.frame if k is None else k
        parts = []
        for i, tl in enumerate(self.timelines):
            m = tl.measures()
            running = ", ".join(f"IPU {tl.boxes[j].ipu}: {display_name(tl.name(j), 80)}"
                                for j in self._running(k, i))
            stash = ", ".join(f"IPU {q}: {amount(v)}" for q, v in self.stash(k, i).items())
            parts.append(
                f"<b>{esc(tl.title, NAME_CHARS)}</b>: {esc(measures_text(m))}.<br>At the play "
                "head: "
                f"{esc(running) or 'no op running'}. Stashed ({esc(tl.stash_unit)}"
                f"{'; ' + esc(tl.stash_note) if tl.stash_note else ''}): {esc(stash)}.")
        return "<br>".join(parts)


def _legend(tls) -> tuple[list, list[str]]:
    """The static picture's legend: the kinds of op shown (in micro-batch 0's colour), the
    chunk bands and the units' bracket, where the panels have them."""
    shown = {b.kind for tl in tls for b in tl.compute if b.microbatch >= 0}
    split = "W" in shown
    handles, labels = [], []
    for kind, (mix, hatch) in OP_STYLE.items():
        if kind in shown:
            handles.append(Rectangle((0, 0), 1, 1, fc=tint(mb_colour(0), mix), ec="white",
                                     hatch=hatch))
            labels.append(op_name(kind, split))
    count = max(tl.chunk[1] for tl in tls)
    if count > 1:
        handles.append(tuple(Rectangle((0, 0), 1, 1, color=chunk_colour(c, count))
                             for c in range(count)))
        labels.append(f"band: chunk 0..{count - 1}")
    if any(tl.units for tl in tls):
        handles.append(Line2D([0, 1], [1, 1], color="#111111", lw=1.2))
        labels.append("bracket: one unit")
    for colour, names in thin_kinds(tls):
        handles.append(Rectangle((0, 0), 1, 0.4, color=colour))
        labels.append(f"thin bar: {', '.join(figure_text(k, 24) for k in names)}")
    return handles, labels


def thin_colour(kind: str) -> str:
    """The colour of a thin bar under the boxes (a span that is no op): an IPU-Link copy
    blue, a sync or exchange in its phase's colour (as BSPView), the rest grey (the browser's
    colours, static/ipukit_widgets.js)."""
    if kind in ("sync", "exchange"):
        return PHASE_COLOURS[kind]
    return LINK if kind == "link" else "#7f7f7f"


def thin_kinds(tls) -> list[tuple[str, list[str]]]:
    """(colour, the kinds drawn in it) of the thin bars shown, for the legend: the grey ones
    together (allreduce, optimizer)."""
    kinds = sorted({b.kind for tl in tls for b in tl.boxes if b.kind not in COMPUTE})
    out: dict[str, list[str]] = {}
    for kind in kinds:
        out.setdefault(thin_colour(kind), []).append(kind)
    return list(out.items())


def amount(v: float) -> str:
    """A stash count or bytes as the caption shows it: whole, or to two decimals."""
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}".rstrip("0")


def _panel_title(tl: Panel, chars: int) -> str:
    """A panel's title and measures in lines of at most ``chars`` characters."""
    return "\n".join([figure_text(tl.title, chars)] +
                     textwrap.wrap(measures_text(tl.measures()), chars))


def measures_text(m: dict) -> str:
    """The bubble measures in words: bubble ÷ ideal above 100 % means the IPUs wait longer
    than the busiest one works, and the run takes (1 + that) × the ideal time."""
    return (f"bubble {100 * m['total']:.1f}% of total · {100 * m['ideal']:.1f}% of ideal "
            f"(the run takes {1 + m['ideal']:.2f}× the busiest IPU's work) · span "
            f"{100 * m['span']:.1f}% · utilisation {100 * m['utilisation']:.1f}%")


def _ipu_colour(i: int, n: int):
    """Distinct colours for up to 8 IPUs, a dark-to-light ramp for more."""
    if n <= 8:
        return ["#222222", "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
                "#9E9E00"][i]
    return matplotlib.colormaps["viridis"](0.9 * i / (n - 1))
