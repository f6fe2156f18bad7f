"""Poplar tutorial 6: matrix-vector optimisation (``tut6_matrix_vector_opt``).

The column axis is split into ``colsAxisSplit`` pieces: one compute set computes the
partial dot products (one vertex per row and piece, spread evenly over all tiles), a
second adds the partials of each row. The split is chosen by Graphcore's integer cost
estimate over the target's tiles, workers and exchange bytes per cycle, unless it is given
(``build(rows, cols, split=k)``, to profile other splits).

Run: ``python -m ipukit.tutorials.tut6 10000 1000 [--device model-ipu1|model-ipu2]``
"""

from __future__ import annotations

import sys

import numpy as np

import ipukit as ipu
from ipukit.examples._cli import Parser, check_fits, positive_int, run
from ipukit.tutorials.tut5 import DotProductVertex


class ReduceVertex(ipu.Vertex):
    """``matrix-mul-codelets.cpp``: ``*out = sum of in``."""

    in_ = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.in_.sum(axis=-1)


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def estimate_parts(target, rows: int, cols: int, split: int) -> dict:
    """The four parts of ``estimateCycles`` for a column split (unsigned integer arithmetic):
    ``compute``, ``exchange``, ``reduce_exchange`` and ``reduce_compute``."""
    tiles, workers = target.num_tiles, target.num_worker_contexts
    xbytes = target.exchange_bytes_per_cycle
    max_vertices = max(ceil_div(rows * split, tiles), 1)
    cycles_per_vertex = 5 + (ceil_div(cols, split) + 1) // 2
    max_reduce = max(ceil_div(rows, tiles), 1)
    return {
        "compute": ceil_div(max_vertices, workers) * workers * cycles_per_vertex,
        "exchange": ceil_div(max_vertices, rows) * ceil_div(cols, split) * 4 // xbytes,
        "reduce_exchange": max_reduce * split * 4 // xbytes,
        "reduce_compute": ceil_div(max_reduce, workers) * workers * (5 + (split + 1) // 2),
    }


def estimate_cycles(target, rows: int, cols: int, split: int, verbose: bool = False) -> int:
    """``estimateCycles``: Graphcore's integer cost of a column split, the sum of
    :func:`estimate_parts`."""
    parts = estimate_parts(target, rows, cols, split)
    total = sum(parts.values())
    if verbose:
        print(f"colsAxisSplit={split}, total cost={total} (compute cost={parts['compute']}, "
              f"exchange cost={parts['exchange']}, reduce exchange cost="
              f"{parts['reduce_exchange']}, reduce compute cost={parts['reduce_compute']})")
    return total


def calc_optimal_col_axis_split(target, rows: int, cols: int) -> int:
    """``calcOptimalColAxisSplit``: the first split in 1..cols-1 of least cost."""
    best, best_cost, worst = 1, None, 0
    for split in range(1, cols):
        cost = estimate_cycles(target, rows, cols, split)
        if best_cost is None or cost < best_cost:
            best, best_cost = split, cost
        worst = max(worst, cost)
    print("Best split chosen:")
    estimate_cycles(target, rows, cols, best, verbose=True)
    print(f"Worst cost seen: {worst}")
    return best


def build_multiply_program(graph, matrix, vector, out, split=None):
    """``buildMultiplyProgram``: partial dot products, then a reduction per row.

    ``split`` is ``colsAxisSplit``, the number of column pieces (1 to cols); None chooses
    it as tut6 does, with :func:`calc_optimal_col_axis_split`.
    """
    rows, cols = matrix.shape
    if split is None:
        split = calc_optimal_col_axis_split(graph.target, rows, cols)
    elif not isinstance(split, int | np.integer) or not 1 <= split <= cols:
        raise ipu.IpuError(f"tut6: colsAxisSplit={split!r} must be a whole number from 1 to "
                           f"the matrix's {cols} columns (each piece needs a column); pass "
                           "split=None to choose it with the cost estimate")
    split = int(split)
    partials = graph.add_variable(ipu.FLOAT, [rows, split], "partials")
    tiles = graph.target.num_tiles
    for i in range(cols):  # the input vector is used everywhere: spread it
        graph.set_tile_mapping(vector[i], i * tiles // cols)
    mul_cs = graph.add_compute_set("mulCS")
    for i in range(split):
        begin, end = i * cols // split, (i + 1) * cols // split  # never empty: split <= cols
        b = vector.slice(begin, end)
        for row in range(rows):
            a, out_ = matrix[row].slice(begin, end), partials[row][i]
            v = graph.add_vertex(mul_cs, DotProductVertex, {"a": a, "b": b, "out": out_})
            tile = (i * rows + row) * tiles // (split * rows)
            graph.set_tile_mapping(v, tile)
            graph.set_tile_mapping(a, tile)
            graph.set_tile_mapping(out_, tile)
            graph.set_perf_estimate(v, 5 + ((end - begin) + 1) // 2)
    reduce_cs = graph.add_compute_set("reduceCS")
    for row in range(rows):
        v = graph.add_vertex(reduce_cs, ReduceVertex, {"in_": partials[row], "out": out[row]})
        tile = row * tiles // rows
        graph.set_tile_mapping(v, tile)
        graph.set_tile_mapping(out[row], tile)
        graph.set_perf_estimate(v, 5 + (split + 1) // 2)
    return ipu.Sequence(ipu.Execute(mul_cs), ipu.Execute(reduce_cs))


def check_result(matrix, vector, output) -> bool:
    """``checkResult``: relative error at most 1e-5 against a host computation."""
    # in blocks of rows: a float64 copy of a whole large matrix would double the memory
    step = max(1, 2**22 // max(matrix.shape[1], 1))
    expected = np.concatenate([matrix[r:r + step].astype(np.float64) @ vector.astype(np.float64)
                               for r in range(0, matrix.shape[0], step)] or [np.zeros(0)])
    with np.errstate(divide="ignore", invalid="ignore"):  # row 0 is 0/0, as in C++
        rel = np.abs(1 - expected / output)
    bad = np.flatnonzero(rel > 1e-5)
    if bad.size:
        r = int(bad[0])
        print(f"ERROR: output {r}: expected={expected[r]:g}, actual={output[r]:g}, "
              f"relative error={rel[r]:g}")
        return False
    print("Multiplication result OK")
    return True


def build(rows: int, cols: int, version: str = "ipu2", split: int | None = None):
    """Device, graph and program of tut6 (for tests, benchmarks and lessons); ``split`` as
    in :func:`build_multiply_program`."""
    device = ipu.IPUModel(version).create_device()
    graph = ipu.Graph(device.target)
    matrix = graph.add_variable(ipu.FLOAT, [rows, cols], "matrix")
    vector = graph.add_variable(ipu.FLOAT, [cols], "inputVector")
    out = graph.add_variable(ipu.FLOAT, [rows], "outputVector")
    mul_prog = build_multiply_program(graph, matrix, vector, out, split)
    in_v = graph.add_host_to_device_fifo("inputVector", ipu.FLOAT, cols)
    in_m = graph.add_host_to_device_fifo("inputMatrix", ipu.FLOAT, cols * rows)
    out_s = graph.add_device_to_host_fifo("out", ipu.FLOAT, rows)
    prog = ipu.Sequence(ipu.Copy(in_v, vector), ipu.Copy(in_m, matrix), mul_prog,
                        ipu.Copy(out, out_s))
    return device, graph, prog


def main(argv=None) -> int:
    parser = Parser(prog="tut6", description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=positive_int)
    parser.add_argument("cols", type=positive_int)
    parser.add_argument("--device", default="model-ipu2", choices=["model-ipu1", "model-ipu2"])
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the profile summary at the end")
    return run(_main, sys.argv[1:] if argv is None else argv, parser)


def _main(args) -> int:
    n = args.rows * args.cols + args.cols + 2 * args.rows
    # device: 4 B an element; host: the data, the emulator's addresses and tiles, the check
    check_fits(f"a {args.rows:,}x{args.cols:,} matrix-vector multiply",
               ipu.IPUModel(args.device.removeprefix("model-")).create_device().target,
               4 * n, 32 * n)
    print(f"Device {args.device}")
    print(f"Multiplying matrix of size {args.rows}x{args.cols} by vector of size {args.cols}")
    print("Constructing compute graph and control program")
    device, graph, prog = build(args.rows, args.cols, args.device.removeprefix("model-"))
    h_vector = np.arange(args.cols, dtype=np.float32)
    # float32 products round as the int64 ones cast to float32 do (IEEE), with no int64 copy
    h_matrix = np.outer(np.arange(args.rows, dtype=np.float32),
                        np.arange(args.cols, dtype=np.float32))
    h_out = np.zeros(args.rows, np.float32)
    engine = ipu.Engine(graph, prog, {"autoReport.all": "true"})
    engine.load(device)
    engine.connect_stream("inputVector", h_vector)
    engine.connect_stream("inputMatrix", h_matrix)
    engine.connect_stream("out", h_out)
    print("Running graph program to multiply matrix by vector")
    engine.run()
    if not check_result(h_matrix, h_vector, h_out):
        return 1
    if not args.no_profile:
        engine.print_profile_summary()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
