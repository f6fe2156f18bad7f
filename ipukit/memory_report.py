"""The text of Poplar's out-of-memory report: which tiles do not fit, and what fills them.

Graphcore's memory guide ("Debugging an out-of-memory exception") shows the two forms:
``Memory allocation error : Out of memory on tile N`` when compiling for hardware, and
``Out of memory: Cannot fit all variable data onto one or more tiles`` when the IPUModel
runs on (``debug.allowOutOfMemory``). The compiler decides which; this module only words
it, naming each over-full tile's categories, the program point where its not-always-live
memory peaks (:mod:`ipukit.liveness`) and its largest tensors live there.
"""

from __future__ import annotations

import numpy as np


def largest_tensors(graph, tile: int, k: int = 3, dead=()) -> list[tuple[int, str]]:
    """The ``k`` tensors holding most bytes on ``tile``, as (bytes, name), largest first
    (leaving out the names in ``dead``)."""
    found = []
    for pool in graph.pools.values():
        if pool.variables:
            run, start, end, on = pool.pieces(np.array(pool.starts),
                                              np.array([v.size for v in pool.variables]))
            count = np.bincount(run[on == tile], weights=(end - start)[on == tile],
                                minlength=len(pool.variables))
            found += [(int(c) * pool.dtype.itemsize, pool.variables[i].name)
                      for i, c in enumerate(count.tolist())
                      if c and pool.variables[i].name not in dead]
    return sorted(found, reverse=True)[:k]


def tile_report(graph, mem, tile: int) -> str:
    """'tile 2: 280,000 B (variables 280,000; largest tensors 'v' 280,000 B)', and where a
    tile's not-always-live memory peaks, the program point and the tensors live there."""
    parts = [f"{k} {int(v[tile]):,}" for k, v in mem.categories.items() if v[tile]]
    live = mem.liveness
    peak = ""
    dead = ()
    if live is not None and live.peak[tile] >= 0:
        p = int(live.peak[tile])
        peak = f"; peak at '{live.labels[p]}' (program point {p})"
        on = live.runs[(live.runs[:, 1] <= p) & (live.runs[:, 2] >= p), 0]
        dead = set(live.names) - {live.names[v] for v in on.tolist()}
    names = ", ".join(f"'{name}' {b:,} B"
                      for b, name in largest_tensors(graph, tile, dead=dead))
    return (f"tile {tile}: {int(mem.total[tile]):,} B ({', '.join(parts)}{peak}"
            f"{'; largest tensors ' + names if names else ''})")


def out_of_memory(graph, mem, error: bool) -> str:
    """The message for a graph whose tiles do not all fit: an error's (``error``, as on
    hardware) or the IPUModel's warning."""
    t, total = graph.target, mem.total
    over = int((total > t.bytes_per_tile).sum())
    worst = "; ".join(tile_report(graph, mem, tile) for tile, used in mem.worst(3) if used)
    detail = (
        f"cannot fit all data onto {over} of {t.num_tiles} tiles "
        f"({t.bytes_per_tile:,} bytes per tile on {t.version}). Worst "
        f"tiles: {worst}. Fix: spread tensors over more tiles "
        "(poputil.map_tensor_linearly), split the work across more vertices or "
        "IPUs, use smaller tensors, or order the programs so that fewer not-always-live "
        "tensors are live at once (report.liveness shows them)."
    )
    detail += streaming_memory_text(mem) + offload_hint(mem)
    if error:
        first = mem.worst(1)[0][0]
        return (f"Memory allocation error : Out of memory on tile {first}: "
                f"{int(total[first]):,} bytes used but tiles only have "
                f"{t.bytes_per_tile:,} bytes of memory ({detail})")
    return (f"Out of memory: Cannot fit all variable data onto one or more tiles: "
            f"{detail} The IPUModel runs on (debug.allowOutOfMemory is true); on an IPU "
            "this graph would not compile. Engine options "
            "{'debug.allowOutOfMemory': 'false'} make this an OutOfMemoryError.")


def largest_remote_buffers(mem, k: int = 3) -> list[tuple[str, int]]:
    """The ``k`` remote buffers (Streaming Memory) holding most bytes, as (name, bytes)."""
    return sorted(mem.remote.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def streaming_memory_text(mem) -> str:
    """' Streaming Memory holds 8,512 B in 2 remote buffers (...), off the tiles: not in
    these figures.' where the graph has remote buffers, else ''."""
    if not mem.remote:
        return ""
    names = ", ".join(f"'{name}' {b:,} B" for name, b in largest_remote_buffers(mem))
    n = len(mem.remote)
    return (f" Streaming Memory holds {mem.streaming_memory:,} B in {n} remote buffer"
            f"{'s' if n > 1 else ''} ({names}{', ...' if n > 3 else ''}), off the tiles: "
            "not in these figures.")


def offload_hint(mem) -> str:
    """Where the fullest tile's always-live variables are at least its excess (moving some
    of them off the tiles would make it fit), the fix by Streaming Memory, else ''."""
    tile = mem.worst(1)[0][0]
    excess = int(mem.total[tile]) - mem.bytes_per_tile
    variables = mem.categories.get("variables")
    if excess <= 0 or variables is None or int(variables[tile]) < excess:
        return ""
    return (" Or offload a variable that is used only at times (such as optimiser state) "
            "to Streaming Memory, \"remote (meaning not on the IPU) memory\" (Poplar's "
            "RemoteBuffer): graph.add_remote_buffer(name, dtype, num_elements), then "
            "Copy(buffer, tensor) before it is used and Copy(tensor, buffer) after; between "
            "the copies it takes no tile memory (TensorFlow: offload_weight_update_variables; "
            "PopTorch: useOnChipStorage(False)).")
