"""PipelineTimeline: watch a pipeline schedule (or a real pipeline run) unfold in time.

One row per IPU; a box per forward (F, light), backward (B, full colour) and
recomputation (R, dotted) of one stage on one micro-batch, labelled with the micro-batch
and coloured per micro-batch, as in the schedule figures of Graphcore's and PopTorch's
pipelining tutorials. Play moves a play head that reveals the timeline; the panel below
shows the stashed activations of every IPU over time, in sync with the play head. The
three bubble measures (bubble ÷ total time, ÷ ideal time, and the zero-bubble paper's
per-stage span) and the utilisation are printed with it.

A bare :class:`~ipukit.parallel.schedule.Schedule` is drawn with unit durations (every
op one step, as the published diagrams; pass ``t_B=2`` for the literature's convention)
and gets controls for the schedule kind, the number of stages, the gradient accumulation
count, recomputation and a second schedule to compare side by side. A pipeline run's
``RunResult`` (``Pipeline.run``) is drawn with its real durations in cycles, its IPU-Link
copies, syncs and weight update, and its stash in bytes.

>>> from ipukit.parallel.schedule import schedule
>>> from ipukit.widgets import PipelineTimeline
>>> view = PipelineTimeline(schedule("grouped", 2, 4))
>>> view.slider.value = 4
>>> view.time(), [(b.ipu, b.label) for b in view.under_play_head()]
(4.0, [(0, 'B0'), (1, 'B1')])
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import ipywidgets as widgets
import matplotlib
import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ..errors import IpuError
from ..parallel.schedule import KINDS, Schedule, schedule
from ..timeline import Span, Timeline
from ._player import LINK, SLOWEST, Player, esc, mb_colour, new_figure, tint

COMPUTE = ("F", "B", "R")
#: Above this many play-head positions the play head moves in even steps instead.
MAX_FRAMES = 240
MAX_LABELS = 600


def label(span: Span) -> str:
    """What a box shows: ``F3`` for an op on micro-batch 3, else its kind."""
    return f"{span.kind}{span.microbatch}" if span.kind in COMPUTE else span.kind


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

    @property
    def compute(self) -> list[Span]:
        return [b for b in self.boxes if b.kind in COMPUTE]

    @property
    def makespan(self) -> float:
        return max(b.end for b in self.boxes)

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


def from_schedule(s: Schedule, t_F=1.0, t_B=1.0, t_R=None) -> Panel:
    """A schedule timed with ``Schedule.timing``; the stash counts micro-batches per IPU.

    A stage stashes a micro-batch's activations when its F ends and frees them when its B
    ends (with recomputation it stashes only the input, still one entry per micro-batch).
    """
    boxes = s.timeline(t_F, t_B, t_R).spans
    ipus = tuple(range(s.num_stages))
    stash = _count_stash(boxes if s.training else (), ipus)
    recompute = ", recomputation" if s.recomputation else ""
    title = (f"{s.kind}: {s.num_stages} stages, gradient accumulation "
             f"{s.gradient_accumulation}{recompute}")
    return Panel(title, boxes, ipus, stash)


def from_run(run, title: str = "pipeline run") -> Panel:
    """A ``RunResult`` of ``Pipeline.run`` (or its ``timeline`` records), in cycles.

    The stash is the run's memory records' ``stash`` bytes when it has them, else counted
    in micro-batches from the F and B records.
    """
    boxes = tuple(getattr(run, "timeline", run))
    if not any(b.kind in COMPUTE for b in boxes):
        raise ValueError("this run timeline has no F/B/R records to draw")
    ipus = tuple(sorted({b.ipu for b in boxes}))
    memory = getattr(run, "memory", None)
    if memory:
        stash = {}
        for q in ipus:
            recs = sorted((m.time, m.stash if hasattr(m, "stash") else m.bytes.get("stash", 0))
                          for m in memory if m.ipu == q)
            stash[q] = (np.array([t for t, _ in recs]), np.array([v for _, v in recs]))
        return Panel(title, boxes, ipus, stash, "bytes", "cycles")
    return Panel(title, boxes, ipus, _count_stash(boxes, ipus), "micro-batches", "cycles")


def _count_stash(boxes, ipus) -> dict:
    """Micro-batches each IPU holds: +1 when an F ends, -1 when its B ends."""
    stash = {}
    for q in ipus:
        ev = sorted((b.end, {"F": 1, "B": -1}.get(b.kind, 0)) for b in boxes if b.ipu == q)
        stash[q] = (np.array([0.0] + [t for t, _ in ev]), np.cumsum([0] + [d for _, d in ev]))
    return stash


def _timeline(obj, t_F, t_B, t_R) -> Panel:
    if isinstance(obj, Panel):
        return obj
    if isinstance(obj, Schedule):
        return from_schedule(obj, t_F, t_B, t_R)
    return from_run(obj)


class PipelineTimeline(Player):
    """A schedule or run timeline, animated; ``compare`` puts a second one beside it.

    ``value`` is the frame; ``time()`` the play head's time. With ``controls=True`` (the
    default for a Schedule) the kind, number of stages, gradient accumulation count,
    recomputation and the schedule to compare with can be changed with the mouse.
    """

    def __init__(self, schedule_or_run, compare=None, t_F=1.0, t_B=1.0, t_R=None,
                 controls: bool | None = None, interval: int = 500):
        self.durations = (t_F, t_B, t_R)
        self.sources = [schedule_or_run] + ([compare] if compare is not None else [])
        self.timelines = [_timeline(s, t_F, t_B, t_R) for s in self.sources]
        if len({tl.time_unit for tl in self.timelines}) > 1:
            raise ValueError("compare a schedule with a schedule and a run with a run: one "
                             "is timed in steps, the other in cycles")
        self._times = self._frame_times()
        self.error = widgets.HTML()
        if controls is None:
            controls = isinstance(schedule_or_run, Schedule)
        self.controls = self._make_controls(schedule_or_run) if controls else {}
        self.fig = new_figure(12, 4)
        self._build_figure()
        super().__init__(controls=list(self.controls.values()), interval=interval,
                         label="time")
        if self.controls:  # a bad setting is explained under the controls
            self.children = self.children[:2] + (self.error,) + self.children[2:]

    # -- the model ---------------------------------------------------------------------------
    def _frame_times(self) -> np.ndarray:
        edges = {0.0}
        for tl in self.timelines:
            edges.update(b.start for b in tl.compute)
            edges.update(b.end for b in tl.boxes)
        times = np.array(sorted(edges))
        if times.size > MAX_FRAMES:
            times = np.linspace(0.0, times[-1], MAX_FRAMES)
        return times

    def num_frames(self) -> int:
        return len(self._times)

    def time(self, k: int | None = None) -> float:
        """The play head's time at frame ``k`` (default: the slider's)."""
        return float(self._times[self.value if k is None else k])

    def under_play_head(self, k: int | None = None, which: int = 0) -> list[Span]:
        """The F/B/R boxes running at the play head (start <= t < end), by IPU."""
        t = self.time(k)
        return sorted((b for b in self.timelines[which].compute if b.start <= t < b.end),
                      key=lambda b: b.ipu)

    def revealed(self, k: int | None = None, which: int = 0) -> list[Span]:
        """Boxes the play head has reached (started before or at it)."""
        t = self.time(k)
        return [b for b in self.timelines[which].boxes if b.start <= t]

    def stash(self, k: int | None = None, which: int = 0) -> dict[int, float]:
        """Each IPU's stash at the play head (what the memory panel marks)."""
        return self.timelines[which].stash_at(self.time(k))

    # -- controls ----------------------------------------------------------------------------
    def _make_controls(self, s) -> dict:
        if not isinstance(s, Schedule):
            raise TypeError("controls need a Schedule; a run's timeline is fixed")
        other = self.sources[1].kind if len(self.sources) > 1 else "none"
        style = {"description_width": "initial"}
        c = {
            "kind": widgets.Dropdown(options=KINDS, value=s.kind, description="schedule",
                                     style=style, layout=widgets.Layout(width="190px")),
            "stages": widgets.BoundedIntText(s.num_stages, min=1, max=16, description="stages",
                                             style=style, layout=widgets.Layout(width="110px")),
            "ga": widgets.BoundedIntText(s.gradient_accumulation, min=1, max=512,
                                         description="gradient accumulation", style=style,
                                         layout=widgets.Layout(width="210px")),
            "recompute": widgets.Checkbox(s.recomputation, description="recomputation",
                                          indent=False, layout=widgets.Layout(width="120px")),
            "compare": widgets.Dropdown(options=("none",) + KINDS, value=other,
                                        description="compare with", style=style,
                                        layout=widgets.Layout(width="200px")),
        }
        for w in c.values():
            w.observe(self._on_control, names="value")
        return c

    def _on_control(self, _change=None) -> None:
        c = self.controls
        kinds = [c["kind"].value] + ([c["compare"].value] if c["compare"].value != "none"
                                     else [])
        try:
            sources = [schedule(k, c["stages"].value, c["ga"].value,
                                recomputation=c["recompute"].value) for k in kinds]
        except IpuError as e:
            self.error.value = f"<span style='color:{SLOWEST}'>{esc(e)}</span>"
            return
        self.error.value = ""
        self.sources = sources
        self.timelines = [_timeline(s, *self.durations) for s in sources]
        self._times = self._frame_times()
        self._build_figure()
        self.reset_frames()

    # -- drawing -----------------------------------------------------------------------------
    def _build_figure(self):
        fig, tls = self.fig, self.timelines
        fig.clf()
        rows = max(len(tl.ipus) for tl in tls)
        height = 1.3 + 0.42 * rows + 2.0
        fig.set_size_inches(12, height)
        gs = fig.add_gridspec(2, len(tls), height_ratios=[0.42 * rows + 0.3, 1.6],
                              left=0.08, right=0.92, top=1 - 0.85 / height,
                              bottom=0.45 / height, hspace=0.22, wspace=0.12)
        xmax = max(tl.makespan for tl in tls)
        self.panels = []
        for i, tl in enumerate(tls):
            ax = fig.add_subplot(gs[0, i])
            mem = fig.add_subplot(gs[1, i], sharex=ax)
            self.panels.append(self._draw_panel(tl, ax, mem, xmax, first=i == 0,
                                                last=i == len(tls) - 1))
        self.clock = fig.text(0.92, 1 - 0.3 / height, "", ha="right", va="center",
                              fontsize=12, family="monospace")
        fig.text(0.08, 1 - 0.3 / height, "Pipeline timeline", fontsize=13, weight="bold",
                 va="center")
        fig.text(0.25, 1 - 0.3 / height, "colour = micro-batch · light: forward F · dark: "
                 "backward B · dotted: recomputation R", fontsize=9, va="center",
                 color="#444444")

    def _draw_panel(self, tl: Panel, ax, mem, xmax, first, last):
        row = {q: r for r, q in enumerate(tl.ipus)}
        width_px = ax.get_position().width * self.fig.get_figwidth() * self.fig.dpi
        px = width_px / xmax
        thin = np.median([b.end - b.start for b in tl.compute]) * px < 6
        for hatch in ("", ".."):
            verts, colours = [], []
            for b in tl.compute:
                if (b.kind == "R") == bool(hatch):
                    y = row[b.ipu]
                    verts.append([(b.start, y - 0.42), (b.end, y - 0.42), (b.end, y + 0.42),
                                  (b.start, y + 0.42)])
                    colours.append(tint(mb_colour(b.microbatch),
                                        1.0 if b.kind == "B" else 0.45))
            if verts:
                ax.add_collection(PolyCollection(verts, facecolors=colours, hatch=hatch or None,
                                                 edgecolors="white",
                                                 linewidths=0 if thin else 0.8))
        other = [b for b in tl.boxes if b.kind not in COMPUTE]
        if other:
            verts = [[(b.start, row[b.ipu] + 0.3), (b.end, row[b.ipu] + 0.3),
                      (b.end, row[b.ipu] + 0.48), (b.start, row[b.ipu] + 0.48)] for b in other]
            colours = [LINK if b.kind == "link" else "#7f7f7f" for b in other]
            ax.add_collection(PolyCollection(verts, facecolors=colours, linewidths=0))
        if len(tl.compute) <= MAX_LABELS:
            for b in tl.compute:
                w = (b.end - b.start) * px
                text = label(b) if w >= 20 else (str(b.microbatch) if w >= 9 else "")
                if text:
                    dark = b.kind == "B"
                    ax.text((b.start + b.end) / 2, row[b.ipu], text, ha="center",
                            va="center", fontsize=8 if w >= 20 else 7,
                            color="white" if dark else "#1a1a1a", clip_on=True)
        ax.set_ylim(len(tl.ipus) - 0.5, -0.5)
        ax.set_xlim(0, xmax)
        ax.set_yticks(range(len(tl.ipus)), [f"IPU {q}" for q in tl.ipus], fontsize=9)
        ax.tick_params(axis="x", labelbottom=False)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        m = tl.measures()
        ax.set_title(f"{tl.title}\nbubble {100 * m['total']:.1f}% of total · "
                     f"{100 * m['ideal']:.1f}% of ideal · span {100 * m['span']:.1f}% · "
                     f"utilisation {100 * m['utilisation']:.1f}%", fontsize=9.5, loc="left")
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
        if first:
            mem.set_ylabel(f"stashed\n({unit})", fontsize=9)
        mem.set_xlabel(f"time ({tl.time_unit})", fontsize=9)
        mem.tick_params(labelsize=8)
        ax.tick_params(labelsize=8)
        mem.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
        if last and n <= 8:
            mem.legend(loc="upper left", bbox_to_anchor=(1.0, 1.05), fontsize=7.5,
                       frameon=False)
        elif last:
            mem.text(1.01, 1, f"IPU {tl.ipus[0]}: dark …\nIPU {tl.ipus[-1]}: light",
                     transform=mem.transAxes, va="top", fontsize=8)
        return {"curtains": curtains, "heads": heads, "dots": dots, "tl": tl,
                "scale": 1024 if tl.stash_unit == "bytes" else 1}

    def draw(self, k: int) -> None:
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

    def caption(self, k: int) -> str:
        parts = []
        for i, tl in enumerate(self.timelines):
            m = tl.measures()
            running = ", ".join(f"IPU {b.ipu}: {label(b)}" for b in self.under_play_head(k, i))
            stash = ", ".join(f"IPU {q}: {v:,.0f}" for q, v in self.stash(k, i).items())
            parts.append(
                f"<b>{esc(tl.title)}</b>: bubble {100 * m['total']:.1f}% of total time, "
                f"{100 * m['ideal']:.1f}% of ideal time, span {100 * m['span']:.1f}%; "
                f"utilisation {100 * m['utilisation']:.1f}%.<br>At the play head: "
                f"{esc(running) or 'no op running'}. Stashed ({tl.stash_unit}): {esc(stash)}.")
        return "<br>".join(parts)


def _ipu_colour(i: int, n: int):
    """Distinct colours for up to 8 IPUs, a dark-to-light ramp for more."""
    if n <= 8:
        return ["#222222", "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
                "#9E9E00"][i]
    return matplotlib.colormaps["viridis"](0.9 * i / (n - 1))
