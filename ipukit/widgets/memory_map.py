"""MemoryMap: how full every tile is, by category, and which tiles are the fullest.

PopVision's memory report as a widget: the heat map of :func:`ipukit.report.tile_memory_map`
(tiles row by row, a white staircase between IPUs) for one category of
:class:`ipukit.trace.TileMemory` (always live: "variables", "constants", "vertex state",
"vertex code"; at the tile's peak: "not-always-live variables", "exchange buffers") or their
total, the fullest tiles outlined and numbered, and the worst
tiles as stacked bars against the tile's memory. It opens on the total; Play steps
through every category (or click a category's button). One colour scale, from 0 to the
fullest tile's total, serves every category, so equal colours are equal bytes (1,536 B and
1,664 B look alike; the table and the tooltip give the bytes). Hover a tile for its bytes
by category, click it to read it as ``view.selected``.

A graph's remote buffers (``graph.add_remote_buffer``) are in Streaming Memory, off the
IPU: they are not tile memory, so they are not on the map; a line of their own under the
title and below the table says how many bytes they hold, and in which buffers.

It reads a Trace (``engine.trace``) or an Executable (``ipu.compile_graph``); it never
compiles (compile a Graph with ``ipu.compile_graph(graph, [])`` to see its variables).

>>> import ipukit as ipu
>>> from ipukit.widgets import MemoryMap
>>> g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
>>> v = g.add_variable(ipu.FLOAT, [6], "v")
>>> g.set_tile_mapping(v[:4], 0); g.set_tile_mapping(v[4:], 3)
>>> m = MemoryMap(ipu.compile_graph(g, []))
>>> m.worst(2)
[(0, 16), (3, 8)]
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle

from .. import report
from ..compile import Executable
from ..memory_report import largest_remote_buffers
from ..report import NAME_CHARS, figure_text
from ..trace import Trace
from ._player import Widget, esc, new_figure, pack
from .bsp_view import TileLayout

CATEGORY_COLOURS = {"variables": "#0072B2", "constants": "#56B4E9", "vertex state": "#E69F00",
                    "vertex code": "#CC79A7", "not-always-live variables": "#D55E00",
                    "exchange buffers": "#009E73"}
WORST = 8
MARK = "#00B4F0"  # outline of the fullest tiles: visible on light and dark cells


def _compiled(source) -> Trace | Executable:
    """Something with ``.memory`` and ``.target``: a Trace or an Executable."""
    if isinstance(source, Trace | Executable):
        return source
    raise TypeError(f"MemoryMap needs a Trace or an Executable (ipu.compile_graph(graph, "
                    f"programs)), got {source!r}")


class MemoryMap(Widget):
    """Per-tile memory of a compiled graph; frame ``k`` shows ``self.names[k]``."""

    def __init__(self, source, **kwargs):
        self.compiled = _compiled(source)
        self.memory, self.target = self.compiled.memory, self.compiled.target
        self.names = ["total"] + list(self.memory.categories)
        super().__init__(**kwargs)

    def payload(self) -> dict:
        t, lay = self.target, TileLayout(self.target)
        meta = {"kind": "memory", "names": self.names,
                "categories": list(self.memory.categories),
                "category_colours": CATEGORY_COLOURS, "bytes_per_tile": t.bytes_per_tile,
                "scale": self.scale(),
                "layout": {"num_ipus": t.num_ipus, "tiles_per_ipu": t.tiles_per_ipu,
                           "cols": lay.cols, "rows": lay.rows, "gap": lay.GAP},
                "streaming_memory": self.streaming_memory()}
        return {"meta": meta, "arrays": {"memory": pack(list(self.memory.categories.values()))}}

    # -- the model ---------------------------------------------------------------------------
    def scale(self) -> int:
        """The top of the one colour scale (its bottom is 0): the fullest tile's total."""
        return int(self.memory.total.max()) if self.memory.total.size else 0

    def streaming_memory(self, n: int = 3) -> dict | None:
        """The remote buffers in Streaming Memory (not tile memory): their total bytes,
        count and the ``n`` largest as (name, bytes); None where there are none."""
        if not self.memory.remote:
            return None
        return {"bytes": int(self.memory.streaming_memory), "buffers": len(self.memory.remote),
                "largest": [[name, int(b)] for name, b in largest_remote_buffers(self.memory, n)]}

    def streaming_memory_line(self) -> str:
        """'Streaming Memory (remote buffers, off the IPU; not in this map): 8,040 B in 3
        buffers' (plain text), or '' where the graph has none."""
        sm = self.streaming_memory()
        if sm is None:
            return ""
        n = sm["buffers"]
        return (f"Streaming Memory (remote buffers, off the IPU; not in this map): "
                f"{sm['bytes']:,} B in {n} buffer{'s' if n > 1 else ''}")

    def num_frames(self) -> int:
        return len(self.names)

    def bytes(self, k: int | None = None) -> np.ndarray:
        """Bytes per tile of category ``names[k]`` (default: the slider's)."""
        name = self.names[self.frame if k is None else k]
        return self.memory.total if name == "total" else self.memory.categories[name]

    def worst(self, n: int = WORST, k: int | None = None) -> list[tuple[int, int]]:
        """The ``n`` fullest tiles in category ``k`` as (tile, bytes), fullest first."""
        name = self.names[self.value if k is None else k]
        worst = self.memory.worst(n, None if name == "total" else name)
        return [(t, b) for t, b in worst if b > 0]

    # -- drawing -----------------------------------------------------------------------------
    def draw(self, k: int) -> None:
        """Frame ``k``: ipukit.report's tile memory map (a fresh axes, as it adds a colour
        bar), the IPU boundaries, the fullest tiles outlined, and the worst tiles' bars."""
        if self.fig is None:
            self.fig = new_figure(11.5, 4.6)
        fig, t = self.fig, self.target
        fig.clf()
        gs = fig.add_gridspec(1, 2, width_ratios=[1.45, 1], left=0.06, right=0.97,
                              top=0.8 if self.memory.remote else 0.86, bottom=0.13, wspace=0.3)
        ax = self.ax_map = fig.add_subplot(gs[0, 0])
        name = self.names[k]
        report.tile_memory_map(self.compiled, ax, None if name == "total" else name,
                               cmap="magma_r", vmax=self.scale())
        rows, cols = report.tile_grid_shape(t.num_tiles)
        for q in range(1, t.num_ipus):  # a staircase between IPU q-1 and IPU q
            r, c = divmod(q * t.tiles_per_ipu, cols)
            ax.plot([-0.5, c - 0.5, c - 0.5, cols - 0.5], [r + 0.5, r + 0.5, r - 0.5, r - 0.5],
                    color="white", lw=2.5)
        image, b = ax.images[0], self.bytes(k)
        size = 1 if rows <= 8 else 3  # on a big grid, a ring around the tile
        for rank, (tile, _) in enumerate(self.worst(5, k)):
            y, x = divmod(tile, cols)
            ax.add_patch(Rectangle((x - size / 2, y - size / 2), size, size, fill=False,
                                   ec=MARK, lw=2.2))
            if t.num_tiles <= 64:
                r, g, bl, _ = image.cmap(image.norm(b[tile]))
                dark = 0.299 * r + 0.587 * g + 0.114 * bl < 0.55
                ax.text(x, y, f"#{rank + 1}\ntile {tile}", ha="center", va="center",
                        fontsize=8, color="white" if dark else "black", weight="bold")
        self._worst_bars(fig.add_subplot(gs[0, 1]))
        fig.text(0.06, 0.955, f"Tile memory by category ({t.num_ipus} IPU"
                 f"{'s' if t.num_ipus > 1 else ''} x {t.tiles_per_ipu:,} tiles)",
                 fontsize=13, weight="bold", va="center")
        if self.memory.remote:
            fig.text(0.06, 0.905, self.streaming_memory_line(), fontsize=9, va="center",
                     color="#555")

    def _worst_bars(self, bars) -> None:
        """The fullest tiles (all categories) as stacked bars, PopVision's memory table."""
        worst = [tile for tile, _ in self.memory.worst(WORST) if self.memory.total[tile]]
        left = np.zeros(len(worst))
        for name, per_tile in self.memory.categories.items():
            vals = per_tile[worst] / 1024
            bars.barh(range(len(worst)), vals, left=left, color=CATEGORY_COLOURS.get(name),
                      label=figure_text(name, 40), height=0.7)
            left += vals
        bars.set_yticks(range(len(worst)), [f"tile {w}" for w in worst], fontsize=9)
        bars.invert_yaxis()
        kib = self.target.bytes_per_tile // 1024
        bars.set_xlabel(f"KiB (a tile has {kib:,} KiB)", fontsize=9)
        bars.tick_params(labelsize=8)
        bars.legend(fontsize=8, loc="lower right", framealpha=0.9)
        bars.set_title("fullest tiles", fontsize=10)

    def caption(self, k: int | None = None) -> str:
        k = self.frame if k is None else k
        rows = "".join(
            f"<tr><td>{tile}</td><td>{self.target.ipu_of_tile(tile)}</td><td>{v:,}</td>"
            f"<td>{100 * int(self.memory.total[tile]) / self.target.bytes_per_tile:.1f}%</td>"
            "</tr>\n" for tile, v in self.worst(5, k))
        # the title is the table's <caption> and the header a spaced, ruled row (the learner
        # trial read "Fullest tiles (total)tileIPUbytes..." as one word)
        name = esc(self.names[k], NAME_CHARS)
        return (f'<table class="ipukit-worst">\n<caption>Fullest tiles ({name})</caption>'
                "\n<tr><th>tile</th> <th>IPU</th> <th>bytes</th> "
                f"<th>tile full (all categories)</th></tr>\n{rows}</table>"
                f"{self._streaming_memory_html()}")

    def _streaming_memory_html(self) -> str:
        """The Streaming Memory line and its largest buffers, as a paragraph ('' if none)."""
        sm = self.streaming_memory()
        if sm is None:
            return ""
        names = ", ".join(f"{esc(name, NAME_CHARS)} {b:,} B" for name, b in sm["largest"])
        more = ", ..." if sm["buffers"] > len(sm["largest"]) else ""
        return (f'\n<p class="ipukit-streaming">{esc(self.streaming_memory_line())} '
                f"(largest: {names}{more})</p>")
