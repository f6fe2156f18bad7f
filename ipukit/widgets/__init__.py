"""Widgets that play what a run did in the browser; they read a Trace, Schedule or run only.

* :class:`BSPView` (a :class:`ipukit.trace.Trace`): supersteps and their sync, exchange
  and compute phases on the tile grid.
* :class:`PipelineTimeline` (a :class:`ipukit.parallel.schedule.Schedule` or the
  ``RunResult`` of a pipeline run): one row per IPU, F/B/R boxes per micro-batch, bubble
  measures and stashed activations over time.
* :class:`MemoryMap` (a Trace, Executable or Graph): per-tile memory by category.

Each is an ``anywidget.AnyWidget``: Python sends the data once, the browser plays it
(Play, scrub, speed, hover, click) with no kernel round trip. ``frame``, ``playing`` and
``selected`` sync both ways; ``save_html(path)`` writes a page that plays offline; the cell
output also carries that page (``text/html``, for nbconvert) and a PNG (``static()``).
"""

from .bsp_view import BSPFrame, BSPView
from .memory_map import MemoryMap
from .pipeline_timeline import Panel, PipelineTimeline

__all__ = ["BSPFrame", "BSPView", "MemoryMap", "Panel", "PipelineTimeline"]
