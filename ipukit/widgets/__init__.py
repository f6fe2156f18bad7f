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

import importlib

#: Each widget's module, imported when the name is first used (module ``__getattr__``), so
#: ``from ipukit.widgets import BSPView`` does not import the pipeline schedules, which
#: ``PipelineTimeline`` needs: each import costs seconds in the browser (Pyodide).
_MODULES = {"BSPFrame": "bsp_view", "BSPView": "bsp_view", "MemoryMap": "memory_map",
            "Panel": "pipeline_timeline", "PipelineTimeline": "pipeline_timeline"}

__all__ = ["BSPFrame", "BSPView", "MemoryMap", "Panel", "PipelineTimeline"]


def __getattr__(name):
    if name not in _MODULES:
        raise AttributeError(f"module 'ipukit.widgets' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
