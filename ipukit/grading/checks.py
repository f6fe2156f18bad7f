"""The ``check_*`` functions of lessons 01-04 (the emulator core).

Each check builds its own small graphs, runs the learner's answer on them and compares
with an independent reference: NumPy, or what the emulator's compiler measures for the
same graph (``Step.cycles`` and friends). Feedback names the tile, vertex or step that
is wrong. See :mod:`ipukit.grading.feedback` for how results are shown and scored.

>>> from ipukit import grading
>>> r = grading.check_ipu_memory(lambda target: target.tiles_per_ipu * target.bytes_per_tile)
✅ Exercise 01.1 · In-Processor Memory of one IPU: passed (1/1 points)
"""

from __future__ import annotations

import functools

import numpy as np

import ipukit as ipu

from .feedback import Wrong, as_int, exercise, first_mismatch, previous_failures, run

# -- helpers ----------------------------------------------------------------------------


def _device(tiles: int):
    return ipu.IPUModel("ipu2", tiles_per_ipu=tiles).create_device()


#: Answers to these checks are cycle or byte counts.
_as_int = functools.partial(as_int, kind="whole number of cycles or bytes")


class _Busy(ipu.Vertex):
    """A vertex that only costs cycles (set with ``graph.set_perf_estimate``)."""

    x = ipu.Input(ipu.Vector(ipu.FLOAT))

    def compute(self):
        pass


class _Sum(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.x.sum(axis=-1, keepdims=True)


def _random_steps(seed: int, tiles: int = 4):
    """Compiled steps with uneven compute and exchange: copies and a compute set."""
    rng = np.random.default_rng(seed)
    dev = _device(tiles)
    g = ipu.Graph(dev.target)
    n = 4 * tiles
    a = g.add_variable(ipu.FLOAT, [n], "a")
    b = g.add_variable(ipu.FLOAT, [n], "b")
    for i in range(n):
        g.set_tile_mapping(a[i], int(rng.integers(tiles)))
        g.set_tile_mapping(b[i], int(rng.integers(tiles)))
    cs = g.add_compute_set("work")
    # vertices with unique outputs (no races) on random tiles, uneven estimates
    for k in range(n):
        lo = int(rng.integers(n - 3))
        v = g.add_vertex(cs, _Sum, {"x": a[lo:lo + 3], "out": b[k:k + 1]},
                         tile=int(rng.integers(tiles)))
        g.set_perf_estimate(v, int(rng.integers(5, 200)))
    progs = [ipu.Sequence(ipu.Copy(a, b), ipu.Execute(cs),
                          ipu.Copy(b[: n // 2], a[n // 2:]))]
    exe = ipu.compile_graph(g, progs)
    return dev.target, [s for s in exe.steps if s.kind != "host"]


def _scatter_steps(tiles: int = 4):
    """12 halves on tile 0 copied 3 per tile: tile 0 sends 18 bytes, the others get 6."""
    dev = _device(tiles)
    g = ipu.Graph(dev.target)
    src = g.add_variable(ipu.HALF, [3 * tiles], "src")
    dst = g.add_variable(ipu.HALF, [3 * tiles], "dst")
    g.set_tile_mapping(src, 0)
    for t in range(tiles):
        g.set_tile_mapping(dst[3 * t:3 * t + 3], t)
    exe = ipu.compile_graph(g, [ipu.Copy(src, dst)])
    return dev.target, [s for s in exe.steps if s.kind != "host"]


# -- lesson 01: the IPU and BSP ----------------------------------------------------------

@exercise("01.1", "In-Processor Memory of one IPU", points=1,
          hint="Every tile has its own SRAM: multiply the tiles of ONE IPU "
               "(target.tiles_per_ipu) by the bytes of one tile (target.bytes_per_tile).")
def check_ipu_memory(ipu_memory_bytes):
    """Exercise 01.1: ``ipu_memory_bytes(target)`` → bytes of SRAM on one IPU."""

    def body():
        cases = [("ipu1", 1, None), ("ipu2", 1, None), ("bow", 1, None), ("ipu2", 2, 4)]
        for version, num_ipus, tiles in cases:
            t = ipu.IPUModel(version, num_ipus=num_ipus, tiles_per_ipu=tiles).create_device()
            t = t.target
            expected = t.tiles_per_ipu * t.bytes_per_tile
            what = (f"IPUModel('{version}', num_ipus={num_ipus}"
                    f"{'' if tiles is None else f', tiles_per_ipu={tiles}'})")
            got = _as_int(ipu_memory_bytes(t), what)
            if got != expected:
                raise Wrong(f"{what} ({t.tiles_per_ipu} tiles of {t.bytes_per_tile:,} B per "
                            f"IPU): expected {expected:,} bytes, got {got:,}")

    return run("01.1", body)


@exercise("01.2", "six workers on a tile", points=2,
          hint="Vertex i goes to worker i % 6 (in the order given). Each worker issues one "
               "instruction every 6 cycles, so the tile is busy 6 x (the heaviest worker's "
               "total).")
def check_tile_compute_cycles(tile_compute_cycles):
    """Exercise 01.2: ``tile_compute_cycles(vertex_cycles)`` for the vertices of one tile."""

    def body():
        rng = np.random.default_rng(12)
        cases = [[], [100], [10] * 6, [10] * 7, [5, 50, 5, 5, 5, 5, 40],
                 rng.integers(1, 300, 17).tolist()]
        for cycles in cases:
            expected = _measured_compute(cycles)
            got = _as_int(tile_compute_cycles(list(cycles)), f"vertex cycles {cycles}")
            if got != expected:
                raise Wrong(f"a tile with vertices of cycles {cycles}: the "
                            f"emulator's compute phase takes {expected} cycles, you said {got}")

    return run("01.2", body)


def _measured_compute(cycles) -> int:
    """Compile one tile with these vertex estimates; return its compute cycles."""
    dev = _device(1)
    g = ipu.Graph(dev.target)
    x = g.add_variable(ipu.FLOAT, [1], "x")
    g.set_tile_mapping(x, 0)
    cs = g.add_compute_set("cs")
    for c in cycles:
        g.set_perf_estimate(g.add_vertex(cs, _Busy, {"x": x}, tile=0), int(c))
    step = ipu.compile_graph(g, [ipu.Execute(cs)]).steps[1]
    return int(step.tile_compute_cycles[0])


@exercise("01.3", "the cost of one BSP superstep", points=2,
          hint="cycles = sync + exchange + compute. Exchange lasts as long as the busiest "
               "tile: ceil(max(bytes in, bytes out) / exchange_bytes_per_cycle), max over "
               "tiles. Compute lasts as long as the slowest tile.")
def check_superstep_cycles(superstep_cycles):
    """Exercise 01.3: ``superstep_cycles(sync, bytes_in, bytes_out, compute, bpc=4)``."""

    def body():
        for target, steps in [_random_steps(1), _random_steps(2), _scatter_steps()]:
            for s in steps:
                got = _as_int(superstep_cycles(
                    s.sync_cycles, s.tile_bytes_in.copy(), s.tile_bytes_out.copy(),
                    s.tile_compute_cycles.copy(), target.exchange_bytes_per_cycle),
                    f"step '{s.name}'")
                if got != s.cycles:
                    raise Wrong(f"step '{s.name}' (bytes in per tile {s.tile_bytes_in.tolist()},"
                                f" out {s.tile_bytes_out.tolist()}, compute "
                                f"{s.tile_compute_cycles.tolist()}): expected {s.cycles} "
                                f"cycles, got {got}")

    return run("01.3", body)


# -- lesson 02: graphs, tensors, tile mapping, streams ----------------------------------

@exercise("02.1", "map a tensor evenly over the tiles", points=2,
          hint="Flatten the tensor; give tile i the contiguous elements "
               "[i*c, min((i+1)*c, n)) with c = ceil(n / num_tiles).")
def check_map_evenly(map_evenly):
    """Exercise 02.1: ``map_evenly(graph, tensor)`` maps contiguous, balanced chunks."""

    def body():
        for tiles, shape in [(4, [8]), (4, [10]), (3, [2, 5]), (8, [5]), (1, [3, 3])]:
            g = ipu.Graph(_device(tiles).target)
            t = g.add_variable(ipu.FLOAT, shape, "t")
            map_evenly(g, t)
            _check_even(g, t, tiles)

    return run("02.1", body)


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

    def body():
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

    return run("02.2", body)


@exercise("02.3", "a round trip through host streams", points=3,
          hint="s_in = graph.add_host_to_device_fifo('in', ipu.FLOAT, n), the same for "
               "'out' with add_device_to_host_fifo; return ipu.Sequence(ipu.Copy(s_in, v), "
               "ipu.Copy(backwards, s_out)) where backwards = ipu.concat([v[i:i + 1] for "
               "i in reversed(range(n))]).")
def check_reverse_stream(build_reverse):
    """Exercise 02.3: ``build_reverse(graph, n)`` → program: 'in' → device → 'out' reversed."""

    def body():
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

    return run("02.3", body)


# -- lesson 03: vertices and codelets ----------------------------------------------------

def _run_vertex(cls, fields, n_vertices, per_vertex, tiles=4, runs=1, state=None,
                before_run=None):
    """Put ``n_vertices`` of ``cls`` on tiles; fields: name -> (shape per vertex, data)."""
    dev = _device(tiles)
    g = ipu.Graph(dev.target)
    cs = g.add_compute_set(cls.__name__)
    tensors = {}
    for name, (per, _) in fields.items():
        t = g.add_variable(ipu.FLOAT, [n_vertices] + per, name)
        for v in range(n_vertices):
            g.set_tile_mapping(t[v], v % tiles)
        g.create_host_write(name, t)
        g.create_host_read(name, t)
        tensors[name] = t
    for v in range(n_vertices):
        ref = g.add_vertex(cs, cls, {k: t[v] for k, t in tensors.items()}, tile=v % tiles)
        for k, vals in (state or {}).items():
            g.set_initial_value(ref[k], vals[v])
    eng = ipu.Engine(g, ipu.Execute(cs), per_vertex=per_vertex)
    eng.load(dev)
    for name, (_, data) in fields.items():
        if data is not None:
            eng.write_tensor(name, data)
    outs = []
    for r in range(runs):
        if before_run:
            before_run(eng, r)
        try:
            eng.run()
        except ipu.CodeletError as exc:  # the emulator's vertex-axis check: say it plainly
            if exc.__cause__ is not None:  # compute itself raised (e.g. not written yet)
                raise
            raise Wrong(str(exc)) from None
        outs.append({k: eng.read_tensor(k) for k in fields})
    return outs


def _check_codelet_class(cls, fields: dict):
    """``fields``: name -> (kind, vector) of a FLOAT field, e.g. ("input", True)."""
    if not (isinstance(cls, type) and issubclass(cls, ipu.Vertex)):
        raise Wrong(f"expected a subclass of ipu.Vertex, got {cls!r}")
    for name, (kind, vector) in fields.items():
        got = cls.fields.get(name)
        if got is None or (got.kind, got.vector, got.dtype) != (kind, vector, ipu.FLOAT):
            want = f"ipu.{'InOut' if kind == 'inout' else kind.capitalize()}(" + (
                "ipu.Vector(ipu.FLOAT))" if vector else "ipu.FLOAT)")
            raise Wrong(f"{cls.__name__}.{name} should be {want}, got {got!r}")


def _per_vertex_message(name, expected, got, tiles=4):
    bad = ~np.isclose(got, expected, rtol=1e-5, atol=1e-5)
    if bad.ndim > 1:
        bad = bad.any(axis=tuple(range(1, bad.ndim)))
    v = int(np.flatnonzero(bad)[0])
    return (f"vertex {v} (tile {v % tiles}) wrote {name} = "
            f"{np.array2string(np.asarray(got[v]), precision=4)}, expected "
            f"{np.array2string(np.asarray(expected[v]), precision=4)}")


@exercise("03.1", "a vector-add codelet", points=1,
          hint="compute sees all vertices at once: x and y have shape (n, k). Write "
               "self.out[...] = self.x + self.y (no loops needed).")
def check_add_vertex(AddVertex):  # noqa: N803 - a class
    """Exercise 03.1: ``AddVertex`` with Vector inputs x, y and output out = x + y."""

    def body():
        _check_codelet_class(AddVertex, {"x": ("input", True), "y": ("input", True),
                                         "out": ("output", True)})
        rng = np.random.default_rng(31)
        x, y = rng.normal(size=(2, 6, 5)).astype(np.float32)
        for per_vertex in (False, True):
            out = _run_vertex(AddVertex, {"x": ([5], x), "y": ([5], y), "out": ([5], None)},
                              6, per_vertex)[0]["out"]
            if not np.allclose(out, x + y, rtol=1e-5, atol=1e-6):
                mode = "one vertex at a time (per_vertex=True)" if per_vertex else \
                    "all 6 vertices in one array operation"
                raise Wrong(f"running {mode}: " + _per_vertex_message("out", x + y, out))

    return run("03.1", body)


@exercise("03.2", "a row-sum codelet", points=2,
          hint="x has shape (n, k) with one row per vertex: reduce with "
               "self.out[...] = self.x.sum(axis=-1). Without axis=-1 every vertex gets the "
               "sum over all vertices.")
def check_row_sum(RowSum):  # noqa: N803
    """Exercise 03.2: ``RowSum``: Vector input x, scalar output out = sum of x."""

    def body():
        _check_codelet_class(RowSum, {"x": ("input", True), "out": ("output", False)})
        # readable rows first (for the "sum over ALL vertices" message), then random rows
        # that are not arithmetic sequences (x[0] * k + ... shortcuts fail there)
        random = np.random.default_rng(32).integers(-9, 10, (5, 7)).astype(np.float32)
        for x in (np.arange(3 * 5, dtype=np.float32).reshape(3, 5), random):
            for per_vertex in (True, False):
                out = _run_vertex(RowSum, {"x": ([x.shape[1]], x), "out": ([], None)},
                                  x.shape[0], per_vertex)[0]["out"]
                if not np.allclose(out, x.sum(axis=1)):
                    msg = _per_vertex_message("out", x.sum(axis=1), out)
                    if not per_vertex and np.allclose(out, x.sum()):
                        msg += (f"; {x.sum():g} is the sum over ALL vertices: compute sees "
                                f"x with shape {x.shape}, so reduce with axis=-1")
                    raise Wrong(msg)

    return run("03.2", body)


@exercise("03.3", "a moving average with vertex state", points=2,
          hint="self.avg[...] = self.decay * self.avg + (1 - self.decay) * self.x; avg is "
               "InOut (read and written in place), decay is State (one value per vertex).")
def check_moving_average(MovingAverage):  # noqa: N803
    """Exercise 03.3: ``MovingAverage``: avg ← decay·avg + (1 − decay)·x, decay is State."""

    def body():
        _check_codelet_class(MovingAverage, {"x": ("input", False), "avg": ("inout", False),
                                             "decay": ("state", False)})
        decays = np.array([0.0, 0.5, 0.9, 0.99], np.float32)
        xs = np.array([[1, 2, 3, 4], [4, 3, 2, 1], [10, 10, 10, 10]], np.float32)
        outs = _run_vertex(MovingAverage, {"x": ([], xs[0]), "avg": ([], None)}, 4, False,
                           runs=3, state={"decay": decays},
                           before_run=lambda eng, r: eng.write_tensor("x", xs[r]))
        avg = np.zeros(4, np.float32)
        for r in range(3):
            avg = decays * avg + (1 - decays) * xs[r]
            got = outs[r]["avg"]
            if not np.allclose(got, avg, rtol=1e-5, atol=1e-6):
                v = int(np.flatnonzero(~np.isclose(got, avg, rtol=1e-5, atol=1e-6))[0])
                raise Wrong(f"after run {r + 1}, vertex {v} (tile {v}, decay {decays[v]:g}, "
                            f"x = {xs[r, v]:g}): expected avg = {avg[v]:.6g}, got {got[v]:.6g}")

    return run("03.3", body)


# -- lesson 04: compute sets, races, exchange ---------------------------------------------

@exercise("04.1", "predict the cost of a reduction", points=2,
          hint="A superstep costs sync + exchange + compute. gather: tile 0 receives "
               "(tiles - 1) * n floats of 4 bytes, at 4 bytes per cycle, and one vertex "
               "reads tiles * n elements and writes 1 (6 x (10 + tiles * n + 1) cycles). "
               "local: two supersteps, local sums of n elements with no exchange, then a "
               "combine that receives tiles - 1 partials.")
def check_reduction_cycles(reduction_cycles):
    """Exercise 04.1: ``reduction_cycles(tiles, n, strategy)`` for "gather" or "local"."""

    def body():
        for tiles, n in [(4, 256), (2, 10), (8, 100), (3, 1)]:
            for strategy in ("gather", "local"):
                steps = _reduction_steps(tiles, n, strategy)
                expected = sum(s.cycles for s in steps)
                what = f"strategy '{strategy}', {tiles} tiles x {n} floats"
                got = _as_int(reduction_cycles(tiles, n, strategy), what)
                if got != expected:
                    parts = " + ".join(f"'{s.name}' ({s.sync_cycles} sync, {s.exchange_cycles} "
                                       f"exchange, {s.compute_cycles} compute)" for s in steps)
                    raise Wrong(f"{what}: expected {expected} cycles, got {got}" + (
                        f"\nthe supersteps: {parts}" if previous_failures("04.1") else ""))

    return run("04.1", body)


def _reduction_steps(tiles: int, n: int, strategy: str):
    """Compile lesson 04's sum of tiles x n floats (n per tile); return its supersteps."""
    g = ipu.Graph(_device(tiles).target)
    x = g.add_variable(ipu.FLOAT, [tiles, n], "x")
    partial = g.add_variable(ipu.FLOAT, [tiles], "partial")
    total = g.add_variable(ipu.FLOAT, [1], "total")
    g.set_tile_mapping(total, 0)
    for t in range(tiles):
        g.set_tile_mapping(x[t], t)
        g.set_tile_mapping(partial[t], t)
    if strategy == "gather":
        cs = g.add_compute_set("sum all on tile 0")
        g.add_vertex(cs, _Sum, {"x": x.flatten(), "out": total}, tile=0)
        prog = ipu.Execute(cs)
    else:
        local, combine = g.add_compute_set("local sums"), g.add_compute_set("combine")
        for t in range(tiles):
            g.add_vertex(local, _Sum, {"x": x[t], "out": partial[t:t + 1]}, tile=t)
        g.add_vertex(combine, _Sum, {"x": partial, "out": total}, tile=0)
        prog = ipu.Sequence(ipu.Execute(local), ipu.Execute(combine))
    return [s for s in ipu.compile_graph(g, [prog]).steps if s.kind != "host"]


@exercise("04.2", "smoothing without a race", points=3,
          hint="Vertices of one compute set run in parallel, so a vertex must not write an "
               "element its neighbours read. Write the new values into a second tensor "
               "(mapped like v) in one compute set, then ipu.Copy them back into v[1:-1]; "
               "wrap both in ipu.Repeat(iterations, ...).")
def check_smoothing(build_smoothing):
    """Exercise 04.2: ``build_smoothing(graph, v, iterations)`` → program (Jacobi smoothing)."""

    def body():
        for n, iterations in [(6, 1), (8, 3)]:
            dev = _device(n)
            g = ipu.Graph(dev.target)
            v = g.add_variable(ipu.FLOAT, [n], "v")
            for i in range(n):
                g.set_tile_mapping(v[i], i)
            g.create_host_write("v", v)
            g.create_host_read("v", v)
            prog = build_smoothing(g, v, iterations)
            try:
                eng = ipu.Engine(g, prog)
            except ipu.ComputeSetRaceError as exc:
                raise Wrong("your graph has a data race, so ipukit refuses it, as Poplar "
                            f"verifies a compute set is free of races: {exc}") from None
            except ipu.IpuError as exc:
                raise Wrong(_no_compile("your graph", exc)) from None
            data = np.array([0, 9, 0, 3, 6, 0, 12, 3][:n], np.float32)
            eng.load(dev)
            eng.write_tensor("v", data)
            eng.run()
            expected = data.copy()
            for _ in range(iterations):
                expected[1:-1] = (expected[:-2] + expected[1:-1] + expected[2:]) / 3
            first_mismatch(expected, eng.read_tensor("v"),
                            f"v after {iterations} iteration(s) (n={n})")

    return run("04.2", body)


@exercise("04.3", "a mapping with no exchange", points=2,
          hint="Vertex i runs on tile i and uses x[i], y[i] and out[i]: map those rows to "
               "tile i (graph.set_tile_mapping(x[i], i), ...). Then nothing crosses tiles.")
def check_no_exchange(map_for_locality):
    """Exercise 04.3: ``map_for_locality(graph, x, y, out)`` so the add needs no exchange."""

    def body():
        tiles, k = 4, 8
        dev = _device(tiles)
        g = ipu.Graph(dev.target)
        x, y, out = (g.add_variable(ipu.FLOAT, [tiles, k], nm) for nm in ("x", "y", "out"))
        map_for_locality(g, x, y, out)
        cs = g.add_compute_set("add")
        for i in range(tiles):
            g.add_vertex(cs, _Add, {"x": x[i], "y": y[i], "out": out[i]}, tile=i)
        for t in (x, y, out):
            g.create_host_write(t.name, t)
        g.create_host_read("out", out)
        try:
            eng = ipu.Engine(g, ipu.Execute(cs))
        except ipu.IpuError as exc:  # e.g. a row left unmapped
            raise Wrong(_no_compile("the add with your mapping", exc)) from None
        step = next(s for s in eng.executable.steps if s.name == "add")
        if step.exchange_cycles:
            src, dst, nbytes = (int(v) for v in step.transfers[0])
            raise Wrong(f"step 'add' still exchanges: {step.exchange_cycles} exchange cycles, "
                        f"e.g. tile {src} sends {nbytes} bytes to tile {dst}. Vertex i runs "
                        f"on tile i.")
        rng = np.random.default_rng(43)
        xv, yv = rng.normal(size=(2, tiles, k)).astype(np.float32)
        eng.load(dev)
        eng.write_tensor("x", xv)
        eng.write_tensor("y", yv)
        eng.run()
        first_mismatch(xv + yv, eng.read_tensor("out"), "out")

    return run("04.3", body)


def _no_compile(what: str, exc: Exception) -> str:
    return f"{what} does not compile: {type(exc).__name__}: {exc}"


class _Add(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    y = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.x + self.y
