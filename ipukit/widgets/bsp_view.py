"""BSPView: watch a run superstep by superstep, phase by phase (sync, exchange, compute and,
where a compute set has outputs on other tiles, exchange out).

Every tile of the target is a cell of a grid (IPUs side by side). In each phase a tile is
coloured by what it does: purple while it waits at the sync, orange while it sends or
receives its inputs (the deeper, the longer), green while it computes, dark orange while it
sends or receives the results that vertices write to other tiles (Graphcore: "Exchange
inputs, Compute, Exchange outputs"); pale grey when it has nothing to do. The slowest tile
is outlined in red: the phase lasts as long as it does, and the bar chart on the right
shows every other tile's idle time ("everyone waits for the slowest tile"). On small
targets each cell shows its bytes in/out or cycles and arrows show who sends to whom; bytes
crossing IPUs go over an IPU-Link (blue). The strip at the bottom is the whole run, one bar
per executed superstep, with a running cycle counter.

This is the execution view of Graphcore's PopVision Graph Analyser, animated. It reads a
:class:`ipukit.trace.Trace` only (``engine.trace``), never the Engine, and keeps the events
it was given: a later ``engine.run()`` does not change what the view plays. In the browser,
hover a tile for its bytes in and out, cycles and memory by category; click one to read it
as ``view.selected``; click a superstep in the strip to jump to it.

>>> import ipukit as ipu
>>> from ipukit.widgets import BSPView
>>> dev = ipu.IPUModel(tiles_per_ipu=4).create_device()
>>> g = ipu.Graph(dev.target)
>>> v = g.add_variable(ipu.FLOAT, [4], "v")
>>> for i in range(4):
...     g.set_tile_mapping(v[i], i)
>>> eng = ipu.Engine(g, ipu.Copy(v[0:2], v[2:4])); eng.load(dev); eng.run()
>>> view = BSPView(eng.trace)
>>> view.frame = view.frame_index(1, "exchange")
>>> view.frame_at().tiles_busy().tolist()
[0, 1, 2, 3]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ..report import KIND_COLOURS, NAME_CHARS, PHASE_COLOURS, figure_text
from ..trace import PHASES, Step, Trace
from ._player import IDLE, LINK, SLOWEST, Widget, esc, new_figure, pack, tint

#: Targets up to this many tiles get per-tile numbers and transfer arrows.
SMALL = 32
MAX_ARROWS = 40
ARROW_Y = 0.3  # arrows join the lower part of the cells, under the numbers


class TileLayout:
    """Where each tile sits in a grid drawing: IPUs side by side, tiles row by row in each.

    The number of columns per IPU is the divisor of ``tiles_per_ipu`` closest to a 1.4:1
    aspect (Mk2's 1472 tiles: 32 rows of 46; 16 tiles: 4 rows of 4).
    """

    GAP = 1  # empty columns between two IPUs

    def __init__(self, target):
        n = target.tiles_per_ipu
        want = math.sqrt(n * 1.4)
        cols = min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: abs(d - want))
        if not 0.5 * want <= cols <= 2 * want:  # e.g. a prime number of tiles
            cols = math.ceil(want)
        self.num_ipus, self.tiles_per_ipu, self.cols = target.num_ipus, n, cols
        self.rows = -(-n // cols)
        self.width = self.num_ipus * cols + (self.num_ipus - 1) * self.GAP
        local = np.arange(target.num_tiles) % n
        ipu = np.arange(target.num_tiles) // n
        self.x = ipu * (cols + self.GAP) + local % cols
        self.y = local // cols

    def image(self, rgba_per_tile: np.ndarray) -> np.ndarray:
        """An (rows, width, 4) RGBA image with one cell per tile (transparent elsewhere)."""
        img = np.zeros((self.rows, self.width, 4))
        img[self.y, self.x] = rgba_per_tile
        return img

    def draw_grid(self, ax, image, bottom: float = 0.0, **imshow):
        """Show ``image`` (one cell per tile) on ``ax`` with a labelled frame per IPU.

        ``bottom`` is the room left under the grid, as a fraction of its height.
        """
        im = ax.imshow(image, interpolation="nearest", aspect="auto",
                       extent=(-0.5, self.width - 0.5, self.rows - 0.5, -0.5), **imshow)
        ax.set_xlim(-0.7, self.width - 0.3)
        ax.set_ylim(self.rows - 0.5 + bottom * self.rows, -0.5 - 0.12 * self.rows)
        ax.set_xticks([])
        ax.set_yticks([])
        for s in ax.spines.values():
            s.set_visible(False)
        n = self.tiles_per_ipu
        for q in range(self.num_ipus):
            x0 = q * (self.cols + self.GAP) - 0.5
            ax.add_patch(Rectangle((x0 - 0.1, -0.6), self.cols + 0.2, self.rows + 0.2,
                                   fill=False, lw=1.5, ec="#555555"))
            ax.text(x0 + self.cols / 2, -0.65, f"IPU {q}  (tiles {q * n}–{(q + 1) * n - 1})",
                    ha="center", va="bottom", fontsize=10, color="#333333")
        return im

    def ipu_centre(self, ipu: int) -> tuple[float, float]:
        return ipu * (self.cols + self.GAP) + (self.cols - 1) / 2, (self.rows - 1) / 2


@dataclass(frozen=True, eq=False)
class BSPFrame:
    """One phase of one executed superstep: what every tile does and for how long.

    ``busy[t]`` is the cycles tile t works in the phase, ``cycles`` the phase's length
    (that of the slowest tile, plus IPU-Link or host-link time in an exchange), ``start``
    the cycle the phase begins at in the run.
    """

    event: int
    step: Step
    phase: str
    start: int
    cycles: int
    busy: np.ndarray

    @property
    def end(self) -> int:
        """The running cycle counter: cycles from the first run's start to this phase's end."""
        return self.start + self.cycles

    @property
    def idle(self) -> np.ndarray:
        """Cycles each tile waits for the phase to end (for the slowest tile)."""
        return self.cycles - self.busy

    @property
    def slowest(self) -> int:
        """The tile that sets the phase's length (the first, on a tie), else -1."""
        if self.phase == "sync" or not self.busy.any() or self.busy.max() < self.cycles:
            return -1  # nobody works, everybody syncs, or the links set the length
        return int(np.argmax(self.busy))

    def tiles_busy(self) -> np.ndarray:
        """Tiles that work in this phase (all of them during a sync)."""
        return np.flatnonzero(self.busy > 0)

    def idle_fraction(self) -> float:
        """Share of all tiles' time in this phase spent waiting."""
        return float(self.idle.sum() / (self.cycles * self.busy.size)) if self.cycles else 0.0


class BSPView(Widget):
    """The supersteps of a Trace as an animated tile grid; ``frame`` is the frame shown.

    The frames are the phases of the executed steps (``self.events``: every event of the
    trace when the view was made, or those of Engine.run call ``run``) in order: sync,
    exchange, compute, and "exchange out" for a step with remote outputs
    (:meth:`frame_index`). The whole run plays in ``duration`` seconds (10 by default).
    """

    def __init__(self, trace: Trace, run: int | None = None, **kwargs):
        if not isinstance(trace, Trace):
            raise TypeError(f"BSPView needs an ipukit Trace (engine.trace), got {trace!r}")
        if len(trace) == 0:
            raise ValueError("this trace is empty: call engine.run() before drawing it")
        self.trace, self.target = trace, trace.target
        self.events = [e for e in trace.events if run is None or e.run == run]
        if not self.events:
            raise ValueError(f"run={run!r}: the trace has Engine.run calls 0.."
                             f"{trace.num_runs - 1}")
        self.layout_ = TileLayout(self.target)
        #: (event, phase) of each frame: an "exchange out" only where a step has one
        self.frames = [(e, p) for e, ev in enumerate(self.events) for p in PHASES
                       if p != "exchange out" or trace.steps[ev.step].exchange_out_cycles]
        self._frame_of = {f: k for k, f in enumerate(self.frames)}
        last = self.events[-1]
        #: The cycle counter at the end of the last event shown (not the live trace's total).
        self.total_cycles = int(last.start + trace.steps[last.step].cycles)
        super().__init__(**kwargs)
        if "frame" not in kwargs:
            self.frame = self.opening_frame()

    # -- the model ---------------------------------------------------------------------------
    def num_frames(self) -> int:
        return len(self.frames)

    def frame_index(self, event: int, phase: str) -> int:
        """The frame of ``phase`` of the ``event``-th step shown."""
        if (event, phase) not in self._frame_of:
            raise ValueError(f"event {event} has no {phase!r} phase (phases: {PHASES}; "
                             "\"exchange out\" only where a compute set has remote outputs)")
        return self._frame_of[event, phase]

    def frame_at(self, k: int | None = None) -> BSPFrame:
        """What frame ``k`` (default: the frame shown) shows."""
        k = self.frame if k is None else k
        if not 0 <= k < self.num_frames():
            raise ValueError(f"frame {k}: 0..{self.num_frames() - 1}")
        e, phase = self.frames[k]
        ev = self.events[e]
        step = self.trace.steps[ev.step]
        before = PHASES[:PHASES.index(phase)]
        start = ev.start + sum(step.phase_cycles(p) for p in before)
        cycles = step.phase_cycles(phase)
        if phase == "sync":
            busy = np.full(self.target.num_tiles, cycles, np.int64)
        elif phase == "compute":
            busy = np.asarray(step.tile_compute_cycles, np.int64)
        else:
            busy = step.tile_exchange_cycles(self.target, phase).astype(np.int64)
        return BSPFrame(e, step, phase, int(start), int(cycles), busy)

    # -- drawing -----------------------------------------------------------------------------
    def _build_figure(self):
        lay, t = self.layout_, self.target
        small = t.num_tiles <= SMALL
        grid_h = 3.2 if small else 4.2
        self.fig = fig = new_figure(11.5, grid_h + 2.6)
        gs = fig.add_gridspec(2, 2, height_ratios=[grid_h, 1.5], width_ratios=[1.35, 1],
                              left=0.05, right=0.98, top=0.86, bottom=0.1, hspace=0.45,
                              wspace=0.18)
        ax = self.ax_grid = fig.add_subplot(gs[0, 0])
        self.im = lay.draw_grid(ax, lay.image(np.zeros((t.num_tiles, 4))), bottom=0.25)
        self.slow_box = ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, lw=2.5,
                                               ec=SLOWEST, visible=False))
        self.cell_text = []
        if small:
            size = 9 if lay.cols <= 4 else 8
            for tile in range(t.num_tiles):
                self.cell_text.append(ax.text(lay.x[tile], lay.y[tile] - 0.42, "", ha="center",
                                              va="top", fontsize=size, color="#1a1a1a"))
        self.arrows = []
        self.link_text = ax.text(0.5, 0.02, "", transform=ax.transAxes, ha="center",
                                 va="bottom", fontsize=10, color=LINK)

        bars = self.ax_bars = fig.add_subplot(gs[0, 1])
        edges = np.arange(t.num_tiles + 1) - 0.5
        zero = np.zeros(t.num_tiles)
        self.busy_stairs = bars.stairs(zero, edges, fill=True, color=PHASE_COLOURS["compute"],
                                       label="working")
        self.idle_stairs = bars.stairs(zero, edges, baseline=zero, fill=True, color=IDLE,
                                       hatch="//", edgecolor="#B0B0B0", label="idle (waiting)")
        self.phase_line = bars.axhline(0, color=SLOWEST, lw=1.5, ls="--",
                                       label="end of phase")
        bars.set_xlim(-0.5, t.num_tiles - 0.5)
        bars.xaxis.set_major_locator(MaxNLocator(integer=True))  # no fractional tile numbers
        bars.set_xlabel("tile", fontsize=10)
        bars.set_ylabel("cycles in this phase", fontsize=10)
        bars.legend(loc="upper right", fontsize=8, framealpha=0.9)
        bars.tick_params(labelsize=9)
        for q in range(1, t.num_ipus):
            bars.axvline(q * t.tiles_per_ipu - 0.5, color="#555555", lw=1)
        self.bars_title = bars.set_title("", fontsize=10)

        strip = self.ax_strip = fig.add_subplot(gs[1, :])
        steps = [self.trace.steps[e.step] for e in self.events]
        parts = np.array([[s.phase_cycles(p) for p in PHASES] for s in steps], np.float64)
        edges = np.arange(len(steps) + 1) - 0.5
        bottom = np.zeros(len(steps))
        remote = np.array([s.kind == "remote" for s in steps])
        for i, phase in enumerate(PHASES):
            height = parts[:, i]
            if i == 1 and remote.any():  # a remote-buffer copy's exchange: its own colour
                strip.stairs(bottom + height * remote, edges, baseline=bottom.copy(),
                             fill=True, color=KIND_COLOURS["remote"], label="Streaming Memory")
                height = height * ~remote
            shown = phase != "exchange out" or parts[:, i].any()  # named where a step has it
            strip.stairs(bottom + height, edges, baseline=bottom.copy(), fill=True,
                         color=PHASE_COLOURS[phase], label=phase if shown else None)
            bottom += parts[:, i]
        device = [s.cycles for s in steps if s.kind != "host"]
        top = max(device) if device else bottom.max()
        strip.set_ylim(0, top * 1.25 or 1)
        for e, s in enumerate(steps):  # host syncs dwarf supersteps: clip and label them
            if s.cycles > top * 1.25 and len(steps) <= 40:
                strip.text(e, top * 1.2, f"{s.cycles:,}", ha="center", va="top", fontsize=8,
                           color="white")
        strip.set_xlim(-0.5, len(steps) - 0.5)
        strip.xaxis.set_major_locator(MaxNLocator(integer=True))
        strip.set_xlabel("executed superstep (host syncs of Engine.run clipped)", fontsize=9)
        strip.set_ylabel("cycles", fontsize=9)
        strip.tick_params(labelsize=8)
        strip.legend(loc="lower right", bbox_to_anchor=(1, 1), fontsize=8, ncols=4,
                     frameon=False)
        self.strip_mark = strip.add_patch(Rectangle((0, 0), 1, 1, fill=False, lw=2, ec="black"))
        self.title = fig.text(0.05, 0.955, "", fontsize=13, weight="bold", va="center")
        self.counter = fig.text(0.98, 0.955, "", fontsize=12, ha="right", va="center",
                                family="monospace")
        self.subtitle = fig.text(0.05, 0.91, "", fontsize=10.5, va="center", color="#333333")

    @staticmethod
    def phase_name(f: BSPFrame) -> str:
        """A phase's name; a remote-buffer copy's exchange is "Streaming Memory"."""
        return "Streaming Memory" if f.step.kind == "remote" and f.phase == "exchange" \
            else f.phase

    @staticmethod
    def phase_colour(f: BSPFrame) -> str:
        """A phase's colour; a remote-buffer copy's exchange has its own (Streaming Memory)."""
        if BSPView.phase_name(f) == "Streaming Memory":
            return KIND_COLOURS["remote"]
        return PHASE_COLOURS[f.phase]

    def _tile_colours(self, f: BSPFrame) -> np.ndarray:
        n = f.busy.size
        rgba = np.tile(to_rgba(IDLE), (n, 1))
        if f.phase == "sync":
            rgba[:] = to_rgba(PHASE_COLOURS["sync"])
        elif f.cycles and f.busy.any():
            share = f.busy / max(int(f.busy.max()), 1)
            busy = f.busy > 0
            base = np.array(tint(self.phase_colour(f), 1.0))
            pale = np.array(tint(self.phase_colour(f), 0.25))
            rgba[busy, :3] = pale + (base - pale) * share[busy, None]
        return rgba

    def opening_frame(self) -> int:
        """The frame a new view shows: the compute phase of the first compute set that
        computes, else the first phase of the first superstep that is not a host sync."""
        steps = [self.trace.steps[e.step] for e in self.events]
        for e, s in enumerate(steps):
            if s.kind == "compute" and s.compute_cycles:
                return self.frame_index(e, "compute")
        device = [e for e, s in enumerate(steps) if s.kind != "host"]
        return self.frame_index(device[0], "sync") if device else 0

    def frame_weights(self) -> np.ndarray:
        """Each frame's share of the play time: a phase plays for a time proportional to its
        cycles (at least a quarter of the longest phase's time, so short ones can be read);
        a host sync (an Engine.run call waiting for the host) and an empty phase flash by,
        at a tenth."""
        steps = [self.trace.steps[self.events[e].step] for e, _ in self.frames]
        cycles = np.array([s.phase_cycles(p) for s, (_, p) in zip(steps, self.frames)], float)
        host = np.array([s.kind == "host" for s in steps], bool)
        device = cycles[~host]
        longest = device.max() if device.size and device.max() > 0 else 1.0
        weights = np.maximum(cycles / longest, 0.25)
        weights[host | (cycles == 0)] = 0.1
        return weights

    def payload(self) -> dict:
        """The events, the executed steps' per-tile arrays and the tile memory, once."""
        t, lay = self.target, self.layout_
        used = sorted({e.step for e in self.events})
        index = {s: i for i, s in enumerate(used)}
        steps = [self.trace.steps[s] for s in used]
        out = [s for s in steps if s.exchange_out_cycles]  # steps with an exchange out
        meta = {
            "kind": "bsp", "total": self.total_cycles, "clock_hz": t.clock_hz,
            "layout": {"num_ipus": t.num_ipus, "tiles_per_ipu": t.tiles_per_ipu,
                       "cols": lay.cols, "rows": lay.rows, "gap": lay.GAP},
            "events": [[index[e.step], int(e.start), int(e.run)] for e in self.events],
            "steps": [{"name": s.name, "kind": s.kind, "sync": int(s.sync_cycles),
                       "exchange": int(s.phase_cycles("exchange")),
                       "compute": int(s.compute_cycles),
                       "exchange_out": int(s.exchange_out_cycles),
                       "out": out.index(s) if s.exchange_out_cycles else -1,
                       "inter_ipu_bytes": int(s.inter_ipu_bytes - s.result_inter_ipu_bytes),
                       "inter_out": int(s.result_inter_ipu_bytes),
                       "host_bytes": int(s.host_bytes), "remote_bytes": int(s.remote_bytes),
                       "vertices": int(sum(n for n, _ in s.vertex_types.values()))}
                      for s in steps],
            "colours": {**PHASE_COLOURS, "remote": KIND_COLOURS["remote"]},
            "weights": [round(float(w), 4) for w in self.frame_weights()],
            "categories": list(self.trace.memory.categories),
        }
        arrays = {
            "compute": pack([s.tile_compute_cycles for s in steps]),
            "exchange": pack([s.tile_exchange_cycles(t, "exchange") for s in steps]),
            "bytes_in": pack([s.phase_bytes("exchange")[0] for s in steps]),
            "bytes_out": pack([s.phase_bytes("exchange")[1] for s in steps]),
            # the exchange out of the steps that have one (row meta.steps[i].out)
            "exchange_out": pack([s.tile_exchange_cycles(t, "exchange out") for s in out]),
            "out_bytes_in": pack([s.tile_result_bytes_in for s in out]),
            "out_bytes_out": pack([s.tile_result_bytes_out for s in out]),
            "memory": pack([v for v in self.trace.memory.categories.values()]),
            "vertices": pack([np.zeros(t.num_tiles, np.int64) if s.tile_vertices is None
                              else s.tile_vertices for s in steps]),
        }
        if t.num_tiles <= SMALL:  # arrows: the biggest transfers of each step's phases
            for key, phase, of in (("transfers", "exchange", steps),
                                   ("out_transfers", "exchange out", out)):
                rows = [_biggest(s.phase_transfers(phase)) for s in of]
                arrays[key] = pack(np.concatenate(rows) if rows else np.zeros(0))
                arrays[f"{key[:-1]}_offsets"] = pack(np.cumsum([0] + [len(r) for r in rows]))
        return {"meta": meta, "arrays": arrays}

    def draw(self, k: int) -> None:
        if self.fig is None:
            self._build_figure()
        f = self.frame_at(k)
        t, lay, s = self.target, self.layout_, f.step
        self.im.set_data(lay.image(self._tile_colours(f)))
        slow = f.slowest
        self.slow_box.set_visible(slow >= 0)
        if slow >= 0:
            self.slow_box.set_bounds(lay.x[slow] - 0.5, lay.y[slow] - 0.5, 1, 1)
        for tile, txt in enumerate(self.cell_text):
            txt.set_text(self._cell_label(f, tile))
        self._draw_transfers(f)

        colour = self.phase_colour(f)
        edges = np.arange(t.num_tiles + 1) - 0.5
        self.busy_stairs.set_data(f.busy, edges)
        self.busy_stairs.set_facecolor(colour)
        self.idle_stairs.set_data(np.full(t.num_tiles, f.cycles), edges, baseline=f.busy)
        self.phase_line.set_ydata([f.cycles, f.cycles])
        self.ax_bars.set_ylim(0, max(f.cycles, 1) * 1.3)
        self.bars_title.set_text(self._bars_title(f))

        self.strip_mark.set_bounds(f.event - 0.5, 0, 1, self.ax_strip.get_ylim()[1])
        e = len(self.events)
        self.title.set_text(f"Superstep {f.event + 1}/{e}: {figure_text(s.name, 70)}")
        self.title.set_color("black")
        self.counter.set_text(f"cycle {f.end:>{len(f'{self.total_cycles:,}')},} / "
                              f"{self.total_cycles:,}")
        self.subtitle.set_text(f"{self.phase_name(f).upper()} phase · {f.cycles:,} cycles · "
                               f"{t.cycles_to_us(f.end):,.2f} µs into the run")
        self.subtitle.set_color(colour)

    def _cell_label(self, f: BSPFrame, tile: int) -> str:
        if f.phase.startswith("exchange"):
            i, o = (int(b[tile]) for b in f.step.phase_bytes(f.phase))
            return f"T{tile}\n↓{i} B\n↑{o} B" if i or o else f"T{tile}"
        if f.phase == "compute" and f.busy[tile]:
            return f"T{tile}\n{int(f.busy[tile]):,} cyc"
        return f"T{tile}"

    def _draw_transfers(self, f: BSPFrame) -> None:
        for a in self.arrows:
            a.remove()
        self.arrows = []
        s, lay, t = f.step, self.layout_, self.target
        self.link_text.set_text("")
        if not f.phase.startswith("exchange"):
            return
        rows = s.phase_transfers(f.phase)
        if rows.size and t.num_tiles <= SMALL:
            top = _biggest(rows)
            width = 1 + 3 * top[:, 2] / top[:, 2].max()
            for (src, dst, _), w in zip(top, width):
                cross = t.ipu_of_tile(int(src)) != t.ipu_of_tile(int(dst))
                self.arrows.append(self.ax_grid.annotate(
                    "", xy=(lay.x[dst], lay.y[dst] + ARROW_Y),
                    xytext=(lay.x[src], lay.y[src] + ARROW_Y),
                    arrowprops=dict(arrowstyle="-|>", lw=w, color=LINK if cross else "#7a4a00",
                                    alpha=0.65, shrinkA=8, shrinkB=8,
                                    connectionstyle="arc3,rad=0.2")))
        inter = s.result_inter_ipu_bytes
        inter = inter if f.phase == "exchange out" else s.inter_ipu_bytes - inter
        if inter:
            self.link_text.set_text(f"{inter:,} bytes cross IPUs over IPU-Links "
                                    f"(+ global sync of {s.sync_cycles:,} cycles)")
            if t.num_tiles > SMALL and rows.size:  # one arrow per pair of IPUs
                ipus = rows[:, :2] // t.tiles_per_ipu
                for a, b in {tuple(p) for p in ipus[ipus[:, 0] != ipus[:, 1]].tolist()}:
                    (xa, ya), (xb, yb) = lay.ipu_centre(a), lay.ipu_centre(b)
                    self.arrows.append(self.ax_grid.annotate(
                        "", xy=(xb, yb), xytext=(xa, ya), arrowprops=dict(
                            arrowstyle="-|>", lw=4, color=LINK, alpha=0.8,
                            connectionstyle="arc3,rad=0.25")))
        elif s.host_bytes and f.phase == "exchange":
            self.link_text.set_text(f"{s.host_bytes:,} bytes over the host link (PCIe)")
        elif s.remote_bytes and f.phase == "exchange":
            self.link_text.set_text(f"{s.remote_bytes:,} bytes to or from Streaming Memory")

    def _bars_title(self, f: BSPFrame) -> str:
        if f.phase == "sync":
            return "every tile waits at the barrier"
        if not f.busy.any():
            return f"no {f.phase} in this superstep"
        most = int(f.busy.max())
        if f.cycles > most:  # the links, not a tile, set the length of this exchange
            return (f"tiles done after {most:,} cycles; the links need "
                    f"{f.cycles - most:,} more")
        return (f"slowest: tile {f.slowest} ({most:,} cycles); "
                f"{100 * f.idle_fraction():.0f}% of tile time idle")

    def caption(self, k: int | None = None) -> str:
        """What the browser writes under frame ``k`` (default: the frame shown), as HTML."""
        f = self.frame_at(k)
        s, n = f.step, self.target.num_tiles
        phase = self.phase_name(f)
        head = (f"<b>{esc(s.name, NAME_CHARS)}</b> ({esc(s.kind)}) · <b style='color:"
                f"{self.phase_colour(f)}'>{phase}</b> · {f.cycles:,} cycles · "
                f"cycle counter {f.end:,} / {self.total_cycles:,}")
        if f.phase == "sync":
            what = ("the host synchronises with the device (one Engine.run call)"
                    if s.kind == "host" else f"all {n} tiles wait until every tile is ready")
        elif not f.busy.any():
            what = f"no tile has anything to {'compute' if f.phase == 'compute' else 'send'}"
        else:
            busy, most = f.tiles_busy().size, int(f.busy.max())
            verb = "compute" if f.phase == "compute" else "send or receive"
            what = f"{busy} of {n} tiles {verb}; "
            if f.cycles > most:  # as in _bars_title: the links set this exchange's length
                what += (f"the tiles are done after {most:,} cycles and the links need "
                         f"{f.cycles - most:,} more: ")
            else:
                what += (f"tile {f.slowest} is the slowest ({most:,} cycles) and the others "
                         "wait for it: ")
            what += f"{100 * f.idle_fraction():.0f}% of tile time is idle"
            if f.phase.startswith("exchange"):
                b_in, b_out = f.step.phase_bytes(f.phase)
                what += (f"; {int(b_out.sum()):,} bytes sent, {int(b_in.sum()):,} received")
            if s.remote_bytes:
                what += (f"; {s.remote_bytes:,} bytes move between the tiles and a remote "
                         "buffer in Streaming Memory (off the IPU)")
            if f.phase == "exchange out":
                what += ("; the results vertices wrote for tensors on other tiles go there "
                         "after the compute phase")
        return f"{head}<br>{esc(what)}"


def _biggest(rows: np.ndarray) -> np.ndarray:
    """The ``MAX_ARROWS`` biggest (source, destination, bytes) transfers, biggest first."""
    if not rows.size:
        return np.zeros((0, 3), np.int64)
    return rows[np.argsort(-rows[:, 2], kind="stable")[:MAX_ARROWS]]
