"""Widgets that animate what a run did; they read a Trace, Schedule or run result only.

* :class:`BSPView` (a :class:`ipukit.trace.Trace`): supersteps and their sync, exchange
  and compute phases on the tile grid.
* :class:`PipelineTimeline` (a :class:`ipukit.parallel.schedule.Schedule` or the
  ``RunResult`` of a pipeline run): one row per IPU, F/B/R boxes per micro-batch, bubble
  measures and stashed activations over time.
* :class:`MemoryMap` (a Trace, Executable or Graph): per-tile memory by category.

Each is an ipywidgets box with a Play button and a slider; ``to_html()`` and ``static()``
give an animated PNG for GitHub and nbviewer.
"""

from .bsp_view import BSPFrame, BSPView
from .memory_map import MemoryMap
from .pipeline_timeline import Panel, PipelineTimeline

__all__ = ["BSPFrame", "BSPView", "MemoryMap", "Panel", "PipelineTimeline"]
