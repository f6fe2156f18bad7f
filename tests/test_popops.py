"""popops against NumPy: element-wise ops, map, scaled_add_to, fill, reduce, cast."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukit as ipu
from ipukit.poplibs import popops, poputil
from ipukit.poplibs.expr import Exp, Max, _1, _2


def setup(tiles=3):
    dev = ipu.IPUModel(tiles_per_ipu=tiles).create_device()
    return dev, ipu.Graph(dev.target), ipu.Sequence()


def variable(g, values, name, dtype=ipu.FLOAT, linear=True):
    values = np.asarray(values, dtype)
    t = g.add_variable(dtype, values.shape, name)
    g.set_initial_value(t, values)
    if linear:
        poputil.map_tensor_linearly(g, t, 1, 1)
    else:  # scatter elements over the tiles in a scrambled order
        tiles = np.random.default_rng(0).integers(0, g.target.num_tiles, values.size)
        for i, tile in enumerate(tiles):
            g.set_tile_mapping(t.flatten()[i], int(tile))
    return t


def run(dev, g, prog, **outs):
    for name, t in outs.items():
        g.create_host_read(name, t)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.run()
    return {name: eng.read_tensor(name) for name in outs}, eng


shapes = st.tuples(st.integers(1, 5), st.integers(1, 7))


@settings(max_examples=15, deadline=None)
@given(shape=shapes, tiles=st.sampled_from([1, 3, 5, 7]), linear=st.booleans(),
       seed=st.integers(0, 100))
def test_elementwise_ops_match_numpy(shape, tiles, linear, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32)
    y = rng.uniform(0.5, 2, size=shape).astype(np.float32)
    dev, g, prog = setup(tiles)
    a, b = variable(g, x, "a", linear=linear), variable(g, y, "b", linear=not linear)
    outs = {
        "add": popops.add(g, a, b, prog), "sub": popops.sub(g, a, b, prog),
        "mul": popops.mul(g, a, b, prog), "div": popops.div(g, a, b, prog),
        "neg": popops.neg(g, a, prog), "abs": popops.abs(g, a, prog),
        "exp": popops.exp(g, a, prog), "log": popops.log(g, b, prog),
        "relu": popops.relu(g, a, prog), "tanh": popops.tanh(g, a, prog),
        "sigmoid": popops.sigmoid(g, a, prog), "add3": popops.add(g, a, 3.0, prog),
        "map": popops.map(g, Exp(_1) * 2 + Max(_2, 1.0), [a, b], prog),
    }
    got, _ = run(dev, g, prog, **outs)
    want = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y, "neg": -x,
            "abs": np.abs(x), "exp": np.exp(x), "log": np.log(y), "relu": np.maximum(x, 0),
            "tanh": np.tanh(x), "sigmoid": 1 / (1 + np.exp(-x)), "add3": x + 3,
            "map": np.exp(x) * 2 + np.maximum(y, 1)}
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=k)


def test_broadcast_transposed_and_output_follows_first_operand():
    dev, g, prog = setup(4)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    a = variable(g, x, "a")
    row = variable(g, [10, 20, 30, 40], "row")
    c = popops.add(g, a, row, prog, "bias")
    t = popops.mul(g, a.transpose(), 2, prog)
    got, eng = run(dev, g, prog, c=c, t=t)
    np.testing.assert_array_equal(got["c"], x + [10, 20, 30, 40])
    np.testing.assert_array_equal(got["t"], x.T * 2)
    assert (poputil.tile_of_elements(g, c) == poputil.tile_of_elements(g, a)).all()
    step = next(s for s in eng.trace.steps if s.name == "bias")
    assert step.exchange_cycles > 0  # the row is fetched from other tiles
    assert set(step.vertex_types) == {"popops::BinaryOp1D<ADD,float>"}  # one region a tile


def test_in_place_scaled_add_fill_zero_cast():
    dev, g, prog = setup(5)
    x = np.linspace(-2, 2, 13, dtype=np.float32)
    a, b = variable(g, x, "a"), variable(g, x[::-1].copy(), "b")
    z = variable(g, x, "z")
    scale = g.add_constant(ipu.FLOAT, [1], -0.5, "scale")
    g.set_tile_mapping(scale, 4)
    popops.scaled_add_to(g, a, b, 0.25, prog)
    popops.scaled_add_to(g, b, a, scale, prog)
    popops.fill(g, z, 7.0, prog)
    i = popops.cast(g, popops.mul(g, z, 1.5, prog), ipu.INT, prog)
    popops.add_in_place(g, i, 1, prog)
    f = variable(g, x, "f")
    popops.zero(g, f, prog)
    got, _ = run(dev, g, prog, a=a, b=b, z=z, i=i, f=f)
    a_ref = x + 0.25 * x[::-1]
    np.testing.assert_allclose(got["a"], a_ref, rtol=1e-6)
    np.testing.assert_allclose(got["b"], x[::-1] - 0.5 * a_ref, rtol=1e-6, atol=1e-7)
    assert (got["z"] == 7).all() and (got["i"] == 11).all() and got["i"].dtype == np.int32
    assert (got["f"] == 0).all()


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       tiles=st.sampled_from([1, 2, 3, 7]), op=st.sampled_from(["ADD", "MUL", "MAX", "MIN"]),
       linear=st.booleans(), data=st.data())
def test_reduce_matches_numpy(shape, tiles, op, linear, data):
    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1))
    x = np.random.default_rng(len(shape)).uniform(0.5, 1.5, shape).astype(np.float32)
    dev, g, prog = setup(tiles)
    t = variable(g, x, "t", linear=linear)
    r = popops.reduce(g, t, dims, op, prog)
    got, _ = run(dev, g, prog, r=r)
    fn = {"ADD": np.sum, "MUL": np.prod, "MAX": np.max, "MIN": np.min}[op]
    np.testing.assert_allclose(got["r"], fn(x, axis=tuple(dims)), rtol=1e-5)


def test_reduce_two_stages_and_update():
    dev, g, prog = setup(4)
    x = np.arange(48, dtype=np.float32).reshape(3, 16)
    t = variable(g, x, "t")  # rows span tiles: partials per tile, then combined
    out = g.add_variable(ipu.FLOAT, [3], "out")
    g.set_tile_mapping(out, 3)
    g.set_initial_value(out, [1, 2, 3])
    popops.reduce_with_output(g, t, out, [1], popops.Operation.ADD, prog, "sum", update=True)
    got, eng = run(dev, g, prog, out=out)
    np.testing.assert_array_equal(got["out"], x.sum(1) + [1, 2, 3])
    names = [s.name for s in eng.trace.steps if s.kind == "compute"]
    assert names == ["sum/partials", "sum"]


@pytest.mark.parametrize("k", range(1, 10))
@pytest.mark.parametrize("order", ["C", "F"])
def test_short_row_sums_have_numpys_bits(k, order):
    """The Reduce codelet adds float32 rows of 2-7 itself: the same bits as ``sum`` (signed
    zeros, inf, nan included), whatever the layout; other rows go to ``sum``."""
    rng = np.random.default_rng(k)
    a = (rng.standard_normal((300, 4, k)) * 10.0 ** rng.integers(-30, 30, (300, 4, k)))
    a = np.asarray(a, np.float32, order=order)
    a[0], a[1, 0, 0], a[2, 0, 0], a[3, 0, -1] = -0.0, np.inf, np.nan, -np.inf
    with np.errstate(all="ignore"):
        want, got = a.sum(axis=-1), popops._sum(a)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


def test_reduce_of_partials_spread_over_tiles_equals_numpy():
    """Partials on 4 tiles, summed on the outputs' tiles (a strided view of each tile's
    block, ``strided_fields``), equal NumPy's sums exactly."""
    dev, g, prog = setup(4)
    x = np.random.default_rng(3).standard_normal((4, 1024)).astype(np.float32)
    t = variable(g, x, "t")
    r = popops.reduce(g, t, [0], "ADD", prog)
    got, _ = run(dev, g, prog, r=r)
    np.testing.assert_array_equal(got["r"], x.T.copy().sum(axis=-1))


# poplibs include/popops/OperationDef.hpp: LOGICAL_AND / LOGICAL_OR "only support boolean
# operands", SQUARE_ADD "squares each element before applying ADD", LOG_ADD "reduce using
# acc = a+log(1+exp(b-a))".
@pytest.mark.parametrize("tiles", [1, 4])  # one stage, and partials combined on 4 tiles
def test_reduce_operations_of_operation_def(tiles):
    dev, g, prog = setup(tiles)
    x = np.random.default_rng(3).normal(size=(3, 16)).astype(np.float32) * 20
    flags = x > 0
    t = variable(g, x, "t")
    b = variable(g, flags, "b", dtype=ipu.BOOL)
    sq = popops.reduce(g, t, [1], popops.Operation.SQUARE_ADD, prog)
    la = popops.reduce(g, t, [1], popops.Operation.LOG_ADD, prog)
    land = popops.reduce(g, b, [1], popops.Operation.LOGICAL_AND, prog)
    lor = popops.reduce(g, b, [0], popops.Operation.LOGICAL_OR, prog)
    got, _ = run(dev, g, prog, sq=sq, la=la, land=land, lor=lor)
    np.testing.assert_allclose(got["sq"], (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)
    acc = x[:, 0].astype(np.float64)  # PopLibs' recurrence, element by element
    for j in range(1, x.shape[1]):
        hi, lo = np.maximum(acc, x[:, j]), np.minimum(acc, x[:, j])
        acc = hi + np.log1p(np.exp(lo - hi))
    np.testing.assert_allclose(got["la"], acc, rtol=1e-5)
    np.testing.assert_array_equal(got["land"], flags.all(1))
    np.testing.assert_array_equal(got["lor"], flags.any(0))


def test_square_add_with_update_adds_squares_to_the_output():
    dev, g, prog = setup(4)
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    t = variable(g, x, "t")
    out = g.add_variable(ipu.FLOAT, [2], "out")
    g.set_tile_mapping(out, 3)
    g.set_initial_value(out, [1, 2])
    popops.reduce_with_output(g, t, out, [1], popops.Operation.SQUARE_ADD, prog, update=True)
    got, _ = run(dev, g, prog, out=out)
    np.testing.assert_array_equal(got["out"], (x ** 2).sum(1) + [1, 2])


def test_logical_reductions_need_booleans():
    dev, g, prog = setup(2)
    t = variable(g, np.ones((2, 3)), "floats")
    with pytest.raises(ipu.GraphConnectionError, match="LOGICAL_AND only supports boolean"):
        popops.reduce(g, t, [1], popops.Operation.LOGICAL_AND, prog)


def test_bad_input_names_the_operands():
    dev, g, prog = setup(2)
    a = variable(g, np.zeros((2, 3)), "alpha")
    b = variable(g, np.zeros((3, 2)), "beta")
    with pytest.raises(ipu.IpuError, match=r"'alpha' \(2, 3\) and 'beta' \(3, 2\)"):
        popops.add(g, a, b, prog)
    loose = g.add_variable(ipu.FLOAT, [2, 3], "loose")
    with pytest.raises(ipu.TileMappingError, match="'loose'"):
        popops.add(g, a, loose, prog)
    with pytest.raises(ipu.IpuError, match="'alpha' of shape \\(2, 3\\) over dimension 2"):
        popops.reduce(g, a, [2], "ADD", prog)
    n = variable(g, np.zeros((2, 3)), "n", dtype=ipu.INT)
    with pytest.raises(ipu.GraphConnectionError, match="'alpha'.*'n'"):
        popops.add(g, a, n, prog)


def test_zero_size_operands_give_empty_results_without_compute_sets():
    dev, g, prog = setup(3)
    a, b = variable(g, np.zeros((0, 3)), "a"), variable(g, np.zeros((0, 3)), "b")
    row = variable(g, [1, 2, 3], "row")
    outs = {"add": popops.add(g, a, b, prog), "bias": popops.add(g, a, row, prog),
            "exp": popops.exp(g, a, prog), "r1": popops.reduce(g, a, [1], "ADD", prog)}
    popops.add_in_place(g, a, b, prog)
    popops.scaled_add_to(g, a, a, 2.0, prog)
    popops.zero(g, b, prog)
    got, eng = run(dev, g, prog, **outs)
    x = np.zeros((0, 3), np.float32)
    want = {"add": x + x, "bias": x + [1, 2, 3], "exp": np.exp(x), "r1": x.sum(1)}
    for k, w in want.items():
        assert got[k].shape == w.shape, k
    assert [s.kind for s in eng.trace.steps if s.kind in ("compute", "copy")] == []
    with pytest.raises(ipu.IpuError, match=r"reduce ADD: tensor 'a' \(0, 3\) has no elements"):
        popops.reduce(g, a, [0], "ADD", prog)


@pytest.mark.parametrize("linear", [True, False])
def test_in_place_ops_copy_an_operand_that_aliases_the_output(linear):
    dev, g, prog = setup(3)
    x0 = np.arange(1, 8, dtype=np.float32)
    x, y, z, q = (variable(g, x0, n, linear=linear) for n in "xyzq")
    t0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = variable(g, t0, "t", linear=linear)
    popops.add_in_place(g, x, x, prog)  # x += x
    popops.scaled_add_to(g, y, y, 2.0, prog)  # y += 2 y
    popops.add_in_place(g, z[1:], z[:-1], prog)  # overlapping views
    popops.scaled_add_to(g, q, y, q[2:3], prog)  # the scale is an output element
    popops.reduce_with_output(g, t, t[0], [0], "ADD", prog, "sum", update=True)
    got, eng = run(dev, g, prog, x=x, y=y, z=z, q=q, t=t)
    z_want, t_want = x0.copy(), t0.copy()
    z_want[1:] += z_want[:-1]  # NumPy buffers overlapping operands too
    t_want[0] += t0.sum(0)
    np.testing.assert_array_equal(got["x"], 2 * x0)
    np.testing.assert_array_equal(got["y"], 3 * x0)
    np.testing.assert_array_equal(got["z"], z_want)
    np.testing.assert_array_equal(got["q"], x0 + x0[2] * 3 * x0)
    np.testing.assert_array_equal(got["t"], t_want)
    copies = [s.name for s in eng.trace.steps if s.kind == "copy"]
    assert copies == ["Copy x -> addInPlace/x copy", "Copy y -> scaledAddTo/y copy",
                      "Copy z[:-1] -> addInPlace/z[:-1] copy",
                      "Copy q[2:3].reshape([1]) -> scaledAddTo/q[2:3].reshape([1]) copy",
                      "Copy t -> sum/t copy"]


def test_interleaved_views_that_share_no_element_are_not_copied():
    dev, g, prog = setup(2)
    x0 = np.arange(8, dtype=np.float32)
    x = variable(g, x0, "x")
    pairs = x.reshape([4, 2]).transpose()
    evens, odds = pairs[0], pairs[1]  # their ranges overlap, their elements do not
    popops.add_in_place(g, evens, odds, prog)
    got, eng = run(dev, g, prog, x=x)
    want = x0.copy()
    want[0::2] += x0[1::2]
    np.testing.assert_array_equal(got["x"], want)
    assert [s.kind for s in eng.trace.steps if s.kind == "copy"] == []


@settings(max_examples=50, deadline=None)
@given(a=st.lists(st.integers(0, 40), max_size=12), b=st.lists(st.integers(0, 40), max_size=12))
def test_shares_elements_matches_numpy_intersect(a, b):
    a, b = np.array(a, np.int64), np.array(b, np.int64)
    assert popops._shares_elements(a, b) == (np.intersect1d(a, b).size > 0)


class PlainAdd(ipu.Vertex):
    """A plain (one-worker) vertex with the fields of popops' add."""

    in1 = ipu.Input(ipu.Vector(ipu.FLOAT))
    in2 = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = self.in1 + self.in2


@settings(max_examples=30, deadline=None)
@given(items=st.integers(1, 60), k=st.integers(1, 3), tiles=st.sampled_from([1, 2, 5]),
       sorted_tiles=st.booleans(), seed=st.integers(0, 100), multi=st.booleans())
def test_per_tile_vertices_take_each_row_once_on_its_tile(items, k, tiles, sorted_tiles, seed,
                                                          multi):
    # a vertex gets rows of one tile: one MultiVertex per tile that has rows, or at most 6
    # plain vertices per tile; every row goes to exactly one vertex, with the same rows of
    # every field
    _, g, _ = setup(tiles)
    rng = np.random.default_rng(seed)
    item_tiles = rng.integers(0, tiles, items)
    if sorted_tiles:
        item_tiles.sort()
    a = g.add_variable(ipu.FLOAT, [items, k], "a")
    b = g.add_variable(ipu.FLOAT, [k, items], "b")  # its transpose: rows k apart
    cs = g.add_compute_set("cs")
    first = len(g.v_cs)
    cls = popops.map_vertex(_1 + _2, [np.dtype("float32")] * 2, np.dtype("float32"),
                            False) if multi else PlainAdd
    assert issubclass(cls, ipu.MultiVertex) == multi
    count = popops.add_per_tile_vertices(
        g, cs, cls, {"in1": a, "in2": b.transpose(), "out": a}, item_tiles)
    assert count == len(g.v_cs) - first
    seen = []
    for vid in range(first, len(g.v_cs)):
        conn = g.v_conn[vid]
        rows = conn["in1"].idx.reshape(-1, k)[:, 0] // k  # a's rows, by their addresses
        assert (item_tiles[rows] == g.v_tile[vid]).all()
        assert np.array_equal(conn["in2"].idx.reshape(-1), b.transpose().idx[rows].reshape(-1))
        seen.extend(rows.tolist())
    assert sorted(seen) == list(range(items))
    per_tile = np.bincount(g.v_tile[first:], minlength=tiles)
    if multi:
        assert (per_tile == (np.bincount(item_tiles, minlength=tiles) > 0)).all()
    else:
        assert per_tile.max() <= g.target.num_worker_contexts


@pytest.mark.parametrize("multi", [True, False])
@pytest.mark.parametrize("virtual", [False, True])
def test_per_tile_vertices_equal_one_add_vertex_each(virtual, multi):
    # the bulk path (one checked add_vertex, the rest at once) gives the vertices,
    # connections and tiles that one add_vertex per vertex gives, on a virtual graph too
    graphs = []
    for bulk in (True, False):
        dev = ipu.IPUModel(num_ipus=2, tiles_per_ipu=4).create_device()
        root = ipu.Graph(dev.target)
        g = root.create_virtual_graph(4, 8) if virtual else root
        a = g.add_variable(ipu.FLOAT, [40, 3], "a")
        out = g.add_variable(ipu.FLOAT, [40, 3], "out")
        tiles = np.random.default_rng(1).integers(0, 4, 40)
        cs = g.add_compute_set("cs")
        cls = popops.map_vertex(_1 * 2, [ipu.FLOAT], ipu.FLOAT, False) if multi else PlainTwice
        if bulk:
            popops.add_per_tile_vertices(g, cs, cls, {"in1": a, "out": out}, tiles, grain=2)
        else:  # the reference: one checked add_vertex per vertex, in the same order
            for tile, rows in _per_tile_rows(tiles, 2, g.target.num_worker_contexts, multi):
                g.add_vertex(cs, cls, {name: ipu.Tensor(root, t.dtype, t.idx[rows].reshape(-1),
                                                        t.name)
                                       for name, t in (("in1", a), ("out", out))}, tile=tile)
        graphs.append(root)
    bulk, each = graphs
    assert bulk.v_tile == each.v_tile and bulk.v_cls == each.v_cls
    assert min(bulk.v_tile) >= (4 if virtual else 0)
    assert [{f: t.idx.reshape(-1).tolist() for f, t in c.items()} for c in bulk.v_conn] == \
        [{f: t.idx.reshape(-1).tolist() for f, t in c.items()} for c in each.v_conn]
    assert bulk.v_perf == each.v_perf and bulk.v_state == each.v_state


class PlainTwice(ipu.Vertex):
    in1 = ipu.Input(ipu.Vector(ipu.FLOAT))
    out = ipu.Output(ipu.Vector(ipu.FLOAT))

    def compute(self):
        self.out[...] = 2 * self.in1


def _per_tile_rows(tiles, grain, workers, multi):
    order = np.argsort(tiles, kind="stable")
    for tile in np.unique(tiles).tolist():
        rows = order[tiles[order] == tile]
        pieces = [(0, rows.size)] if multi else poputil.split_regions(rows.size, grain, workers)
        for b, e in pieces:
            yield tile, rows[b:e]


def test_per_tile_vertices_on_a_tile_out_of_range_or_unmapped_elements_raise():
    _, g, prog = setup(3)
    a = g.add_variable(ipu.FLOAT, [6], "a")
    cs = g.add_compute_set("cs")
    cls = popops.map_vertex(_1 * 2, [ipu.FLOAT], ipu.FLOAT, True)
    with pytest.raises(ipu.IpuError, match="tile 7"):
        popops.add_per_tile_vertices(g, cs, cls, {"in1": a}, np.array([0, 0, 1, 1, 2, 7]))
    with pytest.raises(ipu.TileMappingError, match="'b'"):
        poputil._map_elements(g, g.add_variable(ipu.FLOAT, [3], "b"), np.array([0, -1, 1]))
    with pytest.raises(ipu.TileMappingError, match="tile 3"):  # the graph has tiles 0..2
        poputil._map_elements(g, g.add_variable(ipu.FLOAT, [3], "c"), np.array([0, 3, 1]))
    other = ipu.Graph(g.target)
    with pytest.raises(ipu.TileMappingError, match="another graph"):
        poputil._map_elements(g, other.add_variable(ipu.FLOAT, [3], "d"), np.array([0, 1, 2]))


@settings(max_examples=25, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=5), seed=st.integers(0, 99))
def test_add_is_one_multivertex_per_tile_with_the_cycles_of_one_vertex_per_worker(counts,
                                                                                  seed):
    # tile t holds counts[t] elements of a and b: one vertex there (none on an empty tile),
    # whose 6 workers take split_regions(e, 2, 6) pieces; a piece of s elements costs
    # 10 + 3s (two read, one written) and the tile 6 x its heaviest piece; out = a + b
    n = sum(counts)
    if n == 0:
        return
    dev, g, prog = setup(len(counts))
    ends = np.cumsum(counts).tolist()
    mapping = [[(e - c, e)] if c else [] for c, e in zip(counts, ends)]
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(2, n)).astype(np.float32)
    a, b = variable(g, x, "a", linear=False), variable(g, y, "b", linear=False)
    for t in (a, b):
        poputil.set_tile_mapping(g, t, mapping)
    first = len(g.v_cs)
    c = popops.add(g, a, b, prog, "add")
    assert np.bincount(g.v_tile[first:], minlength=len(counts)).tolist() == \
        [int(k > 0) for k in counts]
    assert all(issubclass(cls, ipu.MultiVertex) for cls in g.v_cls[first:])
    got, eng = run(dev, g, prog, c=c)
    np.testing.assert_array_equal(got["c"], x + y)
    step = next(s for s in eng.executable.steps if s.kind == "compute")
    want = [6 * (10 + 3 * max(e - s for s, e in poputil.split_regions(k, 2, 6))) if k else 0
            for k in counts]
    assert step.tile_compute_cycles.tolist() == want


@pytest.mark.parametrize("rows, k", [(1, 5), (7, 3), (13, 1)])
def test_reduce_multivertex_estimate_is_workers_times_the_heaviest_share_of_outputs(rows, k):
    # a Reduce's workers share its outputs (each with its k partials): split_regions(rows,
    # 1, 6) pieces; a piece of s outputs costs 10 + s * (k + 1)
    cls = popops.reduce_vertex("ADD", ipu.FLOAT, ipu.FLOAT, False)
    assert issubclass(cls, ipu.MultiVertex)
    heaviest = max(e - s for s, e in poputil.split_regions(rows, 1, 6))
    assert cls.cycle_estimate({"partials": rows * k, "out": rows}) == \
        6 * (10 + heaviest * (k + 1))
    assert not issubclass(popops.reduce_vertex("ADD", ipu.FLOAT, ipu.FLOAT, False, False),
                          ipu.MultiVertex)


def test_multivertex_estimate_uses_the_targets_worker_count():
    """A MultiVertex's work is split over the target's workers, not always 6: 40 floats on
    a tile of a 4-worker target are 4 pieces of 10 (split_regions, grain 2); each worker
    reads 2 x 10 and writes 10 elements, so the tile is busy 4 x (10 + 30) = 160 cycles."""
    import dataclasses

    dev = ipu.IPUModel(tiles_per_ipu=2).create_device()
    g = ipu.Graph(dataclasses.replace(dev.target, num_worker_contexts=4))
    a, b = (g.add_variable(ipu.FLOAT, [40], n) for n in "ab")
    g.set_tile_mapping(a, 0)
    g.set_tile_mapping(b, 0)
    prog = ipu.Sequence()
    popops.add(g, a, b, prog)
    (step,) = [s for s in ipu.Engine(g, prog).executable.steps if s.kind == "compute"]
    assert step.tile_compute_cycles.tolist() == [4 * (10 + 3 * 10), 0]


def test_vertex_addresses_of_a_run_are_read_only_views(monkeypatch):
    """add_per_tile_vertices gives a variable's vertices views of one kept arange (past
    KEEP_IOTA addresses, arrays of their own): the addresses they would have had."""
    monkeypatch.setattr(popops, "KEEP_IOTA", 64)
    for start, n in ((0, 5), (7, 40), (60, 4), (70, 3), (0, 0)):
        idx = popops._iota(start, n)
        assert idx.dtype == np.int64 and np.array_equal(idx, np.arange(start, start + n))
        assert not idx.flags.writeable or start + n > 64
    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=4).create_device().target)
    v = g.add_variable(ipu.FLOAT, [100], "v")
    poputil.map_tensor_linearly(g, v, 1, 1)
    popops.zero(g, v, ipu.Sequence())
    fields = [conn["in1"] for conn in g.v_conn]
    assert np.array_equal(np.concatenate([t.idx for t in fields]), v.idx)


# poplibs include/popops/Reduce.hpp: reduceWithOutput reduces into a given tensor (with
# update, adds to it); here a slice of a bigger variable, whose other elements stay
@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       tiles=st.sampled_from([1, 2, 3, 7]), update=st.booleans(), linear=st.booleans(),
       data=st.data())
def test_reduce_with_output_writes_its_slice_only(shape, tiles, update, linear, data):
    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1))
    x = np.random.default_rng(len(shape)).uniform(0.5, 1.5, shape).astype(np.float32)
    want = x.sum(axis=tuple(dims))
    dev, g, prog = setup(tiles)
    t = variable(g, x, "t", linear=linear)
    big = variable(g, np.full(want.size + 2, 7.0), "big", linear=not linear)
    out = big[1:1 + want.size].reshape(list(want.shape))
    popops.reduce_with_output(g, t, out, dims, "ADD", prog, "sum", update=update)
    got, _ = run(dev, g, prog, big=big)
    np.testing.assert_allclose(got["big"][1:-1], want.ravel() + 7.0 * update, rtol=1e-5)
    np.testing.assert_array_equal(got["big"][[0, -1]], 7.0)


def test_reduce_with_output_checks_its_output():
    dev, g, prog = setup(2)
    t = variable(g, np.ones((2, 3)), "t")
    with pytest.raises(ipu.IpuError, match=r"output 'short' \(3,\) does not match the "
                                           r"reduced shape \(2,\) of 't' \(2, 3\)"):
        popops.reduce_with_output(g, t, variable(g, np.zeros(3), "short"), [1], "ADD", prog)
    with pytest.raises(ipu.GraphConnectionError,
                       match="output 'ints' is int but 't' is float; the output must be of "
                             "the input's type"):
        popops.reduce_with_output(g, t, variable(g, np.zeros(2), "ints", dtype=ipu.INT), [1],
                                  "ADD", prog)
    loose = g.add_variable(ipu.FLOAT, [2], "loose")
    with pytest.raises(ipu.TileMappingError, match="output 'loose'"):
        popops.reduce_with_output(g, t, loose, [1], "ADD", prog)
    g.set_tile_mapping(loose, 0)
    with pytest.raises(ipu.IpuError, match=r"output 'loose.*' \(2,\) is not parallel"):
        popops.reduce_with_output(g, t, loose[:1].broadcast([2]), [1], "ADD", prog)
    half = variable(g, np.zeros(2), "half", dtype=ipu.HALF)  # float into half: allowed
    popops.reduce_with_output(g, t, half, [1], "ADD", prog)
    got, _ = run(dev, g, prog, half=half)
    np.testing.assert_array_equal(got["half"], [3, 3])


# -- one MultiVertex on a tile of one contiguous region, else 2D vertices ---------------------
# poplibs lib/popops/ElementWise.cpp: binaryOpGeneral ("Single contiguous region, use
# MultiVertex ("1D")", else popops::BinaryOp2D vertices from splitRegionsBetweenWorkers),
# unaryOp (UnaryOp1D / UnaryOp2D, the same test), createVertexBinaryOpBroadcastScalar
# (BroadcastScalar1D / BroadcastScalar2DData); lib/popops/codelets/elemwiseBinaryCodelets.cpp:
# BinaryOp1D is a MultiVertex, BinaryOp2D a Vertex.
REGIONS = [[(0, 8)], [(8, 12), (16, 20)], [(12, 16), (20, 24)]]  # tile 0 one region, 1-2 two


def _by_tile(g, first):
    """{tile: [(vertex class name, MultiVertex?, elements of its first field)]}"""
    seen = {}
    for vid in range(first, len(g.v_cs)):
        cls = g.v_cls[vid]
        n = next(iter(g.v_conn[vid].values())).num_elements()
        seen.setdefault(g.v_tile[vid], []).append(
            (cls.__name__, issubclass(cls, ipu.MultiVertex), n))
    return seen


@pytest.mark.parametrize("op, name, want", [
    (lambda g, a, b, p: popops.add(g, a, b, p), "BinaryOp{}<ADD,float>", lambda x, y: x + y),
    (lambda g, a, b, p: popops.mul_in_place(g, a, b, p), "BinaryOp{}InPlace<MULTIPLY,float>",
     lambda x, y: x * y),
    (lambda g, a, b, p: popops.exp(g, a, p), "UnaryOp{}<EXPONENT,float>",
     lambda x, y: np.exp(x)),
    (lambda g, a, b, p: popops.inv_in_place(g, a, p), "UnaryOp{}InPlace<INVERSE,float>",
     lambda x, y: 1 / x),
    (lambda g, a, b, p: popops.sub(g, a, 0.5, p), "BroadcastScalar{}<SUBTRACT,float>",
     lambda x, y: x - 0.5)])
def test_a_tile_of_one_region_gets_a_multivertex_and_other_tiles_2d_vertices(op, name, want):
    dev, g, prog = setup(3)
    x = np.linspace(0.5, 3, 24, dtype=np.float32)
    a, b = variable(g, x, "a", linear=False), variable(g, x[::-1].copy(), "b", linear=False)
    for t in (a, b):
        poputil.set_tile_mapping(g, t, REGIONS)
    first = len(g.v_cs)
    out = op(g, a, b, prog)
    seen = _by_tile(g, first)
    one, two = name.format("1D"), name.format("2D").replace("Scalar2D", "Scalar2DData")
    assert seen[0] == [("popops::" + one, True, 8)]
    for tile in (1, 2):  # 8 elements in two regions: 2 vertices of 2 grains (at least 2)
        assert seen[tile] == [("popops::" + two, False, 4)] * 2
    got, _ = run(dev, g, prog, out=a if out is None else out)
    np.testing.assert_allclose(got["out"], want(x, x[::-1]), rtol=1e-6)


def test_regions_are_counted_in_address_order():
    # an in-place op on a transposed view: tile 0 holds a's rows 0-1, whose addresses form
    # one region whatever the view's order (PopLibs reorders the output to simplify it,
    # graph.reorderToSimplify, before getSortedContiguousRegions); tile 1 holds rows 2 and
    # 4 (two regions), tile 2 row 3 and 5
    dev, g, prog = setup(3)
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    a = variable(g, x, "a", linear=False)
    poputil.set_tile_mapping(g, a, [[(0, 8)], [(8, 12), (16, 20)], [(12, 16), (20, 24)]])
    assert popops.regions_per_tile(g, a.transpose(),
                                   poputil.tile_of_elements(g, a.transpose())).tolist() == \
        [1, 2, 2]
    first = len(g.v_cs)
    popops.add_in_place(g, a.transpose(), 1.0, prog)
    seen = _by_tile(g, first)
    assert [c for c, _, _ in seen[0]] == ["popops::BroadcastScalar1DInPlace<ADD,float>"]
    assert {c for c, _, _ in seen[1]} == {"popops::BroadcastScalar2DDataInPlace<ADD,float>"}
    got, _ = run(dev, g, prog, a=a)
    np.testing.assert_array_equal(got["a"], x + 1)


@pytest.mark.parametrize("tiles", [1, 4])  # one stage; rows over two tiles: partials
def test_half_reduced_into_float_adds_in_float(tiles):
    # 40 halves of 3000 sum to 120,000, past half's largest value (65,504): a float output
    # takes the float sum, as PopLibs accumulates half in float (softmax's sums do this)
    dev, g, prog = setup(tiles)
    x = np.full((2, 40), 3000, np.float16)
    t = variable(g, x, "x", dtype=ipu.HALF)
    s = popops.reduce(g, t, [1], popops.Operation.ADD, prog, out_type=ipu.FLOAT)
    got, _ = run(dev, g, prog, s=s)
    np.testing.assert_array_equal(got["s"], [120_000.0, 120_000.0])


@pytest.mark.parametrize("n, want", [(20, [4] * 5), (6, [6]), (3, [3]), (2, [2]),
                                     (8, [4, 4]), (30, [6] * 5), (40, [8] * 5),
                                     (50, [10] * 5), (26, [4, 6, 4, 6, 6])])
def test_2d_vertices_are_cut_as_poplibs_split_regions_between_workers(n, want):
    # poplibs lib/poputil/Util.cpp splitRegions(regions, grain 2, 6 workers, min 2 grains),
    # worked by hand: grains G = ceil(n/2); per vertex max(ceil(G/6), ceil(G/max(1, G//2)))
    # grains; vertex v takes grains [v*G//V, (v+1)*G//V) of V = ceil(G/that) vertices.
    # n = 20: G = 10, 2 grains a vertex, 5 vertices of 4; n = 6: G = 3, at least 2 grains
    # a vertex (3 // 2 = 1 vertex at most): one vertex; n = 50: G = 25, max(5, 3) = 5
    # grains a vertex, 5 vertices of 10; n = 26: G = 13, 3 grains a vertex, ceil(13 / 3) =
    # 5 vertices, cut at grains 0, 2, 5, 7, 10, 13: 4, 6, 4, 6 and 6 elements.
    dev, g, prog = setup(2)
    a = g.add_variable(ipu.FLOAT, [2 * n], "a")
    poputil.set_tile_mapping(g, a, [[(0, n // 2), (n, n + n - n // 2)],
                                    [(n // 2, n), (n + n - n // 2, 2 * n)]])
    first = len(g.v_cs)
    popops.exp(g, a, prog)
    on_tile_0 = [c["in1"].num_elements() for c, t in zip(g.v_conn[first:], g.v_tile[first:])
                 if t == 0]
    assert on_tile_0 == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.lists(st.integers(0, 50), min_size=0, max_size=9),  # any addresses
    st.tuples(st.integers(0, 30), st.integers(1, 4), st.integers(1, 5), st.integers(0, 20),
              st.integers(0, 2))),  # a region: offset, runs, run length, gap, step
    min_size=1, max_size=6))
def test_vertex_addresses_become_regions_only_where_they_are_one(chunks):
    # add_per_tile_vertices connects each vertex to a region (offset, shape, strides) where
    # its addresses are one, in the same order, else to its index view
    from ipukit.poplibs.popops import _regions
    from ipukit.tensor import addresses

    parts = [np.array(c, np.int64) if isinstance(c, list) else
             addresses(c[0], (c[1], c[2]), (c[3], c[4])).reshape(-1) for c in chunks]
    n = np.array([p.size for p in parts])
    hi = np.cumsum(n)
    for c, part, layout in zip(chunks, parts, _regions(np.concatenate(parts), hi - n, hi)):
        if isinstance(layout, np.ndarray):
            assert np.array_equal(layout, part)
            assert isinstance(c, list)  # a region is always found
        else:
            assert min(layout[2]) >= 0 and np.array_equal(addresses(*layout).reshape(-1), part)
    assert _regions(np.arange(10, 20), np.array([0, 5]), np.array([5, 10])) == [
        (10, (5,), (1,)), (15, (5,), (1,))]  # runs: 1-D regions
    assert _regions(np.array([3, 3, 3, 4, 4, 4]), np.array([0]), np.array([6])) == [
        (3, (2, 3), (1, 0))]  # a broadcast row


def _region_of(part):
    """The region (offset, shape, strides >= 0) whose addresses are ``part``, in order, its
    runs as long as they go (by trying every run length), or None."""
    from ipukit.tensor import addresses

    n, a = part.size, int(part[0])
    s = int(part[1] - part[0]) if n > 1 else 1
    if s >= 0 and (np.diff(part) == s).all():
        return (a, (n,), (s,))
    for run in range(2, n):
        gap = int(part[run % n] - a)
        if n % run == 0 and s >= 0 and gap >= 0 and np.array_equal(
                addresses(a, (n // run, run), (gap, s)).reshape(-1), part):
            return (a, (n // run, run), (gap, s))
    return None


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 24), st.integers(1, 64), st.integers(1, 4), st.integers(-2, 40),
       st.integers(-1, 3), st.data())
def test_regions_of_many_and_of_alike_pieces_are_those_of_each_piece(pieces, n, runs, gap,
                                                                     step, data):
    # _regions' three ways (a few addresses in Python, pieces of one size as rows, any
    # pieces by NumPy) give each piece its one region, else its addresses
    from ipukit.poplibs.popops import _regions

    run = max(1, n // runs)
    n = run * runs
    parts = []
    for _ in range(pieces):  # one pattern at shifted offsets (a tile's each), some spoilt
        offset = data.draw(st.integers(0, 5000))
        part = offset + np.add.outer(np.arange(runs) * gap, np.arange(run) * step).reshape(-1)
        if data.draw(st.integers(0, 4)) == 0:
            part[data.draw(st.integers(0, n - 1))] += data.draw(st.integers(-3, 3))
        parts.append(part.astype(np.intp))
    if data.draw(st.booleans()):  # pieces of sizes of their own
        parts.append(np.arange(data.draw(st.integers(1, 40)), dtype=np.intp) * 3)
    size = np.array([p.size for p in parts])
    hi = np.cumsum(size)
    for part, layout in zip(parts, _regions(np.concatenate(parts), hi - size, hi)):
        want = _region_of(part)
        if want is None:
            assert isinstance(layout, np.ndarray) and np.array_equal(layout, part)
        else:
            assert layout == want and all(type(x) is int for x in (layout[0], *layout[1],
                                                                   *layout[2]))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(1, 6), st.integers(1, 5), st.integers(0, 12),
       st.integers(0, 2), st.data())
def test_a_2d_vertex_takes_its_share_of_a_tiles_rows_as_a_few_regions(offset, rows, n, extra,
                                                                      step, data):
    # the elements [a, b) of a tile's block of rows (R runs of L, S apart) are part of a
    # row, whole rows and part of a row (PopLibs' splitRegions cuts by elements), in order
    from ipukit.poplibs.popops import _cut_rows
    from ipukit.tensor import addresses

    gap = n * max(step, 1) + extra
    for block in ((offset, (rows, n), (gap, step)), (offset, (rows * n,), (step,))):
        flat = addresses(*block).reshape(-1)
        a = data.draw(st.integers(0, flat.size - 1))
        b = data.draw(st.integers(a + 1, flat.size))
        cut = _cut_rows(block, a, b)
        parts = cut if isinstance(cut, list) else [cut]
        assert 1 <= len(parts) <= 3 and all(min(r[2]) >= 0 for r in parts)
        assert np.array_equal(np.concatenate([addresses(*r).reshape(-1) for r in parts]),
                              flat[a:b])
        inside = a // n == (b - 1) // n or not (a % n or b % n)  # one row, or whole rows
        assert isinstance(cut, tuple) == (inside or len(block[1]) == 1)
    assert _cut_rows(np.arange(3), 0, 2) is None  # no block: the vertex's own addresses


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.integers(0, 50),
       st.integers(1, 3))
def test_a_runs_blocks_from_its_pieces_are_the_regions_of_its_addresses(tiles, start, w):
    # a field that is one run of storage (w elements an item from start), its items on
    # tiles out of order: each tile's block, worked out from the runs of items on one
    # tile (R runs of L, S apart), is the region _regions finds in the tile's addresses;
    # None (then every address is looked at, as before) where some tile's are not such runs
    from ipukit.poplibs.popops import _regions, _run_blocks, _tile_pieces

    tiles = np.array(tiles)
    order = np.argsort(tiles, kind="stable")
    counts = np.bincount(tiles)
    ends = np.cumsum(counts[counts > 0])
    idx = (start + np.arange(tiles.size * w).reshape(-1, w))[order].reshape(-1)
    want = _regions(idx, (ends - counts[counts > 0]) * w, ends * w)
    got = _run_blocks(start, w, *_tile_pieces(tiles))
    if got is not None:
        assert all(type(x) is tuple for x in want) and got == want
    assert _run_blocks(0, 1, *_tile_pieces(np.array([0, 1, 0, 1, 1]))) is None  # 1, 2: no
    tiles = np.array([0, 0, 1, 1, 0, 0, 1, 1])  # 2 columns a tile, 2 elements an item
    assert _run_blocks(5, 2, *_tile_pieces(tiles)) == [(5, (2, 4), (8, 1)), (9, (2, 4), (8, 1))]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([-3, 0, 1, 2, 3, 5, 8, 16])),
                min_size=1, max_size=4), st.data())
def test_a_regions_rows_from_its_strides_are_the_regions_of_its_addresses(dims, data):
    # a field that is a region but no run (a matmul's partials seen as (outputs, pieces)):
    # each tile's rows as worked out from its strides are the regions _regions finds in
    # their addresses; None (every address looked at, as before) where a stride is < 0
    from ipukit.poplibs.popops import _regions, _row_blocks

    _, g, _ = setup(4)
    shape, strides = tuple(n for n, _ in dims), tuple(s for _, s in dims)
    t = ipu.Tensor(g, ipu.FLOAT, (40, shape, strides), "t")
    n = t.num_elements()
    items = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    cuts = data.draw(st.lists(st.integers(1, max(items - 1, 1)), unique=True, max_size=4))
    starts = [0] + sorted(c for c in cuts if c < items)
    ends = starts[1:] + [items]
    got = _row_blocks(t, items, n // items, starts, ends)
    want = _regions(t.idx.reshape(-1), np.array(starts) * (n // items),
                    np.array(ends) * (n // items))
    if got is None:
        assert min(ipu.tensor.reshape_strides(shape, strides, (items, n // items))
                   or [-1]) < 0
    else:
        assert all(type(x) is tuple for x in want) and got == want


def test_in_order_tiles_give_each_tile_one_vertex_of_its_run():
    # tiles in order: each tile's items counted from their runs (not a bincount of every
    # item): one MultiVertex a tile with items, holding that tile's run of the field
    _, g, _ = setup(8)
    v = g.add_variable(ipu.FLOAT, [40], "v")
    tiles = np.repeat([1, 2, 5, 6], [7, 13, 10, 10])
    poputil._map_elements(g, v, tiles)
    cs = g.add_compute_set("cs")
    cls = popops.map_vertex(_1 * 2, [ipu.FLOAT], ipu.FLOAT, True)
    assert popops.add_per_tile_vertices(g, cs, cls, {"in1": v}, tiles) == 4
    got = [(g.v_tile[i], g.v_conn[i]["in1"].offset, g.v_conn[i]["in1"].shape)
           for i in range(len(g.v_tile))]
    assert got == [(1, 0, (7,)), (2, 7, (13,)), (5, 20, (10,)), (6, 30, (10,))]


def test_2d_vertices_of_a_column_block_hold_regions_and_compute_the_same():
    # a [8, 12] tensor mapped 3 columns a tile: each tile holds 8 regions of 3, its 2D
    # vertices' shares (split_regions, grain 2) start and end inside a row: each field is a
    # RegionList (no address array kept), and the result is NumPy's
    from ipukit.tensor import RegionList

    dev, g, prog = setup(4)
    x = g.add_variable(ipu.FLOAT, [8, 12], "x")
    for t in range(4):
        g.set_tile_mapping(x.slice([0, 3 * t], [8, 3 * t + 3]), t)
    first = len(g.v_cs)
    y = popops.map(g, Exp(_1) - _1 * _2, [x, x], prog)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    fields = [f for c in g.v_conn[first:] for f in c.values()]
    assert any(isinstance(f, RegionList) for f in fields)
    assert all(f._idx is None for f in fields if not isinstance(f, RegionList))
    values = np.linspace(-1, 1, 96, dtype=np.float32).reshape(8, 12)
    eng = ipu.Engine(g, prog)
    eng.load(dev)
    eng.write_tensor("x", values)
    eng.run()
    np.testing.assert_allclose(eng.read_tensor("y"), np.exp(values) - values * values,
                               rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 40), st.integers(1, 3), st.data())
def test_a_reductions_consecutive_positions_are_a_region_of_the_same_addresses(n, step, data):
    # popops._take: poputil.take's addresses and name; consecutive positions of a flat
    # region as a region of it (no address array), any others as take gives them
    from ipukit.poplibs.popops import _take

    g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=2).create_device().target)
    v = g.add_variable(ipu.FLOAT, [n, step], "v")
    t = v.slice(0, 1, dim=1).flatten() if step > 1 else v.flatten()  # a strided flat region
    first = data.draw(st.integers(0, n - 1))
    rows = data.draw(st.integers(1, n - first))
    cols = data.draw(st.sampled_from([d for d in range(1, rows + 1) if rows % d == 0]))
    positions = first + np.arange(rows).reshape(rows // cols, cols)
    if data.draw(st.booleans()):
        positions = positions.reshape(-1)
    if data.draw(st.booleans()) and positions.size > 1:  # not consecutive
        positions = positions[::-1].copy()
    got, want = _take(t, positions, "p"), poputil.take(t, positions, "p")
    assert np.array_equal(got.idx, want.idx) and got.shape == want.shape
    assert got.name == want.name == "p"
    assert (got._idx is None) == bool((np.diff(positions.reshape(-1)) == 1).all())


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 9), st.integers(1, 12), st.randoms(use_true_random=False))
def test_tile_twice_finds_a_row_holding_one_tile_twice(m, k, spread, rng):
    """Both of _tile_twice's ways (a column against those after it, each row sorted) answer
    as a count of each row's distinct tiles does."""
    tiles = np.array([[rng.randrange(spread) for _ in range(k)] for _ in range(m)])
    want = any(len(set(row)) < k for row in tiles.tolist())
    assert popops._tile_twice(tiles) == want


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(0, 5)), min_size=1, max_size=6),
       st.booleans())
def test_per_tile_vertices_of_tile_runs_are_those_of_a_tile_per_item(pieces, plain):
    """add_per_tile_vertices given each run of items' tile (``items``: poputil.tile_runs)
    adds the vertices a tile per item gives: same classes, tiles and connected addresses,
    runs in tile order or not."""
    tiles = np.repeat([t for _, t in pieces], [n for n, _ in pieces])
    added = []
    for per_run in (False, True):
        g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=6).create_device().target)
        v = g.add_variable(ipu.FLOAT, [tiles.size], "v")
        poputil._map_elements(g, v, tiles)
        cls = popops.map_vertex(_1 * 2, [ipu.FLOAT], ipu.FLOAT, True, multi=not plain)
        cs = g.add_compute_set("cs")
        if per_run:
            first, on = poputil.tile_runs(g, v)
            popops.add_per_tile_vertices(g, cs, cls, {"in1": v}, on, first=first,
                                         items=tiles.size)
        else:
            popops.add_per_tile_vertices(g, cs, cls, {"in1": v}, tiles)
        added.append([(c.__name__, t, conn["in1"].idx.reshape(-1).tolist())
                      for c, t, conn in zip(g.v_cls, g.v_tile, g.v_conn)])
    assert added[0] == added[1]
    assert sorted(a for _, _, x in added[0] for a in x) == list(range(tiles.size))


def _layout(t):
    """A vertex field's addresses as the graph keeps them: regions, or an address array."""
    if isinstance(t, ipu.tensor.RegionList):
        return ("regions", t.regions)
    idx = None if t._idx is None else t._idx.tolist()
    return (t.offset, t.shape, t.strides, idx)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(1, 3),
       st.booleans(), st.randoms(use_true_random=False))
def test_per_tile_vertices_of_items_in_tile_order_are_those_of_items_in_any_order(
        tiles, width, plain, rnd):
    """A two-stage reduction's first stage passes its pairs in tile order (a stable sort by
    tile): add_per_tile_vertices then adds the vertices, with the same fields (addresses
    from poputil.take, as the stage's), that it adds given the pairs in any order."""
    tiles = np.array(tiles)
    src = list(range(tiles.size * width))
    rnd.shuffle(src)
    positions = np.array(src).reshape(tiles.size, width)
    added = []
    for in_tile_order in (False, True):
        g = ipu.Graph(ipu.IPUModel(tiles_per_ipu=6).create_device().target)
        v = g.add_variable(ipu.FLOAT, [positions.size], "v")
        out = g.add_variable(ipu.FLOAT, [tiles.size], "out")
        for t in (v, out):
            poputil.map_tensor_linearly(g, t)
        cls = popops.reduce_vertex("ADD", ipu.FLOAT, ipu.FLOAT, False, multi=not plain)
        sel = np.arange(tiles.size)
        if in_tile_order:
            sel = np.argsort(tiles, kind="stable")
        fields = {"partials": poputil.take(v, positions[sel], "v"),
                  "out": poputil.take(out, sel, "out")}
        popops.add_per_tile_vertices(g, g.add_compute_set("cs"), cls, fields, tiles[sel])
        added.append([(c.__name__, t, {k: _layout(x) for k, x in conn.items()})
                      for c, t, conn in zip(g.v_cls, g.v_tile, g.v_conn)])
    assert added[0] == added[1]
