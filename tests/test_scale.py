"""Full-chip scale: metadata grows with regions, not elements, and the hot loop does not
synchronise with the host (issue 17). These tests span graph, compile and engine."""

import tracemalloc
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ipukit as ipu
from ipukit import backend
from ipukit.poplibs import poputil

from .helpers import SumVertex, small


def ipu2_graph():
    dev = ipu.IPUModel("ipu2").create_device()
    return dev, ipu.Graph(dev.target)


def peak_bytes(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_tensor_larger_than_the_chip_fails_by_arithmetic_before_allocating():
    _, g = ipu2_graph()
    with pytest.raises(ipu.OutOfMemoryError) as err:
        peak_bytes(lambda: g.add_variable(ipu.FLOAT, [10**9], "huge"))
    msg = str(err.value)
    assert "'huge'" in msg and "4,000,000,000 bytes" in msg and "1,472 tiles" in msg
    assert "Fix:" in msg and "nothing was allocated" in msg
    _, peak = peak_bytes(lambda: pytest.raises(ipu.OutOfMemoryError, g.add_variable,
                                               ipu.FLOAT, [10**9], "huge"))
    assert peak < 1 << 20


def test_a_200_million_element_tensor_builds_and_compiles_with_little_metadata():
    _, g = ipu2_graph()

    def build():
        x = g.add_variable(ipu.FLOAT, [2 * 10**8], "x")
        poputil.map_tensor_linearly(g, x)
        mapping = g.get_tile_mapping(x)
        exe = ipu.compile_graph(g, [ipu.Sequence()])
        return x, mapping, exe

    (x, mapping, exe), peak = peak_bytes(build)
    assert peak < 20 << 20  # 800 MB of data, a few MB of metadata
    per_tile = 10**8 // 1472 * 2  # poputil: whole grains of 2 floats, tile t from t*G//T
    assert mapping[0] == [(0, per_tile)] and sum(len(m) for m in mapping) == 1472
    assert exe.memory.categories["variables"].sum() == 8 * 10**8
    assert x[5].idx == 5 and x.slice(10, 12).shape == (2,)


class AddOne(ipu.Vertex):
    x = ipu.InOut(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.x[...] += 1


def test_a_whole_mk2_filled_to_80_percent_builds_compiles_and_runs():
    """1,472 tiles x 624 KiB; each tile's vertex updates 80 % of its memory in place.
    About 750 MB of tile memory: a few seconds."""
    dev, g = ipu2_graph()
    t = dev.target
    k = int(0.8 * t.bytes_per_tile) // 4
    x = g.add_variable(ipu.FLOAT, [t.num_tiles, k], "x")
    cs = g.add_compute_set("addOne")
    for tile in range(t.num_tiles):
        g.set_tile_mapping(x[tile], tile)
        g.add_vertex(cs, AddOne, {"x": x[tile]}, tile=tile)
    g.create_host_read("corners", ipu.concat([x[:, :2], x[:, k - 2:]], dim=1))
    eng = ipu.Engine(g, ipu.Repeat(2, ipu.Execute(cs)))
    total = eng.trace.memory.total
    assert total.min() >= 0.8 * t.bytes_per_tile and total.max() <= t.bytes_per_tile
    eng.load(dev)
    eng.run()
    assert np.array_equal(eng.read_tensor("corners"), np.full((t.num_tiles, 4), 2.0))
    assert eng.trace.steps[1].exchange_cycles == 0  # all data is local


# -- no host synchronisation in the hot loop ------------------------------------------------
class DeviceArray(np.ndarray):
    """An array on a fake device: ``get()`` counts copies to the host; implicit conversions
    (bool, int, float, item, tolist, __array__) fail while ``strict`` is set."""

    strict = False
    gets = 0

    def get(self):
        DeviceArray.gets += 1
        return np.asarray(self).view(np.ndarray).copy()



def _guarded(name):
    def method(self, *args, **kwargs):
        if DeviceArray.strict:
            raise AssertionError(f"implicit device-to-host conversion ({name}) in the hot loop")
        return getattr(np.ndarray, name)(self, *args, **kwargs)
    return method


for _name in ("__bool__", "__int__", "__float__", "__index__", "__array__", "item", "tolist"):
    setattr(DeviceArray, _name, _guarded(_name))


def _device(a):
    return np.asarray(a).view(DeviceArray)


fake_cupy = types.SimpleNamespace(
    zeros=lambda *a, **k: _device(np.zeros(*a, **k)),
    asarray=lambda a, dtype=None: _device(np.asarray(a, dtype)),
    broadcast_to=lambda a, shape: np.broadcast_to(a, shape, subok=True),
    array_equal=np.array_equal,
    lib=types.SimpleNamespace(stride_tricks=types.SimpleNamespace(
        as_strided=lambda x, shape, strides: np.lib.stride_tricks.as_strided(
            x, shape, strides, subok=True))),
)


def test_the_engine_never_copies_to_the_host_between_supersteps(monkeypatch):
    """Compute sets, copies and repeats run with no get() and no implicit conversion; only
    reading a result copies to the host (once)."""
    monkeypatch.setattr(backend, "xp", fake_cupy)
    dev, g = small(tiles=4)
    x = g.add_variable(ipu.FLOAT, [8, 4], "x")
    s = g.add_variable(ipu.FLOAT, [8], "s")
    y = g.add_variable(ipu.FLOAT, [8, 4], "y")
    cs = g.add_compute_set("sum")
    perm = [3, 0, 7, 1, 6, 2, 5, 4]  # a gather, not a region
    for i in range(8):
        for t in (x[i], s[i], y[i]):
            g.set_tile_mapping(t, i % 4)
        g.add_vertex(cs, SumVertex, {"x": x[perm[i]], "out": s[i]}, tile=i % 4)
    g.set_initial_value(x, np.arange(32, dtype=np.float32).reshape(8, 4))
    g.create_host_read("y", y)
    g.create_host_read("s", s)
    prog = ipu.Repeat(3, ipu.Sequence(ipu.Execute(cs), ipu.Copy(x, y),
                                      ipu.Copy(y.transpose(), x.transpose())))
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()  # the first run also checks the vertex axis (it compares on the host)
    DeviceArray.gets, DeviceArray.strict = 0, True
    try:
        eng.run()  # steady state; x is unchanged (x -> y -> x), so a second run is the same
    finally:
        DeviceArray.strict = False
    assert DeviceArray.gets == 0
    ref = np.arange(32, dtype=np.float32).reshape(8, 4)
    assert np.array_equal(eng.read_tensor("s"), ref[perm].sum(axis=1))
    assert np.array_equal(eng.read_tensor("y"), ref) and DeviceArray.gets == 2


class WritesInput(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.x[...] = 0


class NoReadOnly(DeviceArray):
    """Like a CuPy array, it cannot be made read-only (setting ``writeable`` does nothing)."""

    @property
    def flags(self):
        return types.SimpleNamespace(writeable=True)


def test_a_codelet_writing_an_input_is_caught_on_a_device_backend(monkeypatch):
    """CuPy arrays cannot be made read-only, so the first (checked) run compares the Input
    fields instead, and tile memory keeps its values."""
    monkeypatch.setattr(backend, "xp", types.SimpleNamespace(
        **{**vars(fake_cupy), "zeros": lambda *a, **k: np.zeros(*a, **k).view(NoReadOnly),
           "asarray": lambda a, dtype=None: np.asarray(a, dtype).view(NoReadOnly)}))
    dev, g = small(tiles=2)
    x = g.add_variable(ipu.FLOAT, [2, 3], "x")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    cs = g.add_compute_set("cs")
    for i in range(2):
        g.set_tile_mapping(x[i], i)
        g.set_tile_mapping(out[i], i)
        g.add_vertex(cs, WritesInput, {"x": x[i], "out": out[i]}, tile=i)
    g.set_initial_value(x, np.ones((2, 3), np.float32))
    g.create_host_read("x", x)
    eng = ipu.Engine(g, ipu.Execute(cs))
    eng.load(dev)
    with pytest.raises(ipu.IpuError, match=r"wrote into an Input field \(x\) of vertex \d.*"
                                           "declare the field ipu.InOut"):
        eng.run()
    assert np.array_equal(eng.read_tensor("x"), np.ones((2, 3)))


# -- tile mappings are intervals, and a later mapping wins -----------------------------------
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 3)),
                max_size=12), st.booleans())
def test_tile_mapping_intervals_match_painting_every_element(maps, transposed):
    """Random, overlapping set_tile_mapping calls (rows of a view or flat slices) against a
    NumPy reference that paints every element in order."""
    _, g = small(tiles=4)
    x = g.add_variable(ipu.FLOAT, [40], "x")
    view = x.reshape([8, 5]).transpose() if transposed else x.reshape([5, 8])
    ref = np.full(40, -1)
    for b, e, tile in maps:
        if transposed:  # rows of the transpose: strided runs
            b, e = b % 5, max(b % 5, e % 6)
            g.set_tile_mapping(view[b:e], tile)
            ref[view[b:e].idx.reshape(-1)] = tile
        else:
            b, e = min(b, e), max(b, e)
            g.set_tile_mapping(x.slice(b, e), tile)
            ref[b:e] = tile
    got = np.full(40, -1)
    for tile, intervals in enumerate(g.get_tile_mapping(x, throw_on_incomplete=False)):
        for b, e in intervals:
            got[b:e] = tile
    assert np.array_equal(got, ref)
    holes = np.flatnonzero(ref < 0)
    if holes.size:  # the default (throwOnIncompleteMapping) names the count and the first
        with pytest.raises(ipu.TileMappingError,
                           match=rf"'x' has {holes.size} unmapped .*first: \[{holes[0]}\]"):
            g.get_tile_mapping(x)
    flat = np.full(view.num_elements(), -1)  # and the mapping of a strided view
    for tile, intervals in enumerate(g.get_tile_mapping(view, throw_on_incomplete=False)):
        for b, e in intervals:
            flat[b:e] = tile
    assert np.array_equal(flat, ref[view.idx.reshape(-1)])
