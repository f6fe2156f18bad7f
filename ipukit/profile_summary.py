"""The profile of a run, as ``poplar::Engine::printProfileSummary`` prints it and PopVision's
libpva reads it: a :class:`~ipukit.trace.Trace`'s totals (:func:`summary`), its per-step
table (:func:`step_table`) and the summary text. ``Trace.summary()``,
``Trace.step_table()`` and ``Engine.print_profile_summary()`` call these.

>>> import io, ipukit as ipu
>>> t = ipu.IPUModel(tiles_per_ipu=2).create_device().target
>>> g = ipu.Graph(t)
>>> v = g.add_variable(ipu.FLOAT, [2], "v")
>>> g.set_tile_mapping(v, 0)
>>> eng = ipu.Engine(g, ipu.Copy(v[0], v[1]))
>>> eng.load(ipu.Device(t)); eng.run()
>>> out = io.StringIO(); print_profile_summary(eng.trace, out)
>>> out.getvalue().splitlines()[0:2]
['Target:', '  Type:                                                   IPU Model (ipu2)']
"""

from __future__ import annotations

import sys

import numpy as np


def summary(trace) -> dict:
    """The profile's numbers as a dict (what :func:`print_profile_summary` prints)."""
    t, steps, runs = trace.target, trace.steps, trace.executions()

    def total(attr, where=lambda s: True) -> int:
        return sum(int(n) * getattr(s, attr) for n, s in zip(runs, steps) if n and where(s))

    vertex_types: dict[str, list[int]] = {}
    for n, s in zip(runs, steps):
        for name, (inst, cyc) in s.vertex_types.items() if n else ():
            entry = vertex_types.setdefault(name, [0, 0])  # a step that never ran is out
            entry[0] += inst  # a step that runs again has the same vertices
            entry[1] += int(n) * cyc
    mem, excl = trace.memory.total, total("vertex_cycles")
    return {
        "total_cycles": trace.total_cycles,
        "total_us": t.cycles_to_us(trace.total_cycles),
        "sync_cycles": total("sync_cycles"),
        "host_sync_cycles": total("sync_cycles", lambda s: s.kind == "host"),
        "host_bytes": total("host_bytes"),
        "host_exchange_cycles": total("exchange_cycles", lambda s: s.kind == "stream"),
        "exchange_cycles": total("exchange_cycles"),
        "exchange_out_cycles": total("exchange_out_cycles"),
        "remote_bytes": total("remote_bytes"),
        "remote_exchange_cycles": total("exchange_cycles", lambda s: s.kind == "remote"),
        "global_exchange_cycles": total("exchange_cycles", lambda s: s.kind not in (
            "stream", "remote") and s.inter_ipu_bytes),
        "ipu_exchange_cycles": total("exchange_cycles", lambda s: s.kind not in (
            "stream", "remote") and not s.inter_ipu_bytes),
        "compute_cycles": total("compute_cycles"),
        "compute_cycles_excluding_idle": excl,
        "tile_average_excluding_idle": excl / t.num_tiles,
        "tile_average_including_idle": float(sum(
            int(n) * int(s.tile_compute_cycles.sum()) for n, s in zip(runs, steps) if n))
        / t.num_tiles,
        "vertex_types": {k: tuple(v) for k, v in vertex_types.items()},
        "memory_total": int(mem.sum()),
        "memory_max": int(mem.max()),
        "memory_mean": float(mem.mean()),
        "memory_worst": trace.memory.worst(),
        "memory_over_full": trace.memory.over_full(),
        "memory_by_category": {k: int(v.sum()) for k, v in trace.memory.categories.items()},
        "streaming_memory": trace.memory.streaming_memory,
    }


def step_table(trace) -> list[dict]:
    """One row per compiled step that ran: executions and cycles (PopVision's table)."""
    return [{"name": s.name, "kind": s.kind, "executions": int(n), "cycles": int(n) * s.cycles,
             "sync": int(n) * s.sync_cycles, "exchange": int(n) * s.exchange_cycles,
             "compute": int(n) * s.compute_cycles,
             "exchange out": int(n) * s.exchange_out_cycles,
             "vertices": sum(i for i, _ in s.vertex_types.values()),
             "slowest tile": int(np.argmax(s.tile_compute_cycles))}
            for n, s in zip(trace.executions(), trace.steps) if n]


def print_profile_summary(trace, file=None) -> None:
    """Print the target, memory and execution summary of ``trace`` (``printProfileSummary``)."""
    out = file or sys.stdout
    t, s = trace.target, summary(trace)

    def w(label, value=""):
        print(f"  {label:<55} {value}", file=out)

    print("Target:", file=out)
    w("Type:", f"IPU Model ({t.version})")
    w("Number of IPUs:", t.num_ipus)
    w("Tiles per IPU:", f"{t.tiles_per_ipu:,}")
    w("Total number of tiles:", f"{t.num_tiles:,}")
    w("Memory per tile:", f"{t.bytes_per_tile // 1024:,} KiB")
    w("Clock:", f"{t.clock_hz / 1e9:.2f} GHz")
    print("\nMemory Usage:", file=out)
    w("Total for all IPUs:", f"{s['memory_total']:,} B")
    for k, v in s["memory_by_category"].items():
        w(f"  {k.capitalize()}:", f"{v:,} B")
    w("Per tile, maximum:", f"{s['memory_max']:,} B "
      f"({100 * s['memory_max'] / t.bytes_per_tile:.1f}% of {t.bytes_per_tile:,} B)")
    w("Per tile, mean:", f"{s['memory_mean']:,.1f} B")
    w("Worst tiles:", ", ".join(f"tile {i}: {b:,} B" for i, b in s["memory_worst"]))
    if trace.memory.remote:
        w("Streaming Memory (remote buffers, not tile memory):",
          f"{s['streaming_memory']:,} B (" + ", ".join(
              f"'{k}' {b:,} B" for k, b in trace.memory.remote.items()) + ")")
    if s["memory_over_full"]:
        over = s["memory_over_full"]
        w("Out of memory (the IPUModel runs on):",
          f"{len(over):,} tiles over {t.bytes_per_tile:,} B, "
          + ", ".join(f"tile {i}: {b:,} B" for i, b in over[:5]))
    print("\nExecution:", file=out)
    w("Engine.run calls:", trace.num_runs)
    w("Total cycles:", f"{s['total_cycles']:,} (approx {s['total_us']:,.1f} microseconds)")
    # Poplar's tile averages (tut6 README). (kit convention: in ipukit's BSP every tile
    # spends a step's whole exchange and sync phases in them, so their averages are the
    # phase totals; sync includes the host synchronisation of each Engine.run call.)
    for label, value in (
            ("compute cycles (including idle threads)", s["tile_average_including_idle"]),
            ("compute cycles (excluding idle threads)", s["tile_average_excluding_idle"]),
            ("IPU exchange cycles", s["ipu_exchange_cycles"]),
            ("global exchange cycles", s["global_exchange_cycles"]),
            ("host exchange cycles", s["host_exchange_cycles"]),
            ("Streaming Memory exchange cycles", s["remote_exchange_cycles"]),
            ("sync cycles", s["sync_cycles"])):
        w(f"Tile average {label}:",
          f"{value:,.1f} ({100 * value / max(s['total_cycles'], 1):.1f}% of total)")
    print("\n  Breakdown of the total cycles (ipukit):", file=out)
    w("  Host synchronisation (Engine.run calls):", f"{s['host_sync_cycles']:,}")
    w("  Sync:", f"{s['sync_cycles'] - s['host_sync_cycles']:,}")
    w("  Exchange:", f"{s['exchange_cycles']:,}")
    w("    of which exchange out (after compute):",
      f"{s['exchange_out_cycles']:,}")
    w("    of which host exchange (stream copies):",
      f"{s['host_exchange_cycles']:,} ({s['host_bytes']:,} B over the host link)")
    w("    of which Streaming Memory (remote buffer copies):",
      f"{s['remote_exchange_cycles']:,} ({s['remote_bytes']:,} B)")
    w("  Compute:", f"{s['compute_cycles']:,}")
    w("Total compute cycles (excluding idle threads):",
      f"{s['compute_cycles_excluding_idle']:,}")
    if s["vertex_types"]:
        print("\n  By vertex type:", file=out)
        for name, (inst, cyc) in s["vertex_types"].items():
            w(f"  {name} ({inst:,} instances):", f"{cyc:,}")
    print("\n  By step:", file=out)
    print(f"    {'step':<40}{'runs':>8}{'cycles':>14}{'exchange':>12}{'compute':>12}",
          file=out)
    for r in step_table(trace):
        print(f"    {r['name'][:39]:<40}{r['executions']:>8,}{r['cycles']:>14,}"
              f"{r['exchange']:>12,}{r['compute']:>12,}", file=out)
