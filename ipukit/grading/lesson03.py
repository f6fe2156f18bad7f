"""The checks of lesson 03: vertices and codelets."""

from __future__ import annotations

import numpy as np

import ipukit as ipu

from .common import device as _device
from .feedback import Wrong, exercise

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
        eng.run()
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


@exercise("03.2", "a row-sum codelet", points=2,
          hint="x has shape (n, k) with one row per vertex: reduce with "
               "self.out[...] = self.x.sum(axis=-1). Without axis=-1 every vertex gets the "
               "sum over all vertices.")
def check_row_sum(RowSum):  # noqa: N803
    """Exercise 03.2: ``RowSum``: Vector input x, scalar output out = sum of x."""

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


@exercise("03.3", "a moving average with vertex state", points=2,
          hint="self.avg[...] = self.decay * self.avg + (1 - self.decay) * self.x; avg is "
               "InOut (read and written in place), decay is State (one value per vertex).")
def check_moving_average(MovingAverage):  # noqa: N803
    """Exercise 03.3: ``MovingAverage``: avg ← decay·avg + (1 − decay)·x, decay is State."""

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
