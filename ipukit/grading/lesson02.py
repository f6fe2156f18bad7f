"""The checks of lesson 02: graphs, tensors, tile mapping and streams."""

from __future__ import annotations

import numpy as np

import ipukit as ipu

from .common import device as _device
from .feedback import Wrong, exercise, first_mismatch

# -- lesson 02: graphs, tensors, tile mapping, streams ----------------------------------

@exercise("02.1", "map a tensor evenly over the tiles", points=2,
          hint="Flatten the tensor; give tile i the contiguous elements "
               "[i*c, min((i+1)*c, n)) with c = ceil(n / num_tiles).")
def check_map_evenly(map_evenly):
    """Exercise 02.1: ``map_evenly(graph, tensor)`` maps contiguous, balanced chunks."""

    for tiles, shape in [(4, [8]), (4, [10]), (3, [2, 5]), (8, [5]), (1, [3, 3])]:
        g = ipu.Graph(_device(tiles).target)
        t = g.add_variable(ipu.FLOAT, shape, "t")
        map_evenly(g, t)
        _check_even(g, t, tiles)


def _check_even(g, t, tiles):
    n = t.num_elements()
    what = f"tensor of shape {list(t.shape)} ({n} elements) on {tiles} tiles"
    mapping = g.get_tile_mapping(t, throw_on_incomplete=False)
    counts = [sum(e - b for b, e in m) for m in mapping]
    if sum(counts) != n:
        raise Wrong(f"{what}: {n - sum(counts)} elements are not mapped to any tile")
    cap = -(-n // tiles)
    pos = 0
    for tile, intervals in enumerate(mapping):
        if len(intervals) > 1:
            raise Wrong(f"{what}: tile {tile} holds {len(intervals)} separate pieces "
                        f"{intervals}; give each tile one contiguous run")
        if counts[tile] > cap:
            raise Wrong(f"{what}: tile {tile} holds {counts[tile]} elements; no tile needs "
                        f"more than ceil({n}/{tiles}) = {cap}")
        if intervals:
            if intervals[0][0] != pos:
                raise Wrong(f"{what}: tile {tile} holds elements {list(intervals[0])}, "
                            f"expected the run to start at element {pos} (tiles in order)")
            pos = intervals[0][1]


@exercise("02.2", "interleave two tensors with views", points=2,
          hint="Reshape a and b to [n, 1], concat them along dim 1 (shape [n, 2]) and "
               "flatten: rows are (a[i], b[i]).")
def check_interleave(interleave):
    """Exercise 02.2: ``interleave(a, b)`` → the view [a0, b0, a1, b1, ...] (no copy)."""

    for n in (1, 3, 5):
        dev = _device(2)
        g = ipu.Graph(dev.target)
        a = g.add_variable(ipu.FLOAT, [n], "a")
        b = g.add_variable(ipu.FLOAT, [n], "b")
        g.set_tile_mapping(a, 0)
        g.set_tile_mapping(b, 1)
        view = interleave(a, b)
        if not isinstance(view, ipu.Tensor) or view.graph is not g:
            raise Wrong(f"expected a Tensor view of a and b, got {view!r}")
        expected = np.stack([a.idx, b.idx], axis=1).reshape(-1)
        if view.shape != expected.shape:
            raise Wrong(f"n={n}: expected a 1-D view of {2 * n} elements, got shape "
                        f"{view.shape}")
        names = [f"a[{i}]" for i in range(n)], [f"b[{i}]" for i in range(n)]
        where = {int(x): nm for src, nms in zip((a, b), names)
                 for x, nm in zip(src.idx, nms)}
        for k, (e, got) in enumerate(zip(expected, view.idx.reshape(-1))):
            if int(e) != int(got):
                raise Wrong(f"n={n}: element {k} of your view is "
                            f"{where.get(int(got), '?')}, expected {where[int(e)]}")
        # writing through the view writes a and b (views never copy)
        c = g.add_constant(ipu.FLOAT, [2 * n], np.arange(2 * n), "c")
        g.set_tile_mapping(c, 0)
        g.create_host_read("a", a)
        g.create_host_read("b", b)
        eng = ipu.Engine(g, ipu.Copy(c, view))
        eng.load(dev)
        eng.run()
        first_mismatch(np.arange(0, 2 * n, 2), eng.read_tensor("a"), "a after the copy")
        first_mismatch(np.arange(1, 2 * n, 2), eng.read_tensor("b"), "b after the copy")


@exercise("02.3", "a round trip through host streams", points=3,
          hint="s_in = graph.add_host_to_device_fifo('in', ipu.FLOAT, n), the same for "
               "'out' with add_device_to_host_fifo; return ipu.Sequence(ipu.Copy(s_in, v), "
               "ipu.Copy(backwards, s_out)) where backwards = ipu.concat([v[i:i + 1] for "
               "i in reversed(range(n))]).")
def check_reverse_stream(build_reverse):
    """Exercise 02.3: ``build_reverse(graph, n)`` → program: 'in' → device → 'out' reversed."""

    rng = np.random.default_rng(3)
    for n, tiles in [(4, 2), (7, 3)]:
        dev = _device(tiles)
        g = ipu.Graph(dev.target)
        prog = build_reverse(g, n)
        if not isinstance(prog, ipu.Program):
            raise Wrong(f"build_reverse must return a program (e.g. ipu.Sequence), "
                        f"got {prog!r}")
        for name, to_dev in (("in", True), ("out", False)):
            s = g.streams.get(name)
            kind = "host-to-device" if to_dev else "device-to-host"
            if s is None or s.to_device != to_dev or s.n != n or s.dtype != ipu.FLOAT:
                raise Wrong(f"expected a {kind} FIFO named '{name}' of {n} floats; the "
                            f"graph has {list(g.streams.values())}")
        data = rng.normal(size=n).astype(np.float32)
        out = np.zeros(n, np.float32)
        eng = ipu.Engine(g, prog)
        eng.load(dev)
        eng.connect_stream("in", data)
        eng.connect_stream("out", out)
        eng.run()
        first_mismatch(data[::-1], out, f"'out' for n={n}")
        streamed = sum(s.host_bytes for s in eng.trace.executed_steps()
                       if s.kind == "stream")
        if streamed != 2 * 4 * n:
            raise Wrong(f"n={n}: your program moved {streamed} bytes over the host link; "
                        f"one copy in and one out move {8 * n}")
