"""Poplar tutorial 5: a matrix-vector multiply (``tut5_matrix_vector``).

One ``DotProductVertex`` per row of the matrix, on tile ``row``, each reading its row and
the whole input vector; data comes in and out through host streams.

Run: ``python -m ipukit.tutorials.tut5 40 50``
"""

from __future__ import annotations

import sys

import numpy as np

import ipukit as ipu
from ipukit.examples._cli import Parser, check_fits, positive_int, run
from ipukit.poplibs import poputil


class DotProductVertex(ipu.Vertex):
    """``matrix-mul-codelets.cpp``: ``*out = sum(a[i] * b[i])``."""

    a = ipu.Input(ipu.Vector(ipu.FLOAT))
    b = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = (self.a * self.b).sum(axis=-1)


def check_result(matrix, vector, output) -> bool:
    """``checkResult``: exact equality with a host float32 loop, as the C++ does."""
    expected = np.zeros(len(output), np.float32)
    for col in range(matrix.shape[1]):  # sum += matrix[row][col] * input[col]
        expected += matrix[:, col] * vector[col]
    bad = np.flatnonzero(output != expected)
    if bad.size:
        row = int(bad[0])
        print(f"ERROR: output {row}: expected={expected[row]:g}, actual={output[row]:g}")
        return False
    print("Multiplication result OK")
    return True


def build_multiply_program(graph, matrix, vector, out):
    """``buildMultiplyProgram``: one vertex per row, on tile ``row``."""
    mul_cs = graph.add_compute_set("mulCS")
    for i in range(matrix.shape[0]):
        v = graph.add_vertex(mul_cs, DotProductVertex,
                             {"a": matrix[i], "b": vector, "out": out[i]})
        graph.set_tile_mapping(v, i)
        graph.set_perf_estimate(v, 20)
    return ipu.Execute(mul_cs)


def main(argv=None) -> int:
    parser = Parser(prog="tut5", description=__doc__.splitlines()[0])
    parser.add_argument("numRows", type=positive_int)
    parser.add_argument("numCols", type=positive_int)
    return run(_main, sys.argv[1:] if argv is None else argv, parser)


def check_sizes(target, rows: int, cols: int) -> None:
    """One vertex per row on tile ``row`` (as in the C++): rows must fit the tiles, and the
    data the IPU's memory, before anything is allocated."""
    if rows > target.num_tiles:
        raise ipu.TileMappingError(
            f"numRows {rows:,}: tut5 puts the vertex of row i on tile i, and the IPU Model "
            f"has {target.num_tiles:,} tiles; use at most {target.num_tiles:,} rows (tut6 "
            "spreads any number of rows)")
    check_fits(f"a {rows:,}x{cols:,} matrix-vector multiply", target,
               4 * (rows * cols + cols + rows), 16 * (rows * cols + cols + rows))


def _main(args) -> int:
    rows, cols = args.numRows, args.numCols
    device = ipu.IPUModel().create_device()
    check_sizes(device.target, rows, cols)
    print(f"Multiplying matrix of size {rows}x{cols} by vector of size {cols}")
    print("Creating new graph object and compiling vertex program additions")
    graph = ipu.Graph(device.target)
    print("Constructing full compute graph and control program")
    matrix = graph.add_variable(ipu.FLOAT, [rows, cols], "matrix")
    vector = graph.add_variable(ipu.FLOAT, [cols], "inputVector")
    out = graph.add_variable(ipu.FLOAT, [rows], "outputVector")
    for t in (matrix, vector, out):
        poputil.map_tensor_linearly(graph, t)

    h_vector = np.arange(cols, dtype=np.float32)
    h_matrix = np.outer(np.arange(rows), np.arange(cols)).astype(np.float32)
    h_out = np.zeros(rows, np.float32)

    mul_prog = build_multiply_program(graph, matrix, vector, out)
    in_v = graph.add_host_to_device_fifo("inputVector", ipu.FLOAT, cols)
    in_m = graph.add_host_to_device_fifo("inputMatrix", ipu.FLOAT, cols * rows)
    out_s = graph.add_device_to_host_fifo("out", ipu.FLOAT, rows)
    prog = ipu.Sequence(ipu.Copy(in_v, vector), ipu.Copy(in_m, matrix), mul_prog,
                        ipu.Copy(out, out_s))

    engine = ipu.Engine(graph, prog)
    engine.load(device)
    engine.connect_stream("inputVector", h_vector)
    engine.connect_stream("inputMatrix", h_matrix)
    engine.connect_stream("out", h_out)
    print("Running graph program to multiply matrix by vector")
    engine.run()
    return 0 if check_result(h_matrix, h_vector, h_out) else 1


if __name__ == "__main__":
    raise SystemExit(main())
