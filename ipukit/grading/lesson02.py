"""The checks of lesson 02: graphs, tensors, tile mapping and streams.

All four exercises are programs: a tile mapping (02.1), views (02.2), streams and copies
(02.3) and a 2-D block mapping drawn on the tile grid (02.4). Every check is judged: the
trial runs the learner's function on the judge's case and hands back plain data (the
tile of each element, the elements a view reads); the verdict works out what was asked
from the case alone. 02.3 sends the graph and program as plain data
(:mod:`ipukit.graph_data`): the judge rebuilds them and drives the host streams with its
own data.

>>> from ipukit.grading import lesson02
>>> r = lesson02.check_map_evenly(lambda graph, t: graph.set_tile_mapping(t, 0), show=False)
>>> print(r.text().splitlines()[1])
   tensor of shape [8] (8 elements) on 4 tiles: tile 0 holds 8 elements; no tile needs \
more than ceil(8/4) = 2
"""

from __future__ import annotations

import numpy as np

import ipukit as ipu
from ipukit.tensor import TYPE_NAMES

from .common import device as _device
from .common import element_tiles, elements_of, judged_run, program, rebuilt_engine, sent_graph
from .feedback import (
    Wrong,
    clipped,
    exercise,
    first_mismatch,
    plural,
    side_by_side,
    tile_grid,
)

# -- 02.1: an even mapping ------------------------------------------------------------------


def _even_cases(rng) -> list[dict]:
    """Fewer, as many and more elements than tiles, 1-D and 2-D, one tile; then random."""
    fixed = [(4, [8]), (4, [10]), (3, [2, 5]), (8, [5]), (1, [3, 3]), (5, [7, 3])]
    drawn = [(int(rng.integers(2, 9)), [int(d) for d in rng.integers(1, 7, 2)])
             for _ in range(3)]
    return [{"tiles": t, "shape": s} for t, s in fixed + drawn]


def _even_trial(case, map_evenly):
    g = ipu.Graph(_device(case["tiles"]).target)
    t = g.add_variable(ipu.FLOAT, case["shape"], "t")
    map_evenly(g, t)
    return element_tiles(g, t)


@exercise("02.1", "map a tensor evenly over the tiles", points=2, hints=(
    "Work on the flattened tensor: which elements should tile 0 get, and how many?",
    "With n elements on T tiles, no tile may hold more than c = ceil(n / T); giving each "
    "tile, in order, the next c contiguous elements is balanced (the last tiles may get "
    "fewer, or none).",
    "flat = tensor.flatten(); c = ceil(n / T); map flat[begin:begin + c] to tile "
    "begin // c for begin = 0, c, 2c, ... below n."),
    answers=("map_evenly",), cases=_even_cases, trial=_even_trial)
def check_map_evenly(cases, outputs):
    """Exercise 02.1: ``map_evenly(graph, tensor)`` maps contiguous, balanced chunks."""
    for case, owner in zip(cases, outputs):
        _check_even(np.asarray(owner).reshape(-1), case["shape"], case["tiles"])


def _check_even(owner, shape, tiles):
    n = int(np.prod(shape))
    what = f"tensor of shape {list(shape)} ({n} elements) on {tiles} tiles"
    if owner.size != n:
        raise Wrong(f"{what}: the trial gave the tiles of {owner.size} elements")
    if (owner < 0).any():
        raise Wrong(f"{what}: {int((owner < 0).sum())} elements are not mapped to any tile")
    cap = -(-n // tiles)
    pos = 0
    for tile in range(tiles):
        mine = np.flatnonzero(owner == tile)
        cuts = np.flatnonzero(np.diff(mine) != 1) + 1
        runs = [(int(r[0]), int(r[-1]) + 1) for r in np.split(mine, cuts) if r.size]
        if len(runs) > 1:
            raise Wrong(f"{what}: tile {tile} holds {len(runs)} separate pieces {runs}; "
                        "give each tile one contiguous run")
        if mine.size > cap:
            raise Wrong(f"{what}: tile {tile} holds {mine.size} elements; no tile needs "
                        f"more than ceil({n}/{tiles}) = {cap}")
        if runs:
            if runs[0][0] != pos:
                raise Wrong(f"{what}: tile {tile} holds elements {list(runs[0])}, "
                            f"expected the run to start at element {pos} (tiles in order)")
            pos = runs[0][1]


# -- 02.2: views --------------------------------------------------------------------------

def _interleave_cases(rng) -> list[dict]:
    return [{"n": n, "values": rng.permutation(2 * n).astype(np.float32)}
            for n in (1, 2, 3, 5, int(rng.integers(6, 12)))]


def _interleave_trial(case, interleave):
    """Where each element of the learner's view comes from (a[i]: i, b[i]: n + i, other:
    -1), and a and b after copying the case's values into the view."""
    n = case["n"]
    dev = _device(2)
    g = ipu.Graph(dev.target)
    a = g.add_variable(ipu.FLOAT, [n], "a")
    b = g.add_variable(ipu.FLOAT, [n], "b")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 1)
    view = interleave(a, b)
    if not isinstance(view, ipu.Tensor) or view.graph is not g:
        raise Wrong(f"expected a Tensor view of a and b, got {view!r}")
    from_a, from_b = elements_of(view, a), elements_of(view, b)
    source = np.where(from_a >= 0, from_a, np.where(from_b >= 0, n + from_b, -1))
    found = {"shape": list(view.shape), "source": source}
    if view.num_elements() == 2 * n and (source >= 0).all():  # writes through to a and b
        c = g.add_constant(ipu.FLOAT, view.shape, case["values"].reshape(view.shape), "c")
        g.set_tile_mapping(c, 0)
        g.create_host_read("a", a)
        g.create_host_read("b", b)
        eng = ipu.Engine(g, ipu.Copy(c, view))
        eng.load(dev)
        eng.run()
        found.update(a=eng.read_tensor("a"), b=eng.read_tensor("b"))
    return found


@exercise("02.2", "interleave two tensors with views", points=2, hints=(
    "Picture the result as a table with one row per i: what are its columns?",
    "An [n, 2] view whose rows are (a[i], b[i]), read row by row, is the interleaving. "
    "Views (reshape, concat, flatten) never copy data.",
    "Reshape a and b to [n, 1], ipu.concat them along dim 1, then flatten."),
    answers=("interleave",), cases=_interleave_cases, trial=_interleave_trial)
def check_interleave(cases, outputs):
    """Exercise 02.2: ``interleave(a, b)`` → the view [a0, b0, a1, b1, ...] (no copy)."""
    for case, got in zip(cases, outputs):
        n = case["n"]
        if got["shape"] != [2 * n]:
            raise Wrong(f"n={n}: expected a 1-D view of {2 * n} elements, got shape "
                        f"{tuple(got['shape'])}")
        names = [f"a[{i}]" for i in range(n)] + [f"b[{i}]" for i in range(n)]
        want = np.stack([np.arange(n), n + np.arange(n)], axis=1).reshape(-1)
        for k, (e, s) in enumerate(zip(want, got["source"])):
            if int(e) != int(s):
                source = names[int(s)] if 0 <= s < 2 * n else "not an element of a or b"
                raise Wrong(f"n={n}: element {k} of your view is {source}, expected "
                            f"{names[int(e)]}")
        values = case["values"]
        first_mismatch(values[0::2], got["a"], f"n={n}: a after copying into your view")
        first_mismatch(values[1::2], got["b"], f"n={n}: b after copying into your view")


# -- 02.3: streams ------------------------------------------------------------------------

def _reverse_cases(rng) -> list[dict]:
    """One element on one tile, even and odd sizes, a drawn one; the data the judge streams
    in is private to it."""
    return [{"n": n, "tiles": tiles, "_data": rng.normal(size=n).astype(np.float32)}
            for n, tiles in [(1, 1), (4, 2), (7, 3), (int(rng.integers(8, 20)), 4)]]


def _reverse_trial(case, build_reverse):
    """The learner's graph (its FIFOs) and program as plain data (the learner's kernel)."""
    g = ipu.Graph(_device(case["tiles"]).target)
    return sent_graph(g, program(build_reverse(g, case["n"]), "build_reverse"),
                      f"n={case['n']}")


def _reverse_streams(n: int):
    """Wrong unless the rebuilt graph has the exercise's two FIFOs (the judge's side)."""
    def check(g):
        streams = {s.name[:80]: {"to_device": bool(s.to_device), "n": int(s.n),
                                 "type": TYPE_NAMES.get(s.dtype, str(s.dtype))}
                   for s in g.streams.values()}
        for name, to_dev in (("in", True), ("out", False)):
            kind = "host-to-device" if to_dev else "device-to-host"
            if streams.get(name) != {"to_device": to_dev, "n": n, "type": "float"}:
                raise Wrong(f"n={n}: expected a {kind} FIFO named '{name}' of {n} floats; "
                            f"the graph has {clipped(str(streams or 'no FIFOs'), 300)}")

    return check


def _reverse_run(case, sent):
    """The judge streams its own data through the graph the kernel sent: what 'out'
    received and how many stream copies ran."""
    n, what = case["n"], f"n={case['n']}"
    base = ipu.Graph(_device(case["tiles"]).target)
    eng = rebuilt_engine(sent, base, what, check=_reverse_streams(n))
    out = np.zeros(n, np.float32)
    with judged_run(what):
        eng.connect_stream("in", case["_data"].copy())
        eng.connect_stream("out", out)
        eng.run()
    return out, sum(s.kind == "stream" for s in eng.trace.executed_steps())


@exercise("02.3", "a round trip through host streams", points=3, hints=(
    "Three pieces: two FIFOs with the exact names and sizes, a variable on the device, "
    "and a program of two copies.",
    "Graph.add_host_to_device_fifo and add_device_to_host_fifo make the streams; "
    "ipu.Copy(stream, tensor) and ipu.Copy(tensor, stream) move the data. The copy out "
    "can read a reversed view of the variable.",
    "A reversed view: ipu.concat of the one-element slices v[i:i + 1] for i from n - 1 "
    "down to 0; return ipu.Sequence of the copy in and the copy of that view out."),
    answers=("build_reverse",), cases=_reverse_cases, trial=_reverse_trial)
def check_reverse_stream(cases, outputs):
    """Exercise 02.3: ``build_reverse(graph, n)`` → program: 'in' → device → 'out' reversed.
    The kernel sends the graph and program (:mod:`ipukit.graph_data`); the judge rebuilds
    them, drives the host streams with its own data and reads what 'out' received."""
    for case, sent in zip(cases, outputs):
        n = case["n"]
        out, copies = _reverse_run(case, sent)
        first_mismatch(case["_data"][::-1], out, f"'out' for n={n}")
        if copies != 2:  # each copy moves the whole FIFO: n floats
            raise Wrong(f"n={n}: your program moved {4 * n * copies} bytes over the "
                        f"host link ({plural(copies, 'stream copy')}); one copy in "
                        f"and one out move {8 * n}")


# -- 02.4: a block mapping, drawn ------------------------------------------------------------

def block_owner(rows: int, cols: int, br: int, bc: int, tiles: int) -> np.ndarray:
    """Reference: the tile of each element when [rows, cols] is cut into br x bc blocks
    (the last ones smaller), numbered row by row, block k on tile k % tiles."""
    per_row = -(-cols // bc)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return ((r // br) * per_row + c // bc) % tiles


def _block_cases(rng) -> list[dict]:
    """Even and uneven blocks, fewer blocks than tiles, one-wide blocks; then random."""
    fixed = [(4, 6, 2, 3, 4), (5, 7, 2, 3, 3), (6, 4, 3, 1, 5), (3, 8, 2, 3, 7),
             (7, 5, 3, 2, 4)]
    drawn = [(int(rng.integers(3, 9)), int(rng.integers(3, 9)), int(rng.integers(1, 4)),
              int(rng.integers(1, 4)), int(rng.integers(2, 7))) for _ in range(2)]
    keys = ("rows", "cols", "br", "bc", "tiles")
    return [dict(zip(keys, c)) for c in fixed + drawn]


def _block_trial(case, map_blocks):
    g = ipu.Graph(_device(case["tiles"]).target)
    m = g.add_variable(ipu.FLOAT, [case["rows"], case["cols"]], "m")
    map_blocks(g, m, case["br"], case["bc"])
    return element_tiles(g, m)


@exercise("02.4", "a 2-D block mapping", points=2, hints=(
    "Cut the matrix into blocks first; then number the blocks and deal them to tiles.",
    "Blocks are numbered row by row (all blocks of the first block-row, left to right, "
    "then the next block-row); block k goes to tile k % num_tiles. The last block of a row "
    "or column may be smaller.",
    "for each block (i, j): graph.set_tile_mapping(m[i*br:(i+1)*br, j*bc:(j+1)*bc], "
    "(i * blocks_per_row + j) % tiles) with blocks_per_row = ceil(cols / bc)."),
    answers=("map_blocks",), cases=_block_cases, trial=_block_trial)
def check_block_mapping(cases, outputs):
    """Exercise 02.4: ``map_blocks(graph, m, block_rows, block_cols)`` maps the 2-D tensor
    ``m`` in blocks dealt round-robin to the tiles (see :func:`block_owner`)."""
    for case, owner in zip(cases, outputs):
        rows, cols, br, bc, tiles = (case[k] for k in ("rows", "cols", "br", "bc", "tiles"))
        want = block_owner(rows, cols, br, bc, tiles)
        owner = np.asarray(owner).reshape(-1)
        if owner.size != want.size:
            raise Wrong(f"a {rows}x{cols} matrix: the trial gave {owner.size} tiles for "
                        f"{want.size} elements")
        owner = owner.reshape(rows, cols)
        if not np.array_equal(owner, want):
            r, c = (int(k) for k in np.argwhere(owner != want)[0])
            got = "no tile" if owner[r, c] < 0 else f"tile {owner[r, c]}"
            raise Wrong(f"a {rows}x{cols} matrix in {br}x{bc} blocks on "
                        f"{plural(tiles, 'tile')}: m[{r}, {c}] is on {got}, expected tile "
                        f"{want[r, c]} (block ({r // br}, {c // bc})). The picture shows "
                        "each element's tile ('.' = not mapped).",
                        picture=side_by_side(tile_grid(owner), tile_grid(want)))
