"""Poplar tutorial 4: profiling (``tut4_profiling``, IPU Model version).

Two ``poplin.mat_mul`` calls (900×600 · 600×300, then · 300×200) on a Mk2 IPU Model;
the profile summary shows their compute sets, exchange and memory. Poplar itself plans
these two matmuls into 9 compute sets (tut4's libpva example); ipukit's simpler planner
uses two per matmul (partials, then their reduction).

Run: ``python -m ipukit.tutorials.tut4``
"""

from __future__ import annotations

import ipukit as ipu
from ipukit.examples._cli import Parser
from ipukit.poplibs import poplin, poputil


def build(device):
    """The graph and program of tut4: returns (graph, prog, m5)."""
    graph = ipu.Graph(device.target)
    m1 = graph.add_variable(ipu.FLOAT, [900, 600], "m1")
    m2 = graph.add_variable(ipu.FLOAT, [600, 300], "m2")
    m3 = graph.add_variable(ipu.FLOAT, [300, 200], "m3")
    for m in (m1, m2, m3):
        poputil.map_tensor_linearly(graph, m)
    prog = ipu.Sequence()
    m4 = poplin.mat_mul(graph, m1, m2, prog, "m4")
    m5 = poplin.mat_mul(graph, m4, m3, prog, "m5")
    return graph, prog, m5


def main(argv=None) -> int:
    Parser(prog="tut4", description=__doc__.splitlines()[0]).parse_args(argv)  # no arguments
    device = ipu.IPUModel().create_device()
    graph, prog, _ = build(device)
    engine = ipu.Engine(graph, prog, {"debug.retainDebugInformation": "true"})
    engine.load(device)
    print("Running program")
    engine.run(0)
    print("Program complete")
    engine.print_profile_summary()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
