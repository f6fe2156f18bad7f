"""Poplar tutorial 3: writing vertex code (``tut3_vertices``).

A codelet, ``SumVertex``, sums its input vector. Four vertices in one compute set, one
per tile, each sum a suffix of ``v1`` into one element of ``v2``.

Run: ``python -m ipukit.tutorials.tut3``
"""

from __future__ import annotations

import ipukit as ipu
from ipukit.examples._cli import Parser


class SumVertex(ipu.Vertex):
    """``tut3_codelets.cpp``: ``*out = sum of in``."""

    in_ = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.in_.sum(axis=-1)


def main(argv=None) -> int:
    Parser(prog="tut3", description=__doc__.splitlines()[0]).parse_args(argv)  # no arguments
    device = ipu.IPUModel().create_device()
    graph = ipu.Graph(device.target)

    v1 = graph.add_variable(ipu.FLOAT, [4], "v1")
    v2 = graph.add_variable(ipu.FLOAT, [4], "v2")
    for i in range(4):
        graph.set_tile_mapping(v1[i], i)
        graph.set_tile_mapping(v2[i], i)

    prog = ipu.Sequence()
    c1 = graph.add_constant(ipu.FLOAT, [4], [1.0, 1.5, 2.0, 2.5], "c1")
    graph.set_tile_mapping(c1, 0)
    prog.add(ipu.Copy(c1, v1))

    compute_set = graph.add_compute_set("computeSet")
    for i in range(4):
        vtx = graph.add_vertex(compute_set, SumVertex)
        graph.connect(vtx["in_"], v1.slice(i, 4))
        graph.connect(vtx["out"], v2[i])
        graph.set_tile_mapping(vtx, i)
        graph.set_perf_estimate(vtx, 20)

    prog.add(ipu.Execute(compute_set))
    prog.add(ipu.PrintTensor("v2", v2))

    engine = ipu.Engine(graph, prog)
    engine.load(device)
    print("Running program")
    engine.run(0)
    print("Program complete")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
