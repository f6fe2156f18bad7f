"""PopVision-style profile figures from a Trace (matplotlib; never calls the Engine).

What PopVision Graph Analyser shows, as static figures a learner can put in a notebook:

* :func:`tile_memory_map`: bytes per tile as a heat map, tiles laid out as a grid
  (Mk2: 1472 tiles = 32 rows x 46), for all memory or one category.
* :func:`memory_map_figure`: one tile memory map per category.
* :func:`execution_trace`: supersteps on a time axis, each split into sync, exchange and
  compute, with the slowest tile of every compute step named.
* :func:`liveness`: bytes live at each program point, "always live" (variables the host
  reads or writes or that live from one run to the next, constants, vertex state and code)
  under the not-always-live variables live there and a compute set's exchange buffers,
  with the peak named and what reusing memory saves.
* :func:`compute_set_table`: one row per compute set (PopVision's table).
* :func:`compare`: two runs side by side (PopVision's report comparison): which compute
  sets and which tiles got better or worse.
* :func:`span_supersteps`: one F, B or R op of an emulated pipeline run opened as the
  supersteps that made it, under the run's timeline with the op marked.

Drawing functions take an ``ax`` (or make one) and return it, so widgets can reuse them.

>>> import matplotlib; matplotlib.use("Agg")
>>> import ipukit as ipu
>>> from ipukit import report
>>> t = ipu.IPUModel(tiles_per_ipu=4).create_device().target
>>> g = ipu.Graph(t); v = g.add_variable(ipu.FLOAT, [8], "v"); g.set_tile_mapping(v, 1)
>>> eng = ipu.Engine(g, ipu.Copy(v[:4], v[4:])); eng.load(ipu.Device(t)); eng.run()
>>> ax = report.tile_memory_map(eng.trace)
>>> ax.get_title()
'Tile memory: total (max 32 B on tile 1)'
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .liveness import exchange_buffers
from .timeline import Timeline
from .trace import PHASES, Trace

#: The colours of the three BSP phases everywhere in ipukit (figures, widgets, lessons):
#: purple sync, orange exchange, green compute (Okabe-Ito, colour-blind friendly).
PHASE_COLOURS = {"sync": "#8E6BBE", "exchange": "#E69F00", "compute": "#009E73",
                 "exchange out": "#B35806"}  # the exchange of remote outputs: a darker orange


def _plt():
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib is optional (lab extra)

    return plt


def _ax(ax, figsize=(8, 4)):
    if ax is None:
        _, ax = _plt().subplots(figsize=figsize)
    return ax


#: A name is shown with at most this many characters (then an ellipsis).
NAME_CHARS = 200
_CONTROLS = {c: " " if c in (9, 10, 13) else 0xFFFD for c in [*range(32), *range(127, 160)]}


def display_name(name, limit: int = NAME_CHARS) -> str:
    """``name`` as a figure or a page shows it: any value as text, a lone surrogate (which
    no encoder takes) or control character replaced by U+FFFD (tabs and line breaks by a
    space), and at most ``limit`` characters, the last an ellipsis (never a silent cut).

    >>> display_name("a\\ud800b\\nc"), display_name("x" * 300, 5)
    ('a\ufffdb c', 'xxxx\u2026')
    """
    text = name if isinstance(name, str) else str(name)
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.translate(_CONTROLS)


def figure_text(name, limit: int = NAME_CHARS) -> str:
    """:func:`display_name` for matplotlib: a ``$`` is escaped, so ``$x^$`` is text, never
    mathtext (which would parse it, or fail to)."""
    return display_name(name, limit).replace("$", r"\$")


def _name_rows(ax, names, every: bool = False, size: float = 8.5, limit: int = 40):
    """Label row ``i`` of ``ax`` with ``names[i]`` (row 0 at the top) at ``size`` points,
    each cut to ``limit`` characters with an ellipsis; where the rows are closer than a
    line of text, only every k-th row is labelled (``every``: all of them)."""
    height = ax.get_position().height * ax.figure.get_figheight() * 72  # points
    k = 1 if every else max(1, math.ceil(len(names) * 1.5 * size / max(height, 1)))
    rows = range(0, len(names), k)
    ax.set_yticks(list(rows), [figure_text(names[i], limit) for i in rows], fontsize=size)
    ax.set_ylim(len(names) - 0.5, -0.5)


def tile_grid_shape(num_tiles: int) -> tuple[int, int]:
    """(rows, columns) of the tile grid: Mk2's 1472 tiles as 32 x 46, else near-square."""
    if num_tiles == 1472:
        return 32, 46
    cols = math.ceil(math.sqrt(num_tiles))
    return math.ceil(num_tiles / cols), cols


def tile_memory_map(trace: Trace, ax=None, category: str | None = None, cmap="viridis",
                    vmax: int | None = None):
    """Heat map of bytes per tile (all categories, or ``category``); returns ``ax``.

    The colours span the emptiest to the fullest tile, or, given ``vmax``, 0 to ``vmax``
    bytes (one absolute scale that several maps share)."""
    from matplotlib.ticker import MaxNLocator

    mem = trace.memory
    values = mem.total if category is None else mem.categories[category]
    rows, cols = tile_grid_shape(len(values))
    grid = np.full(rows * cols, np.nan)
    grid[: len(values)] = values
    ax = _ax(ax, (8, 5))
    # the colours span the emptiest to the fullest tile (not 0 to the fullest), so tiles
    # that differ by a few buffers (exchange buffers: 1,536 B vs 1,664 B) differ in colour
    lo, hi = int(np.min(values)), int(np.max(values))
    scale = (lo, hi if hi > lo else lo + 1) if vmax is None else (0, max(vmax, 1))
    image = ax.imshow(grid.reshape(rows, cols), cmap=cmap, aspect="auto",
                      vmin=scale[0], vmax=scale[1])
    ax.figure.colorbar(image, ax=ax, label="bytes" if vmax is None else
                       "bytes (one scale from 0 for every map)")
    if hi == lo:  # one colour is the truth here: say so
        ax.text(0.5, 0.5, f"every tile: {lo:,} B", transform=ax.transAxes, ha="center",
                va="center", fontsize=10, bbox={"fc": "white", "ec": "#777", "alpha": 0.9})
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole tiles, no "0.5"
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    worst = int(np.argmax(values))
    over = [t for t, _ in mem.over_full()] if category is None else []
    if over:  # an out-of-memory graph the IPUModel runs anyway: mark the over-full tiles
        ax.scatter([t % cols for t in over], [t // cols for t in over], marker="x",
                   color="red", s=12, label=f"over {mem.bytes_per_tile:,} B")
        ax.legend(loc="upper right", fontsize=7)
    ax.set_title(f"Tile memory: {figure_text(category or 'total', 40)} (max "
                 f"{int(values[worst]):,} B on tile {worst}"
                 f"{f'; {len(over)} tiles out of memory' if over else ''})")
    ax.set_xlabel(f"tile % {cols}")
    ax.set_ylabel(f"tile // {cols}")
    return ax


def memory_map_figure(trace: Trace):
    """A figure with the total and each category's tile memory map."""
    names = [None, *trace.memory.categories]
    plt = _plt()
    fig, axes = plt.subplots(2, math.ceil(len(names) / 2), figsize=(16, 7))
    for ax, name in zip(axes.flat, names):
        tile_memory_map(trace, ax, name)
        # the bytes on a line of their own, so that a title never runs into the next one
        ax.set_title(ax.get_title().replace(" (max", "\n(max", 1), fontsize=10)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def _executed(trace: Trace, run: int | None):
    events = [e for e in trace.events if run is None or e.run == run]
    return [(e, trace.steps[e.step]) for e in events]


def _phase_bars(ax, row, start, step, seen: set) -> float:
    """One superstep's sync, exchange, compute and exchange out as bars from ``start``;
    returns its end. Each phase is labelled once (``seen``) for the legend."""
    for phase in PHASES:
        width = step.phase_cycles(phase)
        if width:
            ax.barh(row, width, left=start, color=PHASE_COLOURS[phase], height=0.8,
                    label=None if phase in seen else phase)
            seen.add(phase)
        start += width
    return start


def execution_trace(trace: Trace, ax=None, run: int | None = None, max_labels: int = 20):
    """Executed supersteps on a time axis (cycles), split into sync, exchange (in),
    compute and exchange out (a compute set's outputs held on other tiles, sent after its
    compute).

    ``run`` restricts to one ``Engine.run`` call. Compute steps name their slowest tile.
    """
    ax = _ax(ax, (10, 4))
    executed = _executed(trace, run)
    seen = set()
    for row, (event, step) in enumerate(executed):
        end = _phase_bars(ax, row, event.start, step, seen)
        if step.kind == "compute" and step.compute_cycles and row < max_labels:
            slow = int(np.argmax(step.tile_compute_cycles))
            ax.annotate(f"slowest tile {slow}", (end, row), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=8)
    _name_rows(ax, [s.name for _, s in executed])
    ax.set_xlabel("cycles")
    ax.set_title("Execution trace (sync / exchange / compute / exchange out per superstep)")
    ax.legend(loc="upper right", fontsize=8)  # the steps run from top left to bottom right
    ax.figure.tight_layout()
    return ax


def span_supersteps(result, span, max_steps: int = 40):
    """An emulated run's timeline (F/B/W/R per IPU) above the supersteps of one ``span``.

    ``result`` is what ``pipeline(..., emulate=True).run`` returns; ``span`` one of its
    F, B, W or R timeline records. The lower panel draws the op's steps (compute sets, copies
    and stream copies, in order) split into their phases (sync, exchange, compute, exchange
    out), on the same cycle axis as the trace. Returns the figure.
    """
    plt = _plt()
    op = result.op_of(span)
    trace = result.trace
    ids = trace._step_ids[op.first:op.end][:max_steps]
    starts = trace._starts[op.first:op.end][:max_steps]
    rows = max(4.3, 0.2 * len(ids))  # inches: a readable line for every step's name
    fig, (top, low) = plt.subplots(2, 1, figsize=(10, rows * 1.5 + 0.5),
                                   gridspec_kw={"height_ratios": [1, 2]})
    colours = {"F": "#56B4E9", "B": "#D55E00", "W": "#CC79A7", "R": "#F0E442",
               "optimizer": "#999999"}
    named = set()
    split = any(rec.kind == "W" for rec in result.timeline)
    for rec in result.timeline:
        if rec.kind in colours:
            chosen = rec is span or rec == span
            top.barh(rec.ipu, rec.duration, left=rec.start, color=colours[rec.kind],
                     edgecolor="black" if chosen else "white", linewidth=2 if chosen else 0.3,
                     label=None if rec.kind in named else
                     op_name(rec.kind, split) if rec.kind in OPS else rec.kind)
            named.add(rec.kind)
    top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)  # clear of the bars
    top.set_yticks(sorted({r.ipu for r in result.timeline if r.ipu >= 0}))
    top.set_yticklabels([f"IPU {q}" for q in top.get_yticks()])
    top.invert_yaxis()
    top.set_xlabel("cycles (this run)")
    top.set_title(f"Pipeline run: {figure_text(span.kind, 24)}{span.microbatch} of stage "
                  f"{span.stage} (outlined) on IPU {span.ipu}")
    seen = set()
    for row, (sid, start) in enumerate(zip(ids, starts)):
        _phase_bars(low, row, start, trace.steps[sid], seen)
    _name_rows(low, [trace.steps[i].name for i in ids], every=True)
    low.set_xlabel("cycles (trace)")
    total = sum(s.cycles for s in result.span_steps(span))
    low.set_title(f"Its {op.end - op.first} supersteps and copies, {total:,} cycles")
    if seen:
        low.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def liveness(trace: Trace, ax=None, tile: int | None = None, top: int = 8):
    """PopVision's liveness report: the bytes live at each program point (in program order;
    a loop's body and each branch once), on all tiles or on one ``tile``.

    Each bar stacks the always-live memory (grey: variables, constants, vertex state and
    code), the not-always-live variables live at that point (one colour each, in the order
    they become live, the ``top`` largest named, the others together) and the exchange
    buffers of a compute set (orange). Memory reuse shows as one variable's colour taking
    the place another's had: their live ranges do not overlap, so they share bytes. The
    dashed line is what the same variables would take if none shared memory (all of them
    always live); for one tile, a dotted line is its memory. The peak point is named.
    Returns ``ax``.
    """
    mem = trace.memory
    live = mem.liveness
    ax = _ax(ax, (10, 4.5))
    if live is None or not live.labels:
        raise ValueError("this trace's programs have no program points to show")
    n = len(live.labels)
    where = slice(None) if tile is None else slice(tile, tile + 1)
    always = sum(int(v[where].sum()) for k, v in mem.categories.items() if k in mem.always_live)
    nbytes = live.bytes_of(tile)
    buffers = live.buffers if tile is None else np.array(
        [0 if s < 0 else int(exchange_buffers(trace.steps[s])[tile]) for s in live.steps])
    x = np.arange(n)
    ax.bar(x, np.full(n, always), color="#9c9c9c", label="always live")
    bottom = np.full(n, always, np.int64)
    named = set(np.argsort(-nbytes, kind="stable")[:top].tolist())
    colours = [c for i, c in enumerate(_plt().get_cmap("tab10").colors) if i not in (1, 7)]
    first = {}
    for v, a, _ in live.runs.tolist():
        first.setdefault(v, a)
    # a variable's colour follows its name (the named ones in name order), not the program
    # order, so the same variables keep their colours in the figures of two orders
    rank = {v: k for k, v in enumerate(sorted(named, key=lambda v: live.names[v]))}
    shown = set()
    for v in sorted(first, key=lambda v: (first[v], v)):
        if not nbytes[v]:
            continue
        height = np.zeros(n, np.int64)
        for w, a, b in live.runs.tolist():
            if w == v:
                height[a:b + 1] = nbytes[v]
        label = (figure_text(live.names[v], 40) if v in named else "other not-always-live")
        colour = colours[rank[v] % len(colours)] if v in named else "#e8b4c8"
        ax.bar(x, height, bottom=bottom, color=colour, edgecolor="white", linewidth=0.5,
               label=None if label in shown else label)
        shown.add(label)
        bottom = bottom + height
    ax.bar(x, buffers, bottom=bottom, color=PHASE_COLOURS["exchange"], label="exchange buffers")
    total = bottom + buffers
    apart = always + int(nbytes.sum()) + int(buffers.max(initial=0))
    ax.axhline(apart, color="black", ls="--", lw=1,
               label=f"if no memory were reused ({apart:,} B)")
    if tile is not None:
        ax.axhline(mem.bytes_per_tile, color="#D62728", ls=":", lw=1.5,
                   label=f"tile memory ({mem.bytes_per_tile:,} B)")
    peak = int(np.argmax(total))
    side = "left" if 3 * peak < n - 1 else "right" if 3 * peak > 2 * (n - 1) else "center"
    top_y = max(apart, int(total.max()), mem.bytes_per_tile if tile is not None else 0) * 1.2
    # written above the dashed line where the peak comes within 6% of the plot of it
    at = apart if 0 <= apart - int(total[peak]) < 0.06 * top_y else int(total[peak])
    ax.annotate(f"peak: {figure_text(live.labels[peak], 60)} ({int(total[peak]):,} B; "
                f"reuse saves {apart - int(total[peak]):,} B)", (peak, at),
                xytext=(0, 6), textcoords="offset points", ha=side, fontsize=8)
    ax.set_ylim(0, top_y + 1)
    ax.yaxis.set_major_formatter(_plt().FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xticks(x)
    ax.set_xticklabels([figure_text(label, 32) for label in live.labels], rotation=60,
                       ha="right", fontsize=8)
    ax.set_ylabel("bytes" + (" (all tiles)" if tile is None else f" (tile {tile})"))
    ax.set_title("Liveness per program point: always live, not-always-live variables, "
                 "exchange buffers")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.figure.tight_layout()
    return ax


def compute_set_rows(trace: Trace) -> list[dict]:
    """Per compute set: executions, cycles, exchange, compute, vertices, slowest tile (the
    compute rows of :meth:`Trace.step_table`)."""
    keys = ("name", "executions", "cycles", "exchange", "compute", "vertices", "slowest tile")
    return [{k: r[k] for k in keys} for r in trace.step_table() if r["kind"] == "compute"]


def compute_set_table(trace: Trace, ax=None):
    """PopVision's compute-set table as a matplotlib table; returns ``ax``."""
    rows = compute_set_rows(trace)
    ax = _ax(ax, (10, 0.4 * len(rows) + 1))
    ax.axis("off")
    if rows:
        cols = list(rows[0])
        cells = [[f"{r[c]:,}" if isinstance(r[c], int) else figure_text(r[c], 40)
                  for c in cols]
                 for r in rows]
        table = ax.table(cellText=cells, colLabels=cols, loc="center", cellLoc="right")
        table.auto_set_font_size(False)
        table.set_fontsize(8)
        table.auto_set_column_width(list(range(len(cols))))
    ax.set_title("Compute sets")
    return ax


def compare(a: Trace, b: Trace, labels=("A", "B")):
    """Two runs side by side: cycles per compute set, and per tile, better or worse.

    Returns a figure with three panels: the compute sets of both runs, each set's change
    (green better, red worse, every bar named and its change written), and every tile's
    change in busy cycles (exchange + compute).
    """
    plt = _plt()
    labels = [figure_text(x, 40) for x in labels]
    ra = {r["name"]: r["cycles"] for r in compute_set_rows(a)}
    rb = {r["name"]: r["cycles"] for r in compute_set_rows(b)}
    names = list(dict.fromkeys([*ra, *rb]))
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, max(3, 0.35 * len(names) + 1.5)))
    y = np.arange(len(names))
    va = np.array([ra.get(n, 0) for n in names])
    vb = np.array([rb.get(n, 0) for n in names])
    ax1.barh(y - 0.2, va, 0.4, label=labels[0], color="#4e79a7")
    ax1.barh(y + 0.2, vb, 0.4, label=labels[1], color="#f28e2b")
    _name_rows(ax1, names)
    ax1.set_xlabel("cycles")
    ax1.legend(fontsize=8)
    ax1.set_title("Cycles per compute set")
    delta = vb - va
    ax2.barh(y, delta, color=np.where(delta <= 0, "#59a14f", "#e15759"))
    _name_rows(ax2, names, every=True)
    for k, d in enumerate(delta):
        ax2.annotate(f"{int(d):+,}", (d, k), fontsize=8, va="center",
                     ha="left" if d >= 0 else "right", xytext=(3 if d >= 0 else -3, 0),
                     textcoords="offset points")
    ax2.axvline(0, color="black", lw=0.5)
    ax2.set_xlabel(f"{labels[1]} - {labels[0]} cycles")
    ax2.set_title(f"Better (green) / worse (red): {int((delta < 0).sum())} / "
                  f"{int((delta > 0).sum())}")
    ta, tb = _tile_cycles(a), _tile_cycles(b)
    n = max(len(ta), len(tb))
    td = np.pad(tb, (0, n - len(tb))) - np.pad(ta, (0, n - len(ta)))
    ax3.bar(np.arange(n), td, color=np.where(td <= 0, "#59a14f", "#e15759"), width=1.0)
    ax3.axhline(0, color="black", lw=0.5)
    if not td.any():
        ax3.text(0.5, 0.5, "no tile changed", transform=ax3.transAxes, ha="center")
    ax3.set_xlabel("tile")
    ax3.set_ylabel(f"{labels[1]} - {labels[0]} exchange + compute cycles")
    ax3.set_title(f"Tiles better / worse: {int((td < 0).sum())} / {int((td > 0).sum())}")
    fig.tight_layout()
    return fig


def _tile_cycles(trace: Trace) -> np.ndarray:
    """Cycles each tile is busy over the run: its exchange and compute (idle workers
    included), every execution counted."""
    total = np.zeros(trace.target.num_tiles, np.int64)
    for n, step in zip(trace.executions(), trace.steps):
        if n:
            total += int(n) * (step.tile_compute_cycles +
                               step.tile_exchange_cycles(trace.target).astype(np.int64))
    return total


# -- the one timeline figure ----------------------------------------------------------------
#: Colours of span kinds in the timeline figure (F/B/W/R take their micro-batch's colour).
KIND_COLOURS = {**PHASE_COLOURS, "host": "#56B4E9", "remote": "#CC79A7", "link": "#0072B2",
                "optimizer": "#117733",
                "allreduce": "#CC3311", "reducescatter": "#AA4499", "allgather": "#EE7733",
                "broadcast": "#DDAA33", "reduce": "#882255"}
#: Kinds drawn as a thin bar on top of the row (they overlap the work of the next op).
THIN = ("link", "sync")


def as_timeline(source, t_F=1.0, t_B=2.0, t_W=None):
    """A :class:`~ipukit.timeline.Timeline` from a Timeline, a Trace, a Schedule (timed
    with ``t_F``/``t_B``/``t_W``, :func:`w_time` when ``t_W`` is None) or a run (anything
    with a ``.timeline``)."""
    if isinstance(source, Timeline):
        return source
    if isinstance(source, Trace):
        return source.timeline()
    if hasattr(source, "ops") and hasattr(source, "timeline"):  # a Schedule
        return source.timeline(t_F, t_B, t_W=w_time([source], t_F, t_W))
    tl = getattr(source, "timeline", None)
    if isinstance(tl, Timeline):
        return tl
    raise TypeError(f"cannot draw a timeline of {type(source).__name__}: give a Timeline, "
                    "a Trace, a Schedule or a pipeline run")


def w_time(schedules, t_F, t_W=None):
    """The W time a figure uses: ``t_W`` if given, else ``t_F`` when one of ``schedules``
    splits its backward (kit convention: a W op as long as a forward, one matmul per layer
    each, the zero-bubble paper's T_F = T_B = T_W; the schedule's own default, 0, would
    draw no W box), else None (0: the unsplit schedules' pictures stay as they were)."""
    if t_W is None and any(getattr(s, "split", False) for s in schedules):
        return t_F
    return t_W


def timeline(source, ax=None, title: str | None = None, select=None, rebase: bool = False,
             xmax: float | None = None, t_F=1.0, t_B=2.0, legend: bool = True,
             measures: bool = True, t_W=None):
    """The one timeline figure: one row per IPU, one bar per span (a static Gantt chart).

    ``source``: a Timeline, Trace, Schedule or run (:func:`as_timeline`). Forward ops are
    light and backward ops dark in their micro-batch's colour, weight-gradient ops (W, of
    a split backward) striped, recomputations (R) dotted; labelled ``F3 · stage 1``,
    ``F3 s1``, ``F3`` or ``3``, whichever fits, ``F3c1`` for chunk 1 of an IPU holding
    several stages (:func:`chunks`), whose boxes also carry a grey band (light: chunk 0,
    dark: the last). The legend shows the F, B, W and R boxes in every micro-batch colour
    the figure uses. The emulator's sync, exchange and compute take the BSP colours;
    IPU-Link copies and syncs are thin bars on top of the row. ``select(span)`` keeps some
    spans (``rebase`` starts the time axis at the first one). The title adds the makespan,
    bubble and utilisation of :meth:`Timeline.measures` of the spans shown. Returns the
    axes.
    """
    from matplotlib.colors import to_rgb  # noqa: PLC0415
    from matplotlib.legend_handler import HandlerTuple  # noqa: PLC0415

    tl = as_timeline(source, t_F, t_B, t_W)
    spans = [s for s in tl.spans if select is None or select(s)]
    own = ax is None
    ax = _ax(ax, (11, 1.2 + 0.55 * max(tl.num_ipus, 1)))
    if not spans:
        raise ValueError("no spans to draw (check select=...)")
    t0 = min(s.start for s in spans) if rebase else 0.0
    ipus = sorted({s.ipu for s in spans})
    row = {q: i for i, q in enumerate(ipus)}
    right = xmax or max(s.end for s in spans) - t0
    palette = _plt().get_cmap("tab10").colors
    px = ax.get_window_extent().width * 0.85 / right  # pixels per time unit, about
    char_px = 0.62 * ax.figure.dpi / 72  # a character's width per point of size, about
    chunk, count = chunks(spans)
    ops, seen = {}, {}  # F/B/W/R: {micro-batch colour: colour}; other kinds: their colour
    for s, c in zip(spans, chunk):
        y, x = row[s.ipu], s.start - t0
        if s.kind in OPS:
            mix, hatch = OP_STYLE[s.kind]
            colour = 1 - mix * (1 - np.array(to_rgb(palette[max(s.microbatch, 0) % 10])))
            # facecolor, not color: Matplotlib >= 3.10 takes color for the hatch's colour
            # too, and a W's stripes vanish into its box
            ax.broken_barh([(x, s.duration)], (y - 0.4, 0.8), facecolor=colour, ec="white",
                           lw=0.5, hatch=hatch)
            ops.setdefault(s.kind, {})[max(s.microbatch, 0) % 10] = colour
            texts = op_labels(s, c)
        else:
            colour = KIND_COLOURS.get(s.kind, "0.6")
            thin = s.kind in THIN
            ax.broken_barh([(x, s.duration)], (y - 0.48, 0.14) if thin else (y - 0.4, 0.8),
                           color=colour, lw=0)
            seen.setdefault(display_name(s.kind, 40), colour)
            label = figure_text(s.label, 24)
            kind = figure_text(s.kind, 24)
            texts = ([] if s.kind in THIN else [label] if s.kind in ("compute", "exchange")
                     and s.label else [f"{kind}\n{label}"] if s.label else [kind])
        sizes = [6 if t.isdigit() else 7 for t in texts]  # a bare micro-batch: 6 points
        fits = [(t, pt) for t, pt in zip(texts, sizes)
                if s.duration * px >= pt * char_px * max(map(len, t.split("\n"))) + 2]
        if fits:
            ax.text(x + s.duration / 2, y, fits[0][0], ha="center", va="center",
                    fontsize=fits[0][1], color="white" if s.kind == "B" else "k",
                    clip_on=True)
    if count > 1:  # the chunk bands, one collection
        from matplotlib.collections import PolyCollection  # noqa: PLC0415

        banded = [(s, c) for s, c in zip(spans, chunk) if c >= 0]
        ax.add_collection(PolyCollection(
            [chunk_band(s.start - t0, s.end - t0, row[s.ipu], 0.4) for s, _ in banded],
            facecolors=[chunk_colour(c, count) for _, c in banded], linewidths=0))
    ax.set_yticks(range(len(ipus)), [f"IPU {q}" for q in ipus])
    ax.set_ylim(len(ipus) - 0.5, -0.6)
    ax.set_xlim(0, right)
    ax.set_xlabel("cycles" if tl.clock_hz != 1.0 else "time")
    head = figure_text(title) if title else "Timeline"
    if measures and any(s.kind in ("F", "B", "W", "R", "compute") for s in spans):
        shown = [replace(s, start=s.start - t0) for s in spans] if rebase else spans
        m = Timeline(shown, num_ipus=tl.num_ipus).measures()
        head += (f"\nmakespan {m['makespan']:,.0f} · bubble {m['total']:.1%} of total · "
                 f"utilisation {m['utilisation']:.1%}")
    ax.set_title(head, fontsize=9.5, loc="left")
    if legend:
        rect = _plt().Rectangle
        handles = [tuple(rect((0, 0), 1, 1, fc=c, ec="white", lw=0.3, hatch=OP_STYLE[kind][1])
                         for _, c in sorted(colours.items()))
                   for kind, colours in ops.items()]
        handles += [rect((0, 0), 1, 1, color=c) for c in seen.values()]
        labels = [op_name(k, "W" in ops) for k in ops] + [figure_text(k) for k in seen]
        if count > 1:
            handles.append(tuple(rect((0, 0), 1, 1, color=chunk_colour(c, count))
                                 for c in range(count)))
            labels.append(f"band: chunk 0..{count - 1}")
        ax.legend(handles, labels, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  frameon=False, handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
                  handlelength=max([2.0] + [0.9 * len(c) for c in ops.values()]),
                  title="colour: micro-batch" if ops else None, title_fontsize=7.5)
    if own:
        ax.figure.tight_layout()
    return ax


#: The pipeline ops, as the timeline figures' legends name them.
OPS = {"F": "F: forward", "B": "B: backward", "W": "W: weight gradient",
       "R": "R: recomputation"}
#: How an op's box is drawn: its micro-batch's colour mixed with white (1: the colour
#: itself) and a hatch. The browser draws the same (static/ipukit_widgets.js, OP_STYLE).
OP_STYLE = {"F": (0.45, None), "B": (1.0, None), "W": (0.7, "////"), "R": (0.45, "..")}


def op_name(kind: str, split: bool) -> str:
    """An op's legend entry; B is the input gradient where the backward is split (``split``:
    W ops are shown)."""
    if kind == "B" and split:
        return "B: backward (input grad. if split)"
    return OPS[kind]


def chunks(spans) -> tuple[list[int], int]:
    """Which of its IPU's stages each pipeline op runs (its chunk: 0 for the IPU's lowest
    stage, as ``Schedule.chunk``; -1 for other spans, and for all where no IPU holds two
    stages), and the most stages an IPU holds.

    >>> from ipukit.parallel import schedule
    >>> spans = schedule("zb_v", 2, 4).timeline().spans  # IPU 0 holds stages 0 and 3
    >>> sorted({(s.ipu, s.stage, c) for s, c in zip(spans, chunks(spans)[0])})
    [(0, 0, 0), (0, 3, 1), (1, 1, 0), (1, 2, 1)]
    """
    held: dict[int, set] = {}
    for s in spans:
        if s.kind in OPS and s.stage >= 0:
            held.setdefault(s.ipu, set()).add(s.stage)
    count = max(map(len, held.values()), default=0)
    if count < 2:
        return [-1] * len(spans), count
    rank = {q: {k: i for i, k in enumerate(sorted(ks))} for q, ks in held.items()}
    return [rank[s.ipu][s.stage] if s.kind in OPS and s.stage >= 0 else -1
            for s in spans], count


def chunk_colour(chunk: int, count: int) -> str:
    """The grey of chunk ``chunk`` of ``count``: light for chunk 0, dark for the last."""
    level = 0.75 - 0.65 * chunk / max(count - 1, 1)
    return f"{level:.3f}"


def chunk_band(start, end, y, half) -> list[tuple]:
    """The corners of a chunk band: the bottom fifth of an op's box (row ``y``, half
    height ``half``; rows grow downwards)."""
    return [(start, y + 0.6 * half), (end, y + 0.6 * half), (end, y + half),
            (start, y + half)]


def op_labels(span, chunk: int = -1) -> list[str]:
    """What a pipeline op's box can say, longest first (a figure shows the first that
    fits): ``F3 · stage 1``, ``F3 s1``, ``F3``, ``3`` (micro-batch 3 of stage 1); of
    chunk 1 (``chunk``): ``F3c1 · stage 5``, ``F3c1 s5``, ``F3c1``, ``F3``, ``3``."""
    kind = figure_text(span.kind, 24)
    if span.microbatch < 0:
        return [kind]
    short = f"{kind}{span.microbatch}"
    name = short if chunk < 0 else f"{short}c{chunk}"
    staged = [f"{name} · stage {span.stage}", f"{name} s{span.stage}"]
    return (staged if span.stage >= 0 else []) + list(dict.fromkeys(
        [name, short, str(span.microbatch)]))
