import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import ipukit as ipu

from .helpers import SumVertex, run, small

TUT1_OUTPUT = """Running program
v1-debug: [1.0000000 1.5000000 2.0000000 2.5000000]
v2-debug: [1.0000000 1.5000000 2.0000000 2.5000000]
v4-0: [0 1 2 3 4 5 6 7 8 9]
v4-1: [10 11 12 13 14 15 16 17 18 19]
Program complete
"""


def tut1():
    """Graphcore's Poplar tutorial 1 (variables, copies, slices, a circular stream)."""
    dev = ipu.IPUModel().create_device()
    g = ipu.Graph(dev.target)
    v1 = g.add_variable(ipu.FLOAT, [4], "v1")
    v2 = g.add_variable(ipu.FLOAT, [4], "v2")
    v3 = g.add_variable(ipu.FLOAT, [4, 4], "v3")
    v4 = g.add_variable(ipu.INT, [10], "v4")
    g.set_tile_mapping(v1, 0)
    for i in range(4):
        g.set_tile_mapping(v2[i], i)
    g.set_tile_mapping(v3, 0)
    g.set_tile_mapping(v4, 0)
    c1 = g.add_constant(ipu.FLOAT, [4], [1.0, 1.5, 2.0, 2.5], "c1")
    g.set_tile_mapping(c1, 0)
    g.create_host_write("v3-write", v3)
    g.create_host_read("v3-read", v3)
    stream = g.add_host_to_device_fifo("v4-input-stream", ipu.INT, 10)
    prog = ipu.Sequence(
        ipu.Copy(c1, v1), ipu.PrintTensor("v1-debug", v1), ipu.Copy(v1, v2),
        ipu.PrintTensor("v2-debug", v2), ipu.Copy(v1.slice(0, 3), v3.slice([1, 1], [2, 4])),
        ipu.Copy(stream, v4), ipu.PrintTensor("v4-0", v4),
        ipu.Copy(stream, v4), ipu.PrintTensor("v4-1", v4))
    eng = ipu.Engine(g, [prog, ipu.Sequence(ipu.Copy(stream, v4), ipu.PrintTensor("v4", v4))])
    eng.load(dev)
    eng.write_tensor("v3-write", np.zeros(16, np.float32))
    eng.connect_stream("v4-input-stream", np.arange(30, dtype=np.int32))
    return eng


def test_tut1_prints_what_graphcores_tutorial_prints(capsys):
    eng = tut1()
    # The published output is a terminal's: Poplar's stderr (PrintTensor) and the
    # tutorial's stdout interleave; one stream keeps that order here.
    eng.set_print_tensor_stream(sys.stdout)
    print("Running program")
    eng.run(0)
    print("Program complete")
    assert capsys.readouterr().out == TUT1_OUTPUT
    h3 = eng.read_tensor("v3-read")
    assert "\n".join(" ".join(f"{x:g}" for x in row) for row in h3).split("\n")[1] == "0 1 1.5 2"
    assert np.array_equal(h3[[0, 2, 3]], np.zeros((3, 4)))


def test_the_stream_buffer_is_circular(capsys):
    eng = tut1()
    eng.run(0)
    capsys.readouterr()
    eng.run(1)
    eng.run(1)
    assert capsys.readouterr().err.splitlines() == [
        "v4: [20 21 22 23 24 25 26 27 28 29]", "v4: [0 1 2 3 4 5 6 7 8 9]"]


def tut3(per_vertex=False):
    dev, g = small(tiles=4)
    v1 = g.add_variable(ipu.FLOAT, [4], "v1")
    v2 = g.add_variable(ipu.FLOAT, [4], "v2")
    for i in range(4):
        g.set_tile_mapping(v1[i], i)
        g.set_tile_mapping(v2[i], i)
    c1 = g.add_constant(ipu.FLOAT, [4], [1.0, 1.5, 2.0, 2.5], "c1")
    g.set_tile_mapping(c1, 0)
    cs = g.add_compute_set("computeSet")
    for i in range(4):
        v = g.add_vertex(cs, SumVertex, {"x": v1.slice(i, 4), "out": v2[i]})
        g.set_tile_mapping(v, i)
        g.set_perf_estimate(v, 20)
    prog = ipu.Sequence(ipu.Copy(c1, v1), ipu.Execute(cs), ipu.PrintTensor("v2", v2))
    return run(g, prog, dev, per_vertex=per_vertex)


@pytest.mark.parametrize("per_vertex", [False, True])
def test_tut3_suffix_sums(capsys, per_vertex):
    eng = tut3(per_vertex)
    assert capsys.readouterr().err == "v2: [7.0000000 6.0000000 4.5000000 2.5000000]\n"
    s = eng.trace.summary()
    assert s["compute_cycles_excluding_idle"] == 4 * 20
    assert s["vertex_types"] == {"SumVertex": (4, 80)}


def test_the_ipu_model_shows_new_variables_as_zeros(capsys):
    # Poplar's docs call a new variable's contents undefined; the IPUModel (and ipukit)
    # shows zeros. Kit convention: programs must not rely on it.
    dev, g = small(tiles=1)
    v = g.add_variable(ipu.FLOAT, [4], "v1")
    g.set_tile_mapping(v, 0)
    run(g, ipu.PrintTensor("v1-debug", v), dev)
    assert capsys.readouterr().err == "v1-debug: [0.0000000 0.0000000 0.0000000 0.0000000]\n"


def test_device_to_host_streams_and_callbacks():
    dev, g = small(tiles=2)
    v = g.add_variable(ipu.FLOAT, [3], "v")
    g.set_tile_mapping(v, 1)
    h2d = g.add_host_to_device_fifo("in", ipu.FLOAT, 3)
    d2h = g.add_device_to_host_fifo("out", ipu.FLOAT, 3)
    eng = ipu.Engine(g, ipu.Sequence(ipu.Copy(h2d, v), ipu.Copy(v, d2h)))
    eng.load(dev)
    fed = iter([np.array([1, 2, 3]), np.array([4, 5, 6])])
    eng.connect_stream_to_callback("in", lambda buf: buf.__setitem__(slice(None), next(fed)))
    host = np.zeros(6, np.float32)
    eng.connect_stream("out", host)
    eng.run()
    eng.run()
    assert host.tolist() == [1, 2, 3, 4, 5, 6]
    got = []
    eng.connect_stream("in", np.array([7, 8, 9], np.float32))
    eng.connect_stream_to_callback("out", got.append)
    eng.run()
    assert got[0].tolist() == [7, 8, 9]
    host_steps = [s for s in eng.trace.executed_steps() if s.kind == "stream"]
    assert all(s.host_bytes == 12 for s in host_steps)
    assert host_steps[0].tile_bytes_in[1] == 12 and host_steps[1].tile_bytes_out[1] == 12


class Accumulate(ipu.Vertex):
    """State persists between executions: total += x; out = total."""

    x = ipu.Input(ipu.FLOAT)
    total = ipu.State(ipu.FLOAT)
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.total[...] += self.x
        self.out[...] = self.total


@pytest.mark.parametrize("per_vertex", [False, True])
def test_state_persists_between_runs(per_vertex):
    dev, g = small(tiles=2)
    x = g.add_constant(ipu.FLOAT, [2], [1.5, -2.0], "x")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 1)
    cs = g.add_compute_set("acc")
    for i in range(2):
        v = g.add_vertex(cs, Accumulate, {"x": x[i], "out": out[i]}, tile=i)
        g.set_initial_value(v["total"], 10.0 * i)
    g.create_host_read("out", out)
    eng = run(g, ipu.Repeat(3, ipu.Execute(cs)), dev, per_vertex=per_vertex)
    eng.run()
    assert eng.read_tensor("out").tolist() == [6 * 1.5, 10 - 12.0]


def test_set_initial_value_of_a_tensor():
    dev, g = small(tiles=1)
    v = g.add_variable(ipu.INT, [2, 2], "v")
    g.set_tile_mapping(v, 0)
    g.set_initial_value(v[1], [7, 8])
    g.create_host_read("v", v)
    assert run(g, ipu.Sequence(), dev).read_tensor("v").tolist() == [[0, 0], [7, 8]]


def test_host_handle_and_stream_errors_name_the_fix():
    dev, g = small(tiles=1)
    v = g.add_variable(ipu.FLOAT, [4], "v")
    g.set_tile_mapping(v, 0)
    s = g.add_host_to_device_fifo("feed", ipu.FLOAT, 4)
    g.create_host_write("w", v)
    eng = ipu.Engine(g, ipu.Copy(s, v))
    with pytest.raises(ipu.IpuError, match=r"engine.load\(device\)"):
        eng.run()
    eng.load(dev)
    with pytest.raises(ipu.StreamError, match=r"no host read handle 'v'.*create_host_read"):
        eng.read_tensor("v")
    with pytest.raises(ipu.StreamError, match="has 4 elements but the data has 3"):
        eng.write_tensor("w", [1, 2, 3])
    with pytest.raises(ipu.StreamError, match="cannot convert"):
        eng.write_tensor("w", ["a", "b", "c", "d"])
    with pytest.raises(ipu.StreamError, match=r"'feed' is not connected.*connect_stream"):
        eng.run()
    with pytest.raises(ipu.StreamError, match="no stream named 'food'.*feed"):
        eng.connect_stream("food", np.zeros(4))
    with pytest.raises(ipu.StreamError, match="cannot feed a stream of float32"):
        eng.connect_stream("feed", np.array(["a", "b", "c", "d"]))
    with pytest.raises(ipu.StreamError, match="device-to-host FIFO.*Copy\\(tensor, stream\\)"):
        ipu.Copy(g.add_device_to_host_fifo("back", ipu.FLOAT, 4), v)
    with pytest.raises(ipu.StreamError, match="host-to-device FIFO.*Copy\\(stream, tensor\\)"):
        ipu.Copy(v, s)
    eng.connect_stream("feed", np.arange(4, dtype=np.float32))
    eng.run(np.int64(0))  # NumPy ints are program numbers too
    with pytest.raises(ipu.ProgramError, match="1 program"):
        eng.run(1)
    with pytest.raises(ipu.StreamError, match="same type and size"):
        ipu.Engine(g, ipu.Copy(s, v[0:2]))
    with pytest.raises(ipu.IpuError, match="unknown engine option 'speed'"):
        ipu.Engine(g, ipu.Sequence(), {"speed": "fast"})
    other = ipu.IPUModel(tiles_per_ipu=2).create_device()
    with pytest.raises(ipu.IpuError, match="compiled for"):
        ipu.Engine(g, ipu.Sequence()).load(other)


class Broken(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out[...] = self.x.sum(axis=1) + self.missing  # a learner's bug


class Rebinds(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.out = self.x.sum(axis=-1)


class WritesInput(ipu.Vertex):
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.FLOAT)

    def compute(self):
        self.x[...] = 0


@pytest.mark.parametrize("cls, word", [
    (Broken, r"Broken.compute failed \(AttributeError"), (Rebinds, r"self.out\[...\] = value"),
    (WritesInput, r"wrote into an Input field \(x\) of vertex \d.*declare the field ipu.InOut")])
@pytest.mark.parametrize("gathered", [False, True])
def test_codelet_mistakes_are_explained(cls, word, gathered):
    dev, g = small(tiles=1)
    x = g.add_variable(ipu.FLOAT, [2, 3], "x")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 0)
    cs = g.add_compute_set("cs")
    for i in range(2):
        xi = ipu.concat([x[i, 2:], x[i, :2]]) if gathered else x[i]  # a gather, not a view
        g.add_vertex(cs, cls, {"x": xi, "out": out[i]}, tile=0)
    g.set_initial_value(x, np.ones((2, 3), np.float32))  # CuPy's check sees changed values
    with pytest.raises(ipu.IpuError, match=word):
        run(g, ipu.Execute(cs), dev)


class Doubles(ipu.Vertex):
    """A learner's codelet marked ``strided_fields``: x and out may come as strided views."""
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))
    strided_fields = True
    seen = []  # the shapes of out handed to compute

    def compute(self):
        Doubles.seen.append(self.out.shape)
        x = self.x.reshape(len(self.x), 4, 3)
        self.out[...] = (2 * x[..., :2]).reshape(self.out.shape)


class DoublesInPlace(Doubles):
    def compute(self):
        self.x[...] = 0


def doubles(cls, per_vertex):
    """Vertex i reads x[i] (4 x 3) and writes out[i, :4, :2]: no (vertices, elements) view
    reaches out, so a marked codelet gets it as (2, 4, 2), storage itself."""
    dev, g = small(tiles=1)
    x = g.add_variable(ipu.FLOAT, [2, 4, 3], "x")
    out = g.add_variable(ipu.FLOAT, [2, 5, 3], "out")
    g.set_tile_mapping(x, 0)
    g.set_tile_mapping(out, 0)
    cs = g.add_compute_set("cs")
    for i in range(2):
        g.add_vertex(cs, cls, {"x": x[i].flatten(), "out": out[i, :4, :2].flatten()}, tile=0)
    g.set_initial_value(x, np.arange(24, dtype=np.float32).reshape(2, 4, 3) + 1)
    g.create_host_read("out", out)
    return run(g, ipu.Execute(cs), dev, per_vertex=per_vertex)


@pytest.mark.parametrize("per_vertex", [False, True])
def test_strided_fields_get_views_and_give_what_copies_give(per_vertex):
    Doubles.seen.clear()
    eng = doubles(Doubles, per_vertex)  # not marked separable: the axis check runs too
    want = np.zeros((2, 5, 3), np.float32)
    want[:, :4, :2] = 2 * (np.arange(24, dtype=np.float32).reshape(2, 4, 3) + 1)[..., :2]
    assert np.array_equal(eng.read_tensor("out"), want)
    assert ((2, 4, 2) in Doubles.seen) is not per_vertex  # batched: the strided view
    with pytest.raises(ipu.IpuError, match="wrote into an Input field"):
        doubles(DoublesInPlace, per_vertex)  # an Input stays read-only


class Axpy(ipu.Vertex):
    """y[i] += a * x[i], with a scalar input: scalar and Vector fields in one codelet."""

    a = ipu.Input(ipu.FLOAT)
    x = ipu.Input(ipu.Vector(ipu.FLOAT))
    y = ipu.InOut(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.y[...] += self.a[:, None] * self.x


floats = st.floats(-100, 100, width=32)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_vertex_graphs_match_numpy(data):
    """Random tensors, tile mappings and vertex connections give what NumPy gives, in batched
    and per-vertex mode, bit for bit."""
    tiles = data.draw(st.integers(1, 5), "tiles")
    n = data.draw(st.integers(1, 30), "elements of x")
    xs = data.draw(arrays(np.float32, n, elements=floats), "x")
    nv = data.draw(st.integers(1, 10), "vertices")
    reads = [data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5)) for _ in
             range(nv)]
    outs = data.draw(st.permutations(range(nv)), "output order")
    y0 = data.draw(arrays(np.float32, (nv, 3), elements=floats), "y")
    a = data.draw(arrays(np.float32, nv, elements=floats), "a")
    dev, g = small(tiles=tiles)
    x = g.add_variable(ipu.FLOAT, [n], "x")
    out = g.add_variable(ipu.FLOAT, [nv], "out")
    y = g.add_variable(ipu.FLOAT, [nv, 3], "y")
    av = g.add_variable(ipu.FLOAT, [nv], "a")
    for t in (x, out, y, av):
        for i in range(t.shape[0]):
            g.set_tile_mapping(t[i], data.draw(st.integers(0, tiles - 1)))
    cs1, cs2 = g.add_compute_set("sum"), g.add_compute_set("axpy")
    for v in range(nv):
        xv = ipu.concat([x[i:i + 1] for i in reads[v]])
        g.add_vertex(cs1, SumVertex, {"x": xv, "out": out[outs[v]]},
                     tile=data.draw(st.integers(0, tiles - 1)))
        g.add_vertex(cs2, Axpy, {"a": av[v], "x": xv[:1].broadcast([3]), "y": y[v]},
                     tile=data.draw(st.integers(0, tiles - 1)))
    for name, t in (("x", x), ("y", y), ("a", av), ("out", out)):
        g.create_host_write(name, t)
        g.create_host_read(name, t)
    prog = ipu.Sequence(ipu.Execute(cs1), ipu.Execute(cs2))
    results = []
    for per_vertex in (False, True):
        eng = ipu.Engine(g, prog, per_vertex=per_vertex)
        eng.load(dev)
        eng.write_tensor("x", xs)
        eng.write_tensor("y", y0)
        eng.write_tensor("a", a)
        eng.run()
        results.append((eng.read_tensor("out"), eng.read_tensor("y")))
    want_out = np.zeros(nv, np.float32)
    for v in range(nv):
        want_out[outs[v]] = xs[reads[v]].sum(dtype=np.float32)
    want_y = y0 + a[:, None] * xs[[r[0] for r in reads]][:, None]
    np.testing.assert_allclose(results[0][0], want_out, rtol=1e-5, atol=1e-3)
    # exact, except that CUDA (CuPy) flushes subnormal float32 results to zero
    np.testing.assert_allclose(results[0][1], want_y.astype(np.float32), rtol=0,
                               atol=np.finfo(np.float32).tiny)
    for batched, single in zip(results[0], results[1]):
        np.testing.assert_array_equal(batched, single)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=3), st.data())
def test_copies_through_views_match_numpy(shape, data):
    """Copy(view, other) moves exactly the elements NumPy's view names; views never copy."""
    dev, g = small(tiles=3)
    shape = tuple(shape)
    src = g.add_variable(ipu.INT, shape, "src")
    dst = g.add_variable(ipu.INT, shape[::-1], "dst")
    g.set_tile_mapping(src, data.draw(st.integers(0, 2)))
    g.set_tile_mapping(dst, data.draw(st.integers(0, 2)))
    g.create_host_write("src", src)
    g.create_host_read("dst", dst)
    values = np.arange(np.prod(shape), dtype=np.int32).reshape(shape) * 3 + 1
    eng = run(g, ipu.Copy(src.dim_shuffle(list(range(len(shape)))[::-1]), dst), dev)
    eng.write_tensor("src", values)
    eng.run()
    assert np.array_equal(eng.read_tensor("dst"), values.T)


# -- how the engine reaches a gather: a strided view where the addresses are evenly spaced ---
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 9)), min_size=1, max_size=3),
       st.integers(0, 50), st.integers(-1, 63))
def test_spacing_describes_exactly_the_addresses(dims, offset, poke):
    """``_spacing`` finds a region (offset, shape, strides) only when it holds exactly the
    addresses in order, and calls them distinct only when none repeats; evenly spaced,
    non-overlapping addresses always get one (so they are read through a view)."""
    from ipukit.engine import _spacing
    from ipukit.tensor import addresses

    shape, strides = [n for n, _ in dims], [s for _, s in dims]
    idx = addresses(offset, shape, strides).reshape(-1)
    if 0 <= poke < idx.size:
        idx[poke] += 1  # usually no longer evenly spaced
    found = _spacing(idx)
    if found is not None:
        start, shape2, strides2, distinct = found
        assert np.array_equal(addresses(start, shape2, strides2).reshape(-1), idx)
        assert not distinct or np.unique(idx).size == idx.size
    reach, apart = 0, True
    for s, n in sorted(zip(strides, shape)):
        apart, reach = apart and (n == 1 or s > reach), reach + (n - 1) * s
    if poke < 0 and apart and idx.size > 1:
        assert found is not None and found[3]


# -- a gather of long runs of consecutive addresses: a slice per run ------------------------
@given(st.lists(st.tuples(st.integers(0, 12_000), st.integers(1, 3_000)), min_size=1,
                max_size=5))
def test_layout_describes_exactly_the_addresses(spans):
    """``_layout`` gives a region, or runs (begin, end, position) that are disjoint, only
    when they hold exactly the addresses in order; disjoint runs at least ``RUN_ELEMENTS``
    long always get one of them (so they are read a slice per run, not gathered)."""
    from ipukit.engine import RUN_ELEMENTS, _layout
    from ipukit.tensor import addresses

    idx = np.concatenate([np.arange(b, b + n) for b, n in spans]).astype(np.int32)
    found = _layout(idx)
    if isinstance(found, list):
        got = np.concatenate([np.arange(b, e) for b, e, _ in found])
        assert np.array_equal(got, idx)
        assert [p for _, _, p in found] == np.cumsum([0] + [e - b for b, e, _ in found])[
            :-1].tolist()
        assert np.unique(idx).size == idx.size
    elif found is not None:
        start, shape, strides, distinct = found
        assert np.array_equal(addresses(start, shape, strides).reshape(-1), idx)
        assert not distinct or np.unique(idx).size == idx.size
    if np.unique(idx).size == idx.size and min(n for _, n in spans) >= RUN_ELEMENTS:
        assert found is not None


@pytest.mark.parametrize("whole_source", [False, True])
def test_copies_between_long_runs_match_numpy(whole_source):
    """A Copy whose source and destination are joined slices of one variable (runs, each
    moved a slice at a time) moves what NumPy's gather and scatter move, also where the
    destination's runs overlap a source that is storage itself."""
    dev, g = small(tiles=2)
    v = g.add_variable(ipu.INT, [6 * 2048], "v")
    g.set_tile_mapping(v, 0)
    g.create_host_write("v", v)
    g.create_host_read("v", v)
    src = v[2048:6144] if whole_source else ipu.concat([v[8192:10240], v[0:2048]])
    dst = ipu.concat([v[3072:5120], v[9216:10240], v[11264:12288]])  # not alike: runs
    eng = ipu.Engine(g, ipu.Copy(src, dst))
    eng.load(dev)
    values = np.arange(v.num_elements(), dtype=np.int32) * 7 + 3
    eng.write_tensor("v", values)
    eng.run()
    want = values.copy()
    s_idx = np.r_[2048:6144] if whole_source else np.r_[8192:10240, 0:2048]
    want[np.r_[3072:5120, 9216:10240, 11264:12288]] = values[s_idx]
    assert np.array_equal(eng.read_tensor("v"), want)


@pytest.mark.parametrize("per_vertex", [False, True])
def test_fields_of_long_runs_match_numpy(per_vertex):
    """A vertex whose Input and InOut are joined slices (runs: copied in, and the InOut
    scattered back, a slice per run) computes what NumPy computes."""
    dev, g = small(tiles=1)
    v = g.add_variable(ipu.FLOAT, [6 * 2048], "v")
    a = g.add_constant(ipu.FLOAT, [], 0.5, "a")
    g.set_tile_mapping(v, 0)
    g.set_tile_mapping(a, 0)
    g.create_host_write("v", v)
    g.create_host_read("v", v)
    cs = g.add_compute_set("axpy")
    g.add_vertex(cs, Axpy, {"a": a, "x": ipu.concat([v[6144:8192], v[0:2048]]),
                            "y": ipu.concat([v[3072:5120], v[9216:10240], v[11264:12288]])},
                 tile=0)
    eng = ipu.Engine(g, ipu.Execute(cs), per_vertex=per_vertex)
    eng.load(dev)
    values = np.arange(v.num_elements(), dtype=np.float32) - 5000
    eng.write_tensor("v", values)
    eng.run()
    want = values.copy()
    want[np.r_[3072:5120, 9216:10240, 11264:12288]] += 0.5 * values[np.r_[6144:8192, 0:2048]]
    assert np.array_equal(eng.read_tensor("v"), want)
    if not per_vertex:  # x and y reached a slice per run
        assert len({id(p) for p in eng._plans.values() if type(p[1]) is list}) == 2


@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5000)), min_size=0, max_size=2),
       st.integers(600, 2100), st.integers(0, 50))
def test_layout_finds_every_region_spacing_finds(outer, inner, offset):
    """Regions of long runs (an inner dimension of stride 1) keep their view: where
    ``_spacing`` finds a region, ``_layout`` (which looks at the runs first) finds one that
    holds the same addresses."""
    from ipukit.engine import _layout, _spacing
    from ipukit.tensor import addresses

    shape, strides = [n for n, _ in outer] + [inner], [s for _, s in outer] + [1]
    idx = addresses(offset, shape, strides).reshape(-1)
    found = _layout(idx)
    if _spacing(idx) is not None:
        assert found is not None and not isinstance(found, list)
    if found is not None and not isinstance(found, list):
        assert np.array_equal(addresses(*found[:3]).reshape(-1), idx)
