"""The checks of lesson 02: graphs, tensors, tile mapping and streams.

All four exercises are programs: a tile mapping (02.1), views (02.2), streams and copies
(02.3) and a 2-D block mapping drawn on the tile grid (02.4).
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu

from .common import device as _device
from .feedback import Wrong, exercise, first_mismatch, plural, side_by_side, tile_grid

# -- lesson 02: graphs, tensors, tile mapping, streams ----------------------------------

@exercise("02.1", "map a tensor evenly over the tiles", points=2, hints=(
    "Work on the flattened tensor: which elements should tile 0 get, and how many?",
    "With n elements on T tiles, no tile may hold more than c = ceil(n / T); giving each "
    "tile, in order, the next c contiguous elements is balanced (the last tiles may get "
    "fewer, or none).",
    "flat = tensor.flatten(); for tile i, map flat[i*c : min((i+1)*c, n)] if it is not "
    "empty."))
def check_map_evenly(map_evenly):
    """Exercise 02.1: ``map_evenly(graph, tensor)`` maps contiguous, balanced chunks."""

    rng = np.random.default_rng(201)
    cases = [(4, [8]), (4, [10]), (3, [2, 5]), (8, [5]), (1, [3, 3])]
    cases += [(int(rng.integers(2, 9)), [int(d) for d in rng.integers(1, 7, 2)])
              for _ in range(3)]
    for tiles, shape in cases:
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


@exercise("02.2", "interleave two tensors with views", points=2, hints=(
    "Picture the result as a table with one row per i: what are its columns?",
    "An [n, 2] view whose rows are (a[i], b[i]), read row by row, is the interleaving. "
    "Views (reshape, concat, flatten) never copy data.",
    "Reshape a and b to [n, 1], ipu.concat them along dim 1, then flatten."))
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


@exercise("02.3", "a round trip through host streams", points=3, hints=(
    "Three pieces: two FIFOs with the exact names and sizes, a variable on the device, "
    "and a program of two copies.",
    "Graph.add_host_to_device_fifo and add_device_to_host_fifo make the streams; "
    "ipu.Copy(stream, tensor) and ipu.Copy(tensor, stream) move the data. The copy out "
    "can read a reversed view of the variable.",
    "A reversed view: ipu.concat of the one-element slices v[i:i + 1] for i from n - 1 "
    "down to 0; return ipu.Sequence of the copy in and the copy of that view out."))
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


# -- 02.4: a block mapping, drawn ------------------------------------------------------------

def block_owner(rows: int, cols: int, br: int, bc: int, tiles: int) -> np.ndarray:
    """Reference: the tile of each element when [rows, cols] is cut into br x bc blocks
    (the last ones smaller), numbered row by row, block k on tile k % tiles."""
    per_row = -(-cols // bc)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return ((r // br) * per_row + c // bc) % tiles


@exercise("02.4", "a 2-D block mapping", points=2, hints=(
    "Cut the matrix into blocks first; then number the blocks and deal them to tiles.",
    "Blocks are numbered row by row (all blocks of the first block-row, left to right, "
    "then the next block-row); block k goes to tile k % num_tiles. The last block of a row "
    "or column may be smaller.",
    "for each block (i, j): graph.set_tile_mapping(m[i*br:(i+1)*br, j*bc:(j+1)*bc], "
    "(i * blocks_per_row + j) % tiles) with blocks_per_row = ceil(cols / bc)."))
def check_block_mapping(map_blocks):
    """Exercise 02.4: ``map_blocks(graph, m, block_rows, block_cols)`` maps the 2-D tensor
    ``m`` in blocks dealt round-robin to the tiles (see :func:`block_owner`)."""
    rng = np.random.default_rng(204)
    cases = [(4, 6, 2, 3, 4), (5, 7, 2, 3, 3), (6, 4, 3, 1, 5)]
    cases += [(int(rng.integers(3, 9)), int(rng.integers(3, 9)), int(rng.integers(1, 4)),
               int(rng.integers(1, 4)), int(rng.integers(2, 7))) for _ in range(2)]
    for rows, cols, br, bc, tiles in cases:
        g = ipu.Graph(_device(tiles).target)
        m = g.add_variable(ipu.FLOAT, [rows, cols], "m")
        map_blocks(g, m, br, bc)
        owner = np.full(rows * cols, -1)
        for t, runs in enumerate(g.get_tile_mapping(m, throw_on_incomplete=False)):
            for b, e in runs:
                owner[b:e] = t
        owner = owner.reshape(rows, cols)
        want = block_owner(rows, cols, br, bc, tiles)
        if not np.array_equal(owner, want):
            r, c = (int(k) for k in np.argwhere(owner != want)[0])
            got = "no tile" if owner[r, c] < 0 else f"tile {owner[r, c]}"
            raise Wrong(f"a {rows}x{cols} matrix in {br}x{bc} blocks on "
                        f"{plural(tiles, 'tile')}: m[{r}, {c}] is on {got}, expected tile "
                        f"{want[r, c]} (block ({r // br}, {c // bc})). The picture shows "
                        "each element's tile ('.' = not mapped).",
                        picture=side_by_side(tile_grid(owner), tile_grid(want)))
