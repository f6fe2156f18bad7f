"""Poplar tutorial 1: programs and variables (``tut1_variables``, IPU Model version).

Variables and their tile mapping, a constant, copies between tensors and slices of
tensors, host read/write handles and a host-to-device stream used as a circular buffer.

Run: ``python -m ipukit.tutorials.tut1``
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu
from ipukit.examples._cli import Parser


def fmt_float(x: float) -> str:
    """C++ ``std::cout << float`` (default format: ``0``, ``1.5``)."""
    return f"{x:g}"


def main(argv=None) -> int:
    Parser(prog="tut1", description=__doc__.splitlines()[0]).parse_args(argv)  # no arguments
    device = ipu.IPUModel().create_device()
    graph = ipu.Graph(device.target)

    v1 = graph.add_variable(ipu.FLOAT, [4], "v1")
    v2 = graph.add_variable(ipu.FLOAT, [4], "v2")
    v3 = graph.add_variable(ipu.FLOAT, [4, 4], "v3")
    v4 = graph.add_variable(ipu.INT, [10], "v4")
    graph.set_tile_mapping(v1, 0)  # v1 on tile 0
    for i in range(4):  # v2 spread over tiles 0..3
        graph.set_tile_mapping(v2[i], i)
    graph.set_tile_mapping(v3, 0)
    graph.set_tile_mapping(v4, 0)

    prog = ipu.Sequence()
    c1 = graph.add_constant(ipu.FLOAT, [4], [1.0, 1.5, 2.0, 2.5], "c1")
    graph.set_tile_mapping(c1, 0)
    prog.add(ipu.Copy(c1, v1))
    prog.add(ipu.PrintTensor("v1-debug", v1))
    prog.add(ipu.Copy(v1, v2))
    prog.add(ipu.PrintTensor("v2-debug", v2))

    graph.create_host_write("v3-write", v3)
    graph.create_host_read("v3-read", v3)
    v1slice = v1.slice(0, 3)
    v3slice = v3.slice([1, 1], [2, 4])
    prog.add(ipu.Copy(v1slice, v3slice))

    in_stream = graph.add_host_to_device_fifo("v4-input-stream", ipu.INT, 10)
    prog.add(ipu.Copy(in_stream, v4))
    prog.add(ipu.PrintTensor("v4-0", v4))
    prog.add(ipu.Copy(in_stream, v4))
    prog.add(ipu.PrintTensor("v4-1", v4))

    engine = ipu.Engine(graph, prog)
    engine.load(device)
    h3 = np.zeros(16, np.float32)
    engine.write_tensor("v3-write", h3)
    in_data = np.arange(10 * 3, dtype=np.int32)  # a circular buffer of 30 values
    engine.connect_stream("v4-input-stream", in_data)

    print("Running program")
    engine.run(0)
    print("Program complete")

    h3 = engine.read_tensor("v3-read").reshape(-1)
    print("\nh3 data:")
    for i in range(4):
        print("  " + "".join(fmt_float(h3[i * 4 + j]) + " " for j in range(4)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
