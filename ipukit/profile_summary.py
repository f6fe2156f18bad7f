"""The text of ``poplar::Engine::printProfileSummary`` (what PopVision's libpva reports):
target, memory and execution of a :class:`~ipukit.trace.Trace`, from its ``summary()``
and ``step_table()``. ``Engine.print_profile_summary`` and ``Trace.print_profile_summary``
print it.

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


def print_profile_summary(trace, file=None) -> None:
    """Print the target, memory and execution summary of ``trace`` (``printProfileSummary``)."""
    out = file or sys.stdout
    t, s = trace.target, trace.summary()

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
    if s["memory_over_full"]:
        over = s["memory_over_full"]
        w("Out of memory (the IPUModel runs on):",
          f"{len(over):,} tiles over {t.bytes_per_tile:,} B, "
          + ", ".join(f"tile {i}: {b:,} B" for i, b in over[:5]))
    print("\nExecution:", file=out)
    w("Engine.run calls:", trace.num_runs)
    w("Total cycles:", f"{s['total_cycles']:,} (approx {s['total_us']:,.1f} microseconds)")
    # Poplar's tile averages (tut6 README). Kit convention: in ipukit's BSP every tile
    # spends a step's whole exchange and sync phases in them, so their averages are the
    # phase totals; sync includes the host synchronisation of each Engine.run call.
    for label, value in (
            ("compute cycles (including idle threads)", s["tile_average_including_idle"]),
            ("compute cycles (excluding idle threads)", s["tile_average_excluding_idle"]),
            ("IPU exchange cycles", s["ipu_exchange_cycles"]),
            ("global exchange cycles", s["global_exchange_cycles"]),
            ("host exchange cycles", s["host_exchange_cycles"]),
            ("sync cycles", s["sync_cycles"])):
        w(f"Tile average {label}:",
          f"{value:,.1f} ({100 * value / max(s['total_cycles'], 1):.1f}% of total)")
    print("\n  Breakdown of the total cycles (ipukit):", file=out)
    w("  Host synchronisation (Engine.run calls):", f"{s['host_sync_cycles']:,}")
    w("  Sync:", f"{s['sync_cycles'] - s['host_sync_cycles']:,}")
    w("  Exchange:", f"{s['exchange_cycles']:,}")
    w("    of which host exchange (stream copies):",
      f"{s['host_exchange_cycles']:,} ({s['host_bytes']:,} B over PCIe)")
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
    for r in trace.step_table():
        print(f"    {r['name'][:39]:<40}{r['executions']:>8,}{r['cycles']:>14,}"
              f"{r['exchange']:>12,}{r['compute']:>12,}", file=out)
