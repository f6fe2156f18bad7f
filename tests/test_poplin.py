"""poplin.mat_mul against NumPy, its plan, compute sets and errors."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.poplibs import poplin, popops, poputil


def _operands(m, k, n, tiles, seed):
    """A device, a graph and random (M, K), (K, N) float operands, mapped linearly, each
    (tensor, values)."""
    rng = np.random.default_rng(seed)
    dev = ipu.IPUModel(tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    pairs = []
    for name, shape in (("a", [m, k]), ("b", [k, n])):
        t, v = g.add_variable(ipu.FLOAT, shape, name), rng.normal(size=shape).astype(np.float32)
        poputil.map_tensor_linearly(g, t)
        g.set_initial_value(t, v)
        pairs.append((t, v))
    return dev, g, *pairs


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 13), k=st.integers(1, 17), n=st.integers(1, 11),
       tiles=st.sampled_from([1, 2, 3, 5, 7, 16]), seed=st.integers(0, 50))
def test_mat_mul_matches_numpy(m, k, n, tiles, seed):
    dev, g, (a, x), (b, y) = _operands(m, k, n, tiles, seed)
    prog = ipu.Sequence()
    c = poplin.mat_mul(g, a, b.transpose().transpose(), prog, "c")
    g.create_host_read("c", c)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    np.testing.assert_allclose(eng.read_tensor("c"), x @ y, rtol=1e-5, atol=1e-5)


def test_plan_uses_tiles_and_partials_show_in_profile():
    dev = ipu.IPUModel(tiles_per_ipu=16).create_device()
    p = poplin.plan(dev.target, 8, 256, 4)
    assert p.tiles_m * p.tiles_n * p.tiles_k <= 16 and p.tiles_k > 1  # long K is split
    g = ipu.Graph(dev.target)
    a, b = g.add_variable(ipu.FLOAT, [8, 256], "a"), g.add_variable(ipu.FLOAT, [256, 4], "b")
    poputil.map_tensor_linearly(g, a)
    poputil.map_tensor_linearly(g, b)
    prog = ipu.Sequence()
    poplin.mat_mul(g, a, b, prog, "mm")
    eng = ipu.Engine(g, prog)
    names = [s.name for s in eng.trace.steps if s.kind == "compute"]
    assert names == ["mm/MatMul", "mm/Reduce"]
    reduce_step = eng.trace.steps[-1]
    assert reduce_step.tile_bytes_in.sum() > 0  # partials are exchanged
    mem = eng.trace.memory.categories  # a and b are read first: always live; the partials
    assert mem["variables"].sum() == 4 * (8 * 256 + 256 * 4)  # and c: while they are used
    live = eng.trace.memory.liveness
    assert live.names == ("mm", "mm/partials") and live.ranges("mm/partials") == [(0, 1)]
    partials = 4 * p.tiles_k * 8 * 4  # written by mm/MatMul, read by mm/Reduce
    assert live.live_bytes().tolist() == [partials, partials + 4 * 8 * 4]


def test_bad_operands_are_named():
    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=2).create_device().target)
    a, b = g.add_variable(ipu.FLOAT, [2, 3], "lhs"), g.add_variable(ipu.FLOAT, [4, 2], "rhs")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 1)
    with pytest.raises(ipu.IpuError, match=r"'lhs' \(2, 3\) by 'rhs' \(4, 2\)"):
        poplin.mat_mul(g, a, b, ipu.Sequence())
    c = g.add_variable(ipu.FLOAT, [3, 2], "unmapped")
    with pytest.raises(ipu.TileMappingError, match="'unmapped'"):
        poplin.mat_mul(g, a, c, ipu.Sequence())


@pytest.mark.parametrize("m, k, n", [(2, 0, 3), (0, 2, 3), (2, 3, 0), (0, 0, 0)])
def test_zero_size_operands_match_numpy(m, k, n):
    dev = ipu.IPUModel(tiles_per_ipu=3).create_device()
    g = ipu.Graph(dev.target)
    a, b = g.add_variable(ipu.FLOAT, [m, k], "a"), g.add_variable(ipu.FLOAT, [k, n], "b")
    poputil.map_tensor_linearly(g, a)
    poputil.map_tensor_linearly(g, b)
    prog = ipu.Sequence()
    c = poplin.mat_mul(g, a, b, prog, "c")
    popops.add_in_place(g, c, 5.0, prog)  # c is written after the product...
    g.create_host_read("c", c)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    want = np.zeros((m, k), np.float32) @ np.zeros((k, n), np.float32) + 5
    for _ in range(2):  # ...so a second run sees 5 + 5 unless the product is re-zeroed
        eng.run()
        np.testing.assert_array_equal(eng.read_tensor("c"), want)
    names = [s.name for s in eng.trace.steps if s.kind == "compute"]
    assert names == (["c/Zero", "addInPlace"] if m * n and not k else
                     ["addInPlace"] if m * n else [])


# poplibs include/poplin/MatMul.hpp: matMulGrouped "calculates C[g] = A[g] * B[g]" for 3-D
# A (G, M, K) and B (G, K, N), the group dimension first.
@settings(max_examples=10, deadline=None)
@given(groups=st.integers(1, 5), m=st.integers(1, 6), k=st.integers(1, 40),
       n=st.integers(1, 5), tiles=st.sampled_from([1, 3, 8]), seed=st.integers(0, 20))
def test_mat_mul_grouped_matches_numpy(groups, m, k, n, tiles, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(groups, m, k)).astype(np.float32)
    y = rng.normal(size=(groups, k, n)).astype(np.float32)
    dev = ipu.IPUModel(tiles_per_ipu=tiles).create_device()
    g = ipu.Graph(dev.target)
    a = g.add_variable(ipu.FLOAT, x.shape, "a")
    b = g.add_variable(ipu.FLOAT, y.shape, "b")
    for t, v in ((a, x), (b, y)):
        poputil.map_tensor_linearly(g, t)
        g.set_initial_value(t, v)
    prog = ipu.Sequence()
    c = poplin.mat_mul_grouped(g, a, b, prog, "c")
    g.create_host_read("c", c)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    np.testing.assert_allclose(eng.read_tensor("c"), x @ y, rtol=1e-5, atol=1e-5)
    assert [s.name for s in eng.trace.steps if s.kind == "compute"][0] == "c/MatMul"


def test_mat_mul_grouped_checks_groups():
    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=2).create_device().target)
    a = g.add_variable(ipu.FLOAT, [2, 3, 4], "a")
    b = g.add_variable(ipu.FLOAT, [3, 4, 5], "b")
    for t in (a, b):
        poputil.map_tensor_linearly(g, t)
    with pytest.raises(ipu.IpuError, match="same number of groups"):
        poplin.mat_mul_grouped(g, a, b, ipu.Sequence())


@settings(max_examples=60, deadline=None)
@given(view=st.sampled_from(["plain", "transpose", "slice", "slice-transpose", "concat"]),
       data=st.data())
def test_matmul_blocks_are_the_views_slice_gives(view, data):
    # _add_blocks makes its 2-D blocks directly from a region: the same offset, shape,
    # strides, name and addresses as Tensor.slice gives
    from ipukit.poplibs.poplin import _block

    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
    v = g.add_variable(ipu.FLOAT, [7, 9], "v")
    t = {"plain": v, "transpose": v.transpose(), "slice": v.slice([1, 2], [6, 8]),
         "slice-transpose": v.slice([1, 2], [6, 8]).transpose(),
         "concat": ipu.concat([v, v], 1)}[view]
    r0 = data.draw(st.integers(0, t.shape[0]))
    r1 = data.draw(st.integers(r0, t.shape[0]))
    c0 = data.draw(st.integers(0, t.shape[1]))
    c1 = data.draw(st.integers(c0, t.shape[1]))
    got, want = _block(t, r0, r1, c0, c1), t.slice([r0, c0], [r1, c1])
    assert (got.offset, got.shape, got.strides, got.name) == \
        (want.offset, want.shape, want.strides, want.name)
    assert np.array_equal(got.idx, want.idx)


# poplibs include/poplin/MatMul.hpp: matMulWithOutput writes "the output tensor" given to it;
# here a slice of a bigger variable, mapped linearly or on one tile, keeps its mapping and
# the rest of the variable
@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 9), k=st.sampled_from([1, 3, 17, 256]), n=st.integers(1, 9),
       tiles=st.sampled_from([1, 3, 16]), linear=st.booleans(), seed=st.integers(0, 50))
def test_mat_mul_with_output_matches_numpy(m, k, n, tiles, linear, seed):
    dev, g, (a, x), (b, y) = _operands(m, k, n, tiles, seed)
    big = g.add_variable(ipu.FLOAT, [m * n + 3], "big")
    poputil.map_tensor_linearly(g, big)
    g.set_initial_value(big, np.full(m * n + 3, 7.0))
    if not linear:
        g.set_tile_mapping(big, tiles - 1)
    out = big[1:1 + m * n].reshape([m, n])
    tiles_before = poputil.tile_of_elements(g, big)
    prog = ipu.Sequence()
    poplin.mat_mul_with_output(g, a, b.transpose().transpose(), out, prog, "c")
    np.testing.assert_array_equal(poputil.tile_of_elements(g, big), tiles_before)
    g.create_host_read("big", big)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    got = eng.read_tensor("big")
    np.testing.assert_allclose(got[1:1 + m * n].reshape(m, n), x @ y, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[[0, -2, -1]], 7.0)
    split = poplin.plan(dev.target, m, k, n).tiles_k > 1
    assert [s.name for s in eng.trace.steps if s.kind == "compute"] == (
        ["c/MatMul", "c/Reduce"] if split else ["c/MatMul"])


def test_mat_mul_with_output_checks_its_output():
    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=2).create_device().target)
    a, b = g.add_variable(ipu.FLOAT, [2, 3], "lhs"), g.add_variable(ipu.FLOAT, [3, 4], "rhs")
    wide, half = g.add_variable(ipu.FLOAT, [2, 5], "wide"), g.add_variable(ipu.HALF, [2, 4], "h")
    for t in (a, b, wide, half):
        poputil.map_tensor_linearly(g, t)
    with pytest.raises(ipu.IpuError, match=r"output 'wide' \(2, 5\) does not match the shape "
                                            r"\(2, 4\) of 'lhs' \(2, 3\) times 'rhs' \(3, 4\)"):
        poplin.mat_mul_with_output(g, a, b, wide, ipu.Sequence())
    with pytest.raises(ipu.GraphConnectionError, match="output 'h' is half but 'lhs' and 'rhs' "
                                                       "are float"):
        poplin.mat_mul_with_output(g, a, b, half, ipu.Sequence())
    loose = g.add_variable(ipu.FLOAT, [2, 4], "loose")
    with pytest.raises(ipu.TileMappingError, match="output 'loose'"):
        poplin.mat_mul_with_output(g, a, b, loose, ipu.Sequence())
    with pytest.raises(ipu.IpuError, match=r"'lhs' \(2, 3\) by 'lhs' \(2, 3\)"):
        poplin.mat_mul_with_output(g, a, a, loose, ipu.Sequence())  # matMul's checks first
    with pytest.raises(ipu.IpuError, match=r"output must be a Tensor, got a ndarray of "
                                           r"shape \(2, 4\)"):
        poplin.mat_mul_with_output(g, a, b, np.zeros((2, 4)), ipu.Sequence())
    row = g.add_variable(ipu.FLOAT, [1, 4], "row")
    poputil.map_tensor_linearly(g, row)
    with pytest.raises(ipu.IpuError, match=r"output 'row.*' \(2, 4\) is not parallel "
                                           "writeable"):
        poplin.mat_mul_with_output(g, a, b, row.broadcast([2, 4]), ipu.Sequence())


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_parallel_writeable_means_distinct_addresses(shape, data):
    """poputil.check_parallel_writeable against np.unique of the addresses, on strided,
    transposed, broadcast and index views."""
    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=1).create_device().target)
    t = g.add_variable(ipu.FLOAT, [math.prod(shape) * 2], "t")
    view = t.reshape([2, -1])[:, :math.prod(shape)][data.draw(st.integers(0, 1))]
    view = view.reshape(shape)
    if data.draw(st.booleans()):
        view = view.dim_shuffle(data.draw(st.permutations(range(len(shape)))))
    if data.draw(st.booleans()):
        view = view.expand(0).broadcast([data.draw(st.integers(1, 3)), *view.shape])
    if data.draw(st.booleans()):  # an index view (poplar::concat of rows)
        picks = data.draw(st.lists(st.integers(0, view.shape[0] - 1), min_size=1, max_size=4))
        view = ipu.concat([view[i:i + 1] for i in picks])
    flat = view.idx.reshape(-1)
    if np.unique(flat).size == flat.size:
        poputil.check_parallel_writeable(view, "op", "output")
    else:
        with pytest.raises(ipu.IpuError,
                           match=r"op: output '.*' \(.*\) is not parallel writeable"):
            poputil.check_parallel_writeable(view, "op", "output")
