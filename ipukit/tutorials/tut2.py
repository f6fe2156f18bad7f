"""Poplar tutorial 2: using PopLibs (``tut2_operations``).

``popops.add`` adds a compute set of vertices to the program for you. ``v1`` and ``v2``
are mapped differently (``v2`` transposed), so the adds exchange data between tiles.

Run: ``python -m ipukit.tutorials.tut2``
"""

from __future__ import annotations

import ipukit as ipu
from ipukit.examples._cli import Parser
from ipukit.poplibs import popops


def main(argv=None) -> int:
    Parser(prog="tut2", description=__doc__.splitlines()[0]).parse_args(argv)  # no arguments
    device = ipu.IPUModel().create_device()
    graph = ipu.Graph(device.target)

    v1 = graph.add_variable(ipu.FLOAT, [2, 2], "v1")
    v2 = graph.add_variable(ipu.FLOAT, [2, 2], "v2")
    for i in range(2):
        for j in range(2):
            graph.set_tile_mapping(v1[i][j], i * 2 + j)
            graph.set_tile_mapping(v2[i][j], j * 2 + i)

    prog = ipu.Sequence()
    c1 = graph.add_constant(ipu.FLOAT, [4], [1.0, 1.5, 2.0, 2.5], "c1")
    c2 = graph.add_constant(ipu.FLOAT, [4], [4.0, 3.0, 2.0, 1.0], "c2")
    graph.set_tile_mapping(c1, 0)
    graph.set_tile_mapping(c2, 0)
    prog.add(ipu.Copy(c1, v1.flatten()))
    prog.add(ipu.Copy(c2, v2.flatten()))

    v3 = popops.add(graph, v1, v2, prog, "Add")
    prog.add(ipu.PrintTensor("v3", v3))
    v4 = popops.add(graph, v3, v2, prog, "Add")
    prog.add(ipu.PrintTensor("v4", v4))
    v5 = popops.add(graph, v1, v2.transpose(), prog, "Add")
    prog.add(ipu.PrintTensor("v5", v5))

    engine = ipu.Engine(graph, prog)
    engine.load(device)
    print("Running program")
    engine.run(0)
    print("Program complete")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
